/*
 * model/dummy.c - "dummy:NAME" models: real shapes (tiny, the llama2.c stories models,
 * TinyLlama 1.1B, Llama 2 7B) with weights generated from a seed, for benchmarks and tests.
 *
 * Every element is a counter-based hash of (seed, tensor, index), so generation needs no
 * state, any element can be recomputed alone, and a model in f16/bf16 is exactly the f32 model
 * rounded (each value is computed in f32 and converted as it is stored; nothing is
 * materialised in f32 first, so Llama-2-7B in f16 needs 12.6 GiB, not 25 + 12.6). One hash
 * gives two elements; about 1 ns per element on one core, so stories110m takes ~0.15 s.
 *
 * Scales follow a usual init so activations stay O(1) through the layers and the logits are
 * neither flat nor one-hot: matrices uniform in +-1/sqrt(fan_in), embeddings +-1, norms
 * 1 +- 0.1, an untied lm_head +-4/sqrt(dim) (logits with a spread of a few units).
 *
 * Nothing is allocated until a preset is loaded; Llama-2-7B in f32 (25 GiB) is refused with
 * the numbers, and any preset larger than the machine's memory fails in pl_model_alloc.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "model/model_internal.h"
#include "util/dtype.h"

typedef struct preset {
    const char *name;
    int dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, max_seq_len;
    int rope_layout; /* 0 interleaved (llama2.c), 1 rotate-half (HF) */
    bool tied, bos_ends_text, f32_allowed; /* bos_ends_text: llama2.c's stories */
} preset;

static const preset k_presets[] = {
    {"tiny", 64, 172, 2, 4, 2, 512, 512, 0, false, false, true},
    {"stories15m", 288, 768, 6, 6, 6, 32000, 256, 0, true, true, true},
    {"stories110m", 768, 2048, 12, 12, 12, 32000, 1024, 0, true, true, true},
    {"tinyllama-1.1b", 2048, 5632, 22, 32, 4, 32000, 2048, 1, false, false, true},
    {"llama2-7b", 4096, 11008, 32, 32, 32, 32000, 4096, 1, false, false, false},
};
#define N_PRESETS (sizeof k_presets / sizeof k_presets[0])

static const char *const k_names[] = {"tiny", "stories15m", "stories110m", "tinyllama-1.1b",
                                      "llama2-7b", NULL};

const char *const *pl_model_dummy_names(void) { return k_names; }

// ----------------------------------------------------------------------------
// generation

/* splitmix64's finaliser: a bijection on 64 bits with full avalanche. */
static inline uint64_t mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

#define GOLDEN 0x9e3779b97f4a7c15ull
#define U24 (1.0f / 8388608.0f) /* 2 / 2^24: a 24-bit integer to [0, 2) */

/* Element pair (2k, 2k+1) of tensor `key`: center + scale * uniform[-1, 1). */
static inline void pair(uint64_t key, size_t k, float center, float scale, float *a, float *b) {
    uint64_t h = mix(key + (uint64_t)k * GOLDEN);
    *a = center + scale * ((float)(h >> 40) * U24 - 1.0f);
    *b = center + scale * ((float)((h >> 8) & 0xffffffu) * U24 - 1.0f);
}

/* w: (rows, cols) of w->type (a plain float type), writable (allocated by pl_model_alloc). */
static void fill(const pl_weight *w, uint64_t key, float center, float scale) {
    size_t n = (size_t)w->rows * (size_t)w->cols;
    float a, b;
    if (w->type == PL_WTYPE_F32) {
        float *d = (float *)w->data;
        for (size_t i = 0; i + 1 < n; i += 2) pair(key, i / 2, center, scale, &d[i], &d[i + 1]);
        if (n & 1) pair(key, n / 2, center, scale, &d[n - 1], &b);
    } else {
        uint16_t (*to16)(float) = w->type == PL_WTYPE_F16 ? pl_f32_to_f16 : pl_f32_to_bf16;
        uint16_t *d = (uint16_t *)w->data;
        for (size_t i = 0; i < n; i += 2) {
            pair(key, i / 2, center, scale, &a, &b);
            d[i] = to16(a);
            if (i + 1 < n) d[i + 1] = to16(b);
        }
    }
}

/* Every stored tensor in model order, each from its own key: norms 1 +- 0.1, biases +-0.1,
 * the embedding +-1, an untied output projection +-4/sqrt(dim), other matrices
 * +-1/sqrt(fan_in). (The order and the keys are those of the original Llama-only generator,
 * so the presets' weights did not change when the tensor table came.) */
