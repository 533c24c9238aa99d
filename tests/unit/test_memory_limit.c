/*
 * tests/unit/test_memory_limit.c - a model that does not fit the memory limit fails at create,
 * with the numbers (issue 7).
 *
 * The weights are checked against memory_limit_bytes from the header or config alone, before a
 * weight is read or generated, counted as they will be stored (in the requested dtype); an
 * explicit max_num_blocks must fit the limit together with the weights and the workspace.
 * Every refusal is PL_ERR_OUT_OF_MEMORY, leaves *out untouched and leaks nothing; a model
 * that fits still creates and runs.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "model/model.h"
#include "model_fixtures.h"
#include "pagellm.h"
#include "run_one.h"
#include "test_support.h"
#include "util/alloc.h"
#include "util/meminfo.h"

static pl_engine_config base_config(const char *model, size_t limit) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = model;
    c.backend = PL_BACKEND_REF; /* no thread pool: these tests only create */
    c.memory_limit_bytes = limit;
    c.max_batch_size = 4;
    c.max_num_seqs = 8;
    c.max_total_tokens = 64;
    return c;
}

/* Bytes the weights of a dummy preset take stored as dt (the figure the message must give). */
static uint64_t dummy_bytes(const char *name, pl_dtype dt) {
    pl_model_config mc;
    cr_assert_eq(pl_model_dummy_config(name, &mc), PL_OK, "%s", pl_last_error());
    uint64_t n = 0;
    cr_assert_eq(pl_model_config_weight_bytes(&mc, pl_wtype_of_dtype(dt), &n), PL_OK, "%s",
                 pl_last_error());
    return n;
}

/* Creates with c and expects PL_ERR_OUT_OF_MEMORY, *out untouched, and every needle in the
 * message. */
static void expect_refused(const pl_engine_config *c, const char *const *needles, size_t n) {
    pl_engine *sentinel = (pl_engine *)(uintptr_t)0x1234, *e = sentinel;
    pl_status s = pl_engine_create(c, &e);
    cr_assert_eq(s, PL_ERR_OUT_OF_MEMORY, "%s: got %s (%s)", c->model_path, pl_status_name(s),
                 pl_last_error());
    cr_assert_eq(e, sentinel, "a failed create must leave *out untouched");
    for (size_t i = 0; i < n; i++)
        cr_assert_not_null(strstr(pl_last_error(), needles[i]), "message lacks \"%s\": %s",
                           needles[i], pl_last_error());
}

static void expect_creates_and_runs(const pl_engine_config *c) {
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_create(c, &e), PL_OK, "%s: %s", c->model_path, pl_last_error());
    pl_metrics m;
    pl_engine_metrics(e, &m);
    cr_assert_gt(m.kv_blocks_total, 0);
    if (c->max_num_blocks) cr_assert_eq(m.kv_blocks_total, c->max_num_blocks);
    int32_t ids[] = {1, 2, 3};
    pl_test_run_one(e, ids, 3, 4);
    pl_engine_destroy(e);
}

Test(memory_limit, dummy_weights_over_the_limit_fail_with_the_numbers) {
    uint64_t w32 = dummy_bytes("tiny", PL_DTYPE_F32), w16 = dummy_bytes("tiny", PL_DTYPE_F16);
    cr_assert_lt(w16, w32);
    char want[32], limit[32];
    snprintf(want, sizeof want, "%llu", (unsigned long long)w32);
    snprintf(limit, sizeof limit, "%llu", (unsigned long long)(w32 - 1));
    pl_engine_config c = base_config("dummy:tiny", (size_t)(w32 - 1));
    const char *needles[] = {"dummy:tiny", want, limit, "f32"};
    expect_refused(&c, needles, 4);

    /* counted in the requested dtype: the same limit holds the f16 weights */
    c.weight_dtype = PL_DTYPE_F16;
    c.memory_limit_bytes = (size_t)w16 - 1;
    snprintf(want, sizeof want, "%llu", (unsigned long long)w16);
    snprintf(limit, sizeof limit, "%llu", (unsigned long long)(w16 - 1));
    const char *needles16[] = {want, limit, "f16"};
    expect_refused(&c, needles16, 3);
    PL_ASSERT_NO_LEAKS();
}

/* Llama-2-7B in f16 is 12.6 GiB: refused from its config before any weight is allocated or
 * generated (generating it takes seconds and, on most machines, more memory than there is). */
Test(memory_limit, large_preset_refused_before_generating, .timeout = 20) {
    uint64_t w = dummy_bytes("llama2-7b", PL_DTYPE_F16);
    char want[32];
    snprintf(want, sizeof want, "%llu", (unsigned long long)w);
    pl_engine_config c = base_config("dummy:llama2-7b", (size_t)1 << 30);
    c.weight_dtype = PL_DTYPE_F16;
    unsigned long before = pl_alloc_count();
    const char *needles[] = {"dummy:llama2-7b", want, "1073741824"};
    expect_refused(&c, needles, 3);
    /* the engine's state and the backend, not 12 GiB of tensors */
    cr_assert_lt(pl_alloc_count() - before, 100, "%lu allocations before the refusal",
                 pl_alloc_count() - before);
    PL_ASSERT_NO_LEAKS();
}

