/*
 * tests/e2e/dense_ref.c - the dense reference forward pass (see dense_ref.h).
 *
 * Buffers: x, xb (dim); xb2 (max(dim, n_heads*head_dim)); q (n_heads*head_dim); att (seq_len);
 * hb, hb2 (hidden_dim); key_cache, value_cache (n_layers, max_len, n_kv_heads*head_dim); logits (vocab); row (the
 * widest matrix row, dequantised).
 * RoPE frequencies are recomputed here from theta and the scaling rule rather than taken from
 * pl_model_rope_inv_freq, so a bug there shows up as a mismatch.
 *
 * The families, from transformers' modeling files (not from engine/runner.c):
 *   Llama (modeling_llama.py): x = embed; per layer h = x + o(attn(rope(q(n1(x))), rope(k(..)),
 *     v(..))), x = h + down(silu(gate(n2(h))) * up(n2(h))); logits = lm_head(norm(x)).
 *   Mistral: Llama with a sliding window: the query at position p sees keys at positions
 *     p - sliding_window < t <= p (transformers masks t <= p - sliding_window).
 *   Qwen2: q_proj, k_proj, v_proj have biases (o_proj none).
 *   Qwen3: q_norm and k_norm (RMSNorm over head_dim, eps rms_norm_eps, one weight per element
 *     of a head, shared by the heads) on each head of q and k after the projections and
 *     before RoPE; head_dim from config, so q is n_heads * head_dim wide whatever dim is.
 * The architecture's traits are read from model/arch.h's rows (qkv_bias, qk_norm) and the
 * tensors through pl_model_weight: the data, not the runner's use of it.
 */
#include "dense_ref.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "util/dtype.h"

struct dense_ref {
    const pl_model *m;
    int max_len;
    float *x, *xb, *xb2, *q, *k, *v, *att, *hb, *hb2, *logits;
    float *key_cache, *value_cache;
    float *row;
    double *inv_freq;
    bool kv_f16; /* K and V are stored rounded to f16, as an f16 KV cache keeps them */
    bool round_inputs; /* a matvec's input is rounded to its weight's 16-bit type first */
};

static const pl_weight *W(const dense_ref *d, pl_tensor_role r, int layer) {
    return pl_model_weight(d->m, r, layer);
}

/* Row i of w as f32 into out (w->cols), through the type's reference dequantiser. */
static void get_row(const pl_weight *w, int i, float *out) {
    uint64_t row_bytes = 0;
    pl_wtype_bytes(w->type, (uint64_t)w->cols, &row_bytes);
    pl_wtype_traits_of(w->type)->to_f32((const char *)w->data + (size_t)i * row_bytes, out,
                                         (size_t)w->cols);
}

/* Hugging Face's inverse frequencies for each "rope_type", transcribed from transformers'
 * modeling_rope_utils.py (_compute_default/linear_scaling/llama3_parameters), not from
 * model/, so a slip in either shows up as a mismatch:
 *   default: inv_freq[j] = theta^(-2j / head_dim)
 *   linear:  inv_freq / factor (every position divided by factor)
 *   llama3:  wavelen = 2 pi / inv_freq; wavelengths longer than original_max / low_freq_factor
 *            are divided by factor, shorter than original_max / high_freq_factor kept, and the
 *            band between (ends included) blends the two with
 *            smooth = (original_max / wavelen - low_freq_factor) /
 *                     (high_freq_factor - low_freq_factor),
 *            inv_freq = (1 - smooth) * inv_freq / factor + smooth * inv_freq. */
static double llama3_inv_freq(const pl_model_config *c, double inv_freq) {
    double factor = c->rope_factor, low = c->rope_low_freq_factor,
           high = c->rope_high_freq_factor, old_ctx = (double)c->rope_original_max_pos;
    double wavelen = 2.0 * M_PI / inv_freq;
    if (wavelen > old_ctx / low) return inv_freq / factor;
    if (wavelen < old_ctx / high) return inv_freq;
    double smooth = (old_ctx / wavelen - low) / (high - low);
    return (1.0 - smooth) * inv_freq / factor + smooth * inv_freq;
}

static double scaled_inv_freq(const pl_model_config *c, int j) {
    double f = 1.0 / pow((double)c->rope_theta, (2.0 * j) / c->head_dim);
    switch (c->rope_scaling) {
    case PL_ROPE_SCALING_NONE: return f;
    case PL_ROPE_SCALING_LINEAR: return f / c->rope_factor;
    case PL_ROPE_SCALING_LLAMA3: return llama3_inv_freq(c, f);
    }
    return NAN; /* an unknown kind poisons every logit rather than passing as unscaled */
}

