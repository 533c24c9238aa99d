/*
 * server/http.c - the HTTP side: libmicrohttpd's daemon, the routes, and each request from
 * its headers to its last byte.
 *
 * libmicrohttpd (Debian's libmicrohttpd 0.9.75) runs an epoll loop on --http-threads threads;
 * its callbacks run there and must not block. A request goes:
 *   headers  -> route, method, API key, draining, Content-Length checked; an early answer
 *               (404, 405, 401, 503, 413) needs no body
 *   body     -> appended up to --max-body-size (a chunked body past it closes the connection)
 *   complete -> parse, tokenize (chats rendered with the template), submit every prompt under
 *               the registry lock (so the stepping thread cannot see an id before it is
 *               registered), then
 *               - a whole response: the connection is suspended until the stepping thread has
 *                 delivered every choice; libmicrohttpd calls back, and the JSON is sent;
 *               - a stream: a 200 with a chunked SSE body whose reader formats the events the
 *                 stepping thread queued, and suspends the connection when there are none
 *                 (returning 0 without suspending would spin).
 *   done     -> the completion callback aborts whatever is unfinished (a client that went
 *               away), writes the access-log line and drops the connection's reference.
 */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/srv.h"

typedef enum route_id {
    R_HEALTH, R_METRICS, R_VERSION, R_MODELS, R_COMPLETIONS, R_CHAT, R_TOKENIZE, R_DETOKENIZE,
} route_id;

typedef struct route {
    const char *path;
    const char *method;
    route_id id;
    bool needs_key;      /* with --api-key: OpenAI's routes and the tokenizer's */
} route;

static const route ROUTES[] = {
    {"/health", "GET", R_HEALTH, false},
    {"/metrics", "GET", R_METRICS, false},
    {"/version", "GET", R_VERSION, false},
    {"/v1/models", "GET", R_MODELS, true},
    {"/v1/completions", "POST", R_COMPLETIONS, true},
    {"/v1/chat/completions", "POST", R_CHAT, true},
    {"/tokenize", "POST", R_TOKENIZE, true},
    {"/detokenize", "POST", R_DETOKENIZE, true},
};

#define N_ROUTES (sizeof ROUTES / sizeof ROUTES[0])

/* ---- sending ----------------------------------------------------------------------------- */

static enum MHD_Result send_body(pl_srv_req *r, struct MHD_Connection *c, int status,
                                 const char *type, char *body, size_t len,
                                 const char *header, const char *value) {
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (header) MHD_add_response_header(resp, header, value);
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    r->status = status;
    r->responded = true;
    return ok;
}

