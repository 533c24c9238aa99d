/*
 * engine/rank.c - what one rank of an engine takes from its machine: its backend (the device,
 * or its share of the CPU's cores) and how many KV blocks fit: the memory it may use
 * (memory_limit_bytes, else what its backend reports) less its weights as stored and the step
 * workspace, each for the part of the model the rank holds (a tensor-parallel shard holds its
 * KV heads only, so its blocks are smaller and more of them fit). One rank: the whole engine.
 */
#include "engine/engine_internal.h"
#include "util/log.h"

int pl_rank_local_ranks(const pl_engine_config *c) {
    if (c->tensor_parallel_size <= 1) return 1;
    int rank, size, local;
    /* an mpirun launch says how many ranks share this host; threads are all here */
    if (pl_comm_launcher_rank(&rank, &size, &local) && size > 1) return local;
    return c->tensor_parallel_size;
}

pl_status pl_rank_backend_create(const pl_engine_config *c, int local_rank, int n_threads,
                                 pl_backend **out) {
    pl_backend_options opt = {.n_threads = n_threads, .device = c->cuda_device + local_rank,
                              .kv_dtype = c->kv_dtype};
    switch (c->backend) {
    case PL_BACKEND_REF: return pl_backend_ref_create(&opt, out);
    case PL_BACKEND_CUDA: {
        pl_status s = pl_backend_cuda_create(&opt, out);
        if (s != PL_ERR_INVALID_ARGUMENT || local_rank == 0) return s;
        /* fewer devices than ranks on this host: they share --cuda-device (MPI stages through
         * the host; NCCL refuses two ranks on one device and says so) */
        pl_log(PL_LOG_WARN, "tensor parallel: no CUDA device %d for this host's rank %d: it "
               "shares device %d", opt.device, local_rank, c->cuda_device);
        opt.device = c->cuda_device;
        return pl_backend_cuda_create(&opt, out);
    }
    default: return pl_backend_cpu_create(&opt, out);
    }
}

/* The memory the engine may use: memory_limit_bytes, else what the backend reports (all of
 * host memory; a device's free memory). */
pl_status pl_rank_memory(const pl_engine_config *c, pl_backend *be, size_t *out) {
    size_t free_b = 0, total_b = 0;
    PL_TRY(be->ops->memory_info(be, &free_b, &total_b));
    if (c->memory_limit_bytes) total_b = free_b = c->memory_limit_bytes;
    *out = be->is_host ? total_b : free_b;
    /* host memory is shared by the ranks on this host (a device is each rank's own) */
    if (be->is_host) *out /= (size_t)pl_rank_local_ranks(c);
    return PL_OK;
}

/* Bytes of weights where the backend keeps them: a device may store f32 weights narrower (CUDA
 * keeps f16), so counting the host copy would shrink the pool and refuse models that fit.
 * Tensor by tensor in its own type (a mixed file's matrices differ), each from a 64-byte
 * boundary as pl_model_config_weight_bytes counts them. */
static pl_status stored_weight_bytes(const pl_model *m, const pl_backend *be, uint64_t *out) {
    const pl_model_config *c = &m->cfg;
    uint64_t total = 0;
    for (size_t s = 0; s < pl_model_n_slots(c); s++) {
        int layer;
        pl_tensor_role r = pl_model_slot_role(c, s, &layer);
        const pl_weight *w = &m->w[s];
        /* a shard's tied output projection is a slice of its own */
        if (!w->data || (!pl_model_stores_tensor(c, r) && m->shard.size <= 1)) continue;
        pl_wtype wt = w->type;
        bool matrix = pl_model_tensor_type(r, PL_WTYPE_NONE) != PL_WTYPE_F32;
        if (matrix && wt == PL_WTYPE_F32 && be->f32_weight_type != PL_WTYPE_NONE)
            wt = be->f32_weight_type;
        uint64_t b;
        if (!pl_wtype_bytes(wt, (uint64_t)w->rows * (uint64_t)w->cols, &b) ||
            __builtin_add_overflow(total, (b + 63) & ~(uint64_t)63, &total))
            return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: weight bytes overflow 64 bits", m->name);
    }
    *out = total;
    return PL_OK;
}

/* Blocks for the KV pool: max_num_blocks, or what memory_threshold of the backend's memory
 * holds after weights and workspace, capped at what max_num_seqs full-length sequences use.
 * Weights count as stored (embedding table and norms too, as the loader's limit check counts
 * them), so both checks report the same number for the same model. */
pl_status pl_rank_pool_blocks(const pl_engine_config *c, const pl_model *model, pl_backend *be,
                              const pl_runner_limits *lim, int *out_blocks) {
    pl_model_config lc; /* this rank's part of the model */
    pl_model_local_config(model, &lc);
    size_t block_bytes = pl_runner_kv_block_bytes(&lc, c->block_size, be->kv_dtype);
    size_t cap = (size_t)c->max_num_seqs * (size_t)lim->max_blocks_per_seq + 1;
    if (cap > (size_t)1 << 30) cap = (size_t)1 << 30;
    size_t avail, work_b = pl_runner_workspace_bytes(&lc, lim);
    uint64_t weights_b = 0;
    PL_TRY(stored_weight_bytes(model, be, &weights_b));
    PL_TRY(pl_rank_memory(c, be, &avail));
    if (weights_b > (uint64_t)avail) /* a device's copy: host copies were checked at load */
        return pl_fail(PL_ERR_OUT_OF_MEMORY,
                       "%s: weights take %llu bytes on backend %s, more than the %zu bytes of "
                       "memory available (memory_limit_bytes, else free device memory)",
                       model->name, (unsigned long long)weights_b, be->ops->name, avail);
    if (c->max_num_blocks > 0) {
        /* An explicit pool is taken as asked, but under an explicit limit it must fit beside
         * the weights and the workspace (the threshold only shapes a derived pool). */
        uint64_t pool_b = UINT64_MAX, need = UINT64_MAX;
        if (!__builtin_mul_overflow((uint64_t)c->max_num_blocks, (uint64_t)block_bytes, &pool_b) &&
            (__builtin_add_overflow(pool_b, weights_b, &need) ||
             __builtin_add_overflow(need, (uint64_t)work_b, &need)))
            need = UINT64_MAX;
        if (c->memory_limit_bytes && need > (uint64_t)c->memory_limit_bytes)
            return pl_fail(PL_ERR_OUT_OF_MEMORY,
                           "memory_limit_bytes = %zu: %llu bytes of weights + %llu bytes of KV "
                           "cache (max_num_blocks = %d blocks of %zu bytes) + %zu bytes of "
                           "workspace do not fit",
                           c->memory_limit_bytes, (unsigned long long)weights_b,
                           (unsigned long long)pool_b, c->max_num_blocks, block_bytes, work_b);
        *out_blocks = c->max_num_blocks;
        return PL_OK;
    }
    double budget = c->memory_threshold * (double)avail;
    double weights = (double)weights_b;
    double work = (double)work_b;
    double left = budget - weights - work;
    double n = left / (double)block_bytes;
    if (n < 1) {
        return pl_fail(PL_ERR_OUT_OF_MEMORY,
                       "KV cache: %.0f bytes of memory (memory_threshold %.2f of %zu bytes) "
                       "minus %.0f bytes of weights and %.0f bytes of workspace leaves no room "
                       "for one %zu-byte block",
                       budget, c->memory_threshold, avail, weights, work, block_bytes);
    }
    *out_blocks = n > (double)cap ? (int)cap : (int)n;
    return PL_OK;
}
