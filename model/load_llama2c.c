/*
 * model/load_llama2c.c - llama2.c checkpoints: the legacy header ("version 0") and the
 * versioned "ak42" format (version 1 = fp32; version 2 = int8 Q8_0, refused).
 *
 * Legacy (as stories260K.bin; see ../shared/models/README.md): 7 int32 (dim, hidden_dim,
 * n_layers, n_heads, n_kv_heads, vocab_size, seq_len), then fp32 tensors without padding:
 * token_embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3 (each stacked over layers),
 * rms_final, freq_cis_real, freq_cis_imag (seq_len x head_size/2 each; recomputed, skipped),
 * then wcls only when vocab_size is negative (a separate classifier); otherwise the classifier
 * is the embedding.
 *
 * Versioned (llama2.c export.py version1_export): a 256-byte header holding uint32 magic
 * 0x616b3432 ("ak42"), int32 version, the same 7 int32 (vocab_size positive), a uint8
 * shared_classifier flag, zero padding; then fp32 rms_att, rms_ffn, rms_final,
 * token_embedding, wq, wk, wv, wo, w1, w2, w3 and wcls when not shared. No RoPE tables.
 *
 * Validation order, so hostile headers fail on the field and never on an allocation: each
 * header field is range-checked (pl_model_config_check), then the exact file size the header
 * implies is computed in checked uint64 arithmetic and compared with the file's size. Only then
 * is a weight byte read. Neither format has a checksum, so the exact size is the one check of
 * consistency between header and data: a longer file is refused too.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "model/model_internal.h"
#include "util/alloc.h"

#define AK42_MAGIC 0x616b3432u
#define AK42_HEADER_BYTES 256
#define LEGACY_HEADER_BYTES 28

/* Little-endian int32 at p (the files are little-endian whatever the host). */
static int32_t rd_i32(const uint8_t *p) {
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                 (uint32_t)p[3] << 24;
    int32_t v;
    memcpy(&v, &u, 4);
    return v;
}

/* The tensors in file order. */
typedef enum {
    T_EMBED,
    T_ATT_NORM,
    T_WQ,
    T_WK,
    T_WV,
    T_WO,
    T_FFN_NORM,
    T_W1,
    T_W2,
    T_W3,
    T_FINAL_NORM,
    T_FREQ, /* freq_cis_real + freq_cis_imag: skipped */
    T_WCLS,
} tensor_kind;

static const char *const kind_name[] = {"token_embedding", "rms_att", "wq", "wk", "wv",
                                        "wo", "rms_ffn", "w1", "w2", "w3", "rms_final",
                                        "freq_cis", "wcls"};

static const tensor_kind legacy_order[] = {T_EMBED, T_ATT_NORM, T_WQ, T_WK, T_WV, T_WO,
                                           T_FFN_NORM, T_W1, T_W2, T_W3, T_FINAL_NORM,
                                           T_FREQ, T_WCLS};
static const tensor_kind v1_order[] = {T_ATT_NORM, T_FFN_NORM, T_FINAL_NORM, T_EMBED, T_WQ,
                                       T_WK, T_WV, T_WO, T_W1, T_W2, T_W3, T_WCLS};

/* Shape of one layer's (or the model's) tensor of this kind; *per_layer tells whether the
 * file stacks n_layers of them. */
static void shape(const pl_model_config *c, tensor_kind k, int *rows, int *cols,
                  bool *per_layer) {
    int q = c->n_heads * c->head_dim, kv = c->n_kv_heads * c->head_dim;
    *rows = *cols = 0;
    *per_layer = true;
    switch (k) {
    case T_EMBED: *rows = c->vocab_size; *cols = c->dim; *per_layer = false; break;
    case T_ATT_NORM:
    case T_FFN_NORM: *rows = 1; *cols = c->dim; break;
    case T_WQ: *rows = q; *cols = c->dim; break;
    case T_WK:
    case T_WV: *rows = kv; *cols = c->dim; break;
    case T_WO: *rows = c->dim; *cols = q; break;
    case T_W1:
    case T_W3: *rows = c->hidden_dim; *cols = c->dim; break;
    case T_W2: *rows = c->dim; *cols = c->hidden_dim; break;
    case T_FINAL_NORM: *rows = 1; *cols = c->dim; *per_layer = false; break;
    case T_FREQ: *rows = 2 * c->max_seq_len; *cols = c->head_dim / 2; *per_layer = false; break;
    case T_WCLS:
        *rows = c->tied_embeddings ? 0 : c->vocab_size;
        *cols = c->dim;
        *per_layer = false;
        break;
    }
}

