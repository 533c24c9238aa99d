/*
 * tokenizer/gguf_export.c - a loaded tokenizer written as GGUF tokenizer.* metadata (see
 * pl_tok_gguf_export in tokenizer.h), the inverse of gguf_vocab.c.
 *
 * Only what the GGUF vocabulary can say exactly is written; anything else is refused with the
 * reason, because a file that tokenizes differently from its source would be worse than no
 * file: a SentencePiece model must be BPE with an identity normaliser; a tokenizer.json must
 * be byte-level BPE whose normaliser, pre-tokenizer splits and ignore_merges match one named
 * pre-tokenizer (gguf_vocab.h), with a ByteLevel decoder, no unknown token or byte fallback,
 * a post-processor adding at most BOS and EOS, and added tokens without strip/word flags.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/hf.h"
#include "tokenizer/spm.h"
#include "util/alloc.h"

static pl_status id_key(pl_gguf_writer *w, const char *key, int32_t id) {
    if (id < 0 || pl_gguf_writer_has(w, key)) return PL_OK;
    return pl_gguf_add_u32(w, key, (uint32_t)id);
}

static pl_status common(const pl_tokenizer *t, pl_gguf_writer *w) {
    PL_TRY(pl_gguf_add_str_array(w, "tokenizer.ggml.tokens", t->piece_of, NULL,
                                 (size_t)t->n_vocab));
    PL_TRY(id_key(w, "tokenizer.ggml.bos_token_id", t->bos_id));
    PL_TRY(id_key(w, "tokenizer.ggml.eos_token_id", t->eos_id));
    PL_TRY(pl_gguf_add_bool(w, "tokenizer.ggml.add_bos_token", t->add_bos));
    PL_TRY(pl_gguf_add_bool(w, "tokenizer.ggml.add_eos_token", t->add_eos));
    for (size_t i = 0; i < t->n_templates; i++) {
        const pl_tok_template *tp = &t->templates[i];
        char key[192];
        if (strcmp(tp->name, "default") == 0)
            snprintf(key, sizeof key, "tokenizer.chat_template");
        else if (snprintf(key, sizeof key, "tokenizer.chat_template.%s", tp->name) >=
                 (int)sizeof key)
            continue; /* a name this long is not one a chat client asks for */
        PL_TRY(pl_gguf_add_str(w, key, tp->text, strlen(tp->text)));
    }
    return PL_OK;
}

// ----------------------------------------------------------------------------
// SentencePiece -> "llama"

static pl_status export_spm(const pl_tokenizer *t, pl_gguf_writer *w) {
    const pl_tok_spm_spec *sp = pl_tok_spm_spec_of(t);
    if (sp->model_type != 2)
        return pl_fail(PL_ERR_UNSUPPORTED, "tokenizer: a SentencePiece %s model cannot be stored "
                       "in GGUF (its \"llama\" vocabularies are BPE)",
                       sp->model_type == 1 ? "unigram" : "non-BPE");
    if (sp->has_charsmap || !sp->escape_whitespaces || sp->treat_whitespace_as_suffix)
        return pl_fail(PL_ERR_UNSUPPORTED, "tokenizer: a SentencePiece normaliser other than "
                       "identity (a normalisation map, unescaped or suffix whitespace) cannot be "
                       "stored in GGUF");
    size_t n = (size_t)t->n_vocab;
    float *scores = pl_calloc(n, sizeof *scores);
    int32_t *types = pl_calloc(n, sizeof *types);
    pl_status s = PL_OK;
    int32_t unk = -1;
    if (!scores || !types) {
        s = pl_fail(PL_ERR_OUT_OF_MEMORY, "tokenizer: %zu scores", n);
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        scores[i] = pl_tok_spm_score_of(t, (int32_t)i);
        types[i] = pl_tok_spm_type_of(t, (int32_t)i);
        if (types[i] == PL_GGUF_TOK_UNKNOWN && unk < 0) unk = (int32_t)i;
    }
    if ((s = pl_gguf_add_str(w, "tokenizer.ggml.model", "llama", 5)) != PL_OK ||
        (s = common(t, w)) != PL_OK ||
        (s = pl_gguf_add_array(w, "tokenizer.ggml.scores", PL_GGUF_F32, scores, n)) != PL_OK ||
        (s = pl_gguf_add_array(w, "tokenizer.ggml.token_type", PL_GGUF_I32, types, n)) != PL_OK ||
        (s = id_key(w, "tokenizer.ggml.unknown_token_id", unk)) != PL_OK ||
        (s = pl_gguf_add_bool(w, "tokenizer.ggml.add_space_prefix", sp->add_dummy_prefix)) !=
            PL_OK)
        goto done;
    s = pl_gguf_add_bool(w, "tokenizer.ggml.remove_extra_whitespaces",
                         sp->remove_extra_whitespaces);
done:
    pl_free(scores);
    pl_free(types);
    return s;
}

