/*
 * engine/chat.c - chats into prompts: the chat options' table, the engine's chat templates
 * (parsed once at create), rendering through template/, and the public tokenizer handle.
 *
 * Which template renders a call: the call's own chat_template text if it gives one (parsed
 * for that call), else the engine's config.chat_template (a file, or the template text), else
 * the tokenizer's templates by name: template_name if given, else "tool_use" when tools are
 * given and the tokenizer has one, else "default". The engine parses its templates at create:
 * a config.chat_template that does not parse fails create; a tokenizer template that does
 * not parse is logged and its error kept, so completions still work and every chat call gets
 * the parse error (PL_ERR_UNSUPPORTED naming the construct and line) instead of wrong text.
 *
 * The variables are those transformers.js' apply_chat_template passes (template/'s
 * pl_tmpl_render_chat): messages, add_generation_prompt, tools, the tokenizer's bos_token and
 * eos_token, then chat_template_kwargs' members. A rendered chat is tokenized with special
 * tokens parsed and nothing added: the template writes BOS itself.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "engine/chat_messages.h"
#include "engine/engine_internal.h"
#include "engine/fields.h"
#include "template/template.h"
#include "util/alloc.h"
#include "util/log.h"

/* ---- the options' table ------------------------------------------------------------------ */

_Static_assert(sizeof(pl_chat_options) <= 1024, "pl_fields_init's buffer");

#define ROW(...) PL_FIELD_ROW_(pl_chat_options, __VA_ARGS__)
static const pl_field fields[] = {PL_CHAT_OPTIONS_FIELDS(ROW)};
#undef ROW

static void defaults(void *obj) {
    pl_chat_options *o = obj;
#define DEF(...) PL_FIELD_DEFAULT_(o, __VA_ARGS__)
    PL_CHAT_OPTIONS_FIELDS(DEF)
#undef DEF
}

/* Every sizeof pl_chat_options has had in a release (see engine/fields.h). */
static const size_t sizes[] = {sizeof(pl_chat_options)};

static const pl_field_table table = {
    .prefix = "chat", .fields = fields, .n = sizeof fields / sizeof fields[0],
    .struct_size = sizeof(pl_chat_options), .known_sizes = sizes,
    .n_known = sizeof sizes / sizeof sizes[0], .defaults = defaults,
};

const pl_field *pl_chat_options_fields(size_t *out_n) {
    if (out_n) *out_n = table.n;
    return fields;
}

void pl_chat_options_init(pl_chat_options *o, size_t struct_size) {
    pl_fields_init(&table, o, struct_size);
}

void pl_chat_options_deinit(pl_chat_options *o) { pl_fields_deinit(&table, o); }

size_t pl_chat_options_struct_size(void) { return table.struct_size; }

pl_status pl_chat_options_set(pl_chat_options *o, const char *name, const char *value) {
    return pl_fields_set_text(&table, o, name, value);
}

pl_status pl_chat_options_set_json(pl_chat_options *o, const char *name, const char *json) {
    return pl_fields_set_json(&table, o, name, json);
}

/* The caller's options (NULL: defaults) as the library's full struct. */
static pl_status take_options(const pl_chat_options *opt, pl_chat_options *out) {
    if (!opt) {
        pl_chat_options_default(out);
        return PL_OK;
    }
    return pl_fields_take(&table, opt, out);
}

/* ---- choosing and rendering a template ---------------------------------------------------- */

/* The name of the tokenizer template a call uses when it gives none of its own. */
static const char *pick_name(const pl_tokenizer *tok, const pl_chat_options *o) {
    if (o->template_name) return o->template_name;
    if (o->tools && tok && pl_tok_chat_template(tok, "tool_use")) return "tool_use";
    return "default";
}

static pl_status no_template(const char *name, bool named) {
    if (named)
        return pl_fail(PL_ERR_NOT_FOUND, "chat: the tokenizer has no chat template named \"%s\"",
                       name);
    return pl_fail(PL_ERR_NOT_FOUND,
                   "chat: the model has no chat template (tokenizer_config.json or GGUF "
                   "metadata); give " PL_REF_BARE("config.chat_template") " or the call's "
                   "chat_template");
}

