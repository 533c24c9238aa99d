/*
 * scheduler/scheduler.h - the continuous-batching scheduler: which sequences run each step
 * and how many tokens each computes. It deals in token counts and KV block ids (through
 * kvcache/), never in tensors.
 *
 * One engine step:
 *
 *     pl_sched_output out;
 *     pl_sched_schedule(s, &out);           // pick work, give it KV slots, maybe preempt
 *     ... backend: do out.copies, then run the model over out.entries ...
 *     pl_sched_update(s, &out);             // n_computed += n_new, register full blocks
 *     for each entry e with e.samples:
 *         pl_sched_append_token(s, e.seq, sampled token);
 *         if (a stop condition holds) pl_sched_finish(s, e.seq, PL_FINISH_STOP or _LENGTH);
 *
 * Policy (issue 3, after vLLM's V1 scheduler: one token budget; a decode is a sequence one
 * token behind, a prefill chunk one many tokens behind):
 * - Per step at most max_batch_size sequences and max_total_tokens new tokens; at most
 *   max_num_seqs sequences hold KV (are RUNNING) at once.
 * - Running sequences first, in queue order (priority, then arrival), each taking what it
 *   needs: one token when decoding, a chunk when still prefilling. A running sequence that
 *   needs a block when none is free preempts the lowest-priority, latest-arrived running
 *   sequence (the tail of the running queue): its blocks are freed and it goes back to the
 *   front of its priority class in the waiting queue with all its tokens, to be recomputed.
 *   If the victim is the sequence itself, no further running sequence is scheduled. A step
 *   that preempted admits nothing.
 * - Then waiting sequences in priority-then-arrival order, while budget, batch slots, sequence
 *   slots and KV blocks allow. Cached prefix blocks are taken from the prefix cache (at most
 *   n_tokens - 1 tokens, so the last token is always computed: its logits are needed).
 *   Admission keeps watermark * n_blocks blocks free for running sequences to grow, unless
 *   nothing runs. With chunked prefill a prompt longer than the budget left (or than
 *   long_prefill_threshold) is cut into chunks; without it, a prompt that does not fit the
 *   budget left waits. A waiting sequence that does not fit may be passed by requests behind
 *   it that do, but by at most max_skip_head of them over its whole wait: then admission stops
 *   at it until it fits. So nothing waits forever behind the head, and the head does not
 *   starve either.
 * - Admission holds as many new requests as there are free running slots plus max_waiting
 *   (0 = unbounded): what the running set will take at the next step is not waiting.
 *   Sequences that come back from a preemption were already accepted and do not count
 *   against it (they hold their running slot).
 *
 * Sequence states and the only transitions allowed (anything else is a bug in the caller or
 * here, refused with PL_ERR_INVALID_ARGUMENT, and logged as a bug in debug builds):
 *
 *     NEW -> WAITING (add)           WAITING -> RUNNING (admission)
 *     NEW -> RUNNING (fork child)    RUNNING -> PREEMPTED (preemption) -> WAITING (next step)
 *     WAITING, RUNNING, PREEMPTED -> FINISHED (stop, length, abort, overloaded, error)
 *
 * PREEMPTED lasts from the step that preempted the sequence to the start of the next
 * pl_sched_schedule; the sequence already sits in the waiting queue.
 *
 * Threads: a scheduler is used by one thread at a time (the engine's stepping thread).
 * Ownership: the caller (engine) allocates and owns every pl_seq; the scheduler links them
 * into its queues and must outlive nothing: destroy it only when no pl_seq is in use.
 */
#ifndef PL_SCHEDULER_H
#define PL_SCHEDULER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvcache/kvcache.h"
#include "pagellm.h"
#include "util/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pl_sched pl_sched;
typedef struct pl_seq pl_seq;

/* ---- sequences ------------------------------------------------------------------------------ */

