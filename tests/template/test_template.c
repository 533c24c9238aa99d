/*
 * tests/template/test_template.c - the interpreter beyond the oracle's fixtures: constructs the
 * oracle lacks (|d, |count, select/reject, the float test, loop.cycle), syntax errors and
 * refused constructs with their lines, hostile templates failing cleanly under the limits,
 * allocation failures, the chat helpers, and concurrent renders.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_support.h"
#include "tmpl_check.h"
#include "util/alloc.h"

static void *xmalloc(size_t n) {
    void *p = malloc(n);
    cr_assert_not_null(p);
    return p;
}

/* Renders and asserts the exact output. */
static void expect_render(const char *src, const char *vars, const char *want) {
    char *out = NULL;
    pl_status st = tmpl_render_src(src, vars, &out);
    cr_assert_eq(st, PL_OK, "%s\n-> %s: %s", src, pl_status_name(st), pl_last_error());
    cr_expect_str_eq(out, want, "%s", src);
    pl_free(out);
}

/* Asserts that parsing fails with code and a message containing each of the fragments. */
static void expect_parse_error(const char *src, pl_status code, const char *frag1,
                               const char *frag2) {
    pl_tmpl *t = NULL;
    pl_status st = pl_tmpl_parse(src, strlen(src), &t);
    cr_assert_eq(st, code, "%s\n-> %s (%s), wanted %s", src, pl_status_name(st), pl_last_error(),
                 pl_status_name(code));
    cr_assert_null(t);
    if (frag1)
        cr_expect(strstr(pl_last_error(), frag1), "\"%s\" lacks \"%s\"", pl_last_error(), frag1);
    if (frag2)
        cr_expect(strstr(pl_last_error(), frag2), "\"%s\" lacks \"%s\"", pl_last_error(), frag2);
}

/* Asserts that rendering fails with code and a message containing frag. */
static void expect_render_error(const char *src, const char *vars, pl_status code,
                                const char *frag) {
    char *out = NULL;
    pl_status st = tmpl_render_src(src, vars, &out);
    cr_assert_eq(st, code, "%s\n-> %s (%s), wanted %s", src, pl_status_name(st),
                 st == PL_OK ? out : pl_last_error(), pl_status_name(code));
    cr_assert_null(out);
    if (frag)
        cr_expect(strstr(pl_last_error(), frag), "\"%s\" lacks \"%s\"", pl_last_error(), frag);
}

/* ---- what the oracle lacks, with Jinja's meaning ----------------------------------------- */

Test(template, jinja_extras) {
    expect_render("{{ x|d('none') }}|{{ 1|d(2) }}|{{ x|default }}|[{{ x|d }}]", NULL, "none|1||[]");
    expect_render("{{ [1, 2, 3]|count }}|{{ 'abc'|count }}", NULL, "3|3");
    expect_render("{{ [1, 0, 2, none]|select|list }}|{{ [1, 0, 2]|reject|list }}", NULL,
                  "[1, 2]|[0]");
    expect_render(
        "{{ [1, 2, 3, 4]|select('odd')|join }}|{{ ['a', 'b', 'a']|reject('equalto', 'a')|join }}",
        NULL, "13|b");
    expect_render("{{ 1.5 is float }}{{ 1 is float }}{{ x is float }}", "{\"x\": 2.0}",
                  "truefalsefalse");
    expect_render("{% for x in [1, 2, 3, 4, 5] %}{{ loop.cycle('a', 'b') }}{% endfor %}", NULL,
                  "ababa");
    expect_render("[{{ []|first }}][{{ []|last }}]", NULL, "[][]");
    PL_ASSERT_NO_LEAKS();
}

Test(template, loop_object_is_a_mapping) {
    expect_render(
        "{% for x in [7, 8] %}{{ loop|tojson }};{{ loop is mapping }};{% endfor %}", NULL,
        "{\"index\": 1, \"index0\": 0, \"revindex\": 2, \"revindex0\": 1, \"first\": true, "
        "\"last\": false, \"length\": 2, \"previtem\": null, \"nextitem\": 8};true;"
        "{\"index\": 2, \"index0\": 1, \"revindex\": 1, \"revindex0\": 0, \"first\": false, "
        "\"last\": true, \"length\": 2, \"previtem\": 7, \"nextitem\": null};true;");
}

