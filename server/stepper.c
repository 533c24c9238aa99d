/*
 * server/stepper.c - the stepping thread: the only caller of pl_engine_step.
 *
 * Its loop: hand out a metrics snapshot if an HTTP thread asked for one; sleep in
 * pl_engine_wait until work arrives (or the next periodic log is due; no polling); step;
 * deliver what the step reported. A scrape that arrives between steps is answered before
 * the next step; one that arrives during a step gets the snapshot taken just before that step
 * when there is one (a scrape during the previous step asked for it: a picker scraping every
 * 50 ms never waits on long steps), else it waits for the step's end as an older snapshot
 * would describe a moment before earlier steps. Step results are engine-owned and valid only
 * until the next step, so delivery copies every delta a stream needs (text, token, logprobs) into its
 * request's event queue and every finished sample's result into its choice, then hands the
 * suspended connections that have something new to the watcher thread, which resumes them. A stream whose client does not read piles
 * events up to --max-pending-deltas; past that the request is aborted (its KV blocks freed by
 * the engine's next step) and the client is told why at the end of its stream: a slow reader
 * costs the engine one copy per token and never waits.
 *
 * It also keeps the time it spends stepping, delivering and idle, which /metrics reports
 * (the HTTP layer's cost on this thread is the delivering share).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/srv.h"

/* ---- delivery ---------------------------------------------------------------------------- */

static bool push_delta(pl_srv_req *r, int choice, const pl_stream_delta *d) {
    int n_top = d->logprobs ? d->logprobs->n_top : 0;
    /* the token's own text (its logprobs' token string), engine-owned until the next step */
    const char *tok = d->logprobs ? d->logprobs->text : NULL;
    size_t tok_len = tok ? strlen(tok) + 1 : 0;
    pl_srv_event *ev = malloc(sizeof *ev + (size_t)n_top * sizeof(pl_logprob) + d->text_len + 1 +
                              tok_len);
    if (!ev) return false;
    memset(ev, 0, sizeof *ev);
    ev->choice = choice;
    ev->token = d->token;
    if (d->logprobs) {
        ev->has_logprobs = true;
        ev->lp = *d->logprobs;
        ev->lp.top = n_top ? ev->tops : NULL;
        if (n_top) memcpy(ev->tops, d->logprobs->top, (size_t)n_top * sizeof(pl_logprob));
    }
    ev->text = (char *)(ev->tops + n_top);
    ev->text_len = d->text_len;
    if (d->text_len) memcpy(ev->text, d->text, d->text_len);
    ev->text[d->text_len] = '\0';
    if (tok) {
        char *copy = ev->text + d->text_len + 1;
        memcpy(copy, tok, tok_len);
        ev->lp.text = copy;
    }
    if (r->ev_tail) r->ev_tail->next = ev;
    else r->ev_head = ev;
    r->ev_tail = ev;
    r->n_events++;
    return true;
}

static bool push_finish(pl_srv_req *r, int choice) {
    pl_srv_event *ev = calloc(1, sizeof *ev + 1);
    if (!ev) return false;
    ev->choice = choice;
    ev->is_finish = true;
    ev->token = -1;
    ev->text = (char *)ev->tops;
    if (r->ev_tail) r->ev_tail->next = ev;
    else r->ev_head = ev;
    r->ev_tail = ev;
    r->n_events++;
    return true;
}

/* The stream's reader is too slow (or memory ran out): abort, and say why at its end. */
static void overflow(pl_srv *s, pl_srv_req *r) {
    if (r->overflow) return;
    r->overflow = true;
    atomic_fetch_add(&s->aborted_overflow, 1);
    pl_srv_req_abort_locked(r);
}

/* Queues r's connection to be resumed once the whole step is delivered (r->mu held). The
 * watcher thread resumes them: one libmicrohttpd call (a lock and a write to its wake-up
 * descriptor) per stream per step would otherwise be this thread's largest cost, and waking
 * libmicrohttpd's threads mid-delivery hands them the core on a busy machine while this
 * thread holds the registry. */
