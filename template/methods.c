/*
 * template/methods.c - the members values carry in the oracle: a string's length and methods
 * (upper, lower, strip, title, capitalize, rstrip, lstrip, startswith, endswith, split,
 * replace), a list's length, an object's get/items/keys/values/dictsort; and the comparison
 * and stable sort that |sort and dictsort share.
 *
 * As in the oracle: strip/lstrip/rstrip ignore their argument and strip JavaScript white
 * space; title upper-cases an ASCII word character after a non-word character and leaves the
 * rest alone; capitalize upper-cases the first character only; split with no separator splits
 * on white space runs.
 */
#include "template/tmpl_internal.h"
#include "util/utf8.h"

#include <string.h>

enum {
    M_UPPER,
    M_LOWER,
    M_STRIP,
    M_TITLE,
    M_CAPITALIZE,
    M_RSTRIP,
    M_LSTRIP,
    M_STARTSWITH,
    M_ENDSWITH,
    M_SPLIT,
    M_REPLACE,
    M_GET,
    M_ITEMS,
    M_KEYS,
    M_VALUES,
    M_DICTSORT,
    M_COUNT
};

static const char *const k_str_methods[] = {
    [M_UPPER] = "upper",           [M_LOWER] = "lower",
    [M_STRIP] = "strip",           [M_TITLE] = "title",
    [M_CAPITALIZE] = "capitalize", [M_RSTRIP] = "rstrip",
    [M_LSTRIP] = "lstrip",         [M_STARTSWITH] = "startswith",
    [M_ENDSWITH] = "endswith",     [M_SPLIT] = "split",
    [M_REPLACE] = "replace",       [M_GET] = "get",
    [M_ITEMS] = "items",           [M_KEYS] = "keys",
    [M_VALUES] = "values",         [M_DICTSORT] = "dictsort",
};

bool pl_tm_method_known(pl_tm_str name) {
    for (int i = 0; i < M_COUNT; i++)
        if (pl_tm_str_eqc(name, k_str_methods[i])) return true;
    return pl_tm_str_eqc(name, "cycle"); /* loop.cycle */
}

static int bound(pl_tm_rs *rs, pl_tm_val self, int method, pl_tm_val *out) {
    pl_tm_func *f = pl_tm_zalloc(&rs->a, sizeof *f);
    if (!f) return pl_tm_oom(rs);
    f->kind = PL_TM_F_METHOD;
    f->method = method;
    f->self = self;
    *out = (pl_tm_val){.kind = PL_TM_V_FUNC, .u.fn = f};
    return 0;
}

int pl_tm_builtin_member(pl_tm_rs *rs, pl_tm_val v, pl_tm_str name, pl_tm_val *out) {
    *out = pl_tm_undef();
    if (v.kind == PL_TM_V_STR) {
        if (pl_tm_str_eqc(name, "length")) {
            PL_TRY(pl_tm_charge_n(rs, v.u.s.n));
            *out = pl_tm_int((double)pl_tm_utf16_len(v.u.s));
            return 0;
        }
        for (int m = M_UPPER; m <= M_REPLACE; m++)
            if (pl_tm_str_eqc(name, k_str_methods[m])) return bound(rs, v, m, out);
        return 0;
    }
    if (pl_tm_is_arr(v)) {
        if (pl_tm_str_eqc(name, "length")) *out = pl_tm_int((double)v.u.arr->n);
        return 0;
    }
    if (pl_tm_is_obj(v))
        for (int m = M_GET; m <= M_DICTSORT; m++)
            if (pl_tm_str_eqc(name, k_str_methods[m])) return bound(rs, v, m, out);
    return 0;
}

/* ---- strings --------------------------------------------------------------------------- */

static bool word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* value.replace(/\b\w/g, c => c.toUpperCase()): word characters are ASCII only. */
static int title(pl_tm_rs *rs, pl_tm_str s, pl_tm_str *out) {
    PL_TRY(pl_tm_charge_n(rs, s.n));
    char *p;
    PL_TRY(pl_tm_str_new(rs, s.n, &p));
    for (size_t i = 0; i < s.n; i++) {
        char c = s.p[i];
        if (c >= 'a' && c <= 'z' && (i == 0 || !word(s.p[i - 1]))) c = (char)(c - 32);
        p[i] = c;
    }
    *out = (pl_tm_str){p, s.n};
    return 0;
}

