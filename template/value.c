/*
 * template/value.c - run-time values: making strings, lists and objects in the render arena,
 * truthiness, numbers as JavaScript prints them, and values from jansson.
 * The two ways the oracle turns a value into text and equality are in text.c,
 * above json.c and jstr.c, which use this file.
 */
#include "template/tmpl_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int pl_tm_str_new(pl_tm_rs *rs, size_t n, char **out_p) {
    if (n > rs->lim.max_output_bytes)
        return pl_tm_fail(rs, PL_ERR_TOO_LONG, "a string of %zu bytes exceeds the limit of %zu", n,
                          rs->lim.max_output_bytes);
    char *p = pl_tm_alloc(&rs->a, n + 1);
    if (!p) return pl_tm_oom(rs);
    p[n] = 0;
    *out_p = p;
    return 0;
}

int pl_tm_str_cat(pl_tm_rs *rs, pl_tm_str a, pl_tm_str b, pl_tm_str *out) {
    if (b.n == 0) {
        *out = a;
        return 0;
    }
    if (a.n == 0) {
        *out = b;
        return 0;
    }
    if (a.n > SIZE_MAX / 2 || b.n > SIZE_MAX / 2) return pl_tm_oom(rs);
    PL_TRY(pl_tm_charge_n(rs, a.n + b.n));
    char *p;
    PL_TRY(pl_tm_str_new(rs, a.n + b.n, &p));
    memcpy(p, a.p, a.n);
    memcpy(p + a.n, b.p, b.n);
    *out = (pl_tm_str){p, a.n + b.n};
    return 0;
}

int pl_tm_sb_put(pl_tm_rs *rs, pl_tm_sb *b, pl_tm_str s) {
    if (s.n == 0) return 0;
    if (s.n > rs->lim.max_output_bytes - b->n)
        return pl_tm_fail(rs, PL_ERR_TOO_LONG, "a string exceeds the limit of %zu bytes",
                          rs->lim.max_output_bytes);
    PL_TRY(pl_tm_charge_n(rs, s.n));
    if (b->n + s.n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + s.n) cap *= 2;
        if (cap > rs->lim.max_output_bytes) cap = rs->lim.max_output_bytes;
        char *p;
        PL_TRY(pl_tm_str_new(rs, cap, &p));
        if (b->n) memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s.p, s.n);
    b->n += s.n;
    return 0;
}

int pl_tm_arr_new(pl_tm_rs *rs, size_t n, pl_tm_array **out) {
    if (n > rs->lim.max_items)
        return pl_tm_fail(rs, PL_ERR_TOO_LONG, "a list of %zu items exceeds the limit of %zu", n,
                          rs->lim.max_items);
    PL_TRY(pl_tm_charge_n(rs, n));
    pl_tm_array *a = pl_tm_alloc(&rs->a, sizeof *a);
    pl_tm_val *v = n ? pl_tm_alloc_n(&rs->a, n, sizeof *v) : NULL;
    if (!a || (n && !v)) return pl_tm_oom(rs);
    a->n = n;
    a->v = v;
    *out = a;
    return 0;
}

int pl_tm_map_new(pl_tm_rs *rs, size_t cap, pl_tm_map **out) {
    if (cap > rs->lim.max_items)
        return pl_tm_fail(rs, PL_ERR_TOO_LONG, "an object of %zu keys exceeds the limit of %zu",
                          cap, rs->lim.max_items);
    pl_tm_map *m = pl_tm_zalloc(&rs->a, sizeof *m);
    if (!m) return pl_tm_oom(rs);
    if (cap) {
        m->k = pl_tm_alloc_n(&rs->a, cap, sizeof *m->k);
        m->v = pl_tm_alloc_n(&rs->a, cap, sizeof *m->v);
        if (!m->k || !m->v) return pl_tm_oom(rs);
        m->cap = cap;
    }
    *out = m;
    return 0;
}

const pl_tm_val *pl_tm_map_get(pl_tm_rs *rs, const pl_tm_map *m, pl_tm_str k) {
    (void)pl_tm_charge_n(rs, m->n); /* a failure here is reported by the next charge */
    for (size_t i = 0; i < m->n; i++)
        if (pl_tm_str_eq(m->k[i], k)) return &m->v[i];
    return NULL;
}

int pl_tm_map_set(pl_tm_rs *rs, pl_tm_map *m, pl_tm_str k, pl_tm_val v) {
    PL_TRY(pl_tm_charge_n(rs, m->n));
    for (size_t i = 0; i < m->n; i++)
        if (pl_tm_str_eq(m->k[i], k)) {
            m->v[i] = v;
            return 0;
        }
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 4;
        if (cap > rs->lim.max_items) cap = rs->lim.max_items;
        if (m->n >= cap)
            return pl_tm_fail(rs, PL_ERR_TOO_LONG, "an object exceeds the limit of %zu keys",
                              rs->lim.max_items);
        pl_tm_str *nk = pl_tm_alloc_n(&rs->a, cap, sizeof *nk);
        pl_tm_val *nv = pl_tm_alloc_n(&rs->a, cap, sizeof *nv);
        if (!nk || !nv) return pl_tm_oom(rs);
        if (m->n) {
            memcpy(nk, m->k, m->n * sizeof *nk);
            memcpy(nv, m->v, m->n * sizeof *nv);
        }
        m->k = nk;
        m->v = nv;
        m->cap = cap;
    }
    m->k[m->n] = k;
    m->v[m->n] = v;
    m->n++;
    return 0;
}