static pl_weight *target(pl_model *m, tensor_kind k, int l) {
    pl_model_layer *L = &m->layers[l];
    switch (k) {
    case T_EMBED: return &m->tok_embed;
    case T_ATT_NORM: return &L->attn_norm;
    case T_WQ: return &L->wq;
    case T_WK: return &L->wk;
    case T_WV: return &L->wv;
    case T_WO: return &L->wo;
    case T_FFN_NORM: return &L->ffn_norm;
    case T_W1: return &L->w1;
    case T_W2: return &L->w2;
    case T_W3: return &L->w3;
    case T_FINAL_NORM: return &m->final_norm;
    case T_WCLS: return &m->lm_head;
    default: return NULL;
    }
}

/* Bytes the tensors in `order` take after the header; false on overflow (impossible within
 * the config limits, checked anyway). */
static bool data_bytes(const pl_model_config *c, const tensor_kind *order, size_t n,
                       uint64_t *out) {
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) {
        int rows, cols;
        bool per_layer;
        shape(c, order[i], &rows, &cols, &per_layer);
        uint64_t e;
        if (!pl_model_mul_ok((uint64_t)rows, (uint64_t)cols, &e) ||
            !pl_model_mul_ok(e, per_layer ? (uint64_t)c->n_layers : 1u, &e) ||
            !pl_model_mul_ok(e, 4, &e) || !pl_model_add_ok(total, e, &total))
            return false;
    }
    *out = total;
    return true;
}

/* Points the model's weights into the mapping (or converts), tensor by tensor. */
static pl_status bind_all(pl_model *m, const uint8_t *p, const tensor_kind *order, size_t n,
                          pl_dtype want) {
    const pl_model_config *c = &m->cfg;
    for (size_t i = 0; i < n; i++) {
        int rows, cols;
        bool per_layer;
        shape(c, order[i], &rows, &cols, &per_layer);
        size_t bytes = (size_t)rows * (size_t)cols * 4;
        int n_rep = per_layer ? c->n_layers : 1;
        for (int l = 0; l < n_rep && bytes > 0; l++, p += bytes) {
            pl_weight *w = target(m, order[i], l);
            if (!w) continue; /* the RoPE tables */
            bool norm = order[i] == T_ATT_NORM || order[i] == T_FFN_NORM ||
                        order[i] == T_FINAL_NORM;
            char name[64];
            snprintf(name, sizeof name, per_layer ? "%s[%d]" : "%s", kind_name[order[i]], l);
            PL_TRY(pl_model_bind(m, w, p, PL_DTYPE_F32, rows, cols,
                                 norm ? PL_DTYPE_F32 : want, name));
        }
    }
    if (c->tied_embeddings) m->lm_head = m->tok_embed;
    return PL_OK;
}

