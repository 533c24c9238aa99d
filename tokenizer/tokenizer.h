/*
 * tokenizer/tokenizer.h - text <-> token ids through SentencePiece, and streaming detokenisation.
 *
 * The SentencePiece C++ library sits behind a small C shim (spm_shim.cc, the project's one C++
 * file); everything else is C. Knows nothing about models or devices.
 */
#ifndef PL_TOKENIZER_H
#define PL_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pl_tokenizer pl_tokenizer;

/* Loads a SentencePiece .model. PL_ERR_IO (cannot read), PL_ERR_FORMAT (not a valid model,
 * message names the file), PL_ERR_OUT_OF_MEMORY. */
pl_status pl_tok_load(const char *path, pl_tokenizer **out);
void pl_tok_free(pl_tokenizer *t); /* NULL is a no-op */

int pl_tok_vocab_size(const pl_tokenizer *t);
int pl_tok_bos_id(const pl_tokenizer *t); /* -1 if none */
int pl_tok_eos_id(const pl_tokenizer *t); /* -1 if none */

/* The piece of id ("▁the", "<0x0A>"); tokenizer-owned, valid until pl_tok_free.
 * NULL for an id out of range. */
const char *pl_tok_piece(const pl_tokenizer *t, int32_t id);

/* Encodes text[0..len) (len bytes, UTF-8; NUL bytes and invalid UTF-8 are refused with
 * PL_ERR_INVALID_ARGUMENT), with BOS first when add_bos. *out_ids is allocated with
 * pl_malloc and owned by the caller (pl_free). */
pl_status pl_tok_encode(const pl_tokenizer *t, const char *text, size_t len, bool add_bos,
                        int32_t **out_ids, size_t *out_n);

/* Decodes ids into a NUL-terminated string (pl_malloc; caller frees with pl_free). Ids out of
 * range are PL_ERR_INVALID_ARGUMENT. Control ids (BOS/EOS) decode to nothing. */
pl_status pl_tok_decode(const pl_tokenizer *t, const int32_t *ids, size_t n, char **out_text);

/* ---- streaming detokenisation -------------------------------------------------------- */

/* Turns a growing list of output ids into text pieces that concatenate to exactly the full
 * decode of the output, never emitting a broken UTF-8 sequence (byte-fallback pieces are held
 * back until their character is complete) and handling SentencePiece's leading-space rule
 * (the first piece's "▁" is dropped only at the start of the text, as decode does). */
typedef struct pl_detok {
    const pl_tokenizer *tok;
    int32_t *ids;      /* output ids pushed so far */
    size_t n_ids, cap_ids;
    size_t n_emitted;  /* bytes of the decoded text already returned */
    char *text;        /* decode of ids (grows) */
    size_t text_len, text_cap;
    bool after_prompt; /* the output continues a prompt: no leading-space stripping */
} pl_detok;

/* after_prompt: true when the ids follow a prompt (engine outputs), so a leading "▁" is a
 * real space. */
void pl_detok_init(pl_detok *d, const pl_tokenizer *t, bool after_prompt);
void pl_detok_deinit(pl_detok *d);

/* Appends id and sets *out_new / *out_len to the newly completed text (detok-owned, valid
 * until the next push or deinit; may be empty). PL_ERR_INVALID_ARGUMENT for an id out of
 * range, PL_ERR_OUT_OF_MEMORY. */
pl_status pl_detok_push(pl_detok *d, int32_t id, const char **out_new, size_t *out_len);

/* All text so far, including bytes still held back (invalid sequences at the very end are
 * replaced by U+FFFD); detok-owned, valid until the next push or deinit. */
const char *pl_detok_text(pl_detok *d, size_t *out_len);

#ifdef __cplusplus
}
#endif
#endif
