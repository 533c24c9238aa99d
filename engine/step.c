/*
 * engine/step.c - one step, and run (steps until nothing is pending).
 *
 * One step: drain the intake -> schedule -> build the batch -> run the model -> update the
 * scheduler -> draw a token for each sequence that reached the end of its tokens (and the
 * prompt logprobs asked for) -> append them (detokenise, stop checks, finish) -> collect
 * the finished ones and report deltas and completions. Each phase is wrapped by PL_PHASE,
 * which times it; the step itself only says which phase it is in.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/engine_internal.h"
#include "engine/fields.h"
#include "util/alloc.h"
#include "util/log.h"
#include "util/timer.h"

/* Appends the drawn tokens: detokenise, stop checks, stream deltas. */
static pl_status append_tokens(pl_engine *e, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const pl_sampled *d = &e->sb.sampled[i];
        if (!d->s->finished) PL_TRY(pl_output_on_token(e, d));
    }
    return PL_OK;
}

static void fail_step(pl_engine *e, const pl_sched_output *so) {
    for (int i = 0; i < so->n_seqs; i++) {
        pl_sample *s = so->entries[i].seq->user;
        pl_engine_finish_request(e, s->req, PL_FINISH_ERROR);
    }
}

static void note_first_scheduled(pl_engine *e, const pl_sched_output *so, uint64_t now) {
    for (int i = 0; i < so->n_seqs; i++) {
        pl_request *r = ((pl_sample *)so->entries[i].seq->user)->req;
        if (r->t_first_sched_ns) continue;
        r->t_first_sched_ns = now;
        double waited = now > r->t_submit_ns ? (double)(now - r->t_submit_ns) * 1e-9 : 0;
        pl_hist_add(&e->stats.queue, waited);
    }
}

static void account_step(pl_engine *e, const pl_sched_output *so) {
    pl_engine_stats *st = &e->stats;
    st->steps++;
    st->step_seqs += (uint64_t)so->n_seqs;
    st->step_tokens += (uint64_t)so->n_tokens;
    for (int i = 0; i < so->n_seqs; i++) {
        const pl_sched_entry *en = &so->entries[i];
        int prompt_end = en->seq->n_prompt;
        if (en->start < prompt_end) {
            int end = en->start + en->n_new < prompt_end ? en->start + en->n_new : prompt_end;
            st->prompt_tokens_computed += (uint64_t)(end - en->start);
        }
    }
    pl_kv_stats kv;
    pl_kv_get_stats(e->pool, &kv);
    if (kv.usage > st->kv_usage_peak) st->kv_usage_peak = kv.usage;
}

/* PAGELLM_FAULT_FORWARD (engine.c): the batch holds a prompt beginning with that token. */
static bool fault_injected(const pl_engine *e, const pl_sched_output *so) {
    if (e->fault_token < 0) return false;
    for (int i = 0; i < so->n_seqs; i++)
        if (so->entries[i].seq->tokens[0] == e->fault_token) return true;
    return false;
}

/* Every request the stepping thread holds (and what was submitted meanwhile) finishes with
 * reason error: the backend is lost, nothing more can run. */
static void fail_everything(pl_engine *e) {
    pl_intake_drain(e);
    for (pl_request *r = e->live_head; r; r = r->next)
        pl_engine_finish_request(e, r, PL_FINISH_ERROR);
}

/* PAGELLM_FAULT_SLOW_FORWARD (engine.c): the batch holds a prompt beginning with that token. */
static void slow_injected(const pl_engine *e, const pl_sched_output *so) {
    if (e->slow_token < 0) return;
    for (int i = 0; i < so->n_seqs; i++) {
        if (so->entries[i].seq->tokens[0] != e->slow_token) continue;
        double whole = floor(e->slow_seconds);
        nanosleep(&(struct timespec){(time_t)whole, (long)((e->slow_seconds - whole) * 1e9)},
                  NULL);
        return;
    }
}

/* The forward pass and what follows it; a failure finishes this step's requests with
 * reason error (the engine stays usable), or every request when the backend is lost (every
 * later step and submit fails; pl_engine_health says why). */
