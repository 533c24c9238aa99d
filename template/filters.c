/*
 * template/filters.c - filters (`x|name`, `x|name(args)`) and tests (`x is name`), dispatched
 * the way @huggingface/jinja's applyFilter and its test table do: by the operand's type, with
 * the argument-less and called forms handled apart (so `x|join` and `x|join(", ")` are
 * different code paths, and a filter a type does not have is an error naming the type).
 *
 * Beyond the oracle, with Jinja's meaning: d (= default), count (= length), select/reject
 * (by a test name, with an optional argument), the float test, and `x|default` without
 * parentheses. tojson(sort_keys=true) is refused: the oracle sorts with localeCompare.
 */
#include "template/tmpl_internal.h"

#include <math.h>
#include <string.h>

static const char *const k_filters[] = {
    "abs",    "bool",   "capitalize", "count",   "d",      "default",    "dictsort", "first",
    "float",  "get",    "indent",     "int",     "items",  "join",       "keys",     "last",
    "length", "list",   "lower",      "map",     "reject", "rejectattr", "replace",  "reverse",
    "safe",   "select", "selectattr", "sort",    "string", "title",      "tojson",   "trim",
    "unique", "upper",  "values",     NULL};

static const char *const k_tests[] = {
    "boolean", "callable", "defined", "eq",      "equalto",  "even",   "false",
    "float",   "integer",  "iterable", "lower",  "mapping",  "none",   "number",
    "odd",     "sequence", "string",   "true",   "undefined", "upper", NULL};

static bool in_list(tm_str name, const char *const *list) {
    for (; *list; list++)
        if (tm_str_eqc(name, *list)) return true;
    return false;
}

bool tm_filter_known(tm_str name) { return in_list(name, k_filters); }
bool tm_test_known(tm_str name) { return in_list(name, k_tests); }

/* ---- tests ----------------------------------------------------------------------------- */

int tm_apply_test(tm_rs *rs, tm_str name, tm_val v, const tm_val *arg, bool *out) {
    PL_TRY(tm_charge(rs, 1));
#define IS(s) tm_str_eqc(name, s)
    if (IS("boolean")) *out = v.kind == V_BOOL;
    else if (IS("callable")) *out = v.kind == V_FUNC;
    else if (IS("odd") || IS("even")) {
        if (v.kind != V_INT)
            return tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "cannot %.*s on %s", (int)name.n, name.p,
                           tm_kind_name(v.kind));
        double r = fmod(v.u.num, 2);
        *out = IS("odd") ? r != 0 : r == 0;
    } else if (IS("false")) *out = v.kind == V_BOOL && !v.u.b;
    else if (IS("true")) *out = v.kind == V_BOOL && v.u.b;
    else if (IS("none")) *out = v.kind == V_NULL;
    else if (IS("string")) *out = v.kind == V_STR;
    else if (IS("number")) *out = tm_is_num(v);
    else if (IS("integer")) *out = v.kind == V_INT;
    else if (IS("float")) *out = v.kind == V_FLOAT;
    else if (IS("iterable")) *out = v.kind == V_ARRAY || v.kind == V_STR; /* not tuples */
    else if (IS("mapping")) *out = tm_is_obj(v);
    else if (IS("sequence")) *out = tm_is_arr(v) || tm_is_obj(v) || v.kind == V_STR;
    else if (IS("lower") || IS("upper")) {
        *out = false;
        if (v.kind == V_STR) {
            tm_str c;
            PL_TRY(tm_case(rs, v.u.s, IS("upper"), &c));
            *out = tm_str_eq(c, v.u.s);
        }
    } else if (IS("defined")) *out = v.kind != V_UNDEF;
    else if (IS("undefined")) *out = v.kind == V_UNDEF;
    else if (IS("equalto") || IS("eq")) {
        if (!arg)
            return tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "the test %.*s needs a value to compare",
                           (int)name.n, name.p);
        *out = tm_strict_eq(v, *arg);
    } else {
        return tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "unknown test: %.*s", (int)name.n, name.p);
    }
