/*
 * tests/cuda/test_cuda_ops.c - every op of the CUDA backend against the ref backend.
 *
 * The same file builds two binaries: test_cuda_emu (suite 'cuda') links the backend compiled
 * for the CPU emulation (tests/support/cuemu.h), test_cuda_gpu (suite 'gpu') links the
 * nvcc-built backend and is skipped (exit 77) without a device. Both backends are driven only
 * through the pl_backend_ops table, as the engine drives them.
 *
 * Inputs are fixed-seed random; shapes come from tables covering block sizes 8/16/32, head
 * sizes 8, 17, 64, 80, 96, 112, 128, 256 and 300 (fast and generic paths), GQA ratios 1/2/4/8,
 * contexts that cross KV-block and split-K partition boundaries, padded (negative) slots,
 * prefill chunks with earlier context, and batches mixing decode and prefill sequences.
 * Split-K is tested forced (32/64-token partitions) and as the backend chooses it by default
 * (512-token partitions, contexts up to 1300 tokens; checked to have actually split).
 * Sliding windows (1, under a block, not a multiple of it, several blocks, several split-K
 * partitions, covering the context) run through the decode, split-K and prefill kernels; the
 * blocks wholly before a sequence's first window point outside the cache in the table the
 * kernels get, so reading them faults, and a window covering every context must give the bits
 * of no window.
 * The ref backend gets the same kv_dtype, so both read bit-identical caches (checked) and
 * attention differences are kernel arithmetic only.
 */
#include <stddef.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "test_support.h"
#include "util/alloc.h"
#include "util/dtype.h"

// ---------------------------------------------------------------------------------------------
// Tolerances: |cuda - ref| <= atol + rtol * |ref| (pl_allclose), in one place.
//
// ref accumulates in double; the device in f32 (2^-24 = 6e-8 per rounding), with __expf,
// rsqrtf and sincosf a few ulp from exact on a GPU (exact under the emulation). Inputs are
// uniform in [-1, 1).
// - NORM (rmsnorm): an f32 sum of squares over dim <= 4096 plus rsqrtf: ~1e-6 relative (also
//   for the warp-per-row kernel of rows <= 256, a different summation order of the same terms).
// - ROPE: cos/sin in f32 of the same f32 angle (|angle| < 3e4, so sincosf's argument
//   reduction error stays ~1 ulp of 1) times inputs in [-1, 1): 1e-5 absolute.
// - SILU: __expf's relative error (2 ulp + 2^-21 on sm_80) through x/(1+e^-x).
// - MATMUL_F16: x is rounded to f16 before the GEMM, exactly as ref sees it when the test
//   rounds x the same way, so what remains is f32 accumulation order over d_in <= 300 of
//   products < 1: 1e-4 absolute. MATMUL_F16_LOOSE compares with ref fed the unrounded x:
//   each product then carries the f16 rounding of x (at most 2^-11 relative), so the bound is
//   2^-11 * sum_i |x_i w_i| (computed per case, largest over the outputs).
// - ATTN: softmax weights in f32 with a running max (each rescale one rounding), q.k over
//   head_dim <= 300 in f32, a weighted sum of V rows of magnitude < 1: 2e-5 absolute, 1e-4
//   relative; and NMSE < 1e-9 on the whole output. The same bounds hold with a sliding window,
//   which only drops keys from the same sums.
// Exact (bitwise): embed, gather_rows, kv_store (both round f32 -> f16/bf16 to nearest even),
// copy_blocks, argmax, upload_weight's f32 -> f16 conversion.
#define TOL_NORM_ATOL 2e-6f
#define TOL_NORM_RTOL 1e-5f
#define TOL_ROPE_ATOL 1e-5f
#define TOL_ROPE_RTOL 1e-5f
#define TOL_SILU_ATOL 1e-6f
#define TOL_SILU_RTOL 2e-6f
#define TOL_MATMUL_F16_ATOL 1e-4f
#define TOL_MATMUL_F16_RTOL 1e-4f
#define TOL_MATMUL_F32_ATOL 5e-5f
#define TOL_MATMUL_F32_RTOL 1e-5f
#define TOL_MATMUL_F16_LOOSE_REL 4.8828125e-4f /* 2^-11 */
#define TOL_ATTN_ATOL 2e-5f
#define TOL_ATTN_RTOL 1e-4f
#define TOL_ATTN_NMSE 1e-9

// ---------------------------------------------------------------------------------------------
// Helpers

typedef struct {
    pl_backend *ref, *cuda;
} backends;

static backends make_backends(pl_dtype kv) {
    backends b = {0};
    pl_backend_options o = {.n_threads = 1, .device = 0, .kv_dtype = kv};
    cr_assert_eq(pl_backend_ref_create(&o, &b.ref), PL_OK, "ref: %s", pl_last_error());
    cr_assert_eq(pl_backend_cuda_create(&o, &b.cuda), PL_OK, "cuda: %s", pl_last_error());
    cr_assert_eq(b.cuda->kv_dtype, kv == PL_DTYPE_AUTO ? PL_DTYPE_F16 : kv);
    return b;
}

static void drop_backends(backends *b) {
    pl_backend_destroy(b->ref);
    pl_backend_destroy(b->cuda);
}

/* A copy of host[0 .. n_bytes) in be's memory. */
static void *put(pl_backend *be, const void *host, size_t n_bytes) {
    void *p = NULL;
    cr_assert_eq(be->ops->alloc(be, n_bytes, &p), PL_OK, "alloc: %s", pl_last_error());
    if (host && n_bytes)
        cr_assert_eq(be->ops->upload(be, p, host, n_bytes), PL_OK, "upload: %s", pl_last_error());
    return p;
}

/* host[0 .. n_bytes) = be's p; also syncs, so async errors of earlier ops show up here. */
static void get(pl_backend *be, void *host, const void *p, size_t n_bytes) {
    cr_assert_eq(be->ops->download(be, host, p, n_bytes), PL_OK, "download: %s", pl_last_error());
}

/* n values uniform in [-scale, scale) (pl_test_fill's range is [-scale, 3 scale): see the
 * report; the tolerances below assume a symmetric range). */
static float *rand_floats(pl_test_rng *r, size_t n, float scale) {
    float *x = pl_malloc((n ? n : 1) * sizeof(float));
    cr_assert_not_null(x);
    for (size_t i = 0; i < n; i++)
        x[i] = scale * ((float)(pl_test_rng_u64(r) >> 40) * (1.0f / 8388608.0f) - 1.0f);
    return x;
}

static float *get_floats(pl_backend *be, const float *p, size_t n) {
    float *h = pl_malloc((n ? n : 1) * sizeof(float));
    cr_assert_not_null(h);
    get(be, h, p, n * sizeof(float));
    return h;
}

static uint16_t *to_16(const float *x, size_t n, pl_dtype t) {
    uint16_t *h = pl_malloc((n ? n : 1) * 2);
    cr_assert_not_null(h);
    for (size_t i = 0; i < n; i++) h[i] = t == PL_DTYPE_BF16 ? pl_f32_to_bf16(x[i]) : pl_f32_to_f16(x[i]);
    return h;
}

TestSuite(cuda_ops, .timeout = 120.0);

// ---------------------------------------------------------------------------------------------
// Backend basics

Test(cuda_ops, table_memory_and_staging) {
    backends b = make_backends(PL_DTYPE_AUTO);
    const pl_backend_ops *ops = b.cuda->ops;
    const void *const *slots = (const void *const *)ops;
    /* every entry but the optional matmul_group (one cuBLAS call per product) */
    const size_t group = offsetof(pl_backend_ops, matmul_group) / sizeof(void *);
    for (size_t i = 0; i < sizeof *ops / sizeof(void *); i++)
        if (i != group) cr_assert_not_null(slots[i], "ops entry %zu is NULL", i);
    cr_assert_null((const void *)(uintptr_t)ops->matmul_group);
    cr_assert_str_eq(ops->name, "cuda");
    cr_assert(pl_backend_is_cuda(b.cuda));
    cr_assert(!pl_backend_is_cuda(b.ref));
    cr_assert(!b.cuda->is_host);

    size_t free_b = 0, total = 0;
    cr_assert_eq(ops->memory_info(b.cuda, &free_b, &total), PL_OK, "%s", pl_last_error());
    cr_assert(total > 0 && free_b <= total);

    /* alloc is zeroed */
    unsigned char *z = pl_malloc(4096);
    void *d = put(b.cuda, NULL, 4096);
    get(b.cuda, z, d, 4096);
    for (int i = 0; i < 4096; i++) cr_assert_eq(z[i], 0, "byte %d of a fresh alloc", i);
    ops->free(b.cuda, d);
    pl_free(z);

    /* many small uploads cycle through both pinned halves, then a large (pageable) one;
     * each upload's source is overwritten right after the call, as the engine may do */
    const size_t n_small = 3000, sz = 1000;
    unsigned char *dev = put(b.cuda, NULL, n_small * sz);
    unsigned char *src = pl_malloc(sz), *back = pl_malloc(n_small * sz);
    for (size_t i = 0; i < n_small; i++) {
        memset(src, (int)(i * 7 + 1), sz);
        cr_assert_eq(ops->upload(b.cuda, dev + i * sz, src, sz), PL_OK, "%s", pl_last_error());
    }
    memset(src, 0, sz);
    get(b.cuda, back, dev, n_small * sz);
    for (size_t i = 0; i < n_small; i++)
        cr_assert_eq(back[i * sz + sz - 1], (unsigned char)(i * 7 + 1), "upload %zu", i);
    const size_t big = (size_t)3 << 20;
    unsigned char *bsrc = pl_malloc(big), *bback = pl_malloc(big);
    for (size_t i = 0; i < big; i++) bsrc[i] = (unsigned char)(i * 31 + 3);
    void *bdev = put(b.cuda, bsrc, big);
    get(b.cuda, bback, bdev, big);
    cr_assert(memcmp(bsrc, bback, big) == 0, "large upload round trip");
    ops->free(b.cuda, bdev);
    ops->free(b.cuda, dev);
    ops->free(b.cuda, NULL);
    pl_free(src);
    pl_free(back);
    pl_free(bsrc);
    pl_free(bback);
    cr_assert_eq(ops->sync(b.cuda), PL_OK);
    drop_backends(&b);
    PL_ASSERT_NO_LEAKS();
}

