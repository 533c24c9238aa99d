/*
 * engine/runner.c - the layer loop: one flattened batch of prefill chunks and decode tokens
 * through the model on a backend, reading and writing KV through block tables.
 *
 *   embed -> [ rmsnorm -> q,k,v -> rope -> kv_store -> paged attention -> wo ->
 *              add+rmsnorm -> w1,w3 -> silu*mul -> w2 -> add+rmsnorm(next) ] x n_layers
 *         -> gather the sampled rows -> lm_head -> logits to host
 *
 * The residual stream x stays in one buffer; each add_rmsnorm folds the previous block's
 * output into it and normalises for the next block, so there is no separate add pass.
 * Logits are computed only for the rows that sample this step (a prefill chunk that does not
 * reach the end of its prompt samples nothing).
 */
#include "engine/runner.h"

#include <math.h>
#include <string.h>

#include "util/alloc.h"
#include "util/dtype.h"
#include "util/timer.h"

typedef struct dev_weight {
    void *data;     /* backend memory (== host data for zero-copy backends) */
    const void *src;/* the host data it came from */
    pl_dtype dtype;
} dev_weight;

typedef struct dev_layer {
    float *attn_norm, *ffn_norm; /* (dim) f32, backend memory */
    dev_weight wq, wk, wv, wo, w1, w2, w3;
} dev_layer;

struct pl_runner {
    const pl_model *m;
    pl_backend *be;
    pl_runner_limits lim;
    pl_kv_layout kv;

    dev_weight tok_embed, lm_head;
    float *final_norm;
    dev_layer *layers;
    float *inv_freq; /* (head_dim / 2) */
    void *kv_cache;

    /* workspace, (rows, width) each */
    float *x;    /* (max_tokens, dim) residual stream */
    float *xb;   /* (max_tokens, dim) normalised input of a block */
    float *xb2;  /* (max_tokens, dim) a block's output */
    float *q;    /* (max_tokens, n_heads * head_dim) */
    float *k;    /* (max_tokens, n_kv_heads * head_dim) */
    float *v;    /* (max_tokens, n_kv_heads * head_dim) */
    float *att;  /* (max_tokens, n_heads * head_dim) */
    float *hb;   /* (max_tokens, hidden_dim) */
    float *hb2;  /* (max_tokens, hidden_dim) */
    float *xs;   /* (max_seqs, dim) sampled rows */
    float *logits; /* (max_seqs, vocab) */
    /* per-step metadata in backend memory */
    int32_t *d_ids, *d_pos, *d_qstart, *d_ctx, *d_tables, *d_rows, *d_pairs;
    int64_t *d_slots;

    bool profiling;
    pl_runner_profile prof;
    pl_runner_op_hook hook;
    void *hook_ctx;
};

static const char *const op_names[PL_OP_COUNT] = {
    "embedding", "norm", "matmul", "rope", "kv_store", "attention", "activation", "logits", "copy",
};

const char *pl_op_kind_name(pl_op_kind k) {
    return (k >= 0 && k < PL_OP_COUNT) ? op_names[k] : "unknown";
}

size_t pl_runner_kv_block_bytes(const pl_model_config *cfg, int block_size, pl_dtype kv_dtype) {
    return 2u * (size_t)cfg->n_layers * (size_t)cfg->n_kv_heads * (size_t)block_size *
           (size_t)cfg->head_dim * pl_dtype_size(kv_dtype);
}

static size_t workspace_floats(const pl_model_config *c, const pl_runner_limits *lim) {
    size_t T = (size_t)lim->max_tokens, S = (size_t)lim->max_seqs;
    size_t qd = (size_t)c->n_heads * c->head_dim, kvd = (size_t)c->n_kv_heads * c->head_dim;
    return T * (3 * (size_t)c->dim + 2 * qd + 2 * kvd + 2 * (size_t)c->hidden_dim) +
           S * ((size_t)c->dim + (size_t)c->vocab_size);
}

size_t pl_runner_batch_bytes(const pl_runner_limits *lim) {
    size_t T = (size_t)lim->max_tokens, S = (size_t)lim->max_seqs,
           B = (size_t)lim->max_blocks_per_seq, bytes = 0;
#define BYTES(name, type, dev, cap, used) bytes += (cap) * sizeof(type);
    PL_BATCH_ARRAYS(BYTES)
#undef BYTES
    return bytes;
}

size_t pl_runner_workspace_bytes(const pl_model_config *cfg, const pl_runner_limits *lim) {
    return workspace_floats(cfg, lim) * sizeof(float) + pl_runner_batch_bytes(lim);
}

