/*
 * engine/rank.c - what one rank of an engine takes from its machine: its backend (the device,
 * or its share of the CPU's cores) and how many KV blocks fit: the memory it may use
 * (memory_limit_bytes, else what its backend reports) less its weights as stored and the step
 * workspace, each for the part of the model the rank holds (a tensor-parallel shard holds its
 * KV heads only, so its blocks are smaller and more of them fit). One rank: the whole engine.
 */
#include <stdio.h>

#include "engine/engine_internal.h"
#include "engine/fields.h"
#include "util/dtype.h"
#include "util/log.h"

int pl_rank_local_ranks(const pl_engine_config *c) {
    if (c->tensor_parallel_size <= 1) return 1;
    int rank, size, local;
    /* an mpirun launch says how many ranks share this host; threads are all here */
    if (pl_comm_launcher_rank(&rank, &size, &local) && size > 1) return local;
    return c->tensor_parallel_size;
}

static pl_status backend_of(const pl_engine_config *c, int local_rank, int n_threads,
                            pl_dtype kv, pl_backend **out) {
    pl_backend_options opt = {.n_threads = n_threads, .device = c->cuda_device + local_rank,
                              .kv_dtype = kv};
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

/* A KV dtype the backend refuses is the config's fault: the message names the field and
 * what this backend takes, asked of the backend itself (each type tried), so no table here
 * can disagree with kernels/. */
pl_status pl_rank_backend_create(const pl_engine_config *c, int local_rank, int n_threads,
                                 pl_backend **out) {
    pl_status s = backend_of(c, local_rank, n_threads, c->kv_dtype, out);
    if (s != PL_ERR_UNSUPPORTED || c->kv_dtype == PL_DTYPE_AUTO) return s;
    char why[512];
    snprintf(why, sizeof why, "%s", pl_last_error());
    const pl_dtype all[] = {PL_DTYPE_F32, PL_DTYPE_F16, PL_DTYPE_BF16};
    char takes[64] = "";
    size_t used = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        pl_backend *be = NULL;
        if (backend_of(c, local_rank, n_threads, all[i], &be) != PL_OK) continue;
        pl_backend_destroy(be);
        used += (size_t)snprintf(takes + used, sizeof takes - used, "%s%s", used ? ", " : "",
                                 pl_dtype_name(all[i]));
    }
    if (!used) return pl_fail(s, "%s", why); /* the backend itself is missing */
    return pl_fail(s, PL_REF("config.kv_dtype") " = %s: backend %s stores KV entries as %s",
                   pl_dtype_name(c->kv_dtype),
                   c->backend == PL_BACKEND_REF ? "ref" : c->backend == PL_BACKEND_CUDA ? "cuda"
                                                                                         : "cpu",
                   takes);
}

/* The memory the engine may use: memory_limit_bytes, else what the backend reports as free:
 * MemAvailable on the host (so a server does not push other programs into swap), free device
 * memory on a GPU. Host memory is shared by the ranks on this host (a device is each rank's
 * own). Measured once, at create, before the model is loaded. */
