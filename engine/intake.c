/*
 * engine/intake.c - submit and abort, callable from any thread while another steps; the drain
 * of what arrived into the scheduler; the stepping thread's wait for work.
 *
 * Submitting threads do everything that needs no engine state (validation, tokenization,
 * building the request) outside the lock, then take intake.mu only to check the queue bound,
 * register the id and append to the intake queue, and signal `arrived`. The stepping thread
 * drains the queue into the scheduler at the start of each step, so the scheduler itself
 * stays single-threaded; between steps it may sleep on `arrived` (pl_engine_wait). Only this
 * file touches the intake's fields and the live list (the requests the stepping thread holds,
 * in submit order, until retired to the graveyard).
 */
#include <errno.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "engine/engine_internal.h"
#include "engine/fields.h"
#include "util/alloc.h"
#include "util/log.h"
#include "util/timer.h"
#include "util/utf8.h"

pl_status pl_intake_init(pl_intake *in) {
    memset(in, 0, sizeof *in);
    if (pthread_mutex_init(&in->mu, NULL) != 0)
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "engine: cannot create the intake mutex");
    /* timeouts count on the monotonic clock: a wall-clock jump must not stretch a wait */
    pthread_condattr_t ca;
    bool ok = pthread_condattr_init(&ca) == 0;
    if (ok) {
        ok = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) == 0 &&
             pthread_cond_init(&in->arrived, &ca) == 0;
        pthread_condattr_destroy(&ca);
    }
    if (!ok) {
        pthread_mutex_destroy(&in->mu);
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "engine: cannot create the intake condition");
    }
    return PL_OK;
}

void pl_intake_deinit(pl_intake *in) {
    for (pl_request *r = in->head, *n; r; r = n) {
        n = r->inbox_next;
        pl_request_free(r);
    }
    pl_free(in->aborts);
    pl_id_map_free(&in->live);
    pthread_cond_destroy(&in->arrived);
    pthread_mutex_destroy(&in->mu);
}

/* Checks text: valid UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
static pl_status check_utf8(const char *s, size_t n) {
    size_t i = pl_utf8_validate(s, n);
    if (i < n) return pl_fail(PL_ERR_INVALID_ARGUMENT, "prompt: invalid UTF-8 at byte %zu", i);
    return PL_OK;
}

static pl_status enqueue(pl_engine *e, pl_request *r, pl_request_id *out_id) {
    pl_intake *in = &e->intake;
    pthread_mutex_lock(&in->mu);
    const pl_engine_config *c = &e->cfg;
    if (c->max_waiting > 0 && c->overflow_policy == PL_OVERFLOW_REJECT_NEWEST &&
        (size_t)in->n_waiting_new + in->n_queued >= (size_t)c->max_waiting) {
        pthread_mutex_unlock(&in->mu);
        return pl_fail(PL_ERR_QUEUE_FULL, "submit: %d requests already wait (max_waiting)",
                       c->max_waiting);
    }
    r->id = (pl_request_id)atomic_fetch_add(&e->next_id, 1);
    for (int i = 0; i < r->n_samples; i++) r->samples[i].seq.id = r->id;
    pl_status s = pl_id_map_put(&in->live, r->id, r);
    if (s != PL_OK) {
        pthread_mutex_unlock(&in->mu);
        return s;
    }
    r->t_submit_ns = pl_now_ns();
    if (in->tail) in->tail->inbox_next = r;
    else in->head = r;
    in->tail = r;
    in->n_queued++;
    pthread_cond_signal(&in->arrived);
    pthread_mutex_unlock(&in->mu);
    if (out_id) *out_id = r->id;
    return PL_OK;
}

static pl_status submit_ids(pl_engine *e, const int32_t *ids, size_t n_ids,
                            const pl_sampling_params *params, pl_request_id *out_id) {
    pl_sampling_params p;
    if (params) {
        PL_TRY(pl_sampling_params_take(params, e->vocab, &p));
    } else {
        pl_sampling_params_default(&p);
    }
    PL_TRY(pl_sched_check_admissible(e->sched, n_ids, (size_t)p.max_tokens));
    if (p.n > e->cfg.max_num_seqs)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "sampling.n = %d: more than max_num_seqs (%d)",
                       p.n, e->cfg.max_num_seqs);
    pl_request *r;
    PL_TRY(pl_request_create(e, ids, n_ids, &p, &r));
    pl_status s = enqueue(e, r, out_id);
    if (s != PL_OK) pl_request_free(r);
    return s;
}

pl_status pl_engine_submit_tokens(pl_engine *e, const int32_t *ids, size_t n_ids,
                                  const pl_sampling_params *params, pl_request_id *out_id) {
    if (!e) return pl_fail(PL_ERR_INVALID_ARGUMENT, "submit: engine is NULL");
    if (!ids || n_ids == 0) return pl_fail(PL_ERR_INVALID_ARGUMENT, "submit: no prompt token ids");
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] < 0 || ids[i] >= e->vocab)
            return pl_fail(PL_ERR_INVALID_ARGUMENT,
                           "submit: prompt id %d at index %zu is outside the vocabulary [0, %d)",
                           (int)ids[i], i, e->vocab);
    return submit_ids(e, ids, n_ids, params, out_id);
}

pl_status pl_engine_submit_request(pl_engine *e, const char *prompt,
                                   const pl_sampling_params *params, pl_request_id *out_id) {
    if (!e) return pl_fail(PL_ERR_INVALID_ARGUMENT, "submit: engine is NULL");
    if (!prompt) return pl_fail(PL_ERR_INVALID_ARGUMENT, "submit: prompt is NULL");
    /* user text: special-token strings in it stay text */
    return pl_intake_submit_text(e, prompt, strlen(prompt), e->bos_id >= 0 ? PL_TOK_ADD_SPECIAL : 0,
                                 params, out_id);
}

