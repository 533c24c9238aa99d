/*
 * model/model.c - the model module's front door: pl_model_load picks a loader from the path,
 * pl_model_alloc makes a model with blank weights, and the derived quantities every backend
 * needs (RoPE inverse frequencies, bytes and parameters streamed per token).
 *
 * Which loader: "dummy:NAME" -> dummy.c; a directory, or a file inside one that is a
 * safetensors file, its index or config.json -> load_hf.c; a file starting with "GGUF" ->
 * refused (not supported yet); anything else -> load_llama2c.c, which tells the "ak42"
 * versioned format from the legacy one by its magic.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/model_internal.h"
#include "util/alloc.h"
#include "util/dtype.h"

// ----------------------------------------------------------------------------
// loading

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* A file inside a Hugging Face directory: load the directory, with this file as the weights
 * (NULL for config.json: the directory's own weights). */
static pl_status load_hf_file(const char *path, const pl_model_load_options *opt,
                              uint64_t limit, pl_model **out) {
    const char *slash = strrchr(path, '/');
    char *dir = pl_strdup(slash ? path : ".");
    if (!dir) return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    if (slash) dir[slash == path ? 1 : (size_t)(slash - path)] = '\0';
    const char *weights = ends_with(path, "config.json") ? NULL : path;
    pl_status s = pl_model_load_hf(dir, weights, opt, limit, out);
    pl_free(dir);
    return s;
}

pl_status pl_model_load(const char *path, const pl_model_load_options *opt, pl_model **out) {
    return pl_model_load_within(path, opt, 0, out);
}

pl_status pl_model_load_within(const char *path, const pl_model_load_options *opt,
                               uint64_t limit, pl_model **out) {
    if (!out) return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_model_load: out is NULL");
    *out = NULL;
    if (!path || !path[0])
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_model_load: path is NULL or empty");
    pl_model_load_options dflt = {PL_DTYPE_AUTO, 0};
    if (!opt) opt = &dflt;
    if (opt->dtype < PL_DTYPE_AUTO || opt->dtype > PL_DTYPE_BF16)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_model_load: dtype = %d is not a pl_dtype",
                       (int)opt->dtype);
    if (strncmp(path, "dummy:", 6) == 0) return pl_model_load_dummy(path + 6, opt, limit, out);

    struct stat st;
    if (stat(path, &st) != 0) return pl_fail(PL_ERR_IO, "%s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) return pl_model_load_hf(path, NULL, opt, limit, out);
    if (!S_ISREG(st.st_mode)) return pl_fail(PL_ERR_IO, "%s: not a regular file", path);
    if (ends_with(path, ".safetensors") || ends_with(path, ".safetensors.index.json") ||
        ends_with(path, "config.json"))
        return load_hf_file(path, opt, limit, out);

    unsigned char magic[4] = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return pl_fail(PL_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t got = fread(magic, 1, sizeof magic, f);
    fclose(f);
    if (got == 4 && memcmp(magic, "GGUF", 4) == 0)
        return pl_fail(PL_ERR_UNSUPPORTED, "%s: GGUF files are not supported yet", path);
    return pl_model_load_llama2c(path, opt, limit, out);
}

// ----------------------------------------------------------------------------
// blank models

static pl_status physical_memory_check(const char *name, uint64_t bytes) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return PL_OK; /* unknown: let the allocation decide */
    uint64_t phys = (uint64_t)pages * (uint64_t)page;
    if (bytes <= phys) return PL_OK;
    return pl_fail(PL_ERR_OUT_OF_MEMORY,
                   "%s: weights need %.1f GiB but this machine has %.1f GiB of memory", name,
                   (double)bytes / (1 << 30), (double)phys / (1 << 30));
}

/* Places a (rows, cols) tensor of type t at *off in base (when base is not NULL) and moves
 * *off to the next 64-byte boundary after it. False on overflow. */
static bool place(pl_weight *w, int rows, int cols, pl_dtype t, uint8_t *base, uint64_t *off) {
    uint64_t n, end;
    if (!pl_model_mul_ok((uint64_t)rows, (uint64_t)cols, &n) ||
        !pl_model_mul_ok(n, pl_dtype_size(t), &n) || !pl_model_add_ok(*off, n, &end) ||
        !pl_model_add_ok(end, 63, &end))
        return false;
    if (base) {
        w->data = base + *off;
        w->dtype = t;
        w->rows = rows;
        w->cols = cols;
    }
    *off = end & ~(uint64_t)63;
    return true;
}

/* Lays out every tensor of c in one block and points the weights at it; with base == NULL
 * only computes the total size (*total), and m may then be NULL: sizing a model from its
 * config alone (pl_model_config_weight_bytes) is the same arithmetic as allocating it. */
static bool layout(pl_model *m, const pl_model_config *c, pl_dtype dt, uint8_t *base,
                   uint64_t *total) {
    pl_model scratch = {0};
    pl_model_layer scratch_layer; /* place() writes nothing without base: a stand-in target */
    if (!m) m = &scratch;
    uint64_t off = 0;
    int q = c->n_heads * c->head_dim, kv = c->n_kv_heads * c->head_dim;
    bool ok = place(&m->tok_embed, c->vocab_size, c->dim, dt, base, &off);
    for (int l = 0; ok && l < c->n_layers; l++) {
        pl_model_layer *L = base ? &m->layers[l] : &scratch_layer;
        ok = place(&L->attn_norm, 1, c->dim, PL_DTYPE_F32, base, &off) &&
             place(&L->wq, q, c->dim, dt, base, &off) &&
             place(&L->wk, kv, c->dim, dt, base, &off) &&
             place(&L->wv, kv, c->dim, dt, base, &off) &&
             place(&L->wo, c->dim, q, dt, base, &off) &&
             place(&L->ffn_norm, 1, c->dim, PL_DTYPE_F32, base, &off) &&
             place(&L->w1, c->hidden_dim, c->dim, dt, base, &off) &&
             place(&L->w2, c->dim, c->hidden_dim, dt, base, &off) &&
             place(&L->w3, c->hidden_dim, c->dim, dt, base, &off);
    }
    ok = ok && place(&m->final_norm, 1, c->dim, PL_DTYPE_F32, base, &off);
    if (c->tied_embeddings) {
        if (base) m->lm_head = m->tok_embed;
    } else {
        ok = ok && place(&m->lm_head, c->vocab_size, c->dim, dt, base, &off);
    }
    *total = off;
    return ok;
}

