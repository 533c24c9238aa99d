/*
 * tokenizer/tok_internal.h - what the implementations behind tokenizer.h share: the table of
 * functions each one fills (like kernels/backend.h), the facts every tokenizer carries, and
 * small helpers (string -> id map, UTF-8, Unicode properties, reading files). Internal to
 * tokenizer/ (tests may include it).
 *
 * Layout of a tokenizer: `struct pl_tokenizer` holds the common facts and points at the
 * implementation's own state (`impl`); its `ops` say how to encode, decode and stream. A
 * streaming detokeniser is an implementation's struct whose first member is `pl_detok`.
 *
 * Invariants: a loaded tokenizer is immutable (any number of threads may use it at once);
 * every id in [0, n_vocab) has a piece (piece_of[id] != NULL, NUL-terminated); the
 * implementations never see a text that is not valid UTF-8 or holds a NUL byte (tokenizer.c
 * checks first), nor an id out of range.
 */
#ifndef PL_TOKENIZER_TOK_INTERNAL_H
#define PL_TOKENIZER_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"
#include "util/buf.h"

/* Files larger than this are refused before reading: the biggest real tokenizers are tens
 * of MB. */
#define PL_TOK_MAX_FILE_BYTES ((size_t)1 << 30)
/* Vocabularies larger than this (model vocabulary plus added tokens) are refused. */
#define PL_TOK_MAX_VOCAB (1 << 22)

#define PL_TOK_REPLACEMENT "\xEF\xBF\xBD" /* U+FFFD */

// ---- growable id list -----------------------------------------------------------------------

typedef struct pl_tok_ids {
    int32_t *v; /* (cap) pl_malloc'd */
    size_t n, cap;
} pl_tok_ids;

pl_status pl_tok_ids_push(pl_tok_ids *l, int32_t id);
pl_status pl_tok_ids_append(pl_tok_ids *l, const int32_t *ids, size_t n);

// ---- growable byte buffer: util's, with the tokenizer's message ------------------------------

typedef pl_buf pl_tok_buf;

static inline pl_status pl_tok_buf_reserve(pl_tok_buf *b, size_t more) {
    return pl_buf_reserve(b, more, "tokenizer: text buffer");
}
static inline pl_status pl_tok_buf_put(pl_tok_buf *b, const void *s, size_t n) {
    return pl_buf_put(b, s, n, "tokenizer: text buffer");
}
static inline void pl_tok_buf_free(pl_tok_buf *b) { pl_buf_free(b); }

// ---- the implementation table ---------------------------------------------------------------

typedef struct pl_tok_ops {
    const char *name; /* "sentencepiece", "bpe" */
    void (*destroy)(void *impl);
    /* text is valid UTF-8 without NUL (checked); appends ids to out (flags: PL_TOK_*). */
    pl_status (*encode)(const pl_tokenizer *t, const char *text, size_t len, unsigned flags,
                        pl_tok_ids *out);
    /* ids are in range (checked); *out_text pl_malloc'd, NUL-terminated, NUL-free. */
    pl_status (*decode)(const pl_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
                        char **out_text);
    pl_status (*detok_create)(const pl_tokenizer *t, unsigned flags, pl_detok **out);
    void (*detok_free)(pl_detok *d);
    /* id in range (checked). */
    pl_status (*detok_push)(pl_detok *d, int32_t id, const char **out_new, size_t *out_len);
    const char *(*detok_text)(pl_detok *d, size_t *out_len);
} pl_tok_ops;

struct pl_detok {
    const pl_tokenizer *tok; /* every implementation's detok starts with this struct */
};

// ---- string -> id map -----------------------------------------------------------------------

/* Open addressing over an entry array; keys are borrowed (they live as long as the map). */
typedef struct pl_tok_strmap_entry {
    const char *key;
    uint32_t len;
    uint32_t hash;
    int32_t id;
} pl_tok_strmap_entry;

typedef struct pl_tok_strmap {
    pl_tok_strmap_entry *entries; /* (n, cap) */
    size_t n, cap;
    uint32_t *slots;              /* (mask + 1) entry index + 1, 0 = empty */
    size_t mask;
} pl_tok_strmap;