static void want_resume(pl_srv *s, pl_srv_req *r) {
    if (!r->suspended || r->to_resume) return;
    if (s->n_resume == s->cap_resume) {
        size_t cap = s->cap_resume ? 2 * s->cap_resume : 64;
        pl_srv_req **g = realloc(s->resume, cap * sizeof *g);
        if (!g) { /* resume now instead */
            pl_srv_req_resume_locked(r);
            return;
        }
        s->resume = g;
        s->cap_resume = cap;
    }
    r->to_resume = true;
    pl_srv_req_ref(r);
    s->resume[s->n_resume++] = r;
}

static void resume_queued(pl_srv *s) {
    if (s->n_resume == 0) return;
    if (pl_srv_watch_resume(s, s->resume, s->n_resume)) {
        s->n_resume = 0;
        return;
    }
    for (size_t i = 0; i < s->n_resume; i++) { /* out of memory: resume them here */
        pl_srv_req *r = s->resume[i];
        pthread_mutex_lock(&r->mu);
        r->to_resume = false;
        pl_srv_req_resume_locked(r);
        pthread_mutex_unlock(&r->mu);
        pl_srv_req_unref(r);
    }
    s->n_resume = 0;
}

static void deliver_delta(pl_srv *s, const pl_stream_delta *d) {
    pl_srv_entry *en = pl_srv_registry_get(&s->reg, d->id);
    if (!en) return;
    pl_srv_req *r = en->req;
    int choice = en->prompt * r->n_per_prompt + d->index;
    bool stream = r->rq.stream && (d->text_len > 0 || d->logprobs); /* else nothing to see */
    if (d->token < 0 && !stream) return;
    pthread_mutex_lock(&r->mu);
    if (d->token >= 0 && choice < r->n_choices) { /* counted for the access log */
        pl_srv_choice *ch = &r->choices[choice];
        if (ch->n_drawn++ == 0) ch->t_first_token = pl_srv_now();
    }
    /* whole responses take the final text */
    if (stream && !r->overflow && !r->client_gone && choice < r->n_choices) {
        if (r->n_events >= s->opt.max_pending_deltas || !push_delta(r, choice, d)) overflow(s, r);
        want_resume(s, r);
    }
    pthread_mutex_unlock(&r->mu);
}

/* Copies what a whole response needs of c into its choice. */
static void keep_result(pl_srv_req *r, pl_srv_choice *ch, const pl_completion *c) {
    ch->reason = c->finish_reason;
    ch->n_prompt = c->n_prompt_ids;
    ch->n_cached = c->n_cached_prompt_ids;
    ch->n_out = c->n_output_ids;
    ch->queue_s = c->queue_s;
    ch->ttft_s = c->ttft_s;
    ch->total_s = c->total_s;
    ch->stop_string = c->stop_string;
    ch->last_id = c->n_output_ids ? c->output_ids[c->n_output_ids - 1] : -1;
    if (r->rq.stream) return;
    const char *text = c->text ? c->text : "";
    ch->text_len = strlen(text);
    ch->text = strdup(text);
    bool ok = ch->text != NULL;
    if (ok && c->logprobs) ok = pl_srv_logprobs_copy(c->logprobs, c->n_logprobs, &ch->lp);
    if (ok && c->prompt_logprobs)
        ok = pl_srv_logprobs_copy(c->prompt_logprobs, c->n_prompt_logprobs, &ch->prompt_lp);
    if (!ok) ch->reason = PL_FINISH_ERROR; /* out of memory: answered as a server error */
}

static void deliver_finished(pl_srv *s, const pl_completion *c) {
    pl_srv_entry *en = pl_srv_registry_get(&s->reg, c->id);
    if (!en) return;
    pl_srv_req *r = en->req;
    int prompt = en->prompt;
    bool prompt_done = false;
    pthread_mutex_lock(&r->mu);
    int choice = prompt * r->n_per_prompt + c->index;
    if (choice < r->n_choices && !r->choices[choice].finished) {
        pl_srv_choice *ch = &r->choices[choice];
        keep_result(r, ch, c);
        ch->finished = true;
        if (r->rq.stream && !r->overflow && !push_finish(r, choice)) overflow(s, r);
        prompt_done = --r->samples_left[prompt] == 0;
        if (prompt_done && --r->prompts_left == 0) r->done = true;
        want_resume(s, r);
    }
    pthread_mutex_unlock(&r->mu);
    if (prompt_done) {
        pl_srv_registry_del(&s->reg, c->id);
        pl_srv_req_unref(r); /* the registry's reference */
    }
}

