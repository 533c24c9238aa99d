/*
 * engine/engine_internal.h - the engine's private state: requests, samples, intake, metrics.
 *
 * A request (one submit) has n samples; each sample is one scheduler sequence. Sample 0 is
 * queued at submit; samples 1..n-1 are forked from it (sharing its prompt's KV blocks) in the
 * step where its prompt finishes computing, and from then on each runs on its own.
 *
 * Files: engine.c (create, destroy, KV pool sizing), intake.c (submit, abort, the drain into
 * the scheduler, wait/wake), step.c (one step and run), batch.c (the scheduler's output as
 * a runner batch), draw.c (sampling each sequence, forking samples), logprobs.c, output.c
 * (detokenise, stop checks, completions), queries.c (capacity, tokenize, model facts),
 * config.c and sampling_params.c (the field tables), fields.c (their machinery).
 *
 * Lifetimes: the stepping thread owns everything except the intake, which submitting threads
 * reach under intake.mu (only intake.c touches its fields). A request lives from submit until
 * the step after the one that reported its last sample finished (so the step result's
 * pointers stay valid until then).
 */
#ifndef PL_ENGINE_INTERNAL_H
#define PL_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "engine/profile.h"
#include "engine/runner.h"
#include "engine/sampler.h"
#include "engine/tp.h"
#include "grammar/grammar.h"
#include "kvcache/kvcache.h"
#include "model/model.h"
#include "pagellm.h"
#include "scheduler/scheduler.h"
#include "tokenizer/tokenizer.h"

typedef struct pl_request pl_request;

/* Log-probabilities recorded for a run of token positions (engine/logprobs.c). entries[i].top
 * points into tops (k per entry); both grow together. The first n_text entries' texts are
 * NUL-terminated slots of texts, in order (entry i's at text_at[i]). */
typedef struct pl_logprob_list {
    pl_token_logprobs *entries; /* (n) */
    pl_logprob *tops;           /* (n * k) */
    size_t n, cap;
    int k;                      /* alternatives per position */
    bool on;                    /* requested */
    char *texts;                /* (texts_len) the entries' texts, each followed by a NUL */
    size_t texts_len, texts_cap;
    size_t *text_at;            /* (cap) */
    size_t n_text;
} pl_logprob_list;

/* What a sample keeps for a request that asked for logprobs (allocated only then). */
typedef struct pl_sample_logprobs {
    pl_logprob_list output;     /* output tokens' (params.logprobs >= 0) */
    pl_logprob_list prompt;     /* sample 0 only (params.prompt_logprobs >= 0) */
    int n_prompt_done;          /* prompt positions recorded (they are computed again after
                                   a preemption: recorded once) */
    float *logits;              /* sample 0 with params.prompt_logits = P >= 0: (n_prompt - P,
                                   vocab), allocated at submit; NULL otherwise */
    int logits_from;            /* P */
} pl_sample_logprobs;

typedef struct pl_sample {
    pl_seq seq;             /* the scheduler sequence (tokens: prompt then output) */
    pl_request *req;
    int index;              /* in [0, n) */
    pl_rng rng;
    pl_detok *detok;        /* when a tokenizer is loaded */
    pl_sample_logprobs *lp; /* NULL unless the request asked for logprobs */
    pl_gram_matcher *gm;    /* NULL unless the request constrains its output (constrain.c) */
    char *text;             /* output text so far; stop string cut off at finish */
    size_t text_len, text_cap;
    size_t streamed;        /* bytes of text already handed out in deltas */
    bool text_cut;          /* a stop string ended the text: nothing more is appended */
    bool finished;          /* finish_reason decided */
    bool reported;          /* its completion was in a step result */
    pl_finish_reason reason;
    int stop_string;        /* the stop string that ended the text (index in params.stop), -1 */
    uint64_t t_first_token_ns, t_finish_ns;
    uint64_t t_last_token_ns;  /* the latest output token's (inter-token latency) */
} pl_sample;

