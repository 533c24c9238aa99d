/*
 * scheduler/sched_internal.h - the scheduler's private state, shared by its source files.
 *
 * Invariants (checked by the tests after every step):
 * - waiting: every WAITING or PREEMPTED seq, sorted by priority; within a priority, seqs back
 *   from a preemption first (most recently preempted first), then new ones in arrival order.
 *   Waiting seqs hold no blocks.
 * - running: every RUNNING seq, sorted by (priority, arrival), a forked child right after its
 *   parent (it shares the parent's arrival). So the tail is always the preemption victim,
 *   "the lowest-priority, latest-arrived running sequence", and the running pass, which goes
 *   head to tail, never has to take back work it already scheduled this step.
 * - fresh (aux links): the WAITING seqs that never ran, in arrival order; its length is what
 *   max_waiting bounds and its head is what DROP_OLDEST drops.
 * - preempted (aux links): the PREEMPTED seqs; emptied (-> WAITING) by the next schedule.
 * - n_reserved_forks: sum of n_forks over RUNNING seqs (slots their children will take);
 *   waiting_forks the same over WAITING and PREEMPTED seqs.
 * - copies: copy-on-write copies made since the last pl_sched_update.
 */
#ifndef PL_SCHED_INTERNAL_H
#define PL_SCHED_INTERNAL_H

#include "scheduler/scheduler.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { PL_SCHED_AUX_NONE = 0, PL_SCHED_AUX_FRESH = 1, PL_SCHED_AUX_PREEMPTED = 2 };

/* An intrusive doubly linked list of seqs through either their link or their aux field. */
typedef struct pl_sched_list {
    pl_seq *head;
    pl_seq *tail;
    int n;
    bool aux; /* links through seq->aux instead of seq->link */
} pl_sched_list;

struct pl_sched {
    pl_sched_config cfg;
    pl_kv_pool *pool; /* borrowed */
    int block_size;
    int n_blocks;
    int watermark_blocks; /* floor(watermark * n_blocks) */

    pl_sched_list waiting;
    pl_sched_list running;
    pl_sched_list fresh;
    pl_sched_list preempted;
    int n_reserved_forks;
    int waiting_forks;    /* sum of n_forks over waiting: slots their samples will take */

    uint64_t next_arrival;
    uint64_t n_preemptions;
    uint64_t n_steps;
    uint64_t last_updated_step; /* step of the latest pl_sched_update */

    /* Output storage, reused every step; each grows geometrically and never shrinks. */
    pl_sched_entry *entries; /* (cap_entries) */
    size_t cap_entries;
    pl_kv_copy *copies;      /* (cap_copies); n_copies pending until pl_sched_update */
    int n_copies;
    size_t cap_copies;
    pl_seq **victims;        /* (cap_victims) preempted this step */
    size_t cap_victims;
    pl_seq **passed;         /* (cap_passed) waiting seqs passed over in this admission pass */
    size_t cap_passed;
};

/* ---- lists (queue.c) ---- */
/* Running slots nothing holds or will take; may be negative (admission and the counts). */
int pl_sched_free_slots(const pl_sched *s);
void pl_sched_list_init(pl_sched_list *l, bool aux);
void pl_sched_list_remove(pl_sched_list *l, pl_seq *s);
void pl_sched_list_push_tail(pl_sched_list *l, pl_seq *s);
void pl_sched_list_insert_after(pl_sched_list *l, pl_seq *pos, pl_seq *s); /* pos NULL: head */
static inline pl_seq *pl_sched_list_next(const pl_sched_list *l, const pl_seq *s) {
    return l->aux ? s->aux.next : s->link.next;
}
/* Waiting queue: a new arrival goes to the tail of its priority class, a preempted seq to
 * the front of it. */
void pl_sched_waiting_insert_new(pl_sched *s, pl_seq *seq);
void pl_sched_waiting_insert_front(pl_sched *s, pl_seq *seq);
/* Running queue: by (priority, arrival), after every seq with an equal key. */
void pl_sched_running_insert(pl_sched *s, pl_seq *seq);
/* Takes seq out of the waiting queue and of whichever aux list holds it. */
void pl_sched_waiting_remove(pl_sched *s, pl_seq *seq);

/* ---- states and checks (seq.c) ---- */
/* Moves seq to state `to` if the transition table allows it; else a bug (below). */
pl_status pl_sched_transition(pl_seq *seq, pl_seq_state to);
bool pl_sched_transition_allowed(pl_seq_state from, pl_seq_state to);
/* A broken invariant or API misuse by the engine, never reachable from request input:
 * returns PL_ERR_INVALID_ARGUMENT with the message, and in debug builds logs it as a bug. */
pl_status pl_sched_bug(const char *fmt, ...) PL_PRINTF(1, 2);
/* Room for at least n_tokens tokens in seq->tokens, growing geometrically. */
pl_status pl_sched_seq_reserve(pl_seq *seq, int n_tokens);

#ifdef __cplusplus
}
#endif
#endif
