/*
 * tests/kernels/test_attention.c - the paged-KV ops: kv_store, attention and copy_blocks,
 * every cpu variant against ref, with f32 and f16 caches (the cpu backend stores no bf16 KV;
 * ref's bf16 attention is checked against the CUDA kernels in tests/cuda).
 *
 * Each scenario builds one layer's cache with block ids shuffled (a sequence's blocks are not
 * contiguous), block-table entries past a sequence's blocks set to an invalid id (they must
 * never be read), fills it with kv_store from a batch with padded (negative) slots, then runs
 * one attention batch: decodes at contexts on and across block boundaries, whole prefills, and
 * prefill chunks that also attend to earlier context, mixed in one batch.
 *
 * Sliding windows: the same scenarios with windows of 1, under a block, not a multiple of the
 * block, over several blocks, past a 128-key tile of the cpu kernels, and covering every
 * context. The blocks of a sequence that lie wholly before its first row's window are given
 * an invalid id in the table attention reads (kv_store wrote them), so a backend that reads
 * them instead of skipping them crashes; a window covering every context must give the bits
 * of no window; ref itself is checked against attention computed here from the f32 inputs.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/kernels/kernels_test.h"
#include "util/dtype.h"

#define MAX_SEQS 6

typedef struct scenario {
    int n_seqs;
    int q_len[MAX_SEQS];
    int ctx[MAX_SEQS];
    int window; /* batch.sliding_window */
} scenario;

#define POISON_BLOCK (-12345) /* a block id no backend may read */

typedef struct shape {
    int n_heads, n_kv_heads, head_dim, block_size;
} shape;

static int cdiv(int a, int b) { return (a + b - 1) / b; }

/* attention on be into out (nq floats); when the window covers every context, also without
 * a window, which must give the same bits. */
static void attend(pl_backend *be, const char *name, float *out, const float *q, const void *kc,
                   const void *vc, pl_attn_batch *batch, size_t nq) {
    memset(out, 0xff, nq * 4);
    cr_assert_eq(be->ops->attention(be, out, q, kc, vc, batch), PL_OK, "%s: %s", name,
                 pl_last_error());
    int w = batch->sliding_window;
    if (w == 0 || w < batch->max_context_len) return;
    float *plain = malloc(nq * 4);
    memset(plain, 0xff, nq * 4);
    batch->sliding_window = 0;
    cr_assert_eq(be->ops->attention(be, plain, q, kc, vc, batch), PL_OK);
    batch->sliding_window = w;
    cr_assert(memcmp(out, plain, nq * 4) == 0,
              "%s: window %d >= max_context_len %d is not bit-identical to no window", name, w,
              batch->max_context_len);
    free(plain);
}

