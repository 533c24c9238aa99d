/*
 * pagellm.h - the public C API of pagellm, a paged-KV LLM inference engine.
 *
 * This is the only public header. It uses libc types only.
 *
 * A whole program:
 *
 *     pl_engine_config cfg;
 *     pl_engine_config_default(&cfg);
 *     cfg.model_path = "stories260K.bin";       // required: there is no default model
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
 * Binary compatibility (docs/api.md says why this scheme)
 * - Every struct the caller allocates starts with `size_t struct_size`: the struct's size as
 *   the caller's program was compiled. Structs the caller fills (pl_engine_config,
 *   pl_sampling_params) get it from their *_default function, which is inline here so it
 *   records the caller's sizeof; the library refuses a size it does not know (0: the struct
 *   was never defaulted; another size: not a layout any pagellm version had). A program built
 *   against an older pagellm.h passes its shorter struct and gets the defaults of the fields
 *   it does not know. Structs the library fills (pl_metrics, pl_model_info, pl_profile,
 *   pl_step_result) are written through inline wrappers that pass sizeof: the library writes
 *   at most that many bytes and sets struct_size to the bytes it wrote.
 * - Arrays the library allocates (pl_completion, pl_stream_delta, pl_token_logprobs) keep
 *   their layout until PL_VERSION_MAJOR changes.
 *
 * Threads
 * - One engine is stepped by one thread at a time (pl_engine_step, pl_engine_run,
 *   pl_engine_wait, pl_engine_destroy, pl_engine_metrics, pl_engine_latency_histogram,
 *   pl_engine_has_pending_work, the profiling calls). pl_engine_submit_request,
 *   pl_engine_submit_tokens, pl_engine_abort, pl_engine_wake, pl_engine_occupancy,
 *   pl_engine_health and the read-only queries (tokenize, detokenize, capacity, model info)
 *   may be called from any thread, concurrently with each other and with the stepping
 *   thread.
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

/* Every status, once: X(NAME, value, string). The enum, pl_status_name and pl_status_string
 * are generated from it (libuv's UV_ERRNO_MAP). */
#define PL_STATUS_MAP(X)                                                                       \
    X(OK, 0, "success")                                                                        \
    /* a NULL pointer, out-of-range value or unknown name */                                   \
    X(ERR_INVALID_ARGUMENT, -1, "invalid argument")                                            \
    /* host or device allocation failed */                                                     \
    X(ERR_OUT_OF_MEMORY, -2, "out of memory")                                                  \
    /* a file could not be opened, read or mapped */                                           \
    X(ERR_IO, -3, "input/output error")                                                        \
    /* a file is malformed, truncated or inconsistent */                                       \
    X(ERR_FORMAT, -4, "malformed file")                                                        \
    /* valid, but not supported by this build or backend */                                    \
    X(ERR_UNSUPPORTED, -5, "not supported")                                                    \
    /* an unknown request id, file, tensor or field name */                                    \
    X(ERR_NOT_FOUND, -6, "not found")                                                          \
    /* prompt + max_tokens exceeds max_model_len, or needs more KV blocks than exist */        \
    X(ERR_TOO_LONG, -7, "request too long")                                                    \
    /* the waiting queue is full (REJECT_NEWEST policy) */                                     \
    X(ERR_QUEUE_FULL, -8, "waiting queue full")                                                \
    /* the compute backend failed (a CUDA error, ...) */                                       \
    X(ERR_BACKEND, -9, "backend failure")

typedef enum pl_status {
#define PL_STATUS_ENUM_(name, value, text) PL_##name = value,
    PL_STATUS_MAP(PL_STATUS_ENUM_)
#undef PL_STATUS_ENUM_
} pl_status;

/* "PL_ERR_IO". Static storage; an unknown code gives "PL_ERR_UNKNOWN". */
PL_API const char *pl_status_name(pl_status s);
/* "input/output error". Static storage; an unknown code gives "unknown status". */
PL_API const char *pl_status_string(pl_status s);
/* The detail of this thread's most recent failure, e.g. "model.bin: truncated at byte 4096";
 * "" when none. Thread-owned, valid until this thread's next pagellm call. */
PL_API const char *pl_last_error(void);

/* How a message names the fields it is about: as the C structs' members
 * ("config.max_total_tokens", what pl_last_error says), as the command line's flags
 * ("--max-total-tokens"; the field's name where it has no flag) or as JSON keys and keyword
 * arguments: vLLM's name where the field has one, its first alias ("max_num_batched_tokens",
 * "stop_token_ids"), else its own ("block_size"). */
typedef enum pl_naming {
    PL_NAMING_C = 0,
    PL_NAMING_FLAG = 1,
    PL_NAMING_JSON = 2,
} pl_naming;
/* pl_last_error() with the fields it names written the given way: an interface shows its
 * users the names they type ("--max-total-tokens = 2: must be >= --max-batch-size (4)").
 * Thread-local, valid until this thread's next call into pagellm. */
PL_API const char *pl_last_error_as(pl_naming naming);

/* Why a request finished: X(NAME, value, name). */
#define PL_FINISH_REASON_MAP(X)                                                                \
    X(NONE, 0, "none")             /* not finished */                                          \
    X(STOP, 1, "stop")             /* EOS, a stop token id or a stop string */                 \
    X(LENGTH, 2, "length")         /* max_tokens generated, or max_model_len reached */        \
    X(ABORT, 3, "abort")           /* pl_engine_abort */                                       \
    X(OVERLOADED, 4, "overloaded") /* dropped from a full queue (DROP_OLDEST policy) */        \
    X(ERROR, 5, "error")           /* the backend failed while it ran */

typedef enum pl_finish_reason {
#define PL_FINISH_ENUM_(name, value, text) PL_FINISH_##name = value,
    PL_FINISH_REASON_MAP(PL_FINISH_ENUM_)
#undef PL_FINISH_ENUM_
} pl_finish_reason;

/* "stop", "length", "abort", "overloaded", "error", "none". Static storage. */
PL_API const char *pl_finish_reason_name(pl_finish_reason r);

/* ------------------------------------------------------------------------------------------
 * Enumerations used by the configuration
 * ---------------------------------------------------------------------------------------- */

typedef enum pl_backend_kind {
    PL_BACKEND_CPU = 0,  /* "cpu": the fast CPU backend: threads, SIMD, BLAS */
    PL_BACKEND_REF = 1,  /* "ref": the naive reference backend: the oracle; slow */
    PL_BACKEND_CUDA = 2, /* "cuda": NVIDIA GPU: own kernels + cuBLAS; PL_ERR_UNSUPPORTED
                            without CUDA */
} pl_backend_kind;

/* Storage type of weights (and of the KV cache on backends that support it). */
typedef enum pl_dtype {
    PL_DTYPE_AUTO = 0, /* "auto": as stored in the file (weights) or the backend's choice
                          (KV cache) */
    PL_DTYPE_F32 = 1,  /* "f32" */
    PL_DTYPE_F16 = 2,  /* "f16" */
    PL_DTYPE_BF16 = 3, /* "bf16" */
    /* Weights only (weight_dtype), and only for dummy: models, whose blocks are drawn
     * directly in the type (quantise a file with pl_model_quantize / `pagellm quantize`): */
    PL_DTYPE_Q8_0 = 4,   /* "q8_0" */
    PL_DTYPE_Q4_0 = 5,   /* "q4_0" */
    PL_DTYPE_Q4_K = 6,   /* "q4_k" */
    PL_DTYPE_Q5_K = 7,   /* "q5_k" */
    PL_DTYPE_Q6_K = 8,   /* "q6_k" */
    PL_DTYPE_Q4_K_M = 9, /* "q4_k_m": llama.cpp's mix (Q4_K, Q6_K for some tensors) */
    PL_DTYPE_Q5_K_M = 10, /* "q5_k_m" */
} pl_dtype;

/* How the ranks of tensor parallelism talk (docs/distributed.md). */
typedef enum pl_dist_backend {
    PL_DIST_AUTO = 0,    /* "auto": under mpirun nccl (with --backend cuda, when built in) or
                            mpi; otherwise threads */
    PL_DIST_MPI = 1,     /* "mpi": one process per rank, started by mpirun; host buffers */
    PL_DIST_NCCL = 2,    /* "nccl": as mpi, with the all-reduces and the logits gather on the
                            GPUs over NCCL */
    PL_DIST_THREADS = 3, /* "threads": every rank a thread of this process */
} pl_dist_backend;

/* What submit does when every running slot (max_num_seqs) and waiting slot (max_waiting) is
 * taken. */
typedef enum pl_overflow_policy {
    PL_OVERFLOW_REJECT_NEWEST = 0, /* "reject-newest": submit fails with PL_ERR_QUEUE_FULL */
    PL_OVERFLOW_DROP_OLDEST = 1,   /* "drop-oldest": the oldest waiting request finishes as
                                      "overloaded" */
} pl_overflow_policy;

/* ------------------------------------------------------------------------------------------
 * Field tables
 *
 * Each field of pl_engine_config and pl_sampling_params is declared once, in the tables
 * below; the structs, the defaults, the range checks (and their messages), the descriptors
 * (pl_engine_config_fields), the setters by name from text or JSON and the command line's
 * flags and help are all generated from them. A row is
 *
 *     X(KIND, C type, name, default, range, flag, short flag, value name, help)
 *
 * KIND     BOOL, INT, U64, SIZE (bytes; text may say 512M, 4GiB), DOUBLE, FLOAT, STRING,
 *          ENUM (text and JSON use the names in quotes in the enum's comments), IDS (a list
 *          of token ids: pointer + n_<name>), STRINGS (a list of strings: pointer +
 *          n_<name>), OPT_U64 (a number that may be absent: has_<name> says), BIAS (token
 *          ids with a number each, pl_logit_bias: pointer + n_<name>; text "ID:BIAS,...",
 *          JSON an object {"ID": BIAS} as OpenAI's logit_bias).
 * range    PL_RANGE(lo, hi) is [lo, hi]; PL_RANGE_OC is (lo, hi], PL_RANGE_CO is [lo, hi);
 *          PL_RANGE_NONE for names, strings and booleans. For lists, the number of elements.
 * flag     the command line's long flag ("--block-size"); for BOOL it sets true, and
 *          "--no-" + the flag without "--" or "--enable-" sets false.
 * ---------------------------------------------------------------------------------------- */

