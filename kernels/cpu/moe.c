/*
 * kernels/cpu/moe.c - mixture-of-experts ops on the CPU: the router's top-k, the grouped
 * expert products and the weighted combination.
 *
 * moe_matmul groups the step's slots by expert (a counting sort of ids) and multiplies each
 * expert's rows by its slice of the stacked matrix through the backend's own matmul_group,
 * so quantised experts are multiplied in place by the same kernels as the dense layers and
 * each expert's weights are streamed once per step whatever number of tokens chose it:
 *   - an expert's rows are gathered into a contiguous block, and its outputs scattered back,
 *     unless it has one slot: then x and out are used where they lie (decode copies nothing);
 *     the scratch holds one expert's rows at a time (the busiest expert's count), not the
 *     step's;
 *   - consecutive experts that read the same x (one token's slots in the gate/up product)
 *     share one matmul_group call of up to PL_MATMUL_MAX_PARTS parts, so a decode step's
 *     gate and up products for two experts are one pool dispatch.
 * moe_route and moe_combine are small (n_tokens x n_experts, n_tokens x k x dim): plain
 * loops on the calling thread; the router's choice is the reference's rule exactly (a tie to
 * the lower index), and its weights are computed in double as there.
 */
#include <math.h>
#include <string.h>

#include "kernels/cpu/cpu.h"
#include "kernels/ref/ref.h"
#include "util/alloc.h"

pl_status pl_cpu_moe_route(pl_backend *be, int32_t *ids, float *weights, const float *logits,
                           int n_tokens, int n_experts, int k, bool norm) {
    return pl_ref_moe_route(be, ids, weights, logits, n_tokens, n_experts, k, norm);
}

pl_status pl_cpu_moe_combine(pl_backend *be, float *out, const float *y, const float *weights,
                             int n_tokens, int k, int dim, const float *shared,
                             const float *shared_gate) {
    (void)be;
    PL_TRY(pl_ref_check_moe_combine(out, y, weights, n_tokens, k, dim, shared, shared_gate));
    for (int t = 0; t < n_tokens; t++) {
        float *o = out + (size_t)t * dim; /* (dim) */
        if (shared) {
            const float g = 1.0f / (1.0f + expf(-shared_gate[t]));
            const float *sh = shared + (size_t)t * dim;
            for (int d = 0; d < dim; d++) o[d] = g * sh[d];
        } else {
            memset(o, 0, (size_t)dim * sizeof *o);
        }
        for (int j = 0; j < k; j++) {
            const float w = weights[(size_t)t * k + j];
            const float *yr = y + ((size_t)t * k + j) * dim;
            for (int d = 0; d < dim; d++) o[d] += w * yr[d];
        }
    }
    return PL_OK;
}

/* Scratch for one moe_matmul: the slots sorted by expert, and one expert's gathered rows and
 * outputs (the largest expert's count of rows). Grown on demand, kept in the context (one
 * caller at a time). */
typedef struct moe_scratch {
    int32_t *order;  /* (n_slots) slots by expert */
    int32_t *start;  /* (n_experts + 1) first position of each expert in order */
    float *xg;       /* (max_rows, d_in) an expert's gathered rows */
    float *og;       /* (max_rows, sum of d_out) its outputs */
} moe_scratch;

static pl_status grow(void **p, size_t *cap, size_t need) {
    if (need <= *cap) return PL_OK;
    void *n = pl_reallocarray(*p, need, 1);
    if (!n) return pl_fail(PL_ERR_OUT_OF_MEMORY, "moe_matmul: no memory for %zu bytes of "
                           "scratch", need);
    *p = n;
    *cap = need;
    return PL_OK;
}

/* The calls to matmul_group, flushed when x changes or the parts fill up. */
typedef struct pending {
    pl_matmul_part parts[PL_MATMUL_MAX_PARTS];
    int n;
    const float *x;
    int rows;
} pending;

static pl_status flush(pl_backend *be, pending *p, int d_in) {
    if (p->n == 0) return PL_OK;
    pl_status s = pl_cpu_matmul_group(be, p->parts, p->n, p->x, p->rows, d_in);
    p->n = 0;
    return s;
}

