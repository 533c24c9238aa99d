/*
 * template/filters.c - filters (`x|name`, `x|name(args)`) and tests (`x is name`), dispatched
 * the way @huggingface/jinja's applyFilter and its test table do: by the operand's type, with
 * the argument-less and called forms handled apart (so `x|join` and `x|join(", ")` are
 * different code paths, and a filter a type does not have is an error naming the type).
 *
 * Beyond the oracle, with Jinja's meaning: d (= default), count (= length), select/reject
 * (by a test name, with an optional argument), the float test, and `x|default` without
 * parentheses. tojson(sort_keys=true) is refused: the oracle sorts with localeCompare.
 *
 * eval.c calls in here and this file calls eval.c back for a filter's arguments
 * (pl_tm_eval_args): the interpreter's own recursion, the one loop allowed between files.
 */
#include "template/tmpl_internal.h"
#include "util/utf8.h"

#include <math.h>
#include <string.h>

static const char *const k_filters[] = {
    "abs",    "bool",   "capitalize", "count", "d",      "default",    "dictsort", "first",
    "float",  "get",    "indent",     "int",   "items",  "join",       "keys",     "last",
    "length", "list",   "lower",      "map",   "reject", "rejectattr", "replace",  "reverse",
    "safe",   "select", "selectattr", "sort",  "string", "title",      "tojson",   "trim",
    "unique", "upper",  "values",     NULL};

static const char *const k_tests[] = {
    "boolean", "callable", "defined",  "eq",    "equalto",   "even",  "false",
    "float",   "integer",  "iterable", "lower", "mapping",   "none",  "number",
    "odd",     "sequence", "string",   "true",  "undefined", "upper", NULL};

static bool in_list(pl_tm_str name, const char *const *list) {
    for (; *list; list++)
        if (pl_tm_str_eqc(name, *list)) return true;
    return false;
}

bool pl_tm_filter_known(pl_tm_str name) { return in_list(name, k_filters); }
bool pl_tm_test_known(pl_tm_str name) { return in_list(name, k_tests); }

/* ---- tests ----------------------------------------------------------------------------- */

int pl_tm_apply_test(pl_tm_rs *rs, pl_tm_str name, pl_tm_val v, const pl_tm_val *arg, bool *out) {
    PL_TRY(pl_tm_charge(rs, 1));
#define IS(s) pl_tm_str_eqc(name, s)
    if (IS("boolean"))
        *out = v.kind == PL_TM_V_BOOL;
    else if (IS("callable"))
        *out = v.kind == PL_TM_V_FUNC;
    else if (IS("odd") || IS("even")) {
        if (v.kind != PL_TM_V_INT)
            return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "cannot %.*s on %s", (int)name.n, name.p,
                              pl_tm_kind_name(v.kind));
        double r = fmod(v.u.num, 2);
        *out = IS("odd") ? r != 0 : r == 0;
    } else if (IS("false"))
        *out = v.kind == PL_TM_V_BOOL && !v.u.b;
    else if (IS("true"))
        *out = v.kind == PL_TM_V_BOOL && v.u.b;
    else if (IS("none"))
        *out = v.kind == PL_TM_V_NULL;
    else if (IS("string"))
        *out = v.kind == PL_TM_V_STR;
    else if (IS("number"))
        *out = pl_tm_is_num(v);
    else if (IS("integer"))
        *out = v.kind == PL_TM_V_INT;
    else if (IS("float"))
        *out = v.kind == PL_TM_V_FLOAT;
    else if (IS("iterable"))
        *out = v.kind == PL_TM_V_ARRAY || v.kind == PL_TM_V_STR; /* not tuples */
    else if (IS("mapping"))
        *out = pl_tm_is_obj(v);
    else if (IS("sequence"))
        *out = pl_tm_is_arr(v) || pl_tm_is_obj(v) || v.kind == PL_TM_V_STR;
    else if (IS("lower") || IS("upper")) {
        *out = false;
        if (v.kind == PL_TM_V_STR) {
            pl_tm_str c;
            PL_TRY(pl_tm_case(rs, v.u.s, IS("upper"), &c));
            *out = pl_tm_str_eq(c, v.u.s);
        }
    } else if (IS("defined"))
        *out = v.kind != PL_TM_V_UNDEF;
    else if (IS("undefined"))
        *out = v.kind == PL_TM_V_UNDEF;
    else if (IS("equalto") || IS("eq")) {
        if (!arg)
            return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "the test %.*s needs a value to compare",
                              (int)name.n, name.p);
        *out = pl_tm_strict_eq(v, *arg);
    } else {
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "unknown test: %.*s", (int)name.n, name.p);
    }