/* Runs one scenario on every backend of e and compares caches and outputs with ref. */
static void run_scenario(pl_kt_env *e, const shape *sh, const scenario *sc, pl_test_rng *r,
                         float q_scale, pl_tol tol) {
    const int hd = sh->head_dim, nkv = sh->n_kv_heads, nh = sh->n_heads, bs = sh->block_size;
    pl_dtype kvt = e->ref->kv_dtype;
    size_t esize = pl_dtype_size(kvt);

    /* block tables over shuffled block ids */
    int max_blocks = 1, n_blocks = 3; /* 3 spare blocks are never used */
    for (int s = 0; s < sc->n_seqs; s++) {
        int nb = cdiv(sc->ctx[s], bs);
        n_blocks += nb;
        if (nb + 1 > max_blocks) max_blocks = nb + 1;
    }
    int32_t *perm = malloc((size_t)n_blocks * sizeof *perm);
    for (int i = 0; i < n_blocks; i++) perm[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) {
        int j = (int)pl_test_rng_below(r, (uint32_t)i + 1);
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int32_t *tables = malloc((size_t)sc->n_seqs * max_blocks * sizeof *tables);
    int next = 0;
    for (int s = 0; s < sc->n_seqs; s++)
        for (int b = 0; b < max_blocks; b++)
            tables[s * max_blocks + b] = b < cdiv(sc->ctx[s], bs) ? perm[next++] : -12345;

    /* keys/values for every position of every sequence, stored with padding slots between */
    int n_store = 0;
    for (int s = 0; s < sc->n_seqs; s++) n_store += sc->ctx[s] + 1;
    float *k = pl_kt_rand(r, (size_t)n_store * nkv * hd, 1.0f);
    float *v = pl_kt_rand(r, (size_t)n_store * nkv * hd, 1.0f);
    int64_t *slots = malloc((size_t)n_store * sizeof *slots);
    int i = 0;
    for (int s = 0; s < sc->n_seqs; s++) {
        slots[i++] = -1; /* padding */
        for (int t = 0; t < sc->ctx[s]; t++)
            slots[i++] = (int64_t)tables[s * max_blocks + t / bs] * bs + t % bs;
    }

    /* one layer of cache per backend */
    size_t layer = (size_t)n_blocks * nkv * bs * hd, bytes = layer * esize;
    unsigned char *ref_k, *ref_v;
    cr_assert_eq(e->ref->ops->alloc(e->ref, bytes, (void **)&ref_k), PL_OK);
    cr_assert_eq(e->ref->ops->alloc(e->ref, bytes, (void **)&ref_v), PL_OK);
    cr_assert_eq(e->ref->ops->kv_store(e->ref, ref_k, ref_v, k, v, slots, n_store, nkv, hd, bs),
                 PL_OK);

    /* the query batch */
    int32_t qs[MAX_SEQS + 1] = {0}, cl[MAX_SEQS];
    int max_q = 0, max_ctx = 0;
    for (int s = 0; s < sc->n_seqs; s++) {
        qs[s + 1] = qs[s] + sc->q_len[s];
        cl[s] = sc->ctx[s];
        if (sc->q_len[s] > max_q) max_q = sc->q_len[s];
        if (sc->ctx[s] > max_ctx) max_ctx = sc->ctx[s];
    }
    int n_tok = qs[sc->n_seqs];
    /* attention's block tables: blocks wholly before a sequence's first window poisoned */
    int32_t *att_tables = malloc((size_t)sc->n_seqs * max_blocks * sizeof *att_tables);
    memcpy(att_tables, tables, (size_t)sc->n_seqs * max_blocks * sizeof *att_tables);
    for (int s = 0; s < sc->n_seqs; s++) {
        int first = pl_attn_window_start(sc->ctx[s] - sc->q_len[s], sc->window);
        for (int b = 0; (b + 1) * bs <= first; b++) att_tables[s * max_blocks + b] = POISON_BLOCK;
    }
    pl_attn_batch batch = {.n_seqs = sc->n_seqs, .n_tokens = n_tok, .query_start = qs,
                           .context_lens = cl, .block_tables = att_tables,
                           .max_blocks_per_seq = max_blocks, .max_query_len = max_q,
                           .max_context_len = max_ctx, .n_heads = nh, .n_kv_heads = nkv,
                           .head_dim = hd, .block_size = bs, .scale = 1.0f / sqrtf((float)hd),
                           .sliding_window = sc->window};
    size_t nq = (size_t)n_tok * nh * hd;
    float *q = pl_kt_rand(r, nq, q_scale);
    float *want = malloc(nq * 4), *got = malloc(nq * 4);
    attend(e->ref, "ref", want, q, ref_k, ref_v, &batch, nq);

    for (int b = 0; b < e->n_cpu; b++) {
        pl_backend *be = e->cpu[b];
        unsigned char *ck, *cv;
        cr_assert_eq(be->ops->alloc(be, bytes, (void **)&ck), PL_OK);
        cr_assert_eq(be->ops->alloc(be, bytes, (void **)&cv), PL_OK);
        cr_assert_eq(be->ops->kv_store(be, ck, cv, k, v, slots, n_store, nkv, hd, bs), PL_OK);
        cr_assert(memcmp(ck, ref_k, bytes) == 0 && memcmp(cv, ref_v, bytes) == 0,
                  "%s kv_store: cache differs from ref (%s, hd %d bs %d)", e->name[b],
                  pl_dtype_name(kvt), hd, bs);
        attend(be, e->name[b], got, q, ck, cv, &batch, nq);
        cr_assert(pl_kt_close(e->name[b], want, got, nq, tol),
                  "attention %s heads %d/%d hd %d bs %d, %d seqs (first q_len %d ctx %d), "
                  "window %d",
                  pl_dtype_name(kvt), nh, nkv, hd, bs, sc->n_seqs, sc->q_len[0], sc->ctx[0],
                  sc->window);
        be->ops->free(be, ck);
        be->ops->free(be, cv);
    }
    e->ref->ops->free(e->ref, ref_k);
    e->ref->ops->free(e->ref, ref_v);
    free(perm), free(tables), free(att_tables), free(k), free(v), free(slots), free(q);
    free(want), free(got);
}

static void sweep(pl_dtype kvt) {
    pl_kt_env e;
    pl_kt_env_init(&e, kvt);
    pl_test_rng r;
    pl_test_rng_seed(&r, 40 + (uint64_t)kvt);
    const int HEAD_DIMS[] = {8, 17, 64, 80, 128};
    /* 3: an odd group, whose last head goes through the kernels alone */
    const int RATIOS[] = {1, 2, 3, 4, 8};
    const int BLOCKS[] = {1, 8, 16, 32};
    for (int hi = 0; hi < 5; hi++)
        for (int gi = 0; gi < 5; gi++) {
            int bs = BLOCKS[(hi + gi) % 4];
            shape sh = {.n_heads = 2 * RATIOS[gi], .n_kv_heads = 2, .head_dim = HEAD_DIMS[hi],
                        .block_size = bs};
            /* decodes: first position, at, just past and well past block boundaries and
             * across the cpu's 128-key tiles */
            scenario decode = {5, {1, 1, 1, 1, 1}, {1, bs, bs + 1, 37, 300}, 0};
            /* whole prompts, no earlier context */
            scenario prefill = {2, {19, 45}, {19, 45}, 0};
            /* a chunk after earlier context, decodes, and a fresh prompt in one batch */
            scenario mixed = {4, {40, 1, 7, 1}, {170, 129, 7, 1}, 0};
            run_scenario(&e, &sh, &decode, &r, 1.0f, TOL_ATTENTION);
            run_scenario(&e, &sh, &prefill, &r, 1.0f, TOL_ATTENTION);
            run_scenario(&e, &sh, &mixed, &r, 3.0f, TOL_ATTENTION); /* peakier softmax */
        }
    /* one KV head for all query heads (MQA) */
    shape mqa = {.n_heads = 8, .n_kv_heads = 1, .head_dim = 64, .block_size = 16};
    scenario mixed = {3, {33, 1, 1}, {80, 17, 16}, 0};
    run_scenario(&e, &mqa, &mixed, &r, 1.0f, TOL_ATTENTION);
    /* scores tens apart: most softmax weights underflow (the cpu exp flushes them to 0) */
    run_scenario(&e, &mqa, &mixed, &r, 40.0f, TOL_ATTENTION_PEAKY);
    pl_kt_env_fini(&e);
}

Test(attention, f32_cache) {
    sweep(PL_DTYPE_F32);
    PL_ASSERT_NO_LEAKS();
}

Test(attention, f16_cache) {
    sweep(PL_DTYPE_F16);
    PL_ASSERT_NO_LEAKS();
}

/* Sliding windows over the shapes (head sizes, GQA ratios 1/3/4/8, block sizes 1-32) and
 * scenarios of sweep(), decodes, prefills and chunks mixed. */
/* A row's output has the same bits whatever chunk it comes in: the whole prompt at once, in
 * chunks of 37 rows after the earlier ones' context, or one row at a time as decodes (the cpu
 * kernels group a chunk's rows, which see different numbers of keys; prefix caching and
 * chunked prefill rely on rows not depending on their neighbours). One sequence of 300
 * positions, blocks in order, MHA and a group of 3. Without a window only: with one, a unit's
 * key tiles start at its first row's window, so the online softmax's steps (and roundings)
 * move with the chunk. */
static void chunk_invariance(pl_dtype kvt) {
    pl_kt_env e;
    pl_kt_env_init(&e, kvt);
    pl_test_rng r;
    pl_test_rng_seed(&r, 77 + (uint64_t)kvt);
    enum { CTX = 300, BS = 16, HD = 64, NKV = 2 };
    const int GROUPS[] = {1, 3}, CHUNKS[] = {CTX, 37, 1};
    int n_blocks = cdiv(CTX, BS);
    int32_t table[32];
    int64_t slots[CTX];
    for (int b = 0; b < n_blocks; b++) table[b] = b;
    for (int t = 0; t < CTX; t++) slots[t] = t;
    float *k = pl_kt_rand(&r, (size_t)CTX * NKV * HD, 1.0f);
    float *v = pl_kt_rand(&r, (size_t)CTX * NKV * HD, 1.0f);
    for (int gi = 0; gi < 2; gi++) {
        int nh = NKV * GROUPS[gi];
        size_t row = (size_t)nh * HD, nq = CTX * row;
        float *q = pl_kt_rand(&r, nq, 2.0f), *want = malloc(nq * 4), *got = malloc(nq * 4);
        for (int c = 0; c < e.n_cpu; c++) {
            pl_backend *be = e.cpu[c];
            size_t bytes = (size_t)n_blocks * NKV * BS * HD * pl_dtype_size(kvt);
            void *kc, *vc;
            cr_assert_eq(be->ops->alloc(be, bytes, &kc), PL_OK);
            cr_assert_eq(be->ops->alloc(be, bytes, &vc), PL_OK);
            cr_assert_eq(be->ops->kv_store(be, kc, vc, k, v, slots, CTX, NKV, HD, BS), PL_OK);
            for (int ci = 0; ci < 3; ci++) {
                float *out = ci == 0 ? want : got;
                for (int j0 = 0; j0 < CTX; j0 += CHUNKS[ci]) {
                    int len = CTX - j0 < CHUNKS[ci] ? CTX - j0 : CHUNKS[ci];
                    int32_t qs[2] = {0, len}, cl[1] = {j0 + len};
                    pl_attn_batch b = {.n_seqs = 1, .n_tokens = len, .query_start = qs,
                                       .context_lens = cl, .block_tables = table,
                                       .max_blocks_per_seq = n_blocks,
                                       .max_query_len = len, .max_context_len = j0 + len,
                                       .n_heads = nh, .n_kv_heads = NKV, .head_dim = HD,
                                       .block_size = BS, .scale = 0.125f};
                    cr_assert_eq(be->ops->attention(be, out + j0 * row, q + j0 * row, kc,
                                                    vc, &b), PL_OK, "%s", pl_last_error());
                }
                if (ci == 0) continue;
                for (int j = 0; j < CTX; j++)
                    cr_assert(memcmp(want + j * row, got + j * row, row * 4) == 0,
                              "%s %s group %d: row %d in chunks of %d differs from the "
                              "whole prompt's", e.name[c], pl_dtype_name(kvt), GROUPS[gi],
                              j, CHUNKS[ci]);
            }
            be->ops->free(be, kc);
            be->ops->free(be, vc);
        }
        free(q), free(want), free(got);
    }
    free(k), free(v);
    pl_kt_env_fini(&e);
}

Test(attention, a_rows_bits_do_not_depend_on_its_chunk) {
    chunk_invariance(PL_DTYPE_F32);
    chunk_invariance(PL_DTYPE_F16);
}

static void sweep_window(pl_dtype kvt) {
    pl_kt_env e;
    pl_kt_env_init(&e, kvt);
    pl_test_rng r;
    pl_test_rng_seed(&r, 70 + (uint64_t)kvt);
    const shape SHAPES[] = {
        {.n_heads = 2, .n_kv_heads = 2, .head_dim = 8, .block_size = 1},
        {.n_heads = 6, .n_kv_heads = 2, .head_dim = 17, .block_size = 8},  /* odd group */
        {.n_heads = 8, .n_kv_heads = 2, .head_dim = 64, .block_size = 16}, /* GQA 4 */
        {.n_heads = 8, .n_kv_heads = 1, .head_dim = 128, .block_size = 32}, /* MQA */
        {.n_heads = 4, .n_kv_heads = 4, .head_dim = 80, .block_size = 16},
    };
    for (size_t si = 0; si < sizeof SHAPES / sizeof SHAPES[0]; si++) {
        const shape *sh = &SHAPES[si];
        int bs = sh->block_size;
        /* 1; under a block; not a multiple of it; several blocks; past one 128-key tile of the
         * cpu kernels; exactly the longest context below (300: no window, bit for bit) */
        const int WINDOWS[] = {1, bs > 2 ? bs / 2 : 2, bs + 3, 3 * bs + 7, 150, 300};
        for (int wi = 0; wi < 6; wi++) {
            int w = WINDOWS[wi];
            scenario decode = {5, {1, 1, 1, 1, 1}, {1, bs, bs + 1, 37, 300}, w};
            scenario prefill = {2, {19, 45}, {19, 45}, w};
            scenario mixed = {4, {40, 1, 7, 1}, {170, 129, 7, 1}, w};
            /* a chunk of 70 rows: three cpu row tiles at group 1, windows ending in each */
            scenario chunk = {2, {70, 1}, {300, 280}, w};
            run_scenario(&e, sh, &decode, &r, 1.0f, TOL_ATTENTION);
            run_scenario(&e, sh, &prefill, &r, 1.0f, TOL_ATTENTION);
            run_scenario(&e, sh, &mixed, &r, 3.0f, TOL_ATTENTION);
            run_scenario(&e, sh, &chunk, &r, 1.0f, TOL_ATTENTION);
        }
    }
    pl_kt_env_fini(&e);
}

Test(attention, window_f32_cache) {
    sweep_window(PL_DTYPE_F32);
    PL_ASSERT_NO_LEAKS();
}

Test(attention, window_f16_cache) {
    sweep_window(PL_DTYPE_F16);
    PL_ASSERT_NO_LEAKS();
}

/* ref's window rule against attention computed here, in double, from the f32 keys and values
 * (an f32 cache holds them exactly), one query row at a time: row at position p sees keys
 * max(0, p - W + 1) .. p. With W = 1 every backend must return V[p] exactly (one weight of 1).
 * The same with a soft-cap (each score becomes tanh(s / c) * c), every cpu variant too. */
Test(attention, window_oracle_and_width_one) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    pl_test_rng r;
    pl_test_rng_seed(&r, 80);
    const int nh = 4, nkv = 2, hd = 16, bs = 4, G = nh / nkv;
    /* a decode at 50, a chunk of 12 rows at positions 18..29, a fresh prompt of 6 */
    const int n_seqs = 3, q_len[3] = {1, 12, 6};
    int32_t ctx[3] = {50, 30, 6};
    int max_blocks = cdiv(50, bs), n_tok = 19;
    int32_t tables[3 * 13], qs[4] = {0, 1, 13, 19};
    int64_t slots[86];
    int n_store = 0;
    for (int s = 0; s < n_seqs; s++)
        for (int b = 0; b < max_blocks; b++)
            tables[s * max_blocks + b] = b < cdiv(ctx[s], bs) ? s * max_blocks + b : -1;
    for (int s = 0; s < n_seqs; s++)
        for (int t = 0; t < ctx[s]; t++)
            slots[n_store++] = (int64_t)tables[s * max_blocks + t / bs] * bs + t % bs;
    float *k = pl_kt_rand(&r, (size_t)n_store * nkv * hd, 1.0f);
    float *v = pl_kt_rand(&r, (size_t)n_store * nkv * hd, 1.0f);
    float *q = pl_kt_rand(&r, (size_t)n_tok * nh * hd, 2.0f);
    size_t nq = (size_t)n_tok * nh * hd, bytes = (size_t)n_seqs * max_blocks * nkv * bs * hd * 4;
    float *want = malloc(nq * 4), *got = malloc(nq * 4);
    const int WINDOWS[] = {1, 3, 4, 7, 13, 29, 0};
    /* each window also with Gemma 2's soft-cap, small enough to bite on q of scale 2 */
    for (int wi = 0; wi < 14; wi++) {
        int W = WINDOWS[wi % 7];
        float cap = wi >= 7 ? 2.5f : 0.0f;
        /* the oracle: store index of (s, t) is the sum of earlier contexts plus t */
        for (int s = 0, base = 0; s < n_seqs; base += ctx[s], s++)
            for (int j = 0; j < q_len[s]; j++) {
                int pos = ctx[s] - q_len[s] + j;
                int lo = W > 0 && pos - W + 1 > 0 ? pos - W + 1 : 0;
                for (int h = 0; h < nh; h++) {
                    const float *qh = q + ((size_t)(qs[s] + j) * nh + h) * hd;
                    double sc[64], mx = -INFINITY, sum = 0, acc[16] = {0};
                    for (int t = lo; t <= pos; t++) {
                        const float *kt = k + ((size_t)(base + t) * nkv + h / G) * hd;
                        double dot = 0;
                        for (int d = 0; d < hd; d++) dot += (double)qh[d] * kt[d];
                        sc[t - lo] = dot / sqrt((double)hd);
                        if (cap > 0.0f) sc[t - lo] = tanh(sc[t - lo] / cap) * cap;
                        mx = sc[t - lo] > mx ? sc[t - lo] : mx;
                    }
                    for (int t = lo; t <= pos; t++) {
                        double p = exp(sc[t - lo] - mx);
                        const float *vt = v + ((size_t)(base + t) * nkv + h / G) * hd;
                        sum += p;
                        for (int d = 0; d < hd; d++) acc[d] += p * vt[d];
                    }
                    for (int d = 0; d < hd; d++)
                        want[((size_t)(qs[s] + j) * nh + h) * hd + d] = (float)(acc[d] / sum);
                }
            }
        for (int b = -1; b < e.n_cpu; b++) {
            pl_backend *be = b < 0 ? e.ref : e.cpu[b];
            const char *name = b < 0 ? "ref" : e.name[b];
            void *kc, *vc;
            cr_assert_eq(be->ops->alloc(be, bytes, &kc), PL_OK);
            cr_assert_eq(be->ops->alloc(be, bytes, &vc), PL_OK);
            cr_assert_eq(be->ops->kv_store(be, kc, vc, k, v, slots, n_store, nkv, hd, bs), PL_OK);
            pl_attn_batch batch = {.n_seqs = n_seqs, .n_tokens = n_tok, .query_start = qs,
                                   .context_lens = ctx, .block_tables = tables,
                                   .max_blocks_per_seq = max_blocks, .max_query_len = 12,
                                   .max_context_len = 50, .n_heads = nh, .n_kv_heads = nkv,
                                   .head_dim = hd, .block_size = bs,
                                   .scale = (float)(1.0 / sqrt((double)hd)), .sliding_window = W,
                                   .softcap = cap};
            memset(got, 0xff, nq * 4);
            cr_assert_eq(be->ops->attention(be, got, q, kc, vc, &batch), PL_OK, "%s", pl_last_error());
            if (b < 0)
                cr_assert(pl_kt_close("ref vs oracle", want, got, nq, TOL_ORACLE),
                          "window %d softcap %g", W, (double)cap);
            else
                cr_assert(pl_kt_close(name, want, got, nq, TOL_ATTENTION), "window %d softcap %g",
                          W, (double)cap);
            if (W == 1) /* out = V[p], the exact f32 value, on every backend */
                cr_assert(memcmp(want, got, nq * 4) == 0, "%s: window 1 is not V[p]", name);
            be->ops->free(be, kc);
            be->ops->free(be, vc);
        }
    }
    free(k), free(v), free(q), free(want), free(got);
    pl_kt_env_fini(&e);
    PL_ASSERT_NO_LEAKS();
}