Test(cuda_ops, upload_weight_converts_f32_to_f16) {
    backends b = make_backends(PL_DTYPE_AUTO);
    pl_test_rng r;
    pl_test_rng_seed(&r, 41);
    const size_t n = 100003;
    float *w = rand_floats(&r, n, 3.f);
    w[0] = 70000.f;     /* overflows f16: inf */
    w[1] = 1e-7f;       /* subnormal in f16 */
    w[2] = -0.f;
    void *dw = NULL;
    pl_wtype t = PL_WTYPE_NONE;
    cr_assert_eq(b.cuda->ops->upload_weight(b.cuda, w, PL_WTYPE_F32, n, &dw, &t), PL_OK, "%s",
                 pl_last_error());
    cr_assert_eq(t, PL_WTYPE_F16);
    uint16_t *got = pl_malloc(n * 2);
    get(b.cuda, got, dw, n * 2);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(got[i], pl_f32_to_f16(w[i]), "element %zu: %#x vs %#x", i, got[i],
                     pl_f32_to_f16(w[i]));
    b.cuda->ops->free_weight(b.cuda, dw, w);

    uint16_t *bf = to_16(w, n, PL_DTYPE_BF16);
    cr_assert_eq(b.cuda->ops->upload_weight(b.cuda, bf, PL_WTYPE_BF16, n, &dw, &t), PL_OK);
    cr_assert_eq(t, PL_WTYPE_BF16, "bf16 is kept as it is");
    get(b.cuda, got, dw, n * 2);
    cr_assert(memcmp(got, bf, n * 2) == 0);
    b.cuda->ops->free_weight(b.cuda, dw, bf);

    cr_assert_eq(b.cuda->ops->upload_weight(b.cuda, w, (pl_wtype)99, n, &dw, &t),
                 PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "weight type 99"), "%s", pl_last_error());
    cr_assert_eq(b.cuda->ops->upload_weight(b.cuda, w, PL_WTYPE_Q4_K, 300, &dw, &t),
                 PL_ERR_INVALID_ARGUMENT, "300 elements are no whole Q4_K blocks");
    pl_free(bf);
    pl_free(got);
    pl_free(w);
    drop_backends(&b);
    PL_ASSERT_NO_LEAKS();
}

Test(cuda_ops, invalid_arguments_are_named) {
    backends b = make_backends(PL_DTYPE_F16);
    const pl_backend_ops *o = b.cuda->ops;
    cr_assert_eq(o->rmsnorm(b.cuda, NULL, NULL, NULL, -1, 8, 1e-5f), PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "n_rows"), "%s", pl_last_error());
    cr_assert_eq(o->matmul(b.cuda, NULL, NULL, NULL, PL_WTYPE_F16, 1, 0, 4),
                 PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "d_in"), "%s", pl_last_error());
    pl_attn_batch bad = {.n_seqs = 1, .n_tokens = 1, .n_heads = 6, .n_kv_heads = 4,
                         .head_dim = 64, .block_size = 16, .max_blocks_per_seq = 1,
                         .scale = 1.f};
    cr_assert_eq(o->attention(b.cuda, NULL, NULL, NULL, NULL, &bad), PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "n_kv_heads"), "%s", pl_last_error());
    bad.n_heads = 8;
    bad.head_dim = 1000;
    float x;
    bad.query_start = bad.context_lens = bad.block_tables = (const int32_t *)&x;
    bad.max_query_len = bad.max_context_len = 1;
    cr_assert_eq(o->attention(b.cuda, &x, &x, &x, &x, &bad), PL_ERR_UNSUPPORTED);
    cr_assert(strstr(pl_last_error(), "head_dim"), "%s", pl_last_error());
    bad.head_dim = 64;
    bad.sliding_window = -1;
    cr_assert_eq(o->attention(b.cuda, &x, &x, &x, &x, &bad), PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "sliding_window"), "%s", pl_last_error());
    bad.sliding_window = 0;
    cr_assert_eq(pl_cuda_set_attention_split(b.cuda, PL_CUDA_SPLIT_ALWAYS, 48),
                 PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_cuda_set_attention_split(b.ref, PL_CUDA_SPLIT_ALWAYS, 64),
                 PL_ERR_INVALID_ARGUMENT);
    pl_backend *be = NULL;
    pl_backend_options opt = {.device = 0, .kv_dtype = (pl_dtype)7};
    cr_assert_eq(pl_backend_cuda_create(&opt, &be), PL_ERR_UNSUPPORTED);
    cr_assert_null(be);
    opt.kv_dtype = PL_DTYPE_AUTO;
    opt.device = 1000;
    cr_assert_eq(pl_backend_cuda_create(&opt, &be), PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "device 1000"), "%s", pl_last_error());
    drop_backends(&b);
    PL_ASSERT_NO_LEAKS();
}

// ---------------------------------------------------------------------------------------------
// Elementwise and row ops

Test(cuda_ops, embed_all_table_types) {
    backends b = make_backends(PL_DTYPE_F16);
    pl_test_rng r;
    pl_test_rng_seed(&r, 1);
    const int vocab = 37, dim = 67, n = 11;
    int32_t ids[11];
    for (int i = 0; i < n; i++) ids[i] = (int32_t)pl_test_rng_below(&r, vocab);
    ids[3] = vocab - 1;
    ids[4] = 0;
    float *table = rand_floats(&r, (size_t)vocab * dim, 2.f);
    float *want = pl_malloc((size_t)n * dim * sizeof(float));
    const pl_dtype types[] = {PL_DTYPE_F32, PL_DTYPE_F16, PL_DTYPE_BF16};
    for (int ti = 0; ti < 3; ti++) {
        const pl_dtype t = types[ti];
        /* ref table of type t; the cuda one through upload_weight (f32 -> f16 on the device) */
        uint16_t *t16 = t == PL_DTYPE_F32 ? NULL : to_16(table, (size_t)vocab * dim, t);
        const void *rt = t == PL_DTYPE_F32 ? (const void *)table : (const void *)t16;
        void *dt = NULL;
        pl_wtype dtt = PL_WTYPE_NONE;
        if (t == PL_DTYPE_F32)
            dt = put(b.cuda, table, (size_t)vocab * dim * 4), dtt = PL_WTYPE_F32;
        else
            cr_assert_eq(b.cuda->ops->upload_weight(
                             b.cuda, t == PL_DTYPE_F16 ? (const void *)table : rt,
                             t == PL_DTYPE_F16 ? PL_WTYPE_F32 : pl_wtype_of_dtype(t),
                             (size_t)vocab * dim, &dt, &dtt),
                         PL_OK, "%s", pl_last_error());
        cr_assert_eq(dtt, pl_wtype_of_dtype(t));
        cr_assert_eq(b.ref->ops->embed(b.ref, want, ids, n, rt, pl_wtype_of_dtype(t), dim),
                     PL_OK);
        int32_t *dids = put(b.cuda, ids, sizeof ids);
        float *dout = put(b.cuda, NULL, (size_t)n * dim * 4);
        cr_assert_eq(b.cuda->ops->embed(b.cuda, dout, dids, n, dt, dtt, dim), PL_OK, "%s",
                     pl_last_error());
        float *got = get_floats(b.cuda, dout, (size_t)n * dim);
        cr_assert(memcmp(got, want, (size_t)n * dim * 4) == 0, "embed %s", pl_dtype_name(t));
        pl_free(got);
        b.cuda->ops->free(b.cuda, dout);
        b.cuda->ops->free(b.cuda, dids);
        if (t == PL_DTYPE_F32)
            b.cuda->ops->free(b.cuda, dt);
        else
            b.cuda->ops->free_weight(b.cuda, dt, rt);
        pl_free(t16);
    }
    pl_free(table);
    pl_free(want);
    drop_backends(&b);
    PL_ASSERT_NO_LEAKS();
}

Test(cuda_ops, rmsnorm_and_fused_add) {
    backends b = make_backends(PL_DTYPE_F16);
    pl_test_rng r;
    pl_test_rng_seed(&r, 2);
    const int shapes[][2] = {{1, 1}, {3, 7}, {2, 64}, {5, 300}, {2, 4096}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int rows = shapes[si][0], dim = shapes[si][1];
        const size_t n = (size_t)rows * dim;
        float *x = rand_floats(&r, n, 3.f), *w = rand_floats(&r, (size_t)dim, 1.f);
        float *delta = rand_floats(&r, n, 1.f);
        float *want = pl_malloc(n * 4), *res_want = pl_malloc(n * 4);
        float *dx = put(b.cuda, x, n * 4), *dw = put(b.cuda, w, (size_t)dim * 4);
        float *dd = put(b.cuda, delta, n * 4), *dout = put(b.cuda, NULL, n * 4);
        char name[64];

        cr_assert_eq(b.ref->ops->rmsnorm(b.ref, want, x, w, rows, dim, 1e-5f), PL_OK);
        cr_assert_eq(b.cuda->ops->rmsnorm(b.cuda, dout, dx, dw, rows, dim, 1e-5f), PL_OK);
        float *got = get_floats(b.cuda, dout, n);
        snprintf(name, sizeof name, "rmsnorm %dx%d", rows, dim);
        cr_assert(pl_allclose(name, want, got, n, TOL_NORM_ATOL, TOL_NORM_RTOL));
        pl_free(got);
        /* in place (out == x) */
        cr_assert_eq(b.cuda->ops->rmsnorm(b.cuda, dx, dx, dw, rows, dim, 1e-5f), PL_OK);
        got = get_floats(b.cuda, dx, n);
        cr_assert(pl_allclose("rmsnorm in place", want, got, n, TOL_NORM_ATOL, TOL_NORM_RTOL));
        pl_free(got);

        /* fused: residual += delta; out = rmsnorm(residual) */
        memcpy(res_want, x, n * 4);
        cr_assert_eq(b.cuda->ops->upload(b.cuda, dx, x, n * 4), PL_OK);
        cr_assert_eq(b.ref->ops->add_rmsnorm(b.ref, want, res_want, delta, w, rows, dim, 1e-6f),
                     PL_OK);
        cr_assert_eq(b.cuda->ops->add_rmsnorm(b.cuda, dout, dx, dd, dw, rows, dim, 1e-6f), PL_OK,
                     "%s", pl_last_error());
        got = get_floats(b.cuda, dout, n);
        float *res_got = get_floats(b.cuda, dx, n);
        snprintf(name, sizeof name, "add_rmsnorm %dx%d", rows, dim);
        cr_assert(pl_allclose(name, want, got, n, TOL_NORM_ATOL, TOL_NORM_RTOL));
        cr_assert(pl_allclose("add_rmsnorm residual", res_want, res_got, n, 0.f, 0.f));
        pl_free(got);
        pl_free(res_got);
        pl_free(x);
        pl_free(w);
        pl_free(delta);
        pl_free(want);
        pl_free(res_want);
        b.cuda->ops->free(b.cuda, dx);
        b.cuda->ops->free(b.cuda, dw);
        b.cuda->ops->free(b.cuda, dd);
        b.cuda->ops->free(b.cuda, dout);
    }
    drop_backends(&b);
    PL_ASSERT_NO_LEAKS();
}

/* Qwen3's per-head q/k norm: (n_tokens * n_heads) rows of head_dim, in place. Head sizes up to
 * 256 take the warp-per-row kernel, 257 and up the block-per-row one; both are checked, the
 * latter against the former's rule at the boundary. */
