/*
 * server/routes.c - the endpoints: one table, a row per route, and the handlers behind it.
 *
 * The transport (http.c) calls in at three moments of a request: its headers arrived
 * (pl_srv_route_headers: route, method, API key, draining, Content-Length; an early refusal
 * needs no body), its body is in (pl_srv_route_body: the handler), and a whole response's
 * choices are all in (pl_srv_route_answer). A handler fills a pl_srv_response or returns false
 * with a pl_srv_error; respond() is the one place a failure becomes an answer (the error
 * object with its status and headers). A completion or chat:
 *   parse, tokenize (chats rendered with the template), submit every prompt under the
 *   registry lock (so the stepping thread cannot see an id before it is registered), then
 *   - a whole response: `wait`, the transport sleeps until the stepping thread has delivered
 *     every choice, then asks for the answer;
 *   - a stream: a 200 whose next() formats the events the stepping thread queued.
 * Nothing here knows libmicrohttpd.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/srv.h"

/* Fills *out, or returns false with *err. */
typedef bool (*handler_fn)(pl_srv *s, pl_srv_req *r, pl_srv_response *out, pl_srv_error *err);

typedef struct route {
    const char *path;
    const char *method;
    handler_fn handle;
    bool needs_key;      /* with --api-key: OpenAI's routes and the tokenizer's */
    bool while_draining; /* still answered during the drain (the operator's routes) */
    pl_srv_kind kind;    /* what a body of this route is */
} route;
/* A path ending in '/' is a prefix: the rest of the URL (not empty) is an id. */

static bool health(pl_srv *s, pl_srv_req *r, pl_srv_response *out, pl_srv_error *err);
static bool metrics(pl_srv *s, pl_srv_req *r, pl_srv_response *out, pl_srv_error *err);
static bool version(pl_srv *s, pl_srv_req *r, pl_srv_response *out, pl_srv_error *err);
static bool models(pl_srv *s, pl_srv_req *r, pl_srv_response *out, pl_srv_error *err);
static bool model_one(pl_srv *s, pl_srv_req *r, pl_srv_response *out, pl_srv_error *err);
static bool generate(pl_srv *s, pl_srv_req *r, pl_srv_response *out, pl_srv_error *err);
static bool tokenize(pl_srv *s, pl_srv_req *r, pl_srv_response *out, pl_srv_error *err);
static bool detokenize(pl_srv *s, pl_srv_req *r, pl_srv_response *out, pl_srv_error *err);

static const route ROUTES[] = {
    {"/health", "GET", health, false, true, PL_SRV_COMPLETION},
    {"/metrics", "GET", metrics, false, true, PL_SRV_COMPLETION},
    {"/version", "GET", version, false, true, PL_SRV_COMPLETION},
    {"/v1/models", "GET", models, true, false, PL_SRV_COMPLETION},
    {"/v1/models/", "GET", model_one, true, false, PL_SRV_COMPLETION},
    {"/v1/completions", "POST", generate, true, false, PL_SRV_COMPLETION},
    {"/v1/chat/completions", "POST", generate, true, false, PL_SRV_CHAT},
    {"/tokenize", "POST", tokenize, true, false, PL_SRV_COMPLETION},
    {"/detokenize", "POST", detokenize, true, false, PL_SRV_COMPLETION},
};

#define N_ROUTES (sizeof ROUTES / sizeof ROUTES[0])

/* ---- responses ----------------------------------------------------------------------------- */

/* v is stolen. A JSON text that cannot be made (out of memory) leaves status 0: the
 * connection closes. */
