/*
 * server/request.c - request bodies into sampling parameters, prompts and chat options; and
 * errors in OpenAI's shape.
 *
 * A body is untrusted input (tests/fuzz/fuzz_server.c feeds it anything). Every sampling field
 * is set through pl_sampling_params_set_json, so its range and its message ("sampling.top_p =
 * 0: must be in (0, 1]") are the library's: the server defines no sampling field itself, only
 * the mapping from OpenAI's names where they differ (chat's logprobs/top_logprobs,
 * max_completion_tokens) and the fields that are not sampling (prompt, stream, echo, ...).
 * JSON null means "not given", as OpenAI's clients send it. Unknown fields are ignored, as
 * vLLM does, so clients that send extra fields keep working.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv.h"

/* ---- errors ------------------------------------------------------------------------------ */

bool pl_srv_fail(pl_srv_error *err, int status, const char *param, const char *fmt, ...) {
    err->status = status;
    err->type = status >= 500 ? "server_error" : "invalid_request_error";
    err->code = NULL;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return false;
}

json_t *pl_srv_error_json(const pl_srv_error *err) {
    json_t *e = json_object();
    json_t *msg = json_string(err->message);
    json_object_set_new(e, "message", msg ? msg : json_string("(message not valid UTF-8)"));
    json_object_set_new(e, "type", json_string(err->type ? err->type : "server_error"));
    json_object_set_new(e, "param", err->param[0] ? json_string(err->param) : json_null());
    json_object_set_new(e, "code", err->code ? json_string(err->code) : json_null());
    json_t *o = json_object();
    json_object_set_new(o, "error", e);
    return o;
}

/* "sampling.top_p = 0: ..." (the message with the library's names) names the field: the
 * request's field of that name, vLLM's where the field has one (stop_token_ids). */
static void param_from_message(pl_srv_error *err, const char *msg) {
    const char *p = strstr(msg, "sampling.");
    if (!p) return;
    p += strlen("sampling.");
    size_t n = strcspn(p, " :=[");
    if (n == 0 || n >= sizeof err->param) return;
    memcpy(err->param, p, n);
    err->param[n] = '\0';
    size_t n_aliases;
    const pl_field_alias *a = pl_sampling_params_aliases(&n_aliases);
    for (size_t i = 0; i < n_aliases; i++)
        if (!strcmp(a[i].name, err->param) && strlen(a[i].alias) < sizeof err->param) {
            strcpy(err->param, a[i].alias);
            break;
        }
}

/* A setter's refusal, named as the request's JSON names it: "key: message", or the message
 * alone when it starts with the key already. */
static bool refused(pl_srv_error *err, const char *key) {
    const char *msg = pl_last_error_as(PL_NAMING_JSON);
    size_t k = strlen(key);
    if (!strncmp(msg, key, k) && strchr(" :=[", msg[k]))
        return pl_srv_fail(err, 400, key, "%s", msg);
    return pl_srv_fail(err, 400, key, "%s: %s", key, msg);
}

bool pl_srv_fail_status(pl_srv_error *err, pl_status s, const char *param) {
    const char *named = pl_last_error(); /* for the param: the library's names */
    const char *msg = pl_last_error_as(PL_NAMING_JSON);
    switch (s) {
    case PL_ERR_QUEUE_FULL:
        pl_srv_fail(err, 429, param, "%s", msg);
        err->type = "rate_limit_error";
        err->code = "queue_full";
        break;
    case PL_ERR_OUT_OF_MEMORY:
    case PL_ERR_BACKEND:
    case PL_ERR_IO:
        pl_srv_fail(err, 500, param, "%s", msg);
        break;
    case PL_ERR_NOT_FOUND: /* no chat template, an unknown field: the request's fault */
    default:
        pl_srv_fail(err, 400, param, "%s", msg);
        break;
    }
    if (!err->param[0]) param_from_message(err, named);
    return false;
}

/* ---- helpers ----------------------------------------------------------------------------- */