#define PL_FIELD_DECL_BOOL(ctype, name) bool name;
#define PL_FIELD_DECL_INT(ctype, name) int name;
#define PL_FIELD_DECL_U64(ctype, name) uint64_t name;
#define PL_FIELD_DECL_SIZE(ctype, name) size_t name;
#define PL_FIELD_DECL_DOUBLE(ctype, name) double name;
#define PL_FIELD_DECL_FLOAT(ctype, name) float name;
#define PL_FIELD_DECL_STRING(ctype, name) const char *name;
#define PL_FIELD_DECL_ENUM(ctype, name) ctype name;
#define PL_FIELD_DECL_IDS(ctype, name) const int32_t *name; size_t n_##name;
#define PL_FIELD_DECL_STRINGS(ctype, name) const char *const *name; size_t n_##name;
#define PL_FIELD_DECL_OPT_U64(ctype, name) uint64_t name; bool has_##name;
#define PL_FIELD_DECL_BIAS(ctype, name) const pl_logit_bias *name; size_t n_##name;

/* One entry of a BIAS field: bias is added to token's logit. */
typedef struct pl_logit_bias {
    int32_t token;
    float bias;
} pl_logit_bias;
#define PL_FIELD_DECL_(kind, ctype, name, ...) PL_FIELD_DECL_##kind(ctype, name)

/* Engine configuration. The model is required; everything else has a default. Strings are
 * borrowed: pl_engine_create reads them and keeps no pointer. */
#define PL_ENGINE_CONFIG_FIELDS(X)                                                             \
    X(STRING, const char *, model_path, NULL, PL_RANGE_NONE, "--model", 'm', "PATH",           \
      "model (required): a llama2.c .bin file, a Hugging Face directory (config.json + "       \
      "safetensors: Llama, Mistral, Qwen2, Qwen3, Mixtral, Qwen2-MoE, Qwen3-MoE, Gemma 2, "    \
      "Gemma 3, Phi-3), a GGUF file (llama, qwen2, qwen3, qwen2moe, qwen3moe, gemma2, gemma3, " \
      "phi3; its own tokenizer), or dummy:NAME for seeded random weights (dummy:tiny, "        \
      "dummy:stories15m, dummy:stories110m, dummy:tinyllama-1.1b, dummy:llama2-7b, "           \
      "dummy:mixtral-mini)")                                                                    \
    X(STRING, const char *, tokenizer_path, NULL, PL_RANGE_NONE, "--tokenizer", 0, "PATH",     \
      "tokenizer: a tokenizer.json (tokenizer_config.json read beside it), a directory "     \
      "holding one, a SentencePiece .model, or a GGUF file's vocabulary; unset: the model's "  \
      "(a GGUF file's own; a Hugging Face directory's tokenizer.json, else tokenizer.model; "  \
      "beside a llama2.c file "                                                                \
      "tok<vocab>.model, else tokenizer.model), else token ids only")            \
    X(STRING, const char *, chat_template, NULL, PL_RANGE_NONE, "--chat-template", 0,          \
      "FILE", "Jinja chat template (a file, or the template text itself) used instead of the "  \
      "model's; unset: the tokenizer's (tokenizer_config.json or GGUF metadata)")              \
    X(ENUM, pl_dtype, weight_dtype, PL_DTYPE_AUTO, PL_RANGE_NONE, "--dtype", 0, "TYPE",        \
      "weight storage: auto keeps the file's type; f32/f16/bf16 convert at load; a "         \
      "quantised type (q8_0, q4_0, q4_k, q5_k, q6_k, q4_k_m, q5_k_m) draws a dummy: model's "  \
      "blocks directly (files: pagellm quantize)")                                             \
    X(ENUM, pl_dtype, kv_dtype, PL_DTYPE_AUTO, PL_RANGE_NONE, "--kv-dtype", 0, "TYPE",         \
      "KV cache elements: auto is f16 (half the bytes attention reads); f32 makes greedy "     \
      "output independent of batching. By backend: cpu f32, f16; ref and cuda also bf16")     \
    X(U64, uint64_t, dummy_seed, 1234, PL_RANGE_NONE, "--weight-seed", 0,                      \
      "N", "seed of the weights of dummy: models")                                             \
    X(ENUM, pl_backend_kind, backend, PL_BACKEND_CPU, PL_RANGE_NONE, "--backend", 0, "NAME",   \
      "compute backend; ref is the slow, plain oracle and cuda needs a CUDA build")            \
    X(INT, int, n_threads, 0, PL_RANGE(0, 1024), "--threads", 't', "N",                        \
      "CPU backend threads; 0 = all cores")                                                    \
    X(INT, int, cuda_device, 0, PL_RANGE(0, 1024), "--cuda-device", 0, "N",                    \
      "CUDA device ordinal")                                                                   \
    X(INT, int, block_size, 16, PL_RANGE(1, 256), "--block-size", 0, "N",                      \
      "token slots per KV block, a power of two")                                              \
    X(INT, int, max_num_blocks, 0, PL_RANGE(0, 1073741824), "--max-num-blocks", 0, "N",        \
      "KV blocks in the pool; 0 = sized by kv_cache_memory_bytes, else what max_num_seqs "     \
      "sequences of max_model_len tokens use, within memory_threshold of the memory")          \
    X(DOUBLE, double, memory_threshold, 0.9, PL_RANGE_OC(0, 1), "--memory-threshold", 0, "F",  \
      "fraction of the memory the engine may use for weights, KV cache and workspace")         \
    X(SIZE, size_t, memory_limit_bytes, 0, PL_RANGE_NONE,                                      \
      "--memory-limit", 0, "SIZE",                                                             \
      "memory to size the KV pool from (bytes, or 512M, 4GiB...); 0 = the memory available "  \
      "at start (CPU: MemAvailable, so other programs are not pushed into swap) or free "      \
      "device memory. Weights larger than it are refused before loading")                      \
    X(SIZE, size_t, kv_cache_memory_bytes, 0, PL_RANGE_NONE, "--kv-cache-memory", 0, "SIZE",   \
      "KV cache size (bytes, or 512M, 4GiB...): a fixed KV space, as vLLM's "                  \
      "--kv-cache-memory (its CPU backend's VLLM_CPU_KVCACHE_SPACE); 0 = what max_num_seqs "   \
      "sequences of max_model_len tokens use, within memory_threshold of the memory")          \
    X(BOOL, bool, enable_prefix_caching, true, PL_RANGE_NONE, "--enable-prefix-caching", 0,    \
      NULL, "automatic prefix caching: requests sharing a prompt prefix share its KV blocks")  \
    X(INT, int, max_batch_size, 0, PL_RANGE(0, 65536), "--max-batch-size", 0, "N",             \
      "sequences computed per step; 0 = min(32, max_num_seqs)")                                \
    X(INT, int, max_num_seqs, 0, PL_RANGE(0, 1048576), "--max-num-seqs", 0, "N",               \
      "sequences running (holding KV) at once; 0 = max(256, max_batch_size)")                  \
    X(INT, int, max_total_tokens, 4096, PL_RANGE(1, 16777216), "--max-total-tokens", 0, "N",   \
      "new tokens per step (the token budget); at least max_batch_size")                       \
    X(INT, int, max_model_len, 0, PL_RANGE(0, 16777216), "--max-model-len", 'c', "N",          \
      "prompt + output tokens at most; 0 = the model's context length")                        \
    X(BOOL, bool, enable_chunked_prefill, true, PL_RANGE_NONE, "--enable-chunked-prefill", 0,  \
      NULL, "cut long prompts into chunks that fit the token budget; off: max_model_len "      \
      "must be <= max_total_tokens")                                                           \
    X(INT, int, long_prefill_threshold, 0, PL_RANGE(0, 16777216), "--long-prefill-threshold",  \
      0, "N", "with chunked prefill: tokens one prompt takes per step at most; 0 = no cap")    \
    X(INT, int, max_skip_head, 4, PL_RANGE(0, 1048576), "--max-skip-head", 0, "N",             \
      "requests that may pass a waiting request that does not fit before admission stops "     \
      "at it")                                                                                 \
    X(DOUBLE, double, watermark, 0.01, PL_RANGE_CO(0, 1), "--watermark", 0, "F",               \
      "fraction of the KV blocks admission keeps free for running sequences")                  \
    X(INT, int, max_waiting, 4096, PL_RANGE(0, 16777216), "--max-waiting", 0, "N",             \
      "waiting slots besides the running ones; 0 = unbounded")                                 \
    X(ENUM, pl_overflow_policy, overflow_policy, PL_OVERFLOW_REJECT_NEWEST, PL_RANGE_NONE,     \
      "--overflow-policy", 0, "NAME",                                                          \
      "when every running and waiting slot is taken: reject-newest refuses the submit, "       \
      "drop-oldest ends the oldest waiting request as overloaded")                             \
    X(BOOL, bool, log_preemptions, false, PL_RANGE_NONE, "--log-preemptions", 0, NULL,         \
      "log every preemption on stderr")                                                        \
    X(INT, int, tensor_parallel_size, 1, PL_RANGE(1, 64), "--tensor-parallel-size", 0, "N",    \
      "ranks the model is split over (Megatron-style: heads, FFN units, vocabulary); under "   \
      "mpirun the number of ranks it started, else threads of this process")                   \
    X(ENUM, pl_dist_backend, distributed_backend, PL_DIST_AUTO, PL_RANGE_NONE,                 \
      "--distributed-backend", 0, "NAME",                                                      \
      "how the ranks talk: auto is mpi under mpirun (nccl with --backend cuda when built in), " \
      "else threads; `pagellm --version` lists what is built in")                              \
    X(DOUBLE, double, distributed_timeout, 10.0, PL_RANGE_OC(0, 86400),                        \
      "--distributed-timeout", 0, "S",                                                         \
      "seconds a rank waits for the others in a collective before the engine fails (a dead "   \
      "or hung rank)")                                                                         \
    X(STRING, const char *, kv_events_config, NULL, PL_RANGE_NONE, "--kv-events-config", 0,    \
      "JSON", "prefix-cache events for routers (llm-d, Dynamo): vLLM's KVEventsConfig, e.g. "  \
      "{\"enable_kv_cache_events\": true, \"endpoint\": \"tcp://*:5557\", "                     \
      "\"replay_endpoint\": \"tcp://*:5558\"}, or one key at a time as "                       \
      "--kv-events-config.KEY VALUE; published over ZeroMQ as vLLM does (docs/server.md)")

/* The most alternatives logprobs and prompt_logprobs return per position (OpenAI's limit). */
#define PL_MAX_LOGPROBS 20

