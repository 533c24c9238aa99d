/*
 * tokenizer/tokenizer.c - the front of the interface in tokenizer.h: finding what a path holds
 * (a .model, a tokenizer.json, a directory), checking every argument once (text is valid
 * UTF-8 without NUL, ids are in range) so the implementations never see bad input, and
 * dispatch through the table of functions. The token facts both implementations share are in
 * tok_config.c, below the loaders that fill them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tokenizer/gguf_vocab.h"
#include "tokenizer/spm.h"
#include "tokenizer/tok_internal.h"
#include "util/alloc.h"
#include "util/utf8.h"

/* Texts longer than this are refused: the SentencePiece library indexes with int in places. */
#define MAX_TEXT_BYTES ((size_t)1 << 30)

// ---- loading ---------------------------------------------------------------------------------

/* dir + "/" + name into a new string (pl_malloc). */
static char *join(const char *dir, size_t dir_len, const char *name) {
    size_t n = dir_len + 1 + strlen(name) + 1;
    char *p = pl_malloc(n);
    if (p) snprintf(p, n, "%.*s/%s", (int)dir_len, dir, name);
    return p;
}

/* A file named *.json, or one that starts like JSON ('{' or '[' after white space), is read
 * as a tokenizer.json; a SentencePiece model is protobuf, whose first byte is a field key
 * (0x0A for the pieces, never one of those). */
static bool looks_like_json(const char *path) {
    size_t n = strlen(path);
    if (n >= 5 && strcmp(path + n - 5, ".json") == 0) return true;
    FILE *f = fopen(path, "rb");
    if (!f) return false; /* the loader reports the error in its own words */
    int c;
    while ((c = fgetc(f)) == ' ' || c == '\t' || c == '\n' || c == '\r') {
    }
    fclose(f);
    return c == '{' || c == '[';
}

/* A GGUF file: its vocabulary is in its metadata. */
static bool is_gguf(const char *path) {
    unsigned char m[4] = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return false;
    size_t n = fread(m, 1, 4, f);
    fclose(f);
    return n == 4 && memcmp(m, "GGUF", 4) == 0;
}

pl_status pl_tok_load(const char *path, pl_tokenizer **out) {
    if (!path || !out) return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_tok_load: NULL %s",
                                      !path ? "path" : "out");
    pl_tokenizer *t = pl_calloc(1, sizeof *t);
    if (!t) return pl_fail(PL_ERR_OUT_OF_MEMORY, "tokenizer %s", path);
    t->bos_id = t->eos_id = -1;
    char *file = NULL, *config = NULL;
    bool json = false, gguf = false;
    pl_status s = PL_OK;
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        size_t n = strlen(path);
        while (n > 1 && path[n - 1] == '/') n--;
        file = join(path, n, "tokenizer.json");
        config = join(path, n, "tokenizer_config.json");
        if (!file || !config) goto oom;
        json = pl_tok_file_exists(file);
        if (!json) {
            pl_free(file);
            file = join(path, n, "tokenizer.model");
            if (!file) goto oom;
            if (!pl_tok_file_exists(file)) {
                s = pl_fail(PL_ERR_IO, "tokenizer %s: a directory with neither tokenizer.json "
                            "nor tokenizer.model", path);
                goto fail;
            }
        }
    } else {
        file = pl_strdup(path);
        if (!file) goto oom;
        gguf = is_gguf(path);
        json = !gguf && looks_like_json(path);
        if (json) { /* its tokenizer_config.json is read from the same folder */
            const char *slash = strrchr(path, '/');
            config = slash ? join(path, (size_t)(slash - path), "tokenizer_config.json")
                           : pl_strdup("tokenizer_config.json");
            if (!config) goto oom;
        }
    }
    if (config && !pl_tok_file_exists(config)) {
        pl_free(config);
        config = NULL;
    }
    s = gguf   ? pl_tok_gguf_open(t, file)
        : json ? pl_tok_hf_open(t, file, config)
               : pl_tok_spm_open(t, file, config);
    if (s != PL_OK) goto fail;
    pl_free(file);
    pl_free(config);
    *out = t;
    return PL_OK;
