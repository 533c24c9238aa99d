/*
 * scheduler/queue.c - the waiting and running queues: intrusive doubly linked lists of seqs.
 *
 * Intrusive links make every removal O(1) (abort, admission out of the middle, finishing)
 * and cost no allocation. Sorted insertion walks from the end where the new seq belongs;
 * with one priority (the common case) that walk is O(1): a new arrival is the tail of the
 * waiting queue, a preempted seq its head. Orders are described in sched_internal.h. The
 * queues' lengths also give the running slots left (pl_sched_free_slots), which admission
 * and the counts read.
 */
#include "scheduler/sched_internal.h"

static pl_seq_link *L(const pl_sched_list *l, pl_seq *s) { return l->aux ? &s->aux : &s->link; }

void pl_sched_list_init(pl_sched_list *l, bool aux) {
    *l = (pl_sched_list){.head = NULL, .tail = NULL, .n = 0, .aux = aux};
}

void pl_sched_list_remove(pl_sched_list *l, pl_seq *s) {
    pl_seq_link *k = L(l, s);
    if (k->prev) L(l, k->prev)->next = k->next;
    else l->head = k->next;
    if (k->next) L(l, k->next)->prev = k->prev;
    else l->tail = k->prev;
    k->prev = k->next = NULL;
    l->n--;
}

void pl_sched_list_insert_after(pl_sched_list *l, pl_seq *pos, pl_seq *s) {
    pl_seq_link *k = L(l, s);
    k->prev = pos;
    k->next = pos ? L(l, pos)->next : l->head;
    if (k->next) L(l, k->next)->prev = s;
    else l->tail = s;
    if (pos) L(l, pos)->next = s;
    else l->head = s;
    l->n++;
}

void pl_sched_list_push_tail(pl_sched_list *l, pl_seq *s) {
    pl_sched_list_insert_after(l, l->tail, s);
}

void pl_sched_waiting_insert_new(pl_sched *s, pl_seq *seq) {
    pl_seq *pos = s->waiting.tail;
    while (pos && pos->priority > seq->priority) pos = pos->link.prev;
    pl_sched_list_insert_after(&s->waiting, pos, seq);
    pl_sched_list_push_tail(&s->fresh, seq);
    s->waiting_forks += seq->n_forks;
    seq->aux_list = PL_SCHED_AUX_FRESH;
}

void pl_sched_waiting_insert_front(pl_sched *s, pl_seq *seq) {
    /* Front of its priority class, not of the whole queue: a low-priority victim must not
     * jump ahead of waiting higher-priority requests. */
    pl_seq *pos = NULL; /* insert after pos */
    for (pl_seq *it = s->waiting.head; it && it->priority < seq->priority; it = it->link.next)
        pos = it;
    pl_sched_list_insert_after(&s->waiting, pos, seq);
    s->waiting_forks += seq->n_forks;
}

void pl_sched_waiting_remove(pl_sched *s, pl_seq *seq) {
    pl_sched_list_remove(&s->waiting, seq);
    s->waiting_forks -= seq->n_forks;
    if (seq->aux_list == PL_SCHED_AUX_FRESH) pl_sched_list_remove(&s->fresh, seq);
    else if (seq->aux_list == PL_SCHED_AUX_PREEMPTED) pl_sched_list_remove(&s->preempted, seq);
    seq->aux_list = PL_SCHED_AUX_NONE;
}

void pl_sched_running_insert(pl_sched *s, pl_seq *seq) {
    pl_seq *pos = s->running.tail;
    while (pos && (pos->priority > seq->priority ||
                   (pos->priority == seq->priority && pos->arrival > seq->arrival)))
        pos = pos->link.prev;
    pl_sched_list_insert_after(&s->running, pos, seq);
}

/* Held: running seqs and the forks they reserve, preempted ones back in the waiting queue,
 * and the forks waiting requests will make once they run. So running a new request moves one
 * slot from free to held and one request out of fresh: free + max_waiting - fresh, the room
 * left, stays put while the scheduler works, which is what lets a submitting thread check it
 * from the counts of the latest step. Negative when new requests' samples outnumber the free
 * slots (their other samples then wait in waiting slots). */
int pl_sched_free_slots(const pl_sched *s) {
    return s->cfg.max_num_seqs - (s->running.n + s->n_reserved_forks +
                                  (s->waiting.n - s->fresh.n) + s->waiting_forks);
}