Test(cuda_ops, rmsnorm_per_head_in_place) {
    backends b = make_backends(PL_DTYPE_F16);
    pl_test_rng r;
    pl_test_rng_seed(&r, 9);
    /* n_tokens, n_heads, head_dim */
    const int shapes[][3] = {{1, 2, 8},   {7, 14, 40}, {33, 32, 64}, {5, 16, 128},
                             {3, 9, 256}, {2, 3, 257}, {1, 1, 64},   {300, 8, 128}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int rows = shapes[si][0] * shapes[si][1], hd = shapes[si][2];
        const size_t n = (size_t)rows * hd;
        float *x = rand_floats(&r, n, 4.f), *w = rand_floats(&r, (size_t)hd, 1.5f);
        float *want = pl_malloc(n * 4);
        cr_assert_eq(b.ref->ops->rmsnorm(b.ref, want, x, w, rows, hd, 1e-6f), PL_OK);
        float *dx = put(b.cuda, x, n * 4), *dw = put(b.cuda, w, (size_t)hd * 4);
        cr_assert_eq(b.cuda->ops->rmsnorm(b.cuda, dx, dx, dw, rows, hd, 1e-6f), PL_OK, "%s",
                     pl_last_error());
        float *got = get_floats(b.cuda, dx, n);
        char name[64];
        snprintf(name, sizeof name, "per-head rmsnorm %d rows x %d", rows, hd);
        cr_assert(pl_allclose(name, want, got, n, TOL_NORM_ATOL, TOL_NORM_RTOL));
        pl_free(got);
        pl_free(x);
        pl_free(w);
        pl_free(want);
        b.cuda->ops->free(b.cuda, dx);
        b.cuda->ops->free(b.cuda, dw);
    }
    drop_backends(&b);
    PL_ASSERT_NO_LEAKS();
}

/* Qwen2's q/k/v biases: one f32 addition per element, so the same bits as ref. */
Test(cuda_ops, add_bias) {
    backends b = make_backends(PL_DTYPE_F16);
    pl_test_rng r;
    pl_test_rng_seed(&r, 10);
    /* 1 row; odd dims; Qwen2.5-0.5B's q (896); many rows: more elements than the grid's cap of
     * 32 blocks per SM x 256 threads (grid-stride loop) */
    const int shapes[][2] = {{1, 1}, {1, 7}, {3, 17}, {2, 896}, {1000, 129}, {9000, 64}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int rows = shapes[si][0], dim = shapes[si][1];
        const size_t n = (size_t)rows * dim;
        float *x = rand_floats(&r, n, 3.f), *bias = rand_floats(&r, (size_t)dim, 1.f);
        float *dx = put(b.cuda, x, n * 4), *db = put(b.cuda, bias, (size_t)dim * 4);
        cr_assert_eq(b.ref->ops->add_bias(b.ref, x, bias, rows, dim), PL_OK);
        cr_assert_eq(b.cuda->ops->add_bias(b.cuda, dx, db, rows, dim), PL_OK, "%s",
                     pl_last_error());
        float *got = get_floats(b.cuda, dx, n);
        cr_assert(memcmp(x, got, n * 4) == 0, "add_bias %dx%d", rows, dim);
        pl_free(got);
        pl_free(x);
        pl_free(bias);
        b.cuda->ops->free(b.cuda, dx);
        b.cuda->ops->free(b.cuda, db);
    }
    const pl_backend_ops *o = b.cuda->ops;
    float *dx = put(b.cuda, NULL, 64);
    cr_assert_eq(o->add_bias(b.cuda, dx, dx, -1, 4), PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "n_rows"), "%s", pl_last_error());
    cr_assert_eq(o->add_bias(b.cuda, dx, dx, 2, 0), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(o->add_bias(b.cuda, NULL, dx, 2, 4), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(o->add_bias(b.cuda, dx, NULL, 2, 4), PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "NULL"), "%s", pl_last_error());
    cr_assert_eq(o->add_bias(b.cuda, NULL, NULL, 0, 4), PL_OK);
    b.cuda->ops->free(b.cuda, dx);
    cr_assert_eq(o->sync(b.cuda), PL_OK);
    drop_backends(&b);
    PL_ASSERT_NO_LEAKS();
}

Test(cuda_ops, rope_both_layouts) {
    backends b = make_backends(PL_DTYPE_F16);
    pl_test_rng r;
    pl_test_rng_seed(&r, 3);
    /* n_tokens, n_heads, n_kv_heads, head_dim */
    const int shapes[][4] = {{1, 1, 1, 2}, {5, 4, 2, 8}, {3, 3, 1, 17}, {4, 8, 2, 64},
                             {2, 4, 4, 128}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        for (int layout = 0; layout < 2; layout++) {
            const int nt = shapes[si][0], nh = shapes[si][1], nkv = shapes[si][2],
                      hd = shapes[si][3];
            const size_t nq = (size_t)nt * nh * hd, nk = (size_t)nt * nkv * hd;
            float *q = rand_floats(&r, nq, 1.f), *k = rand_floats(&r, nk, 1.f);
            float *inv = pl_malloc((size_t)(hd / 2 + 1) * 4);
            for (int j = 0; j < hd / 2; j++) inv[j] = powf(10000.f, -2.f * j / hd);
            int32_t pos[8];
            for (int i = 0; i < nt; i++) pos[i] = (int32_t)pl_test_rng_below(&r, 30000);
            pos[0] = 0;
            float *dq = put(b.cuda, q, nq * 4), *dk = put(b.cuda, k, nk * 4);
            float *dinv = put(b.cuda, inv, (size_t)(hd / 2 + 1) * 4);
            int32_t *dpos = put(b.cuda, pos, (size_t)nt * 4);
            cr_assert_eq(b.ref->ops->rope(b.ref, q, k, pos, inv, nt, nh, nkv, hd,
                                          (pl_rope_layout)layout),
                         PL_OK);
            cr_assert_eq(b.cuda->ops->rope(b.cuda, dq, dk, dpos, dinv, nt, nh, nkv, hd,
                                           (pl_rope_layout)layout),
                         PL_OK, "%s", pl_last_error());
            float *gq = get_floats(b.cuda, dq, nq), *gk = get_floats(b.cuda, dk, nk);
            char name[64];
            snprintf(name, sizeof name, "rope q shape %zu layout %d", si, layout);
            cr_assert(pl_allclose(name, q, gq, nq, TOL_ROPE_ATOL, TOL_ROPE_RTOL));
            snprintf(name, sizeof name, "rope k shape %zu layout %d", si, layout);
            cr_assert(pl_allclose(name, k, gk, nk, TOL_ROPE_ATOL, TOL_ROPE_RTOL));
            pl_free(gq);
            pl_free(gk);
            pl_free(q);
            pl_free(k);
            pl_free(inv);
            b.cuda->ops->free(b.cuda, dq);
            b.cuda->ops->free(b.cuda, dk);
            b.cuda->ops->free(b.cuda, dinv);
            b.cuda->ops->free(b.cuda, dpos);
        }
    }
    drop_backends(&b);
    PL_ASSERT_NO_LEAKS();
}

Test(cuda_ops, silu_mul_and_gather_rows) {
    backends b = make_backends(PL_DTYPE_F16);
    pl_test_rng r;
    pl_test_rng_seed(&r, 4);
    const size_t sizes[] = {1, 1000, 100003};
    for (size_t si = 0; si < 3; si++) {
        const size_t n = sizes[si];
        float *g = rand_floats(&r, n, 8.f), *u = rand_floats(&r, n, 2.f);
        float *want = pl_malloc(n * 4);
        cr_assert_eq(b.ref->ops->silu_mul(b.ref, want, g, u, n), PL_OK);
        float *dg = put(b.cuda, g, n * 4), *du = put(b.cuda, u, n * 4);
        cr_assert_eq(b.cuda->ops->silu_mul(b.cuda, dg, dg, du, n), PL_OK, "out aliases gate");
        float *got = get_floats(b.cuda, dg, n);
        cr_assert(pl_allclose("silu_mul", want, got, n, TOL_SILU_ATOL, TOL_SILU_RTOL));
        pl_free(got);
        pl_free(g);
        pl_free(u);
        pl_free(want);
        b.cuda->ops->free(b.cuda, dg);
        b.cuda->ops->free(b.cuda, du);
    }
    const int rows_total = 9, dim = 33, n_rows = 5;
    float *x = rand_floats(&r, (size_t)rows_total * dim, 1.f);
    const int32_t rows[5] = {8, 0, 3, 3, 7};
    float *want = pl_malloc((size_t)n_rows * dim * 4);
    cr_assert_eq(b.ref->ops->gather_rows(b.ref, want, x, rows, n_rows, dim), PL_OK);
    float *dx = put(b.cuda, x, (size_t)rows_total * dim * 4);
    int32_t *drows = put(b.cuda, rows, sizeof rows);
    float *dout = put(b.cuda, NULL, (size_t)n_rows * dim * 4);
    cr_assert_eq(b.cuda->ops->gather_rows(b.cuda, dout, dx, drows, n_rows, dim), PL_OK);
    float *got = get_floats(b.cuda, dout, (size_t)n_rows * dim);
    cr_assert(memcmp(want, got, (size_t)n_rows * dim * 4) == 0, "gather_rows");
    pl_free(got);
    pl_free(want);
    pl_free(x);
    b.cuda->ops->free(b.cuda, dx);
    b.cuda->ops->free(b.cuda, drows);
    b.cuda->ops->free(b.cuda, dout);
    drop_backends(&b);
    PL_ASSERT_NO_LEAKS();
}

Test(cuda_ops, argmax_ties_nan_and_inf) {
    backends b = make_backends(PL_DTYPE_F16);
    pl_test_rng r;
    pl_test_rng_seed(&r, 5);
    const int n_rows = 6, vocab = 1003;
    float *l = rand_floats(&r, (size_t)n_rows * vocab, 5.f);
    l[0 * vocab + 500] = 9.f; /* row 0: a tie, the lower index wins */
    l[0 * vocab + 700] = 9.f;
    for (int i = 0; i < vocab; i++) l[1 * vocab + i] = -INFINITY; /* row 1: all -inf -> 0 */
    l[2 * vocab + 0] = NAN;                                      /* row 2: NaN never wins */
    l[2 * vocab + 9] = 50.f;
    for (int i = 0; i < vocab; i++) l[3 * vocab + i] = NAN;     /* row 3: all NaN -> 0 */
    l[4 * vocab + vocab - 1] = 99.f;                            /* row 4: the last element */
    int32_t want[6];
    for (int row = 0; row < n_rows; row++) { /* the plain left-to-right scan */
        const float *x = l + (size_t)row * vocab;
        int best = -1;
        for (int i = 0; i < vocab; i++)
            if (!isnan(x[i]) && (best < 0 || x[i] > x[best])) best = i;
        want[row] = best < 0 ? 0 : best;
    }
    cr_assert_eq(want[0], 500);
    cr_assert_eq(want[2], 9);
    float *dl = put(b.cuda, l, (size_t)n_rows * vocab * 4);
    int32_t *dout = put(b.cuda, NULL, sizeof want), got[6];
    cr_assert_eq(pl_cuda_argmax(b.cuda, dout, dl, n_rows, vocab), PL_OK, "%s", pl_last_error());
    get(b.cuda, got, dout, sizeof got);
    for (int row = 0; row < n_rows; row++)
        cr_assert_eq(got[row], want[row], "row %d: %d vs %d", row, got[row], want[row]);
    b.cuda->ops->free(b.cuda, dl);
    b.cuda->ops->free(b.cuda, dout);
    pl_free(l);
    drop_backends(&b);
    PL_ASSERT_NO_LEAKS();
}

