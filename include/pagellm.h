/*
 * pagellm.h - the public C API of pagellm, a paged-KV LLM inference engine.
 *
 * This is the only public header. It uses libc types only.
 *
 * A whole program:
 *
 *     pl_engine_config cfg;
 *     pl_engine_config_default(&cfg);
 *     cfg.model_path = "stories260K.bin";
 *     cfg.tokenizer_path = "tok512.model";
 *     pl_engine *e;
 *     if (pl_engine_create(&cfg, &e) != PL_OK) { fprintf(stderr, "%s\n", pl_last_error()); return 1; }
 *     pl_sampling_params sp;
 *     pl_sampling_params_default(&sp);
 *     sp.temperature = 0.0f;
 *     pl_request_id id;
 *     pl_engine_submit_request(e, "Once upon a time", &sp, &id);
 *     pl_completion *c; size_t n;
 *     pl_engine_run(e, &c, &n);                 // steps until every request finished
 *     printf("%s\n", c[0].text);
 *     pl_completions_free(c, n);
 *     pl_engine_destroy(e);
 *
 * Conventions
 * - Every call that can fail returns a pl_status (0 = PL_OK, failures negative) and sets
 *   a thread-local detail message readable with pl_last_error().
 * - OUT parameters come last and are named out_*. On failure they are left untouched
 *   unless stated otherwise; a failed create leaves nothing to clean up.
 * - Inputs are copied: the caller may free or reuse them as soon as the call returns.
 * - Every returned pointer states its lifetime ("engine-owned, valid until ...").
 *
 * Threads
 * - One engine is stepped by one thread at a time (pl_engine_step, pl_engine_run,
 *   pl_engine_destroy, pl_engine_metrics, pl_engine_has_pending_work, the profiling calls). pl_engine_submit_request,
 *   pl_engine_submit_tokens and pl_engine_abort may be called from any thread,
 *   concurrently with each other and with the stepping thread.
 * - pl_last_error() is per thread; there is no other global state.
 */
#ifndef PAGELLM_H
#define PAGELLM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(PL_BUILDING_LIBRARY) && defined(__GNUC__)
#define PL_API __attribute__((visibility("default")))
#else
#define PL_API
#endif

#define PL_VERSION_MAJOR 0
#define PL_VERSION_MINOR 1
#define PL_VERSION_PATCH 0
PL_API const char *pl_version(void); /* "0.1.0"; static storage */

/* ------------------------------------------------------------------------------------------
 * Status codes and errors
 * ---------------------------------------------------------------------------------------- */

typedef enum pl_status {
    PL_OK = 0,
    PL_ERR_INVALID_ARGUMENT = -1, /* a NULL pointer, out-of-range value or unknown name */
    PL_ERR_OUT_OF_MEMORY = -2,    /* host or device allocation failed */
    PL_ERR_IO = -3,               /* a file could not be opened, read or mapped */
    PL_ERR_FORMAT = -4,           /* a file is malformed, truncated or inconsistent */
    PL_ERR_UNSUPPORTED = -5,      /* valid, but not supported by this build or backend */
    PL_ERR_NOT_FOUND = -6,        /* an unknown request id, file or tensor name */
    PL_ERR_TOO_LONG = -7,         /* prompt + max_tokens exceeds max_model_len */
    PL_ERR_QUEUE_FULL = -8,       /* the waiting queue is full (REJECT_NEWEST policy) */
    PL_ERR_BACKEND = -9,          /* the compute backend failed (a CUDA error, ...) */
} pl_status;

/* "PL_ERR_IO". Static storage; an unknown code gives "PL_ERR_UNKNOWN". */
PL_API const char *pl_status_name(pl_status s);
/* "input/output error". Static storage; an unknown code gives "unknown status". */
PL_API const char *pl_status_string(pl_status s);
/* The detail of this thread's most recent failure, e.g. "model.bin: truncated at byte 4096";
 * "" when none. Thread-owned, valid until this thread's next pagellm call. */
PL_API const char *pl_last_error(void);

