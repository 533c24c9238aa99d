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
    c->eos_id = 2;
    c->bos_ends_text = false;
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

pl_model *pl_fixture_model(const pl_model_config *cfg, uint64_t seed) {
    pl_model *m = NULL;
    pl_status s = pl_model_alloc(cfg, PL_DTYPE_F32, "fixture", &m);
    if (s != PL_OK) {
        fail("pl_model_alloc: %s", pl_last_error());
        return NULL;
    }
    pl_test_rng r;
    pl_test_rng_seed(&r, seed);
    const pl_model_config *c = &m->cfg;
    float s_dim = 1.0f / sqrtf((float)c->dim);
    fill(&r, &m->tok_embed, 0.0f, 1.0f);
    for (int l = 0; l < c->n_layers; l++) {
        pl_model_layer *L = &m->layers[l];
        fill(&r, &L->attn_norm, 1.0f, 0.25f);
        fill(&r, &L->wq, 0.0f, s_dim);
        fill(&r, &L->wk, 0.0f, s_dim);
        fill(&r, &L->wv, 0.0f, s_dim);
        fill(&r, &L->wo, 0.0f, 1.0f / sqrtf((float)(c->n_heads * c->head_dim)));
        fill(&r, &L->ffn_norm, 1.0f, 0.25f);
        fill(&r, &L->w1, 0.0f, s_dim);
        fill(&r, &L->w2, 0.0f, 1.0f / sqrtf((float)c->hidden_dim));
        fill(&r, &L->w3, 0.0f, s_dim);
    }
    fill(&r, &m->final_norm, 1.0f, 0.25f);
    if (!c->tied_embeddings) fill(&r, &m->lm_head, 0.0f, 2.0f * s_dim);
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

/* w as f32 (malloc'd), with q/k rows permuted from layout `from` to layout `to`. */
static float *to_f32(const pl_weight *w, int n_heads, int head_dim, int from, int to) {
    size_t n = (size_t)w->rows * (size_t)w->cols;
    float *f = malloc((n ? n : 1) * sizeof *f);
    if (!f) return NULL;
    for (size_t i = 0; i < n; i++) f[i] = pl_load_f32(w->data, w->dtype, i);
    if (n_heads == 0 || from == to) return f;
    float *g = malloc(n * sizeof *g);
    if (!g) {
        free(f);
        return NULL;
    }
    if (to == 1)
        pl_fixture_permute_to_half(g, f, n_heads, head_dim, w->cols);
    else
        pl_fixture_permute_to_interleaved(g, f, n_heads, head_dim, w->cols);
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

bool pl_fixture_compare(const pl_model *ref, const pl_model *got, float atol, float rtol) {
    const pl_model_config *c = &ref->cfg, *g = &got->cfg;
    if (c->dim != g->dim || c->hidden_dim != g->hidden_dim || c->n_layers != g->n_layers ||
        c->n_heads != g->n_heads || c->n_kv_heads != g->n_kv_heads ||
        c->head_dim != g->head_dim || c->vocab_size != g->vocab_size ||
        c->tied_embeddings != g->tied_embeddings)
        return fail("configs differ");
    int rl = c->rope_layout, gl = g->rope_layout;
    bool ok = compare_weight("tok_embed", &ref->tok_embed, &got->tok_embed, 0, 0, 0, 0, atol,
                             rtol);
    char name[64];
    for (int l = 0; ok && l < c->n_layers; l++) {
        const pl_model_layer *a = &ref->layers[l], *b = &got->layers[l];
        const struct {
            const char *n;
            const pl_weight *x, *y;
            int heads;
            bool norm;
        } t[] = {{"attn_norm", &a->attn_norm, &b->attn_norm, 0, true},
                 {"wq", &a->wq, &b->wq, c->n_heads, false},
                 {"wk", &a->wk, &b->wk, c->n_kv_heads, false},
                 {"wv", &a->wv, &b->wv, 0, false},
                 {"wo", &a->wo, &b->wo, 0, false},
                 {"ffn_norm", &a->ffn_norm, &b->ffn_norm, 0, true},
                 {"w1", &a->w1, &b->w1, 0, false},
                 {"w2", &a->w2, &b->w2, 0, false},
                 {"w3", &a->w3, &b->w3, 0, false}};
        for (size_t i = 0; ok && i < sizeof t / sizeof t[0]; i++) {
            snprintf(name, sizeof name, "layers[%d].%s", l, t[i].n);
            ok = compare_weight(name, t[i].x, t[i].y, t[i].heads, c->head_dim, rl, gl, atol,
                                rtol);
            if (ok && t[i].norm && t[i].y->dtype != PL_DTYPE_F32)
                ok = fail("%s: norms must be f32", name);
        }
    }
    ok = ok && compare_weight("final_norm", &ref->final_norm, &got->final_norm, 0, 0, 0, 0, atol,
                              rtol);
    if (ok && got->final_norm.dtype != PL_DTYPE_F32) ok = fail("final_norm: norms must be f32");
    ok = ok && compare_weight("lm_head", &ref->lm_head, &got->lm_head, 0, 0, 0, 0, atol, rtol);
    if (ok && got->cfg.tied_embeddings && got->lm_head.data != got->tok_embed.data)
        ok = fail("tied model: lm_head does not share tok_embed's data");
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

/* Appends w as f32; q/k permuted to interleaved when the model is rotate-half. */
static void put_f32(buf *b, const pl_model *m, const pl_weight *w, int heads) {
    float *f = to_f32(w, heads, m->cfg.head_dim, m->cfg.rope_layout, 0);
    if (!f) {
        b->oom = true;
        return;
    }
    put(b, f, (size_t)w->rows * (size_t)w->cols * sizeof(float));
    free(f);
}

typedef enum { K_ATT_NORM, K_WQ, K_WK, K_WV, K_WO, K_FFN_NORM, K_W1, K_W2, K_W3 } layer_kind;

static void put_layers(buf *b, const pl_model *m, layer_kind k) {
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const pl_model_layer *L = &m->layers[l];
        const pl_weight *w[] = {&L->attn_norm, &L->wq, &L->wk, &L->wv, &L->wo,
                                &L->ffn_norm,  &L->w1, &L->w2, &L->w3};
        int heads = k == K_WQ ? m->cfg.n_heads : k == K_WK ? m->cfg.n_kv_heads : 0;
        put_f32(b, m, w[k], heads);
    }
}

static bool llama2c_compatible(const pl_model *m) {
    const pl_model_config *c = &m->cfg;
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
    put_f32(&b, m, &m->tok_embed, 0);
    for (layer_kind k = K_ATT_NORM; k <= K_W3; k++) put_layers(&b, m, k);
    put_f32(&b, m, &m->final_norm, 0);
    /* freq_cis_real then freq_cis_imag: (seq_len, head_dim / 2) each, as export.py writes */
    int half = c->head_dim / 2;
    for (int part = 0; part < 2; part++)
        for (int pos = 0; pos < c->max_seq_len; pos++)
            for (int j = 0; j < half; j++) {
                double ang = pos * pow(10000.0, -2.0 * j / c->head_dim);
                float v = (float)(part == 0 ? cos(ang) : sin(ang));
                put(&b, &v, 4);
            }
    if (!c->tied_embeddings) put_f32(&b, m, &m->lm_head, 0);
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
    put_layers(&b, m, K_ATT_NORM);
    put_layers(&b, m, K_FFN_NORM);
    put_f32(&b, m, &m->final_norm, 0);
    put_f32(&b, m, &m->tok_embed, 0);
    for (layer_kind k = K_WQ; k <= K_W3; k++)
        if (k != K_FFN_NORM) put_layers(&b, m, k);
    if (!c->tied_embeddings) put_f32(&b, m, &m->lm_head, 0);
    return flush(&b, path);
}

// ----------------------------------------------------------------------------
// Hugging Face writers

bool pl_fixture_write_hf_config(const pl_model_config *c, const char *dir, bool omit_tie_key) {
    buf b = {0};
    putf(&b, "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": \"llama\",\n");
    putf(&b, "  \"hidden_act\": \"silu\",\n  \"hidden_size\": %d,\n", c->dim);
    putf(&b, "  \"intermediate_size\": %d,\n  \"num_hidden_layers\": %d,\n", c->hidden_dim,
         c->n_layers);
    putf(&b, "  \"num_attention_heads\": %d,\n  \"num_key_value_heads\": %d,\n", c->n_heads,
         c->n_kv_heads);
    if (c->head_dim * c->n_heads != c->dim) putf(&b, "  \"head_dim\": %d,\n", c->head_dim);
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
    if (!omit_tie_key)
        putf(&b, "  \"tie_word_embeddings\": %s,\n", c->tied_embeddings ? "true" : "false");
    if (c->bos_id >= 0) putf(&b, "  \"bos_token_id\": %d,\n", c->bos_id);
    else putf(&b, "  \"bos_token_id\": null,\n");
    if (c->eos_id >= 0) putf(&b, "  \"eos_token_id\": %d,\n", c->eos_id);
    else putf(&b, "  \"eos_token_id\": null,\n");
    putf(&b, "  \"torch_dtype\": \"float32\"\n}\n");
    return flush(&b, pl_fixture_path(dir, "config.json"));
}

typedef struct hf_tensor {
    char name[80];
    const pl_weight *w;
    int heads; /* q/k: heads to permute; else 0 */
    bool norm; /* 1-D */
} hf_tensor;

static const char *st_dtype(pl_dtype t) {
    return t == PL_DTYPE_F16 ? "F16" : t == PL_DTYPE_BF16 ? "BF16" : "F32";
}

/* Tensor data in dtype t, q/k permuted to rotate-half when the model is interleaved. */
static void put_hf_data(buf *b, const pl_model *m, const hf_tensor *t, pl_dtype dt) {
    float *f = to_f32(t->w, t->heads, m->cfg.head_dim, m->cfg.rope_layout, 1);
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
        if (t[i].norm)
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

bool pl_fixture_write_hf(const pl_model *m, const char *dir, const pl_fixture_hf_options *opt) {
    pl_fixture_hf_options o = {0};
    if (opt) o = *opt;
    if (!little_endian()) return false;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return fail("mkdir %s: %s", dir, strerror(errno));
    const pl_model_config *c = &m->cfg;
    if (!pl_fixture_write_hf_config(c, dir, o.omit_tie_key)) return false;
    pl_dtype dt = o.dtype == PL_DTYPE_AUTO ? PL_DTYPE_F32 : o.dtype;

    size_t cap = 3 + 9 * (size_t)c->n_layers, n = 0;
    hf_tensor *t = calloc(cap, sizeof *t);
    if (!t) return fail("out of memory");
    snprintf(t[n].name, sizeof t[n].name, "model.embed_tokens.weight");
    t[n++].w = &m->tok_embed;
    for (int l = 0; l < c->n_layers; l++) {
        const pl_model_layer *L = &m->layers[l];
        const hf_tensor e[] = {{"input_layernorm", &L->attn_norm, 0, true},
                               {"self_attn.q_proj", &L->wq, c->n_heads, false},
                               {"self_attn.k_proj", &L->wk, c->n_kv_heads, false},
                               {"self_attn.v_proj", &L->wv, 0, false},
                               {"self_attn.o_proj", &L->wo, 0, false},
                               {"post_attention_layernorm", &L->ffn_norm, 0, true},
                               {"mlp.gate_proj", &L->w1, 0, false},
                               {"mlp.up_proj", &L->w3, 0, false},
                               {"mlp.down_proj", &L->w2, 0, false}};
        for (size_t i = 0; i < sizeof e / sizeof e[0]; i++) {
            t[n] = e[i];
            snprintf(t[n++].name, sizeof t[0].name, "model.layers.%d.%.48s.weight", l,
                     e[i].name);
        }
    }
    snprintf(t[n].name, sizeof t[n].name, "model.norm.weight");
    t[n].w = &m->final_norm;
    t[n++].norm = true;
    if (!c->tied_embeddings || o.lm_head_when_tied) {
        snprintf(t[n].name, sizeof t[n].name, "lm_head.weight");
        t[n++].w = &m->lm_head;
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