// ----------------------------------------------------------------------------
// byte-level BPE -> "gpt2"

static pl_status refuse(const char *why) {
    return pl_fail(PL_ERR_UNSUPPORTED, "tokenizer: %s, which a GGUF \"gpt2\" vocabulary cannot "
                   "describe", why);
}

/* The named pre-tokenizer h's chain is, or NULL. */
static const pl_gguf_pre *pre_of(const pl_hf *h) {
    bool nfc = h->n_norm == 1 && h->norm[0].kind == PL_HF_NFC;
    if (h->n_norm > 1 || (h->n_norm == 1 && !nfc) || h->n_pre < 1) return NULL;
    const pl_hf_pre *last = &h->pre[h->n_pre - 1];
    if (last->kind != PL_HF_BYTE_LEVEL || last->add_prefix_space) return NULL;
    for (const pl_gguf_pre *p = pl_gguf_pre_table(); p->names[0]; p++) {
        if (p->nfc != nfc || p->ignore_merges != h->model.ignore_merges) continue;
        int n = 0;
        while (p->regex[n]) n++;
        bool same;
        if (last->use_regex) /* ByteLevel's own GPT-2 regex, no Split before it */
            same = h->n_pre == 1 && n == 1 && strcmp(p->regex[0], PL_HF_GPT2_PATTERN) == 0;
        else
            same = h->n_pre == n + 1;
        for (int i = 0; same && !last->use_regex && i < n; i++) {
            const pl_hf_pre *q = &h->pre[i];
            same = q->kind == PL_HF_SPLIT && q->behavior == PL_HF_ISOLATED && !q->invert &&
                   !q->literal && q->pattern_len == strlen(p->regex[i]) &&
                   memcmp(q->pattern, p->regex[i], q->pattern_len) == 0;
        }
        if (same) return p;
    }
    return NULL;
}

