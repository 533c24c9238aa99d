/*
 * tests/reply/test_reply.c - chat replies into reasoning, content and tool calls (reply/):
 * each family's syntax with the exact parts expected, text left as content where a call does
 * not parse, and the stream: the same text fed one byte at a time and cut at random places
 * gives deltas that join to the whole parse (each call's first delta with its id and name).
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "pagellm.h"
#include "test_support.h"
#include "util/alloc.h"

TestSuite(reply, .timeout = 60.0);

static pl_reply_options opts(const char *tool, const char *rsn, const char *prompt) {
    pl_reply_options o;
    pl_reply_options_default(&o);
    o.tool_parser = tool;
    o.reasoning_parser = rsn;
    o.prompt = prompt;
    o.id_seed = 42;
    return o;
}

static pl_reply *parse(const char *tool, const char *rsn, const char *prompt, const char *text) {
    pl_reply_options o = opts(tool, rsn, prompt);
    pl_reply *r = NULL;
    cr_assert_eq(pl_reply_parse(text, strlen(text), &o, &r), PL_OK, "%s", pl_last_error());
    return r;
}

static void str_eq_or_null(const char *got, const char *want, const char *what) {
    if (!want) cr_assert_null(got, "%s: '%s', expected none", what, got ? got : "");
    else cr_assert(got && !strcmp(got, want), "%s: '%s', expected '%s'", what, got ? got : "(none)",
                   want);
}

/* What the deltas of one streamed run join to. */
typedef struct joined {
    char content[4096], reasoning[4096];
    char args[8][1024], names[8][64], ids[8][48];
    int n_calls;
    bool any_content, any_reasoning;
} joined;

static void join(joined *j, const pl_reply_delta *d, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char *dst = d[i].part == PL_REPLY_CONTENT     ? j->content
                    : d[i].part == PL_REPLY_REASONING ? j->reasoning
                                                      : NULL;
        if (d[i].part == PL_REPLY_TOOL_CALL) {
            int k = d[i].tool_index;
            cr_assert(k >= 0 && k < 8);
            if (d[i].tool_id) {
                cr_assert_eq(k, j->n_calls, "calls come in order");
                cr_assert_not_null(d[i].tool_name);
                snprintf(j->ids[k], sizeof j->ids[k], "%s", d[i].tool_id);
                snprintf(j->names[k], sizeof j->names[k], "%s", d[i].tool_name);
                j->n_calls++;
            } else {
                cr_assert_lt(k, j->n_calls, "arguments before the call's name");
                cr_assert_null(d[i].tool_name);
            }
            dst = j->args[k];
        } else {
            cr_assert_gt(d[i].len, 0, "an empty text delta");
            cr_assert_eq(d[i].tool_index, -1);
            if (d[i].part == PL_REPLY_CONTENT) j->any_content = true;
            else j->any_reasoning = true;
        }
        cr_assert_lt(strlen(dst) + d[i].len, 1024);
        strncat(dst, d[i].text, d[i].len);
    }
}

/* Feeds text in pieces cut at the given places (ascending; text's length ends it). */
static void stream(const pl_reply_options *o, const char *text, const size_t *cuts, size_t n_cuts,
                   joined *j) {
    memset(j, 0, sizeof *j);
    pl_reply_parser *p;
    cr_assert_eq(pl_reply_parser_create(o, &p), PL_OK, "%s", pl_last_error());
    size_t at = 0, len = strlen(text);
    for (size_t i = 0; i <= n_cuts; i++) {
        size_t to = i < n_cuts ? cuts[i] : len;
        const pl_reply_delta *d;
        size_t n;
        cr_assert_eq(pl_reply_parser_feed(p, text + at, to - at, i == n_cuts, &d, &n), PL_OK);
        join(j, d, n);
        at = to;
    }
    cr_assert_eq(pl_reply_parser_tool_calls(p), (size_t)j->n_calls);
    const pl_reply_delta *d;
    size_t n;
    cr_assert_eq(pl_reply_parser_feed(p, "x", 1, false, &d, &n), PL_ERR_INVALID_ARGUMENT);
    pl_reply_parser_free(p);
}

