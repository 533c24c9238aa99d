/*
 * scheduler/schedule.c - one scheduling step: the running pass, preemption, the admission
 * pass. The policy is written out in scheduler.h; this file follows it in that order.
 *
 * The step spends one token budget (max_total_tokens) and at most max_batch_size entries.
 * Running seqs go first, head to tail of the running queue; because that queue is sorted so
 * that its tail is the preemption victim, a preemption never takes back work this step
 * already scheduled: the victim is the seq being scheduled or one after it.
 *
 * Memory: the output arrays live in the scheduler and only grow (geometrically), so a steady
 * state step allocates nothing; room is made before each KV allocation, so a failed growth
 * never leaves a seq holding slots the output does not mention.
 */
#include "scheduler/sched_internal.h"
#include "util/alloc.h"
#include "util/log.h"

/* Admission's verdict on one waiting seq. */
typedef enum { ADMITTED, NO_FIT } fit;

/* Tokens to compute now for a seq with `remaining` tokens behind, given the budget left. */
static int chunk_size(const pl_sched *s, int remaining, int budget) {
    int n = remaining;
    if (!s->cfg.enable_chunked_prefill) return n; /* the caller checks it against the budget */
    if (n > budget) n = budget;
    if (s->cfg.long_prefill_threshold > 0 && n > s->cfg.long_prefill_threshold)
        n = s->cfg.long_prefill_threshold;
    return n;
}

static pl_status make_room(pl_sched *s, int n_entries, int n_victims) {
    void *p = s->entries;
    pl_status st = pl_grow_array(&p, &s->cap_entries, (size_t)n_entries + 1,
                                 sizeof(pl_sched_entry), "scheduler: scheduled entries");
    s->entries = p;
    PL_TRY(st);
    p = s->copies; /* allocate() writes at most one copy per call */
    st = pl_grow_array(&p, &s->cap_copies, (size_t)s->n_copies + 1, sizeof(pl_kv_copy),
                       "scheduler: block copies");
    s->copies = p;
    PL_TRY(st);
    p = s->victims;
    st = pl_grow_array(&p, &s->cap_victims, (size_t)n_victims + 1, sizeof(pl_seq *),
                       "scheduler: preempted list");
    s->victims = p;
    return st;
}

/* Gives seq slots up to position start + n_new - 1 (it may already hold some: a step that
 * was scheduled but never updated leaves them) and records the entry. Room was made. */
static pl_status place(pl_sched *s, pl_seq *seq, int n_new, int *n_entries) {
    int start = seq->n_computed;
    int missing = start + n_new - seq->kv.n_tokens;
    if (missing > 0) {
        int n_copies = 0;
        PL_TRY(pl_kv_allocate(s->pool, &seq->kv, missing, s->copies + s->n_copies, &n_copies,
                              NULL));
        s->n_copies += n_copies;
    }
    s->entries[(*n_entries)++] = (pl_sched_entry){
        .seq = seq, .start = start, .n_new = n_new, .samples = start + n_new == seq->n_tokens};
    return PL_OK;
}

/* Preempts the running tail (the lowest-priority, latest arrival) because `needing` needs a
 * block: frees its blocks and puts it at the front of its priority class in the waiting
 * queue, keeping all its tokens so it is recomputed. Room was made in s->victims. */
static pl_status preempt_tail(pl_sched *s, const pl_seq *needing, int *n_victims,
                              pl_seq **out_victim) {
    pl_seq *v = s->running.tail;
    PL_TRY(pl_sched_transition(v, PL_SEQ_PREEMPTED));
    pl_kv_free(s->pool, &v->kv);
    pl_sched_list_remove(&s->running, v);
    s->n_reserved_forks -= v->n_forks;
    v->n_computed = 0;
    v->n_passed = 0;
    v->n_preemptions++;
    s->n_preemptions++;
    pl_sched_waiting_insert_front(s, v);
    pl_sched_list_push_tail(&s->preempted, v);
    v->aux_list = PL_SCHED_AUX_PREEMPTED;
    s->victims[(*n_victims)++] = v;
    pl_log(s->cfg.log_preemptions ? PL_LOG_WARN : PL_LOG_INFO,
           "preempted request %llu (priority %d, %d tokens, preemption %d): request %llu needs "
           "a KV block and none of %d is free; it will be recomputed",
           (unsigned long long)v->id, v->priority, v->n_tokens, v->n_preemptions,
           (unsigned long long)needing->id, s->n_blocks);
    *out_victim = v;
    return PL_OK;
}

