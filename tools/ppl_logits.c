/*
 * tools/ppl_logits.c - the saved-logits file of `pagellm perplexity` (layout: ppl_logits.h):
 * its header checked before anything is read from the rest, and written.
 */
#include "ppl_logits.h"

#include <string.h>

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24);
}

bool ppl_logits_is(const uint8_t *p, size_t n) {
    return n >= 8 && memcmp(p, PPL_LOGITS_MAGIC, 8) == 0;
}

bool ppl_logits_parse_header(const uint8_t *p, size_t n, uint64_t file_size,
                             ppl_logits_header *h, char *err, size_t cap) {
    if (n < PPL_LOGITS_HEADER_BYTES || !ppl_logits_is(p, n)) {
        snprintf(err, cap, "not a pagellm logits file (it does not start with \"%s\")",
                 PPL_LOGITS_MAGIC);
        return false;
    }
    uint32_t version = le32(p + 8);
    if (version != 1) {
        snprintf(err, cap, "logits file version %u (this pagellm reads version 1)", version);
        return false;
    }
    ppl_logits_header r = {.n_vocab = le32(p + 12), .n_ctx = le32(p + 16),
                           .n_windows = le32(p + 20), .first = le32(p + 24)};
    if (r.n_vocab < 1 || r.n_vocab > PPL_LOGITS_MAX_VOCAB) {
        snprintf(err, cap, "vocabulary of %u tokens (1 .. %u)", r.n_vocab, PPL_LOGITS_MAX_VOCAB);
        return false;
    }
    if (r.n_ctx < 2 || r.n_ctx > PPL_LOGITS_MAX_CTX) {
        snprintf(err, cap, "windows of %u tokens (2 .. %u)", r.n_ctx, PPL_LOGITS_MAX_CTX);
        return false;
    }
    if (r.n_windows < 1) {
        snprintf(err, cap, "no windows");
        return false;
    }
    if (r.first >= r.n_ctx - 1) {
        snprintf(err, cap, "first scored position %u of a %u-token window", r.first, r.n_ctx);
        return false;
    }
    /* every product below fits 64 bits: 2^24 x 2^32 x 2^24 x 4 would not, so step by step */
    uint64_t tokens = (uint64_t)r.n_windows * r.n_ctx; /* < 2^56 */
    uint64_t rows = (uint64_t)r.n_windows * ppl_logits_scored(&r);
    uint64_t need = PPL_LOGITS_HEADER_BYTES;
    if (tokens > (UINT64_MAX - need) / 4) goto size;
    need += tokens * 4;
    if (rows > UINT64_MAX / 4 / r.n_vocab || rows * r.n_vocab * 4 > UINT64_MAX - need) goto size;
    need += rows * r.n_vocab * 4;
    if (need != file_size) {
        snprintf(err, cap, "%llu bytes, but %u windows of %u tokens over a vocabulary of %u take "
                 "%llu (truncated or not written to the end)", (unsigned long long)file_size,
                 r.n_windows, r.n_ctx, r.n_vocab, (unsigned long long)need);
        return false;
    }
    *h = r;
    return true;
size:
    snprintf(err, cap, "%u windows of %u tokens over a vocabulary of %u: too large", r.n_windows,
             r.n_ctx, r.n_vocab);
    return false;
}

void ppl_logits_read_i32(const uint8_t *p, size_t n, int32_t *out) {
    for (size_t i = 0; i < n; i++) out[i] = (int32_t)le32(p + 4 * i);
}

bool ppl_logits_check_tokens(const int32_t *tokens, size_t n, uint32_t n_vocab, char *err,
                             size_t cap) {
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= n_vocab) {
            snprintf(err, cap, "token %zu is %d, outside the vocabulary of %u", i, tokens[i],
                     n_vocab);
            return false;
        }
    return true;
}

bool ppl_logits_write_header(FILE *f, const ppl_logits_header *h, const int32_t *tokens) {
    uint8_t hd[PPL_LOGITS_HEADER_BYTES] = {0};
    memcpy(hd, PPL_LOGITS_MAGIC, 8);
    put32(hd + 8, 1);
    put32(hd + 12, h->n_vocab);
    put32(hd + 16, h->n_ctx);
    put32(hd + 20, h->n_windows);
    put32(hd + 24, h->first);
    if (fwrite(hd, 1, sizeof hd, f) != sizeof hd) return false;
    size_t n = (size_t)h->n_windows * h->n_ctx;
    for (size_t i = 0; i < n; i++) {
        uint8_t b[4];
        put32(b, (uint32_t)tokens[i]);
        if (fwrite(b, 1, 4, f) != 4) return false;
    }
    return true;
}