/* Sampling parameters of one request. Lists and strings are copied at submit. */
#define PL_SAMPLING_PARAMS_FIELDS(X)                                                           \
    X(INT, int, max_tokens, 100, PL_RANGE(0, 16777216), "--max-tokens", 0, "N",                \
      "output tokens at most; 0 = as many as max_model_len (and the KV pool) leave after the " \
      "prompt (llama.cpp's -n; -n itself is refused: see --n)")                                \
    X(INT, int, min_tokens, 0, PL_RANGE(0, 16777216), "--min-tokens", 0, "N",                  \
      "EOS and stop ids are ignored before this many output tokens (<= max_tokens)")           \
    X(FLOAT, float, temperature, 1.0f, PL_RANGE(0, 1e6), "--temperature", 0, "T",              \
      "softmax temperature; 0 = greedy (lowest id on ties)")                                   \
    X(FLOAT, float, top_p, 1.0f, PL_RANGE_OC(0, 1), "--top-p", 0, "P",                         \
      "nucleus: keep the most likely tokens holding this much probability; 1 = off")           \
    X(INT, int, top_k, 0, PL_RANGE(-1, 16777216), "--top-k", 0, "K",                           \
      "keep the K most likely tokens; 0 or -1 = off")                                          \
    X(FLOAT, float, min_p, 0.0f, PL_RANGE(0, 1), "--min-p", 0, "P",                            \
      "drop tokens less likely than min_p times the most likely; 0 = off")                     \
    X(FLOAT, float, repetition_penalty, 1.0f, PL_RANGE_OC(0, 1e6), "--repetition-penalty", 0,  \
      "F", "divides positive (multiplies negative) logits of tokens in prompt or output; "     \
      "1 = off")                                                                               \
    X(FLOAT, float, presence_penalty, 0.0f, PL_RANGE(-2, 2), "--presence-penalty", 0, "F",     \
      "subtracted from the logits of tokens already in the output; 0 = off")                   \
    X(FLOAT, float, frequency_penalty, 0.0f, PL_RANGE(-2, 2), "--frequency-penalty", 0, "F",   \
      "subtracted once per occurrence in the output; 0 = off")                                 \
    X(OPT_U64, uint64_t, seed, 0, PL_RANGE_NONE, "--seed", 's', "N",                           \
      "random seed: the request's draws then do not depend on the batch; unset = random")      \
    X(IDS, int32_t, stop_ids, NULL, PL_RANGE(0, 1024), "--stop-id", 0, "ID",                   \
      "token ids that end the output (the id is kept in the output ids); repeatable")          \
    X(STRINGS, const char *, stop, NULL, PL_RANGE(0, 64), "--stop", 0, "TEXT",                 \
      "strings that end the output (cut from the text, never streamed); repeatable")           \
    X(BOOL, bool, ignore_eos, false, PL_RANGE_NONE, "--ignore-eos", 0, NULL,                   \
      "keep generating past EOS (benchmarks)")                                                 \
    X(INT, int, n, 1, PL_RANGE(1, 64), "--n", 0, "N",                                          \
      "parallel samples of the prompt, sharing its KV blocks (vLLM's n; not the output "      \
      "length, which is --max-tokens)")                                                        \
    X(INT, int, priority, 0, PL_RANGE(-1000000, 1000000), "--priority", 0, "N",                \
      "lower runs first, first come first served within a priority; strict, no aging")         \
    X(INT, int, logprobs, -1, PL_RANGE(-1, PL_MAX_LOGPROBS), "--logprobs", 0, "K",             \
      "per output token, its log-probability and the K most likely tokens' (0 = only its "     \
      "own); -1 = none. From the model's raw distribution, before penalties and temperature")  \
    X(INT, int, prompt_logprobs, -1, PL_RANGE(-1, PL_MAX_LOGPROBS), "--prompt-logprobs", 0, "K", \
      "the same for every prompt token after the first; -1 = none. Such a request does not "   \
      "read the prefix cache (cached tokens would have no logits)")                            \
    X(STRING, const char *, json_schema, NULL, PL_RANGE_NONE, "--json-schema", 0, "JSON",      \
      "constrain the output to JSON that this JSON Schema accepts (docs/api.md lists the "     \
      "keywords; others are refused)")                                                         \
    X(STRING, const char *, grammar, NULL, PL_RANGE_NONE, "--grammar", 0, "GBNF",              \
      "constrain the output to this GBNF grammar (llama.cpp's format, from its root rule)")    \
    X(STRING, const char *, regex, NULL, PL_RANGE_NONE, "--regex", 0, "RE",                    \
      "constrain the whole output to match this regular expression")                          \
    X(STRINGS, const char *, choice, NULL, PL_RANGE(0, 4096), "--choice", 0, "A,B",            \
      "constrain the output to exactly one of these strings")                                  \
    X(BOOL, bool, skip_special_tokens, true, PL_RANGE_NONE, "--skip-special-tokens", 0, NULL,  \
      "special tokens (<|eot_id|>, [TOOL_CALLS]) add no text to the output "                       \
      "(--no-skip-special-tokens: their text is kept, as a tool-call parser may need)")            \
    X(BOOL, bool, include_stop_str_in_output, false, PL_RANGE_NONE,                                \
      "--include-stop-str-in-output", 0, NULL,                                                     \
      "keep the stop string that ended the output at the end of its text")                         \
    X(BIAS, pl_logit_bias, logit_bias, NULL, PL_RANGE(0, 1024), "--logit-bias", 0, "ID:BIAS",      \
      "added to a token's logit before sampling, in [-100, 100] (OpenAI's logit_bias: -100 "       \
      "bans the token); comma-separated, repeatable")                                              \
    X(INT, int, prompt_logits, -1, PL_RANGE(-1, 16777216), "--prompt-logits", 0, "P",              \
      "the full-vocabulary logits at every prompt position from P to the last (which gives "       \
      "the first output token's distribution), in the completion (API; generate does not "         \
      "print them); -1 = none. Such a request does not read the prefix cache")
/* How a chat is turned into a prompt (pl_engine_apply_chat_template and the chat submits).
 * JSON values are JSON text, parsed per call. */
#define PL_CHAT_OPTIONS_FIELDS(X)                                                              \
    X(BOOL, bool, add_generation_prompt, true, PL_RANGE_NONE, "--generation-prompt", 0, NULL,  \
      "end the prompt with the template's assistant header, so the model answers "           \
      "(--no-generation-prompt: leave it off)")                                                \
    X(STRING, const char *, tools, NULL, PL_RANGE_NONE, "--tools", 0, "JSON",                  \
      "tool definitions for the template: a JSON array (OpenAI's \"tools\"); unset: none")     \
    X(STRING, const char *, chat_template_kwargs, NULL, PL_RANGE_NONE, "--chat-template-kwargs", \
      0, "JSON", "more template variables: a JSON object such as {\"enable_thinking\": false}") \
    X(STRING, const char *, template_name, NULL, PL_RANGE_NONE, "--template-name", 0, "NAME",  \
      "which of the model's named templates; unset: tool_use when tools are given and the "    \
      "model has it, else the default")                                                        \
    X(STRING, const char *, chat_template, NULL, PL_RANGE_NONE, NULL, 0, "TEXT",               \
      "Jinja template text used for this call instead of the engine's")

/* Other names of fields: vLLM's engine arguments and SamplingParams where they differ from
 * pagellm's. The setters by name take them, the command line as flags ("--" and the alias,
 * with '-' or '_'), the Python package as keyword arguments. A row is A(field, "alias"). */
#define PL_ENGINE_CONFIG_ALIASES(A)                                                            \
    A(model_path, "model")                                                                     \
    A(tokenizer_path, "tokenizer")                                                             \
    A(weight_dtype, "dtype")                                                                   \
    A(kv_dtype, "kv_cache_dtype")                                                              \
    A(max_total_tokens, "max_num_batched_tokens")                                              \
    A(memory_threshold, "gpu_memory_utilization")                                              \
    A(max_num_blocks, "num_gpu_blocks_override")                                               \
    A(long_prefill_threshold, "long_prefill_token_threshold")                                  \
    A(n_threads, "threads")
#define PL_SAMPLING_PARAMS_ALIASES(A)                                                          \
    A(stop_ids, "stop_token_ids")

/* ------------------------------------------------------------------------------------------
 * Engine configuration
 * ---------------------------------------------------------------------------------------- */

typedef struct pl_engine_config {
    size_t struct_size; /* set by pl_engine_config_default; see "Binary compatibility" */
    void *storage;      /* copies made by pl_engine_config_set*; freed by _deinit */
    PL_ENGINE_CONFIG_FIELDS(PL_FIELD_DECL_)
} pl_engine_config;

/* Fills cfg with the defaults of PL_ENGINE_CONFIG_FIELDS, struct_size = struct_size and
 * storage NULL. struct_size must be a size pl_engine_config has had (else cfg->struct_size
 * is 0 and every call refuses cfg); pl_engine_config_default passes this header's. NULL is a
 * no-op. */
PL_API void pl_engine_config_init(pl_engine_config *cfg, size_t struct_size);
static inline void pl_engine_config_default(pl_engine_config *cfg) {
    pl_engine_config_init(cfg, sizeof *cfg);
}
/* Frees the copies pl_engine_config_set and _set_json made (fields set by them then dangle:
 * default again before reuse). A struct copied by assignment shares them: deinit one copy.
 * NULL is a no-op. */
PL_API void pl_engine_config_deinit(pl_engine_config *cfg);
/* This library's sizeof(pl_engine_config), for a binding that does not compile this header
 * (Python's ctypes): it allocates that many bytes (aligned for a double), passes the size to
 * pl_engine_config_init and reaches the fields by name (pl_engine_config_set*) or through
 * pl_engine_config_fields' offsets, so it never mirrors the layout. The same for the other
 * structs the caller fills: pl_sampling_params_struct_size, pl_chat_options_struct_size. */
PL_API size_t pl_engine_config_struct_size(void);

/* Checks every field and the rules between fields. Returns PL_OK, or
 * PL_ERR_INVALID_ARGUMENT (cfg NULL, a struct_size no pagellm version had, model_path unset,
 * a field out of range, or fields that contradict each other: the message names the field,
 * its value and what is allowed, e.g. "config.memory_threshold = 0: must be in (0, 1]").
 * Touches no file. */
PL_API pl_status pl_engine_config_validate(const pl_engine_config *cfg);

