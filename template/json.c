/*
 * template/json.c - values -> JSON text, as the oracle's toJSON writes it: Python json.dumps
 * separators by default (", " and ": "; "," between items when indenting), JSON.stringify for
 * strings and numbers (non-ASCII kept, control characters as \u00XX, 1.0 as 1, NaN and
 * Infinity as null), optional indent, ensure_ascii and separators. Tuples, keyword-argument
 * objects and functions cannot be written (the oracle throws), undefined is null or
 * "undefined" as the caller says.
 */
#include "template/tmpl_internal.h"

#include <math.h>
#include <string.h>

#include "util/alloc.h"
#include "util/utf8.h"

typedef struct sbuf {
    pl_tm_rs *rs;
    pl_buf b;
} sbuf;

static int sb_put(sbuf *b, const char *s, size_t n) {
    if (n > b->rs->lim.max_output_bytes - b->b.n)
        return pl_tm_fail(b->rs, PL_ERR_TOO_LONG, "JSON text exceeds the limit of %zu bytes",
                          b->rs->lim.max_output_bytes);
    if (pl_buf_put(&b->b, s, n, "template: JSON text") != PL_OK) return pl_tm_oom(b->rs);
    return 0;
}

static int sb_str(sbuf *b, pl_tm_str s) { return sb_put(b, s.p, s.n); }
static int sb_c(sbuf *b, const char *s) { return sb_put(b, s, strlen(s)); }

static int sb_repeat(sbuf *b, const char *s, size_t n, size_t times) {
    for (size_t i = 0; i < times; i++) PL_TRY(sb_put(b, s, n));
    return 0;
}

/* JSON.stringify of a string, then (ensure_ascii) every UTF-16 unit >= 0x7F as \uXXXX. */
static int quote(sbuf *b, pl_tm_str s, bool ascii) {
    static const char hex[] = "0123456789abcdef";
    PL_TRY(pl_tm_charge_n(b->rs, s.n));
    PL_TRY(sb_c(b, "\""));
    size_t run = 0; /* bytes copied verbatim are batched */
    for (size_t i = 0; i < s.n;) {
        unsigned char c = (unsigned char)s.p[i];
        char esc[16];
        size_t k = 0;
        int len = 1;
        if (c == '"' || c == '\\')
            esc[k++] = '\\', esc[k++] = (char)c;
        else if (c == '\b')
            esc[k++] = '\\', esc[k++] = 'b';
        else if (c == '\f')
            esc[k++] = '\\', esc[k++] = 'f';
        else if (c == '\n')
            esc[k++] = '\\', esc[k++] = 'n';
        else if (c == '\r')
            esc[k++] = '\\', esc[k++] = 'r';
        else if (c == '\t')
            esc[k++] = '\\', esc[k++] = 't';
        else if (c < 0x20) {
            memcpy(esc, "\\u00", 4);
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            k = 6;
        } else if (ascii && c >= 0x7F) {
            uint32_t cp;
            len = pl_utf8_decode(s.p + i, s.n - i, &cp);
            uint32_t units[2] = {cp, 0};
            int nu = 1;
            if (cp >= 0x10000) {
                units[0] = 0xD800 + ((cp - 0x10000) >> 10);
                units[1] = 0xDC00 + ((cp - 0x10000) & 0x3FF);
                nu = 2;
            }
            for (int u = 0; u < nu; u++) {
                esc[k++] = '\\';
                esc[k++] = 'u';
                for (int sh = 12; sh >= 0; sh -= 4) esc[k++] = hex[(units[u] >> sh) & 15];
            }
        }
        if (k == 0) {
            run++;
            i++;
            continue;
        }
        PL_TRY(sb_put(b, s.p + i - run, run));
        run = 0;
        PL_TRY(sb_put(b, esc, k));
        i += (size_t)len;
    }
    PL_TRY(sb_put(b, s.p + s.n - run, run));
    return sb_c(b, "\"");
}

static int write_value(sbuf *b, pl_tm_val v, const pl_tm_json_opt *o, int depth);

