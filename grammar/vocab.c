/*
 * grammar/vocab.c - a tokenizer's tokens as grammar input: each token's bytes (tokenizer.h's
 * pl_tok_token_bytes) in a byte trie whose nodes are stored in depth-first order, so the
 * mask's walk is a loop over an array that skips a dead subtree in one jump.
 *
 * Built by sorting the tokens by their bytes: in that order each token shares its longest
 * common prefix with the one before, so the trie is the list of their new suffixes, and the
 * tokens ending at a node are a run of the sorted order.
 */
#include <stdlib.h>
#include <string.h>

#include "grammar/vocab.h"
#include "tokenizer/tokenizer.h"
#include "util/alloc.h"

static int cmp_tok(const void *a, const void *b, void *ctx) {
    const pl_gram_vocab *v = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    size_t lx = v->off[x + 1] - v->off[x], ly = v->off[y + 1] - v->off[y];
    int c = memcmp(v->bytes + v->off[x], v->bytes + v->off[y], lx < ly ? lx : ly);
    if (c) return c;
    if (lx != ly) return lx < ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

void pl_gram_vocab_free(pl_gram_vocab *v) {
    if (!v) return;
    pl_free(v->bytes);
    pl_free(v->off);
    pl_free(v->sorted);
    pl_free(v->nodes);
    pl_free(v);
}

int pl_gram_vocab_size(const pl_gram_vocab *v) { return v->n_vocab; }

const char *pl_gram_vocab_bytes(const pl_gram_vocab *v, int32_t id, size_t *out_len) {
    if (id < 0 || id >= v->n_vocab || v->off[id + 1] == v->off[id]) {
        *out_len = 0;
        return NULL;
    }
    *out_len = v->off[id + 1] - v->off[id];
    return v->bytes + v->off[id];
}

pl_status pl_gram_vocab_create(const pl_tokenizer *t, pl_gram_vocab **out) {
    pl_gram_vocab *v = pl_calloc(1, sizeof *v);
    if (!v) return pl_fail(PL_ERR_OUT_OF_MEMORY, "grammar: vocabulary");
    v->n_vocab = pl_tok_vocab_size(t);
    pl_status st = pl_tok_token_bytes(t, &v->bytes, &v->off);
    if (st != PL_OK) {
        pl_free(v);
        return st;
    }
    size_t n = 0, total = 0;
    for (int32_t id = 0; id < v->n_vocab; id++)
        if (v->off[id + 1] > v->off[id]) n++, total += v->off[id + 1] - v->off[id];
    v->sorted = pl_malloc((n ? n : 1) * sizeof *v->sorted);
    v->nodes = pl_malloc((total + 1) * sizeof *v->nodes);
    if (!v->sorted || !v->nodes) {
        pl_gram_vocab_free(v);
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "grammar: token trie of %zu bytes", total);
    }
    n = 0;
    for (int32_t id = 0; id < v->n_vocab; id++)
        if (v->off[id + 1] > v->off[id]) v->sorted[n++] = id;
    v->n_sorted = n;
    qsort_r(v->sorted, n, sizeof *v->sorted, cmp_tok, v);
    /* nodes in preorder; path[d] = the node at depth d of the current token */
    size_t max_len = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l = v->off[v->sorted[i] + 1] - v->off[v->sorted[i]];
        if (l > max_len) max_len = l;
    }
    uint32_t *path = pl_malloc((max_len + 1) * sizeof *path);
    if (!path) {
        pl_gram_vocab_free(v);
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "grammar: token trie");
    }
    v->max_len = max_len;
    size_t nn = 1;
    v->nodes[0] = (pl_gram_node){.depth = 0, .tok_lo = 0, .tok_n = 0};
    path[0] = 0;
    const char *prev = NULL;
    size_t prev_len = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = v->sorted[i];
        const char *s = v->bytes + v->off[id];
        size_t len = v->off[id + 1] - v->off[id];
        size_t lcp = 0;
        while (prev && lcp < len && lcp < prev_len && s[lcp] == prev[lcp]) lcp++;
        /* close the nodes deeper than the common prefix */
        for (size_t d = lcp + 1; d <= prev_len && prev; d++) v->nodes[path[d]].end = (uint32_t)nn;
        if (prev && lcp == len && len == prev_len) { /* same bytes: one more token here */
            v->nodes[path[len]].tok_n++;
        } else {
            for (size_t d = lcp + 1; d <= len; d++) {
                v->nodes[nn] = (pl_gram_node){.byte = (uint8_t)s[d - 1], .depth = (uint32_t)d,
                                              .tok_lo = (uint32_t)i, .tok_n = 0};
                path[d] = (uint32_t)nn++;
            }
            v->nodes[path[len]].tok_lo = (uint32_t)i;
            v->nodes[path[len]].tok_n = 1;
        }
        prev = s;
        prev_len = len;
    }
    for (size_t d = 1; d <= prev_len && prev; d++) v->nodes[path[d]].end = (uint32_t)nn;
    v->nodes[0].end = (uint32_t)nn;
    v->n_nodes = nn;
    pl_free(path);
    *out = v;
    return PL_OK;
}