/* Why a request finished. */
typedef enum pl_finish_reason {
    PL_FINISH_NONE = 0,       /* not finished */
    PL_FINISH_STOP = 1,       /* EOS, a stop token id or a stop string */
    PL_FINISH_LENGTH = 2,     /* max_tokens generated, or max_model_len reached */
    PL_FINISH_ABORT = 3,      /* pl_engine_abort */
    PL_FINISH_OVERLOADED = 4, /* dropped from a full waiting queue (DROP_OLDEST policy) */
    PL_FINISH_ERROR = 5,      /* the backend failed while it ran */
} pl_finish_reason;

/* "stop", "length", "abort", "overloaded", "error", "none". Static storage. */
PL_API const char *pl_finish_reason_name(pl_finish_reason r);

/* ------------------------------------------------------------------------------------------
 * Engine configuration
 * ---------------------------------------------------------------------------------------- */

typedef enum pl_backend_kind {
    PL_BACKEND_CPU = 0,  /* the fast CPU backend: threads, SIMD, BLAS */
    PL_BACKEND_REF = 1,  /* the naive reference backend: the oracle; slow */
    PL_BACKEND_CUDA = 2, /* NVIDIA GPU: own kernels + cuBLAS; PL_ERR_UNSUPPORTED without CUDA */
} pl_backend_kind;

/* Storage type of weights (and of the KV cache on backends that support it). */
typedef enum pl_dtype {
    PL_DTYPE_AUTO = 0, /* as stored in the file (weights) or the backend's choice (KV cache) */
    PL_DTYPE_F32 = 1,
    PL_DTYPE_F16 = 2,
    PL_DTYPE_BF16 = 3,
} pl_dtype;

/* What submit does when max_waiting requests are already waiting. */
typedef enum pl_overflow_policy {
    PL_OVERFLOW_REJECT_NEWEST = 0, /* submit fails with PL_ERR_QUEUE_FULL */
    PL_OVERFLOW_DROP_OLDEST = 1,   /* the oldest waiting request finishes as "overloaded" */
} pl_overflow_policy;

typedef struct pl_engine_config {
    /* Model: a llama2.c .bin, a Hugging Face directory, a .gguf, or "dummy:NAME"
     * (random weights from seed; see pagellm --help for the names). Borrowed during create. */
    const char *model_path;
    /* SentencePiece .model; NULL = look beside the model (a Hugging Face directory's
     * tokenizer.json, else tokenizer.model; beside a llama2.c file tok<vocab_size>.model, else
     * tokenizer.model), else run on token ids only. */
    const char *tokenizer_path;
    pl_dtype weight_dtype;     /* AUTO keeps the stored type; F32/F16/BF16 convert at load */
    pl_dtype kv_dtype;         /* AUTO: f16 (half the bytes attention reads; f32 on request) */
    uint64_t dummy_seed;       /* weight seed for dummy: models */

    pl_backend_kind backend;
    int n_threads;             /* CPU backend threads; 0 = all cores */
    int cuda_device;           /* CUDA device ordinal */

    /* KV cache */
    int block_size;            /* token slots per KV block: a power of two in [1, 256]; 16 */
    int max_num_blocks;        /* 0 = derive from memory_threshold */
    double memory_threshold;   /* fraction of (free) memory the engine may use, in (0, 1]; 0.9 */
    size_t memory_limit_bytes; /* memory to size the KV pool from; 0 = physical memory (CPU)
                                  or free device memory. Weights larger than it are refused
                                  before loading; with max_num_blocks set, weights + pool +
                                  workspace must fit it */
    bool enable_prefix_caching;/* automatic prefix caching; true */

    /* Scheduling */
    int max_batch_size;        /* sequences per step; 32 */
    int max_num_seqs;          /* sequences running (holding KV) at once; 256 */
    int max_total_tokens;      /* new tokens per step (the token budget); 4096 */
    int max_model_len;         /* prompt + output limit; 0 = the model's */
    bool enable_chunked_prefill;   /* cut long prompts into chunks; true */
    int long_prefill_threshold;    /* with chunked prefill: max tokens one prompt takes per
                                      step; 0 = no cap. Without chunking a prompt runs whole */
    int max_skip_head;         /* how many smaller requests may pass a waiting head that does
                                  not fit before admission stops at it; 4 */
    double watermark;          /* fraction of blocks kept free for running sequences; 0.01 */
    int max_waiting;           /* waiting queue bound; 0 = unbounded; 4096 */
    pl_overflow_policy overflow_policy;

    int seed;                  /* reserved for engine-level randomness; 0 */
    bool log_preemptions;      /* log every preemption on stderr; false */
} pl_engine_config;

