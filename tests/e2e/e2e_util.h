/*
 * tests/e2e/e2e_util.h - helpers shared by the end-to-end suites: building engines, running
 * prompts through them, and the dense reference.
 */
#ifndef PL_TEST_E2E_UTIL_H
#define PL_TEST_E2E_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "pagellm.h"
#include "test_support.h"

/* Random prompts: n prompts of lengths in [min_len, max_len] with ids in [3, vocab). */
typedef struct e2e_prompts {
    int n;
    int32_t **ids;
    int *len;
} e2e_prompts;

void e2e_prompts_make(e2e_prompts *p, int n, int min_len, int max_len, int vocab, uint64_t seed);
void e2e_prompts_free(e2e_prompts *p);

/* Outputs of a run, indexed like the prompts: out[i] has n_out[i] ids (sample 0). */
typedef struct e2e_outputs {
    int n;
    int32_t **ids;
    int *len;
    pl_finish_reason *reason;
} e2e_outputs;

/* Submits every prompt (one_at_a_time: each runs to completion before the next is submitted)
 * and collects outputs. Fails the test on any error. */
void e2e_run(pl_engine *e, const e2e_prompts *p, const pl_sampling_params *sp,
             bool one_at_a_time, e2e_outputs *out);
void e2e_outputs_free(e2e_outputs *o);
/* True when a and b hold the same ids; prints the first difference otherwise. */
bool e2e_outputs_equal(const char *what, const e2e_outputs *a, const e2e_outputs *b);

pl_engine *e2e_engine(const pl_engine_config *cfg);

#endif
