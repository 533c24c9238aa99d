/*
 * tests/soak/test_soak.c - the short soak (suite e2e): many random requests through an
 * engine whose KV pool is small enough to preempt all the time, checked after every step.
 *
 * A run draws a workload (prompt lengths, output lengths, priorities, n > 1, stop ids,
 * min_tokens, ignore_eos, greedy or seeded sampling) from one seed, then:
 *   1. runs every greedy request through a reference engine with a large pool (no
 *      preemption), which fixes the tokens each greedy request must produce;
 *   2. runs the whole workload through a small-pool engine, submitting a few requests and
 *      aborting a random live one now and then between steps, and after EVERY step checks
 *      the KV pool against every live block table (pl_kv_check), that only running samples
 *      hold blocks, and every completion: reported exactly once, with the finish reason its
 *      parameters imply (abort after an accepted abort; else stop iff it ended on a stop id
 *      or EOS after min_tokens, length iff it reached max_tokens), greedy tokens equal to the
 *      reference's (aborted ones: a prefix of them);
 *   3. at the end: every block free, every accepted sample reported, and the host heap in
 *      use when the engine is idle after the last request equals (within a small bound) what
 *      it was when idle after the first third: memory does not grow with requests served.
 *
 * The invariant check reaches the live tables through the engine's internals (tests may
 * include internal headers): e->live_head -> samples[i].seq.kv.
 */
#include <criterion/criterion.h>
#include <criterion/hooks.h>
#include <criterion/internal/ordered-set.h>
#include <malloc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "pagellm.h"
#include "test_support.h"

#ifdef PL_HAVE_LSAN
/* from the sanitizer runtime (gcc ships no header declaring it) */
size_t __sanitizer_get_current_allocated_bytes(void);
#endif

/* One request of the workload. */
typedef struct soak_req {
    int32_t *prompt; /* (n_prompt) */
    int n_prompt;
    pl_sampling_params sp;
    int32_t stop_ids[3];  /* sp.stop_ids */
    bool greedy;
    /* reference run (greedy only): the output of sample 0 */
    int32_t *ref;    /* (n_ref) */
    int n_ref;
    pl_finish_reason ref_reason;
    int ref_tie;     /* the first reference step whose choice was a near tie (n_ref: none) */
    /* soak run */
    pl_request_id id;     /* 0 until accepted */
    bool abort_accepted;  /* pl_engine_abort returned PL_OK */
    int n_reported;       /* samples reported */
    bool seen[8];         /* per sample index */
} soak_req;

typedef struct soak_stats {
    long steps, preemptions, completions, aborted, stopped, lengthed, queue_full, greedy_checked,
        greedy_ties;
} soak_stats;

#define SOAK_MODEL_LEN 128

static bool is_end(const pl_engine *e, const pl_sampling_params *p, int32_t t, int n_out) {
    if (n_out <= p->min_tokens) return false;
    for (size_t i = 0; i < p->n_stop_ids; i++)
        if (p->stop_ids[i] == t) return true;
    if (p->ignore_eos) return false;
    return pl_engine_is_eos(e, t);
}

/* A random workload. Prompts share one of a few prefixes half the time (prefix cache); stop
 * ids come from stop_pool (n_pool ids the model often produces) so that stops do happen. */