/* The stream, cut everywhere and at random places, joins to the whole parse r. */
static void check_stream(const char *tool, const char *rsn, const char *prompt, const char *text,
                         const pl_reply *r) {
    pl_reply_options o = opts(tool, rsn, prompt);
    size_t len = strlen(text);
    size_t *cuts = malloc((len + 1) * sizeof *cuts);
    pl_test_rng rng;
    pl_test_rng_seed(&rng, 7);
    for (int run = 0; run < 12; run++) {
        size_t n = 0;
        if (run == 0) {
            for (size_t i = 1; i < len; i++) cuts[n++] = i; /* one byte at a time */
        } else if (run > 1) {
            for (size_t i = 1; i < len; i++)
                if (pl_test_rng_below(&rng, 5) == 0) cuts[n++] = i;
        }
        joined j;
        stream(&o, text, cuts, n, &j);
        char what[64];
        snprintf(what, sizeof what, "stream run %d", run);
        cr_assert_str_eq(j.content, r->content ? r->content : "", "%s content of '%s'", what, text);
        cr_assert_str_eq(j.reasoning, r->reasoning_content ? r->reasoning_content : "", "%s", what);
        cr_assert_eq(j.any_reasoning, r->reasoning_content != NULL, "%s", what);
        cr_assert_eq((size_t)j.n_calls, r->n_tool_calls, "%s: calls of '%s'", what, text);
        for (int k = 0; k < j.n_calls; k++) {
            cr_assert_str_eq(j.names[k], r->tool_calls[k].name, "%s", what);
            cr_assert_str_eq(j.ids[k], r->tool_calls[k].id, "%s", what);
            cr_assert_str_eq(j.args[k], r->tool_calls[k].arguments, "%s", what);
        }
    }
    free(cuts);
}

/* Parses whole, checks the parts, then the stream. calls: name, arguments pairs. */
static void expect(const char *tool, const char *rsn, const char *prompt, const char *text,
                   const char *content, const char *reasoning, int n_calls, ...) {
    pl_reply *r = parse(tool, rsn, prompt, text);
    str_eq_or_null(r->content, content, "content");
    str_eq_or_null(r->reasoning_content, reasoning, "reasoning");
    cr_assert_eq(r->n_tool_calls, (size_t)n_calls, "'%s': %zu calls", text, r->n_tool_calls);
    va_list ap;
    va_start(ap, n_calls);
    for (int k = 0; k < n_calls; k++) {
        const char *name = va_arg(ap, const char *), *args = va_arg(ap, const char *);
        cr_assert_str_eq(r->tool_calls[k].name, name);
        cr_assert_str_eq(r->tool_calls[k].arguments, args);
        json_t *v = json_loads(args, 0, NULL);
        cr_assert(json_is_object(v), "arguments are a JSON object: %s", args);
        json_decref(v);
    }
    va_end(ap);
    check_stream(tool, rsn, prompt, text, r);
    pl_reply_free(r);
}

Test(reply, plain_text_is_content_byte_for_byte) {
    const char *texts[] = {"", "Hello", "  lead and trail \n\n", "a <tool_call b", "{\"a\": 1}",
                           "[1] one", "<think>x</think>y", "caf\xc3\xa9 \xe6\x97\xa5"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        expect(NULL, NULL, NULL, texts[i], texts[i], NULL, 0);
        if (i != 1 && i != 2 && i != 7) continue; /* no marker of any syntax */
        for (int t = 0; t < 3; t++) {
            const char *tool[] = {"hermes", "llama3_json", "mistral"};
            expect(tool[t], "qwen3", NULL, texts[i], texts[i], NULL, 0);
        }
    }
}

/* An empty reply (a request stopped at once) under every syntax, reasoning open or not: no
 * text ever reaches the parser's buffer (fuzz_reply found "NULL + 0" there under UBSan). */
