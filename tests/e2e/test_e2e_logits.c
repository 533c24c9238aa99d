/*
 * tests/e2e/test_e2e_logits.c - whole-model logits, ref backend against cpu backend.
 *
 * The same schedule of runner steps (prefill chunks mixed with decode rows of other
 * sequences, contexts crossing block boundaries, blocks handed out from a shuffled pool so
 * tables are neither contiguous nor ordered) runs through pl_runner_run on both backends.
 * Every row of every step samples, so every logit of every position is compared: cpu against
 * ref within TOL_LOGITS (tests/kernels/tolerances.h), and each backend against the dense
 * reference (tests/e2e/dense_ref.c) at the same positions, which is what keeps the backends'
 * agreement from passing when both are wrong the same way. The KV cache is f32 here, so the
 * tolerance is that of f32 arithmetic; stories260K runs again with the f16 cache (the default
 * since the f16 switch) against a dense reference that rounds its K and V to f16 too.
 */
#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dense_ref.h"
#include "engine/runner.h"
#include "model_fixtures.h"
#include "tests/kernels/tolerances.h"

// ----------------------------------------------------------------------------
// schedules

/* One sequence. Its whole token stream is fixed in advance (teacher forcing), so the
 * backends and the dense reference see the same inputs whatever each would predict. */
typedef struct plan_seq {
    int32_t *tokens;
    int len;       /* tokens in all */
    int prompt;    /* the first `prompt` are prefilled in chunks, the rest decoded one a step */
    int join_step; /* the step the sequence enters the batch */
} plan_seq;

/* One runner step, owning its arrays, with the sequence each row belongs to. */
typedef struct step {
    pl_runner_batch b;
    int32_t *ids, *pos, *qstart, *ctx, *tables, *rows;
    int64_t *slots;
    int *row_seq;
} step;

typedef struct schedule {
    int n_seqs;
    plan_seq *seqs;
    int n_steps;
    step *steps;
    pl_runner_limits lim;
    int mixed_steps;   /* steps holding a prefill chunk of 2+ tokens and a decode row */
    int chunk_crosses; /* chunks whose rows span a block boundary */
} schedule;

/* Random sequences of max_len / 2 .. max_len tokens (BOS first). Sequence 0 has a one-token
 * prompt so it decodes while the others prefill; sequence s joins at step 2s. */
static void make_plan(schedule *sch, int n_seqs, int max_len, int vocab, pl_test_rng *r) {
    sch->n_seqs = n_seqs;
    sch->seqs = calloc((size_t)n_seqs, sizeof *sch->seqs);
    cr_assert(sch->seqs);
    for (int s = 0; s < n_seqs; s++) {
        plan_seq *q = &sch->seqs[s];
        q->len = max_len / 2 + (int)pl_test_rng_below(r, (uint32_t)(max_len - max_len / 2 + 1));
        q->prompt = s == 0 ? 1 : 1 + (int)pl_test_rng_below(r, (uint32_t)(q->len - 1));
        q->join_step = 2 * s;
        q->tokens = malloc((size_t)q->len * sizeof(int32_t));
        cr_assert(q->tokens);
        q->tokens[0] = 1;
        for (int i = 1; i < q->len; i++)
            q->tokens[i] = 3 + (int32_t)pl_test_rng_below(r, (uint32_t)(vocab - 3));
    }
}

static int blocks_for(int tokens, int block_size) { return (tokens + block_size - 1) / block_size; }

/* A shuffled pool of every block id, with spares, so tables jump around the cache. */
static int32_t *block_pool(int n_blocks, pl_test_rng *r) {
    int32_t *pool = malloc((size_t)n_blocks * sizeof *pool);
    cr_assert(pool);
    for (int i = 0; i < n_blocks; i++) pool[i] = i;
    for (int i = n_blocks - 1; i > 0; i--) {
        int j = (int)pl_test_rng_below(r, (uint32_t)(i + 1));
        int32_t t = pool[i];
        pool[i] = pool[j];
        pool[j] = t;
    }
    return pool;
}

/* Rows this step takes from sequence q whose first `done` tokens are in the cache. */
static int rows_now(const plan_seq *q, int done, int chunk) {
    if (done < q->prompt) return q->prompt - done < chunk ? q->prompt - done : chunk;
    return 1;
}

/* Where every sequence stands while the schedule is built. */
typedef struct cursor {
    int chunk;
    int *done;       /* (n_seqs) tokens already in the cache */
    int32_t **table; /* (n_seqs, max_blocks_per_seq) blocks owned so far */
    int *n_owned;    /* (n_seqs) */
    int32_t *pool;   /* (n_blocks) shuffled block ids, handed out in order */
    int next_block;
} cursor;