/* Sets the fields whose 0 means "derive from another field" as pl_engine_create will:
 * max_batch_size = min(32, max_num_seqs) and max_num_seqs = max(256, max_batch_size), each
 * only when it is 0 (a 0 max_num_seqs counts as 256 for the first). Fields that depend on
 * the model (max_model_len) or the machine (n_threads, max_num_blocks) stay 0. NULL or a bad
 * struct_size: no-op. */
PL_API void pl_engine_config_resolve(pl_engine_config *cfg);

/* ------------------------------------------------------------------------------------------
 * Sampling parameters (per request)
 * ---------------------------------------------------------------------------------------- */

typedef struct pl_sampling_params {
    size_t struct_size; /* set by pl_sampling_params_default; see "Binary compatibility" */
    void *storage;      /* copies made by pl_sampling_params_set*; freed by _deinit */
    PL_SAMPLING_PARAMS_FIELDS(PL_FIELD_DECL_)
} pl_sampling_params;

/* As pl_engine_config_init / _default / _deinit. */
PL_API void pl_sampling_params_init(pl_sampling_params *p, size_t struct_size);
static inline void pl_sampling_params_default(pl_sampling_params *p) {
    pl_sampling_params_init(p, sizeof *p);
}
PL_API void pl_sampling_params_deinit(pl_sampling_params *p);
PL_API size_t pl_sampling_params_struct_size(void); /* see pl_engine_config_struct_size */

/* Checks every field and the rules between them (min_tokens <= max_tokens, stop strings
 * non-empty, stop ids >= 0) as submit does, except that a stop id outside the model's
 * vocabulary is only found at submit. PL_ERR_INVALID_ARGUMENT naming the field. */
PL_API pl_status pl_sampling_params_validate(const pl_sampling_params *p);

/* ------------------------------------------------------------------------------------------
 * Constrained output (structured outputs)
 *
 * One of json_schema, grammar, regex and choice in pl_sampling_params makes every token the
 * request samples keep the output inside that language: before each draw the tokens that
 * would leave it get probability 0 (for greedy, seeded and n > 1 sampling alike), and once
 * the output is complete only end-of-text may follow where nothing else can. A request
 * finishes with reason "stop" when the output is complete, or "length" when max_tokens cut
 * it first. Grammars are GBNF as llama.cpp writes it; docs/api.md has the JSON Schema
 * keywords and the regex syntax.
 *
 * A constraint is compiled at submit (errors then name the problem and where: the JSON
 * pointer in the schema, the line and column of the grammar, the regex offset) and kept by
 * the engine for the next requests that give the same text; pl_grammar_compile does it ahead
 * and keeps it as long as the handle lives.
 * ---------------------------------------------------------------------------------------- */

typedef struct pl_grammar pl_grammar;
typedef struct pl_engine pl_engine; /* (declared again below, with the engine) */

/* Compiles the constraint p gives (exactly one of json_schema, grammar, regex, choice) for
 * e's tokenizer. Requests whose parameters give the same constraint text use it without
 * compiling again while the handle lives. Errors: PL_ERR_INVALID_ARGUMENT (no or several
 * constraints, a malformed or unsupported one: "json_schema at /properties/a: unsupported
 * keyword \"not\"", "grammar line 3 column 9: expecting )", "regex at offset 4: ...";
 * left recursion; an engine without a tokenizer), PL_ERR_TOO_LONG (a limit: repetition
 * counts, nesting, enum size, grammar size; named with its place), PL_ERR_OUT_OF_MEMORY.
 * Thread-safe. */
PL_API pl_status pl_grammar_compile(pl_engine *e, const pl_sampling_params *p,
                                    pl_grammar **out);
/* Releases the handle (requests using the grammar keep it alive). NULL is a no-op. */
PL_API void pl_grammar_free(pl_grammar *g);

/* The GBNF grammar pagellm compiles for a JSON Schema (schema: JSON text), so a caller can
 * embed it in a larger grammar: every rule name starts with rule_prefix (NULL or "": none;
 * letters, digits and '-'), the schema's own rule is <rule_prefix>root. A tool call for
 * several functions is then one grammar: each function's parameters converted with its own
 * prefix, and a root that chooses among the calls (docs/api.md shows one). *out_gbnf:
 * NUL-terminated, caller frees with pl_free_text. Errors as pl_grammar_compile's for a
 * json_schema. */
PL_API pl_status pl_json_schema_to_grammar(const char *schema, const char *rule_prefix,
                                           char **out_gbnf);

/* ------------------------------------------------------------------------------------------
 * Fields by name: what a command line, an HTTP server or a language binding needs
 * ---------------------------------------------------------------------------------------- */

typedef enum pl_field_kind {
    PL_FIELD_BOOL, PL_FIELD_INT, PL_FIELD_U64, PL_FIELD_SIZE, PL_FIELD_DOUBLE,
    PL_FIELD_FLOAT, PL_FIELD_STRING, PL_FIELD_ENUM, PL_FIELD_IDS, PL_FIELD_STRINGS,
    PL_FIELD_OPT_U64, PL_FIELD_BIAS,
} pl_field_kind;

/* Allowed values: [min, max], an open bound excluded ("(0, 1]"); none for names, strings,
 * booleans. The PL_RANGE* macros of the tables expand to parenthesised tuples (commas in
 * braces would split a macro argument); PL_RANGE_STRUCT(range) makes one a pl_range. */
typedef struct pl_range {
    double min, max;
    bool min_open, max_open;
    bool is_set;
} pl_range;
#define PL_RANGE(lo, hi) ((double)(lo), (double)(hi), false, false, true)
#define PL_RANGE_OC(lo, hi) ((double)(lo), (double)(hi), true, false, true)
#define PL_RANGE_CO(lo, hi) ((double)(lo), (double)(hi), false, true, true)
#define PL_RANGE_NONE (0.0, 0.0, false, false, false)
#define PL_RANGE_BRACE_(lo, hi, lo_open, hi_open, is_set) {lo, hi, lo_open, hi_open, is_set}
#define PL_RANGE_STRUCT(range) PL_RANGE_BRACE_ range

/* One row of a field table. Static storage. */
typedef struct pl_field {
    const char *name;           /* the member, and the key in JSON: "block_size" */
    pl_field_kind kind;
    size_t offset;              /* offsetof the member */
    size_t aux_offset;          /* IDS, STRINGS: offsetof n_<name>; OPT_U64: of has_<name> */
    pl_range range;             /* allowed values (lists: element counts) */
    const char *const *choices; /* ENUM: names indexed by value, NULL-terminated, each maybe
                                   with aliases after '|' ("f32|float32"); else NULL */
    const char *flag;           /* "--block-size" */
    char short_flag;            /* 'm', or 0 */
    const char *value_name;     /* "N", "PATH" (help); NULL for BOOL */
    const char *help;           /* one sentence */
} pl_field;

/* The tables, in declaration order; *out_n gets the count. Static storage. */
PL_API const pl_field *pl_engine_config_fields(size_t *out_n);
PL_API const pl_field *pl_sampling_params_fields(size_t *out_n);

/* One row of an alias table (PL_ENGINE_CONFIG_ALIASES). Static storage. */
typedef struct pl_field_alias {
    const char *alias; /* "max_num_batched_tokens" */
    const char *name;  /* the field it names: "max_total_tokens" */
} pl_field_alias;
PL_API const pl_field_alias *pl_engine_config_aliases(size_t *out_n);
PL_API const pl_field_alias *pl_sampling_params_aliases(size_t *out_n);

/* Sets a field by name from text as a command line gives it: a number ("16", "0.9"; SIZE
 * also "512M", "4GiB"), true/false (also 1/0, yes/no, on/off), an enum's name ("f16"), a
 * string (copied). A list field (IDS, STRINGS, BIAS) gets value appended (IDS:
 * comma-separated ids; BIAS: "ID:BIAS,..."). OPT_U64: a number, or "" to unset. The value
 * is checked against the field's range only (pl_*_validate checks the rules between
 * fields). name may be an alias (pl_engine_config_aliases). Copies live in the struct's
 * storage until _deinit.
 * Errors: PL_ERR_INVALID_ARGUMENT (struct_size, NULL, a malformed or out-of-range value:
 * "config.block_size: 'x' is not an integer"), PL_ERR_NOT_FOUND (no such field; the message
 * suggests the closest name), PL_ERR_OUT_OF_MEMORY. On failure the struct is unchanged. */
PL_API pl_status pl_engine_config_set(pl_engine_config *cfg, const char *name,
                                      const char *value);
PL_API pl_status pl_sampling_params_set(pl_sampling_params *p, const char *name,
                                        const char *value);
/* As _set, with the value as JSON text: true/false, a number (INT, U64, SIZE: an integer;
 * SIZE also a string as above), a string (STRING, ENUM), an array (IDS: of integers;
 * STRINGS: of strings; a single integer or string is a list of one), null (STRING, lists,
 * OPT_U64: unset). A list is replaced, not appended to. */
PL_API pl_status pl_engine_config_set_json(pl_engine_config *cfg, const char *name,
                                           const char *json);
PL_API pl_status pl_sampling_params_set_json(pl_sampling_params *p, const char *name,
                                             const char *json);
/* The value of field f in obj (a pl_engine_config or pl_sampling_params that f belongs to)
 * as JSON text, NUL-terminated, in buf; returns the length it needs (as snprintf: the text
 * is cut when that is >= cap). */
PL_API size_t pl_field_to_json(const pl_field *f, const void *obj, char *buf, size_t cap);

/* ------------------------------------------------------------------------------------------
 * Engine
 * ---------------------------------------------------------------------------------------- */

typedef struct pl_engine pl_engine;
typedef uint64_t pl_request_id; /* 0 is never a valid id */

/* Loads the model (and tokenizer) named by cfg and sizes the KV pool.
 * Errors: PL_ERR_INVALID_ARGUMENT (cfg, see pl_engine_config_validate), PL_ERR_IO,
 * PL_ERR_FORMAT, PL_ERR_NOT_FOUND (model/tokenizer), PL_ERR_UNSUPPORTED (a model feature or a
 * backend this build lacks; a GGUF tensor type this build has no weight type for),
 * PL_ERR_OUT_OF_MEMORY (the model or the KV pool does
 * not fit: the message gives the numbers), PL_ERR_BACKEND. On failure *out is untouched and
 * nothing needs cleaning up. The engine does not keep cfg's strings. */
PL_API pl_status pl_engine_create(const pl_engine_config *cfg, pl_engine **out);
PL_API void pl_engine_destroy(pl_engine *e); /* NULL is a no-op; frees all requests */

