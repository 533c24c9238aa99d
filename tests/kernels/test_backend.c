/*
 * tests/kernels/test_backend.c - the backends' tables, creation options, memory functions,
 * and the thread pool they run on.
 */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/cpu/cpu.h"
#include "tests/kernels/kernels_test.h"
#include "util/alloc.h"
#include "util/threadpool.h"

/* Every entry of a table, by name: a new op added to backend.h must be added here too. */
static void assert_complete(const pl_backend_ops *o) {
    cr_assert_not_null(o->name);
#define ENTRY(f) cr_assert_not_null((const void *)(uintptr_t)o->f, "%s: " #f " is NULL", o->name)
    ENTRY(destroy);
    ENTRY(alloc);
    ENTRY(free);
    ENTRY(upload);
    ENTRY(download);
    ENTRY(sync);
    ENTRY(memory_info);
    ENTRY(upload_weight);
    ENTRY(free_weight);
    ENTRY(embed);
    ENTRY(rmsnorm);
    ENTRY(add_rmsnorm);
    ENTRY(matmul);
    ENTRY(rope);
    ENTRY(kv_store);
    ENTRY(attention);
    ENTRY(silu_mul);
    ENTRY(add_bias);
    ENTRY(gather_rows);
    ENTRY(copy_blocks);
#undef ENTRY
    /* The table is exactly name + the 20 function pointers checked above + the optional
     * matmul_group (the cpu backend has it, ref runs the parts one by one). */
    if (!strcmp(o->name, "cpu"))
        cr_assert_not_null((const void *)(uintptr_t)o->matmul_group, "cpu: matmul_group is NULL");
    else
        cr_assert_null((const void *)(uintptr_t)o->matmul_group, "%s: matmul_group", o->name);
    cr_assert_eq(sizeof(pl_backend_ops), sizeof(const char *) + 21 * sizeof(void (*)(void)),
                 "pl_backend_ops grew: add the new entries to this test");
}

Test(backend, tables_have_no_null_entry) {
    pl_backend *ref, *cpu;
    cr_assert_eq(pl_backend_ref_create(NULL, &ref), PL_OK);
    cr_assert_eq(pl_backend_cpu_create(NULL, &cpu), PL_OK);
    assert_complete(ref->ops);
    assert_complete(cpu->ops);
    cr_assert_str_eq(ref->ops->name, "ref");
    cr_assert_str_eq(cpu->ops->name, "cpu");
    cr_assert(ref->is_host && cpu->is_host);
    cr_assert_eq(ref->kv_dtype, PL_DTYPE_F16, "AUTO kv_dtype is f16 on every backend");
    cr_assert_eq(cpu->kv_dtype, PL_DTYPE_F16);
    pl_backend_destroy(ref);
    pl_backend_destroy(cpu);
    pl_backend_destroy(NULL);
    PL_ASSERT_NO_LEAKS();
}

Test(backend, kv_dtype_options) {
    pl_backend *be = NULL;
    pl_backend_options o = {.kv_dtype = PL_DTYPE_F16};
    cr_assert_eq(pl_backend_cpu_create(&o, &be), PL_OK);
    cr_assert_eq(be->kv_dtype, PL_DTYPE_F16);
    pl_backend_destroy(be);
    o.kv_dtype = PL_DTYPE_BF16;
    cr_assert_eq(pl_backend_cpu_create(&o, &be), PL_ERR_UNSUPPORTED);
    cr_assert_null(be);
    cr_assert(strstr(pl_last_error(), "kv_dtype") != NULL, "message: %s", pl_last_error());
    cr_assert_eq(pl_backend_ref_create(&o, &be), PL_OK, "ref stores bf16 KV too");
    pl_backend_destroy(be);
    o.kv_dtype = (pl_dtype)42;
    cr_assert_eq(pl_backend_ref_create(&o, &be), PL_ERR_UNSUPPORTED);
    o = (pl_backend_options){.n_threads = -1};
    cr_assert_eq(pl_backend_cpu_create(&o, &be), PL_ERR_INVALID_ARGUMENT);
    PL_ASSERT_NO_LEAKS();
}