struct pl_request {
    pl_request_id id;
    pl_sampling_params params;   /* the library's full copy; stop and stop_ids point into
                                    stop_copy */
    void *stop_copy;             /* one block: stop ids, stop pointers, stop bytes */
    size_t max_stop_len;
    pl_grammar *grammar;         /* the compiled constraint (a reference), or NULL */
    uint64_t t_submit_ns, t_first_sched_ns;
    int n_samples;
    pl_sample *samples;          /* (n_samples) */
    bool forked;                 /* samples 1.. were forked (or n == 1) */
    int n_unreported;
    pl_request *prev, *next;     /* engine's live list, in submit order */
    pl_request *inbox_next;      /* intake queue; the graveyard once reported */
};

/* id -> request map (open addressing, tombstones); ids are never 0. */
typedef struct pl_id_map {
    uint64_t *keys;          /* 0 empty, UINT64_MAX tombstone */
    pl_request **vals;
    size_t cap, n, n_tomb;
} pl_id_map;

pl_status pl_id_map_put(pl_id_map *m, uint64_t id, pl_request *r);
pl_request *pl_id_map_get(const pl_id_map *m, uint64_t id);
void pl_id_map_del(pl_id_map *m, uint64_t id);
void pl_id_map_free(pl_id_map *m);

/* Requests and aborts arriving from any thread, drained by the stepping thread. Private to
 * engine/intake.c: everything else goes through the pl_intake_* functions. */
typedef struct pl_intake {
    pthread_mutex_t mu;
    pthread_cond_t arrived;      /* signalled on submit, abort and wake */
    bool woken;                  /* pl_engine_wake since the last wait returned */
    pl_request *head, *tail;     /* submitted, not yet given to the scheduler */
    size_t n_queued;
    uint64_t *aborts;            /* ids to abort at the next drain */
    size_t n_aborts, cap_aborts;
    pl_id_map live;              /* every request not yet reported finished */
    int n_waiting_new;           /* the scheduler's count at the last drain (queue bound) */
    int n_free_slots;            /* its free running slots then (pl_sched_counts): the
                                    room is these + max_waiting - waiting new requests */
    size_t n_queued_forks;       /* samples past the first of the queued requests */
    pl_occupancy occ;            /* as of the last drain / retire (pl_engine_occupancy) */
    bool lost;                   /* the backend was lost to a device fault (pl_engine_health) */
    char lost_msg[512];          /* why: the backend's message */
} pl_intake;

/* Log-scale histogram for latency percentiles in constant memory (1 us .. ~1000 s, 1%). */
#define PL_HIST_BINS 1400
typedef struct pl_hist {
    uint32_t bins[PL_HIST_BINS];
    uint64_t n;
    double sum;
} pl_hist;

void pl_hist_add(pl_hist *h, double seconds);
double pl_hist_quantile(const pl_hist *h, double q);

typedef struct pl_engine_stats {
    uint64_t requests_finished, samples_finished;
    uint64_t prompt_tokens, prompt_tokens_computed, output_tokens, steps;
    uint64_t step_seqs, step_tokens;
    uint64_t elapsed_ns;
    uint64_t tp_comm_last_ns;        /* collectives in the latest forward pass */
    double kv_usage_peak;
    uint64_t samples_by_reason[8];   /* indexed by pl_finish_reason */
    pl_hist ttft, tpot, latency, itl, queue;
} pl_engine_stats;

/* A token drawn for a sample this step, appended after all rows are drawn. */
typedef struct pl_sampled {
    pl_sample *s;
    int32_t tok;
    bool has_logprobs;
    pl_token_logprobs lp;               /* lp.top is set when it is appended */
    pl_logprob tops[PL_MAX_LOGPROBS];   /* (lp.n_top) */
} pl_sampled;

/* Per-step buffers, sized at create for the largest step. */
typedef struct pl_step_buffers {
    pl_batch_storage batch;      /* the runner batch's arrays */
    int32_t *sample_entry;       /* (max_seqs) entry index of each sample row */
    float *logits;               /* (max_seqs, vocab) */
    float *logits_tmp;           /* (vocab) a row copy for forked samples */
    float *logits_raw;           /* (vocab) the unmodified row, for logprobs */
    pl_sampled *sampled;         /* this step's drawn tokens; grows, kept across steps */
    size_t cap_sampled;
    pl_stream_delta *deltas;
    size_t n_deltas, cap_deltas;
    pl_completion *finished;
    pl_sample **finished_samples; /* (n_finished) the sample behind each completion */
    size_t n_finished, cap_finished, cap_finished_samples;
} pl_step_buffers;

