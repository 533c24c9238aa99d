/*
 * tests/threads/threads_util.h - a concurrent-intake harness: several threads submit (and one
 * aborts) while the calling thread steps the engine, then every completion is checked against
 * a sequential reference run.
 *
 * Each submitter k submits jobs[k * per_thread .. (k + 1) * per_thread) in order, sleeping a
 * little at random so submits interleave with steps; the aborter aborts random ids among
 * those already accepted. Greedy requests only, so every completion has one right answer:
 * the reference run's tokens (an aborted one: a prefix of them, with reason abort, unless it
 * had already finished on its own).
 */
#ifndef PL_TEST_THREADS_UTIL_H
#define PL_TEST_THREADS_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pagellm.h"

typedef struct thr_job {
    const char *text;         /* submit_request when set (borrowed), else ids */
    int32_t ids[64];          /* (n_ids) */
    int n_ids;
    pl_sampling_params sp;    /* greedy; n in {1, 2} */
    /* reference (sample 0) */
    int32_t *ref;             /* (n_ref) */
    int n_ref;
    pl_finish_reason ref_reason;
} thr_job;

typedef struct thr_result {
    long accepted, rejected, aborts_accepted, aborts_refused, completions, aborted, steps;
} thr_result;

/* Fills ref/n_ref/ref_reason of every job with a one-thread run of an engine made from cfg. */
void thr_reference(const pl_engine_config *cfg, thr_job *jobs, int n_jobs);
/* The concurrent run: n_submitters threads (n_jobs divisible by it) plus one aborter when
 * with_aborter. Fails the test on any violation. */
void thr_run(const pl_engine_config *cfg, thr_job *jobs, int n_jobs, int n_submitters,
             bool with_aborter, thr_result *out);
void thr_jobs_free(thr_job *jobs, int n_jobs);

#endif
