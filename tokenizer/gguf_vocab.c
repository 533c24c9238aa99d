/*
 * tokenizer/gguf_vocab.c - the tokenizer inside a GGUF file, from its tokenizer.* metadata; no
 * other file needed.
 *
 * tokenizer.ggml.model "llama" (SentencePiece-style: tokens, scores, token types): the
 * vocabulary is turned back into the SentencePiece ModelProto it came from (a BPE model with
 * an identity normalizer, the dummy prefix of tokenizer.ggml.add_space_prefix, whitespace
 * collapsing only when tokenizer.ggml.remove_extra_whitespaces says so, byte fallback when
 * there are byte tokens) and loaded through the SentencePiece library like a .model file, so
 * ids and decoding are the library's own. llama.cpp's SPM tokenizer assumes the same.
 *
 * tokenizer.ggml.model "gpt2" (byte-level BPE: tokens, merges, token types and the
 * pre-tokenizer named by tokenizer.ggml.pre): the tokenizer.json implementation's structures
 * are built from the parts (pl_tok_hf_open_parts), with the named pre-tokenizer's regexes
 * (gguf_vocab.h). Control tokens are special added tokens and user-defined ones plain added
 * tokens, as the converter made them from tokenizer.json's added_tokens; the BPE vocabulary is
 * every id up to the last one of another type.
 *
 * Both: BOS/EOS from tokenizer.ggml.bos/eos_token_id, add_bos_token/add_eos_token (defaults as
 * llama.cpp's: BOS added for "llama", not for "gpt2"), eot/eom_token_id join the
 * end-of-generation set, tokenizer.chat_template is the template named "default" and
 * tokenizer.chat_template.NAME the one named NAME. Every array is checked for type and length
 * and every token for UTF-8 before use; errors name the file and the key.
 */
#include <stdio.h>
#include <string.h>

#include "gguf/gguf.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/hf.h"
#include "tokenizer/spm.h"
#include "util/alloc.h"
#include "util/utf8.h"

#define K_MODEL "tokenizer.ggml.model"
#define K_TOKENS "tokenizer.ggml.tokens"
#define K_SCORES "tokenizer.ggml.scores"
#define K_TYPES "tokenizer.ggml.token_type"
#define K_MERGES "tokenizer.ggml.merges"
#define K_PRE "tokenizer.ggml.pre"
#define K_TEMPLATE "tokenizer.chat_template"

// ----------------------------------------------------------------------------
// named pre-tokenizers

#define LETTERS_CONTRACTIONS "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
#define PUNCT_SPACES " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

static const pl_gguf_pre k_pre[] = {
    {{"llama-bpe", "llama3", "llama-v3", NULL},
     {LETTERS_CONTRACTIONS "\\p{N}{1,3}|" PUNCT_SPACES, NULL}, false, true},
    {{"qwen2", "qwen2.5", "qwen-2.5", "deepseek-r1-qwen", NULL},
     {LETTERS_CONTRACTIONS "\\p{N}|" PUNCT_SPACES, NULL}, true, false},
    {{"gpt-2", "gpt2", NULL},
     {"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", NULL},
     false, false},
    /* llama.cpp's own splits for files that name no pre-tokenizer */
    {{"default", NULL},
     {"[\\p{P}\\$\\+<=>\\^~\\|]+",
      "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)", "\\p{N}+",
      "[0-9][0-9][0-9]", NULL},
     false, false},
    {{NULL}, {NULL}, false, false},
};

const pl_gguf_pre *pl_gguf_pre_table(void) { return k_pre; }

const pl_gguf_pre *pl_gguf_pre_by_name(const char *name, size_t len) {
    for (const pl_gguf_pre *p = k_pre; p->names[0]; p++)
        for (int i = 0; p->names[i]; i++)
            if (strlen(p->names[i]) == len && memcmp(p->names[i], name, len) == 0) return p;
    return NULL;
}

const char *pl_gguf_pre_names(void) {
    static _Thread_local char list[256];
    if (!list[0])
        for (const pl_gguf_pre *p = k_pre; p->names[0]; p++)
            for (int i = 0; p->names[i]; i++) {
                size_t o = strlen(list);
                snprintf(list + o, sizeof list - o, "%s%s", o ? ", " : "", p->names[i]);
            }
    return list;
}

