/*
 * template/chat.c - what transformers.js' apply_chat_template does around the interpreter:
 * pick the template out of tokenizer_config.json, and pass messages, add_generation_prompt,
 * tools and the special tokens (then any extra variables) to the render.
 */
#include "template/tmpl_internal.h"

#include <string.h>

pl_status pl_tmpl_config_source(const json_t *cfg, const char *name, bool has_tools,
                                const char **out_src, size_t *out_len) {
    if (!cfg || !out_src)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_tmpl_config_source: NULL argument");
    const json_t *ct = json_object_get(cfg, "chat_template");
    if (!ct || json_is_null(ct))
        return pl_fail(PL_ERR_NOT_FOUND, "tokenizer_config.json has no chat_template");
    if (json_is_string(ct)) {
        if (name)
            return pl_fail(PL_ERR_NOT_FOUND,
                           "tokenizer_config.json: chat_template is a single template, not one "
                           "called \"%s\"",
                           name);
        *out_src = json_string_value(ct);
        if (out_len) *out_len = json_string_length(ct);
        return PL_OK;
    }
    if (!json_is_array(ct))
        return pl_fail(PL_ERR_FORMAT,
                       "tokenizer_config.json: chat_template is neither a string nor a list");
    const json_t *found = NULL, *tool_use = NULL, *dflt = NULL;
    size_t i;
    const json_t *item;
    json_array_foreach(ct, i, item) {
        const json_t *n = json_object_get(item, "name"), *t = json_object_get(item, "template");
        if (!json_is_string(n) || !json_is_string(t))
            return pl_fail(PL_ERR_FORMAT,
                           "tokenizer_config.json: chat_template[%zu] needs string \"name\" "
                           "and \"template\"",
                           i);
        const char *s = json_string_value(n);
        if (name && strcmp(s, name) == 0) found = t;
        if (strcmp(s, "tool_use") == 0) tool_use = t;
        if (strcmp(s, "default") == 0) dflt = t;
    }
    if (!name) found = (has_tools && tool_use) ? tool_use : dflt;
    if (!found)
        return pl_fail(PL_ERR_NOT_FOUND, "tokenizer_config.json: no chat template called \"%s\"",
                       name ? name : "default");
    *out_src = json_string_value(found);
    if (out_len) *out_len = json_string_length(found);
    return PL_OK;
}

static pl_status set(json_t *obj, const char *key, json_t *v) {
    if (!v || json_object_set_new(obj, key, v) != 0)
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "chat variables: out of memory");
    return PL_OK;
}

pl_status pl_tmpl_chat_vars(const json_t *cfg, const json_t *messages, const json_t *tools,
                            bool add_generation_prompt, const json_t *extra, json_t **out_vars) {
    if (!out_vars) return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_tmpl_chat_vars: NULL output");
    if (!json_is_array(messages))
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "chat: messages must be a JSON array");
    if (extra && !json_is_object(extra))
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "chat: extra variables must be a JSON object");
    if (cfg && !json_is_object(cfg))
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "chat: tokenizer_config must be a JSON object");
    json_t *v = json_object();
    if (!v) return pl_fail(PL_ERR_OUT_OF_MEMORY, "chat variables: out of memory");
    pl_status st = set(v, "messages", json_incref((json_t *)messages));
    if (st == PL_OK) st = set(v, "add_generation_prompt", json_boolean(add_generation_prompt));
    if (st == PL_OK && tools) st = set(v, "tools", json_incref((json_t *)tools));
    /* transformers.js' SPECIAL_TOKEN_ATTRIBUTES, as getToken reads them */
    static const char *const specials[] = {"bos_token", "eos_token", "unk_token",  "sep_token",
                                           "pad_token", "cls_token", "mask_token", NULL};
    for (const char *const *k = specials; st == PL_OK && cfg && *k; k++) {
        const json_t *tok = json_object_get(cfg, *k);
        if (json_is_object(tok)) tok = json_object_get(tok, "content");
        if (json_is_string(tok) && json_string_length(tok) > 0)
            st = set(v, *k, json_incref((json_t *)tok));
    }
    if (st == PL_OK && extra) {
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)extra, key, val) {
            st = set(v, key, json_incref(val));
            if (st != PL_OK) break;
        }
    }
    if (st != PL_OK) {
        json_decref(v);
        return st;
    }
    *out_vars = v;
    return PL_OK;
}

/* Numbers are read as doubles, as JSON.parse reads them (and integers past 64 bits load). */
static pl_status load(const char *what, const char *text, json_t **out) {
    *out = NULL;
    if (!text) return PL_OK;
    json_error_t err;
    *out = json_loads(text, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &err);
    if (!*out)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "chat: %s is not valid JSON (line %d, column %d: %s)", what, err.line,
                       err.column, err.text);
    return PL_OK;
}

pl_status pl_tmpl_render_chat(const pl_tmpl *t, const json_t *cfg, const char *messages_json,
                              const char *tools_json, bool add_generation_prompt,
                              const char *extra_json, char **out_text, size_t *out_len) {
    if (!t || !messages_json || !out_text)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_tmpl_render_chat: NULL argument");
    json_t *messages = NULL, *tools = NULL, *extra = NULL, *vars = NULL;
    pl_status st = load("messages", messages_json, &messages);
    if (st == PL_OK) st = load("tools", tools_json, &tools);
    if (st == PL_OK) st = load("extra variables", extra_json, &extra);
    if (st == PL_OK)
        st = pl_tmpl_chat_vars(cfg, messages, tools, add_generation_prompt, extra, &vars);
    if (st == PL_OK) st = pl_tmpl_render(t, vars, out_text, out_len);
    json_decref(messages);
    json_decref(tools);
    json_decref(extra);
    json_decref(vars);
    return st;
}
