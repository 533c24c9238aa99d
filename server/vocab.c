/*
 * server/vocab.c - the text each token adds to a text, for the alternatives of logprobs
 * ("top_logprobs"; a position's own token comes with the text it really added, and /tokenize's
 * token_strs are the tokenizer's pieces, as vLLM's).
 *
 * Decoding one id alone is not it: SentencePiece drops the leading space of a text's first
 * piece, so "▁the" alone decodes to "the". The library promises that decode(P + ids) minus
 * decode(P) is what ids add after a prompt P that decodes to complete text (pl_detok's
 * contract, vLLM's prefix offset), so each string is decode([anchor, id]) minus
 * decode([anchor]) for one anchor token that decodes to plain text. A byte token that is
 * part of a character gives U+FFFD, as the decode of it alone does. The table is built once
 * at start: every logprob then costs a lookup.
 */
#include <stdlib.h>
#include <string.h>

#include "server/srv.h"

/* A token whose decode is a non-empty plain word: the first of "a" (or of "the"). */
static int32_t find_anchor(const pl_tokenizer *t, char **out_text, size_t *out_len) {
    const char *words[] = {"a", "the", "x"};
    for (size_t w = 0; w < sizeof words / sizeof words[0]; w++) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (pl_tokenizer_encode(t, words[w], strlen(words[w]), 0, &ids, &n) != PL_OK) continue;
        int32_t id = n > 0 ? ids[0] : -1;
        pl_free_ids(ids);
        if (id < 0) continue;
        char *text = NULL;
        size_t len = 0;
        if (pl_tokenizer_decode(t, &id, 1, 0, &text, &len) == PL_OK && len > 0) {
            *out_text = text;
            *out_len = len;
            return id;
        }
        pl_free_text(text);
    }
    return -1;
}

bool pl_srv_vocab_init(pl_srv_vocab *v, const pl_engine *e) {
    memset(v, 0, sizeof *v);
    const pl_tokenizer *t = pl_engine_tokenizer(e);
    if (!t) return true;
    char *anchor_text = NULL;
    size_t anchor_len = 0;
    int32_t anchor = find_anchor(t, &anchor_text, &anchor_len);
    int n = pl_tokenizer_vocab_size(t);
    v->text = calloc((size_t)n, sizeof *v->text);
    if (!v->text) {
        pl_free_text(anchor_text);
        return false;
    }
    v->n = n;
    for (int32_t id = 0; id < n; id++) {
        int32_t pair[2] = {anchor, id};
        char *text = NULL;
        size_t len = 0;
        const char *piece = "";
        if (anchor >= 0 && pl_tokenizer_decode(t, pair, 2, 0, &text, &len) == PL_OK &&
            len >= anchor_len && !memcmp(text, anchor_text, anchor_len))
            piece = text + anchor_len;
        v->text[id] = strdup(piece);
        pl_free_text(text);
        if (!v->text[id]) {
            pl_free_text(anchor_text);
            pl_srv_vocab_free(v);
            return false;
        }
    }
    pl_free_text(anchor_text);
    return true;
}

void pl_srv_vocab_free(pl_srv_vocab *v) {
    for (int i = 0; v->text && i < v->n; i++) free(v->text[i]);
    free(v->text);
    memset(v, 0, sizeof *v);
}

const char *pl_srv_vocab_text(const pl_srv_vocab *v, int32_t id) {
    return v->text && id >= 0 && id < v->n ? v->text[id] : "";
}