/* Queues a request. prompt: NUL-terminated UTF-8, tokenized with BOS as the model expects;
 * "" is BOS alone (the output then starts a text, as llama2.c and vLLM generate from BOS).
 * params NULL = defaults. *out_id (may be NULL) gets its id. Everything is copied.
 * Errors: PL_ERR_INVALID_ARGUMENT (NULL engine/prompt, a prompt of no tokens at all (empty,
 * and the tokenizer adds no BOS), invalid UTF-8, a bad
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

/* One alternative at a token position. */
typedef struct pl_logprob {
    int32_t token;
    float logprob;           /* natural log of its probability */
} pl_logprob;

/* Log-probabilities at one token position, from the model's raw distribution there (the
 * log-softmax of its logits, before penalties, temperature, top-k/p or min-p: vLLM's default
 * "raw_logprobs"). */
typedef struct pl_token_logprobs {
    int32_t token;           /* the token at this position (sampled, or the prompt's) */
    float logprob;           /* its log-probability */
    int32_t rank;            /* 1 + the number of tokens more likely than it */
    int32_t n_top;           /* entries in top: min(K, vocabulary) for logprobs = K */
    const pl_logprob *top;   /* (n_top) the most likely tokens, most likely first, ties by
                                lower id; NULL when n_top is 0 */
    /* What this token added to the text, NUL-terminated (NULL without a tokenizer): the
     * texts of consecutive positions join to the text itself. Output positions: the
     * sample's text (pl_completion.text, the stream's deltas joined), so a character spelt
     * over several tokens belongs to the one that completes it, a stop id or a token a stop
     * string cut away adds "", and bytes left unfinished at the end (U+FFFD) belong to the
     * last. Prompt positions: the prompt's decode, as pl_tokenizer_decode_offsets gives it
     * (with PL_DECODE_SKIP_SPECIAL). vLLM's decoded_token of the position's own token. */
    const char *text;
} pl_token_logprobs;

/* A finished request (one sample of it). */
typedef struct pl_completion {
    pl_request_id id;
    int index;                 /* sample index in [0, n) for n > 1 */
    int32_t *prompt_ids;       /* (n_prompt_ids) */
    size_t n_prompt_ids;
    int32_t *output_ids;       /* (n_output_ids), including a final EOS/stop id */
    size_t n_output_ids;
    char *text;                /* output text, stop string excluded ("" without tokenizer) */
    pl_finish_reason finish_reason;
    int32_t stop_string;       /* finished by a stop string: its index in params.stop (the
                                  first listed among those ending at the same place); else
                                  -1. (It fills what was padding: the layout is unchanged.) */
    size_t n_cached_prompt_ids;/* prompt tokens served from the prefix cache */
    int n_preemptions;
    double queue_s;            /* submit -> first scheduled */
    double ttft_s;             /* submit -> first output token */
    double total_s;            /* submit -> finished */
    /* With logprobs >= 0: one entry per output id (NULL otherwise). */
    pl_token_logprobs *logprobs;
    size_t n_logprobs;
    /* With prompt_logprobs >= 0, on sample 0 only: entry i is prompt token i + 1 (the first
     * has no context to predict it); NULL otherwise. */
    pl_token_logprobs *prompt_logprobs;
    size_t n_prompt_logprobs;
    /* With prompt_logits = P >= 0, on sample 0 only: (n_prompt_logits, vocab_size) raw logits,
     * row i those at prompt position P + i (predicting prompt token P + i + 1; the last row,
     * at the last prompt position, predicts the first output token); n_prompt_logits =
     * n_prompt_ids - P (0 when P >= n_prompt_ids: NULL). NULL otherwise. */
    float *prompt_logits;
    size_t n_prompt_logits;
} pl_completion;

/* What one step appended to one sample: new text for streaming. */
typedef struct pl_stream_delta {
    pl_request_id id;
    int index;
    int32_t token;             /* the token appended this step (-1: only held-back text) */
    const char *text;          /* new complete UTF-8 text (may be ""), engine-owned */
    size_t text_len;
    const pl_token_logprobs *logprobs; /* the token's, with logprobs >= 0; else NULL */
} pl_stream_delta;

typedef struct pl_step_result {
    size_t struct_size;              /* bytes the library filled */
    const pl_stream_delta *deltas;   /* (n_deltas) */
    size_t n_deltas;
    const pl_completion *finished;   /* (n_finished) */
    size_t n_finished;
    int n_scheduled_seqs;            /* sequences computed this step */
    int n_scheduled_tokens;          /* tokens computed this step */
    int n_preempted;                 /* preemptions this step */
} pl_step_result;

/* Runs one scheduling step and forward pass. *out (may be NULL) and everything it points to
 * are engine-owned, valid until the next pl_engine_step/pl_engine_run/pl_engine_destroy.
 * With nothing to do it returns PL_OK at once with an empty result: a thread that only
 * steps should sleep in pl_engine_wait between steps. Errors: PL_ERR_BACKEND (the running
 * requests finish with reason error and are reported; the engine stays usable),
 * PL_ERR_OUT_OF_MEMORY. */
PL_API pl_status pl_engine_step_sized(pl_engine *e, pl_step_result *out, size_t out_size);
static inline pl_status pl_engine_step(pl_engine *e, pl_step_result *out) {
    return pl_engine_step_sized(e, out, sizeof *out);
}

/* Steps until no work is pending and returns every request finished meanwhile, in submit
 * order (then sample index). *out_completions is caller-owned: free with
 * pl_completions_free(*out_completions, *out_n). Errors as pl_engine_step; on an error
 * *out_completions and *out_n are still set, to what finished before it (free them as
 * above), and the requests not finished stay in the engine: call again to go on. It never
 * idles: with no work it returns at once (a serving loop uses pl_engine_wait and step). */
PL_API pl_status pl_engine_run(pl_engine *e, pl_completion **out_completions, size_t *out_n);
PL_API void pl_completions_free(pl_completion *c, size_t n); /* NULL is a no-op */

/* True while any request is waiting, running or not yet reported. */
PL_API bool pl_engine_has_pending_work(const pl_engine *e);

/* Sleeps until there is work for pl_engine_step (a request submitted or aborted, or one
 * still in the engine), pl_engine_wake is called, or timeout_s seconds pass (< 0: no
 * timeout; 0: just look). A condition variable behind the intake: no polling. *out_has_work
 * (may be NULL) says whether a step would do something. Call it from the stepping thread.
 * Errors: PL_ERR_INVALID_ARGUMENT (NULL engine, NaN timeout). */
PL_API pl_status pl_engine_wait(pl_engine *e, double timeout_s, bool *out_has_work);
/* Makes a pl_engine_wait in progress (or the next one) return at once, e.g. to shut a
 * serving loop down. Thread-safe; NULL is a no-op. */
PL_API void pl_engine_wake(pl_engine *e);

typedef struct pl_metrics {
    size_t struct_size;            /* bytes the library filled */
    uint64_t requests_finished;    /* requests whose every sample finished */
    uint64_t samples_finished;     /* samples (completions): n per request */
    uint64_t prompt_tokens;        /* prompt tokens of requests that have their first output
                                      token, counted in that step, once per request */
    uint64_t prompt_tokens_computed; /* prompt tokens actually computed (no cache hits) */
    uint64_t output_tokens;        /* counted in the step that draws them */
    uint64_t steps;
    uint64_t preemptions;
    double elapsed_s;              /* time spent inside pl_engine_step */
    double mean_batch_seqs;        /* sequences per step */
    double mean_batch_tokens;      /* tokens per step */
    double throughput_tok_s;       /* (prompt + output tokens) / elapsed_s */
    double output_tok_s;
    double mean_latency_s;         /* submit -> finished, per sample */
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
    uint64_t prefix_cache_queries; /* prompt tokens looked up in the prefix cache */
    uint64_t prefix_cache_hits;    /* of which were found cached */
    /* finished samples by finish reason, indexed by pl_finish_reason (room for 8 reasons) */
    uint64_t samples_by_reason[8];
    /* Tensor parallelism: this process's (rank 0's) collectives since create, bytes counted
     * as nccl-tests counts them (an all-reduce of n floats is 4n bytes); 0 with one rank.
     * Each computed token costs 2 x n_layers x dim x 4 bytes of all-reduce on every rank. */
    int tensor_parallel_size;
    uint64_t tp_all_reduce_calls, tp_all_reduce_bytes;
    uint64_t tp_all_gather_calls, tp_all_gather_bytes;   /* the logits */
    uint64_t tp_broadcast_calls, tp_broadcast_bytes;     /* the step plans and heartbeats */
    double tp_comm_s;             /* seconds inside collectives */
    double tp_comm_last_step_s;   /* of those, in the latest step's forward pass */
    uint64_t tokens_computed;     /* tokens through the model (prompt chunks and decodes; a
                                     preempted sequence's recomputed ones too) */
} pl_metrics;

/* Snapshot of counters since create. NULL e gives zeros; NULL out is a no-op. */
PL_API void pl_engine_metrics_sized(const pl_engine *e, pl_metrics *out, size_t out_size);
static inline void pl_engine_metrics(const pl_engine *e, pl_metrics *out) {
    pl_engine_metrics_sized(e, out, sizeof *out);
}

/* The latencies the engine records, each as a histogram in constant memory (log-scale bins
 * 1% wide, from 1 us to about 1000 s). */
typedef enum pl_latency {
    PL_LATENCY_TTFT = 0,  /* per sample: submit -> its first output token */
    PL_LATENCY_ITL = 1,   /* per output token after a sample's first: time since the one before */
    PL_LATENCY_TPOT = 2,  /* per sample with 2+ output tokens: (total - ttft) / (tokens - 1) */
    PL_LATENCY_E2E = 3,   /* per sample: submit -> finished */
    PL_LATENCY_QUEUE = 4, /* per request: submit -> first scheduled */
} pl_latency;

/* One latency histogram in Prometheus' shape: out_counts[i] (n_bounds entries) = observations
 * <= bounds[i] seconds (cumulative; bounds strictly ascending), *out_count = all observations,
 * *out_sum = their sum in seconds (out_counts may be NULL when n_bounds is 0; out_count and
 * out_sum may be NULL). An observation is counted by its bin's middle, so one within 1% of a
 * bound may land on either side of it. Counts since create. Call it from the stepping thread
 * (as pl_engine_metrics). Errors: PL_ERR_INVALID_ARGUMENT (NULL engine, an unknown kind,
 * bounds NULL with n_bounds > 0, NaN or not ascending: the index named). */
