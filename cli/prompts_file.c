/*
 * cli/prompts_file.c - the JSONL prompts file: one request per line.
 *
 * Every line is parsed with jansson; any problem names FILE:LINE and the field. A key the
 * reader does not know is an error, not ignored: a misspelt "temprature" would otherwise run
 * the line at the default temperature without a word. Nothing is kept from a failed parse.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

static bool fail(char *err, size_t cap, const char *name, size_t line, const char *msg,
                 const char *field) {
    snprintf(err, cap, "%s:%zu: %s%s%s", name, line, field ? field : "", field ? ": " : "", msg);
    return false;
}

static bool parse_ids(cli_prompt *p, json_t *arr, const char **why) {
    if (!json_is_array(arr)) return (*why = "must be an array of token ids"), false;
    size_t n = json_array_size(arr);
    if (n == 0) return (*why = "is empty"), false;
    p->ids = malloc(n * sizeof(int32_t));
    if (!p->ids) return (*why = "out of memory"), false;
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(arr, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) > INT32_MAX)
            return (*why = "ids must be non-negative integers"), false;
        p->ids[i] = (int32_t)json_integer_value(x);
    }
    p->n_ids = n;
    return true;
}

/* A chat line: messages (checked as cli_messages_load checks a file), tools (an array) and
 * chat_template_kwargs (an object), kept as compact JSON text for the chat calls. */
static bool parse_chat(cli_prompt *p, json_t *o, const char **field, const char **why,
                       char *why_buf, size_t why_cap) {
    json_t *msgs = json_object_get(o, "messages"), *tools = json_object_get(o, "tools");
    json_t *kw = json_object_get(o, "chat_template_kwargs");
    if (!cli_check_messages(msgs, why_buf, why_cap))
        return (*field = "messages"), (*why = why_buf), false;
    if (tools && !json_is_array(tools) && !json_is_null(tools))
        return (*field = "tools"), (*why = "must be an array of tool definitions"), false;
    if (kw && !json_is_object(kw) && !json_is_null(kw))
        return (*field = "chat_template_kwargs"), (*why = "must be an object"), false;
    const size_t flags = JSON_COMPACT | JSON_PRESERVE_ORDER;
    if (!(p->messages = json_dumps(msgs, flags))) return (*why = "out of memory"), false;
    if (tools && !json_is_null(tools) && !(p->tools = json_dumps(tools, flags)))
        return (*why = "out of memory"), false;
    if (kw && !json_is_null(kw) && !(p->chat_template_kwargs = json_dumps(kw, flags)))
        return (*why = "out of memory"), false;
    return true;
}

/* The keys that say what a line asks for; every other key is a sampling field. */
static const char *const k_prompt_keys[] = {
    "prompt", "prompt_token_ids", "messages", "tools", "chat_template_kwargs",
};

static bool is_prompt_key(const char *k) {
    for (size_t i = 0; i < sizeof k_prompt_keys / sizeof k_prompt_keys[0]; i++)
        if (!strcmp(k, k_prompt_keys[i])) return true;
    return false;
}

/* Sets every key that is not a prompt key as a sampling field through the library's field
 * table, so a line accepts exactly what pl_sampling_params has, with its ranges and its
 * messages ("sampling.top_p = 2: must be in (0, 1]"). An unknown key is an error, not
 * ignored: a misspelt "temprature" would otherwise run the line at the default
 * temperature without a word. */
static bool set_sampling(json_t *o, pl_sampling_params *s, const char **field,
                         const char **why, char *why_buf, size_t cap) {
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        if (is_prompt_key(k)) continue;
        char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!text) return (*why = "out of memory"), false;
        pl_status st = pl_sampling_params_set_json(s, k, text);
        free(text);
        if (st == PL_OK) continue;
        if (st == PL_ERR_NOT_FOUND) {
            const char *near = strstr(pl_last_error_as(PL_NAMING_JSON), "(did you mean");
            snprintf(why_buf, cap, "unknown key \"%.64s\" %s", k,
                     near ? near : "(not prompt, prompt_token_ids, messages, tools, "
                                   "chat_template_kwargs or a sampling field)");
        } else {
            snprintf(why_buf, cap, "%s", pl_last_error_as(PL_NAMING_JSON));
        }
        *field = NULL;
        *why = why_buf;
        return false;
    }
    /* the rules between fields (min_tokens <= max_tokens, non-empty stops) fail here, with
     * the line, rather than at submit */
    if (pl_sampling_params_validate(s) != PL_OK) {
        snprintf(why_buf, cap, "%s", pl_last_error_as(PL_NAMING_JSON));
        *field = NULL;
        *why = why_buf;
        return false;
    }
    return true;
}