/* The loop object as the oracle builds it each iteration: index, index0, revindex, revindex0,
 * first, last, length, previtem, nextitem, in that order. */
int pl_tm_obj_map(pl_tm_rs *rs, pl_tm_val v, pl_tm_map **out) {
    if (v.kind != PL_TM_V_LOOP) {
        *out = v.u.map;
        return 0;
    }
    pl_tm_loop *L = v.u.loop;
    if (!L->made) {
        double i = L->index0, n = L->length;
        size_t k = (size_t)i;
        pl_tm_map *m;
        PL_TRY(pl_tm_map_new(rs, 9, &m));
        PL_TRY(pl_tm_map_set(rs, m, PL_TM_LIT("index"), pl_tm_int(i + 1)));
        PL_TRY(pl_tm_map_set(rs, m, PL_TM_LIT("index0"), pl_tm_int(i)));
        PL_TRY(pl_tm_map_set(rs, m, PL_TM_LIT("revindex"), pl_tm_int(n - i)));
        PL_TRY(pl_tm_map_set(rs, m, PL_TM_LIT("revindex0"), pl_tm_int(n - i - 1)));
        PL_TRY(pl_tm_map_set(rs, m, PL_TM_LIT("first"), pl_tm_bool(i == 0)));
        PL_TRY(pl_tm_map_set(rs, m, PL_TM_LIT("last"), pl_tm_bool(i == n - 1)));
        PL_TRY(pl_tm_map_set(rs, m, PL_TM_LIT("length"), pl_tm_int(n)));
        PL_TRY(
            pl_tm_map_set(rs, m, PL_TM_LIT("previtem"), k > 0 ? L->items[k - 1] : pl_tm_undef()));
        PL_TRY(pl_tm_map_set(rs, m, PL_TM_LIT("nextitem"),
                             i < n - 1 ? L->items[k + 1] : pl_tm_undef()));
        L->made = m;
    }
    *out = L->made;
    return 0;
}

bool pl_tm_truthy(pl_tm_val v) {
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
    case PL_TM_V_ARRAY:
    case PL_TM_V_TUPLE:
        return v.u.arr->n > 0;
    case PL_TM_V_OBJECT:
    case PL_TM_V_KWARGS:
        return v.u.map->n > 0;
    default: /* the loop object has its 9 keys; a namespace is a JavaScript object: truthy */
        return true;
    }
}

const char *pl_tm_kind_name(pl_tm_kind k) {
    static const char *const names[] = {
        [PL_TM_V_UNDEF] = "UndefinedValue", [PL_TM_V_NULL] = "NullValue",
        [PL_TM_V_BOOL] = "BooleanValue",    [PL_TM_V_INT] = "IntegerValue",
        [PL_TM_V_FLOAT] = "FloatValue",     [PL_TM_V_STR] = "StringValue",
        [PL_TM_V_ARRAY] = "ArrayValue",     [PL_TM_V_TUPLE] = "TupleValue",
        [PL_TM_V_OBJECT] = "ObjectValue",   [PL_TM_V_KWARGS] = "KeywordArgumentsValue",
        [PL_TM_V_NS] = "NamespaceValue",    [PL_TM_V_LOOP] = "ObjectValue",
        [PL_TM_V_FUNC] = "FunctionValue",
    };
    return names[k];
}

/* ---- numbers as text ------------------------------------------------------------------- */

/* Number.prototype.toString(): the shortest digits that read back to x, placed by the
 * ECMAScript rules (plain up to 21 integer digits, 0.000001 and up, exponent otherwise). */