// ---------------------------------------------------------------------------------------------
// Matmul

static void matmul_case(backends *b, pl_test_rng *r, int n_rows, int d_in, int d_out,
                        pl_dtype wt) {
    const size_t nx = (size_t)n_rows * d_in, nw = (size_t)d_out * d_in, no = (size_t)n_rows * d_out;
    float *x = rand_floats(r, nx, 1.f), *w = rand_floats(r, nw, 1.f);
    float *want = pl_malloc(no * 4), *want_loose = pl_malloc(no * 4);
    /* device weights: f32 stays f32 via alloc+upload; otherwise upload_weight from f32 (f16)
     * or from bf16 (kept) */
    void *dw = NULL;
    const pl_wtype wtt = pl_wtype_of_dtype(wt);
    pl_wtype dwt = wtt;
    uint16_t *w16 = NULL;
    if (wt == PL_DTYPE_F32) {
        dw = put(b->cuda, w, nw * 4);
    } else {
        w16 = to_16(w, nw, wt);
        cr_assert_eq(b->cuda->ops->upload_weight(b->cuda,
                                                 wt == PL_DTYPE_F16 ? (const void *)w : w16,
                                                 wt == PL_DTYPE_F16 ? PL_WTYPE_F32 : wtt, nw,
                                                 &dw, &dwt),
                     PL_OK, "%s", pl_last_error());
        cr_assert_eq(dwt, wtt);
    }
    const void *rw = wt == PL_DTYPE_F32 ? (const void *)w : (const void *)w16;
    cr_assert_eq(b->ref->ops->matmul(b->ref, want_loose, x, rw, wtt, n_rows, d_in, d_out), PL_OK);
    /* x as the device sees it: rounded to the weights' 16-bit type */
    float *xr = pl_malloc(nx * 4);
    for (size_t i = 0; i < nx; i++)
        xr[i] = wt == PL_DTYPE_F16    ? pl_f16_to_f32(pl_f32_to_f16(x[i]))
                : wt == PL_DTYPE_BF16 ? pl_bf16_to_f32(pl_f32_to_bf16(x[i]))
                                      : x[i];
    cr_assert_eq(b->ref->ops->matmul(b->ref, want, xr, rw, wtt, n_rows, d_in, d_out), PL_OK);
    float *dx = put(b->cuda, x, nx * 4), *dout = put(b->cuda, NULL, no * 4);
    cr_assert_eq(b->cuda->ops->matmul(b->cuda, dout, dx, dw, wtt, n_rows, d_in, d_out), PL_OK, "%s",
                 pl_last_error());
    float *got = get_floats(b->cuda, dout, no);
    char name[96];
    snprintf(name, sizeof name, "matmul %s %dx%d->%d", pl_dtype_name(wt), n_rows, d_in, d_out);
    if (wt == PL_DTYPE_F32) {
        cr_assert(pl_allclose(name, want, got, no, TOL_MATMUL_F32_ATOL, TOL_MATMUL_F32_RTOL));
    } else {
        cr_assert(pl_allclose(name, want, got, no, TOL_MATMUL_F16_ATOL, TOL_MATMUL_F16_RTOL));
        if (wt == PL_DTYPE_F16) {
            float bound = 0.f; /* 2^-11 * max_j sum_i |x_i w_ji| */
            for (int row = 0; row < n_rows; row++)
                for (int j = 0; j < d_out; j++) {
                    float s = 0.f;
                    for (int i = 0; i < d_in; i++)
                        s += fabsf(x[(size_t)row * d_in + i] *
                                   pl_f16_to_f32(w16[(size_t)j * d_in + i]));
                    bound = s > bound ? s : bound;
                }
            cr_assert(pl_allclose(name, want_loose, got, no,
                                  TOL_MATMUL_F16_LOOSE_REL * bound + TOL_MATMUL_F16_ATOL, 0.f));
        }
    }
    pl_free(got);
    pl_free(x);
    pl_free(xr);
    pl_free(w);
    pl_free(w16);
    pl_free(want);
    pl_free(want_loose);
    b->cuda->ops->free(b->cuda, dx);
    b->cuda->ops->free(b->cuda, dout);
    if (wt == PL_DTYPE_F32)
        b->cuda->ops->free(b->cuda, dw);
    else
        b->cuda->ops->free_weight(b->cuda, dw, NULL);
}

Test(cuda_ops, matmul_f16_bf16_f32) {
    backends b = make_backends(PL_DTYPE_F16);
    pl_test_rng r;
    pl_test_rng_seed(&r, 6);
    /* n_rows, d_in, d_out: batch 1, odd sizes, a row count past one GEMM tile */
    const int shapes[][3] = {{1, 5, 1}, {3, 64, 7}, {17, 300, 130}, {1, 172, 64}};
    const pl_dtype types[] = {PL_DTYPE_F16, PL_DTYPE_BF16, PL_DTYPE_F32};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int ti = 0; ti < 3; ti++)
            matmul_case(&b, &r, shapes[si][0], shapes[si][1], shapes[si][2], types[ti]);
    drop_backends(&b);
    PL_ASSERT_NO_LEAKS();
}

// ---------------------------------------------------------------------------------------------
// Quantised weights (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K): stored as uploaded, read by the
// matrix-vector kernel (decode sizes) or dequantised to f16 for cuBLAS (larger batches)
//
// The matrix-vector kernel dequantises exactly and keeps x in f32: against ref only the f32
// accumulation order differs (TOL_MATMUL_F32). The cuBLAS path rounds the dequantised
// weights and x to f16: against ref fed the same f16 weights and f16-rounded x, only the
// accumulation differs (TOL_MATMUL_F16).

static const pl_wtype QTYPES[] = {PL_WTYPE_Q8_0, PL_WTYPE_Q4_0, PL_WTYPE_Q4_K, PL_WTYPE_Q5_K,
                                  PL_WTYPE_Q6_K};

/* n random values in [-1, 1) quantised to t: the blocks, and what they stand for (f32). */
static void *rand_quant(pl_test_rng *r, pl_wtype t, size_t n, float **values) {
    const pl_wtype_traits *tr = pl_wtype_traits_of(t);
    uint64_t bytes = 0;
    cr_assert(pl_wtype_bytes(t, n, &bytes));
    float *f = rand_floats(r, n, 1.f);
    void *q = pl_malloc((size_t)bytes);
    cr_assert_not_null(q);
    tr->from_f32(f, q, n);
    tr->to_f32(q, f, n);
    *values = f;
    return q;
}

Test(cuda_ops, embed_quantised_tables) {
    backends b = make_backends(PL_DTYPE_F16);
    pl_test_rng r;
    pl_test_rng_seed(&r, 71);
    const int vocab = 19, dim = 512, n = 9;
    int32_t ids[9] = {0, 18, 3, 3, 7, 11, 18, 1, 5};
    for (size_t ti = 0; ti < sizeof QTYPES / sizeof QTYPES[0]; ti++) {
        const pl_wtype t = QTYPES[ti];
        float *vals;
        void *tab = rand_quant(&r, t, (size_t)vocab * dim, &vals);
        void *dt = NULL;
        pl_wtype st = PL_WTYPE_NONE;
        cr_assert_eq(b.cuda->ops->upload_weight(b.cuda, tab, t, (size_t)vocab * dim, &dt, &st),
                     PL_OK, "%s", pl_last_error());
        cr_assert_eq(st, t, "quantised weights stay quantised");
        float *want = pl_malloc((size_t)n * dim * 4);
        cr_assert_eq(b.ref->ops->embed(b.ref, want, ids, n, tab, t, dim), PL_OK);
        int32_t *dids = put(b.cuda, ids, sizeof ids);
        float *dout = put(b.cuda, NULL, (size_t)n * dim * 4);
        cr_assert_eq(b.cuda->ops->embed(b.cuda, dout, dids, n, dt, st, dim), PL_OK, "%s",
                     pl_last_error());
        float *got = get_floats(b.cuda, dout, (size_t)n * dim);
        cr_assert(memcmp(got, want, (size_t)n * dim * 4) == 0, "embed %s", pl_wtype_name(t));
        pl_free(got), pl_free(want), pl_free(vals), pl_free(tab);
        b.cuda->ops->free(b.cuda, dout);
        b.cuda->ops->free(b.cuda, dids);
        b.cuda->ops->free_weight(b.cuda, dt, tab);
    }
    drop_backends(&b);
    PL_ASSERT_NO_LEAKS();
}

static void qmatmul_case(backends *b, pl_test_rng *r, pl_wtype t, int n_rows, int d_in,
                         int d_out) {
    const size_t nx = (size_t)n_rows * d_in, nw = (size_t)d_out * d_in, no = (size_t)n_rows * d_out;
    float *wv, *x = rand_floats(r, nx, 1.f);
    void *wq = rand_quant(r, t, nw, &wv);
    void *dw = NULL;
    pl_wtype st = PL_WTYPE_NONE;
    cr_assert_eq(b->cuda->ops->upload_weight(b->cuda, wq, t, nw, &dw, &st), PL_OK, "%s",
                 pl_last_error());
    float *want = pl_malloc(no * 4);
    char name[96];
    snprintf(name, sizeof name, "matmul %s %dx%d->%d", pl_wtype_name(t), n_rows, d_in, d_out);
    const bool gemv = n_rows <= 8; /* qmatmul.cu's kQRows */
    if (gemv) {
        cr_assert_eq(b->ref->ops->matmul(b->ref, want, x, wq, t, n_rows, d_in, d_out), PL_OK);
    } else { /* ref with the f16 weights and x the device multiplies */
        uint16_t *w16 = pl_malloc(nw * 2);
        float *xr = pl_malloc(nx * 4);
        for (size_t i = 0; i < nw; i++) w16[i] = pl_f32_to_f16(wv[i]);
        for (size_t i = 0; i < nx; i++) xr[i] = pl_f16_to_f32(pl_f32_to_f16(x[i]));
        cr_assert_eq(b->ref->ops->matmul(b->ref, want, xr, w16, PL_WTYPE_F16, n_rows, d_in,
                                         d_out),
                     PL_OK);
        pl_free(w16), pl_free(xr);
    }
    float *dx = put(b->cuda, x, nx * 4), *dout = put(b->cuda, NULL, no * 4);
    cr_assert_eq(b->cuda->ops->matmul(b->cuda, dout, dx, dw, st, n_rows, d_in, d_out), PL_OK,
                 "%s: %s", name, pl_last_error());
    float *got = get_floats(b->cuda, dout, no);
    if (gemv)
        cr_assert(pl_allclose(name, want, got, no, TOL_MATMUL_F32_ATOL, TOL_MATMUL_F32_RTOL));
    else
        cr_assert(pl_allclose(name, want, got, no, TOL_MATMUL_F16_ATOL, TOL_MATMUL_F16_RTOL));
    pl_free(got), pl_free(x), pl_free(wv), pl_free(wq), pl_free(want);
    b->cuda->ops->free(b->cuda, dx);
    b->cuda->ops->free(b->cuda, dout);
    b->cuda->ops->free_weight(b->cuda, dw, NULL);
}

