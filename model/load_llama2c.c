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
 * Both orders are columns of the tensor table (model/arch.c); this file walks them. A
 * tokenizer beside the file is found by llama2.c's names (find_tokenizer).
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

/* Positions in the two file orders come from the tensor table (model/arch.c); the legacy
 * format alone also stores RoPE tables, at this position, which are skipped. */
#define LEGACY_FREQ_POS 11
#define MAX_POS 13

/* The tensor at file position pos of the format, or NULL (the RoPE tables, or nothing). */
static const pl_tensor_spec *at_position(int pos, bool v1) {
    for (int r = 0; r < PL_T_COUNT; r++) {
        const pl_tensor_spec *t = pl_tensor_spec_of((pl_tensor_role)r);
        if ((v1 ? t->l2c_v1 : t->l2c_legacy) == pos) return t;
    }
    return NULL;
}

/* Elements the tensor at position pos takes in the file: every layer's copy for a per-layer
 * tensor, nothing for an absent classifier. */
static uint64_t position_elems(const pl_model_config *c, int pos, bool v1) {
    if (!v1 && pos == LEGACY_FREQ_POS)
        return 2 * (uint64_t)c->max_seq_len * (uint64_t)(c->head_dim / 2);
    const pl_tensor_spec *t = at_position(pos, v1);
    if (!t || !pl_model_stores_tensor(c, t->role)) return 0;
    int rows, cols;
    pl_model_tensor_shape(c, t->role, &rows, &cols);
    uint64_t n = (uint64_t)rows * (uint64_t)cols;
    return pl_tensor_role_per_layer(t->role) ? n * (uint64_t)c->n_layers : n;
}

/* Bytes of f32 data after the header; false on overflow (impossible within the config limits,
 * checked anyway). */
static bool data_bytes(const pl_model_config *c, bool v1, uint64_t *out) {
    uint64_t total = 0;
    for (int pos = 0; pos < MAX_POS; pos++) {
        uint64_t b;
        if (!pl_model_mul_ok(position_elems(c, pos, v1), 4, &b) ||
            !pl_model_add_ok(total, b, &total))
            return false;
    }
    *out = total;
    return true;
}

/* Points the model's weights into the mapping (or converts), tensor by tensor in file order. */
static pl_status bind_all(pl_model *m, const uint8_t *p, bool v1, pl_wtype want) {
    const pl_model_config *c = &m->cfg;
    for (int pos = 0; pos < MAX_POS; pos++) {
        const pl_tensor_spec *t = at_position(pos, v1);
        uint64_t elems = position_elems(c, pos, v1);
        if (!t || elems == 0) {
            p += elems * 4; /* the RoPE tables, or an absent classifier */
            continue;
        }
        bool per_layer = pl_tensor_role_per_layer(t->role);
        int n_rep = per_layer ? c->n_layers : 1;
        size_t bytes = (size_t)(elems / (uint64_t)n_rep) * 4;
        for (int l = 0; l < n_rep; l++, p += bytes) {
            char name[64];
            snprintf(name, sizeof name, per_layer ? "%s[%d]" : "%s", t->llama2c, l);
            PL_TRY(pl_model_bind(m, t->role, l, p, PL_WTYPE_F32, want, name));
        }
    }
    pl_model_tie_output(m);
    return PL_OK;
}

/* llama2.c's convention: tok<vocab>.model beside the checkpoint (tok512.model for
 * stories260K), else tokenizer.model (Llama's 32000 pieces, for the stories15M-110M models). */
static pl_status find_tokenizer(pl_model *m, const char *path) {
    char dir[4096], own[32];
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) : 0;
    if (n >= sizeof dir) return PL_OK; /* a path this long has no neighbours we can name */
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (n == 0) snprintf(dir, sizeof dir, "/");
    else {
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    snprintf(own, sizeof own, "tok%d.model", m->cfg.vocab_size);
    const char *const names[] = {own, "tokenizer.model", NULL};
    return pl_model_find_tokenizer(m, dir, names);
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
    PL_TRY(pl_model_config_check(&c, PL_ERR_FORMAT, path, NULL));

    uint64_t need;
    if (!data_bytes(&c, v1, &need) || !pl_model_add_ok(need, header, &need))
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
    pl_wtype want = pl_wtype_of_dtype(opt->dtype);
    PL_TRY(pl_model_check_weight_limit(path, &c, want == PL_WTYPE_NONE ? PL_WTYPE_F32 : want,
                                       limit));

    pl_model *m;
    PL_TRY(pl_model_shell_create(&c, path, &m));
    pl_status s = bind_all(m, f->data + header, v1, want);
    if (s == PL_OK) s = pl_model_own_file(m, f);
    if (s == PL_OK) s = find_tokenizer(m, path);
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
