/*
 * engine/runner.h - runs the model over one flattened batch on a backend.
 *
 * The runner owns everything that lives in backend memory: the weights it uploaded, the rotary
 * frequencies, the KV cache (one allocation indexed by block id, laid out as kernels/backend.h
 * says) and the per-step workspace, all sized at create for the largest step the scheduler can
 * produce, so a step allocates nothing.
 */
#ifndef PL_ENGINE_RUNNER_H
#define PL_ENGINE_RUNNER_H

#include <stdint.h>

#include "dist/comm.h"
#include "kernels/backend.h"
#include "model/model.h"

/* Op kinds the profiler accounts time to. */
typedef enum pl_op_kind {
    PL_OP_EMBED, PL_OP_NORM, PL_OP_MATMUL, PL_OP_ROPE, PL_OP_KV_STORE, PL_OP_ATTENTION,
    PL_OP_ACTIVATION, PL_OP_LOGITS, PL_OP_COPY, PL_OP_COMM, PL_OP_COUNT
} pl_op_kind;

const char *pl_op_kind_name(pl_op_kind k);

/* The arrays of one step's batch, described once: X(name, element type, the runner's device
 * copy, elements at capacity, elements a batch b uses). Capacity is in T = max_tokens,
 * S = max_seqs, B = max_blocks_per_seq of the runner's limits. The engine's host buffers
 * (pl_batch_storage), the runner's device buffers and their upload, and the workspace size
 * (pl_runner_batch_bytes) are all generated from this list. */
#define PL_BATCH_ARRAYS(X)                                                                    \
    X(token_ids, int32_t, d_ids, T, b->n_tokens)            /* token id of each row */        \
    X(positions, int32_t, d_pos, T, b->n_tokens)            /* its position in its seq */     \
    X(slots, int64_t, d_slots, T, b->n_tokens)              /* KV slot it is written to */    \
    X(query_start, int32_t, d_qstart, S + 1, b->n_seqs + 1) /* first row of each seq */       \
    X(context_lens, int32_t, d_ctx, S, b->n_seqs)           /* tokens each seq attends to */  \
    X(block_tables, int32_t, d_tables, S * B, b->n_seqs * B) /* (seq, block) -> block id */   \
    X(sample_rows, int32_t, d_rows, S, b->n_sample)         /* rows whose logits are wanted */\
    X(copy_pairs, int32_t, d_pairs, 2 * S, 2 * b->n_copies) /* (src, dst) copy-on-write */

/* One step's inputs, host memory, built by the engine from the scheduler's output. */
typedef struct pl_runner_batch {
    int n_seqs;
    int n_tokens;
    int max_query_len;
    int max_context_len;
    int n_sample;
    int n_copies;
#define PL_BATCH_MEMBER_(name, type, dev, cap, used) const type *name;
    PL_BATCH_ARRAYS(PL_BATCH_MEMBER_)
#undef PL_BATCH_MEMBER_
} pl_runner_batch;

/* Host storage for the arrays of the largest batch (the engine builds batches in it). */
typedef struct pl_batch_storage {
#define PL_BATCH_MEMBER_(name, type, dev, cap, used) type *name;
    PL_BATCH_ARRAYS(PL_BATCH_MEMBER_)
#undef PL_BATCH_MEMBER_
} pl_batch_storage;

typedef struct pl_runner_limits {
    int max_tokens;         /* tokens per step */
    int max_seqs;           /* sequences per step */
    int max_blocks_per_seq; /* ceil(max_model_len / block_size) */
    int n_blocks;           /* KV pool blocks */
    int block_size;
} pl_runner_limits;

typedef struct pl_runner pl_runner;

/* Bytes of KV cache per block for model m with elements of kv_dtype. */
size_t pl_runner_kv_block_bytes(const pl_model_config *cfg, int block_size, pl_dtype kv_dtype);
/* Bytes of per-step workspace for these limits (what create allocates besides weights/KV). */
size_t pl_runner_workspace_bytes(const pl_model_config *cfg, const pl_runner_limits *lim);
/* Bytes of the batch arrays at capacity (part of the workspace). */
size_t pl_runner_batch_bytes(const pl_runner_limits *lim);
/* Allocates (zeroed host memory) / frees the batch arrays at capacity. */
pl_status pl_batch_storage_alloc(pl_batch_storage *st, const pl_runner_limits *lim);
void pl_batch_storage_free(pl_batch_storage *st);

/* Uploads m's weights (zero-copy on host backends: m must outlive the runner), allocates the
 * KV cache and workspace. PL_ERR_OUT_OF_MEMORY names what did not fit. */
pl_status pl_runner_create(const pl_model *m, pl_backend *be, const pl_runner_limits *lim,
                           pl_runner **out);
void pl_runner_destroy(pl_runner *r);

/* Tensor parallelism: the runner of a shard (m->shard) joins comm's group, its rank being
 * the shard's; on rank 0 link (the caller's) carries the step plans to the others, which run
 * pl_runner_follow. Allocates the gather buffers. */
typedef struct pl_tp_link pl_tp_link;
pl_status pl_runner_set_tp(pl_runner *r, pl_comm *comm, pl_tp_link *link);
/* Ranks other than 0: runs every step rank 0 sends until it says stop (PL_OK) or a
 * collective or a plan fails. *out_steps, *out_tokens: RUN plans executed and the tokens they
 * held (a token's all-reduces are what the group's counters are checked against). stop_after > 0
 * (a test hook): returns PL_ERR_BACKEND on receiving RUN plan stop_after + 1, doing nothing
 * the others could see, as a rank that died would. */
pl_status pl_runner_follow(pl_runner *r, pl_tp_link *link, uint64_t stop_after,
                           uint64_t *out_steps, uint64_t *out_tokens);
/* Rank 0: tells the others to leave pl_runner_follow. No-op without a link. */
pl_status pl_runner_stop_followers(pl_runner *r);
/* Nanoseconds the last pl_runner_run spent in collectives (plan included). */
uint64_t pl_runner_comm_ns(const pl_runner *r);

/* Runs the forward pass for b and writes logits (n_sample, vocab) into host memory. */
pl_status pl_runner_run(pl_runner *r, const pl_runner_batch *b, float *out_logits);
/* After pl_runner_run: logits (n_rows, vocab) of any rows of that batch (n_rows <= max_seqs)
 * into host memory (prompt logprobs). Valid until the next pl_runner_run. */
pl_status pl_runner_logits(pl_runner *r, const int32_t *rows, int n_rows, float *out_logits);

/* Per-op time accounting (off by default; on, each op is followed by a backend sync). */
void pl_runner_set_profiling(pl_runner *r, bool on);
/* Nanoseconds and calls per op kind since the last reset; bytes/flops estimates for matmul
 * and attention. */
typedef struct pl_runner_profile {
    uint64_t ns[PL_OP_COUNT];
    uint64_t calls[PL_OP_COUNT];
    double matmul_flops, matmul_bytes;
    double attn_flops, attn_bytes;
} pl_runner_profile;
void pl_runner_get_profile(const pl_runner *r, pl_runner_profile *out);
/* Called after every op while profiling, with its start and end (pl_now_ns). */
typedef void (*pl_runner_op_hook)(void *ctx, pl_op_kind kind, uint64_t t0_ns, uint64_t t1_ns);
void pl_runner_set_op_hook(pl_runner *r, pl_runner_op_hook fn, void *ctx);
void pl_runner_reset_profile(pl_runner *r);

#endif
