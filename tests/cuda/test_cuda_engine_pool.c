/*
 * tests/cuda/test_cuda_engine_pool.c - the KV pool derived from device memory on the CUDA
 * backend (max_num_blocks = 0), under the CPU emulation (suite 'cuda' only: it sets the
 * emulated device's memory through cuemu_hooks.h).
 *
 * engine/rank.c pl_rank_pool_blocks: with no memory_limit_bytes the engine takes the device's free
 * memory (cudaMemGetInfo, after the backend exists and has reserved its scratch for the
 * largest step, and before any weight is uploaded), and
 *     blocks = floor((memory_threshold * free - weight bytes - workspace bytes) / block bytes)
 * capped at max_num_seqs * ceil(max_model_len / block_size) + 1; fewer than one block is
 * PL_ERR_OUT_OF_MEMORY naming every term. Weights count as the device stores them: f16 for
 * weight_dtype F16 and for f32 weights alike (the backend's f32_weight_type), which
 * f32_weights_count_as_the_device_stores_them checks.
 *
 * The expected figures are computed here from the model config, the runner's size functions
 * and memory_info of a fresh backend, in the same double arithmetic as pl_rank_pool_blocks, then
 * compared with pl_engine_metrics' kv_blocks_total.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cuemu_hooks.h"
#include "engine/runner.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "pagellm.h"
#include "run_one.h"
#include "test_support.h"

#define BLOCK_SIZE 16
#define MAX_TOKENS 64
#define MAX_BATCH 4
#define MAX_SEQS 8

TestSuite(cuda_engine_pool, .timeout = 120.0);

typedef struct {
    uint64_t weights;    /* bytes, as pl_rank_pool_blocks counts them */
    size_t work, block;  /* workspace bytes, bytes per KV block */
    int blocks_per_seq;  /* ceil(max_model_len / block_size) */
    size_t baseline;     /* device bytes the engine's backend holds before it uploads: its
                            objects and the scratch reserved for the largest step */
    size_t fresh;        /* device bytes a backend holds when only created */
} pool_terms;

static pl_engine_config config(double threshold) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = "dummy:tiny";
    c.backend = PL_BACKEND_CUDA;
    c.weight_dtype = PL_DTYPE_F16;
    c.kv_dtype = PL_DTYPE_F16;
    c.block_size = BLOCK_SIZE;
    c.max_num_blocks = 0; /* derived from device memory */
    c.memory_threshold = threshold;
    c.max_total_tokens = MAX_TOKENS;
    c.max_batch_size = MAX_BATCH;
    c.max_num_seqs = MAX_SEQS;
    c.n_threads = 1;
    return c;
}

static pool_terms terms(void) {
    pool_terms t = {0};
    pl_model_config mc;
    cr_assert_eq(pl_model_dummy_config("tiny", &mc), PL_OK, "%s", pl_last_error());
    cr_assert_eq(pl_model_config_weight_bytes(&mc, PL_WTYPE_F16, &t.weights), PL_OK, "%s",
                 pl_last_error());
    t.blocks_per_seq = (mc.max_seq_len + BLOCK_SIZE - 1) / BLOCK_SIZE;
    pl_runner_limits lim = {.max_tokens = MAX_TOKENS, .max_seqs = MAX_BATCH,
                            .max_blocks_per_seq = t.blocks_per_seq, .block_size = BLOCK_SIZE};
    t.work = pl_runner_workspace_bytes(&mc, &lim);
    t.block = pl_runner_kv_block_bytes(&mc, BLOCK_SIZE, PL_DTYPE_F16);
    /* what a backend holds on the device before the engine allocates anything: its own
     * objects, and the scratch it reserves for the largest step (as engine_init asks) */
    pl_backend *be = NULL;
    cr_assert_eq(pl_backend_cuda_create(NULL, &be), PL_OK, "%s", pl_last_error());
    t.fresh = pl_test_cuemu_device_bytes_in_use();
    pl_model *m = NULL;
    pl_model_load_options mo = {.dtype = PL_DTYPE_F16, .dummy_seed = 1234};
    cr_assert_eq(pl_model_load("dummy:tiny", &mo, &m), PL_OK, "%s", pl_last_error());
    pl_backend_reserve rs;
    pl_runner_reserve_sizes(m, &lim, &rs);
    pl_model_free(m);
    cr_assert_eq(be->ops->reserve(be, &rs), PL_OK, "%s", pl_last_error());
    size_t free_b = 0, total = 0;
    cr_assert_eq(be->ops->memory_info(be, &free_b, &total), PL_OK, "%s", pl_last_error());
    t.baseline = total - free_b;
    pl_backend_destroy(be);
    cr_assert_gt(t.baseline, t.fresh, "the reserve allocated nothing");
    cr_assert(t.weights > 0 && t.work > 0 && t.block > 0);
    return t;
}

