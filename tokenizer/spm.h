/*
 * tokenizer/spm.h - the SentencePiece implementation's decode table, shared by spm.c (which
 * builds it at load) and spm_detok.c (which streams on it). Internal to tokenizer/; tests
 * include it to check the table.
 */
#ifndef PL_TOKENIZER_SPM_H
#define PL_TOKENIZER_SPM_H

#include <stdbool.h>
#include <stdint.h>

#include "tokenizer/tok_internal.h"

typedef enum pl_tok_kind {
    PL_TOK_KIND_NORMAL = 0,  /* normal, user-defined, unused: decodes to its surface */
    PL_TOK_KIND_CONTROL = 1, /* decodes to nothing */
    PL_TOK_KIND_UNKNOWN = 2, /* decodes to the unk surface; never loses a leading space */
    PL_TOK_KIND_BYTE = 3,    /* one raw byte, joined with its neighbours into UTF-8 */
} pl_tok_kind;

/* How a leading "▁" at the start of the text is dropped (probed from the library at load). */
typedef enum pl_tok_ws_rule {
    PL_TOK_WS_KEEP = 0,  /* neither add_dummy_prefix nor remove_extra_whitespaces */
    PL_TOK_WS_FIRST = 1, /* add_dummy_prefix only: only the first such piece loses it */
    PL_TOK_WS_ALL = 2,   /* remove_extra_whitespaces: every one while the text is empty */
} pl_tok_ws_rule;

typedef struct pl_tok_entry {
    const char *surface; /* (surface_len) bytes, tokenizer-owned: the piece with "▁" -> ' '
                            and NUL -> U+FFFD (NORMAL), the unk surface (UNKNOWN), "" else */
    uint32_t surface_len;
    uint8_t kind;        /* pl_tok_kind */
    uint8_t byte;        /* the byte of a BYTE piece */
    bool lead_ws;        /* NORMAL piece starting with "▁": surface[0] is droppable ' ' */
} pl_tok_entry;

/* The decode entry of id; NULL when out of range or t is not a SentencePiece tokenizer. */
const pl_tok_entry *pl_tok_entry_of(const pl_tokenizer *t, int32_t id);
/* KEEP for a tokenizer that is not SentencePiece. */
pl_tok_ws_rule pl_tok_ws_rule_of(const pl_tokenizer *t);

/* What a SentencePiece model says about how it normalises and segments, read from its
 * ModelProto (the library's API does not expose it): for describing the model elsewhere
 * (GGUF's "llama" vocabularies). Absent fields take protobuf's defaults. */
typedef struct pl_tok_spm_spec {
    int model_type;                /* TrainerSpec.model_type: 1 unigram, 2 BPE, 3 word, 4 char */
    bool byte_fallback;
    bool add_dummy_prefix;         /* NormalizerSpec */
    bool remove_extra_whitespaces;
    bool escape_whitespaces;
    bool has_charsmap;             /* a precompiled normalisation map (not "identity") */
    bool treat_whitespace_as_suffix;
} pl_tok_spm_spec;

/* NULL when t is not a SentencePiece tokenizer. */
const pl_tok_spm_spec *pl_tok_spm_spec_of(const pl_tokenizer *t);
/* The library's score and ModelProto piece type (1 normal .. 6 byte) of id. */
float pl_tok_spm_score_of(const pl_tokenizer *t, int32_t id);
int pl_tok_spm_type_of(const pl_tokenizer *t, int32_t id);

/* Loads a .model file (and tokenizer_config.json at config_path, when not NULL) into t, as
 * the loaders in tok_internal.h do. */
pl_status pl_tok_spm_open(pl_tokenizer *t, const char *path, const char *config_path);

/* Loads a serialized ModelProto (bytes[0..n), copied) into t as pl_tok_spm_open does a file,
 * but leaves the facts unfinished: the caller sets BOS/EOS and the add flags, then calls
 * pl_tok_finish_facts. name is for messages. */
pl_status pl_tok_spm_open_proto(pl_tokenizer *t, const char *name, const void *bytes, size_t n);

/* The streaming detokeniser of spm_detok.c (the ops of the SentencePiece implementation). */
/* entries and ws_rule: the tokenizer's decode table and rule (see pl_tok_entry_of). */
pl_status pl_tok_spm_detok_create(const pl_tokenizer *t, const pl_tok_entry *entries,
                                  pl_tok_ws_rule ws_rule, unsigned flags, pl_detok **out);
void pl_tok_spm_detok_free(pl_detok *d);
pl_status pl_tok_spm_detok_push(pl_detok *d, int32_t id, const char **out_new,
                                size_t *out_len);
const char *pl_tok_spm_detok_text(pl_detok *d, size_t *out_len);

#endif
