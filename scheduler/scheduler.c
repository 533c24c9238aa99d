/*
 * scheduler/scheduler.c - the scheduler's lifetime and everything around a step: config,
 * create/destroy, update after the forward pass, appending sampled tokens, finishing,
 * forking for parallel samples, and the live counts.
 *
 * The counts here are the one place the engine reads waiting/running/preempted numbers from;
 * they are list lengths, so they cannot drift from the queues.
 */
#include <string.h>

#include "scheduler/sched_internal.h"
#include "util/alloc.h"

/* ---- config and lifetime ---- */

void pl_sched_config_from_engine(const pl_engine_config *e, int max_model_len,
                                 pl_sched_config *out) {
    *out = (pl_sched_config){
        .max_batch_size = e->max_batch_size,
        .max_num_seqs = e->max_num_seqs,
        .max_total_tokens = e->max_total_tokens,
        .max_model_len = max_model_len,
        .enable_chunked_prefill = e->enable_chunked_prefill,
        .long_prefill_threshold = e->long_prefill_threshold,
        .max_skip_head = e->max_skip_head,
        .watermark = e->watermark,
        .max_waiting = e->max_waiting,
        .overflow_policy = e->overflow_policy,
        .log_preemptions = e->log_preemptions,
    };
}

static pl_status bad(const char *field, int v, const char *range) {
    return pl_fail(PL_ERR_INVALID_ARGUMENT, "scheduler config.%s = %d: must be %s", field, v,
                   range);
}

static pl_status validate(const pl_sched_config *c) {
    if (c->max_batch_size < 1) return bad("max_batch_size", c->max_batch_size, ">= 1");
    if (c->max_num_seqs < c->max_batch_size)
        return bad("max_num_seqs", c->max_num_seqs, ">= max_batch_size");
    if (c->max_total_tokens < c->max_batch_size)
        return bad("max_total_tokens", c->max_total_tokens, ">= max_batch_size");
    if (c->max_model_len < 1) return bad("max_model_len", c->max_model_len, ">= 1");
    if (!c->enable_chunked_prefill && c->max_model_len > c->max_total_tokens)
        return bad("max_model_len", c->max_model_len,
                   "<= max_total_tokens with chunked prefill off (a sequence recomputed after "
                   "a preemption must fit one step)");
    if (c->long_prefill_threshold < 0)
        return bad("long_prefill_threshold", c->long_prefill_threshold, ">= 0 (0 = no cap)");
    if (c->max_skip_head < 0) return bad("max_skip_head", c->max_skip_head, ">= 0");
    if (!(c->watermark >= 0.0 && c->watermark < 1.0))
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "scheduler config.watermark = %g: must be in [0, 1)", c->watermark);
    if (c->max_waiting < 0) return bad("max_waiting", c->max_waiting, ">= 0 (0 = unbounded)");
    if (c->overflow_policy != PL_OVERFLOW_REJECT_NEWEST &&
        c->overflow_policy != PL_OVERFLOW_DROP_OLDEST)
        return bad("overflow_policy", (int)c->overflow_policy, "REJECT_NEWEST or DROP_OLDEST");
    return PL_OK;
}

pl_status pl_sched_create(const pl_sched_config *cfg, pl_kv_pool *pool, pl_sched **out) {
    if (!cfg || !pool || !out)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_sched_create: NULL argument");
    PL_TRY(validate(cfg));
    pl_sched *s = pl_calloc(1, sizeof *s);
    if (!s) return pl_fail(PL_ERR_OUT_OF_MEMORY, "pl_sched_create: scheduler");
    s->cfg = *cfg;
    s->pool = pool;
    s->block_size = pl_kv_block_size(pool);
    s->n_blocks = pl_kv_num_blocks(pool);
    s->watermark_blocks = (int)(cfg->watermark * s->n_blocks);
    pl_sched_list_init(&s->waiting, false);
    pl_sched_list_init(&s->running, false);
    pl_sched_list_init(&s->fresh, true);
    pl_sched_list_init(&s->preempted, true);
    s->next_arrival = 1;
    *out = s;
    return PL_OK;
}

void pl_sched_destroy(pl_sched *s) {
    if (!s) return;
    while (s->running.head) pl_sched_finish(s, s->running.head, PL_FINISH_ABORT);
    while (s->waiting.head) pl_sched_finish(s, s->waiting.head, PL_FINISH_ABORT);
    pl_free(s->entries);
    pl_free(s->copies);
    pl_free(s->victims);
    pl_free(s->passed);
    pl_free(s);
}

pl_kv_pool *pl_sched_pool(const pl_sched *s) { return s->pool; }

/* ---- after the forward pass ---- */

pl_status pl_sched_update(pl_sched *s, const pl_sched_output *out) {
    if (!s || !out) return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_sched_update: NULL argument");
    if (out->step != s->n_steps || s->last_updated_step == s->n_steps)
        return pl_sched_bug("pl_sched_update: output of step %llu is not the latest unapplied "
                            "one (step %llu, last updated %llu)",
                            (unsigned long long)out->step, (unsigned long long)s->n_steps,
                            (unsigned long long)s->last_updated_step);
    for (int i = 0; i < out->n_seqs; i++) {
        const pl_sched_entry *e = &out->entries[i];
        if (e->seq->state == PL_SEQ_RUNNING && e->seq->n_computed != e->start)
            return pl_sched_bug("request %llu: n_computed %d changed since it was scheduled at %d",
                                (unsigned long long)e->seq->id, e->seq->n_computed, e->start);
    }
    for (int i = 0; i < out->n_seqs; i++) {
        const pl_sched_entry *e = &out->entries[i];
        pl_seq *seq = e->seq;
        if (seq->state != PL_SEQ_RUNNING) continue; /* finished after schedule */
        seq->n_computed += e->n_new;
        pl_kv_register_full_blocks(s->pool, &seq->kv, seq->tokens, seq->n_computed);
    }
    s->n_copies = 0; /* the backend did them */
    s->last_updated_step = s->n_steps;
    return PL_OK;
}

