/*
 * server/respond.c - response bodies and SSE chunks in OpenAI's shapes.
 *
 * Completions: {"id", "object": "text_completion", "created", "model", "choices": [{"index",
 * "text", "logprobs", "finish_reason", "stop_reason"}], "usage"}, logprobs as the legacy
 * {"tokens", "token_logprobs", "top_logprobs", "text_offset"}. Chat: "chat.completion" with
 * "message": {"role", "content"}, logprobs as {"content": [{"token", "logprob", "bytes",
 * "top_logprobs"}]}. Streams send "text_completion" / "chat.completion.chunk" objects as
 * `data: {...}` events: for chat a first delta with the role, then the text deltas, then one
 * with the finish reason per choice; with stream_options.include_usage every chunk carries
 * "usage": null and a last chunk with no choices carries the usage; then `data: [DONE]`.
 *
 * Choice i answers prompt i / n, sample i % n (OpenAI's order for a batch). A log-probability
 * of -inf (a token the model gives no chance) is written as -9999.0, as vLLM does: JSON has
 * no infinity.
 */
#include <stdlib.h>
#include <string.h>

#include "server/srv.h"

#define REAL_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(9))

const char *pl_srv_finish_name(pl_finish_reason r) {
    return r == PL_FINISH_STOP ? "stop" : r == PL_FINISH_LENGTH ? "length"
           : r == PL_FINISH_ABORT ? "abort" : r == PL_FINISH_OVERLOADED ? "overloaded"
           : r == PL_FINISH_ERROR ? "error" : "none";
}

static json_t *logprob_real(float lp) { return json_real(lp > -9999.0f ? (double)lp : -9999.0); }

/* jansson refuses text that is not UTF-8: the engine's never is, but a token string may be
 * cut anywhere by a caller; U+FFFD then. */
static json_t *text_json(const char *s, size_t n) {
    json_t *v = json_stringn(s, n);
    return v ? v : json_string("\xef\xbf\xbd");
}