static void generate(pl_model *m, uint64_t seed) {
    const pl_model_config *c = &m->cfg;
    uint64_t base = mix(seed ^ 0x7061676c6c6dull); /* "paglm": seeds 0 and 1 differ widely */
    uint64_t id = 0;
    size_t n = pl_model_n_slots(c);
    for (size_t s = 0; s < n; s++) {
        int layer;
        pl_tensor_role r = pl_model_slot_role(c, s, &layer);
        if (!pl_model_stores_tensor(c, r)) continue;
        const pl_tensor_spec *t = pl_tensor_spec_of(r);
        const pl_weight *w = &m->w[s];
        uint64_t key = mix(base + (++id) * GOLDEN);
        if (t->rows == PL_DIM_NONE && r != PL_T_ATTN_Q_BIAS && r != PL_T_ATTN_K_BIAS &&
            r != PL_T_ATTN_V_BIAS)
            fill(w, key, 1.0f, 0.1f);
        else if (t->rows == PL_DIM_NONE)
            fill(w, key, 0.0f, 0.1f);
        else if (r == PL_T_TOKEN_EMBD)
            fill(w, key, 0.0f, 1.0f);
        else if (r == PL_T_OUTPUT)
            fill(w, key, 0.0f, 4.0f / sqrtf((float)c->dim));
        else
            fill(w, key, 0.0f, 1.0f / sqrtf((float)w->cols));
    }
}

// ----------------------------------------------------------------------------
// loading

/* The preset called name, with or without the "dummy:" prefix; NULL if none. */
static const preset *find_preset(const char *name) {
    if (strncmp(name, "dummy:", 6) == 0) name += 6;
    for (size_t i = 0; i < N_PRESETS; i++)
        if (strcmp(name, k_presets[i].name) == 0) return &k_presets[i];
    return NULL;
}

pl_status pl_model_dummy_config(const char *name, pl_model_config *out) {
    if (!name || !out)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_model_dummy_config: NULL argument");
    const preset *p = find_preset(name);
    if (!p)
        return pl_fail(PL_ERR_NOT_FOUND, "dummy:%.64s: unknown preset (tiny, stories15m, "
                       "stories110m, tinyllama-1.1b, llama2-7b)", name);
    pl_model_config c = {0};
    c.dim = p->dim;
    c.hidden_dim = p->hidden_dim;
    c.n_layers = p->n_layers;
    c.n_heads = p->n_heads;
    c.n_kv_heads = p->n_kv_heads;
    c.head_dim = p->dim / p->n_heads;
    c.vocab_size = p->vocab_size;
    c.max_seq_len = p->max_seq_len;
    c.norm_eps = 1e-5f;
    c.rope_theta = 10000.0f;
    c.rope_layout = p->rope_layout;
    c.rope_scaling = PL_ROPE_SCALING_NONE;
    c.rope_factor = 1.0f;
    c.tied_embeddings = p->tied;
    c.bos_id = 1;
    c.eos_ids[c.n_eos++] = 2;
    if (p->bos_ends_text) c.eos_ids[c.n_eos++] = 1;
    *out = c;
    return PL_OK;
}

pl_status pl_model_load_dummy(const char *name, const pl_model_load_options *opt,
                              uint64_t max_weight_bytes, pl_model **out) {
    pl_model_config c;
    PL_TRY(pl_model_dummy_config(name, &c));
    /* a tokenizer with more ids than the preset (the Llama 3 tokenizer on stories15m) */
    if (opt->dummy_vocab > c.vocab_size) c.vocab_size = opt->dummy_vocab;
    const preset *p = find_preset(name);
    char full[96];
    snprintf(full, sizeof full, "dummy:%s", p->name);
    pl_wtype dt = opt->dtype == PL_DTYPE_AUTO ? PL_WTYPE_F32 : pl_wtype_of_dtype(opt->dtype);
    /* before a byte is generated */
    PL_TRY(pl_model_check_weight_limit(full, &c, dt, max_weight_bytes));
    if (dt == PL_WTYPE_F32 && !p->f32_allowed) {
        uint64_t f32_b, f16_b;
        PL_TRY(pl_model_config_weight_bytes(&c, PL_WTYPE_F32, &f32_b));
        PL_TRY(pl_model_config_weight_bytes(&c, PL_WTYPE_F16, &f16_b));
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: f32 weights would take %.1f GiB; load it "
                       "with dtype f16 or bf16 (%.1f GiB)", full, (double)f32_b / (1 << 30),
                       (double)f16_b / (1 << 30));
    }
    pl_model *m;
    PL_TRY(pl_model_alloc(&c, dt, full, &m));
    generate(m, opt->dummy_seed);
    *out = m;
    return PL_OK;
}