/* kernels/backend.h's alignment contract: activations that are only 4-byte aligned (an offset
 * of one float into an allocation) take the scalar paths and give the same results; quantised
 * weights that are not where upload_weight put them are refused for the types read in 16-byte
 * vectors, naming the contract. Under the emulation a misaligned vector access fails the
 * launch (PL_VEC_ALIGNED), so the fallbacks are what makes these pass. */
Test(cuda_ops, misaligned_activations_take_scalar_paths) {
    backends b = make_backends(PL_DTYPE_F16);
    pl_test_rng r;
    pl_test_rng_seed(&r, 74);
    const int n_rows = 3, d_in = 256, d_out = 9, vocab = 5;
    const size_t nx = (size_t)n_rows * d_in, no = (size_t)n_rows * d_out;
    for (size_t ti = 0; ti < sizeof QTYPES / sizeof QTYPES[0]; ti++) {
        const pl_wtype t = QTYPES[ti];
        float *wv, *x = rand_floats(&r, nx, 1.f);
        void *wq = rand_quant(&r, t, (size_t)d_out * d_in, &wv);
        void *dw = NULL;
        pl_wtype st = PL_WTYPE_NONE;
        cr_assert_eq(b.cuda->ops->upload_weight(b.cuda, wq, t, (size_t)d_out * d_in, &dw, &st),
                     PL_OK, "%s", pl_last_error());
        float *want = pl_malloc(no * 4);
        cr_assert_eq(b.ref->ops->matmul(b.ref, want, x, wq, t, n_rows, d_in, d_out), PL_OK);
        /* x one float into its allocation: 4-byte but not 16-byte aligned */
        float *dx = put(b.cuda, NULL, (nx + 1) * 4), *dout = put(b.cuda, NULL, no * 4);
        cr_assert_eq(b.cuda->ops->upload(b.cuda, dx + 1, x, nx * 4), PL_OK);
        cr_assert_eq(b.cuda->ops->matmul(b.cuda, dout, dx + 1, dw, st, n_rows, d_in, d_out),
                     PL_OK, "%s: %s", pl_wtype_name(t), pl_last_error());
        float *got = get_floats(b.cuda, dout, no);
        cr_assert(pl_allclose(pl_wtype_name(t), want, got, no, TOL_MATMUL_F32_ATOL,
                              TOL_MATMUL_F32_RTOL));
        /* an embedding row into out one float past 16-byte alignment: same values, bit for bit */
        float *emb_want = pl_malloc((size_t)d_in * 4);
        const int32_t id = 4 % d_out;
        cr_assert_eq(b.ref->ops->embed(b.ref, emb_want, &id, 1, wq, t, d_in), PL_OK);
        int32_t *did = put(b.cuda, &id, sizeof id);
        float *demb = put(b.cuda, NULL, ((size_t)d_in + 1) * 4);
        cr_assert_eq(b.cuda->ops->embed(b.cuda, demb + 1, did, 1, dw, st, d_in), PL_OK, "%s: %s",
                     pl_wtype_name(t), pl_last_error());
        float *emb_got = get_floats(b.cuda, demb + 1, (size_t)d_in);
        cr_assert(memcmp(emb_got, emb_want, (size_t)d_in * 4) == 0, "embed %s into a misaligned "
                  "row", pl_wtype_name(t));
        /* the weights 2 bytes into an allocation: Q4_K/Q5_K refused, the others still read */
        uint64_t wbytes = 0;
        cr_assert(pl_wtype_bytes(t, (uint64_t)d_out * d_in, &wbytes));
        unsigned char *dw2 = put(b.cuda, NULL, (size_t)wbytes + 2);
        cr_assert_eq(b.cuda->ops->upload(b.cuda, dw2 + 2, wq, (size_t)wbytes), PL_OK);
        pl_status s = b.cuda->ops->matmul(b.cuda, dout, dx + 1, dw2 + 2, st, n_rows, d_in, d_out);
        if (t == PL_WTYPE_Q4_K || t == PL_WTYPE_Q5_K) {
            cr_assert_eq(s, PL_ERR_INVALID_ARGUMENT, "%s: %s", pl_wtype_name(t), pl_last_error());
            cr_assert_not_null(strstr(pl_last_error(), "16-byte aligned"), "%s", pl_last_error());
            cr_assert_eq(b.cuda->ops->embed(b.cuda, demb, did, 1, dw2 + 2, st, d_in),
                         PL_ERR_INVALID_ARGUMENT);
        } else {
            cr_assert_eq(s, PL_OK, "%s: %s", pl_wtype_name(t), pl_last_error());
            float *got2 = get_floats(b.cuda, dout, no);
            cr_assert(memcmp(got2, got, no * 4) == 0, "%s at a 2-byte offset", pl_wtype_name(t));
            pl_free(got2);
        }
        cr_assert(!b.cuda->lost);
        pl_free(got), pl_free(x), pl_free(wv), pl_free(wq), pl_free(want);
        pl_free(emb_want), pl_free(emb_got);
        void *to_free[] = {dx, dout, did, demb, dw2};
        for (size_t i = 0; i < 5; i++) b.cuda->ops->free(b.cuda, to_free[i]);
        b.cuda->ops->free_weight(b.cuda, dw, NULL);
    }
    (void)vocab;
    drop_backends(&b);
    PL_ASSERT_NO_LEAKS();
}

