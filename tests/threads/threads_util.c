/*
 * tests/threads/threads_util.c - see threads_util.h.
 *
 * Shared state between the threads is only: the engine (through its thread-safe calls), the
 * atomic array of accepted ids the aborter picks from, the atomic per-id abort marks, the
 * atomic step counter and the count of submitters done. Everything the main thread records
 * per id (what was reported, in which step) is read only after the threads are joined.
 */
#include "threads_util.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_support.h"

void thr_jobs_free(thr_job *jobs, int n_jobs) {
    for (int i = 0; i < n_jobs; i++) free(jobs[i].ref);
    free(jobs);
}

static pl_status submit(pl_engine *e, const thr_job *j, pl_sampling_params *sp,
                        pl_request_id *id) {
    return j->text ? pl_engine_submit_request(e, j->text, sp, id)
                   : pl_engine_submit_tokens(e, j->ids, (size_t)j->n_ids, sp, id);
}

void thr_reference(const pl_engine_config *cfg, thr_job *jobs, int n_jobs) {
    pl_engine *e;
    cr_assert_eq(pl_engine_create(cfg, &e), PL_OK, "%s", pl_last_error());
    pl_request_id *ids = calloc((size_t)n_jobs, sizeof *ids);
    for (int i = 0; i < n_jobs; i++) {
        pl_sampling_params sp = jobs[i].sp;
        sp.n = 1;
        cr_assert_eq(submit(e, &jobs[i], &sp, &ids[i]), PL_OK, "%s", pl_last_error());
    }
    pl_completion *c;
    size_t n;
    cr_assert_eq(pl_engine_run(e, &c, &n), PL_OK, "%s", pl_last_error());
    cr_assert_eq(n, (size_t)n_jobs);
    for (size_t k = 0; k < n; k++) { /* submit order: c[k] is jobs[k] */
        cr_assert_eq(c[k].id, ids[k]);
        thr_job *j = &jobs[k];
        j->n_ref = (int)c[k].n_output_ids;
        j->ref = malloc((c[k].n_output_ids + 1) * sizeof(int32_t));
        memcpy(j->ref, c[k].output_ids, c[k].n_output_ids * sizeof(int32_t));
        j->ref_reason = c[k].finish_reason;
    }
    pl_completions_free(c, n);
    free(ids);
    pl_engine_destroy(e);
}

/* What the stepping thread saw of one sample. */
typedef struct thr_seen {
    int n_reported;
    long step;               /* step index (1-based) that reported it */
    pl_finish_reason reason;
    int32_t *out;            /* (n_out) */
    int n_out;
} thr_seen;

typedef struct thr_shared {
    pl_engine *e;
    thr_job *jobs;
    int n_jobs, per_thread, max_id;
    _Atomic uint64_t *accepted_ids;  /* (n_jobs) 0 = slot not yet written */
    atomic_int n_accepted_slots;
    int *job_of_id;                  /* (max_id + 1) written by the submitter of that id */
    atomic_long *abort_step;         /* (max_id + 1) steps done after an accepted abort; -1 */
    atomic_long steps_done;
    atomic_int submitters_done;
    int n_submitters;
    atomic_long rejected, aborts_accepted, aborts_refused;
} thr_shared;

/* Criterion's asserts may only fail on the test's own thread: worker threads record their
 * first failure here and stop; the main thread asserts on it after joining. */
static pthread_mutex_t g_fail_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_fail[512];
static atomic_bool g_failed;

#define THR_CHECK(cond, ...)                                                                 \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            pthread_mutex_lock(&g_fail_mu);                                                  \
            if (!atomic_load(&g_failed)) snprintf(g_fail, sizeof g_fail, __VA_ARGS__);       \
            atomic_store(&g_failed, true);                                                   \
            pthread_mutex_unlock(&g_fail_mu);                                                \
            goto out;                                                                        \
        }                                                                                    \
    } while (0)

typedef struct thr_arg {
    thr_shared *sh;
    int k;
} thr_arg;

