/*
 * engine/constrain.c - constrained output: compiling a request's json_schema / grammar /
 * regex / choice (grammar/), the engine's cache of compiled grammars, and the per-sample
 * matcher that masks the logits before each draw and follows each drawn token.
 *
 * Where it sits in a step: pl_draw_tokens -> sample_one -> pl_constrain_mask (the row's
 * disallowed tokens to -inf, in one place: pl_sampler_mask_row) -> draw -> pl_constrain_accept.
 * The matcher lives in the sample, so nothing the scheduler does touches it: chunked
 * prefill and prefix-cache hits only concern the prompt, a preempted sequence keeps its
 * output tokens (and so its state), an abort frees it with the request. Samples of n > 1 are
 * forked before their first token, so each starts from the grammar's first state.
 *
 * Compiling happens in the submitting thread. The engine keeps the grammars it compiled in a
 * small cache keyed by the constraint's kind and text (PL_GRAMMAR_CACHE entries, least
 * recently used dropped first), so a server answering the same schema again compiles once;
 * the per-state mask cache lives in each compiled grammar and fills as requests use it.
 */
#include <stdatomic.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "grammar/grammar.h"
#include "util/alloc.h"
#include "util/log.h"

#define PL_GRAMMAR_CACHE 32

struct pl_grammar {
    atomic_int refs;
    pl_gram *g;
    char *key;          /* kind letter + the constraint's text (choices NUL-separated) */
    size_t key_len;
    uint64_t hash;
    uint64_t last_use;
};

static void grammar_unref(pl_grammar *g) {
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1) return;
    pl_gram_free(g->g);
    pl_free(g->key);
    pl_free(g);
}

void pl_grammar_free(pl_grammar *g) { grammar_unref(g); }

pl_status pl_constrain_init(pl_constrain_state *c) {
    memset(c, 0, sizeof *c);
    if (pthread_mutex_init(&c->mu, NULL)) return pl_fail(PL_ERR_OUT_OF_MEMORY, "engine: grammar cache lock");
    c->mu_ok = true;
    return PL_OK;
}

void pl_constrain_deinit(pl_constrain_state *c) {
    for (size_t i = 0; i < c->n; i++) grammar_unref(c->cache[i]);
    pl_gram_vocab_free(c->vocab);
    pl_free(c->bits);
    if (c->mu_ok) pthread_mutex_destroy(&c->mu);
    memset(c, 0, sizeof *c);
}

/* The constraint p asks for: its kind letter ('j' json_schema, 'g' grammar, 'r' regex, 'c'
 * choice; 0 none) and the key text. */
static pl_status constraint_key(const pl_sampling_params *p, char *kind, char **key, size_t *len) {
    int n = (p->json_schema != NULL) + (p->grammar != NULL) + (p->regex != NULL) + (p->n_choice > 0);
    *kind = 0;
    *key = NULL;
    *len = 0;
    if (n == 0) return PL_OK;
    if (n > 1)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "sampling: give one of json_schema, grammar, regex "
                       "and choice, not %d of them", n);
    const char *text = p->json_schema ? p->json_schema : p->grammar ? p->grammar : p->regex;
    *kind = p->json_schema ? 'j' : p->grammar ? 'g' : p->regex ? 'r' : 'c';
    size_t total = 1 + (text ? strlen(text) : 0);
    for (size_t i = 0; i < p->n_choice; i++) total += strlen(p->choice[i]) + 1;
    char *k = pl_malloc(total + 1);
    if (!k) return pl_fail(PL_ERR_OUT_OF_MEMORY, "sampling: constraint");
    k[0] = *kind;
    size_t at = 1;
    if (text) {
        memcpy(k + 1, text, total - 1);
        at = total;
    }
    for (size_t i = 0; i < p->n_choice; i++) {
        size_t l = strlen(p->choice[i]) + 1;
        memcpy(k + at, p->choice[i], l);
        at += l;
    }
    k[at] = '\0';
    *key = k;
    *len = at;
    return PL_OK;
}

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    return h;
}