/* Fills cfg with the defaults documented above. */
PL_API void pl_engine_config_default(pl_engine_config *cfg);

/* Checks every field. Returns PL_OK, or PL_ERR_INVALID_ARGUMENT (cfg NULL, or a field out of
 * range: the message names the field, its value and the allowed range). Touches no file. */
PL_API pl_status pl_engine_config_validate(const pl_engine_config *cfg);


/* ------------------------------------------------------------------------------------------
 * Sampling parameters (per request)
 * ---------------------------------------------------------------------------------------- */

#define PL_MAX_STOP_IDS 16
#define PL_MAX_STOP_STRINGS 8

typedef struct pl_sampling_params {
    int max_tokens;           /* output tokens at most; >= 1; 100 */
    int min_tokens;           /* EOS and stop ids are ignored before this many; 0 */
    float temperature;        /* 0 = greedy; >= 0; 1.0 */
    float top_p;              /* nucleus mass in (0, 1]; 0.9 */
    int top_k;                /* 0 = off; else keep the k most likely */
    float min_p;              /* in [0, 1]; drop tokens below min_p * p(top); 0 */
    float repetition_penalty; /* > 0; 1 = off; divides positive logits of seen tokens */
    float presence_penalty;   /* in [-2, 2]; 0 = off */
    float frequency_penalty;  /* in [-2, 2]; 0 = off */
    uint64_t seed;            /* used when has_seed: output then independent of the batch */
    bool has_seed;
    int32_t stop_ids[PL_MAX_STOP_IDS]; /* extra ids that end the output (included in ids) */
    int n_stop_ids;
    const char *stop[PL_MAX_STOP_STRINGS]; /* strings that end the output (not included in
                                              the text); copied at submit */
    int n_stop;
    bool ignore_eos;          /* keep going past EOS (benchmarks); false */
    int n;                    /* parallel samples sharing the prompt's KV; 1 */
    int priority;             /* lower runs first; FCFS within a priority; 0. Strict, no aging:
                                 steady higher-priority work holds lower priorities back */
} pl_sampling_params;

/* Fills p with the defaults documented above. */
PL_API void pl_sampling_params_default(pl_sampling_params *p);

/* ------------------------------------------------------------------------------------------
 * Engine
 * ---------------------------------------------------------------------------------------- */

typedef struct pl_engine pl_engine;
typedef uint64_t pl_request_id; /* 0 is never a valid id */

/* Loads the model (and tokenizer) named by cfg and sizes the KV pool.
 * Errors: PL_ERR_INVALID_ARGUMENT (cfg, see pl_engine_config_validate), PL_ERR_IO,
 * PL_ERR_FORMAT, PL_ERR_NOT_FOUND (model/tokenizer), PL_ERR_UNSUPPORTED (a model feature or a
 * backend this build lacks), PL_ERR_OUT_OF_MEMORY (the model or the KV pool does not fit: the
 * message gives the numbers), PL_ERR_BACKEND. On failure *out is untouched and nothing needs
 * cleaning up. The engine does not keep cfg's strings. */
PL_API pl_status pl_engine_create(const pl_engine_config *cfg, pl_engine **out);
PL_API void pl_engine_destroy(pl_engine *e); /* NULL is a no-op; frees all requests */

/* Queues a request. prompt: NUL-terminated UTF-8, tokenized with BOS as the model expects.
 * params NULL = defaults. *out_id (may be NULL) gets its id. Everything is copied.
 * Errors: PL_ERR_INVALID_ARGUMENT (NULL engine/prompt, empty prompt, invalid UTF-8, a bad
 * sampling value: the message names the field; no tokenizer loaded), PL_ERR_TOO_LONG
 * (prompt + max_tokens > max_model_len), PL_ERR_QUEUE_FULL (REJECT_NEWEST policy),
 * PL_ERR_OUT_OF_MEMORY. A refused request leaves no trace. Thread-safe (see Threads). */