Test(reply, empty_reply_under_every_syntax) {
    const char *tools[] = {NULL, "hermes", "llama3_json", "mistral"};
    const char *rsns[] = {NULL, "qwen3", "deepseek_r1"};
    const char *prompts[] = {NULL, "<|im_start|>assistant\n<think>\n"};
    for (int t = 0; t < 4; t++)
        for (int k = 0; k < 3; k++)
            for (int q = 0; q < 2; q++) {
                pl_reply *r = parse(tools[t], rsns[k], prompts[q], "");
                cr_assert_eq(r->n_tool_calls, 0);
                cr_assert(r->content && !r->content[0], "content of an empty reply");
                cr_assert(!r->reasoning_content || !r->reasoning_content[0]);
                check_stream(tools[t], rsns[k], prompts[q], "", r);
                pl_reply_free(r);
            }
}

Test(reply, hermes) {
    expect("hermes", NULL, NULL,
           "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n"
           "</tool_call>",
           NULL, NULL, 1, "get_weather", "{\"location\": \"Paris\"}");
    expect("hermes", NULL, NULL,
           "Let me check both.\n\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n"
           "<tool_call>\n{\"arguments\": {\"q\": [1, {\"x\": \"}\"}]}, \"name\": \"b\"}\n</tool_call>",
           "Let me check both.", NULL, 2, "a", "{}", "b", "{\"q\": [1, {\"x\": \"}\"}]}");
    /* arguments as text holding JSON, no arguments, unicode, no closing tag */
    expect("hermes", NULL, NULL,
           "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>"
           "<tool_call>{\"name\": \"g\"}</tool_call>"
           "<tool_call>{\"name\": \"h\\u00e9\", \"arguments\": {\"t\": \"\xe6\x97\xa5\\n\"}}",
           NULL, NULL, 3, "f", "{\"a\": 1}", "g", "{}", "h\xc3\xa9", "{\"t\": \"\xe6\x97\xa5\\n\"}");
    /* text after the calls is content too */
    expect("hermes", NULL, NULL,
           "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\n\nDone.",
           "Done.", NULL, 1, "f", "{}");
}

Test(reply, hermes_unparseable_calls_stay_content) {
    const char *bad[] = {
        "<tool_call>\n{\"x\": 1}\n</tool_call>",                /* no name */
        "<tool_call>\nnot json\n</tool_call>",                    /* not JSON at all */
        "<tool_call>\n{\"name\": 5, \"arguments\": {}}</tool_call>", /* name not a string */
        "see <tool_call>",                                        /* cut before the object */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pl_reply *r = parse("hermes", NULL, NULL, bad[i]);
        cr_assert_eq(r->n_tool_calls, 0, "%s", bad[i]);
        cr_assert_str_eq(r->content, bad[i]);
        check_stream("hermes", NULL, NULL, bad[i], r);
        pl_reply_free(r);
    }
    /* whole, a call whose arguments break is content; a stream has sent its name already and
     * ends it there */
    const char *broken = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": }}</tool_call>";
    pl_reply *r = parse("hermes", NULL, NULL, broken);
    cr_assert_eq(r->n_tool_calls, 0);
    cr_assert_str_eq(r->content, broken);
    pl_reply_free(r);
    pl_reply_options o = opts("hermes", NULL, NULL);
    joined j;
    stream(&o, broken, NULL, 0, &j);
    cr_assert_eq(j.n_calls, 1);
    cr_assert_str_eq(j.names[0], "f");
    cr_assert_str_eq(j.args[0], "{\"a\": ");
}

Test(reply, llama3_json) {
    expect("llama3_json", NULL, NULL,
           "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}}", NULL, NULL, 1,
           "get_weather", "{\"location\": \"Paris\"}");
    expect("llama3_json", NULL, NULL,
           "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": 1}}; {\"name\": \"b\", "
           "\"arguments\": {}}",
           NULL, NULL, 2, "a", "{\"x\": 1}", "b", "{}");
    /* JSON that is not a call, and text, are content */
    expect("llama3_json", NULL, NULL, "{\"answer\": 42}", "{\"answer\": 42}", NULL, 0);
    expect("llama3_json", NULL, NULL, "The answer is {\"name\": \"f\"}",
           "The answer is {\"name\": \"f\"}", NULL, 0);
    expect("llama3_json", NULL, NULL, "  {\"name\": \"f\", \"parameters\": {}}  ", NULL, NULL, 1,
           "f", "{}");
}

