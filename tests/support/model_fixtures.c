/*
 * tests/support/model_fixtures.c - random tiny models and writers for every model format.
 *
 * The byte layouts are spelled out here independently of model/: llama2.c legacy and "ak42"
 * v1 (as llama2.c's export.py writes them), and Hugging Face directories (config.json written
 * with printf, safetensors headers built by hand, padded to 8 bytes like the reference
 * writer unless a misaligned file is asked for). All integers little-endian; the tests run on
 * little-endian hosts, which the writers check.
 */
#include "model_fixtures.h"

#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/dtype.h"

// ----------------------------------------------------------------------------
// files

static bool fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "model_fixtures: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return false;
}

const char *pl_fixture_path(const char *dir, const char *name) {
    static _Thread_local char buf[4][1024];
    static _Thread_local int next;
    char *b = buf[next++ & 3];
    snprintf(b, sizeof buf[0], "%s/%s", dir, name);
    return b;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

bool pl_fixture_remove_dir(const char *dir) {
    if (!dir || !dir[0] || strcmp(dir, "/") == 0) return fail("refusing to remove '%s'", dir);
    if (nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return fail("remove %s: %s", dir, strerror(errno));
    return true;
}

bool pl_fixture_read_file(const char *path, uint8_t **out, size_t *n) {
    *out = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return fail("open %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            fclose(f);
            return fail("out of memory reading %s", path);
        }
        len += fread(buf + len, 1, cap - len, f);
        if (len < cap) break;
        uint8_t *nb = realloc(buf, cap * 2);
        if (!nb) free(buf);
        buf = nb;
        cap *= 2;
    }
    bool err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return fail("read %s failed", path);
    }
    *out = buf;
    *n = len;
    return true;
}

bool pl_fixture_write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return fail("create %s: %s", path, strerror(errno));
    bool ok = fwrite(data, 1, n, f) == n;
    ok = (fclose(f) == 0) && ok;
    return ok ? true : fail("write %s failed", path);
}

bool pl_fixture_truncate(const char *path, size_t n) {
    if (truncate(path, (off_t)n) != 0) return fail("truncate %s: %s", path, strerror(errno));
    return true;
}

bool pl_fixture_overwrite(const char *path, size_t offset, const void *bytes, size_t n) {
    FILE *f = fopen(path, "r+b");
    if (!f) return fail("open %s: %s", path, strerror(errno));
    bool ok = fseek(f, (long)offset, SEEK_SET) == 0 && fwrite(bytes, 1, n, f) == n;
    ok = (fclose(f) == 0) && ok;
    return ok ? true : fail("overwrite %s at %zu failed", path, offset);
}

/* A growable byte buffer for building files in memory. */
typedef struct buf {
    uint8_t *p;
    size_t n, cap;
    bool oom;
} buf;

