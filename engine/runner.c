/*
 * engine/runner.c - the layer loop: one flattened batch of prefill chunks and decode tokens
 * through the model on a backend, reading and writing KV through block tables.
 *
 *   embed -> [ rmsnorm -> q,k,v (+ biases: Qwen2) (-> per-head q/k rmsnorm: Qwen3) -> rope ->
 *              kv_store -> paged attention (sliding window: Mistral) -> wo -> add+rmsnorm ->
 *              gate,up -> silu*mul -> down -> add+rmsnorm(next) ] x n_layers
 *         -> gather the sampled rows -> output projection -> logits to host
 *
 * The weights are uploaded and freed by one loop over the model's tensor slots (model/arch.h):
 * norms and biases as f32 buffers, matrices through the backend's upload_weight, a tied
 * output projection as the embedding's handle.
 *
 * The residual stream x stays in one buffer; each add_rmsnorm folds the previous block's
 * output into it and normalises for the next block, so there is no separate add pass.
 * Logits are computed only for the rows that sample this step (a prefill chunk that does not
 * reach the end of its prompt samples nothing).
 *
 * Tensor parallelism (model/shard.c splits the weights; docs/distributed.md): the runner of
 * each rank holds its shard and computes its heads and FFN units; the partial outputs of o
 * and down are summed across ranks by one all-reduce each (in place in xb2, so the residual
 * stream stays whole and identical on every rank), and each rank's vocabulary rows of the
 * logits are gathered. On rank 0 pl_runner_run and pl_runner_logits first send the step plan
 * (engine/plan.h) through the link; the other ranks sit in pl_runner_follow, which runs
 * whatever the plans say. Host backends, and device backends with a device communicator
 * (NCCL), hand their buffers to the communicator as they are; a device backend with a host
 * communicator (MPI) stages through host memory.
 */
#include "engine/runner.h"

#include <math.h>
#include <string.h>

#include "engine/tp_link.h"
#include "util/alloc.h"
#include "util/dtype.h"
#include "util/timer.h"

/* A weight in backend memory: a matrix from upload_weight, or an f32 vector (norm, bias). */
typedef struct dev_weight {
    void *data;     /* backend memory (== host data for zero-copy backends); NULL: absent */
    const void *src;/* the host data it came from */
    pl_wtype type;  /* as stored on the backend */
    bool vector;    /* an f32 buffer from alloc (norms, biases), freed with free */
    bool alias;     /* the tied output projection: the embedding's handle, not freed twice */
} dev_weight;

struct pl_runner {
    const pl_model *m;
    pl_backend *be;
    pl_runner_limits lim;
    pl_kv_layout kv;
    pl_model_config lc; /* what this rank computes (its heads, KV heads, FFN units) */
    int vocab_local;    /* its rows of the output projection */
    int vocab_stride;   /* rows per rank in the gathered logits (the last rank's may be fewer) */

    /* tensor parallelism: NULL / unused with one rank */
    pl_comm *comm;
    pl_tp_link *link;   /* rank 0: plans go out through it */
    float *h_stage;     /* (max_tokens, dim) host copy for a host communicator on a device */
    float *h_gather;    /* (size, max_seqs, vocab_stride) the gathered logits, host */
    float *d_gather;    /* the same on the device (device communicator) */
    uint64_t comm_ns;   /* inside collectives during the last run */

