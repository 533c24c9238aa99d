/*
 * bench/serve_chunk.c - what one streamed event of an OpenAI-compatible server says.
 *
 * The shapes read (anything else in a chunk is ignored):
 *   completions  {"choices": [{"text": "...", "token_ids"?: [...],
 *                              "logprobs"?: {"tokens": [...]}}], "usage"?: {...}}
 *   chat         {"choices": [{"delta": {"content"?: "...", "reasoning_content"?: "..."},
 *                              "logprobs"?: {"content": [...]}}], "usage"?: {...}}
 *   usage        {"prompt_tokens": N, "completion_tokens": N, ...}, often in a last chunk
 *                with "choices": [] (stream_options.include_usage)
 *   errors       {"error": {"message": ...}} (OpenAI), {"error": "..."}, or vLLM's older
 *                {"object": "error", "message": ...}
 * A chunk names its tokens through token_ids (vLLM's return_token_ids) or its logprobs;
 * servers that send neither say how many tokens a request produced only in the usage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/serve.h"

/* Copies s into out (cap bytes), control characters as spaces, so that a message prints on
 * one line whatever the server put in it. */
static void printable(const char *s, size_t n, char *out, size_t cap) {
    size_t k = 0;
    for (size_t i = 0; i < n && k + 1 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        out[k++] = c < 0x20 || c == 0x7f ? ' ' : (char)c;
    }
    out[k] = '\0';
}

/* The message of an error value (an object with "message", a string, anything else dumped).
 * Returns false when v is not an error. */
static bool error_text(json_t *v, char *out, size_t cap) {
    if (!v || json_is_null(v) || json_is_false(v)) return false;
    const char *msg = json_is_string(v) ? json_string_value(v)
                                        : json_string_value(json_object_get(v, "message"));
    if (msg && msg[0]) {
        printable(msg, strlen(msg), out, cap);
        return true;
    }
    char *dump = json_dumps(v, JSON_COMPACT);
    printable(dump ? dump : "(an error without a message)",
              dump ? strlen(dump) : strlen("(an error without a message)"), out, cap);
    free(dump);
    return true;
}

static bool find_error(json_t *root, char *out, size_t cap) {
    if (error_text(json_object_get(root, "error"), out, cap)) return true;
    const char *object = json_string_value(json_object_get(root, "object"));
    if (object && !strcmp(object, "error")) {
        if (!error_text(root, out, cap)) snprintf(out, cap, "(an error without a message)");
        return true;
    }
    return false;
}

/* The first non-empty string among a chat delta's output fields. */
static const char *delta_text(json_t *delta) {
    static const char *const fields[] = {"content", "reasoning_content", "reasoning"};
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++) {
        const char *s = json_string_value(json_object_get(delta, fields[i]));
        if (s && s[0]) return s;
    }
    return NULL;
}

static int named_tokens(json_t *choice, bool chat) {
    json_t *ids = json_object_get(choice, "token_ids");
    if (json_is_array(ids)) return (int)json_array_size(ids);
    json_t *lp = json_object_get(choice, "logprobs");
    json_t *list = json_object_get(lp, chat ? "content" : "tokens");
    return json_is_array(list) ? (int)json_array_size(list) : 0;
}

static long long count_field(json_t *obj, const char *name) {
    json_t *v = json_object_get(obj, name);
    return json_is_integer(v) && json_integer_value(v) >= 0 ? (long long)json_integer_value(v)
                                                             : -1;
}

bool pl_bench_chunk_parse(const char *data, size_t len, bool chat, pl_bench_chunk *out,
                          json_t **root, char *err, size_t err_cap) {
    memset(out, 0, sizeof *out);
    out->prompt_tokens = out->completion_tokens = -1;
    *root = NULL;
    /* "[DONE]", allowing the blanks some servers leave around it */
    size_t a = 0, b = len;
    while (a < b && (data[a] == ' ' || data[a] == '\t')) a++;
    while (b > a && (data[b - 1] == ' ' || data[b - 1] == '\t')) b--;
    if (b - a == 6 && !memcmp(data + a, "[DONE]", 6)) {
        out->done = true;
        return true;
    }
    json_error_t jerr;
    json_t *j = json_loadb(data, len, 0, &jerr);
    if (!j || !json_is_object(j)) {
        char excerpt[64];
        printable(data, len < 48 ? len : 48, excerpt, sizeof excerpt);
        if (j)
            snprintf(err, err_cap, "a streamed event is not a JSON object: '%s%s'", excerpt,
                     len > 48 ? "..." : "");
        else
            snprintf(err, err_cap, "a streamed event is not JSON (%s at column %d): '%s%s'",
                     jerr.text, jerr.column, excerpt, len > 48 ? "..." : "");
        json_decref(j);
        return false;
    }
    *root = j;
    if (find_error(j, out->error, sizeof out->error)) return true;
    json_t *choice = json_array_get(json_object_get(j, "choices"), 0);
    if (json_is_object(choice)) {
        out->has_choice = true;
        out->text = chat ? delta_text(json_object_get(choice, "delta"))
                         : json_string_value(json_object_get(choice, "text"));
        out->text_len = out->text ? strlen(out->text) : 0;
        out->n_tokens = named_tokens(choice, chat);
    }
    json_t *usage = json_object_get(j, "usage");
    if (json_is_object(usage)) {
        out->completion_tokens = count_field(usage, "completion_tokens");
        out->prompt_tokens = count_field(usage, "prompt_tokens");
        out->has_usage = out->completion_tokens >= 0;
    }
    return true;
}

void pl_bench_error_message(const char *body, size_t len, char *out, size_t cap) {
    out[0] = '\0';
    json_error_t jerr;
    json_t *j = body && len ? json_loadb(body, len, 0, &jerr) : NULL;
    bool found = j && json_is_object(j) &&
                 (find_error(j, out, cap) || error_text(json_object_get(j, "detail"), out, cap));
    json_decref(j);
    if (!found && body) printable(body, len, out, cap);
}
