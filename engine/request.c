/*
 * engine/request.c - building and freeing a request record (submit-side, any thread).
 *
 * Everything the caller passed is copied: token ids (into each sample's sequence), sampling
 * parameters, stop strings. A failed create frees what it made.
 */
#include <string.h>

#include "engine/engine_internal.h"
#include "util/alloc.h"

void pl_request_free(pl_request *r) {
    if (!r) return;
    if (r->samples) {
        for (int i = 0; i < r->n_samples; i++) {
            pl_sample *s = &r->samples[i];
            pl_seq_deinit(&s->seq);
            pl_detok_free(s->detok);
            pl_free(s->text);
        }
        pl_free(r->samples);
    }
    for (int i = 0; i < PL_MAX_STOP_STRINGS; i++) pl_free(r->stop_copies[i]);
    pl_free(r);
}

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

pl_status pl_request_create(pl_engine *e, const int32_t *ids, size_t n_ids,
                            const pl_sampling_params *p, pl_request **out) {
    pl_request *r = pl_calloc(1, sizeof *r);
    if (!r) return pl_fail(PL_ERR_OUT_OF_MEMORY, "submit: request record");
    r->params = *p;
    for (int i = 0; i < p->n_stop; i++) {
        r->stop_copies[i] = pl_strdup(p->stop[i]);
        if (!r->stop_copies[i]) goto oom;
        r->params.stop[i] = r->stop_copies[i];
        size_t len = strlen(p->stop[i]);
        if (len > r->max_stop_len) r->max_stop_len = len;
    }
    for (int i = p->n_stop; i < PL_MAX_STOP_STRINGS; i++) r->params.stop[i] = NULL;
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
            st = pl_detok_create(e->tok, PL_TOK_AFTER_PROMPT | PL_TOK_SKIP_SPECIAL, &s->detok);
            if (st != PL_OK) {
                pl_request_free(r);
                return st;
            }
        }
    }
    r->samples[0].seq.n_forks = p->n - 1;
    r->n_unreported = p->n;
    *out = r;
    return PL_OK;
oom:
    pl_request_free(r);
    return pl_fail(PL_ERR_OUT_OF_MEMORY, "submit: request record");
}