static void deliver(pl_srv *s, const pl_step_result *res) {
    if (res->n_deltas == 0 && res->n_finished == 0) return;
    pthread_mutex_lock(&s->reg_mu);
    for (size_t i = 0; i < res->n_deltas; i++) deliver_delta(s, &res->deltas[i]);
    for (size_t i = 0; i < res->n_finished; i++) deliver_finished(s, &res->finished[i]);
    pthread_mutex_unlock(&s->reg_mu);
    resume_queued(s);
}

void pl_srv_abort_all(pl_srv *s) {
    pthread_mutex_lock(&s->reg_mu);
    for (size_t i = 0; i < s->reg.cap; i++)
        if (s->reg.slots[i].id) pl_engine_abort(s->e, s->reg.slots[i].id);
    pthread_mutex_unlock(&s->reg_mu);
}

/* ---- snapshots and the periodic log ------------------------------------------------------ */

static void take_snapshot(pl_srv *s, pl_srv_snapshot *out) {
    memset(out, 0, sizeof *out);
    pl_engine_metrics(s->e, &out->m);
    for (int k = 0; k < 5; k++) {
        size_t nb;
        const double *b = pl_srv_buckets((pl_latency)k, &nb);
        pl_srv_histogram *h = &out->hist[k];
        if (pl_engine_latency_histogram(s->e, (pl_latency)k, b, nb, h->counts, &h->count,
                                        &h->sum) != PL_OK)
            memset(h, 0, sizeof *h);
    }
    out->step_s = s->clock_step_s;
    out->deliver_s = s->clock_deliver_s;
    out->idle_s = s->clock_idle_s;
    out->step_cpu_s = s->cpu_step_s;
    out->deliver_cpu_s = s->cpu_deliver_s;
    out->uptime_s = pl_srv_now() - s->t_start;
}

/* Takes a snapshot if an HTTP thread asked for one, and says whether a step is under way
 * (stepping: one is about to begin). A snapshot is not taken before every step, which would
 * cost each step the histograms' walk; so one taken before an earlier step may be the latest,
 * and only one taken since the previous step ended (snap_at + 1 == steps_begun) may stand for
 * the moment before the step under way. */
static void serve_snapshot(pl_srv *s, bool stepping) {
    pthread_mutex_lock(&s->snap_mu);
    if (s->snap_asked > s->snap_given) {
        take_snapshot(s, &s->snap);
        s->snap_at = s->steps_begun;
        s->snap_given = s->snap_asked;
    }
    s->stepping = stepping;
    if (stepping) s->steps_begun++;
    pthread_cond_broadcast(&s->snap_cv);
    pthread_mutex_unlock(&s->snap_mu);
}

/* (snap_mu) during a step, the snapshot describes the moment just before it */
static bool snap_of_this_step(const pl_srv *s) {
    return s->stepping && s->snap_at + 1 == s->steps_begun;
}

bool pl_srv_snapshot_get(pl_srv *s, pl_srv_snapshot *out, double timeout_s) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += (time_t)timeout_s;
    pthread_mutex_lock(&s->snap_mu);
    /* the ticket also asks for a fresh one after a step under way: the next scrape during
     * the following step finds it */
    uint64_t ticket = ++s->snap_asked;
    bool stepping = s->stepping;
    pthread_mutex_unlock(&s->snap_mu);
    /* between steps: the stepping thread answers before it steps again (serve_snapshot runs
     * before every step), so this waits for a snapshot, not for a step */
    if (!stepping) pl_engine_wake(s->e);
    pthread_mutex_lock(&s->snap_mu);
    int rc = 0;
    while (s->snap_given < ticket && !snap_of_this_step(s) && rc == 0)
        rc = pthread_cond_timedwait(&s->snap_cv, &s->snap_mu, &deadline);
    bool ok = s->snap_given >= ticket || snap_of_this_step(s);
    if (ok) *out = s->snap;
    pthread_mutex_unlock(&s->snap_mu);
    return ok;
}

typedef struct log_state {
    double t;
    uint64_t prompt_tokens, output_tokens, preemptions, requests;
} log_state;