Test(reply, mistral) {
    expect("mistral", NULL, NULL,
           "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}, "
           "{\"name\": \"b\", \"arguments\": {}}]",
           NULL, NULL, 2, "get_weather", "{\"location\": \"Paris\"}", "b", "{}");
    /* without the marker (a SentencePiece vocabulary drops it) */
    expect("mistral", NULL, NULL, "[{\"name\": \"f\", \"arguments\": {\"a\": [1, 2]}}]", NULL, NULL,
           1, "f", "{\"a\": [1, 2]}");
    /* the newer form */
    expect("mistral", NULL, NULL, "[TOOL_CALLS]get_weather[ARGS]{\"location\": \"Paris\"}", NULL,
           NULL, 1, "get_weather", "{\"location\": \"Paris\"}");
    expect("mistral", NULL, NULL, "Sure.[TOOL_CALLS]f[ARGS]{}[TOOL_CALLS]g[ARGS]{\"x\": 2}",
           "Sure.", NULL, 2, "f", "{}", "g", "{\"x\": 2}");
    expect("mistral", NULL, NULL, "[1] is a list", "[1] is a list", NULL, 0);
    /* ids: 9 letters and digits, as the template checks them */
    pl_reply *r = parse("mistral", NULL, NULL, "[{\"name\": \"f\", \"arguments\": {}}]");
    cr_assert_eq(strlen(r->tool_calls[0].id), 9);
    for (int i = 0; i < 9; i++)
        cr_assert(strchr("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
                         r->tool_calls[0].id[i]));
    pl_reply_free(r);
}

Test(reply, ids_follow_the_seed) {
    const char *text = "<tool_call>{\"name\": \"f\"}</tool_call><tool_call>{\"name\": \"g\"}</tool_call>";
    pl_reply *a = parse("hermes", NULL, NULL, text), *b = parse("hermes", NULL, NULL, text);
    cr_assert_str_eq(a->tool_calls[0].id, b->tool_calls[0].id);
    cr_assert_str_neq(a->tool_calls[0].id, a->tool_calls[1].id);
    cr_assert_eq(strncmp(a->tool_calls[0].id, "call_", 5), 0);
    cr_assert_eq(strlen(a->tool_calls[0].id), 29);
    pl_reply_options o = opts("hermes", NULL, NULL);
    o.id_seed = 43;
    pl_reply *c;
    cr_assert_eq(pl_reply_parse(text, strlen(text), &o, &c), PL_OK);
    cr_assert_str_neq(a->tool_calls[0].id, c->tool_calls[0].id);
    pl_reply_free(a);
    pl_reply_free(b);
    pl_reply_free(c);
}

Test(reply, reasoning) {
    expect(NULL, "qwen3", NULL, "<think>\nI think.\n</think>\n\nAnswer.", "Answer.", "I think.", 0);
    expect(NULL, "qwen3", NULL, "Answer without thinking.", "Answer without thinking.", NULL, 0);
    /* the template opened it (Qwen3 thinking models); enable_thinking=false closed it */
    expect(NULL, "qwen3", "<|im_start|>assistant\n<think>\n", "I think.\n</think>\n\nAnswer.",
           "Answer.", "I think.", 0);
    expect(NULL, "qwen3", "<|im_start|>assistant\n<think>\n\n</think>\n\n", "Answer.", "Answer.",
           NULL, 0);
    expect(NULL, "deepseek_r1", NULL, "Hmm, 2+2.</think>4", "4", "Hmm, 2+2.", 0);
    expect(NULL, "deepseek_r1", NULL, "<think>Hmm.</think>\n4", "4", "Hmm.", 0);
    /* cut short while thinking: all of it is reasoning */
    expect(NULL, "deepseek_r1", NULL, "Still thinking", "", "Still thinking", 0);
    /* reasoning, then a tool call */
    expect("hermes", "qwen3", NULL,
           "<think>\nNeed the weather.\n</think>\n\n<tool_call>\n{\"name\": \"w\", \"arguments\": "
           "{\"city\": \"Oslo\"}}\n</tool_call>",
           NULL, "Need the weather.", 1, "w", "{\"city\": \"Oslo\"}");
}