/* A negative window is refused, naming the field, by every backend. */
Test(attention, negative_window_is_invalid) {
    pl_kt_env e;
    pl_kt_env_init(&e, PL_DTYPE_F32);
    float buf[64] = {0};
    int32_t qs[2] = {0, 1}, cl[1] = {1}, table[1] = {0};
    pl_attn_batch batch = {.n_seqs = 1, .n_tokens = 1, .query_start = qs, .context_lens = cl,
                           .block_tables = table, .max_blocks_per_seq = 1, .max_query_len = 1,
                           .max_context_len = 1, .n_heads = 1, .n_kv_heads = 1, .head_dim = 8,
                           .block_size = 4, .scale = 1.0f, .sliding_window = -1};
    for (int b = -1; b < e.n_cpu; b++) {
        pl_backend *be = b < 0 ? e.ref : e.cpu[b];
        cr_assert_eq(be->ops->attention(be, buf, buf, buf, buf, &batch), PL_ERR_INVALID_ARGUMENT);
        cr_assert(strstr(pl_last_error(), "sliding_window"), "%s", pl_last_error());
    }
    batch.sliding_window = 0; /* the same batch is fine without the bad field */
    for (int b = -1; b < e.n_cpu; b++) {
        pl_backend *be = b < 0 ? e.ref : e.cpu[b];
        cr_assert_eq(be->ops->attention(be, buf + 32, buf, buf, buf, &batch), PL_OK, "%s",
                     pl_last_error());
    }
    pl_kt_env_fini(&e);
    PL_ASSERT_NO_LEAKS();
}