typedef enum pl_seq_state {
    PL_SEQ_NEW = 0,       /* initialised by pl_seq_init, not (yet) given to the scheduler */
    PL_SEQ_WAITING = 1,   /* in the waiting queue */
    PL_SEQ_RUNNING = 2,   /* in the running queue: holds KV blocks */
    PL_SEQ_PREEMPTED = 3, /* preempted by the latest step; in the waiting queue, no blocks */
    PL_SEQ_FINISHED = 4,  /* out of every queue, no blocks; finish_reason says why */
} pl_seq_state;

/* "new", "waiting", "running", "preempted", "finished"; "?" otherwise. Static storage. */
const char *pl_seq_state_name(pl_seq_state s);

/* Links of a sequence in the scheduler's intrusive lists; private to the scheduler. */
typedef struct pl_seq_link {
    pl_seq *prev;
    pl_seq *next;
} pl_seq_link;

/* One sequence (one sample of a request). The engine embeds it in its request record; the
 * scheduler reads the first group and maintains the rest. Fields marked (sched) are written
 * by the scheduler only. */
struct pl_seq {
    /* Set by pl_seq_init; the engine may change priority, n_forks and user before
     * pl_sched_add, and user at any time. */
    uint64_t id;       /* the request id, for logs */
    int priority;      /* lower runs first; FCFS within a priority */
    int max_tokens;    /* output tokens at most (>= 1) */
    int n_forks;       /* children pl_sched_fork will add once the prompt is computed (n - 1
                          for n parallel samples): admission reserves their sequence slots */
    bool skip_prefix_cache; /* compute every token (the engine needs every prompt logit);
                               its full blocks are still registered for others */
    void *user;        /* the engine's back pointer; never touched by the scheduler */

    /* Tokens: prompt then generated. Storage owned by the seq (pl_seq_init/pl_seq_deinit). */
    int32_t *tokens;   /* (cap_tokens) token ids; the first n_tokens are valid */
    int n_tokens;      /* n_prompt + generated */
    size_t cap_tokens;
    int n_prompt;
    int n_computed;    /* (sched) leading tokens whose KV is computed */
    int n_cached_prompt; /* (sched) prompt tokens taken from the prefix cache at first admission */
    pl_kv_table kv;    /* (sched) block table: slots for positions 0 .. kv.n_tokens-1 */

    pl_seq_state state;             /* (sched) */
    pl_finish_reason finish_reason; /* (sched) PL_FINISH_NONE until FINISHED */
    int n_preemptions;              /* (sched) times preempted */
    uint64_t arrival;               /* (sched) order of pl_sched_add (a forked child gets its
                                       parent's): FCFS key within a priority */

    /* (sched) private bookkeeping */
    pl_seq_link link;  /* waiting or running queue */
    pl_seq_link aux;   /* new-request FIFO (WAITING, never run) or preempted list (PREEMPTED) */
    int aux_list;      /* which list aux links into: 0 none */
    int n_passed;      /* requests admitted past it while it did not fit (bounded skipping) */
};

/* Makes seq a NEW sequence holding a copy of prompt (n_prompt >= 1 ids), max_tokens >= 1,
 * the given priority, n_forks 0, user NULL. Errors: PL_ERR_INVALID_ARGUMENT (NULL, lengths),
 * PL_ERR_OUT_OF_MEMORY. On failure seq owns nothing (pl_seq_deinit is still safe). */
pl_status pl_seq_init(pl_seq *seq, uint64_t id, const int32_t *prompt, int n_prompt,
                      int max_tokens, int priority);

/* Frees the token storage. seq must be NEW or FINISHED (holding no blocks). NULL is a no-op. */
void pl_seq_deinit(pl_seq *seq);
/* Hands a finished seq's token array (prompt then output, n_tokens of them) to the caller,
 * who frees it with pl_free; the seq keeps its counts but no storage. */
int32_t *pl_seq_take_tokens(pl_seq *seq);

static inline int pl_seq_n_generated(const pl_seq *seq) { return seq->n_tokens - seq->n_prompt; }

/* ---- configuration and lifetime ------------------------------------------------------------- */

