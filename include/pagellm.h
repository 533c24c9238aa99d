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
 *   pl_engine_destroy, pl_engine_metrics). pl_engine_submit_request,
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
    /* SentencePiece .model; NULL = look beside the model, else run on token ids only. */
    const char *tokenizer_path;
    pl_dtype weight_dtype;     /* AUTO keeps the stored type; F32/F16/BF16 convert at load */
    pl_dtype kv_dtype;         /* AUTO: f32 on CPU backends, f16 on CUDA */
    uint64_t dummy_seed;       /* weight seed for dummy: models */

    pl_backend_kind backend;
    int n_threads;             /* CPU backend threads; 0 = all cores */
    int cuda_device;           /* CUDA device ordinal */

    /* KV cache */
    int block_size;            /* token slots per KV block: a power of two in [1, 256]; 16 */
    int max_num_blocks;        /* 0 = derive from memory_threshold */
    double memory_threshold;   /* fraction of (free) memory the engine may use, in (0, 1]; 0.9 */
    size_t memory_limit_bytes; /* CPU: memory to size the KV pool from; 0 = physical memory */
    bool enable_prefix_caching;/* automatic prefix caching; true */

    /* Scheduling */
    int max_batch_size;        /* sequences per step; 32 */
    int max_num_seqs;          /* sequences running (holding KV) at once; 256 */
    int max_total_tokens;      /* new tokens per step (the token budget); 4096 */
    int max_model_len;         /* prompt + output limit; 0 = the model's */
    bool enable_chunked_prefill;   /* cut long prompts into chunks; true */
    int long_prefill_threshold;    /* max tokens one prompt takes per step; 0 = no cap */
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

#ifdef __cplusplus
}
#endif
#endif /* PAGELLM_H */