Test(template, llama_3_1_builtin_tools_use_reject) {
    /* the oracle fails on this branch of the real Llama 3.1 template (it has no `reject`) */
    json_t *cfg = tmpl_fixture("llama-3.1-8b-instruct.tokenizer_config.json");
    const char *src;
    size_t len;
    cr_assert_eq(pl_tmpl_config_source(cfg, NULL, false, &src, &len), PL_OK);
    pl_tmpl *t = NULL;
    cr_assert_eq(pl_tmpl_parse(src, len, &t), PL_OK, "%s", pl_last_error());
    char *out = NULL;
    cr_assert_eq(pl_tmpl_render_chat(t, cfg, "[{\"role\": \"user\", \"content\": \"hi\"}]", NULL,
                                     true,
                                     "{\"builtin_tools\": [\"brave_search\", \"code_interpreter\", "
                                     "\"wolfram_alpha\"]}",
                                     &out, NULL),
                 PL_OK, "%s", pl_last_error());
    cr_expect_str_eq(out, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
                          "Environment: ipython\nTools: brave_search, wolfram_alpha\n\n"
                          "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
                          "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
                          "<|start_header_id|>assistant<|end_header_id|>\n\n");
    pl_free(out);
    pl_tmpl_free(t);
    json_decref(cfg);
    PL_ASSERT_NO_LEAKS();
}

Test(template, strftime_now_uses_the_clock) {
    char before[64], after[64], tail[64], want[2][160];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(before, sizeof before, "%d %b %Y", &tm);
    char *out = NULL;
    cr_assert_eq(tmpl_render_src("{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%B %%Y %A') }}",
                                 NULL, &out),
                 PL_OK, "%s", pl_last_error());
    now = time(NULL);
    localtime_r(&now, &tm);
    strftime(after, sizeof after, "%d %b %Y", &tm);
    strftime(tail, sizeof tail, "|%B %%Y %%A", &tm);
    snprintf(want[0], sizeof want[0], "%s%s", before, tail);
    snprintf(want[1], sizeof want[1], "%s%s", after, tail);
    /* %A is not one the oracle knows: it stays */
    cr_expect(strcmp(out, want[0]) == 0 || strcmp(out, want[1]) == 0, "got \"%s\", wanted \"%s\"",
              out, want[1]);
    pl_free(out);
}

/* ---- errors name the line ---------------------------------------------------------------- */

Test(template, syntax_errors_name_line_and_column) {
    expect_parse_error("a\nb {{ x +\n}}", PL_ERR_FORMAT, "line 3, column 1", NULL);
    expect_parse_error("line1\n  {% if x %}\nno end", PL_ERR_FORMAT, "line 3", "endif");
    expect_parse_error("\n\n{{ x ! y }}", PL_ERR_FORMAT, "line 3, column 6",
                       "unexpected character");
    expect_parse_error("{% foo %}", PL_ERR_FORMAT, "line 1", "unknown statement");
    expect_parse_error("{{ 'abc }}", PL_ERR_FORMAT, "line 1", "unterminated string");
    expect_parse_error("{{ '\\q' }}", PL_ERR_FORMAT, "escaped character", NULL);
    expect_parse_error("{{ '\\x4' }}", PL_ERR_FORMAT, "hexadecimal", NULL);
    expect_parse_error("ok\n{# never closed", PL_ERR_FORMAT, "line 2", "comment");
    expect_parse_error("{{ x", PL_ERR_FORMAT, "end of input", NULL);
    expect_parse_error("{% for in x %}{% endfor %}", PL_ERR_FORMAT, "line 1", NULL);
    expect_parse_error("{% macro m(a=1, b) %}{% endmacro %}", PL_ERR_FORMAT, "non-default", NULL);
    expect_parse_error("{{ f(a=1, 2) }}", PL_ERR_FORMAT, "positional", NULL);
    expect_parse_error("{{ x[] }}", PL_ERR_FORMAT, "subscript", NULL);
    expect_parse_error("{{ x[1:2:3:4] }}", PL_ERR_FORMAT, "slice", NULL);
    expect_parse_error("{% endif %}", PL_ERR_FORMAT, "unknown statement", NULL);
    expect_parse_error("caf\xc3\n\xa9", PL_ERR_FORMAT, "line 1, column 4", "UTF-8");
    PL_ASSERT_NO_LEAKS();
}

