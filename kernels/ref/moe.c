/*
 * kernels/ref/moe.c - reference mixture-of-experts ops: the router's top-k, the grouped expert
 * products and the weighted combination (shapes in kernels/backend.h).
 *
 * moe_route: per token, the softmax over all experts in double, then k passes each taking the
 * largest logit not yet taken, scanning experts upwards and replacing only on a strictly
 * larger value, so a tie goes to the lower index (torch.topk on the CPU does the same).
 * moe_matmul: slot by slot, each slot's row against its expert's matrix through the type's
 * reference dequantiser, accumulated in double: no grouping (the oracle need not be fast).
 */
#include <math.h>

#include "kernels/ref/ref.h"
#include "util/alloc.h"

pl_status pl_ref_check_moe_route(const int32_t *ids, const float *weights, const float *logits,
                                 int n_tokens, int n_experts, int k) {
    if (n_tokens < 0 || n_experts < 1 || k < 1 || k > n_experts)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "moe_route: n_tokens %d, n_experts %d, k %d "
                       "(1 <= k <= n_experts)", n_tokens, n_experts, k);
    if (n_tokens > 0 && (!ids || !weights || !logits))
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "moe_route: ids, weights or logits is NULL");
    return PL_OK;
}

pl_status pl_ref_check_moe_matmul(const pl_matmul_part *parts, int n_parts, const float *x,
                                  int x_div, const int32_t *ids, int n_slots, int n_experts,
                                  int d_in) {
    PL_TRY(pl_check_matmul_parts(parts, n_parts));
    if (n_slots < 0 || n_experts < 1 || x_div < 1 || d_in < 1)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "moe_matmul: n_slots %d, n_experts %d, x_div "
                       "%d, d_in %d", n_slots, n_experts, x_div, d_in);
    for (int i = 0; i < n_parts; i++) {
        /* a stacked matrix: n_experts * d_out rows of d_in */
        if ((long long)parts[i].d_out * n_experts > (1ll << 31) - 1)
            return pl_fail(PL_ERR_INVALID_ARGUMENT, "moe_matmul: %d experts x %d rows", n_experts,
                           parts[i].d_out);
        PL_TRY(pl_ref_check_matmul(parts[i].out, x, parts[i].w, parts[i].w_type, n_slots, d_in,
                                   parts[i].d_out));
    }
    if (n_slots > 0 && !ids) return pl_fail(PL_ERR_INVALID_ARGUMENT, "moe_matmul: ids is NULL");
    return PL_OK;
}

pl_status pl_ref_check_moe_combine(const float *out, const float *y, const float *weights,
                                   int n_tokens, int k, int dim, const float *shared,
                                   const float *shared_gate) {
    if (n_tokens < 0 || k < 1 || dim < 1)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "moe_combine: n_tokens %d, k %d, dim %d",
                       n_tokens, k, dim);
    if (n_tokens > 0 && (!out || !y || !weights))
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "moe_combine: out, y or weights is NULL");
    if (n_tokens > 0 && shared && !shared_gate)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "moe_combine: shared without shared_gate");
    return PL_OK;
}

pl_status pl_ref_moe_route(pl_backend *be, int32_t *ids, float *weights, const float *logits,
                           int n_tokens, int n_experts, int k, bool norm) {
    (void)be;
    PL_TRY(pl_ref_check_moe_route(ids, weights, logits, n_tokens, n_experts, k));
    for (int t = 0; t < n_tokens; t++) {
        const float *l = logits + (size_t)t * n_experts; /* (n_experts) */
        int32_t *id = ids + (size_t)t * k;                 /* (k) */
        float *w = weights + (size_t)t * k;                /* (k) */
        double mx = -INFINITY, sum = 0.0, chosen = 0.0;
        for (int e = 0; e < n_experts; e++)
            if (l[e] > mx) mx = l[e];
        for (int e = 0; e < n_experts; e++) sum += exp((double)l[e] - mx);
        for (int j = 0; j < k; j++) {
            int best = -1;
            for (int e = 0; e < n_experts; e++) {
                bool taken = false;
                for (int i = 0; i < j; i++) taken |= id[i] == e;
                /* NaN never wins; the first finite or infinite value does */
                if (!taken && (best < 0 || l[e] > l[best] || (isnan(l[best]) && !isnan(l[e]))))
                    best = e;
            }
            id[j] = best;
            double p = exp((double)l[best] - mx) / sum;
            chosen += p;
            w[j] = (float)p;
        }
        if (norm)
            for (int j = 0; j < k; j++) w[j] = (float)(w[j] / chosen);
    }
    return PL_OK;
}

pl_status pl_ref_moe_matmul(pl_backend *be, const pl_matmul_part *parts, int n_parts,
                            const float *x, int x_div, const int32_t *ids, int n_slots,
                            int n_experts, int d_in) {
    (void)be;
    PL_TRY(pl_ref_check_moe_matmul(parts, n_parts, x, x_div, ids, n_slots, n_experts, d_in));
    float *wrow = pl_malloc((size_t)d_in * sizeof(float)); /* (d_in) one weight row in f32 */
    if (!wrow)
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "moe_matmul: no memory for a row of %d floats",
                       d_in);
    for (int i = 0; i < n_parts; i++) {
        const pl_matmul_part *p = &parts[i];
        const pl_wtype_traits *t = pl_wtype_traits_of(p->w_type);
        const size_t row_bytes = (size_t)d_in / (size_t)t->block_elems * (size_t)t->block_bytes;
        for (int s = 0; s < n_slots; s++) {
            const float *xr = x + (size_t)(s / x_div) * d_in; /* (d_in) */
            const unsigned char *we = (const unsigned char *)p->w +
                                      (size_t)ids[s] * (size_t)p->d_out * row_bytes;
            for (int o = 0; o < p->d_out; o++) {
                t->to_f32(we + (size_t)o * row_bytes, wrow, (size_t)d_in);
                double acc = 0.0;
                for (int c = 0; c < d_in; c++) acc += (double)xr[c] * wrow[c];
                p->out[(size_t)s * p->d_out + o] = (float)acc;
            }
        }
    }
    pl_free(wrow);
    return PL_OK;
}

pl_status pl_ref_moe_combine(pl_backend *be, float *out, const float *y, const float *weights,
                             int n_tokens, int k, int dim, const float *shared,
                             const float *shared_gate) {
    (void)be;
    PL_TRY(pl_ref_check_moe_combine(out, y, weights, n_tokens, k, dim, shared, shared_gate));
    for (int t = 0; t < n_tokens; t++) {
        double g = shared ? 1.0 / (1.0 + exp(-(double)shared_gate[t])) : 0.0;
        for (int d = 0; d < dim; d++) {
            double acc = shared ? g * shared[(size_t)t * dim + d] : 0.0;
            for (int j = 0; j < k; j++)
                acc += (double)weights[(size_t)t * k + j] * y[((size_t)t * k + j) * dim + d];
            out[(size_t)t * dim + d] = (float)acc;
        }
    }
    return PL_OK;
}