PL_API pl_status pl_engine_latency_histogram(const pl_engine *e, pl_latency kind,
                                             const double *bounds, size_t n_bounds,
                                             uint64_t *out_counts, uint64_t *out_count,
                                             double *out_sum);

/* What the engine holds now, readable from any thread at the cost of one lock (a server's
 * health check and admission). Waiting counts include requests submitted since the latest
 * step; running counts and KV figures are as of the latest step. */
typedef struct pl_occupancy {
    size_t struct_size;   /* bytes the library filled */
    int n_waiting;        /* sequences waiting to run (new, and preempted ones) */
    int n_waiting_new;    /* of which never ran (max_waiting bounds those beyond the free
                             running slots) */
    int n_running;        /* sequences holding KV blocks */
    int max_waiting;      /* config.max_waiting (0: unbounded) */
    int kv_blocks_total, kv_blocks_used;
    double kv_usage;      /* used / total */
    /* running slots (max_num_seqs) no sequence holds or will take back, as of the latest
     * step: admission takes that many new requests beyond max_waiting, so the waiting queue
     * proper is max(0, n_waiting_new - n_free_slots) */
    int n_free_slots;
} pl_occupancy;

/* PL_OK while the engine can run requests; PL_ERR_BACKEND once its backend was lost to a
 * device fault (a CUDA illegal address, say: the device is unusable for the rest of the
 * process), with the backend's message in pl_last_error(). From then on every submit and step
 * fails with PL_ERR_BACKEND and that message, and every request still held finished with
 * PL_FINISH_ERROR; the process must be restarted to use the device again. Errors a backend
 * recovers from (out of memory, a failed launch) fail only their step's requests and leave
 * the engine healthy. With tensor parallelism, also PL_ERR_BACKEND once a rank died or hung
 * (the message names the rank and the collective). Thread-safe (a server's /health reads it). */
PL_API pl_status pl_engine_health(const pl_engine *e);

/* Fills *out (NULL: no-op; NULL e gives zeros). Thread-safe. */
PL_API void pl_engine_occupancy_sized(const pl_engine *e, pl_occupancy *out, size_t out_size);
static inline void pl_engine_occupancy(const pl_engine *e, pl_occupancy *out) {
    pl_engine_occupancy_sized(e, out, sizeof *out);
}

/* How many requests of this shape the KV pool holds at once (capacity's one source of truth).
 * PL_ERR_INVALID_ARGUMENT for zero lengths, PL_ERR_TOO_LONG beyond max_model_len. */
PL_API pl_status pl_engine_capacity(const pl_engine *e, size_t prompt_len, size_t max_tokens,
                                    size_t *out_requests);

/* Facts about the loaded model and the engine built around it. */
typedef struct pl_model_info {
    size_t struct_size;         /* bytes the library filled */
    const char *name;           /* file name or dummy preset; engine-owned, valid until
                                   pl_engine_destroy */
    const char *architecture;   /* config.json's model_type: "llama" (also llama2.c files),
                                   "mistral", "qwen2", "qwen3"; static */
    int vocab_size;
    int bos_id, eos_id;         /* -1 when the model has none */
    int eot_id;                 /* end of turn (chat models): the end-of-generation token
                                   spelt as a turn marker (<|eot_id|>, <|im_end|>, <|end|>,
                                   <end_of_turn>), even when it is the EOS too, else the first
                                   one besides EOS; -1 when none */
    int context_length;         /* the model's own maximum sequence length */
    int max_model_len;          /* what this engine allows (config.max_model_len or the
                                   model's) */
    pl_dtype weight_dtype;      /* matrices as loaded (PL_DTYPE_F32/F16/BF16); PL_DTYPE_AUTO
                                   when they are block-quantised or of several types:
                                   weight_type names them */
    pl_dtype kv_dtype;          /* KV cache elements as the backend stores them */
    uint64_t n_params;          /* every weight: embeddings, matrices, norms (tied
                                   embeddings once) */
    uint64_t weight_bytes;      /* of those, as loaded on the host */
    int n_layers, dim, n_heads, n_kv_heads, head_dim, hidden_dim;
    size_t kv_bytes_per_token;  /* K and V of every layer for one token (on each rank: its KV
                                   heads, with tensor parallelism) */
    int block_size;
    int kv_blocks;              /* the KV pool */
    uint64_t kv_tokens;         /* kv_blocks * block_size */
    int max_batch_size, max_num_seqs; /* as resolved from the config */
    /* kv_tokens / max_model_len: how many requests of max_model_len tokens the pool holds
     * at once (the figure vLLM logs as "maximum concurrency for N tokens per request") */
    double max_concurrency;
    /* The matrices' types as loaded (norms and biases, always f32, aside), by how many weights
     * each holds, most first, joined by '+': "f16", "q8_0", "q4_k+q6_k" (a Q4_K_M file),
     * "q4_0+f16" (rows that fell back). Engine-owned, valid until pl_engine_destroy. */
    const char *weight_type;
    /* Tensor parallelism: the ranks the model is split over (1: none), and how they talk:
     * "mpi: 2 ranks, Open MPI v4.1.4, one host (shared memory)", "" with one rank.
     * Engine-owned, valid until pl_engine_destroy. */
    int tensor_parallel_size;
    const char *distributed;
    /* Why the KV pool has its size, one line for a start-up log: "1.6 GiB of KV cache (...):
     * what max_num_seqs 256 x max_model_len 2048 use", or the memory bound, or the setting
     * (kv_cache_memory_bytes, max_num_blocks) that sized it. Engine-owned, valid until
     * pl_engine_destroy. */
    const char *kv_sizing;
    const char *format;         /* the model file's: "gguf", "safetensors", "llama2.c",
                                   "dummy"; static */
    /* The tokenizer: the file it was loaded from (a GGUF model's own vocabulary: the model
     * file), engine-owned, and its kind, "sentencepiece" or "bpe", static; both NULL
     * without a tokenizer (token ids only). */
    const char *tokenizer_path;
    const char *tokenizer_kind;
    int n_chat_templates;       /* the templates chats can use (the tokenizer's named ones, or
                                   config.chat_template's one); 0: the model cannot chat */
    bool chat_template_override; /* config.chat_template replaced the tokenizer's */
    bool tied_embeddings;       /* the output projection is the embedding */
    double rope_theta, norm_eps;
    /* Mixture of experts: routed experts per layer and the ones each token runs (0, 0 for a
     * dense model). */
    int n_experts, n_experts_used;
    uint64_t n_active_params;   /* of n_params, those one token uses: n_params for a dense
                                   model; of the routed experts' n_experts_used / n_experts
                                   (Qwen3-30B-A3B: 3.3B of 30.5B) */
} pl_model_info;

/* Fills *out (NULL: no-op). Errors: PL_ERR_INVALID_ARGUMENT (NULL engine). Thread-safe. */
PL_API pl_status pl_engine_model_info_sized(const pl_engine *e, pl_model_info *out,
                                            size_t out_size);
static inline pl_status pl_engine_model_info(const pl_engine *e, pl_model_info *out) {
    return pl_engine_model_info_sized(e, out, sizeof *out);
}

/* Tokenizes text as submit would (with BOS). *out_ids: caller frees with pl_free_ids.
 * PL_ERR_INVALID_ARGUMENT without a tokenizer or for invalid text. Thread-safe. */
PL_API pl_status pl_engine_tokenize(const pl_engine *e, const char *text, int32_t **out_ids,
                                    size_t *out_n);
PL_API void pl_free_ids(int32_t *ids); /* NULL is a no-op */

/* The text of ids[0..n) (n may be 0): SentencePiece's decode, so control tokens (BOS, EOS)
 * give nothing and a leading space of the first piece is dropped as the tokenizer
 * specifies. *out_text: NUL-terminated UTF-8 (invalid bytes as U+FFFD), caller frees with
 * pl_free_text; *out_len (may be NULL) its length. Errors: PL_ERR_INVALID_ARGUMENT (NULL,
 * no tokenizer loaded, an id outside the vocabulary: the message gives its index),
 * PL_ERR_OUT_OF_MEMORY. Thread-safe. */
PL_API pl_status pl_engine_detokenize(const pl_engine *e, const int32_t *ids, size_t n,
                                      char **out_text, size_t *out_len);
PL_API void pl_free_text(char *text); /* NULL is a no-op */

/* ------------------------------------------------------------------------------------------
 * Tensor parallelism (docs/distributed.md)
 *
 * With config.tensor_parallel_size N > 1 the model is split over N ranks (attention heads,
 * FFN units and the vocabulary; Megatron-LM's split). With distributed_backend threads,
 * pl_engine_create starts the other ranks as threads of this process. Under mpirun
 * (`mpirun -n N program ...`) every process runs the same program with the same config: the
 * process of rank 0 calls pl_engine_create and does everything else (submit, step, serve);
 * the others call pl_engine_run_worker, which runs the steps rank 0 sends and returns when
 * rank 0's engine is destroyed. A rank that dies or hangs fails the others' next collective
 * within config.distributed_timeout; rank 0's engine then finishes every request with
 * PL_FINISH_ERROR and pl_engine_health reports why.
 * ---------------------------------------------------------------------------------------- */

/* Whether this process is a rank other than 0 of an mpirun launch, which calls
 * pl_engine_run_worker instead of pl_engine_create. Errors (the same on every rank):
 * PL_ERR_INVALID_ARGUMENT when the launch and cfg disagree (mpirun started more ranks than
 * tensor_parallel_size, or fewer), PL_ERR_UNSUPPORTED when the backend asked for is not built
 * in. Outside mpirun: PL_OK and false. */
PL_API pl_status pl_engine_config_is_worker(const pl_engine_config *cfg, bool *out_is_worker);
/* The whole life of a rank other than 0: loads its shard of cfg->model_path, then runs every
 * step rank 0 sends until rank 0's engine is destroyed (PL_OK) or a rank fails (its error). */
PL_API pl_status pl_engine_run_worker(const pl_engine_config *cfg);
/* pl_engine_health (above) also fails once the tensor-parallel group failed (a rank died or
 * hung; the message says which rank and collective). */
/* The distributed backends this build has: "threads, mpi (Open MPI v4.1.4), nccl (2.28.9)".
 * Static storage. */
PL_API const char *pl_distributed_backends(void);