dense_ref *dense_ref_create(const pl_model *m, int max_len) {
    const pl_model_config *c = &m->cfg;
    dense_ref *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->m = m;
    d->max_len = max_len;
    int qd = c->n_heads * c->head_dim, kvd = c->n_kv_heads * c->head_dim;
    d->x = calloc((size_t)c->dim, 4);
    d->xb = calloc((size_t)c->dim, 4);
    d->xb2 = calloc((size_t)(c->dim > qd ? c->dim : qd), 4); /* also the attention output */
    d->q = calloc((size_t)qd, 4);
    d->k = calloc((size_t)kvd, 4);
    d->v = calloc((size_t)kvd, 4);
    d->att = calloc((size_t)max_len, 4);
    d->hb = calloc((size_t)c->hidden_dim, 4);
    d->hb2 = calloc((size_t)c->hidden_dim, 4);
    d->logits = calloc((size_t)c->vocab_size, 4);
    d->key_cache = calloc((size_t)c->n_layers * max_len * kvd, 4);
    d->value_cache = calloc((size_t)c->n_layers * max_len * kvd, 4);
    d->inv_freq = calloc((size_t)c->head_dim / 2 + 1, sizeof(double));
    int widest = c->dim > c->hidden_dim ? c->dim : c->hidden_dim;
    if (qd > widest) widest = qd;
    d->row = calloc((size_t)widest, 4);
    if (!d->x || !d->xb || !d->xb2 || !d->q || !d->k || !d->v || !d->att || !d->hb || !d->hb2 ||
        !d->logits || !d->key_cache || !d->value_cache || !d->inv_freq || !d->row) {
        dense_ref_free(d);
        return NULL;
    }
    for (int j = 0; j < c->head_dim / 2; j++) d->inv_freq[j] = scaled_inv_freq(c, j);
    return d;
}

void dense_ref_set_kv_dtype(dense_ref *d, pl_dtype kv) { d->kv_f16 = kv == PL_DTYPE_F16; }

void dense_ref_set_round_matmul_inputs(dense_ref *d, bool on) { d->round_inputs = on; }

/* x as the KV cache keeps it. */
static float kv_round(const dense_ref *d, float x) {
    return d->kv_f16 ? pl_f16_to_f32(pl_f32_to_f16(x)) : x;
}

void dense_ref_free(dense_ref *d) {
    if (!d) return;
    float *bufs[] = {d->x, d->xb, d->xb2, d->q, d->k, d->v, d->att, d->hb, d->hb2, d->logits,
                     d->key_cache, d->value_cache, d->row};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(d->inv_freq);
    free(d);
}

/* o (n) = x / sqrt(mean(x^2) + eps) * w; w: (n) f32 (norms are stored f32). o may be x. */
static void rmsnorm(float *o, const float *x, const pl_weight *w, int n, float eps) {
    const float *g = w->data;
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float s = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++) o[i] = g[i] * (s * x[i]);
}

/* o (rows) = W (rows, cols) x (cols) [+ b (rows), f32, when b is not NULL] */
static void matvec(dense_ref *d, float *o, const float *x, const pl_weight *w,
                   const pl_weight *b) {
    bool round = d->round_inputs && (w->type == PL_WTYPE_F16 || w->type == PL_WTYPE_BF16);
    for (int i = 0; i < w->rows; i++) {
        get_row(w, i, d->row);
        double acc = 0;
        for (int j = 0; j < w->cols; j++) {
            float xj = x[j];
            if (round && w->type == PL_WTYPE_F16) xj = pl_f16_to_f32(pl_f32_to_f16(xj));
            if (round && w->type == PL_WTYPE_BF16) xj = pl_bf16_to_f32(pl_f32_to_bf16(xj));
            acc += (double)d->row[j] * xj;
        }
        o[i] = (float)acc;
        if (b) o[i] += ((const float *)b->data)[i];
    }
}

/* Rotates each head of v (n_heads, head_dim) for position pos. */
static void rope(const dense_ref *d, float *v, int n_heads, int pos) {
    const pl_model_config *c = &d->m->cfg;
    int hd = c->head_dim, half = hd / 2;
    for (int h = 0; h < n_heads; h++) {
        float *p = v + h * hd;
        for (int j = 0; j < half; j++) {
            double a = pos * d->inv_freq[j];
            float cs = (float)cos(a), sn = (float)sin(a);
            int i0 = c->rope_layout == 0 ? 2 * j : j;
            int i1 = c->rope_layout == 0 ? 2 * j + 1 : j + half;
            float x0 = p[i0], x1 = p[i1];
            p[i0] = x0 * cs - x1 * sn;
            p[i1] = x0 * sn + x1 * cs;
        }
    }
}

