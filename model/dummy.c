/*
 * model/dummy.c - "dummy:NAME" models: real shapes (tiny, the llama2.c stories models,
 * TinyLlama 1.1B, Llama 2 7B, a small Mixtral) with weights generated from a seed, for
 * benchmarks and tests.
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
 * A quantised dtype (q8_0 ... q4_k_m) draws the blocks themselves: levels from the hash,
 * scales set so the values span the same +-scale (a Q4_K sub-block's 6-bit scale drawn in
 * 48..63, its min making the levels symmetric about 0), each tensor in the type a GGUF file of that recipe would hold (the mixes' Q6_K
 * tensors, the fallbacks for rows that are not whole blocks). These are other weights than
 * the f32 model quantised, but of the same shapes, magnitudes and bytes: what a benchmark of
 * a quantised file of that shape needs, in seconds for Llama-2-7B instead of minutes.
 * Tensors are cut into chunks generated on every core (util/threadpool.h); every element or
 * block comes from its own index, so the bytes do not depend on the number of threads.
 *
 * Nothing is allocated until a preset is loaded; Llama-2-7B in f32 (25 GiB) is refused with
 * the numbers, and any preset larger than the machine's memory fails in pl_model_alloc.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "model/model_internal.h"
#include "util/alloc.h"
#include "util/dtype.h"
#include "util/quant.h"
#include "util/threadpool.h"

typedef struct preset {
    const char *name;
    int dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, max_seq_len;
    int rope_layout; /* 0 interleaved (llama2.c), 1 rotate-half (HF) */
    bool tied, bos_ends_text, f32_allowed; /* bos_ends_text: llama2.c's stories */
    pl_arch arch;                          /* 0: Llama */
    int n_experts, n_experts_used;         /* Mixtral: experts of hidden_dim */
} preset;

static const preset k_presets[] = {
#define LLAMA PL_ARCH_LLAMA, 0, 0
    {"tiny", 64, 172, 2, 4, 2, 512, 512, 0, false, false, true, LLAMA},
    {"stories15m", 288, 768, 6, 6, 6, 32000, 256, 0, true, true, true, LLAMA},
    {"stories110m", 768, 2048, 12, 12, 12, 32000, 1024, 0, true, true, true, LLAMA},
    {"tinyllama-1.1b", 2048, 5632, 22, 32, 4, 32000, 2048, 1, false, false, true, LLAMA},
    {"llama2-7b", 4096, 11008, 32, 32, 32, 32000, 4096, 1, false, false, false, LLAMA},
#undef LLAMA
    /* Mixtral 8x7B's proportions (8 experts of 3.5 x dim, 2 per token, 4:1 GQA of 128-wide
     * heads) at dim 1024 and 8 layers: 0.7B parameters, 0.2B active; for the MoE benchmarks */
    {"mixtral-mini", 1024, 3584, 8, 8, 2, 32000, 4096, 1, false, false, true, PL_ARCH_MIXTRAL,
     8, 2},
};
#define N_PRESETS (sizeof k_presets / sizeof k_presets[0])

static const char *const k_names[] = {"tiny", "stories15m", "stories110m", "tinyllama-1.1b",
                                      "llama2-7b", "mixtral-mini", NULL};

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

/* Elements [lo, hi) (lo even) of w, of a plain float type, writable (pl_model_alloc's). */
static void fill_floats(const pl_weight *w, uint64_t key, float center, float scale, size_t lo,
                        size_t hi) {
    float a, b;
    if (w->type == PL_WTYPE_F32) {
        float *d = (float *)w->data;
        for (size_t i = lo; i + 1 < hi; i += 2) pair(key, i / 2, center, scale, &d[i], &d[i + 1]);
        if ((hi - lo) & 1) pair(key, (hi - 1) / 2, center, scale, &d[hi - 1], &b);
    } else {
        uint16_t (*to16)(float) = w->type == PL_WTYPE_F16 ? pl_f32_to_f16 : pl_f32_to_bf16;
        uint16_t *d = (uint16_t *)w->data;
        for (size_t i = lo; i < hi; i += 2) {
            pair(key, i / 2, center, scale, &a, &b);
            d[i] = to16(a);
            if (i + 1 < hi) d[i + 1] = to16(b);
        }
    }
}

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