/* ---- running pass ---- */

/* Schedules running seqs in queue order, preempting from the tail when blocks run out. */
static pl_status schedule_running(pl_sched *s, int *budget, int *n_entries, int *n_victims) {
    pl_seq *next;
    for (pl_seq *seq = s->running.head; seq; seq = next) {
        if (*n_entries >= s->cfg.max_batch_size || *budget <= 0) break;
        int remaining = seq->n_tokens - seq->n_computed;
        int n_new = chunk_size(s, remaining, *budget);
        if (remaining <= 0 || n_new > *budget) { /* nothing to do / waits (chunking off) */
            next = seq->link.next;
            continue;
        }
        int missing = seq->n_computed + n_new - seq->kv.n_tokens;
        bool self_preempted = false;
        for (;;) {
            PL_TRY(make_room(s, *n_entries, *n_victims));
            if (missing <= 0 ||
                pl_kv_blocks_needed(s->pool, &seq->kv, missing) <= pl_kv_num_free_blocks(s->pool))
                break;
            pl_seq *v;
            PL_TRY(preempt_tail(s, seq, n_victims, &v));
            if (v == seq) {
                self_preempted = true;
                break;
            }
        }
        if (self_preempted) break; /* it was the tail: nothing runs after it anyway */
        PL_TRY(place(s, seq, n_new, n_entries));
        *budget -= n_new;
        next = seq->link.next; /* read after preemption, which may have removed the old next */
    }
    return PL_OK;
}

/* ---- admission pass ---- */

/* Tries to admit waiting seq w with what is left of this step. */
static pl_status try_admit(pl_sched *s, pl_seq *w, int *budget, int *n_entries, fit *out) {
    *out = NO_FIT;
    /* A PREEMPTED seq here would be a bug (a step that preempts admits nothing). */
    if (!pl_sched_transition_allowed(w->state, PL_SEQ_RUNNING))
        return pl_sched_transition(w, PL_SEQ_RUNNING); /* refuses, naming both states */
    if (s->running.n + s->n_reserved_forks + 1 + w->n_forks > s->cfg.max_num_seqs) return PL_OK;

    /* Count first, take later: a seq that does not fit must leave the cache as it was. */
    int n_cached = 0, n_free_hits = 0;
    int max_cached = w->skip_prefix_cache ? 0 : w->n_tokens - 1;
    PL_TRY(pl_kv_count_prefix(s->pool, w->tokens, w->n_tokens, max_cached, &n_cached,
                              &n_free_hits));
    int n_new = chunk_size(s, w->n_tokens - n_cached, *budget);
    if (n_new > *budget) return PL_OK; /* chunking off and the rest does not fit */
    int n_blocks = n_free_hits + pl_kv_blocks_for_tokens(s->pool, n_cached + n_new) -
                   n_cached / s->block_size;
    int n_free = pl_kv_num_free_blocks(s->pool);
    /* The watermark keeps blocks for running seqs to grow into; with none running there is
     * nobody to keep them for, and ignoring it is what lets any admissible request start. */
    int keep = s->running.n > 0 ? s->watermark_blocks : 0;
    if (n_free - n_blocks < keep) return PL_OK;

    PL_TRY(make_room(s, *n_entries, 0));
    int n_taken = 0;
    PL_TRY(pl_kv_take_prefix(s->pool, &w->kv, w->tokens, w->n_tokens, max_cached, &n_taken));
    if (n_taken != n_cached) { /* cannot happen: nothing changed the pool since the count */
        pl_kv_free(s->pool, &w->kv);
        return pl_sched_bug("request %llu: prefix count %d but take %d",
                            (unsigned long long)w->id, n_cached, n_taken);
    }
    w->n_computed = n_taken;
    pl_status st = place(s, w, n_new, n_entries);
    if (st != PL_OK) {
        pl_kv_free(s->pool, &w->kv);
        w->n_computed = 0;
        return st;
    }
    w->state = PL_SEQ_RUNNING; /* checked on entry */
    if (w->aux_list == PL_SCHED_AUX_FRESH) w->n_cached_prompt = n_taken; /* first admission */
    pl_sched_waiting_remove(s, w);
    w->n_passed = 0;
    pl_sched_running_insert(s, w);
    s->n_reserved_forks += w->n_forks;
    *budget -= n_new;
    *out = ADMITTED;
    return PL_OK;
}

