/*
 * tokenizer/spm_shim.h - the C face of the SentencePiece C++ library (implemented in
 * spm_shim.cc, the project's one C++ file). Used only by tokenizer/tokenizer.c.
 *
 * Invariants: no C++ exception ever crosses this interface (every entry point catches
 * everything and turns it into a PL_TOK_SPM_* code plus a message in the caller's `err`
 * buffer); ids handed in are range-checked here as well as by the caller, because the library
 * aborts through protobuf's CHECK on an out-of-range id. Output arrays are allocated with
 * pl_malloc so fault-injection tests reach them; the caller frees them with pl_free.
 */
#ifndef PL_TOKENIZER_SPM_SHIM_H
#define PL_TOKENIZER_SPM_SHIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pl_tok_spm pl_tok_spm;

/* Result codes; tokenizer.c maps them to pl_status with context (the file, the argument). */
enum {
    PL_TOK_SPM_OK = 0,
    PL_TOK_SPM_FORMAT = 1,   /* the bytes are not a usable model */
    PL_TOK_SPM_NOMEM = 2,    /* std::bad_alloc or pl_malloc failed */
    PL_TOK_SPM_INVALID = 3,  /* a bad argument (id out of range) */
    PL_TOK_SPM_FAILED = 4,   /* any other library error */
};

/* What kind of piece an id is; decides how it decodes. */
enum {
    PL_TOK_SPM_NORMAL = 0,   /* normal, user-defined and unused pieces: the text of the piece */
    PL_TOK_SPM_CONTROL = 1,  /* <s>, </s>, ...: decode to nothing */
    PL_TOK_SPM_UNKNOWN = 2,  /* <unk>: decodes to the model's unk surface (" \u2047 ") */
    PL_TOK_SPM_BYTE = 3,     /* <0xAB>: one raw byte (byte fallback) */
};

/* Parses a serialized ModelProto (bytes[0..n_bytes), copied by the library). On failure *out
 * is untouched and err (err_cap bytes, always NUL-terminated when err_cap > 0) holds the
 * library's message. */
int pl_tok_spm_load(const void *bytes, size_t n_bytes, pl_tok_spm **out, char *err,
                    size_t err_cap);
void pl_tok_spm_free(pl_tok_spm *s); /* NULL is a no-op */

int pl_tok_spm_piece_count(const pl_tok_spm *s);
int pl_tok_spm_bos_id(const pl_tok_spm *s); /* -1 when the model has no BOS control piece */
int pl_tok_spm_eos_id(const pl_tok_spm *s); /* -1 when the model has no EOS control piece */

/* The piece text of id (n bytes at the pointer, which the library owns until
 * pl_tok_spm_free; it may contain NUL bytes in a hostile model) and its kind. Returns NULL
 * for an id out of range. */
const char *pl_tok_spm_piece(const pl_tok_spm *s, int id, size_t *out_len, int *out_kind);

/* The score of id (0 for an id out of range). */
float pl_tok_spm_score(const pl_tok_spm *s, int id);

/* Encodes text[0..len) into *out_ids (pl_malloc, n entries, caller frees), with bos_id first
 * when bos_id >= 0. Does not validate UTF-8: the caller does. */
int pl_tok_spm_encode(const pl_tok_spm *s, const char *text, size_t len, int32_t bos_id,
                      int32_t **out_ids, size_t *out_n, char *err, size_t err_cap);

/* Decodes ids[0..n) with the library's own rules into *out_text (pl_malloc, *out_len bytes
 * plus a NUL; the text itself may contain NUL bytes from <0x00> pieces; caller frees). */
int pl_tok_spm_decode(const pl_tok_spm *s, const int32_t *ids, size_t n, char **out_text,
                      size_t *out_len, char *err, size_t err_cap);

#ifdef __cplusplus
}
#endif
#endif
