/*
 * engine/output.c - what happens to a sampled token: detokenise, check stop conditions, stream
 * the new text, and turn finished samples into completions.
 *
 * Stop strings are searched only where a new match can start (the last max_stop_len - 1 bytes
 * of the old text and the new text); streamed text holds back max_stop_len - 1 bytes (moved to
 * a UTF-8 character boundary) so a stop string is never streamed before it is recognised.
 */
#include <string.h>

#include "engine/engine_internal.h"
#include "util/alloc.h"
#include "util/log.h"
#include "util/timer.h"
#include "util/utf8.h"

static pl_status text_append(pl_sample *s, const char *p, size_t n) {
    if (n == 0) return PL_OK;
    if (s->text_len + n + 1 > s->text_cap &&
        pl_grow_array((void **)&s->text, &s->text_cap, s->text_len + n + 1, 1, "text") != PL_OK)
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "output text of request %llu",
                       (unsigned long long)s->req->id);
    memcpy(s->text + s->text_len, p, n);
    s->text_len += n;
    s->text[s->text_len] = '\0';
    return PL_OK;
}

static pl_status push_delta(pl_engine *e, pl_sample *s, int32_t tok,
                            const pl_token_logprobs *lp) {
    pl_step_buffers *b = &e->sb;
    size_t safe = s->text_len;
    if (!s->finished && s->req->max_stop_len > 1) {
        size_t hold = s->req->max_stop_len - 1;
        safe = safe > hold ? safe - hold : 0;
        while (safe > s->streamed && pl_utf8_is_cont((unsigned char)s->text[safe])) safe--;
    }
    if (safe < s->streamed) safe = s->streamed;
    void *p = b->deltas;
    pl_status st = pl_grow_array(&p, &b->cap_deltas, b->n_deltas + 1, sizeof(pl_stream_delta),
                                 "step result: stream deltas");
    b->deltas = p;
    PL_TRY(st);
    b->deltas[b->n_deltas++] = (pl_stream_delta){
        .id = s->req->id, .index = s->index, .token = tok,
        .text = s->text + s->streamed, .text_len = safe - s->streamed, .logprobs = lp,
    };
    s->streamed = safe;
    return PL_OK;
}

/* Earliest stop string in text starting at or after `from`; -1 if none. *which: its index
 * (the first listed among those starting there), *out_len: its length. */
static long find_stop(const pl_request *r, const char *text, size_t len, size_t from,
                      int *which, size_t *out_len) {
    long best = -1;
    for (size_t i = 0; i < r->params.n_stop; i++) {
        const char *st = r->params.stop[i];
        size_t sl = strlen(st);
        for (size_t p = from; p + sl <= len; p++)
            if (!memcmp(text + p, st, sl)) {
                if (best < 0 || (long)p < best) {
                    best = (long)p;
                    *which = (int)i;
                    *out_len = sl;
                }
                break;
            }
    }
    return best;
}

static bool is_stop_id(const pl_engine *e, const pl_sample *s, int32_t tok, int n_out) {
    const pl_sampling_params *p = &s->req->params;
    if (n_out <= p->min_tokens) return false; /* the sampler masked them; belt and braces */
    for (size_t i = 0; i < p->n_stop_ids; i++)
        if (p->stop_ids[i] == tok) return true;
    /* a complete constrained output ends at end-of-text (its grammar allowed nothing else) */
    if (p->ignore_eos && !pl_constrain_complete(s)) return false;
    return pl_engine_is_eos(e, tok);
}

/* The detokeniser holds back the bytes of an unfinished character; at the end they become
 * part of the text (invalid ones as U+FFFD), unless a stop string already cut the text. */
static void flush_held_back(pl_sample *s) {
    if (!s->detok || s->text_cut) return;
    size_t len;
    const char *all = pl_detok_text(s->detok, &len);
    if (!all || len <= s->text_len) return;
    size_t tail = len - s->text_len;
    /* the last token's logprobs text gets the tail too, so the texts still join to the text */
    if (text_append(s, all + s->text_len, tail) != PL_OK ||
        (s->lp && pl_logprob_list_extend_text(&s->lp->output, all + len - tail, tail) != PL_OK))
        pl_log(PL_LOG_WARN, "request %llu: final text bytes dropped: %s",
               (unsigned long long)s->req->id, pl_last_error());
}