Test(backend, cpu_thread_count) {
    pl_backend *be;
    pl_backend_options o = {.n_threads = 3};
    cr_assert_eq(pl_backend_cpu_create(&o, &be), PL_OK);
    cr_assert_eq(((pl_cpu_ctx *)be->ctx)->n_threads, 3);
    pl_backend_destroy(be);
    o.n_threads = 0;
    cr_assert_eq(pl_backend_cpu_create(&o, &be), PL_OK);
    cr_assert_eq(((pl_cpu_ctx *)be->ctx)->n_threads, pl_cpu_count(), "0 means all cores");
    pl_backend_destroy(be);
    PL_ASSERT_NO_LEAKS();
}

Test(backend, memory_functions) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    pl_backend *all[PL_KT_MAX_CPU + 1] = {e.ref};
    for (int i = 0; i < e.n_cpu; i++) all[i + 1] = e.cpu[i];
    for (int i = 0; i <= e.n_cpu; i++) {
        pl_backend *be = all[i];
        unsigned char *p = NULL;
        cr_assert_eq(be->ops->alloc(be, 1000, (void **)&p), PL_OK);
        for (int k = 0; k < 1000; k++) cr_assert_eq(p[k], 0, "alloc is zeroed");
        unsigned char src[1000], back[1000];
        for (int k = 0; k < 1000; k++) src[k] = (unsigned char)(k * 7);
        cr_assert_eq(be->ops->upload(be, p, src, sizeof src), PL_OK);
        cr_assert_eq(be->ops->download(be, back, p, sizeof back), PL_OK);
        cr_assert_eq(memcmp(src, back, sizeof src), 0);
        cr_assert_eq(be->ops->sync(be), PL_OK);
        be->ops->free(be, p);
        be->ops->free(be, NULL);

        size_t fr = 0, tot = 0;
        cr_assert_eq(be->ops->memory_info(be, &fr, &tot), PL_OK);
        cr_assert(tot > 0 && fr <= tot, "free %zu total %zu", fr, tot);

        float w[4] = {1, 2, 3, 4};
        void *dev = NULL;
        pl_wtype dt = PL_WTYPE_NONE;
        cr_assert_eq(be->ops->upload_weight(be, w, PL_WTYPE_F32, 4, &dev, &dt), PL_OK);
        cr_assert_eq(dev, (void *)w, "host backends upload weights with zero copy");
        cr_assert_eq(dt, PL_WTYPE_F32);
        be->ops->free_weight(be, dev, w);
        cr_assert_eq(be->ops->upload_weight(be, w, PL_WTYPE_NONE, 4, &dev, &dt),
                     PL_ERR_INVALID_ARGUMENT);
    }
    /* the cpu backend aligns to a cache line so KV blocks start on vector boundaries */
    void *p;
    cr_assert_eq(e.cpu[0]->ops->alloc(e.cpu[0], 333, &p), PL_OK);
    cr_assert_eq((uintptr_t)p % 64, 0);
    e.cpu[0]->ops->free(e.cpu[0], p);
    /* large buffers take the huge-page path: still zeroed, aligned and wholly usable */
    size_t big = (size_t)5 << 20;
    unsigned char *q;
    cr_assert_eq(e.cpu[0]->ops->alloc(e.cpu[0], big, (void **)&q), PL_OK);
    cr_assert_eq((uintptr_t)q % 64, 0);
    for (size_t i = 0; i < big; i += 4093) cr_assert_eq(q[i], 0);
    cr_assert_eq(q[big - 1], 0);
    memset(q, 1, big);
    e.cpu[0]->ops->free(e.cpu[0], q);
    pl_kt_env_fini(&e);
    PL_ASSERT_NO_LEAKS();
}

/* Every allocation the constructors make can fail; each failure must be reported as
 * PL_ERR_OUT_OF_MEMORY with nothing leaked, and a later attempt must succeed. */
