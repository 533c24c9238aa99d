/*
 * tests/threads/threads_util.c - see threads_util.h.
 *
 * Shared state between the threads is only: the engine (through its thread-safe calls), the
 * atomic array of accepted ids the aborter picks from, the atomic per-id abort marks, the
 * atomic step counter and the count of submitters done. Everything the main thread records
 * per id (what was reported, in which step) is read only after the threads are joined.
 *
 * No Criterion here: its runner cannot start under ThreadSanitizer (Criterion issue #274,
 * "Could not initialize inheritable arena"), so the TSan build runs this harness from a plain
 * main, and Criterion's asserts may only fail on the test's own thread anyway. Every thread
 * records the first failure in one message and stops.
 */
#include "threads_util.h"

#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_support.h"

static pthread_mutex_t g_fail_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_fail[512];
static atomic_bool g_failed;

static void record_failure(const char *fmt, ...) {
    pthread_mutex_lock(&g_fail_mu);
    if (!atomic_load(&g_failed)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(g_fail, sizeof g_fail, fmt, ap);
        va_end(ap);
    }
    atomic_store(&g_failed, true);
    pthread_mutex_unlock(&g_fail_mu);
}

const char *thr_failure(void) { return atomic_load(&g_failed) ? g_fail : NULL; }

#define CHECK(cond, ...)                                                                     \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            record_failure(__VA_ARGS__);                                                     \
            goto out;                                                                        \
        }                                                                                    \
    } while (0)

void thr_jobs_free(thr_job *jobs, int n_jobs) {
    for (int i = 0; i < n_jobs; i++) free(jobs[i].ref);
    free(jobs);
}

static pl_status submit(pl_engine *e, const thr_job *j, pl_sampling_params *sp,
                        pl_request_id *id) {
    return j->text[0] ? pl_engine_submit_request(e, j->text, sp, id)
                   : pl_engine_submit_tokens(e, j->ids, (size_t)j->n_ids, sp, id);
}

bool thr_reference(const pl_engine_config *cfg, thr_job *jobs, int n_jobs) {
    pl_engine *e = NULL;
    pl_completion *c = NULL;
    size_t n = 0;
    pl_request_id *ids = calloc((size_t)n_jobs, sizeof *ids);
    CHECK(pl_engine_create(cfg, &e) == PL_OK, "reference: %s", pl_last_error());
    for (int i = 0; i < n_jobs; i++) {
        pl_sampling_params sp = jobs[i].sp;
        sp.n = 1;
        CHECK(submit(e, &jobs[i], &sp, &ids[i]) == PL_OK, "reference: %s", pl_last_error());
    }
    CHECK(pl_engine_run(e, &c, &n) == PL_OK, "reference: %s", pl_last_error());
    CHECK(n == (size_t)n_jobs, "reference: %zu completions for %d jobs", n, n_jobs);
    for (size_t k = 0; k < n; k++) { /* submit order: c[k] is jobs[k] */
        CHECK(c[k].id == ids[k], "reference: completion order");
        thr_job *j = &jobs[k];
        j->n_ref = (int)c[k].n_output_ids;
        j->ref = malloc((c[k].n_output_ids + 1) * sizeof(int32_t));
        memcpy(j->ref, c[k].output_ids, c[k].n_output_ids * sizeof(int32_t));
        j->ref_reason = c[k].finish_reason;
    }
out:
    pl_completions_free(c, n);
    free(ids);
    pl_engine_destroy(e);
    return thr_failure() == NULL;
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
        CHECK(s == PL_OK, "submitter %d, job %d: %s", a->k, i, pl_last_error());
        CHECK(id > 0 && id <= (pl_request_id)sh->max_id, "id %llu", (unsigned long long)id);
        sh->job_of_id[id] = i;
        pl_occupancy o; /* read from any thread while another steps */
        pl_engine_occupancy(sh->e, &o);
        CHECK(o.n_waiting >= 0 && o.n_running >= 0 && o.kv_blocks_total > 0 &&
                  o.kv_blocks_used >= 0 && o.kv_blocks_used <= o.kv_blocks_total,
              "occupancy: %d waiting, %d running, %d of %d blocks", o.n_waiting, o.n_running,
              o.kv_blocks_used, o.kv_blocks_total);
        int slot = atomic_fetch_add(&sh->n_accepted_slots, 1);
        atomic_store(&sh->accepted_ids[slot], id);
        if (pl_test_rng_below(&r, 3) == 0) nap(&r, 300);
    }