/* The vocabulary as grammar input, built at the first constrained request. */
static pl_status vocab_of(pl_engine *e, const pl_gram_vocab **out) {
    pl_constrain_state *c = &e->constrain;
    pthread_mutex_lock(&c->mu);
    pl_status st = PL_OK;
    if (!c->vocab) st = pl_gram_vocab_create(e->tok, &c->vocab);
    *out = c->vocab;
    pthread_mutex_unlock(&c->mu);
    return st;
}

static pl_status compile_text(pl_engine *e, char kind, const pl_sampling_params *p, pl_gram **out) {
    char *gbnf = NULL;
    const char *field = kind == 'j' ? "json_schema" : kind == 'g' ? "grammar"
                        : kind == 'r' ? "regex" : "choice";
    pl_status st;
    if (kind == 'j') st = pl_gram_schema_to_gbnf(p->json_schema, strlen(p->json_schema), NULL, &gbnf);
    else if (kind == 'r') st = pl_gram_regex_to_gbnf(p->regex, strlen(p->regex), NULL, &gbnf);
    else if (kind == 'c') st = pl_gram_choice_to_gbnf(p->choice, p->n_choice, &gbnf);
    else st = PL_OK;
    if (st == PL_OK) {
        const char *text = kind == 'g' ? p->grammar : gbnf;
        st = pl_gram_parse(text, strlen(text), e->tok, out);
    }
    pl_free(gbnf);
    if (st != PL_OK) return pl_fail_prefix(st, "sampling.%s", field);
    /* the first state must expand within the limits: found now rather than at the first draw */
    pl_gram_matcher m;
    st = pl_gram_matcher_init(&m, *out);
    if (st == PL_OK) pl_gram_matcher_deinit(&m);
    else {
        pl_gram_free(*out);
        *out = NULL;
        return pl_fail_prefix(st, "sampling.%s", field);
    }
    return PL_OK;
}

/* The compiled grammar for p (a new reference), from the cache or compiled now; *out NULL
 * when p has no constraint. */
static pl_status grammar_for(pl_engine *e, const pl_sampling_params *p, pl_grammar **out) {
    *out = NULL;
    char kind;
    char *key;
    size_t key_len;
    PL_TRY(constraint_key(p, &kind, &key, &key_len));
    if (!kind) return PL_OK;
    if (!e->tok) {
        pl_free(key);
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "sampling: a constrained output (json_schema, "
                       "grammar, regex, choice) needs a tokenizer; the engine has none");
    }
    const pl_gram_vocab *v;
    pl_status st = vocab_of(e, &v);
    if (st != PL_OK) {
        pl_free(key);
        return st;
    }
    pl_constrain_state *c = &e->constrain;
    uint64_t h = hash_bytes(key, key_len);
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->n; i++) {
        pl_grammar *g = c->cache[i];
        if (g->hash == h && g->key_len == key_len && !memcmp(g->key, key, key_len)) {
            atomic_fetch_add(&g->refs, 1);
            g->last_use = ++c->clock;
            pthread_mutex_unlock(&c->mu);
            pl_free(key);
            *out = g;
            return PL_OK;
        }
    }
    pthread_mutex_unlock(&c->mu);
    pl_grammar *g = pl_calloc(1, sizeof *g);
    if (!g) {
        pl_free(key);
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "sampling: grammar");
    }
    st = compile_text(e, kind, p, &g->g);
    if (st != PL_OK) {
        pl_free(key);
        pl_free(g);
        return st;
    }
    atomic_init(&g->refs, 2); /* the caller's and the cache's */
    g->key = key;
    g->key_len = key_len;
    g->hash = h;
    pthread_mutex_lock(&c->mu);
    g->last_use = ++c->clock;
    pl_grammar *evict = NULL;
    if (c->n == PL_GRAMMAR_CACHE) {
        size_t old = 0;
        for (size_t i = 1; i < c->n; i++)
            if (c->cache[i]->last_use < c->cache[old]->last_use) old = i;
        evict = c->cache[old];
        c->cache[old] = c->cache[--c->n];
    }
    c->cache[c->n++] = g;
    pthread_mutex_unlock(&c->mu);
    grammar_unref(evict);
    *out = g;
    return PL_OK;
}