const float *dense_ref_forward(dense_ref *d, int32_t token, int pos) {
    const pl_model *m = d->m;
    const pl_model_config *c = &m->cfg;
    const pl_arch_info *arch = pl_arch_get(c->arch);
    int D = c->dim, hd = c->head_dim, kvd = c->n_kv_heads * hd;
    int group = c->n_heads / c->n_kv_heads;
    /* the first position attention reaches: all of them, or the window's */
    int first = c->sliding_window > 0 && pos - c->sliding_window + 1 > 0
                    ? pos - c->sliding_window + 1 : 0;
    get_row(W(d, PL_T_TOKEN_EMBD, 0), token, d->x);

    for (int l = 0; l < c->n_layers; l++) {
        float *kc = d->key_cache + (size_t)l * d->max_len * kvd;
        float *vc = d->value_cache + (size_t)l * d->max_len * kvd;
        rmsnorm(d->xb, d->x, W(d, PL_T_ATTN_NORM, l), D, c->norm_eps);
        bool bias = arch->qkv_bias;
        matvec(d, d->q, d->xb, W(d, PL_T_ATTN_Q, l), bias ? W(d, PL_T_ATTN_Q_BIAS, l) : NULL);
        matvec(d, d->k, d->xb, W(d, PL_T_ATTN_K, l), bias ? W(d, PL_T_ATTN_K_BIAS, l) : NULL);
        matvec(d, d->v, d->xb, W(d, PL_T_ATTN_V, l), bias ? W(d, PL_T_ATTN_V_BIAS, l) : NULL);
        if (arch->qk_norm) {
            const pl_weight *qn = W(d, PL_T_ATTN_Q_NORM, l), *kn = W(d, PL_T_ATTN_K_NORM, l);
            for (int h = 0; h < c->n_heads; h++)
                rmsnorm(d->q + h * hd, d->q + h * hd, qn, hd, c->norm_eps);
            for (int h = 0; h < c->n_kv_heads; h++)
                rmsnorm(d->k + h * hd, d->k + h * hd, kn, hd, c->norm_eps);
        }
        rope(d, d->q, c->n_heads, pos);
        rope(d, d->k, c->n_kv_heads, pos);
        for (int i = 0; i < kvd; i++) {
            kc[(size_t)pos * kvd + i] = kv_round(d, d->k[i]);
            vc[(size_t)pos * kvd + i] = kv_round(d, d->v[i]);
        }
        for (int h = 0; h < c->n_heads; h++) {
            const float *q = d->q + h * hd;
            int kvh = h / group;
            float mx = -INFINITY;
            for (int t = first; t <= pos; t++) {
                const float *k = kc + (size_t)t * kvd + kvh * hd;
                double s = 0;
                for (int i = 0; i < hd; i++) s += (double)q[i] * k[i];
                d->att[t] = (float)(s / sqrt((double)hd));
                if (d->att[t] > mx) mx = d->att[t];
            }
            double sum = 0;
            for (int t = first; t <= pos; t++) {
                d->att[t] = expf(d->att[t] - mx);
                sum += d->att[t];
            }
            float *o = d->xb2 + h * hd; /* xb2 doubles as the (n_heads*head_dim) output */
            for (int i = 0; i < hd; i++) {
                double acc = 0;
                for (int t = first; t <= pos; t++)
                    acc += d->att[t] / sum * vc[(size_t)t * kvd + kvh * hd + i];
                o[i] = (float)acc;
            }
        }
        matvec(d, d->xb, d->xb2, W(d, PL_T_ATTN_OUT, l), NULL);
        for (int i = 0; i < D; i++) d->x[i] += d->xb[i];

        rmsnorm(d->xb, d->x, W(d, PL_T_FFN_NORM, l), D, c->norm_eps);
        matvec(d, d->hb, d->xb, W(d, PL_T_FFN_GATE, l), NULL);
        matvec(d, d->hb2, d->xb, W(d, PL_T_FFN_UP, l), NULL);
        for (int i = 0; i < c->hidden_dim; i++) {
            float g = d->hb[i];
            d->hb[i] = g / (1.0f + expf(-g)) * d->hb2[i];
        }
        matvec(d, d->xb, d->hb, W(d, PL_T_FFN_DOWN, l), NULL);
        for (int i = 0; i < D; i++) d->x[i] += d->xb[i];
    }
    rmsnorm(d->xb, d->x, W(d, PL_T_OUTPUT_NORM, 0), D, c->norm_eps);
    matvec(d, d->logits, d->xb, W(d, PL_T_OUTPUT, 0), NULL);
    return d->logits;
}

int dense_ref_greedy(dense_ref *d, const int32_t *prompt, int n_prompt, int n_out, int32_t *out) {
    if (n_prompt + n_out > d->max_len || n_prompt < 1) return -1;
    const float *logits = NULL;
    for (int i = 0; i < n_prompt; i++) logits = dense_ref_forward(d, prompt[i], i);
    int V = d->m->cfg.vocab_size;
    for (int o = 0; o < n_out; o++) {
        int32_t best = 0;
        for (int i = 1; i < V; i++)
            if (logits[i] > logits[best]) best = i;
        out[o] = best;
        if (o + 1 < n_out) logits = dense_ref_forward(d, best, n_prompt + o);
    }
    return 0;
}