typedef struct pl_sched_config {
    int max_batch_size;          /* sequences per step, >= 1 */
    int max_num_seqs;            /* sequences RUNNING at once, >= max_batch_size */
    int max_total_tokens;        /* new tokens per step (the token budget), >= max_batch_size */
    int max_model_len;           /* prompt + max_tokens at most, >= 1 */
    bool enable_chunked_prefill; /* off: max_model_len must be <= max_total_tokens */
    int long_prefill_threshold;  /* tokens one prefill takes per step at most; 0 = no cap;
                                    only with chunked prefill */
    int max_skip_head;           /* requests that may pass a waiting sequence that does not fit */
    double watermark;            /* fraction of blocks admission keeps free, in [0, 1) */
    int max_waiting;             /* new requests waiting at most; 0 = unbounded */
    pl_overflow_policy overflow_policy;
    bool log_preemptions;        /* log preemptions at warn instead of info */
} pl_sched_config;

/* The scheduling fields of an engine config, with max_model_len resolved by the engine (the
 * config's 0 means "the model's"). */
void pl_sched_config_from_engine(const pl_engine_config *ecfg, int max_model_len,
                                 pl_sched_config *out);

/* Creates a scheduler over pool (borrowed: it must outlive the scheduler). Errors:
 * PL_ERR_INVALID_ARGUMENT (NULL, a config field out of range: the message names it),
 * PL_ERR_OUT_OF_MEMORY. On failure *out is untouched. */
pl_status pl_sched_create(const pl_sched_config *cfg, pl_kv_pool *pool, pl_sched **out);

/* Finishes every sequence still queued with PL_FINISH_ABORT (freeing its blocks; the caller
 * still owns and deinits it), then frees the scheduler. NULL is a no-op. */
void pl_sched_destroy(pl_sched *s);

/* ---- admission ------------------------------------------------------------------------------ */

/* Whether a request of this shape can ever run. PL_OK, or: PL_ERR_INVALID_ARGUMENT (n_prompt
 * or max_tokens 0), PL_ERR_TOO_LONG (n_prompt + max_tokens > max_model_len; or it needs more
 * KV blocks than the pool has: the message names both numbers). Changes nothing. */
pl_status pl_sched_check_admissible(const pl_sched *s, size_t n_prompt, size_t max_tokens);

/* Queues a NEW seq (FCFS within its priority) and assigns its arrival number.
 * out_dropped (may be NULL unless the policy is DROP_OLDEST) gets NULL, or the oldest new
 * waiting seq that made room: it is FINISHED with PL_FINISH_OVERLOADED and the engine reports
 * it. Errors (seq untouched, nothing changed): as pl_sched_check_admissible;
 * PL_ERR_INVALID_ARGUMENT (seq not NEW, 1 + n_forks > max_num_seqs);
 * PL_ERR_QUEUE_FULL (max_waiting new requests already wait and the policy is REJECT_NEWEST). */
pl_status pl_sched_add(pl_sched *s, pl_seq *seq, pl_seq **out_dropped);

/* How many requests of this shape the KV pool holds at once: n_blocks / blocks per request,
 * a request needing n_prompt + max_tokens - 1 slots (the last sampled token is never fed
 * back). Ignores the prefix cache and max_num_seqs. Errors as pl_sched_check_admissible
 * except that a request larger than the pool gives 0. */
pl_status pl_sched_capacity(const pl_sched *s, size_t n_prompt, size_t max_tokens,
                            size_t *out_requests);

/* ---- one step ------------------------------------------------------------------------------- */

/* One scheduled sequence: compute positions start .. start+n_new-1 of seq->tokens. */
typedef struct pl_sched_entry {
    pl_seq *seq;
    int start;    /* seq->n_computed when scheduled */
    int n_new;    /* >= 1 */
    bool samples; /* start + n_new == seq->n_tokens: sample a token from the last position */
} pl_sched_entry;

/* What a step computes. The arrays are scheduler-owned, valid until the next
 * pl_sched_schedule or pl_sched_destroy. */
