/*
 * engine/draw.c - turning a step's logits into tokens: one draw per sequence that reached the
 * end of its tokens, forking a request's other samples off sample 0 at its first draw, and
 * the log-probabilities requests ask for (of each drawn token, and of prompt tokens).
 *
 * Nothing is appended here: the drawn tokens wait in sb.sampled, so sampling and
 * detokenisation are timed apart (engine/step.c appends them).
 */
#include <math.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "util/alloc.h"
#include "util/log.h"

/* Samples one token for s from logits (vocab, modified in place); -1 when a constrained
 * output has no token left to continue with. */
static pl_status sample_one(pl_engine *e, pl_sample *s, float *logits, int32_t *out) {
    const pl_sampling_params *p = &s->req->params;
    const pl_seq *q = &s->seq;
    int n_out = pl_seq_n_generated(q);
    if (n_out < p->min_tokens) { /* no end of text before min_tokens */
        for (int i = 0; i < e->n_eos && !p->ignore_eos; i++) logits[e->eos_ids[i]] = -INFINITY;
        for (size_t i = 0; i < p->n_stop_ids; i++) logits[p->stop_ids[i]] = -INFINITY;
    }
    if (s->gm) {
        bool dead;
        PL_TRY(pl_constrain_mask(e, s, logits, &dead));
        if (dead) {
            *out = -1;
            return PL_OK;
        }
    }
    *out = pl_sampler_sample(&e->sampler, logits, p, q->tokens, q->n_prompt, n_out, &s->rng);
    if (s->gm) pl_constrain_accept(e, s, *out);
    return PL_OK;
}

/* Forks samples 1..n-1 of a request off sample 0 once its prompt is computed. */
static void fork_samples(pl_engine *e, pl_request *r) {
    r->forked = true;
    for (int i = 1; i < r->n_samples; i++) {
        pl_sample *c = &r->samples[i];
        if (c->finished) continue;
        pl_status s = pl_sched_fork(e->sched, &r->samples[0].seq, &c->seq);
        if (s != PL_OK) {
            pl_log(PL_LOG_WARN, "request %llu sample %d: fork failed: %s",
                   (unsigned long long)r->id, i, pl_last_error());
            pl_output_finish(e, c, PL_FINISH_ERROR);
        }
    }
}

static pl_status push_sampled(pl_step_buffers *sb, size_t *n, pl_sampled **out) {
    void *p = sb->sampled;
    pl_status st = pl_grow_array(&p, &sb->cap_sampled, *n + 1, sizeof(pl_sampled),
                                 "engine: sampled tokens");
    sb->sampled = p;
    PL_TRY(st);
    *out = &sb->sampled[(*n)++];
    return PL_OK;
}

/* Draws s's token from row (modified in place); logprobs come from the row as it came from
 * the model, so it is kept first when they are wanted. */
static pl_status draw(pl_engine *e, pl_sample *s, float *row, size_t *n_out) {
    pl_step_buffers *sb = &e->sb;
    pl_sampled *d;
    PL_TRY(push_sampled(sb, n_out, &d));
    d->s = s;
    d->has_logprobs = s->lp && s->lp->output.on;
    if (d->has_logprobs) memcpy(sb->logits_raw, row, (size_t)e->vocab * sizeof *row);
    PL_TRY(sample_one(e, s, row, &d->tok));
    if (d->tok < 0) { /* the constraint cannot go on with this vocabulary */
        pl_log(PL_LOG_WARN, "request %llu sample %d: no token continues the constrained output",
               (unsigned long long)s->req->id, s->index);
        (*n_out)--;
        pl_output_finish(e, s, PL_FINISH_ERROR);
        return PL_OK;
    }
    if (d->has_logprobs)
        pl_logprobs_compute(sb->logits_raw, e->vocab, d->tok, s->lp->output.k, &d->lp, d->tops);
    return PL_OK;
}

pl_status pl_draw_tokens(pl_engine *e, const pl_sched_output *so, size_t *n_out) {
    pl_step_buffers *sb = &e->sb;
    int V = e->vocab, n_sample = 0;
    *n_out = 0;
    for (int i = 0; i < so->n_seqs; i++)
        if (so->entries[i].samples) n_sample++;
    for (int k = 0; k < n_sample; k++) {
        pl_sample *s = so->entries[sb->sample_entry[k]].seq->user;
        if (s->finished) continue; /* aborted meanwhile */
        float *row = sb->logits + (size_t)k * V;
        pl_request *r = s->req;
        if (!r->forked && s->index == 0) {
            /* the other samples draw from copies of the same row */
            fork_samples(e, r);
            for (int i = 1; i < r->n_samples; i++) {
                pl_sample *c = &r->samples[i];
                if (c->finished) continue;
                memcpy(sb->logits_tmp, row, (size_t)V * sizeof(float));
                PL_TRY(draw(e, c, sb->logits_tmp, n_out));
            }
        }
        PL_TRY(draw(e, s, row, n_out));
    }
    return PL_OK;
}

/* ---- prompt logprobs ------------------------------------------------------------------ */

/* Logprobs of prompt tokens whose predicting row is in entry en: position q's logits predict
 * token q + 1, so rows q in [start, min(start + n_new, n_prompt - 1)) are prompt positions;
 * those recorded before a preemption are skipped. rows is the entry's first batch row. */
static pl_status prompt_rows(pl_engine *e, const pl_sched_entry *en, int first_row) {
    pl_sample *s = en->seq->user;
    pl_logprob_list *l = &s->lp->prompt;
    const pl_seq *q = en->seq;
    int from = s->lp->n_prompt_done > en->start ? s->lp->n_prompt_done : en->start;
    int to = en->start + en->n_new < q->n_prompt - 1 ? en->start + en->n_new : q->n_prompt - 1;
    int max_rows = e->cfg.max_batch_size, V = e->vocab;
    int32_t rows[512];
    if (max_rows > (int)(sizeof rows / sizeof rows[0])) max_rows = sizeof rows / sizeof rows[0];
    for (int p0 = from; p0 < to; p0 += max_rows) {
        int n = to - p0 < max_rows ? to - p0 : max_rows;
        for (int i = 0; i < n; i++) rows[i] = first_row + (p0 - en->start) + i;
        PL_TRY(pl_runner_logits(e->runner, rows, n, e->sb.logits));
        for (int i = 0; i < n; i++) {
            pl_token_logprobs lp;
            pl_logprob tops[PL_MAX_LOGPROBS];
            pl_logprobs_compute(e->sb.logits + (size_t)i * V, V, q->tokens[p0 + i + 1], l->k,
                                &lp, tops);
            PL_TRY(pl_logprob_list_push(l, &lp, tops));
        }
        s->lp->n_prompt_done = p0 + n;
    }
    return PL_OK;
}

pl_status pl_draw_prompt_logprobs(pl_engine *e, const pl_sched_output *so) {
    const int32_t *qstart = e->sb.batch.query_start;
    for (int i = 0; i < so->n_seqs; i++) {
        const pl_sched_entry *en = &so->entries[i];
        pl_sample *s = en->seq->user;
        if (!s->lp || !s->lp->prompt.on || s->finished || en->start >= en->seq->n_prompt - 1)
            continue;
        PL_TRY(prompt_rows(e, en, qstart[i]));
    }
    return PL_OK;
}
