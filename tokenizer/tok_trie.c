/*
 * tokenizer/tok_trie.c - see tok_trie.h. Children are a sibling list: added-token sets are
 * small (hundreds), and most text positions never reach the trie at all.
 */
#include "tokenizer/tok_trie.h"

#include "util/alloc.h"

static pl_status new_node(pl_tok_trie *t, uint8_t byte, int32_t *out) {
    if (t->n_nodes == t->cap)
        PL_TRY(pl_grow_array((void **)&t->nodes, &t->cap, t->n_nodes + 1, sizeof *t->nodes,
                             "tokenizer: string trie"));
    if (t->n_nodes >= INT32_MAX) return pl_fail(PL_ERR_OUT_OF_MEMORY, "tokenizer: string trie");
    pl_tok_trie_node *nd = &t->nodes[t->n_nodes];
    nd->first_child = nd->next_sibling = nd->value = -1;
    nd->byte = byte;
    *out = (int32_t)t->n_nodes++;
    return PL_OK;
}

static int32_t child(const pl_tok_trie *t, int32_t node, uint8_t byte) {
    for (int32_t c = t->nodes[node].first_child; c >= 0; c = t->nodes[c].next_sibling)
        if (t->nodes[c].byte == byte) return c;
    return -1;
}

pl_status pl_tok_trie_add(pl_tok_trie *t, const char *s, size_t n, int32_t value) {
    int32_t node;
    if (t->n_nodes == 0) PL_TRY(new_node(t, 0, &node));
    node = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t b = (uint8_t)s[i];
        int32_t c = child(t, node, b);
        if (c < 0) {
            PL_TRY(new_node(t, b, &c)); /* may move t->nodes */
            t->nodes[c].next_sibling = t->nodes[node].first_child;
            t->nodes[node].first_child = c;
        }
        node = c;
    }
    t->nodes[node].value = value;
    t->first[(uint8_t)s[0] >> 3] |= (uint8_t)(1u << ((uint8_t)s[0] & 7));
    return PL_OK;
}

void pl_tok_trie_free(pl_tok_trie *t) {
    pl_free(t->nodes);
    *t = (pl_tok_trie){0};
}

size_t pl_tok_trie_longest(const pl_tok_trie *t, const char *text, size_t len, size_t at,
                           int32_t *out_value) {
    if (t->n_nodes == 0) return 0;
    size_t best = 0;
    int32_t node = 0;
    for (size_t i = at; i < len; i++) {
        node = child(t, node, (uint8_t)text[i]);
        if (node < 0) break;
        if (t->nodes[node].value >= 0) {
            best = i + 1 - at;
            *out_value = t->nodes[node].value;
        }
    }
    return best;
}

bool pl_tok_trie_find(const pl_tok_trie *t, const char *text, size_t len, size_t from,
                      size_t *out_at, size_t *out_len, int32_t *out_value) {
    if (t->n_nodes == 0) return false;
    for (size_t i = from; i < len; i++) {
        uint8_t b = (uint8_t)text[i];
        if (!(t->first[b >> 3] & (1u << (b & 7)))) continue;
        size_t m = pl_tok_trie_longest(t, text, len, i, out_value);
        if (m > 0) {
            *out_at = i;
            *out_len = m;
            return true;
        }
    }
    return false;
}