uint64_t pl_tok_hash_bytes(const void *p, size_t n);
/* Sized for n_expected keys; PL_ERR_OUT_OF_MEMORY. */
pl_status pl_tok_strmap_init(pl_tok_strmap *m, size_t n_expected);
void pl_tok_strmap_free(pl_tok_strmap *m);
/* Adds key -> id. When the key is already present, *out_prev (may be NULL) gets its id and
 * nothing changes; otherwise *out_prev = -1. Grows as needed. */
pl_status pl_tok_strmap_put(pl_tok_strmap *m, const char *key, size_t len, int32_t id,
                            int32_t *out_prev);
/* The id of key, or -1. */
int32_t pl_tok_strmap_get(const pl_tok_strmap *m, const char *key, size_t len);

// ---- the tokenizer --------------------------------------------------------------------------

typedef struct pl_tok_template {
    char *name;     /* "default", "tool_use", ... */
    char *text;
} pl_tok_template;

struct pl_tokenizer {
    const pl_tok_ops *ops;
    void *impl;
    int n_vocab;
    const char **piece_of;   /* (n_vocab) pointers into implementation-owned strings */
    uint8_t *special;        /* (n_vocab) 1: a special token (control / special added token) */
    pl_tok_strmap pieces;    /* piece string -> id (added tokens and the model vocabulary) */
    int32_t bos_id, eos_id;  /* -1 when none */
    char *bos_text, *eos_text; /* NULL when none */
    bool add_bos, add_eos;
    int32_t *eog;            /* (n_eog) sorted, distinct */
    size_t n_eog;
    pl_tok_template *templates; /* (n_templates); templates[0] is the default when named so */
    size_t n_templates;
};

/* Builds t->pieces from piece_of (once; later calls do nothing). */
pl_status pl_tok_index_pieces(pl_tokenizer *t, const char *path);
/* The facts that depend on the others: the map of pieces, the end-of-generation set (eos
 * plus the special tokens that end a turn), the BOS/EOS strings. Called by each loader last,
 * once piece_of, special and bos/eos are set. */
pl_status pl_tok_finish_facts(pl_tokenizer *t, const char *path);
/* Frees what the facts own (t itself and its implementation stay). */
void pl_tok_free_facts(pl_tokenizer *t);

/* Reads tokenizer_config.json at path (and chat_template.jinja beside it when the config has
 * no template) into t's facts: bos/eos (string or {"content": ...}), add_bos_token,
 * add_eos_token, chat templates. *out_class gets tokenizer_class (pl_malloc'd or NULL).
 * Missing file: PL_OK with nothing changed. PL_ERR_FORMAT names the file and field. */
pl_status pl_tok_read_config(pl_tokenizer *t, const char *path, char **out_class,
                             bool *out_has_add_bos, bool *out_has_add_eos);

/* Adds a chat template named name (copied; text need not be NUL-terminated). PL_ERR_FORMAT
 * for a second template of the same name or too many, naming path. */
pl_status pl_tok_add_template(pl_tokenizer *t, const char *path, const char *name,
                              const char *text, size_t text_len);

// ---- files ----------------------------------------------------------------------------------

/* Reads a whole regular file (at most PL_TOK_MAX_FILE_BYTES) into *out (pl_malloc'd, with a
 * NUL after the *out_n bytes). PL_ERR_IO / PL_ERR_FORMAT (too large) naming the path. */
pl_status pl_tok_read_file(const char *path, char **out, size_t *out_n);
bool pl_tok_file_exists(const char *path);

// ---- the implementations' loaders ----------------------------------------------------------

/* Each fills t (whose facts are zeroed, bos/eos -1) and sets t->ops/impl; on failure it
 * leaves nothing for the caller to free besides t's common fields. */
pl_status pl_tok_hf_open(pl_tokenizer *t, const char *path, const char *config_path);
/* pl_tok_spm_open: spm.h; pl_tok_gguf_open (the vocabulary inside a GGUF file):
 * gguf_vocab.h. */

// ---- UTF-8 and Unicode ---------------------------------------------------------------------

bool pl_tok_is_white_space(uint32_t cp); /* Unicode White_Space */
bool pl_tok_is_word_char(uint32_t cp);   /* \w of the regex crate: letters, marks, Nd, Nl, Pc */
bool pl_tok_is_numeric(uint32_t cp);     /* general category Nd, Nl or No */

#endif
