/*
 * kernels/ref/backend_ref.c - the reference backend: host memory and the ops table.
 *
 * Memory is plain host heap (pl_calloc), so upload/download are memcpy and weights are used
 * where they lie (upload_weight returns src). The backend has no state besides its kv_dtype,
 * which may be f32, f16 or bf16: the CUDA backend stores f16 KV, and checking it against ref
 * with the same storage type separates kernel errors from rounding of the cache.
 *
 * Invariant: every op validates its arguments with the pl_ref_check_* functions (check.c, below
 * the ops) before touching memory; the cpu backend uses the same checks.
 */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "kernels/ref/ref.h"
#include "util/alloc.h"
#include "util/dtype.h"

// ---------------------------------------------------------------------------------------------
// host memory (shared with the cpu backend)

pl_status pl_ref_host_upload_weight(pl_backend *be, const void *src, pl_wtype src_type,
                                    size_t n_elems, void **out, pl_wtype *out_type) {
    (void)be;
    if (!out || !out_type)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "upload_weight: out or out_type is NULL");
    uint64_t bytes;
    if (!pl_wtype_bytes(src_type, n_elems, &bytes))
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "upload_weight: %zu elements are not whole blocks of weight type %d (%s)",
                       n_elems, (int)src_type, pl_wtype_name(src_type));
    if (!src) return pl_fail(PL_ERR_INVALID_ARGUMENT, "upload_weight: src is NULL");
    /* Zero copy: the weights stay where the loader put them (often an mmap of the file). */
    *out = (void *)(uintptr_t)src;
    *out_type = src_type;
    return PL_OK;
}

pl_status pl_ref_host_memory_info(pl_backend *be, size_t *out_free, size_t *out_total) {
    (void)be;
    if (!out_free || !out_total)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "memory_info: out_free or out_total is NULL");
    long page = sysconf(_SC_PAGESIZE), avail = sysconf(_SC_AVPHYS_PAGES),
         total = sysconf(_SC_PHYS_PAGES);
    if (page <= 0 || avail < 0 || total <= 0)
        return pl_fail(PL_ERR_BACKEND, "memory_info: sysconf cannot report physical memory");
    *out_free = (size_t)avail * (size_t)page;
    *out_total = (size_t)total * (size_t)page;
    return PL_OK;
}

static pl_status ref_alloc(pl_backend *be, size_t n_bytes, void **out) {
    (void)be;
    if (!out) return pl_fail(PL_ERR_INVALID_ARGUMENT, "alloc: out is NULL");
    *out = pl_calloc(1, n_bytes ? n_bytes : 1);
    if (!*out)
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "ref backend: cannot allocate %zu bytes", n_bytes);
    return PL_OK;
}

static void ref_free(pl_backend *be, void *p) {
    (void)be;
    pl_free(p);
}

static pl_status ref_copy(pl_backend *be, void *dst, const void *src, size_t n_bytes) {
    (void)be;
    if (n_bytes == 0) return PL_OK;
    if (!dst || !src) return pl_fail(PL_ERR_INVALID_ARGUMENT, "upload/download: NULL pointer");
    memcpy(dst, src, n_bytes);
    return PL_OK;
}

static pl_status ref_sync(pl_backend *be) {
    (void)be;
    return PL_OK;
}

static void ref_free_weight(pl_backend *be, void *w, const void *src) {
    (void)be;
    (void)w;
    (void)src;
}

static void ref_destroy(pl_backend *be) { pl_free(be); }

// ---------------------------------------------------------------------------------------------
// the table

static const pl_backend_ops ref_ops = {
    .name = "ref",
    .destroy = ref_destroy,
    .alloc = ref_alloc,
    .free = ref_free,
    .upload = ref_copy,
    .download = ref_copy,
    .sync = ref_sync,
    .memory_info = pl_ref_host_memory_info,
    .upload_weight = pl_ref_host_upload_weight,
    .free_weight = ref_free_weight,
    .embed = pl_ref_embed,
    .rmsnorm = pl_ref_rmsnorm,
    .add_rmsnorm = pl_ref_add_rmsnorm,
    .matmul = pl_ref_matmul,
    .rope = pl_ref_rope,
    .kv_store = pl_ref_kv_store,
    .attention = pl_ref_attention,
    .silu_mul = pl_ref_silu_mul,
    .gather_rows = pl_ref_gather_rows,
    .copy_blocks = pl_ref_copy_blocks,
    .add_bias = pl_ref_add_bias,
};

pl_status pl_backend_ref_create(const pl_backend_options *opt, pl_backend **out) {
    if (!out) return pl_fail(PL_ERR_INVALID_ARGUMENT, "backend ref: out is NULL");
    *out = NULL;
    pl_dtype kv = opt ? opt->kv_dtype : PL_DTYPE_AUTO;
    if (kv == PL_DTYPE_AUTO) kv = PL_KV_DTYPE_AUTO;
    if (!pl_ref_dtype_ok(kv))
        return pl_fail(PL_ERR_UNSUPPORTED, "backend ref: kv_dtype %d is not f32, f16 or bf16",
                       (int)kv);
    pl_backend *be = pl_calloc(1, sizeof *be);
    if (!be) return pl_fail(PL_ERR_OUT_OF_MEMORY, "backend ref: no memory");
    be->ops = &ref_ops;
    be->ctx = NULL;
    be->is_host = true;
    be->wtype_bit = PL_WTYPE_ON_REF;
    be->kv_dtype = kv;
    *out = be;
    return PL_OK;
}