// ----------------------------------------------------------------------------
// common keys

typedef struct vocab {
    const pl_gguf *g;
    const char *path;
    size_t n;                  /* tokens */
    const char **tok;          /* (n) pointers into the file, not NUL-terminated */
    size_t *len;               /* (n) */
    int32_t *type;             /* (n) GGUF token types */
    const pl_gguf_kv *scores;  /* or NULL */
    int bos, eos, unk, eot, eom; /* -1 when absent */
} vocab;

static void vocab_free(vocab *v) {
    pl_free(v->tok);
    pl_free(v->len);
    pl_free(v->type);
}

static pl_status id_key(vocab *v, const char *key, int *out) {
    int64_t x;
    PL_TRY(pl_gguf_get_int(v->g, key, false, -1, -1, (int64_t)v->n - 1, &x));
    *out = (int)x;
    return PL_OK;
}

/* tokens, token types and the special ids: arrays of the right type and length, every token
 * non-empty valid UTF-8 without NUL. */
static pl_status read_tokens(vocab *v) {
    const pl_gguf_kv *toks, *types;
    PL_TRY(pl_gguf_get_array(v->g, K_TOKENS, PL_GGUF_STRING, true, &toks));
    if (toks->n == 0 || toks->n > PL_TOK_MAX_VOCAB)
        return pl_fail(toks->n ? PL_ERR_UNSUPPORTED : PL_ERR_FORMAT, "%s: %s: %llu tokens (1 to "
                       "%d)", v->path, K_TOKENS, (unsigned long long)toks->n, PL_TOK_MAX_VOCAB);
    v->n = (size_t)toks->n;
    PL_TRY(pl_gguf_get_array(v->g, K_TYPES, PL_GGUF_I32, false, &types));
    PL_TRY(pl_gguf_get_array(v->g, K_SCORES, PL_GGUF_F32, false, &v->scores));
    if (types && types->n != v->n)
        return pl_fail(PL_ERR_FORMAT, "%s: %s has %llu entries for %zu tokens", v->path, K_TYPES,
                       (unsigned long long)types->n, v->n);
    if (v->scores && v->scores->n != v->n)
        return pl_fail(PL_ERR_FORMAT, "%s: %s has %llu entries for %zu tokens", v->path, K_SCORES,
                       (unsigned long long)v->scores->n, v->n);
    v->tok = pl_calloc(v->n, sizeof *v->tok);
    v->len = pl_calloc(v->n, sizeof *v->len);
    v->type = pl_calloc(v->n, sizeof *v->type);
    if (!v->tok || !v->len || !v->type)
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: %zu tokens", v->path, v->n);
    const uint8_t *pos = toks->data;
    for (size_t i = 0; i < v->n; i++) {
        pl_gguf_str s = pl_gguf_array_next_str(&pos);
        const unsigned char *u = (const unsigned char *)s.p;
        bool ok = s.n > 0 && s.n <= 65536;
        for (size_t k = 0; ok && k < s.n;) {
            int step = u[k] ? pl_utf8_step(u + k, (size_t)s.n - k) : -1;
            ok = step > 0;
            k += ok ? (size_t)step : 0;
        }
        if (!ok)
            return pl_fail(PL_ERR_FORMAT, "%s: %s[%zu] is empty, longer than 64 KiB, or not valid "
                           "UTF-8 without NUL", v->path, K_TOKENS, i);
        v->tok[i] = s.p;
        v->len[i] = (size_t)s.n;
        int64_t t = types ? pl_gguf_array_int(types, i) : PL_GGUF_TOK_NORMAL;
        if (t < PL_GGUF_TOK_NORMAL || t > PL_GGUF_TOK_BYTE)
            return pl_fail(PL_ERR_FORMAT, "%s: %s[%zu] = %lld is not a token type (1 to 6)",
                           v->path, K_TYPES, i, (long long)t);
        v->type[i] = (int32_t)t;
    }
    PL_TRY(id_key(v, "tokenizer.ggml.bos_token_id", &v->bos));
    PL_TRY(id_key(v, "tokenizer.ggml.eos_token_id", &v->eos));
    PL_TRY(id_key(v, "tokenizer.ggml.unknown_token_id", &v->unk));
    PL_TRY(id_key(v, "tokenizer.ggml.eot_token_id", &v->eot));
    return id_key(v, "tokenizer.ggml.eom_token_id", &v->eom);
}