static bool want_bool(json_t *v, const char *key, bool *out, pl_srv_error *err) {
    if (!json_is_boolean(v)) return pl_srv_fail(err, 400, key, "%s: expected true or false", key);
    *out = json_is_true(v);
    return true;
}

/* Sets sampling field `name` from v (JSON text through the library's setter). */
static bool set_sampling(pl_sampling_params *sp, const char *name, const char *key, json_t *v,
                         pl_srv_error *err) {
    char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!text) return pl_srv_fail(err, 500, key, "%s: out of memory", key);
    pl_status s = pl_sampling_params_set_json(sp, name, text);
    free(text);
    if (s != PL_OK) return refused(err, key);
    return true;
}

/* Chat options by name. tools and chat_template_kwargs are JSON text in the options (parsed
 * per render), so they are given the value's text; the others are set from the value. */
static bool set_chat(pl_chat_options *o, const char *name, const char *key, json_t *v,
                     pl_srv_error *err) {
    char *text = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!text) return pl_srv_fail(err, 500, key, "%s: out of memory", key);
    bool as_text = !strcmp(name, "tools") || !strcmp(name, "chat_template_kwargs");
    pl_status s = as_text ? pl_chat_options_set(o, name, text) : pl_chat_options_set_json(o, name, text);
    free(text);
    if (s != PL_OK) return refused(err, key);
    return true;
}

/* ids: an array of integers in [0, 2^31). */
static bool ids_of(json_t *a, const char *key, int32_t **out, size_t *out_n, pl_srv_error *err) {
    size_t n = json_array_size(a);
    if (n == 0) return pl_srv_fail(err, 400, key, "%s: an empty list of token ids", key);
    int32_t *ids = malloc(n * sizeof *ids);
    if (!ids) return pl_srv_fail(err, 500, key, "%s: out of memory", key);
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(a, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 ||
            json_integer_value(x) > INT32_MAX) {
            free(ids);
            return pl_srv_fail(err, 400, key, "%s[%zu]: a token id must be an integer in [0, %d]",
                               key, i, INT32_MAX);
        }
        ids[i] = (int32_t)json_integer_value(x);
    }
    *out = ids;
    *out_n = n;
    return true;
}

/* "" is allowed: it is BOS alone (as vLLM and llama2.c generate from BOS); a prompt that is
 * no token at all is refused once tokenized. */
static bool prompt_text(json_t *v, const char *key, pl_srv_prompt *p, pl_srv_error *err) {
    p->text = strdup(json_string_value(v));
    if (!p->text) return pl_srv_fail(err, 500, key, "out of memory");
    return true;
}

/* "prompt": a string, a list of ids, or a batch (a list of strings, or of id lists). */
static bool parse_prompt(pl_srv_request *r, json_t *v, const pl_srv_limits *lim,
                         pl_srv_error *err) {
    const char *key = "prompt";
    if (json_is_string(v)) {
        r->prompts = calloc(1, sizeof *r->prompts);
        if (!r->prompts) return pl_srv_fail(err, 500, key, "out of memory");
        r->n_prompts = 1;
        return prompt_text(v, key, &r->prompts[0], err);
    }
    if (!json_is_array(v) || json_array_size(v) == 0)
        return pl_srv_fail(err, 400, key,
                           "prompt: expected a string, a list of token ids, or a non-empty list "
                           "of either");
    json_t *first = json_array_get(v, 0);
    if (json_is_integer(first)) {
        r->prompts = calloc(1, sizeof *r->prompts);
        if (!r->prompts) return pl_srv_fail(err, 500, key, "out of memory");
        r->n_prompts = 1;
        return ids_of(v, key, &r->prompts[0].ids, &r->prompts[0].n_ids, err);
    }
    size_t n = json_array_size(v);
    if (n > (size_t)lim->max_choices)
        return pl_srv_fail(err, 400, key, "prompt: %zu prompts in one request; at most %d", n,
                           lim->max_choices);
    r->prompts = calloc(n, sizeof *r->prompts);
    if (!r->prompts) return pl_srv_fail(err, 500, key, "out of memory");
    r->n_prompts = n;
    bool strings = json_is_string(first);
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(v, i);
        char k[32];
        snprintf(k, sizeof k, "prompt[%zu]", i);
        if (strings ? !json_is_string(x) : !json_is_array(x))
            return pl_srv_fail(err, 400, key, "%s: a batch holds only strings or only lists of "
                               "token ids", k);
        if (strings ? !prompt_text(x, k, &r->prompts[i], err)
                    : !ids_of(x, k, &r->prompts[i].ids, &r->prompts[i].n_ids, err))
            return false;
    }
    return true;
}

