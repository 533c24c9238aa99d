/*
 * engine/engine_internal.h - the engine's private state: requests, samples, intake, metrics.
 *
 * A request (one submit) has n samples; each sample is one scheduler sequence. Sample 0 is
 * queued at submit; samples 1..n-1 are forked from it (sharing its prompt's KV blocks) in the
 * step where its prompt finishes computing, and from then on each runs on its own.
 *
 * Lifetimes: the stepping thread owns everything except the intake, which submitting threads
 * reach under intake.mu. A request lives from submit until the step after the one that
 * reported its last sample finished (so the step result's pointers stay valid until then).
 */
#ifndef PL_ENGINE_INTERNAL_H
#define PL_ENGINE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "engine/profile.h"
#include "engine/runner.h"
#include "engine/sampler.h"
#include "kvcache/kvcache.h"
#include "model/model.h"
#include "pagellm.h"
#include "scheduler/scheduler.h"
#include "tokenizer/tokenizer.h"

typedef struct pl_request pl_request;

typedef struct pl_sample {
    pl_seq seq;             /* the scheduler sequence (tokens: prompt then output) */
    pl_request *req;
    int index;              /* in [0, n) */
    pl_rng rng;
    pl_detok *detok;        /* when a tokenizer is loaded */
    char *text;             /* output text so far; stop string cut off at finish */
    size_t text_len, text_cap;
    size_t streamed;        /* bytes of text already handed out in deltas */
    bool text_cut;          /* a stop string ended the text: nothing more is appended */
    bool finished;          /* finish_reason decided */
    bool reported;          /* its completion was in a step result */
    pl_finish_reason reason;
    uint64_t t_first_token_ns, t_finish_ns;
} pl_sample;

struct pl_request {
    pl_request_id id;
    pl_sampling_params params;   /* params.stop points at stop_copies */
    char *stop_copies[PL_MAX_STOP_STRINGS];
    size_t max_stop_len;
    uint64_t t_submit_ns, t_first_sched_ns;
    int n_samples;
    pl_sample *samples;          /* (n_samples) */
    bool forked;                 /* samples 1.. were forked (or n == 1) */
    int n_unreported;
    pl_request *prev, *next;     /* engine's live list, in submit order */
    pl_request *inbox_next;      /* intake queue */
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

/* Requests and aborts arriving from any thread, drained by the stepping thread. */
typedef struct pl_intake {
    pthread_mutex_t mu;
    pl_request *head, *tail;     /* submitted, not yet given to the scheduler */
    size_t n_queued;
    uint64_t *aborts;            /* ids to abort at the next drain */
    size_t n_aborts, cap_aborts;
    pl_id_map live;              /* every request not yet reported finished */
    int n_waiting_new;           /* the scheduler's count at the last drain (queue bound) */
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
    uint64_t requests_finished, prompt_tokens, prompt_tokens_computed, output_tokens, steps;
    uint64_t step_seqs, step_tokens;
    uint64_t elapsed_ns;
    double kv_usage_peak;
    pl_hist ttft, tpot, latency;
} pl_engine_stats;

/* A token drawn for a sample this step, appended after all rows are drawn. */
typedef struct pl_sampled {
    pl_sample *s;
    int32_t tok;
} pl_sampled;

/* Per-step buffers, sized at create for the largest step. */
typedef struct pl_step_buffers {
    int32_t *ids, *positions, *query_start, *context_lens, *block_tables, *sample_rows;
    int32_t *sample_entry;       /* (max_seqs) entry index of each sample row */
    int32_t *copy_pairs;
    int64_t *slots;
    float *logits;               /* (max_seqs, vocab) */
    float *logits_tmp;           /* (vocab) a row copy for forked samples */
    pl_sampled *sampled;         /* this step's drawn tokens; grows, kept across steps */
    size_t cap_sampled;
    pl_stream_delta *deltas;
    size_t n_deltas, cap_deltas;
    pl_completion *finished;
    pl_sample **finished_samples; /* (n_finished) the sample behind each completion */
    size_t n_finished, cap_finished, cap_finished_samples;
} pl_step_buffers;

struct pl_engine {
    pl_engine_config cfg;
    pl_model *model;
    pl_tokenizer *tok;
    pl_backend *be;
    pl_kv_pool *pool;
    pl_sched *sched;
    pl_runner *runner;
    pl_sampler sampler;
    int max_model_len;
    int max_blocks_per_seq;
    int vocab;
    int bos_id;                       /* -1: none */
    int eos_ids[PL_MODEL_MAX_EOS];    /* (n_eos) the ids that end a text (the model's set, or
                                         the tokenizer's EOS when the model names none) */
    int n_eos;

    atomic_uint_fast64_t next_id;
    pl_intake intake;
    pl_request *live_head, *live_tail; /* stepping thread's list, submit order */
    pl_request *graveyard;             /* reported last step: freed at the next step */
    int n_unreported_samples;          /* finished, waiting for the next step result */
    pl_step_buffers sb;
    pl_engine_stats stats;
    pl_profiler prof;
};

/* Whether tok ends a text (ignore_eos aside). */
static inline bool pl_engine_is_eos(const pl_engine *e, int32_t tok) {
    for (int i = 0; i < e->n_eos; i++)
        if (e->eos_ids[i] == tok) return true;
    return false;
}

/* engine/output.c */
pl_status pl_output_on_token(pl_engine *e, pl_sample *s, int32_t tok);
void pl_output_finish(pl_engine *e, pl_sample *s, pl_finish_reason reason);
pl_status pl_output_collect(pl_engine *e);
void pl_output_fill_completion(const pl_sample *s, pl_completion *c);

/* engine/request.c */
pl_status pl_request_create(pl_engine *e, const int32_t *ids, size_t n_ids,
                            const pl_sampling_params *p, pl_request **out);
void pl_request_free(pl_request *r);

/* engine/intake.c */
pl_status pl_intake_init(pl_intake *in);
void pl_intake_deinit(pl_intake *in);

#endif