/* vLLM's periodic engine line, when anything happened since the last one. */
static void periodic_log(pl_srv *s, log_state *last) {
    pl_metrics m;
    pl_engine_metrics(s->e, &m);
    double now = pl_srv_now(), dt = now - last->t;
    bool busy = m.n_running || m.n_waiting || m.requests_finished != last->requests ||
                m.prompt_tokens_computed != last->prompt_tokens;
    if (busy && dt > 0)
        pl_srv_log("INFO",
                   "Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f "
                   "tokens/s, Running: %d reqs, Waiting: %d reqs, KV cache usage: %.1f%%, "
                   "Prefix cache hit rate: %.1f%%, Preemptions: %llu",
                   (double)(m.prompt_tokens_computed - last->prompt_tokens) / dt,
                   (double)(m.output_tokens - last->output_tokens) / dt, m.n_running,
                   m.n_waiting, 100.0 * m.kv_usage, 100.0 * m.prefix_cache_hit_rate,
                   (unsigned long long)(m.preemptions - last->preemptions));
    *last = (log_state){.t = now, .prompt_tokens = m.prompt_tokens_computed,
                        .output_tokens = m.output_tokens, .preemptions = m.preemptions,
                        .requests = m.requests_finished};
}

/* ---- the loop ---------------------------------------------------------------------------- */

/* This thread's CPU time: wall time also counts the moments another process (or a client on
 * the same machine) had the core. */
static double thread_cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void *stepper_main(void *arg) {
    pl_srv *s = arg;
    double interval = s->opt.log_interval;
    log_state last = {.t = pl_srv_now()};
    double next_log = last.t + interval;
    pthread_mutex_lock(&s->snap_mu);
    take_snapshot(s, &s->snap); /* a scrape during the first step has one to take */
    s->snap_at = s->steps_begun = 0;
    pthread_mutex_unlock(&s->snap_mu);
    while (!atomic_load(&s->stop)) {
        serve_snapshot(s, false);
        double t0 = pl_srv_now();
        double timeout = interval > 0 ? fmax(0.0, next_log - t0) : -1.0;
        bool work = false;
        pl_engine_wait(s->e, timeout, &work);
        double t1 = pl_srv_now();
        s->clock_idle_s += t1 - t0;
        if (work && !atomic_load(&s->stop)) {
            pl_step_result res = {0};
            serve_snapshot(s, true);
            double c1 = thread_cpu();
            pl_status st = pl_engine_step(s->e, &res);
            double t2 = pl_srv_now(), c2 = thread_cpu();
            deliver(s, &res);
            double t3 = pl_srv_now(), c3 = thread_cpu();
            s->clock_step_s += t2 - t1;
            s->clock_deliver_s += t3 - t2;
            s->cpu_step_s += c2 - c1;
            s->cpu_deliver_s += c3 - c2;
            if (st == PL_ERR_BACKEND && pl_engine_health(s->e) != PL_OK) {
                /* the device is gone for this process: every request was answered above;
                 * serve() sees the flag, drains and exits non-zero */
                if (!atomic_exchange(&s->backend_lost, true))
                    pl_srv_log("ERROR", "the backend is lost, stopping: %s", pl_last_error());
            } else if (st != PL_OK) {
                pl_srv_log("ERROR", "step: %s (%s)", pl_last_error(), pl_status_name(st));
                /* a backend failure finished its requests (reported above); anything else
                 * reported nothing: give the machine a moment before trying again */
                if (st != PL_ERR_BACKEND) nanosleep(&(struct timespec){0, 10000000}, NULL);
            }
        }
        if (interval > 0 && pl_srv_now() >= next_log) {
            periodic_log(s, &last);
            next_log = pl_srv_now() + interval;
        }
    }
    serve_snapshot(s, false);
    return NULL;
}

bool pl_srv_stepper_start(pl_srv *s) {
    atomic_store(&s->stop, false);
    if (pthread_create(&s->stepper, NULL, stepper_main, s) != 0) return false;
    s->stepper_started = true;
    return true;
}

void pl_srv_stepper_stop(pl_srv *s) {
    if (!s->stepper_started) return;
    atomic_store(&s->stop, true);
    pl_engine_wake(s->e);
    pthread_join(s->stepper, NULL);
    s->stepper_started = false;
}