static pl_status add(pl_backend *be, pending *p, const pl_matmul_part *part, const float *x,
                     int rows, int d_in) {
    if (p->n > 0 && (p->x != x || p->rows != rows || p->n == PL_MATMUL_MAX_PARTS))
        PL_TRY(flush(be, p, d_in));
    p->x = x;
    p->rows = rows;
    p->parts[p->n++] = *part;
    return PL_OK;
}

pl_status pl_cpu_moe_matmul(pl_backend *be, const pl_matmul_part *parts, int n_parts,
                            const float *x, int x_div, const int32_t *ids, int n_slots,
                            int n_experts, int d_in) {
    PL_TRY(pl_ref_check_moe_matmul(parts, n_parts, x, x_div, ids, n_slots, n_experts, d_in));
    if (n_slots == 0) return PL_OK;
    pl_cpu_ctx *c = be->ctx;
    for (int s = 0; s < n_slots; s++)
        if (ids[s] < 0 || ids[s] >= n_experts)
            return pl_fail(PL_ERR_INVALID_ARGUMENT, "moe_matmul: slot %d names expert %d of %d",
                           s, (int)ids[s], n_experts);
    size_t out_cols = 0;
    for (int i = 0; i < n_parts; i++) out_cols += (size_t)parts[i].d_out;
    moe_scratch m;
    PL_TRY(grow((void **)&c->moe_ints, &c->moe_ints_cap,
                ((size_t)n_slots + (size_t)n_experts + 1) * sizeof(int32_t)));
    m.order = c->moe_ints;
    m.start = m.order + n_slots;

    /* counting sort of the slots by expert (stable: slots keep their order in an expert) */
    memset(m.start, 0, ((size_t)n_experts + 1) * sizeof *m.start);
    for (int s = 0; s < n_slots; s++) m.start[ids[s] + 1]++;
    size_t max_rows = 0;
    for (int e = 0; e < n_experts; e++) {
        if ((size_t)m.start[e + 1] > max_rows) max_rows = (size_t)m.start[e + 1];
        m.start[e + 1] += m.start[e];
    }
    for (int s = 0; s < n_slots; s++) m.order[m.start[ids[s]]++] = s;
    for (int e = n_experts; e > 0; e--) m.start[e] = m.start[e - 1];
    m.start[0] = 0;
    if (max_rows > 1)
        PL_TRY(grow((void **)&c->moe_floats, &c->moe_floats_cap,
                    max_rows * ((size_t)d_in + out_cols) * sizeof(float)));
    m.xg = c->moe_floats;
    m.og = m.xg + max_rows * (size_t)d_in;

    pending p = {.n = 0};
    for (int e = 0; e < n_experts; e++) {
        int n = m.start[e + 1] - m.start[e];
        if (n == 0) continue;
        const int32_t *slots = m.order + m.start[e];
        /* one slot: x and out where they lie, batched with the other experts on the same x;
         * several: gathered, multiplied at once and scattered before the next expert */
        const float *xe = x + (size_t)(slots[0] / x_div) * d_in;
        if (n > 1) {
            PL_TRY(flush(be, &p, d_in));
            for (int j = 0; j < n; j++)
                memcpy(m.xg + (size_t)j * d_in, x + (size_t)(slots[j] / x_div) * d_in,
                       (size_t)d_in * sizeof *m.xg);
            xe = m.xg;
        }
        float *og = m.og;
        for (int i = 0; i < n_parts; i++) {
            const pl_wtype_traits *t = pl_wtype_traits_of(parts[i].w_type);
            size_t row_bytes = (size_t)d_in / (size_t)t->block_elems * (size_t)t->block_bytes;
            pl_matmul_part q = parts[i];
            q.w = (const unsigned char *)parts[i].w + (size_t)e * (size_t)q.d_out * row_bytes;
            q.out = n == 1 ? parts[i].out + (size_t)slots[0] * q.d_out : og;
            og += (size_t)n * q.d_out;
            PL_TRY(add(be, &p, &q, xe, n, d_in));
        }
        if (n == 1) continue;
        PL_TRY(flush(be, &p, d_in));
        og = m.og;
        for (int i = 0; i < n_parts; i++) {
            int d_out = parts[i].d_out;
            for (int j = 0; j < n; j++)
                memcpy(parts[i].out + (size_t)slots[j] * d_out, og + (size_t)j * d_out,
                       (size_t)d_out * sizeof *og);
            og += (size_t)n * d_out;
        }
    }
    PL_TRY(flush(be, &p, d_in));
    return PL_OK;
}
