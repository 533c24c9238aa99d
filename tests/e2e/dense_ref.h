/*
 * tests/e2e/dense_ref.h - a separately written dense forward pass: the whole-model oracle.
 *
 * Plain loops, one sequence at a time, a contiguous KV cache (seq_len, kv_dim) per layer, no
 * paging, no backend: written from the model's definition (llama2.c's run.c numerics and
 * transformers' Llama, Mistral, Qwen2 and Qwen3 modeling files), not from the engine's runner,
 * so the two can check each other. Every architecture of model/arch.h: q/k/v biases, per-head
 * q/k norms, a sliding window, head_dim apart from dim / n_heads.
 */
#ifndef PL_TEST_DENSE_REF_H
#define PL_TEST_DENSE_REF_H

#include <stdbool.h>
#include <stdint.h>

#include "model/model.h"

typedef struct dense_ref dense_ref;

/* max_len: tokens the cache holds. NULL on allocation failure. */
dense_ref *dense_ref_create(const pl_model *m, int max_len);
void dense_ref_free(dense_ref *d);
/* The KV cache's element type: with PL_DTYPE_F16, K and V are rounded to f16 as they are
 * stored (attention still computes in double), as the engine's f16 cache does; anything else
 * keeps them f32 (the default). */
void dense_ref_set_kv_dtype(dense_ref *d, pl_dtype kv);
/* Off by default. On, the input of every product with an f16 (bf16) weight is rounded to f16
 * (bf16) first, as the CUDA backend's matmul converts activations to the weights' type; an
 * f32 matrix (the routers) is read as f16, as the CUDA backend stores it. */
void dense_ref_set_round_matmul_inputs(dense_ref *d, bool on);
/* Runs token at position pos (positions must come in order 0, 1, 2, ...); returns the logits
 * (vocab), owned by d, valid until the next call. */
const float *dense_ref_forward(dense_ref *d, int32_t token, int pos);

/* Greedy generation: feeds prompt, then appends argmax tokens until n_out are produced (no
 * stop condition). out: (n_out). Returns 0, or -1 if prompt + n_out exceeds max_len. */
int dense_ref_greedy(dense_ref *d, const int32_t *prompt, int n_prompt, int n_out, int32_t *out);

#endif