static soak_req *make_workload(int n, uint64_t seed, int vocab, const int32_t *stop_pool,
                               int n_pool) {
    pl_test_rng r;
    pl_test_rng_seed(&r, seed);
    int32_t prefixes[4][24];
    for (int p = 0; p < 4; p++) {
        prefixes[p][0] = 1;
        for (int k = 1; k < 24; k++) prefixes[p][k] = 3 + (int32_t)pl_test_rng_below(&r, 60);
    }
    soak_req *w = calloc((size_t)n, sizeof *w);
    cr_assert_not_null(w);
    for (int i = 0; i < n; i++) {
        soak_req *q = &w[i];
        q->n_prompt = 1 + (int)pl_test_rng_below(&r, 64);
        q->prompt = malloc((size_t)q->n_prompt * sizeof(int32_t));
        int shared = pl_test_rng_below(&r, 2) ? (int)pl_test_rng_below(&r, 25) : 0;
        int which = (int)pl_test_rng_below(&r, 4);
        for (int k = 0; k < q->n_prompt; k++)
            q->prompt[k] = k < shared ? prefixes[which][k]
                                      : 3 + (int32_t)pl_test_rng_below(&r, (uint32_t)vocab - 3);
        pl_sampling_params *sp = &q->sp;
        pl_sampling_params_default(sp);
        sp->max_tokens = 1 + (int)pl_test_rng_below(&r, 48);
        sp->priority = (int)pl_test_rng_below(&r, 3) - 1;
        uint32_t nr = pl_test_rng_below(&r, 10);
        sp->n = nr < 7 ? 1 : nr < 9 ? 2 : 3;
        q->greedy = pl_test_rng_below(&r, 10) < 7;
        sp->temperature = q->greedy ? 0.0f : 0.9f;
        sp->has_seed = !q->greedy;
        sp->seed = pl_test_rng_u64(&r);
        sp->top_k = q->greedy ? 0 : (int)pl_test_rng_below(&r, 20);
        sp->ignore_eos = pl_test_rng_below(&r, 4) == 0;
        if (pl_test_rng_below(&r, 3) == 0) {
            /* frequent small ids, so stops actually happen */
            sp->n_stop_ids = 1 + pl_test_rng_below(&r, 3);
            for (size_t k = 0; k < sp->n_stop_ids; k++)
                q->stop_ids[k] = stop_pool[pl_test_rng_below(&r, (uint32_t)n_pool)];
            sp->stop_ids = q->stop_ids;
        }
        if (pl_test_rng_below(&r, 5) == 0)
            sp->min_tokens = (int)pl_test_rng_below(&r, (uint32_t)sp->max_tokens + 1);
    }
    return w;
}

static void free_workload(soak_req *w, int n) {
    for (int i = 0; i < n; i++) {
        free(w[i].prompt);
        free(w[i].ref);
    }
    free(w);
}

static void base_config(pl_engine_config *c) {
    pl_engine_config_default(c);
    c->model_path = "dummy:tiny";
    c->backend = PL_BACKEND_CPU;
    /* greedy tokens under pressure must equal the unpressured run's: exact only with f32 K/V
     * (docs/api.md, "Greedy output and batching") */
    c->kv_dtype = PL_DTYPE_F32;
    c->n_threads = 1;
    c->block_size = 4;
    c->max_model_len = SOAK_MODEL_LEN;
    c->max_batch_size = 8;
    c->max_num_seqs = 16;
    c->max_total_tokens = 64;
    c->max_waiting = 48;
}

/* The n_pool tokens greedy decoding produces most often from a few random prompts. */
static void frequent_tokens(uint64_t seed, int vocab, int32_t *pool, int n_pool) {
    pl_engine_config c;
    base_config(&c);
    pl_engine *e;
    cr_assert_eq(pl_engine_create(&c, &e), PL_OK, "%s", pl_last_error());
    pl_test_rng r;
    pl_test_rng_seed(&r, seed);
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.temperature = 0.0f;
    sp.ignore_eos = true;
    sp.max_tokens = 32;
    for (int i = 0; i < 24; i++) {
        int32_t prompt[8] = {1};
        for (int k = 1; k < 8; k++) prompt[k] = 3 + (int32_t)pl_test_rng_below(&r, 60);
        cr_assert_eq(pl_engine_submit_tokens(e, prompt, 8, &sp, NULL), PL_OK);
    }
    pl_completion *cs;
    size_t n;
    cr_assert_eq(pl_engine_run(e, &cs, &n), PL_OK);
    int *count = calloc((size_t)vocab, sizeof *count);
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < cs[i].n_output_ids; k++) count[cs[i].output_ids[k]]++;
    for (int p = 0; p < n_pool; p++) {
        int best = 3;
        for (int t = 3; t < vocab; t++)
            if (count[t] > count[best]) best = t;
        pool[p] = best;
        count[best] = -1;
    }
    free(count);
    pl_completions_free(cs, n);
    pl_engine_destroy(e);
}