static void alloc_step(step *st, int T, int S, int mb) {
    st->ids = malloc((size_t)T * 4);
    st->pos = malloc((size_t)T * 4);
    st->slots = malloc((size_t)T * 8);
    st->rows = malloc((size_t)T * 4);
    st->row_seq = malloc((size_t)T * sizeof(int));
    st->qstart = malloc((size_t)(S + 1) * 4);
    st->ctx = malloc((size_t)S * 4);
    st->tables = malloc((size_t)S * (size_t)mb * 4);
    cr_assert(st->ids && st->pos && st->slots && st->rows && st->row_seq && st->qstart &&
              st->ctx && st->tables);
}

/* Appends q rows of sequence s (batch entry i) from row t on, growing its block table. */
static void add_rows(const schedule *sch, step *st, cursor *c, int i, int s, int q, int t) {
    int bs = sch->lim.block_size, mb = sch->lim.max_blocks_per_seq, done = c->done[s];
    while (c->n_owned[s] < blocks_for(done + q, bs))
        c->table[s][c->n_owned[s]++] = c->pool[c->next_block++];
    st->qstart[i] = t;
    for (int j = 0; j < q; j++, t++) {
        int p = done + j;
        st->ids[t] = sch->seqs[s].tokens[p];
        st->pos[t] = p;
        st->slots[t] = (int64_t)c->table[s][p / bs] * bs + p % bs;
        st->rows[t] = t;
        st->row_seq[t] = s;
    }
    st->ctx[i] = done + q;
    /* entries past the owned blocks are "any" per backend.h: -1 sends a reader of them outside
     * the cache (ASan, or garbage in the logits) */
    for (int k = 0; k < mb; k++)
        st->tables[(size_t)i * mb + k] = k < c->n_owned[s] ? c->table[s][k] : -1;
}

/* One step over the S sequences in active: every row samples. */
static void build_step(schedule *sch, step *st, const int *active, int S, cursor *c) {
    int T = 0, max_q = 0, max_ctx = 0;
    for (int i = 0; i < S; i++) T += rows_now(&sch->seqs[active[i]], c->done[active[i]], c->chunk);
    alloc_step(st, T, S, sch->lim.max_blocks_per_seq);
    bool chunked = false, decoded = false;
    for (int i = 0, t = 0; i < S; i++) {
        int s = active[i], done = c->done[s], q = rows_now(&sch->seqs[s], done, c->chunk);
        add_rows(sch, st, c, i, s, q, t);
        int bs = sch->lim.block_size;
        if (q > 1 && done / bs != (done + q - 1) / bs) sch->chunk_crosses++;
        chunked |= q > 1;
        decoded |= done >= sch->seqs[s].prompt;
        c->done[s] = done + q;
        t += q;
        if (q > max_q) max_q = q;
        if (done + q > max_ctx) max_ctx = done + q;
    }
    st->qstart[S] = T;
    sch->mixed_steps += chunked && decoded;
    st->b = (pl_runner_batch){.n_seqs = S, .n_tokens = T, .token_ids = st->ids,
                              .positions = st->pos, .slots = st->slots,
                              .query_start = st->qstart, .context_lens = st->ctx,
                              .block_tables = st->tables, .max_query_len = max_q,
                              .max_context_len = max_ctx, .sample_rows = st->rows, .n_sample = T};
}

static void add_step(schedule *sch, const int *active, int S, cursor *c) {
    if (sch->n_steps % 64 == 0) {
        sch->steps = realloc(sch->steps, (size_t)(sch->n_steps + 64) * sizeof *sch->steps);
        cr_assert(sch->steps);
    }
    step *st = &sch->steps[sch->n_steps++];
    build_step(sch, st, active, S, c);
    if (st->b.n_tokens > sch->lim.max_tokens) sch->lim.max_tokens = st->b.n_tokens;
}

