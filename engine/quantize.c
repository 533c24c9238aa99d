/*
 * engine/quantize.c - pl_model_quantize: any model the loaders read, written as a GGUF file
 * with its tokenizer (see pagellm.h). The engine is the one part that sees both the model and
 * the tokenizer, so it joins their halves of the file:
 *
 *   metadata  the source GGUF's tokenizer.* and general.* keys copied as they are (a GGUF
 *             source), or the tokenizer's export (tokenizer/gguf_export.c) preceded by the
 *             end-of-text ids; then the model's hyperparameters and tensors
 *             (model/save_gguf.c), which leave keys already written alone.
 *   ids       GGUF has one EOS id plus an end-of-turn and an end-of-message id; the model's
 *             EOS set (config.json's list, llama2.c's {EOS, BOS}) goes there with the
 *             tokenizer's EOS first when the set holds it, so loading the file gives back the
 *             same set and the same tokenizer EOS.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "gguf/gguf.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/alloc.h"

/* The recipe named `type`: a weight type writable to GGUF by this build, or a mix. */
static pl_status resolve_type(const char *type, pl_quant_recipe *out) {
    if (pl_quant_recipe_parse(type, out) == PL_OK) return PL_OK;
    char list[256] = "";
    for (int i = PL_WTYPE_NONE + 1; i < PL_WTYPE_COUNT; i++) {
        const pl_wtype_traits *t = pl_wtype_traits_of((pl_wtype)i);
        if (!t || !t->from_f32 || !pl_gguf_type_of_wtype((pl_wtype)i)) continue;
        size_t o = strlen(list);
        snprintf(list + o, sizeof list - o, "%s, ", t->name);
    }
    return pl_fail(PL_ERR_UNSUPPORTED, "quantize: type %s is not one this build can write (%s%s)",
                   type, list, pl_quant_recipe_names());
}

static void report(void *user, const char *name, pl_wtype type, pl_wtype asked, int rows,
                   int cols) {
    const pl_quantize_options *o = user;
    o->on_tensor(o->user, name, rows, cols, pl_wtype_name(type), pl_wtype_name(asked));
}

/* general.* (but the layout keys) and tokenizer.* of a GGUF source. */
static pl_status copy_metadata(const char *path, pl_gguf_writer *w) {
    pl_gguf_file f;
    PL_TRY(pl_gguf_open(path, &f));
    pl_status s = PL_OK;
    for (size_t i = 0; i < f.g.n_kv && s == PL_OK; i++) {
        const pl_gguf_kv *kv = &f.g.kv[i];
        bool general = kv->key.n > 8 && memcmp(kv->key.p, "general.", 8) == 0;
        bool tok = kv->key.n > 10 && memcmp(kv->key.p, "tokenizer.", 10) == 0;
        if (pl_gguf_str_eq(kv->key, "general.alignment") ||
            pl_gguf_str_eq(kv->key, "general.file_type") ||
            pl_gguf_str_eq(kv->key, "general.architecture") ||
            pl_gguf_str_eq(kv->key, "general.quantization_version") || (!general && !tok))
            continue;
        s = pl_gguf_add_kv_copy(w, kv);
    }
    pl_gguf_close(&f);
    return s;
}

static pl_status add_eos_ids(const pl_model_config *c, const pl_tokenizer *tok,
                             pl_gguf_writer *w) {
    int ids[PL_MODEL_MAX_EOS], n = 0, first = pl_tok_eos_id(tok);
    bool has_first = false;
    for (int i = 0; i < c->n_eos; i++) has_first |= c->eos_ids[i] == first;
    if (has_first || c->n_eos == 0) {
        if (first >= 0) ids[n++] = first;
    }
    for (int i = 0; i < c->n_eos; i++)
        if (!(n > 0 && ids[0] == c->eos_ids[i])) ids[n++] = c->eos_ids[i];
    static const char *const keys[] = {"tokenizer.ggml.eos_token_id",
                                       "tokenizer.ggml.eot_token_id",
                                       "tokenizer.ggml.eom_token_id"};
    for (int i = 0; i < n && i < 3; i++) PL_TRY(pl_gguf_add_u32(w, keys[i], (uint32_t)ids[i]));
    if (c->bos_id >= 0) PL_TRY(pl_gguf_add_u32(w, "tokenizer.ggml.bos_token_id",
                                               (uint32_t)c->bos_id));
    return PL_OK;
}

/* The file names the model's BOS and EOS ids as the tokenizer's: one outside the tokenizer
 * means it belongs to another model (the GGUF would not load). */
static pl_status check_ids(const pl_model_config *c, const pl_tokenizer *tok) {
    int n = pl_tok_vocab_size(tok);
    if (c->bos_id >= n)
        return pl_fail(PL_ERR_FORMAT, "quantize: the model's BOS id %d is outside the "
                       "tokenizer's %d tokens (another model's tokenizer?): give the model's "
                       "own with --tokenizer", c->bos_id, n);
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_ids[i] >= n)
            return pl_fail(PL_ERR_FORMAT, "quantize: the model's EOS id %d is outside the "
                           "tokenizer's %d tokens (another model's tokenizer?): give the "
                           "model's own with --tokenizer", c->eos_ids[i], n);
    return PL_OK;
}