Test(cuda_ops, matmul_quantised) {
    backends b = make_backends(PL_DTYPE_F16);
    pl_test_rng r;
    pl_test_rng_seed(&r, 72);
    /* n_rows, d_in, d_out: decode (1), the kernel's most x rows (8), cuBLAS (9, 17); rows of
     * 1-3 super-blocks, fewer outputs than a block's 4 warps, more pieces than 32 lanes */
    const int shapes[][3] = {{1, 256, 5}, {3, 512, 33}, {8, 256, 9}, {9, 256, 7},
                             {17, 768, 40}, {1, 1280, 6}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (size_t ti = 0; ti < sizeof QTYPES / sizeof QTYPES[0]; ti++)
            qmatmul_case(&b, &r, QTYPES[ti], shapes[si][0], shapes[si][1], shapes[si][2]);
    /* Q8_0 and Q4_0 rows of an odd number of blocks */
    qmatmul_case(&b, &r, PL_WTYPE_Q8_0, 2, 96, 11);
    qmatmul_case(&b, &r, PL_WTYPE_Q4_0, 12, 160, 13);
    drop_backends(&b);
    PL_ASSERT_NO_LEAKS();
}

// ---------------------------------------------------------------------------------------------
// KV store, copy_blocks and paged attention

typedef struct {
    int block_size, head_dim, n_kv_heads, group; /* n_heads = n_kv_heads * group */
    int n_seqs;
    int ctx[4];  /* context_lens after this step */
    int qlen[4]; /* query rows this step: 1 = decode */
} attn_case;

static const attn_case k_attn_cases[] = {
    /* decode only */
    {16, 64, 2, 4, 3, {1, 37, 200}, {1, 1, 1}},
    {8, 128, 1, 8, 2, {65, 130}, {1, 1}},
    {32, 80, 2, 2, 2, {33, 96}, {1, 1}},
    {16, 96, 1, 2, 1, {129}, {1}},
    {8, 112, 2, 1, 2, {8, 64}, {1, 1}},
    {16, 256, 1, 2, 2, {31, 70}, {1, 1}},
    {16, 17, 3, 1, 2, {19, 50}, {1, 1}},
    {8, 8, 4, 2, 3, {1, 9, 64}, {1, 1, 1}},
    {32, 300, 1, 1, 1, {45}, {1}},
    /* prefill: a whole prompt, and a chunk after earlier context (chunked prefill / prefix hit) */
    {16, 64, 2, 2, 2, {40, 70}, {40, 20}},
    {8, 17, 1, 4, 2, {33, 12}, {9, 12}},
    {32, 128, 1, 1, 1, {90}, {90}},
    {8, 256, 1, 2, 1, {30}, {17}},
    {16, 300, 1, 1, 1, {20}, {11}},
    /* mixed decode + prefill in one batch */
    {16, 64, 2, 4, 3, {50, 45, 77}, {1, 30, 1}},
    {8, 80, 1, 8, 2, {5, 66}, {5, 1}},
};

/* Runs one case with the given sliding window on both backends with the given cache type and
 * split policy, and checks the CUDA output against ref. The inputs depend only on (ac, kv,
 * seed). With keep_cuda, the CUDA output (n_tokens x n_heads x head_dim floats, pl_malloc'd)
 * is handed to the caller. */
/* Gemma 2's soft-cap for the attention runs (0: none), and the queries' scale: a test that
 * sets them restores them. */
static float g_softcap = 0.0f, g_q_scale = 1.0f;

static void attention_run_window(const attn_case *ac, int window, pl_dtype kv,
                                 pl_cuda_split_mode mode, int part_tokens, uint64_t seed,
                                 float **keep_cuda) {
    backends be = make_backends(kv);
    cr_assert_eq(pl_cuda_set_attention_split(be.cuda, mode, part_tokens), PL_OK);
    pl_test_rng r;
    pl_test_rng_seed(&r, seed);
    const int bs = ac->block_size, hd = ac->head_dim, nkv = ac->n_kv_heads;
    const int nh = nkv * ac->group, ns = ac->n_seqs;

    /* block tables: every sequence's blocks scattered over a shuffled pool */
    int n_blocks = 3, max_bps = 1, max_ctx = 0, max_q = 0, n_q = 0;
    for (int s = 0; s < ns; s++) {
        const int nb = (ac->ctx[s] + bs - 1) / bs;
        n_blocks += nb;
        max_bps = nb + 1 > max_bps ? nb + 1 : max_bps;
        max_ctx = ac->ctx[s] > max_ctx ? ac->ctx[s] : max_ctx;
        max_q = ac->qlen[s] > max_q ? ac->qlen[s] : max_q;
        n_q += ac->qlen[s];
    }
    int32_t *perm = pl_malloc((size_t)n_blocks * 4);
    for (int i = 0; i < n_blocks; i++) perm[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) {
        int j = (int)pl_test_rng_below(&r, (uint32_t)i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    /* unused table entries point far outside the cache: a kernel reading them faults */
    int32_t *tables = pl_malloc((size_t)ns * max_bps * 4);
    for (int i = 0; i < ns * max_bps; i++) tables[i] = 1 << 24;
    int next = 0;
    for (int s = 0; s < ns; s++)
        for (int bi = 0; bi < (ac->ctx[s] + bs - 1) / bs; bi++)
            tables[s * max_bps + bi] = perm[next++];
    /* attention's tables: blocks wholly before the sequence's first window poisoned too */
    int32_t *att_tables = pl_malloc((size_t)ns * max_bps * 4);
    memcpy(att_tables, tables, (size_t)ns * max_bps * 4);
    for (int s = 0; s < ns; s++) {
        const int first = pl_attn_window_start(ac->ctx[s] - ac->qlen[s], window);
        for (int bi = 0; (bi + 1) * bs <= first; bi++) att_tables[s * max_bps + bi] = 1 << 24;
    }

    /* every context position's K/V written by one kv_store, with padding slots interleaved */
    int n_store = 0;
    for (int s = 0; s < ns; s++) n_store += ac->ctx[s] + ac->ctx[s] / 7 + 1;
    int64_t *slots = pl_malloc((size_t)n_store * 8);
    int w = 0;
    for (int s = 0; s < ns; s++)
        for (int t = 0; t < ac->ctx[s]; t++) {
            if (t % 7 == 3) slots[w++] = -1;
            slots[w++] = (int64_t)tables[s * max_bps + t / bs] * bs + t % bs;
        }
    while (w < n_store) slots[w++] = -5;
    const size_t kv_tok = (size_t)nkv * hd;
    float *k = rand_floats(&r, (size_t)n_store * kv_tok, 1.f);
    float *v = rand_floats(&r, (size_t)n_store * kv_tok, 1.f);
    const size_t cache_elems = (size_t)n_blocks * nkv * bs * hd, esz = pl_dtype_size(kv);

    int32_t *qstart = pl_malloc((size_t)(ns + 1) * 4), *ctx = pl_malloc((size_t)ns * 4);
    qstart[0] = 0;
    for (int s = 0; s < ns; s++) {
        qstart[s + 1] = qstart[s] + ac->qlen[s];
        ctx[s] = ac->ctx[s];
    }
    const size_t nqe = (size_t)n_q * nh * hd;
    float *q = rand_floats(&r, nqe, g_q_scale);

    float *outs[2];
    void *caches[2][2];
    for (int bi = 0; bi < 2; bi++) {
        pl_backend *b = bi ? be.cuda : be.ref;
        void *kc = put(b, NULL, cache_elems * esz), *vc = put(b, NULL, cache_elems * esz);
        void *dk = put(b, k, (size_t)n_store * kv_tok * 4), *dv = put(b, v, (size_t)n_store * kv_tok * 4);
        void *dslots = put(b, slots, (size_t)n_store * 8);
        cr_assert_eq(b->ops->kv_store(b, kc, vc, dk, dv, dslots, n_store, nkv, hd, bs), PL_OK,
                     "%s kv_store: %s", b->ops->name, pl_last_error());
        pl_attn_batch ab = {
            .n_seqs = ns,
            .n_tokens = n_q,
            .query_start = put(b, qstart, (size_t)(ns + 1) * 4),
            .context_lens = put(b, ctx, (size_t)ns * 4),
            .block_tables = put(b, att_tables, (size_t)ns * max_bps * 4),
            .max_blocks_per_seq = max_bps,
            .max_query_len = max_q,
            .max_context_len = max_ctx,
            .n_heads = nh,
            .n_kv_heads = nkv,
            .head_dim = hd,
            .block_size = bs,
            .scale = 1.f / sqrtf((float)hd),
            .sliding_window = window,
            .softcap = g_softcap,
        };
        float *dq = put(b, q, nqe * 4), *dout = put(b, NULL, nqe * 4);
        cr_assert_eq(b->ops->attention(b, dout, dq, kc, vc, &ab), PL_OK, "%s attention: %s",
                     b->ops->name, pl_last_error());
        outs[bi] = get_floats(b, dout, nqe);
        for (int c = 0; c < 2; c++) {
            caches[bi][c] = pl_malloc(cache_elems * esz);
            get(b, caches[bi][c], c ? vc : kc, cache_elems * esz);
        }
        void *to_free[] = {kc, vc, dk, dv, dslots, (void *)ab.query_start, (void *)ab.context_lens,
                           (void *)ab.block_tables, dq, dout};
        for (size_t i = 0; i < sizeof to_free / sizeof to_free[0]; i++) b->ops->free(b, to_free[i]);
    }
    char name[160];
    snprintf(name, sizeof name,
             "attention bs %d hd %d kv %d x%d seqs %d kv %s split %d/%d window %d", bs, hd, nkv,
             ac->group, ns, pl_dtype_name(kv), (int)mode, part_tokens, window);
    cr_assert(memcmp(caches[0][0], caches[1][0], cache_elems * esz) == 0, "%s: K caches differ",
              name);
    cr_assert(memcmp(caches[0][1], caches[1][1], cache_elems * esz) == 0, "%s: V caches differ",
              name);
    cr_assert(pl_allclose(name, outs[0], outs[1], nqe, TOL_ATTN_ATOL, TOL_ATTN_RTOL));
    const double e = pl_nmse(outs[0], outs[1], nqe);
    cr_assert(e < TOL_ATTN_NMSE, "%s: nmse %g", name, e);
    if (keep_cuda) {
        *keep_cuda = outs[1];
        outs[1] = NULL;
    }
    for (int bi = 0; bi < 2; bi++) {
        pl_free(outs[bi]);
        pl_free(caches[bi][0]);
        pl_free(caches[bi][1]);
    }
    pl_free(perm);
    pl_free(tables);
    pl_free(att_tables);
    pl_free(slots);
    pl_free(k);
    pl_free(v);
    pl_free(qstart);
    pl_free(ctx);
    pl_free(q);
    drop_backends(&be);
}

static void attention_run(const attn_case *ac, pl_dtype kv, pl_cuda_split_mode mode,
                          int part_tokens, uint64_t seed, float **keep_cuda) {
    attention_run_window(ac, 0, kv, mode, part_tokens, seed, keep_cuda);
}

static void attention_case(const attn_case *ac, pl_dtype kv, pl_cuda_split_mode mode,
                           int part_tokens, uint64_t seed) {
    attention_run(ac, kv, mode, part_tokens, seed, NULL);
}

Test(cuda_ops, attention_f16_unsplit) {
    for (size_t i = 0; i < sizeof k_attn_cases / sizeof k_attn_cases[0]; i++)
        attention_case(&k_attn_cases[i], PL_DTYPE_F16, PL_CUDA_SPLIT_NEVER, 512, 100 + i);
    PL_ASSERT_NO_LEAKS();
}

Test(cuda_ops, attention_f16_split_k) {
    /* partitions of 32 and 64 tokens: contexts 33..200 cross 1 to 6 partition boundaries */
    for (size_t i = 0; i < sizeof k_attn_cases / sizeof k_attn_cases[0]; i++)
        attention_case(&k_attn_cases[i], PL_DTYPE_F16, PL_CUDA_SPLIT_ALWAYS, i % 2 ? 64 : 32,
                       200 + i);
    PL_ASSERT_NO_LEAKS();
}

/* More split-K partitions than 48 KiB of shared memory held weights for (12,288 of them): the
 * reduce kernel used to stage every partition's weight in dynamic shared memory, a launch a
 * GPU refuses without an opt-in (the forced split was refused here as well). One decode
 * sequence of 393,600 tokens in 32-token partitions: 12,300 of them. */
Test(cuda_ops, attention_split_k_past_48k_of_partition_weights, .timeout = 240) {
    const attn_case ac = {16, 8, 1, 1, 1, {393600}, {1}};
    attention_case(&ac, PL_DTYPE_F16, PL_CUDA_SPLIT_ALWAYS, 32, 500);
    PL_ASSERT_NO_LEAKS();
}

Test(cuda_ops, attention_bf16_and_f32_cache) {
    const size_t pick[] = {0, 6, 9, 14};
    for (size_t i = 0; i < 4; i++) {
        attention_case(&k_attn_cases[pick[i]], PL_DTYPE_BF16, PL_CUDA_SPLIT_ALWAYS, 32, 300 + i);
        attention_case(&k_attn_cases[pick[i]], PL_DTYPE_F32, PL_CUDA_SPLIT_AUTO, 512, 400 + i);
    }
    PL_ASSERT_NO_LEAKS();
}

/* The default policy (PL_CUDA_SPLIT_AUTO, 512-token partitions) on contexts longer than one
 * partition with few (head, sequence) blocks: the backend must choose split-K by itself.
 * Besides matching ref, AUTO's output must be bit-identical to forced split-K with the same
 * 512-token partitions and differ from the unsplit kernel's somewhere (the partitions' sums are
 * combined in another order, which changes the last bits of some outputs; the inputs are fixed,
 * so this is deterministic), so the test cannot pass with AUTO silently running unsplit.
 * The rule also wants n_seqs * n_heads < 4 x SMs: at most 12 blocks here, under the emulated
 * device's 64 and any real GPU's (3 SMs or more). Contexts of at most 512 tokens never split. */
static const attn_case k_auto_split_cases[] = {
    {16, 128, 1, 4, 2, {700, 1300}, {1, 1}},           /* 2 and 3 partitions, GQA 4 */
    {16, 64, 2, 2, 3, {513, 1300, 40}, {1, 1, 1}},     /* one token past a partition; short seq */
    {16, 80, 1, 2, 3, {1100, 600, 300}, {1, 30, 1}},   /* mixed: a prefill chunk at 570..599 */
};

static bool bitwise_equal(const float *a, const float *b, size_t n) {
    return memcmp(a, b, n * sizeof(float)) == 0;
}

static size_t attn_out_floats(const attn_case *ac) {
    size_t n_q = 0;
    for (int s = 0; s < ac->n_seqs; s++) n_q += (size_t)ac->qlen[s];
    return n_q * (size_t)ac->n_kv_heads * (size_t)ac->group * (size_t)ac->head_dim;
}

Test(cuda_ops, attention_auto_split_on_long_contexts) {
    for (size_t i = 0; i < sizeof k_auto_split_cases / sizeof k_auto_split_cases[0]; i++) {
        const attn_case *ac = &k_auto_split_cases[i];
        const uint64_t seed = 500 + i;
        const size_t n = attn_out_floats(ac);
        float *automatic = NULL, *split = NULL, *unsplit = NULL;
        attention_run(ac, PL_DTYPE_F16, PL_CUDA_SPLIT_AUTO, 512, seed, &automatic);
        attention_run(ac, PL_DTYPE_F16, PL_CUDA_SPLIT_ALWAYS, 512, seed, &split);
        attention_run(ac, PL_DTYPE_F16, PL_CUDA_SPLIT_NEVER, 512, seed, &unsplit);
        cr_assert(bitwise_equal(automatic, split, n),
                  "case %zu: AUTO differs from forced split-K at 512 tokens", i);
        cr_assert(!bitwise_equal(automatic, unsplit, n),
                  "case %zu: AUTO is bit-identical to the unsplit kernel: split-K not taken", i);
        pl_free(automatic);
        pl_free(split);
        pl_free(unsplit);
    }
    /* a context of exactly one partition: AUTO runs unsplit */
    const attn_case one = {16, 128, 1, 4, 2, {500, 512}, {1, 1}};
    const size_t n = attn_out_floats(&one);
    float *automatic = NULL, *unsplit = NULL;
    attention_run(&one, PL_DTYPE_F16, PL_CUDA_SPLIT_AUTO, 512, 600, &automatic);
    attention_run(&one, PL_DTYPE_F16, PL_CUDA_SPLIT_NEVER, 512, 600, &unsplit);
    cr_assert(bitwise_equal(automatic, unsplit, n), "512 tokens: AUTO must not split");
    pl_free(automatic);
    pl_free(unsplit);
    PL_ASSERT_NO_LEAKS();
}

// ---------------------------------------------------------------------------------------------
// Sliding window

typedef struct {
    attn_case c;
    int window;
} window_case;

static const window_case k_window_cases[] = {
    /* decode: window 1; under a block; not a multiple of the block; several blocks */
    {{16, 64, 2, 4, 3, {1, 37, 200}, {1, 1, 1}}, 1},
    {{8, 128, 1, 8, 2, {65, 130}, {1, 1}}, 5},
    {{32, 80, 2, 2, 2, {33, 96}, {1, 1}}, 37},
    {{16, 17, 3, 1, 2, {19, 150}, {1, 1}}, 50},
    {{16, 256, 1, 2, 2, {31, 170}, {1, 1}}, 100},
    /* prefill: rows whose windows start inside, at and before the chunk; generic head sizes */
    {{16, 64, 2, 2, 2, {40, 70}, {40, 20}}, 9},
    {{8, 17, 1, 4, 2, {33, 12}, {9, 12}}, 20},
    {{32, 128, 1, 1, 1, {90}, {90}}, 33},
    {{8, 256, 1, 2, 1, {70}, {17}}, 6},
    {{16, 300, 1, 1, 1, {60}, {41}}, 1},
    /* mixed decode + prefill in one batch */
    {{16, 64, 2, 4, 3, {50, 45, 77}, {1, 30, 1}}, 24},
    {{8, 80, 1, 8, 2, {5, 66}, {5, 1}}, 3},
};

Test(cuda_ops, attention_window_unsplit_and_split_k) {
    for (size_t i = 0; i < sizeof k_window_cases / sizeof k_window_cases[0]; i++) {
        const window_case *wc = &k_window_cases[i];
        attention_run_window(&wc->c, wc->window, PL_DTYPE_F16, PL_CUDA_SPLIT_NEVER, 512, 700 + i,
                             NULL);
        /* 32-token partitions: windows of 33..100 keys span 2-4 of them, counted from lo */
        attention_run_window(&wc->c, wc->window, PL_DTYPE_F16, PL_CUDA_SPLIT_ALWAYS, 32, 700 + i,
                             NULL);
    }
    const size_t pick[] = {1, 3, 6, 10};
    for (size_t i = 0; i < 4; i++) {
        const window_case *wc = &k_window_cases[pick[i]];
        attention_run_window(&wc->c, wc->window, PL_DTYPE_BF16, PL_CUDA_SPLIT_ALWAYS, 64,
                             800 + i, NULL);
        attention_run_window(&wc->c, wc->window, PL_DTYPE_F32, PL_CUDA_SPLIT_NEVER, 512, 900 + i,
                             NULL);
    }
    PL_ASSERT_NO_LEAKS();
}

/* Long contexts with a window under the default policy: the number of keys, min(context,
 * window), decides the split. 600 keys of 1300: two partitions starting at the window start
 * (bit-identical to forced split-K, not to unsplit); 512 keys: one partition, so no split. */
Test(cuda_ops, attention_window_long_context_split_choice) {
    const attn_case ac = {16, 128, 1, 4, 2, {700, 1300}, {1, 1}};
    const size_t n = attn_out_floats(&ac);
    float *automatic = NULL, *split = NULL, *unsplit = NULL;
    attention_run_window(&ac, 600, PL_DTYPE_F16, PL_CUDA_SPLIT_AUTO, 512, 1000, &automatic);
    attention_run_window(&ac, 600, PL_DTYPE_F16, PL_CUDA_SPLIT_ALWAYS, 512, 1000, &split);
    attention_run_window(&ac, 600, PL_DTYPE_F16, PL_CUDA_SPLIT_NEVER, 512, 1000, &unsplit);
    cr_assert(bitwise_equal(automatic, split, n), "window 600: AUTO differs from split-K");
    cr_assert(!bitwise_equal(automatic, unsplit, n), "window 600: AUTO did not split");
    pl_free(automatic);
    pl_free(split);
    pl_free(unsplit);
    attention_run_window(&ac, 512, PL_DTYPE_F16, PL_CUDA_SPLIT_AUTO, 512, 1001, &automatic);
    attention_run_window(&ac, 512, PL_DTYPE_F16, PL_CUDA_SPLIT_NEVER, 512, 1001, &unsplit);
    cr_assert(bitwise_equal(automatic, unsplit, n), "window 512: AUTO must not split");
    pl_free(automatic);
    pl_free(unsplit);
    /* forced 64-token partitions over a 200-key window ending at 1300 (lo = 1100) */
    attention_run_window(&ac, 200, PL_DTYPE_F16, PL_CUDA_SPLIT_ALWAYS, 64, 1002, NULL);
    PL_ASSERT_NO_LEAKS();
}

/* A window covering every context is no window, bit for bit, in each kernel and split mode. */
Test(cuda_ops, attention_window_covering_context_is_exact) {
    const attn_case cases[] = {
        {16, 64, 2, 4, 3, {50, 45, 77}, {1, 30, 1}}, /* mixed: decode and prefill kernels */
        {16, 128, 1, 4, 2, {700, 1300}, {1, 1}},     /* AUTO splits these */
    };
    const pl_cuda_split_mode modes[] = {PL_CUDA_SPLIT_NEVER, PL_CUDA_SPLIT_ALWAYS,
                                        PL_CUDA_SPLIT_AUTO};
    for (size_t ci = 0; ci < 2; ci++)
        for (size_t mi = 0; mi < 3; mi++) {
            const attn_case *ac = &cases[ci];
            int max_ctx = 0;
            for (int s = 0; s < ac->n_seqs; s++) max_ctx = ac->ctx[s] > max_ctx ? ac->ctx[s] : max_ctx;
            const int part = modes[mi] == PL_CUDA_SPLIT_AUTO ? 512 : 64;
            const size_t n = attn_out_floats(ac);
            float *plain = NULL, *at = NULL, *past = NULL;
            attention_run_window(ac, 0, PL_DTYPE_F16, modes[mi], part, 1100 + ci, &plain);
            attention_run_window(ac, max_ctx, PL_DTYPE_F16, modes[mi], part, 1100 + ci, &at);
            attention_run_window(ac, 1 << 30, PL_DTYPE_F16, modes[mi], part, 1100 + ci, &past);
            cr_assert(bitwise_equal(plain, at, n), "case %zu mode %d: window %d", ci,
                      (int)modes[mi], max_ctx);
            cr_assert(bitwise_equal(plain, past, n), "case %zu mode %d: window 2^30", ci,
                      (int)modes[mi]);
            pl_free(plain);
            pl_free(at);
            pl_free(past);
        }
    PL_ASSERT_NO_LEAKS();
}

Test(cuda_ops, copy_blocks_every_layer) {
    const pl_dtype types[] = {PL_DTYPE_F16, PL_DTYPE_F32};
    /* layers, blocks, kv heads, block_size, head_dim: the second has 34-byte blocks in f16,
     * which takes the byte-copy path */
    const int shapes[][5] = {{3, 6, 2, 8, 16}, {2, 5, 1, 1, 17}};
    for (int ti = 0; ti < 2; ti++)
        for (int si = 0; si < 2; si++) {
            backends b = make_backends(types[ti]);
            pl_kv_layout lay = {shapes[si][0], shapes[si][1], shapes[si][2], shapes[si][3],
                                shapes[si][4], types[ti]};
            const size_t bytes = 2 * (size_t)lay.n_layers * pl_kv_layer_elems(&lay) *
                                 pl_dtype_size(types[ti]);
            unsigned char *init = pl_malloc(bytes), *want = pl_malloc(bytes), *got = pl_malloc(bytes);
            pl_test_rng r;
            pl_test_rng_seed(&r, 7 + (uint64_t)si);
            for (size_t i = 0; i < bytes; i++) init[i] = (unsigned char)pl_test_rng_u64(&r);
            const int32_t pairs[] = {0, 4, 2, 1, 3, 3};
            const int n_pairs = 3;
            void *rc = put(b.ref, init, bytes), *cc = put(b.cuda, init, bytes);
            int32_t *dp = put(b.cuda, pairs, sizeof pairs);
            cr_assert_eq(b.ref->ops->copy_blocks(b.ref, rc, &lay, pairs, n_pairs), PL_OK, "%s",
                         pl_last_error());
            cr_assert_eq(b.cuda->ops->copy_blocks(b.cuda, cc, &lay, dp, n_pairs), PL_OK, "%s",
                         pl_last_error());
            get(b.ref, want, rc, bytes);
            get(b.cuda, got, cc, bytes);
            cr_assert(memcmp(want, got, bytes) == 0, "copy_blocks %s shape %d",
                      pl_dtype_name(types[ti]), si);
            cr_assert(memcmp(want, init, bytes) != 0, "the copy changed something");
            b.ref->ops->free(b.ref, rc);
            b.cuda->ops->free(b.cuda, cc);
            b.cuda->ops->free(b.cuda, dp);
            pl_free(init);
            pl_free(want);
            pl_free(got);
            drop_backends(&b);
        }
    PL_ASSERT_NO_LEAKS();
}

// ---------------------------------------------------------------------------------------------
// Gemma: the attention soft-cap, gelu_mul, scale

/* Scores of q scaled by 4 reach tens: a cap of 3 bends every one of them, on the decode
 * kernel (split and not) and the prefill kernel, with and without a window. */
Test(cuda_ops, attention_softcap) {
    g_softcap = 3.0f, g_q_scale = 4.0f;
    for (size_t i = 0; i < sizeof k_window_cases / sizeof k_window_cases[0]; i += 2) {
        const window_case *wc = &k_window_cases[i];
        attention_run_window(&wc->c, wc->window, PL_DTYPE_F16, PL_CUDA_SPLIT_NEVER, 512, 900 + i,
                             NULL);
        attention_run_window(&wc->c, 0, PL_DTYPE_F16, PL_CUDA_SPLIT_ALWAYS, 32, 900 + i, NULL);
    }
    g_softcap = 0.0f, g_q_scale = 1.0f;
    PL_ASSERT_NO_LEAKS();
}

Test(cuda_ops, gelu_mul_and_scale) {
    backends b = make_backends(PL_DTYPE_F16);
    pl_test_rng r;
    pl_test_rng_seed(&r, 93);
    const size_t sizes[] = {1, 1000, 100003};
    for (size_t si = 0; si < 3; si++) {
        const size_t n = sizes[si];
        float *g = rand_floats(&r, n, 8.f), *u = rand_floats(&r, n, 2.f);
        float *want = pl_malloc(n * 4);
        cr_assert_eq(b.ref->ops->gelu_mul(b.ref, want, g, u, n), PL_OK);
        float *dg = put(b.cuda, g, n * 4), *du = put(b.cuda, u, n * 4);
        cr_assert_eq(b.cuda->ops->gelu_mul(b.cuda, dg, dg, du, n), PL_OK, "out aliases gate");
        float *got = get_floats(b.cuda, dg, n);
        cr_assert(pl_allclose("gelu_mul", want, got, n, TOL_SILU_ATOL, TOL_SILU_RTOL));
        pl_free(got);
        for (int capped = 0; capped < 2; capped++) {
            const float cap = capped ? 5.f : 0.f;
            memcpy(want, g, n * 4);
            cr_assert_eq(b.ref->ops->scale(b.ref, want, n, 3.f, cap), PL_OK);
            float *dx = put(b.cuda, g, n * 4);
            cr_assert_eq(b.cuda->ops->scale(b.cuda, dx, n, 3.f, cap), PL_OK);
            got = get_floats(b.cuda, dx, n);
            cr_assert(pl_allclose("scale", want, got, n, TOL_SILU_ATOL, TOL_SILU_RTOL));
            pl_free(got);
            b.cuda->ops->free(b.cuda, dx);
        }
        pl_free(g), pl_free(u), pl_free(want);
        b.cuda->ops->free(b.cuda, dg);
        b.cuda->ops->free(b.cuda, du);
    }
    drop_backends(&b);
    PL_ASSERT_NO_LEAKS();
}

// ---------------------------------------------------------------------------------------------
// Mixture of experts

Test(cuda_ops, moe_route_ties_and_nan) {
    backends b = make_backends(PL_DTYPE_F16);
    pl_test_rng r;
    pl_test_rng_seed(&r, 94);
    /* 70 experts (more than a warp's lanes: each lane scans several), 9 tokens with ties
     * planted between experts in different lanes and a NaN */
    const int T = 9, E = 70, K = 4;
    float *l = rand_floats(&r, (size_t)T * E, 3.f);
    l[0 * E + 5] = l[0 * E + 37] = l[0 * E + 69] = 9.f; /* a three-way tie: 5, 37, 69 */
    l[1 * E + 3] = NAN;
    l[2 * E + 64] = l[2 * E + 0] = 8.f;
    for (int norm = 0; norm < 2; norm++) {
        int32_t want_ids[36], got_ids[36];
        float want_w[36];
        cr_assert_eq(b.ref->ops->moe_route(b.ref, want_ids, want_w, l, T, E, K, norm), PL_OK);
        cr_assert(want_ids[0] == 5 && want_ids[1] == 37 && want_ids[2] == 69, "ties in order");
        cr_assert(want_ids[2 * K] == 0 && want_ids[2 * K + 1] == 64);
        float *dl = put(b.cuda, l, (size_t)T * E * 4);
        int32_t *di = put(b.cuda, NULL, sizeof got_ids);
        float *dw = put(b.cuda, NULL, sizeof want_w);
        cr_assert_eq(b.cuda->ops->moe_route(b.cuda, di, dw, dl, T, E, K, norm), PL_OK, "%s",
                     pl_last_error());
        get(b.cuda, got_ids, di, sizeof got_ids);
        float *got_w = get_floats(b.cuda, dw, (size_t)T * K);
        cr_assert(memcmp(want_ids, got_ids, sizeof got_ids) == 0, "moe_route ids");
        /* a NaN logit makes its token's softmax NaN on both (the router's output is garbage,
         * and stays visibly so); the others agree */
        for (int j = 0; j < K; j++) {
            cr_assert(isnan(want_w[K + j]) && isnan(got_w[K + j]), "token 1 weight %d", j);
            want_w[K + j] = got_w[K + j] = 0.f;
        }
        cr_assert(pl_allclose("moe_route weights", want_w, got_w, (size_t)T * K, 1e-6f, 1e-5f));
        pl_free(got_w);
        b.cuda->ops->free(b.cuda, dl);
        b.cuda->ops->free(b.cuda, di);
        b.cuda->ops->free(b.cuda, dw);
    }
    pl_free(l);
    drop_backends(&b);
    PL_ASSERT_NO_LEAKS();
}

/* The grouped expert products on a stack of E matrices uploaded as the runner does, slots from
 * ids; ref computes each slot with the weights and activations the device multiplies (f16
 * weights: x rounded to f16; quantised and f32: x as it is; f32 weights are stored f16). */
static void moe_matmul_case(backends *b, pl_test_rng *r, pl_wtype t, int T, int K, int E,
                            int x_div, int d_in, int d_out, const int32_t *ids) {
    const int S = T * K, n_x = S / x_div;
    const size_t nw = (size_t)E * d_out * d_in, nx = (size_t)n_x * d_in, no = (size_t)S * d_out;
    float *wv = NULL, *x = rand_floats(r, nx, 1.f);
    void *w;
    if (pl_wtype_is_quant(t)) {
        w = rand_quant(r, t, nw, &wv);
    } else {
        wv = rand_floats(r, nw, 1.f);
        w = t == PL_WTYPE_F32 ? (void *)wv : (void *)to_16(wv, nw, pl_wtype_dtype(t));
    }
    void *dw = NULL;
    pl_wtype st = PL_WTYPE_NONE;
    cr_assert_eq(b->cuda->ops->upload_weight(b->cuda, w, t, nw, &dw, &st), PL_OK, "%s",
                 pl_last_error());
    /* what the device holds and multiplies, as f32 / the stored type for ref */
    const void *rw = w;
    pl_wtype rt = t;
    uint16_t *w16 = NULL;
    float *xr = pl_malloc(nx * 4);
    memcpy(xr, x, nx * 4);
    if (st == PL_WTYPE_F16 || st == PL_WTYPE_BF16) {
        if (t == PL_WTYPE_F32) rw = w16 = to_16(wv, nw, PL_DTYPE_F16), rt = PL_WTYPE_F16;
        for (size_t i = 0; i < nx; i++)
            xr[i] = st == PL_WTYPE_F16 ? pl_f16_to_f32(pl_f32_to_f16(x[i]))
                                       : pl_bf16_to_f32(pl_f32_to_bf16(x[i]));
    }
    float *want = pl_malloc(no * 4);
    pl_matmul_part rp = {want, rw, rt, d_out};
    cr_assert_eq(b->ref->ops->moe_matmul(b->ref, &rp, 1, xr, x_div, ids, S, E, d_in), PL_OK);
    float *dx = put(b->cuda, x, nx * 4), *dout = put(b->cuda, NULL, no * 4);
    int32_t *dids = put(b->cuda, ids, (size_t)S * 4);
    pl_matmul_part cp = {dout, dw, st, d_out};
    cr_assert_eq(b->cuda->ops->moe_matmul(b->cuda, &cp, 1, dx, x_div, dids, S, E, d_in), PL_OK,
                 "%s", pl_last_error());
    float *got = get_floats(b->cuda, dout, no);
    char name[96];
    snprintf(name, sizeof name, "moe_matmul %s %d tokens x %d of %d, x_div %d, %d->%d",
             pl_wtype_name(t), T, K, E, x_div, d_in, d_out);
    cr_assert(pl_allclose(name, want, got, no, TOL_MATMUL_F32_ATOL, TOL_MATMUL_F32_RTOL));
    pl_free(got), pl_free(want), pl_free(xr), pl_free(x);
    if (w != wv) pl_free(w);
    pl_free(wv), pl_free(w16);
    b->cuda->ops->free(b->cuda, dx);
    b->cuda->ops->free(b->cuda, dout);
    b->cuda->ops->free(b->cuda, dids);
    b->cuda->ops->free_weight(b->cuda, dw, NULL);
}

Test(cuda_ops, moe_matmul_grouped) {
    backends b = make_backends(PL_DTYPE_F16);
    pl_test_rng r;
    pl_test_rng_seed(&r, 95);
    /* decode (2 slots of different experts), 3 tokens sharing experts, 12 tokens on one
     * expert (two chunks of 8 rows), every slot of 20 spread over 9 experts (some unused) */
    int32_t ids[40];
    const int32_t dec[2] = {6, 1}, three[6] = {2, 0, 0, 2, 1, 2};
    const pl_wtype types[] = {PL_WTYPE_F32, PL_WTYPE_F16, PL_WTYPE_BF16, PL_WTYPE_Q8_0,
                              PL_WTYPE_Q4_0, PL_WTYPE_Q4_K, PL_WTYPE_Q5_K, PL_WTYPE_Q6_K};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const pl_wtype t = types[ti];
        const int d_in = pl_wtype_traits_of(t)->block_elems == 256 ? 256 : 96;
        moe_matmul_case(&b, &r, t, 1, 2, 8, 2, d_in, 13, dec);
        moe_matmul_case(&b, &r, t, 3, 2, 3, 2, d_in, 9, three);
        moe_matmul_case(&b, &r, t, 3, 2, 3, 1, d_in, 9, three);
        for (int i = 0; i < 12; i++) ids[i] = 4;
        moe_matmul_case(&b, &r, t, 12, 1, 5, 1, d_in, 6, ids);
        for (int i = 0; i < 20; i++) ids[i] = (int32_t)((i * 7) % 9 == 4 ? 0 : (i * 7) % 9);
        moe_matmul_case(&b, &r, t, 10, 2, 9, 2, d_in, 17, ids);
    }
    drop_backends(&b);
    PL_ASSERT_NO_LEAKS();
}

Test(cuda_ops, moe_combine) {
    backends b = make_backends(PL_DTYPE_F16);
    pl_test_rng r;
    pl_test_rng_seed(&r, 96);
    const int T = 7, K = 3, D = 45;
    float *y = rand_floats(&r, (size_t)T * K * D, 1.f), *w = rand_floats(&r, (size_t)T * K, 1.f);
    float *sh = rand_floats(&r, (size_t)T * D, 1.f), *g = rand_floats(&r, (size_t)T, 4.f);
    float *want = pl_malloc((size_t)T * D * 4);
    float *dy = put(b.cuda, y, (size_t)T * K * D * 4), *dw = put(b.cuda, w, (size_t)T * K * 4);
    float *dsh = put(b.cuda, sh, (size_t)T * D * 4), *dg = put(b.cuda, g, (size_t)T * 4);
    float *dout = put(b.cuda, NULL, (size_t)T * D * 4);
    for (int with = 0; with < 2; with++) {
        cr_assert_eq(b.ref->ops->moe_combine(b.ref, want, y, w, T, K, D, with ? sh : NULL, g),
                     PL_OK);
        cr_assert_eq(b.cuda->ops->moe_combine(b.cuda, dout, dy, dw, T, K, D, with ? dsh : NULL,
                                              dg), PL_OK);
        float *got = get_floats(b.cuda, dout, (size_t)T * D);
        cr_assert(pl_allclose("moe_combine", want, got, (size_t)T * D, 1e-6f, 1e-5f));
        pl_free(got);
    }
    void *bufs[] = {dy, dw, dsh, dg, dout};
    for (int i = 0; i < 5; i++) b.cuda->ops->free(b.cuda, bufs[i]);
    pl_free(y), pl_free(w), pl_free(sh), pl_free(g), pl_free(want);
    drop_backends(&b);
    PL_ASSERT_NO_LEAKS();
}