/* One row of pl_comm_benchmark: an all-reduce of `bytes` (f32) on every rank. */
typedef struct pl_comm_bench_row {
    size_t bytes;
    double seconds;      /* per all-reduce, the mean over the iterations, as rank 0 saw it */
    double algbw_gbs;    /* bytes / seconds / 1e9 */
    double busbw_gbs;    /* algbw x 2 (N - 1) / N: what each link carried (nccl-tests) */
    bool correct;        /* every element equal to the closed-form sum on every rank */
} pl_comm_bench_row;

/* `pagellm doctor comm`: all-reduces of n_sizes sizes (bytes, multiples of 4) over the group
 * cfg describes (tensor_parallel_size, distributed_backend: threads in this process, or the
 * ranks of an mpirun launch, each calling this), iters times each after a warm-up; rows
 * (n_sizes) gets rank 0's figures (the other ranks' rows are left as they are). *out_info
 * (may be NULL): the backend and transport, static until the next call. */
PL_API pl_status pl_comm_benchmark(const pl_engine_config *cfg, const size_t *sizes,
                                   size_t n_sizes, int iters, pl_comm_bench_row *rows,
                                   const char **out_info);

/* ------------------------------------------------------------------------------------------
 * Tokenizers and chat templates
 *
 * A pl_tokenizer is the engine's tokenizer (pl_engine_tokenizer) or one loaded alone
 * (pl_tokenizer_load): a SentencePiece .model, a Hugging Face tokenizer.json (with the
 * tokenizer_config.json beside it) or a GGUF file's vocabulary. It is immutable: any number
 * of threads may use it at once.
 *
 * Chat templates are the model's Jinja templates (tokenizer_config.json's chat_template, or
 * GGUF's tokenizer.chat_template), rendered by pagellm's own sandboxed interpreter with the
 * output of Hugging Face's transformers.js: the variables are messages, add_generation_prompt,
 * tools, bos_token, eos_token and the members of chat_template_kwargs. Messages are JSON text
 * in OpenAI's shape: an array of {"role", "content", ...} objects, brought into the shape
 * Hugging Face templates expect as vLLM does: content null or missing becomes "", a list of
 * text parts their texts joined by "\n" (other kinds of part are refused), tool_calls null or
 * [] is dropped, a tool call's function.arguments given as JSON text becomes the value it
 * encodes ({} when empty); every other member (tool_call_id, name, reasoning_content) reaches
 * the template as given. A template that uses
 * something the interpreter does not support is refused (PL_ERR_UNSUPPORTED naming the
 * construct and its line), never rendered wrong; a template's raise_exception() is
 * PL_ERR_INVALID_ARGUMENT with the template's message.
 * ---------------------------------------------------------------------------------------- */

typedef struct pl_tokenizer pl_tokenizer;

typedef struct pl_chat_options {
    size_t struct_size; /* set by pl_chat_options_default; see "Binary compatibility" */
    void *storage;      /* copies made by pl_chat_options_set*; freed by _deinit */
    PL_CHAT_OPTIONS_FIELDS(PL_FIELD_DECL_)
} pl_chat_options;

/* As pl_engine_config_init / _default / _deinit. */
PL_API void pl_chat_options_init(pl_chat_options *o, size_t struct_size);
static inline void pl_chat_options_default(pl_chat_options *o) {
    pl_chat_options_init(o, sizeof *o);
}
PL_API void pl_chat_options_deinit(pl_chat_options *o);
PL_API size_t pl_chat_options_struct_size(void); /* see pl_engine_config_struct_size */
PL_API const pl_field *pl_chat_options_fields(size_t *out_n);
PL_API pl_status pl_chat_options_set(pl_chat_options *o, const char *name, const char *value);
PL_API pl_status pl_chat_options_set_json(pl_chat_options *o, const char *name,
                                          const char *json);

/* One message, for callers that hold plain text (role and content are copied into the JSON
 * the template sees; content NULL is JSON null, as an assistant turn that only calls tools). */
typedef struct pl_chat_message {
    const char *role;    /* "system", "user", "assistant", "tool" */
    const char *content;
} pl_chat_message;

/* Loads a tokenizer alone: a SentencePiece .model, a tokenizer.json (tokenizer_config.json and
 * chat_template.jinja read from beside it), a directory holding either, or a .gguf file.
 * Errors: PL_ERR_IO, PL_ERR_FORMAT (naming the file and field), PL_ERR_UNSUPPORTED (a
 * component pagellm does not implement, named), PL_ERR_OUT_OF_MEMORY. */
PL_API pl_status pl_tokenizer_load(const char *path, pl_tokenizer **out);
PL_API void pl_tokenizer_free(pl_tokenizer *t); /* NULL is a no-op */
/* The engine's tokenizer, engine-owned, valid until pl_engine_destroy; NULL when the engine
 * runs on token ids only. */
PL_API const pl_tokenizer *pl_engine_tokenizer(const pl_engine *e);

/* Flags of pl_tokenizer_encode / _decode. */
#define PL_ENCODE_ADD_SPECIAL 1u   /* the tokenizer's BOS/EOS rule (what submit does) */
#define PL_ENCODE_PARSE_SPECIAL 2u /* special-token text ("<|eot_id|>") becomes its id, as
                                      Hugging Face's encode does; without it such text is
                                      tokenized as plain text (user content) */
#define PL_DECODE_SKIP_SPECIAL 4u  /* special tokens decode to nothing */

PL_API int pl_tokenizer_vocab_size(const pl_tokenizer *t);
/* The piece of id ("▁the", "Ġthe", "<|eot_id|>"); tokenizer-owned; NULL out of range. */
PL_API const char *pl_tokenizer_piece(const pl_tokenizer *t, int32_t id);
/* The id whose piece is exactly `token` (added tokens first), or -1. */
PL_API int32_t pl_tokenizer_token_id(const pl_tokenizer *t, const char *token);
/* text[0..len) (UTF-8, no NUL) to ids; *out_ids: caller frees with pl_free_ids.
 * PL_ERR_INVALID_ARGUMENT (invalid UTF-8: the byte offset), PL_ERR_OUT_OF_MEMORY. */
PL_API pl_status pl_tokenizer_encode(const pl_tokenizer *t, const char *text, size_t len,
                                     unsigned flags, int32_t **out_ids, size_t *out_n);
/* ids to text (NUL-terminated, invalid bytes as U+FFFD); caller frees with pl_free_text;
 * out_len may be NULL. PL_ERR_INVALID_ARGUMENT for an id out of range (its index named). */
PL_API pl_status pl_tokenizer_decode(const pl_tokenizer *t, const int32_t *ids, size_t n,
                                     unsigned flags, char **out_text, size_t *out_len);
/* As pl_tokenizer_decode, also saying which part of the text each id gave: id i's part is
 * text[out_offsets[i] .. out_offsets[i + 1]) in bytes (out_offsets: n + 1 entries, the last
 * the text's length), so the parts tile the text in order (an echoed prompt's tokens and
 * their offsets). A character spelt over several ids (byte tokens) belongs to the id that
 * completes it; bytes the last id leaves unfinished (U+FFFD) to the last id. */
PL_API pl_status pl_tokenizer_decode_offsets(const pl_tokenizer *t, const int32_t *ids,
                                             size_t n, unsigned flags, char **out_text,
                                             size_t *out_offsets);
/* The template text of `name` (NULL: the default); tokenizer-owned; NULL when none. */
PL_API const char *pl_tokenizer_chat_template(const pl_tokenizer *t, const char *name);
/* Renders a chat with the tokenizer's template (or opt->chat_template). opt NULL = defaults.
 * *out_text: caller frees with pl_free_text; out_len may be NULL. Errors:
 * PL_ERR_INVALID_ARGUMENT (malformed JSON, naming the argument, line and column; a message
 * that is not an object; raise_exception), PL_ERR_NOT_FOUND (no chat template: give one),
 * PL_ERR_UNSUPPORTED, PL_ERR_FORMAT (template syntax: line and column), PL_ERR_TOO_LONG (a
 * template limit: steps, output size, depth), PL_ERR_OUT_OF_MEMORY. */
PL_API pl_status pl_tokenizer_apply_chat_template(const pl_tokenizer *t, const char *messages_json,
                                                  const pl_chat_options *opt, char **out_text,
                                                  size_t *out_len);

/* The same with the engine's template (config.chat_template, else its tokenizer's; parsed
 * once at create). Thread-safe. */
PL_API pl_status pl_engine_apply_chat_template_json(const pl_engine *e, const char *messages_json,
                                                    const pl_chat_options *opt,
                                                    char **out_text, size_t *out_len);
PL_API pl_status pl_engine_apply_chat_template(const pl_engine *e, const pl_chat_message *messages,
                                               size_t n_messages, const pl_chat_options *opt,
                                               char **out_text, size_t *out_len);
/* Renders the chat and queues it: the text is tokenized with special tokens parsed and no
 * BOS/EOS added (the template writes them), as Hugging Face's apply_chat_template does.
 * Errors: those of apply_chat_template and of pl_engine_submit_tokens. Thread-safe. */
PL_API pl_status pl_engine_submit_chat_json(pl_engine *e, const char *messages_json,
                                            const pl_chat_options *opt,
                                            const pl_sampling_params *params,
                                            pl_request_id *out_id);
PL_API pl_status pl_engine_submit_chat(pl_engine *e, const pl_chat_message *messages,
                                       size_t n_messages, const pl_chat_options *opt,
                                       const pl_sampling_params *params, pl_request_id *out_id);

/* ------------------------------------------------------------------------------------------
 * Chat replies: reasoning, content and tool calls
 *
 * A chat model writes its reasoning and its tool calls as text in its family's syntax; a
 * reply parser turns that text into OpenAI's message parts: reasoning_content, content and
 * tool calls (an id, a function name, and the arguments as JSON text). Tool-call syntaxes:
 *   "hermes"       Hermes, Qwen2.5, Qwen3: <tool_call>{"name": ..., "arguments": {...}}
 *                  </tool_call>, one block per call, anywhere in the reply
 *   "llama3_json"  Llama 3.1/3.2: the reply is {"name": ..., "parameters": {...}} (or
 *                  "arguments"), after <|python_tag|> or alone; several separated by ";"
 *   "mistral"      Mistral: [TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...], also
 *                  without the marker at the start of the reply (a SentencePiece vocabulary
 *                  never writes control tokens), or [TOOL_CALLS]name[ARGS]{...}
 * Reasoning syntaxes: "qwen3" (<think>...</think> at the start of the reply, or open from the
 * prompt) and "deepseek_r1" (the reply starts inside the reasoning, which </think> ends).
 * Whitespace between the parts is dropped. A call that does not parse (its JSON, or no name)
 * stays in the content as written; in a stream, one that breaks after its name was sent ends
 * there. Text with no call and no reasoning comes back as content, byte for byte.
 * ---------------------------------------------------------------------------------------- */