PL_API pl_status pl_engine_submit_request(pl_engine *e, const char *prompt,
                                          const pl_sampling_params *params,
                                          pl_request_id *out_id);

/* As pl_engine_submit_request, with token ids (used as given: no BOS is added). Ids outside
 * the vocabulary and n_ids == 0 are PL_ERR_INVALID_ARGUMENT. */
PL_API pl_status pl_engine_submit_tokens(pl_engine *e, const int32_t *ids, size_t n_ids,
                                         const pl_sampling_params *params,
                                         pl_request_id *out_id);

/* Finishes a request wherever it is (waiting, running, preempted) with finish reason abort;
 * it is reported by the next step. PL_ERR_NOT_FOUND for an unknown or already finished id.
 * Thread-safe. */
PL_API pl_status pl_engine_abort(pl_engine *e, pl_request_id id);

/* A finished request. */
typedef struct pl_completion {
    pl_request_id id;
    int index;                 /* sample index in [0, n) for n > 1 */
    int32_t *prompt_ids;       /* (n_prompt_ids) */
    size_t n_prompt_ids;
    int32_t *output_ids;       /* (n_output_ids), including a final EOS/stop id */
    size_t n_output_ids;
    char *text;                /* output text, stop string excluded ("" without tokenizer) */
    pl_finish_reason finish_reason;
    size_t n_cached_prompt_ids;/* prompt tokens served from the prefix cache */
    int n_preemptions;
    double queue_s;            /* submit -> first scheduled */
    double ttft_s;             /* submit -> first output token */
    double total_s;            /* submit -> finished */
} pl_completion;

/* What one step produced: new text for streaming and the requests that finished. */
typedef struct pl_stream_delta {
    pl_request_id id;
    int index;
    int32_t token;             /* the token appended this step */
    const char *text;          /* new complete UTF-8 text (may be ""), engine-owned */
    size_t text_len;
} pl_stream_delta;

typedef struct pl_step_result {
    const pl_stream_delta *deltas;   /* (n_deltas) */
    size_t n_deltas;
    const pl_completion *finished;   /* (n_finished) */
    size_t n_finished;
    int n_scheduled_seqs;            /* sequences computed this step */
    int n_scheduled_tokens;          /* tokens computed this step */
    int n_preempted;                 /* preemptions this step */
} pl_step_result;

/* Runs one scheduling step and forward pass. *out (may be NULL) is engine-owned, valid until
 * the next pl_engine_step/pl_engine_run/pl_engine_destroy. With nothing to do it returns PL_OK
 * with an empty result. Errors: PL_ERR_BACKEND (the running requests finish with reason
 * error and are reported; the engine stays usable), PL_ERR_OUT_OF_MEMORY. */
PL_API pl_status pl_engine_step(pl_engine *e, pl_step_result *out);

/* Steps until no work is pending and returns every request finished meanwhile, in submit
 * order (then sample index). *out_completions is caller-owned: free with
 * pl_completions_free(*out_completions, *out_n). Errors as pl_engine_step; on an error
 * *out_completions and *out_n are still set, to what finished before it (free them as
 * above), and the requests not finished stay in the engine: call again to go on. */
PL_API pl_status pl_engine_run(pl_engine *e, pl_completion **out_completions, size_t *out_n);
PL_API void pl_completions_free(pl_completion *c, size_t n); /* NULL is a no-op */

/* True while any request is waiting, running or not yet reported. */
PL_API bool pl_engine_has_pending_work(const pl_engine *e);