/* Block b of a tensor of quantised type t with values in about +-scale: the level bytes from
 * the hash, then the scale fields (see the header). */
static void fill_block(pl_wtype t, uint64_t key, size_t b, float scale, uint8_t *blk,
                       int block_bytes) {
    for (int j = 0; j * 8 < block_bytes; j++) {
        uint64_t h = mix(key + ((uint64_t)b * 32 + (uint64_t)j) * GOLDEN);
        int n = block_bytes - j * 8 < 8 ? block_bytes - j * 8 : 8;
        memcpy(blk + j * 8, &h, (size_t)n);
    }
    /* a per-block factor in [0.75, 1): blocks differ in scale as real ones do */
    const float u = 0.75f + 0.25f * (float)(mix(key ^ ((uint64_t)b * GOLDEN + 1)) >> 40) * (1.0f / 16777216.0f);
    const float s = scale * u;
    switch (t) {
    case PL_WTYPE_Q8_0: put16(blk, pl_f32_to_f16(s / 127.0f)); break;
    case PL_WTYPE_Q4_0: put16(blk, pl_f32_to_f16(s / 8.0f)); break;
    case PL_WTYPE_Q4_K:
    case PL_WTYPE_Q5_K: {
        /* d * sc * (q - mid) with mid the middle level: dmin = d * mid and m = sc, so each
         * sub-block spans +-d * sc * mid <= s */
        const float mid = t == PL_WTYPE_Q4_K ? 7.5f : 15.5f;
        uint8_t sc[8];
        for (int i = 0; i < 8; i++) sc[i] = (uint8_t)(48 + (blk[16 + i] & 15)); /* 48..63 */
        const float d = s / (mid * 63.0f);
        put16(blk, pl_f32_to_f16(d));
        put16(blk + 2, pl_f32_to_f16(d * mid));
        pl_q_pack_scale_min_k4(blk + 4, sc, sc);
        break;
    }
    default: { /* Q6_K: d * sc * (q - 32), q in 0..63 */
        const size_t sc_off = offsetof(pl_block_q6_k, scales), d_off = offsetof(pl_block_q6_k, d);
        for (size_t i = 0; i < PL_QK_K / 16; i++) /* 96..127 */
            blk[sc_off + i] = (uint8_t)(96 + (blk[sc_off + i] & 31));
        put16(blk + d_off, pl_f32_to_f16(s / (32.0f * 127.0f)));
        break;
    }
    }
}

/* One tensor to draw: where, its key and range. */
typedef struct gen_tensor {
    const pl_weight *w;
    uint64_t key;
    float center, scale;
    size_t units;     /* elements (float types) or blocks (quantised) */
    size_t chunk;     /* units per task (about 256K elements; even, so float pairs never
                         straddle two tasks) */
    size_t first_task;
} gen_tensor;

typedef struct gen_job {
    gen_tensor *t;
    size_t n;
} gen_job;

static void gen_task(void *vctx, int task, int thread) {
    (void)thread;
    const gen_job *g = vctx;
    size_t i = 0;
    while (i + 1 < g->n && g->t[i + 1].first_task <= (size_t)task) i++;
    const gen_tensor *t = &g->t[i];
    size_t lo = ((size_t)task - t->first_task) * t->chunk;
    size_t hi = lo + t->chunk < t->units ? lo + t->chunk : t->units;
    const pl_wtype_traits *tr = pl_wtype_traits_of(t->w->type);
    if (!pl_wtype_is_quant(t->w->type)) {
        fill_floats(t->w, t->key, t->center, t->scale, lo, hi);
        return;
    }
    uint8_t *base = (uint8_t *)t->w->data;
    for (size_t b = lo; b < hi; b++)
        fill_block(t->w->type, t->key, b, t->scale, base + b * (size_t)tr->block_bytes,
                   tr->block_bytes);
}