/* kv_store against the documented layout, computed here without either backend. */
Test(attention, kv_store_layout_and_padding) {
    for (int kv = 0; kv < 2; kv++) {
        pl_dtype t = kv ? PL_DTYPE_F16 : PL_DTYPE_F32;
        pl_kt_env e;
        pl_kt_env_init(&e, t);
        pl_test_rng r;
        pl_test_rng_seed(&r, 50);
        const int nkv = 3, hd = 17, bs = 8, n_blocks = 5, n = 6;
        float *k = pl_kt_rand(&r, (size_t)n * nkv * hd, 1.0f);
        float *v = pl_kt_rand(&r, (size_t)n * nkv * hd, 1.0f);
        int64_t slots[6] = {3 * 8 + 5, -1, 0, 4 * 8 + 7, -5, 1 * 8 + 0};
        size_t elems = (size_t)n_blocks * nkv * bs * hd, bytes = elems * pl_dtype_size(t);
        for (int b = -1; b < e.n_cpu; b++) {
            pl_backend *be = b < 0 ? e.ref : e.cpu[b];
            unsigned char *kc, *vc;
            cr_assert_eq(be->ops->alloc(be, bytes, (void **)&kc), PL_OK);
            cr_assert_eq(be->ops->alloc(be, bytes, (void **)&vc), PL_OK);
            memset(kc, 0x5a, bytes);
            memset(vc, 0x5a, bytes);
            cr_assert_eq(be->ops->kv_store(be, kc, vc, k, v, slots, n, nkv, hd, bs), PL_OK);
            unsigned char *expect = malloc(bytes);
            memset(expect, 0x5a, bytes);
            for (int i = 0; i < n; i++) {
                if (slots[i] < 0) continue;
                size_t block = (size_t)slots[i] / bs, off = (size_t)slots[i] % bs;
                for (int h = 0; h < nkv; h++)
                    for (int d = 0; d < hd; d++) {
                        size_t at = ((block * nkv + h) * bs + off) * hd + d;
                        float val = k[((size_t)i * nkv + h) * hd + d];
                        if (t == PL_DTYPE_F16) {
                            uint16_t hv = pl_f32_to_f16(val);
                            memcpy(expect + at * 2, &hv, 2);
                        } else {
                            memcpy(expect + at * 4, &val, 4);
                        }
                    }
            }
            cr_assert_eq(memcmp(kc, expect, bytes), 0, "%s: K cache layout (%s)",
                         b < 0 ? "ref" : e.name[b], pl_dtype_name(t));
            free(expect);
            be->ops->free(be, kc);
            be->ops->free(be, vc);
        }
        free(k), free(v);
        pl_kt_env_fini(&e);
    }
    PL_ASSERT_NO_LEAKS();
}