static pl_status compute(pl_engine *e, const pl_sched_output *so, uint64_t t_step) {
    pl_profiler *pr = &e->prof;
    pl_runner_batch b;
    pl_status st;
    note_first_scheduled(e, so, t_step);
    PL_PHASE(pr, PL_PHASE_BATCH, pl_batch_build(e, so, &b));
    slow_injected(e, so);
    PL_PHASE(pr, PL_PHASE_FORWARD,
             st = fault_injected(e, so)
                      ? pl_fail(PL_ERR_BACKEND, "forward pass: fault injected "
                                                "(PAGELLM_FAULT_FORWARD)")
                      : pl_runner_run(e->runner, &b, e->sb.logits));
    e->stats.tp_comm_last_ns = pl_runner_comm_ns(e->runner);
    if (st != PL_OK) {
        pl_log(PL_LOG_ERROR, "step: forward pass failed: %s", pl_last_error());
        fail_step(e, so);
        if (e->be->lost) {
            pl_intake_mark_lost(e, pl_last_error());
            fail_everything(e);
            pl_fail(PL_ERR_BACKEND, "%s", e->intake.lost_msg);
        }
        return st;
    }
    size_t n_drawn = 0;
    PL_PHASE(pr, PL_PHASE_SAMPLE, {
        st = pl_sched_update(e->sched, so);
        if (st == PL_OK) st = pl_draw_tokens(e, so, &n_drawn);
        if (st == PL_OK) st = pl_draw_prompt_logprobs(e, so);
    });
    PL_PHASE(pr, PL_PHASE_DETOKENIZE, if (st == PL_OK) st = append_tokens(e, n_drawn));
    if (st != PL_OK) fail_step(e, so);
    return st;
}

pl_status pl_engine_step_sized(pl_engine *e, pl_step_result *out, size_t out_size) {
    if (!e) return pl_fail(PL_ERR_INVALID_ARGUMENT, "step: engine is NULL");
    pl_profiler *pr = &e->prof;
    uint64_t t0 = pl_now_ns();
    pl_engine_free_graveyard(e);
    e->sb.n_deltas = 0;
    e->sb.n_finished = 0;
    pl_sched_output so = {0};
    pl_status st = pl_intake_health(e);
    if (st != PL_OK) { /* lost: report what arrived or remains, run nothing */
        fail_everything(e);
        pl_status cs = pl_output_collect(e);
        pl_intake_retire_reported(e);
        pl_fields_fill_out(out, out_size,
                           &(pl_step_result){.struct_size = sizeof(pl_step_result),
                                             .deltas = e->sb.deltas, .n_deltas = e->sb.n_deltas,
                                             .finished = e->sb.finished,
                                             .n_finished = e->sb.n_finished},
                           sizeof(pl_step_result));
        (void)cs;
        return pl_fail(PL_ERR_BACKEND, "step: %s", e->intake.lost_msg);
    }
    PL_PHASE(pr, PL_PHASE_DRAIN, pl_intake_drain(e));

    PL_PHASE(pr, PL_PHASE_SCHEDULE, st = pl_sched_schedule(e->sched, &so));
    /* out of host memory with nothing runnable: report; else run what was scheduled */
    if (st == PL_OK || so.n_seqs > 0) {
        st = so.n_seqs > 0 ? compute(e, &so, t0) : PL_OK;
        if (so.n_seqs > 0) account_step(e, &so);
    }
    pl_status cs;
    PL_PHASE(pr, PL_PHASE_OUTPUT, {
        cs = pl_output_collect(e);
        pl_intake_retire_reported(e);
    });
    if (st == PL_OK) st = cs;
    pl_engine_kv_events_end_step(e);
    pl_tp_check(e->tp); /* a rank failed: pl_engine_health says so from now on */
    uint64_t t_end = pl_now_ns();
    if (pr->trace) {
        pl_kv_stats kv;
        pl_kv_get_stats(e->pool, &kv);
        pl_profiler_counters(pr, t_end, so.n_seqs, so.n_tokens, kv.usage);
    }
    pr->steps++;
    pr->step_ns += t_end - t0;
    e->stats.elapsed_ns += t_end - t0;
    pl_step_result r = {
        .struct_size = sizeof r, .deltas = e->sb.deltas, .n_deltas = e->sb.n_deltas,
        .finished = e->sb.finished, .n_finished = e->sb.n_finished,
        .n_scheduled_seqs = so.n_seqs, .n_scheduled_tokens = so.n_tokens,
        .n_preempted = so.n_preempted,
    };
    pl_fields_fill_out(out, out_size, &r, sizeof r);
    return st;
}

/* ---- run ----------------------------------------------------------------------------- */

/* Moves a logprob list into a completion's array (no allocation). The tops of all entries
 * are one block starting at entries[0].top (NULL with k = 0), their texts one block starting
 * at entries[0].text (NULL without a tokenizer), which pl_completions_free frees with the
 * entries; an empty list is freed here. */