/* Parses one object into p; on failure sets *field and *why. */
static bool parse_object(json_t *o, cli_prompt *p, const char **field, const char **why,
                         char *why_buf, size_t why_cap) {
    json_t *text = json_object_get(o, "prompt"), *ids = json_object_get(o, "prompt_token_ids");
    json_t *msgs = json_object_get(o, "messages");
    if ((text != NULL) + (ids != NULL) + (msgs != NULL) != 1)
        return (*field = "prompt"),
               (*why = "give exactly one of prompt, prompt_token_ids or messages"), false;
    if (!msgs && (json_object_get(o, "tools") || json_object_get(o, "chat_template_kwargs")))
        return (*field = json_object_get(o, "tools") ? "tools" : "chat_template_kwargs"),
               (*why = "only for a chat (a line with messages)"), false;
    if (msgs) {
        if (!parse_chat(p, o, field, why, why_buf, why_cap)) return false;
    } else if (text) {
        if (!json_is_string(text)) return (*field = "prompt"), (*why = "must be a string"), false;
        if (strlen(json_string_value(text)) != json_string_length(text))
            return (*field = "prompt"), (*why = "contains a NUL byte"), false;
        if (!(p->text = strdup(json_string_value(text)))) return (*why = "out of memory"), false;
    } else if (!parse_ids(p, ids, why)) {
        return (*field = "prompt_token_ids"), false;
    }
    return set_sampling(o, &p->params, field, why, why_buf, why_cap);
}

void cli_prompts_free(cli_prompt *p, size_t n) {
    if (!p) return;
    for (size_t i = 0; i < n; i++) {
        free(p[i].text);
        free(p[i].ids);
        free(p[i].messages);
        free(p[i].tools);
        free(p[i].chat_template_kwargs);
        pl_sampling_params_deinit(&p[i].params);
    }
    free(p);
}

bool cli_prompts_parse(const char *name, const char *data, size_t len,
                       const pl_sampling_params *defaults, cli_prompt **out, size_t *out_n,
                       char *err, size_t err_cap) {
    cli_prompt *list = NULL;
    size_t n = 0, cap = 0, line = 0;
    const char *p = data, *end = data + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        line++;
        const char *q = p;
        while (q < le && (*q == ' ' || *q == '\t' || *q == '\r')) q++;
        if (q < le) {
            json_error_t jerr;
            json_t *o = json_loadb(p, (size_t)(le - p), JSON_REJECT_DUPLICATES, &jerr);
            const char *field = NULL, *why = NULL;
            char why_buf[512];
            bool ok = true;
            if (!o) {
                ok = fail(err, err_cap, name, line, jerr.text, "invalid JSON");
            } else if (!json_is_object(o)) {
                ok = fail(err, err_cap, name, line, "each line must be a JSON object", NULL);
            } else {
                if (n == cap) {
                    size_t nc = cap ? 2 * cap : 16;
                    cli_prompt *g = realloc(list, nc * sizeof *g);
                    if (!g) ok = fail(err, err_cap, name, line, "out of memory", NULL);
                    else list = g, cap = nc;
                }
                if (ok) {
                    cli_prompt *c = &list[n++];
                    memset(c, 0, sizeof *c);
                    c->params = *defaults; /* lists the line does not set stay the caller's */
                    c->params.storage = NULL;
                    c->line = line;
                    if (!parse_object(o, c, &field, &why, why_buf, sizeof why_buf))
                        ok = fail(err, err_cap, name, line, why, field);
                }
            }
            json_decref(o);
            if (!ok) {
                cli_prompts_free(list, n);
                return false;
            }
        }
        p = nl ? nl + 1 : end;
    }
    if (n == 0) {
        /* no line to point at: the file is empty or every line is blank */
        free(list);
        if (line == 0) snprintf(err, err_cap, "%s: no prompts (the file is empty)", name);
        else snprintf(err, err_cap, "%s: no prompts (%zu blank line%s)", name, line,
                      line == 1 ? "" : "s");
        return false;
    }
    *out = list;
    *out_n = n;
    return true;
}

bool cli_prompts_load(const char *path, const pl_sampling_params *defaults, cli_prompt **out,
                      size_t *out_n, char *err, size_t err_cap) {
    char *buf;
    size_t len;
    if (!cli_read_file(path, &buf, &len, err, err_cap)) return false;
    bool ok = cli_prompts_parse(strcmp(path, "-") ? path : "<stdin>", buf, len, defaults, out,
                                out_n, err, err_cap);
    free(buf);
    return ok;
}