Test(template, unsupported_constructs_refused_at_parse_with_line) {
    expect_parse_error("a\n{% include 'x.j2' %}", PL_ERR_UNSUPPORTED, "line 2", "include");
    expect_parse_error("{% extends 'base' %}", PL_ERR_UNSUPPORTED, "line 1", "extends");
    expect_parse_error("{% raw %}x{% endraw %}", PL_ERR_UNSUPPORTED, "raw", NULL);
    expect_parse_error("{% import 'm' as m %}", PL_ERR_UNSUPPORTED, "import", NULL);
    expect_parse_error("{% with a = 1 %}{% endwith %}", PL_ERR_UNSUPPORTED, "with", NULL);
    expect_parse_error("{% do x.append(1) %}", PL_ERR_UNSUPPORTED, "do", NULL);
    expect_parse_error("{% block b %}{% endblock %}", PL_ERR_UNSUPPORTED, "block", NULL);
    expect_parse_error("x\n\n{{ 2.5|round }}", PL_ERR_UNSUPPORTED, "line 3", "`round`");
    expect_parse_error("{{ l|batch(2) }}", PL_ERR_UNSUPPORTED, "`batch`", NULL);
    expect_parse_error("{% if false %}{{ x|wordcount }}{% endif %}", PL_ERR_UNSUPPORTED,
                       "`wordcount`", NULL);
    expect_parse_error("{{ x is divisibleby(3) }}", PL_ERR_UNSUPPORTED, "test", NULL);
    expect_parse_error("{{ x is sameas }}", PL_ERR_UNSUPPORTED, "`sameas`", NULL);
    expect_parse_error("{% set l = [] %}\n{{ l.append(1) }}", PL_ERR_UNSUPPORTED, "line 2",
                       "`append`");
    expect_parse_error("{{ d.update({'a': 1}) }}", PL_ERR_UNSUPPORTED, "`update`", NULL);
    expect_parse_error("{{ '{}'.format(1) }}", PL_ERR_UNSUPPORTED, "`format`", NULL);
    expect_parse_error("{{ lipsum(2) }}", PL_ERR_UNSUPPORTED, "`lipsum`", NULL);
    expect_parse_error("{{ dict(a=1) }}", PL_ERR_UNSUPPORTED, "`dict`", NULL);
    expect_parse_error("{{ l|selectattr('x', 'divisibleby', '3') }}", PL_ERR_UNSUPPORTED,
                       "`divisibleby`", NULL);
    expect_parse_error("{% macro m() %}{{ varargs }}{% endmacro %}", PL_ERR_UNSUPPORTED, "varargs",
                       NULL);
    expect_parse_error("{% macro m() %}{{ kwargs.a }}{% endmacro %}", PL_ERR_UNSUPPORTED, "kwargs",
                       NULL);
    expect_parse_error("{{ x|tojson(indent=2).strip() }}", PL_ERR_UNSUPPORTED, "after a filter",
                       NULL);
    /* a bound name is callable: macros, and names a set binds */
    expect_render("{% macro m() %}M{% endmacro %}{% set f = m %}{{ f() }}", NULL, "M");
    PL_ASSERT_NO_LEAKS();
}