pl_status pl_intake_submit_text(pl_engine *e, const char *prompt, size_t len, unsigned flags,
                                const pl_sampling_params *params, pl_request_id *out_id) {
    if (!e->tok)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "submit: no tokenizer is loaded (tokenizer_path is NULL and none was "
                       "found beside the model); submit token ids instead");
    if (len == 0) return pl_fail(PL_ERR_INVALID_ARGUMENT, "submit: prompt is empty");
    PL_TRY(check_utf8(prompt, len));
    int32_t *ids;
    size_t n;
    PL_TRY(pl_tok_encode(e->tok, prompt, len, flags, &ids, &n));
    pl_status s = PL_OK;
    for (size_t i = 0; i < n && s == PL_OK; i++)
        if (ids[i] < 0 || ids[i] >= e->vocab)
            s = pl_fail(PL_ERR_INVALID_ARGUMENT,
                        "submit: the tokenizer produced id %d, outside the model's vocabulary "
                        "(%d)", (int)ids[i], e->vocab);
    if (s == PL_OK) s = submit_ids(e, ids, n, params, out_id);
    pl_free(ids);
    return s;
}

pl_status pl_engine_abort(pl_engine *e, pl_request_id id) {
    if (!e) return pl_fail(PL_ERR_INVALID_ARGUMENT, "abort: engine is NULL");
    pl_intake *in = &e->intake;
    pthread_mutex_lock(&in->mu);
    pl_status s = PL_OK;
    if (id == 0 || !pl_id_map_get(&in->live, id)) {
        s = pl_fail(PL_ERR_NOT_FOUND, "abort: no unfinished request with id %llu",
                    (unsigned long long)id);
    } else {
        if (in->n_aborts == in->cap_aborts) {
            size_t cap = in->cap_aborts ? 2 * in->cap_aborts : 16;
            uint64_t *g = pl_reallocarray(in->aborts, cap, sizeof *g);
            if (!g) s = pl_fail(PL_ERR_OUT_OF_MEMORY, "abort: queue");
            else in->aborts = g, in->cap_aborts = cap;
        }
        if (s == PL_OK) {
            in->aborts[in->n_aborts++] = id;
            pthread_cond_signal(&in->arrived);
        }
    }
    pthread_mutex_unlock(&in->mu);
    return s;
}

/* ---- the stepping thread's side ------------------------------------------------------ */

/* The scheduler's counts and the pool's figures, for submitters (the queue bound) and
 * pl_engine_occupancy. Called with intake.mu held. */
static void publish_counts(pl_engine *e) {
    pl_intake *in = &e->intake;
    pl_sched_counts c;
    pl_sched_get_counts(e->sched, &c);
    in->n_waiting_new = c.n_waiting_new;
    pl_kv_stats kv;
    pl_kv_get_stats(e->pool, &kv);
    in->occ = (pl_occupancy){
        .struct_size = sizeof in->occ, .n_waiting = c.n_waiting,
        .n_waiting_new = c.n_waiting_new, .n_running = c.n_running,
        .max_waiting = e->cfg.max_waiting, .kv_blocks_total = kv.n_blocks_total,
        .kv_blocks_used = kv.n_blocks_used, .kv_usage = kv.usage,
    };
}

void pl_intake_publish(pl_engine *e) {
    pthread_mutex_lock(&e->intake.mu);
    publish_counts(e);
    pthread_mutex_unlock(&e->intake.mu);
}

/* The live list (submit order) of the requests the stepping thread holds. */
static void live_append(pl_engine *e, pl_request *r) {
    r->prev = e->live_tail;
    r->next = NULL;
    if (e->live_tail) e->live_tail->next = r;
    else e->live_head = r;
    e->live_tail = r;
}

static void live_remove(pl_engine *e, pl_request *r) {
    if (r->prev) r->prev->next = r->next;
    else e->live_head = r->next;
    if (r->next) r->next->prev = r->prev;
    else e->live_tail = r->prev;
}