/* The file loaders check from the header (llama2.c) or config.json + safetensors headers (HF)
 * before binding a tensor; AUTO keeps the stored type (f32 for llama2.c, bf16 here for HF). */
Test(memory_limit, files_over_the_limit_fail_from_their_headers) {
    pl_test_rng rng;
    pl_test_rng_seed(&rng, 7);
    pl_model_config mc;
    pl_fixture_random_config(&rng, &mc);
    pl_model *m = pl_fixture_model(&mc, 3);
    cr_assert_not_null(m);
    const char *dir = pl_test_tmpdir();
    char bin[600], hf[600];
    snprintf(bin, sizeof bin, "%s/m.bin", dir);
    snprintf(hf, sizeof hf, "%s/hf", dir);
    cr_assert(pl_fixture_write_llama2c(m, bin));
    cr_assert(pl_fixture_write_hf(m, hf, &(pl_fixture_hf_options){.dtype = PL_DTYPE_BF16}));
    pl_model_free(m);

    struct {
        const char *path;
        pl_dtype ask, stored;
    } cases[] = {{bin, PL_DTYPE_AUTO, PL_DTYPE_F32}, {bin, PL_DTYPE_F16, PL_DTYPE_F16},
                 {hf, PL_DTYPE_AUTO, PL_DTYPE_BF16}, {hf, PL_DTYPE_F32, PL_DTYPE_F32}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t w = 0;
        cr_assert_eq(pl_model_config_weight_bytes(&mc, pl_wtype_of_dtype(cases[i].stored), &w),
                     PL_OK);
        char want[32];
        snprintf(want, sizeof want, "%llu", (unsigned long long)w);
        pl_engine_config c = base_config(cases[i].path, (size_t)w - 1);
        c.weight_dtype = cases[i].ask;
        const char *needles[] = {cases[i].path, want};
        expect_refused(&c, needles, 2);
        /* with room to spare the same file creates and runs */
        c.memory_limit_bytes = (size_t)64 << 20;
        expect_creates_and_runs(&c);
    }
    pl_fixture_remove_dir(dir);
    PL_ASSERT_NO_LEAKS();
}

/* max_num_blocks given: weights + pool + workspace must fit the limit, to the byte. */
Test(memory_limit, explicit_pool_must_fit_beside_weights_and_workspace) {
    uint64_t w = dummy_bytes("tiny", PL_DTYPE_F32);
    pl_engine_config c = base_config("dummy:tiny", (size_t)w); /* the weights just fit */
    c.max_num_blocks = 100;
    expect_refused(&c, (const char *const[]){"memory_limit_bytes", "max_num_blocks = 100",
                                             "workspace"}, 3);
    size_t limit = 0, block = 0, work = 0;
    unsigned long long weights = 0, pool = 0;
    int blocks = 0;
    int got = sscanf(pl_last_error(),
                     "memory_limit_bytes = %zu: %llu bytes of weights + %llu bytes of KV cache "
                     "(max_num_blocks = %d blocks of %zu bytes) + %zu bytes of workspace",
                     &limit, &weights, &pool, &blocks, &block, &work);
    cr_assert_eq(got, 6, "unexpected message: %s", pl_last_error());
    cr_assert_eq(limit, (size_t)w);
    cr_assert_eq(weights, w, "the same weight figure as the loader's check");
    cr_assert_eq(blocks, 100);
    cr_assert_eq(pool, 100ull * block);
    cr_assert_gt(work, 0);

    size_t need = (size_t)(weights + pool) + work;
    c.memory_limit_bytes = need - 1;
    expect_refused(&c, (const char *const[]){"memory_limit_bytes"}, 1);
    c.memory_limit_bytes = need; /* exactly enough */
    expect_creates_and_runs(&c);
    /* no limit: the explicit pool is taken as given */
    c.memory_limit_bytes = 0;
    expect_creates_and_runs(&c);
    PL_ASSERT_NO_LEAKS();
}

Test(memory_limit, a_model_that_fits_still_creates) {
    pl_engine_config c = base_config("dummy:tiny", (size_t)64 << 20);
    expect_creates_and_runs(&c); /* pool derived from the limit */
    c.max_num_blocks = 64;
    expect_creates_and_runs(&c);
    c.weight_dtype = PL_DTYPE_BF16;
    expect_creates_and_runs(&c);
    PL_ASSERT_NO_LEAKS();
}

/* ---- the KV pool's size -------------------------------------------------------------- */