/* v is stolen. */
static enum MHD_Result send_json(pl_srv_req *r, struct MHD_Connection *c, int status, json_t *v,
                                 const char *header, const char *value) {
    char *text = v ? json_dumps(v, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(v);
    if (!text) return MHD_NO;
    return send_body(r, c, status, "application/json", text, strlen(text), header, value);
}

static enum MHD_Result send_error(pl_srv_req *r, struct MHD_Connection *c,
                                  const pl_srv_error *err) {
    const char *header = NULL, *value = NULL;
    if (err->status == 429 || err->status == 503) header = "Retry-After", value = "1";
    if (err->status == 401) header = "WWW-Authenticate", value = "Bearer";
    if (err->status == 405) header = "Allow", value = r->allow;
    return send_json(r, c, err->status, pl_srv_error_json(err), header, value);
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

static bool authorized(pl_srv *s, struct MHD_Connection *c) {
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    return h && !strncmp(h, "Bearer ", 7) && key_matches(h + 7, s->opt.api_key);
}

/* An error found in the headers is answered after the body (which is read and dropped), so
 * the connection stays open for the next request; only a body too large to read is
 * answered at once (the connection then closes). */
static enum MHD_Result refuse(pl_srv_req *r, const pl_srv_error *err) {
    r->pending = *err;
    r->has_pending = true;
    return MHD_YES;
}

static enum MHD_Result headers_arrived(pl_srv *s, pl_srv_req *r, struct MHD_Connection *c,
                                       const char *url, const char *method) {
    pl_srv_error err;
    const route *rt = NULL;
    bool path_known = false;
    for (size_t i = 0; i < N_ROUTES; i++) {
        if (strcmp(url, ROUTES[i].path) != 0) continue;
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
            if (!strcmp(url, ROUTES[i].path)) r->allow = ROUTES[i].method;
        pl_srv_fail(&err, 405, NULL, "%s does not take %s (only %s)", url, method, r->allow);
        err.code = "method_not_allowed";
        return refuse(r, &err);
    }
    r->kind = rt->id == R_CHAT ? PL_SRV_CHAT : PL_SRV_COMPLETION;
    snprintf(r->path, sizeof r->path, "%s", rt->path); /* routes live as long as the server */
    if (rt->needs_key && s->opt.api_key && !authorized(s, c)) {
        pl_srv_fail(&err, 401, NULL, "a missing or wrong API key: send the header "
                    "'Authorization: Bearer KEY'");
        err.code = "invalid_api_key";
        return refuse(r, &err);
    }
    if (atomic_load(&s->draining) && rt->id != R_METRICS && rt->id != R_VERSION &&
        rt->id != R_HEALTH) {
        if (atomic_load(&s->failed))
            pl_srv_fail(&err, 503, NULL, "the engine failed: %s", s->failure);
        else
            pl_srv_fail(&err, 503, NULL, "the server is shutting down");
        err.code = "draining";
        return refuse(r, &err);
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > s->opt.max_body_bytes) {
        pl_srv_fail(&err, 413, NULL, "the body has %s bytes; at most %zu (--max-body-size)", cl,
                    s->opt.max_body_bytes);
        err.code = "request_too_large";
        return send_error(r, c, &err);
    }
    return MHD_YES;
}

static const route *route_of(const pl_srv_req *r) {
    for (size_t i = 0; i < N_ROUTES; i++)
        if (!strcmp(r->path, ROUTES[i].path)) return &ROUTES[i];
    return NULL;
}

/* ---- the small routes ---------------------------------------------------------------------- */

static enum MHD_Result health(pl_srv *s, pl_srv_req *r, struct MHD_Connection *c) {
    pl_occupancy o;
    pl_engine_occupancy(s->e, &o);
    /* the engine's own word, not serve()'s next look at it: a failure shows at once */
    bool failed = pl_engine_health(s->e) != PL_OK;
    bool draining = atomic_load(&s->draining) || failed;
    bool full = o.max_waiting > 0 && o.n_waiting_new * 5 >= o.max_waiting * 4;
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
    return send_json(r, c, bad ? 503 : 200, v, bad ? "Retry-After" : NULL, "1");
}

static enum MHD_Result metrics(pl_srv *s, pl_srv_req *r, struct MHD_Connection *c) {
    pl_srv_snapshot snap;
    size_t len;
    char *text;
    if (!pl_srv_snapshot_get(s, &snap, 10.0) || !(text = pl_srv_metrics_text(s, &snap, &len))) {
        pl_srv_error err;
        pl_srv_fail(&err, 503, NULL, "metrics: the stepping thread did not answer in time");
        return send_error(r, c, &err);
    }
    return send_body(r, c, 200, "text/plain; version=0.0.4; charset=utf-8", text, len, NULL, NULL);
}

static enum MHD_Result version(pl_srv *s, pl_srv_req *r, struct MHD_Connection *c) {
    (void)s;
    json_t *v = json_object();
    json_object_set_new(v, "version", json_string(pl_version()));
    return send_json(r, c, 200, v, NULL, NULL);
}

static enum MHD_Result models(pl_srv *s, pl_srv_req *r, struct MHD_Connection *c) {
    json_t *m = json_object();
    json_object_set_new(m, "id", json_string(s->model_name));
    json_object_set_new(m, "object", json_string("model"));
    json_object_set_new(m, "created", json_integer((json_int_t)time(NULL)));
    json_object_set_new(m, "owned_by", json_string("pagellm"));
    json_object_set_new(m, "root", json_string(s->model_name));
    json_object_set_new(m, "parent", json_null());
    json_object_set_new(m, "max_model_len", json_integer(s->info.max_model_len));
    json_t *data = json_array();
    json_array_append_new(data, m);
    json_t *v = json_object();
    json_object_set_new(v, "object", json_string("list"));
    json_object_set_new(v, "data", data);
    return send_json(r, c, 200, v, NULL, NULL);
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

static enum MHD_Result tokenize(pl_srv *s, pl_srv_req *r, struct MHD_Connection *c) {
    pl_srv_error err;
    pl_srv_tokenize t;
    if (!pl_srv_tokenize_parse(r->body ? r->body : "", r->body_len, &t, &err))
        return send_error(r, c, &err);
    int32_t *ids = NULL;
    size_t n = 0;
    bool ok = true;
    if (t.messages_json) {
        char *text = NULL;
        ok = render_chat(s, t.messages_json, &t.chat, t.add_special_tokens, &text, &ids, &n, &err);
        free(text);
    } else if ((ok = need_tokenizer(s, &err, "prompt"))) {
        int32_t *lib = NULL;
        unsigned flags = t.add_special_tokens ? PL_ENCODE_ADD_SPECIAL : 0;
        pl_status st = pl_tokenizer_encode(s->tok, t.prompt, strlen(t.prompt), flags, &lib, &n);
        if (st != PL_OK) ok = pl_srv_fail_status(&err, st, "prompt");
        else if (!(ids = malloc((n ? n : 1) * sizeof *ids))) ok = pl_srv_fail(&err, 500, NULL, "out of memory");
        else memcpy(ids, lib, n * sizeof *ids);
        pl_free_ids(lib);
    }
    if (!ok) {
        pl_srv_tokenize_free(&t);
        return send_error(r, c, &err);
    }
    json_t *v = json_object(), *a = json_array(), *strs = t.return_token_strs ? json_array() : NULL;
    for (size_t i = 0; i < n; i++) {
        json_array_append_new(a, json_integer(ids[i]));
        if (strs) json_array_append_new(strs, json_string(pl_srv_vocab_text(&s->vocab, ids[i])));
    }
    json_object_set_new(v, "count", json_integer((json_int_t)n));
    json_object_set_new(v, "max_model_len", json_integer(s->info.max_model_len));
    json_object_set_new(v, "tokens", a);
    json_object_set_new(v, "token_strs", strs ? strs : json_null());
    free(ids);
    pl_srv_tokenize_free(&t);
    return send_json(r, c, 200, v, NULL, NULL);
}

static enum MHD_Result detokenize(pl_srv *s, pl_srv_req *r, struct MHD_Connection *c) {
    pl_srv_error err;
    int32_t *ids = NULL;
    size_t n = 0;
    if (!pl_srv_detokenize_parse(r->body ? r->body : "", r->body_len, &ids, &n, &err))
        return send_error(r, c, &err);
    char *text = NULL;
    pl_status st = need_tokenizer(s, &err, "tokens") ? pl_engine_detokenize(s->e, ids, n, &text, NULL)
                                                    : PL_ERR_INVALID_ARGUMENT;
    free(ids);
    if (st != PL_OK) {
        if (s->tok) pl_srv_fail_status(&err, st, "tokens");
        return send_error(r, c, &err);
    }
    json_t *v = json_object();
    json_object_set_new(v, "prompt", json_string(text));
    pl_free_text(text);
    return send_json(r, c, 200, v, NULL, NULL);
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
        if (q->echo && sp.logprobs >= 0) sp.prompt_logprobs = sp.logprobs;
        pl_request_id id = 0;
        pl_status st = pl_engine_submit_tokens(s->e, q->prompts[p].ids, q->prompts[p].n_ids, &sp, &id);
        if (st != PL_OK) {
            ok = pl_srv_fail_status(err, st, np > 1 ? "prompt" : NULL);
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
static enum MHD_Result answer(pl_srv *s, pl_srv_req *r, struct MHD_Connection *c) {
    pl_srv_error err;
    for (int i = 0; i < r->n_choices; i++) {
        pl_finish_reason why = r->choices[i].reason;
        if (why == PL_FINISH_ERROR) {
            pl_srv_fail(&err, 500, NULL, "the backend failed while generating choice %d", i);
            return send_error(r, c, &err);
        }
        if (why == PL_FINISH_OVERLOADED) {
            pl_srv_fail(&err, 503, NULL, "dropped from the full waiting queue (overflow policy "
                        "drop-oldest): try again");
            err.code = "overloaded";
            return send_error(r, c, &err);
        }
        if (why == PL_FINISH_ABORT) {
            pl_srv_fail(&err, 503, NULL, "aborted: the server is shutting down");
            err.code = "aborted";
            return send_error(r, c, &err);
        }
    }
    return send_json(r, c, 200, pl_srv_response_json(s, r), NULL, NULL);
}

/* Suspends r's connection unless the client has hung up (then: gone, aborted). r->mu held;
 * returns whether it suspended. */
static bool suspend_locked(pl_srv *s, pl_srv_req *r) {
    if (r->client_gone || pl_srv_conn_hung_up(r->sock)) {
        if (!r->client_gone && !r->done && pl_srv_req_abort_locked(r) > 0)
            atomic_fetch_add(&s->aborted_disconnect, 1);
        r->client_gone = true;
        return false;
    }
    r->suspended = true;
    MHD_suspend_connection(r->conn);
    return true;
}

/* A whole response: answer if every choice is in, else sleep until the watcher resumes the
 * connection (the stepping thread delivered the last choice, or the client hung up). */
static enum MHD_Result wait_or_answer(pl_srv *s, pl_srv_req *r, struct MHD_Connection *c) {
    pthread_mutex_lock(&r->mu);
    bool done = r->done;
    if (!done) suspend_locked(s, r);
    bool gone = r->client_gone;
    pthread_mutex_unlock(&r->mu);
    if (gone) return MHD_NO; /* closes the connection */
    return done ? answer(s, r, c) : MHD_YES;
}

/* The SSE body: formats what the stepping thread queued, a few events at a time (what is not
 * formatted stays queued: a client that does not read lets events pile up there, where
 * --max-pending-deltas bounds them); suspends when there is nothing. */
static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    pl_srv_req *r = cls;
    pl_srv *s = r->srv;
    for (;;) {
        if (r->out_pos < r->out_len) {
            size_t n = r->out_len - r->out_pos < max ? r->out_len - r->out_pos : max;
            memcpy(buf, r->out + r->out_pos, n);
            r->out_pos += n;
            return (ssize_t)n;
        }
        r->out_len = r->out_pos = 0;
        if (r->stream_ended) return MHD_CONTENT_READER_END_OF_STREAM;
        pthread_mutex_lock(&r->mu);
        pl_srv_event *ev = pl_srv_req_take_events_locked(r, 16);
        bool over = r->overflow, gone = r->client_gone;
        bool done = r->done && !r->ev_head; /* the last events are taken */
        if (!ev && !done && !over) {
            bool suspended = !gone && suspend_locked(s, r);
            pthread_mutex_unlock(&r->mu);
            return suspended ? 0 : MHD_CONTENT_READER_END_WITH_ERROR;
        }
        pthread_mutex_unlock(&r->mu);
        bool ok = true;
        for (pl_srv_event *e = ev; e && ok; e = e->next) ok = pl_srv_stream_event(s, r, e);
        pl_srv_events_free(ev);
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
            r->stream_ended = true;
        } else if (ok && done) {
            ok = pl_srv_stream_done(s, r);
            r->stream_ended = true;
        }
        if (!ok) return MHD_CONTENT_READER_END_WITH_ERROR; /* out of memory */
    }
}

static void stream_free(void *cls) { pl_srv_req_unref(cls); }

static enum MHD_Result start_stream(pl_srv *s, pl_srv_req *r, struct MHD_Connection *c) {
    (void)s;
    pl_srv_req_ref(r); /* the response's */
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_reader, r, stream_free);
    if (!resp) {
        pl_srv_req_unref(r);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result ok = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    r->status = 200;
    r->responded = true;
    return ok;
}

static enum MHD_Result generate(pl_srv *s, pl_srv_req *r, struct MHD_Connection *c) {
    pl_srv_error err;
    pl_srv_limits lim = {.max_n = s->opt.max_n, .max_choices = s->opt.max_choices};
    if (!pl_srv_request_parse(r->kind, r->body ? r->body : "", r->body_len, &lim, &r->rq, &err))
        return send_error(r, c, &err);
    r->has_rq = true;
    if (r->rq.model && strcmp(r->rq.model, s->model_name) != 0) {
        pl_srv_fail(&err, 404, "model", "the model '%s' does not exist (this server serves "
                    "'%s')", r->rq.model, s->model_name);
        err.code = "model_not_found";
        return send_error(r, c, &err);
    }
    if (atomic_load(&s->draining)) { /* the headers came before the drain, the body after */
        pl_srv_fail(&err, 503, NULL, "the server is shutting down");
        err.code = "draining";
        return send_error(r, c, &err);
    }
    uint64_t serial = atomic_fetch_add(&s->next_serial, 1);
    snprintf(r->id, sizeof r->id, "%s-%016llx%08llx", r->kind == PL_SRV_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)s->nonce, (unsigned long long)serial);
    r->created = (uint64_t)time(NULL);
    if (!prepare_prompts(s, r, &err) || !submit_all(s, r, &err)) return send_error(r, c, &err);
    return r->rq.stream ? start_stream(s, r, c) : wait_or_answer(s, r, c);
}

/* ---- libmicrohttpd's callbacks ---------------------------------------------------------------- */

static enum MHD_Result process(pl_srv *s, pl_srv_req *r, struct MHD_Connection *c) {
    const route *rt = route_of(r);
    switch (rt->id) {
    case R_HEALTH: return health(s, r, c);
    case R_METRICS: return metrics(s, r, c);
    case R_VERSION: return version(s, r, c);
    case R_MODELS: return models(s, r, c);
    case R_TOKENIZE: return tokenize(s, r, c);
    case R_DETOKENIZE: return detokenize(s, r, c);
    case R_COMPLETIONS:
    case R_CHAT: return generate(s, r, c);
    }
    return MHD_NO;
}

static bool append_body(pl_srv *s, pl_srv_req *r, const char *data, size_t n) {
    if (r->body_len + n > s->opt.max_body_bytes) return false;
    if (r->body_len + n + 1 > r->body_cap) {
        size_t cap = r->body_cap ? r->body_cap : 4096;
        while (cap < r->body_len + n + 1) cap *= 2;
        char *g = realloc(r->body, cap);
        if (!g) return false;
        r->body = g;
        r->body_cap = cap;
    }
    memcpy(r->body + r->body_len, data, n);
    r->body_len += n;
    r->body[r->body_len] = '\0';
    return true;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version_,
                                  const char *upload_data, size_t *upload_size, void **con_cls) {
    (void)version_;
    pl_srv *s = cls;
    pl_srv_req *r = *con_cls;
    if (!r) {
        if (!(r = pl_srv_req_create(s))) return MHD_NO;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        r->sock = ci ? ci->socket_context : NULL;
        r->conn = c;
        pl_srv_conn_attach(s, r->sock, r);
        snprintf(r->method, sizeof r->method, "%s", method);
        snprintf(r->path, sizeof r->path, "%.*s", (int)(sizeof r->path - 1), url);
        *con_cls = r;
        atomic_fetch_add(&s->active, 1);
        return headers_arrived(s, r, c, url, method);
    }
    if (*upload_size > 0) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (r->responded || r->has_pending) return MHD_YES; /* to be refused: drop it */
        if (!append_body(s, r, upload_data, n)) {
            r->too_large = true;
            return MHD_NO; /* a body past the limit with no Content-Length: close */
        }
        return MHD_YES;
    }
    if (r->responded) return MHD_YES;
    if (r->has_pending) return send_error(r, c, &r->pending);
    if (!r->processed) {
        r->processed = true;
        pl_srv_conn_busy(s, r->sock);
        return process(s, r, c);
    }
    return wait_or_answer(s, r, c); /* resumed */
}

static void client_address(struct MHD_Connection *c, char *buf, size_t cap) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    snprintf(buf, cap, "-");
    if (!ci || !ci->client_addr) return;
    const struct sockaddr *a = ci->client_addr;
    char host[64] = "?";
    int port = 0;
    if (a->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)a;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
        port = ntohs(in->sin_port);
    } else if (a->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in = (const struct sockaddr_in6 *)a;
        inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof host);
        port = ntohs(in->sin6_port);
    }
    snprintf(buf, cap, "%s:%d", host, port);
}

