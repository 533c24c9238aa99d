/*
 * kernels/cuda/cuda_backend.h - CUDA backend functions beyond the pl_backend_ops table, callable
 * from C: greedy sampling on the device, and the split-K policy of decode attention (tests use
 * it to force both paths on small contexts).
 *
 * Each takes a backend made by pl_backend_cuda_create and returns PL_ERR_INVALID_ARGUMENT for
 * any other backend.
 */
#ifndef PL_KERNELS_CUDA_BACKEND_H
#define PL_KERNELS_CUDA_BACKEND_H

#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pl_cuda_split_mode {
    PL_CUDA_SPLIT_AUTO = 0,   /* split when the context is long and the grid too small */
    PL_CUDA_SPLIT_NEVER = 1,  /* one block per (head, sequence) whatever the context */
    PL_CUDA_SPLIT_ALWAYS = 2, /* split whenever the context spans more than one partition */
} pl_cuda_split_mode;

/* partition_tokens: context tokens per partition, a positive multiple of 32 (default 512). */
pl_status pl_cuda_set_attention_split(pl_backend *be, pl_cuda_split_mode mode,
                                      int partition_tokens);

/* out (n_rows) int32 = index of the largest of each logits row (n_rows, vocab), the lowest
 * index on ties; NaN never wins. All pointers are backend memory. Proposed as a table op
 * (`argmax`) so greedy decoding downloads n_rows ints instead of n_rows * vocab floats. */
pl_status pl_cuda_argmax(pl_backend *be, int32_t *out, const float *logits, int n_rows,
                         int vocab);

/* true when be was made by pl_backend_cuda_create. */
bool pl_backend_is_cuda(const pl_backend *be);

#ifdef __cplusplus
}
#endif
#endif