pl_status pl_grammar_compile(pl_engine *e, const pl_sampling_params *p, pl_grammar **out) {
    if (!e || !p || !out) return pl_fail(PL_ERR_INVALID_ARGUMENT, "grammar_compile: NULL argument");
    pl_sampling_params full;
    PL_TRY(pl_sampling_params_take(p, e->vocab, &full));
    pl_grammar *g;
    PL_TRY(grammar_for(e, &full, &g));
    if (!g) return pl_fail(PL_ERR_INVALID_ARGUMENT, "grammar_compile: the parameters give no "
                           "json_schema, grammar, regex or choice");
    *out = g;
    return PL_OK;
}

pl_status pl_json_schema_to_grammar(const char *schema, const char *rule_prefix, char **out_gbnf) {
    if (!schema || !out_gbnf) return pl_fail(PL_ERR_INVALID_ARGUMENT, "json_schema_to_grammar: NULL argument");
    return pl_gram_schema_to_gbnf(schema, strlen(schema), rule_prefix, out_gbnf);
}

/* ---- per request and sample ------------------------------------------------------------ */

pl_status pl_constrain_request(pl_engine *e, pl_request *r) {
    PL_TRY(grammar_for(e, &r->params, &r->grammar));
    if (!r->grammar) return PL_OK;
    for (int i = 0; i < r->n_samples; i++) {
        pl_sample *s = &r->samples[i];
        s->gm = pl_calloc(1, sizeof *s->gm);
        if (!s->gm) return pl_fail(PL_ERR_OUT_OF_MEMORY, "submit: grammar state");
        pl_status st = pl_gram_matcher_init(s->gm, r->grammar->g);
        if (st != PL_OK) {
            pl_free(s->gm);
            s->gm = NULL;
            return st;
        }
    }
    return PL_OK;
}

void pl_constrain_free_request(pl_request *r) {
    for (int i = 0; r->samples && i < r->n_samples; i++) {
        if (!r->samples[i].gm) continue;
        pl_gram_matcher_deinit(r->samples[i].gm);
        pl_free(r->samples[i].gm);
        r->samples[i].gm = NULL;
    }
    grammar_unref(r->grammar);
    r->grammar = NULL;
}

pl_status pl_constrain_mask(pl_engine *e, pl_sample *s, float *logits, bool *out_dead) {
    *out_dead = false;
    pl_gram_matcher *m = s->gm;
    const pl_gram_vocab *v = e->constrain.vocab;
    size_t words = ((size_t)e->vocab + 63) / 64;
    uint64_t *bits = e->constrain.bits;
    if (!bits) {
        bits = e->constrain.bits = pl_calloc(words, sizeof *bits);
        if (!bits) return pl_fail(PL_ERR_OUT_OF_MEMORY, "engine: token mask");
    }
    memset(bits, 0, words * sizeof *bits);
    size_t n_eog = 0;
    const int32_t *eog = e->tok ? pl_tok_eog_ids(e->tok, &n_eog) : NULL;
    PL_TRY(pl_gram_mask(m, v, eog, n_eog, bits));
    bool complete = pl_gram_matcher_is_complete(m);
    if (complete)
        for (int i = 0; i < e->n_eos; i++) bits[e->eos_ids[i] >> 6] |= 1ull << (e->eos_ids[i] & 63);
    /* the tokenizer's vocabulary may be smaller than the model's (padded rows): those stay 0 */
    size_t allowed = pl_sampler_mask_row(logits, bits, e->vocab);
    if (allowed == 0 && complete) {
        /* min_tokens held end-of-text back, but nothing else may follow: the grammar wins */
        for (int i = 0; i < e->n_eos; i++) logits[e->eos_ids[i]] = 0.0f;
        allowed = 1;
    }
    *out_dead = allowed == 0;
    return PL_OK;
}

void pl_constrain_accept(pl_engine *e, pl_sample *s, int32_t tok) {
    if (!s->gm || pl_engine_is_eos(e, tok)) return;
    if (pl_gram_matcher_accept_token(s->gm, e->constrain.vocab, tok) != PL_OK)
        pl_log(PL_LOG_WARN, "request %llu: token %d left the grammar: %s",
               (unsigned long long)s->req->id, (int)tok, pl_last_error());
}

bool pl_constrain_complete(const pl_sample *s) {
    return s->gm && pl_gram_matcher_is_complete(s->gm);
}