typedef struct pl_reply_options {
    size_t struct_size;           /* set by pl_reply_options_default */
    const char *tool_parser;      /* "hermes", "llama3_json", "mistral"; NULL: no tool calls */
    const char *reasoning_parser; /* "qwen3", "deepseek_r1"; NULL: no reasoning */
    const char *prompt;           /* the rendered prompt, or NULL: one that ends inside
                                     <think> (a template that opens the reasoning) makes the
                                     reply start there */
    uint64_t id_seed;             /* tool-call ids are drawn from it ("call_" and 24 letters
                                     and digits; mistral: 9, as its template requires) */
} pl_reply_options;

static inline void pl_reply_options_default(pl_reply_options *o) {
    o->struct_size = sizeof *o;
    o->tool_parser = NULL;
    o->reasoning_parser = NULL;
    o->prompt = NULL;
    o->id_seed = 0;
}

typedef struct pl_tool_call {
    char *id;
    char *name;
    char *arguments;              /* JSON text of an object, as the model wrote it ("{}" when
                                     it gave none) */
} pl_tool_call;

/* A whole reply, parsed. Strings are NUL-terminated UTF-8. */
typedef struct pl_reply {
    char *content;                /* NULL when there is none besides tool calls */
    char *reasoning_content;      /* NULL when none */
    pl_tool_call *tool_calls;     /* (n_tool_calls) */
    size_t n_tool_calls;
} pl_reply;

/* Parses text[0..len). *out: free with pl_reply_free. Errors: PL_ERR_INVALID_ARGUMENT (NULL,
 * an options struct_size no pagellm version had), PL_ERR_NOT_FOUND (an unknown parser name;
 * the message lists the known ones), PL_ERR_OUT_OF_MEMORY. Thread-safe. */
PL_API pl_status pl_reply_parse(const char *text, size_t len, const pl_reply_options *opt,
                                 pl_reply **out);
PL_API void pl_reply_free(pl_reply *r); /* NULL is a no-op */

/* The tool-call syntax a chat template writes its calls in ("hermes", "llama3_json",
 * "mistral"), from the markers it uses; NULL when none is recognised. Static storage. */
PL_API const char *pl_reply_tool_parser_for(const char *chat_template);

/* The GBNF grammar (for pl_sampling_params.grammar) of a reply that must call tools, in
 * opt->tool_parser's syntax (NULL or opt NULL: hermes): one call, or with parallel one or
 * more, of the functions of tools_json (OpenAI's "tools": a JSON array of {"type":
 * "function", "function": {"name", "parameters"}}), or only of the one called name when it
 * is not NULL, each call's arguments valid against the function's parameters schema
 * (converted as pl_json_schema_to_grammar does; none: an empty object). With
 * opt->reasoning_parser the reasoning may come first ("<think>...</think>"; it must when the
 * prompt opened it). Mistral's calls are written without their [TOOL_CALLS] marker (a special
 * token: no text a grammar can match); the reply parser reads the bare array. *out_gbnf:
 * NUL-terminated, caller frees with pl_free_text. Errors: PL_ERR_INVALID_ARGUMENT (tools not
 * such a list: the entry named; no function called name; a schema the converter refuses:
 * "tools[1].function.parameters: json_schema at /properties/a: ..."), PL_ERR_NOT_FOUND (an
 * unknown syntax), PL_ERR_TOO_LONG (a schema past a limit), PL_ERR_OUT_OF_MEMORY. */
PL_API pl_status pl_reply_tool_grammar(const char *tools_json, const char *name, bool parallel,
                                       const pl_reply_options *opt, char **out_gbnf);

/* The same reply read as it streams. Each delta is one part: content or reasoning text, or a
 * piece of a tool call: its first delta has the call's id and name (and maybe a first piece
 * of the arguments), the next ones more of the arguments; the pieces join to the call's
 * arguments. Deltas join to what pl_reply_parse gives for the whole text. */
typedef enum pl_reply_part {
    PL_REPLY_CONTENT = 0,
    PL_REPLY_REASONING = 1,
    PL_REPLY_TOOL_CALL = 2,
} pl_reply_part;

typedef struct pl_reply_delta {
    pl_reply_part part;
    const char *text;             /* content, reasoning, or a piece of the arguments */
    size_t len;
    int tool_index;               /* PL_REPLY_TOOL_CALL: 0 for the reply's first call, ... */
    const char *tool_id;          /* on a call's first delta, else NULL */
    const char *tool_name;        /* likewise */
} pl_reply_delta;

typedef struct pl_reply_parser pl_reply_parser;

/* Errors as pl_reply_parse's. */
PL_API pl_status pl_reply_parser_create(const pl_reply_options *opt, pl_reply_parser **out);
PL_API void pl_reply_parser_free(pl_reply_parser *p); /* NULL is a no-op */
/* Reads the next text[0..len) of the reply (end: nothing more comes; then what was held back
 * comes out). *out_deltas (*out_n of them, maybe 0): parser-owned, valid until the next call.
 * Text held back (a marker may be starting) comes out once it is decided. Feeding after end
 * is PL_ERR_INVALID_ARGUMENT. Errors: PL_ERR_OUT_OF_MEMORY (the parser is then unusable). */
PL_API pl_status pl_reply_parser_feed(pl_reply_parser *p, const char *text, size_t len, bool end,
                                      const pl_reply_delta **out_deltas, size_t *out_n);
/* Tool calls begun so far. */
PL_API size_t pl_reply_parser_tool_calls(const pl_reply_parser *p);

/* ------------------------------------------------------------------------------------------
 * Model files
 * ---------------------------------------------------------------------------------------- */

/* Options of pl_model_quantize. */
typedef struct pl_quantize_options {
    size_t struct_size;         /* set by pl_quantize_options_default */
    const char *tokenizer_path; /* the tokenizer to store (any pl_engine_config.tokenizer_path
                                   form); NULL: the model's own (a GGUF's metadata, else the
                                   one beside the model) */
    bool no_tokenizer;          /* store no tokenizer */
    /* Called once per tensor, in file order, before the file is written: its GGUF name, its
     * shape, the type it is stored in and the type the recipe asked for it (not the same
     * when it fell back: see pl_model_quantize); names are valid during the call. NULL:
     * none. (A struct_size that ends before it, an earlier build's, is accepted.) */
    void (*on_tensor)(void *user, const char *name, int rows, int cols, const char *type,
                      const char *asked);
    void *user;                 /* passed to on_tensor */
    /* (A struct_size that ends before n_threads, an earlier build's, is accepted.) */
    int n_threads;              /* threads converting the tensors; 0 = every core */
    /* A source whose matrices are block-quantised already, asked for another type, is refused
     * unless set: quantising quantised values adds the second rounding's error to the first
     * (llama-quantize's --allow-requantize rule). A tensor already of the type it is written
     * in is copied as it is either way. */
    bool allow_requantize;
} pl_quantize_options;

static inline void pl_quantize_options_default(pl_quantize_options *o) {
    o->struct_size = sizeof *o;
    o->tokenizer_path = NULL;
    o->no_tokenizer = false;
    o->on_tensor = NULL;
    o->user = NULL;
    o->n_threads = 0;
    o->allow_requantize = false;
}

/* Writes the model at in_path (any model_path form: llama2.c, Hugging Face directory, GGUF,
 * dummy:NAME) as a GGUF file at out_path whose matrices are stored as `type` (case does not
 * matter): "f32", "f16", "bf16", a block-quantised GGUF type this build has a weight type for
 * ("q8_0", "q4_0", "q4_k", "q5_k", "q6_k"), or a K-quant mix as llama.cpp names them:
 * "q4_k_m" / "q5_k_m" store Q4_K / Q5_K, except the output projection (the embedding when
 * tied) and attn_v and ffn_down in the first and last eighth of the layers and every third
 * layer between, which get Q6_K. A tensor whose rows are not whole blocks of its type falls
 * back to one they are (Q4_K -> Q4_0; Q5_K, Q6_K -> Q8_0; Q8_0, Q4_0 -> F16), as llama.cpp
 * does; opt->on_tensor sees which. Norms and biases stay f32, as llama.cpp keeps them;
 * general.file_type is llama.cpp's for the type or mix. The file holds the hyperparameters
 * and, unless opt->no_tokenizer, the tokenizer (vocabulary, BOS/EOS, chat templates) so
 * pl_engine_create needs no tokenizer_path for it; from a GGUF the source's tokenizer and
 * general.* metadata are copied. Written as out_path.tmp, then renamed. opt NULL = defaults.
 * Errors: PL_ERR_INVALID_ARGUMENT (NULL path, an options struct_size no pagellm version had,
 * n_threads negative or above 1024, a quantised source without allow_requantize: the message
 * names the first such tensor and both types),
 * PL_ERR_UNSUPPORTED (a type this build cannot write; a tokenizer GGUF cannot describe: the
 * message says what), and the loading errors of pl_engine_create (IO, FORMAT, NOT_FOUND,
 * OUT_OF_MEMORY). */
PL_API pl_status pl_model_quantize(const char *in_path, const char *out_path, const char *type,
                                   const pl_quantize_options *opt);

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
    size_t struct_size;   /* bytes the library filled */
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
/* Totals since the last reset. NULL e gives zeros; NULL out is a no-op. */
PL_API void pl_engine_get_profile_sized(const pl_engine *e, pl_profile *out, size_t out_size);
static inline void pl_engine_get_profile(const pl_engine *e, pl_profile *out) {
    pl_engine_get_profile_sized(e, out, sizeof *out);
}
PL_API void pl_engine_reset_profile(pl_engine *e);

/* Bytes of matrix weights the model streams per forward pass of one token, and parameters in
 * matrix products per token (2x this = matmul FLOPs per token): for roofline figures. A
 * mixture of experts counts the n_experts_used of n_experts experts a token runs (the
 * active weights: what batch-1 decode reads). */
PL_API size_t pl_engine_weight_bytes(const pl_engine *e);
PL_API size_t pl_engine_matmul_params(const pl_engine *e);

#ifdef __cplusplus
}
#endif
#endif /* PAGELLM_H */