/* OpenAI's content: a string, null, or a list of text parts (the library joins them). */
static bool check_content(json_t *msg, size_t i, pl_srv_error *err) {
    json_t *c = json_object_get(msg, "content");
    if (!c || json_is_string(c) || json_is_null(c)) return true;
    char key[48];
    snprintf(key, sizeof key, "messages[%zu].content", i);
    if (!json_is_array(c))
        return pl_srv_fail(err, 400, key, "%s: expected a string, null or a list of parts", key);
    for (size_t k = 0; k < json_array_size(c); k++) {
        json_t *part = json_array_get(c, k);
        json_t *type = json_object_get(part, "type"), *t = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type) ||
            strcmp(json_string_value(type), "text") != 0 || !json_is_string(t))
            return pl_srv_fail(err, 400, key, "%s[%zu]: only parts {\"type\": \"text\", \"text\": "
                               "...} are supported", key, k);
    }
    return true;
}

/* "messages": a non-empty list of objects with a string role; kept as JSON text (the library
 * brings OpenAI's shapes, content null or as parts, into the template's). */
static bool parse_messages(json_t *v, char **out, pl_srv_error *err) {
    if (!json_is_array(v) || json_array_size(v) == 0)
        return pl_srv_fail(err, 400, "messages", "messages: expected a non-empty list");
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *m = json_array_get(v, i);
        char key[48];
        snprintf(key, sizeof key, "messages[%zu]", i);
        if (!json_is_object(m)) return pl_srv_fail(err, 400, "messages", "%s: expected an object", key);
        if (!json_is_string(json_object_get(m, "role")))
            return pl_srv_fail(err, 400, "messages", "%s.role: expected a string", key);
        if (!check_content(m, i, err)) return false;
    }
    *out = json_dumps(v, JSON_COMPACT);
    if (!*out) return pl_srv_fail(err, 500, "messages", "out of memory");
    return true;
}

/* ---- the fields ---------------------------------------------------------------------------- */

#define COMPLETION (1u << PL_SRV_COMPLETION)
#define CHAT (1u << PL_SRV_CHAT)
#define BOTH (COMPLETION | CHAT)

/* Sampling fields whose OpenAI name is the library's. */
static const char *const SAMPLING_SAME[] = {
    "temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
    "repetition_penalty", "min_tokens", "ignore_eos", "priority", "seed", "n",
    "skip_special_tokens", "include_stop_str_in_output", "logit_bias", "prompt_logprobs",
};

/* "stop": a string or a list of them; an empty string stops nothing and is dropped (OpenAI's
 * clients send stop: [""]; the library refuses empty stop strings). */
static bool set_stop(pl_sampling_params *sp, json_t *v, pl_srv_error *err) {
    json_t *keep = json_array();
    if (!keep) return pl_srv_fail(err, 500, "stop", "out of memory");
    bool one = json_is_string(v);
    if (one || json_is_array(v)) {
        for (size_t i = 0; i < (one ? 1 : json_array_size(v)); i++) {
            json_t *x = one ? v : json_array_get(v, i);
            if (!json_is_string(x) || json_string_length(x) > 0) json_array_append(keep, x);
        }
    }
    bool ok = set_sampling(sp, "stop", "stop", one || json_is_array(v) ? keep : v, err);
    json_decref(keep);
    return ok;
}