/* What the access log says of a request's choices, read under r->mu: a request that did not
 * finish is still being written by the stepping thread. */
typedef struct log_counts {
    size_t prompt, out;
    double ttft;       /* the first choice's; -1: none */
} log_counts;

static log_counts count_locked(const pl_srv_req *r) {
    log_counts k = {.ttft = -1};
    for (int i = 0; i < r->n_choices; i++) {
        const pl_srv_choice *ch = &r->choices[i];
        k.out += ch->n_out;
        if (i % r->n_per_prompt == 0) k.prompt += ch->n_prompt;
        if (ch->n_out && (k.ttft < 0 || ch->ttft_s < k.ttft)) k.ttft = ch->ttft_s;
    }
    return k;
}

static void access_log(pl_srv *s, pl_srv_req *r, struct MHD_Connection *c,
                       enum MHD_RequestTerminationCode toe, const log_counts *k, bool aborted,
                       bool slow) {
    if (!s->opt.access_log) return;
    char addr[96];
    client_address(c, addr, sizeof addr);
    char extra[96] = "";
    if (r->n_choices)
        snprintf(extra, sizeof extra, " prompt_tokens=%zu completion_tokens=%zu ttft_ms=%.1f",
                 k->prompt, k->out, k->ttft >= 0 ? k->ttft * 1e3 : 0.0);
    const char *note = slow ? " (aborted: the client read the stream too slowly)"
                       : aborted ? " (aborted: the client went away)"
                       : toe != MHD_REQUEST_TERMINATED_COMPLETED_OK ? " (connection closed early)"
                                                                    : "";
    pl_srv_log("INFO", "%s \"%s %s\" %d id=%s%s total_ms=%.1f%s", addr, r->method, r->path,
               r->status, r->id[0] ? r->id : "-", extra, (pl_srv_now() - r->t_start) * 1e3, note);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    pl_srv *s = cls;
    pl_srv_req *r = *con_cls;
    if (!r) return;
    *con_cls = NULL;
    pthread_mutex_lock(&r->mu);
    bool aborted = false;
    if (r->submitted && !r->done && !r->overflow) { /* a slow reader's is aborted already */
        aborted = pl_srv_req_abort_locked(r) > 0;
        if (aborted && !r->client_gone) atomic_fetch_add(&s->aborted_disconnect, 1);
    }
    bool slow = r->overflow, gone = r->client_gone;
    log_counts k = count_locked(r);
    pl_srv_conn *sock = r->sock;
    r->conn = NULL;
    r->sock = NULL; /* freed with the connection; nothing watches it any more */
    pthread_mutex_unlock(&r->mu);
    access_log(s, r, c, toe, &k, aborted || gone, slow);
    pl_srv_conn_idle(s, sock);
    atomic_fetch_add(&s->served, 1);
    atomic_fetch_sub(&s->active, 1);
    pl_srv_req_unref(r);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    pl_srv *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (ci) pl_srv_conn_opened(s, ci->connect_fd, socket_context);
    } else {
        pl_srv_conn_closed(s, socket_context);
    }
}

