/*
 * engine/logprobs.c - log-probabilities of tokens, from the model's raw distribution (the
 * log-softmax of the logits before penalties, temperature and the sampling filters, as vLLM
 * returns by default), and the growing lists a sample keeps them in.
 *
 * Cost: one pass for the maximum, one of exp for the normaliser, one for the rank and one of
 * a k-entry heap for the alternatives: a few passes over the vocabulary per token, paid only
 * by requests that ask.
 */
#include <math.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "util/alloc.h"

/* "a is worse than b": less likely, ties to the higher id (the top list prefers low ids). */
static bool worse(const float *x, int32_t a, int32_t b) {
    return x[a] < x[b] || (x[a] == x[b] && a > b);
}

static void sift_down(const float *x, int32_t *h, int n, int j) {
    for (;;) {
        int c = 2 * j + 1;
        if (c >= n) return;
        if (c + 1 < n && worse(x, h[c + 1], h[c])) c++;
        if (!worse(x, h[c], h[j])) return;
        int32_t t = h[c];
        h[c] = h[j];
        h[j] = t;
        j = c;
    }
}

void pl_logprobs_compute(const float *raw, int vocab, int32_t token, int k,
                         pl_token_logprobs *out, pl_logprob *tops) {
    float mx = -INFINITY;
    for (int i = 0; i < vocab; i++) mx = raw[i] > mx ? raw[i] : mx;
    double sum = 0;
    for (int i = 0; i < vocab; i++) sum += (double)expf(raw[i] - mx);
    double lse = (double)mx + log(sum);
    int rank = 1;
    for (int i = 0; i < vocab; i++) rank += raw[i] > raw[token];
    *out = (pl_token_logprobs){.token = token, .logprob = (float)((double)raw[token] - lse),
                               .rank = rank};
    if (k > vocab) k = vocab;
    if (k <= 0) return;
    /* the k most likely by a min-heap (its root is the worst kept), then sorted */
    int32_t heap[PL_MAX_LOGPROBS];
    for (int i = 0; i < k; i++) heap[i] = i;
    for (int j = k / 2 - 1; j >= 0; j--) sift_down(raw, heap, k, j);
    for (int i = k; i < vocab; i++)
        if (worse(raw, heap[0], i)) {
            heap[0] = i;
            sift_down(raw, heap, k, 0);
        }
    for (int n = k; n > 0; n--) { /* pop the worst to the back: best first */
        int32_t w = heap[0];
        heap[0] = heap[n - 1];
        sift_down(raw, heap, n - 1, 0);
        tops[n - 1] = (pl_logprob){.token = w, .logprob = (float)((double)raw[w] - lse)};
    }
    out->n_top = k;
}

pl_status pl_logprob_list_reserve(pl_logprob_list *l, size_t n) {
    if (n <= l->cap) return PL_OK;
    size_t cap = l->cap ? l->cap : 16;
    while (cap < n) cap *= 2;
    pl_token_logprobs *e = pl_reallocarray(l->entries, cap, sizeof *e);
    if (!e) return pl_fail(PL_ERR_OUT_OF_MEMORY, "logprobs of %zu tokens", n);
    l->entries = e;
    size_t *at = pl_reallocarray(l->text_at, cap, sizeof *at);
    if (!at) return pl_fail(PL_ERR_OUT_OF_MEMORY, "logprobs of %zu tokens", n);
    l->text_at = at;
    if (l->k > 0) {
        pl_logprob *t = pl_reallocarray(l->tops, cap * (size_t)l->k, sizeof *t);
        if (!t) return pl_fail(PL_ERR_OUT_OF_MEMORY, "logprobs of %zu tokens", n);
        l->tops = t;
        for (size_t i = 0; i < l->n; i++) /* the tops moved: point at the new copy */
            if (e[i].n_top) e[i].top = t + i * (size_t)l->k;
    }
    l->cap = cap;
    return PL_OK;
}

