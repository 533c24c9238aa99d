/*
 * tests/fuzz/fuzz_logits.c - libFuzzer target: the saved-logits file of `pagellm perplexity`
 * (tools/ppl_logits.c), the input taken as a whole file.
 *
 * Contract: the header parser accepts a file only when its counts are in range and its size
 * is exactly what they imply (so every later read stays inside the file), and then the
 * windows' tokens are read from right after the header and checked against the vocabulary;
 * a refusal comes with a printable message inside its buffer; nothing leaks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/ppl_logits.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what) {
    fprintf(stderr, "fuzz_logits: %s\n", what);
    abort();
}

static void check_message(const char *s, size_t cap) {
    size_t len = strnlen(s, cap);
    if (len == 0) fail("a refusal without a message");
    if (len == cap) fail("message not terminated in its buffer");
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) fail("control character in a message");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ppl_logits_header h;
    char err[256] = "";
    if (!ppl_logits_parse_header(data, size, size, &h, err, sizeof err)) {
        check_message(err, sizeof err);
        return 0;
    }
    if (h.n_vocab < 1 || h.n_ctx < 2 || h.n_windows < 1 || h.first >= h.n_ctx - 1)
        fail("accepted counts out of range");
    size_t n = (size_t)h.n_windows * h.n_ctx;
    uint64_t rows_bytes = (uint64_t)h.n_windows * ppl_logits_scored(&h) * h.n_vocab * 4;
    if (PPL_LOGITS_HEADER_BYTES + 4 * (uint64_t)n + rows_bytes != size)
        fail("accepted a size its counts do not imply");
    int32_t *tokens = malloc(n * sizeof *tokens + 1);
    if (!tokens) return 0;
    ppl_logits_read_i32(data + PPL_LOGITS_HEADER_BYTES, n, tokens);
    err[0] = 0;
    if (!ppl_logits_check_tokens(tokens, n, h.n_vocab, err, sizeof err)) {
        check_message(err, sizeof err);
    } else {
        for (size_t i = 0; i < n; i++)
            if (tokens[i] < 0 || (uint32_t)tokens[i] >= h.n_vocab) fail("accepted a bad token");
    }
    free(tokens);
    return 0;
}
