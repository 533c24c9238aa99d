/*
 * engine/request.c - building and freeing a request record (submit-side, any thread), and
 * freeing the lists of them the stepping thread keeps.
 *
 * Everything the caller passed is copied: token ids (into each sample's sequence), sampling
 * parameters, stop ids and strings (one block). A failed create frees what it made.
 */
#include <string.h>

#include "engine/engine_internal.h"
#include "util/alloc.h"

void pl_request_free(pl_request *r) {
    if (!r) return;
    pl_constrain_free_request(r);
    if (r->samples) {
        for (int i = 0; i < r->n_samples; i++) {
            pl_sample *s = &r->samples[i];
            pl_seq_deinit(&s->seq);
            pl_detok_free(s->detok);
            pl_free(s->text);
            if (s->lp) {
                pl_logprob_list_free(&s->lp->output);
                pl_logprob_list_free(&s->lp->prompt);
                pl_free(s->lp->logits);
                pl_free(s->lp);
            }
        }
        pl_free(r->samples);
    }
    pl_free(r->stop_copy);
    pl_free(r);
}

void pl_request_free_all(pl_request *r, bool graveyard) {
    while (r) {
        pl_request *n = graveyard ? r->inbox_next : r->next;
        pl_request_free(r);
        r = n;
    }
}

void pl_engine_free_graveyard(pl_engine *e) {
    pl_request_free_all(e->graveyard, true);
    e->graveyard = NULL;
}

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/* Copies p's lists (stop ids and strings, logit bias) into one block that r->params points
 * into. */
static pl_status copy_stops(pl_request *r, const pl_sampling_params *p) {
    size_t bytes = p->n_stop * sizeof(char *) + p->n_logit_bias * sizeof(pl_logit_bias) +
                   p->n_stop_ids * sizeof(int32_t);
    for (size_t i = 0; i < p->n_stop; i++) bytes += strlen(p->stop[i]) + 1;
    r->params.stop_ids = NULL;
    r->params.stop = NULL;
    r->params.logit_bias = NULL;
    if (bytes == 0) return PL_OK;
    /* strictest alignment first: pointers, then the bias entries, ids, text */
    char *block = pl_malloc(bytes);
    if (!block) return pl_fail(PL_ERR_OUT_OF_MEMORY, "submit: stop ids and strings");
    r->stop_copy = block;
    const char **stops = (const char **)block;
    pl_logit_bias *bias = (pl_logit_bias *)(block + p->n_stop * sizeof(char *));
    int32_t *ids = (int32_t *)(bias + p->n_logit_bias);
    char *text = (char *)(ids + p->n_stop_ids);
    if (p->n_logit_bias) memcpy(bias, p->logit_bias, p->n_logit_bias * sizeof *bias);
    if (p->n_stop_ids) memcpy(ids, p->stop_ids, p->n_stop_ids * sizeof *ids);
    for (size_t i = 0; i < p->n_stop; i++) {
        size_t len = strlen(p->stop[i]);
        memcpy(text, p->stop[i], len + 1);
        stops[i] = text;
        text += len + 1;
        if (len > r->max_stop_len) r->max_stop_len = len;
    }
    r->params.stop_ids = p->n_stop_ids ? ids : NULL;
    r->params.stop = p->n_stop ? stops : NULL;
    r->params.logit_bias = p->n_logit_bias ? bias : NULL;
    return PL_OK;
}

/* p is the library's full, checked copy (pl_sampling_params_take). */
/* Whether the output continues a text: a prompt of special tokens alone (BOS: an empty
 * prompt) decodes to nothing, so the output starts the text, and a SentencePiece model drops
 * the leading space of its first piece as it does at any text's start (llama2.c prints a story
 * generated from BOS so). */
static bool continues_text(const pl_tokenizer *t, const int32_t *ids, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!pl_tok_is_special(t, ids[i])) return true;
    return false;
}