pl_status pl_logprob_list_push(pl_logprob_list *l, const pl_token_logprobs *e,
                               const pl_logprob *tops) {
    PL_TRY(pl_logprob_list_reserve(l, l->n + 1));
    pl_token_logprobs *d = &l->entries[l->n];
    *d = *e;
    d->top = NULL;
    d->text = NULL;
    if (e->n_top > 0) {
        pl_logprob *t = l->tops + l->n * (size_t)l->k;
        memcpy(t, tops, (size_t)e->n_top * sizeof *t);
        d->top = t;
    }
    l->n++;
    return PL_OK;
}

void pl_logprob_list_free(pl_logprob_list *l) {
    pl_free(l->entries);
    pl_free(l->tops);
    pl_free(l->texts);
    pl_free(l->text_at);
    l->entries = NULL;
    l->tops = NULL;
    l->texts = NULL;
    l->text_at = NULL;
    l->n = l->cap = l->n_text = l->texts_len = l->texts_cap = 0;
}

/* Room for more bytes of text; the entries' pointers follow the buffer when it moves. */
static pl_status texts_reserve(pl_logprob_list *l, size_t more) {
    if (l->texts_len + more <= l->texts_cap) return PL_OK;
    size_t cap = l->texts_cap ? l->texts_cap : 256;
    while (cap < l->texts_len + more) cap *= 2;
    char *t = pl_reallocarray(l->texts, cap, 1);
    if (!t) return pl_fail(PL_ERR_OUT_OF_MEMORY, "logprobs: token texts of %zu bytes", cap);
    l->texts = t;
    l->texts_cap = cap;
    for (size_t i = 0; i < l->n_text; i++) l->entries[i].text = t + l->text_at[i];
    return PL_OK;
}

pl_status pl_logprob_list_set_text(pl_logprob_list *l, size_t i, const char *p, size_t len) {
    if (i >= l->n || i < l->n_text) return PL_OK;
    PL_TRY(texts_reserve(l, len + 1 + (i - l->n_text)));
    while (l->n_text < i) { /* entries a failed step left without text: "" */
        l->texts[l->texts_len] = '\0';
        l->text_at[l->n_text] = l->texts_len++;
        l->entries[l->n_text].text = l->texts + l->text_at[l->n_text];
        l->n_text++;
    }
    char *slot = l->texts + l->texts_len;
    if (len) memcpy(slot, p, len);
    slot[len] = '\0';
    l->text_at[l->n_text] = l->texts_len;
    l->entries[l->n_text++].text = slot;
    l->texts_len += len + 1;
    return PL_OK;
}

pl_status pl_logprob_list_extend_text(pl_logprob_list *l, const char *p, size_t len) {
    if (l->n_text == 0 || len == 0) return PL_OK;
    PL_TRY(texts_reserve(l, len));
    memcpy(l->texts + l->texts_len - 1, p, len); /* over the last slot's NUL */
    l->texts_len += len;
    l->texts[l->texts_len - 1] = '\0';
    return PL_OK;
}

void pl_logprob_list_cut_text(pl_logprob_list *l, size_t keep) {
    size_t at = 0;
    for (size_t i = 0; i < l->n_text; i++) {
        char *t = l->texts + l->text_at[i];
        size_t len = strlen(t);
        if (at + len > keep) t[keep > at ? keep - at : 0] = '\0';
        at += len;
    }
}

pl_status pl_logprob_list_prompt_text(pl_logprob_list *l, const pl_tokenizer *tok,
                                      const int32_t *prompt, size_t n_prompt) {
    if (!tok || l->n_text > 0 || l->n == 0 || n_prompt < 2) return PL_OK;
    size_t *off = pl_malloc((n_prompt + 1) * sizeof *off);
    if (!off) return pl_fail(PL_ERR_OUT_OF_MEMORY, "prompt logprobs: token offsets");
    char *text = NULL;
    pl_status s = pl_tok_decode_offsets(tok, prompt, n_prompt, PL_TOK_SKIP_SPECIAL, &text, off);
    for (size_t i = 0; s == PL_OK && i < l->n && i + 1 < n_prompt; i++)
        s = pl_logprob_list_set_text(l, i, text + off[i + 1], off[i + 2] - off[i + 1]);
    pl_free(text);
    pl_free(off);
    return s;
}