pl_status pl_batch_storage_alloc(pl_batch_storage *st, const pl_runner_limits *lim) {
    size_t T = (size_t)lim->max_tokens, S = (size_t)lim->max_seqs,
           B = (size_t)lim->max_blocks_per_seq;
    memset(st, 0, sizeof *st);
#define ALLOC(name, type, dev, cap, used)                                                     \
    if (!(st->name = pl_calloc((cap), sizeof(type)))) goto oom;
    PL_BATCH_ARRAYS(ALLOC)
#undef ALLOC
    return PL_OK;
oom:
    pl_batch_storage_free(st);
    return pl_fail(PL_ERR_OUT_OF_MEMORY, "engine: batch buffers for %zu tokens, %zu sequences",
                   T, S);
}

void pl_batch_storage_free(pl_batch_storage *st) {
#define FREE(name, type, dev, cap, used) pl_free(st->name), st->name = NULL;
    PL_BATCH_ARRAYS(FREE)
#undef FREE
}

/* ---- create / destroy ---------------------------------------------------------------- */

static pl_status up_weight(pl_runner *r, const pl_weight *w, dev_weight *out) {
    size_t n = (size_t)w->rows * (size_t)w->cols;
    out->src = w->data;
    PL_TRY(r->be->ops->upload_weight(r->be, w->data, w->dtype, n, &out->data, &out->dtype));
    return PL_OK;
}

static void down_weight(pl_runner *r, dev_weight *w) {
    if (w->data) r->be->ops->free_weight(r->be, w->data, w->src);
    w->data = NULL;
}

static pl_status up_f32(pl_runner *r, const float *src, size_t n, float **out) {
    PL_TRY(r->be->ops->alloc(r->be, n * sizeof(float), (void **)out));
    return r->be->ops->upload(r->be, *out, src, n * sizeof(float));
}

static pl_status balloc(pl_runner *r, size_t n_bytes, const char *what, void **out) {
    pl_status s = r->be->ops->alloc(r->be, n_bytes, out);
    if (s != PL_OK)
        return pl_fail_prefix(s, "allocating %s (%zu bytes) on backend %s", what, n_bytes,
                              r->be->ops->name);
    return PL_OK;
}

void pl_runner_destroy(pl_runner *r) {
    if (!r) return;
    pl_backend *be = r->be;
    if (r->layers) {
        for (int l = 0; l < r->m->cfg.n_layers; l++) {
            dev_layer *L = &r->layers[l];
            be->ops->free(be, L->attn_norm);
            be->ops->free(be, L->ffn_norm);
            dev_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w1, &L->w2, &L->w3};
            for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) down_weight(r, ws[i]);
        }
        pl_free(r->layers);
    }
    if (r->lm_head.data != r->tok_embed.data) down_weight(r, &r->lm_head);
    down_weight(r, &r->tok_embed);
    be->ops->free(be, r->final_norm);
    be->ops->free(be, r->inv_freq);
    be->ops->free(be, r->kv_cache);
    void *bufs[] = {r->x, r->xb, r->xb2, r->q, r->k, r->v, r->att, r->hb, r->hb2, r->xs,
                    r->logits, r->d_ids, r->d_pos, r->d_qstart, r->d_ctx, r->d_tables,
                    r->d_rows, r->d_pairs, r->d_slots};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) be->ops->free(be, bufs[i]);
    pl_free(r);
}

static pl_status upload_model(pl_runner *r) {
    const pl_model *m = r->m;
    const pl_model_config *c = &m->cfg;
    PL_TRY(up_weight(r, &m->tok_embed, &r->tok_embed));
    if (c->tied_embeddings || m->lm_head.data == m->tok_embed.data)
        r->lm_head = r->tok_embed;
    else
        PL_TRY(up_weight(r, &m->lm_head, &r->lm_head));
    PL_TRY(up_f32(r, m->final_norm.data, (size_t)c->dim, &r->final_norm));
    r->layers = pl_calloc((size_t)c->n_layers, sizeof(dev_layer));
    if (!r->layers) return pl_fail(PL_ERR_OUT_OF_MEMORY, "runner: layer table");
    for (int l = 0; l < c->n_layers; l++) {
        const pl_model_layer *H = &m->layers[l];
        dev_layer *L = &r->layers[l];
        PL_TRY(up_f32(r, H->attn_norm.data, (size_t)c->dim, &L->attn_norm));
        PL_TRY(up_f32(r, H->ffn_norm.data, (size_t)c->dim, &L->ffn_norm));
        PL_TRY(up_weight(r, &H->wq, &L->wq));
        PL_TRY(up_weight(r, &H->wk, &L->wk));
        PL_TRY(up_weight(r, &H->wv, &L->wv));
        PL_TRY(up_weight(r, &H->wo, &L->wo));
        PL_TRY(up_weight(r, &H->w1, &L->w1));
        PL_TRY(up_weight(r, &H->w2, &L->w2));
        PL_TRY(up_weight(r, &H->w3, &L->w3));
    }
    float inv[1024];
    if (c->head_dim / 2 > 1024) return pl_fail(PL_ERR_UNSUPPORTED, "head_dim %d > 2048", c->head_dim);
    pl_model_rope_inv_freq(c, inv);
    return up_f32(r, inv, (size_t)(c->head_dim / 2 > 0 ? c->head_dim / 2 : 1), &r->inv_freq);
}

