/*
 * tests/template/tmpl_check.c - fixture loading and oracle comparison for the template suites.
 */
#include "tmpl_check.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "util/alloc.h"

json_t *tmpl_load_json(const char *path) {
    json_error_t err;
    json_t *j = json_load_file(path, JSON_DECODE_INT_AS_REAL, &err);
    cr_assert_not_null(j, "%s: %s (line %d)", path, err.text, err.line);
    return j;
}

json_t *tmpl_fixture(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", PL_TMPL_DATA_DIR, name);
    return tmpl_load_json(path);
}

pl_tmpl *tmpl_parse_ok(const char *src) {
    pl_tmpl *t = NULL;
    pl_status st = pl_tmpl_parse(src, strlen(src), &t);
    cr_assert_eq(st, PL_OK, "parse failed (%s): %s\n%s", pl_status_name(st), pl_last_error(), src);
    return t;
}

/* Where two texts first differ, shown with some context. */
static void show_diff(const char *what, const char *want, size_t nw, const char *got, size_t ng) {
    size_t i = 0;
    while (i < nw && i < ng && want[i] == got[i]) i++;
    size_t from = i > 60 ? i - 60 : 0;
    fprintf(stderr,
            "%s: output differs at byte %zu (want %zu bytes, got %zu)\n  want: ...%.*s\n"
            "  got:  ...%.*s\n",
            what, i, nw, ng, (int)((nw - from) > 160 ? 160 : nw - from), want + from,
            (int)((ng - from) > 160 ? 160 : ng - from), got + from);
}

bool tmpl_check_case(const pl_tmpl *t, const json_t *vars, const json_t *kase, const char *what) {
    char *out = NULL;
    size_t n = 0;
    pl_status st = pl_tmpl_render(t, vars, &out, &n);
    const json_t *expect = json_object_get(kase, "expect");
    const json_t *error = json_object_get(kase, "error");
    bool ok = true;
    if (json_is_string(expect)) {
        if (st != PL_OK) {
            fprintf(stderr, "%s: render failed (%s): %s\n", what, pl_status_name(st),
                    pl_last_error());
            return false;
        }
        ok = n == json_string_length(expect) && memcmp(out, json_string_value(expect), n) == 0;
        if (!ok) show_diff(what, json_string_value(expect), json_string_length(expect), out, n);
        pl_free(out);
        return ok;
    }
    cr_assert(json_is_string(error), "%s: the case has neither expect nor error", what);
    if (st == PL_OK) {
        fprintf(stderr, "%s: rendered %zu bytes where the oracle failed with \"%s\"\n", what, n,
                json_string_value(error));
        pl_free(out);
        return false;
    }
    if (st != PL_ERR_INVALID_ARGUMENT) {
        fprintf(stderr, "%s: failed with %s (%s) where the oracle failed with \"%s\"\n", what,
                pl_status_name(st), pl_last_error(), json_string_value(error));
        return false;
    }
    const char *raised = strstr(pl_last_error(), "raise_exception: ");
    if (raised && strcmp(raised + strlen("raise_exception: "), json_string_value(error)) != 0) {
        fprintf(stderr, "%s: raised \"%s\", the oracle \"%s\"\n", what, raised,
                json_string_value(error));
        return false;
    }
    return true;
}

bool tmpl_check_source(const char *src, const json_t *vars, const json_t *kase, const char *what) {
    pl_tmpl *t = NULL;
    pl_status st = pl_tmpl_parse(src, strlen(src), &t);
    if (st != PL_OK) {
        bool ok = st == PL_ERR_FORMAT && json_is_string(json_object_get(kase, "error"));
        if (!ok)
            fprintf(stderr, "%s: parse failed (%s: %s) where the oracle %s\n", what,
                    pl_status_name(st), pl_last_error(),
                    json_object_get(kase, "error") ? "failed too, but not on syntax" : "rendered");
        return ok;
    }
    bool ok = tmpl_check_case(t, vars, kase, what);
    pl_tmpl_free(t);
    return ok;
}

size_t tmpl_check_family(const json_t *cfg, const json_t *expected) {
    const json_t *cases = json_object_get(expected, "cases");
    const char *family = json_string_value(json_object_get(expected, "family"));
    cr_assert(json_is_array(cases) && json_array_size(cases) > 0, "%s: no cases", family);
    size_t i, bad = 0;
    const json_t *c;
    pl_tmpl *plain = NULL, *with_tools = NULL;
    json_array_foreach(cases, i, c) {
        const json_t *tools = json_object_get(c, "tools");
        const char *src;
        size_t len;
        cr_assert_eq(pl_tmpl_config_source(cfg, NULL, tools != NULL, &src, &len), PL_OK, "%s",
                     pl_last_error());
        pl_tmpl **slot = tools ? &with_tools : &plain;
        if (!*slot)
            cr_assert_eq(pl_tmpl_parse(src, len, slot), PL_OK, "%s: %s", family, pl_last_error());
        json_t *vars = NULL;
        cr_assert_eq(pl_tmpl_chat_vars(cfg, json_object_get(c, "messages"), tools,
                                       json_is_true(json_object_get(c, "add_generation_prompt")),
                                       json_object_get(c, "extra"), &vars),
                     PL_OK, "%s", pl_last_error());
        char what[256];
        snprintf(what, sizeof what, "%s/%s", family, json_string_value(json_object_get(c, "name")));
        if (!tmpl_check_case(*slot, vars, c, what)) bad++;
        json_decref(vars);
    }
    pl_tmpl_free(plain);
    pl_tmpl_free(with_tools);
    cr_expect_eq(bad, 0, "%s: %zu of %zu cases differ from the oracle", family, bad,
                 json_array_size(cases));
    return json_array_size(cases);
}

pl_status tmpl_render_src(const char *src, const char *vars_json, char **out) {
    pl_tmpl *t = NULL;
    pl_status st = pl_tmpl_parse(src, strlen(src), &t);
    if (st != PL_OK) return st;
    json_t *vars = NULL;
    if (vars_json) {
        json_error_t err;
        vars = json_loads(vars_json, 0, &err);
        cr_assert_not_null(vars, "bad test variables: %s", err.text);
    }
    st = pl_tmpl_render(t, vars, out, NULL);
    json_decref(vars);
    pl_tmpl_free(t);
    return st;
}
