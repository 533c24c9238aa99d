/*
 * reply/tool_grammar.c - the grammar of a reply that must call tools: the calls in the
 * family's own syntax, each function's arguments held to its parameters schema.
 *
 * Each function's schema is converted by grammar/ with a prefix of its own (t0-, t1-, ...),
 * so its rules live side by side with the others'; a rule per function writes the part of a
 * call that names it, and the root writes the calls around them:
 *
 *   root ::= call ( SEP call )*                       (one call unless parallel)
 *   call ::= OPEN ( fn0 | fn1 ) CLOSE
 *   fn0  ::= "\"get_weather\", \"arguments\": " t0-root
 *
 * hermes:      OPEN "<tool_call>\n{\"name\": "   CLOSE "}\n</tool_call>"   SEP "\n"
 * llama3_json: OPEN "{\"name\": "                CLOSE "}"                 SEP "; "   ("parameters")
 * mistral:     OPEN "{\"name\": "                CLOSE "}"                 SEP ", "   inside [ ]
 *              (the array without its [TOOL_CALLS] marker: a special token has no text the
 *              grammar could match; the reply reader takes the bare array)
 *
 * With a reasoning syntax, the reasoning may come first (and must, when the prompt opened
 * it): "<think>" text "</think>", where the text holds no "</".
 */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "grammar/grammar.h"
#include "pagellm.h"
#include "reply/reply_internal.h"
#include "util/alloc.h"
#include "util/buf.h"
#include "util/status.h"

typedef struct syntax {
    const char *open, *close, *sep, *args_key, *before, *after;
} syntax;

static const syntax SYNTAXES[] = {
    {"<tool_call>\n{\"name\": ", "}\n</tool_call>", "\n", "arguments", "", ""},
    {"{\"name\": ", "}", "; ", "parameters", "", ""},
    {"{\"name\": ", "}", ", ", "arguments", "\"[\" ", " \"]\""},
};

static pl_status put(pl_buf *b, const char *s) {
    return pl_buf_put(b, s, strlen(s), "tool grammar");
}

/* s as a GBNF string literal. */
static pl_status literal(pl_buf *b, const char *s) {
    PL_TRY(put(b, "\""));
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        if (*p == '"' || *p == '\\') snprintf(esc, sizeof esc, "\\%c", *p);
        else if (*p == '\n') snprintf(esc, sizeof esc, "\\n");
        else if (*p < 0x20) snprintf(esc, sizeof esc, "\\x%02X", *p);
        else esc[0] = (char)*p, esc[1] = '\0';
        PL_TRY(put(b, esc));
    }
    return put(b, "\"");
}

/* fnK ::= "\"NAME\", \"ARGS\": " tK-root, and the schema's rules. */
static pl_status function_rules(pl_buf *b, size_t k, const char *name, json_t *params,
                                const syntax *sx) {
    char *schema = params && !json_is_null(params)
                       ? json_dumps(params, JSON_COMPACT | JSON_ENCODE_ANY)
                       : NULL;
    const char *text = schema ? schema : "{\"type\": \"object\"}";
    char prefix[32], *rules = NULL;
    snprintf(prefix, sizeof prefix, "t%zu-", k);
    pl_status s = pl_gram_schema_to_gbnf(text, strlen(text), prefix, &rules);
    free(schema);
    if (s != PL_OK) return pl_fail_prefix(s, "tools[%zu].function.parameters", k);
    json_t *js = json_string(name);
    char *quoted = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL; /* "name", escaped as JSON */
    json_decref(js);
    char head[64];
    snprintf(head, sizeof head, "fn%zu ::= ", k);
    pl_buf lit = {0};
    s = quoted ? PL_OK : pl_fail(PL_ERR_OUT_OF_MEMORY, "tool grammar");
    if (s == PL_OK) s = put(&lit, quoted);
    if (s == PL_OK) s = put(&lit, ", \"");
    if (s == PL_OK) s = put(&lit, sx->args_key);
    if (s == PL_OK) s = put(&lit, "\": ");
    if (s == PL_OK) s = pl_buf_put(&lit, "", 1, "tool grammar");
    if (s == PL_OK) s = put(b, head);
    if (s == PL_OK) s = literal(b, lit.p);
    if (s == PL_OK) {
        char tail[48];
        snprintf(tail, sizeof tail, " t%zu-root\n", k);
        s = put(b, tail);
    }
    if (s == PL_OK) s = put(b, rules);
    if (s == PL_OK && rules[0] && rules[strlen(rules) - 1] != '\n') s = put(b, "\n");
    free(quoted);
    pl_buf_free(&lit);
    pl_free(rules);
    return s;
}

