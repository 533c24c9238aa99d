/*
 * kernels/cuda/backend_cuda.cu - the CUDA backend: device, stream, cuBLAS handle, memory,
 * pinned staging, weight upload (f32 -> f16 on the device) and the ops table.
 *
 * Runtime API only (cudart + cuBLAS, never the driver API), so a machine without a driver
 * still loads the library and pl_backend_cuda_create returns PL_ERR_BACKEND with CUDA's
 * message. One backend = one device and one non-blocking stream; everything is enqueued on
 * that stream in call order.
 *
 * Synchronisation contract (what the engine may rely on)
 * - Ops and upload return once enqueued. upload copies src before returning (through pinned
 *   staging, or the driver's own staging for large pageable copies), so the caller may reuse
 *   src at once.
 * - download and sync wait for the stream and report any error of earlier ops.
 * - free waits for the device (cudaFree does), so freeing memory an enqueued op still uses is
 *   safe.
 *
 * Memory: alloc is cudaMalloc + an enqueued memset to 0. memory_info is cudaMemGetInfo; the
 * engine sizes the KV pool from it (memory_threshold x free after the weights, minus its
 * workspace). Weights: f32 sources are stored as f16 (out_type says so); f16, bf16 and the
 * quantised types are copied as they are. KV cache: kv_dtype f16 (default), bf16 or f32.
 */
#include <string.h>

#include "kernels/cuda/backend_cuda.cuh"
#include "kernels/ref/ref.h"
#include "util/alloc.h"
#include "util/dtype.h"

static constexpr size_t kPinnedBytes = (size_t)2 << 20;  /* two 1 MiB halves */
static constexpr size_t kWeightChunk = (size_t)4 << 20;  /* f32 elements converted per pass */
static constexpr int kDefaultPartition = 512;            /* split-K tokens per partition */

// ---------------------------------------------------------------------------------------------
// Scratch

pl_status pl_cuda_scratch(void **buf, size_t *cap, size_t need, const char *what) {
    if (need <= *cap) return PL_OK;
    size_t n = need > *cap + *cap / 2 ? need : *cap + *cap / 2;
    if (*buf) {
        cudaError_t e = cudaFree(*buf);
        *buf = NULL;
        *cap = 0;
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return pl_fail(PL_ERR_BACKEND, "cuda: freeing the %s scratch: %s (%s)", what,
                           cudaGetErrorName(e), cudaGetErrorString(e));
        }
    }
    cudaError_t e = cudaMalloc(buf, n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *buf = NULL;
        return pl_fail(PL_ERR_BACKEND, "cuda: cudaMalloc(%zu bytes) for the %s scratch: %s (%s)",
                       n, what, cudaGetErrorName(e), cudaGetErrorString(e));
    }
    *cap = n;
    return PL_OK;
}

// ---------------------------------------------------------------------------------------------
// Memory

static pl_status cuda_alloc(pl_backend *be, size_t n_bytes, void **out) {
    if (!out) return pl_fail(PL_ERR_INVALID_ARGUMENT, "cuda alloc: out is NULL");
    *out = NULL;
    pl_cuda_ctx *c = pl_cuda_ctx_of(be);
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, n_bytes ? n_bytes : 1);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return pl_fail(e == cudaErrorMemoryAllocation ? PL_ERR_OUT_OF_MEMORY : PL_ERR_BACKEND,
                       "cuda alloc: cudaMalloc(%zu bytes): %s (%s)", n_bytes,
                       cudaGetErrorName(e), cudaGetErrorString(e));
    }
    e = cudaMemsetAsync(p, 0, n_bytes, c->stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        cudaFree(p);
        return pl_fail(PL_ERR_BACKEND, "cuda alloc: cudaMemsetAsync: %s (%s)",
                       cudaGetErrorName(e), cudaGetErrorString(e));
    }
    *out = p;
    return PL_OK;
}

static void cuda_free(pl_backend *be, void *p) {
    (void)be;
    if (p && cudaFree(p) != cudaSuccess) (void)cudaGetLastError();
}

