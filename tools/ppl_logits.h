/*
 * tools/ppl_logits.h - the file `pagellm perplexity --save-logits` writes and
 * `--kl-divergence-base` reads: a model's log-probabilities over the scored positions of the
 * windows of a text, so another model (a quantised one) can be compared with it later
 * without loading both.
 *
 * Layout (little-endian):
 *   bytes 0-7    "PLLOGITS"
 *   8-11         version (1)
 *   12-15        n_vocab
 *   16-19        n_ctx: tokens per window
 *   20-23        n_windows
 *   24-27        first: the first scored position of each window (n_ctx / 2)
 *   28-31        0
 *   then         n_windows * n_ctx int32 token ids: the windows as evaluated (BOS already in
 *                place of each window's first token when the model has one)
 *   then         per window, per scored position p = first .. n_ctx - 2: n_vocab f32, the
 *                log-softmax of the logits at p (predicting token p + 1)
 * f32 log-probabilities keep KL divergence from a file equal, bit for bit, to the one of a
 * base model run in the same process; they take 4 bytes per vocabulary entry and position
 * (llama-perplexity stores 2).
 */
#ifndef PL_TOOLS_PPL_LOGITS_H
#define PL_TOOLS_PPL_LOGITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define PPL_LOGITS_MAGIC "PLLOGITS"
#define PPL_LOGITS_HEADER_BYTES 32
#define PPL_LOGITS_MAX_VOCAB (1u << 24)
#define PPL_LOGITS_MAX_CTX (1u << 24)

typedef struct ppl_logits_header {
    uint32_t n_vocab, n_ctx, n_windows, first;
} ppl_logits_header;

/* Scored positions per window, and the byte sizes of the parts. */
static inline uint32_t ppl_logits_scored(const ppl_logits_header *h) {
    return h->n_ctx - 1 - h->first;
}

/* Whether p (n bytes) starts with the magic. */
bool ppl_logits_is(const uint8_t *p, size_t n);

/* Checks and reads the header in p (n bytes, at least PPL_LOGITS_HEADER_BYTES) of a file of
 * file_size bytes: the magic, the version, each count in its range, first < n_ctx - 1, and
 * the file size equal to what the counts imply (computed without overflow). On failure err
 * (cap bytes) says what is wrong, in words about the file. */
bool ppl_logits_parse_header(const uint8_t *p, size_t n, uint64_t file_size,
                             ppl_logits_header *h, char *err, size_t cap);

/* Checks the windows' token ids (n of them) against the vocabulary. */
bool ppl_logits_check_tokens(const int32_t *tokens, size_t n, uint32_t n_vocab, char *err,
                             size_t cap);

/* Decodes n little-endian int32 from p into out. */
void ppl_logits_read_i32(const uint8_t *p, size_t n, int32_t *out);

/* Writes the header and the windows' tokens (n_windows * n_ctx). false on a write error. */
bool ppl_logits_write_header(FILE *f, const ppl_logits_header *h, const int32_t *tokens);

#endif