/* pl_rank_pool_blocks's arithmetic, uncapped. */
static double derived_blocks(const pool_terms *t, double threshold, size_t free_b) {
    double left = threshold * (double)free_b - (double)t->weights - (double)t->work;
    return left / (double)t->block;
}

/* Device memory under which `blocks` (+ frac of a block) is what threshold leaves. */
static size_t memory_for(const pool_terms *t, double threshold, double blocks) {
    double need = (double)t->weights + (double)t->work + blocks * (double)t->block;
    return t->baseline + (size_t)(need / threshold);
}

static int create_and_count(const pl_engine_config *c, bool run) {
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_create(c, &e), PL_OK, "%s", pl_last_error());
    pl_metrics m;
    pl_engine_metrics(e, &m);
    if (run) { /* the derived pool is allocated and works */
        int32_t ids[] = {1, 5, 9, 13, 17, 21, 25, 29, 33, 37, 41, 45, 49, 53, 57, 61, 65, 69};
        pl_test_run_one(e, ids, sizeof ids / sizeof ids[0], 4);
    }
    pl_engine_destroy(e);
    return m.kv_blocks_total;
}

/* Device memory held by someone else while the engine is created (another backend here, as
 * another process would on a GPU): the pool follows free memory, not total memory. */
static void *hold(pl_backend **be, size_t n) {
    void *p = NULL;
    cr_assert_eq(pl_backend_cuda_create(NULL, be), PL_OK, "%s", pl_last_error());
    cr_assert_eq((*be)->ops->alloc(*be, n, &p), PL_OK, "%s", pl_last_error());
    return p;
}

Test(cuda_engine_pool, derived_from_free_device_memory) {
    const pool_terms t = terms();
    const struct {
        double threshold, blocks; /* device memory is chosen so that this many blocks fit */
        size_t held;              /* bytes allocated elsewhere during the create */
    } cases[] = {
        {0.9, 100.5, 0}, {0.5, 100.5, 0}, {0.9, 37.99, 0}, {1.0, 1.01, 0}, {0.25, 200.0, 0},
        {0.9, 100.5, (size_t)3 << 20}, {0.6, 50.25, 123457},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const size_t total = memory_for(&t, cases[i].threshold, cases[i].blocks) +
                             (cases[i].held ? cases[i].held + t.fresh : 0);
        pl_test_cuemu_set_device_memory(total);
        pl_backend *other = NULL;
        void *held = cases[i].held ? hold(&other, cases[i].held) : NULL;
        /* the engine's backend holds a baseline, the other one what creating it took */
        const size_t free_b = total - t.baseline - (held ? t.fresh : 0) - cases[i].held;
        const double n = derived_blocks(&t, cases[i].threshold, free_b);
        const int want = (int)n;
        cr_assert(want >= 1 && want < MAX_SEQS * t.blocks_per_seq + 1, "case %zu: %g blocks", i,
                  n);
        /* the definition: want blocks fit beside weights and workspace under the
         * threshold, one more does not */
        const double budget = cases[i].threshold * (double)free_b;
        cr_assert_leq((double)t.weights + (double)t.work + (double)want * (double)t.block, budget);
        cr_assert_gt((double)t.weights + (double)t.work + (double)(want + 1) * (double)t.block,
                     budget);
        pl_engine_config c = config(cases[i].threshold);
        const int got = create_and_count(&c, i == 0);
        cr_assert_eq(got, want,
                     "case %zu: %d KV blocks, want %d = (%.2f x %zu free - %llu weights - %zu "
                     "workspace) / %zu per block",
                     i, got, want, cases[i].threshold, free_b, (unsigned long long)t.weights,
                     t.work, t.block);
        if (held) {
            other->ops->free(other, held);
            pl_backend_destroy(other);
        }
        cr_assert_eq(pl_test_cuemu_device_bytes_in_use(), 0,
                     "case %zu: the engine left device memory allocated", i);
    }
    PL_ASSERT_NO_LEAKS();
}