#undef IS
    return 0;
}

/* ---- helpers --------------------------------------------------------------------------- */

static int bad_filter(pl_tm_rs *rs, pl_tm_str name, pl_tm_val v) {
    return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "cannot apply the filter \"%.*s\" to %s",
                      (int)name.n, name.p, pl_tm_kind_name(v.kind));
}

static pl_tm_val arr_val(pl_tm_array *a) { return (pl_tm_val){.kind = PL_TM_V_ARRAY, .u.arr = a}; }

/* JavaScript truthiness of the wrapped value (objects are always true), as `!x.value`. */
static bool js_truthy(pl_tm_val v) {
    switch (v.kind) {
    case PL_TM_V_UNDEF:
    case PL_TM_V_NULL:
        return false;
    case PL_TM_V_BOOL:
        return v.u.b;
    case PL_TM_V_INT:
    case PL_TM_V_FLOAT:
        return v.u.num != 0 && !isnan(v.u.num);
    case PL_TM_V_STR:
        return v.u.s.n > 0;
    default:
        return true;
    }
}

/* An argument by position, else by keyword, else NULL. */
static const pl_tm_val *arg(pl_tm_rs *rs, const pl_tm_val *pos, size_t np, const pl_tm_map *kw,
                            size_t i, const char *name) {
    if (i < np) return &pos[i];
    if (kw) return pl_tm_map_get(rs, kw, (pl_tm_str){name, strlen(name)});
    return NULL;
}

/* The oracle's getAttributeValue: "a.b.0" walks objects by key and lists by index. */
static int attr_path(pl_tm_rs *rs, pl_tm_val item, pl_tm_str path, pl_tm_val *out) {
    pl_tm_val v = item;
    size_t i = 0;
    for (;;) {
        size_t j = i;
        while (j < path.n && path.p[j] != '.') j++;
        pl_tm_str part = {path.p + i, j - i};
        if (pl_tm_is_obj(v) || v.kind == PL_TM_V_NS) {
            pl_tm_map *m;
            PL_TRY(pl_tm_obj_map(rs, v, &m));
            const pl_tm_val *f = pl_tm_map_get(rs, m, part);
            v = f ? *f : pl_tm_undef();
        } else if (pl_tm_is_arr(v)) {
            double idx = pl_tm_js_parse_int(part);
            if (!isnan(idx) && idx >= 0 && idx < (double)v.u.arr->n)
                v = v.u.arr->v[(size_t)idx];
            else
                v = pl_tm_undef();
            if (v.kind == PL_TM_V_UNDEF) break;
        } else {
            v = pl_tm_undef();
            break;
        }
        if (j >= path.n) break;
        i = j + 1;
    }
    *out = v;
    return 0;
}

static int join_items(pl_tm_rs *rs, pl_tm_val v, pl_tm_str sep, pl_tm_val *out) {
    pl_tm_sb b = {0};
    if (v.kind == PL_TM_V_STR) { /* Array.from(string): code points */
        pl_tm_str s = v.u.s;
        for (size_t i = 0; i < s.n;) {
            uint32_t cp;
            int k = pl_utf8_decode(s.p + i, s.n - i, &cp);
            if (i) PL_TRY(pl_tm_sb_put(rs, &b, sep));
            PL_TRY(pl_tm_sb_put(rs, &b, (pl_tm_str){s.p + i, (size_t)k}));
            i += (size_t)k;
        }
    } else {
        const pl_tm_array *a = v.u.arr;
        for (size_t i = 0; i < a->n; i++) {
            pl_tm_str item = {"", 0}; /* Array.prototype.join writes null and undefined as "" */
            if (a->v[i].kind != PL_TM_V_NULL && a->v[i].kind != PL_TM_V_UNDEF)
                PL_TRY(pl_tm_js_string(rs, a->v[i], &item));
            if (i) PL_TRY(pl_tm_sb_put(rs, &b, sep));
            PL_TRY(pl_tm_sb_put(rs, &b, item));
        }
    }
    *out = pl_tm_strv(pl_tm_sb_str(&b));
    return 0;
}

