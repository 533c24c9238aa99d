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
    char text[256];           /* submit_request when not empty, else ids */
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
    long empty_steps;   /* steps that computed and reported nothing */
    long idle_waits;    /* pl_engine_wait calls that returned without work */
} thr_result;

/* Fills ref/n_ref/ref_reason of every job with a one-thread run of an engine made from cfg.
 * False on failure (thr_failure() says why). */
bool thr_reference(const pl_engine_config *cfg, thr_job *jobs, int n_jobs);
/* The concurrent run: n_submitters (<= 16) threads, n_jobs divisible by it, plus one aborter
 * when with_aborter. False on any violation (thr_failure() says which). */
bool thr_run(const pl_engine_config *cfg, thr_job *jobs, int n_jobs, int n_submitters,
             bool with_aborter, thr_result *out);
/* The first failure recorded by any thread, or NULL. Process-wide. */
const char *thr_failure(void);
/* Workload for the tests: n greedy jobs over dummy:tiny's vocabulary (prompts of 1-40 ids,
 * or with text 1-30 common words; 1-24 output tokens, a quarter with n = 2, two priorities,
 * half ignoring EOS). */
thr_job *thr_make_jobs(int n, uint64_t seed, bool text);
/* The config both the reference and the concurrent run use: dummy:tiny (with tokenizer, a
 * SentencePiece model of at most 512 pieces, or NULL), block size 4, max_model_len 96,
 * batch 8, 16 sequences, 64 tokens per step, max_waiting 12 (0 for the reference),
 * max_num_blocks as given. */
void thr_config(pl_engine_config *c, pl_backend_kind backend, int max_num_blocks,
                const char *tokenizer);
/* The whole check: reference (pool of 512 blocks), then the concurrent run with a 36-block
 * pool; text prompts through submit_request when tokenizer is given. Prints a summary line.
 * False on failure. */
bool thr_check(pl_backend_kind backend, int n_submitters, int per_thread, uint64_t seed,
               const char *tokenizer);
void thr_jobs_free(thr_job *jobs, int n_jobs);
/* pl_engine_wait: one thread submits n_requests small requests 15 ms apart (waking the engine
 * when done) while this one sleeps in pl_engine_wait between steps. False (thr_failure() says
 * why) unless every request finished in a number of steps that shows no busy loop. */
bool thr_trickle(pl_backend_kind backend, int n_requests);

#endif