Test(reply, tool_parser_from_the_template) {
    const char *cases[][2] = {
        {"qwen2.5-3b-instruct", "hermes"},
        {"llama-3.1-8b-instruct", "llama3_json"},
        {"llama-3.2-3b-instruct", "llama3_json"},
        {"mistral-7b-instruct-v0.3", "mistral"},
        {"tinyllama-1.1b-chat-v1.0", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s.tokenizer_config.json", PL_TMPL_DATA_DIR, cases[i][0]);
        json_t *cfg = json_load_file(path, JSON_DECODE_INT_AS_REAL, NULL);
        cr_assert_not_null(cfg, "%s", path);
        const char *t = json_string_value(json_object_get(cfg, "chat_template"));
        str_eq_or_null(pl_reply_tool_parser_for(t), cases[i][1], cases[i][0]);
        json_decref(cfg);
    }
    cr_assert_null(pl_reply_tool_parser_for(NULL));
}

Test(reply, refusals) {
    pl_reply_options o = opts("hermez", NULL, NULL);
    pl_reply *r;
    cr_assert_eq(pl_reply_parse("x", 1, &o, &r), PL_ERR_NOT_FOUND);
    cr_assert(strstr(pl_last_error(), "hermez") && strstr(pl_last_error(), "llama3_json"), "%s",
              pl_last_error());
    o = opts(NULL, "qwen", NULL);
    pl_reply_parser *p;
    cr_assert_eq(pl_reply_parser_create(&o, &p), PL_ERR_NOT_FOUND);
    cr_assert(strstr(pl_last_error(), "deepseek_r1"), "%s", pl_last_error());
    o = opts(NULL, NULL, NULL);
    o.struct_size = 3;
    cr_assert_eq(pl_reply_parse("x", 1, &o, &r), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_reply_parse("x", 1, NULL, &r), PL_ERR_INVALID_ARGUMENT);
    pl_reply_free(NULL);
    pl_reply_parser_free(NULL);
}

Test(reply, allocation_failures) {
    const char *text = "<think>a</think>Hi <tool_call>{\"name\": \"f\", \"arguments\": {\"x\": 1}}"
                       "</tool_call>";
    pl_reply_options o = opts("hermes", "qwen3", NULL);
    long failed = 0;
    pl_reply *r = NULL;
    PL_ALLOC_SWEEP(failed, k, pl_reply_parse(text, strlen(text), &o, &r), {});
    cr_assert_gt(failed, 3);
    cr_assert_eq(r->n_tool_calls, 1);
    cr_assert_str_eq(r->content, "Hi");
    pl_reply_free(r);
    PL_ASSERT_NO_LEAKS();
}

/* ---- the grammar of a reply that must call tools ------------------------------------------- */

static const char *const TOOLS =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": "
    "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": "
    "{\"type\": \"integer\", \"minimum\": 1, \"maximum\": 7}}, \"required\": [\"city\"]}}}, "
    "{\"type\": \"function\", \"function\": {\"name\": \"now\"}}]";

/* Whether the grammar takes text whole (and is complete after it). */
static bool takes(const char *gbnf, const char *text) {
    pl_gram *g;
    cr_assert_eq(pl_gram_parse(gbnf, strlen(gbnf), NULL, &g), PL_OK, "%s\n%s", pl_last_error(),
                 gbnf);
    pl_gram_matcher m;
    cr_assert_eq(pl_gram_matcher_init(&m, g), PL_OK);
    bool ok = pl_gram_matcher_accept_bytes(&m, text, strlen(text)) == PL_OK &&
              pl_gram_matcher_is_complete(&m);
    pl_gram_matcher_deinit(&m);
    pl_gram_free(g);
    return ok;
}

static char *tool_grammar(const char *tool, const char *rsn, const char *prompt, const char *name,
                          bool parallel) {
    pl_reply_options o = opts(tool, rsn, prompt);
    char *g = NULL;
    cr_assert_eq(pl_reply_tool_grammar(TOOLS, name, parallel, &o, &g), PL_OK, "%s",
                 pl_last_error());
    return g;
}

/* The grammar takes the calls written in the family's syntax, and the reply parser reads them
 * back; it refuses another function, arguments against the schema, and a second call unless
 * parallel. */
static void check_syntax(const char *tool, const char *one, const char *two, const char *bad) {
    char *g = tool_grammar(tool, NULL, NULL, NULL, false), *gp = tool_grammar(tool, NULL, NULL,
                                                                             NULL, true);
    cr_assert(takes(g, one), "%s: %s\n%s", tool, one, g);
    cr_assert(!takes(g, two), "%s: two calls without parallel", tool);
    cr_assert(takes(gp, two), "%s: %s\n%s", tool, two, gp);
    cr_assert(!takes(gp, bad), "%s: %s", tool, bad);
    pl_reply *r = parse(tool, NULL, NULL, two);
    cr_assert_eq(r->n_tool_calls, 2, "%s: %s", tool, two);
    cr_assert_str_eq(r->tool_calls[0].name, "get_weather");
    cr_assert_str_eq(r->tool_calls[1].name, "now");
    cr_assert_str_eq(r->tool_calls[1].arguments, "{}");
    pl_reply_free(r);
    pl_free_text(g);
    pl_free_text(gp);
    /* only the named function */
    g = tool_grammar(tool, NULL, NULL, "now", true);
    cr_assert(!takes(g, one), "%s: named now", tool);
    pl_free_text(g);
}

Test(reply, tool_grammar_per_syntax) {
    check_syntax("hermes",
                 "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", "
                 "\"days\": 3}}\n</tool_call>",
                 "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n"
                 "</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>",
                 "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"days\": 3}}\n"
                 "</tool_call>");
    check_syntax("llama3_json",
                 "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
                 "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}; "
                 "{\"name\": \"now\", \"parameters\": {}}",
                 "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\", \"days\": 9}}");
    check_syntax("mistral",
                 "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}]",
                 "[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}, "
                 "{\"name\": \"now\", \"arguments\": {}}]",
                 "[{\"name\": \"where\", \"arguments\": {}}]");
}

Test(reply, tool_grammar_reasoning_first) {
    const char *call = "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
    char text[512];
    snprintf(text, sizeof text, "<think>\nThe time, then.\n</think>\n\n%s", call);
    char *g = tool_grammar("hermes", "qwen3", NULL, NULL, false);
    cr_assert(takes(g, call) && takes(g, text), "%s", g);
    pl_free_text(g);
    /* opened by the prompt: the reasoning's end must come first */
    g = tool_grammar("hermes", "qwen3", "<|im_start|>assistant\n<think>\n", NULL, false);
    cr_assert(!takes(g, call));
    cr_assert(takes(g, strstr(text, "The time")), "%s", g);
    pl_free_text(g);
}

Test(reply, tool_grammar_refusals) {
    pl_reply_options o = opts("hermes", NULL, NULL);
    char *g;
    cr_assert_eq(pl_reply_tool_grammar("{}", NULL, false, &o, &g), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_reply_tool_grammar("[{\"function\": {}}]", NULL, false, &o, &g),
                 PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "tools[0]"), "%s", pl_last_error());
    cr_assert_eq(pl_reply_tool_grammar(TOOLS, "later", false, &o, &g), PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "later"), "%s", pl_last_error());
    const char *bad = "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
                      "{\"type\": \"object\", \"properties\": {\"a\": {\"not\": {}}}}}}]";
    cr_assert_eq(pl_reply_tool_grammar(bad, NULL, false, &o, &g), PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "tools[0].function.parameters") &&
                  strstr(pl_last_error(), "/properties/a"),
              "%s", pl_last_error());
    o = opts("hermez", NULL, NULL);
    cr_assert_eq(pl_reply_tool_grammar(TOOLS, NULL, false, &o, &g), PL_ERR_NOT_FOUND);
    PL_ASSERT_NO_LEAKS();
}