static int cmp_rank(const void *a, const void *b) {
    const pl_hf_pair *x = a, *y = b;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

/* The merges as "a b" strings in rank order. */
static pl_status add_merges(const pl_tokenizer *t, const pl_hf *h, pl_gguf_writer *w) {
    size_t n = 0, slots = h->model.pairs ? h->model.pair_mask + 1 : 0;
    for (size_t i = 0; i < slots; i++) n += h->model.pairs[i].key != UINT64_MAX;
    pl_hf_pair *p = pl_calloc(n ? n : 1, sizeof *p);
    char **str = pl_calloc(n ? n : 1, sizeof *str);
    pl_status s = PL_OK;
    if (!p || !str) {
        s = pl_fail(PL_ERR_OUT_OF_MEMORY, "tokenizer: %zu merges", n);
        goto done;
    }
    size_t k = 0;
    for (size_t i = 0; i < slots; i++)
        if (h->model.pairs[i].key != UINT64_MAX) p[k++] = h->model.pairs[i];
    qsort(p, n, sizeof *p, cmp_rank);
    for (size_t i = 0; i < n; i++) {
        const char *a = t->piece_of[p[i].key >> 32], *b = t->piece_of[p[i].key & 0xFFFFFFFFu];
        size_t na = strlen(a), nb = strlen(b);
        if (!(str[i] = pl_malloc(na + nb + 2))) {
            s = pl_fail(PL_ERR_OUT_OF_MEMORY, "tokenizer: merges");
            goto done;
        }
        memcpy(str[i], a, na);
        str[i][na] = ' ';
        memcpy(str[i] + na + 1, b, nb + 1);
    }
    s = pl_gguf_add_str_array(w, "tokenizer.ggml.merges", (const char *const *)str, NULL, n);
done:
    for (size_t i = 0; str && i < n; i++) pl_free(str[i]);
    pl_free(str);
    pl_free(p);
    return s;
}

static pl_status export_bpe(const pl_tokenizer *t, pl_gguf_writer *w) {
    const pl_hf *h = t->impl;
    if (!h->model.byte_level) return refuse("a BPE that is not byte-level");
    if (h->model.byte_fallback || h->model.unk_id >= 0)
        return refuse("byte fallback or an unknown token");
    if (h->n_dec != 1 || h->dec[0].kind != PL_HF_DEC_BYTE_LEVEL)
        return refuse("a decoder other than ByteLevel");
    if (h->n_prefix > 1 || h->n_suffix > 1 || (h->n_prefix && h->prefix[0] != t->bos_id) ||
        (h->n_suffix && h->suffix[0] != t->eos_id))
        return refuse("a post-processor adding more than BOS and EOS");
    const pl_gguf_pre *pre = pre_of(h);
    if (!pre) return refuse("a normalizer, pre-tokenizer or ignore_merges with no GGUF name");
    int32_t *types = pl_calloc((size_t)t->n_vocab, sizeof *types);
    if (!types) return pl_fail(PL_ERR_OUT_OF_MEMORY, "tokenizer: token types");
    for (int i = 0; i < t->n_vocab; i++) types[i] = PL_GGUF_TOK_NORMAL;
    pl_status s = PL_OK;
    for (size_t i = 0; i < h->n_added && s == PL_OK; i++) {
        const pl_hf_added *a = &h->added[i];
        if (a->lstrip || a->rstrip || a->single_word ||
            (a->normalized && (a->norm_len != a->len || memcmp(a->norm, a->content, a->len))))
            s = pl_fail(PL_ERR_UNSUPPORTED, "tokenizer: added token %d (\"%.64s\") has "
                        "lstrip/rstrip/single_word or a normalized form, which GGUF cannot "
                        "store", (int)a->id, a->content);
        types[a->id] = a->special ? PL_GGUF_TOK_CONTROL : PL_GGUF_TOK_USER_DEFINED;
    }
    if (s == PL_OK) s = pl_gguf_add_str(w, "tokenizer.ggml.model", "gpt2", 4);
    if (s == PL_OK) s = pl_gguf_add_str(w, "tokenizer.ggml.pre", pre->names[0],
                                        strlen(pre->names[0]));
    if (s == PL_OK) s = common(t, w);
    if (s == PL_OK)
        s = pl_gguf_add_array(w, "tokenizer.ggml.token_type", PL_GGUF_I32, types,
                              (size_t)t->n_vocab);
    if (s == PL_OK) s = add_merges(t, h, w);
    pl_free(types);
    return s;
}

pl_status pl_tok_gguf_export(const pl_tokenizer *t, pl_gguf_writer *w) {
    if (pl_tok_spm_spec_of(t)) return export_spm(t, w);
    if (strcmp(pl_tok_type(t), "bpe") == 0) return export_bpe(t, w);
    return pl_fail(PL_ERR_UNSUPPORTED, "tokenizer: a %s tokenizer cannot be stored in GGUF",
                   pl_tok_type(t));
}