void pl_intake_drain(pl_engine *e) {
    pl_intake *in = &e->intake;
    pthread_mutex_lock(&in->mu);
    pl_request *r = in->head;
    in->head = in->tail = NULL;
    in->n_queued = 0;
    while (r) {
        pl_request *next = r->inbox_next;
        r->inbox_next = NULL;
        live_append(e, r);
        pl_seq *dropped = NULL;
        pl_status s = pl_sched_add(e->sched, &r->samples[0].seq, &dropped);
        if (s != PL_OK) { /* only if the queue filled behind the submit-time check */
            pl_log(PL_LOG_WARN, "request %llu not queued: %s", (unsigned long long)r->id,
                   pl_last_error());
            pl_engine_finish_request(e, r, PL_FINISH_OVERLOADED);
        }
        if (dropped)
            pl_engine_finish_request(e, ((pl_sample *)dropped->user)->req, PL_FINISH_OVERLOADED);
        r = next;
    }
    for (size_t i = 0; i < in->n_aborts; i++) {
        pl_request *a = pl_id_map_get(&in->live, in->aborts[i]);
        if (a) pl_engine_finish_request(e, a, PL_FINISH_ABORT);
    }
    in->n_aborts = 0;
    /* The drained requests now count as waiting: a submit made while this step runs must see
     * them, or it passes the max_waiting check and the next drain finds the queue full (the
     * request then ends "overloaded" under REJECT_NEWEST instead of being refused). */
    publish_counts(e);
    pthread_mutex_unlock(&in->mu);
}

/* They are freed at the start of the next step, so this step's result can still point into
 * them. */
void pl_intake_retire_reported(pl_engine *e) {
    pl_intake *in = &e->intake;
    pthread_mutex_lock(&in->mu);
    for (pl_request *r = e->live_head, *n; r; r = n) {
        n = r->next;
        if (r->n_unreported > 0) continue;
        live_remove(e, r);
        pl_id_map_del(&in->live, r->id);
        r->inbox_next = e->graveyard;
        e->graveyard = r;
    }
    publish_counts(e);
    pthread_mutex_unlock(&in->mu);
}

bool pl_intake_has_queued(pl_intake *in) {
    pthread_mutex_lock(&in->mu);
    bool queued = in->n_queued > 0 || in->n_aborts > 0;
    pthread_mutex_unlock(&in->mu);
    return queued;
}

bool pl_engine_has_pending_work(const pl_engine *e) {
    if (!e) return false;
    pl_engine *m = (pl_engine *)e; /* the lock is state, not value */
    return pl_intake_has_queued(&m->intake) || e->live_head != NULL;
}

pl_status pl_engine_wait(pl_engine *e, double timeout_s, bool *out_has_work) {
    if (!e) return pl_fail(PL_ERR_INVALID_ARGUMENT, "wait: engine is NULL");
    if (isnan(timeout_s)) return pl_fail(PL_ERR_INVALID_ARGUMENT, "wait: timeout is NaN");
    pl_intake *in = &e->intake;
    struct timespec deadline;
    bool forever = timeout_s < 0 || timeout_s > 1e9;
    if (!forever) {
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        double whole = floor(timeout_s);
        deadline.tv_sec += (time_t)whole;
        deadline.tv_nsec += (long)((timeout_s - whole) * 1e9);
        if (deadline.tv_nsec >= 1000000000L) deadline.tv_sec++, deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&in->mu);
    /* the live list is the stepping thread's, and this is the stepping thread */
    bool work = e->live_head != NULL || in->n_queued > 0 || in->n_aborts > 0;
    while (!work && !in->woken && timeout_s != 0) {
        int rc = forever ? pthread_cond_wait(&in->arrived, &in->mu)
                         : pthread_cond_timedwait(&in->arrived, &in->mu, &deadline);
        work = in->n_queued > 0 || in->n_aborts > 0;
        if (rc == ETIMEDOUT) break;
    }
    in->woken = false;
    pthread_mutex_unlock(&in->mu);
    if (out_has_work) *out_has_work = work;
    return PL_OK;
}

void pl_engine_wake(pl_engine *e) {
    if (!e) return;
    pl_intake *in = &e->intake;
    pthread_mutex_lock(&in->mu);
    in->woken = true;
    pthread_cond_broadcast(&in->arrived);
    pthread_mutex_unlock(&in->mu);
}

void pl_engine_occupancy_sized(const pl_engine *e, pl_occupancy *dst, size_t dst_size) {
    if (!dst) return;
    pl_occupancy o = {.struct_size = sizeof o};
    if (e) {
        pl_intake *in = &((pl_engine *)e)->intake; /* the lock is state, not value */
        pthread_mutex_lock(&in->mu);
        o = in->occ;
        /* submitted since the last drain: new and waiting too */
        o.n_waiting += (int)in->n_queued;
        o.n_waiting_new += (int)in->n_queued;
        o.max_waiting = e->cfg.max_waiting;
        pthread_mutex_unlock(&in->mu);
    }
    pl_fields_fill_out(dst, dst_size, &o, sizeof o);
}