/* The same token's K/V may differ in the last bits of f32 between schedules (docs/api.md,
 * "Greedy output and batching"), so a greedy choice between two logits closer than that can
 * go either way. The reference marks its first such step; a run under pressure must equal
 * it token for token up to there, and the test asserts such steps stay rare. TIE_EPS is
 * ~100x the logit differences seen between schedules of this model. */
#define TIE_TOP 5
#define TIE_EPS 1e-4f

/* The first output step where another of the top TIE_TOP tokens is within TIE_EPS of the
 * chosen one (or the chosen one is not among them), n_output_ids when there is none. */
static int first_tie(const pl_completion *cp) {
    cr_assert_eq(cp->n_logprobs, cp->n_output_ids);
    for (size_t k = 0; k < cp->n_logprobs; k++) {
        const pl_token_logprobs *lp = &cp->logprobs[k];
        if (lp->rank > lp->n_top) return (int)k;
        for (int j = 0; j < lp->n_top; j++)
            if (lp->top[j].token != lp->token &&
                fabsf(lp->top[j].logprob - lp->logprob) < TIE_EPS)
                return (int)k;
    }
    return (int)cp->n_output_ids;
}

/* Step 1: greedy outputs with no KV pressure, n = 1, no aborts. */
static void run_reference(soak_req *w, int n) {
    pl_engine_config c;
    base_config(&c);
    c.max_num_blocks = 16 * (SOAK_MODEL_LEN / 4) + 64;
    c.max_waiting = 0;
    pl_engine *e;
    cr_assert_eq(pl_engine_create(&c, &e), PL_OK, "%s", pl_last_error());
    int next = 0, done = 0;
    int *by_id = NULL;
    size_t cap_id = 0;
    while (done < n) {
        /* a window keeps the reference cheap on memory: 64 in flight */
        for (; next < n && next - done < 64; next++) {
            if (!w[next].greedy) {
                done++;
                continue;
            }
            pl_sampling_params sp = w[next].sp;
            sp.n = 1;
            sp.logprobs = TIE_TOP;
            pl_request_id id;
            cr_assert_eq(pl_engine_submit_tokens(e, w[next].prompt, (size_t)w[next].n_prompt, &sp,
                                                 &id), PL_OK, "%s", pl_last_error());
            if (id >= cap_id) {
                size_t nc = (id + 1) * 2;
                by_id = realloc(by_id, nc * sizeof *by_id);
                for (size_t k = cap_id; k < nc; k++) by_id[k] = -1;
                cap_id = nc;
            }
            by_id[id] = next;
        }
        pl_step_result res;
        cr_assert_eq(pl_engine_step(e, &res), PL_OK, "%s", pl_last_error());
        cr_assert_eq(res.n_preempted, 0, "the reference run must not preempt");
        for (size_t k = 0; k < res.n_finished; k++) {
            const pl_completion *cp = &res.finished[k];
            soak_req *q = &w[by_id[cp->id]];
            q->n_ref = (int)cp->n_output_ids;
            q->ref = malloc((cp->n_output_ids + 1) * sizeof(int32_t));
            memcpy(q->ref, cp->output_ids, cp->n_output_ids * sizeof(int32_t));
            q->ref_reason = cp->finish_reason;
            q->ref_tie = first_tie(cp);
            done++;
        }
    }
    free(by_id);
    pl_engine_destroy(e);
}