static void json_response(pl_srv_response *out, int status, json_t *v, const char *header,
                          const char *value) {
    char *text = v ? json_dumps(v, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(v);
    *out = (pl_srv_response){0};
    if (!text) return;
    *out = (pl_srv_response){.status = status, .type = "application/json", .body = text,
                             .len = strlen(text), .header = header, .value = value};
}

static void error_response(const pl_srv_req *r, const pl_srv_error *err, pl_srv_response *out) {
    const char *header = NULL, *value = NULL;
    if (err->status == 429 || err->status == 503) header = "Retry-After", value = "1";
    if (err->status == 401) header = "WWW-Authenticate", value = "Bearer";
    if (err->status == 405) header = "Allow", value = r->allow;
    json_response(out, err->status, pl_srv_error_json(err), header, value);
}

/* The one wrapper around every handler: a failure becomes its error response. */
static void respond(pl_srv *s, pl_srv_req *r, handler_fn handle, pl_srv_response *out) {
    pl_srv_error err;
    *out = (pl_srv_response){0};
    if (!handle(s, r, out, &err)) error_response(r, &err, out);
}

/* ---- checks before the body ---------------------------------------------------------------- */

/* Compares in time that depends on the key's length only, not on where they differ. */
static bool key_matches(const char *given, const char *key) {
    size_t gl = strlen(given), kl = strlen(key);
    unsigned char diff = gl != kl;
    for (size_t i = 0; i < kl; i++)
        diff |= (unsigned char)key[i] ^ (unsigned char)(i < gl ? given[i] : 0);
    return diff == 0;
}

static bool authorized(pl_srv *s, const pl_srv_headers *h) {
    const char *a = h->authorization;
    return a && !strncmp(a, "Bearer ", 7) && key_matches(a + 7, s->opt.api_key);
}

/* An error found in the headers is answered after the body (which is read and dropped), so
 * the connection stays open for the next request; only a body too large to read is
 * answered at once (the connection then closes). */
static bool refuse(pl_srv_req *r, const pl_srv_error *err) {
    r->pending = *err;
    r->has_pending = true;
    return false;
}

static bool is_prefix(const route *rt) { return rt->path[strlen(rt->path) - 1] == '/'; }

static bool path_matches(const route *rt, const char *url) {
    if (!is_prefix(rt)) return !strcmp(url, rt->path);
    size_t n = strlen(rt->path);
    return !strncmp(url, rt->path, n) && url[n] && strlen(url + n) < sizeof ((pl_srv_req *)0)->url_id;
}

bool pl_srv_route_headers(pl_srv *s, pl_srv_req *r, const char *url, const char *method,
                          const pl_srv_headers *h, pl_srv_response *out) {
    pl_srv_error err;
    /* CORS first, as the middleware wraps vLLM's app: a preflight is answered on any path
     * without a key, and every other answer to an allowed origin carries its headers */
    if (pl_srv_cors_preflight(&s->opt.cors, r, method, h, out)) return true;
    pl_srv_cors_simple(&s->opt.cors, r, h);
    const route *rt = NULL;
    bool path_known = false;
    for (size_t i = 0; i < N_ROUTES; i++) {
        if (!path_matches(&ROUTES[i], url)) continue;
        path_known = true;
        if (!strcmp(method, ROUTES[i].method)) rt = &ROUTES[i];
    }
    if (!rt) {
        if (!path_known) {
            pl_srv_fail(&err, 404, NULL, "no route %s %s", method, url);
            err.code = "not_found";
            return refuse(r, &err);
        }
        for (size_t i = 0; i < N_ROUTES; i++)
            if (path_matches(&ROUTES[i], url)) r->allow = ROUTES[i].method;
        pl_srv_fail(&err, 405, NULL, "%s does not take %s (only %s)", url, method, r->allow);
        err.code = "method_not_allowed";
        return refuse(r, &err);
    }
    r->kind = rt->kind;
    snprintf(r->path, sizeof r->path, "%s", rt->path); /* routes live as long as the server */
    if (is_prefix(rt)) snprintf(r->url_id, sizeof r->url_id, "%s", url + strlen(rt->path));
    if (rt->needs_key && s->opt.api_key && !authorized(s, h)) {
        pl_srv_fail(&err, 401, NULL, "a missing or wrong API key: send the header "
                    "'Authorization: Bearer KEY'");
        err.code = "invalid_api_key";
        return refuse(r, &err);
    }
    if (atomic_load(&s->draining) && !rt->while_draining) {
        if (atomic_load(&s->failed))
            pl_srv_fail(&err, 503, NULL, "the engine failed: %s", s->failure);
        else
            pl_srv_fail(&err, 503, NULL, "the server is shutting down");
        err.code = "draining";
        return refuse(r, &err);
    }
    const char *cl = h->content_length;
    if (cl && strtoull(cl, NULL, 10) > s->opt.max_body_bytes) {
        pl_srv_fail(&err, 413, NULL, "the body has %s bytes; at most %zu (--max-body-size)", cl,
                    s->opt.max_body_bytes);
        err.code = "request_too_large";
        error_response(r, &err, out);
        return true;
    }
    return false;
}

static const route *route_of(const pl_srv_req *r) {
    for (size_t i = 0; i < N_ROUTES; i++)
        if (!strcmp(r->path, ROUTES[i].path)) return &ROUTES[i];
    return NULL;
}

/* ---- the small routes ---------------------------------------------------------------------- */

static bool health(pl_srv *s, pl_srv_req *r, pl_srv_response *out, pl_srv_error *err) {
    (void)r, (void)err;
    pl_occupancy o;
    pl_engine_occupancy(s->e, &o);
    /* the engine's own word, not serve()'s next look at it: a failure shows at once */
    bool failed = pl_engine_health(s->e) != PL_OK;
    bool draining = atomic_load(&s->draining) || failed;
    /* the waiting queue proper: new requests beyond what the free running slots will take */
    int waiting = o.n_waiting_new > o.n_free_slots ? o.n_waiting_new - o.n_free_slots : 0;
    bool full = o.max_waiting > 0 && waiting * 5 >= o.max_waiting * 4;
    json_t *v = json_object();
    json_object_set_new(v, "status", json_string(failed     ? "failed"
                                                 : draining ? "draining"
                                                 : full     ? "overloaded"
                                                            : "ok"));
    if (failed) json_object_set_new(v, "error", json_string(pl_last_error()));
    json_object_set_new(v, "waiting", json_integer(o.n_waiting));
    json_object_set_new(v, "running", json_integer(o.n_running));
    json_object_set_new(v, "max_waiting", json_integer(o.max_waiting));
    json_object_set_new(v, "kv_cache_usage", json_real(o.kv_usage));
    json_object_set_new(v, "kv_blocks_used", json_integer(o.kv_blocks_used));
    json_object_set_new(v, "kv_blocks_total", json_integer(o.kv_blocks_total));
    bool bad = draining || full;
    /* a failure is for good: no Retry-After */
    json_response(out, bad ? 503 : 200, v, bad && !failed ? "Retry-After" : NULL, "1");
    return true;
}

static bool metrics(pl_srv *s, pl_srv_req *r, pl_srv_response *out, pl_srv_error *err) {
    (void)r;
    pl_srv_snapshot snap;
    size_t len;
    char *text;
    if (!pl_srv_snapshot_get(s, &snap, 10.0) || !(text = pl_srv_metrics_text(s, &snap, &len)))
        return pl_srv_fail(err, 503, NULL, "metrics: the stepping thread did not answer in time");
    *out = (pl_srv_response){.status = 200, .type = "text/plain; version=0.0.4; charset=utf-8",
                             .body = text, .len = len};
    return true;
}

static bool version(pl_srv *s, pl_srv_req *r, pl_srv_response *out, pl_srv_error *err) {
    (void)s, (void)r, (void)err;
    json_t *v = json_object();
    json_object_set_new(v, "version", json_string(pl_version()));
    json_response(out, 200, v, NULL, NULL);
    return true;
}

/* The model as /v1/models lists it. */
static json_t *model_card(pl_srv *s) {
    json_t *m = json_object();
    json_object_set_new(m, "id", json_string(s->model_name));
    json_object_set_new(m, "object", json_string("model"));
    json_object_set_new(m, "created", json_integer((json_int_t)time(NULL)));
    json_object_set_new(m, "owned_by", json_string("pagellm"));
    json_object_set_new(m, "root", json_string(s->model_name));
    json_object_set_new(m, "parent", json_null());
    json_object_set_new(m, "max_model_len", json_integer(s->info.max_model_len));
    /* not in vLLM's card: what random token ids may be (bench serve reads it, as llama.cpp's
     * meta.n_vocab) */
    json_object_set_new(m, "vocab_size", json_integer(s->info.vocab_size));
    return m;
}

static bool models(pl_srv *s, pl_srv_req *r, pl_srv_response *out, pl_srv_error *err) {
    (void)r, (void)err;
    json_t *data = json_array();
    json_array_append_new(data, model_card(s));
    json_t *v = json_object();
    json_object_set_new(v, "object", json_string("list"));
    json_object_set_new(v, "data", data);
    json_response(out, 200, v, NULL, NULL);
    return true;
}

/* GET /v1/models/{id}: the model, or OpenAI's 404. */
static bool model_one(pl_srv *s, pl_srv_req *r, pl_srv_response *out, pl_srv_error *err) {
    if (strcmp(r->url_id, s->model_name) != 0) {
        pl_srv_fail(err, 404, "model", "the model '%s' does not exist (this server serves '%s')",
                    r->url_id, s->model_name);
        err->code = "model_not_found";
        return false;
    }
    json_response(out, 200, model_card(s), NULL, NULL);
    return true;
}

static bool need_tokenizer(pl_srv *s, pl_srv_error *err, const char *param) {
    if (s->tok) return true;
    return pl_srv_fail(err, 400, param, "this model has no tokenizer: send token ids "
                       "(--tokenizer PATH loads one)");
}

/* The chat as the template renders it, tokenized as Hugging Face's apply_chat_template does
 * (special tokens parsed, nothing added). *out_text and *out_ids: malloc'd. */
static bool render_chat(pl_srv *s, const char *messages, const pl_chat_options *opt,
                        bool add_special, char **out_text, int32_t **out_ids, size_t *out_n,
                        pl_srv_error *err) {
    if (opt->chat_template && !s->opt.trust_request_chat_template)
        return pl_srv_fail(err, 400, "chat_template", "chat_template: a request's own template "
                           "is refused unless the server runs with --trust-request-chat-template");
    if (!need_tokenizer(s, err, "messages")) return false;
    char *text;
    size_t len;
    pl_status st = pl_engine_apply_chat_template_json(s->e, messages, opt, &text, &len);
    if (st == PL_ERR_NOT_FOUND)
        return pl_srv_fail(err, 400, "messages", "this model has no chat template: start the "
                           "server with --chat-template FILE (%s)", pl_last_error());
    if (st != PL_OK) return pl_srv_fail_status(err, st, "messages");
    int32_t *ids = NULL;
    size_t n = 0;
    unsigned flags = PL_ENCODE_PARSE_SPECIAL | (add_special ? PL_ENCODE_ADD_SPECIAL : 0);
    st = pl_tokenizer_encode(s->tok, text, len, flags, &ids, &n);
    if (st != PL_OK) {
        pl_free_text(text);
        return pl_srv_fail_status(err, st, "messages");
    }
    *out_text = strdup(text);
    *out_ids = malloc((n ? n : 1) * sizeof **out_ids);
    if (*out_ids) memcpy(*out_ids, ids, n * sizeof *ids);
    *out_n = n;
    pl_free_text(text);
    pl_free_ids(ids);
    if (!*out_text || !*out_ids) {
        free(*out_text);
        free(*out_ids);
        return pl_srv_fail(err, 500, NULL, "out of memory");
    }
    return true;
}

static bool tokenize(pl_srv *s, pl_srv_req *r, pl_srv_response *out, pl_srv_error *err) {
    pl_srv_tokenize t;
    if (!pl_srv_tokenize_parse(r->body ? r->body : "", r->body_len, &t, err))
        return false;
    int32_t *ids = NULL;
    size_t n = 0;
    bool ok = true;
    if (t.messages_json) {
        char *text = NULL;
        ok = render_chat(s, t.messages_json, &t.chat, t.add_special_tokens, &text, &ids, &n, err);
        free(text);
    } else if ((ok = need_tokenizer(s, err, "prompt"))) {
        int32_t *lib = NULL;
        unsigned flags = t.add_special_tokens ? PL_ENCODE_ADD_SPECIAL : 0;
        pl_status st = pl_tokenizer_encode(s->tok, t.prompt, strlen(t.prompt), flags, &lib, &n);
        if (st != PL_OK) ok = pl_srv_fail_status(err, st, "prompt");
        else if (!(ids = malloc((n ? n : 1) * sizeof *ids))) ok = pl_srv_fail(err, 500, NULL, "out of memory");
        else memcpy(ids, lib, n * sizeof *ids);
        pl_free_ids(lib);
    }
    if (!ok) {
        pl_srv_tokenize_free(&t);
        return false;
    }
    json_t *v = json_object(), *a = json_array(), *strs = t.return_token_strs ? json_array() : NULL;
    for (size_t i = 0; i < n; i++) {
        json_array_append_new(a, json_integer(ids[i]));
        if (strs) { /* the tokens as vLLM gives them (convert_ids_to_tokens): "<s>", "▁the" */
            const char *piece = pl_tokenizer_piece(s->tok, ids[i]);
            json_t *x = piece ? json_string(piece) : NULL;
            json_array_append_new(strs, x ? x : json_string("\xef\xbf\xbd"));
        }
    }
    json_object_set_new(v, "count", json_integer((json_int_t)n));
    json_object_set_new(v, "max_model_len", json_integer(s->info.max_model_len));
    json_object_set_new(v, "tokens", a);
    json_object_set_new(v, "token_strs", strs ? strs : json_null());
    free(ids);
    pl_srv_tokenize_free(&t);
    json_response(out, 200, v, NULL, NULL);
    return true;
}

static bool detokenize(pl_srv *s, pl_srv_req *r, pl_srv_response *out, pl_srv_error *err) {
    int32_t *ids = NULL;
    size_t n = 0;
    if (!pl_srv_detokenize_parse(r->body ? r->body : "", r->body_len, &ids, &n, err))
        return false;
    char *text = NULL;
    pl_status st = need_tokenizer(s, err, "tokens") ? pl_engine_detokenize(s->e, ids, n, &text, NULL)
                                                    : PL_ERR_INVALID_ARGUMENT;
    free(ids);
    if (st != PL_OK) {
        if (s->tok) pl_srv_fail_status(err, st, "tokens");
        return false;
    }
    json_t *v = json_object();
    json_object_set_new(v, "prompt", json_string(text));
    pl_free_text(text);
    json_response(out, 200, v, NULL, NULL);
    return true;
}

/* ---- completions and chats ------------------------------------------------------------------ */

/* Token ids of every prompt; the prompt-length limit. */
static bool prepare_prompts(pl_srv *s, pl_srv_req *r, pl_srv_error *err) {
    pl_srv_request *q = &r->rq;
    if (q->kind == PL_SRV_CHAT)
        return render_chat(s, q->messages_json, &q->chat, false, &q->prompts[0].text,
                           &q->prompts[0].ids, &q->prompts[0].n_ids, err);
    for (size_t i = 0; i < q->n_prompts; i++) {
        pl_srv_prompt *p = &q->prompts[i];
        if (!p->text) continue;
        if (!need_tokenizer(s, err, "prompt")) return false;
        int32_t *ids = NULL;
        size_t n = 0;
        unsigned flags = q->add_special_tokens && s->info.bos_id >= 0 ? PL_ENCODE_ADD_SPECIAL : 0;
        pl_status st = pl_tokenizer_encode(s->tok, p->text, strlen(p->text), flags, &ids, &n);
        if (st != PL_OK) return pl_srv_fail_status(err, st, "prompt");
        p->ids = malloc((n ? n : 1) * sizeof *p->ids);
        if (p->ids) memcpy(p->ids, ids, n * sizeof *ids);
        p->n_ids = n;
        pl_free_ids(ids);
        if (!p->ids) return pl_srv_fail(err, 500, NULL, "out of memory");
    }
    return true;
}

/* max_tokens when the body gave none: what the context (and the KV pool) leaves, as vLLM. */
static bool max_tokens_for(pl_srv *s, const pl_srv_request *q, size_t n_prompt, int *out,
                           pl_srv_error *err) {
    size_t limit = s->opt.max_prompt_tokens > 0 ? (size_t)s->opt.max_prompt_tokens
                                                : (size_t)s->info.max_model_len;
    if (n_prompt == 0) return pl_srv_fail(err, 400, "prompt", "the prompt has no tokens");
    if (n_prompt > limit)
        return pl_srv_fail(err, 400, q->kind == PL_SRV_CHAT ? "messages" : "prompt",
                           "the prompt has %zu tokens; at most %zu (%s)", n_prompt, limit,
                           s->opt.max_prompt_tokens > 0 ? "--max-prompt-tokens" : "max_model_len");
    if (q->has_max_tokens) {
        *out = q->sp.max_tokens;
        return true;
    }
    uint64_t room = (uint64_t)s->info.max_model_len;
    if (s->info.kv_tokens < room) room = s->info.kv_tokens;
    if (room <= n_prompt)
        return pl_srv_fail(err, 400, "prompt", "the prompt has %zu tokens and leaves no room "
                           "to generate (max_model_len %d)", n_prompt, s->info.max_model_len);
    *out = (int)(room - n_prompt);
    return true;
}

/* Whether a refused field is one a constraint sets (the library names its own fields). */
static bool is_constraint(const char *param) {
    return !strcmp(param, "json_schema") || !strcmp(param, "grammar") || !strcmp(param, "regex") ||
           !strcmp(param, "choice");
}

/* Submits every prompt and registers its id, all under reg_mu: a refused prompt withdraws
 * the ones before it, so the request is answered as a whole. */
static bool submit_all(pl_srv *s, pl_srv_req *r, pl_srv_error *err) {
    pl_srv_request *q = &r->rq;
    size_t np = q->n_prompts;
    r->n_per_prompt = q->sp.n;
    r->n_choices = (int)np * q->sp.n;
    r->choices = calloc((size_t)r->n_choices, sizeof *r->choices);
    r->engine_ids = calloc(np, sizeof *r->engine_ids);
    r->samples_left = calloc(np, sizeof *r->samples_left);
    if (!r->choices || !r->engine_ids || !r->samples_left)
        return pl_srv_fail(err, 500, NULL, "out of memory");
    int *max_tokens = calloc(np, sizeof *max_tokens);
    if (!max_tokens) return pl_srv_fail(err, 500, NULL, "out of memory");
    for (size_t p = 0; p < np; p++) {
        if (!max_tokens_for(s, q, q->prompts[p].n_ids, &max_tokens[p], err)) {
            free(max_tokens);
            return false;
        }
        for (int k = 0; k < q->sp.n; k++) r->choices[p * (size_t)q->sp.n + (size_t)k].prompt = (int)p;
    }
    bool ok = true;
    size_t p = 0;
    pthread_mutex_lock(&s->reg_mu);
    for (; p < np && ok; p++) {
        pl_sampling_params sp = q->sp; /* lists still point into q->sp's storage: copied at submit */
        sp.max_tokens = max_tokens[p];
        if (q->echo && sp.logprobs > sp.prompt_logprobs) sp.prompt_logprobs = sp.logprobs;
        pl_request_id id = 0;
        pl_status st = pl_engine_submit_tokens(s->e, q->prompts[p].ids, q->prompts[p].n_ids, &sp, &id);
        if (st != PL_OK) {
            ok = pl_srv_fail_status(err, st, np > 1 ? "prompt" : NULL);
            if (q->constraint_param && is_constraint(err->param))
                snprintf(err->param, sizeof err->param, "%s", q->constraint_param);
            if (np > 1) {
                char msg[sizeof err->message + 32];
                int n = snprintf(msg, sizeof msg, "prompt %zu: %s", p, err->message);
                size_t len = n < 0 ? 0 : (size_t)n < sizeof err->message ? (size_t)n
                                                                         : sizeof err->message - 1;
                memcpy(err->message, msg, len);
                err->message[len] = '\0';
            }
        } else if (!pl_srv_registry_put(&s->reg, id, r, (int)p)) {
            pl_engine_abort(s->e, id);
            ok = pl_srv_fail(err, 500, NULL, "out of memory");
        } else {
            pl_srv_req_ref(r); /* the registry's, until the prompt finishes */
            r->engine_ids[p] = id;
            r->samples_left[p] = q->sp.n;
        }
    }
    if (!ok) { /* withdraw: the stepping thread cannot have delivered anything (reg_mu) */
        for (size_t k = 0; k < np; k++) {
            if (!r->engine_ids[k]) continue;
            pl_engine_abort(s->e, r->engine_ids[k]);
            pl_srv_registry_del(&s->reg, r->engine_ids[k]);
            r->engine_ids[k] = 0;
            pl_srv_req_unref(r); /* never the last: the connection holds one */
        }
    } else {
        pthread_mutex_lock(&r->mu);
        r->submitted = true;
        r->prompts_left = (int)np;
        pthread_mutex_unlock(&r->mu);
    }
    pthread_mutex_unlock(&s->reg_mu);
    free(max_tokens);
    return ok;
}

/* The answer once every choice finished: 200 with the choices, or the failure that ended
 * one of them. */
static bool answer(pl_srv *s, pl_srv_req *r, pl_srv_response *out, pl_srv_error *err) {
    for (int i = 0; i < r->n_choices; i++) {
        pl_finish_reason why = r->choices[i].reason;
        if (why == PL_FINISH_ERROR && pl_engine_health(s->e) != PL_OK)
            return pl_srv_fail(err, 500, NULL, "the backend failed while generating choice %d "
                               "and cannot serve again: %s", i, pl_last_error());
        if (why == PL_FINISH_ERROR)
            return pl_srv_fail(err, 500, NULL, "the backend failed while generating choice %d", i);
        if (why == PL_FINISH_OVERLOADED) {
            pl_srv_fail(err, 503, NULL, "dropped from the full waiting queue (overflow policy "
                        "drop-oldest): try again");
            err->code = "overloaded";
            return false;
        }
        if (why == PL_FINISH_ABORT) {
            pl_srv_fail(err, 503, NULL, "aborted: the server is shutting down");
            err->code = "aborted";
            return false;
        }
    }
    json_response(out, 200, pl_srv_response_json(s, r), NULL, NULL);
    return true;
}

/* The SSE body: formats what the stepping thread queued, a few events at a time (what is not
 * formatted stays queued: a client that does not read lets events pile up there, where
 * --max-pending-deltas bounds them). */
static pl_srv_next stream_next(pl_srv *s, pl_srv_req *r) {
    pthread_mutex_lock(&r->mu);
    pl_srv_event *ev = pl_srv_req_take_events_locked(r, 16);
    bool over = r->overflow;
    bool done = r->done && !r->ev_head; /* the last events are taken */
    pthread_mutex_unlock(&r->mu);
    if (!ev && !done && !over) return PL_SRV_NEXT_WAIT;
    bool ok = true;
    for (pl_srv_event *e = ev; e && ok; e = e->next) ok = pl_srv_stream_event(s, r, e);
    pl_srv_events_free(ev);
    pl_srv_next next = PL_SRV_NEXT_MORE;
    if (ok && over) { /* what is still queued is dropped: the request was aborted */
        pthread_mutex_lock(&r->mu);
        pl_srv_events_free(pl_srv_req_take_events_locked(r, INT32_MAX));
        pthread_mutex_unlock(&r->mu);
        pl_srv_error err;
        pl_srv_fail(&err, 503, NULL, "the client read the stream too slowly: %d events were "
                    "waiting (--max-pending-deltas); the request was aborted",
                    s->opt.max_pending_deltas);
        err.code = "slow_reader";
        ok = pl_srv_stream_error(r, &err) && pl_srv_stream_done(s, r);
        next = PL_SRV_NEXT_END;
    } else if (ok && done) {
        ok = pl_srv_stream_done(s, r);
        next = PL_SRV_NEXT_END;
    }
    return ok ? next : PL_SRV_NEXT_FAIL; /* out of memory */
}

/* How a chat's replies are read: its tool calls in the syntax of the template that renders
 * it (the request's own, when it brings one and --tool-call-parser is auto), and the
 * reasoning. Mistral's marker is a special token: its text is kept unless the body says. */
static bool reading(pl_srv *s, pl_srv_req *r, pl_srv_error *err) {
    pl_srv_request *q = &r->rq;
    if (q->kind != PL_SRV_CHAT) return true;
    bool forced = q->tool_choice >= PL_SRV_TOOLS_REQUIRED;
    if (q->tools && q->tool_choice != PL_SRV_TOOLS_NONE) {
        r->tool_parser = s->tool_parser;
        if (q->chat.chat_template && !strcmp(s->opt.tool_call_parser, "auto"))
            r->tool_parser = pl_reply_tool_parser_for(q->chat.chat_template);
        if (forced && !r->tool_parser) {
            if (!strcmp(s->opt.tool_call_parser, "none"))
                return pl_srv_fail(err, 400, "tool_choice", "tool_choice: a forced tool call "
                                   "needs tool calls read (the server runs with "
                                   "--tool-call-parser none)");
            r->tool_parser = "hermes"; /* the template shows no syntax: Hermes' is the default */
        }
    }
    r->read_reply = r->tool_parser || s->opt.reasoning_parser;
    if (r->tool_parser && !strcmp(r->tool_parser, "mistral") && !q->has_skip_special)
        q->sp.skip_special_tokens = false;
    if (!forced) return true;
    /* required or named: a grammar of the calls in the family's syntax */
    pl_reply_options o;
    pl_srv_reply_options(s, r, 0, &o);
    char *g = NULL;
    pl_status st = pl_reply_tool_grammar(q->chat.tools, q->tool_name, q->parallel_tool_calls, &o,
                                         &g);
    if (st == PL_OK) st = pl_sampling_params_set(&q->sp, "grammar", g);
    pl_free_text(g);
    if (st != PL_OK) return pl_srv_fail_status(err, st, "tools");
    q->constraint_param = "tool_choice";
    return true;
}

static bool generate(pl_srv *s, pl_srv_req *r, pl_srv_response *out, pl_srv_error *err) {
    pl_srv_limits lim = {.max_n = s->opt.max_n, .max_choices = s->opt.max_choices};
    if (!pl_srv_request_parse(r->kind, r->body ? r->body : "", r->body_len, &lim, &r->rq, err))
        return false;
    r->has_rq = true;
    if (r->rq.model && strcmp(r->rq.model, s->model_name) != 0) {
        pl_srv_fail(err, 404, "model", "the model '%s' does not exist (this server serves "
                    "'%s')", r->rq.model, s->model_name);
        err->code = "model_not_found";
        return false;
    }
    if (atomic_load(&s->draining)) { /* the headers came before the drain, the body after */
        pl_srv_fail(err, 503, NULL, "the server is shutting down");
        err->code = "draining";
        return false;
    }
    if (r->rq.stream && r->rq.prompt_logprobs >= 0)
        return pl_srv_fail(err, 400, "prompt_logprobs", "prompt_logprobs: not available in a "
                           "stream (as in vLLM)");
    uint64_t serial = atomic_fetch_add(&s->next_serial, 1);
    snprintf(r->id, sizeof r->id, "%s-%016llx%08llx", r->kind == PL_SRV_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)s->nonce, (unsigned long long)serial);
    r->created = (uint64_t)time(NULL);
    if (!prepare_prompts(s, r, err) || !reading(s, r, err) || !submit_all(s, r, err)) return false;
    if (r->rq.stream)
        *out = (pl_srv_response){.status = 200, .type = "text/event-stream",
                                 .header = "Cache-Control", .value = "no-cache",
                                 .next = stream_next};
    else
        out->wait = true;
    return true;
}

/* ---- the transport's calls ------------------------------------------------------------------ */

void pl_srv_route_body(pl_srv *s, pl_srv_req *r, pl_srv_response *out) {
    if (r->has_pending) {
        error_response(r, &r->pending, out);
        return;
    }
    respond(s, r, route_of(r)->handle, out);
}

void pl_srv_route_answer(pl_srv *s, pl_srv_req *r, pl_srv_response *out) {
    respond(s, r, answer, out);
}