static pl_status alloc_workspace(pl_runner *r) {
    const pl_model_config *c = &r->m->cfg;
    size_t T = (size_t)r->lim.max_tokens, S = (size_t)r->lim.max_seqs, F = sizeof(float);
    size_t B = (size_t)r->lim.max_blocks_per_seq;
    size_t qd = (size_t)c->n_heads * c->head_dim, kvd = (size_t)c->n_kv_heads * c->head_dim;
    struct { void **p; size_t n; const char *what; } plan[] = {
        {(void **)&r->x, T * c->dim * F, "residual stream"},
        {(void **)&r->xb, T * c->dim * F, "norm buffer"},
        {(void **)&r->xb2, T * c->dim * F, "block output"},
        {(void **)&r->q, T * qd * F, "queries"},
        {(void **)&r->k, T * kvd * F, "keys"},
        {(void **)&r->v, T * kvd * F, "values"},
        {(void **)&r->att, T * qd * F, "attention output"},
        {(void **)&r->hb, T * c->hidden_dim * F, "ffn gate"},
        {(void **)&r->hb2, T * c->hidden_dim * F, "ffn up"},
        {(void **)&r->xs, S * c->dim * F, "sampled rows"},
        {(void **)&r->logits, S * c->vocab_size * F, "logits"},
#define DEVICE(name, type, dev, cap, used) {(void **)&r->dev, (cap) * sizeof(type), #name},
        PL_BATCH_ARRAYS(DEVICE)
#undef DEVICE
    };
    for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++)
        PL_TRY(balloc(r, plan[i].n, plan[i].what, plan[i].p));
    return PL_OK;
}

pl_status pl_runner_create(const pl_model *m, pl_backend *be, const pl_runner_limits *lim,
                           pl_runner **out) {
    if (lim->max_tokens < 1 || lim->max_seqs < 1 || lim->n_blocks < 1 || lim->block_size < 1 ||
        lim->max_blocks_per_seq < 1)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "runner: limits must be positive");
    pl_runner *r = pl_calloc(1, sizeof *r);
    if (!r) return pl_fail(PL_ERR_OUT_OF_MEMORY, "runner: state");
    r->m = m;
    r->be = be;
    r->lim = *lim;
    r->kv = (pl_kv_layout){.n_layers = m->cfg.n_layers, .n_blocks = lim->n_blocks,
                           .n_kv_heads = m->cfg.n_kv_heads, .block_size = lim->block_size,
                           .head_dim = m->cfg.head_dim, .dtype = be->kv_dtype};
    pl_status s = upload_model(r);
    if (s == PL_OK) s = alloc_workspace(r);
    if (s == PL_OK)
        s = balloc(r, pl_runner_kv_block_bytes(&m->cfg, lim->block_size, be->kv_dtype) *
                          (size_t)lim->n_blocks,
                   "KV cache", &r->kv_cache);
    if (s != PL_OK) {
        pl_runner_destroy(r);
        return s;
    }
    *out = r;
    return PL_OK;
}

/* ---- the forward pass ---------------------------------------------------------------- */

void pl_runner_set_profiling(pl_runner *r, bool on) { r->profiling = on; }
void pl_runner_get_profile(const pl_runner *r, pl_runner_profile *out) { *out = r->prof; }
void pl_runner_reset_profile(pl_runner *r) { memset(&r->prof, 0, sizeof r->prof); }
void pl_runner_set_op_hook(pl_runner *r, pl_runner_op_hook fn, void *ctx) {
    r->hook = fn;
    r->hook_ctx = ctx;
}