static pl_status load(pl_model_file *f, const pl_model_load_options *opt, uint64_t limit,
                      pl_model **out) {
    const char *path = f->path;
    const uint8_t *p = f->data;
    bool v1 = f->size >= 4 && (uint32_t)rd_i32(p) == AK42_MAGIC;
    size_t header = v1 ? AK42_HEADER_BYTES : LEGACY_HEADER_BYTES;
    if (v1) {
        if (f->size < 8)
            return pl_fail(PL_ERR_FORMAT, "%s: truncated: ak42 header needs %d bytes, file has %zu",
                           path, AK42_HEADER_BYTES, f->size);
        int32_t version = rd_i32(p + 4);
        if (version == 2)
            return pl_fail(PL_ERR_UNSUPPORTED,
                           "%s: llama2.c version 2 (int8 Q8_0 weights) is not supported; export "
                           "with version 1 (fp32)",
                           path);
        if (version != 1)
            return pl_fail(PL_ERR_UNSUPPORTED, "%s: llama2.c checkpoint version %d is unknown",
                           path, (int)version);
        p += 8;
    }
    if (f->size < header)
        return pl_fail(PL_ERR_FORMAT, "%s: truncated: %s header needs %zu bytes, file has %zu",
                       path, v1 ? "ak42" : "llama2.c", header, f->size);

    pl_model_config c = {0};
    c.dim = rd_i32(p);
    c.hidden_dim = rd_i32(p + 4);
    c.n_layers = rd_i32(p + 8);
    c.n_heads = rd_i32(p + 12);
    c.n_kv_heads = rd_i32(p + 16);
    int64_t vocab = rd_i32(p + 20);
    c.max_seq_len = rd_i32(p + 24);
    if (v1) {
        uint8_t shared = p[28];
        if (shared > 1)
            return pl_fail(PL_ERR_FORMAT, "%s: shared_classifier = %u must be 0 or 1", path,
                           shared);
        c.tied_embeddings = shared == 1;
        c.vocab_size = (int)vocab;
    } else {
        /* legacy: the sign of vocab_size says whether a separate classifier follows */
        c.tied_embeddings = vocab > 0;
        int64_t abs_vocab = vocab < 0 ? -vocab : vocab;
        if (abs_vocab > PL_MODEL_MAX_VOCAB)
            return pl_fail(PL_ERR_FORMAT, "%s: vocab_size = %" PRId64 " is out of range", path,
                           vocab);
        c.vocab_size = (int)abs_vocab;
    }
    pl_model_config_llama2c_defaults(&c);
    if (c.dim > 0 && c.n_heads > 0 && c.dim % c.n_heads != 0)
        return pl_fail(PL_ERR_FORMAT, "%s: dim = %d is not a multiple of n_heads = %d", path,
                       c.dim, c.n_heads);
    c.head_dim = c.n_heads > 0 ? c.dim / c.n_heads : 0;
    PL_TRY(pl_model_config_check(&c, PL_ERR_FORMAT, path));

    const tensor_kind *order = v1 ? v1_order : legacy_order;
    size_t n_order = v1 ? sizeof v1_order / sizeof v1_order[0]
                        : sizeof legacy_order / sizeof legacy_order[0];
    uint64_t need;
    if (!data_bytes(&c, order, n_order, &need) || !pl_model_add_ok(need, header, &need))
        return pl_fail(PL_ERR_FORMAT, "%s: header sizes overflow", path);
    if ((uint64_t)f->size != need)
        return pl_fail(PL_ERR_FORMAT,
                       "%s: %s: header (dim %d, hidden_dim %d, n_layers %d, n_heads %d, "
                       "n_kv_heads %d, vocab_size %d%s, seq_len %d) implies %" PRIu64
                       " bytes, file has %zu",
                       path, (uint64_t)f->size < need ? "truncated" : "trailing bytes", c.dim,
                       c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.vocab_size,
                       c.tied_embeddings ? " shared" : " separate wcls", c.max_seq_len, need,
                       f->size);

    /* the file is f32; AUTO keeps it so (mapped), else matrices are converted at bind */
    PL_TRY(pl_model_check_weight_limit(
        path, &c, opt->dtype == PL_DTYPE_AUTO ? PL_DTYPE_F32 : opt->dtype, limit));

    pl_model *m;
    PL_TRY(pl_model_shell_create(&c, path, &m));
    pl_status s = bind_all(m, f->data + header, order, n_order, opt->dtype);
    if (s == PL_OK) s = pl_model_own_file(m, f);
    if (s != PL_OK) {
        pl_model_free(m);
        return s;
    }
    *out = m;
    return PL_OK;
}

pl_status pl_model_load_llama2c(const char *path, const pl_model_load_options *opt,
                                uint64_t max_weight_bytes, pl_model **out) {
    pl_model_file f;
    PL_TRY(pl_model_file_map(path, &f));
    pl_status s = load(&f, opt, max_weight_bytes, out);
    pl_model_file_unmap(&f); /* no-op when the model took the mapping */
    return s;
}