static int indent(pl_tm_rs *rs, pl_tm_str s, double width, bool first, bool blank, pl_tm_val *out) {
    if (!(width >= 0) || width > 1024)
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "indent width %g is out of range [0, 1024]",
                          width);
    char *sp;
    PL_TRY(pl_tm_str_new(rs, (size_t)width, &sp));
    memset(sp, ' ', (size_t)width);
    pl_tm_str pad = {sp, (size_t)width};
    pl_tm_sb b = {0};
    size_t i = 0, line = 0;
    for (;;) {
        const char *nl = memchr(s.p + i, '\n', s.n - i);
        size_t end = nl ? (size_t)(nl - s.p) : s.n;
        bool empty = end == i;
        if (line) PL_TRY(pl_tm_sb_put(rs, &b, PL_TM_LIT("\n")));
        if ((first || line) && (blank || !empty)) PL_TRY(pl_tm_sb_put(rs, &b, pad));
        PL_TRY(pl_tm_sb_put(rs, &b, (pl_tm_str){s.p + i, end - i}));
        if (!nl) break;
        i = end + 1;
        line++;
    }
    *out = pl_tm_strv(pl_tm_sb_str(&b));
    return 0;
}

static int unique(pl_tm_rs *rs, const pl_tm_array *a, pl_tm_val *out) {
    pl_tm_array *r;
    PL_TRY(pl_tm_arr_new(rs, a->n, &r));
    size_t n = 0;
    for (size_t i = 0; i < a->n; i++) {
        PL_TRY(pl_tm_charge_n(rs, n));
        bool seen = false;
        for (size_t j = 0; j < n && !seen; j++) {
            /* a Set of the wrapped values: SameValueZero (NaN equals NaN) */
            pl_tm_val x = r->v[j], y = a->v[i];
            seen = pl_tm_strict_eq(x, y) ||
                   (pl_tm_is_num(x) && pl_tm_is_num(y) && isnan(x.u.num) && isnan(y.u.num));
        }
        if (!seen) r->v[n++] = a->v[i];
    }
    r->n = n;
    *out = arr_val(r);
    return 0;
}

static int to_json(pl_tm_rs *rs, pl_tm_val v, const pl_tm_map *kw, pl_tm_val *out) {
    pl_tm_json_opt o = {.indent = -1, .undefined_as_null = true};
    const pl_tm_val *x;
    if (kw && (x = pl_tm_map_get(rs, kw, PL_TM_LIT("indent")))) {
        if (x->kind != PL_TM_V_INT && x->kind != PL_TM_V_NULL)
            return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "tojson: indent must be a number");
        if (x->kind == PL_TM_V_INT) {
            if (!(x->u.num >= 0) || x->u.num > 1024)
                return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "tojson: indent %g is out of range",
                                  x->u.num);
            o.indent = (int)x->u.num;
        }
    }
    if (kw && (x = pl_tm_map_get(rs, kw, PL_TM_LIT("ensure_ascii")))) {
        if (x->kind != PL_TM_V_BOOL)
            return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT,
                              "tojson: ensure_ascii must be a boolean");
        o.ensure_ascii = x->u.b;
    }
    if (kw && (x = pl_tm_map_get(rs, kw, PL_TM_LIT("sort_keys")))) {
        if (x->kind != PL_TM_V_BOOL)
            return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "tojson: sort_keys must be a boolean");
        if (x->u.b)
            return pl_tm_fail(rs, PL_ERR_UNSUPPORTED,
                              "tojson(sort_keys=true) (the oracle sorts keys by locale)");
    }
    if (kw && (x = pl_tm_map_get(rs, kw, PL_TM_LIT("separators"))) && x->kind != PL_TM_V_NULL) {
        if (!pl_tm_is_arr(*x) || x->u.arr->n != 2 || x->u.arr->v[0].kind != PL_TM_V_STR ||
            x->u.arr->v[1].kind != PL_TM_V_STR)
            return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT,
                              "tojson: separators must be a tuple of two strings");
        o.item_sep = x->u.arr->v[0].u.s;
        o.key_sep = x->u.arr->v[1].u.s;
    }
    pl_tm_str s;
    PL_TRY(pl_tm_to_json(rs, v, &o, &s));
    *out = pl_tm_strv(s);
    return 0;
}

/* ---- selecting items ------------------------------------------------------------------- */