pl_status pl_rank_memory(const pl_engine_config *c, pl_backend *be, size_t *out) {
    size_t free_b = 0, total_b = 0;
    PL_TRY(be->ops->memory_info(be, &free_b, &total_b));
    *out = c->memory_limit_bytes ? c->memory_limit_bytes : free_b;
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

pl_status pl_rank_reserve(const pl_model *model, pl_backend *be, const pl_runner_limits *lim) {
    if (!be->ops->reserve) return PL_OK;
    pl_backend_reserve rs;
    pl_runner_reserve_sizes(model, lim, &rs);
    return be->ops->reserve(be, &rs);
}

/* A size for a log line: "80.0 MiB", "11.8 GiB". Eight rotating buffers: one message holds
 * up to five. */
static const char *human(double bytes) {
    static _Thread_local char buf[8][32];
    static _Thread_local unsigned next;
    char *o = buf[next++ % 8];
    if (bytes >= 1024.0 * 1024.0 * 1024.0)
        snprintf(o, sizeof buf[0], "%.1f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
    else
        snprintf(o, sizeof buf[0], "%.1f MiB", bytes / (1024.0 * 1024.0));
    return o;
}

/* Where the memory figure came from, for messages. */
static const char *memory_source(const pl_engine_config *c, const pl_backend *be) {
    return c->memory_limit_bytes ? "memory_limit_bytes"
           : be->is_host        ? "available memory"
                                : "free device memory";
}

typedef struct pool_facts {
    size_t block_bytes, work_b, avail;
    uint64_t weights_b;
    char *sizing;
    size_t sizing_size;
} pool_facts;

/* A pool given by the user (max_num_blocks, or kv_cache_memory_bytes as whole blocks): taken
 * as asked, but it must fit beside the weights and the workspace in the memory there is (an
 * explicit memory_limit_bytes is held to the byte, as the message shows). */
static pl_status explicit_pool(const pl_engine_config *c, int blocks, const char *what,
                               const pool_facts *f) {
    uint64_t pool_b = UINT64_MAX, need = UINT64_MAX;
    if (!__builtin_mul_overflow((uint64_t)blocks, (uint64_t)f->block_bytes, &pool_b) &&
        (__builtin_add_overflow(pool_b, f->weights_b, &need) ||
         __builtin_add_overflow(need, (uint64_t)f->work_b, &need)))
        need = UINT64_MAX;
    if ((c->memory_limit_bytes || c->kv_cache_memory_bytes) && need > (uint64_t)f->avail)
        return pl_fail(PL_ERR_OUT_OF_MEMORY,
                       "%s = %zu: %llu bytes of weights + %llu bytes of KV cache "
                       "(" PL_MARK_BARE "config.%s" PL_MARK_BARE " = %d blocks of %zu bytes) + "
                       "%zu bytes of workspace do not fit",
                       c->memory_limit_bytes ? PL_REF_BARE("config.memory_limit_bytes")
                                             : "available memory",
                       f->avail, (unsigned long long)f->weights_b, (unsigned long long)pool_b,
                       what, blocks, f->block_bytes, f->work_b);
    if (f->sizing)
        snprintf(f->sizing, f->sizing_size, "%s of KV cache (%d blocks of %d tokens): %s",
                 human((double)pool_b), blocks, c->block_size, what);
    return PL_OK;
}

/* Blocks for the KV pool. Given: max_num_blocks, or kv_cache_memory_bytes (a fixed KV space,
 * as vLLM's CPU backend has one). Else what max_num_seqs sequences of max_model_len tokens can
 * use, bounded by memory_threshold of avail (the memory at start), less the weights and the
 * workspace: a laptop keeps the memory no request could fill. Weights count as stored
 * (embedding table and norms too, as the loader's limit check counts them), so both checks
 * report the same number for the same model. sizing (may be NULL) says which rule sized it. */
pl_status pl_rank_pool_blocks(const pl_engine_config *c, const pl_model *model, pl_backend *be,
                              const pl_runner_limits *lim, size_t avail, char *sizing,
                              size_t sizing_size, int *out_blocks) {
    pl_model_config lc; /* this rank's part of the model */
    pl_model_local_config(model, &lc);
    pool_facts f = {.block_bytes = pl_runner_kv_block_bytes(&lc, c->block_size, be->kv_dtype),
                    .work_b = pl_runner_workspace_bytes(&lc, lim), .avail = avail,
                    .sizing = sizing, .sizing_size = sizing_size};
    size_t cap = (size_t)c->max_num_seqs * (size_t)lim->max_blocks_per_seq + 1;
    if (cap > (size_t)1 << 30) cap = (size_t)1 << 30;
    PL_TRY(stored_weight_bytes(model, be, &f.weights_b));
    if (f.weights_b > (uint64_t)avail) /* a device's copy: host copies were checked at load */
        return pl_fail(PL_ERR_OUT_OF_MEMORY,
                       "%s: weights take %llu bytes on backend %s, more than the %zu bytes of "
                       "memory available (" PL_REF_BARE("config.memory_limit_bytes") ", else "
                       "free device memory)",
                       model->name, (unsigned long long)f.weights_b, be->ops->name, avail);
    if (c->max_num_blocks > 0) {
        *out_blocks = c->max_num_blocks;
        return explicit_pool(c, c->max_num_blocks, "max_num_blocks", &f);
    }
    if (c->kv_cache_memory_bytes) {
        size_t n = c->kv_cache_memory_bytes / f.block_bytes;
        if (n < 1 || n > (size_t)1 << 30)
            return pl_fail(PL_ERR_INVALID_ARGUMENT,
                           PL_REF("config.kv_cache_memory_bytes") " = %zu: %s one KV block of "
                           "%zu bytes (block_size %d tokens)", c->kv_cache_memory_bytes,
                           n < 1 ? "less than" : "more than 2^30 blocks of", f.block_bytes,
                           c->block_size);
        *out_blocks = (int)n;
        return explicit_pool(c, (int)n, "kv_cache_memory_bytes", &f);
    }
    double budget = c->memory_threshold * (double)avail;
    double weights = (double)f.weights_b;
    double work = (double)f.work_b;
    double left = budget - weights - work;
    double n = left / (double)f.block_bytes;
    if (n < 1) {
        return pl_fail(PL_ERR_OUT_OF_MEMORY,
                       "KV cache: %.0f bytes of memory (" PL_REF_BARE("config.memory_threshold")
                       " %.2f of %zu bytes of "
                       "%s) minus %.0f bytes of weights and %.0f bytes of workspace leaves no "
                       "room for one %zu-byte block",
                       budget, c->memory_threshold, avail, memory_source(c, be), weights, work,
                       f.block_bytes);
    }
    double seqs_b = (double)cap * (double)f.block_bytes;
    int model_len = c->max_model_len ? c->max_model_len : model->cfg.max_seq_len;
    const char *src = memory_source(c, be);
    if (n >= (double)cap) {
        *out_blocks = (int)cap;
        if (sizing)
            snprintf(sizing, sizing_size,
                     "%s of KV cache (%d blocks of %d tokens): what max_num_seqs %d x "
                     "max_model_len %d use (memory_threshold %.2f of the %s of %s would allow "
                     "%s; kv_cache_memory_bytes fixes it)",
                     human(seqs_b), *out_blocks, c->block_size, c->max_num_seqs,
                     model_len, c->memory_threshold,
                     human((double)avail), src, human(left));
    } else {
        *out_blocks = (int)n;
        if (sizing)
            snprintf(sizing, sizing_size,
                     "%s of KV cache (%d blocks of %d tokens): memory_threshold %.2f of the %s "
                     "of %s, less %s of weights and %s of workspace (max_num_seqs %d x "
                     "max_model_len %d would use %s)",
                     human((double)*out_blocks * (double)f.block_bytes), *out_blocks,
                     c->block_size, c->memory_threshold, human((double)avail), src,
                     human(weights), human(work), c->max_num_seqs,
                     model_len, human(seqs_b));
    }
    return PL_OK;
}