typedef struct pl_sched_output {
    const pl_sched_entry *entries; /* (n_seqs): running sequences first, then admitted ones */
    int n_seqs;
    int n_tokens;                  /* sum of n_new */
    const pl_kv_copy *copies;      /* (n_copies) copy-on-write block copies to do before the
                                      step: every copy made since the last pl_sched_update
                                      (repeating one is harmless: nothing wrote dst since) */
    int n_copies;
    pl_seq *const *preempted;      /* (n_preempted) sequences preempted this step */
    int n_preempted;
    uint64_t step;                 /* serial number, checked by pl_sched_update */
} pl_sched_output;

/* Picks this step's work (see the policy above) and gives it KV slots. Allocates nothing in
 * the steady state (arrays grow geometrically). Errors: PL_ERR_OUT_OF_MEMORY (host memory for
 * a block table or an output array): *out then holds the work scheduled before the failure,
 * which is valid and may be run; the rest waits for the next step. */
pl_status pl_sched_schedule(pl_sched *s, pl_sched_output *out);

/* After the backend ran out: n_computed += n_new for every entry whose seq is still RUNNING
 * (a seq finished meanwhile is skipped; its memory must still be valid), and its newly full
 * blocks are registered in the prefix cache. PL_ERR_INVALID_ARGUMENT if out is not the latest
 * schedule or was already applied (then nothing changed). */
pl_status pl_sched_update(pl_sched *s, const pl_sched_output *out);

/* Appends a sampled token to a RUNNING seq whose tokens all have KV (it sampled this step).
 * Errors: PL_ERR_INVALID_ARGUMENT (wrong state, not sampled, more than max_tokens generated),
 * PL_ERR_OUT_OF_MEMORY (token storage grows geometrically; nothing changed). */
pl_status pl_sched_append_token(pl_sched *s, pl_seq *seq, int32_t token);

/* Finishes seq from WAITING, RUNNING or PREEMPTED (stop, length, abort, error ...): removes it
 * from its queue and frees its blocks. reason != PL_FINISH_NONE. PL_ERR_INVALID_ARGUMENT for a
 * NEW or FINISHED seq (nothing changed). */
pl_status pl_sched_finish(pl_sched *s, pl_seq *seq, pl_finish_reason reason);

/* Parallel sampling: makes child (NEW, initialised with the parent's prompt) share parent's
 * blocks and copy its tokens and n_computed, and puts it in the running queue right after
 * parent. parent must be RUNNING with every token computed: call it between pl_sched_update
 * and pl_sched_append_token of the step that finished the prompt, then append each sample.
 * Uses a slot parent->n_forks reserved, else a free sequence slot. Errors (nothing changed):
 * PL_ERR_INVALID_ARGUMENT (states, prompts differ, parent not fully computed),
 * PL_ERR_QUEUE_FULL (no sequence slot), PL_ERR_OUT_OF_MEMORY. */
pl_status pl_sched_fork(pl_sched *s, pl_seq *parent, pl_seq *child);

/* ---- counts --------------------------------------------------------------------------------- */

typedef struct pl_sched_counts {
    int n_waiting;          /* in the waiting queue (includes n_preempted) */
    int n_waiting_new;      /* of which never ran */
    int n_running;
    int n_free_slots;       /* running slots (max_num_seqs) no sequence holds, waits to take
                               back after a preemption, or reserves for samples to fork (new
                               requests' too; negative when those outnumber them): admission
                               takes max_waiting + n_free_slots new requests */
    int n_preempted;        /* preempted by the latest step */
    uint64_t n_preemptions; /* since create */
    uint64_t n_steps;       /* pl_sched_schedule calls since create */
} pl_sched_counts;

void pl_sched_get_counts(const pl_sched *s, pl_sched_counts *out);

/* The pool the scheduler allocates from (borrowed). */
pl_kv_pool *pl_sched_pool(const pl_sched *s);

#ifdef __cplusplus
}
#endif
#endif
