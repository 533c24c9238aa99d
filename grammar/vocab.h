/*
 * grammar/vocab.h - the token trie behind pl_gram_vocab (vocab.c), read by the mask's walk
 * (mask.c). Internal to grammar/.
 */
#ifndef PL_GRAMMAR_VOCAB_H
#define PL_GRAMMAR_VOCAB_H

#include "grammar/grammar.h"

/* One trie node: the byte that leads to it; tokens whose bytes end here are
 * sorted[tok_lo .. tok_lo + tok_n); the nodes of its subtree are (its index, end). */
typedef struct pl_gram_node {
    uint32_t end;
    uint32_t depth;
    uint32_t tok_lo, tok_n;
    uint8_t byte;
} pl_gram_node;

struct pl_gram_vocab {
    int n_vocab;
    char *bytes;           /* every token's bytes */
    uint32_t *off;         /* (n_vocab + 1) token id's bytes: bytes[off[id] .. off[id + 1]) */
    int32_t *sorted;       /* (n_sorted) ids with bytes, by their bytes */
    size_t n_sorted;
    pl_gram_node *nodes;   /* (n_nodes) preorder; nodes[0] is the root */
    size_t n_nodes;
    size_t max_len;        /* longest token, bytes */
};

#endif