typedef struct parse_state {
    pl_srv_request *r;
    const pl_srv_limits *lim;
    json_t *max_tokens, *max_completion_tokens, *top_logprobs, *stream_options, *tool_choice;
    json_t *tools;
} parse_state;

/* A constraint on the output from request field `param` (one per request): the sampling
 * field `name` set from v. */
static bool constrain(pl_srv_request *r, const char *param, const char *name, json_t *v,
                      pl_srv_error *err) {
    if (r->constraint_param)
        return pl_srv_fail(err, 400, param, "%s and %s both constrain the output: give one",
                           r->constraint_param, param);
    r->constraint_param = param;
    return set_sampling(&r->sp, name, param, v, err);
}

/* JSON text or a JSON value (vLLM takes both for a schema): the value. New reference. */
static json_t *schema_value(json_t *v) {
    if (!json_is_string(v)) return json_incref(v);
    json_t *parsed = json_loads(json_string_value(v), JSON_DECODE_ANY, NULL);
    return parsed ? parsed : json_incref(v);
}

/* OpenAI's response_format: text, json_object, or json_schema {name, schema, strict}. */
static bool response_format(pl_srv_request *r, json_t *v, pl_srv_error *err) {
    const char *key = "response_format";
    json_t *t = json_object_get(v, "type");
    const char *type = json_is_object(v) ? json_string_value(t) : NULL;
    if (type && !strcmp(type, "text")) return true;
    if (type && !strcmp(type, "json_object")) {
        json_t *any = json_pack("{s:s, s:b}", "type", "object", "additionalProperties", 1);
        bool ok = any && constrain(r, key, "json_schema", any, err);
        json_decref(any);
        return ok || (any ? false : pl_srv_fail(err, 500, key, "out of memory"));
    }
    if (type && !strcmp(type, "json_schema")) {
        json_t *js = json_object_get(v, "json_schema");
        json_t *schema = json_object_get(js, "schema");
        if (!json_is_object(js))
            return pl_srv_fail(err, 400, key, "response_format.json_schema: expected an object "
                               "{\"name\", \"schema\", \"strict\"}");
        if (schema && !json_is_object(schema))
            return pl_srv_fail(err, 400, key, "response_format.json_schema.schema: expected a "
                               "JSON Schema object");
        json_t *any = schema ? json_incref(schema) : json_object(); /* no schema: any JSON */
        bool ok = constrain(r, key, "json_schema", any, err);
        json_decref(any);
        return ok;
    }
    return pl_srv_fail(err, 400, key, "response_format: type must be \"text\", \"json_object\" "
                       "or \"json_schema\"");
}

/* vLLM's structured_outputs: {"json" | "regex" | "choice" | "grammar" | "json_object"}. */
static bool structured_outputs(pl_srv_request *r, json_t *v, pl_srv_error *err) {
    const char *key = "structured_outputs";
    if (!json_is_object(v)) return pl_srv_fail(err, 400, key, "%s: expected an object", key);
    static const char *const names[][2] = {{"json", "json_schema"}, {"regex", "regex"},
                                           {"choice", "choice"}, {"grammar", "grammar"}};
    for (size_t i = 0; i < 4; i++) {
        json_t *x = json_object_get(v, names[i][0]);
        if (!x || json_is_null(x)) continue;
        json_t *val = i == 0 ? schema_value(x) : json_incref(x);
        bool ok = constrain(r, key, names[i][1], val, err);
        json_decref(val);
        if (!ok) return false;
    }
    if (json_is_true(json_object_get(v, "json_object"))) {
        json_t *rf = json_pack("{s:s}", "type", "json_object");
        bool ok = rf ? response_format(r, rf, err) : pl_srv_fail(err, 500, key, "out of memory");
        json_decref(rf);
        if (!ok) return false;
    }
    json_t *st = json_object_get(v, "structural_tag");
    if (st && !json_is_null(st))
        return pl_srv_fail(err, 400, key, "structured_outputs.structural_tag is not supported");
    return true;
}