/* Renders with t: the special tokens come from the tokenizer (when there is one). */
static pl_status render(const pl_tmpl *t, const pl_tokenizer *tok, const char *messages_json,
                        const pl_chat_options *o, char **out_text, size_t *out_len) {
    json_t *cfg = json_object();
    if (!cfg) return pl_fail(PL_ERR_OUT_OF_MEMORY, "chat: variables");
    const char *bos = tok ? pl_tok_bos_text(tok) : NULL, *eos = tok ? pl_tok_eos_text(tok) : NULL;
    if ((bos && json_object_set_new(cfg, "bos_token", json_string(bos)) != 0) ||
        (eos && json_object_set_new(cfg, "eos_token", json_string(eos)) != 0)) {
        json_decref(cfg);
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "chat: variables");
    }
    char *text = NULL, *messages = NULL;
    size_t len = 0;
    pl_status s = pl_chat_messages_prepare(messages_json, &messages);
    if (s != PL_OK) { /* the messages' own error, already named */
        json_decref(cfg);
        return s;
    }
    s = pl_tmpl_render_chat(t, cfg, messages, o->tools, o->add_generation_prompt,
                            o->chat_template_kwargs, &text, &len);
    pl_free(messages);
    json_decref(cfg);
    if (s != PL_OK) return pl_fail_prefix(s, "chat template");
    *out_text = text;
    if (out_len) *out_len = len;
    return PL_OK;
}

/* Parses src and renders with it (a template given for one call). */
static pl_status render_source(const char *src, const char *what, const pl_tokenizer *tok,
                               const char *messages_json, const pl_chat_options *o,
                               char **out_text, size_t *out_len) {
    pl_tmpl *t;
    pl_status s = pl_tmpl_parse(src, strlen(src), &t);
    if (s != PL_OK) return pl_fail_prefix(s, "%s", what);
    s = render(t, tok, messages_json, o, out_text, out_len);
    pl_tmpl_free(t);
    return s;
}

static pl_status check_call(const void *obj, const char *messages_json, char **out_text) {
    if (!obj || !messages_json || !out_text)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "apply_chat_template: NULL %s",
                       !obj ? "engine/tokenizer" : !messages_json ? "messages" : "out_text");
    return PL_OK;
}

/* ---- the engine's templates ---------------------------------------------------------------- */

void pl_chat_state_free(pl_chat_state *c) {
    for (size_t i = 0; i < c->n; i++) {
        pl_tmpl_free(c->tmpl[i]);
        pl_free(c->name[i]);
        pl_free(c->error[i]);
    }
    pl_free(c->tmpl);
    pl_free(c->name);
    pl_free(c->error);
    pl_free(c->status);
    memset(c, 0, sizeof *c);
}

/* Reads config.chat_template: a readable file's contents, else the value itself when it looks
 * like a template (vLLM's rule), else an error naming the path. *out: pl_free. */
static pl_status read_override(const char *value, char **out) {
    struct stat st;
    if (stat(value, &st) == 0 && S_ISREG(st.st_mode)) {
        if (st.st_size > (1 << 24))
            return pl_fail(PL_ERR_TOO_LONG,
                           PL_REF("config.chat_template") " %s: %lld bytes (16 MiB at most)",
                           value, (long long)st.st_size);
        FILE *f = fopen(value, "rb");
        if (!f)
            return pl_fail(PL_ERR_IO, PL_REF("config.chat_template") " %s: %s", value,
                           strerror(errno));
        char *buf = pl_malloc((size_t)st.st_size + 1);
        size_t got = buf ? fread(buf, 1, (size_t)st.st_size, f) : 0;
        int err = ferror(f);
        fclose(f);
        if (!buf)
            return pl_fail(PL_ERR_OUT_OF_MEMORY, PL_REF("config.chat_template") " %s", value);
        if (err || got != (size_t)st.st_size) {
            pl_free(buf);
            return pl_fail(PL_ERR_IO, PL_REF("config.chat_template") " %s: short read", value);
        }
        buf[got] = '\0';
        if (strlen(buf) != got) {
            pl_free(buf);
            return pl_fail(PL_ERR_FORMAT, PL_REF("config.chat_template") " %s: holds a NUL byte",
                           value);
        }
        *out = buf;
        return PL_OK;
    }
    if (!strstr(value, "{{") && !strstr(value, "{%"))
        return pl_fail(PL_ERR_NOT_FOUND,
                       PL_REF("config.chat_template") " = \"%.200s\": no such file, and "
                       "not template text (no {{ or {%%)", value);
    *out = pl_strdup(value);
    return *out ? PL_OK : pl_fail(PL_ERR_OUT_OF_MEMORY, PL_REF("config.chat_template"));
}

static pl_status add_entry(pl_chat_state *c, const char *name, const char *src, bool must_parse) {
    size_t i = c->n;
    c->name[i] = pl_strdup(name);
    if (!c->name[i]) return pl_fail(PL_ERR_OUT_OF_MEMORY, "chat templates");
    c->n++;
    pl_status s = pl_tmpl_parse(src, strlen(src), &c->tmpl[i]);
    if (s == PL_OK) return PL_OK;
    if (must_parse) return pl_fail_prefix(s, PL_REF("config.chat_template"));
    c->status[i] = s;
    c->error[i] = pl_strdup(pl_last_error());
    if (!c->error[i]) return pl_fail(PL_ERR_OUT_OF_MEMORY, "chat templates");
    pl_log(PL_LOG_WARN, "chat template \"%s\" cannot be used (chats will be refused): %s", name,
           c->error[i]);
    return PL_OK;
}