/* Times one op when profiling; the sync makes device time land on the op that spent it. */
#define OP(kind, call)                                                                        \
    do {                                                                                      \
        uint64_t t0_ = r->profiling ? pl_now_ns() : 0;                                        \
        PL_TRY(call);                                                                         \
        if (r->profiling) {                                                                   \
            PL_TRY(be->ops->sync(be));                                                        \
            uint64_t t1_ = pl_now_ns();                                                       \
            r->prof.ns[kind] += t1_ - t0_;                                                    \
            r->prof.calls[kind]++;                                                            \
            if (r->hook) r->hook(r->hook_ctx, kind, t0_, t1_);                                \
        }                                                                                     \
    } while (0)

static void count_matmul(pl_runner *r, int rows, int d_in, int d_out, pl_dtype dt) {
    r->prof.matmul_flops += 2.0 * rows * d_in * (double)d_out;
    r->prof.matmul_bytes += (double)d_in * d_out * (double)pl_dtype_size(dt) +
                            4.0 * rows * ((double)d_in + d_out);
}

static pl_matmul_part part(float *out, const dev_weight *w, int d_out) {
    return (pl_matmul_part){.out = out, .w = w->data, .w_dtype = w->dtype, .d_out = d_out};
}

/* The products of one input in one backend op (see pl_backend_matmul_group). */
static pl_status matmul_group(pl_runner *r, const pl_matmul_part *parts, int n_parts,
                              const float *x, int rows, int d_in) {
    pl_backend *be = r->be;
    if (r->profiling)
        for (int i = 0; i < n_parts; i++)
            count_matmul(r, rows, d_in, parts[i].d_out, parts[i].w_dtype);
    OP(PL_OP_MATMUL, pl_backend_matmul_group(be, parts, n_parts, x, rows, d_in));
    return PL_OK;
}

static pl_status matmul(pl_runner *r, float *out, const float *x, const dev_weight *w, int rows,
                        int d_in, int d_out) {
    const pl_matmul_part p = part(out, w, d_out);
    return matmul_group(r, &p, 1, x, rows, d_in);
}

static pl_status upload_batch(pl_runner *r, const pl_runner_batch *b) {
    pl_backend *be = r->be;
    int B = r->lim.max_blocks_per_seq;
#define UPLOAD(name, type, dev, cap, used)                                                    \
    if ((used) > 0) PL_TRY(be->ops->upload(be, r->dev, b->name, (size_t)(used) * sizeof(type)));
    PL_BATCH_ARRAYS(UPLOAD)
#undef UPLOAD
    return PL_OK;
}

static pl_status check_batch(const pl_runner *r, const pl_runner_batch *b) {
    if (b->n_tokens < 1 || b->n_tokens > r->lim.max_tokens || b->n_seqs < 1 ||
        b->n_seqs > r->lim.max_seqs || b->n_sample < 0 || b->n_sample > r->lim.max_seqs ||
        b->n_copies < 0 || b->n_copies > r->lim.max_seqs)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "runner: batch of %d tokens, %d seqs, %d samples, %d copies exceeds the "
                       "limits (%d tokens, %d seqs)",
                       b->n_tokens, b->n_seqs, b->n_sample, b->n_copies, r->lim.max_tokens,
                       r->lim.max_seqs);
    return PL_OK;
}

/* The final hidden state (r->xb) of rows d_rows (backend memory, n) through lm_head into
 * out_logits (n, vocab) on the host. */
static pl_status logits_of_rows(pl_runner *r, const int32_t *d_rows, int n, float *out_logits) {
    pl_backend *be = r->be;
    const pl_model_config *c = &r->m->cfg;
    OP(PL_OP_LOGITS, be->ops->gather_rows(be, r->xs, r->xb, d_rows, n, c->dim));
    PL_TRY(matmul(r, r->logits, r->xs, &r->lm_head, n, c->dim, c->vocab_size));
    PL_TRY(be->ops->download(be, out_logits, r->logits, (size_t)n * c->vocab_size * sizeof(float)));
    return be->ops->sync(be);
}