/* The engine's chat templates, parsed at create (engine/chat.c). A template that failed to
 * parse keeps tmpl NULL, its status and message: chat calls naming it fail with them. */
typedef struct pl_tmpl pl_tmpl;
typedef struct pl_chat_state {
    pl_tmpl **tmpl;      /* (n) */
    char **name;         /* (n) "default", "tool_use", ... */
    char **error;        /* (n) NULL, or why tmpl[i] did not parse */
    pl_status *status;   /* (n) */
    size_t n;
    bool is_override;    /* config.chat_template: one template for every name */
} pl_chat_state;

/* Constrained output (engine/constrain.c): the compiled grammars kept for reuse, the
 * vocabulary as grammar input (built at the first constrained request), the mask buffer. */
typedef struct pl_constrain_state {
    pthread_mutex_t mu;          /* cache and vocab: submitting threads compile */
    bool mu_ok;
    pl_gram_vocab *vocab;
    pl_grammar *cache[32];       /* (n) each holds a reference */
    size_t n;
    uint64_t clock;              /* last-use stamps */
    uint64_t *bits;              /* (vocab / 64 words) the stepping thread's mask */
} pl_constrain_state;

struct pl_engine {
    pl_engine_config cfg;        /* resolved (derived fields filled); paths NULL: not kept */
    pl_model *model;
    pl_tokenizer *tok;
    pl_backend *be;
    pl_kv_pool *pool;
    pl_sched *sched;
    pl_runner *runner;
    pl_sampler sampler;
    pl_chat_state chat;
    pl_constrain_state constrain;
    int max_model_len;
    int max_blocks_per_seq;
    int n_blocks;
    int vocab;
    int n_decodable;                  /* ids [n_decodable, vocab) have logits but no text (a
                                         model vocabulary padded past its tokenizer's): they
                                         are masked before every draw and logprob */
    int bos_id;                       /* -1: none */
    int eos_ids[PL_MODEL_MAX_EOS];    /* (n_eos) the ids that end a text (the model's set, or
                                         the tokenizer's EOS when the model names none) */
    int n_eos;
    char weight_type[48];             /* pl_model_info.weight_type (pl_engine_name_weights) */
    char *tokenizer_path;             /* where e->tok came from (pl_model_info); pl_malloc'd */
    uint64_t n_params, param_bytes;   /* pl_model_info's, of the whole model (before a
                                         tensor-parallel rank keeps its shard) */
    char kv_sizing[320];              /* pl_model_info.kv_sizing (rank.c's pl_rank_pool_blocks) */
    pl_dtype weight_dtype;            /* pl_model_info.weight_dtype */

    atomic_uint_fast64_t next_id;
    pl_intake intake;
    pl_request *live_head, *live_tail; /* stepping thread's list, submit order */
    pl_request *graveyard;             /* reported last step: freed at the next step */
    pl_step_buffers sb;
    pl_engine_stats stats;
    pl_profiler prof;
    int32_t fault_token;               /* PAGELLM_FAULT_FORWARD (a test hook); -1: off */
    int32_t slow_token;                /* PAGELLM_FAULT_SLOW_FORWARD (a test hook); -1: off */
    double slow_seconds;
    pl_tp *tp;                         /* tensor parallelism: the group; NULL with one rank */
    struct pl_kvev *kvev;              /* the KV event publisher (kv_events.c); NULL: off */
};

/* engine/kv_events.c: config.kv_events_config's publisher, listening to the pool */
/* After the pool exists: starts publishing when the configuration says so. */
pl_status pl_engine_kv_events_start(pl_engine *e);
/* The step's events become one batch (at the end of every step). */
void pl_engine_kv_events_end_step(pl_engine *e);
/* Publishes what is pending and stops (before the pool goes). */
void pl_engine_kv_events_stop(pl_engine *e);