typedef struct pl_metrics {
    uint64_t requests_finished;
    uint64_t prompt_tokens;        /* prompt tokens of finished requests (once per request) */
    uint64_t prompt_tokens_computed; /* prompt tokens actually computed (no cache hits) */
    uint64_t output_tokens;
    uint64_t steps;
    uint64_t preemptions;
    double elapsed_s;              /* time spent inside pl_engine_step */
    double mean_batch_seqs;        /* sequences per step */
    double mean_batch_tokens;      /* tokens per step */
    double throughput_tok_s;       /* (prompt + output tokens) / elapsed_s */
    double output_tok_s;
    double mean_latency_s;         /* submit -> finished */
    double ttft_mean_s, ttft_p50_s, ttft_p99_s;
    double tpot_mean_s, tpot_p50_s, tpot_p99_s; /* time per output token after the first */
    int n_waiting, n_running;     /* now */
    int n_preempted;              /* preempted by the latest step (back in the waiting queue) */
    int kv_blocks_total, kv_blocks_free, kv_blocks_used;
    double kv_usage, kv_usage_peak;
    double prefix_cache_hit_rate;  /* hit tokens / queried tokens */
    int block_size;
    int max_model_len;
    int vocab_size;
} pl_metrics;

/* Snapshot of counters since create. */
PL_API void pl_engine_metrics(const pl_engine *e, pl_metrics *out);

/* How many requests of this shape the KV pool holds at once (capacity's one source of truth).
 * PL_ERR_INVALID_ARGUMENT for zero lengths, PL_ERR_TOO_LONG beyond max_model_len. */
PL_API pl_status pl_engine_capacity(const pl_engine *e, size_t prompt_len, size_t max_tokens,
                                    size_t *out_requests);

/* Tokenizes text as submit would (with BOS). *out_ids: caller frees with pl_free_ids.
 * PL_ERR_INVALID_ARGUMENT without a tokenizer or for invalid text. */
PL_API pl_status pl_engine_tokenize(const pl_engine *e, const char *text, int32_t **out_ids,
                                    size_t *out_n);
PL_API void pl_free_ids(int32_t *ids);

/* ------------------------------------------------------------------------------------------
 * Profiling
 * ---------------------------------------------------------------------------------------- */

#define PL_PROFILE_MAX 16

/* Time spent in one phase of the step or one kind of op of the forward pass. */
typedef struct pl_profile_entry {
    const char *name;  /* "schedule", "matmul", ...; static storage */
    double seconds;
    uint64_t calls;
    double bytes;      /* estimated bytes moved (matmul: weights + activations; attention: KV) */
    double flops;      /* estimated floating-point operations (matmul, attention) */
} pl_profile_entry;

typedef struct pl_profile {
    /* phases of a step: drain, schedule, build_batch, forward, sample, detokenize (append the
     * drawn tokens: detokenise, stop checks, stream deltas), output (completions) */
    pl_profile_entry phases[PL_PROFILE_MAX];
    int n_phases;
    /* op kinds inside the forward pass (only while profiling is on: each op is synced) */
    pl_profile_entry ops[PL_PROFILE_MAX];
    int n_ops;
    uint64_t steps;
    double step_seconds;  /* total time inside pl_engine_step */
} pl_profile;

/* Turns profiling on or off. On: every phase of every step, and every op of the forward pass
 * (each followed by a backend sync so device time lands on its op), is timed with a monotonic
 * clock; with trace_path, each step's phases and ops are written as Chrome trace-event JSON
 * (open in Perfetto or chrome://tracing) with counters for batch size, tokens and KV usage;
 * the file is complete after profiling is turned off or the engine destroyed. Phase times are
 * always collected (they cost two clock reads per phase). Errors: PL_ERR_IO (trace file). */
PL_API pl_status pl_engine_set_profiling(pl_engine *e, bool on, const char *trace_path);
/* Totals since the last reset. */
PL_API void pl_engine_get_profile(const pl_engine *e, pl_profile *out);
PL_API void pl_engine_reset_profile(pl_engine *e);

/* Bytes of matrix weights the model streams per forward pass, and parameters in matrix
 * products per token (2x this = matmul FLOPs per token): for roofline figures. */
PL_API size_t pl_engine_weight_bytes(const pl_engine *e);
PL_API size_t pl_engine_matmul_params(const pl_engine *e);

#ifdef __cplusplus
}
#endif
#endif /* PAGELLM_H */
