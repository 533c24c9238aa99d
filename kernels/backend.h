/*
 * kernels/backend.h - the compute backend interface: a table of memory functions and ops.
 *
 * engine/runner.c walks the model's layers calling these; it is the only kernels header the
 * engine includes. Three implementations: ref/ (naive loops, the oracle every other path is
 * checked against), cpu/ (threads, SIMD, BLAS) and cuda/ (own kernels + cuBLAS).
 *
 * Conventions for every op
 * - All pointers are this backend's memory (see alloc/upload), except the int arguments and
 *   the host-side fields of pl_attn_batch marked "host".
 * - Matrices are row-major. Activations are f32. Weights are of any pl_wtype (util/wtype.h:
 *   f32, f16, bf16 and the block-quantised types) as the handle from upload_weight says; a
 *   row of a weight is a whole number of its type's blocks (d_in, dim a multiple of the
 *   block). Norm weights and rope frequencies are always f32.
 * - Ops are asynchronous on device backends: errors of an op may surface at the next sync.
 * - Unless an op says "out may alias", outputs must not overlap inputs.
 * - No size is assumed to be a multiple of anything (head_dim 8, hidden 172 must work).
 *
 * KV cache: one allocation holding, for every layer, a K and a V tensor, each
 * (n_blocks, n_kv_heads, block_size, head_dim) of the backend's kv_dtype: a block's tokens of
 * one KV head are contiguous so attention reads them at unit stride.
 * Layer l's K starts at element 2*l*layer_elems, its V at (2*l+1)*layer_elems, where
 * layer_elems = n_blocks * n_kv_heads * block_size * head_dim. A slot
 * (block_id * block_size + offset) of KV head h lives at element
 * ((block_id * n_kv_heads + h) * block_size + offset) * head_dim of that tensor.
 */
#ifndef PL_KERNELS_BACKEND_H
#define PL_KERNELS_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/status.h"
#include "util/wtype.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pl_backend pl_backend;

typedef enum pl_rope_layout {
    PL_ROPE_INTERLEAVED = 0, /* Meta / llama2.c: rotates pairs (2j, 2j+1) of each head */
    PL_ROPE_HALF = 1,        /* Hugging Face rotate_half: rotates pairs (j, j + head_dim/2) */
} pl_rope_layout;

/* Shape of the KV cache allocation (see the header comment). */
typedef struct pl_kv_layout {
    int n_layers;
    int n_blocks;
    int n_kv_heads;
    int block_size;
    int head_dim;
    pl_dtype dtype; /* the backend's kv_dtype */
} pl_kv_layout;

static inline size_t pl_kv_layer_elems(const pl_kv_layout *l) {
    return (size_t)l->n_blocks * (size_t)l->n_kv_heads * (size_t)l->block_size * (size_t)l->head_dim;
}

/* One step's attention metadata for a flattened batch of n_seqs sequences. Sequence s owns
 * query rows query_start[s] .. query_start[s+1]-1 (q_len of them: 1 for a decode, a chunk for
 * a prefill). After this step's kv_store its cache holds context_lens[s] tokens; query row j
 * (0-based within s) is at position context_lens[s] - q_len + j and attends causally to
 * positions 0 .. that position, read through block_tables. */
typedef struct pl_attn_batch {
    int n_seqs;                  /* host */
    int n_tokens;                /* host: total query rows = query_start[n_seqs] */
    const int32_t *query_start;  /* (n_seqs + 1) */
    const int32_t *context_lens; /* (n_seqs) */
    const int32_t *block_tables; /* (n_seqs, max_blocks_per_seq) block ids; unused entries any */
    int max_blocks_per_seq;      /* host */
    int max_query_len;           /* host: max over s of q_len (launch shapes) */
    int max_context_len;         /* host: max over s of context_lens[s] (split-K choice) */
    int n_heads;                 /* host: query heads; n_heads % n_kv_heads == 0 */
    int n_kv_heads;              /* host */
    int head_dim;                /* host */
    int block_size;              /* host */
    float scale;                 /* host: usually 1/sqrt(head_dim) */
    int sliding_window;          /* host: 0 = none; else a query at position p attends only to
                                    positions p - sliding_window + 1 .. p (Mistral; the Hugging
                                    Face / vLLM rule). Negative: PL_ERR_INVALID_ARGUMENT. A
                                    window >= max_context_len gives the same bits as 0. */
} pl_attn_batch;

/* The first position a query at position pos attends to under sliding_window (0: none). */
static inline int pl_attn_window_start(int pos, int sliding_window) {
    int first = pos - sliding_window + 1;
    return sliding_window > 0 && first > 0 ? first : 0;
}