pl_status pl_request_create(pl_engine *e, const int32_t *ids, size_t n_ids,
                            const pl_sampling_params *p, pl_request **out) {
    pl_request *r = pl_calloc(1, sizeof *r);
    if (!r) return pl_fail(PL_ERR_OUT_OF_MEMORY, "submit: request record");
    r->params = *p;
    r->params.storage = NULL;
    if (copy_stops(r, p) != PL_OK) {
        pl_free(r);
        return PL_ERR_OUT_OF_MEMORY;
    }
    r->n_samples = p->n;
    r->samples = pl_calloc((size_t)p->n, sizeof(pl_sample));
    if (!r->samples) goto oom;
    r->forked = p->n == 1;
    uint64_t base = p->has_seed ? p->seed : mix(atomic_fetch_add(&e->next_id, 0) ^ 0x5eedull) ^
                                                 (uint64_t)(uintptr_t)r;
    for (int i = 0; i < p->n; i++) {
        pl_sample *s = &r->samples[i];
        s->req = r;
        s->index = i;
        s->stop_string = -1;
        /* the seed fixes sample i's stream whatever else runs: no shared generator */
        pl_rng_seed(&s->rng, mix(base + 0x9e3779b97f4a7c15ull * (uint64_t)i));
        pl_status st = pl_seq_init(&s->seq, 0, ids, (int)n_ids, p->max_tokens, p->priority);
        if (st != PL_OK) {
            pl_request_free(r);
            return st;
        }
        s->seq.user = s;
        /* text exists from the start (empty without a tokenizer): pl_engine_run moves it
         * into the completion, with nothing to allocate once the request has finished */
        s->text = pl_calloc(1, 1);
        if (!s->text) goto oom;
        s->text_cap = 1;
        if (e->tok) {
            unsigned after = continues_text(e->tok, ids, n_ids) ? PL_TOK_AFTER_PROMPT : 0;
            st = pl_detok_create(e->tok, after | (p->skip_special_tokens ? PL_TOK_SKIP_SPECIAL
                                                                         : 0u), &s->detok);
            if (st != PL_OK) {
                pl_request_free(r);
                return st;
            }
        }
    }
    r->samples[0].seq.n_forks = p->n - 1;
    /* cached prompt tokens would have no logits to take their logprobs from */
    r->samples[0].seq.skip_prefix_cache = p->prompt_logprobs >= 0 || p->prompt_logits >= 0;
    for (int i = 0; i < p->n; i++) {
        bool prompt = i == 0 && p->prompt_logprobs >= 0;
        bool logits = i == 0 && p->prompt_logits >= 0;
        if (p->logprobs < 0 && !prompt && !logits) continue;
        pl_sample_logprobs *lp = r->samples[i].lp = pl_calloc(1, sizeof *lp);
        if (!lp) goto oom;
        lp->output = (pl_logprob_list){.on = p->logprobs >= 0, .k = p->logprobs};
        lp->prompt = (pl_logprob_list){.on = prompt, .k = p->prompt_logprobs};
        /* every prompt position's entry, reserved now: a step appends without allocating */
        if (prompt && n_ids > 1 && pl_logprob_list_reserve(&lp->prompt, n_ids - 1) != PL_OK)
            goto oom;
        lp->logits_from = p->prompt_logits;
        if (logits && (size_t)p->prompt_logits < n_ids) {
            size_t rows = n_ids - (size_t)p->prompt_logits;
            if (rows > SIZE_MAX / sizeof(float) / (size_t)e->vocab) goto oom;
            lp->logits = pl_malloc(rows * (size_t)e->vocab * sizeof(float));
            if (!lp->logits) {
                pl_request_free(r);
                return pl_fail(PL_ERR_OUT_OF_MEMORY, "submit: prompt logits of %zu positions x "
                               "%d tokens (%zu MiB): ask for fewer (sampling.prompt_logits)",
                               rows, e->vocab, (rows * (size_t)e->vocab * 4) >> 20);
            }
        }
    }
    pl_status cs = pl_constrain_request(e, r);
    if (cs != PL_OK) {
        pl_request_free(r);
        return cs;
    }
    r->n_unreported = p->n;
    *out = r;
    return PL_OK;
oom:
    pl_request_free(r);
    return pl_fail(PL_ERR_OUT_OF_MEMORY, "submit: request record");
}