    dev_weight *w;   /* (pl_model_n_slots) as the model's slots (pl_model_slot) */
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
    "communication",
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

/* The slot of (role, layer) in r->w. */
static dev_weight *dw(pl_runner *r, pl_tensor_role role, int layer) {
    return &r->w[pl_model_slot(&r->m->cfg, role, layer)];
}

/* An f32 vector's device pointer (NULL when the model lacks the tensor). */
static const float *dvec(pl_runner *r, pl_tensor_role role, int layer) {
    return (const float *)dw(r, role, layer)->data;
}

static pl_status balloc(pl_runner *r, size_t n_bytes, const char *what, void **out) {
    pl_status s = r->be->ops->alloc(r->be, n_bytes, out);
    if (s != PL_OK)
        return pl_fail_prefix(s, "allocating %s (%zu bytes) on backend %s", what, n_bytes,
                              r->be->ops->name);
    return PL_OK;
}

/* Makes the host weight w usable on the backend: vectors (f32 by the tensor table) into an
 * f32 buffer, matrices through upload_weight when the backend multiplies their type. */
static pl_status up_weight(pl_runner *r, const pl_weight *w, bool vector, dev_weight *out) {
    pl_backend *be = r->be;
    size_t n = (size_t)w->rows * (size_t)w->cols;
    out->src = w->data;
    out->vector = vector;
    if (vector) {
        PL_TRY(be->ops->alloc(be, n * sizeof(float), &out->data));
        out->type = PL_WTYPE_F32;
        return be->ops->upload(be, out->data, w->data, n * sizeof(float));
    }
    const pl_wtype_traits *t = pl_wtype_traits_of(w->type);
    if (!t || !(t->backends & be->wtype_bit))
        return pl_fail(PL_ERR_UNSUPPORTED, "backend %s cannot multiply %s weights",
                       be->ops->name, pl_wtype_name(w->type));
    return be->ops->upload_weight(be, w->data, w->type, n, &out->data, &out->type);
}

static void down_weight(pl_runner *r, dev_weight *w) {
    if (w->data && !w->alias) {
        if (w->vector) r->be->ops->free(r->be, w->data);
        else r->be->ops->free_weight(r->be, w->data, w->src);
    }
    w->data = NULL;
}

void pl_runner_destroy(pl_runner *r) {
    if (!r) return;
    pl_backend *be = r->be;
    if (r->w) {
        size_t n = pl_model_n_slots(&r->m->cfg);
        for (size_t s = 0; s < n; s++) down_weight(r, &r->w[s]);
        pl_free(r->w);
    }
    be->ops->free(be, r->inv_freq);
    be->ops->free(be, r->kv_cache);
    void *bufs[] = {r->x, r->xb, r->xb2, r->q, r->k, r->v, r->att, r->hb, r->hb2, r->xs,
                    r->logits, r->d_ids, r->d_pos, r->d_qstart, r->d_ctx, r->d_tables,
                    r->d_rows, r->d_pairs, r->d_slots, r->d_gather};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) be->ops->free(be, bufs[i]);
    pl_free(r->h_stage);
    pl_free(r->h_gather);
    pl_free(r);
}

static pl_status upload_model(pl_runner *r) {
    const pl_model *m = r->m;
    const pl_model_config *c = &m->cfg;
    size_t n = pl_model_n_slots(c);
    /* a shard's output projection is its own slice, tied or not */
    bool own_output = !c->tied_embeddings || m->shard.size > 1;
    r->w = pl_calloc(n, sizeof *r->w);
    if (!r->w) return pl_fail(PL_ERR_OUT_OF_MEMORY, "runner: weight table");
    for (size_t s = 0; s < n; s++) {
        int layer;
        pl_tensor_role role = pl_model_slot_role(c, s, &layer);
        if (!pl_model_stores_tensor(c, role) && !(role == PL_T_OUTPUT && own_output)) continue;
        const pl_weight *w = &m->w[s];
        if (!w->data)
            return pl_fail(PL_ERR_INVALID_ARGUMENT, "%s: tensor %s of layer %d has no data",
                           m->name, pl_tensor_spec_of(role)->hf, layer);
        pl_status st = up_weight(r, w, pl_tensor_spec_of(role)->rows == PL_DIM_NONE, &r->w[s]);
        if (st != PL_OK) return pl_fail_prefix(st, "%s: uploading %s", m->name,
                                               pl_tensor_spec_of(role)->hf);
    }
    if (!own_output) {
        *dw(r, PL_T_OUTPUT, 0) = *dw(r, PL_T_TOKEN_EMBD, 0);
        dw(r, PL_T_OUTPUT, 0)->alias = true;
    }
    float inv[1024];
    if (c->head_dim / 2 > 1024)
        return pl_fail(PL_ERR_UNSUPPORTED, "head_dim %d > 2048", c->head_dim);
    pl_model_rope_inv_freq(c, inv);
    PL_TRY(balloc(r, (size_t)(c->head_dim / 2) * sizeof(float), "rope frequencies",
                  (void **)&r->inv_freq));
    return r->be->ops->upload(r->be, r->inv_freq, inv, (size_t)(c->head_dim / 2) * sizeof(float));
}

static pl_status alloc_workspace(pl_runner *r) {
    const pl_model_config *c = &r->lc;
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
        {(void **)&r->logits, S * (size_t)r->vocab_stride * F, "logits"},
#define DEVICE(name, type, dev, cap, used) {(void **)&r->dev, (cap) * sizeof(type), #name},
        PL_BATCH_ARRAYS(DEVICE)
#undef DEVICE
    };
    for (size_t i = 0; i < sizeof plan / sizeof plan[0]; i++)
        PL_TRY(balloc(r, plan[i].n, plan[i].what, plan[i].p));
    return PL_OK;
}