Test(template, render_errors) {
    expect_render_error("a\n{{ raise_exception('Roles must alternate') }}", NULL,
                        PL_ERR_INVALID_ARGUMENT, "line 2: raise_exception: Roles must alternate");
    expect_render_error("{{ 1 }}", "{\"namespace\": 1}", PL_ERR_INVALID_ARGUMENT, "namespace");
    expect_render_error("{{ 1 }}", "{\"True\": 1}", PL_ERR_INVALID_ARGUMENT, "True");
    expect_render_error("{{ range }}", NULL, PL_ERR_UNSUPPORTED, "function");
    expect_render_error("{{ {'a': 1}|tojson(sort_keys=true) }}", NULL, PL_ERR_UNSUPPORTED,
                        "sort_keys");
    expect_render_error("{{ 'Ärger'|upper }}", NULL, PL_ERR_UNSUPPORTED, "U+00C4");
    expect_render_error("{{ x.lower() }}", "{\"x\": \"ΣΑΣ\"}", PL_ERR_UNSUPPORTED, "non-ASCII");
    expect_render("{{ '日本語 😀 ok'|upper }}|{{ 'Ok ÷ ×'|lower }}", NULL, "日本語 😀 OK|ok ÷ ×");
    char *out = (char *)1;
    pl_tmpl *t = tmpl_parse_ok("x");
    json_t *arr = json_array();
    cr_expect_eq(pl_tmpl_render(t, arr, &out, NULL), PL_ERR_INVALID_ARGUMENT);
    cr_expect_eq(out, (char *)1, "outputs untouched on failure");
    cr_expect_eq(pl_tmpl_render(NULL, NULL, &out, NULL), PL_ERR_INVALID_ARGUMENT);
    cr_expect_eq(pl_tmpl_parse(NULL, 0, &t), PL_ERR_INVALID_ARGUMENT);
    json_decref(arr);
    pl_tmpl_free(t);
    pl_tmpl_free(NULL);
    PL_ASSERT_NO_LEAKS();
}

Test(template, nul_bytes_and_empty_template) {
    pl_tmpl *t = NULL;
    cr_assert_eq(pl_tmpl_parse("a\0b{{ x }}", 10, &t), PL_OK, "%s", pl_last_error());
    json_t *vars = json_pack("{s:s%}", "x", "c\0d", (size_t)3);
    char *out;
    size_t n;
    cr_assert_eq(pl_tmpl_render(t, vars, &out, &n), PL_OK, "%s", pl_last_error());
    cr_assert_eq(n, 6);
    cr_expect_eq(memcmp(out, "a\0bc\0d", 7), 0);
    pl_free(out);
    pl_tmpl_free(t);
    json_decref(vars);
    expect_render("", NULL, "");
    expect_render("\n", NULL, "");
}

/* ---- hostile templates ------------------------------------------------------------------- */

Test(template, hostile_loops_stop_on_limits, .timeout = 20) {
    expect_render_error("{% for x in range(10**9) %}x{% endfor %}", NULL, PL_ERR_TOO_LONG,
                        "range()");
    /* the step budget or the memory cap, whichever comes first */
    expect_render_error("{% for x in range(100000) %}{% for y in range(100000) %}{% endfor %}"
                        "{% endfor %}",
                        NULL, PL_ERR_TOO_LONG, NULL);
    expect_render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NULL,
                        PL_ERR_TOO_LONG, "line 1: macro calls nested more than 64 deep");
    expect_render_error("{% set ns = namespace(s='ab') %}{% for i in range(64) %}"
                        "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
                        NULL, PL_ERR_TOO_LONG, "limit");
    expect_render_error("{% for i in range(1000000) %}{{ 'x' * 0 }}{% endfor %}", NULL,
                        PL_ERR_INVALID_ARGUMENT, "\"*\"");
    expect_render_error("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns|tojson }}", NULL,
                        PL_ERR_TOO_LONG, "deep");
    expect_render_error("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}"
                        "{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l }}",
                        NULL, PL_ERR_TOO_LONG, "deep");
    expect_render_error("{% for i in range(2000000) %}{% endfor %}", NULL, PL_ERR_TOO_LONG,
                        "range()");
    expect_render_error("{% set ns = namespace(l=[1]) %}{% for i in range(30) %}"
                        "{% set ns.l = ns.l + ns.l %}{% endfor %}",
                        NULL, PL_ERR_TOO_LONG, "limit");
    PL_ASSERT_NO_LEAKS();
}

