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
 *   Mixtral (modeling_mixtral.py, MixtralSparseMoeBlock): router_logits = gate(x);
 *     p = softmax(router_logits) in f32; the top_k of p (torch.topk: ties to the lower
 *     index), divided by their sum; out = sum_j p_j * w2(silu(w1(x)) * w3(x)) of expert j.
 *   Qwen2-MoE (Qwen2MoeSparseMoeBlock): the same, renormalised only with norm_topk_prob, plus
 *     sigmoid(shared_expert_gate(x)) * shared_expert(x); q/k/v biases as Qwen2.
 *   Qwen3-MoE: Qwen3's attention, Qwen2-MoE's block without the shared expert.
 *   Gemma 2 (modeling_gemma2.py): h = embed * sqrt(hidden_size); per layer
 *     h = h + post_attention_layernorm(attn(input_layernorm(h))) with scores
 *     q.k * query_pre_attn_scalar^-0.5, soft-capped tanh(s / c) * c, a window on the layers
 *     with layer_idx % 2 == 0; h = h + post_feedforward_layernorm(mlp(pre_feedforward_
 *     layernorm(h))), mlp = down(gelu_tanh(gate(x)) * up(x)); logits soft-capped likewise.
 *     Gemma's RMSNorm multiplies by (1 + w): the loader folds the 1 in (the fixture writes w),
 *     so the norms here are read as the factors they are.
 *   Gemma 3 (modeling_gemma3.py): Gemma 2 without soft-caps, with q_norm/k_norm as Qwen3,
 *     layer i windowed unless (i + 1) % sliding_window_pattern == 0, windowed layers rotated
 *     with rope_local_base_freq and no scaling.
 *   Phi-3 (modeling_phi3.py): Llama's computation (qkv_proj and gate_up_proj split into rows);
 *     longrope: inv_freq = 1 / (ext * theta^(2j / head_dim)), ext the long factors when the
 *     context (max_position_embeddings, the engine's default length) exceeds
 *     original_max_position_embeddings, else the short ones, and cos and sin multiplied by
 *     the attention factor.
 * The architecture's traits are read from model/arch.h's rows (qkv_bias, qk_norm, moe, ...)
 * and the tensors through pl_model_weight: the data, not the runner's use of it.
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
    double *inv_freq;       /* (head_dim / 2) global layers' */
    double *inv_freq_local; /* (head_dim / 2) Gemma 3's windowed layers' */
    double rope_mscale;     /* longrope's attention factor on cos and sin */
    float *moe_acc, *router; /* (dim), (n_experts) */
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
    case PL_ROPE_SCALING_LONGROPE: {
        const float *ext = c->max_seq_len > c->rope_original_max_pos ? c->rope_long_factors
                                                                     : c->rope_short_factors;
        return 1.0 / (ext[j] * pow((double)c->rope_theta, (2.0 * j) / c->head_dim));
    }
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
    int ffn = c->hidden_dim;
    if (c->expert_hidden_dim > ffn) ffn = c->expert_hidden_dim;
    if (c->shared_hidden_dim > ffn) ffn = c->shared_hidden_dim;
    d->hb = calloc((size_t)ffn, 4);
    d->hb2 = calloc((size_t)ffn, 4);
    d->moe_acc = calloc((size_t)c->dim, 4);
    d->router = calloc((size_t)(c->n_experts > 0 ? c->n_experts : 1), 4);
    d->inv_freq_local = calloc((size_t)c->head_dim / 2 + 1, sizeof(double));
    d->logits = calloc((size_t)c->vocab_size, 4);
    d->key_cache = calloc((size_t)c->n_layers * max_len * kvd, 4);
    d->value_cache = calloc((size_t)c->n_layers * max_len * kvd, 4);
    d->inv_freq = calloc((size_t)c->head_dim / 2 + 1, sizeof(double));
    int widest = c->dim > ffn ? c->dim : ffn;
    if (qd > widest) widest = qd;
    d->row = calloc((size_t)widest, 4);
    if (!d->x || !d->xb || !d->xb2 || !d->q || !d->k || !d->v || !d->att || !d->hb || !d->hb2 ||
        !d->logits || !d->key_cache || !d->value_cache || !d->inv_freq || !d->row ||
        !d->moe_acc || !d->router || !d->inv_freq_local) {
        dense_ref_free(d);
        return NULL;
    }
    for (int j = 0; j < c->head_dim / 2; j++) {
        d->inv_freq[j] = scaled_inv_freq(c, j);
        double local = c->rope_theta_local > 0.0f ? c->rope_theta_local : c->rope_theta;
        d->inv_freq_local[j] = 1.0 / pow(local, (2.0 * j) / c->head_dim);
    }
    d->rope_mscale = c->rope_scaling == PL_ROPE_SCALING_LONGROPE ? c->rope_attn_factor : 1.0;
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
                     d->key_cache, d->value_cache, d->row, d->moe_acc, d->router};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free(d->inv_freq);
    free(d->inv_freq_local);
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

