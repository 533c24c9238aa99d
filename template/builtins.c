/*
 * template/builtins.c - the global functions and constants: range, namespace,
 * raise_exception, strftime_now, true/false/none (and True/False/None).
 *
 * The oracle wraps plain JavaScript functions for range, raise_exception and strftime_now:
 * they receive the wrapped values (undefined arguments count as missing) and their results are
 * converted back (whole numbers become integers).
 */
#include "template/tmpl_internal.h"
#include "util/utf8.h"

#include <math.h>
#include <string.h>
#include <time.h>

static pl_tm_func k_range = {.kind = PL_TM_F_RANGE};
static pl_tm_func k_raise = {.kind = PL_TM_F_RAISE};
static pl_tm_func k_strftime = {.kind = PL_TM_F_STRFTIME};

bool pl_tm_global_known(pl_tm_str name) {
    static const char *const names[] = {"range",        "namespace", "raise_exception",
                                        "strftime_now", "caller",    NULL};
    for (const char *const *n = names; *n; n++)
        if (pl_tm_str_eqc(name, *n)) return true;
    return false;
}

int pl_tm_global_lookup(pl_tm_str name, pl_tm_val *out) {
    if (pl_tm_str_eqc(name, "true") || pl_tm_str_eqc(name, "True"))
        *out = pl_tm_bool(true);
    else if (pl_tm_str_eqc(name, "false") || pl_tm_str_eqc(name, "False"))
        *out = pl_tm_bool(false);
    else if (pl_tm_str_eqc(name, "none") || pl_tm_str_eqc(name, "None"))
        *out = pl_tm_null();
    else if (pl_tm_str_eqc(name, "range"))
        *out = (pl_tm_val){.kind = PL_TM_V_FUNC, .u.fn = &k_range};
    else if (pl_tm_str_eqc(name, "raise_exception"))
        *out = (pl_tm_val){.kind = PL_TM_V_FUNC, .u.fn = &k_raise};
    else if (pl_tm_str_eqc(name, "strftime_now"))
        *out = (pl_tm_val){.kind = PL_TM_V_FUNC, .u.fn = &k_strftime};
    else
        return 0;
    return 1;
}

/* range(stop), range(start, stop), range(start, stop, step): the oracle's loop, floats too. */
static int range(pl_tm_rs *rs, const pl_tm_val *args, size_t n, pl_tm_val *out) {
    double x[3];
    bool have[3] = {false, false, false};
    for (size_t i = 0; i < n && i < 3; i++) {
        pl_tm_val a = args[i];
        if (a.kind == PL_TM_V_UNDEF || a.kind == PL_TM_V_NULL) continue; /* both wrap undefined */
        if (!pl_tm_is_num(a) && a.kind != PL_TM_V_BOOL)
            return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "range() expects numbers, got %s",
                              pl_tm_kind_name(a.kind));
        x[i] = a.kind == PL_TM_V_BOOL ? a.u.b : a.u.num;
        have[i] = true;
    }
    if (!have[0] && !have[1])
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "range() expects at least one number");
    double start = have[0] ? x[0] : NAN, stop = have[1] ? x[1] : NAN;
    double step = have[2] ? x[2] : 1;
    if (!have[1]) {
        stop = start;
        start = 0;
    }
    if (step == 0) return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "range() step must not be zero");
    size_t count = 0;
    for (double i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (++count > rs->lim.max_items)
            return pl_tm_fail(rs, PL_ERR_TOO_LONG, "range() of more than %zu numbers",
                              rs->lim.max_items);
    }
    pl_tm_array *a;
    PL_TRY(pl_tm_arr_new(rs, count, &a));
    size_t k = 0;
    for (double i = start; k < count; i += step, k++)
        a->v[k] = (isfinite(i) && i == floor(i)) ? pl_tm_int(i) : pl_tm_float(i);
    *out = (pl_tm_val){.kind = PL_TM_V_ARRAY, .u.arr = a};
    return 0;
}