/* engine/rank.c: what one rank takes from its machine */
/* Tensor-parallel ranks on this host (threads of this process, or mpirun's local ranks). */
int pl_rank_local_ranks(const pl_engine_config *c);
/* Its backend: cfg's, on device cuda_device + local_rank, with n_threads CPU threads. */
pl_status pl_rank_backend_create(const pl_engine_config *c, int local_rank, int n_threads,
                                 pl_backend **out);
/* The memory it may use: memory_limit_bytes, else what be reports; on a host backend divided
 * among the ranks on this host. */
pl_status pl_rank_memory(const pl_engine_config *c, pl_backend *be, size_t *out);
/* The backend's scratch for the largest step within lim, allocated before the pool is sized
 * (which then gets what is left): no step grows device memory after that. */
pl_status pl_rank_reserve(const pl_model *model, pl_backend *be, const pl_runner_limits *lim);
/* KV blocks for the pool of model (this rank's part) on be within lim (n_blocks unused), from
 * avail bytes (pl_rank_memory's, taken before the model was loaded); sizing (sizing_size
 * bytes, may be NULL) gets a line saying which rule sized it. */
pl_status pl_rank_pool_blocks(const pl_engine_config *c, const pl_model *model, pl_backend *be,
                              const pl_runner_limits *lim, size_t avail, char *sizing,
                              size_t sizing_size, int *out_blocks);

/* Fills e->weight_type and e->weight_dtype from the loaded model's matrices (queries.c). */
void pl_engine_name_weights(pl_engine *e);

/* Whether tok ends a text (ignore_eos aside). */
static inline bool pl_engine_is_eos(const pl_engine *e, int32_t tok) {
    for (int i = 0; i < e->n_eos; i++)
        if (e->eos_ids[i] == tok) return true;
    return false;
}

/* engine/config.c, engine/sampling_params.c */
/* The caller's config as the library's full struct, validated and resolved. */
pl_status pl_engine_config_take(const pl_engine_config *cfg, pl_engine_config *out);
/* Chunked prefill off: the longest request must fit one step. from_model: max_model_len is
 * the model's (the message then says so). */
pl_status pl_engine_config_check_model_len(const pl_engine_config *c, int max_model_len,
                                           bool from_model);
/* The caller's params as the library's full struct, checked (stop ids against vocab);
 * lists still point at the caller's memory and storage is NULL. */
pl_status pl_sampling_params_take(const pl_sampling_params *p, int vocab,
                                  pl_sampling_params *out);

/* engine/intake.c */
pl_status pl_intake_init(pl_intake *in);
void pl_intake_deinit(pl_intake *in);
/* Moves submitted requests into the live list and the scheduler, and applies aborts. */
void pl_intake_drain(pl_engine *e);
/* Requests whose every sample was reported leave the live list for the graveyard. */
void pl_intake_retire_reported(pl_engine *e);
/* Publishes the scheduler's counts and the pool's figures (pl_engine_occupancy) as they
 * are now; the drain and the retirement do it every step. */
void pl_intake_publish(pl_engine *e);
/* Submits or aborts not drained yet. */
bool pl_intake_has_queued(pl_intake *in);
/* The backend is gone for good (backend.h's lost: a sticky device fault): every later submit
 * and step fails with PL_ERR_BACKEND and msg, and pl_engine_health says so. */
void pl_intake_mark_lost(pl_engine *e, const char *msg);
/* PL_OK, or PL_ERR_BACKEND with the lost backend's message (pl_engine_health). */
pl_status pl_intake_health(const pl_engine *e);

/* engine/chat.c */
/* Parses the tokenizer's templates (tok may be NULL), or override (config.chat_template: a
 * file or template text; it must parse). */
pl_status pl_chat_state_init(pl_chat_state *c, const pl_tokenizer *tok, const char *override);
void pl_chat_state_free(pl_chat_state *c);

/* engine/intake.c: tokenizes text[0..len) with flags (PL_TOK_*) and queues it. */
pl_status pl_intake_submit_text(pl_engine *e, const char *text, size_t len, unsigned flags,
                                const pl_sampling_params *params, pl_request_id *out_id);