oom:
    s = pl_fail(PL_ERR_OUT_OF_MEMORY, "tokenizer %s", path);
fail:
    pl_free(file);
    pl_free(config);
    pl_tok_free(t);
    return s;
}

void pl_tok_free(pl_tokenizer *t) {
    if (!t) return;
    if (t->ops) t->ops->destroy(t->impl);
    pl_tok_free_facts(t);
    pl_free(t);
}

const char *pl_tok_type(const pl_tokenizer *t) { return t->ops->name; }

// ---- encode and decode -----------------------------------------------------------------------

static pl_status check_text(const char *text, size_t len) {
    if (len > MAX_TEXT_BYTES)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "text: %zu bytes is longer than the %zu-byte "
                       "limit", len, MAX_TEXT_BYTES);
    const unsigned char *u = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        if (u[i] < 0x80) { /* ASCII runs are the common case */
            if (u[i] == 0)
                return pl_fail(PL_ERR_INVALID_ARGUMENT, "text: NUL byte at byte offset %zu", i);
            i++;
            continue;
        }
        int k = pl_utf8_step(u + i, len - i);
        if (k <= 0)
            return pl_fail(PL_ERR_INVALID_ARGUMENT, "text: invalid UTF-8 at byte offset %zu "
                           "(byte 0x%02X)", i, u[i]);
        i += (size_t)k;
    }
    return PL_OK;
}

pl_status pl_tok_encode(const pl_tokenizer *t, const char *text, size_t len, unsigned flags,
                        int32_t **out_ids, size_t *out_n) {
    if (!t || (!text && len) || !out_ids || !out_n)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_tok_encode: NULL %s",
                       !t ? "tokenizer" : !out_ids ? "out_ids" : !out_n ? "out_n" : "text");
    PL_TRY(check_text(text, len));
    pl_tok_ids ids = {0};
    pl_status s = t->ops->encode(t, len ? text : "", len, flags, &ids);
    if (s == PL_OK && !ids.v && !(ids.v = pl_malloc(sizeof *ids.v)))
        s = pl_fail(PL_ERR_OUT_OF_MEMORY, "encode: ids");
    if (s != PL_OK) {
        pl_free(ids.v);
        return s;
    }
    *out_ids = ids.v;
    *out_n = ids.n;
    return PL_OK;
}

pl_status pl_tok_decode(const pl_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
                        char **out_text) {
    if (!t || (!ids && n) || !out_text)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_tok_decode: NULL %s",
                       !t ? "tokenizer" : !out_text ? "out_text" : "ids");
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab)
            return pl_fail(PL_ERR_INVALID_ARGUMENT, "ids[%zu] = %d is outside the vocabulary "
                           "[0, %d)", i, (int)ids[i], t->n_vocab);
    }
    return t->ops->decode(t, ids, n, flags, out_text);
}

// ---- streaming -------------------------------------------------------------------------------

pl_status pl_detok_create(const pl_tokenizer *t, unsigned flags, pl_detok **out) {
    if (!t || !out)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_detok_create: NULL %s",
                       !t ? "tokenizer" : "out");
    return t->ops->detok_create(t, flags, out);
}

void pl_detok_free(pl_detok *d) {
    if (d) d->tok->ops->detok_free(d);
}

pl_status pl_detok_push(pl_detok *d, int32_t id, const char **out_new, size_t *out_len) {
    if (!d || !out_new || !out_len)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_detok_push: NULL %s",
                       !d ? "detok" : !out_new ? "out_new" : "out_len");
    if (id < 0 || id >= d->tok->n_vocab)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "detok: id %d is outside the vocabulary [0, %d)",
                       (int)id, d->tok->n_vocab);
    return d->tok->ops->detok_push(d, id, out_new, out_len);
}

const char *pl_detok_text(pl_detok *d, size_t *out_len) {
    return d->tok->ops->detok_text(d, out_len);
}