/* The chat templates: tokenizer.chat_template and tokenizer.chat_template.NAME. */
static pl_status read_templates(pl_tokenizer *t, const vocab *v) {
    const size_t plen = strlen(K_TEMPLATE);
    for (size_t i = 0; i < v->g->n_kv; i++) {
        const pl_gguf_kv *kv = &v->g->kv[i];
        if (kv->key.n < plen || memcmp(kv->key.p, K_TEMPLATE, plen) != 0) continue;
        if (kv->key.n != plen && (kv->key.n == plen + 1 || kv->key.p[plen] != '.')) continue;
        char name[128];
        snprintf(name, sizeof name, "%.*s", kv->key.n == plen ? 7 : (int)(kv->key.n - plen - 1),
                 kv->key.n == plen ? "default" : kv->key.p + plen + 1);
        pl_gguf_str s;
        char key[160];
        snprintf(key, sizeof key, "%.*s", (int)(kv->key.n > 150 ? 150 : kv->key.n), kv->key.p);
        PL_TRY(pl_gguf_get_str(v->g, key, true, &s));
        if (s.n > PL_TOK_MAX_FILE_BYTES || (s.n && memchr(s.p, 0, (size_t)s.n)))
            return pl_fail(PL_ERR_FORMAT, "%s: %s holds a NUL byte or is too long", v->path, key);
        PL_TRY(pl_tok_add_template(t, v->path, name, s.p, (size_t)s.n));
    }
    return PL_OK;
}

/* After the facts: eot/eom end a generation too. */
static pl_status add_eog(pl_tokenizer *t, const vocab *v) {
    int extra[2] = {v->eot, v->eom};
    for (int k = 0; k < 2; k++) {
        if (extra[k] < 0 || pl_tok_is_eog(t, extra[k])) continue;
        int32_t *e = pl_reallocarray(t->eog, t->n_eog + 1, sizeof *e);
        if (!e) return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: end-of-generation ids", v->path);
        size_t i = t->n_eog;
        while (i > 0 && e[i - 1] > extra[k]) e[i] = e[i - 1], i--;
        e[i] = extra[k];
        t->eog = e;
        t->n_eog++;
    }
    return PL_OK;
}

// ----------------------------------------------------------------------------
// "llama": a SentencePiece ModelProto