Test(template, step_budget) {
    pl_tmpl_limits lim;
    pl_tmpl_limits_default(&lim);
    lim.max_steps = 100000;
    pl_tmpl *t = tmpl_parse_ok("{% for x in range(1000000) %}{% endfor %}");
    char *out = NULL;
    cr_expect_eq(pl_tmpl_render_limited(t, NULL, &lim, &out, NULL), PL_ERR_TOO_LONG);
    cr_expect(strstr(pl_last_error(), "budget of 100000 steps"), "%s", pl_last_error());
    pl_tmpl_free(t);
    /* scanning long strings costs steps too */
    t = tmpl_parse_ok("{% for x in range(1000) %}{{ 'q' in s }}{% endfor %}");
    json_t *vars = json_object();
    char *big = xmalloc(1 << 20);
    memset(big, 'a', 1 << 20);
    json_object_set_new(vars, "s", json_stringn(big, 1 << 20));
    lim.max_steps = 1000000;
    cr_expect_eq(pl_tmpl_render_limited(t, vars, &lim, &out, NULL), PL_ERR_TOO_LONG);
    free(big);
    json_decref(vars);
    pl_tmpl_free(t);
    PL_ASSERT_NO_LEAKS();
}

Test(template, zero_limits_take_defaults) {
    pl_tmpl_limits lim = {0};
    pl_tmpl *t = tmpl_parse_ok("{% for i in range(3) %}{{ i }}{% endfor %}");
    char *out = NULL;
    cr_assert_eq(pl_tmpl_render_limited(t, NULL, &lim, &out, NULL), PL_OK, "%s", pl_last_error());
    cr_expect_str_eq(out, "012");
    pl_free(out);
    pl_tmpl_free(t);
}

Test(template, hostile_output_and_memory_caps) {
    pl_tmpl_limits lim;
    pl_tmpl_limits_default(&lim);
    lim.max_output_bytes = 1000;
    pl_tmpl *t = tmpl_parse_ok("{% for i in range(200) %}0123456789{% endfor %}");
    char *out = NULL;
    pl_status st = pl_tmpl_render_limited(t, NULL, &lim, &out, NULL);
    cr_expect_eq(st, PL_ERR_TOO_LONG, "%s", pl_status_name(st));
    cr_expect(strstr(pl_last_error(), "output exceeds the limit of 1000"), "%s", pl_last_error());
    lim.max_output_bytes = 2000;
    cr_expect_eq(pl_tmpl_render_limited(t, NULL, &lim, &out, NULL), PL_OK);
    pl_free(out);
    pl_tmpl_free(t);

    pl_tmpl_limits_default(&lim);
    lim.max_memory_bytes = (size_t)1 << 20;
    t = tmpl_parse_ok("{% set ns = namespace(s='') %}{% for i in range(5000) %}"
                      "{% set ns.s = ns.s ~ 'abcdefgh' %}{% endfor %}{{ ns.s|length }}");
    st = pl_tmpl_render_limited(t, NULL, &lim, &out, NULL);
    cr_expect_eq(st, PL_ERR_TOO_LONG, "%s", pl_status_name(st));
    cr_expect(strstr(pl_last_error(), "memory limit"), "%s", pl_last_error());
    lim.max_memory_bytes = (size_t)512 << 20;
    cr_expect_eq(pl_tmpl_render_limited(t, NULL, &lim, &out, NULL), PL_OK, "%s", pl_last_error());
    cr_expect_str_eq(out, "40000");
    pl_free(out);
    pl_tmpl_free(t);
    PL_ASSERT_NO_LEAKS();
}

static char *cat3(const char *a, const char *b, const char *c) {
    size_t la = strlen(a), lb = strlen(b), lc = strlen(c);
    char *s = xmalloc(la + lb + lc + 1);
    memcpy(s, a, la);
    memcpy(s + la, b, lb);
    memcpy(s + la + lb, c, lc + 1);
    return s;
}

/* A source of n repetitions of a, then b, then n repetitions of c. */
static char *nest(const char *a, const char *b, const char *c, size_t n) {
    size_t la = strlen(a), lb = strlen(b), lc = strlen(c);
    char *s = xmalloc(n * (la + lc) + lb + 1), *p = s;
    for (size_t i = 0; i < n; i++, p += la) memcpy(p, a, la);
    memcpy(p, b, lb);
    p += lb;
    for (size_t i = 0; i < n; i++, p += lc) memcpy(p, c, lc);
    *p = 0;
    return s;
}