pl_status pl_chat_state_init(pl_chat_state *c, const pl_tokenizer *tok, const char *override) {
    memset(c, 0, sizeof *c);
    size_t cap = override ? 1 : tok ? pl_tok_chat_template_count(tok) : 0;
    if (cap == 0) return PL_OK;
    c->tmpl = pl_calloc(cap, sizeof *c->tmpl);
    c->name = pl_calloc(cap, sizeof *c->name);
    c->error = pl_calloc(cap, sizeof *c->error);
    c->status = pl_calloc(cap, sizeof *c->status);
    if (!c->tmpl || !c->name || !c->error || !c->status)
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "chat templates");
    if (override) {
        char *src;
        PL_TRY(read_override(override, &src));
        pl_status s = add_entry(c, "default", src, true);
        pl_free(src);
        c->is_override = true;
        return s;
    }
    for (size_t i = 0; i < cap; i++) {
        const char *name = pl_tok_chat_template_name(tok, i);
        PL_TRY(add_entry(c, name, pl_tok_chat_template(tok, name), false));
    }
    return PL_OK;
}

pl_status pl_engine_apply_chat_template_json(const pl_engine *e, const char *messages_json,
                                             const pl_chat_options *opt, char **out_text,
                                             size_t *out_len) {
    PL_TRY(check_call(e, messages_json, out_text));
    pl_chat_options o;
    PL_TRY(take_options(opt, &o));
    if (o.chat_template)
        return render_source(o.chat_template, "chat.chat_template", e->tok, messages_json, &o,
                             out_text, out_len);
    const pl_chat_state *c = &e->chat;
    /* an override is the one template: it serves every name */
    const char *name = c->is_override ? "default" : pick_name(e->tok, &o);
    for (size_t i = 0; i < c->n; i++) {
        if (strcmp(c->name[i], name) != 0) continue;
        if (!c->tmpl[i])
            return pl_fail(c->status[i], "chat template \"%s\": %s", name, c->error[i]);
        return render(c->tmpl[i], e->tok, messages_json, &o, out_text, out_len);
    }
    return no_template(name, o.template_name != NULL);
}

/* The messages as the JSON text the template path reads. *out: pl_free. */
static pl_status messages_to_json(const pl_chat_message *m, size_t n, char **out) {
    if (!m && n) return pl_fail(PL_ERR_INVALID_ARGUMENT, "chat: messages is NULL");
    json_t *arr = json_array();
    if (!arr) return pl_fail(PL_ERR_OUT_OF_MEMORY, "chat: messages");
    pl_status s = PL_OK;
    for (size_t i = 0; i < n && s == PL_OK; i++) {
        if (!m[i].role) {
            s = pl_fail(PL_ERR_INVALID_ARGUMENT, "chat: messages[%zu].role is NULL", i);
            break;
        }
        json_t *role = json_string(m[i].role);
        json_t *content = m[i].content ? json_string(m[i].content) : json_null();
        if (!role || !content) {
            json_decref(role);
            json_decref(content);
            s = pl_fail(PL_ERR_INVALID_ARGUMENT, "chat: messages[%zu].%s is not valid UTF-8", i,
                        !role ? "role" : "content");
            break;
        }
        json_t *msg = json_object();
        if (!msg || json_object_set_new(msg, "role", role) != 0 ||
            json_object_set_new(msg, "content", content) != 0 || json_array_append_new(arr, msg)) {
            s = pl_fail(PL_ERR_OUT_OF_MEMORY, "chat: messages");
        }
    }
    char *text = s == PL_OK ? json_dumps(arr, JSON_COMPACT) : NULL;
    json_decref(arr);
    if (s != PL_OK) return s;
    if (!text) return pl_fail(PL_ERR_OUT_OF_MEMORY, "chat: messages");
    /* jansson allocates with malloc; hand back a pl_malloc copy */
    *out = pl_strdup(text);
    free(text);
    return *out ? PL_OK : pl_fail(PL_ERR_OUT_OF_MEMORY, "chat: messages");
}

pl_status pl_engine_apply_chat_template(const pl_engine *e, const pl_chat_message *messages,
                                        size_t n_messages, const pl_chat_options *opt,
                                        char **out_text, size_t *out_len) {
    char *json;
    PL_TRY(messages_to_json(messages, n_messages, &json));
    pl_status s = pl_engine_apply_chat_template_json(e, json, opt, out_text, out_len);
    pl_free(json);
    return s;
}

