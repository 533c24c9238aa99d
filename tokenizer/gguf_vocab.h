/*
 * tokenizer/gguf_vocab.h - what reading (gguf_vocab.c) and writing (gguf_export.c) a GGUF
 * vocabulary share: the named pre-tokenizers of "gpt2" vocabularies and the token types.
 * Internal to tokenizer/.
 *
 * A "gpt2" vocabulary names its pre-tokenizer (tokenizer.ggml.pre) instead of storing it; each
 * name stands for the regex splits of the tokenizer.json it was converted from (all Isolated,
 * then byte-level), plus what GGUF does not store: an NFC normalizer (Qwen's tokenizer.json
 * has one) and ignore_merges (Llama 3's). The patterns are the tokenizer.json ones.
 */
#ifndef PL_TOKENIZER_GGUF_VOCAB_H
#define PL_TOKENIZER_GGUF_VOCAB_H

#include <stdbool.h>
#include <stddef.h>

#include "tokenizer/tokenizer.h"

/* GGUF token types (llama.cpp's, the same numbers as SentencePiece's piece types). */
enum {
    PL_GGUF_TOK_NORMAL = 1,
    PL_GGUF_TOK_UNKNOWN = 2,
    PL_GGUF_TOK_CONTROL = 3,
    PL_GGUF_TOK_USER_DEFINED = 4,
    PL_GGUF_TOK_UNUSED = 5,
    PL_GGUF_TOK_BYTE = 6,
};

#define PL_GGUF_PRE_MAX_REGEX 4

typedef struct pl_gguf_pre {
    const char *names[5];                        /* the name written first; NULL-terminated */
    const char *regex[PL_GGUF_PRE_MAX_REGEX + 1]; /* NULL-terminated */
    bool nfc;
    bool ignore_merges;
} pl_gguf_pre;

/* Loads the vocabulary inside the GGUF file at path into t, as the loaders in tok_internal.h
 * do (gguf_vocab.c). */
pl_status pl_tok_gguf_open(pl_tokenizer *t, const char *path);

/* The entry a tokenizer.ggml.pre names (NULL: unknown). */
const pl_gguf_pre *pl_gguf_pre_by_name(const char *name, size_t len);
/* The entries, for describing a tokenizer (ends with a zeroed entry). */
const pl_gguf_pre *pl_gguf_pre_table(void);
/* "llama-bpe, llama3, ..." for messages (static storage). */
const char *pl_gguf_pre_names(void);

#endif