static void nap(pl_test_rng *r, unsigned max_us) {
    struct timespec ts = {0, (long)pl_test_rng_below(r, max_us + 1) * 1000};
    nanosleep(&ts, NULL);
}

static void *submitter(void *p) {
    thr_arg *a = p;
    thr_shared *sh = a->sh;
    pl_test_rng r;
    pl_test_rng_seed(&r, 77 + (uint64_t)a->k);
    for (int i = a->k * sh->per_thread; i < (a->k + 1) * sh->per_thread; i++) {
        pl_request_id id = 0;
        pl_sampling_params sp = sh->jobs[i].sp;
        pl_status s;
        while ((s = submit(sh->e, &sh->jobs[i], &sp, &id)) == PL_ERR_QUEUE_FULL) {
            atomic_fetch_add(&sh->rejected, 1);
            nap(&r, 200);
        }
        THR_CHECK(s == PL_OK, "submitter %d, job %d: %s", a->k, i, pl_last_error());
        THR_CHECK(id > 0 && id <= (pl_request_id)sh->max_id, "id %llu", (unsigned long long)id);
        sh->job_of_id[id] = i;
        int slot = atomic_fetch_add(&sh->n_accepted_slots, 1);
        atomic_store(&sh->accepted_ids[slot], id);
        if (pl_test_rng_below(&r, 3) == 0) nap(&r, 300);
    }
out:
    atomic_fetch_add(&sh->submitters_done, 1);
    return NULL;
}

static void *aborter(void *p) {
    thr_shared *sh = p;
    pl_test_rng r;
    pl_test_rng_seed(&r, 4242);
    while (atomic_load(&sh->submitters_done) < sh->n_submitters) {
        int n = atomic_load(&sh->n_accepted_slots);
        if (n > 0 && pl_test_rng_below(&r, 5) == 0) {
            uint64_t id = atomic_load(&sh->accepted_ids[pl_test_rng_below(&r, (uint32_t)n)]);
            if (id) {
                pl_status s = pl_engine_abort(sh->e, id);
                /* read after the abort returned: it is drained at step done + 2 at the latest */
                long done = atomic_load(&sh->steps_done);
                if (s == PL_OK) {
                    atomic_fetch_add(&sh->aborts_accepted, 1);
                    long expect = -1;
                    atomic_compare_exchange_strong(&sh->abort_step[id], &expect, done);
                } else {
                    THR_CHECK(s == PL_ERR_NOT_FOUND, "abort: %s", pl_last_error());
                    atomic_fetch_add(&sh->aborts_refused, 1);
                }
            }
        } else {
            /* ids never handed out */
            THR_CHECK(pl_engine_abort(sh->e, 0) == PL_ERR_NOT_FOUND, "abort of id 0");
            THR_CHECK(pl_engine_abort(sh->e, (pl_request_id)sh->max_id + 1000) ==
                      PL_ERR_NOT_FOUND, "abort of an id never given");
        }
        nap(&r, 400);
    }
out:
    return NULL;
}