Test(attention, copy_blocks) {
    for (int kv = 0; kv < 2; kv++) {
        pl_dtype t = kv ? PL_DTYPE_F16 : PL_DTYPE_F32;
        pl_kt_env e;
        pl_kt_env_init(&e, t);
        pl_test_rng r;
        pl_test_rng_seed(&r, 60);
        pl_kv_layout l = {.n_layers = 3, .n_blocks = 7, .n_kv_heads = 2, .block_size = 4,
                          .head_dim = 17, .dtype = t};
        size_t bytes = 2 * l.n_layers * pl_kv_layer_elems(&l) * pl_dtype_size(t);
        size_t block_bytes = (size_t)l.n_kv_heads * l.block_size * l.head_dim * pl_dtype_size(t);
        unsigned char *init = malloc(bytes);
        for (size_t i = 0; i < bytes; i++) init[i] = (unsigned char)pl_test_rng_below(&r, 256);
        int32_t pairs[] = {1, 4, 6, 0, 2, 2};
        /* expected: every layer's K and V with blocks 4 and 0 replaced by copies of 1 and 6 */
        unsigned char *expect = malloc(bytes);
        memcpy(expect, init, bytes);
        for (int tns = 0; tns < 2 * l.n_layers; tns++) {
            unsigned char *base = expect + (size_t)tns * pl_kv_layer_elems(&l) * pl_dtype_size(t);
            memcpy(base + 4 * block_bytes, base + 1 * block_bytes, block_bytes);
            memcpy(base + 0 * block_bytes, base + 6 * block_bytes, block_bytes);
        }
        for (int b = -1; b < e.n_cpu; b++) {
            pl_backend *be = b < 0 ? e.ref : e.cpu[b];
            void *cache;
            cr_assert_eq(be->ops->alloc(be, bytes, &cache), PL_OK);
            memcpy(cache, init, bytes);
            cr_assert_eq(be->ops->copy_blocks(be, cache, &l, pairs, 3), PL_OK, "%s",
                         pl_last_error());
            cr_assert_eq(memcmp(cache, expect, bytes), 0, "%s copy_blocks (%s)",
                         b < 0 ? "ref" : e.name[b], pl_dtype_name(t));
            be->ops->free(be, cache);
        }
        free(init), free(expect);
        pl_kt_env_fini(&e);
    }
    PL_ASSERT_NO_LEAKS();
}