/* Every stored tensor in model order, each from its own key: norms 1 +- 0.1, biases +-0.1,
 * the embedding +-1, an untied output projection +-4/sqrt(dim), other matrices
 * +-1/sqrt(fan_in). (The order and the keys are those of the original Llama-only generator,
 * so the presets' weights did not change when the tensor table came.) */
static pl_status generate(pl_model *m, uint64_t seed) {
    const pl_model_config *c = &m->cfg;
    uint64_t base = mix(seed ^ 0x7061676c6c6dull); /* "paglm": seeds 0 and 1 differ widely */
    uint64_t id = 0;
    size_t n = pl_model_n_slots(c);
    gen_job g = {.t = pl_calloc(n, sizeof *g.t)};
    if (!g.t) return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: generator state", m->name);
    size_t tasks = 0;
    for (size_t s = 0; s < n; s++) {
        int layer;
        pl_tensor_role r = pl_model_slot_role(c, s, &layer);
        if (!pl_model_stores_tensor(c, r)) continue;
        const pl_tensor_spec *t = pl_tensor_spec_of(r);
        const pl_weight *w = &m->w[s];
        gen_tensor *gt = &g.t[g.n++];
        gt->w = w;
        gt->key = mix(base + (++id) * GOLDEN);
        if (t->rows == PL_DIM_NONE && r != PL_T_ATTN_Q_BIAS && r != PL_T_ATTN_K_BIAS &&
            r != PL_T_ATTN_V_BIAS)
            gt->center = 1.0f, gt->scale = 0.1f;
        else if (t->rows == PL_DIM_NONE)
            gt->center = 0.0f, gt->scale = 0.1f;
        else if (r == PL_T_TOKEN_EMBD)
            gt->center = 0.0f, gt->scale = 1.0f;
        else if (r == PL_T_OUTPUT)
            gt->center = 0.0f, gt->scale = 4.0f / sqrtf((float)c->dim);
        else
            gt->center = 0.0f, gt->scale = 1.0f / sqrtf((float)w->cols);
        const pl_wtype_traits *tr = pl_wtype_traits_of(w->type);
        gt->units = (size_t)w->rows * (size_t)w->cols / (size_t)tr->block_elems;
        gt->chunk = ((size_t)1 << 18) / (size_t)tr->block_elems;
        gt->first_task = tasks;
        tasks += (gt->units + gt->chunk - 1) / gt->chunk;
    }
    pl_threadpool *pool = NULL;
    int threads = tasks > 1 ? pl_cpu_count() : 1;
    pl_status st = pl_threadpool_create(threads > 64 ? 64 : threads, &pool);
    if (st == PL_OK) {
        pl_threadpool_run(pool, (int)tasks, gen_task, &g);
        pl_threadpool_destroy(pool);
    } else { /* no threads to be had: the same bytes on this one */
        for (size_t k = 0; k < tasks; k++) gen_task(&g, (int)k, 0);
        st = PL_OK;
    }
    pl_free(g.t);
    return st;
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
                       "stories110m, tinyllama-1.1b, llama2-7b, mixtral-mini)", name);
    pl_model_config c = {0};
    c.arch = p->arch;
    c.n_experts = p->n_experts;
    c.n_experts_used = p->n_experts_used;
    c.expert_hidden_dim = p->n_experts ? p->hidden_dim : 0;
    c.norm_topk_prob = p->n_experts > 0;
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
    pl_model *m;
    if (pl_dtype_is_quant(opt->dtype)) {
        pl_quant_recipe rc;
        PL_TRY(pl_quant_recipe_parse(pl_dtype_name(opt->dtype), &rc));
        PL_TRY(pl_model_check_weight_limit_recipe(full, &c, &rc, max_weight_bytes));
        PL_TRY(pl_model_alloc_recipe(&c, &rc, full, &m));
        pl_status st = generate(m, opt->dummy_seed);
        if (st != PL_OK) {
            pl_model_free(m);
            return st;
        }
        *out = m;
        return PL_OK;
    }
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
    PL_TRY(pl_model_alloc(&c, dt, full, &m));
    pl_status st = generate(m, opt->dummy_seed);
    if (st != PL_OK) {
        pl_model_free(m);
        return st;
    }
    *out = m;
    return PL_OK;
}