static bool field(parse_state *ps, const char *key, json_t *v, pl_srv_error *err) {
    pl_srv_request *r = ps->r;
    unsigned kind = 1u << r->kind;
    if (!strcmp(key, "skip_special_tokens")) r->has_skip_special = true;
    for (size_t i = 0; i < sizeof SAMPLING_SAME / sizeof SAMPLING_SAME[0]; i++)
        if (!strcmp(key, SAMPLING_SAME[i])) return set_sampling(&r->sp, key, key, v, err);
    if (!strcmp(key, "model")) {
        if (!json_is_string(v)) return pl_srv_fail(err, 400, key, "model: expected a string");
        r->model = strdup(json_string_value(v));
        return r->model ? true : pl_srv_fail(err, 500, key, "out of memory");
    }
    if (!strcmp(key, "stream")) return want_bool(v, key, &r->stream, err);
    if (!strcmp(key, "stream_options")) {
        if (!json_is_object(v)) return pl_srv_fail(err, 400, key, "stream_options: expected an object");
        ps->stream_options = v;
        json_t *u = json_object_get(v, "include_usage");
        return !u || json_is_null(u) || want_bool(u, "stream_options.include_usage",
                                                  &r->include_usage, err);
    }
    if (!strcmp(key, "stop")) return set_stop(&r->sp, v, err);
    if (!strcmp(key, "max_tokens")) return ps->max_tokens = v, true;
    if (!strcmp(key, "stop_token_ids")) return set_sampling(&r->sp, "stop_ids", key, v, err);
    if (!strcmp(key, "response_format")) return response_format(r, v, err);
    if (!strcmp(key, "structured_outputs")) return structured_outputs(r, v, err);
    if (!strcmp(key, "guided_json")) {
        json_t *val = schema_value(v);
        bool ok = constrain(r, "guided_json", "json_schema", val, err);
        json_decref(val);
        return ok;
    }
    if (!strcmp(key, "guided_regex")) return constrain(r, "guided_regex", "regex", v, err);
    if (!strcmp(key, "guided_choice")) return constrain(r, "guided_choice", "choice", v, err);
    if (!strcmp(key, "guided_grammar")) return constrain(r, "guided_grammar", "grammar", v, err);
    if (kind == COMPLETION) {
        if (!strcmp(key, "prompt")) return parse_prompt(r, v, ps->lim, err);
        if (!strcmp(key, "echo")) return want_bool(v, key, &r->echo, err);
        if (!strcmp(key, "add_special_tokens")) return want_bool(v, key, &r->add_special_tokens, err);
        if (!strcmp(key, "logprobs")) return set_sampling(&r->sp, "logprobs", key, v, err);
        if (!strcmp(key, "suffix")) return pl_srv_fail(err, 400, key, "suffix is not supported");
        if (!strcmp(key, "best_of")) {
            if (json_is_integer(v) && json_integer_value(v) == 1) return true;
            return pl_srv_fail(err, 400, key, "best_of is not supported (only 1)");
        }
        return true;
    }
    /* chat */
    if (!strcmp(key, "messages")) return parse_messages(v, &r->messages_json, err);
    if (!strcmp(key, "max_completion_tokens")) return ps->max_completion_tokens = v, true;
    if (!strcmp(key, "logprobs")) return want_bool(v, key, &r->chat_logprobs, err);
    if (!strcmp(key, "top_logprobs")) return ps->top_logprobs = v, true;
    if (!strcmp(key, "tools")) {
        if (!json_is_array(v)) return pl_srv_fail(err, 400, key, "tools: expected a list");
        ps->tools = v;
        return true;
    }
    if (!strcmp(key, "tool_choice")) return ps->tool_choice = v, true;
    if (!strcmp(key, "parallel_tool_calls")) return want_bool(v, key, &r->parallel_tool_calls, err);
    if (!strcmp(key, "chat_template_kwargs")) {
        if (!json_is_object(v)) return pl_srv_fail(err, 400, key, "%s: expected an object", key);
        return set_chat(&r->chat, key, key, v, err);
    }
    if (!strcmp(key, "add_generation_prompt")) return set_chat(&r->chat, key, key, v, err);
    if (!strcmp(key, "chat_template")) {
        if (!json_is_string(v)) return pl_srv_fail(err, 400, key, "%s: expected a string", key);
        return set_chat(&r->chat, key, key, v, err);
    }
    return true;
}