static pl_status cuda_upload(pl_backend *be, void *dst, const void *src, size_t n_bytes) {
    if (n_bytes == 0) return PL_OK;
    if (!dst || !src) return pl_fail(PL_ERR_INVALID_ARGUMENT, "cuda upload: dst or src is NULL");
    pl_cuda_ctx *c = pl_cuda_ctx_of(be);
    const size_t half = c->pinned_bytes / 2;
    if (n_bytes > half) { /* pageable: the driver stages it before returning */
        PL_CUDA_TRY(cudaMemcpyAsync(dst, src, n_bytes, cudaMemcpyHostToDevice, c->stream));
        return PL_OK;
    }
    if (c->pinned_used + n_bytes > half) {
        /* switch halves: mark this one, wait until the copies out of the other one are done */
        PL_CUDA_TRY(cudaEventRecord(c->half_free[c->pinned_half], c->stream));
        c->pinned_half ^= 1;
        c->pinned_used = 0;
        PL_CUDA_TRY(cudaEventSynchronize(c->half_free[c->pinned_half]));
    }
    unsigned char *stage = c->pinned + (size_t)c->pinned_half * half + c->pinned_used;
    memcpy(stage, src, n_bytes);
    PL_CUDA_TRY(cudaMemcpyAsync(dst, stage, n_bytes, cudaMemcpyHostToDevice, c->stream));
    c->pinned_used += (n_bytes + 63) & ~(size_t)63;
    return PL_OK;
}

static pl_status cuda_download(pl_backend *be, void *dst, const void *src, size_t n_bytes) {
    if (n_bytes == 0) return PL_OK;
    if (!dst || !src)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "cuda download: dst or src is NULL");
    pl_cuda_ctx *c = pl_cuda_ctx_of(be);
    PL_CUDA_TRY(cudaMemcpyAsync(dst, src, n_bytes, cudaMemcpyDeviceToHost, c->stream));
    PL_CUDA_TRY(cudaStreamSynchronize(c->stream));
    return PL_OK;
}

static pl_status cuda_sync(pl_backend *be) {
    PL_CUDA_TRY(cudaStreamSynchronize(pl_cuda_ctx_of(be)->stream));
    return PL_OK;
}

static pl_status cuda_memory_info(pl_backend *be, size_t *out_free, size_t *out_total) {
    (void)be;
    if (!out_free || !out_total)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "cuda memory_info: an out pointer is NULL");
    PL_CUDA_TRY(cudaMemGetInfo(out_free, out_total));
    return PL_OK;
}

static pl_status cuda_upload_weight(pl_backend *be, const void *src, pl_wtype src_type,
                                    size_t n_elems, void **out, pl_wtype *out_type) {
    if (!out || !out_type)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "cuda upload_weight: out or out_type is NULL");
    *out = NULL;
    uint64_t src_bytes = 0;
    if (!pl_wtype_bytes(src_type, n_elems, &src_bytes))
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "cuda upload_weight: %zu elements are not whole blocks of weight type %d "
                       "(%s)", n_elems, (int)src_type, pl_wtype_name(src_type));
    if (!src) return pl_fail(PL_ERR_INVALID_ARGUMENT, "cuda upload_weight: src is NULL");
    pl_cuda_ctx *c = pl_cuda_ctx_of(be);
    const pl_wtype stored = src_type == PL_WTYPE_F32 ? PL_WTYPE_F16 : src_type;
    const size_t stored_bytes = src_type == PL_WTYPE_F32 ? n_elems * 2 : (size_t)src_bytes;
    void *w = NULL;
    PL_TRY(cuda_alloc(be, stored_bytes, &w));
    pl_status st = PL_OK;
    if (src_type != PL_WTYPE_F32) {
        cudaError_t e = cudaMemcpyAsync(w, src, stored_bytes, cudaMemcpyHostToDevice, c->stream);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            st = pl_fail(PL_ERR_BACKEND, "cuda upload_weight: cudaMemcpyAsync: %s (%s)",
                         cudaGetErrorName(e), cudaGetErrorString(e));
        }
    } else {
        /* through an f32 staging chunk on the device, converted there (the GPU converts far
         * faster than one host core, and the host copy of the weights stays untouched) */
        const size_t chunk = n_elems < kWeightChunk ? n_elems : kWeightChunk;
        st = pl_cuda_scratch((void **)&c->wstage, &c->wstage_bytes, chunk * sizeof(float),
                             "weight staging");
        for (size_t off = 0; st == PL_OK && off < n_elems; off += chunk) {
            const size_t n = n_elems - off < chunk ? n_elems - off : chunk;
            cudaError_t e = cudaMemcpyAsync(c->wstage, (const float *)src + off, n * sizeof(float),
                                            cudaMemcpyHostToDevice, c->stream);
            if (e != cudaSuccess) {
                (void)cudaGetLastError();
                st = pl_fail(PL_ERR_BACKEND, "cuda upload_weight: cudaMemcpyAsync: %s (%s)",
                             cudaGetErrorName(e), cudaGetErrorString(e));
                break;
            }
            st = pl_cuda_convert_f32(c, (uint16_t *)w + off, PL_DTYPE_F16, c->wstage, n);
        }
        /* Not kept between uploads: the engine sizes the KV pool from memory_info after the
         * weights, and 16 MiB of idle staging would be taken from it. cudaFree waits for the
         * conversions. */
        if (cudaFree(c->wstage) != cudaSuccess) (void)cudaGetLastError();
        c->wstage = NULL;
        c->wstage_bytes = 0;
    }
    if (st != PL_OK) {
        cuda_free(be, w);
        return st;
    }
    *out = w;
    *out_type = stored;
    return PL_OK;
}