out:
    atomic_fetch_add(&sh->submitters_done, 1);
    pl_engine_wake(sh->e); /* the stepping thread may be asleep in pl_engine_wait */
    return NULL;
}

static void *aborter(void *p) {
    thr_shared *sh = p;
    pl_test_rng r;
    pl_test_rng_seed(&r, 4242);
    long last_step = -100;
    while (atomic_load(&sh->submitters_done) < sh->n_submitters) {
        int n = atomic_load(&sh->n_accepted_slots);
        /* paced by steps, not time, so a slow (sanitized) engine is not aborted to nothing */
        long now = atomic_load(&sh->steps_done);
        if (n > 0 && now - last_step >= 4 && pl_test_rng_below(&r, 3) == 0) {
            last_step = now;
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
                    CHECK(s == PL_ERR_NOT_FOUND, "abort: %s", pl_last_error());
                    atomic_fetch_add(&sh->aborts_refused, 1);
                }
            }
        } else {
            /* ids never handed out */
            CHECK(pl_engine_abort(sh->e, 0) == PL_ERR_NOT_FOUND, "abort of id 0");
            CHECK(pl_engine_abort(sh->e, (pl_request_id)sh->max_id + 1000) == PL_ERR_NOT_FOUND,
                  "abort of an id never given");
        }
        nap(&r, 400);
    }
out:
    return NULL;
}

/* Every sample of every request reported once, with the reference's answer. */
static void verify(thr_shared *sh, thr_seen (*seen)[2], thr_result *r) {
    CHECK(r->accepted == sh->n_jobs, "%ld of %d jobs accepted", r->accepted, sh->n_jobs);
    for (int id = 1; id <= sh->n_jobs; id++) {
        const thr_job *j = &sh->jobs[sh->job_of_id[id]];
        long ab_done = atomic_load(&sh->abort_step[id]);
        for (int i = 0; i < 2; i++) {
            const thr_seen *s = &seen[id][i];
            bool exists = i < j->sp.n;
            CHECK(s->n_reported == (exists ? 1 : 0), "request %d sample %d reported %d times",
                  id, i, s->n_reported);
            if (!exists) continue;
            r->completions++;
            if (s->reason == PL_FINISH_ABORT) {
                CHECK(ab_done >= 0, "request %d finished as aborted but no abort was accepted",
                      id);
                CHECK(s->n_out <= j->n_ref, "request %d: aborted with %d tokens, reference %d",
                      id, s->n_out, j->n_ref);
                r->aborted++;
            } else {
                CHECK(ab_done < 0 || s->step < ab_done + 2, "request %d sample %d finished %s "
                      "in step %ld, after an abort accepted by step %ld", id, i,
                      pl_finish_reason_name(s->reason), s->step, ab_done);
                CHECK(s->reason == j->ref_reason, "request %d: %s, reference %s", id,
                      pl_finish_reason_name(s->reason), pl_finish_reason_name(j->ref_reason));
                CHECK(s->n_out == j->n_ref, "request %d: %d tokens, reference %d", id, s->n_out,
                      j->n_ref);
            }
            for (int t = 0; t < s->n_out; t++)
                CHECK(s->out[t] == j->ref[t], "request %d sample %d token %d: %d, reference %d",
                      id, i, t, s->out[t], j->ref[t]);
        }
    }
out:;
}