pl_status pl_model_alloc(const pl_model_config *cfg, pl_dtype dtype, const char *name,
                         pl_model **out) {
    if (!out) return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_model_alloc: out is NULL");
    *out = NULL;
    if (!name) name = "model";
    PL_TRY(pl_model_config_validate(cfg));
    if (dtype != PL_DTYPE_F32 && dtype != PL_DTYPE_F16 && dtype != PL_DTYPE_BF16)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "%s: dtype = %d must be f32, f16 or bf16", name,
                       (int)dtype);
    uint64_t total;
    if (!layout(NULL, cfg, dtype, NULL, &total) || total > SIZE_MAX)
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: weights do not fit the address space", name);
    PL_TRY(physical_memory_check(name, total));
    pl_model *m;
    PL_TRY(pl_model_shell_create(cfg, name, &m));
    void *base = NULL;
    pl_status s = pl_model_own_alloc(m, (size_t)total, &base);
    if (s != PL_OK) {
        pl_model_free(m);
        return s;
    }
    layout(m, cfg, dtype, base, &total);
    *out = m;
    return PL_OK;
}

pl_status pl_model_config_weight_bytes(const pl_model_config *cfg, pl_dtype dtype,
                                       uint64_t *out) {
    if (!out) return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_model_config_weight_bytes: out is NULL");
    PL_TRY(pl_model_config_validate(cfg));
    if (dtype != PL_DTYPE_F32 && dtype != PL_DTYPE_F16 && dtype != PL_DTYPE_BF16)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "pl_model_config_weight_bytes: dtype = %d must be f32, f16 or bf16",
                       (int)dtype);
    if (!layout(NULL, cfg, dtype, NULL, out))
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "model config: weight bytes overflow 64 bits");
    return PL_OK;
}

pl_status pl_model_check_weight_limit(const char *name, const pl_model_config *cfg,
                                      pl_dtype dtype, uint64_t limit) {
    if (!limit) return PL_OK;
    uint64_t bytes;
    PL_TRY(pl_model_config_weight_bytes(cfg, dtype, &bytes));
    if (bytes <= limit) return PL_OK;
    return pl_fail(PL_ERR_OUT_OF_MEMORY,
                   "%s: weights take %" PRIu64 " bytes (%.1f MiB) stored as %s, more than the "
                   "%" PRIu64 " bytes (%.1f MiB) of memory available (memory_limit_bytes, else "
                   "physical memory)",
                   name, bytes, (double)bytes / 1048576.0, pl_dtype_name(dtype),
                   limit, (double)limit / 1048576.0);
}

// ----------------------------------------------------------------------------
// derived quantities

void pl_model_rope_inv_freq(const pl_model_config *cfg, float *out) {
    int half = cfg->head_dim / 2;
    /* Llama 3.1: wavelengths shorter than original_ctx / high_freq_factor keep their frequency,
     * longer than original_ctx / low_freq_factor are slowed by factor, and the band between
     * blends the two linearly in original_ctx / wavelength. */
    double orig = cfg->rope_original_max_pos, lo = cfg->rope_low_freq_factor,
           hi = cfg->rope_high_freq_factor, factor = cfg->rope_factor;
    for (int j = 0; j < half; j++) {
        double f = pow((double)cfg->rope_theta, -2.0 * j / cfg->head_dim);
        if (cfg->rope_scaling == PL_ROPE_SCALING_LINEAR) {
            f /= factor;
        } else if (cfg->rope_scaling == PL_ROPE_SCALING_LLAMA3) {
            double wavelen = 2.0 * M_PI / f;
            if (wavelen > orig / lo) {
                f /= factor;
            } else if (wavelen >= orig / hi) {
                double smooth = (orig / wavelen - lo) / (hi - lo);
                f = (1.0 - smooth) * f / factor + smooth * f;
            }
        }
        out[j] = (float)f;
    }
}

static size_t matrix_bytes(const pl_weight *w) {
    return (size_t)w->rows * (size_t)w->cols * pl_dtype_size(w->dtype);
}

size_t pl_model_weight_bytes(const pl_model *m) {
    size_t n = matrix_bytes(&m->lm_head);
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const pl_model_layer *L = &m->layers[l];
        n += matrix_bytes(&L->wq) + matrix_bytes(&L->wk) + matrix_bytes(&L->wv) +
             matrix_bytes(&L->wo) + matrix_bytes(&L->w1) + matrix_bytes(&L->w2) +
             matrix_bytes(&L->w3);
    }
    return n;
}

size_t pl_model_matmul_params(const pl_model *m) {
    const pl_model_config *c = &m->cfg;
    size_t q = (size_t)c->n_heads * c->head_dim, kv = (size_t)c->n_kv_heads * c->head_dim;
    size_t per_layer = 2 * q * c->dim + 2 * kv * c->dim + 3 * (size_t)c->hidden_dim * c->dim;
    return per_layer * c->n_layers + (size_t)c->vocab_size * c->dim;
}