/* charAt(0).toUpperCase() + slice(1): only the first UTF-16 unit (half of an emoji stays). */
static int capitalize(pl_tm_rs *rs, pl_tm_str s, pl_tm_str *out) {
    if (s.n == 0 || (unsigned char)s.p[0] >= 0xF0) {
        *out = s;
        return 0;
    }
    uint32_t cp;
    int k = pl_utf8_decode(s.p, s.n, &cp);
    pl_tm_str first = {s.p, (size_t)k}, up;
    PL_TRY(pl_tm_case(rs, first, true, &up));
    return pl_tm_str_cat(rs, up, (pl_tm_str){s.p + k, s.n - (size_t)k}, out);
}

static bool has_prefix(pl_tm_str s, pl_tm_str p, bool end) {
    if (p.n > s.n) return false;
    return memcmp(end ? s.p + s.n - p.n : s.p, p.p, p.n) == 0;
}

static int starts_ends(pl_tm_rs *rs, pl_tm_str s, const pl_tm_val *args, size_t n, bool end,
                       pl_tm_val *out) {
    const char *who = end ? "endswith" : "startswith";
    if (n == 0)
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "%s() requires at least one argument", who);
    if (args[0].kind == PL_TM_V_STR) {
        *out = pl_tm_bool(has_prefix(s, args[0].u.s, end));
        return 0;
    }
    if (pl_tm_is_arr(args[0])) {
        const pl_tm_array *a = args[0].u.arr;
        for (size_t i = 0; i < a->n; i++) {
            if (a->v[i].kind != PL_TM_V_STR)
                return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT,
                                  "%s() tuple elements must be strings", who);
            if (has_prefix(s, a->v[i].u.s, end)) {
                *out = pl_tm_bool(true);
                return 0;
            }
        }
        *out = pl_tm_bool(false);
        return 0;
    }
    return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT,
                      "%s() argument must be a string or tuple of strings", who);
}

typedef struct piece_list {
    pl_tm_str *v;
    size_t n, cap;
} piece_list;

static int piece_push(pl_tm_rs *rs, piece_list *l, pl_tm_str s) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        if (cap > rs->lim.max_items) cap = rs->lim.max_items;
        if (l->n >= cap)
            return pl_tm_fail(rs, PL_ERR_TOO_LONG, "split() makes more than %zu pieces",
                              rs->lim.max_items);
        pl_tm_str *v = pl_tm_alloc_n(&rs->a, cap, sizeof *v);
        if (!v) return pl_tm_oom(rs);
        if (l->n) memcpy(v, l->v, l->n * sizeof *v);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = s;
    return 0;
}

static int pieces_to_array(pl_tm_rs *rs, const piece_list *l, pl_tm_val *out) {
    pl_tm_array *a;
    PL_TRY(pl_tm_arr_new(rs, l->n, &a));
    for (size_t i = 0; i < l->n; i++) a->v[i] = pl_tm_strv(l->v[i]);
    *out = (pl_tm_val){.kind = PL_TM_V_ARRAY, .u.arr = a};
    return 0;
}

/* Python's str.split(sep=None, maxsplit=-1) as the oracle writes it. */
static int split(pl_tm_rs *rs, pl_tm_str s, const pl_tm_val *args, size_t n, pl_tm_val *out) {
    pl_tm_val sep = n > 0 ? args[0] : pl_tm_null();
    pl_tm_val max = n > 1 ? args[1] : pl_tm_int(-1);
    if (sep.kind != PL_TM_V_STR && sep.kind != PL_TM_V_NULL)
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "split(): sep must be a string or none");
    if (max.kind != PL_TM_V_INT)
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "split(): maxsplit must be a number");
    PL_TRY(pl_tm_charge_n(rs, s.n));
    double maxsplit = max.u.num;
    piece_list l = {0};
    if (sep.kind == PL_TM_V_NULL) {
        pl_tm_str t = pl_tm_trim(s, true, false);
        size_t i = 0;
        while (i < t.n) {
            int k;
            while (i < t.n && (k = pl_tm_js_space(t.p + i, t.n - i)) > 0) i += (size_t)k;
            if (i >= t.n) break;
            size_t start = i;
            while (i < t.n && pl_tm_js_space(t.p + i, t.n - i) == 0) i++;
            if (maxsplit != -1 && (double)l.n >= maxsplit) {
                PL_TRY(piece_push(rs, &l, (pl_tm_str){t.p + start, t.n - start}));
                break;
            }
            PL_TRY(piece_push(rs, &l, (pl_tm_str){t.p + start, i - start}));
        }
        return pieces_to_array(rs, &l, out);
    }
    pl_tm_str d = sep.u.s;
    if (d.n == 0) return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "split(): empty separator");
    size_t start = 0;
    for (;;) {
        const char *hit = start <= s.n ? memmem(s.p + start, s.n - start, d.p, d.n) : NULL;
        if (!hit) {
            PL_TRY(piece_push(rs, &l, (pl_tm_str){s.p + start, s.n - start}));
            break;
        }
        size_t at = (size_t)(hit - s.p);
        PL_TRY(piece_push(rs, &l, (pl_tm_str){s.p + start, at - start}));
        start = at + d.n;
    }
    if (maxsplit != -1 && (double)l.n > maxsplit) {
        /* result.push(result.splice(maxsplit).join(sep)); splice takes a negative start from
         * the end */
        double from = maxsplit < 0 ? (double)l.n + maxsplit : maxsplit;
        size_t k = from < 0 ? 0 : (size_t)from;
        /* the pieces from k on are contiguous in s: join them back by taking the span */
        const char *a = l.v[k].p, *b = l.v[l.n - 1].p + l.v[l.n - 1].n;
        l.n = k;
        PL_TRY(piece_push(rs, &l, (pl_tm_str){a, (size_t)(b - a)}));
    }
    return pieces_to_array(rs, &l, out);
}