/* "tools" (each {"type": "function", "function": {"name", ...}}) and "tool_choice": "none",
 * "auto", "required" or {"type": "function", "function": {"name"}} naming one of them. The
 * template gets the tools unless the choice is none. */
static bool tools_of(parse_state *ps, pl_srv_error *err) {
    pl_srv_request *r = ps->r;
    json_t *tc = ps->tool_choice;
    const char *name = NULL;
    if (!tc) {
        r->tool_choice = PL_SRV_TOOLS_AUTO;
    } else if (json_is_string(tc)) {
        const char *c = json_string_value(tc);
        if (!strcmp(c, "none")) r->tool_choice = PL_SRV_TOOLS_NONE;
        else if (!strcmp(c, "auto")) r->tool_choice = PL_SRV_TOOLS_AUTO;
        else if (!strcmp(c, "required")) r->tool_choice = PL_SRV_TOOLS_REQUIRED;
        else
            return pl_srv_fail(err, 400, "tool_choice", "tool_choice: \"%.40s\" is none of "
                               "\"none\", \"auto\", \"required\" or a function", c);
    } else {
        json_t *f = json_object_get(tc, "function");
        name = json_string_value(json_object_get(f, "name"));
        if (!json_is_object(tc) || !name)
            return pl_srv_fail(err, 400, "tool_choice", "tool_choice: expected \"none\", "
                               "\"auto\", \"required\" or {\"type\": \"function\", "
                               "\"function\": {\"name\": ...}}");
        r->tool_choice = PL_SRV_TOOLS_NAMED;
    }
    json_t *tools = ps->tools;
    /* the template takes tools as they come; a forced call needs each one's name and schema */
    for (size_t i = 0; r->tool_choice >= PL_SRV_TOOLS_REQUIRED && i < json_array_size(tools); i++) {
        json_t *f = json_object_get(json_array_get(tools, i), "function");
        if (!json_is_object(f) || !json_is_string(json_object_get(f, "name")))
            return pl_srv_fail(err, 400, "tools", "tools[%zu]: expected {\"type\": \"function\", "
                               "\"function\": {\"name\": ..., \"parameters\": ...}}", i);
        json_t *params = json_object_get(f, "parameters");
        if (params && !json_is_object(params) && !json_is_null(params))
            return pl_srv_fail(err, 400, "tools", "tools[%zu].function.parameters: expected a "
                               "JSON Schema object", i);
        if (name && !strcmp(json_string_value(json_object_get(f, "name")), name)) name = NULL;
    }
    if (r->tool_choice >= PL_SRV_TOOLS_REQUIRED && json_array_size(tools) == 0)
        return pl_srv_fail(err, 400, "tool_choice", "tool_choice: a tool call is required but "
                           "no tools are given");
    if (name)
        return pl_srv_fail(err, 400, "tool_choice", "tool_choice: no tool named \"%.64s\" in "
                           "tools", name);
    if (r->tool_choice == PL_SRV_TOOLS_NAMED &&
        !(r->tool_name = strdup(json_string_value(
              json_object_get(json_object_get(tc, "function"), "name")))))
        return pl_srv_fail(err, 500, NULL, "out of memory");
    if (r->tool_choice >= PL_SRV_TOOLS_REQUIRED && r->constraint_param)
        return pl_srv_fail(err, 400, "tool_choice", "tool_choice: a forced tool call and %s both "
                           "constrain the output: give one", r->constraint_param);
    if (tools && r->tool_choice != PL_SRV_TOOLS_NONE) {
        r->tools = json_incref(tools);
        if (!set_chat(&r->chat, "tools", "tools", tools, err)) return false;
    }
    return true;
}