bool thr_run(const pl_engine_config *cfg, thr_job *jobs, int n_jobs, int n_submitters,
             bool with_aborter, thr_result *out_result) {
    if (n_jobs % n_submitters != 0 || n_submitters > 16) {
        record_failure("thr_run: %d jobs over %d submitters", n_jobs, n_submitters);
        return false;
    }
    thr_shared sh = {.jobs = jobs, .n_jobs = n_jobs, .per_thread = n_jobs / n_submitters,
                     .max_id = n_jobs, .n_submitters = n_submitters};
    sh.accepted_ids = calloc((size_t)n_jobs, sizeof *sh.accepted_ids);
    sh.job_of_id = calloc((size_t)n_jobs + 1, sizeof *sh.job_of_id);
    sh.abort_step = calloc((size_t)n_jobs + 1, sizeof *sh.abort_step);
    for (int i = 0; i <= n_jobs; i++) atomic_init(&sh.abort_step[i], -1);
    thr_seen (*seen)[2] = calloc((size_t)n_jobs + 1, sizeof *seen);
    pthread_t th[16], ab;
    thr_arg args[16];
    int n_started = 0;
    bool aborter_started = false;
    long step = 0;

    if (pl_engine_create(cfg, &sh.e) != PL_OK) {
        record_failure("create: %s", pl_last_error());
        goto cleanup;
    }
    for (; n_started < n_submitters; n_started++) {
        args[n_started] = (thr_arg){&sh, n_started};
        if (pthread_create(&th[n_started], NULL, submitter, &args[n_started]) != 0) break;
    }
    aborter_started = with_aborter && pthread_create(&ab, NULL, aborter, &sh) == 0;
    /* a submitter that failed to start counts as done so the loop below ends */
    atomic_fetch_add(&sh.submitters_done, n_submitters - n_started);
    long empty = 0, idle = 0;
    while (atomic_load(&sh.submitters_done) < n_submitters || pl_engine_has_pending_work(sh.e)) {
        /* sleep until a submit, an abort or a wake: stepping an idle engine would spin */
        bool work = false;
        if (pl_engine_wait(sh.e, 2.0, &work) != PL_OK) {
            record_failure("wait: %s", pl_last_error());
            break;
        }
        if (!work) {
            idle++;
            continue;
        }
        pl_step_result res;
        pl_status st = pl_engine_step(sh.e, &res);
        if (st != PL_OK) {
            record_failure("step: %s", pl_last_error());
            break;
        }
        step++;
        for (size_t k = 0; k < res.n_finished; k++) {
            const pl_completion *c = &res.finished[k];
            if (!(c->id > 0 && c->id <= (pl_request_id)n_jobs && c->index >= 0 && c->index < 2)) {
                record_failure("completion id %llu index %d", (unsigned long long)c->id,
                               c->index);
                continue;
            }
            thr_seen *s = &seen[c->id][c->index];
            s->n_reported++;
            s->step = step;
            s->reason = c->finish_reason;
            s->n_out = (int)c->n_output_ids;
            free(s->out);
            s->out = malloc((c->n_output_ids + 1) * sizeof(int32_t));
            memcpy(s->out, c->output_ids, c->n_output_ids * sizeof(int32_t));
        }
        atomic_store(&sh.steps_done, step);
        if (res.n_scheduled_seqs == 0 && res.n_finished == 0) empty++;
    }
    for (int k = 0; k < n_started; k++) pthread_join(th[k], NULL);
    if (aborter_started) pthread_join(ab, NULL);

    thr_result r = {.accepted = atomic_load(&sh.n_accepted_slots),
                    .rejected = atomic_load(&sh.rejected),
                    .aborts_accepted = atomic_load(&sh.aborts_accepted),
                    .aborts_refused = atomic_load(&sh.aborts_refused), .steps = step,
                    .empty_steps = empty, .idle_waits = idle};
    if (!thr_failure()) verify(&sh, seen, &r);
    pl_metrics m;
    pl_engine_metrics(sh.e, &m);
    if (!thr_failure() && m.kv_blocks_used != 0)
        record_failure("%d KV blocks still used at the end", m.kv_blocks_used);
    *out_result = r;
cleanup:
    pl_engine_destroy(sh.e);
    for (int i = 0; i <= n_jobs; i++) {
        free(seen[i][0].out);
        free(seen[i][1].out);
    }
    free(seen);
    free(sh.abort_step);
    free(sh.job_of_id);
    free(sh.accepted_ids);
    return thr_failure() == NULL;
}