/* One product of a matmul group: out (n_rows, d_out) = x @ w^T, w (d_out, d_in) of w_type. */
typedef struct pl_matmul_part {
    float *out;
    const void *w;
    pl_wtype w_type;
    int d_out;
} pl_matmul_part;

#define PL_MATMUL_MAX_PARTS 4

typedef struct pl_backend_ops {
    const char *name; /* "ref", "cpu", "cuda" */

    void (*destroy)(pl_backend *be);

    /* ---- memory ---- */
    pl_status (*alloc)(pl_backend *be, size_t n_bytes, void **out); /* zeroed */
    void (*free)(pl_backend *be, void *p);                          /* NULL is a no-op */
    pl_status (*upload)(pl_backend *be, void *dst, const void *src, size_t n_bytes);
    pl_status (*download)(pl_backend *be, void *dst, const void *src, size_t n_bytes);
    pl_status (*sync)(pl_backend *be); /* waits for all ops; reports async errors */
    /* Memory the backend may still use: device free/total on CUDA, host RAM on CPU backends. */
    pl_status (*memory_info)(pl_backend *be, size_t *out_free, size_t *out_total);

    /* Makes host weights (n_elems of src_type, row-major, whole blocks) usable by
     * matmul/embed. Host backends may return src itself (*out == src: zero copy; the caller
     * keeps src alive); device backends copy (and may convert, reporting the stored type in
     * *out_type). Release with free_weight. */
    pl_status (*upload_weight)(pl_backend *be, const void *src, pl_wtype src_type,
                               size_t n_elems, void **out, pl_wtype *out_type);
    void (*free_weight)(pl_backend *be, void *w, const void *src);

    /* ---- ops ---- */
    /* out (n_tokens, dim) = table[ids[i]] (table: (vocab, dim) of type). ids are in range. */
    pl_status (*embed)(pl_backend *be, float *out, const int32_t *ids, int n_tokens,
                       const void *table, pl_wtype type, int dim);

    /* out (n_rows, dim) = x / sqrt(mean(x^2) + eps) * w (w: (dim) f32). out may alias x. */
    pl_status (*rmsnorm)(pl_backend *be, float *out, const float *x, const float *w, int n_rows,
                         int dim, float eps);

    /* residual (n_rows, dim) += delta; then out = rmsnorm(residual) * w. */
    pl_status (*add_rmsnorm)(pl_backend *be, float *out, float *residual, const float *delta,
                             const float *w, int n_rows, int dim, float eps);

    /* out (n_rows, d_out) = x (n_rows, d_in) @ w^T, w: (d_out, d_in) of w_type. */
    pl_status (*matmul)(pl_backend *be, float *out, const float *x, const void *w,
                        pl_wtype w_type, int n_rows, int d_in, int d_out);

    /* In place. q (n_tokens, n_heads, head_dim), k (n_tokens, n_kv_heads, head_dim); token i
     * is at positions[i]; pair j (0 <= j < head_dim/2) rotates by positions[i] * inv_freq[j]. */
    pl_status (*rope)(pl_backend *be, float *q, float *k, const int32_t *positions,
                      const float *inv_freq, int n_tokens, int n_heads, int n_kv_heads,
                      int head_dim, pl_rope_layout layout);

    /* Writes k, v (n_tokens, n_kv_heads, head_dim) into one layer's caches at slots[i]
     * (slots (n_tokens) int64; a negative slot is padding and skipped). */
    pl_status (*kv_store)(pl_backend *be, void *k_cache, void *v_cache, const float *k,
                          const float *v, const int64_t *slots, int n_tokens, int n_kv_heads,
                          int head_dim, int block_size);

    /* Paged causal attention (GQA: query head h uses KV head h / (n_heads / n_kv_heads)).
     * out (n_tokens, n_heads, head_dim), q (n_tokens, n_heads, head_dim); one layer's caches. */
    pl_status (*attention)(pl_backend *be, float *out, const float *q, const void *k_cache,
                           const void *v_cache, const pl_attn_batch *b);

    /* out (n) = silu(gate) * up, silu(x) = x / (1 + exp(-x)). out may alias gate. */
    pl_status (*silu_mul)(pl_backend *be, float *out, const float *gate, const float *up,
                          size_t n);

    /* out (n_rows, dim) = x[rows[i]] (x: (*, dim)); rows (n_rows) int32 in backend memory. */
    pl_status (*gather_rows)(pl_backend *be, float *out, const float *x, const int32_t *rows,
                             int n_rows, int dim);

    /* Copy-on-write: for each pair (src, dst) (pairs: (n_pairs, 2) int32), copies block src to
     * block dst in K and V of every layer of the cache. */
    pl_status (*copy_blocks)(pl_backend *be, void *kv_cache, const pl_kv_layout *layout,
                             const int32_t *pairs, int n_pairs);

    /* Optional (NULL: pl_backend_matmul_group runs matmul once per part). Every part's
     * product of the same x, as one op: q, k and v; gate and up. Kept last in the table: the
     * CUDA backend's table is positional. */
    pl_status (*matmul_group)(pl_backend *be, const pl_matmul_part *parts, int n_parts,
                              const float *x, int n_rows, int d_in);

    /* x (n_rows, dim) += bias (dim, f32) on every row, in place (Qwen2's q/k/v biases). */
    pl_status (*add_bias)(pl_backend *be, float *x, const float *bias, int n_rows, int dim);
} pl_backend_ops;

