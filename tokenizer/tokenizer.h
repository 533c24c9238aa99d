/*
 * tokenizer/tokenizer.h - text <-> token ids through SentencePiece, and streaming detokenisation.
 *
 * The SentencePiece C++ library sits behind a small C shim (spm_shim.cc, the project's one C++
 * file); everything else is C. Knows nothing about models or devices.
 *
 * Invariants
 * - Decoded text never contains a NUL byte: a NUL that the library would produce (the byte
 *   piece <0x00>, or a NUL inside a hostile model's piece) becomes U+FFFD, so every decoded
 *   string is a proper C string. pl_tok_decode and pl_detok agree on this.
 * - A loaded tokenizer is immutable: any number of threads may encode/decode with it at once.
 * - Models with a denormalizer (denormalizer_spec with a charsmap) are refused with
 *   PL_ERR_UNSUPPORTED: the streaming detokeniser reproduces the library's decode piece by
 *   piece, which a whole-text denormalisation pass would break.
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

/* Loads a SentencePiece .model. PL_ERR_IO (cannot open or read; the message names the path),
 * PL_ERR_FORMAT (empty, truncated or not a model; the message names the path),
 * PL_ERR_UNSUPPORTED (a denormalizer), PL_ERR_OUT_OF_MEMORY. On failure *out is untouched
 * and nothing is left to free. */
pl_status pl_tok_load(const char *path, pl_tokenizer **out);
void pl_tok_free(pl_tokenizer *t); /* NULL is a no-op */

int pl_tok_vocab_size(const pl_tokenizer *t);
/* The model's <s> / </s> ids (trainer spec bos_piece / eos_piece, when that piece exists
 * and is a control piece); -1 if none. */
int pl_tok_bos_id(const pl_tokenizer *t);
int pl_tok_eos_id(const pl_tokenizer *t);

/* The piece of id ("▁the", "<0x0A>"); tokenizer-owned, valid until pl_tok_free.
 * NULL for an id out of range. */
const char *pl_tok_piece(const pl_tokenizer *t, int32_t id);

/* Encodes text[0..len) (len bytes, UTF-8; NUL bytes and invalid UTF-8 are refused with
 * PL_ERR_INVALID_ARGUMENT and a message giving the byte offset), with BOS first when add_bos
 * and the model has a BOS (pl_tok_bos_id >= 0; otherwise nothing is prepended). *out_ids
 * (*out_n entries, possibly 0) is allocated with pl_malloc and owned by the caller (pl_free).
 * Also PL_ERR_OUT_OF_MEMORY, and PL_ERR_FORMAT if the library fails on validated text (a
 * damaged model). On failure the outputs are untouched. */
pl_status pl_tok_encode(const pl_tokenizer *t, const char *text, size_t len, bool add_bos,
                        int32_t **out_ids, size_t *out_n);

/* Decodes ids[0..n) into a NUL-terminated string (pl_malloc; caller frees with pl_free) with
 * SentencePiece's rules: the first "▁" of the text is dropped (per the model's
 * add_dummy_prefix / remove_extra_whitespaces), byte pieces are joined into UTF-8 characters
 * and each byte of an invalid sequence becomes U+FFFD. Ids out of range are
 * PL_ERR_INVALID_ARGUMENT (the message names the index). Control ids (BOS/EOS) decode to
 * nothing; <unk> to the model's unk surface (" \u2047 " by default). */
pl_status pl_tok_decode(const pl_tokenizer *t, const int32_t *ids, size_t n, char **out_text);

/* ---- streaming detokenisation -------------------------------------------------------- */

/* Turns a growing list of output ids into text pieces that concatenate to exactly the full
 * decode, never emitting a broken UTF-8 sequence: byte-fallback pieces are held back until
 * their character is complete (or proven invalid, then U+FFFD per byte as decode does).
 * It is a small state machine over a per-id table built at load, so a push costs O(length of
 * the piece) and never re-decodes earlier ids.
 *
 * What "the full decode" is:
 * - after_prompt == false: pl_tok_decode(ids pushed so far).
 * - after_prompt == true (engine outputs): the ids continue a prompt, so the output's leading
 *   "▁" is a real space. The pieces concatenate to decode(P + ids) minus decode(P) for any
 *   prompt P whose decode is non-empty and does not end inside an incomplete byte sequence
 *   (true of every prompt made by pl_tok_encode from valid text). This is vLLM's
 *   prefix-offset result, computed without decoding the prompt.
 * End of stream: the last bytes of an unfinished character are still held back (at most 3).
 * pl_detok_text shows them as U+FFFD each, so the final text is pl_detok_text, and its part
 * past the pushed text (text_len) is the tail to emit when a request finishes.
 *
 * The caller provides the storage (the engine embeds it by value); fields are private. */
typedef struct pl_detok {
    const pl_tokenizer *tok;
    char *text;           /* (text_cap) bytes: text_len bytes emitted so far, NUL-terminated,
                             and always room for 4 held-back bytes as U+FFFD (13 bytes) */
    size_t text_len, text_cap;
    uint8_t pending[4];   /* byte-fallback bytes of a character not complete yet */
    int n_pending;        /* 0..3 between pushes */
    bool bos_ws_open;     /* a leading "▁" would still be dropped (library's is_bos_ws) */
    bool bos_ws_seen;     /* the last non-byte piece had its leading "▁" dropped */
} pl_detok;

/* after_prompt: true when the ids follow a prompt (engine outputs), so a leading "▁" is a
 * real space. Cannot fail; allocates nothing until the first push. */
void pl_detok_init(pl_detok *d, const pl_tokenizer *t, bool after_prompt);
void pl_detok_deinit(pl_detok *d); /* frees what push allocated; the struct may be re-inited */

/* Appends id and sets *out_new / *out_len to the newly completed text (*out_len bytes,
 * detok-owned, valid until the next push or deinit; may be empty; followed by a NUL until
 * pl_detok_text renders held-back bytes after it). PL_ERR_INVALID_ARGUMENT
 * for an id out of range, PL_ERR_OUT_OF_MEMORY; on failure the state is unchanged and the
 * outputs are untouched. */
pl_status pl_detok_push(pl_detok *d, int32_t id, const char **out_new, size_t *out_len);

/* All text so far, including bytes still held back (an incomplete sequence at the very end
 * is shown as one U+FFFD per byte, exactly as pl_tok_decode of the same ids); detok-owned,
 * NUL-terminated, valid until the next push or deinit. Does not change what later pushes
 * return, and never allocates (out_len may be NULL). */
const char *pl_detok_text(pl_detok *d, size_t *out_len);

/* ---- internal to tokenizer/ (detok.c reads the table tokenizer.c builds) --------------- */

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

/* The decode entry of id; NULL when out of range. */
const pl_tok_entry *pl_tok_entry_of(const pl_tokenizer *t, int32_t id);
pl_tok_ws_rule pl_tok_ws_rule_of(const pl_tokenizer *t);

/* Strict UTF-8 (RFC 3629, which is also what SentencePiece's decoder accepts): the length
 * (1..4) of the sequence at b[0..n) when complete and valid, 0 when b[0..n) is a proper
 * prefix of a valid sequence, -1 when b[0] cannot start one given the bytes present. n >= 1. */
int pl_tok_utf8_step(const unsigned char *b, size_t n);

#ifdef __cplusplus
}
#endif
#endif