void pl_output_finish(pl_engine *e, pl_sample *s, pl_finish_reason reason) {
    if (s->finished) return;
    flush_held_back(s);
    if (s->seq.state == PL_SEQ_WAITING || s->seq.state == PL_SEQ_RUNNING ||
        s->seq.state == PL_SEQ_PREEMPTED)
        pl_sched_finish(e->sched, &s->seq, reason);
    s->finished = true;
    s->reason = reason;
    s->t_finish_ns = pl_now_ns();
}

pl_status pl_output_on_token(pl_engine *e, const pl_sampled *d) {
    pl_sample *s = d->s;
    int32_t tok = d->tok;
    pl_request *r = s->req;
    const pl_token_logprobs *lp = NULL;
    if (d->has_logprobs) { /* first: a failure then leaves the token unappended as well */
        PL_TRY(pl_logprob_list_push(&s->lp->output, &d->lp, d->tops));
        lp = &s->lp->output.entries[s->lp->output.n - 1];
    }
    pl_status st = pl_sched_append_token(e->sched, &s->seq, tok);
    if (st != PL_OK) {
        if (d->has_logprobs) s->lp->output.n--;
        return st;
    }
    int n_out = pl_seq_n_generated(&s->seq);
    uint64_t now = pl_now_ns();
    /* counted as they come (vLLM's prompt and generation token counters): a prompt once its
     * request has a first token, once per request */
    e->stats.output_tokens++;
    if (n_out == 1 && s->index == 0) e->stats.prompt_tokens += (uint64_t)s->seq.n_prompt;
    if (n_out == 1) s->t_first_token_ns = now;
    else pl_hist_add(&e->stats.itl, (double)(now - s->t_last_token_ns) * 1e-9);
    s->t_last_token_ns = now;

    bool stop_id = is_stop_id(e, s, tok, n_out);
    size_t old_len = s->text_len;
    if (s->detok && !stop_id) {
        const char *piece;
        size_t n;
        PL_TRY(pl_detok_push(s->detok, tok, &piece, &n));
        PL_TRY(text_append(s, piece, n));
    }
    if (lp && s->detok)
        PL_TRY(pl_logprob_list_set_text(&s->lp->output, s->lp->output.n - 1, s->text + old_len,
                                        s->text_len - old_len));
    pl_finish_reason reason = PL_FINISH_NONE;
    if (stop_id) reason = PL_FINISH_STOP;
    if (reason == PL_FINISH_NONE && r->params.n_stop > 0 && s->text_len > old_len) {
        size_t back = r->max_stop_len - 1;
        size_t from = old_len > back ? old_len - back : 0;
        size_t stop_len = 0;
        long at = find_stop(r, s->text, s->text_len, from, &s->stop_string, &stop_len);
        if (at >= 0) {
            /* the text ends before the stop string, or after it when it is to be kept */
            if (r->params.include_stop_str_in_output) at += (long)stop_len;
            s->text_len = (size_t)at;
            s->text[at] = '\0';
            s->text_cut = true;
            if (lp) pl_logprob_list_cut_text(&s->lp->output, s->text_len);
            if (s->streamed > s->text_len) s->streamed = s->text_len; /* cannot happen: held back */
            reason = PL_FINISH_STOP;
        }
    }
    if (reason == PL_FINISH_NONE &&
        (n_out >= r->params.max_tokens || s->seq.n_tokens >= e->max_model_len))
        reason = PL_FINISH_LENGTH;
    if (reason != PL_FINISH_NONE) pl_output_finish(e, s, reason);
    return push_delta(e, s, tok, lp);
}