Test(template, hostile_nesting_refused_at_parse) {
    static const char *const deep[][3] = {
        {"{{ ", "1", " }}"},
        {"(", "1", ")"},
        {"[", "1", "]"},
        {"{'a': ", "1", "}"},
        {"not ", "1", ""},
        {"- ", "1", ""},
        {"{% if x %}", "", "{% endif %}"},
        {"{% for x in y %}", "", "{% endfor %}"},
        {"1 if x else ", "2", ""},
    };
    for (size_t k = 0; k < sizeof deep / sizeof deep[0]; k++) {
        char *inner = nest(deep[k][0], deep[k][1], deep[k][2], 100000);
        bool statement = k == 0 || k == 6 || k == 7;
        char *src = statement ? cat3("", inner, "") : cat3("{{ ", inner, " }}");
        pl_tmpl *t = NULL;
        pl_status st = pl_tmpl_parse(src, strlen(src), &t);
        cr_expect(st == PL_ERR_TOO_LONG || st == PL_ERR_FORMAT, "case %zu: %s", k,
                  pl_status_name(st));
        if (st == PL_ERR_TOO_LONG)
            cr_expect(strstr(pl_last_error(), "deep"), "%s", pl_last_error());
        pl_tmpl_free(t);
        free(inner);
        free(src);
    }
    /* long operator chains are loops in the parser but trees for the evaluator */
    char *chain = nest("", "{{ 1", " + 1", 100000);
    char *src = cat3(chain, " }}", "");
    pl_tmpl *t = NULL;
    cr_expect_eq(pl_tmpl_parse(src, strlen(src), &t), PL_ERR_TOO_LONG);
    free(chain);
    free(src);
    chain = nest("", "{{ x", "|trim", 100000);
    src = cat3(chain, " }}", "");
    cr_expect_eq(pl_tmpl_parse(src, strlen(src), &t), PL_ERR_TOO_LONG);
    free(chain);
    free(src);
    /* moderate nesting is fine, and so are long elif chains and long flat templates */
    expect_render("{{ ((((((((((1)))))))))) + [[[[[2]]]]][0][0][0][0][0] }}", NULL, "3");
    char *elifs = nest("", "{% if x == 0 %}a", "{% elif x == 1 %}b", 3000);
    src = cat3(elifs, "{% else %}z{% endif %}", "");
    t = NULL;
    cr_assert_eq(pl_tmpl_parse(src, strlen(src), &t), PL_OK, "%s", pl_last_error());
    json_t *vars = json_pack("{s:i}", "x", 1);
    char *out;
    cr_assert_eq(pl_tmpl_render(t, vars, &out, NULL), PL_OK, "%s", pl_last_error());
    cr_expect_str_eq(out, "b");
    pl_free(out);
    json_decref(vars);
    pl_tmpl_free(t);
    free(elifs);
    free(src);
    PL_ASSERT_NO_LEAKS();
}

/* Nesting limits keep the C stack small: worst cases run on a thread with a 1 MiB stack. */
static void *deepest(void *arg) {
    (void)arg;
    char *inner = nest("[", "f(n - 1)", "]", 60);
    char *src =
        cat3("{% macro f(n) %}{% if n > 0 %}{{ ", inner, " }}{% endif %}{% endmacro %}{{ f(60) }}");
    char *out = NULL;
    pl_status st = tmpl_render_src(src, NULL, &out);
    cr_expect_eq(st, PL_ERR_TOO_LONG, "%s", pl_status_name(st));
    cr_expect(strstr(pl_last_error(), "nested more than 400 deep"), "%s", pl_last_error());
    free(inner);
    free(src);
    inner = nest("(", "1", ")", 100000);
    src = cat3("{{ ", inner, " }}");
    cr_expect_eq(tmpl_render_src(src, NULL, &out), PL_ERR_TOO_LONG);
    free(inner);
    free(src);
    return NULL;
}

Test(template, small_stack_survives_the_deepest_templates) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, (size_t)1 << 20);
    pthread_t th;
    cr_assert_eq(pthread_create(&th, &attr, deepest, NULL), 0);
    pthread_join(th, NULL);
    pthread_attr_destroy(&attr);
    PL_ASSERT_NO_LEAKS();
}