/* More memory than max_num_seqs full-length sequences need: the cap. */
Test(cuda_engine_pool, capped_at_max_num_seqs_full_sequences) {
    const pool_terms t = terms();
    const int cap = MAX_SEQS * t.blocks_per_seq + 1;
    pl_test_cuemu_set_device_memory(memory_for(&t, 0.9, 10.0 * cap));
    pl_engine_config c = config(0.9);
    cr_assert_eq(create_and_count(&c, false), cap);
    PL_ASSERT_NO_LEAKS();
}

/* Less than one block left: PL_ERR_OUT_OF_MEMORY, *out untouched, nothing left on the device,
 * and the message names the memory, the threshold, the weights, the workspace and the block. */
Test(cuda_engine_pool, too_little_device_memory_names_the_numbers) {
    const pool_terms t = terms();
    const double threshold = 0.8;
    const size_t total = memory_for(&t, threshold, 0.5);
    pl_test_cuemu_set_device_memory(total);
    const size_t free_b = total - t.baseline;
    cr_assert_lt(derived_blocks(&t, threshold, free_b), 1.0);
    cr_assert_gt((double)free_b, (double)t.weights, "the weights alone must fit (else the loader "
                                                    "refuses first, with its own message)");

    pl_engine_config c = config(threshold);
    pl_engine *sentinel = (pl_engine *)(uintptr_t)0x1234, *e = sentinel;
    pl_status s = pl_engine_create(&c, &e);
    cr_assert_eq(s, PL_ERR_OUT_OF_MEMORY, "got %s: %s", pl_status_name(s), pl_last_error());
    cr_assert_eq(e, sentinel, "a failed create must leave *out untouched");
    cr_assert_eq(pl_test_cuemu_device_bytes_in_use(), 0, "device memory leaked");

    double budget = 0, weights = 0, work = 0, thr = 0;
    size_t avail = 0, block = 0;
    int got = sscanf(pl_last_error(),
                     "KV cache: %lf bytes of memory (memory_threshold %lf of %zu bytes of free "
                     "device memory) minus %lf "
                     "bytes of weights and %lf bytes of workspace leaves no room for one "
                     "%zu-byte block",
                     &budget, &thr, &avail, &weights, &work, &block);
    cr_assert_eq(got, 6, "unexpected message: %s", pl_last_error());
    cr_assert_eq(avail, free_b, "%s", pl_last_error());
    cr_assert_float_eq(thr, threshold, 1e-9);
    cr_assert_float_eq(budget, threshold * (double)free_b, 0.51);
    cr_assert_eq((uint64_t)weights, t.weights, "%s", pl_last_error());
    cr_assert_eq((size_t)work, t.work, "%s", pl_last_error());
    cr_assert_eq(block, t.block, "%s", pl_last_error());

    /* weights alone over the device's free memory: refused before anything is uploaded,
     * naming the model and both numbers */
    const size_t tiny_total = t.baseline + (size_t)t.weights - 1;
    pl_test_cuemu_set_device_memory(tiny_total);
    s = pl_engine_create(&c, &e);
    cr_assert_eq(s, PL_ERR_OUT_OF_MEMORY, "got %s: %s", pl_status_name(s), pl_last_error());
    cr_assert_eq(e, sentinel);
    char want_w[32], want_free[32];
    snprintf(want_w, sizeof want_w, "%llu", (unsigned long long)t.weights);
    snprintf(want_free, sizeof want_free, "%zu", tiny_total - t.baseline);
    cr_assert_not_null(strstr(pl_last_error(), "dummy:tiny"), "%s", pl_last_error());
    cr_assert_not_null(strstr(pl_last_error(), want_w), "%s", pl_last_error());
    cr_assert_not_null(strstr(pl_last_error(), want_free), "%s", pl_last_error());
    cr_assert_eq(pl_test_cuemu_device_bytes_in_use(), 0, "device memory leaked");
    PL_ASSERT_NO_LEAKS();
}