void pl_output_fill_completion(const pl_sample *s, pl_completion *c) {
    const pl_request *r = s->req;
    const pl_seq *q = &s->seq;
    *c = (pl_completion){
        .id = r->id,
        .index = s->index,
        .prompt_ids = q->tokens,
        .n_prompt_ids = (size_t)q->n_prompt,
        .output_ids = q->tokens + q->n_prompt,
        .n_output_ids = (size_t)(q->n_tokens - q->n_prompt),
        .text = s->text,
        .finish_reason = s->reason,
        .stop_string = s->reason == PL_FINISH_STOP ? s->stop_string : -1,
        .n_cached_prompt_ids = (size_t)q->n_cached_prompt,
        .n_preemptions = q->n_preemptions,
    };
    if (s->lp && s->lp->output.on) {
        c->logprobs = s->lp->output.entries;
        c->n_logprobs = s->lp->output.n;
    }
    if (s->lp && s->lp->prompt.on) {
        c->prompt_logprobs = s->lp->prompt.entries;
        c->n_prompt_logprobs = s->lp->prompt.n;
    }
    if (s->lp && s->lp->logits) {
        c->prompt_logits = s->lp->logits;
        c->n_prompt_logits = (size_t)(q->n_prompt - s->lp->logits_from);
    }
    double sub = (double)r->t_submit_ns;
    if (r->t_first_sched_ns) c->queue_s = ((double)r->t_first_sched_ns - sub) * 1e-9;
    if (s->t_first_token_ns) c->ttft_s = ((double)s->t_first_token_ns - sub) * 1e-9;
    c->total_s = ((double)s->t_finish_ns - sub) * 1e-9;
}

/* Moves finished, unreported samples into the step result and updates the statistics. */
pl_status pl_output_collect(pl_engine *e) {
    pl_step_buffers *b = &e->sb;
    for (pl_request *r = e->live_head; r; r = r->next) {
        for (int i = 0; i < r->n_samples; i++) {
            pl_sample *s = &r->samples[i];
            if (!s->finished || s->reported) continue;
            /* two arrays, one count: each grows on its own capacity */
            void *p = b->finished_samples;
            pl_status gs = pl_grow_array(&p, &b->cap_finished_samples, b->n_finished + 1,
                                         sizeof(pl_sample *), "step result: completions");
            b->finished_samples = p;
            PL_TRY(gs);
            p = b->finished;
            gs = pl_grow_array(&p, &b->cap_finished, b->n_finished + 1, sizeof(pl_completion),
                               "step result: completions");
            b->finished = p;
            PL_TRY(gs);
            if (s->streamed < s->text_len && s->reason != PL_FINISH_ABORT &&
                s->reason != PL_FINISH_OVERLOADED) {
                /* flush what the stop-string hold-back kept (no token: the last delta had it) */
                PL_TRY(push_delta(e, s, -1, NULL));
            }
            if (s->lp && s->lp->prompt.on) /* the prompt positions' texts, once */
                PL_TRY(pl_logprob_list_prompt_text(&s->lp->prompt, e->tok, s->seq.tokens,
                                                   (size_t)s->seq.n_prompt));
            b->finished_samples[b->n_finished] = s;
            pl_output_fill_completion(s, &b->finished[b->n_finished++]);
            s->reported = true;
            r->n_unreported--;

            pl_engine_stats *st = &e->stats;
            int n_out = s->seq.n_tokens - s->seq.n_prompt;
            st->samples_finished++;
            if (r->n_unreported == 0) st->requests_finished++; /* its last sample */
            if ((unsigned)s->reason < 8) st->samples_by_reason[s->reason]++;
            const pl_completion *c = &b->finished[b->n_finished - 1];
            pl_hist_add(&st->latency, c->total_s);
            if (s->t_first_token_ns) {
                pl_hist_add(&st->ttft, c->ttft_s);
                if (n_out > 1)
                    pl_hist_add(&st->tpot, (c->total_s - c->ttft_s) / (double)(n_out - 1));
            }
        }
    }
    return PL_OK;
}

void pl_engine_finish_request(pl_engine *e, pl_request *r, pl_finish_reason reason) {
    for (int i = 0; i < r->n_samples; i++) pl_output_finish(e, &r->samples[i], reason);
}