static const char *const k_words[] = {
    "Once", "upon", "a", "time", "there", "was", "little", "girl", "named", "Lily", "she",
    "liked", "to", "play", "in", "the", "park", "with", "her", "dog", "one", "day", "saw",
    "big", "red", "ball", "and", "said", "happy", "mom", "tree", "sun", "went", "home", "."};

thr_job *thr_make_jobs(int n, uint64_t seed, bool text) {
    pl_test_rng r;
    pl_test_rng_seed(&r, seed);
    thr_job *jobs = calloc((size_t)n, sizeof *jobs);
    for (int i = 0; i < n; i++) {
        thr_job *j = &jobs[i];
        if (text) {
            int words = 1 + (int)pl_test_rng_below(&r, 30);
            size_t len = 0;
            for (int k = 0; k < words; k++) {
                const char *w = k_words[pl_test_rng_below(&r, sizeof k_words / sizeof *k_words)];
                len += (size_t)snprintf(j->text + len, sizeof j->text - len, "%s%s",
                                        k ? " " : "", w);
            }
        } else {
            j->n_ids = 1 + (int)pl_test_rng_below(&r, 40);
            j->ids[0] = 1;
            for (int k = 1; k < j->n_ids; k++)
                j->ids[k] = 3 + (int32_t)pl_test_rng_below(&r, 500);
        }
        pl_sampling_params_default(&j->sp);
        j->sp.temperature = 0.0f;
        j->sp.max_tokens = 1 + (int)pl_test_rng_below(&r, 24);
        j->sp.n = pl_test_rng_below(&r, 4) == 0 ? 2 : 1;
        j->sp.priority = (int)pl_test_rng_below(&r, 2);
        j->sp.ignore_eos = pl_test_rng_below(&r, 2) == 0;
    }
    return jobs;
}

void thr_config(pl_engine_config *c, pl_backend_kind backend, int max_num_blocks,
                const char *tokenizer) {
    pl_engine_config_default(c);
    c->model_path = "dummy:tiny";
    c->tokenizer_path = tokenizer;
    c->backend = backend;
    /* every request's tokens must equal a sequential reference run's: exact only with f32 K/V
     * (docs/api.md, "Greedy output and batching") */
    c->kv_dtype = PL_DTYPE_F32;
    c->n_threads = 2;
    c->block_size = 4;
    c->max_model_len = 96;
    c->max_batch_size = 8;
    c->max_num_seqs = 16;
    c->max_total_tokens = 64;
    c->max_num_blocks = max_num_blocks;
    c->max_waiting = 12;
}