pl_status pl_runner_run(pl_runner *r, const pl_runner_batch *b, float *out_logits) {
    PL_TRY(check_batch(r, b));
    const pl_model_config *c = &r->m->cfg;
    pl_backend *be = r->be;
    int T = b->n_tokens, D = c->dim, H = c->hidden_dim, hd = c->head_dim;
    int qd = c->n_heads * hd, kvd = c->n_kv_heads * hd;
    size_t layer_elems = pl_kv_layer_elems(&r->kv), esz = pl_dtype_size(r->kv.dtype);

    PL_TRY(upload_batch(r, b));
    if (b->n_copies > 0)
        OP(PL_OP_COPY, be->ops->copy_blocks(be, r->kv_cache, &r->kv, r->d_pairs, b->n_copies));

    pl_attn_batch ab = {
        .n_seqs = b->n_seqs, .n_tokens = T, .query_start = r->d_qstart,
        .context_lens = r->d_ctx, .block_tables = r->d_tables,
        .max_blocks_per_seq = r->lim.max_blocks_per_seq, .max_query_len = b->max_query_len,
        .max_context_len = b->max_context_len, .n_heads = c->n_heads,
        .n_kv_heads = c->n_kv_heads, .head_dim = hd, .block_size = r->lim.block_size,
        .scale = 1.0f / sqrtf((float)hd),
    };

    OP(PL_OP_EMBED, be->ops->embed(be, r->x, r->d_ids, T, r->tok_embed.data, r->tok_embed.dtype, D));
    OP(PL_OP_NORM, be->ops->rmsnorm(be, r->xb, r->x, r->layers[0].attn_norm, T, D, c->norm_eps));
    for (int l = 0; l < c->n_layers; l++) {
        dev_layer *L = &r->layers[l];
        char *kc = (char *)r->kv_cache + 2 * (size_t)l * layer_elems * esz;
        char *vc = kc + layer_elems * esz;

        const pl_matmul_part qkv[] = {part(r->q, &L->wq, qd), part(r->k, &L->wk, kvd),
                                      part(r->v, &L->wv, kvd)};
        PL_TRY(matmul_group(r, qkv, 3, r->xb, T, D));
        OP(PL_OP_ROPE, be->ops->rope(be, r->q, r->k, r->d_pos, r->inv_freq, T, c->n_heads,
                                     c->n_kv_heads, hd, (pl_rope_layout)c->rope_layout));
        OP(PL_OP_KV_STORE, be->ops->kv_store(be, kc, vc, r->k, r->v, r->d_slots, T,
                                             c->n_kv_heads, hd, r->lim.block_size));
        OP(PL_OP_ATTENTION, be->ops->attention(be, r->att, r->q, kc, vc, &ab));
        PL_TRY(matmul(r, r->xb2, r->att, &L->wo, T, qd, D));
        OP(PL_OP_NORM, be->ops->add_rmsnorm(be, r->xb, r->x, r->xb2, L->ffn_norm, T, D, c->norm_eps));

        const pl_matmul_part gate_up[] = {part(r->hb, &L->w1, H), part(r->hb2, &L->w3, H)};
        PL_TRY(matmul_group(r, gate_up, 2, r->xb, T, D));
        OP(PL_OP_ACTIVATION, be->ops->silu_mul(be, r->hb, r->hb, r->hb2, (size_t)T * H));
        PL_TRY(matmul(r, r->xb2, r->hb, &L->w2, T, H, D));
        const float *next = l + 1 < c->n_layers ? r->layers[l + 1].attn_norm : r->final_norm;
        OP(PL_OP_NORM, be->ops->add_rmsnorm(be, r->xb, r->x, r->xb2, next, T, D, c->norm_eps));
    }
    if (r->profiling) {
        /* attention reads every context token's K and V once per layer */
        double ctx = 0;
        for (int s = 0; s < b->n_seqs; s++) ctx += b->context_lens[s];
        r->prof.attn_bytes += ctx * 2.0 * kvd * (double)esz * c->n_layers;
        for (int s = 0; s < b->n_seqs; s++) {
            double q = b->query_start[s + 1] - b->query_start[s];
            r->prof.attn_flops += 4.0 * q * b->context_lens[s] * qd * c->n_layers;
        }
    }
    if (b->n_sample == 0) return be->ops->sync(be);
    return logits_of_rows(r, r->d_rows, b->n_sample, out_logits);
}

pl_status pl_runner_logits(pl_runner *r, const int32_t *rows, int n_rows, float *out_logits) {
    if (n_rows < 1 || n_rows > r->lim.max_seqs)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "runner: %d logit rows (1 .. %d allowed)", n_rows,
                       r->lim.max_seqs);
    PL_TRY(r->be->ops->upload(r->be, r->d_rows, rows, (size_t)n_rows * sizeof *rows));
    return logits_of_rows(r, r->d_rows, n_rows, out_logits);
}
