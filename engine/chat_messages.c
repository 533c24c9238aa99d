/*
 * engine/chat_messages.c - OpenAI's message shapes into what chat templates expect.
 *
 * Hugging Face's templates are written for messages whose content is a string and whose tool
 * calls carry their arguments as an object; OpenAI's clients send content null on an
 * assistant turn that only calls tools, content as a list of parts, and arguments as JSON
 * text. @huggingface/jinja (and Python's jinja2) fail on the first (`'</think>' in null`,
 * `null | trim`) and write the last as a quoted string, so the messages are brought into the
 * templates' shape first, with the rules vLLM applies (chat_utils: content null -> "", text
 * parts joined by "\n", arguments parsed). chat_messages.h lists them.
 */
#include "engine/chat_messages.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/alloc.h"
#include "util/buf.h"
#include "util/status.h"

static pl_status oom(void) { return pl_fail(PL_ERR_OUT_OF_MEMORY, "chat: messages"); }

/* A list of parts as one string: the text parts joined by "\n". */
static pl_status join_parts(json_t *msg, json_t *parts, size_t i) {
    pl_buf b = {0};
    for (size_t k = 0; k < json_array_size(parts); k++) {
        json_t *part = json_array_get(parts, k);
        json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
        if (!json_is_object(part) || !json_is_string(type) ||
            strcmp(json_string_value(type), "text") != 0 || !json_is_string(text)) {
            pl_buf_free(&b);
            const char *kind = json_is_string(type) ? json_string_value(type) : NULL;
            if (kind && strcmp(kind, "text") != 0)
                return pl_fail(PL_ERR_INVALID_ARGUMENT,
                               "messages[%zu].content[%zu]: a part of type \"%.40s\"; only text "
                               "parts ({\"type\": \"text\", \"text\": ...}) are supported",
                               i, k, kind);
            return pl_fail(PL_ERR_INVALID_ARGUMENT,
                           "messages[%zu].content[%zu]: expected {\"type\": \"text\", \"text\": "
                           "...}", i, k);
        }
        if ((k > 0 && pl_buf_put(&b, "\n", 1, "chat: messages") != PL_OK) ||
            pl_buf_put(&b, json_string_value(text), json_string_length(text), "chat: messages") !=
                PL_OK) {
            pl_buf_free(&b);
            return oom();
        }
    }
    json_t *s = json_stringn(b.p ? b.p : "", b.n);
    pl_buf_free(&b);
    if (!s || json_object_set_new(msg, "content", s) != 0) return oom();
    return PL_OK;
}

/* function.arguments as the value it encodes. */
static pl_status prepare_call(json_t *call) {
    json_t *fn = json_object_get(call, "function");
    if (!json_is_object(fn)) return PL_OK; /* the template decides what to make of it */
    json_t *args = json_object_get(fn, "arguments");
    json_t *value = NULL;
    if (!args || json_is_null(args) || (json_is_string(args) && json_string_length(args) == 0)) {
        value = json_object();
    } else if (json_is_string(args)) {
        value = json_loadb(json_string_value(args), json_string_length(args),
                           JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, NULL);
        if (!value) return PL_OK; /* not JSON: kept as the text it is */
    } else {
        return PL_OK;
    }
    if (!value || json_object_set_new(fn, "arguments", value) != 0) return oom();
    return PL_OK;
}

static pl_status prepare(json_t *msg, size_t i) {
    if (!json_is_object(msg))
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "messages[%zu]: expected an object", i);
    if (!json_is_string(json_object_get(msg, "role")))
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "messages[%zu].role: expected a string", i);
    json_t *content = json_object_get(msg, "content");
    if (!content || json_is_null(content)) {
        if (json_object_set_new(msg, "content", json_string("")) != 0) return oom();
    } else if (json_is_array(content)) {
        pl_status s = join_parts(msg, content, i);
        if (s != PL_OK) return s;
    }
    json_t *calls = json_object_get(msg, "tool_calls");
    if (calls && (json_is_null(calls) || (json_is_array(calls) && json_array_size(calls) == 0))) {
        json_object_del(msg, "tool_calls");
    } else if (json_is_array(calls)) {
        for (size_t k = 0; k < json_array_size(calls); k++) {
            pl_status s = prepare_call(json_array_get(calls, k));
            if (s != PL_OK) return s;
        }
    }
    return PL_OK;
}

pl_status pl_chat_messages_prepare(const char *messages_json, char **out_json) {
    if (!messages_json || !out_json)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "chat: messages is NULL");
    json_error_t err;
    json_t *messages =
        json_loads(messages_json, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &err);
    if (!messages)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "chat: messages is not valid JSON (line %d, column %d: %s)", err.line,
                       err.column, err.text);
    pl_status s = PL_OK;
    if (!json_is_array(messages))
        s = pl_fail(PL_ERR_INVALID_ARGUMENT, "chat: messages must be a JSON array");
    for (size_t i = 0; s == PL_OK && i < json_array_size(messages); i++)
        s = prepare(json_array_get(messages, i), i);
    /* doubles written with 17 digits read back as the same doubles */
    char *text = s == PL_OK ? json_dumps(messages, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    json_decref(messages);
    if (s != PL_OK) return s;
    if (!text) return oom();
    *out_json = pl_strdup(text); /* jansson allocates with malloc; the caller frees with pl_free */
    free(text);
    return *out_json ? PL_OK : oom();
}