pl_status pl_sched_append_token(pl_sched *s, pl_seq *seq, int32_t token) {
    if (!s || !seq) return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_sched_append_token: NULL");
    if (seq->state != PL_SEQ_RUNNING || seq->n_computed != seq->n_tokens)
        return pl_sched_bug("request %llu: token appended while %s with %d of %d tokens "
                            "computed (only a seq that just sampled takes one)",
                            (unsigned long long)seq->id, pl_seq_state_name(seq->state),
                            seq->n_computed, seq->n_tokens);
    if (pl_seq_n_generated(seq) >= seq->max_tokens)
        return pl_sched_bug("request %llu: token appended beyond max_tokens %d (finish it at "
                            "the limit)",
                            (unsigned long long)seq->id, seq->max_tokens);
    PL_TRY(pl_sched_seq_reserve(seq, seq->n_tokens + 1));
    seq->tokens[seq->n_tokens++] = token;
    return PL_OK;
}

pl_status pl_sched_finish(pl_sched *s, pl_seq *seq, pl_finish_reason reason) {
    if (!s || !seq) return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_sched_finish: NULL argument");
    if (reason == PL_FINISH_NONE)
        return pl_sched_bug("request %llu: finished with reason none", (unsigned long long)seq->id);
    pl_seq_state from = seq->state;
    PL_TRY(pl_sched_transition(seq, PL_SEQ_FINISHED));
    if (from == PL_SEQ_RUNNING) {
        pl_sched_list_remove(&s->running, seq);
        s->n_reserved_forks -= seq->n_forks;
    } else {
        pl_sched_waiting_remove(s, seq);
    }
    pl_kv_free(s->pool, &seq->kv);
    seq->finish_reason = reason;
    return PL_OK;
}

pl_status pl_sched_fork(pl_sched *s, pl_seq *parent, pl_seq *child) {
    if (!s || !parent || !child || parent == child)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_sched_fork: NULL or equal arguments");
    if (parent->state != PL_SEQ_RUNNING || parent->n_computed != parent->n_tokens)
        return pl_sched_bug("request %llu: forked while %s with %d of %d tokens computed "
                            "(fork after the step that computed the prompt)",
                            (unsigned long long)parent->id, pl_seq_state_name(parent->state),
                            parent->n_computed, parent->n_tokens);
    if (child->state != PL_SEQ_NEW || child->kv.n_blocks != 0)
        return pl_sched_bug("request %llu: fork child is %s, not new",
                            (unsigned long long)child->id, pl_seq_state_name(child->state));
    if (child->n_prompt != parent->n_prompt || child->n_tokens != child->n_prompt ||
        memcmp(child->tokens, parent->tokens, (size_t)parent->n_prompt * sizeof(int32_t)) != 0)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "request %llu: fork child's prompt differs from its parent's",
                       (unsigned long long)parent->id);
    bool reserved = parent->n_forks > 0;
    if (!reserved && s->running.n + s->n_reserved_forks >= s->cfg.max_num_seqs)
        return pl_fail(PL_ERR_QUEUE_FULL,
                       "request %llu: no sequence slot for another sample (%d running, "
                       "max_num_seqs %d); set n_forks before adding it",
                       (unsigned long long)parent->id, s->running.n, s->cfg.max_num_seqs);

    PL_TRY(pl_sched_seq_reserve(child, parent->n_tokens + 1));
    PL_TRY(pl_kv_fork(s->pool, &parent->kv, &child->kv));
    pl_status st = pl_sched_transition(child, PL_SEQ_RUNNING); /* NEW -> RUNNING */
    if (st != PL_OK) {
        pl_kv_free(s->pool, &child->kv);
        return st;
    }
    memcpy(child->tokens, parent->tokens, (size_t)parent->n_tokens * sizeof(int32_t));
    child->n_tokens = parent->n_tokens;
    child->n_computed = parent->n_computed;
    child->n_cached_prompt = parent->n_cached_prompt;
    child->priority = parent->priority;
    child->arrival = parent->arrival; /* same request: same place in line, right after it */
    child->n_forks = 0;
    child->n_passed = 0;
    child->finish_reason = PL_FINISH_NONE;
    pl_sched_running_insert(s, child);
    if (reserved) {
        parent->n_forks--;
        s->n_reserved_forks--;
    }
    return PL_OK;
}

/* ---- counts ---- */

void pl_sched_get_counts(const pl_sched *s, pl_sched_counts *out) {
    *out = (pl_sched_counts){
        .n_waiting = s->waiting.n,
        .n_waiting_new = s->fresh.n,
        .n_running = s->running.n,
        .n_free_slots = pl_sched_free_slots(s),
        .n_preempted = s->preempted.n,
        .n_preemptions = s->n_preemptions,
        .n_steps = s->n_steps,
    };
}