void thr_run(const pl_engine_config *cfg, thr_job *jobs, int n_jobs, int n_submitters,
             bool with_aborter, thr_result *out) {
    cr_assert_eq(n_jobs % n_submitters, 0);
    thr_shared sh = {.jobs = jobs, .n_jobs = n_jobs, .per_thread = n_jobs / n_submitters,
                     .max_id = n_jobs, .n_submitters = n_submitters};
    cr_assert_eq(pl_engine_create(cfg, &sh.e), PL_OK, "%s", pl_last_error());
    sh.accepted_ids = calloc((size_t)n_jobs, sizeof *sh.accepted_ids);
    sh.job_of_id = calloc((size_t)n_jobs + 1, sizeof *sh.job_of_id);
    sh.abort_step = calloc((size_t)n_jobs + 1, sizeof *sh.abort_step);
    for (int i = 0; i <= n_jobs; i++) atomic_init(&sh.abort_step[i], -1);
    thr_seen (*seen)[2] = calloc((size_t)n_jobs + 1, sizeof *seen);

    pthread_t th[16], ab;
    thr_arg args[16];
    cr_assert_leq(n_submitters, 16);
    for (int k = 0; k < n_submitters; k++) {
        args[k] = (thr_arg){&sh, k};
        cr_assert_eq(pthread_create(&th[k], NULL, submitter, &args[k]), 0);
    }
    if (with_aborter) cr_assert_eq(pthread_create(&ab, NULL, aborter, &sh), 0);

    long step = 0;
    while (atomic_load(&sh.submitters_done) < n_submitters || pl_engine_has_pending_work(sh.e)) {
        pl_step_result res;
        cr_assert_eq(pl_engine_step(sh.e, &res), PL_OK, "step: %s", pl_last_error());
        step++;
        for (size_t k = 0; k < res.n_finished; k++) {
            const pl_completion *c = &res.finished[k];
            cr_assert(c->id > 0 && c->id <= (pl_request_id)n_jobs && c->index >= 0 &&
                      c->index < 2, "completion id %llu index %d", (unsigned long long)c->id,
                      c->index);
            thr_seen *s = &seen[c->id][c->index];
            s->n_reported++;
            s->step = step;
            s->reason = c->finish_reason;
            s->n_out = (int)c->n_output_ids;
            s->out = malloc((c->n_output_ids + 1) * sizeof(int32_t));
            memcpy(s->out, c->output_ids, c->n_output_ids * sizeof(int32_t));
        }
        atomic_store(&sh.steps_done, step);
        if (res.n_scheduled_seqs == 0) sched_yield();
    }
    for (int k = 0; k < n_submitters; k++) pthread_join(th[k], NULL);
    if (with_aborter) pthread_join(ab, NULL);
    cr_assert(!atomic_load(&g_failed), "%s", g_fail);

    thr_result r = {.accepted = atomic_load(&sh.n_accepted_slots),
                    .rejected = atomic_load(&sh.rejected),
                    .aborts_accepted = atomic_load(&sh.aborts_accepted),
                    .aborts_refused = atomic_load(&sh.aborts_refused), .steps = step};
    cr_assert_eq(r.accepted, n_jobs);
    for (int id = 1; id <= n_jobs; id++) {
        const thr_job *j = &jobs[sh.job_of_id[id]];
        long ab_done = atomic_load(&sh.abort_step[id]);
        for (int i = 0; i < 2; i++) {
            thr_seen *s = &seen[id][i];
            bool exists = i < j->sp.n;
            cr_assert_eq(s->n_reported, exists ? 1 : 0, "request %d sample %d reported %d times",
                         id, i, s->n_reported);
            if (!exists) continue;
            r.completions++;
            if (s->reason == PL_FINISH_ABORT) {
                cr_assert_geq(ab_done, 0, "request %d finished as aborted but no abort was "
                              "accepted", id);
                cr_assert_leq(s->n_out, j->n_ref);
                r.aborted++;
            } else {
                cr_assert(ab_done < 0 || s->step < ab_done + 2, "request %d sample %d finished "
                          "%s in step %ld, after an abort accepted by step %ld", id, i,
                          pl_finish_reason_name(s->reason), s->step, ab_done);
                cr_assert_eq(s->reason, j->ref_reason, "request %d: %s, reference %s", id,
                             pl_finish_reason_name(s->reason),
                             pl_finish_reason_name(j->ref_reason));
                cr_assert_eq(s->n_out, j->n_ref, "request %d: %d tokens, reference %d", id,
                             s->n_out, j->n_ref);
            }
            for (int t = 0; t < s->n_out; t++)
                cr_assert_eq(s->out[t], j->ref[t], "request %d sample %d token %d: %d, "
                             "reference %d", id, i, t, s->out[t], j->ref[t]);
            free(s->out);
        }
    }
    pl_metrics m;
    pl_engine_metrics(sh.e, &m);
    cr_assert_eq(m.kv_blocks_used, 0);
    pl_engine_destroy(sh.e);
    free(seen);
    free(sh.abort_step);
    free(sh.job_of_id);
    free(sh.accepted_ids);
    *out = r;
}