/* selectattr/rejectattr(attr, test?, value?): the arguments must be string literals. */
static int select_attr(pl_tm_rs *rs, pl_tm_val v, const pl_tm_node *f, bool select, pl_tm_env *env,
                       pl_tm_val *out) {
    const pl_tm_array *a = v.u.arr;
    for (size_t i = 0; i < a->n; i++)
        if (!pl_tm_is_obj(a->v[i]) && a->v[i].kind != PL_TM_V_NS)
            return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT,
                              "`%s` can only be applied to a list of objects",
                              select ? "selectattr" : "rejectattr");
    for (size_t i = 0; i < f->n_args; i++)
        if (f->args[i]->kind != PL_TM_N_STR)
            return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "the arguments of `%s` must be strings",
                              select ? "selectattr" : "rejectattr");
    if (f->n_args == 0)
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "`%s` needs an attribute name",
                          select ? "selectattr" : "rejectattr");
    (void)env;
    pl_tm_str attr = f->args[0]->s;
    pl_tm_val cmp = f->n_args > 2 ? pl_tm_strv(f->args[2]->s) : pl_tm_undef();
    pl_tm_array *r;
    PL_TRY(pl_tm_arr_new(rs, a->n, &r));
    size_t n = 0;
    for (size_t i = 0; i < a->n; i++) {
        pl_tm_map *m;
        PL_TRY(pl_tm_obj_map(rs, a->v[i], &m));
        const pl_tm_val *x = pl_tm_map_get(rs, m, attr);
        bool hit = false;
        if (x) {
            if (f->n_args > 1)
                PL_TRY(pl_tm_apply_test(rs, f->args[1]->s, *x, f->n_args > 2 ? &cmp : NULL, &hit));
            else
                hit = pl_tm_truthy(*x);
        }
        if (hit == select) r->v[n++] = a->v[i];
    }
    r->n = n;
    *out = arr_val(r);
    return 0;
}

/* select/reject(test?, value?) (Jinja's; not in the oracle). */
static int select_items(pl_tm_rs *rs, pl_tm_val v, const pl_tm_val *pos, size_t np, bool select,
                        pl_tm_val *out) {
    if (np > 0 && pos[0].kind != PL_TM_V_STR)
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "select/reject: the test must be a name");
    if (np > 0 && !pl_tm_test_known(pos[0].u.s))
        return pl_tm_fail(rs, PL_ERR_UNSUPPORTED, "the test `%.*s` is not supported",
                          (int)pos[0].u.s.n, pos[0].u.s.p);
    const pl_tm_array *a = v.u.arr;
    pl_tm_array *r;
    PL_TRY(pl_tm_arr_new(rs, a->n, &r));
    size_t n = 0;
    for (size_t i = 0; i < a->n; i++) {
        bool hit;
        if (np == 0)
            hit = pl_tm_truthy(a->v[i]);
        else
            PL_TRY(pl_tm_apply_test(rs, pos[0].u.s, a->v[i], np > 1 ? &pos[1] : NULL, &hit));
        if (hit == select) r->v[n++] = a->v[i];
    }
    r->n = n;
    *out = arr_val(r);
    return 0;
}

typedef struct sort_key {
    bool has_attr;
    pl_tm_str path;
} sort_key;

static int sort_key_of(pl_tm_rs *rs, pl_tm_val item, void *ctx, pl_tm_val *out) {
    const sort_key *k = ctx;
    if (!k->has_attr) {
        *out = item;
        return 0;
    }
    return attr_path(rs, item, k->path, out);
}

static int sort_list(pl_tm_rs *rs, pl_tm_val v, const pl_tm_val *pos, size_t np,
                     const pl_tm_map *kw, pl_tm_val *out) {
    const pl_tm_val *rev = arg(rs, pos, np, kw, 0, "reverse");
    const pl_tm_val *cs = arg(rs, pos, np, kw, 1, "case_sensitive");
    const pl_tm_val *attr = arg(rs, pos, np, kw, 2, "attribute");
    if (rev && rev->kind != PL_TM_V_BOOL)
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "sort: reverse must be a boolean");
    if (cs && cs->kind != PL_TM_V_BOOL)
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "sort: case_sensitive must be a boolean");
    sort_key key = {0};
    char num[400];
    if (attr && attr->kind == PL_TM_V_STR) {
        key.has_attr = true;
        key.path = attr->u.s;
    } else if (attr && attr->kind == PL_TM_V_INT) {
        key.has_attr = true;
        size_t n = pl_tm_num_js(attr->u.num, num);
        char *p;
        PL_TRY(pl_tm_str_new(rs, n, &p));
        memcpy(p, num, n);
        key.path = (pl_tm_str){p, n};
    } else if (attr && attr->kind != PL_TM_V_NULL) {
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT,
                          "sort: attribute must be a string, integer or none");
    }
    pl_tm_array *r;
    PL_TRY(pl_tm_arr_new(rs, v.u.arr->n, &r));
    if (r->n) memcpy(r->v, v.u.arr->v, r->n * sizeof *r->v);
    PL_TRY(pl_tm_sort(rs, r->v, r->n, sort_key_of, &key, cs && cs->u.b, rev && rev->u.b));
    *out = arr_val(r);
    return 0;
}