/* The rules between fields, once all are read. */
static bool finish(parse_state *ps, pl_srv_error *err) {
    pl_srv_request *r = ps->r;
    if (r->kind == PL_SRV_COMPLETION && r->n_prompts == 0)
        return pl_srv_fail(err, 400, "prompt", "prompt is required");
    if (r->kind == PL_SRV_CHAT) {
        if (!r->messages_json) return pl_srv_fail(err, 400, "messages", "messages is required");
        r->prompts = calloc(1, sizeof *r->prompts);
        if (!r->prompts) return pl_srv_fail(err, 500, NULL, "out of memory");
        r->n_prompts = 1;
    }
    if (ps->stream_options && !r->stream)
        return pl_srv_fail(err, 400, "stream_options",
                           "stream_options can only be given with stream: true");
    json_t *mt = ps->max_completion_tokens ? ps->max_completion_tokens : ps->max_tokens;
    const char *mt_key = ps->max_completion_tokens ? "max_completion_tokens" : "max_tokens";
    if (mt && !json_is_null(mt)) {
        /* the library's 0 means "what the context leaves"; OpenAI's API has null for that */
        if (json_is_integer(mt) && json_integer_value(mt) == 0)
            return pl_srv_fail(err, 400, mt_key, "%s: 0: must be >= 1 (null: as many as the "
                               "context leaves)", mt_key);
        if (!set_sampling(&r->sp, "max_tokens", mt_key, mt, err)) return false;
        r->has_max_tokens = true;
    } else {
        /* the handler sets what the context leaves; the largest value checks the rest */
        r->sp.max_tokens = 16777216;
    }
    if (r->kind == PL_SRV_CHAT) {
        int k = -1;
        if (ps->top_logprobs && !json_is_null(ps->top_logprobs)) {
            if (!r->chat_logprobs)
                return pl_srv_fail(err, 400, "top_logprobs",
                                   "top_logprobs needs logprobs: true");
            if (!set_sampling(&r->sp, "logprobs", "top_logprobs", ps->top_logprobs, err))
                return false;
            k = r->sp.logprobs;
        }
        r->sp.logprobs = r->chat_logprobs ? (k >= 0 ? k : 0) : -1;
        if (!tools_of(ps, err)) return false;
    }
    r->prompt_logprobs = r->sp.prompt_logprobs;
    if (r->sp.n > ps->lim->max_n)
        return pl_srv_fail(err, 400, "n", "n = %d: at most %d (--max-n)", r->sp.n, ps->lim->max_n);
    if (r->n_prompts * (size_t)r->sp.n > (size_t)ps->lim->max_choices)
        return pl_srv_fail(err, 400, "n", "%zu prompts x n = %d: at most %d choices per request "
                           "(--max-choices)", r->n_prompts, r->sp.n, ps->lim->max_choices);
    if (pl_sampling_params_validate(&r->sp) != PL_OK)
        return pl_srv_fail_status(err, PL_ERR_INVALID_ARGUMENT, NULL);
    return true;
}

static json_t *load_object(const char *body, size_t len, pl_srv_error *err) {
    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        pl_srv_fail(err, 400, NULL, "the body is not valid JSON: %s (line %d, column %d)",
                    je.text, je.line, je.column);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        pl_srv_fail(err, 400, NULL, "the body must be a JSON object");
        return NULL;
    }
    return root;
}

bool pl_srv_request_parse(pl_srv_kind kind, const char *body, size_t len,
                          const pl_srv_limits *lim, pl_srv_request *out, pl_srv_error *err) {
    memset(out, 0, sizeof *out);
    out->kind = kind;
    out->add_special_tokens = true;
    out->parallel_tool_calls = true;
    pl_sampling_params_default(&out->sp);
    pl_chat_options_default(&out->chat);
    json_t *root = load_object(body, len, err);
    if (!root) {
        pl_srv_request_free(out);
        return false;
    }
    parse_state ps = {.r = out, .lim = lim};
    const char *key;
    json_t *v;
    bool ok = true;
    json_object_foreach(root, key, v) {
        if (json_is_null(v)) continue;
        if (!(ok = field(&ps, key, v, err))) break;
    }
    if (ok) ok = finish(&ps, err);
    json_decref(root);
    if (!ok) pl_srv_request_free(out);
    return ok;
}

