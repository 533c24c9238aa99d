/*
 * scheduler/admission.c - admission control at submit: can this request ever run, is there
 * room in the waiting queue, and how many such requests the KV pool holds.
 *
 * A request that can never run is refused here with an error that says why, instead of
 * waiting forever. "Can run" means: alone, with the whole pool free, it reaches its last
 * token. Its longest KV need is n_prompt + max_tokens - 1 slots: the last sampled token is
 * returned, never fed back, so it never gets a slot. pl_sched_capacity uses the same count,
 * so the numbers a user sees agree with what the scheduler does.
 */
#include "scheduler/sched_internal.h"

/* Slots a request of this shape needs at most; the caller checked both >= 1. */
static size_t slots_needed(size_t n_prompt, size_t max_tokens) { return n_prompt + max_tokens - 1; }

static size_t blocks_for(const pl_sched *s, size_t n_slots) {
    return (n_slots + (size_t)s->block_size - 1) / (size_t)s->block_size;
}

/* The checks both entry points share: sizes and max_model_len. */
static pl_status check_shape(const pl_sched *s, size_t n_prompt, size_t max_tokens) {
    if (n_prompt == 0) return pl_fail(PL_ERR_INVALID_ARGUMENT, "request has an empty prompt");
    if (max_tokens == 0)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "request " PL_MARK_BARE "sampling.max_tokens" PL_MARK_BARE " = 0: must "
                       "be >= 1");
    size_t limit = (size_t)s->cfg.max_model_len;
    if (n_prompt > limit || max_tokens > limit - n_prompt)
        return pl_fail(PL_ERR_TOO_LONG,
                       "prompt (%zu tokens) + " PL_MARK_BARE "sampling.max_tokens" PL_MARK_BARE
                       " (%zu) exceeds " PL_MARK_BARE "config.max_model_len" PL_MARK_BARE
                       " (%zu)", n_prompt, max_tokens, limit);
    return PL_OK;
}

pl_status pl_sched_check_admissible(const pl_sched *s, size_t n_prompt, size_t max_tokens) {
    if (!s) return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_sched_check_admissible: NULL scheduler");
    PL_TRY(check_shape(s, n_prompt, max_tokens));
    size_t need = blocks_for(s, slots_needed(n_prompt, max_tokens));
    if (need > (size_t)s->n_blocks)
        return pl_fail(PL_ERR_TOO_LONG,
                       "request needs %zu KV blocks (prompt %zu + " PL_MARK_BARE
                       "sampling.max_tokens" PL_MARK_BARE " %zu tokens, %d per block) but the "
                       "pool has only %d: shorten it or give the KV cache more memory",
                       need, n_prompt, max_tokens, s->block_size, s->n_blocks);
    /* Chunked prefill off: pl_sched_create made max_model_len <= max_total_tokens, so every
     * sequence, even one recomputed whole after a preemption, fits one step's budget. */
    return PL_OK;
}

pl_status pl_sched_capacity(const pl_sched *s, size_t n_prompt, size_t max_tokens,
                            size_t *out_requests) {
    if (!s || !out_requests)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_sched_capacity: NULL argument");
    PL_TRY(check_shape(s, n_prompt, max_tokens));
    *out_requests = (size_t)s->n_blocks / blocks_for(s, slots_needed(n_prompt, max_tokens));
    return PL_OK;
}

pl_status pl_sched_add(pl_sched *s, pl_seq *seq, pl_seq **out_dropped) {
    if (out_dropped) *out_dropped = NULL;
    if (!s || !seq) return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_sched_add: NULL argument");
    if (seq->state != PL_SEQ_NEW)
        return pl_sched_bug("request %llu: added while %s (only a new seq can be added)",
                            (unsigned long long)seq->id, pl_seq_state_name(seq->state));
    if (seq->n_prompt < 1 || seq->n_tokens != seq->n_prompt || !seq->tokens)
        return pl_sched_bug("request %llu: added without pl_seq_init", (unsigned long long)seq->id);
    PL_TRY(pl_sched_check_admissible(s, (size_t)seq->n_prompt, (size_t)seq->max_tokens));
    if (seq->n_forks < 0 || seq->n_forks >= s->cfg.max_num_seqs)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "request %llu: %d parallel samples but max_num_seqs is %d",
                       (unsigned long long)seq->id, seq->n_forks + 1, s->cfg.max_num_seqs);

    pl_seq *dropped = NULL;
    /* capacity: the free running slots (the next step takes those new requests) + max_waiting */
    if (s->cfg.max_waiting > 0 && s->fresh.n >= s->cfg.max_waiting + pl_sched_free_slots(s)) {
        if (s->cfg.overflow_policy == PL_OVERFLOW_REJECT_NEWEST)
            return pl_fail(PL_ERR_QUEUE_FULL,
                           "request %llu refused: every running slot (max_num_seqs %d) and "
                           "waiting slot (max_waiting %d) is taken",
                           (unsigned long long)seq->id, s->cfg.max_num_seqs,
                           s->cfg.max_waiting);
        if (!out_dropped)
            return pl_fail(PL_ERR_INVALID_ARGUMENT,
                           "pl_sched_add: out_dropped is NULL under the DROP_OLDEST policy");
        dropped = s->fresh.head;
        PL_TRY(pl_sched_finish(s, dropped, PL_FINISH_OVERLOADED));
    }

    seq->arrival = s->next_arrival++;
    seq->n_computed = 0;
    seq->n_passed = 0;
    seq->n_preemptions = 0;
    seq->finish_reason = PL_FINISH_NONE;
    PL_TRY(pl_sched_transition(seq, PL_SEQ_WAITING));
    pl_sched_waiting_insert_new(s, seq);
    if (out_dropped) *out_dropped = dropped;
    return PL_OK;
}