/* The buffers collectives need: the gathered logits, and a host stage for a device backend
 * whose communicator takes host memory. */
static pl_status alloc_tp_buffers(pl_runner *r) {
    size_t S = (size_t)r->lim.max_seqs, F = sizeof(float), N = (size_t)r->comm->size;
    size_t gather = N * S * (size_t)r->vocab_stride;
    if (!r->be->is_host && !r->comm->device) {
        r->h_stage = pl_malloc((size_t)r->lim.max_tokens * (size_t)r->lc.dim * F);
        if (!r->h_stage) return pl_fail(PL_ERR_OUT_OF_MEMORY, "runner: all-reduce stage");
    }
    if (r->comm->device && !r->be->is_host)
        PL_TRY(balloc(r, gather * F, "gathered logits", (void **)&r->d_gather));
    r->h_gather = pl_calloc(gather, F); /* the last rank sends its padding too */
    if (!r->h_gather) return pl_fail(PL_ERR_OUT_OF_MEMORY, "runner: gathered logits");
    return PL_OK;
}

pl_status pl_runner_set_tp(pl_runner *r, pl_comm *comm, pl_tp_link *link) {
    if (!comm || comm->size != (r->m->shard.size > 1 ? r->m->shard.size : 1) ||
        comm->rank != r->m->shard.rank)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "runner: the communicator (rank %d of %d) does "
                       "not match the shard (rank %d of %d)", comm ? comm->rank : -1,
                       comm ? comm->size : 0, r->m->shard.rank, r->m->shard.size);
    if (comm->device && r->be->is_host)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "--distributed-backend nccl needs --backend cuda");
    r->comm = comm;
    r->link = link;
    if (comm->size > 1 || comm->device) return alloc_tp_buffers(r);
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
    pl_model_local_config(m, &r->lc);
    bool sharded = m->shard.size > 1;
    r->vocab_local = sharded ? m->shard.vocab : m->cfg.vocab_size;
    r->vocab_stride = sharded ? m->shard.vocab_stride : m->cfg.vocab_size;
    r->kv = (pl_kv_layout){.n_layers = r->lc.n_layers, .n_blocks = lim->n_blocks,
                           .n_kv_heads = r->lc.n_kv_heads, .block_size = lim->block_size,
                           .head_dim = r->lc.head_dim, .dtype = be->kv_dtype};
    pl_status s = upload_model(r);
    if (s == PL_OK) s = alloc_workspace(r);
    if (s == PL_OK)
        s = balloc(r, pl_runner_kv_block_bytes(&r->lc, lim->block_size, be->kv_dtype) *
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

static void count_matmul(pl_runner *r, int rows, int d_in, int d_out, pl_wtype wt) {
    const pl_wtype_traits *t = pl_wtype_traits_of(wt);
    r->prof.matmul_flops += 2.0 * rows * d_in * (double)d_out;
    r->prof.matmul_bytes += (double)d_in * d_out * t->block_bytes / t->block_elems +
                            4.0 * rows * ((double)d_in + d_out);
}

static pl_matmul_part part(float *out, const dev_weight *w, int d_out) {
    return (pl_matmul_part){.out = out, .w = w->data, .w_type = w->type, .d_out = d_out};
}

/* The products of one input in one backend op (see pl_backend_matmul_group). */
static pl_status matmul_group(pl_runner *r, const pl_matmul_part *parts, int n_parts,
                              const float *x, int rows, int d_in) {
    pl_backend *be = r->be;
    if (r->profiling)
        for (int i = 0; i < n_parts; i++)
            count_matmul(r, rows, d_in, parts[i].d_out, parts[i].w_type);
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

/* Sums buf (n floats, backend memory) across the ranks, in place. */
static pl_status all_reduce(pl_runner *r, float *buf, size_t n) {
    if (!r->comm || (r->comm->size == 1 && !r->comm->device)) return PL_OK;
    pl_backend *be = r->be;
    uint64_t t0 = pl_now_ns();
    pl_status st;
    if (r->comm->device || be->is_host) {
        /* a host backend's ops are done when they return; sync reports a device's errors */
        if (be->is_host) PL_TRY(be->ops->sync(be));
        st = pl_comm_all_reduce_sum(r->comm, buf, n);
    } else {
        PL_TRY(be->ops->download(be, r->h_stage, buf, n * sizeof(float)));
        st = pl_comm_all_reduce_sum(r->comm, r->h_stage, n);
        if (st == PL_OK) st = be->ops->upload(be, buf, r->h_stage, n * sizeof(float));
    }
    uint64_t t1 = pl_now_ns();
    r->comm_ns += t1 - t0;
    if (r->profiling) {
        r->prof.ns[PL_OP_COMM] += t1 - t0;
        r->prof.calls[PL_OP_COMM]++;
        if (r->hook) r->hook(r->hook_ctx, PL_OP_COMM, t0, t1);
    }
    return st;
}

/* r->logits (n, vocab_local) of every rank into out (n, vocab) on the host (NULL: gathered
 * but not wanted, the ranks other than 0). Each rank sends n * vocab_stride floats; rank q's
 * rows are vocab_local(q) long, packed. */
static pl_status gather_logits(pl_runner *r, int n, float *out) {
    pl_backend *be = r->be;
    int V = r->m->cfg.vocab_size, stride = r->vocab_stride, N = r->comm->size;
    size_t chunk = (size_t)n * (size_t)stride * sizeof(float);
    uint64_t t0 = pl_now_ns();
    if (r->comm->device && !be->is_host) {
        PL_TRY(pl_comm_all_gather(r->comm, r->logits, chunk, r->d_gather));
        PL_TRY(be->ops->download(be, r->h_gather, r->d_gather, chunk * (size_t)N));
    } else {
        const float *mine = r->logits;
        if (!be->is_host) {
            float *h_mine = r->h_gather + (size_t)r->comm->rank * (size_t)n * stride;
            PL_TRY(be->ops->download(be, h_mine, r->logits, (size_t)n * r->vocab_local * 4));
            mine = h_mine; /* all_gather copies a rank's own part in place */
        } else {
            PL_TRY(be->ops->sync(be));
        }
        PL_TRY(pl_comm_all_gather(r->comm, mine, chunk, r->h_gather));
    }
    r->comm_ns += pl_now_ns() - t0;
    if (!out) return PL_OK;
    for (int q = 0; q < N; q++) {
        int v0 = q * stride, vl = V - v0 < stride ? V - v0 : stride;
        const float *src = r->h_gather + (size_t)q * (size_t)n * stride;
        for (int i = 0; i < n; i++)
            memcpy(out + (size_t)i * V + v0, src + (size_t)i * vl, (size_t)vl * sizeof(float));
    }
    return PL_OK;
}

/* The final hidden state (r->xb) of rows d_rows (backend memory, n) through lm_head into
 * out_logits (n, vocab) on the host (NULL on ranks other than 0). */
static pl_status logits_of_rows(pl_runner *r, const int32_t *d_rows, int n, float *out_logits) {
    pl_backend *be = r->be;
    const pl_model_config *c = &r->lc;
    OP(PL_OP_LOGITS, be->ops->gather_rows(be, r->xs, r->xb, d_rows, n, c->dim));
    PL_TRY(matmul(r, r->logits, r->xs, dw(r, PL_T_OUTPUT, 0), n, c->dim, r->vocab_local));
    if (r->comm && (r->comm->size > 1 || r->comm->device)) {
        PL_TRY(gather_logits(r, n, out_logits));
        return be->ops->sync(be);
    }
    PL_TRY(be->ops->download(be, out_logits, r->logits, (size_t)n * c->vocab_size * sizeof(float)));
    return be->ops->sync(be);
}

/* The forward pass of b on this rank (with the collectives of a group). */
static pl_status forward(pl_runner *r, const pl_runner_batch *b, float *out_logits) {
    PL_TRY(check_batch(r, b));
    const pl_model_config *c = &r->lc;
    pl_backend *be = r->be;
    int T = b->n_tokens, D = c->dim, H = c->hidden_dim, hd = c->head_dim;
    int qd = c->n_heads * hd, kvd = c->n_kv_heads * hd;
    size_t layer_elems = pl_kv_layer_elems(&r->kv), esz = pl_dtype_size(r->kv.dtype);

    PL_TRY(upload_batch(r, b));
    if (b->n_copies > 0)
        OP(PL_OP_COPY, be->ops->copy_blocks(be, r->kv_cache, &r->kv, r->d_pairs, b->n_copies));

    const pl_arch_info *arch = pl_arch_get(c->arch);
    pl_attn_batch ab = {
        .n_seqs = b->n_seqs, .n_tokens = T, .query_start = r->d_qstart,
        .context_lens = r->d_ctx, .block_tables = r->d_tables,
        .max_blocks_per_seq = r->lim.max_blocks_per_seq, .max_query_len = b->max_query_len,
        .max_context_len = b->max_context_len, .n_heads = c->n_heads,
        .n_kv_heads = c->n_kv_heads, .head_dim = hd, .block_size = r->lim.block_size,
        .scale = 1.0f / sqrtf((float)hd), .sliding_window = c->sliding_window,
    };
    const dev_weight *embd = dw(r, PL_T_TOKEN_EMBD, 0);

    OP(PL_OP_EMBED, be->ops->embed(be, r->x, r->d_ids, T, embd->data, embd->type, D));
    OP(PL_OP_NORM, be->ops->rmsnorm(be, r->xb, r->x, dvec(r, PL_T_ATTN_NORM, 0), T, D,
                                    c->norm_eps));
    for (int l = 0; l < c->n_layers; l++) {
        char *kc = (char *)r->kv_cache + 2 * (size_t)l * layer_elems * esz;
        char *vc = kc + layer_elems * esz;

        const pl_matmul_part qkv[] = {part(r->q, dw(r, PL_T_ATTN_Q, l), qd),
                                      part(r->k, dw(r, PL_T_ATTN_K, l), kvd),
                                      part(r->v, dw(r, PL_T_ATTN_V, l), kvd)};
        PL_TRY(matmul_group(r, qkv, 3, r->xb, T, D));
        if (arch->qkv_bias) { /* a linear layer's bias: timed with the products */
            OP(PL_OP_MATMUL, be->ops->add_bias(be, r->q, dvec(r, PL_T_ATTN_Q_BIAS, l), T, qd));
            OP(PL_OP_MATMUL, be->ops->add_bias(be, r->k, dvec(r, PL_T_ATTN_K_BIAS, l), T, kvd));
            OP(PL_OP_MATMUL, be->ops->add_bias(be, r->v, dvec(r, PL_T_ATTN_V_BIAS, l), T, kvd));
        }
        if (arch->qk_norm) { /* each head of q and k normalised over head_dim, in place */
            OP(PL_OP_NORM, be->ops->rmsnorm(be, r->q, r->q, dvec(r, PL_T_ATTN_Q_NORM, l),
                                            T * c->n_heads, hd, c->norm_eps));
            OP(PL_OP_NORM, be->ops->rmsnorm(be, r->k, r->k, dvec(r, PL_T_ATTN_K_NORM, l),
                                            T * c->n_kv_heads, hd, c->norm_eps));
        }
        OP(PL_OP_ROPE, be->ops->rope(be, r->q, r->k, r->d_pos, r->inv_freq, T, c->n_heads,
                                     c->n_kv_heads, hd, (pl_rope_layout)c->rope_layout));
        OP(PL_OP_KV_STORE, be->ops->kv_store(be, kc, vc, r->k, r->v, r->d_slots, T,
                                             c->n_kv_heads, hd, r->lim.block_size));
        OP(PL_OP_ATTENTION, be->ops->attention(be, r->att, r->q, kc, vc, &ab));
        PL_TRY(matmul(r, r->xb2, r->att, dw(r, PL_T_ATTN_OUT, l), T, qd, D));
        PL_TRY(all_reduce(r, r->xb2, (size_t)T * D));
        OP(PL_OP_NORM, be->ops->add_rmsnorm(be, r->xb, r->x, r->xb2, dvec(r, PL_T_FFN_NORM, l),
                                            T, D, c->norm_eps));

        const pl_matmul_part gate_up[] = {part(r->hb, dw(r, PL_T_FFN_GATE, l), H),
                                          part(r->hb2, dw(r, PL_T_FFN_UP, l), H)};
        PL_TRY(matmul_group(r, gate_up, 2, r->xb, T, D));
        OP(PL_OP_ACTIVATION, be->ops->silu_mul(be, r->hb, r->hb, r->hb2, (size_t)T * H));
        PL_TRY(matmul(r, r->xb2, r->hb, dw(r, PL_T_FFN_DOWN, l), T, H, D));
        PL_TRY(all_reduce(r, r->xb2, (size_t)T * D));
        const float *next = l + 1 < c->n_layers ? dvec(r, PL_T_ATTN_NORM, l + 1)
                                                : dvec(r, PL_T_OUTPUT_NORM, 0);
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

static pl_status logits(pl_runner *r, const int32_t *rows, int n_rows, float *out_logits) {
    if (n_rows < 1 || n_rows > r->lim.max_seqs)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "runner: %d logit rows (1 .. %d allowed)", n_rows,
                       r->lim.max_seqs);
    PL_TRY(r->be->ops->upload(r->be, r->d_rows, rows, (size_t)n_rows * sizeof *rows));
    return logits_of_rows(r, r->d_rows, n_rows, out_logits);
}

pl_status pl_runner_run(pl_runner *r, const pl_runner_batch *b, float *out_logits) {
    r->comm_ns = 0;
    if (!r->link) return forward(r, b, out_logits);
    PL_TRY(check_batch(r, b)); /* a batch the others would refuse is not sent */
    pl_tp_link_lock(r->link);
    size_t len;
    void *buf = pl_tp_link_payload_buf(r->link);
    pl_status st = pl_plan_encode_run(b, r->lim.block_size, r->lim.max_blocks_per_seq, buf,
                                      r->link->max_payload, &len);
    uint64_t t0 = pl_now_ns();
    if (st == PL_OK) st = pl_tp_link_send(r->link, PL_PLAN_RUN, buf, len);
    r->comm_ns += pl_now_ns() - t0;
    if (st == PL_OK) st = forward(r, b, out_logits);
    pl_tp_link_unlock(r->link);
    return st;
}

pl_status pl_runner_logits(pl_runner *r, const int32_t *rows, int n_rows, float *out_logits) {
    if (!r->link) return logits(r, rows, n_rows, out_logits);
    pl_tp_link_lock(r->link);
    size_t len;
    void *buf = pl_tp_link_payload_buf(r->link);
    pl_status st = pl_plan_encode_rows(rows, n_rows, buf, r->link->max_payload, &len);
    if (st == PL_OK) st = pl_tp_link_send(r->link, PL_PLAN_LOGITS, buf, len);
    if (st == PL_OK) st = logits(r, rows, n_rows, out_logits);
    pl_tp_link_unlock(r->link);
    return st;
}

pl_status pl_runner_stop_followers(pl_runner *r) {
    if (!r->link) return PL_OK;
    pl_tp_link_lock(r->link);
    pl_status st = pl_tp_link_send(r->link, PL_PLAN_STOP, NULL, 0);
    pl_tp_link_unlock(r->link);
    return st;
}

uint64_t pl_runner_comm_ns(const pl_runner *r) { return r->comm_ns; }

pl_status pl_runner_follow(pl_runner *r, pl_tp_link *link, uint64_t stop_after,
                           uint64_t *out_steps, uint64_t *out_tokens) {
    pl_batch_storage st;
    PL_TRY(pl_batch_storage_alloc(&st, &r->lim));
    int32_t *rows = pl_calloc((size_t)r->lim.max_seqs, sizeof *rows);
    pl_status s = rows ? PL_OK : pl_fail(PL_ERR_OUT_OF_MEMORY, "runner: logit rows");
    uint64_t steps = 0, tokens = 0;
    while (s == PL_OK) {
        pl_plan_header h;
        const void *payload;
        s = pl_tp_link_recv(link, &h, &payload);
        if (s != PL_OK) break;
        if (h.cmd == PL_PLAN_STOP) break;
        if (h.cmd == PL_PLAN_RUN && stop_after && steps == stop_after) {
            s = pl_fail(PL_ERR_BACKEND, "test hook: leaving silently before step %llu",
                        (unsigned long long)steps + 1);
            break;
        }
        if (h.cmd == PL_PLAN_RUN) {
            pl_runner_batch b;
            s = pl_plan_decode_run(payload, h.payload_bytes, &link->lim, &st, &b);
            r->comm_ns = 0;
            if (s == PL_OK) s = forward(r, &b, NULL);
            steps++;
            tokens += (uint64_t)b.n_tokens;
        } else { /* LOGITS */
            int n;
            s = pl_plan_decode_rows(payload, h.payload_bytes, &link->lim, rows, &n);
            if (s == PL_OK) s = logits(r, rows, n, NULL);
        }
    }
    pl_free(rows);
    pl_batch_storage_free(&st);
    *out_steps = steps;
    *out_tokens = tokens;
    return s;
}