/* engine/batch.c */
void pl_batch_build(pl_engine *e, const pl_sched_output *so, pl_runner_batch *b);

/* engine/draw.c: draws every sampling sequence's token into sb.sampled (nothing appended
 * yet); records logprobs. */
pl_status pl_draw_tokens(pl_engine *e, const pl_sched_output *so, size_t *n_out);
/* Prompt logprobs of this step's prefill rows (after the draw: reuses sb.logits). */
pl_status pl_draw_prompt_logprobs(pl_engine *e, const pl_sched_output *so);

/* engine/logprobs.c */
/* Log-softmax facts of raw (vocab) at token: logprob, rank and the k most likely into
 * *out (out->top untouched; tops gets k entries). */
void pl_logprobs_compute(const float *raw, int vocab, int32_t token, int k,
                         pl_token_logprobs *out, pl_logprob *tops);
pl_status pl_logprob_list_reserve(pl_logprob_list *l, size_t n);
/* Appends e with its k tops (copied); entries' top pointers stay valid (re-pointed when the
 * tops array moves). */
pl_status pl_logprob_list_push(pl_logprob_list *l, const pl_token_logprobs *e,
                               const pl_logprob *tops);
void pl_logprob_list_free(pl_logprob_list *l);
/* Gives entry i (>= n_text: texts are set in order; skipped ones get "") the text p[0..len). */
pl_status pl_logprob_list_set_text(pl_logprob_list *l, size_t i, const char *p, size_t len);
/* Appends p[0..len) to the last entry's text (the tail a detokeniser held back). */
pl_status pl_logprob_list_extend_text(pl_logprob_list *l, const char *p, size_t len);
/* Cuts the entries' texts so that they join to at most keep bytes (a stop string cut the
 * text they join to). */
void pl_logprob_list_cut_text(pl_logprob_list *l, size_t keep);
/* Prompt positions: entry i gets prompt token i + 1's part of the prompt's decode. */
pl_status pl_logprob_list_prompt_text(pl_logprob_list *l, const pl_tokenizer *tok,
                                      const int32_t *prompt, size_t n_prompt);

/* engine/output.c */
/* Appends d's token to its sample (and its logprobs); detokenises, checks stops, streams. */
pl_status pl_output_on_token(pl_engine *e, const pl_sampled *d);
void pl_output_finish(pl_engine *e, pl_sample *s, pl_finish_reason reason);
pl_status pl_output_collect(pl_engine *e);
void pl_output_fill_completion(const pl_sample *s, pl_completion *c);
/* Finishes every sample of r with reason. */
void pl_engine_finish_request(pl_engine *e, pl_request *r, pl_finish_reason reason);

/* engine/constrain.c */
pl_status pl_constrain_init(pl_constrain_state *c);
void pl_constrain_deinit(pl_constrain_state *c);
/* Compiles (or finds) r's constraint and gives each sample its matcher; nothing without one. */
pl_status pl_constrain_request(pl_engine *e, pl_request *r);
void pl_constrain_free_request(pl_request *r);
/* Sets logits of the tokens s's grammar does not allow next to -inf (end-of-text allowed when
 * the output is complete). *out_dead: no token is left (the vocabulary cannot continue). */
pl_status pl_constrain_mask(pl_engine *e, pl_sample *s, float *logits, bool *out_dead);
/* Moves s's grammar over the drawn token. */
void pl_constrain_accept(pl_engine *e, pl_sample *s, int32_t tok);
/* The sample's constrained output is complete (end-of-text then ends it whatever ignore_eos). */
bool pl_constrain_complete(const pl_sample *s);

/* engine/request.c */
pl_status pl_request_create(pl_engine *e, const int32_t *ids, size_t n_ids,
                            const pl_sampling_params *p, pl_request **out);
void pl_request_free(pl_request *r);
/* Frees a list of requests linked by next (the live list) or, with graveyard, by
 * inbox_next. */
void pl_request_free_all(pl_request *r, bool graveyard);
/* Frees the requests reported by the previous step. */
void pl_engine_free_graveyard(pl_engine *e);

#endif