static bool is_gguf_file(const char *path) {
    unsigned char m[4] = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    size_t n = fread(m, 1, 4, f);
    fclose(f);
    return n == 4 && pl_gguf_has_magic(m, 4);
}

static pl_status add_tokenizer(const pl_model *m, const char *in_path,
                               const pl_quantize_options *opt, pl_gguf_writer *w) {
    if (opt->no_tokenizer) return PL_OK;
    if (!opt->tokenizer_path && is_gguf_file(in_path)) return copy_metadata(in_path, w);
    const char *path = opt->tokenizer_path ? opt->tokenizer_path : m->tokenizer_path;
    if (!path) return PL_OK; /* nothing to store: the file will hold token ids only */
    pl_tokenizer *tok;
    PL_TRY(pl_tok_load(path, &tok));
    pl_status s = PL_OK;
    if (pl_tok_vocab_size(tok) > m->cfg.vocab_size)
        s = pl_fail(PL_ERR_FORMAT, "quantize: tokenizer %s has %d tokens but the model's "
                    "vocabulary is %d", path, pl_tok_vocab_size(tok), m->cfg.vocab_size);
    if (s == PL_OK) s = check_ids(&m->cfg, tok);
    if (s == PL_OK) s = add_eos_ids(&m->cfg, tok, w);
    if (s == PL_OK) s = pl_tok_gguf_export(tok, w);
    if (s != PL_OK) pl_fail_prefix(s, "%s", path);
    pl_tok_free(tok);
    return s;
}

/* llama-quantize's rule: no block-quantised matrix is converted to another type unless asked
 * (allow_requantize); one written in its own type is copied, which loses nothing. */
static pl_status check_not_requantized(const pl_model *m, const pl_quant_recipe *rc) {
    const pl_model_config *c = &m->cfg;
    for (size_t s = 0; s < pl_model_n_slots(c); s++) {
        int layer;
        pl_tensor_role r = pl_model_slot_role(c, s, &layer);
        const pl_weight *w = &m->w[s];
        if (!w->data || !pl_model_stores_tensor(c, r) || !pl_wtype_is_quant(w->type)) continue;
        pl_wtype to = pl_quant_recipe_type(rc, c, r, layer, NULL);
        if (to == w->type) continue;
        char name[96];
        snprintf(name, sizeof name, pl_tensor_spec_of(r)->gguf, layer);
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "quantize: %s is already quantised: %s is %s, and %s would quantise its "
                       "rounded values again (the errors add up); quantise the f16/f32 model "
                       "instead, or set allow_requantize (--allow-requantize) to do it anyway",
                       m->name, name, pl_wtype_name(w->type), pl_wtype_name(to));
    }
    return PL_OK;
}

pl_status pl_model_quantize(const char *in_path, const char *out_path, const char *type,
                            const pl_quantize_options *opt) {
    if (!in_path || !out_path || !type)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_model_quantize: NULL %s",
                       !in_path ? "in_path" : !out_path ? "out_path" : "type");
    pl_quantize_options o;
    pl_quantize_options_default(&o);
    /* earlier builds' options end before on_tensor, or before n_threads */
    size_t old_size = offsetof(pl_quantize_options, on_tensor),
           mid_size = offsetof(pl_quantize_options, n_threads);
    if (opt && opt->struct_size != sizeof *opt && opt->struct_size != old_size &&
        opt->struct_size != mid_size)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_model_quantize: opt->struct_size = %zu is not "
                       "a pl_quantize_options size (%zu, %zu or %zu; use "
                       "pl_quantize_options_default)",
                       opt->struct_size, sizeof *opt, mid_size, old_size);
    if (opt) memcpy(&o, opt, opt->struct_size);
    o.struct_size = sizeof o;
    opt = &o;
    if (o.n_threads < 0 || o.n_threads > 1024)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "quantize: n_threads = %d (--threads): must be "
                       "in [0, 1024], 0 for every core", o.n_threads);
    pl_quant_recipe rc;
    PL_TRY(resolve_type(type, &rc));
    /* dummy: weights as an engine with the default config draws them */
    pl_engine_config ec;
    pl_engine_config_default(&ec);
    pl_model_load_options lo = {.dtype = PL_DTYPE_AUTO, .dummy_seed = ec.dummy_seed};
    pl_model *m;
    PL_TRY(pl_model_load(in_path, &lo, &m));
    pl_status s = o.allow_requantize ? PL_OK : check_not_requantized(m, &rc);
    pl_gguf_writer *w = NULL;
    if (s == PL_OK) s = pl_gguf_writer_create(&w);
    if (s == PL_OK) s = add_tokenizer(m, in_path, opt, w);
    if (s == PL_OK)
        s = pl_model_save_gguf_recipe(m, &rc, o.on_tensor ? report : NULL, &o, o.n_threads, w,
                                      out_path);
    pl_gguf_writer_free(w);
    pl_model_free(m);
    return s;
}