#undef IS
    return 0;
}

/* ---- helpers --------------------------------------------------------------------------- */

static int bad_filter(tm_rs *rs, tm_str name, tm_val v) {
    return tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "cannot apply the filter \"%.*s\" to %s",
                   (int)name.n, name.p, tm_kind_name(v.kind));
}

static tm_val arr_val(tm_array *a) { return (tm_val){.kind = V_ARRAY, .u.arr = a}; }

/* JavaScript truthiness of the wrapped value (objects are always true), as `!x.value`. */
static bool js_truthy(tm_val v) {
    switch (v.kind) {
    case V_UNDEF:
    case V_NULL:
        return false;
    case V_BOOL:
        return v.u.b;
    case V_INT:
    case V_FLOAT:
        return v.u.num != 0 && !isnan(v.u.num);
    case V_STR:
        return v.u.s.n > 0;
    default:
        return true;
    }
}

/* An argument by position, else by keyword, else NULL. */
static const tm_val *arg(tm_rs *rs, const tm_val *pos, size_t np, const tm_map *kw, size_t i,
                         const char *name) {
    if (i < np) return &pos[i];
    if (kw) return tm_map_get(rs, kw, (tm_str){name, strlen(name)});
    return NULL;
}

/* The oracle's getAttributeValue: "a.b.0" walks objects by key and lists by index. */
static int attr_path(tm_rs *rs, tm_val item, tm_str path, tm_val *out) {
    tm_val v = item;
    size_t i = 0;
    for (;;) {
        size_t j = i;
        while (j < path.n && path.p[j] != '.') j++;
        tm_str part = {path.p + i, j - i};
        if (tm_is_obj(v) || v.kind == V_NS) {
            tm_map *m;
            PL_TRY(tm_obj_map(rs, v, &m));
            const tm_val *f = tm_map_get(rs, m, part);
            v = f ? *f : tm_undef();
        } else if (tm_is_arr(v)) {
            double idx = tm_js_parse_int(part);
            if (!isnan(idx) && idx >= 0 && idx < (double)v.u.arr->n) v = v.u.arr->v[(size_t)idx];
            else v = tm_undef();
            if (v.kind == V_UNDEF) break;
        } else {
            v = tm_undef();
            break;
        }
        if (j >= path.n) break;
        i = j + 1;
    }
    *out = v;
    return 0;
}

static int join_items(tm_rs *rs, tm_val v, tm_str sep, tm_val *out) {
    tm_sb b = {0};
    if (v.kind == V_STR) { /* Array.from(string): code points */
        tm_str s = v.u.s;
        for (size_t i = 0; i < s.n;) {
            uint32_t cp;
            int k = tm_utf8_next(s.p + i, s.n - i, &cp);
            if (i) PL_TRY(tm_sb_put(rs, &b, sep));
            PL_TRY(tm_sb_put(rs, &b, (tm_str){s.p + i, (size_t)k}));
            i += (size_t)k;
        }
    } else {
        const tm_array *a = v.u.arr;
        for (size_t i = 0; i < a->n; i++) {
            tm_str item = {"", 0}; /* Array.prototype.join writes null and undefined as "" */
            if (a->v[i].kind != V_NULL && a->v[i].kind != V_UNDEF)
                PL_TRY(tm_js_string(rs, a->v[i], &item));
            if (i) PL_TRY(tm_sb_put(rs, &b, sep));
            PL_TRY(tm_sb_put(rs, &b, item));
        }
    }
    *out = tm_strv(tm_sb_str(&b));
    return 0;
}