Test(template, hostile_deep_variables) {
    /* 3000 nested lists in the variables: refused, not a stack overflow */
    json_t *v = json_array(), *top = v;
    for (int i = 0; i < 3000; i++) {
        json_t *inner = json_array();
        json_array_append_new(v, inner);
        v = inner;
    }
    json_t *vars = json_pack("{s:o}", "x", top);
    pl_tmpl *t = tmpl_parse_ok("{{ x|tojson }}");
    char *out = NULL;
    cr_expect_neq(pl_tmpl_render(t, vars, &out, NULL), PL_OK);
    cr_expect_null(out);
    pl_tmpl_free(t);
    json_decref(vars);
    PL_ASSERT_NO_LEAKS();
}

/* ---- allocation failures ----------------------------------------------------------------- */

/* Parses and renders: one call for the sweep (a failed parse leaves *t NULL). */
static pl_status parse_render(const char *src, size_t len, const json_t *vars, pl_tmpl **t,
                              char **out) {
    *t = NULL;
    *out = NULL;
    pl_status st = pl_tmpl_parse(src, len, t);
    return st == PL_OK ? pl_tmpl_render(*t, vars, out, NULL) : st;
}

Test(template, allocation_failures_are_clean) {
    json_t *cfg = tmpl_fixture("mistral-7b-instruct-v0.3.tokenizer_config.json");
    json_t *expected = tmpl_fixture("mistral-7b-instruct-v0.3.expected.json");
    const json_t *c = json_array_get(json_object_get(expected, "cases"), 2);
    const char *src;
    size_t len;
    cr_assert_eq(pl_tmpl_config_source(cfg, NULL, false, &src, &len), PL_OK);
    json_t *vars = NULL;
    cr_assert_eq(pl_tmpl_chat_vars(cfg, json_object_get(c, "messages"), NULL, true, NULL, &vars),
                 PL_OK);
    const char *want = json_string_value(json_object_get(c, "expect"));
    int failures = 0;
    pl_tmpl *t = NULL;
    char *out = NULL;
    PL_ALLOC_SWEEP(failures, n, parse_render(src, len, vars, &t, &out), {
        cr_assert_null(out);
        pl_tmpl_free(t);
    });
    cr_expect_str_eq(out, want);
    pl_free(out);
    pl_tmpl_free(t);
    cr_expect_gt(failures, 20, "the sweep should hit many allocations");
    json_decref(vars);
    json_decref(cfg);
    json_decref(expected);
    PL_ASSERT_NO_LEAKS();
}

/* ---- chat helpers ------------------------------------------------------------------------ */