static pl_token_logprobs *take_logprobs(pl_logprob_list *l, size_t *out_n) {
    pl_token_logprobs *e = l->entries;
    *out_n = l->n;
    if (l->n == 0 || l->n_text == 0) pl_free(l->texts); /* else the block at entries[0].text */
    if (l->n == 0) {
        pl_free(l->entries);
        pl_free(l->tops);
        e = NULL;
    }
    pl_free(l->text_at);
    l->entries = NULL;
    l->tops = NULL;
    l->texts = NULL;
    l->text_at = NULL;
    l->n = l->cap = l->n_text = l->texts_len = l->texts_cap = 0;
    return e;
}

/* Moves the buffers of the step's i-th finished sample into a caller-owned completion: no
 * allocation, so a completion the step reported cannot be lost on its way out. output_ids
 * points into the prompt_ids block (pl_completions_free frees that one). */
static void take_completion(pl_engine *e, size_t i, pl_completion *dst) {
    pl_sample *s = e->sb.finished_samples[i];
    *dst = e->sb.finished[i];
    dst->prompt_ids = pl_seq_take_tokens(&s->seq);
    dst->output_ids = dst->prompt_ids + dst->n_prompt_ids;
    dst->text = s->text;
    s->text = NULL;
    s->text_len = s->text_cap = s->streamed = 0;
    if (s->lp && s->lp->output.on)
        dst->logprobs = take_logprobs(&s->lp->output, &dst->n_logprobs);
    if (s->lp && s->lp->prompt.on)
        dst->prompt_logprobs = take_logprobs(&s->lp->prompt, &dst->n_prompt_logprobs);
    if (s->lp && s->lp->logits) {
        dst->prompt_logits = s->lp->logits;
        s->lp->logits = NULL;
    }
}

static void free_logprobs(pl_token_logprobs *l, size_t n) {
    if (!l) return;
    if (n > 0 && l[0].n_top > 0) pl_free((void *)l[0].top); /* the block of every entry's */
    if (n > 0) pl_free((void *)l[0].text);                  /* likewise */
    pl_free(l);
}

void pl_completions_free(pl_completion *c, size_t n) {
    if (!c) return;
    for (size_t i = 0; i < n; i++) {
        pl_free(c[i].prompt_ids); /* output_ids lies in the same block */
        pl_free(c[i].text);
        free_logprobs(c[i].logprobs, c[i].n_logprobs);
        free_logprobs(c[i].prompt_logprobs, c[i].n_prompt_logprobs);
        pl_free(c[i].prompt_logits);
    }
    pl_free(c);
}

static int by_id_then_index(const void *a, const void *b) {
    const pl_completion *x = a, *y = b;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    return x->index - y->index;
}

/* Samples of the requests the stepping thread holds: at most this many finish in the next
 * step, unless it drains new ones from the intake. */
static size_t live_samples(const pl_engine *e) {
    size_t n = 0;
    for (const pl_request *r = e->live_head; r; r = r->next) n += (size_t)r->n_samples;
    return n;
}

static pl_status grow_completions(pl_completion **all, size_t *cap, size_t want) {
    void *p = *all;
    pl_status st = pl_grow_array(&p, cap, want, sizeof(pl_completion), "run: completions");
    *all = p;
    return st;
}

/* Room is made before each step for every sample that may finish in it: a step reports its
 * completions once, so growing after it could lose them. What finished before a failure is
 * handed back with it. */
pl_status pl_engine_run(pl_engine *e, pl_completion **out_completions, size_t *out_n) {
    if (!e || !out_completions || !out_n)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "run: NULL argument");
    pl_completion *all = NULL;
    size_t n = 0, cap = 0;
    pl_status st = PL_OK;
    while (st == PL_OK && pl_engine_has_pending_work(e)) {
        st = grow_completions(&all, &cap, n + live_samples(e));
        if (st != PL_OK) break;
        pl_step_result r;
        pl_status s = pl_engine_step(e, &r);
        for (size_t i = 0; i < r.n_finished && st == PL_OK; i++) {
            st = grow_completions(&all, &cap, n + 1); /* only for requests drained this step */
            if (st == PL_OK) take_completion(e, i, &all[n++]);
        }
        /* a failed forward pass finished its requests with reason error; keep going */
        if (s != PL_OK && s != PL_ERR_BACKEND && st == PL_OK) st = s;
    }
    if (n > 1) qsort(all, n, sizeof *all, by_id_then_index);
    *out_completions = all;
    *out_n = n;
    return st;
}