/* Every block of the pool against every live table; only running samples hold blocks. */
static void check_kv(pl_engine *e, const pl_kv_table **tables, int cap) {
    int n = 0;
    for (pl_request *r = e->live_head; r; r = r->next)
        for (int i = 0; i < r->n_samples; i++) {
            const pl_seq *q = &r->samples[i].seq;
            if (q->kv.n_blocks > 0)
                cr_assert_eq(q->state, PL_SEQ_RUNNING, "request %llu sample %d holds %d blocks "
                             "while %s", (unsigned long long)r->id, i, q->kv.n_blocks,
                             pl_seq_state_name(q->state));
            cr_assert_lt(n, cap);
            tables[n++] = &q->kv;
        }
    pl_status s = pl_kv_check(e->pool, tables, n);
    cr_assert_eq(s, PL_OK, "KV invariants: %s", pl_last_error());
}

static void check_completion(const pl_engine *e, soak_req *q, const pl_completion *c,
                             soak_stats *st) {
    const pl_sampling_params *p = &q->sp;
    cr_assert(c->index >= 0 && c->index < p->n, "sample index %d of %d", c->index, p->n);
    cr_assert(!q->seen[c->index], "request %llu sample %d reported twice",
              (unsigned long long)c->id, c->index);
    q->seen[c->index] = true;
    q->n_reported++;
    st->completions++;
    cr_assert_eq(c->n_prompt_ids, (size_t)q->n_prompt);
    cr_assert(!memcmp(c->prompt_ids, q->prompt, (size_t)q->n_prompt * sizeof(int32_t)));
    int n_out = (int)c->n_output_ids;
    cr_assert_leq(n_out, p->max_tokens);
    for (int k = 0; k < n_out; k++)
        cr_assert(c->output_ids[k] >= 0 && c->output_ids[k] < e->vocab);
    /* no end token before the last one */
    for (int k = 0; k + 1 < n_out; k++)
        cr_assert(!is_end(e, p, c->output_ids[k], k + 1),
                  "request %llu sample %d: token %d at %d should have ended it",
                  (unsigned long long)c->id, c->index, c->output_ids[k], k);
    if (q->abort_accepted) {
        cr_assert_eq(c->finish_reason, PL_FINISH_ABORT, "request %llu: %s after an accepted "
                     "abort", (unsigned long long)c->id, pl_finish_reason_name(c->finish_reason));
        st->aborted++;
    } else {
        bool ended = n_out > 0 && is_end(e, p, c->output_ids[n_out - 1], n_out);
        pl_finish_reason want = ended ? PL_FINISH_STOP : PL_FINISH_LENGTH;
        cr_assert_eq(c->finish_reason, want, "request %llu sample %d: finish %s, expected %s "
                     "(%d of max %d tokens)", (unsigned long long)c->id, c->index,
                     pl_finish_reason_name(c->finish_reason), pl_finish_reason_name(want), n_out,
                     p->max_tokens);
        if (want == PL_FINISH_LENGTH) cr_assert_eq(n_out, p->max_tokens);
        if (want == PL_FINISH_STOP) st->stopped++;
        else st->lengthed++;
    }
    if (q->greedy) {
        /* from the reference's first near tie on, either choice is right: check up to it */
        int exact = q->ref_tie < n_out ? q->ref_tie : n_out;
        if (q->ref_tie < q->n_ref) {
            st->greedy_ties++;
        } else if (q->abort_accepted) {
            cr_assert_leq(n_out, q->n_ref);
        } else {
            cr_assert_eq(n_out, q->n_ref, "request %llu sample %d: %d tokens, reference %d",
                         (unsigned long long)c->id, c->index, n_out, q->n_ref);
            cr_assert_eq(c->finish_reason, q->ref_reason);
        }
        for (int k = 0; k < exact; k++)
            cr_assert_eq(c->output_ids[k], q->ref[k], "request %llu sample %d: token %d is %d, "
                         "reference %d (preempted %d times)", (unsigned long long)c->id,
                         c->index, k, c->output_ids[k], q->ref[k], c->n_preemptions);
        st->greedy_checked++;
    }
}