/* o (n) = rows row0 .. row0 + n - 1 of W (rows, cols) times x (cols) [+ b (n), f32, when b is
 * not NULL]: one expert's matrix inside a stacked tensor, or the whole matrix. */
static void matvec_rows(dense_ref *d, float *o, const float *x, const pl_weight *w,
                        const pl_weight *b, int row0, int n) {
    bool round = d->round_inputs && (w->type == PL_WTYPE_F16 || w->type == PL_WTYPE_BF16);
    /* the CUDA backend keeps an f32 matrix (a router) as f16: weights and inputs rounded */
    bool f32_as_f16 = d->round_inputs && w->type == PL_WTYPE_F32;
    for (int i = 0; i < n; i++) {
        get_row(w, row0 + i, d->row);
        if (f32_as_f16)
            for (int j = 0; j < w->cols; j++) d->row[j] = pl_f16_to_f32(pl_f32_to_f16(d->row[j]));
        double acc = 0;
        for (int j = 0; j < w->cols; j++) {
            float xj = x[j];
            if ((round && w->type == PL_WTYPE_F16) || f32_as_f16)
                xj = pl_f16_to_f32(pl_f32_to_f16(xj));
            if (round && w->type == PL_WTYPE_BF16) xj = pl_bf16_to_f32(pl_f32_to_bf16(xj));
            acc += (double)d->row[j] * xj;
        }
        o[i] = (float)acc;
        if (b) o[i] += ((const float *)b->data)[i];
    }
}

/* o (rows) = W (rows, cols) x (cols) [+ b (rows), f32, when b is not NULL] */
static void matvec(dense_ref *d, float *o, const float *x, const pl_weight *w,
                   const pl_weight *b) {
    matvec_rows(d, o, x, w, b, 0, w->rows);
}

/* Rotates each head of v (n_heads, head_dim) for position pos with frequencies inv_freq. */
static void rope(const dense_ref *d, float *v, int n_heads, int pos, const double *inv_freq) {
    const pl_model_config *c = &d->m->cfg;
    int hd = c->head_dim, half = hd / 2;
    for (int h = 0; h < n_heads; h++) {
        float *p = v + h * hd;
        for (int j = 0; j < half; j++) {
            double a = pos * inv_freq[j];
            float cs = (float)(cos(a) * d->rope_mscale), sn = (float)(sin(a) * d->rope_mscale);
            int i0 = c->rope_layout == 0 ? 2 * j : j;
            int i1 = c->rope_layout == 0 ? 2 * j + 1 : j + half;
            float x0 = p[i0], x1 = p[i1];
            p[i0] = x0 * cs - x1 * sn;
            p[i1] = x0 * sn + x1 * cs;
        }
    }
}

/* Whether layer l attends through the window (transformers' rule for each family). */
static bool windowed(const pl_model_config *c, int l) {
    if (c->sliding_window <= 0) return false;
    if (c->arch == PL_ARCH_GEMMA2) return l % 2 == 0;
    if (c->arch == PL_ARCH_GEMMA3) return (l + 1) % c->swa_pattern != 0;
    return true;
}