/* Every step of the plan until each sequence has run all its tokens; sets the limits. */
static void make_schedule(schedule *sch, int block_size, int chunk, pl_test_rng *r) {
    int n = sch->n_seqs, mb = 0, n_blocks = 3; /* 3 spare blocks that no table uses */
    for (int s = 0; s < n; s++) {
        int b = blocks_for(sch->seqs[s].len, block_size);
        n_blocks += b;
        if (b > mb) mb = b;
    }
    sch->lim = (pl_runner_limits){.max_blocks_per_seq = mb, .n_blocks = n_blocks,
                                  .block_size = block_size};
    cursor c = {.chunk = chunk, .pool = block_pool(n_blocks, r),
                .done = calloc((size_t)n, sizeof(int)), .n_owned = calloc((size_t)n, sizeof(int)),
                .table = calloc((size_t)n, sizeof(int32_t *))};
    int *active = malloc((size_t)n * sizeof *active);
    cr_assert(c.done && c.n_owned && c.table && active);
    for (int s = 0; s < n; s++) cr_assert((c.table[s] = malloc((size_t)mb * 4)));
    for (int t = 0;; t++) {
        int S = 0, finished = 0;
        for (int s = 0; s < n; s++) {
            if (c.done[s] == sch->seqs[s].len) finished++;
            else if (sch->seqs[s].join_step <= t) active[S++] = s;
        }
        if (finished == n) break;
        if (S > 0) add_step(sch, active, S, &c);
    }
    sch->lim.max_seqs = sch->lim.max_tokens; /* every row samples */
    for (int s = 0; s < n; s++) free(c.table[s]);
    free(c.table);
    free(c.n_owned);
    free(c.done);
    free(c.pool);
    free(active);
}

static void free_schedule(schedule *sch) {
    for (int i = 0; i < sch->n_steps; i++) {
        step *st = &sch->steps[i];
        void *p[] = {st->ids, st->pos, st->slots, st->rows, st->row_seq, st->qstart, st->ctx,
                     st->tables};
        for (size_t k = 0; k < sizeof p / sizeof p[0]; k++) free(p[k]);
    }
    free(sch->steps);
    for (int s = 0; s < sch->n_seqs; s++) free(sch->seqs[s].tokens);
    free(sch->seqs);
}

// ----------------------------------------------------------------------------
// running

/* Logits of every position of every sequence: out[s] is (len, vocab). */
static float **alloc_logits(const schedule *sch, int vocab) {
    float **out = calloc((size_t)sch->n_seqs, sizeof *out);
    cr_assert(out);
    for (int s = 0; s < sch->n_seqs; s++) {
        out[s] = malloc((size_t)sch->seqs[s].len * (size_t)vocab * sizeof(float));
        cr_assert(out[s]);
    }
    return out;
}

static void free_logits(const schedule *sch, float **l) {
    for (int s = 0; s < sch->n_seqs; s++) free(l[s]);
    free(l);
}

static float **run_backend(const pl_model *m, pl_backend *be, const schedule *sch) {
    int V = m->cfg.vocab_size;
    pl_runner *r = NULL;
    cr_assert_eq(pl_runner_create(m, be, &sch->lim, &r), PL_OK, "%s", pl_last_error());
    float **out = alloc_logits(sch, V);
    float *step_logits = malloc((size_t)sch->lim.max_tokens * (size_t)V * sizeof(float));
    cr_assert(step_logits);
    for (int i = 0; i < sch->n_steps; i++) {
        const step *st = &sch->steps[i];
        cr_assert_eq(pl_runner_run(r, &st->b, step_logits), PL_OK, "%s step %d: %s",
                     be->ops->name, i, pl_last_error());
        for (int t = 0; t < st->b.n_tokens; t++)
            memcpy(out[st->row_seq[t]] + (size_t)st->pos[t] * V, step_logits + (size_t)t * V,
                   (size_t)V * sizeof(float));
    }
    free(step_logits);
    pl_runner_destroy(r);
    return out;
}

static float **run_dense(const pl_model *m, const schedule *sch, pl_dtype kv) {
    int V = m->cfg.vocab_size;
    float **out = alloc_logits(sch, V);
    for (int s = 0; s < sch->n_seqs; s++) {
        const plan_seq *q = &sch->seqs[s];
        dense_ref *d = dense_ref_create(m, q->len);
        cr_assert(d);
        dense_ref_set_kv_dtype(d, kv);
        for (int p = 0; p < q->len; p++)
            memcpy(out[s] + (size_t)p * V, dense_ref_forward(d, q->tokens[p], p),
                   (size_t)V * sizeof(float));
        dense_ref_free(d);
    }
    return out;
}

/* Asserts every logit of got is within tol of want (and finite); returns the largest absolute
 * difference seen. */