Test(template, config_source_picks_named_templates) {
    json_t *cfg = json_pack("{s:[{s:s,s:s},{s:s,s:s}],s:{s:s},s:s,s:s}", "chat_template", "name",
                            "default", "template", "D{{ bos_token }}{{ eos_token }}{{ pad_token }}",
                            "name", "tool_use", "template", "T{{ tools|length }}", "bos_token",
                            "content", "<s>", "eos_token", "</s>", "pad_token", "");
    const char *src;
    size_t len;
    cr_assert_eq(pl_tmpl_config_source(cfg, NULL, false, &src, &len), PL_OK);
    cr_expect_str_eq(src, "D{{ bos_token }}{{ eos_token }}{{ pad_token }}");
    cr_assert_eq(pl_tmpl_config_source(cfg, NULL, true, &src, &len), PL_OK);
    cr_expect_str_eq(src, "T{{ tools|length }}");
    cr_assert_eq(pl_tmpl_config_source(cfg, "default", true, &src, &len), PL_OK);
    cr_expect_eq(src[0], 'D');
    cr_expect_eq(pl_tmpl_config_source(cfg, "rag", false, &src, &len), PL_ERR_NOT_FOUND);
    pl_tmpl *t = NULL;
    cr_assert_eq(pl_tmpl_config_source(cfg, NULL, false, &src, &len), PL_OK);
    cr_assert_eq(pl_tmpl_parse(src, len, &t), PL_OK);
    char *out;
    cr_assert_eq(pl_tmpl_render_chat(t, cfg, "[]", NULL, false, NULL, &out, NULL), PL_OK, "%s",
                 pl_last_error());
    cr_expect_str_eq(out, "D<s></s>", "object tokens give their content; empty ones are unset");
    pl_free(out);
    cr_expect_eq(pl_tmpl_render_chat(t, cfg, "[{]", NULL, false, NULL, &out, NULL),
                 PL_ERR_INVALID_ARGUMENT);
    cr_expect(strstr(pl_last_error(), "messages"), "%s", pl_last_error());
    cr_expect_eq(pl_tmpl_render_chat(t, cfg, "{}", NULL, false, NULL, &out, NULL),
                 PL_ERR_INVALID_ARGUMENT);
    cr_expect_eq(pl_tmpl_render_chat(t, cfg, "[]", NULL, false, "[1]", &out, NULL),
                 PL_ERR_INVALID_ARGUMENT);
    pl_tmpl_free(t);
    json_decref(cfg);
    json_t *none = json_pack("{s:s}", "bos_token", "<s>");
    cr_expect_eq(pl_tmpl_config_source(none, NULL, false, &src, &len), PL_ERR_NOT_FOUND);
    json_decref(none);
    json_t *bad = json_pack("{s:i}", "chat_template", 3);
    cr_expect_eq(pl_tmpl_config_source(bad, NULL, false, &src, &len), PL_ERR_FORMAT);
    json_decref(bad);
    PL_ASSERT_NO_LEAKS();
}

Test(template, render_chat_extra_overrides_and_big_numbers) {
    pl_tmpl *t = tmpl_parse_ok("{{ messages[0].n }}|{{ add_generation_prompt }}|{{ bos_token }}|"
                               "{{ enable_thinking }}|{{ tools is defined }}");
    json_t *cfg = json_pack("{s:s}", "bos_token", "<s>");
    char *out;
    cr_assert_eq(pl_tmpl_render_chat(t, cfg, "[{\"n\": 123456789012345678901234567890}]", NULL,
                                     true, "{\"bos_token\": \"[B]\", \"enable_thinking\": false}",
                                     &out, NULL),
                 PL_OK, "%s", pl_last_error());
    cr_expect_str_eq(out, "1.2345678901234568e+29|true|[B]|false|false");
    pl_free(out);
    pl_tmpl_free(t);
    json_decref(cfg);
}

/* ---- concurrent renders ------------------------------------------------------------------ */

typedef struct job {
    const pl_tmpl *t;
    const json_t *vars;
    const char *want;
    int ok;
} job;

static void *render_many(void *arg) {
    job *j = arg;
    j->ok = 1;
    for (int i = 0; i < 50; i++) {
        char *out = NULL;
        if (pl_tmpl_render(j->t, j->vars, &out, NULL) != PL_OK || strcmp(out, j->want) != 0)
            j->ok = 0;
        pl_free(out);
    }
    return NULL;
}

Test(template, one_template_many_threads) {
    json_t *cfg = tmpl_fixture("qwen2.5-3b-instruct.tokenizer_config.json");
    json_t *expected = tmpl_fixture("qwen2.5-3b-instruct.expected.json");
    const json_t *c = json_array_get(json_object_get(expected, "cases"), 2);
    const char *src;
    size_t len;
    cr_assert_eq(pl_tmpl_config_source(cfg, NULL, false, &src, &len), PL_OK);
    pl_tmpl *t = NULL;
    cr_assert_eq(pl_tmpl_parse(src, len, &t), PL_OK);
    json_t *vars = NULL;
    cr_assert_eq(pl_tmpl_chat_vars(cfg, json_object_get(c, "messages"), NULL,
                                   json_is_true(json_object_get(c, "add_generation_prompt")), NULL,
                                   &vars),
                 PL_OK);
    job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (job){t, vars, json_string_value(json_object_get(c, "expect")), 0};
        pthread_create(&th[i], NULL, render_many, &jobs[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        cr_expect(jobs[i].ok, "thread %d rendered something else", i);
    }
    json_decref(vars);
    pl_tmpl_free(t);
    json_decref(cfg);
    json_decref(expected);
}
