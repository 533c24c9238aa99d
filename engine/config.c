/*
 * engine/config.c - the engine configuration: defaults and validation.
 *
 * Validation is the first thing pl_engine_create does; every message names the field, the
 * value given and the range allowed, so a user can fix a flag without reading the source.
 */
#include <math.h>

#include "pagellm.h"
#include "util/status.h"

void pl_engine_config_default(pl_engine_config *cfg) {
    if (!cfg) return;
    *cfg = (pl_engine_config){
        .model_path = "dummy:tiny",
        .tokenizer_path = NULL,
        .weight_dtype = PL_DTYPE_AUTO,
        .kv_dtype = PL_DTYPE_AUTO,
        .dummy_seed = 1234,
        .backend = PL_BACKEND_CPU,
        .n_threads = 0,
        .cuda_device = 0,
        .block_size = 16,
        .max_num_blocks = 0,
        .memory_threshold = 0.9,
        .memory_limit_bytes = 0,
        .enable_prefix_caching = true,
        .max_batch_size = 32,
        .max_num_seqs = 256,
        .max_total_tokens = 4096,
        .max_model_len = 0,
        .enable_chunked_prefill = true,
        .long_prefill_threshold = 0,
        .max_skip_head = 4,
        .watermark = 0.01,
        .max_waiting = 4096,
        .overflow_policy = PL_OVERFLOW_REJECT_NEWEST,
        .seed = 0,
        .log_preemptions = false,
    };
}

static pl_status bad_int(const char *field, long long v, const char *range) {
    return pl_fail(PL_ERR_INVALID_ARGUMENT, "config.%s = %lld: must be %s", field, v, range);
}

static pl_status check_range(const char *field, long long v, long long lo, long long hi,
                             const char *range) {
    return (v < lo || v > hi) ? bad_int(field, v, range) : PL_OK;
}

static bool is_dtype(pl_dtype t) { return t >= PL_DTYPE_AUTO && t <= PL_DTYPE_BF16; }

pl_status pl_engine_config_validate(const pl_engine_config *cfg) {
    if (!cfg) return pl_fail(PL_ERR_INVALID_ARGUMENT, "config is NULL");
    if (!cfg->model_path || !cfg->model_path[0])
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "config.model_path is empty: give a model file, "
                                                "directory or dummy:NAME");
    if (!is_dtype(cfg->weight_dtype)) return bad_int("weight_dtype", cfg->weight_dtype, "a pl_dtype");
    if (!is_dtype(cfg->kv_dtype)) return bad_int("kv_dtype", cfg->kv_dtype, "a pl_dtype");
    if (cfg->backend != PL_BACKEND_CPU && cfg->backend != PL_BACKEND_REF &&
        cfg->backend != PL_BACKEND_CUDA)
        return bad_int("backend", cfg->backend, "cpu (0), ref (1) or cuda (2)");
    PL_TRY(check_range("n_threads", cfg->n_threads, 0, 1024, "in [0, 1024] (0 = all cores)"));
    PL_TRY(check_range("cuda_device", cfg->cuda_device, 0, 1024, "in [0, 1024]"));

    int bs = cfg->block_size;
    if (bs < 1 || bs > 256 || (bs & (bs - 1)) != 0)
        return bad_int("block_size", bs, "a power of two in [1, 256]");
    PL_TRY(check_range("max_num_blocks", cfg->max_num_blocks, 0, 1 << 30,
                       "in [0, 2^30] (0 = derive from memory_threshold)"));
    if (!(cfg->memory_threshold > 0.0 && cfg->memory_threshold <= 1.0))
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "config.memory_threshold = %g: must be in (0, 1]",
                       cfg->memory_threshold);

    PL_TRY(check_range("max_batch_size", cfg->max_batch_size, 1, 1 << 16, "in [1, 65536]"));
    PL_TRY(check_range("max_num_seqs", cfg->max_num_seqs, 1, 1 << 20, "in [1, 2^20]"));
    if (cfg->max_num_seqs < cfg->max_batch_size)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "config.max_num_seqs = %d: must be >= max_batch_size (%d)",
                       cfg->max_num_seqs, cfg->max_batch_size);
    PL_TRY(check_range("max_total_tokens", cfg->max_total_tokens, 1, 1 << 24, "in [1, 2^24]"));
    if (cfg->max_total_tokens < cfg->max_batch_size)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "config.max_total_tokens = %d: must be >= max_batch_size (%d), or a full "
                       "batch of decodes cannot run",
                       cfg->max_total_tokens, cfg->max_batch_size);
    PL_TRY(check_range("max_model_len", cfg->max_model_len, 0, 1 << 24,
                       "in [0, 2^24] (0 = the model's)"));
    if (!cfg->enable_chunked_prefill && cfg->max_model_len > cfg->max_total_tokens)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "config.max_model_len = %d: must be <= max_total_tokens (%d) when chunked "
                       "prefill is off, or a long prompt could never be scheduled",
                       cfg->max_model_len, cfg->max_total_tokens);
    PL_TRY(check_range("long_prefill_threshold", cfg->long_prefill_threshold, 0, 1 << 24,
                       "in [0, 2^24] (0 = no cap)"));
    PL_TRY(check_range("max_skip_head", cfg->max_skip_head, 0, 1 << 20, "in [0, 2^20]"));
    if (!(cfg->watermark >= 0.0 && cfg->watermark < 1.0))
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "config.watermark = %g: must be in [0, 1)",
                       cfg->watermark);
    PL_TRY(check_range("max_waiting", cfg->max_waiting, 0, 1 << 24, "in [0, 2^24] (0 = unbounded)"));
    if (cfg->overflow_policy != PL_OVERFLOW_REJECT_NEWEST &&
        cfg->overflow_policy != PL_OVERFLOW_DROP_OLDEST)
        return bad_int("overflow_policy", cfg->overflow_policy,
                       "PL_OVERFLOW_REJECT_NEWEST (0) or PL_OVERFLOW_DROP_OLDEST (1)");
    return PL_OK;
}