static int indent(tm_rs *rs, tm_str s, double width, bool first, bool blank, tm_val *out) {
    if (!(width >= 0) || width > 1024)
        return tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "indent width %g is out of range [0, 1024]",
                       width);
    char *sp;
    PL_TRY(tm_str_new(rs, (size_t)width, &sp));
    memset(sp, ' ', (size_t)width);
    tm_str pad = {sp, (size_t)width};
    tm_sb b = {0};
    size_t i = 0, line = 0;
    for (;;) {
        const char *nl = memchr(s.p + i, '\n', s.n - i);
        size_t end = nl ? (size_t)(nl - s.p) : s.n;
        bool empty = end == i;
        if (line) PL_TRY(tm_sb_put(rs, &b, TM_LIT("\n")));
        if ((first || line) && (blank || !empty)) PL_TRY(tm_sb_put(rs, &b, pad));
        PL_TRY(tm_sb_put(rs, &b, (tm_str){s.p + i, end - i}));
        if (!nl) break;
        i = end + 1;
        line++;
    }
    *out = tm_strv(tm_sb_str(&b));
    return 0;
}

static int unique(tm_rs *rs, const tm_array *a, tm_val *out) {
    tm_array *r;
    PL_TRY(tm_arr_new(rs, a->n, &r));
    size_t n = 0;
    for (size_t i = 0; i < a->n; i++) {
        PL_TRY(tm_charge_n(rs, n));
        bool seen = false;
        for (size_t j = 0; j < n && !seen; j++) {
            /* a Set of the wrapped values: SameValueZero (NaN equals NaN) */
            tm_val x = r->v[j], y = a->v[i];
            seen = tm_strict_eq(x, y) ||
                   (tm_is_num(x) && tm_is_num(y) && isnan(x.u.num) && isnan(y.u.num));
        }
        if (!seen) r->v[n++] = a->v[i];
    }
    r->n = n;
    *out = arr_val(r);
    return 0;
}

static int to_json(tm_rs *rs, tm_val v, const tm_map *kw, tm_val *out) {
    tm_json_opt o = {.indent = -1, .undefined_as_null = true};
    const tm_val *x;
    if (kw && (x = tm_map_get(rs, kw, TM_LIT("indent")))) {
        if (x->kind != V_INT && x->kind != V_NULL)
            return tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "tojson: indent must be a number");
        if (x->kind == V_INT) {
            if (!(x->u.num >= 0) || x->u.num > 1024)
                return tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "tojson: indent %g is out of range",
                               x->u.num);
            o.indent = (int)x->u.num;
        }
    }
    if (kw && (x = tm_map_get(rs, kw, TM_LIT("ensure_ascii")))) {
        if (x->kind != V_BOOL)
            return tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "tojson: ensure_ascii must be a boolean");
        o.ensure_ascii = x->u.b;
    }
    if (kw && (x = tm_map_get(rs, kw, TM_LIT("sort_keys")))) {
        if (x->kind != V_BOOL)
            return tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "tojson: sort_keys must be a boolean");
        if (x->u.b)
            return tm_fail(rs, PL_ERR_UNSUPPORTED,
                           "tojson(sort_keys=true) (the oracle sorts keys by locale)");
    }
    if (kw && (x = tm_map_get(rs, kw, TM_LIT("separators"))) && x->kind != V_NULL) {
        if (!tm_is_arr(*x) || x->u.arr->n != 2 || x->u.arr->v[0].kind != V_STR ||
            x->u.arr->v[1].kind != V_STR)
            return tm_fail(rs, PL_ERR_INVALID_ARGUMENT,
                           "tojson: separators must be a tuple of two strings");
        o.item_sep = x->u.arr->v[0].u.s;
        o.key_sep = x->u.arr->v[1].u.s;
    }
    tm_str s;
    PL_TRY(tm_to_json(rs, v, &o, &s));
    *out = tm_strv(s);
    return 0;
}

/* ---- selecting items ------------------------------------------------------------------- */