static double compare(const char *what, const schedule *sch, int V, float **want, float **got,
                      pl_tol tol) {
    double max_abs = 0;
    for (int s = 0; s < sch->n_seqs; s++) {
        size_t n = (size_t)sch->seqs[s].len * (size_t)V;
        for (size_t i = 0; i < n; i++) {
            cr_assert(isfinite(got[s][i]), "%s: seq %d logit %zu is %g", what, s, i,
                      (double)got[s][i]);
            double d = fabs((double)got[s][i] - want[s][i]);
            if (d > max_abs) max_abs = d;
        }
        char label[160];
        snprintf(label, sizeof label, "%s seq %d", what, s);
        cr_assert(pl_allclose(label, want[s], got[s], n, tol.atol, tol.rtol),
                  "%s: logits differ beyond the tolerance (see stderr)", label);
        double nmse = pl_nmse(want[s], got[s], n);
        cr_assert_leq(nmse, tol.nmse, "%s: nmse %g", label, nmse);
    }
    return max_abs;
}

/* The whole check on one model: the schedule on ref and cpu with KV cache elements of kv, both
 * against dense (which rounds its K and V the same way). */
static void check_model(const char *name, const pl_model *m, int n_seqs, int max_len,
                        int block_size, int chunk, uint64_t seed, pl_dtype kv) {
    pl_test_rng r;
    pl_test_rng_seed(&r, seed);
    schedule sch = {0};
    cr_assert_leq(max_len, m->cfg.max_seq_len, "%s: sequences longer than the model", name);
    make_plan(&sch, n_seqs, max_len, m->cfg.vocab_size, &r);
    make_schedule(&sch, block_size, chunk, &r);
    /* the coverage this test claims, checked rather than hoped for */
    cr_assert_gt(sch.mixed_steps, 0, "%s: no step mixes a prefill chunk with a decode", name);
    cr_assert_gt(sch.chunk_crosses, 0, "%s: no prefill chunk crosses a block boundary", name);

    pl_backend *ref = NULL, *cpu = NULL;
    cr_assert_eq(pl_backend_ref_create(&(pl_backend_options){.kv_dtype = kv}, &ref), PL_OK, "%s",
                 pl_last_error());
    cr_assert_eq(pl_backend_cpu_create(&(pl_backend_options){.n_threads = 2, .kv_dtype = kv},
                                       &cpu),
                 PL_OK, "%s", pl_last_error());
    cr_assert_eq(ref->kv_dtype, kv);
    cr_assert_eq(cpu->kv_dtype, kv);
    pl_tol tol = kv == PL_DTYPE_F16 ? TOL_LOGITS_KV_F16 : TOL_LOGITS;
    int V = m->cfg.vocab_size;
    float **lr = run_backend(m, ref, &sch), **lc = run_backend(m, cpu, &sch);
    float **ld = run_dense(m, &sch, kv);
    char what[128];
    snprintf(what, sizeof what, "%s: cpu vs ref", name);
    double cpu_ref = compare(what, &sch, V, lr, lc, tol);
    snprintf(what, sizeof what, "%s: cpu vs dense", name);
    double cpu_dense = compare(what, &sch, V, ld, lc, tol);
    snprintf(what, sizeof what, "%s: ref vs dense", name);
    double ref_dense = compare(what, &sch, V, ld, lr, tol);
    cr_log_info("%s: %d steps, max |cpu - ref| %.3g, |cpu - dense| %.3g, |ref - dense| %.3g",
                name, sch.n_steps, cpu_ref, cpu_dense, ref_dense);
    free_logits(&sch, lr);
    free_logits(&sch, lc);
    free_logits(&sch, ld);
    pl_backend_destroy(ref);
    pl_backend_destroy(cpu);
    free_schedule(&sch);
}

// ----------------------------------------------------------------------------
// models

/* A random tiny config with room for the sequences: vocab >= 16, max_seq_len >= 64. */
static pl_model_config tiny_config(uint64_t seed) {
    pl_test_rng r;
    pl_test_rng_seed(&r, seed);
    pl_model_config c;
    pl_fixture_random_config(&r, &c);
    if (c.vocab_size < 16) c.vocab_size = 16;
    if (c.max_seq_len < 64) c.max_seq_len = 64;
    return c;
}

/* m written as a Hugging Face directory in dtype and loaded back (rotate-half RoPE, matrices
 * kept in dtype). The directory is removed at once: the loader reads, it does not keep paths. */
