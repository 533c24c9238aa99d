/*
 * template/text.c - the two ways the oracle turns a value into text, and JavaScript's loose
 * equality (which compares through them).
 *
 * The oracle wraps JavaScript values (RuntimeValue.value). Two string forms matter:
 * - pl_tm_to_string is RuntimeValue.toString(): what {{ }} prints and |string gives (floats
 *   that are whole keep ".0", lists and objects print as JSON);
 * - pl_tm_js_string is value.toString() on the wrapped JavaScript value, which `~` and `+` use
 *   (floats print as JavaScript numbers, lists join their items with ",", objects are
 *   "[object Map]").
 */
#include "template/tmpl_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* FloatValue.toString(): whole numbers keep one decimal ("1.0", "-0.0"). */
static size_t float_string(double x, char *buf) {
    if (x == 0 && signbit(x)) return (size_t)sprintf(buf, "-0.0");
    if (isfinite(x) && x == floor(x) && fabs(x) < 1e21) return (size_t)sprintf(buf, "%.1f", x);
    return pl_tm_num_js(x, buf);
}

static int small_str(pl_tm_rs *rs, const char *p, size_t n, pl_tm_str *out) {
    char *s;
    PL_TRY(pl_tm_str_new(rs, n, &s));
    memcpy(s, p, n);
    *out = (pl_tm_str){s, n};
    return 0;
}

int pl_tm_to_string(pl_tm_rs *rs, pl_tm_val v, pl_tm_str *out) {
    char buf[400];
    switch (v.kind) {
    case PL_TM_V_STR:
        *out = v.u.s;
        return 0;
    case PL_TM_V_INT:
        return small_str(rs, buf, pl_tm_num_js(v.u.num, buf), out);
    case PL_TM_V_FLOAT:
        return small_str(rs, buf, float_string(v.u.num, buf), out);
    case PL_TM_V_BOOL:
        *out = v.u.b ? PL_TM_LIT("true") : PL_TM_LIT("false");
        return 0;
    case PL_TM_V_NULL: /* the oracle's NullValue wraps undefined, not null */
    case PL_TM_V_UNDEF:
        *out = PL_TM_LIT("undefined");
        return 0;
    case PL_TM_V_FUNC:
        return pl_tm_fail(rs, PL_ERR_UNSUPPORTED,
                          "printing a function (the oracle prints its "
                          "JavaScript source)");
    default: {
        pl_tm_json_opt opt = {.indent = -1};
        return pl_tm_to_json(rs, v, &opt, out);
    }
    }
}

int pl_tm_js_string(pl_tm_rs *rs, pl_tm_val v, pl_tm_str *out) {
    char buf[400];
    switch (v.kind) {
    case PL_TM_V_INT:
    case PL_TM_V_FLOAT:
        return small_str(rs, buf, pl_tm_num_js(v.u.num, buf), out);
    case PL_TM_V_ARRAY:
    case PL_TM_V_TUPLE: {
        if (++rs->depth > rs->lim.max_depth)
            return pl_tm_fail(rs, PL_ERR_TOO_LONG, "values nested more than %d deep",
                              rs->lim.max_depth);
        pl_tm_sb b = {0};
        for (size_t i = 0; i < v.u.arr->n; i++) {
            pl_tm_str item;
            PL_TRY(pl_tm_to_string(rs, v.u.arr->v[i], &item));
            if (i) PL_TRY(pl_tm_sb_put(rs, &b, PL_TM_LIT(",")));
            PL_TRY(pl_tm_sb_put(rs, &b, item));
        }
        rs->depth--;
        *out = pl_tm_sb_str(&b);
        return 0;
    }
    case PL_TM_V_OBJECT:
    case PL_TM_V_KWARGS:
    case PL_TM_V_NS:
    case PL_TM_V_LOOP:
        *out = PL_TM_LIT("[object Map]");
        return 0;
    default:
        return pl_tm_to_string(rs, v, out);
    }
}

/* ---- equality -------------------------------------------------------------------------- */

typedef enum { JS_UNDEF, JS_BOOL, JS_NUM, JS_STR, JS_OBJ } js_type;

/* The type of the wrapped JavaScript value. The oracle's NullValue is made without an argument,
 * so it wraps undefined: none == undefined, and none === undefined too. */
static js_type js_type_of(pl_tm_val v) {
    switch (v.kind) {
    case PL_TM_V_UNDEF:
    case PL_TM_V_NULL:
        return JS_UNDEF;
    case PL_TM_V_BOOL:
        return JS_BOOL;
    case PL_TM_V_INT:
    case PL_TM_V_FLOAT:
        return JS_NUM;
    case PL_TM_V_STR:
        return JS_STR;
    default:
        return JS_OBJ;
    }
}

static const void *identity(pl_tm_val v) {
    switch (v.kind) {
    case PL_TM_V_ARRAY:
    case PL_TM_V_TUPLE:
        return v.u.arr;
    case PL_TM_V_LOOP:
        return v.u.loop;
    case PL_TM_V_FUNC:
        return v.u.fn;
    default:
        return v.u.map;
    }
}

bool pl_tm_strict_eq(pl_tm_val a, pl_tm_val b) {
    js_type ta = js_type_of(a), tb = js_type_of(b);
    if (ta != tb) return false;
    switch (ta) {
    case JS_UNDEF:
        return true;
    case JS_BOOL:
        return a.u.b == b.u.b;
    case JS_NUM:
        return a.u.num == b.u.num;
    case JS_STR:
        return pl_tm_str_eq(a.u.s, b.u.s);
    default:
        return identity(a) == identity(b);
    }
}

int pl_tm_loose_eq(pl_tm_rs *rs, pl_tm_val a, pl_tm_val b, bool *out) {
    for (int round = 0; round < 4; round++) {
        js_type ta = js_type_of(a), tb = js_type_of(b);
        if (ta == tb) {
            *out = pl_tm_strict_eq(a, b);
            return 0;
        }
        if (ta == JS_NUM && tb == JS_STR) {
            *out = a.u.num == pl_tm_js_to_number(b.u.s);
            return 0;
        }
        if (ta == JS_STR && tb == JS_NUM) {
            *out = pl_tm_js_to_number(a.u.s) == b.u.num;
            return 0;
        }
        if (ta == JS_BOOL) {
            a = pl_tm_int(a.u.b ? 1 : 0);
            continue;
        }
        if (tb == JS_BOOL) {
            b = pl_tm_int(b.u.b ? 1 : 0);
            continue;
        }
        if (ta == JS_OBJ && (tb == JS_NUM || tb == JS_STR)) {
            if (a.kind == PL_TM_V_FUNC) break;
            pl_tm_str s;
            PL_TRY(pl_tm_js_string(rs, a, &s));
            a = pl_tm_strv(s);
            continue;
        }
        if (tb == JS_OBJ && (ta == JS_NUM || ta == JS_STR)) {
            if (b.kind == PL_TM_V_FUNC) break;
            pl_tm_str s;
            PL_TRY(pl_tm_js_string(rs, b, &s));
            b = pl_tm_strv(s);
            continue;
        }
        break;
    }
    *out = false;
    return 0;
}