/* selectattr/rejectattr(attr, test?, value?): the arguments must be string literals. */
static int select_attr(tm_rs *rs, tm_val v, const tm_node *f, bool select, tm_env *env,
                       tm_val *out) {
    const tm_array *a = v.u.arr;
    for (size_t i = 0; i < a->n; i++)
        if (!tm_is_obj(a->v[i]) && a->v[i].kind != V_NS)
            return tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "`%s` can only be applied to a list of objects",
                           select ? "selectattr" : "rejectattr");
    for (size_t i = 0; i < f->n_args; i++)
        if (f->args[i]->kind != N_STR)
            return tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "the arguments of `%s` must be strings",
                           select ? "selectattr" : "rejectattr");
    if (f->n_args == 0)
        return tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "`%s` needs an attribute name",
                       select ? "selectattr" : "rejectattr");
    (void)env;
    tm_str attr = f->args[0]->s;
    tm_val cmp = f->n_args > 2 ? tm_strv(f->args[2]->s) : tm_undef();
    tm_array *r;
    PL_TRY(tm_arr_new(rs, a->n, &r));
    size_t n = 0;
    for (size_t i = 0; i < a->n; i++) {
        tm_map *m;
        PL_TRY(tm_obj_map(rs, a->v[i], &m));
        const tm_val *x = tm_map_get(rs, m, attr);
        bool hit = false;
        if (x) {
            if (f->n_args > 1) PL_TRY(tm_apply_test(rs, f->args[1]->s, *x, f->n_args > 2 ? &cmp : NULL, &hit));
            else hit = tm_truthy(*x);
        }
        if (hit == select) r->v[n++] = a->v[i];
    }
    r->n = n;
    *out = arr_val(r);
    return 0;
}

/* select/reject(test?, value?) (Jinja's; not in the oracle). */
static int select_items(tm_rs *rs, tm_val v, const tm_val *pos, size_t np, bool select,
                        tm_val *out) {
    if (np > 0 && pos[0].kind != V_STR)
        return tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "select/reject: the test must be a name");
    if (np > 0 && !tm_test_known(pos[0].u.s))
        return tm_fail(rs, PL_ERR_UNSUPPORTED, "the test `%.*s` is not supported",
                       (int)pos[0].u.s.n, pos[0].u.s.p);
    const tm_array *a = v.u.arr;
    tm_array *r;
    PL_TRY(tm_arr_new(rs, a->n, &r));
    size_t n = 0;
    for (size_t i = 0; i < a->n; i++) {
        bool hit;
        if (np == 0) hit = tm_truthy(a->v[i]);
        else PL_TRY(tm_apply_test(rs, pos[0].u.s, a->v[i], np > 1 ? &pos[1] : NULL, &hit));
        if (hit == select) r->v[n++] = a->v[i];
    }
    r->n = n;
    *out = arr_val(r);
    return 0;
}

typedef struct sort_key {
    bool has_attr;
    tm_str path;
} sort_key;

static int sort_key_of(tm_rs *rs, tm_val item, void *ctx, tm_val *out) {
    const sort_key *k = ctx;
    if (!k->has_attr) {
        *out = item;
        return 0;
    }
    return attr_path(rs, item, k->path, out);
}

static int sort_list(tm_rs *rs, tm_val v, const tm_val *pos, size_t np, const tm_map *kw,
                     tm_val *out) {
    const tm_val *rev = arg(rs, pos, np, kw, 0, "reverse");
    const tm_val *cs = arg(rs, pos, np, kw, 1, "case_sensitive");
    const tm_val *attr = arg(rs, pos, np, kw, 2, "attribute");
    if (rev && rev->kind != V_BOOL) return tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "sort: reverse must be a boolean");
    if (cs && cs->kind != V_BOOL)
        return tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "sort: case_sensitive must be a boolean");
    sort_key key = {0};
    char num[400];
    if (attr && attr->kind == V_STR) {
        key.has_attr = true;
        key.path = attr->u.s;
    } else if (attr && attr->kind == V_INT) {
        key.has_attr = true;
        size_t n = tm_num_js(attr->u.num, num);
        char *p;
        PL_TRY(tm_str_new(rs, n, &p));
        memcpy(p, num, n);
        key.path = (tm_str){p, n};
    } else if (attr && attr->kind != V_NULL) {
        return tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "sort: attribute must be a string, integer or none");
    }
    tm_array *r;
    PL_TRY(tm_arr_new(rs, v.u.arr->n, &r));
    if (r->n) memcpy(r->v, v.u.arr->v, r->n * sizeof *r->v);
    PL_TRY(tm_sort(rs, r->v, r->n, sort_key_of, &key, cs && cs->u.b, rev && rev->u.b));
    *out = arr_val(r);
    return 0;
}