static void cuda_free_weight(pl_backend *be, void *w, const void *src) {
    (void)src;
    cuda_free(be, w);
}

// ---------------------------------------------------------------------------------------------
// Lifecycle

static void cuda_destroy(pl_backend *be) {
    if (!be) return;
    pl_cuda_ctx *c = pl_cuda_ctx_of(be);
    if (c) {
        if (c->stream) cudaStreamSynchronize(c->stream);
        cudaFree(c->act16);
        cudaFree(c->wdeq);
        cudaFree(c->attn_part);
        cudaFree(c->wstage);
        for (int i = 0; i < 2; i++)
            if (c->half_free[i]) cudaEventDestroy(c->half_free[i]);
        if (c->pinned) cudaFreeHost(c->pinned);
        if (c->blas) cublasDestroy(c->blas);
        if (c->stream) cudaStreamDestroy(c->stream);
        (void)cudaGetLastError();
        pl_free(c);
    }
    pl_free(be);
}

/* Positional (C++17 has no designated initialisers); the comments name the fields. */
static const pl_backend_ops cuda_ops = {
    /* .name = */ "cuda",
    /* .destroy = */ cuda_destroy,
    /* .alloc = */ cuda_alloc,
    /* .free = */ cuda_free,
    /* .upload = */ cuda_upload,
    /* .download = */ cuda_download,
    /* .sync = */ cuda_sync,
    /* .memory_info = */ cuda_memory_info,
    /* .upload_weight = */ cuda_upload_weight,
    /* .free_weight = */ cuda_free_weight,
    /* .embed = */ pl_cuda_embed,
    /* .rmsnorm = */ pl_cuda_rmsnorm,
    /* .add_rmsnorm = */ pl_cuda_add_rmsnorm,
    /* .matmul = */ pl_cuda_matmul,
    /* .rope = */ pl_cuda_rope,
    /* .kv_store = */ pl_cuda_kv_store,
    /* .attention = */ pl_cuda_attention,
    /* .silu_mul = */ pl_cuda_silu_mul,
    /* .gather_rows = */ pl_cuda_gather_rows,
    /* .copy_blocks = */ pl_cuda_copy_blocks,
    /* .matmul_group = */ NULL, /* one cuBLAS call per product: the stream keeps them queued */
    /* .add_bias = */ pl_cuda_add_bias,
};
static_assert(sizeof(pl_backend_ops) == sizeof(void *) * 22,
              "pl_backend_ops changed: update cuda_ops (positional initialiser)");