static pl_status body(pl_buf *b, json_t *tools, const char *only, bool parallel,
                      const syntax *sx, bool reasoning, bool open) {
    if (!json_is_array(tools))
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "tools: expected a list of functions");
    pl_buf alts = {0};
    size_t n = 0;
    pl_status s = PL_OK;
    for (size_t i = 0; s == PL_OK && i < json_array_size(tools); i++) {
        json_t *f = json_object_get(json_array_get(tools, i), "function");
        const char *name = json_string_value(json_object_get(f, "name"));
        if (!name || !name[0]) {
            s = pl_fail(PL_ERR_INVALID_ARGUMENT, "tools[%zu]: expected {\"type\": \"function\", "
                        "\"function\": {\"name\": ..., \"parameters\": ...}}", i);
            break;
        }
        if (only && strcmp(name, only) != 0) continue;
        json_t *params = json_object_get(f, "parameters");
        if (params && !json_is_object(params) && !json_is_null(params)) {
            s = pl_fail(PL_ERR_INVALID_ARGUMENT, "tools[%zu].function.parameters: expected a JSON "
                        "Schema object", i);
            break;
        }
        s = function_rules(b, i, name, params, sx);
        char alt[32];
        snprintf(alt, sizeof alt, "%sfn%zu", n ? " | " : "", i);
        if (s == PL_OK) s = put(&alts, alt);
        n++;
    }
    if (s == PL_OK && n == 0)
        s = only ? pl_fail(PL_ERR_INVALID_ARGUMENT, "tools: no function named \"%.64s\"", only)
                 : pl_fail(PL_ERR_INVALID_ARGUMENT, "tools: no function to call");
    if (s == PL_OK) s = put(b, "call ::= ");
    if (s == PL_OK) s = literal(b, sx->open);
    if (s == PL_OK) s = put(b, " ( ");
    if (s == PL_OK) s = pl_buf_put(&alts, "", 1, "tool grammar");
    if (s == PL_OK) s = put(b, alts.p);
    if (s == PL_OK) s = put(b, " ) ");
    if (s == PL_OK) s = literal(b, sx->close);
    if (s == PL_OK) s = put(b, "\ncalls ::= call");
    if (s == PL_OK && parallel) {
        s = put(b, " ( ");
        if (s == PL_OK) s = literal(b, sx->sep);
        if (s == PL_OK) s = put(b, " call )*");
    }
    if (s == PL_OK && reasoning)
        s = put(b, "\nthink-text ::= ( [^<] | \"<\" [^/] )*\n"
                   "think-end ::= \"</think>\" [ \\n]{0,4}\n");
    if (s == PL_OK) s = put(b, "\nroot ::= ");
    if (s == PL_OK && reasoning)
        s = put(b, open ? "think-text think-end " : "( \"<think>\" think-text think-end )? ");
    if (s == PL_OK) s = put(b, sx->before);
    if (s == PL_OK) s = put(b, "calls");
    if (s == PL_OK) s = put(b, sx->after);
    if (s == PL_OK) s = put(b, "\n");
    pl_buf_free(&alts);
    return s;
}

pl_status pl_reply_tool_grammar(const char *tools_json, const char *name, bool parallel,
                                const pl_reply_options *opt, char **out_gbnf) {
    if (!tools_json || !out_gbnf)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "reply_tool_grammar: NULL argument");
    if (opt && opt->struct_size != sizeof(pl_reply_options))
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "reply options: struct_size %zu is not %zu "
                       "(use pl_reply_options_default)", opt->struct_size,
                       sizeof(pl_reply_options));
    int k = 0, rsn = -1;
    if (opt && opt->tool_parser && (k = pl_reply_tool_syntax(opt->tool_parser)) < 0)
        return PL_ERR_NOT_FOUND;
    if (opt && opt->reasoning_parser && (rsn = pl_reply_reasoning_syntax(opt->reasoning_parser)) < 0)
        return PL_ERR_NOT_FOUND;
    json_error_t err;
    json_t *tools = json_loads(tools_json, JSON_DECODE_ANY, &err);
    if (!tools)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "tools: not valid JSON (line %d, column %d: %s)",
                       err.line, err.column, err.text);
    bool open = rsn == 1 || (rsn == 0 && pl_reply_prompt_opens(opt->prompt));
    pl_buf b = {0};
    pl_status s = body(&b, tools, name, parallel, &SYNTAXES[k], rsn >= 0, open);
    json_decref(tools);
    if (s == PL_OK) s = pl_buf_put(&b, "", 1, "tool grammar");
    if (s != PL_OK) {
        pl_buf_free(&b);
        return s;
    }
    *out_gbnf = b.p;
    return PL_OK;
}
