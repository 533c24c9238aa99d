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

static bool get_int(json_t *o, const char *k, long long lo, long long hi, int *out,
                    const char **why) {
    json_t *v = json_object_get(o, k);
    if (!v) return true;
    if (!json_is_integer(v)) return (*why = "must be an integer"), false;
    long long x = json_integer_value(v);
    if (x < lo || x > hi) return (*why = "out of range"), false;
    *out = (int)x;
    return true;
}

static bool get_float(json_t *o, const char *k, float *out, const char **why) {
    json_t *v = json_object_get(o, k);
    if (!v) return true;
    if (!json_is_number(v)) return (*why = "must be a number"), false;
    double x = json_number_value(v);
    if (!isfinite(x)) return (*why = "must be finite"), false;
    *out = (float)x;
    return true;
}

static bool parse_stop(cli_prompt *p, json_t *v, const char **why) {
    if (!v) return true;
    size_t n = json_is_array(v) ? json_array_size(v) : 1;
    if (!json_is_array(v) && !json_is_string(v))
        return (*why = "must be a string or an array of strings"), false;
    if (n > CLI_MAX_STOP) return (*why = "too many stop strings (max 64)"), false;
    p->stop_storage = calloc(n ? n : 1, sizeof *p->stop_storage);
    if (!p->stop_storage) return (*why = "out of memory"), false;
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_array(v) ? json_array_get(v, i) : v;
        if (!json_is_string(s) || json_string_length(s) == 0)
            return (*why = "stop strings must be non-empty strings"), false;
        if (strlen(json_string_value(s)) != json_string_length(s))
            return (*why = "stop string contains a NUL byte"), false;
        p->stop_storage[i] = strdup(json_string_value(s));
        if (!p->stop_storage[i]) return (*why = "out of memory"), false;
        p->n_stop_storage = i + 1;
    }
    p->params.stop = (const char *const *)p->stop_storage;
    p->params.n_stop = n;
    return true;
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

/* Every key a line may hold. */
static const char *const k_keys[] = {
    "prompt",      "prompt_token_ids",   "messages",         "tools",
    "chat_template_kwargs",
    "max_tokens",  "min_tokens",         "temperature",      "top_p",
    "top_k",       "min_p",              "seed",             "ignore_eos",
    "n",           "stop",               "priority",         "repetition_penalty",
    "presence_penalty", "frequency_penalty",
};
#define N_KEYS (sizeof k_keys / sizeof k_keys[0])

/* Edit distance of two short strings (insertions, deletions, substitutions), capped at 9. */
static size_t distance(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    if (na > 40 || nb > 40) return 9;
    size_t row[41];
    for (size_t j = 0; j <= nb; j++) row[j] = j;
    for (size_t i = 1; i <= na; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= nb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[nb] < 9 ? row[nb] : 9;
}

/* Fails on the first key that is not in k_keys, naming it in why (why_buf holds the text)
 * and the nearest known key when one is within two edits. */
static bool check_keys(json_t *o, const char **field, const char **why, char *why_buf,
                       size_t cap) {
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        const char *near = NULL;
        size_t best = 3;
        for (size_t i = 0; i < N_KEYS; i++) {
            if (!strcmp(k, k_keys[i])) {
                near = k;
                break;
            }
            size_t d = distance(k, k_keys[i]);
            if (d < best) best = d, near = k_keys[i];
        }
        if (near == k) continue;
        if (near)
            snprintf(why_buf, cap, "unknown key \"%.64s\" (did you mean \"%s\"?)", k, near);
        else
            snprintf(why_buf, cap, "unknown key \"%.64s\" (known: prompt, prompt_token_ids, "
                     "messages, tools, chat_template_kwargs, max_tokens, min_tokens, temperature, top_p, top_k, min_p, seed, "
                     "ignore_eos, n, stop, priority, repetition_penalty, presence_penalty, "
                     "frequency_penalty)", k);
        *field = NULL;
        *why = why_buf;
        return false;
    }
    return true;
}

/* Parses one object into p; on failure sets *field and *why. */
static bool parse_object(json_t *o, cli_prompt *p, const char **field, const char **why,
                         char *why_buf, size_t why_cap) {
    if (!check_keys(o, field, why, why_buf, why_cap)) return false;
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
    pl_sampling_params *s = &p->params;
    struct { const char *k; int *f; long long lo, hi; } ints[] = {
        {"max_tokens", &s->max_tokens, 1, 1 << 24}, {"min_tokens", &s->min_tokens, 0, 1 << 24},
        {"top_k", &s->top_k, 0, 1 << 24},          {"n", &s->n, 1, 64},
        {"priority", &s->priority, -1000000, 1000000},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (!get_int(o, ints[i].k, ints[i].lo, ints[i].hi, ints[i].f, why)) return (*field = ints[i].k), false;
    struct { const char *k; float *f; } floats[] = {
        {"temperature", &s->temperature}, {"top_p", &s->top_p}, {"min_p", &s->min_p},
        {"repetition_penalty", &s->repetition_penalty},
        {"presence_penalty", &s->presence_penalty}, {"frequency_penalty", &s->frequency_penalty},
    };
    for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++)
        if (!get_float(o, floats[i].k, floats[i].f, why)) return (*field = floats[i].k), false;
    json_t *seed = json_object_get(o, "seed");
    if (seed) {
        if (!json_is_integer(seed) || json_integer_value(seed) < 0)
            return (*field = "seed"), (*why = "must be a non-negative integer"), false;
        s->seed = (uint64_t)json_integer_value(seed);
        s->has_seed = true;
    }
    json_t *ie = json_object_get(o, "ignore_eos");
    if (ie) {
        if (!json_is_boolean(ie)) return (*field = "ignore_eos"), (*why = "must be true or false"), false;
        s->ignore_eos = json_is_true(ie);
    }
    if (!parse_stop(p, json_object_get(o, "stop"), why)) return (*field = "stop"), false;
    return true;
}

void cli_prompts_free(cli_prompt *p, size_t n) {
    if (!p) return;
    for (size_t i = 0; i < n; i++) {
        free(p[i].text);
        free(p[i].ids);
        free(p[i].messages);
        free(p[i].tools);
        free(p[i].chat_template_kwargs);
        for (size_t k = 0; k < p[i].n_stop_storage; k++) free(p[i].stop_storage[k]);
        free(p[i].stop_storage);
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
                    c->params = *defaults; /* stop strings stay the caller's until overridden */
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