/* The request line arrived: the request's read deadline starts. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c) {
    (void)uri;
    pl_srv *s = cls;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    if (ci && ci->socket_context) pl_srv_conn_reading(s, ci->socket_context);
    return NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r')) msg[--n] = '\0';
    pl_srv_log("WARN", "libmicrohttpd: %s", msg);
}

bool pl_srv_http_start(pl_srv *s) {
    char port[16];
    snprintf(port, sizeof port, "%d", s->opt.port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV}, *ai = NULL;
    int rc = getaddrinfo(s->opt.host, port, &hints, &ai);
    if (rc != 0 || !ai) {
        pl_srv_log("ERROR", "--host %s: %s", s->opt.host, gai_strerror(rc));
        return false;
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ERROR_LOG | (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    s->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, s,
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s, /* first: it covers the other options */
        MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)(s->opt.http_threads > 1 ? s->opt.http_threads : 0),
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->opt.max_connections,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)s->opt.max_connections_per_ip,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->opt.timeout_keep_alive,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
        MHD_OPTION_URI_LOG_CALLBACK, on_uri, s,
        MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->daemon) {
        pl_srv_log("ERROR", "cannot listen on %s:%d (in use, or not an address of this machine)",
                   s->opt.host, s->opt.port);
        return false;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : s->opt.port;
    return true;
}

void pl_srv_http_stop(pl_srv *s) {
    if (s->daemon) MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
}