static size_t heap_in_use(void) {
#ifdef PL_HAVE_LSAN
    return __sanitizer_get_current_allocated_bytes();
#else
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
#endif
}

/* Step 2 and 3. */
static void run_soak(int n, uint64_t seed) {
    int32_t stop_pool[12];
    frequent_tokens(seed, 512, stop_pool, 12);
    soak_req *w = make_workload(n, seed, 512, stop_pool, 12);
    run_reference(w, n);

    pl_engine_config c;
    base_config(&c);
    c.max_num_blocks = 40; /* 160 slots: two long requests fill it */
    pl_engine *e;
    cr_assert_eq(pl_engine_create(&c, &e), PL_OK, "%s", pl_last_error());
    cr_assert_eq(e->vocab, 512);

    /* every allocation of the test itself happens before the first heap measurement */
    int *by_id = malloc(((size_t)n + 16) * sizeof *by_id);
    const pl_kv_table **tables = malloc(4096 * sizeof *tables);
    pl_test_rng r;
    pl_test_rng_seed(&r, seed ^ 0xab07);
    soak_stats st = {0};
    int next = 0, accepted = 0, finished_reqs = 0;
    size_t heap_mark = 0;
    int mark_at = n / 3;
    bool marked = false;
    while (next < n || pl_engine_has_pending_work(e)) {
        /* idle at a third of the way: measure the heap, then carry on */
        bool draining = !marked && next >= mark_at;
        if (draining && !pl_engine_has_pending_work(e)) {
            cr_assert_eq(pl_engine_step(e, NULL), PL_OK); /* frees the last step's requests */
            heap_mark = heap_in_use();
            marked = true;
            draining = false;
        }
        int burst = draining ? 0 : (int)pl_test_rng_below(&r, 4);
        for (int k = 0; k < burst && next < n; k++) {
            soak_req *q = &w[next];
            pl_status s = pl_engine_submit_tokens(e, q->prompt, (size_t)q->n_prompt, &q->sp,
                                                  &q->id);
            if (s == PL_ERR_QUEUE_FULL) { /* left no trace: submitted again later */
                st.queue_full++;
                q->id = 0;
                break;
            }
            cr_assert_eq(s, PL_OK, "submit %d: %s", next, pl_last_error());
            cr_assert_lt(q->id, (pl_request_id)n + 16);
            by_id[q->id] = next++;
            accepted++;
        }
        if (next > 0 && pl_test_rng_below(&r, 12) == 0) {
            soak_req *q = &w[pl_test_rng_below(&r, (uint32_t)next)];
            if (q->id) {
                pl_status s = pl_engine_abort(e, q->id);
                bool unfinished = q->n_reported < q->sp.n;
                if (unfinished) cr_assert_eq(s, PL_OK, "abort: %s", pl_last_error());
                else cr_assert_eq(s, PL_ERR_NOT_FOUND);
                if (s == PL_OK) q->abort_accepted = true;
            }
        }
        pl_step_result res;
        cr_assert_eq(pl_engine_step(e, &res), PL_OK, "step: %s", pl_last_error());
        st.steps++;
        st.preemptions += res.n_preempted;
        check_kv(e, tables, 4096);
        for (size_t k = 0; k < res.n_finished; k++) {
            const pl_completion *cp = &res.finished[k];
            cr_assert(cp->id > 0 && cp->id < (pl_request_id)n + 16);
            soak_req *q = &w[by_id[cp->id]];
            cr_assert_eq(q->id, cp->id);
            check_completion(e, q, cp, &st);
            if (q->n_reported == q->sp.n) finished_reqs++;
        }
    }
    cr_assert_eq(pl_engine_step(e, NULL), PL_OK);
    size_t heap_end = heap_in_use();

    int reported_samples = 0, want_samples = 0;
    for (int i = 0; i < n; i++)
        if (w[i].id) {
            want_samples += w[i].sp.n;
            reported_samples += w[i].n_reported;
        }
    cr_assert_eq(reported_samples, want_samples, "every accepted sample reported once");
    cr_assert_eq(finished_reqs, accepted);
    pl_metrics m;
    pl_engine_metrics(e, &m);
    cr_assert_eq(m.kv_blocks_used, 0, "%d blocks still used at the end", m.kv_blocks_used);
    cr_assert_eq(m.kv_blocks_free, m.kv_blocks_total);
    check_kv(e, tables, 4096);
    cr_assert(marked);
    long growth = (long)heap_end - (long)heap_mark;
    fprintf(stderr, "soak: %d requests (%d accepted, %ld queue-full), %ld steps, %ld "
            "preemptions, %ld completions (%ld stop, %ld length, %ld abort), %ld greedy checked "
            "against the reference (%ld up to a near tie); heap in use idle after %d requests %zu B, after %d %zu B "
            "(%+ld B)\n", n, accepted, st.queue_full, st.steps, st.preemptions, st.completions,
            st.stopped, st.lengthed, st.aborted, st.greedy_checked, st.greedy_ties, mark_at, heap_mark, n,
            heap_end, growth);
    cr_assert_gt(st.preemptions, n / 20, "the pool must be small enough to preempt often");
    cr_assert_gt(st.aborted, 0);
    cr_assert_gt(st.stopped, 0);
    cr_assert_gt(st.lengthed, 0);
    /* near ties are rare: most greedy samples are checked whole */
    cr_assert_lt(st.greedy_ties * 50, st.greedy_checked, "%ld of %ld greedy samples had a near tie",
                 st.greedy_ties, st.greedy_checked);
    /* 1000 requests served between the marks: less than 16 bytes each */
    cr_assert_lt(growth, (long)(n - mark_at) * 16, "heap grew by %ld bytes", growth);

    pl_engine_destroy(e);
    free(tables);
    free(by_id);
    free_workload(w, n);
}