static int map_attr(pl_tm_rs *rs, pl_tm_val v, const pl_tm_map *kw, pl_tm_val *out) {
    const pl_tm_val *attr = kw ? pl_tm_map_get(rs, kw, PL_TM_LIT("attribute")) : NULL;
    if (!attr)
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT,
                          "`map` without `attribute` is not supported");
    if (attr->kind != PL_TM_V_STR)
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "map: attribute must be a string");
    const pl_tm_val *dflt = pl_tm_map_get(rs, kw, PL_TM_LIT("default"));
    const pl_tm_array *a = v.u.arr;
    pl_tm_array *r;
    PL_TRY(pl_tm_arr_new(rs, a->n, &r));
    for (size_t i = 0; i < a->n; i++) {
        if (!pl_tm_is_obj(a->v[i]) && a->v[i].kind != PL_TM_V_NS)
            return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "items in map must be objects");
        PL_TRY(attr_path(rs, a->v[i], attr->u.s, &r->v[i]));
        if (r->v[i].kind == PL_TM_V_UNDEF && dflt) r->v[i] = *dflt;
    }
    *out = arr_val(r);
    return 0;
}

/* ---- the filters ----------------------------------------------------------------------- */

/* x|name: no arguments. */
static int filter_plain(pl_tm_rs *rs, pl_tm_val v, pl_tm_str name, pl_tm_val *out) {
#define IS(s) pl_tm_str_eqc(name, s)
    if (IS("safe")) {
        *out = v;
        return 0;
    }
    if (IS("tojson")) return to_json(rs, v, NULL, out);
    if (IS("default") || IS("d")) {
        *out = v.kind == PL_TM_V_UNDEF ? pl_tm_strv((pl_tm_str){"", 0}) : v;
        return 0;
    }
    if (IS("count")) name = PL_TM_LIT("length");
    if (pl_tm_is_arr(v)) {
        const pl_tm_array *a = v.u.arr;
        if (IS("list"))
            *out = v;
        else if (IS("first"))
            *out = a->n ? a->v[0] : pl_tm_undef();
        else if (IS("last"))
            *out = a->n ? a->v[a->n - 1] : pl_tm_undef();
        else if (pl_tm_str_eqc(name, "length"))
            *out = pl_tm_int((double)a->n);
        else if (IS("reverse") || IS("sort")) {
            pl_tm_array *r;
            PL_TRY(pl_tm_arr_new(rs, a->n, &r));
            for (size_t i = 0; i < a->n; i++)
                r->v[i] = IS("reverse") ? a->v[a->n - 1 - i] : a->v[i];
            if (IS("sort")) PL_TRY(pl_tm_sort(rs, r->v, r->n, NULL, NULL, false, false));
            *out = arr_val(r);
        } else if (IS("join"))
            return join_items(rs, v, (pl_tm_str){"", 0}, out);
        else if (IS("string")) {
            pl_tm_json_opt o = {.indent = -1};
            pl_tm_str s;
            PL_TRY(pl_tm_to_json(rs, v, &o, &s));
            *out = pl_tm_strv(s);
        } else if (IS("unique"))
            return unique(rs, a, out);
        else if (IS("select") || IS("reject"))
            return select_items(rs, v, NULL, 0, IS("select"), out);
        else
            return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "unknown filter for a list: %.*s",
                              (int)name.n, name.p);
        return 0;
    }
    if (v.kind == PL_TM_V_STR) {
        pl_tm_str s = v.u.s, r;
        if (pl_tm_str_eqc(name, "length")) {
            PL_TRY(pl_tm_charge_n(rs, s.n));
            *out = pl_tm_int((double)pl_tm_utf16_len(s));
            return 0;
        }
        if (IS("upper") || IS("lower") || IS("title") || IS("capitalize")) {
            pl_tm_val m;
            PL_TRY(pl_tm_builtin_member(rs, v, name, &m));
            return pl_tm_call_method(rs, m.u.fn, NULL, 0, out);
        }
        if (IS("trim")) {
            PL_TRY(pl_tm_charge_n(rs, s.n));
            r = pl_tm_trim(s, true, true);
            *out = pl_tm_strv(r);
            return 0;
        }
        if (IS("indent")) return indent(rs, s, 4, false, false, out);
        if (IS("join") || IS("string")) {
            *out = v;
            return 0;
        }
        if (IS("int")) {
            double x = pl_tm_js_parse_int(s);
            *out = pl_tm_int(isnan(x) ? 0 : x);
            return 0;
        }
        if (IS("float")) {
            double x = pl_tm_js_parse_float(s);
            *out = isnan(x) ? pl_tm_float(0) : pl_tm_float(x);
            return 0;
        }
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "unknown filter for a string: %.*s",
                          (int)name.n, name.p);
    }
    if (pl_tm_is_num(v)) {
        if (IS("abs"))
            *out = v.kind == PL_TM_V_INT ? pl_tm_int(fabs(v.u.num)) : pl_tm_float(fabs(v.u.num));
        else if (IS("int"))
            *out = pl_tm_int(floor(v.u.num));
        else if (IS("float"))
            *out = pl_tm_float(v.u.num);
        else if (IS("string")) {
            pl_tm_str s;
            PL_TRY(pl_tm_to_string(rs, v, &s));
            *out = pl_tm_strv(s);
        } else
            return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "unknown filter for a number: %.*s",
                              (int)name.n, name.p);
        return 0;
    }
    if (pl_tm_is_obj(v)) {
        if (IS("items")) return pl_tm_obj_items(rs, v, out);
        if (pl_tm_str_eqc(name, "length")) {
            pl_tm_map *m;
            PL_TRY(pl_tm_obj_map(rs, v, &m));
            *out = pl_tm_int((double)m->n);
            return 0;
        }
        pl_tm_val m;
        PL_TRY(pl_tm_builtin_member(rs, v, name, &m));
        if (m.kind == PL_TM_V_FUNC) return pl_tm_call_method(rs, m.u.fn, NULL, 0, out);
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "unknown filter for an object: %.*s",
                          (int)name.n, name.p);
    }
    if (v.kind == PL_TM_V_BOOL) {
        if (IS("bool"))
            *out = v;
        else if (IS("int"))
            *out = pl_tm_int(v.u.b);
        else if (IS("float"))
            *out = pl_tm_float(v.u.b);
        else if (IS("string"))
            *out = pl_tm_strv(v.u.b ? PL_TM_LIT("true") : PL_TM_LIT("false"));
        else
            return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "unknown filter for a boolean: %.*s",
                              (int)name.n, name.p);
        return 0;
    }