static int namespace_fn(pl_tm_rs *rs, const pl_tm_val *args, size_t n, pl_tm_val *out) {
    const pl_tm_map *kw = NULL;
    if (n && args[n - 1].kind == PL_TM_V_KWARGS) kw = args[--n].u.map;
    if (n > 1)
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT,
                          "namespace expected at most 1 argument, got %zu", n);
    pl_tm_map *m;
    PL_TRY(pl_tm_map_new(rs, 4, &m));
    if (n == 1) {
        pl_tm_val src = args[0];
        if (pl_tm_is_obj(src)) {
            pl_tm_map *s;
            PL_TRY(pl_tm_obj_map(rs, src, &s));
            for (size_t i = 0; i < s->n; i++) PL_TRY(pl_tm_map_set(rs, m, s->k[i], s->v[i]));
        } else if (pl_tm_is_arr(src)) {
            for (size_t i = 0; i < src.u.arr->n; i++) {
                pl_tm_val pair = src.u.arr->v[i], k, v;
                if (pl_tm_is_arr(pair) && pair.u.arr->n == 2) {
                    k = pair.u.arr->v[0];
                    v = pair.u.arr->v[1];
                } else if (pair.kind == PL_TM_V_STR) { /* a two-character string is a pair */
                    uint32_t cp;
                    pl_tm_str s = pair.u.s;
                    int a = pl_utf8_decode(s.p, s.n, &cp);
                    int b = a < (int)s.n ? pl_utf8_decode(s.p + a, s.n - (size_t)a, &cp) : 0;
                    if (s.n == 0 || b == 0 || (size_t)(a + b) != s.n)
                        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT,
                                          "namespace expected an object or [key, value] pairs");
                    k = pl_tm_strv((pl_tm_str){s.p, (size_t)a});
                    v = pl_tm_strv((pl_tm_str){s.p + a, (size_t)b});
                } else {
                    return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT,
                                      "namespace expected an object or [key, value] pairs");
                }
                if (k.kind != PL_TM_V_STR)
                    return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT,
                                      "namespace keys must be strings");
                PL_TRY(pl_tm_map_set(rs, m, k.u.s, v));
            }
        } else {
            return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "'%s' object is not iterable",
                              pl_tm_kind_name(src.kind));
        }
    }
    for (size_t i = 0; kw && i < kw->n; i++) PL_TRY(pl_tm_map_set(rs, m, kw->k[i], kw->v[i]));
    *out = (pl_tm_val){.kind = PL_TM_V_NS, .u.map = m};
    return 0;
}

/* The oracle's strftime: %Y %m %d %b %B %H %M %% in local time, English month names (the
 * default locale of the oracle's runs); any other %x stays as written. */
static int strftime_now(pl_tm_rs *rs, const pl_tm_val *args, size_t n, pl_tm_val *out) {
    if (n < 1 || args[0].kind != PL_TM_V_STR)
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "strftime_now() expects a format string");
    static const char *const months[] = {"January",   "February", "March",    "April",
                                         "May",       "June",     "July",     "August",
                                         "September", "October",  "November", "December"};
    time_t now = time(NULL);
    struct tm tmv;
    if (!localtime_r(&now, &tmv)) return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "no local time");
    pl_tm_str f = args[0].u.s;
    pl_tm_sb b = {0};
    size_t from = 0;
    PL_TRY(pl_tm_charge_n(rs, f.n));
    for (size_t i = 0; i + 1 < f.n; i++) {
        if (f.p[i] != '%') continue;
        char buf[32];
        int len = -1;
        switch (f.p[i + 1]) {
        case 'Y':
            len = snprintf(buf, sizeof buf, "%d", tmv.tm_year + 1900);
            break;
        case 'm':
            len = snprintf(buf, sizeof buf, "%02d", tmv.tm_mon + 1);
            break;
        case 'd':
            len = snprintf(buf, sizeof buf, "%02d", tmv.tm_mday);
            break;
        case 'b':
            len = snprintf(buf, sizeof buf, "%.3s", months[tmv.tm_mon]);
            break;
        case 'B':
            len = snprintf(buf, sizeof buf, "%s", months[tmv.tm_mon]);
            break;
        case 'H':
            len = snprintf(buf, sizeof buf, "%02d", tmv.tm_hour);
            break;
        case 'M':
            len = snprintf(buf, sizeof buf, "%02d", tmv.tm_min);
            break;
        case '%':
            len = snprintf(buf, sizeof buf, "%%");
            break;
        default:
            break;
        }
        if (len < 0) continue;
        PL_TRY(pl_tm_sb_put(rs, &b, (pl_tm_str){f.p + from, i - from}));
        PL_TRY(pl_tm_sb_put(rs, &b, (pl_tm_str){buf, (size_t)len}));
        i++;
        from = i + 1;
    }
    PL_TRY(pl_tm_sb_put(rs, &b, (pl_tm_str){f.p + from, f.n - from}));
    *out = pl_tm_strv(pl_tm_sb_str(&b));
    return 0;
}

int pl_tm_call_builtin(pl_tm_rs *rs, const pl_tm_func *f, const pl_tm_val *args, size_t n,
                       pl_tm_val *out) {
    switch (f->kind) {
    case PL_TM_F_RANGE:
        return range(rs, args, n, out);
    case PL_TM_F_NAMESPACE:
        return namespace_fn(rs, args, n, out);
    case PL_TM_F_STRFTIME:
        return strftime_now(rs, args, n, out);
    case PL_TM_F_RAISE: {
        /* new Error(value): the message is String(value), "" for undefined */
        pl_tm_str msg = {"", 0};
        if (n > 0 && args[0].kind != PL_TM_V_UNDEF && args[0].kind != PL_TM_V_NULL)
            PL_TRY(pl_tm_js_string(rs, args[0], &msg));
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "raise_exception: %.*s",
                          (int)(msg.n > 400 ? 400 : msg.n), msg.p);
    }
    default:
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "not a function");
    }
}
