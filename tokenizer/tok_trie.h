/*
 * tokenizer/tok_trie.h - a byte trie for finding fixed strings in text: the added tokens of a
 * tokenizer.json and the control pieces of a SentencePiece model, matched leftmost-longest
 * (the earliest position where any string starts, and there the longest one), which is what
 * Hugging Face's Aho-Corasick with MatchKind::LeftmostLongest gives.
 *
 * Cost: positions whose byte starts no string are skipped through a 256-bit table; at the
 * others the walk is as long as the longest string that could match there, so a text of n
 * bytes costs O(n) plus O(n * longest string) in the worst case (strings are bounded by the
 * loaders).
 */
#ifndef PL_TOKENIZER_TOK_TRIE_H
#define PL_TOKENIZER_TOK_TRIE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/status.h"

typedef struct pl_tok_trie_node {
    int32_t first_child, next_sibling; /* node indexes, -1 for none */
    int32_t value;                     /* >= 0 where a string ends here, else -1 */
    uint8_t byte;
} pl_tok_trie_node;

typedef struct pl_tok_trie {
    pl_tok_trie_node *nodes; /* (n_nodes, cap); nodes[0] is the root once anything is added */
    size_t n_nodes, cap;
    uint8_t first[32];       /* bit b: some string starts with byte b */
} pl_tok_trie;

/* Adds s[0..n) (n >= 1) with value >= 0; a string added twice keeps the last value.
 * PL_ERR_OUT_OF_MEMORY. A zeroed struct is an empty trie. */
pl_status pl_tok_trie_add(pl_tok_trie *t, const char *s, size_t n, int32_t value);
void pl_tok_trie_free(pl_tok_trie *t);

/* The longest string that starts at text[at] (and ends by text[len]): its length, with its
 * value in *out_value; 0 when none. */
size_t pl_tok_trie_longest(const pl_tok_trie *t, const char *text, size_t len, size_t at,
                           int32_t *out_value);

/* The leftmost-longest match starting at or after from: true with its start, length and
 * value; false when there is none. */
bool pl_tok_trie_find(const pl_tok_trie *t, const char *text, size_t len, size_t from,
                      size_t *out_at, size_t *out_len, int32_t *out_value);

#endif