static void put(buf *b, const void *data, size_t n) {
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n) cap *= 2;
        uint8_t *np = realloc(b->p, cap);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void put_i32(buf *b, int32_t v) {
    uint8_t le[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(b, le, 4);
}

static void put_u64(buf *b, uint64_t v) {
    uint8_t le[8];
    for (int i = 0; i < 8; i++) le[i] = (uint8_t)(v >> (8 * i));
    put(b, le, 8);
}

static void putf(buf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

static bool flush(buf *b, const char *path) {
    bool ok = !b->oom && pl_fixture_write_file(path, b->p ? (const void *)b->p : "", b->n);
    free(b->p);
    memset(b, 0, sizeof *b);
    return ok;
}

bool pl_fixture_write_safetensors_raw(const char *path, const char *header, const void *data,
                                      size_t n_data) {
    buf b = {0};
    put_u64(&b, strlen(header));
    put(&b, header, strlen(header));
    if (n_data) put(&b, data, n_data);
    return flush(&b, path);
}

// ----------------------------------------------------------------------------
// models

void pl_fixture_random_config(pl_test_rng *r, pl_model_config *c) {
    memset(c, 0, sizeof *c);
    c->arch = PL_ARCH_LLAMA;
    c->head_dim = 2 * (1 + (int)pl_test_rng_below(r, 8));
    c->n_kv_heads = 1 + (int)pl_test_rng_below(r, 3);
    c->n_heads = c->n_kv_heads * (1 + (int)pl_test_rng_below(r, 3));
    c->dim = c->n_heads * c->head_dim;
    c->hidden_dim = 1 + c->dim / 2 + (int)pl_test_rng_below(r, (uint32_t)(2 * c->dim));
    c->n_layers = 1 + (int)pl_test_rng_below(r, 3);
    c->vocab_size = 3 + (int)pl_test_rng_below(r, 200);
    c->max_seq_len = 8 + (int)pl_test_rng_below(r, 120);
    c->norm_eps = 1e-5f;
    c->rope_theta = 10000.0f;
    c->rope_layout = 0;
    c->rope_scaling = PL_ROPE_SCALING_NONE;
    c->rope_factor = 1.0f;
    c->tied_embeddings = pl_test_rng_below(r, 2) == 0;
    c->bos_id = 1;
    c->eos_ids[0] = 2;
    c->n_eos = 1;
}

void pl_fixture_tp_config(pl_arch arch, int variant, pl_model_config *c) {
    pl_fixture_family_config(arch, variant, c);
    switch (arch) {
    case PL_ARCH_LLAMA:
        if (variant >= 2) c->dim = 64, c->n_heads = 8;
        c->hidden_dim = 76;
        break;
    case PL_ARCH_MISTRAL: c->dim = 32, c->n_heads = 4, c->hidden_dim = 70; break;
    case PL_ARCH_QWEN2: c->hidden_dim = 84; break;
    default: c->hidden_dim = 72; break;
    }
}

void pl_fixture_family_config(pl_arch arch, int variant, pl_model_config *c) {
    memset(c, 0, sizeof *c);
    c->arch = arch;
    c->n_layers = 2;
    c->max_seq_len = 256;
    c->norm_eps = 1e-5f;
    c->rope_layout = 1; /* Hugging Face's native layout */
    c->rope_factor = 1.0f;
    c->tied_embeddings = variant % 2 == 0;
    c->bos_id = 1;
    switch (arch) {
    case PL_ARCH_LLAMA: /* Llama 3: big theta, llama3 scaling, several EOS ids */
        c->dim = 48, c->n_heads = 6, c->n_kv_heads = 2, c->head_dim = 8, c->hidden_dim = 75;
        c->vocab_size = 97;
        c->rope_theta = 500000.0f;
        pl_fixture_set_rope_llama3(c, 8.0f, 1.0f, 4.0f, 64);
        c->eos_ids[0] = 2, c->eos_ids[1] = 5, c->eos_ids[2] = 7, c->n_eos = 3;
        break;
    case PL_ARCH_MISTRAL:
        c->dim = 40, c->n_heads = 5, c->n_kv_heads = 1, c->head_dim = 8, c->hidden_dim = 69;
        c->vocab_size = 89;
        c->rope_theta = 1000000.0f;
        c->sliding_window = 256; /* the whole context; a test narrows it */
        c->eos_ids[0] = 2, c->n_eos = 1;
        break;
    case PL_ARCH_QWEN2:
        c->dim = 36, c->n_heads = 6, c->n_kv_heads = 2, c->head_dim = 6, c->hidden_dim = 83;
        c->vocab_size = 101;
        c->rope_theta = 1000000.0f;
        c->norm_eps = 1e-6f;
        c->eos_ids[0] = 2, c->eos_ids[1] = 4, c->n_eos = 2;
        break;
    default: /* Qwen3: head_dim apart from dim / n_heads (q is 56 wide, the model 40) */
        c->dim = 40, c->n_heads = 4, c->n_kv_heads = 2, c->head_dim = 14, c->hidden_dim = 71;
        c->vocab_size = 103;
        c->rope_theta = 1000000.0f;
        c->norm_eps = 1e-6f;
        c->eos_ids[0] = 2, c->eos_ids[1] = 3, c->n_eos = 2;
        break;
    }
}

void pl_fixture_set_rope_linear(pl_model_config *c, float factor) {
    c->rope_scaling = PL_ROPE_SCALING_LINEAR;
    c->rope_factor = factor;
    c->rope_low_freq_factor = 0.0f;
    c->rope_high_freq_factor = 0.0f;
    c->rope_original_max_pos = 0;
}

void pl_fixture_set_rope_llama3(pl_model_config *c, float factor, float low_freq_factor,
                                float high_freq_factor, int original_max_position_embeddings) {
    c->rope_scaling = PL_ROPE_SCALING_LLAMA3;
    c->rope_factor = factor;
    c->rope_low_freq_factor = low_freq_factor;
    c->rope_high_freq_factor = high_freq_factor;
    c->rope_original_max_pos = original_max_position_embeddings;
}

static void fill(pl_test_rng *r, const pl_weight *w, float center, float scale) {
    float *d = (float *)w->data;
    size_t n = (size_t)w->rows * (size_t)w->cols;
    for (size_t i = 0; i < n; i++) d[i] = center + scale * pl_test_rng_float(r);
}

/* Every tensor in model order (embedding, each layer's, final norm, output), so a Llama
 * model's weights are what they were before biases and q/k norms existed. */
pl_model *pl_fixture_model(const pl_model_config *cfg, uint64_t seed) {
    pl_model *m = NULL;
    pl_status s = pl_model_alloc(cfg, PL_WTYPE_F32, "fixture", &m);
    if (s != PL_OK) {
        fail("pl_model_alloc: %s", pl_last_error());
        return NULL;
    }
    pl_test_rng r;
    pl_test_rng_seed(&r, seed);
    const pl_model_config *c = &m->cfg;
    size_t n = pl_model_n_slots(c);
    for (size_t i = 0; i < n; i++) {
        int layer;
        pl_tensor_role role = pl_model_slot_role(c, i, &layer);
        const pl_weight *w = &m->w[i];
        if (!pl_model_stores_tensor(c, role)) continue;
        switch (role) {
        case PL_T_TOKEN_EMBD: fill(&r, w, 0.0f, 1.0f); break;
        case PL_T_ATTN_NORM:
        case PL_T_FFN_NORM:
        case PL_T_OUTPUT_NORM:
        case PL_T_ATTN_Q_NORM:
        case PL_T_ATTN_K_NORM: fill(&r, w, 1.0f, 0.25f); break;
        case PL_T_ATTN_Q_BIAS:
        case PL_T_ATTN_K_BIAS:
        case PL_T_ATTN_V_BIAS: fill(&r, w, 0.0f, 0.5f); break;
        case PL_T_OUTPUT: fill(&r, w, 0.0f, 2.0f / sqrtf((float)c->dim)); break;
        default: fill(&r, w, 0.0f, 1.0f / sqrtf((float)w->cols)); break; /* fan_in */
        }
    }
    return m;
}

/* Multiplies every copy of role's tensor (all layers) by g. */
static void scale_role(pl_model *m, pl_tensor_role role, float g) {
    int n_layers = pl_tensor_role_per_layer(role) ? m->cfg.n_layers : 1;
    for (int l = 0; l < n_layers; l++) {
        const pl_weight *w = pl_model_weight(m, role, l);
        float *d = (float *)w->data;
        for (size_t i = 0; d && i < (size_t)w->rows * (size_t)w->cols; i++) d[i] *= g;
    }
}

pl_model *pl_fixture_family_model(const pl_model_config *cfg, uint64_t seed) {
    pl_model *m = pl_fixture_model(cfg, seed);
    if (!m) return NULL;
    scale_role(m, PL_T_TOKEN_EMBD, 0.3f);
    scale_role(m, PL_T_ATTN_Q, 4.0f);
    scale_role(m, PL_T_ATTN_K, 4.0f);
    scale_role(m, PL_T_ATTN_OUT, 6.0f);
    scale_role(m, PL_T_FFN_DOWN, 0.3f);
    const pl_tensor_role biases[] = {PL_T_ATTN_Q_BIAS, PL_T_ATTN_K_BIAS, PL_T_ATTN_V_BIAS};
    for (int i = 0; i < 3 && pl_model_has_tensor(cfg, biases[i]); i++)
        scale_role(m, biases[i], 0.2f);
    if (pl_model_has_tensor(cfg, PL_T_ATTN_Q_NORM)) {
        scale_role(m, PL_T_ATTN_Q_NORM, 3.0f);
        scale_role(m, PL_T_ATTN_K_NORM, 3.0f);
    }
    return m;
}

void pl_fixture_permute_to_half(float *dst, const float *src, int n_heads, int head_dim,
                                int cols) {
    int half = head_dim / 2;
    for (int h = 0; h < n_heads; h++)
        for (int p = 0; p < 2; p++)
            for (int j = 0; j < half; j++)
                memcpy(dst + ((size_t)h * head_dim + (size_t)p * half + j) * cols,
                       src + ((size_t)h * head_dim + 2 * (size_t)j + p) * cols,
                       (size_t)cols * sizeof(float));
}

void pl_fixture_permute_to_interleaved(float *dst, const float *src, int n_heads, int head_dim,
                                       int cols) {
    int half = head_dim / 2;
    for (int h = 0; h < n_heads; h++)
        for (int p = 0; p < 2; p++)
            for (int j = 0; j < half; j++)
                memcpy(dst + ((size_t)h * head_dim + 2 * (size_t)j + p) * cols,
                       src + ((size_t)h * head_dim + (size_t)p * half + j) * cols,
                       (size_t)cols * sizeof(float));
}

/* The heads whose elements RoPE pairs up in a tensor of role: its rows (q/k projections and
 * their biases) or, for a q/k norm, its one head-long vector; 0 for every other tensor. */
static int rope_heads(const pl_model_config *c, pl_tensor_role role) {
    switch (role) {
    case PL_T_ATTN_Q:
    case PL_T_ATTN_Q_BIAS: return c->n_heads;
    case PL_T_ATTN_K:
    case PL_T_ATTN_K_BIAS: return c->n_kv_heads;
    case PL_T_ATTN_Q_NORM:
    case PL_T_ATTN_K_NORM: return 1;
    default: return 0;
    }
}

/* w as f32 (malloc'd), with the RoPE-paired elements of n_heads heads moved from layout
 * `from` to layout `to`: rows of a matrix, elements of a vector. */
static float *to_f32(const pl_weight *w, int n_heads, int head_dim, int from, int to) {
    size_t n = (size_t)w->rows * (size_t)w->cols;
    float *f = malloc((n ? n : 1) * sizeof *f);
    if (!f) return NULL;
    pl_wtype_traits_of(w->type)->to_f32(w->data, f, n);
    if (n_heads == 0 || from == to) return f;
    float *g = malloc(n * sizeof *g);
    if (!g) {
        free(f);
        return NULL;
    }
    int cols = w->rows == 1 ? 1 : w->cols; /* a vector's elements are its "rows" */
    if (to == 1)
        pl_fixture_permute_to_half(g, f, n_heads, head_dim, cols);
    else
        pl_fixture_permute_to_interleaved(g, f, n_heads, head_dim, cols);
    free(f);
    return g;
}

static bool compare_weight(const char *name, const pl_weight *ref, const pl_weight *got,
                           int n_heads, int head_dim, int ref_layout, int got_layout, float atol,
                           float rtol) {
    if (ref->rows != got->rows || ref->cols != got->cols)
        return fail("%s: shape (%d, %d) vs (%d, %d)", name, ref->rows, ref->cols, got->rows,
                    got->cols);
    if (!got->data) return fail("%s: no data", name);
    float *a = to_f32(ref, n_heads, head_dim, ref_layout, got_layout);
    float *b = to_f32(got, 0, 0, 0, 0);
    bool ok = a && b;
    size_t n = (size_t)ref->rows * (size_t)ref->cols;
    for (size_t i = 0; ok && i < n; i++) {
        bool same = (atol == 0 && rtol == 0)
                        ? memcmp(&a[i], &b[i], sizeof(float)) == 0
                        : fabsf(a[i] - b[i]) <= atol + rtol * fabsf(a[i]);
        if (!same) ok = fail("%s[%zu]: ref %.9g got %.9g", name, i, a[i], b[i]);
    }
    free(a);
    free(b);
    return ok;
}

static bool is_vector(pl_tensor_role r) {
    switch (r) {
    case PL_T_ATTN_NORM:
    case PL_T_FFN_NORM:
    case PL_T_OUTPUT_NORM:
    case PL_T_ATTN_Q_NORM:
    case PL_T_ATTN_K_NORM:
    case PL_T_ATTN_Q_BIAS:
    case PL_T_ATTN_K_BIAS:
    case PL_T_ATTN_V_BIAS: return true;
    default: return false;
    }
}

bool pl_fixture_compare(const pl_model *ref, const pl_model *got, float atol, float rtol) {
    const pl_model_config *c = &ref->cfg, *g = &got->cfg;
    if (c->arch != g->arch || c->dim != g->dim || c->hidden_dim != g->hidden_dim ||
        c->n_layers != g->n_layers || c->n_heads != g->n_heads ||
        c->n_kv_heads != g->n_kv_heads || c->head_dim != g->head_dim ||
        c->vocab_size != g->vocab_size || c->tied_embeddings != g->tied_embeddings)
        return fail("configs differ");
    int rl = c->rope_layout, gl = g->rope_layout;
    bool ok = true;
    size_t n = pl_model_n_slots(c);
    for (size_t i = 0; ok && i < n; i++) {
        int layer;
        pl_tensor_role role = pl_model_slot_role(c, i, &layer);
        const pl_weight *a = &ref->w[i], *b = &got->w[i];
        char name[64];
        snprintf(name, sizeof name, "%s (layer %d)", pl_tensor_spec_of(role)->gguf, layer);
        if (!a->data) {
            if (b->data) ok = fail("%s: loaded but the reference has none", name);
            continue;
        }
        ok = compare_weight(name, a, b, rope_heads(c, role), c->head_dim, rl, gl, atol, rtol);
        if (ok && is_vector(role) && b->type != PL_WTYPE_F32)
            ok = fail("%s: norms and biases must be f32", name);
    }
    const pl_weight *emb = pl_model_weight(got, PL_T_TOKEN_EMBD, 0);
    if (ok && got->cfg.tied_embeddings && pl_model_weight(got, PL_T_OUTPUT, 0)->data != emb->data)
        ok = fail("tied model: the output projection does not share the embedding's data");
    return ok;
}

// ----------------------------------------------------------------------------
// llama2.c writers

static bool little_endian(void) {
    uint16_t one = 1;
    uint8_t b;
    memcpy(&b, &one, 1);
    return b == 1 || fail("big-endian host: the writers assume little-endian");
}

/* Appends the tensor of role as f32; q/k permuted to interleaved when the model is
 * rotate-half. */
static void put_f32(buf *b, const pl_model *m, pl_tensor_role role, int layer) {
    const pl_weight *w = pl_model_weight(m, role, layer);
    float *f = to_f32(w, rope_heads(&m->cfg, role), m->cfg.head_dim, m->cfg.rope_layout, 0);
    if (!f) {
        b->oom = true;
        return;
    }
    put(b, f, (size_t)w->rows * (size_t)w->cols * sizeof(float));
    free(f);
}

/* llama2.c's per-layer tensors, in its legacy order: rms_att, wq, wk, wv, wo, rms_ffn,
 * w1 (gate), w2 (down), w3 (up). */
static const pl_tensor_role k_l2c_layer[] = {PL_T_ATTN_NORM, PL_T_ATTN_Q,   PL_T_ATTN_K,
                                             PL_T_ATTN_V,    PL_T_ATTN_OUT, PL_T_FFN_NORM,
                                             PL_T_FFN_GATE,  PL_T_FFN_DOWN, PL_T_FFN_UP};

static void put_layers(buf *b, const pl_model *m, pl_tensor_role role) {
    for (int l = 0; l < m->cfg.n_layers; l++) put_f32(b, m, role, l);
}

static bool llama2c_compatible(const pl_model *m) {
    const pl_model_config *c = &m->cfg;
    if (c->arch != PL_ARCH_LLAMA)
        return fail("llama2.c holds only Llama models (arch %d)", (int)c->arch);
    if (c->head_dim * c->n_heads != c->dim)
        return fail("llama2.c needs head_dim = dim / n_heads (%d * %d != %d)", c->head_dim,
                    c->n_heads, c->dim);
    /* the readers assume llama2.c's fixed RoPE: writing anything else would drop it */
    if (c->rope_theta != 10000.0f || c->rope_scaling != PL_ROPE_SCALING_NONE)
        return fail("llama2.c holds only rope_theta 10000 without scaling (theta %g, "
                    "scaling %d): write a Hugging Face directory instead",
                    (double)c->rope_theta, (int)c->rope_scaling);
    return little_endian();
}

static void put_dims(buf *b, const pl_model_config *c, int32_t vocab) {
    put_i32(b, c->dim);
    put_i32(b, c->hidden_dim);
    put_i32(b, c->n_layers);
    put_i32(b, c->n_heads);
    put_i32(b, c->n_kv_heads);
    put_i32(b, vocab);
    put_i32(b, c->max_seq_len);
}

bool pl_fixture_write_llama2c(const pl_model *m, const char *path) {
    if (!llama2c_compatible(m)) return false;
    const pl_model_config *c = &m->cfg;
    buf b = {0};
    put_dims(&b, c, c->tied_embeddings ? c->vocab_size : -c->vocab_size);
    put_f32(&b, m, PL_T_TOKEN_EMBD, 0);
    for (size_t k = 0; k < sizeof k_l2c_layer / sizeof k_l2c_layer[0]; k++)
        put_layers(&b, m, k_l2c_layer[k]);
    put_f32(&b, m, PL_T_OUTPUT_NORM, 0);
    /* freq_cis_real then freq_cis_imag: (seq_len, head_dim / 2) each, as export.py writes */
    int half = c->head_dim / 2;
    for (int part = 0; part < 2; part++)
        for (int pos = 0; pos < c->max_seq_len; pos++)
            for (int j = 0; j < half; j++) {
                double ang = pos * pow(10000.0, -2.0 * j / c->head_dim);
                float v = (float)(part == 0 ? cos(ang) : sin(ang));
                put(&b, &v, 4);
            }
    if (!c->tied_embeddings) put_f32(&b, m, PL_T_OUTPUT, 0);
    return flush(&b, path);
}

bool pl_fixture_write_ak42(const pl_model *m, const char *path) {
    if (!llama2c_compatible(m)) return false;
    const pl_model_config *c = &m->cfg;
    buf b = {0};
    const uint8_t magic[4] = {0x32, 0x34, 0x6b, 0x61}; /* uint32 0x616b3432, little-endian */
    put(&b, magic, 4);
    put_i32(&b, 1);
    put_dims(&b, c, c->vocab_size);
    uint8_t shared = c->tied_embeddings ? 1 : 0;
    put(&b, &shared, 1);
    uint8_t zero[256] = {0};
    put(&b, zero, 256 - b.n);
    put_layers(&b, m, PL_T_ATTN_NORM);
    put_layers(&b, m, PL_T_FFN_NORM);
    put_f32(&b, m, PL_T_OUTPUT_NORM, 0);
    put_f32(&b, m, PL_T_TOKEN_EMBD, 0);
    for (size_t k = 0; k < sizeof k_l2c_layer / sizeof k_l2c_layer[0]; k++)
        if (k_l2c_layer[k] != PL_T_ATTN_NORM && k_l2c_layer[k] != PL_T_FFN_NORM)
            put_layers(&b, m, k_l2c_layer[k]);
    if (!c->tied_embeddings) put_f32(&b, m, PL_T_OUTPUT, 0);
    return flush(&b, path);
}

// ----------------------------------------------------------------------------
// Hugging Face writers

/* The families' config.json names, as transformers writes them. */
static const char *const k_hf_class[] = {"LlamaForCausalLM", "MistralForCausalLM",
                                         "Qwen2ForCausalLM", "Qwen3ForCausalLM"};
static const char *const k_model_type[] = {"llama", "mistral", "qwen2", "qwen3"};

bool pl_fixture_write_hf_config(const pl_model_config *c, const char *dir, bool omit_tie_key) {
    if ((int)c->arch < 0 || (int)c->arch > 3) return fail("arch %d has no writer", (int)c->arch);
    buf b = {0};
    putf(&b, "{\n  \"architectures\": [\"%s\"],\n  \"model_type\": \"%s\",\n",
         k_hf_class[c->arch], k_model_type[c->arch]);
    putf(&b, "  \"hidden_act\": \"silu\",\n  \"hidden_size\": %d,\n", c->dim);
    putf(&b, "  \"intermediate_size\": %d,\n  \"num_hidden_layers\": %d,\n", c->hidden_dim,
         c->n_layers);
    putf(&b, "  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n", c->n_heads,
         c->n_kv_heads);
    if (c->head_dim * c->n_heads != c->dim || c->arch == PL_ARCH_QWEN3)
        putf(&b, "  \"head_dim\": %d,\n", c->head_dim);
    putf(&b, "  \"vocab_size\": %d,\n  \"max_position_embeddings\": %d,\n", c->vocab_size,
         c->max_seq_len);
    putf(&b, "  \"rms_norm_eps\": %.9g,\n  \"rope_theta\": %.9g,\n", (double)c->norm_eps,
         (double)c->rope_theta);
    if (c->rope_scaling == PL_ROPE_SCALING_LINEAR)
        putf(&b, "  \"rope_scaling\": {\"type\": \"linear\", \"factor\": %.9g},\n",
             (double)c->rope_factor);
    else if (c->rope_scaling == PL_ROPE_SCALING_LLAMA3)
        putf(&b, "  \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": %.9g, "
             "\"low_freq_factor\": %.9g, \"high_freq_factor\": %.9g, "
             "\"original_max_position_embeddings\": %d},\n", (double)c->rope_factor,
             (double)c->rope_low_freq_factor, (double)c->rope_high_freq_factor,
             c->rope_original_max_pos);
    else
        putf(&b, "  \"rope_scaling\": null,\n");
    switch (c->arch) {
    case PL_ARCH_MISTRAL:
        if (c->sliding_window > 0) putf(&b, "  \"sliding_window\": %d,\n", c->sliding_window);
        else putf(&b, "  \"sliding_window\": null,\n");
        break;
    case PL_ARCH_QWEN2: /* as Qwen2.5 ships it: a window stated, and switched off */
        putf(&b, "  \"use_sliding_window\": false,\n  \"sliding_window\": 32768,\n"
                 "  \"max_window_layers\": 21,\n");
        break;
    case PL_ARCH_QWEN3:
        putf(&b, "  \"attention_bias\": false,\n  \"use_sliding_window\": false,\n"
                 "  \"sliding_window\": null,\n");
        break;
    default: putf(&b, "  \"attention_bias\": false,\n  \"mlp_bias\": false,\n"); break;
    }
    if (!omit_tie_key)
        putf(&b, "  \"tie_word_embeddings\": %s,\n", c->tied_embeddings ? "true" : "false");
    if (c->bos_id >= 0) putf(&b, "  \"bos_token_id\": %d,\n", c->bos_id);
    else putf(&b, "  \"bos_token_id\": null,\n");
    /* the first EOS id here, the whole list in generation_config.json (as Llama 3 ships) */
    if (c->n_eos > 0) putf(&b, "  \"eos_token_id\": %d,\n", c->eos_ids[0]);
    else putf(&b, "  \"eos_token_id\": null,\n");
    putf(&b, "  \"torch_dtype\": \"float32\"\n}\n");
    if (!flush(&b, pl_fixture_path(dir, "config.json"))) return false;
    if (c->n_eos <= 1) { /* none, and none left from an earlier model written here */
        remove(pl_fixture_path(dir, "generation_config.json"));
        return true;
    }
    putf(&b, "{\n  \"bos_token_id\": %d,\n  \"eos_token_id\": [", c->bos_id);
    for (int i = 0; i < c->n_eos; i++) putf(&b, "%s%d", i ? ", " : "", c->eos_ids[i]);
    putf(&b, "],\n  \"do_sample\": true,\n  \"temperature\": 0.6\n}\n");
    return flush(&b, pl_fixture_path(dir, "generation_config.json"));
}

typedef struct hf_tensor {
    char name[80];
    const pl_weight *w;
    pl_tensor_role role;
    bool vector; /* 1-D */
} hf_tensor;

static const char *st_dtype(pl_dtype t) {
    return t == PL_DTYPE_F16 ? "F16" : t == PL_DTYPE_BF16 ? "BF16" : "F32";
}

/* Tensor data in dtype t, RoPE pairs moved to rotate-half when the model is interleaved. */
static void put_hf_data(buf *b, const pl_model *m, const hf_tensor *t, pl_dtype dt) {
    float *f = to_f32(t->w, rope_heads(&m->cfg, t->role), m->cfg.head_dim, m->cfg.rope_layout, 1);
    if (!f) {
        b->oom = true;
        return;
    }
    size_t n = (size_t)t->w->rows * (size_t)t->w->cols;
    for (size_t i = 0; i < n; i++) {
        if (dt == PL_DTYPE_F32) {
            put(b, &f[i], 4);
        } else {
            uint16_t h = dt == PL_DTYPE_F16 ? pl_f32_to_f16(f[i]) : pl_f32_to_bf16(f[i]);
            put(b, &h, 2);
        }
    }
    free(f);
}

/* Writes tensors [first, last) as one safetensors file. */
static bool write_shard(const pl_model *m, const hf_tensor *t, size_t first, size_t last,
                        pl_dtype dt, bool misalign, const char *path) {
    buf h = {0}, d = {0};
    putf(&h, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (size_t i = first; i < last; i++) {
        size_t begin = d.n;
        put_hf_data(&d, m, &t[i], dt);
        if (t[i].vector)
            putf(&h, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%d],\"data_offsets\":[%zu,%zu]}",
                 t[i].name, st_dtype(dt), t[i].w->cols, begin, d.n);
        else
            putf(&h, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%d,%d],\"data_offsets\":[%zu,%zu]}",
                 t[i].name, st_dtype(dt), t[i].w->rows, t[i].w->cols, begin, d.n);
    }
    putf(&h, "}");
    size_t want = misalign ? 1 : 0; /* header length mod 8 */
    while (h.n % 8 != want) put(&h, " ", 1);
    buf f = {0};
    put_u64(&f, h.n);
    put(&f, h.p, h.n);
    put(&f, d.p, d.n);
    bool ok = !h.oom && !d.oom;
    free(h.p);
    free(d.p);
    if (!ok) {
        free(f.p);
        return fail("out of memory building %s", path);
    }
    return flush(&f, path);
}

/* A layer's tensors as transformers names them (model.layers.N.<suffix>), in a checkpoint's
 * usual order. Biases and q/k norms are written when the model has them. */
static const struct {
    const char *suffix;
    pl_tensor_role role;
} k_hf_layer[] = {
    {"input_layernorm.weight", PL_T_ATTN_NORM},
    {"self_attn.q_proj.weight", PL_T_ATTN_Q},
    {"self_attn.q_proj.bias", PL_T_ATTN_Q_BIAS},
    {"self_attn.k_proj.weight", PL_T_ATTN_K},
    {"self_attn.k_proj.bias", PL_T_ATTN_K_BIAS},
    {"self_attn.v_proj.weight", PL_T_ATTN_V},
    {"self_attn.v_proj.bias", PL_T_ATTN_V_BIAS},
    {"self_attn.q_norm.weight", PL_T_ATTN_Q_NORM},
    {"self_attn.k_norm.weight", PL_T_ATTN_K_NORM},
    {"self_attn.o_proj.weight", PL_T_ATTN_OUT},
    {"post_attention_layernorm.weight", PL_T_FFN_NORM},
    {"mlp.gate_proj.weight", PL_T_FFN_GATE},
    {"mlp.up_proj.weight", PL_T_FFN_UP},
    {"mlp.down_proj.weight", PL_T_FFN_DOWN},
};
#define N_HF_LAYER (sizeof k_hf_layer / sizeof k_hf_layer[0])

bool pl_fixture_write_hf(const pl_model *m, const char *dir, const pl_fixture_hf_options *opt) {
    pl_fixture_hf_options o = {0};
    if (opt) o = *opt;
    if (!little_endian()) return false;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return fail("mkdir %s: %s", dir, strerror(errno));
    const pl_model_config *c = &m->cfg;
    if (!pl_fixture_write_hf_config(c, dir, o.omit_tie_key)) return false;
    pl_dtype dt = o.dtype == PL_DTYPE_AUTO ? PL_DTYPE_F32 : o.dtype;

    size_t cap = 3 + N_HF_LAYER * (size_t)c->n_layers, n = 0;
    hf_tensor *t = calloc(cap, sizeof *t);
    if (!t) return fail("out of memory");
    snprintf(t[n].name, sizeof t[n].name, "model.embed_tokens.weight");
    t[n].role = PL_T_TOKEN_EMBD;
    t[n++].w = pl_model_weight(m, PL_T_TOKEN_EMBD, 0);
    for (int l = 0; l < c->n_layers; l++)
        for (size_t i = 0; i < N_HF_LAYER; i++) {
            const pl_weight *w = pl_model_weight(m, k_hf_layer[i].role, l);
            if (!w->data) continue;
            snprintf(t[n].name, sizeof t[0].name, "model.layers.%d.%s", l, k_hf_layer[i].suffix);
            t[n].w = w;
            t[n].role = k_hf_layer[i].role;
            t[n++].vector = is_vector(k_hf_layer[i].role);
        }
    snprintf(t[n].name, sizeof t[n].name, "model.norm.weight");
    t[n].w = pl_model_weight(m, PL_T_OUTPUT_NORM, 0);
    t[n].role = PL_T_OUTPUT_NORM;
    t[n++].vector = true;
    if (!c->tied_embeddings || o.lm_head_when_tied) {
        snprintf(t[n].name, sizeof t[n].name, "lm_head.weight");
        t[n].role = PL_T_OUTPUT;
        t[n++].w = pl_model_weight(m, PL_T_OUTPUT, 0);
    }

    bool ok = true;
    if (o.n_shards <= 1) {
        ok = write_shard(m, t, 0, n, dt, o.misalign, pl_fixture_path(dir, "model.safetensors"));
    } else {
        size_t shards = (size_t)o.n_shards < n ? (size_t)o.n_shards : n;
        buf idx = {0};
        putf(&idx, "{\n  \"metadata\": {\"total_size\": 0},\n  \"weight_map\": {");
        for (size_t s = 0; ok && s < shards; s++) {
            size_t first = s * n / shards, last = (s + 1) * n / shards;
            char file[64];
            snprintf(file, sizeof file, "model-%05zu-of-%05zu.safetensors", s + 1, shards);
            ok = write_shard(m, t, first, last, dt, o.misalign, pl_fixture_path(dir, file));
            for (size_t i = first; i < last; i++)
                putf(&idx, "%s\n    \"%s\": \"%s\"", i ? "," : "", t[i].name, file);
        }
        putf(&idx, "\n  }\n}\n");
        ok = flush(&idx, pl_fixture_path(dir, "model.safetensors.index.json")) && ok;
    }
    free(t);
    return ok;
}

// ----------------------------------------------------------------------------
// all formats

static const pl_fixture_format k_formats[] = {
    {"model.bin", PL_DTYPE_F32},  {"model-ak42.bin", PL_DTYPE_F32}, {"hf-f32", PL_DTYPE_F32},
    {"hf-f16", PL_DTYPE_F16},     {"hf-bf16", PL_DTYPE_BF16},       {"hf-sharded", PL_DTYPE_F32},
    {NULL, PL_DTYPE_AUTO},
};

const pl_fixture_format *pl_fixture_formats(void) { return k_formats; }

bool pl_fixture_write_all(const pl_model *m, const char *dir) {
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return fail("mkdir %s: %s", dir, strerror(errno));
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, k_formats[0].path);
    if (!pl_fixture_write_llama2c(m, p)) return false;
    snprintf(p, sizeof p, "%s/%s", dir, k_formats[1].path);
    if (!pl_fixture_write_ak42(m, p)) return false;
    for (size_t i = 2; k_formats[i].path; i++) {
        pl_fixture_hf_options o = {.dtype = k_formats[i].stored,
                                   .n_shards = strcmp(k_formats[i].path, "hf-sharded") ? 1 : 3};
        snprintf(p, sizeof p, "%s/%s", dir, k_formats[i].path);
        if (!pl_fixture_write_hf(m, p, &o)) return false;
    }
    return true;
}