#undef IS
    return bad_filter(rs, name, v);
}

/* x|name(args). */
static int filter_call(pl_tm_rs *rs, pl_tm_val v, const pl_tm_node *f, pl_tm_env *env,
                       pl_tm_val *out) {
    pl_tm_str name = f->a->s;
#define IS(s) pl_tm_str_eqc(name, s)
    if ((IS("selectattr") || IS("rejectattr")) && pl_tm_is_arr(v))
        return select_attr(rs, v, f, IS("selectattr"), env, out);
    pl_tm_val *pos;
    size_t np;
    pl_tm_map *kw;
    PL_TRY(pl_tm_eval_args(rs, f->args, f->n_args, env, &pos, &np, &kw));
    rs->line = f->line;
    if (IS("tojson")) return to_json(rs, v, kw, out);
    if (IS("join")) {
        if (v.kind != PL_TM_V_STR && !pl_tm_is_arr(v)) return bad_filter(rs, name, v);
        const pl_tm_val *sep = arg(rs, pos, np, kw, 0, "separator");
        if (sep && sep->kind != PL_TM_V_STR)
            return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "join: the separator must be a string");
        return join_items(rs, v, sep ? sep->u.s : (pl_tm_str){"", 0}, out);
    }
    if (IS("int") || IS("float")) {
        bool is_int = IS("int");
        const pl_tm_val *d = arg(rs, pos, np, kw, 0, "default");
        pl_tm_val dflt = d ? *d : is_int ? pl_tm_int(0) : pl_tm_float(0);
        if (v.kind == PL_TM_V_STR) {
            double x = is_int ? pl_tm_js_parse_int(v.u.s) : pl_tm_js_parse_float(v.u.s);
            *out = isnan(x) ? dflt : is_int ? pl_tm_int(x) : pl_tm_float(x);
        } else if (pl_tm_is_num(v)) {
            *out = v;
        } else if (v.kind == PL_TM_V_BOOL) {
            *out = is_int ? pl_tm_int(v.u.b) : pl_tm_float(v.u.b);
        } else {
            return bad_filter(rs, name, v);
        }
        return 0;
    }
    if (IS("default") || IS("d")) {
        pl_tm_val dflt = np > 0 ? pos[0] : pl_tm_strv((pl_tm_str){"", 0});
        const pl_tm_val *b = arg(rs, pos, np, kw, 1, "boolean");
        if (b && b->kind != PL_TM_V_BOOL)
            return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT,
                              "`default` filter flag must be a boolean");
        bool boolean = b && b->u.b;
        *out = (v.kind == PL_TM_V_UNDEF || (boolean && !pl_tm_truthy(v))) ? dflt : v;
        return 0;
    }
    if (pl_tm_is_arr(v)) {
        if (IS("sort")) return sort_list(rs, v, pos, np, kw, out);
        if (IS("map")) return map_attr(rs, v, kw, out);
        if (IS("select") || IS("reject")) return select_items(rs, v, pos, np, IS("select"), out);
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "unknown filter for a list: %.*s",
                          (int)name.n, name.p);
    }
    if (v.kind == PL_TM_V_STR) {
        if (IS("indent")) {
            const pl_tm_val *w = arg(rs, pos, np, kw, 0, "width");
            const pl_tm_val *first = arg(rs, pos, np, kw, 1, "first");
            const pl_tm_val *blank = arg(rs, pos, np, kw, 2, "blank");
            if (w && w->kind != PL_TM_V_INT)
                return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "indent: width must be a number");
            return indent(rs, v.u.s, w ? w->u.num : 4, first && js_truthy(*first),
                          blank && js_truthy(*blank), out);
        }
        if (IS("replace")) {
            /* the oracle passes the positional arguments and then the keyword ones as an object */
            pl_tm_val *args = pl_tm_alloc_n(&rs->a, np + 1, sizeof *args);
            if (!args) return pl_tm_oom(rs);
            if (np) memcpy(args, pos, np * sizeof *args);
            if (!kw) PL_TRY(pl_tm_map_new(rs, 0, &kw));
            args[np] = (pl_tm_val){.kind = PL_TM_V_KWARGS, .u.map = kw};
            pl_tm_val m;
            PL_TRY(pl_tm_builtin_member(rs, v, name, &m));
            return pl_tm_call_method(rs, m.u.fn, args, np + 1, out);
        }
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "unknown filter for a string: %.*s",
                          (int)name.n, name.p);
    }
    if (pl_tm_is_obj(v)) {
        pl_tm_val m;
        PL_TRY(pl_tm_builtin_member(rs, v, name, &m));
        if (m.kind != PL_TM_V_FUNC)
            return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "unknown filter for an object: %.*s",
                              (int)name.n, name.p);
        if (kw && kw->n) {
            pl_tm_val *args = pl_tm_alloc_n(&rs->a, np + 1, sizeof *args);
            if (!args) return pl_tm_oom(rs);
            if (np) memcpy(args, pos, np * sizeof *args);
            args[np++] = (pl_tm_val){.kind = PL_TM_V_KWARGS, .u.map = kw};
            pos = args;
        }
        return pl_tm_call_method(rs, m.u.fn, pos, np, out);
    }
#undef IS
    return bad_filter(rs, name, v);
}

int pl_tm_apply_filter(pl_tm_rs *rs, pl_tm_val operand, const pl_tm_node *filter, pl_tm_env *env,
                       pl_tm_val *out) {
    PL_TRY(pl_tm_charge(rs, 1));
    if (filter->kind == PL_TM_N_IDENT) return filter_plain(rs, operand, filter->s, out);
    return filter_call(rs, operand, filter, env, out);
}