size_t pl_tm_num_js(double x, char *buf) {
    if (isnan(x)) return (size_t)sprintf(buf, "NaN");
    if (isinf(x)) return (size_t)sprintf(buf, x > 0 ? "Infinity" : "-Infinity");
    if (x == 0) return (size_t)sprintf(buf, "0");
    char tmp[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, x);
        if (strtod(tmp, NULL) == x) break;
    }
    /* tmp: [-]d[.ddd]e[+-]xx */
    char digits[24];
    int k = 0;
    const char *p = tmp;
    bool neg = *p == '-';
    if (neg) p++;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[k++] = *p;
    int e = atoi(p + 1);
    while (k > 1 && digits[k - 1] == '0') k--;
    int n = e + 1; /* the decimal point sits after n digits */
    char *o = buf;
    if (neg) *o++ = '-';
    if (k <= n && n <= 21) {
        memcpy(o, digits, (size_t)k);
        o += k;
        for (int i = 0; i < n - k; i++) *o++ = '0';
    } else if (0 < n && n <= 21) {
        memcpy(o, digits, (size_t)n);
        o += n;
        *o++ = '.';
        memcpy(o, digits + n, (size_t)(k - n));
        o += k - n;
    } else if (-6 < n && n <= 0) {
        *o++ = '0';
        *o++ = '.';
        for (int i = 0; i < -n; i++) *o++ = '0';
        memcpy(o, digits, (size_t)k);
        o += k;
    } else {
        *o++ = digits[0];
        if (k > 1) {
            *o++ = '.';
            memcpy(o, digits + 1, (size_t)(k - 1));
            o += k - 1;
        }
        o += sprintf(o, "e%c%d", n - 1 < 0 ? '-' : '+', abs(n - 1));
    }
    *o = 0;
    return (size_t)(o - buf);
}

/* ---- from jansson ---------------------------------------------------------------------- */

/* A canonical array index ("0", "17"; below 2^32 - 1): JavaScript objects list these keys
 * first, in numeric order. */
static bool array_index(const char *k, size_t n, double *out) {
    if (n == 0 || n > 10 || (n > 1 && k[0] == '0')) return false;
    double v = 0;
    for (size_t i = 0; i < n; i++) {
        if (k[i] < '0' || k[i] > '9') return false;
        v = v * 10 + (k[i] - '0');
    }
    if (v >= 4294967295.0) return false;
    *out = v;
    return true;
}

int pl_tm_from_json(pl_tm_rs *rs, const json_t *j, int depth, pl_tm_val *out) {
    if (depth > rs->lim.max_depth)
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "variables nested more than %d deep",
                          rs->lim.max_depth);
    PL_TRY(pl_tm_charge(rs, 1));
    switch (json_typeof(j)) {
    case JSON_NULL:
        *out = pl_tm_null();
        return 0;
    case JSON_TRUE:
        *out = pl_tm_bool(true);
        return 0;
    case JSON_FALSE:
        *out = pl_tm_bool(false);
        return 0;
    case JSON_INTEGER:
        *out = pl_tm_int((double)json_integer_value(j));
        return 0;
    case JSON_REAL: {
        double x = json_real_value(j);
        *out = (isfinite(x) && x == floor(x)) ? pl_tm_int(x) : pl_tm_float(x);
        return 0;
    }
    case JSON_STRING: {
        size_t n = json_string_length(j);
        const char *p = json_string_value(j);
        if (n > rs->lim.max_output_bytes)
            return pl_tm_fail(rs, PL_ERR_TOO_LONG,
                              "a string variable of %zu bytes exceeds the "
                              "limit of %zu",
                              n, rs->lim.max_output_bytes);
        *out = pl_tm_strv((pl_tm_str){p, n}); /* jansson keeps it alive for the render */
        return 0;
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        pl_tm_array *a;
        PL_TRY(pl_tm_arr_new(rs, n, &a));
        for (size_t i = 0; i < n; i++)
            PL_TRY(pl_tm_from_json(rs, json_array_get(j, i), depth + 1, &a->v[i]));
        *out = (pl_tm_val){.kind = PL_TM_V_ARRAY, .u.arr = a};
        return 0;
    }
    case JSON_OBJECT: {
        size_t n = json_object_size(j);
        pl_tm_map *m;
        PL_TRY(pl_tm_map_new(rs, n, &m));
        /* array-index keys first, ascending (insertion sort: such keys are rare) */
        const char *key;
        size_t klen;
        json_t *val;
        json_object_keylen_foreach((json_t *)j, key, klen, val) {
            double idx;
            if (!array_index(key, klen, &idx)) continue;
            size_t at = m->n;
            while (at > 0) {
                double prev = 0;
                array_index(m->k[at - 1].p, m->k[at - 1].n, &prev);
                if (prev < idx) break;
                at--;
            }
            PL_TRY(pl_tm_charge_n(rs, m->n));
            memmove(m->k + at + 1, m->k + at, (m->n - at) * sizeof *m->k);
            memmove(m->v + at + 1, m->v + at, (m->n - at) * sizeof *m->v);
            m->k[at] = (pl_tm_str){key, klen};
            PL_TRY(pl_tm_from_json(rs, val, depth + 1, &m->v[at]));
            m->n++;
        }
        json_object_keylen_foreach((json_t *)j, key, klen, val) {
            double idx;
            if (array_index(key, klen, &idx)) continue;
            m->k[m->n] = (pl_tm_str){key, klen};
            PL_TRY(pl_tm_from_json(rs, val, depth + 1, &m->v[m->n]));
            m->n++;
        }
        *out = (pl_tm_val){.kind = PL_TM_V_OBJECT, .u.map = m};
        return 0;
    }
    }
    return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "a variable of an unknown JSON type");
}
