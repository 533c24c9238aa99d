/*
 * engine/intake.c - submit and abort, callable from any thread while another steps.
 *
 * Submitting threads do everything that needs no engine state (validation, tokenization,
 * building the request) outside the lock, then take intake.mu only to check the queue bound,
 * register the id and append to the intake queue. The stepping thread drains the queue into
 * the scheduler at the start of each step, so the scheduler itself stays single-threaded.
 */
#include <string.h>

#include "engine/engine_internal.h"
#include "util/alloc.h"
#include "util/timer.h"

pl_status pl_intake_init(pl_intake *in) {
    memset(in, 0, sizeof *in);
    if (pthread_mutex_init(&in->mu, NULL) != 0)
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "engine: cannot create the intake mutex");
    return PL_OK;
}

void pl_intake_deinit(pl_intake *in) {
    for (pl_request *r = in->head, *n; r; r = n) {
        n = r->inbox_next;
        pl_request_free(r);
    }
    pl_free(in->aborts);
    pl_id_map_free(&in->live);
    pthread_mutex_destroy(&in->mu);
}

/* Checks text: valid UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
static pl_status check_utf8(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = p[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!len || i + len > n) goto bad;
        uint32_t cp = len == 1 ? c : c & (0x7Fu >> len);
        for (size_t k = 1; k < len; k++) {
            if ((p[i + k] & 0xC0) != 0x80) goto bad;
            cp = (cp << 6) | (p[i + k] & 0x3Fu);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
            cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            goto bad;
        i += len;
        continue;
    bad:
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "prompt: invalid UTF-8 at byte %zu", i);
    }
    return PL_OK;
}

static pl_status enqueue(pl_engine *e, pl_request *r, pl_request_id *out_id) {
    pl_intake *in = &e->intake;
    pthread_mutex_lock(&in->mu);
    const pl_engine_config *c = &e->cfg;
    if (c->max_waiting > 0 && c->overflow_policy == PL_OVERFLOW_REJECT_NEWEST &&
        (size_t)in->n_waiting_new + in->n_queued >= (size_t)c->max_waiting) {
        pthread_mutex_unlock(&in->mu);
        return pl_fail(PL_ERR_QUEUE_FULL, "submit: %d requests already wait (max_waiting)",
                       c->max_waiting);
    }
    r->id = (pl_request_id)atomic_fetch_add(&e->next_id, 1);
    for (int i = 0; i < r->n_samples; i++) r->samples[i].seq.id = r->id;
    pl_status s = pl_id_map_put(&in->live, r->id, r);
    if (s != PL_OK) {
        pthread_mutex_unlock(&in->mu);
        return s;
    }
    r->t_submit_ns = pl_now_ns();
    if (in->tail) in->tail->inbox_next = r;
    else in->head = r;
    in->tail = r;
    in->n_queued++;
    pthread_mutex_unlock(&in->mu);
    if (out_id) *out_id = r->id;
    return PL_OK;
}

static pl_status submit_ids(pl_engine *e, const int32_t *ids, size_t n_ids,
                            const pl_sampling_params *params, pl_request_id *out_id) {
    pl_sampling_params def;
    if (!params) {
        pl_sampling_params_default(&def);
        params = &def;
    }
    PL_TRY(pl_sampling_params_validate(params, e->vocab));
    PL_TRY(pl_sched_check_admissible(e->sched, n_ids, (size_t)params->max_tokens));
    if ((size_t)params->n > (size_t)e->cfg.max_num_seqs)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "sampling.n = %d: more than max_num_seqs (%d)",
                       params->n, e->cfg.max_num_seqs);
    pl_request *r;
    PL_TRY(pl_request_create(e, ids, n_ids, params, &r));
    pl_status s = enqueue(e, r, out_id);
    if (s != PL_OK) pl_request_free(r);
    return s;
}

pl_status pl_engine_submit_tokens(pl_engine *e, const int32_t *ids, size_t n_ids,
                                  const pl_sampling_params *params, pl_request_id *out_id) {
    if (!e) return pl_fail(PL_ERR_INVALID_ARGUMENT, "submit: engine is NULL");
    if (!ids || n_ids == 0) return pl_fail(PL_ERR_INVALID_ARGUMENT, "submit: no prompt token ids");
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] < 0 || ids[i] >= e->vocab)
            return pl_fail(PL_ERR_INVALID_ARGUMENT,
                           "submit: prompt id %d at index %zu is outside the vocabulary [0, %d)",
                           (int)ids[i], i, e->vocab);
    return submit_ids(e, ids, n_ids, params, out_id);
}

pl_status pl_engine_submit_request(pl_engine *e, const char *prompt,
                                   const pl_sampling_params *params, pl_request_id *out_id) {
    if (!e) return pl_fail(PL_ERR_INVALID_ARGUMENT, "submit: engine is NULL");
    if (!prompt) return pl_fail(PL_ERR_INVALID_ARGUMENT, "submit: prompt is NULL");
    if (!e->tok)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "submit: no tokenizer is loaded (tokenizer_path is NULL and none was "
                       "found beside the model); submit token ids instead");
    size_t len = strlen(prompt);
    if (len == 0) return pl_fail(PL_ERR_INVALID_ARGUMENT, "submit: prompt is empty");
    PL_TRY(check_utf8(prompt, len));
    int32_t *ids;
    size_t n;
    PL_TRY(pl_tok_encode(e->tok, prompt, len, e->bos_id >= 0, &ids, &n));
    pl_status s = PL_OK;
    for (size_t i = 0; i < n && s == PL_OK; i++)
        if (ids[i] < 0 || ids[i] >= e->vocab)
            s = pl_fail(PL_ERR_INVALID_ARGUMENT,
                        "submit: the tokenizer produced id %d, outside the model's vocabulary "
                        "(%d)", (int)ids[i], e->vocab);
    if (s == PL_OK) s = submit_ids(e, ids, n, params, out_id);
    pl_free(ids);
    return s;
}

pl_status pl_engine_abort(pl_engine *e, pl_request_id id) {
    if (!e) return pl_fail(PL_ERR_INVALID_ARGUMENT, "abort: engine is NULL");
    pl_intake *in = &e->intake;
    pthread_mutex_lock(&in->mu);
    pl_status s = PL_OK;
    if (id == 0 || !pl_id_map_get(&in->live, id)) {
        s = pl_fail(PL_ERR_NOT_FOUND, "abort: no unfinished request with id %llu",
                    (unsigned long long)id);
    } else {
        if (in->n_aborts == in->cap_aborts) {
            size_t cap = in->cap_aborts ? 2 * in->cap_aborts : 16;
            uint64_t *g = pl_reallocarray(in->aborts, cap, sizeof *g);
            if (!g) s = pl_fail(PL_ERR_OUT_OF_MEMORY, "abort: queue");
            else in->aborts = g, in->cap_aborts = cap;
        }
        if (s == PL_OK) in->aborts[in->n_aborts++] = id;
    }
    pthread_mutex_unlock(&in->mu);
    return s;
}