int pl_tm_str_replace(pl_tm_rs *rs, pl_tm_str s, pl_tm_str from, pl_tm_str to, double count,
                      pl_tm_str *out) {
    if (count == 0) {
        *out = s;
        return 0;
    }
    double left = count < 0 ? -1 : count; /* -1: no limit */
    PL_TRY(pl_tm_charge_n(rs, s.n));
    /* two passes: the size, then the bytes */
    size_t total = 0;
    for (int pass = 0; pass < 2; pass++) {
        char *p = NULL;
        if (pass == 1) PL_TRY(pl_tm_str_new(rs, total, &p));
        double rem = left;
        size_t o = 0, i = 0;
#define EMIT(src, len)                                                                             \
    do {                                                                                           \
        if (pass == 0) {                                                                           \
            if ((len) > rs->lim.max_output_bytes - o)                                              \
                return pl_tm_fail(rs, PL_ERR_TOO_LONG, "replace() makes a string over %zu bytes",  \
                                  rs->lim.max_output_bytes);                                       \
        } else if (len) {                                                                          \
            memcpy(p + o, (src), (len));                                                           \
        }                                                                                          \
        o += (len);                                                                                \
    } while (0)
        if (from.n == 0) {
            /* an empty pattern matches before every code point and at the end */
            for (;;) {
                if (rem != 0) {
                    EMIT(to.p, to.n);
                    if (rem > 0) rem--;
                }
                if (i >= s.n) break;
                uint32_t cp;
                int k = pl_utf8_decode(s.p + i, s.n - i, &cp);
                EMIT(s.p + i, (size_t)k);
                i += (size_t)k;
            }
        } else {
            while (i < s.n) {
                const char *hit = rem != 0 ? memmem(s.p + i, s.n - i, from.p, from.n) : NULL;
                if (!hit) break;
                size_t at = (size_t)(hit - s.p);
                EMIT(s.p + i, at - i);
                EMIT(to.p, to.n);
                if (rem > 0) rem--;
                i = at + from.n;
            }
            EMIT(s.p + i, s.n - i);
        }
#undef EMIT
        if (pass == 0) {
            total = o;
            PL_TRY(pl_tm_charge_n(rs, total));
        } else {
            *out = (pl_tm_str){p, total};
        }
    }
    return 0;
}

static int replace(pl_tm_rs *rs, pl_tm_str s, const pl_tm_val *args, size_t n, pl_tm_val *out) {
    if (n < 2)
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "replace() requires at least two arguments");
    if (args[0].kind != PL_TM_V_STR || args[1].kind != PL_TM_V_STR)
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "replace() arguments must be strings");
    pl_tm_val count = pl_tm_null();
    if (n > 2) {
        if (args[2].kind == PL_TM_V_KWARGS) {
            const pl_tm_val *c = pl_tm_map_get(rs, args[2].u.map, PL_TM_LIT("count"));
            if (c) count = *c;
        } else {
            count = args[2];
        }
    }
    if (count.kind != PL_TM_V_INT && count.kind != PL_TM_V_NULL)
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "replace() count must be a number or none");
    pl_tm_str r;
    PL_TRY(pl_tm_str_replace(rs, s, args[0].u.s, args[1].u.s,
                             count.kind == PL_TM_V_NULL ? -1 : count.u.num, &r));
    *out = pl_tm_strv(r);
    return 0;
}

/* ---- comparison and sorting ------------------------------------------------------------ */