/* Characters (code points) in s[0..n). */
static size_t chars_in(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

static json_t *bytes_json(const char *s) {
    json_t *a = json_array();
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        json_array_append_new(a, json_integer(*p));
    return a;
}

/* ---- logprobs ---------------------------------------------------------------------------- */

/* The position's token string: what the token added to the text (the engine's, so the
 * strings join to the text and text_offset indexes it), else its text alone. */
static const char *token_text(pl_srv *s, const pl_token_logprobs *e) {
    return e->text ? e->text : pl_srv_vocab_text(&s->vocab, e->token);
}

/* Legacy completions shape, appended to lists the caller made: one position. */
static void completion_lp_add(pl_srv *s, json_t *obj, const pl_token_logprobs *e, int max_top,
                              size_t *offset) {
    const char *tok = token_text(s, e);
    json_array_append_new(json_object_get(obj, "tokens"), text_json(tok, strlen(tok)));
    json_array_append_new(json_object_get(obj, "token_logprobs"), logprob_real(e->logprob));
    json_t *top = json_object();
    for (int k = 0; k < e->n_top && k < max_top; k++) {
        const char *t = pl_srv_vocab_text(&s->vocab, e->top[k].token);
        if (!json_object_get(top, t)) json_object_set_new(top, t, logprob_real(e->top[k].logprob));
    }
    json_array_append_new(json_object_get(obj, "top_logprobs"), top);
    json_array_append_new(json_object_get(obj, "text_offset"), json_integer((json_int_t)*offset));
    *offset += chars_in(tok, strlen(tok));
}

static json_t *completion_lp_new(void) {
    json_t *o = json_object();
    json_object_set_new(o, "tokens", json_array());
    json_object_set_new(o, "token_logprobs", json_array());
    json_object_set_new(o, "top_logprobs", json_array());
    json_object_set_new(o, "text_offset", json_array());
    return o;
}

/* The echoed prompt: its ids decoded (special tokens skipped, as the output's text is), and
 * where each id's part of that text begins (off: n_ids + 1 entries). Without a tokenizer
 * the text is empty. Caller frees both (NULL on failure). */
typedef struct echo_parts {
    char *text;
    size_t *off;
} echo_parts;

static echo_parts echo_of(pl_srv *s, const pl_srv_prompt *p) {
    echo_parts e = {.off = calloc(p->n_ids + 1, sizeof(size_t))};
    char *text = NULL;
    if (e.off && s->tok &&
        pl_tokenizer_decode_offsets(s->tok, p->ids, p->n_ids, PL_DECODE_SKIP_SPECIAL, &text,
                                    e.off) == PL_OK) {
        e.text = strdup(text);
        pl_free_text(text);
    } else if (e.off) {
        memset(e.off, 0, (p->n_ids + 1) * sizeof *e.off);
        e.text = strdup("");
    }
    if (!e.text) {
        free(e.off);
        e.off = NULL;
    }
    return e;
}

/* The prompt's positions (echo): the first has no logprob, as in OpenAI's echo; each token
 * string is its part of the echoed text. */
static void completion_lp_prompt(pl_srv *s, json_t *obj, const pl_srv_prompt *p,
                                 const echo_parts *ep, const pl_srv_logprobs *plp,
                                 int max_top, size_t *offset) {
    for (size_t i = 0; i < p->n_ids; i++) {
        const char *tok = ep->text + ep->off[i];
        size_t len = ep->off[i + 1] - ep->off[i];
        if (i > 0 && i - 1 < plp->n) {
            pl_token_logprobs e = plp->entries[i - 1];
            char *piece = strndup(tok, len);
            e.text = piece;
            if (piece) completion_lp_add(s, obj, &e, max_top, offset);
            free(piece);
            continue;
        }
        json_array_append_new(json_object_get(obj, "tokens"), text_json(tok, len));
        json_array_append_new(json_object_get(obj, "token_logprobs"), json_null());
        json_array_append_new(json_object_get(obj, "top_logprobs"), json_null());
        json_array_append_new(json_object_get(obj, "text_offset"), json_integer((json_int_t)*offset));
        *offset += chars_in(tok, len);
    }
}

static json_t *chat_lp_entry(pl_srv *s, const pl_token_logprobs *e) {
    const char *tok = token_text(s, e);
    json_t *o = json_object();
    json_object_set_new(o, "token", text_json(tok, strlen(tok)));
    json_object_set_new(o, "logprob", logprob_real(e->logprob));
    json_object_set_new(o, "bytes", bytes_json(tok));
    json_t *top = json_array();
    for (int k = 0; k < e->n_top; k++) {
        const char *t = pl_srv_vocab_text(&s->vocab, e->top[k].token);
        json_t *x = json_object();
        json_object_set_new(x, "token", text_json(t, strlen(t)));
        json_object_set_new(x, "logprob", logprob_real(e->top[k].logprob));
        json_object_set_new(x, "bytes", bytes_json(t));
        json_array_append_new(top, x);
    }
    json_object_set_new(o, "top_logprobs", top);
    return o;
}

static json_t *chat_lp_new(void) {
    json_t *o = json_object();
    json_object_set_new(o, "content", json_array());
    json_object_set_new(o, "refusal", json_null());
    return o;
}

/* ---- stop reasons, prompt logprobs, read replies -------------------------------------------- */

/* vLLM's stop_reason: the stop string or stop id that ended the choice; null for the end of
 * text or another reason. */
static json_t *stop_reason_json(const pl_srv_req *r, const pl_srv_choice *c) {
    const pl_sampling_params *sp = &r->rq.sp;
    if (c->reason != PL_FINISH_STOP) return json_null();
    if (c->stop_string >= 0 && (size_t)c->stop_string < sp->n_stop)
        return json_string(sp->stop[c->stop_string]);
    for (size_t k = 0; k < sp->n_stop_ids; k++)
        if (sp->stop_ids[k] == c->last_id) return json_integer(c->last_id);
    return json_null();
}

/* text: what the token added to the prompt's text (the position's own token, as echo shows
 * it), or NULL for its text alone (an alternative). */
static json_t *prompt_lp_entry(pl_srv *s, int32_t id, float lp, int rank, const char *text) {
    json_t *o = json_object();
    const char *t = text ? text : pl_srv_vocab_text(&s->vocab, id);
    json_object_set_new(o, "logprob", logprob_real(lp));
    json_object_set_new(o, "rank", json_integer(rank));
    json_object_set_new(o, "decoded_token", text_json(t, strlen(t)));
    return o;
}

/* vLLM's prompt_logprobs: null for the first prompt token, then per token {"<id>": {"logprob",
 * "rank", "decoded_token"}} for the token itself and the k most likely. */
static json_t *prompt_logprobs_json(pl_srv *s, const pl_srv_prompt *p, const pl_srv_logprobs *plp,
                                    int k) {
    json_t *a = json_array();
    for (size_t i = 0; i < p->n_ids; i++) {
        if (i == 0 || i - 1 >= plp->n) {
            json_array_append_new(a, json_null());
            continue;
        }
        const pl_token_logprobs *e = &plp->entries[i - 1];
        json_t *o = json_object();
        char key[16];
        snprintf(key, sizeof key, "%d", (int)e->token);
        json_object_set_new(o, key, prompt_lp_entry(s, e->token, e->logprob, e->rank, e->text));
        for (int j = 0; j < e->n_top && j < k; j++) {
            snprintf(key, sizeof key, "%d", (int)e->top[j].token);
            if (!json_object_get(o, key))
                json_object_set_new(o, key, prompt_lp_entry(s, e->top[j].token, e->top[j].logprob,
                                                             j + 1, NULL));
        }
        json_array_append_new(a, o);
    }
    return a;
}

bool pl_srv_reply_options(const pl_srv *s, const pl_srv_req *r, int i, pl_reply_options *out) {
    if (!r->read_reply) return false;
    pl_reply_options_default(out);
    out->tool_parser = r->tool_parser;
    out->reasoning_parser = s->opt.reasoning_parser;
    out->prompt = r->rq.prompts[0].text;
    uint64_t h = 1469598103934665603ull; /* the ids differ per request and choice */
    for (const char *c = r->id; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
    out->id_seed = h ^ ((uint64_t)i * 0x9e3779b97f4a7c15ull);
    return true;
}

static json_t *tool_call_json(int index, const char *id, const char *name, const char *args,
                              size_t args_len) {
    json_t *o = json_object(), *f = json_object();
    if (index >= 0) json_object_set_new(o, "index", json_integer(index));
    if (id) {
        json_object_set_new(o, "id", json_string(id));
        json_object_set_new(o, "type", json_string("function"));
        json_object_set_new(f, "name", text_json(name, strlen(name)));
    }
    json_object_set_new(f, "arguments", text_json(args, args_len));
    json_object_set_new(o, "function", f);
    return o;
}

/* ---- whole responses --------------------------------------------------------------------- */

json_t *pl_srv_usage_json(const pl_srv_req *r) {
    size_t prompt = 0, cached = 0, out = 0;
    for (int i = 0; i < r->n_choices; i++) {
        const pl_srv_choice *c = &r->choices[i];
        out += c->n_out;
        if (i % r->n_per_prompt == 0) { /* the prompt once, whatever n */
            prompt += c->n_prompt ? c->n_prompt : r->rq.prompts[c->prompt].n_ids;
            cached += c->n_cached;
        }
    }
    json_t *u = json_object();
    json_object_set_new(u, "prompt_tokens", json_integer((json_int_t)prompt));
    json_object_set_new(u, "completion_tokens", json_integer((json_int_t)out));
    json_object_set_new(u, "total_tokens", json_integer((json_int_t)(prompt + out)));
    json_t *d = json_object();
    json_object_set_new(d, "cached_tokens", json_integer((json_int_t)cached));
    json_object_set_new(u, "prompt_tokens_details", d);
    return u;
}

static json_t *envelope(pl_srv *s, const pl_srv_req *r, const char *object) {
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(r->id));
    json_object_set_new(o, "object", json_string(object));
    json_object_set_new(o, "created", json_integer((json_int_t)r->created));
    json_object_set_new(o, "model", json_string(s->model_name));
    return o;
}

static json_t *completion_choice(pl_srv *s, const pl_srv_req *r, int i) {
    const pl_srv_choice *c = &r->choices[i];
    const pl_srv_prompt *p = &r->rq.prompts[c->prompt];
    json_t *o = json_object();
    json_object_set_new(o, "index", json_integer(i));
    /* echo: the prompt as the model read it (its ids decoded), which its tokens index */
    echo_parts ep = r->rq.echo ? echo_of(s, p) : (echo_parts){0};
    const char *prefix = ep.text;
    size_t plen = prefix ? strlen(prefix) : 0;
    char *text = malloc(plen + c->text_len + 1);
    if (text) {
        if (plen) memcpy(text, prefix, plen);
        if (c->text_len) memcpy(text + plen, c->text, c->text_len);
        text[plen + c->text_len] = '\0';
    }
    json_object_set_new(o, "text", text ? text_json(text, plen + c->text_len) : json_string(""));
    free(text);
    if (r->rq.sp.logprobs >= 0) {
        json_t *lp = completion_lp_new();
        size_t offset = 0;
        if (r->rq.echo && ep.text) {
            const pl_srv_choice *first = &r->choices[c->prompt * r->n_per_prompt];
            completion_lp_prompt(s, lp, p, &ep, &first->prompt_lp,
                                 r->rq.sp.logprobs, &offset);
        }
        for (size_t k = 0; k < c->lp.n; k++)
            completion_lp_add(s, lp, &c->lp.entries[k], r->rq.sp.logprobs, &offset);
        json_object_set_new(o, "logprobs", lp);
    } else {
        json_object_set_new(o, "logprobs", json_null());
    }
    json_object_set_new(o, "finish_reason", json_string(pl_srv_finish_name(c->reason)));
    json_object_set_new(o, "stop_reason", stop_reason_json(r, c));
    if (r->rq.prompt_logprobs >= 0) {
        const pl_srv_choice *first = &r->choices[c->prompt * r->n_per_prompt];
        json_object_set_new(o, "prompt_logprobs",
                            prompt_logprobs_json(s, p, &first->prompt_lp, r->rq.prompt_logprobs));
    }
    free(ep.text);
    free(ep.off);
    return o;
}

static json_t *chat_choice(pl_srv *s, const pl_srv_req *r, int i) {
    const pl_srv_choice *c = &r->choices[i];
    json_t *o = json_object();
    json_object_set_new(o, "index", json_integer(i));
    json_t *msg = json_object();
    json_object_set_new(msg, "role", json_string("assistant"));
    pl_reply_options ro;
    pl_reply *rep = NULL;
    if (pl_srv_reply_options(s, r, i, &ro) &&
        pl_reply_parse(c->text ? c->text : "", c->text_len, &ro, &rep) != PL_OK)
        rep = NULL; /* out of memory: the text as it is */
    if (rep) {
        json_object_set_new(msg, "content", rep->content ? text_json(rep->content,
                                                                     strlen(rep->content))
                                                         : json_null());
        if (s->opt.reasoning_parser)
            json_object_set_new(msg, "reasoning_content",
                                rep->reasoning_content
                                    ? text_json(rep->reasoning_content,
                                                strlen(rep->reasoning_content))
                                    : json_null());
        size_t n = rep->n_tool_calls > 1 && !r->rq.parallel_tool_calls ? 1 : rep->n_tool_calls;
        if (n) {
            json_t *calls = json_array();
            for (size_t k = 0; k < n; k++) {
                const pl_tool_call *t = &rep->tool_calls[k];
                json_array_append_new(calls, tool_call_json(-1, t->id, t->name, t->arguments,
                                                            strlen(t->arguments)));
            }
            json_object_set_new(msg, "tool_calls", calls);
        }
    } else {
        json_object_set_new(msg, "content", text_json(c->text ? c->text : "", c->text_len));
    }
    json_object_set_new(o, "message", msg);
    if (r->rq.chat_logprobs) {
        json_t *lp = chat_lp_new();
        for (size_t k = 0; k < c->lp.n; k++)
            json_array_append_new(json_object_get(lp, "content"), chat_lp_entry(s, &c->lp.entries[k]));
        json_object_set_new(o, "logprobs", lp);
    } else {
        json_object_set_new(o, "logprobs", json_null());
    }
    bool called = rep && rep->n_tool_calls && c->reason == PL_FINISH_STOP;
    json_object_set_new(o, "finish_reason",
                        json_string(called ? "tool_calls" : pl_srv_finish_name(c->reason)));
    json_object_set_new(o, "stop_reason", stop_reason_json(r, c));
    pl_reply_free(rep);
    return o;
}

json_t *pl_srv_response_json(pl_srv *s, pl_srv_req *r) {
    bool chat = r->kind == PL_SRV_CHAT;
    json_t *o = envelope(s, r, chat ? "chat.completion" : "text_completion");
    json_t *choices = json_array();
    for (int i = 0; i < r->n_choices; i++)
        json_array_append_new(choices, chat ? chat_choice(s, r, i) : completion_choice(s, r, i));
    json_object_set_new(o, "choices", choices);
    json_object_set_new(o, "usage", pl_srv_usage_json(r));
    if (chat && r->rq.prompt_logprobs >= 0) /* vLLM puts a chat's at the top */
        json_object_set_new(o, "prompt_logprobs",
                            prompt_logprobs_json(s, &r->rq.prompts[0], &r->choices[0].prompt_lp,
                                                 r->rq.prompt_logprobs));
    return o;
}

/* ---- streams ----------------------------------------------------------------------------- */

bool pl_srv_out_append(pl_srv_req *r, const char *p, size_t n) {
    if (r->out_len + n > r->out_cap) {
        size_t cap = r->out_cap ? r->out_cap : 1024;
        while (cap < r->out_len + n) cap *= 2;
        char *g = realloc(r->out, cap);
        if (!g) return false;
        r->out = g;
        r->out_cap = cap;
    }
    memcpy(r->out + r->out_len, p, n);
    r->out_len += n;
    return true;
}

bool pl_srv_out_data(pl_srv_req *r, json_t *v) {
    char *text = json_dumps(v, REAL_FLAGS);
    json_decref(v);
    if (!text) return false;
    bool ok = pl_srv_out_append(r, "data: ", 6) && pl_srv_out_append(r, text, strlen(text)) &&
              pl_srv_out_append(r, "\n\n", 2);
    free(text);
    return ok;
}

/* One chunk holding one choice. */
static bool chunk(pl_srv *s, pl_srv_req *r, json_t *choice) {
    bool chat = r->kind == PL_SRV_CHAT;
    json_t *o = envelope(s, r, chat ? "chat.completion.chunk" : "text_completion");
    json_t *choices = json_array();
    json_array_append_new(choices, choice);
    json_object_set_new(o, "choices", choices);
    if (r->rq.include_usage) json_object_set_new(o, "usage", json_null());
    return pl_srv_out_data(r, o);
}

static json_t *delta_choice(const pl_srv_req *r, int index, const char *text, size_t len,
                            bool role) {
    json_t *c = json_object();
    json_object_set_new(c, "index", json_integer(index));
    if (r->kind == PL_SRV_CHAT) {
        json_t *d = json_object();
        if (role) json_object_set_new(d, "role", json_string("assistant"));
        if (text) json_object_set_new(d, "content", text_json(text, len));
        json_object_set_new(c, "delta", d);
    } else {
        json_object_set_new(c, "text", text_json(text ? text : "", len));
    }
    json_object_set_new(c, "logprobs", json_null());
    json_object_set_new(c, "finish_reason", json_null());
    if (r->kind == PL_SRV_COMPLETION) json_object_set_new(c, "stop_reason", json_null());
    return c;
}

/* Before a choice's first text: chat's role delta, or the echoed prompt. */
static bool choice_start(pl_srv *s, pl_srv_req *r, pl_srv_choice *ch, int index) {
    if (ch->role_sent) return true;
    ch->role_sent = true;
    if (r->kind == PL_SRV_CHAT) return chunk(s, r, delta_choice(r, index, "", 0, true));
    if (!r->rq.echo) return true;
    const pl_srv_prompt *p = &r->rq.prompts[ch->prompt];
    echo_parts ep = echo_of(s, p);
    if (!ep.text) return false;
    json_t *c = delta_choice(r, index, ep.text, strlen(ep.text), false);
    ch->text_offset += chars_in(ep.text, strlen(ep.text));
    if (r->rq.sp.logprobs >= 0) { /* the prompt's logprobs are not streamed: positions only */
        json_t *lp = completion_lp_new();
        size_t offset = 0;
        pl_srv_logprobs none = {0};
        completion_lp_prompt(s, lp, p, &ep, &none, 0, &offset);
        json_object_set_new(c, "logprobs", lp);
    }
    free(ep.text);
    free(ep.off);
    return chunk(s, r, c);
}

/* A choice that ended without an answer (backend error, shutdown, dropped from a full
 * queue): the stream says so with an error event. */
static bool choice_failed(pl_srv_req *r, const pl_srv_choice *ch) {
    pl_srv_error err;
    if (ch->reason == PL_FINISH_ERROR) {
        pl_srv_fail(&err, 500, NULL, "the backend failed while generating this choice");
    } else if (ch->reason == PL_FINISH_OVERLOADED) {
        pl_srv_fail(&err, 503, NULL, "dropped from the full waiting queue (overflow policy "
                    "drop-oldest)");
        err.code = "overloaded";
    } else {
        pl_srv_fail(&err, 503, NULL, "aborted: the server is shutting down");
        err.code = "aborted";
    }
    return pl_srv_stream_error(r, &err);
}

static json_t *event_logprobs(pl_srv *s, pl_srv_req *r, pl_srv_choice *ch,
                              const pl_srv_event *ev) {
    if (!ev || !ev->has_logprobs || ev->token < 0) return NULL;
    json_t *lp;
    if (r->kind == PL_SRV_CHAT) {
        lp = chat_lp_new();
        json_array_append_new(json_object_get(lp, "content"), chat_lp_entry(s, &ev->lp));
    } else {
        lp = completion_lp_new();
        completion_lp_add(s, lp, &ev->lp, r->rq.sp.logprobs, &ch->text_offset);
    }
    return lp;
}

/* A read reply's text (end: the rest of it) as chunks, one per part: content,
 * reasoning_content, and tool calls the way OpenAI streams them (a call's id, type and name
 * with empty arguments, then its arguments in pieces). The event's logprobs ride on the first
 * chunk, or on an empty delta when the text was held back. */
static bool reply_chunks(pl_srv *s, pl_srv_req *r, pl_srv_choice *ch, int index, const char *text,
                         size_t len, bool end, const pl_srv_event *ev) {
    if (!ch->reply) {
        pl_reply_options o;
        pl_srv_reply_options(s, r, index, &o);
        if (pl_reply_parser_create(&o, &ch->reply) != PL_OK) return false;
    }
    const pl_reply_delta *d;
    size_t n;
    if (pl_reply_parser_feed(ch->reply, text, len, end, &d, &n) != PL_OK) return false;
    json_t *lp = event_logprobs(s, r, ch, ev);
    for (size_t i = 0; i < n; i++) {
        bool call = d[i].part == PL_REPLY_TOOL_CALL;
        if (call && d[i].tool_index > 0 && !r->rq.parallel_tool_calls) continue;
        json_t *c;
        if (call && d[i].tool_id) {
            c = delta_choice(r, index, NULL, 0, false);
            json_t *calls = json_array();
            json_array_append_new(calls, tool_call_json(d[i].tool_index, d[i].tool_id,
                                                        d[i].tool_name, "", 0));
            json_object_set_new(json_object_get(c, "delta"), "tool_calls", calls);
            if (!chunk(s, r, c)) return json_decref(lp), false;
            if (d[i].len == 0) continue;
        }
        c = delta_choice(r, index, NULL, 0, false);
        json_t *delta = json_object_get(c, "delta");
        if (call) {
            json_t *calls = json_array();
            json_array_append_new(calls, tool_call_json(d[i].tool_index, NULL, NULL, d[i].text,
                                                        d[i].len));
            json_object_set_new(delta, "tool_calls", calls);
        } else {
            json_object_set_new(delta, d[i].part == PL_REPLY_CONTENT ? "content" : "reasoning_content",
                                text_json(d[i].text, d[i].len));
        }
        if (lp) json_object_set_new(c, "logprobs", lp), lp = NULL;
        if (!chunk(s, r, c)) return json_decref(lp), false;
    }
    if (!lp) return true;
    json_t *c = delta_choice(r, index, NULL, 0, false);
    json_object_set_new(c, "logprobs", lp);
    return chunk(s, r, c);
}

bool pl_srv_stream_event(pl_srv *s, pl_srv_req *r, const pl_srv_event *ev) {
    pl_srv_choice *ch = &r->choices[ev->choice];
    if (ev->is_finish) {
        if (ch->finish_sent) return true;
        ch->finish_sent = true;
        if (ch->reason != PL_FINISH_STOP && ch->reason != PL_FINISH_LENGTH)
            return choice_failed(r, ch);
        if (!choice_start(s, r, ch, ev->choice)) return false;
        if (r->read_reply && !reply_chunks(s, r, ch, ev->choice, "", 0, true, NULL)) return false;
        bool called = ch->reply && pl_reply_parser_tool_calls(ch->reply) > 0 &&
                      ch->reason == PL_FINISH_STOP;
        json_t *c = delta_choice(r, ev->choice, NULL, 0, false);
        if (r->kind == PL_SRV_COMPLETION) json_object_set_new(c, "text", json_string(""));
        json_object_set_new(c, "finish_reason",
                            json_string(called ? "tool_calls" : pl_srv_finish_name(ch->reason)));
        json_object_set_new(c, "stop_reason", stop_reason_json(r, ch));
        return chunk(s, r, c);
    }
    if (!choice_start(s, r, ch, ev->choice)) return false;
    if (r->read_reply) return reply_chunks(s, r, ch, ev->choice, ev->text, ev->text_len, false, ev);
    json_t *c = delta_choice(r, ev->choice, ev->text, ev->text_len, false);
    json_t *lp = event_logprobs(s, r, ch, ev);
    if (lp) json_object_set_new(c, "logprobs", lp);
    return chunk(s, r, c);
}

bool pl_srv_stream_error(pl_srv_req *r, const pl_srv_error *err) {
    return pl_srv_out_data(r, pl_srv_error_json(err));
}

bool pl_srv_stream_done(pl_srv *s, pl_srv_req *r) {
    if (r->rq.include_usage) {
        json_t *o = envelope(s, r, r->kind == PL_SRV_CHAT ? "chat.completion.chunk"
                                                          : "text_completion");
        json_object_set_new(o, "choices", json_array());
        json_object_set_new(o, "usage", pl_srv_usage_json(r));
        if (!pl_srv_out_data(r, o)) return false;
    }
    static const char done[] = "data: [DONE]\n\n";
    return pl_srv_out_append(r, done, sizeof done - 1);
}