static pl_status schedule_waiting(pl_sched *s, int *budget, int *n_entries) {
    int n_passed = 0; /* waiting seqs that did not fit, looked past in this pass */
    pl_seq *next;
    for (pl_seq *w = s->waiting.head; w; w = next) {
        next = w->link.next;
        if (*n_entries >= s->cfg.max_batch_size || *budget <= 0) break;
        if (s->running.n + s->n_reserved_forks >= s->cfg.max_num_seqs) break;
        /* Every admission needs at least one free block beyond the watermark (the last token
         * is never cached), so when there is none, stop before counting prefixes. */
        int keep = s->running.n > 0 ? s->watermark_blocks : 0;
        if (pl_kv_num_free_blocks(s->pool) - keep < 1) break;

        fit f;
        PL_TRY(try_admit(s, w, budget, n_entries, &f));
        if (f == ADMITTED) {
            /* w passed every seq in s->passed; one that has now been passed max_skip_head
             * times in all stops admission until it fits itself. */
            bool exhausted = false;
            for (int i = 0; i < n_passed; i++)
                exhausted |= ++s->passed[i]->n_passed >= s->cfg.max_skip_head;
            if (exhausted) break;
            continue;
        }
        /* w does not fit. Requests behind it may pass it, but only max_skip_head in all; and
         * the pass looks past at most max_skip_head such seqs, which bounds its cost. */
        if (w->n_passed >= s->cfg.max_skip_head || n_passed >= s->cfg.max_skip_head) break;
        void *p = s->passed;
        PL_TRY(pl_grow_array(&p, &s->cap_passed, (size_t)n_passed + 1, sizeof(pl_seq *),
                             "scheduler: passed list"));
        s->passed = p;
        s->passed[n_passed++] = w;
    }
    return PL_OK;
}

/* ---- the step ---- */

pl_status pl_sched_schedule(pl_sched *s, pl_sched_output *out) {
    if (!s || !out) return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_sched_schedule: NULL argument");
    s->n_steps++;
    /* Last step's victims have sat out their step: they are plain waiting seqs again. */
    while (s->preempted.head) {
        pl_seq *v = s->preempted.head;
        PL_TRY(pl_sched_transition(v, PL_SEQ_WAITING));
        pl_sched_list_remove(&s->preempted, v);
        v->aux_list = PL_SCHED_AUX_NONE;
    }

    int budget = s->cfg.max_total_tokens, n_entries = 0, n_victims = 0;
    pl_status st = schedule_running(s, &budget, &n_entries, &n_victims);
    if (st == PL_OK && n_victims == 0) st = schedule_waiting(s, &budget, &n_entries);

    *out = (pl_sched_output){
        .entries = s->entries,
        .n_seqs = n_entries,
        .n_tokens = s->cfg.max_total_tokens - budget,
        .copies = s->copies,
        .n_copies = s->n_copies,
        .preempted = s->victims,
        .n_preempted = n_victims,
        .step = s->n_steps,
    };
    return st;
}
