/*
 * scheduler/seq.c - sequences: their token storage, their state machine, and the checks that
 * catch misuse.
 *
 * The state table below is the whole state machine; every state change in the scheduler is
 * checked against it (pl_sched_transition), so an impossible change is refused. Such a
 * change is a bug (in the engine's use of the API or in the scheduler), never something a
 * request can cause: it fails with PL_ERR_INVALID_ARGUMENT in every build, and debug builds
 * also log it as a bug so it cannot go unnoticed behind an ignored status.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "scheduler/sched_internal.h"
#include "util/alloc.h"
#include "util/log.h"

enum { N_STATES = PL_SEQ_FINISHED + 1 };

/* allowed[from][to] */
static const bool allowed[N_STATES][N_STATES] = {
    [PL_SEQ_NEW] = {[PL_SEQ_WAITING] = true, [PL_SEQ_RUNNING] = true},
    [PL_SEQ_WAITING] = {[PL_SEQ_RUNNING] = true, [PL_SEQ_FINISHED] = true},
    [PL_SEQ_RUNNING] = {[PL_SEQ_PREEMPTED] = true, [PL_SEQ_FINISHED] = true},
    [PL_SEQ_PREEMPTED] = {[PL_SEQ_WAITING] = true, [PL_SEQ_FINISHED] = true},
    [PL_SEQ_FINISHED] = {0},
};

const char *pl_seq_state_name(pl_seq_state s) {
    switch (s) {
    case PL_SEQ_NEW: return "new";
    case PL_SEQ_WAITING: return "waiting";
    case PL_SEQ_RUNNING: return "running";
    case PL_SEQ_PREEMPTED: return "preempted";
    case PL_SEQ_FINISHED: return "finished";
    }
    return "?";
}

pl_status pl_sched_bug(const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
#ifndef NDEBUG
    pl_log(PL_LOG_ERROR, "scheduler bug: %s", msg);
#endif
    return pl_fail(PL_ERR_INVALID_ARGUMENT, "%s", msg);
}

bool pl_sched_transition_allowed(pl_seq_state from, pl_seq_state to) {
    if ((unsigned)from >= N_STATES || (unsigned)to >= N_STATES) return false;
    return allowed[from][to];
}

pl_status pl_sched_transition(pl_seq *seq, pl_seq_state to) {
    if (!pl_sched_transition_allowed(seq->state, to))
        return pl_sched_bug("request %llu: invalid state transition %s -> %s",
                            (unsigned long long)seq->id, pl_seq_state_name(seq->state),
                            pl_seq_state_name(to));
    seq->state = to;
    return PL_OK;
}

pl_status pl_sched_seq_reserve(pl_seq *seq, int n_tokens) {
    if (n_tokens <= 0) return PL_OK;
    void *p = seq->tokens;
    pl_status st = pl_grow_array(&p, &seq->cap_tokens, (size_t)n_tokens, sizeof(int32_t),
                                 "scheduler: seq tokens");
    seq->tokens = p;
    return st;
}

pl_status pl_seq_init(pl_seq *seq, uint64_t id, const int32_t *prompt, int n_prompt,
                      int max_tokens, int priority) {
    if (!seq) return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_seq_init: seq is NULL");
    *seq = (pl_seq){.id = id, .priority = priority, .max_tokens = max_tokens};
    pl_kv_table_init(&seq->kv);
    if (!prompt || n_prompt < 1)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "request %llu: empty prompt (%d tokens)",
                       (unsigned long long)id, n_prompt);
    if (max_tokens < 1)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "request %llu: max_tokens = %d: must be >= 1",
                       (unsigned long long)id, max_tokens);
    if (n_prompt > INT32_MAX - max_tokens)
        return pl_fail(PL_ERR_TOO_LONG, "request %llu: prompt %d + max_tokens %d overflows",
                       (unsigned long long)id, n_prompt, max_tokens);
    /* Room for the prompt and a first stretch of output; more grows geometrically. */
    int cap = n_prompt + (max_tokens < 64 ? max_tokens : 64);
    PL_TRY(pl_sched_seq_reserve(seq, cap));
    memcpy(seq->tokens, prompt, (size_t)n_prompt * sizeof(int32_t));
    seq->n_tokens = seq->n_prompt = n_prompt;
    return PL_OK;
}

int32_t *pl_seq_take_tokens(pl_seq *seq) {
    int32_t *t = seq->tokens;
    seq->tokens = NULL;
    seq->cap_tokens = 0;
    return t;
}

void pl_seq_deinit(pl_seq *seq) {
    if (!seq) return;
#ifndef NDEBUG
    if (seq->kv.n_blocks != 0 || (seq->state != PL_SEQ_NEW && seq->state != PL_SEQ_FINISHED))
        pl_log(PL_LOG_ERROR, "scheduler bug: request %llu deinit while %s holding %d blocks",
               (unsigned long long)seq->id, pl_seq_state_name(seq->state), seq->kv.n_blocks);
#endif
    pl_free(seq->tokens);
    seq->tokens = NULL;
    seq->cap_tokens = seq->n_tokens = 0;
}