int pl_tm_compare(pl_tm_rs *rs, pl_tm_val a, pl_tm_val b, bool case_sensitive, int *out) {
    if (a.kind == PL_TM_V_NULL || b.kind == PL_TM_V_NULL || a.kind == PL_TM_V_UNDEF ||
        b.kind == PL_TM_V_UNDEF) {
        if (a.kind == b.kind) {
            *out = 0;
            return 0;
        }
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "cannot compare %s with %s",
                          pl_tm_kind_name(a.kind), pl_tm_kind_name(b.kind));
    }
    bool an = pl_tm_is_num(a) || a.kind == PL_TM_V_BOOL,
         bn = pl_tm_is_num(b) || b.kind == PL_TM_V_BOOL;
    if (an && bn) {
        double x = a.kind == PL_TM_V_BOOL ? a.u.b : a.u.num,
               y = b.kind == PL_TM_V_BOOL ? b.u.b : b.u.num;
        *out = x < y ? -1 : x > y ? 1 : 0;
        return 0;
    }
    if (a.kind != b.kind || (a.kind == PL_TM_V_LOOP) != (b.kind == PL_TM_V_LOOP))
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "cannot compare different types: %s and %s",
                          pl_tm_kind_name(a.kind), pl_tm_kind_name(b.kind));
    if (a.kind != PL_TM_V_STR)
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "cannot compare type: %s",
                          pl_tm_kind_name(a.kind));
    pl_tm_str x = a.u.s, y = b.u.s;
    if (!case_sensitive) {
        PL_TRY(pl_tm_case(rs, x, false, &x));
        PL_TRY(pl_tm_case(rs, y, false, &y));
    }
    PL_TRY(pl_tm_charge_n(rs, x.n < y.n ? x.n : y.n));
    *out = pl_tm_js_cmp(x, y);
    return 0;
}

/* A stable merge sort (JavaScript's sort is stable) whose comparison may fail. */
typedef struct sort_ctx {
    pl_tm_rs *rs;
    const pl_tm_val *keys;
    bool cs, reverse;
} sort_ctx;

static int merge_sort(sort_ctx *c, size_t *idx, size_t *tmp, size_t n) {
    if (n < 2) return 0;
    size_t h = n / 2;
    PL_TRY(merge_sort(c, idx, tmp, h));
    PL_TRY(merge_sort(c, idx + h, tmp, n - h));
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int r;
        PL_TRY(pl_tm_compare(c->rs, c->keys[idx[j]], c->keys[idx[i]], c->cs, &r));
        if (c->reverse) r = -r;
        tmp[k++] = r < 0 ? idx[j++] : idx[i++];
    }
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
    return 0;
}

int pl_tm_sort(pl_tm_rs *rs, pl_tm_val *v, size_t n,
               int (*key)(pl_tm_rs *, pl_tm_val, void *, pl_tm_val *), void *key_ctx,
               bool case_sensitive, bool reverse) {
    if (n < 2) return 0;
    pl_tm_val *keys = pl_tm_alloc_n(&rs->a, n, sizeof *keys);
    size_t *idx = pl_tm_alloc_n(&rs->a, n, sizeof *idx),
           *tmp = pl_tm_alloc_n(&rs->a, n, sizeof *tmp);
    pl_tm_val *copy = pl_tm_alloc_n(&rs->a, n, sizeof *copy);
    if (!keys || !idx || !tmp || !copy) return pl_tm_oom(rs);
    for (size_t i = 0; i < n; i++) {
        idx[i] = i;
        if (key)
            PL_TRY(key(rs, v[i], key_ctx, &keys[i]));
        else
            keys[i] = v[i];
    }
    sort_ctx c = {rs, keys, case_sensitive, reverse};
    PL_TRY(merge_sort(&c, idx, tmp, n));
    memcpy(copy, v, n * sizeof *copy);
    for (size_t i = 0; i < n; i++) v[i] = copy[idx[i]];
    return 0;
}

/* ---- objects --------------------------------------------------------------------------- */

int pl_tm_obj_items(pl_tm_rs *rs, pl_tm_val obj, pl_tm_val *out) {
    pl_tm_map *m;
    PL_TRY(pl_tm_obj_map(rs, obj, &m));
    pl_tm_array *a;
    PL_TRY(pl_tm_arr_new(rs, m->n, &a));
    for (size_t i = 0; i < m->n; i++) {
        pl_tm_array *pair;
        PL_TRY(pl_tm_arr_new(rs, 2, &pair));
        pair->v[0] = pl_tm_strv(m->k[i]);
        pair->v[1] = m->v[i];
        a->v[i] = (pl_tm_val){.kind = PL_TM_V_ARRAY, .u.arr = pair};
    }
    *out = (pl_tm_val){.kind = PL_TM_V_ARRAY, .u.arr = a};
    return 0;
}