bool thr_check(pl_backend_kind backend, int n_submitters, int per_thread, uint64_t seed,
               const char *tokenizer) {
    int n = n_submitters * per_thread;
    thr_job *jobs = thr_make_jobs(n, seed, tokenizer != NULL);
    pl_engine_config c;
    thr_config(&c, backend, 512, tokenizer);
    c.max_waiting = 0;
    thr_result r = {0};
    bool ok = thr_reference(&c, jobs, n);
    thr_config(&c, backend, 36, tokenizer);
    if (ok) ok = thr_run(&c, jobs, n, n_submitters, true, &r);
    /* A step that had work computes or reports something, except one that only drained an
     * abort of a request that had finished meanwhile. Stepping an idle engine in a loop
     * made thousands. */
    if (ok && r.empty_steps > r.aborts_accepted + 4) {
        record_failure("%ld empty steps (%ld aborts accepted): the stepping thread did not "
                       "sleep in pl_engine_wait", r.empty_steps, r.aborts_accepted);
        ok = false;
    }
    if (ok)
        fprintf(stderr, "threads: %s backend, %s prompts, %d submitters + 1 aborter, %ld "
                "requests accepted (%ld QUEUE_FULL retries), %ld aborts accepted, %ld refused, "
                "%ld completions (%ld aborted), %ld steps (%ld empty), %ld idle waits\n",
                backend == PL_BACKEND_REF ? "ref" : "cpu", tokenizer ? "text" : "token",
                n_submitters, r.accepted, r.rejected, r.aborts_accepted, r.aborts_refused,
                r.completions, r.aborted, r.steps, r.empty_steps, r.idle_waits);
    thr_jobs_free(jobs, n);
    return ok;
}

/* ---- the blocking wait ------------------------------------------------------------------ */

typedef struct trickle {
    pl_engine *e;
    int n;
    atomic_int submitted;
    atomic_bool done;
} trickle;

static void *trickle_submitter(void *p) {
    trickle *t = p;
    struct timespec gap = {0, 15 * 1000 * 1000};
    int32_t ids[] = {1, 17, 99, 3};
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.temperature = 0.0f;
    sp.max_tokens = 3;
    sp.ignore_eos = true;
    for (int i = 0; i < t->n; i++) {
        nanosleep(&gap, NULL); /* the stepping thread has nothing to do meanwhile */
        if (pl_engine_submit_tokens(t->e, ids, 4, &sp, NULL) != PL_OK) {
            record_failure("trickle submit: %s", pl_last_error());
            break;
        }
        atomic_fetch_add(&t->submitted, 1);
    }
    atomic_store(&t->done, true);
    pl_engine_wake(t->e);
    return NULL;
}

bool thr_trickle(pl_backend_kind backend, int n_requests) {
    pl_engine_config c;
    thr_config(&c, backend, 64, NULL);
    trickle t = {.n = n_requests};
    atomic_init(&t.submitted, 0);
    atomic_init(&t.done, false);
    if (pl_engine_create(&c, &t.e) != PL_OK) {
        record_failure("trickle create: %s", pl_last_error());
        return false;
    }
    pthread_t th;
    if (pthread_create(&th, NULL, trickle_submitter, &t) != 0) {
        pl_engine_destroy(t.e);
        record_failure("trickle: cannot start a thread");
        return false;
    }
    long steps = 0, finished = 0;
    for (;;) {
        bool work = false;
        if (pl_engine_wait(t.e, 10.0, &work) != PL_OK) {
            record_failure("trickle wait: %s", pl_last_error());
            break;
        }
        if (!work) {
            if (atomic_load(&t.done) && !pl_engine_has_pending_work(t.e)) break;
            continue;
        }
        pl_step_result r;
        if (pl_engine_step(t.e, &r) != PL_OK) {
            record_failure("trickle step: %s", pl_last_error());
            break;
        }
        steps++;
        finished += (long)r.n_finished;
    }
    pthread_join(th, NULL);
    /* each request needs a prefill and two decodes (and the step that reports a request may
     * also be the one that computes it); a loop that stepped while waiting for the next
     * submit 15 ms away would have taken thousands */
    if (!thr_failure() && finished != n_requests)
        record_failure("trickle: %ld of %d requests finished", finished, n_requests);
    if (!thr_failure() && steps > 4L * n_requests)
        record_failure("trickle: %ld steps for %d requests of 3 tokens: the stepping thread "
                       "did not sleep", steps, n_requests);
    fprintf(stderr, "threads: trickle of %d requests on the %s backend: %ld steps\n",
            n_requests, backend == PL_BACKEND_REF ? "ref" : "cpu", steps);
    pl_engine_destroy(t.e);
    return thr_failure() == NULL;
}
