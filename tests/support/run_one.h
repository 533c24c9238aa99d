/*
 * tests/support/run_one.h - submits one greedy request to an engine, runs it to the end and
 * asserts that exactly one completion came back with max_tokens ids (EOS ignored): the check
 * that a freshly created engine really works.
 */
#ifndef PL_TEST_RUN_ONE_H
#define PL_TEST_RUN_ONE_H

#include <criterion/criterion.h>

#include "pagellm.h"

static inline void pl_test_run_one(pl_engine *e, const int32_t *ids, size_t n_ids,
                                   int max_tokens) {
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.temperature = 0.0f;
    sp.max_tokens = max_tokens;
    sp.ignore_eos = true;
    cr_assert_eq(pl_engine_submit_tokens(e, ids, n_ids, &sp, NULL), PL_OK, "%s",
                 pl_last_error());
    pl_completion *out = NULL;
    size_t n = 0;
    cr_assert_eq(pl_engine_run(e, &out, &n), PL_OK, "%s", pl_last_error());
    cr_assert_eq(n, 1);
    cr_assert_eq(out[0].n_output_ids, (size_t)max_tokens);
    pl_completions_free(out, n);
}

#endif