static pl_model *via_hf(const pl_model *m, pl_dtype dtype) {
    const char *tmp = pl_test_tmpdir();
    cr_assert(tmp);
    char dir[512];
    snprintf(dir, sizeof dir, "%s", tmp);
    cr_assert(pl_fixture_write_hf(m, dir, &(pl_fixture_hf_options){.dtype = dtype}));
    pl_model *got = NULL;
    cr_assert_eq(pl_model_load(dir, &(pl_model_load_options){.dtype = PL_DTYPE_AUTO}, &got),
                 PL_OK, "%s", pl_last_error());
    cr_assert_eq(pl_model_weight(got, PL_T_ATTN_Q, 0)->type,
                 dtype == PL_DTYPE_AUTO ? PL_WTYPE_F32 : pl_wtype_of_dtype(dtype));
    pl_fixture_remove_dir(dir);
    return got;
}

Test(logits, ref_and_cpu_agree_on_random_f32_models) {
    for (uint64_t seed = 1; seed <= 4; seed++) {
        pl_model_config c = tiny_config(seed);
        pl_model *m = pl_fixture_model(&c, seed);
        cr_assert(m);
        char name[64];
        snprintf(name, sizeof name, "f32 seed %llu", (unsigned long long)seed);
        check_model(name, m, 4, 48, 4, 7, seed, PL_DTYPE_F32);
        pl_model_free(m);
    }
    PL_ASSERT_NO_LEAKS();
}

Test(logits, ref_and_cpu_agree_on_random_f16_and_bf16_models) {
    const pl_dtype dts[] = {PL_DTYPE_F16, PL_DTYPE_BF16};
    for (uint64_t seed = 5; seed <= 8; seed++) {
        pl_model_config c = tiny_config(seed);
        pl_model *m = pl_fixture_model(&c, seed);
        cr_assert(m);
        pl_dtype dt = dts[seed % 2];
        pl_model *h = via_hf(m, dt);
        char name[64];
        snprintf(name, sizeof name, "%s seed %llu", dt == PL_DTYPE_F16 ? "f16" : "bf16",
                 (unsigned long long)seed);
        check_model(name, h, 5, 60, 5, 6, seed, PL_DTYPE_F32);
        pl_model_free(h);
        pl_model_free(m);
    }
    PL_ASSERT_NO_LEAKS();
}

/* Scaled RoPE changes the frequencies the runner uploads: checked here on every logit (the
 * formats suite checks it on greedy tokens). head_dim 16 and original_max_position 64 put the
 * llama3 wavelengths in all three bands (kept, blended, divided). */
Test(logits, ref_and_cpu_agree_with_rope_scaling) {
    pl_model_config c = {.dim = 48, .hidden_dim = 61, .n_layers = 2, .n_heads = 3,
                         .n_kv_heads = 1, .head_dim = 16, .vocab_size = 40, .max_seq_len = 160,
                         .norm_eps = 1e-5f, .rope_theta = 10000.0f, .bos_id = 1,
                         .eos_ids = {2}, .n_eos = 1};
    for (int k = 0; k < 2; k++) {
        if (k == 0) pl_fixture_set_rope_linear(&c, 4.0f);
        else pl_fixture_set_rope_llama3(&c, 8.0f, 1.0f, 4.0f, 64);
        pl_model *m = pl_fixture_model(&c, 21 + (uint64_t)k);
        cr_assert(m);
        pl_model *h = via_hf(m, k == 0 ? PL_DTYPE_F32 : PL_DTYPE_BF16);
        cr_assert_eq(h->cfg.rope_scaling, c.rope_scaling, "the scaling survived config.json");
        check_model(k == 0 ? "linear x4 f32" : "llama3 x8 bf16", h, 3, 150, 16, 24, 31,
                    PL_DTYPE_F32);
        pl_model_free(h);
        pl_model_free(m);
    }
    PL_ASSERT_NO_LEAKS();
}

Test(logits, ref_and_cpu_agree_on_stories260K) {
    if (!pl_test_models_dir()) {
        const char *why = "PAGELLM_TEST_MODELS is not set: stories260K logits not compared "
                          "(.ci/run sets it to ../shared/models)";
        fprintf(stderr, "SKIP: %s\n", why); /* cr_skip's reason shows only with --verbose */
        cr_skip("%s", why);
    }
    char path[1024];
    cr_assert(pl_test_model_path("stories260K.bin", path, sizeof path),
              "PAGELLM_TEST_MODELS is set but has no stories260K.bin");
    pl_model *m = NULL;
    cr_assert_eq(pl_model_load(path, NULL, &m), PL_OK, "%s", pl_last_error());
    check_model("stories260K", m, 4, 220, 16, 40, 77, PL_DTYPE_F32);
    check_model("stories260K, f16 KV", m, 4, 220, 16, 40, 77, PL_DTYPE_F16);
    pl_model_free(m);
    PL_ASSERT_NO_LEAKS();
}