static pl_status put_varint(pl_tok_buf *b, uint64_t v) {
    uint8_t x[10];
    int n = 0;
    do {
        x[n++] = (uint8_t)((v & 0x7F) | (v > 0x7F ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return pl_tok_buf_put(b, x, (size_t)n);
}

static pl_status put_key(pl_tok_buf *b, unsigned field, unsigned wire) {
    return put_varint(b, (uint64_t)field << 3 | wire);
}

static pl_status put_bytes(pl_tok_buf *b, unsigned field, const void *p, size_t n) {
    PL_TRY(put_key(b, field, 2));
    PL_TRY(put_varint(b, n));
    return pl_tok_buf_put(b, p, n);
}

static pl_status put_uint(pl_tok_buf *b, unsigned field, uint64_t v) {
    PL_TRY(put_key(b, field, 0));
    return put_varint(b, v);
}

/* The ModelProto: pieces (piece 1, score 2, type 3), TrainerSpec (model_type 3 = BPE,
 * vocab_size 4, byte_fallback 35, unk/bos/eos piece 45/46/47), NormalizerSpec (name 1,
 * add_dummy_prefix 3, remove_extra_whitespaces 4, escape_whitespaces 5). */
static pl_status build_proto(const vocab *v, bool dummy_prefix, bool remove_ws, pl_tok_buf *out) {
    pl_tok_buf piece = {0}, spec = {0};
    pl_status s = PL_OK;
    bool bytes = false;
    for (size_t i = 0; i < v->n && s == PL_OK; i++) {
        piece.n = 0;
        float score = v->scores ? (float)pl_gguf_array_float(v->scores, i) : 0.0f;
        uint32_t bits;
        memcpy(&bits, &score, 4);
        uint8_t le[4] = {(uint8_t)bits, (uint8_t)(bits >> 8), (uint8_t)(bits >> 16),
                         (uint8_t)(bits >> 24)};
        int type = (int)i == v->unk ? PL_GGUF_TOK_UNKNOWN : v->type[i];
        bytes |= type == PL_GGUF_TOK_BYTE;
        if ((s = put_bytes(&piece, 1, v->tok[i], v->len[i])) != PL_OK ||
            (s = put_key(&piece, 2, 5)) != PL_OK || (s = pl_tok_buf_put(&piece, le, 4)) != PL_OK ||
            (s = put_uint(&piece, 3, (uint64_t)type)) != PL_OK)
            break;
        s = put_bytes(out, 1, piece.p, piece.n);
    }
    if (s == PL_OK) s = put_uint(&spec, 3, 2);
    if (s == PL_OK) s = put_uint(&spec, 4, v->n);
    if (s == PL_OK) s = put_uint(&spec, 35, bytes);
    if (s == PL_OK && v->unk >= 0) s = put_bytes(&spec, 45, v->tok[v->unk], v->len[v->unk]);
    if (s == PL_OK && v->bos >= 0) s = put_bytes(&spec, 46, v->tok[v->bos], v->len[v->bos]);
    if (s == PL_OK && v->eos >= 0) s = put_bytes(&spec, 47, v->tok[v->eos], v->len[v->eos]);
    if (s == PL_OK) s = put_bytes(out, 2, spec.p, spec.n);
    spec.n = 0;
    if (s == PL_OK) s = put_bytes(&spec, 1, "identity", 8);
    if (s == PL_OK) s = put_uint(&spec, 3, dummy_prefix);
    if (s == PL_OK) s = put_uint(&spec, 4, remove_ws);
    if (s == PL_OK) s = put_uint(&spec, 5, 1);
    if (s == PL_OK) s = put_bytes(out, 3, spec.p, spec.n);
    pl_tok_buf_free(&piece);
    pl_tok_buf_free(&spec);
    return s;
}

static pl_status open_llama(pl_tokenizer *t, vocab *v) {
    if (pl_gguf_find(v->g, "tokenizer.ggml.precompiled_charsmap"))
        return pl_fail(PL_ERR_UNSUPPORTED, "%s: tokenizer.ggml.precompiled_charsmap: "
                       "SentencePiece normalisation maps are not supported", v->path);
    if (v->unk < 0)
        for (size_t i = 0; i < v->n && v->unk < 0; i++)
            if (v->type[i] == PL_GGUF_TOK_UNKNOWN) v->unk = (int)i;
    if (v->unk < 0)
        return pl_fail(PL_ERR_FORMAT, "%s: no unknown token (%s, or a token of type 2): "
                       "SentencePiece needs one", v->path, "tokenizer.ggml.unknown_token_id");
    bool dummy, remove_ws, add_bos, add_eos;
    PL_TRY(pl_gguf_get_bool(v->g, "tokenizer.ggml.add_space_prefix", false, true, &dummy));
    PL_TRY(pl_gguf_get_bool(v->g, "tokenizer.ggml.remove_extra_whitespaces", false, false,
                            &remove_ws));
    PL_TRY(pl_gguf_get_bool(v->g, "tokenizer.ggml.add_bos_token", false, true, &add_bos));
    PL_TRY(pl_gguf_get_bool(v->g, "tokenizer.ggml.add_eos_token", false, false, &add_eos));
    pl_tok_buf proto = {0};
    pl_status s = build_proto(v, dummy, remove_ws, &proto);
    if (s == PL_OK) s = pl_tok_spm_open_proto(t, v->path, proto.p, proto.n);
    pl_tok_buf_free(&proto);
    PL_TRY(s);
    if (v->bos >= 0 || pl_gguf_find(v->g, "tokenizer.ggml.bos_token_id")) t->bos_id = v->bos;
    if (v->eos >= 0 || pl_gguf_find(v->g, "tokenizer.ggml.eos_token_id")) t->eos_id = v->eos;
    t->add_bos = add_bos;
    t->add_eos = add_eos;
    return PL_OK;
}

// ----------------------------------------------------------------------------
// "gpt2": byte-level BPE through the tokenizer.json implementation

static pl_status open_gpt2(pl_tokenizer *t, vocab *v) {
    const pl_gguf_kv *merges;
    pl_gguf_str pre;
    PL_TRY(pl_gguf_get_array(v->g, K_MERGES, PL_GGUF_STRING, true, &merges));
    PL_TRY(pl_gguf_get_str(v->g, K_PRE, false, &pre));
    const pl_gguf_pre *pt = pre.p ? pl_gguf_pre_by_name(pre.p, (size_t)pre.n)
                                  : pl_gguf_pre_by_name("default", 7);
    if (!pt)
        return pl_fail(PL_ERR_UNSUPPORTED, "%s: %s = %.*s is not supported (%s)", v->path, K_PRE,
                       (int)(pre.n > 48 ? 48 : pre.n), pre.p, pl_gguf_pre_names());
    bool add_bos, add_eos;
    PL_TRY(pl_gguf_get_bool(v->g, "tokenizer.ggml.add_bos_token", false, false, &add_bos));
    PL_TRY(pl_gguf_get_bool(v->g, "tokenizer.ggml.add_eos_token", false, false, &add_eos));
    uint8_t *added = pl_calloc(v->n, 1);
    const char **mg = pl_calloc(merges->n ? (size_t)merges->n : 1, sizeof *mg);
    size_t *ml = pl_calloc(merges->n ? (size_t)merges->n : 1, sizeof *ml);
    pl_status s = PL_OK;
    if (!added || !mg || !ml) {
        s = pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: %llu merges", v->path,
                    (unsigned long long)merges->n);
        goto done;
    }
    size_t n_model = 0;
    for (size_t i = 0; i < v->n; i++) {
        added[i] = v->type[i] == PL_GGUF_TOK_CONTROL ? 2
                   : v->type[i] == PL_GGUF_TOK_USER_DEFINED ? 1 : 0;
        if (!added[i]) n_model = i + 1;
    }
    const uint8_t *pos = merges->data;
    for (size_t i = 0; i < merges->n; i++) {
        pl_gguf_str m = pl_gguf_array_next_str(&pos);
        mg[i] = m.p;
        ml[i] = (size_t)m.n;
    }
    pl_hf_parts parts = {
        .n_tokens = v->n, .token = v->tok, .token_len = v->len, .added = added,
        .n_model = n_model, .n_merges = (size_t)merges->n, .merge = mg, .merge_len = ml,
        .nfc = pt->nfc, .ignore_merges = pt->ignore_merges, .bos_id = v->bos, .eos_id = v->eos,
        .add_bos = add_bos, .add_eos = add_eos, .tokens_key = K_TOKENS, .merges_key = K_MERGES,
        .pre_key = K_PRE,
    };
    while (pt->regex[parts.n_regex]) parts.n_regex++;
    parts.regex = pt->regex;
    s = pl_tok_hf_open_parts(t, v->path, &parts);
done:
    pl_free(added);
    pl_free(mg);
    pl_free(ml);
    return s;
}

// ----------------------------------------------------------------------------
// the file

static pl_status open_vocab(pl_tokenizer *t, vocab *v) {
    pl_gguf_str model;
    PL_TRY(pl_gguf_get_str(v->g, K_MODEL, true, &model));
    bool llama = pl_gguf_str_eq(model, "llama"), gpt2 = pl_gguf_str_eq(model, "gpt2");
    if (!llama && !gpt2)
        return pl_fail(PL_ERR_UNSUPPORTED, "%s: %s = %.*s is not supported (llama, gpt2)",
                       v->path, K_MODEL, (int)(model.n > 48 ? 48 : model.n), model.p);
    PL_TRY(read_tokens(v));
    if (llama) {
        PL_TRY(open_llama(t, v));
        PL_TRY(pl_tok_finish_facts(t, v->path));
    } else {
        PL_TRY(open_gpt2(t, v));
    }
    PL_TRY(read_templates(t, v));
    return add_eog(t, v);
}

pl_status pl_tok_gguf_open(pl_tokenizer *t, const char *path) {
    pl_gguf_file f;
    PL_TRY(pl_gguf_open(path, &f));
    vocab v = {.g = &f.g, .path = f.path, .bos = -1, .eos = -1, .unk = -1, .eot = -1, .eom = -1};
    pl_status s = open_vocab(t, &v);
    vocab_free(&v);
    pl_gguf_close(&f);
    return s;
}