Test(backend, create_survives_allocation_failures) {
    for (int which = 0; which < 2; which++) {
        int n_fail = 0;
        pl_backend *be = NULL;
        pl_backend_options o = {.n_threads = 2};
        PL_ALLOC_SWEEP(n_fail, n,
                       (be = NULL, which ? pl_backend_cpu_create(&o, &be)
                                         : pl_backend_ref_create(&o, &be)),
                       cr_assert_null(be););
        pl_backend_destroy(be);
    }
    PL_ASSERT_NO_LEAKS();
}

Test(backend, ops_refuse_bad_arguments) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    pl_backend *bes[2] = {e.ref, e.cpu[e.n_cpu - 1]};
    float x[8] = {0}, out[8];
    for (int i = 0; i < 2; i++) {
        pl_backend *be = bes[i];
        cr_assert_eq(be->ops->matmul(be, out, x, x, PL_WTYPE_F32, 1, 0, 2),
                     PL_ERR_INVALID_ARGUMENT);
        cr_assert(strstr(pl_last_error(), "d_in") != NULL, "%s", pl_last_error());
        cr_assert_eq(be->ops->matmul(be, out, x, x, PL_WTYPE_NONE, 1, 2, 2),
                     PL_ERR_INVALID_ARGUMENT);
        cr_assert_eq(be->ops->matmul(be, out, x, x, PL_WTYPE_F32, 0, 2, 2), PL_OK,
                     "zero rows is a no-op");
        cr_assert_eq(be->ops->rmsnorm(be, out, x, NULL, 1, 8, 1e-5f), PL_ERR_INVALID_ARGUMENT);
        cr_assert_eq(be->ops->rope(be, x, x, NULL, x, 1, 1, 1, 8, PL_ROPE_HALF),
                     PL_ERR_INVALID_ARGUMENT);
        cr_assert_eq(be->ops->rope(be, x, x, (int32_t[]){0}, x, 1, 1, 1, 8, (pl_rope_layout)7),
                     PL_ERR_INVALID_ARGUMENT);
        cr_assert_eq(be->ops->silu_mul(be, out, NULL, x, 8), PL_ERR_INVALID_ARGUMENT);
        cr_assert_eq(be->ops->gather_rows(be, out, x, (int32_t[]){-1}, 1, 8),
                     PL_ERR_INVALID_ARGUMENT);

        /* attention metadata read on the host */
        int32_t qs[2] = {0, 2}, cl[1] = {1}, bt[1] = {0};
        pl_attn_batch b = {.n_seqs = 1, .n_tokens = 2, .query_start = qs, .context_lens = cl,
                           .block_tables = bt, .max_blocks_per_seq = 1, .max_query_len = 2,
                           .max_context_len = 4, .n_heads = 1, .n_kv_heads = 1, .head_dim = 4,
                           .block_size = 4, .scale = 0.5f};
        cr_assert_eq(be->ops->attention(be, out, x, x, x, &b), PL_ERR_INVALID_ARGUMENT,
                     "q_len 2 > context_len 1");
        cl[0] = 5;
        cr_assert_eq(be->ops->attention(be, out, x, x, x, &b), PL_ERR_INVALID_ARGUMENT,
                     "context beyond the block table");
        cl[0] = 2;
        b.n_heads = 3;
        b.n_kv_heads = 2;
        cr_assert_eq(be->ops->attention(be, out, x, x, x, &b), PL_ERR_INVALID_ARGUMENT,
                     "n_heads not a multiple of n_kv_heads");

        pl_kv_layout l = {.n_layers = 1, .n_blocks = 2, .n_kv_heads = 1, .block_size = 1,
                          .head_dim = 2, .dtype = PL_DTYPE_F32};
        cr_assert_eq(be->ops->copy_blocks(be, x, &l, (int32_t[]){0, 2}, 1),
                     PL_ERR_INVALID_ARGUMENT, "block 2 of 2");
        l.dtype = PL_DTYPE_F16;
        cr_assert_eq(be->ops->copy_blocks(be, x, &l, (int32_t[]){0, 1}, 1),
                     PL_ERR_INVALID_ARGUMENT, "layout dtype differs from the backend's");
    }
    pl_kt_env_fini(&e);
    PL_ASSERT_NO_LEAKS();
}