static double gelu_tanh(double x) {
    return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

/* o (dim) = down(act(gate(x)) * up(x)) with the matrices' rows row0 .. of width F. */
static void gated_mlp(dense_ref *d, float *o, const float *x, const pl_weight *gate,
                      const pl_weight *up, const pl_weight *down, int F, int e) {
    bool gelu = pl_arch_get(d->m->cfg.arch)->act == PL_ACT_GELU_TANH;
    int D = d->m->cfg.dim;
    matvec_rows(d, d->hb, x, gate, NULL, e * F, F);
    matvec_rows(d, d->hb2, x, up, NULL, e * F, F);
    for (int i = 0; i < F; i++) {
        float g = d->hb[i];
        d->hb[i] = (gelu ? (float)gelu_tanh(g) : g / (1.0f + expf(-g))) * d->hb2[i];
    }
    /* the down matrix of expert e: its D rows at e * D, each F wide */
    matvec_rows(d, o, d->hb, down, NULL, e * D, D);
}

/* The MoE block (Mixtral / Qwen2-MoE / Qwen3-MoE): o (dim) from x (dim). */
static void moe(dense_ref *d, float *o, const float *x, int l) {
    const pl_model_config *c = &d->m->cfg;
    int D = c->dim, E = c->n_experts, K = c->n_experts_used, F = c->expert_hidden_dim;
    matvec(d, d->router, x, W(d, PL_T_FFN_GATE_INP, l), NULL);
    /* softmax in f32 as torch's F.softmax(..., dtype=torch.float) */
    float mx = -INFINITY, sum = 0.0f;
    for (int e = 0; e < E; e++) mx = d->router[e] > mx ? d->router[e] : mx;
    for (int e = 0; e < E; e++) sum += expf(d->router[e] - mx);
    float p[PL_MODEL_MAX_EXPERTS];
    for (int e = 0; e < E; e++) p[e] = expf(d->router[e] - mx) / sum;
    int chosen[PL_MODEL_MAX_EXPERTS];
    float w[PL_MODEL_MAX_EXPERTS], total = 0.0f;
    for (int j = 0; j < K; j++) { /* torch.topk: the largest, ties to the lower index */
        int best = -1;
        for (int e = 0; e < E; e++) {
            bool taken = false;
            for (int i = 0; i < j; i++) taken |= chosen[i] == e;
            if (!taken && (best < 0 || p[e] > p[best])) best = e;
        }
        chosen[j] = best;
        w[j] = p[best];
        total += p[best];
    }
    for (int i = 0; i < D; i++) o[i] = 0.0f;
    for (int j = 0; j < K; j++) {
        float wj = c->norm_topk_prob ? w[j] / total : w[j];
        gated_mlp(d, d->moe_acc, x, W(d, PL_T_FFN_GATE_EXPS, l), W(d, PL_T_FFN_UP_EXPS, l),
                  W(d, PL_T_FFN_DOWN_EXPS, l), F, chosen[j]);
        for (int i = 0; i < D; i++) o[i] += wj * d->moe_acc[i];
    }
    if (pl_arch_get(c->arch)->shared_expert) {
        float g;
        matvec(d, &g, x, W(d, PL_T_FFN_GATE_INP_SHEXP, l), NULL);
        g = 1.0f / (1.0f + expf(-g));
        gated_mlp(d, d->moe_acc, x, W(d, PL_T_FFN_GATE_SHEXP, l), W(d, PL_T_FFN_UP_SHEXP, l),
                  W(d, PL_T_FFN_DOWN_SHEXP, l), c->shared_hidden_dim, 0);
        for (int i = 0; i < D; i++) o[i] += g * d->moe_acc[i];
    }
}

const float *dense_ref_forward(dense_ref *d, int32_t token, int pos) {
    const dense_ref *dd = d;
    const pl_model *m = d->m;
    const pl_model_config *c = &m->cfg;
    const pl_arch_info *arch = pl_arch_get(c->arch);
    int D = c->dim, hd = c->head_dim, kvd = c->n_kv_heads * hd;
    int group = c->n_heads / c->n_kv_heads;
    bool gemma = c->arch == PL_ARCH_GEMMA2 || c->arch == PL_ARCH_GEMMA3;
    double scale = 1.0 / sqrt(gemma && c->query_pre_attn_scalar > 0.0f
                                  ? (double)c->query_pre_attn_scalar : (double)hd);
    get_row(W(d, PL_T_TOKEN_EMBD, 0), token, d->x);
    if (gemma)
        for (int i = 0; i < D; i++) d->x[i] *= sqrtf((float)D);

    for (int l = 0; l < c->n_layers; l++) {
        /* the first position attention reaches: all of them, or the window's */
        int first = windowed(c, l) && pos - c->sliding_window + 1 > 0
                        ? pos - c->sliding_window + 1 : 0;
        const double *inv_freq = c->arch == PL_ARCH_GEMMA3 && windowed(c, l) ? dd->inv_freq_local
                                                                            : dd->inv_freq;
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
        rope(d, d->q, c->n_heads, pos, inv_freq);
        rope(d, d->k, c->n_kv_heads, pos, inv_freq);
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
                s *= scale;
                if (c->attn_softcap > 0.0f) s = tanh(s / c->attn_softcap) * c->attn_softcap;
                d->att[t] = (float)s;
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
        if (arch->post_norms) rmsnorm(d->xb, d->xb, W(d, PL_T_ATTN_POST_NORM, l), D, c->norm_eps);
        for (int i = 0; i < D; i++) d->x[i] += d->xb[i];

        rmsnorm(d->xb, d->x, W(d, PL_T_FFN_NORM, l), D, c->norm_eps);
        if (arch->moe)
            moe(d, d->xb2, d->xb, l);
        else
            gated_mlp(d, d->xb2, d->xb, W(d, PL_T_FFN_GATE, l), W(d, PL_T_FFN_UP, l),
                      W(d, PL_T_FFN_DOWN, l), c->hidden_dim, 0);
        if (arch->post_norms)
            rmsnorm(d->xb2, d->xb2, W(d, PL_T_FFN_POST_NORM, l), D, c->norm_eps);
        for (int i = 0; i < D; i++) d->x[i] += d->xb2[i];
    }
    rmsnorm(d->xb, d->x, W(d, PL_T_OUTPUT_NORM, 0), D, c->norm_eps);
    matvec(d, d->logits, d->xb, W(d, PL_T_OUTPUT, 0), NULL);
    if (c->final_softcap > 0.0f)
        for (int i = 0; i < c->vocab_size; i++)
            d->logits[i] = (float)(tanh((double)d->logits[i] / c->final_softcap) *
                                   c->final_softcap);
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