static int map_attr(tm_rs *rs, tm_val v, const tm_map *kw, tm_val *out) {
    const tm_val *attr = kw ? tm_map_get(rs, kw, TM_LIT("attribute")) : NULL;
    if (!attr)
        return tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "`map` without `attribute` is not supported");
    if (attr->kind != V_STR) return tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "map: attribute must be a string");
    const tm_val *dflt = tm_map_get(rs, kw, TM_LIT("default"));
    const tm_array *a = v.u.arr;
    tm_array *r;
    PL_TRY(tm_arr_new(rs, a->n, &r));
    for (size_t i = 0; i < a->n; i++) {
        if (!tm_is_obj(a->v[i]) && a->v[i].kind != V_NS)
            return tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "items in map must be objects");
        PL_TRY(attr_path(rs, a->v[i], attr->u.s, &r->v[i]));
        if (r->v[i].kind == V_UNDEF && dflt) r->v[i] = *dflt;
    }
    *out = arr_val(r);
    return 0;
}

/* ---- the filters ----------------------------------------------------------------------- */

/* x|name: no arguments. */
static int filter_plain(tm_rs *rs, tm_val v, tm_str name, tm_val *out) {
#define IS(s) tm_str_eqc(name, s)
    if (IS("safe")) {
        *out = v;
        return 0;
    }
    if (IS("tojson")) return to_json(rs, v, NULL, out);
    if (IS("default") || IS("d")) {
        *out = v.kind == V_UNDEF ? tm_strv((tm_str){"", 0}) : v;
        return 0;
    }
    if (IS("count")) name = TM_LIT("length");
    if (tm_is_arr(v)) {
        const tm_array *a = v.u.arr;
        if (IS("list")) *out = v;
        else if (IS("first")) *out = a->n ? a->v[0] : tm_undef();
        else if (IS("last")) *out = a->n ? a->v[a->n - 1] : tm_undef();
        else if (tm_str_eqc(name, "length")) *out = tm_int((double)a->n);
        else if (IS("reverse") || IS("sort")) {
            tm_array *r;
            PL_TRY(tm_arr_new(rs, a->n, &r));
            for (size_t i = 0; i < a->n; i++) r->v[i] = IS("reverse") ? a->v[a->n - 1 - i] : a->v[i];
            if (IS("sort")) PL_TRY(tm_sort(rs, r->v, r->n, NULL, NULL, false, false));
            *out = arr_val(r);
        } else if (IS("join")) return join_items(rs, v, (tm_str){"", 0}, out);
        else if (IS("string")) {
            tm_json_opt o = {.indent = -1};
            tm_str s;
            PL_TRY(tm_to_json(rs, v, &o, &s));
            *out = tm_strv(s);
        } else if (IS("unique")) return unique(rs, a, out);
        else if (IS("select") || IS("reject")) return select_items(rs, v, NULL, 0, IS("select"), out);
        else return tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "unknown filter for a list: %.*s",
                            (int)name.n, name.p);
        return 0;
    }
    if (v.kind == V_STR) {
        tm_str s = v.u.s, r;
        if (tm_str_eqc(name, "length")) {
            PL_TRY(tm_charge_n(rs, s.n));
            *out = tm_int((double)tm_utf16_len(s));
            return 0;
        }
        if (IS("upper") || IS("lower") || IS("title") || IS("capitalize")) {
            tm_val m;
            PL_TRY(tm_builtin_member(rs, v, name, &m));
            return tm_call_method(rs, m.u.fn, NULL, 0, out);
        }
        if (IS("trim")) {
            PL_TRY(tm_charge_n(rs, s.n));
            r = tm_trim(s, true, true);
            *out = tm_strv(r);
            return 0;
        }
        if (IS("indent")) return indent(rs, s, 4, false, false, out);
        if (IS("join") || IS("string")) {
            *out = v;
            return 0;
        }
        if (IS("int")) {
            double x = tm_js_parse_int(s);
            *out = tm_int(isnan(x) ? 0 : x);
            return 0;
        }
        if (IS("float")) {
            double x = tm_js_parse_float(s);
            *out = isnan(x) ? tm_float(0) : tm_float(x);
            return 0;
        }
        return tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "unknown filter for a string: %.*s", (int)name.n,
                       name.p);
    }
    if (tm_is_num(v)) {
        if (IS("abs")) *out = v.kind == V_INT ? tm_int(fabs(v.u.num)) : tm_float(fabs(v.u.num));
        else if (IS("int")) *out = tm_int(floor(v.u.num));
        else if (IS("float")) *out = tm_float(v.u.num);
        else if (IS("string")) {
            tm_str s;
            PL_TRY(tm_to_string(rs, v, &s));
            *out = tm_strv(s);
        } else return tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "unknown filter for a number: %.*s",
                              (int)name.n, name.p);
        return 0;
    }
    if (tm_is_obj(v)) {
        if (IS("items")) return tm_obj_items(rs, v, out);
        if (tm_str_eqc(name, "length")) {
            tm_map *m;
            PL_TRY(tm_obj_map(rs, v, &m));
            *out = tm_int((double)m->n);
            return 0;
        }
        tm_val m;
        PL_TRY(tm_builtin_member(rs, v, name, &m));
        if (m.kind == V_FUNC) return tm_call_method(rs, m.u.fn, NULL, 0, out);
        return tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "unknown filter for an object: %.*s",
                       (int)name.n, name.p);
    }
    if (v.kind == V_BOOL) {
        if (IS("bool")) *out = v;
        else if (IS("int")) *out = tm_int(v.u.b);
        else if (IS("float")) *out = tm_float(v.u.b);
        else if (IS("string")) *out = tm_strv(v.u.b ? TM_LIT("true") : TM_LIT("false"));
        else return tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "unknown filter for a boolean: %.*s",
                            (int)name.n, name.p);
        return 0;
    }