// ---------------------------------------------------------------------------------------------
// thread pool

typedef struct count_ctx {
    _Atomic int *hits; /* (n_tasks) */
    _Atomic int bad_thread;
    int size;
} count_ctx;

static void count_task(void *arg, int task, int thread) {
    count_ctx *c = arg;
    atomic_fetch_add(&c->hits[task], 1);
    if (thread < 0 || thread >= c->size) atomic_store(&c->bad_thread, 1);
}

Test(threadpool, every_task_runs_once) {
    for (int size = 1; size <= 4; size++) {
        pl_threadpool *p;
        cr_assert_eq(pl_threadpool_create(size, &p), PL_OK);
        cr_assert_eq(pl_threadpool_size(p), size);
        enum { MAXT = 257 };
        _Atomic int hits[MAXT];
        count_ctx c = {.hits = hits, .size = size};
        /* Many short runs back to back: exercises spinning, sleeping and late workers. */
        for (int run = 0; run < 2000; run++) {
            int n = (run * 37) % MAXT;
            for (int i = 0; i < n; i++) atomic_init(&hits[i], 0);
            pl_threadpool_run(p, n, count_task, &c);
            for (int i = 0; i < n; i++)
                cr_assert_eq(atomic_load(&hits[i]), 1, "size %d run %d task %d ran %d times",
                             size, run, i, atomic_load(&hits[i]));
        }
        cr_assert_eq(atomic_load(&c.bad_thread), 0);
        pl_threadpool_destroy(p);
    }
    pl_threadpool_destroy(NULL);
    PL_ASSERT_NO_LEAKS();
}

typedef struct spread_ctx {
    _Atomic int seen[8];
} spread_ctx;

static void spread_task(void *arg, int task, int thread) {
    (void)task;
    spread_ctx *c = arg;
    atomic_fetch_add(&c->seen[thread], 1);
    /* long enough that the caller cannot drain the queue alone before workers wake */
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
}

Test(threadpool, workers_share_the_work) {
    pl_threadpool *p;
    cr_assert_eq(pl_threadpool_create(2, &p), PL_OK);
    /* On a machine busy with other work the worker may not get a core during one run (13 ms),
     * so a run without it is retried, up to 50 times. */
    int worker_ran = 0;
    for (int attempt = 0; attempt < 50 && !worker_ran; attempt++) {
        spread_ctx c = {0};
        pl_threadpool_run(p, 64, spread_task, &c);
        cr_assert_eq(atomic_load(&c.seen[0]) + atomic_load(&c.seen[1]), 64);
        worker_ran = atomic_load(&c.seen[1]) > 0;
    }
    cr_assert(worker_ran, "worker 1 never ran a task in 50 runs");
    pl_threadpool_destroy(p);
    PL_ASSERT_NO_LEAKS();
}

Test(threadpool, create_errors) {
    pl_threadpool *p = (pl_threadpool *)1;
    cr_assert_eq(pl_threadpool_create(-1, &p), PL_ERR_INVALID_ARGUMENT);
    cr_assert_null(p);
    cr_assert_eq(pl_threadpool_create(100000, &p), PL_ERR_INVALID_ARGUMENT);
    int n_fail = 0;
    PL_ALLOC_SWEEP(n_fail, n, pl_threadpool_create(4, &p), cr_assert_null(p););
    pl_threadpool_destroy(p);
    cr_assert_eq(pl_threadpool_create(0, &p), PL_OK);
    cr_assert_eq(pl_threadpool_size(p), pl_cpu_count());
    pl_threadpool_destroy(p);
    PL_ASSERT_NO_LEAKS();
}
