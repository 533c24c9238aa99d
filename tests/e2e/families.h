/*
 * tests/e2e/families.h - random-weight models of each architecture (Llama, Mistral, Qwen2,
 * Qwen3) written as Hugging Face directories, their greedy tokens from the dense reference, and
 * the engine's tokens on a backend compared with them: shared by the CPU suites
 * (test_e2e_families.c) and the CUDA ones (test_cuda_families.c).
 *
 * A family case: pl_fixture_family_config(arch, variant) (odd sizes, GQA, tied for even
 * variants), weights from seed, written in f32 (or bf16 when asked) with config.json and
 * generation_config.json; FAMILY_PROMPTS prompts of 3 to 40 tokens, FAMILY_OUT greedy tokens
 * each past any EOS (ignore_eos), f32 KV cache (greedy tokens are then independent of the
 * batch: commit 825e135).
 */
#ifndef PL_TEST_FAMILIES_H
#define PL_TEST_FAMILIES_H

#include <stdbool.h>
#include <stdint.h>

#include "e2e_util.h"
#include "model/model.h"

#define FAMILY_PROMPTS 4
#define FAMILY_OUT 200

typedef struct family_case {
    pl_arch arch;
    int variant;        /* even: tied embeddings, odd: untied */
    uint64_t seed;
    pl_dtype stored;    /* the safetensors type: F32 (also AUTO) or BF16 */
    int sliding_window; /* Mistral: 0 keeps the config's (the whole context) */
    bool router_tie;    /* experts: in every layer the router rows of experts 4 and 6 are
                           expert 1's, all three tripled, so the top two tie three ways */
} family_case;

typedef struct family_run {
    family_case fc;
    char dir[512];      /* the written directory */
    pl_model *model;    /* as loaded with `weights` (what the dense reference reads) */
    pl_dtype weights;   /* load type: AUTO, or F16 for the CUDA comparison */
    e2e_prompts prompts;
    e2e_outputs want;   /* the dense reference's FAMILY_OUT greedy tokens per prompt */
} family_run;

/* Writes the case, loads it with `weights` and runs the dense reference (f32 KV; with
 * round_inputs, matmul inputs rounded to the weights' 16-bit type as the CUDA backend does).
 * Fails the test on any error. */
void family_setup(family_run *f, const family_case *fc, pl_dtype weights, bool round_inputs);
void family_teardown(family_run *f);

/* A fresh engine on backend over f->dir (weight_dtype f->weights, f32 KV, blocks of 4,
 * 32-token steps so prompts are chunked) runs the prompts greedily for FAMILY_OUT tokens,
 * one at a time or all together, and every token must equal the dense reference's. */
void family_check_engine(const family_run *f, pl_backend_kind backend, bool one_at_a_time);
/* The same, all batched, with a KV pool of n_blocks blocks of 4 (small enough to preempt:
 * asserts that it did). */
void family_check_engine_pool(const family_run *f, pl_backend_kind backend, int n_blocks);

/* "Llama (tied)", for messages. */
const char *family_name(const family_case *fc);

#endif