#undef IS
    return bad_filter(rs, name, v);
}

/* x|name(args). */
static int filter_call(tm_rs *rs, tm_val v, const tm_node *f, tm_env *env, tm_val *out) {
    tm_str name = f->a->s;
#define IS(s) tm_str_eqc(name, s)
    if ((IS("selectattr") || IS("rejectattr")) && tm_is_arr(v))
        return select_attr(rs, v, f, IS("selectattr"), env, out);
    tm_val *pos;
    size_t np;
    tm_map *kw;
    PL_TRY(tm_eval_args(rs, f->args, f->n_args, env, &pos, &np, &kw));
    rs->line = f->line;
    if (IS("tojson")) return to_json(rs, v, kw, out);
    if (IS("join")) {
        if (v.kind != V_STR && !tm_is_arr(v)) return bad_filter(rs, name, v);
        const tm_val *sep = arg(rs, pos, np, kw, 0, "separator");
        if (sep && sep->kind != V_STR)
            return tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "join: the separator must be a string");
        return join_items(rs, v, sep ? sep->u.s : (tm_str){"", 0}, out);
    }
    if (IS("int") || IS("float")) {
        bool is_int = IS("int");
        const tm_val *d = arg(rs, pos, np, kw, 0, "default");
        tm_val dflt = d ? *d : is_int ? tm_int(0) : tm_float(0);
        if (v.kind == V_STR) {
            double x = is_int ? tm_js_parse_int(v.u.s) : tm_js_parse_float(v.u.s);
            *out = isnan(x) ? dflt : is_int ? tm_int(x) : tm_float(x);
        } else if (tm_is_num(v)) {
            *out = v;
        } else if (v.kind == V_BOOL) {
            *out = is_int ? tm_int(v.u.b) : tm_float(v.u.b);
        } else {
            return bad_filter(rs, name, v);
        }
        return 0;
    }
    if (IS("default") || IS("d")) {
        tm_val dflt = np > 0 ? pos[0] : tm_strv((tm_str){"", 0});
        const tm_val *b = arg(rs, pos, np, kw, 1, "boolean");
        if (b && b->kind != V_BOOL)
            return tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "`default` filter flag must be a boolean");
        bool boolean = b && b->u.b;
        *out = (v.kind == V_UNDEF || (boolean && !tm_truthy(v))) ? dflt : v;
        return 0;
    }
    if (tm_is_arr(v)) {
        if (IS("sort")) return sort_list(rs, v, pos, np, kw, out);
        if (IS("map")) return map_attr(rs, v, kw, out);
        if (IS("select") || IS("reject")) return select_items(rs, v, pos, np, IS("select"), out);
        return tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "unknown filter for a list: %.*s", (int)name.n,
                       name.p);
    }
    if (v.kind == V_STR) {
        if (IS("indent")) {
            const tm_val *w = arg(rs, pos, np, kw, 0, "width");
            const tm_val *first = arg(rs, pos, np, kw, 1, "first");
            const tm_val *blank = arg(rs, pos, np, kw, 2, "blank");
            if (w && w->kind != V_INT)
                return tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "indent: width must be a number");
            return indent(rs, v.u.s, w ? w->u.num : 4, first && js_truthy(*first),
                          blank && js_truthy(*blank), out);
        }
        if (IS("replace")) {
            /* the oracle passes the positional arguments and then the keyword ones as an object */
            tm_val *args = tm_alloc_n(&rs->a, np + 1, sizeof *args);
            if (!args) return tm_oom(rs);
            if (np) memcpy(args, pos, np * sizeof *args);
            if (!kw) PL_TRY(tm_map_new(rs, 0, &kw));
            args[np] = (tm_val){.kind = V_KWARGS, .u.map = kw};
            tm_val m;
            PL_TRY(tm_builtin_member(rs, v, name, &m));
            return tm_call_method(rs, m.u.fn, args, np + 1, out);
        }
        return tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "unknown filter for a string: %.*s", (int)name.n,
                       name.p);
    }
    if (tm_is_obj(v)) {
        tm_val m;
        PL_TRY(tm_builtin_member(rs, v, name, &m));
        if (m.kind != V_FUNC)
            return tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "unknown filter for an object: %.*s",
                           (int)name.n, name.p);
        if (kw && kw->n) {
            tm_val *args = tm_alloc_n(&rs->a, np + 1, sizeof *args);
            if (!args) return tm_oom(rs);
            if (np) memcpy(args, pos, np * sizeof *args);
            args[np++] = (tm_val){.kind = V_KWARGS, .u.map = kw};
            pos = args;
        }
        return tm_call_method(rs, m.u.fn, pos, np, out);
    }
#undef IS
    return bad_filter(rs, name, v);
}

int tm_apply_filter(tm_rs *rs, tm_val operand, const tm_node *filter, tm_env *env,
                    tm_val *out) {
    PL_TRY(tm_charge(rs, 1));
    if (filter->kind == N_IDENT) return filter_plain(rs, operand, filter->s, out);
    return filter_call(rs, operand, filter, env, out);
}