/* PL_SOAK_REQUESTS scales the run (a longer soak by hand: PL_SOAK_REQUESTS=10000); unset or
 * below 30, the default. */
#define SOAK_DEFAULT_REQUESTS 1500
static int soak_requests(void) {
    const char *env = getenv("PL_SOAK_REQUESTS");
    int n = env ? atoi(env) : SOAK_DEFAULT_REQUESTS;
    return n >= 30 ? n : SOAK_DEFAULT_REQUESTS;
}

/* The time limit grows with the run: the default's 240 s over 1500 requests, i.e. 160 ms per
 * request (a release build takes about 1 ms; sanitizers, valgrind and a loaded 2-core machine
 * need the rest). The .timeout below is that bound for the default size. */
#define SOAK_TIMEOUT_MIN_S 240.0
#define SOAK_TIMEOUT_PER_REQUEST_S (SOAK_TIMEOUT_MIN_S / SOAK_DEFAULT_REQUESTS)

Test(soak, tiny_model_small_pool, .timeout = SOAK_TIMEOUT_MIN_S) {
    run_soak(soak_requests(), pl_test_run_seed("soak"));
    PL_ASSERT_NO_LEAKS();
}

/* Criterion's timeout is a per-test attribute that its runner reads when it starts the test,
 * after this hook (which runs in the runner's process, before any test): set it from
 * PL_SOAK_REQUESTS here, so that a long soak is not killed at the default size's bound. */
ReportHook(PRE_ALL)(struct criterion_test_set *set) {
    double timeout = SOAK_TIMEOUT_PER_REQUEST_S * soak_requests();
    if (timeout <= SOAK_TIMEOUT_MIN_S) return;
    FOREACH_SET(struct criterion_suite_set *suite, set->suites) {
        if (!suite->tests) continue;
        FOREACH_SET(struct criterion_test *t, suite->tests) {
            if (!strcmp(t->category, "soak") && !strcmp(t->name, "tiny_model_small_pool")) {
                t->data->timeout = timeout;
                fprintf(stderr, "soak: %d requests: timeout %.0f s\n", soak_requests(),
                        timeout);
            }
        }
    }
}