static int write_padding(sbuf *b, const pl_tm_json_opt *o, int depth) {
    PL_TRY(sb_c(b, "\n"));
    return sb_repeat(b, " ", 1, (size_t)o->indent * (size_t)depth);
}

static int write_container(sbuf *b, pl_tm_val v, const pl_tm_json_opt *o, int depth) {
    pl_tm_rs *rs = b->rs;
    if (++rs->depth > rs->lim.max_depth)
        return pl_tm_fail(rs, PL_ERR_TOO_LONG, "values nested more than %d deep in tojson",
                          rs->lim.max_depth);
    bool indent = o->indent > 0;
    pl_tm_str item_sep = o->item_sep.p ? o->item_sep : indent ? PL_TM_LIT(",") : PL_TM_LIT(", ");
    pl_tm_str key_sep = o->key_sep.p ? o->key_sep : PL_TM_LIT(": ");
    if (pl_tm_is_arr(v)) {
        const pl_tm_array *a = v.u.arr;
        PL_TRY(sb_c(b, "["));
        for (size_t i = 0; i < a->n; i++) {
            if (i) PL_TRY(sb_str(b, item_sep));
            if (indent) PL_TRY(write_padding(b, o, depth + 1));
            PL_TRY(write_value(b, a->v[i], o, depth + 1));
        }
        if (indent && a->n) PL_TRY(write_padding(b, o, depth));
        PL_TRY(sb_c(b, "]"));
    } else {
        pl_tm_map *m;
        PL_TRY(pl_tm_obj_map(rs, v, &m));
        PL_TRY(sb_c(b, "{"));
        for (size_t i = 0; i < m->n; i++) {
            if (i) PL_TRY(sb_str(b, item_sep));
            if (indent) PL_TRY(write_padding(b, o, depth + 1));
            PL_TRY(quote(b, m->k[i], o->ensure_ascii));
            PL_TRY(sb_str(b, key_sep));
            PL_TRY(write_value(b, m->v[i], o, depth + 1));
        }
        if (indent && m->n) PL_TRY(write_padding(b, o, depth));
        PL_TRY(sb_c(b, "}"));
    }
    rs->depth--;
    return 0;
}

static int write_value(sbuf *b, pl_tm_val v, const pl_tm_json_opt *o, int depth) {
    PL_TRY(pl_tm_charge(b->rs, 1));
    char num[400];
    switch (v.kind) {
    case PL_TM_V_NULL:
        return sb_c(b, "null");
    case PL_TM_V_UNDEF:
        return sb_c(b, o->undefined_as_null ? "null" : "undefined");
    case PL_TM_V_BOOL:
        return sb_c(b, v.u.b ? "true" : "false");
    case PL_TM_V_INT:
    case PL_TM_V_FLOAT:
        if (!isfinite(v.u.num)) return sb_c(b, "null");
        return sb_put(b, num, pl_tm_num_js(v.u.num, num));
    case PL_TM_V_STR:
        return quote(b, v.u.s, o->ensure_ascii);
    case PL_TM_V_ARRAY:
    case PL_TM_V_OBJECT:
    case PL_TM_V_NS:
    case PL_TM_V_LOOP:
        return write_container(b, v, o, depth);
    default: /* the oracle's toJSON has no case for TupleValue, KeywordArgumentsValue, functions */
        return pl_tm_fail(b->rs, PL_ERR_INVALID_ARGUMENT, "cannot convert to JSON: %s",
                          pl_tm_kind_name(v.kind));
    }
}

int pl_tm_to_json(pl_tm_rs *rs, pl_tm_val v, const pl_tm_json_opt *opt, pl_tm_str *out) {
    sbuf b = {.rs = rs};
    int depth = rs->depth;
    int rc = write_value(&b, v, opt, 0);
    rs->depth = depth;
    if (rc == 0) {
        char *p;
        rc = pl_tm_str_new(rs, b.b.n, &p);
        if (rc == 0) {
            if (b.b.n) memcpy(p, b.b.p, b.b.n);
            *out = (pl_tm_str){p, b.b.n};
        }
    }
    pl_buf_free(&b.b);
    return rc;
}