/* Creates the device objects of c; on failure the caller destroys what exists. */
static pl_status init_device(pl_cuda_ctx *c) {
    PL_CUDA_TRY(cudaSetDevice(c->device));
    PL_CUDA_TRY(cudaDeviceGetAttribute(&c->n_sm, cudaDevAttrMultiProcessorCount, c->device));
    PL_CUDA_TRY(cudaDeviceGetAttribute(&c->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                       c->device));
    PL_CUDA_TRY(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    PL_CUBLAS_TRY(cublasCreate(&c->blas));
    PL_CUBLAS_TRY(cublasSetStream(c->blas, c->stream));
    PL_CUDA_TRY(cudaMallocHost((void **)&c->pinned, kPinnedBytes));
    c->pinned_bytes = kPinnedBytes;
    for (int i = 0; i < 2; i++)
        PL_CUDA_TRY(cudaEventCreateWithFlags(&c->half_free[i], cudaEventDisableTiming));
    return PL_OK;
}

extern "C" pl_status pl_backend_cuda_create(const pl_backend_options *opt, pl_backend **out) {
    if (!out) return pl_fail(PL_ERR_INVALID_ARGUMENT, "backend cuda: out is NULL");
    *out = NULL;
    int n_dev = 0;
    cudaError_t e = cudaGetDeviceCount(&n_dev);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return pl_fail(PL_ERR_BACKEND, "backend cuda: no usable CUDA device: cudaGetDeviceCount: %s (%s)",
                       cudaGetErrorName(e), cudaGetErrorString(e));
    }
    if (n_dev <= 0) return pl_fail(PL_ERR_BACKEND, "backend cuda: no CUDA device found");
    const int device = opt ? opt->device : 0;
    if (device < 0 || device >= n_dev)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "backend cuda: device %d out of range (%d devices)",
                       device, n_dev);
    /* Read as an int: C callers may store any int in the enum, and in C++ loading an
     * out-of-range enum value is undefined (UBSan's -fsanitize=enum flags it). */
    int kv_raw = PL_DTYPE_AUTO;
    static_assert(sizeof(pl_dtype) == sizeof(int), "pl_dtype is int-sized");
    if (opt) memcpy(&kv_raw, &opt->kv_dtype, sizeof kv_raw);
    if (kv_raw == PL_DTYPE_AUTO) kv_raw = PL_KV_DTYPE_AUTO;
    if (kv_raw != PL_DTYPE_F16 && kv_raw != PL_DTYPE_BF16 && kv_raw != PL_DTYPE_F32)
        return pl_fail(PL_ERR_UNSUPPORTED, "backend cuda: kv_dtype %d is not f16, bf16 or f32",
                       kv_raw);
    const pl_dtype kv = (pl_dtype)kv_raw;

    pl_backend *be = (pl_backend *)pl_calloc(1, sizeof *be);
    pl_cuda_ctx *c = (pl_cuda_ctx *)pl_calloc(1, sizeof *c);
    if (!be || !c) {
        pl_free(be);
        pl_free(c);
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "backend cuda: no memory for the backend");
    }
    be->ops = &cuda_ops;
    be->ctx = c;
    be->is_host = false;
    be->wtype_bit = PL_WTYPE_ON_CUDA;
    be->f32_weight_type = PL_WTYPE_F16; /* as cuda_upload_weight stores it */
    be->kv_dtype = kv;
    c->device = device;
    c->split_mode = PL_CUDA_SPLIT_AUTO;
    c->partition_tokens = kDefaultPartition;
    pl_status st = init_device(c);
    if (st != PL_OK) {
        cuda_destroy(be);
        return pl_fail_prefix(st, "backend cuda (device %d)", device);
    }
    be->stream = c->stream;
    be->device = device;
    *out = be;
    return PL_OK;
}

// ---------------------------------------------------------------------------------------------
// Extras (cuda_backend.h)

extern "C" bool pl_backend_is_cuda(const pl_backend *be) { return be && be->ops == &cuda_ops; }

extern "C" pl_status pl_cuda_set_attention_split(pl_backend *be, pl_cuda_split_mode mode,
                                                 int partition_tokens) {
    if (!pl_backend_is_cuda(be))
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "set_attention_split: not a CUDA backend");
    if (mode != PL_CUDA_SPLIT_AUTO && mode != PL_CUDA_SPLIT_NEVER && mode != PL_CUDA_SPLIT_ALWAYS)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "set_attention_split: unknown mode %d", (int)mode);
    if (partition_tokens <= 0 || partition_tokens % 32 != 0)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "set_attention_split: partition_tokens %d is not a positive multiple of 32",
                       partition_tokens);
    pl_cuda_ctx *c = pl_cuda_ctx_of(be);
    c->split_mode = mode;
    c->partition_tokens = partition_tokens;
    return PL_OK;
}