static pl_model_info created_info(const pl_engine_config *c) {
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_create(c, &e), PL_OK, "%s", pl_last_error());
    pl_model_info info;
    cr_assert_eq(pl_engine_model_info(e, &info), PL_OK);
    cr_assert_not_null(info.kv_sizing);
    static char sizing[512]; /* the engine's copy goes with it */
    snprintf(sizing, sizeof sizing, "%s", info.kv_sizing);
    info.kv_sizing = sizing;
    pl_engine_destroy(e);
    return info;
}

/* By default the pool holds what max_num_seqs sequences of max_model_len tokens use (not a
 * fraction of all the memory there is), bounded by the memory there is; kv_cache_memory_bytes
 * (vLLM's --kv-cache-memory, its CPU backend's fixed KV space) sets it instead. model_info
 * says which rule sized it. */
Test(memory_limit, kv_pool_from_the_sequences_bounded_by_memory_or_fixed) {
    pl_engine_config c = base_config("dummy:tiny", 0);
    c.max_model_len = 64;
    c.block_size = 16;
    pl_model_info info = created_info(&c);
    cr_assert_eq(info.kv_blocks, 8 * 4 + 1, "%d blocks for 8 sequences of 4 blocks",
                 info.kv_blocks);
    cr_assert(strstr(info.kv_sizing, "max_num_seqs 8") && strstr(info.kv_sizing, "max_model_len 64"),
              "%s", info.kv_sizing);
    size_t block = info.kv_bytes_per_token * 16;

    /* more sequences than the memory holds: bounded by it, and said so */
    uint64_t w = dummy_bytes("tiny", PL_DTYPE_F32);
    c.max_num_seqs = 65536; /* 1 GiB of KV cache */
    c.memory_limit_bytes = (size_t)32 << 20;
    pl_model_info small = created_info(&c);
    c.memory_limit_bytes = (size_t)64 << 20;
    pl_model_info more = created_info(&c);
    cr_assert_lt(small.kv_blocks, more.kv_blocks);
    cr_assert_lt(more.kv_blocks, 65536 * 4);
    cr_assert(strstr(small.kv_sizing, "memory_limit"), "%s", small.kv_sizing);
    c.max_num_seqs = 8;

    /* a fixed size: as many whole blocks as it holds */
    c.memory_limit_bytes = 0;
    cr_assert_eq(pl_engine_config_set(&c, "kv_cache_memory_bytes", "7000"), PL_OK, "%s",
                 pl_last_error());
    cr_assert_eq(c.kv_cache_memory_bytes, 7000);
    c.kv_cache_memory_bytes = 7 * block + 5;
    pl_model_info fixed = created_info(&c);
    cr_assert_eq(fixed.kv_blocks, 7);
    cr_assert(strstr(fixed.kv_sizing, "kv_cache_memory"), "%s", fixed.kv_sizing);
    /* ... which must hold a block, fit beside the weights under a limit, and not be given
     * together with max_num_blocks */
    c.kv_cache_memory_bytes = block - 1;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_create(&c, &e), PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "kv_cache_memory"), "%s", pl_last_error());
    c.kv_cache_memory_bytes = 100 * block;
    c.memory_limit_bytes = (size_t)w + 10 * block;
    expect_refused(&c, (const char *const[]){"kv_cache_memory", "memory_limit"}, 2);
    c.memory_limit_bytes = 0;
    c.max_num_blocks = 9;
    cr_assert_eq(pl_engine_config_validate(&c), PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "kv_cache_memory") && strstr(pl_last_error(), "max_num_blocks"),
              "%s", pl_last_error());
    PL_ASSERT_NO_LEAKS();
}

/* The host's available memory is MemAvailable (free memory plus what the kernel can reclaim),
 * not all physical memory: parsed from /proc/meminfo's text. */
Test(memory_limit, meminfo_gives_available_memory) {
    const char *text = "MemTotal:       24567890 kB\nMemFree:          123456 kB\n"
                       "MemAvailable:   20000000 kB\nBuffers:            1024 kB\n";
    size_t v = 0;
    cr_assert(pl_meminfo_value(text, "MemTotal", &v));
    cr_assert_eq(v, (size_t)24567890 * 1024);
    cr_assert(pl_meminfo_value(text, "MemAvailable", &v));
    cr_assert_eq(v, (size_t)20000000 * 1024);
    cr_assert(!pl_meminfo_value(text, "Mem", &v), "a prefix of a key is not the key");
    cr_assert(!pl_meminfo_value(text, "SwapTotal", &v));
    cr_assert(!pl_meminfo_value("MemAvailable: lots kB\n", "MemAvailable", &v));
    cr_assert(!pl_meminfo_value("MemAvailable: 99999999999999999999999 kB\n", "MemAvailable", &v));
    size_t avail = 0, total = 0;
    cr_assert_eq(pl_host_memory(&avail, &total), PL_OK, "%s", pl_last_error());
    cr_assert(avail > 0 && avail <= total, "available %zu of %zu", avail, total);
}
