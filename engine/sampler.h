/*
 * engine/sampler.h - turns one sequence's logits into a token.
 *
 * Order of transforms (as vLLM): penalties (repetition over prompt and output, presence and
 * frequency over output) -> greedy if temperature is 0 -> temperature -> top-k -> top-p ->
 * min-p -> draw. Each sequence has its own RNG stream, so a seeded request samples the same
 * tokens whatever else is in the batch.
 */
#ifndef PL_ENGINE_SAMPLER_H
#define PL_ENGINE_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "pagellm.h"

/* Per-sequence random stream (xoshiro-style state, splitmix-seeded). */
typedef struct pl_rng {
    uint64_t s[2];
} pl_rng;

void pl_rng_seed(pl_rng *r, uint64_t seed);
double pl_rng_uniform(pl_rng *r); /* in [0, 1) */

/* Scratch reused across calls (no allocation in the step loop once grown). */
typedef struct pl_sampler {
    int vocab;
    float *probs;    /* (vocab) */
    int32_t *idx;    /* (vocab) candidate ids */
    int32_t *counts; /* (vocab) output-token counts for penalties; all zero between calls */
    int32_t *scratch;/* (vocab) the nucleus sort's second buffer */
    uint8_t *seen;   /* (vocab) token appears in prompt or output */
} pl_sampler;

pl_status pl_sampler_init(pl_sampler *s, int vocab);
void pl_sampler_deinit(pl_sampler *s);

/* Samples from logits (vocab floats; modified in place by penalties and temperature).
 * tokens (n_prompt + n_output): the sequence so far, for penalties. */
int32_t pl_sampler_sample(pl_sampler *s, float *logits, const pl_sampling_params *p,
                  const int32_t *tokens, int n_prompt, int n_output, pl_rng *rng);

/* The one place a token mask reaches the logits: sets logits[i] = -inf for every id whose bit
 * in allowed (ceil(vocab / 64) words, bit i of word i / 64) is 0. Returns how many ids are
 * left with a logit above -inf. */
size_t pl_sampler_mask_row(float *logits, const uint64_t *allowed, int vocab);

#endif