void pl_srv_request_free(pl_srv_request *r) {
    if (!r) return;
    for (size_t i = 0; i < r->n_prompts; i++) {
        free(r->prompts[i].text);
        free(r->prompts[i].ids);
    }
    free(r->prompts);
    free(r->model);
    free(r->messages_json);
    free(r->tool_name);
    json_decref(r->tools);
    pl_sampling_params_deinit(&r->sp);
    pl_chat_options_deinit(&r->chat);
    memset(r, 0, sizeof *r);
}

/* ---- /tokenize and /detokenize ------------------------------------------------------------- */

bool pl_srv_tokenize_parse(const char *body, size_t len, pl_srv_tokenize *out,
                           pl_srv_error *err) {
    memset(out, 0, sizeof *out);
    pl_chat_options_default(&out->chat);
    json_t *root = load_object(body, len, err);
    if (!root) {
        pl_srv_tokenize_free(out);
        return false;
    }
    bool ok = true, has_special = false, special = false;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (json_is_null(v)) continue;
        if (!strcmp(key, "prompt")) {
            if (!json_is_string(v)) ok = pl_srv_fail(err, 400, key, "prompt: expected a string");
            else if (!(out->prompt = strdup(json_string_value(v))))
                ok = pl_srv_fail(err, 500, key, "out of memory");
        } else if (!strcmp(key, "messages")) {
            ok = parse_messages(v, &out->messages_json, err);
        } else if (!strcmp(key, "add_special_tokens")) {
            ok = want_bool(v, key, &special, err);
            has_special = true;
        } else if (!strcmp(key, "return_token_strs")) {
            ok = want_bool(v, key, &out->return_token_strs, err);
        } else if (!strcmp(key, "tools") && !json_is_array(v)) {
            ok = pl_srv_fail(err, 400, key, "tools: expected a list");
        } else if (!strcmp(key, "chat_template_kwargs") && !json_is_object(v)) {
            ok = pl_srv_fail(err, 400, key, "chat_template_kwargs: expected an object");
        } else if (!strcmp(key, "add_generation_prompt") || !strcmp(key, "tools") ||
                   !strcmp(key, "chat_template_kwargs") || !strcmp(key, "chat_template")) {
            ok = set_chat(&out->chat, key, key, v, err);
        }
        if (!ok) break;
    }
    json_decref(root);
    if (ok && !out->prompt == !out->messages_json)
        ok = pl_srv_fail(err, 400, NULL, "give exactly one of prompt and messages");
    if (ok) out->add_special_tokens = has_special ? special : out->prompt != NULL;
    if (!ok) pl_srv_tokenize_free(out);
    return ok;
}

void pl_srv_tokenize_free(pl_srv_tokenize *t) {
    if (!t) return;
    free(t->prompt);
    free(t->messages_json);
    pl_chat_options_deinit(&t->chat);
    memset(t, 0, sizeof *t);
}

bool pl_srv_detokenize_parse(const char *body, size_t len, int32_t **out_ids, size_t *out_n,
                             pl_srv_error *err) {
    json_t *root = load_object(body, len, err);
    if (!root) return false;
    json_t *t = json_object_get(root, "tokens");
    bool ok;
    if (!json_is_array(t)) {
        ok = pl_srv_fail(err, 400, "tokens", "tokens: expected a list of token ids");
    } else if (json_array_size(t) == 0) {
        *out_ids = NULL;
        *out_n = 0;
        ok = true;
    } else {
        ok = ids_of(t, "tokens", out_ids, out_n, err);
    }
    json_decref(root);
    return ok;
}
