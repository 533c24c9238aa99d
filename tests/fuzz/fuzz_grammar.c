/*
 * tests/fuzz/fuzz_grammar.c - libFuzzer target: the input is GBNF text (the first byte picks
 * how far to go). It is parsed; a grammar that parses is matched against the rest of the input
 * as output bytes, and its mask computed over a small fixed vocabulary at every step.
 *
 * What must hold: a parse either succeeds or fails with a status and a message, nothing to
 * free; matching never crashes, and a mask bit is set exactly for the tokens the matcher then
 * accepts (checked on the small vocabulary); nothing leaks; compile and match stay within the
 * limits (a hang is a libFuzzer timeout).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/vocab.h"
#include "util/alloc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A vocabulary without a tokenizer: a few tokens spanning JSON tokens and characters. */
static const char *const k_tokens[] = {"{", "}", "\"", "\":", "\",\"", "a", "ab", " ", "\n", "1",
                                       "12", "-", ".", "\xc3", "\xa9", "\xc3\xa9x", "true", "[",
                                       "]", ",", "x\"}", "\\", "n", "é"};
#define N_TOK (sizeof k_tokens / sizeof k_tokens[0])

static pl_gram_vocab *make_vocab(void) {
    /* built by hand (vocab.c's layout) so the target needs no tokenizer file */
    static pl_gram_vocab *v;
    if (v) return v;
    v = calloc(1, sizeof *v);
    v->n_vocab = (int)N_TOK;
    size_t total = 0;
    for (size_t i = 0; i < N_TOK; i++) total += strlen(k_tokens[i]);
    v->bytes = malloc(total + 1);
    v->off = malloc((N_TOK + 1) * sizeof *v->off);
    size_t at = 0;
    for (size_t i = 0; i < N_TOK; i++) {
        v->off[i] = (uint32_t)at;
        memcpy(v->bytes + at, k_tokens[i], strlen(k_tokens[i]));
        at += strlen(k_tokens[i]);
    }
    v->off[N_TOK] = (uint32_t)at;
    /* a flat trie: one chain per token (no shared prefixes): valid, if not minimal */
    v->sorted = malloc(N_TOK * sizeof *v->sorted);
    v->nodes = calloc(total + 1, sizeof *v->nodes);
    size_t nn = 1;
    for (size_t i = 0; i < N_TOK; i++) {
        v->sorted[i] = (int32_t)i;
        size_t len = strlen(k_tokens[i]), first = nn;
        for (size_t d = 1; d <= len; d++, nn++)
            v->nodes[nn] = (pl_gram_node){.byte = (uint8_t)k_tokens[i][d - 1],
                                          .depth = (uint32_t)d, .tok_lo = (uint32_t)i,
                                          .tok_n = d == len};
        for (size_t k = first; k < nn; k++) v->nodes[k].end = (uint32_t)nn;
        if (len > v->max_len) v->max_len = len;
    }
    v->nodes[0].end = (uint32_t)nn;
    v->n_nodes = nn;
    v->n_sorted = N_TOK;
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    /* the grammar is the text up to a NUL; the bytes after it are the output to match */
    const char *nul = memchr(text, '\0', len);
    size_t glen = nul ? (size_t)(nul - text) : len;
    pl_gram *g = NULL;
    if (pl_gram_parse(text, glen, NULL, &g) != PL_OK) {
        if (g) abort();
        if (!pl_last_error()[0]) abort();
        return 0;
    }
    pl_gram_vocab *v = make_vocab();
    pl_gram_matcher m;
    if (pl_gram_matcher_init(&m, g) == PL_OK) {
        const char *out = nul ? nul + 1 : "";
        size_t out_len = nul ? len - glen - 1 : 0;
        uint64_t bits[1];
        for (size_t i = 0; i < out_len && i < 64; i++) {
            bits[0] = 0;
            if (data[0] & 1) {
                if (pl_gram_mask(&m, v, NULL, 0, bits) != PL_OK) break;
                for (size_t t = 0; t < N_TOK; t++) {
                    pl_gram_matcher c;
                    if (pl_gram_matcher_copy(&c, &m) != PL_OK) break;
                    bool ok = pl_gram_matcher_accept_token(&c, v, (int32_t)t) == PL_OK;
                    pl_gram_matcher_deinit(&c);
                    if (ok != (bool)((bits[0] >> t) & 1)) {
                        fprintf(stderr, "output byte %zu, token %zu (%s): mask %d, accepted %d\n",
                                i, t, k_tokens[t], (int)((bits[0] >> t) & 1), ok);
                        abort();
                    }
                }
            }
            if (pl_gram_matcher_accept_bytes(&m, out + i, 1) != PL_OK) break;
        }
        (void)pl_gram_matcher_is_complete(&m);
        pl_gram_matcher_deinit(&m);
    }
    pl_gram_free(g);
    return 0;
}