/* An f32 model is stored f16 on the device: the pool is sized from the f16 bytes, exactly as
 * for an f16 model (counting the host's f32 copy would give fewer blocks). */
Test(cuda_engine_pool, f32_weights_count_as_the_device_stores_them) {
    const pool_terms t = terms();
    const double threshold = 0.9;
    const size_t total = memory_for(&t, threshold, 40.5);
    pl_test_cuemu_set_device_memory(total);
    pl_engine_config c = config(threshold);
    int f16_blocks = create_and_count(&c, false);
    c.weight_dtype = PL_DTYPE_F32;
    int f32_blocks = create_and_count(&c, true);
    cr_assert_eq(f16_blocks, 40, "f16 weights: %d blocks", f16_blocks);
    cr_assert_eq(f32_blocks, f16_blocks, "f32 weights gave %d blocks, f16 weights %d",
                 f32_blocks, f16_blocks);
    cr_assert_eq(pl_test_cuemu_device_bytes_in_use(), 0, "device memory leaked");
    PL_ASSERT_NO_LEAKS();
}

/* The backend's scratch exists before the pool is sized (reserve): a step as large as the
 * engine allows (a prompt of max_total_tokens, then decodes) allocates no device memory, so a
 * pool sized to the last block cannot be starved by the first large prefill. */
Test(cuda_engine_pool, the_largest_step_allocates_nothing_on_the_device) {
    pl_test_cuemu_set_device_memory((size_t)256 << 20);
    pl_engine_config c = config(0.9);
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_create(&c, &e), PL_OK, "%s", pl_last_error());
    const size_t after_create = pl_test_cuemu_device_bytes_in_use();
    int32_t ids[MAX_TOKENS];
    for (int i = 0; i < MAX_TOKENS; i++) ids[i] = 1 + (i * 7) % 500;
    pl_test_run_one(e, ids, MAX_TOKENS, 3); /* a whole-budget prefill, then decodes */
    cr_assert_eq(pl_test_cuemu_device_bytes_in_use(), after_create,
                 "running a step grew device memory by %zd bytes after the KV pool was sized",
                 (ssize_t)(pl_test_cuemu_device_bytes_in_use() - after_create));
    pl_engine_destroy(e);
    cr_assert_eq(pl_test_cuemu_device_bytes_in_use(), 0);
    PL_ASSERT_NO_LEAKS();
}

/* A device fault during a step (an illegal address, sticky for the process): that step's and
 * every other held request finish with PL_FINISH_ERROR, pl_engine_health and every later step
 * and submit fail with PL_ERR_BACKEND saying the backend is lost and to restart, and destroying
 * the engine frees everything. */