static int pair_key(pl_tm_rs *rs, pl_tm_val pair, void *by_value, pl_tm_val *out) {
    (void)rs;
    *out = pair.u.arr->v[*(bool *)by_value ? 1 : 0];
    return 0;
}

static int dictsort(pl_tm_rs *rs, pl_tm_val obj, const pl_tm_val *args, size_t n, pl_tm_val *out) {
    const pl_tm_map *kw = NULL;
    pl_tm_val pos[3];
    size_t np = 0;
    for (size_t i = 0; i < n; i++) {
        if (args[i].kind == PL_TM_V_KWARGS)
            kw = args[i].u.map;
        else if (np < 3)
            pos[np++] = args[i];
    }
    const char *names[3] = {"case_sensitive", "by", "reverse"};
    pl_tm_val opt[3] = {pl_tm_bool(false), pl_tm_strv(PL_TM_LIT("key")), pl_tm_bool(false)};
    for (int i = 0; i < 3; i++) {
        const pl_tm_val *k =
            kw ? pl_tm_map_get(rs, kw, (pl_tm_str){names[i], strlen(names[i])}) : NULL;
        if ((size_t)i < np)
            opt[i] = pos[i];
        else if (k)
            opt[i] = *k;
    }
    if (opt[0].kind != PL_TM_V_BOOL)
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "case_sensitive must be a boolean");
    if (opt[1].kind != PL_TM_V_STR)
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "by must be a string");
    bool by_value = pl_tm_str_eqc(opt[1].u.s, "value");
    if (!by_value && !pl_tm_str_eqc(opt[1].u.s, "key"))
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "by must be either 'key' or 'value'");
    if (opt[2].kind != PL_TM_V_BOOL)
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "reverse must be a boolean");
    PL_TRY(pl_tm_obj_items(rs, obj, out));
    return pl_tm_sort(rs, out->u.arr->v, out->u.arr->n, pair_key, &by_value, opt[0].u.b,
                      opt[2].u.b);
}

int pl_tm_call_method(pl_tm_rs *rs, const pl_tm_func *f, const pl_tm_val *args, size_t n,
                      pl_tm_val *out) {
    pl_tm_val self = f->self;
    pl_tm_str s = self.kind == PL_TM_V_STR ? self.u.s : (pl_tm_str){"", 0};
    pl_tm_str r;
    switch (f->method) {
    case M_UPPER:
    case M_LOWER:
        PL_TRY(pl_tm_case(rs, s, f->method == M_UPPER, &r));
        break;
    case M_STRIP:
    case M_LSTRIP:
    case M_RSTRIP:
        PL_TRY(pl_tm_charge_n(rs, s.n));
        r = pl_tm_trim(s, f->method != M_RSTRIP, f->method != M_LSTRIP);
        break;
    case M_TITLE:
        PL_TRY(title(rs, s, &r));
        break;
    case M_CAPITALIZE:
        PL_TRY(capitalize(rs, s, &r));
        break;
    case M_STARTSWITH:
    case M_ENDSWITH:
        return starts_ends(rs, s, args, n, f->method == M_ENDSWITH, out);
    case M_SPLIT:
        return split(rs, s, args, n, out);
    case M_REPLACE:
        return replace(rs, s, args, n, out);
    case M_GET: {
        if (n == 0 || args[0].kind != PL_TM_V_STR)
            return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "object key must be a string: got %s",
                              n ? pl_tm_kind_name(args[0].kind) : "nothing");
        pl_tm_map *m;
        PL_TRY(pl_tm_obj_map(rs, self, &m));
        const pl_tm_val *v = pl_tm_map_get(rs, m, args[0].u.s);
        *out = v ? *v : n > 1 ? args[1] : pl_tm_null();
        return 0;
    }
    case M_ITEMS:
        return pl_tm_obj_items(rs, self, out);
    case M_KEYS:
    case M_VALUES: {
        pl_tm_map *m;
        PL_TRY(pl_tm_obj_map(rs, self, &m));
        pl_tm_array *a;
        PL_TRY(pl_tm_arr_new(rs, m->n, &a));
        for (size_t i = 0; i < m->n; i++)
            a->v[i] = f->method == M_KEYS ? pl_tm_strv(m->k[i]) : m->v[i];
        *out = (pl_tm_val){.kind = PL_TM_V_ARRAY, .u.arr = a};
        return 0;
    }
    case M_DICTSORT:
        return dictsort(rs, self, args, n, out);
    default:
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "unknown method");
    }
    *out = pl_tm_strv(r);
    return 0;
}
