/*
 * tests/tokenizer/tok_check.h - checks shared by the tokenizer test binaries: an independent
 * UTF-8 validator, random id sequences that stress byte fallback, and the streaming property
 * (pushed chunks are valid UTF-8 and concatenate to the library's full decode).
 */
#ifndef PL_TESTS_TOK_CHECK_H
#define PL_TESTS_TOK_CHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "test_support.h"
#include "tokenizer/tokenizer.h"

/* True when s[0..n) is valid UTF-8 (no overlongs, surrogates or code points past U+10FFFF);
 * otherwise *bad_at (may be NULL) gets the offset of the first bad sequence. Written from
 * code points, separately from the library's byte-range table, so it checks it. */
bool tok_utf8_valid(const char *s, size_t n, size_t *bad_at);

/* Byte-piece ids found by piece name "<0xHH>" (-1 when absent), and other ids worth mixing
 * into random sequences. */
typedef struct tok_ids {
    int32_t byte_id[256];
    int32_t special[16]; /* control, unknown and "▁"-only pieces */
    int n_special;
} tok_ids;
void tok_ids_find(const pl_tokenizer *t, tok_ids *out);

/* Fills ids[0..max) with a random sequence (returns its length, 1..max): uniform ids, random
 * bytes, UTF-8 characters spelt as byte pieces (sometimes cut short), and special ids. */
size_t tok_random_ids(const pl_tokenizer *t, const tok_ids *k, pl_test_rng *r, int32_t *ids,
                      size_t max);

/* Streams ids through a pl_detok and asserts: every chunk is valid UTF-8 and NUL-free; the
 * concatenation, followed by the held-back tail (U+FFFD per byte of an unfinished character,
 * seen only through pl_detok_text), equals pl_tok_decode(ids); with every_step,
 * pl_detok_text equals pl_tok_decode of each prefix too. */
void tok_check_stream(const pl_tokenizer *t, const int32_t *ids, size_t n, bool every_step);
/* The same with detok/decode flags (PL_TOK_SKIP_SPECIAL, PL_TOK_AFTER_PROMPT: with the latter
 * the oracle is still decode of the ids alone, which only fits decoders without first-token
 * rules). */
void tok_check_stream_flags(const pl_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
                            bool every_step);

/* The engine's convention: ids continue the prompt ctx (after_prompt = true), and the chunks
 * concatenate to decode(ctx + ids) minus decode(ctx). */
void tok_check_stream_after(const pl_tokenizer *t, const int32_t *ctx, size_t n_ctx,
                            const int32_t *ids, size_t n);

#endif