Test(cuda_engine_pool, a_device_fault_loses_the_engine_for_good) {
    pl_test_cuemu_set_device_memory((size_t)256 << 20);
    pl_engine_config c = config(0.9);
    c.max_batch_size = 1; /* the second request waits while the first faults */
    c.max_num_seqs = 2;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_create(&c, &e), PL_OK, "%s", pl_last_error());
    cr_assert_eq(pl_engine_health(e), PL_OK);
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.temperature = 0.0f;
    sp.max_tokens = 8;
    sp.ignore_eos = true;
    const int32_t a[] = {1, 5, 9, 13}, b[] = {1, 6, 10};
    pl_request_id ra, rb;
    cr_assert_eq(pl_engine_submit_tokens(e, a, 4, &sp, &ra), PL_OK);
    cr_assert_eq(pl_engine_submit_tokens(e, b, 3, &sp, &rb), PL_OK);
    pl_step_result res;
    cr_assert_eq(pl_engine_step(e, &res), PL_OK, "%s", pl_last_error()); /* a's prefill */
    pl_test_cuemu_inject_illegal_address(3); /* a few kernels into the next step */
    pl_status s = pl_engine_step(e, &res);
    cr_assert_eq(s, PL_ERR_BACKEND, "%s", pl_status_name(s));
    cr_assert_not_null(strstr(pl_last_error(), "is lost"), "%s", pl_last_error());
    cr_assert_eq(res.n_finished, 2, "both requests end at once, the waiting one too");
    for (size_t i = 0; i < res.n_finished; i++)
        cr_assert_eq(res.finished[i].finish_reason, PL_FINISH_ERROR);
    cr_assert_eq(pl_engine_health(e), PL_ERR_BACKEND);
    cr_assert_not_null(strstr(pl_last_error(), "cudaErrorIllegalAddress"), "%s", pl_last_error());
    cr_assert_not_null(strstr(pl_last_error(), "restart"), "%s", pl_last_error());
    cr_assert_eq(pl_engine_submit_tokens(e, a, 4, &sp, NULL), PL_ERR_BACKEND);
    cr_assert_not_null(strstr(pl_last_error(), "is lost"), "%s", pl_last_error());
    cr_assert_eq(pl_engine_step(e, &res), PL_ERR_BACKEND);
    cr_assert_eq(res.n_finished, 0);
    cr_assert(!pl_engine_has_pending_work(e));
    pl_engine_destroy(e);
    pl_test_cuemu_clear_sticky();
    cr_assert_eq(pl_test_cuemu_device_bytes_in_use(), 0, "device memory left after destroy");
    PL_ASSERT_NO_LEAKS();
}

/* An engine on device 1 (--cuda-device 1) stepped from a thread that never chose a device:
 * the same tokens as on device 0 from the creating thread (the backend binds its device on
 * every entry). */
typedef struct {
    pl_engine *e;
    pl_status st;
    int32_t out[6];
    size_t n;
} step_job;

static void *run_elsewhere(void *arg) {
    step_job *j = arg;
    pl_completion *c = NULL;
    size_t n = 0;
    j->st = pl_engine_run(j->e, &c, &n);
    if (j->st == PL_OK && n == 1) {
        j->n = c[0].n_output_ids;
        memcpy(j->out, c[0].output_ids, j->n * sizeof(int32_t));
    }
    pl_completions_free(c, n);
    return NULL;
}

Test(cuda_engine_pool, an_engine_on_device_1_steps_from_any_thread) {
    pl_test_cuemu_set_device_memory((size_t)256 << 20);
    pl_test_cuemu_set_device_count(2);
    const int32_t ids[] = {1, 5, 9, 13, 17};
    step_job jobs[2] = {{0}};
    for (int dev = 0; dev < 2; dev++) {
        pl_engine_config c = config(0.9);
        c.cuda_device = dev;
        cr_assert_eq(pl_engine_create(&c, &jobs[dev].e), PL_OK, "%s", pl_last_error());
        pl_sampling_params sp;
        pl_sampling_params_default(&sp);
        sp.temperature = 0.0f;
        sp.max_tokens = 6;
        sp.ignore_eos = true;
        cr_assert_eq(pl_engine_submit_tokens(jobs[dev].e, ids, 5, &sp, NULL), PL_OK);
        pthread_t t;
        cr_assert_eq(pthread_create(&t, NULL, run_elsewhere, &jobs[dev]), 0);
        pthread_join(t, NULL);
        cr_assert_eq(jobs[dev].st, PL_OK, "device %d: %s", dev, pl_last_error());
        cr_assert_eq(jobs[dev].n, 6);
        pl_engine_destroy(jobs[dev].e);
    }
    cr_assert_eq(memcmp(jobs[0].out, jobs[1].out, sizeof jobs[0].out), 0);
    pl_test_cuemu_set_device_count(1);
    cr_assert_eq(pl_test_cuemu_device_bytes_in_use(), 0);
    PL_ASSERT_NO_LEAKS();
}