pl_status pl_engine_submit_chat_json(pl_engine *e, const char *messages_json,
                                     const pl_chat_options *opt, const pl_sampling_params *params,
                                     pl_request_id *out_id) {
    char *text;
    size_t len;
    PL_TRY(pl_engine_apply_chat_template_json(e, messages_json, opt, &text, &len));
    pl_status s = pl_intake_submit_text(e, text, len, PL_TOK_PARSE_SPECIAL, params, out_id);
    pl_free(text);
    return s;
}

pl_status pl_engine_submit_chat(pl_engine *e, const pl_chat_message *messages, size_t n_messages,
                                const pl_chat_options *opt, const pl_sampling_params *params,
                                pl_request_id *out_id) {
    char *json;
    PL_TRY(messages_to_json(messages, n_messages, &json));
    pl_status s = pl_engine_submit_chat_json(e, json, opt, params, out_id);
    pl_free(json);
    return s;
}

/* ---- the public tokenizer handle ----------------------------------------------------------- */

_Static_assert(PL_ENCODE_ADD_SPECIAL == PL_TOK_ADD_SPECIAL &&
                   PL_ENCODE_PARSE_SPECIAL == PL_TOK_PARSE_SPECIAL &&
                   PL_DECODE_SKIP_SPECIAL == PL_TOK_SKIP_SPECIAL,
               "the public flags are the tokenizer's");

pl_status pl_tokenizer_load(const char *path, pl_tokenizer **out) {
    if (!path || !out)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "tokenizer_load: NULL %s", !path ? "path" : "out");
    return pl_tok_load(path, out);
}

void pl_tokenizer_free(pl_tokenizer *t) { pl_tok_free(t); }

const pl_tokenizer *pl_engine_tokenizer(const pl_engine *e) { return e ? e->tok : NULL; }

int pl_tokenizer_vocab_size(const pl_tokenizer *t) { return t ? pl_tok_vocab_size(t) : 0; }

const char *pl_tokenizer_piece(const pl_tokenizer *t, int32_t id) {
    return t ? pl_tok_piece(t, id) : NULL;
}

int32_t pl_tokenizer_token_id(const pl_tokenizer *t, const char *token) {
    return t && token ? pl_tok_token_id(t, token) : -1;
}

pl_status pl_tokenizer_encode(const pl_tokenizer *t, const char *text, size_t len, unsigned flags,
                              int32_t **out_ids, size_t *out_n) {
    if (!t) return pl_fail(PL_ERR_INVALID_ARGUMENT, "tokenizer_encode: tokenizer is NULL");
    if (flags & ~(PL_ENCODE_ADD_SPECIAL | PL_ENCODE_PARSE_SPECIAL))
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "tokenizer_encode: unknown flags 0x%x", flags);
    return pl_tok_encode(t, text, len, flags, out_ids, out_n);
}

pl_status pl_tokenizer_decode(const pl_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
                              char **out_text, size_t *out_len) {
    if (!t) return pl_fail(PL_ERR_INVALID_ARGUMENT, "tokenizer_decode: tokenizer is NULL");
    if (flags & ~PL_DECODE_SKIP_SPECIAL)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "tokenizer_decode: unknown flags 0x%x", flags);
    char *text;
    PL_TRY(pl_tok_decode(t, ids, n, flags, &text));
    if (out_len) *out_len = strlen(text);
    *out_text = text;
    return PL_OK;
}

pl_status pl_tokenizer_decode_offsets(const pl_tokenizer *t, const int32_t *ids, size_t n,
                                      unsigned flags, char **out_text, size_t *out_offsets) {
    if (!t) return pl_fail(PL_ERR_INVALID_ARGUMENT, "tokenizer_decode: tokenizer is NULL");
    if (flags & ~PL_DECODE_SKIP_SPECIAL)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "tokenizer_decode: unknown flags 0x%x", flags);
    return pl_tok_decode_offsets(t, ids, n, flags, out_text, out_offsets);
}

const char *pl_tokenizer_chat_template(const pl_tokenizer *t, const char *name) {
    return t ? pl_tok_chat_template(t, name) : NULL;
}

pl_status pl_tokenizer_apply_chat_template(const pl_tokenizer *t, const char *messages_json,
                                           const pl_chat_options *opt, char **out_text,
                                           size_t *out_len) {
    PL_TRY(check_call(t, messages_json, out_text));
    pl_chat_options o;
    PL_TRY(take_options(opt, &o));
    if (o.chat_template)
        return render_source(o.chat_template, "chat.chat_template", t, messages_json, &o,
                             out_text, out_len);
    const char *name = pick_name(t, &o);
    const char *src = pl_tok_chat_template(t, name);
    if (!src) return no_template(name, o.template_name != NULL);
    char what[96];
    snprintf(what, sizeof what, "chat template \"%.64s\"", name);
    return render_source(src, what, t, messages_json, &o, out_text, out_len);
}