struct pl_backend {
    const pl_backend_ops *ops;
    void *ctx;          /* the implementation's state */
    bool is_host;       /* memory is host memory: upload/download are plain copies */
    pl_dtype kv_dtype;  /* element type of the KV cache this backend reads and writes */
    /* What upload_weight stores an f32 weight as; NONE = as given (f32). CUDA: f16. The engine
     * sizes memory from it before any weight is uploaded. */
    pl_wtype f32_weight_type;
    /* This backend's bit in util/wtype.h's table (PL_WTYPE_ON_REF/CPU/CUDA): the weight types
     * whose row has it are the ones its matmul and embed take as stored. */
    unsigned wtype_bit;
    /* Device backends: the queue every op is enqueued on (a cudaStream_t) and the device, for
     * collectives that run in order with the ops (NCCL, dist/). NULL and 0 on host backends. */
    void *stream;
    int device;
};

typedef struct pl_backend_options {
    int n_threads;     /* cpu: worker threads; 0 = all cores */
    int device;        /* cuda: device ordinal */
    pl_dtype kv_dtype; /* AUTO = PL_KV_DTYPE_AUTO */
} pl_backend_options;

/* What kv_dtype AUTO means on every backend: f16, as llama.cpp's default. Batched decode reads
 * more KV bytes than weight bytes, and f16 halves them (docs/cpu_performance.md has the
 * throughput and the token agreement; docs/api.md what it means for greedy output). */
#define PL_KV_DTYPE_AUTO PL_DTYPE_F16

/* Each returns PL_ERR_UNSUPPORTED for a kv_dtype it cannot store. */
pl_status pl_backend_ref_create(const pl_backend_options *opt, pl_backend **out);
pl_status pl_backend_cpu_create(const pl_backend_options *opt, pl_backend **out);
/* PL_ERR_UNSUPPORTED when built without CUDA; PL_ERR_BACKEND when no device is usable. */
pl_status pl_backend_cuda_create(const pl_backend_options *opt, pl_backend **out);

static inline void pl_backend_destroy(pl_backend *be) {
    if (be) be->ops->destroy(be);
}

/* PL_ERR_INVALID_ARGUMENT unless parts holds 1 .. PL_MATMUL_MAX_PARTS parts. */
static inline pl_status pl_check_matmul_parts(const pl_matmul_part *parts, int n_parts) {
    if (!parts || n_parts < 1 || n_parts > PL_MATMUL_MAX_PARTS)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "matmul_group: %d parts (1..%d)", n_parts,
                       PL_MATMUL_MAX_PARTS);
    return PL_OK;
}

/* parts[i].out = x @ parts[i].w^T for i < n_parts (1 .. PL_MATMUL_MAX_PARTS), in one op where
 * the backend has matmul_group (which checks its arguments itself), else part by part. */
static inline pl_status pl_backend_matmul_group(pl_backend *be, const pl_matmul_part *parts,
                                                int n_parts, const float *x, int n_rows,
                                                int d_in) {
    if (be->ops->matmul_group) return be->ops->matmul_group(be, parts, n_parts, x, n_rows, d_in);
    PL_TRY(pl_check_matmul_parts(parts, n_parts));
    for (int i = 0; i < n_parts; i++) {
        const pl_matmul_part *p = &parts[i];
        PL_TRY(be->ops->matmul(be, p->out, x, p->w, p->w_type, n_rows, d_in, p->d_out));
    }
    return PL_OK;
}

#ifdef __cplusplus
}
#endif
#endif
