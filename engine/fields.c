/*
 * engine/fields.c - the generic half of the field tables: struct_size checks, defaults,
 * ranges and their messages, setters by name from text and JSON, the storage of copies,
 * values as JSON.
 *
 * Every value a setter takes is parsed into a temporary and checked before anything in the
 * struct changes, so a refused value leaves the struct as it was. Strings and lists set by
 * name are copied into the struct's storage: a list of blocks freed by pl_fields_deinit.
 */
#include "engine/fields.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/alloc.h"
#include "util/utf8.h"

/* The two members every table's struct starts with. */
typedef struct head {
    size_t struct_size;
    void *storage;
} head;

typedef struct storage {
    void **blocks; /* (n) pl_malloc'd copies */
    size_t n, cap;
} storage;

/* "config.block_size" marked as a field's name (util/status.h): the format of t->prefix,
 * f->name in every message below. */
#define FIELD PL_MARK "%s.%s" PL_MARK

static void *at(void *obj, size_t off) { return (char *)obj + off; }
static const void *cat(const void *obj, size_t off) { return (const char *)obj + off; }

/* ---- struct_size --------------------------------------------------------------------- */

pl_status pl_fields_check_size(const pl_field_table *t, const void *obj) {
    if (!obj) return pl_fail(PL_ERR_INVALID_ARGUMENT, "%s is NULL", t->prefix);
    size_t got = ((const head *)obj)->struct_size;
    for (size_t i = 0; i < t->n_known; i++)
        if (got == t->known_sizes[i]) return PL_OK;
    if (got == 0)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "%s.struct_size = 0: the struct was not filled by its _default function "
                       "(call it before setting fields)", t->prefix);
    if (got > t->struct_size)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "%s.struct_size = %zu: this pagellm (%s) knows at most %zu bytes; the "
                       "program was built against a newer pagellm.h", t->prefix, got,
                       pl_version(), t->struct_size);
    return pl_fail(PL_ERR_INVALID_ARGUMENT,
                   "%s.struct_size = %zu: no pagellm version had that size (this one has "
                   "%zu); the struct is damaged or was not filled by its _default function",
                   t->prefix, got, t->struct_size);
}

pl_status pl_fields_take(const pl_field_table *t, const void *src, void *dst) {
    PL_TRY(pl_fields_check_size(t, src));
    t->defaults(dst);
    memcpy(dst, src, ((const head *)src)->struct_size);
    ((head *)dst)->struct_size = t->struct_size;
    return PL_OK;
}

void pl_fields_init(const pl_field_table *t, void *obj, size_t struct_size) {
    if (!obj) return;
    bool known = false;
    for (size_t i = 0; i < t->n_known; i++) known |= struct_size == t->known_sizes[i];
    /* a full struct on the stack: the library's size is small and fixed */
    _Alignas(max_align_t) unsigned char full[1024];
    if (t->struct_size > sizeof full) abort(); /* a table outgrew the buffer: a build bug */
    memset(full, 0, t->struct_size);
    t->defaults(full);
    head *h = (head *)full;
    h->struct_size = known ? struct_size : 0;
    h->storage = NULL;
    size_t n = struct_size < t->struct_size ? struct_size : t->struct_size;
    memcpy(obj, full, n);
}

void pl_fields_deinit(const pl_field_table *t, void *obj) {
    (void)t;
    if (!obj) return;
    head *h = obj;
    if (h->struct_size < sizeof(head)) return;
    storage *st = h->storage;
    if (!st) return;
    for (size_t i = 0; i < st->n; i++) pl_free(st->blocks[i]);
    pl_free(st->blocks);
    pl_free(st);
    h->storage = NULL;
}

/* Keeps block in obj's storage (freed with it). On failure block is freed. */
static pl_status keep(const pl_field_table *t, void *obj, void *block) {
    head *h = obj;
    storage *st = h->storage;
    if (!st) {
        st = pl_calloc(1, sizeof *st);
        if (!st) {
            pl_free(block);
            return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: storage for a copied value", t->prefix);
        }
        h->storage = st;
    }
    void *p = st->blocks;
    pl_status s = pl_grow_array(&p, &st->cap, st->n + 1, sizeof(void *), "field storage");
    st->blocks = p;
    if (s != PL_OK) {
        pl_free(block);
        return s;
    }
    st->blocks[st->n++] = block;
    return PL_OK;
}

void pl_fields_fill_out(void *dst, size_t dst_size, const void *src, size_t src_size) {
    if (!dst) return;
    size_t n = dst_size < src_size ? dst_size : src_size;
    memcpy(dst, src, n);
    if (n >= sizeof(size_t)) ((head *)dst)->struct_size = n;
}

/* ---- ranges and messages ------------------------------------------------------------- */

/* A bound as a user writes it: integers without exponent, others as %g. */
static void fmt_num(char *buf, size_t cap, double v) {
    if (v == floor(v) && fabs(v) < 1e15) snprintf(buf, cap, "%.0f", v);
    else snprintf(buf, cap, "%g", v);
}

static size_t n_choices(const pl_field *f) {
    size_t n = 0;
    while (f->choices && f->choices[n]) n++;
    return n;
}

/* The first name of choice i ("f32" of "f32|float32"). */
static size_t choice_len(const char *c) {
    const char *bar = strchr(c, '|');
    return bar ? (size_t)(bar - c) : strlen(c);
}

static bool is_list(const pl_field *f) {
    return f->kind == PL_FIELD_IDS || f->kind == PL_FIELD_STRINGS || f->kind == PL_FIELD_BIAS;
}

/* A BIAS entry's bias, as OpenAI bounds logit_bias. */
#define BIAS_MAX 100.0

/* "in (0, 1]", "one of auto, f32, f16, bf16" */
static void describe_range(const pl_field *f, char *buf, size_t cap) {
    if (f->kind == PL_FIELD_ENUM) {
        size_t used = (size_t)snprintf(buf, cap, "one of ");
        for (size_t i = 0; f->choices[i] && used < cap; i++)
            used += (size_t)snprintf(buf + used, cap - used, "%s%.*s", i ? ", " : "",
                                     (int)choice_len(f->choices[i]), f->choices[i]);
        return;
    }
    char lo[32], hi[32];
    fmt_num(lo, sizeof lo, f->range.min);
    fmt_num(hi, sizeof hi, f->range.max);
    bool list = is_list(f);
    snprintf(buf, cap, "%sin %c%s, %s%c", list ? "a count " : "", f->range.min_open ? '(' : '[',
             lo, hi, f->range.max_open ? ')' : ']');
}

static bool in_range(const pl_range *r, double v) {
    if (!r->is_set) return true;
    if (isnan(v)) return false;
    if (r->min_open ? !(v > r->min) : !(v >= r->min)) return false;
    if (r->max_open ? !(v < r->max) : !(v <= r->max)) return false;
    return true;
}

pl_status pl_fields_fail_range(const pl_field_table *t, const pl_field *f, double v) {
    char range[160], val[32];
    describe_range(f, range, sizeof range);
    fmt_num(val, sizeof val, v);
    if (is_list(f))
        return pl_fail(PL_ERR_INVALID_ARGUMENT, FIELD ": %s entries: must be %s", t->prefix,
                       f->name, val, range);
    return pl_fail(PL_ERR_INVALID_ARGUMENT, FIELD " = %s: must be %s", t->prefix, f->name, val,
                   range);
}

static pl_status check_field(const pl_field_table *t, const pl_field *f, const void *obj) {
    const void *p = cat(obj, f->offset);
    double v;
    switch (f->kind) {
    case PL_FIELD_INT: v = *(const int *)p; break;
    case PL_FIELD_U64: v = (double)*(const uint64_t *)p; break;
    case PL_FIELD_SIZE: v = (double)*(const size_t *)p; break;
    case PL_FIELD_DOUBLE: v = *(const double *)p; break;
    case PL_FIELD_FLOAT: v = *(const float *)p; break;
    case PL_FIELD_ENUM: {
        int e;
        memcpy(&e, p, sizeof e); /* the tables' enums are int-sized (checked in config.c) */
        if (e < 0 || (size_t)e >= n_choices(f)) return pl_fields_fail_range(t, f, e);
        return PL_OK;
    }
    case PL_FIELD_IDS: {
        size_t n = *(const size_t *)cat(obj, f->aux_offset);
        const int32_t *ids = *(const int32_t *const *)p;
        if (!in_range(&f->range, (double)n)) return pl_fields_fail_range(t, f, (double)n);
        if (n && !ids)
            return pl_fail(PL_ERR_INVALID_ARGUMENT, FIELD " is NULL with n_%s = %zu", t->prefix,
                           f->name, f->name, n);
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0)
                return pl_fail(PL_ERR_INVALID_ARGUMENT,
                               FIELD "[%zu] = %d: must be a token id (>= 0)", t->prefix, f->name,
                               i, (int)ids[i]);
        return PL_OK;
    }
    case PL_FIELD_STRINGS: {
        size_t n = *(const size_t *)cat(obj, f->aux_offset);
        const char *const *ss = *(const char *const *const *)p;
        if (!in_range(&f->range, (double)n)) return pl_fields_fail_range(t, f, (double)n);
        if (n && !ss)
            return pl_fail(PL_ERR_INVALID_ARGUMENT, FIELD " is NULL with n_%s = %zu", t->prefix,
                           f->name, f->name, n);
        for (size_t i = 0; i < n; i++)
            if (!ss[i] || !ss[i][0])
                return pl_fail(PL_ERR_INVALID_ARGUMENT, FIELD "[%zu] is NULL or empty",
                               t->prefix, f->name, i);
        return PL_OK;
    }
    case PL_FIELD_BIAS: {
        size_t n = *(const size_t *)cat(obj, f->aux_offset);
        const pl_logit_bias *b = *(const pl_logit_bias *const *)p;
        if (!in_range(&f->range, (double)n)) return pl_fields_fail_range(t, f, (double)n);
        if (n && !b)
            return pl_fail(PL_ERR_INVALID_ARGUMENT, FIELD " is NULL with n_%s = %zu", t->prefix,
                           f->name, f->name, n);
        for (size_t i = 0; i < n; i++) {
            if (b[i].token < 0)
                return pl_fail(PL_ERR_INVALID_ARGUMENT,
                               FIELD "[%zu].token = %d: must be a token id (>= 0)", t->prefix,
                               f->name, i, (int)b[i].token);
            if (!(fabsf(b[i].bias) <= BIAS_MAX))
                return pl_fail(PL_ERR_INVALID_ARGUMENT,
                               FIELD "[%zu].bias = %g: must be in [-100, 100]", t->prefix,
                               f->name, i, (double)b[i].bias);
        }
        return PL_OK;
    }
    default: return PL_OK; /* BOOL, STRING, OPT_U64 (any value) */
    }
    if (!in_range(&f->range, v) || (f->range.is_set == false && isnan(v)))
        return pl_fields_fail_range(t, f, v);
    return PL_OK;
}

pl_status pl_fields_check_ranges(const pl_field_table *t, const void *obj) {
    for (size_t i = 0; i < t->n; i++) PL_TRY(check_field(t, &t->fields[i], obj));
    return PL_OK;
}

/* ---- lookup -------------------------------------------------------------------------- */

const pl_field *pl_fields_find(const pl_field_table *t, const char *name) {
    for (size_t i = 0; i < t->n; i++)
        if (!strcmp(t->fields[i].name, name)) return &t->fields[i];
    for (size_t i = 0; i < t->n_aliases; i++)
        if (!strcmp(t->aliases[i].alias, name)) return pl_fields_find(t, t->aliases[i].name);
    return NULL;
}

/* Edit distance (insert, delete, substitute), for suggesting a misspelt name. */
static size_t distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63) return 64;
    size_t row[64];
    for (size_t j = 0; j <= lb; j++) row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

static pl_status not_found(const pl_field_table *t, const char *name) {
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    for (size_t i = 0; i < t->n + t->n_aliases; i++) {
        const char *cand = i < t->n ? t->fields[i].name : t->aliases[i - t->n].alias;
        size_t d = distance(name, cand);
        if (d < best_d) best_d = d, best = cand;
    }
    size_t len = strlen(name);
    if (best && best_d <= (len < 9 ? 2 : len / 3))
        return pl_fail(PL_ERR_NOT_FOUND, "%s: no field '%.64s' (did you mean '%s'?)", t->prefix,
                       name, best);
    return pl_fail(PL_ERR_NOT_FOUND, "%s: no field '%.64s'", t->prefix, name);
}

/* The end of f's member (and of its count or flag) in the struct. */
static size_t member_end(const pl_field *f) {
    static const size_t sizes[] = {
        [PL_FIELD_BOOL] = sizeof(bool),     [PL_FIELD_INT] = sizeof(int),
        [PL_FIELD_U64] = sizeof(uint64_t),  [PL_FIELD_SIZE] = sizeof(size_t),
        [PL_FIELD_DOUBLE] = sizeof(double), [PL_FIELD_FLOAT] = sizeof(float),
        [PL_FIELD_STRING] = sizeof(char *), [PL_FIELD_ENUM] = sizeof(int),
        [PL_FIELD_IDS] = sizeof(void *),    [PL_FIELD_STRINGS] = sizeof(void *),
        [PL_FIELD_OPT_U64] = sizeof(uint64_t), [PL_FIELD_BIAS] = sizeof(void *),
    };
    size_t end = f->offset + sizes[f->kind];
    if (f->kind == PL_FIELD_IDS || f->kind == PL_FIELD_STRINGS || f->kind == PL_FIELD_BIAS)
        end = f->aux_offset + sizeof(size_t);
    if (f->kind == PL_FIELD_OPT_U64) end = f->aux_offset + sizeof(bool);
    return end;
}

/* Whether obj (its struct_size) holds f: a program built against an older header has a
 * shorter struct without the fields added since. */
static bool holds(const void *obj, const pl_field *f) {
    return member_end(f) <= ((const head *)obj)->struct_size;
}

static pl_status lookup(const pl_field_table *t, void *obj, const char *name,
                        const pl_field **out) {
    PL_TRY(pl_fields_check_size(t, obj));
    if (!name) return pl_fail(PL_ERR_INVALID_ARGUMENT, "%s: field name is NULL", t->prefix);
    *out = pl_fields_find(t, name);
    if (!*out) return not_found(t, name);
    if (!holds(obj, *out))
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       FIELD ": not in this struct (struct_size %zu: the program was built "
                       "against an older pagellm.h)", t->prefix, name,
                       ((const head *)obj)->struct_size);
    return PL_OK;
}

/* ---- parsing text -------------------------------------------------------------------- */

static pl_status bad_text(const pl_field_table *t, const pl_field *f, const char *v,
                          const char *what) {
    return pl_fail(PL_ERR_INVALID_ARGUMENT, FIELD ": '%.64s' is not %s", t->prefix, f->name, v,
                   what);
}

static bool parse_i64(const char *s, long long *out) {
    if (!s || !*s) return false;
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno) return false;
    *out = v;
    return true;
}

/* Digits only (strtoull alone would take blanks and a sign, wrapping "-1"). */
static bool parse_u64(const char *s, uint64_t *out, const char **rest) {
    if (!s || *s < '0' || *s > '9') return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno) return false;
    if (!rest && *end) return false;
    if (rest) *rest = end;
    *out = v;
    return true;
}

static bool parse_double(const char *s, double *out) {
    if (!s || !*s) return false;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || errno == ERANGE || !isfinite(v)) return false;
    *out = v;
    return true;
}

/* Bytes with an optional binary suffix: K, M, G, T or KiB .. TiB (any case; both mean
 * powers of 1024, as memory sizes usually do). */
static bool parse_size(const char *s, size_t *out) {
    static const struct {
        const char *suffix;
        unsigned shift;
    } units[] = {{"", 0},     {"k", 10},  {"kib", 10}, {"m", 20}, {"mib", 20},
                 {"g", 30},   {"gib", 30}, {"t", 40},  {"tib", 40}};
    uint64_t v;
    const char *rest;
    if (!parse_u64(s, &v, &rest)) return false;
    for (size_t k = 0; k < sizeof units / sizeof units[0]; k++) {
        if (strcasecmp(rest, units[k].suffix) != 0) continue;
        if (v > (uint64_t)(SIZE_MAX >> units[k].shift)) return false;
        *out = (size_t)v << units[k].shift;
        return true;
    }
    return false;
}

static bool parse_bool(const char *s, bool *out) {
    static const char *const yes[] = {"true", "1", "yes", "on"},
                             *const no[] = {"false", "0", "no", "off"};
    for (size_t i = 0; i < 4; i++) {
        if (!strcasecmp(s, yes[i])) return (*out = true), true;
        if (!strcasecmp(s, no[i])) return (*out = false), true;
    }
    return false;
}

/* Same name, ignoring case and treating '-' and '_' alike. */
static bool name_eq(const char *a, size_t la, const char *b) {
    if (strlen(b) != la) return false;
    for (size_t i = 0; i < la; i++) {
        char x = a[i] == '_' ? '-' : a[i], y = b[i] == '_' ? '-' : b[i];
        if (x >= 'A' && x <= 'Z') x = (char)(x - 'A' + 'a');
        if (y >= 'A' && y <= 'Z') y = (char)(y - 'A' + 'a');
        if (x != y) return false;
    }
    return true;
}

/* The value of an enum name or one of its aliases ("f32|float32"); -1 when unknown. */
static int parse_choice(const pl_field *f, const char *s) {
    for (int i = 0; f->choices[i]; i++)
        for (const char *c = f->choices[i]; *c;) {
            size_t len = choice_len(c);
            if (name_eq(c, len, s)) return i;
            c += len;
            if (*c == '|') c++;
        }
    return -1;
}

static bool parse_ids(const char *s, int32_t **out, size_t *out_n) {
    size_t cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    int32_t *ids = pl_calloc(cap, sizeof *ids);
    if (!ids) return false;
    size_t n = 0;
    for (const char *p = s;;) {
        char num[24];
        size_t k = 0;
        while (*p && *p != ',' && k < sizeof num - 1) num[k++] = *p++;
        num[k] = '\0';
        uint64_t v;
        if ((*p && *p != ',') || !parse_u64(num, &v, NULL) || v > INT32_MAX) {
            pl_free(ids);
            return false;
        }
        ids[n++] = (int32_t)v;
        if (!*p) break;
        p++;
    }
    *out = ids;
    *out_n = n;
    return true;
}

/* "ID:BIAS[,ID:BIAS...]" (ids as parse_ids takes them, biases finite numbers). */
static bool parse_bias(const char *s, pl_logit_bias **out, size_t *out_n) {
    size_t cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    pl_logit_bias *b = pl_calloc(cap, sizeof *b);
    if (!b) return false;
    size_t n = 0;
    for (const char *p = s;;) {
        char id[24], num[64];
        size_t k = 0, m = 0;
        while (*p && *p != ':' && *p != ',' && k < sizeof id - 1) id[k++] = *p++;
        id[k] = '\0';
        /* an id longer than the buffer is refused, never split into an id and a bias */
        bool colon = *p == ':';
        if (colon) p++;
        while (*p && *p != ',' && m < sizeof num - 1) num[m++] = *p++;
        num[m] = '\0';
        uint64_t tok;
        double bias;
        if (!colon || (*p && *p != ',') || !parse_u64(id, &tok, NULL) || tok > INT32_MAX ||
            !parse_double(num, &bias)) {
            pl_free(b);
            return false;
        }
        b[n++] = (pl_logit_bias){(int32_t)tok, (float)bias};
        if (!*p) break;
        p++;
    }
    *out = b;
    *out_n = n;
    return true;
}

/* A parsed value, ready to store. */
typedef struct value {
    bool b;
    long long i;
    uint64_t u;
    double d;
    const char *s;          /* STRING: the text to copy (NULL: unset) */
    bool unset;             /* OPT_U64: absent */
    int32_t *ids;           /* IDS: pl_malloc'd (n) */
    const char **strs;      /* STRINGS: (n) borrowed texts */
    pl_logit_bias *bias;    /* BIAS: pl_malloc'd (n) */
    size_t n;
    bool append;            /* lists: add to the current list instead of replacing it */
    char *dumped;           /* STRING holding JSON: the value as text (malloc'd by jansson) */
} value;

/* Checks v for f; a number is first made the value the field will hold, so the range holds
 * for what is stored: a float rounds (1e-46 becomes 0) and -0 becomes 0 (JSON writes no -0,
 * and the value must read back as it formats). */
static pl_status check_value(const pl_field_table *t, const pl_field *f, value *v) {
    switch (f->kind) {
    case PL_FIELD_BIAS:
        for (size_t i = 0; i < v->n; i++) {
            if (v->bias[i].bias == 0) v->bias[i].bias = 0.0f;
            if (!(fabs((double)v->bias[i].bias) <= BIAS_MAX))
                return pl_fail(PL_ERR_INVALID_ARGUMENT,
                               FIELD ": the bias of token %d is %g: must be in [-100, 100]",
                               t->prefix, f->name, (int)v->bias[i].token,
                               (double)v->bias[i].bias);
        }
        return PL_OK;
    case PL_FIELD_INT:
        if (v->i < INT32_MIN || v->i > INT32_MAX || !in_range(&f->range, (double)v->i))
            return pl_fields_fail_range(t, f, (double)v->i);
        return PL_OK;
    case PL_FIELD_DOUBLE:
    case PL_FIELD_FLOAT:
        if (f->kind == PL_FIELD_FLOAT && fabs(v->d) > 3.4e38)
            return pl_fields_fail_range(t, f, v->d);
        if (f->kind == PL_FIELD_FLOAT) v->d = (double)(float)v->d;
        if (v->d == 0) v->d = 0.0;
        if (!in_range(&f->range, v->d)) return pl_fields_fail_range(t, f, v->d);
        return PL_OK;
    default: return PL_OK;
    }
}

/* Stores v into obj's field f (after every check passed): the one place that writes. */
static pl_status store(const pl_field_table *t, const pl_field *f, void *obj, value *v) {
    void *p = at(obj, f->offset);
    switch (f->kind) {
    case PL_FIELD_BOOL: *(bool *)p = v->b; break;
    case PL_FIELD_INT: *(int *)p = (int)v->i; break;
    case PL_FIELD_U64: *(uint64_t *)p = v->u; break;
    case PL_FIELD_SIZE: *(size_t *)p = (size_t)v->u; break;
    case PL_FIELD_DOUBLE: *(double *)p = v->d; break;
    case PL_FIELD_FLOAT: *(float *)p = (float)v->d; break;
    case PL_FIELD_ENUM: {
        int e = (int)v->i;
        memcpy(p, &e, sizeof e);
        break;
    }
    case PL_FIELD_OPT_U64:
        *(uint64_t *)p = v->unset ? 0 : v->u;
        *(bool *)at(obj, f->aux_offset) = !v->unset;
        break;
    case PL_FIELD_STRING: {
        char *copy = NULL;
        if (v->s) {
            copy = pl_strdup(v->s);
            if (!copy) return pl_fail(PL_ERR_OUT_OF_MEMORY, FIELD ": copy", t->prefix, f->name);
            PL_TRY(keep(t, obj, copy));
        }
        *(const char **)p = copy;
        break;
    }
    case PL_FIELD_IDS: {
        size_t old_n = v->append ? *(size_t *)at(obj, f->aux_offset) : 0;
        const int32_t *old = *(const int32_t **)p;
        size_t n = old_n + v->n;
        if (!in_range(&f->range, (double)n)) return pl_fields_fail_range(t, f, (double)n);
        int32_t *ids = pl_calloc(n ? n : 1, sizeof *ids);
        if (!ids) return pl_fail(PL_ERR_OUT_OF_MEMORY, FIELD ": copy", t->prefix, f->name);
        if (old_n) memcpy(ids, old, old_n * sizeof *ids);
        if (v->n) memcpy(ids + old_n, v->ids, v->n * sizeof *ids);
        PL_TRY(keep(t, obj, ids));
        *(const int32_t **)p = n ? ids : NULL;
        *(size_t *)at(obj, f->aux_offset) = n;
        break;
    }
    case PL_FIELD_BIAS: {
        /* one entry per token, as in OpenAI's object: a token given again takes the later
         * bias */
        size_t old_n = v->append ? *(size_t *)at(obj, f->aux_offset) : 0;
        const pl_logit_bias *old = *(const pl_logit_bias **)p;
        pl_logit_bias *b = pl_calloc(old_n + v->n ? old_n + v->n : 1, sizeof *b);
        if (!b) return pl_fail(PL_ERR_OUT_OF_MEMORY, FIELD ": copy", t->prefix, f->name);
        if (old_n) memcpy(b, old, old_n * sizeof *b);
        size_t n = old_n;
        for (size_t i = 0; i < v->n; i++) {
            size_t k = 0;
            while (k < n && b[k].token != v->bias[i].token) k++;
            b[k] = v->bias[i];
            if (k == n) n++;
        }
        if (!in_range(&f->range, (double)n)) {
            pl_free(b);
            return pl_fields_fail_range(t, f, (double)n);
        }
        PL_TRY(keep(t, obj, b));
        *(const pl_logit_bias **)p = n ? b : NULL;
        *(size_t *)at(obj, f->aux_offset) = n;
        break;
    }
    case PL_FIELD_STRINGS: {
        size_t old_n = v->append ? *(size_t *)at(obj, f->aux_offset) : 0;
        const char *const *old = *(const char *const **)p;
        size_t n = old_n + v->n;
        if (!in_range(&f->range, (double)n)) return pl_fields_fail_range(t, f, (double)n);
        for (size_t i = 0; i < v->n; i++)
            if (!v->strs[i][0])
                return pl_fail(PL_ERR_INVALID_ARGUMENT, FIELD ": an empty string is not allowed",
                               t->prefix, f->name);
        /* one block: the pointer array, then the new strings' bytes */
        size_t bytes = (n ? n : 1) * sizeof(char *);
        for (size_t i = 0; i < v->n; i++) bytes += strlen(v->strs[i]) + 1;
        char **arr = pl_malloc(bytes);
        if (!arr) return pl_fail(PL_ERR_OUT_OF_MEMORY, FIELD ": copy", t->prefix, f->name);
        char *text = (char *)(arr + (n ? n : 1));
        for (size_t i = 0; i < old_n; i++) arr[i] = (char *)old[i]; /* kept alive by storage
                                                                        or by the caller */
        for (size_t i = 0; i < v->n; i++) {
            size_t len = strlen(v->strs[i]) + 1;
            memcpy(text, v->strs[i], len);
            arr[old_n + i] = text;
            text += len;
        }
        PL_TRY(keep(t, obj, arr));
        *(const char *const **)p = n ? (const char *const *)arr : NULL;
        *(size_t *)at(obj, f->aux_offset) = n;
        break;
    }
    }
    return PL_OK;
}

static pl_status parse_text(const pl_field_table *t, const pl_field *f, const char *s,
                            value *v) {
    switch (f->kind) {
    case PL_FIELD_BOOL:
        if (!parse_bool(s, &v->b)) return bad_text(t, f, s, "true or false");
        return PL_OK;
    case PL_FIELD_INT:
        if (!parse_i64(s, &v->i)) return bad_text(t, f, s, "an integer");
        return PL_OK;
    case PL_FIELD_U64:
        if (!parse_u64(s, &v->u, NULL)) return bad_text(t, f, s, "a non-negative integer");
        return PL_OK;
    case PL_FIELD_OPT_U64:
        if (!*s) return (v->unset = true), PL_OK;
        if (!parse_u64(s, &v->u, NULL)) return bad_text(t, f, s, "a non-negative integer");
        return PL_OK;
    case PL_FIELD_SIZE: {
        size_t z;
        if (!parse_size(s, &z))
            return bad_text(t, f, s, "a size (bytes, or a whole number with K, M, G, T, KiB, "
                                     "MiB, GiB or TiB)");
        v->u = z;
        return PL_OK;
    }
    case PL_FIELD_DOUBLE:
    case PL_FIELD_FLOAT:
        if (!parse_double(s, &v->d)) return bad_text(t, f, s, "a finite number");
        return PL_OK;
    case PL_FIELD_STRING: v->s = s; return PL_OK;
    case PL_FIELD_ENUM: {
        int c = parse_choice(f, s);
        if (c < 0) {
            char range[160];
            describe_range(f, range, sizeof range);
            return bad_text(t, f, s, range);
        }
        v->i = c;
        return PL_OK;
    }
    case PL_FIELD_IDS:
        if (!parse_ids(s, &v->ids, &v->n))
            return bad_text(t, f, s, "a token id or a comma-separated list of them");
        v->append = true;
        return PL_OK;
    case PL_FIELD_STRINGS:
        v->strs = pl_malloc(sizeof *v->strs);
        if (!v->strs) return pl_fail(PL_ERR_OUT_OF_MEMORY, FIELD, t->prefix, f->name);
        v->strs[0] = s;
        v->n = 1;
        v->append = true;
        return PL_OK;
    case PL_FIELD_BIAS:
        if (!parse_bias(s, &v->bias, &v->n))
            return bad_text(t, f, s, "ID:BIAS, or a comma-separated list of them (50256:-100)");
        v->append = true;
        return PL_OK;
    }
    return PL_OK;
}

static pl_status set_value(const pl_field_table *t, const pl_field *f, void *obj, value *v,
                           pl_status parsed) {
    pl_status s = parsed;
    if (s == PL_OK) s = check_value(t, f, v);
    if (s == PL_OK) s = store(t, f, obj, v);
    pl_free(v->ids);
    pl_free((void *)v->strs);
    pl_free(v->bias);
    free(v->dumped);
    return s;
}

pl_status pl_fields_set_text(const pl_field_table *t, void *obj, const char *name,
                             const char *text) {
    const pl_field *f;
    PL_TRY(lookup(t, obj, name, &f));
    if (!text) return pl_fail(PL_ERR_INVALID_ARGUMENT, FIELD ": value is NULL", t->prefix, name);
    value v = {0};
    return set_value(t, f, obj, &v, parse_text(t, f, text, &v));
}

/* ---- parsing JSON -------------------------------------------------------------------- */

static const char *json_kind(const json_t *j) {
    switch (json_typeof(j)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

static pl_status bad_json(const pl_field_table *t, const pl_field *f, const json_t *j,
                          const char *want) {
    return pl_fail(PL_ERR_INVALID_ARGUMENT, FIELD ": must be %s, not %s", t->prefix, f->name,
                   want, json_kind(j));
}

/* A JSON string as a C string: no NUL inside. */
static const char *json_cstr(const json_t *j) {
    const char *s = json_string_value(j);
    return s && strlen(s) == json_string_length(j) ? s : NULL;
}

/* An integer value: a JSON integer, or a number with no fraction (JSON has one number type,
 * and clients write max_tokens: 3.0) within +-2^53, where doubles are exact. A fraction is
 * refused showing the number. */
static bool json_whole(const pl_field_table *t, const pl_field *f, const json_t *j,
                       json_int_t *out, pl_status *err) {
    if (json_is_integer(j)) return (*out = json_integer_value(j)), true;
    if (!json_is_real(j)) return false;
    double d = json_real_value(j);
    if (!(fabs(d) <= 9007199254740992.0) || d != floor(d)) {
        *err = pl_fail(PL_ERR_INVALID_ARGUMENT, "%s.%s: must be an integer, not %.17g",
                       t->prefix, f->name, d);
        return false;
    }
    *out = (json_int_t)d;
    return true;
}

static pl_status parse_json(const pl_field_table *t, const pl_field *f, const json_t *j,
                            value *v) {
    json_int_t w = 0;
    pl_status err = PL_OK;
    switch (f->kind) {
    case PL_FIELD_BOOL:
        if (!json_is_boolean(j)) return bad_json(t, f, j, "true or false");
        v->b = json_is_true(j);
        return PL_OK;
    case PL_FIELD_INT:
        if (!json_whole(t, f, j, &w, &err)) return err ? err : bad_json(t, f, j, "an integer");
        v->i = w;
        return PL_OK;
    case PL_FIELD_OPT_U64:
        if (json_is_null(j)) return (v->unset = true), PL_OK;
        /* fall through */
    case PL_FIELD_U64:
        if (!json_whole(t, f, j, &w, &err) || w < 0)
            return bad_json(t, f, j, "a non-negative integer");
        v->u = (uint64_t)w;
        return PL_OK;
    case PL_FIELD_SIZE:
        if (json_is_string(j)) {
            const char *s = json_cstr(j);
            return parse_text(t, f, s ? s : "", v);
        }
        if (!json_whole(t, f, j, &w, &err) || w < 0)
            return bad_json(t, f, j, "a non-negative integer or a size string (\"512M\")");
        v->u = (uint64_t)w;
        return PL_OK;
    case PL_FIELD_DOUBLE:
    case PL_FIELD_FLOAT:
        if (!json_is_number(j)) return bad_json(t, f, j, "a number");
        v->d = json_number_value(j);
        if (!isfinite(v->d)) return bad_json(t, f, j, "a finite number");
        return PL_OK;
    case PL_FIELD_STRING:
        if (json_is_null(j)) return (v->s = NULL), PL_OK;
        if (f->value_name && !strcmp(f->value_name, "JSON") && !json_is_string(j)) {
            /* a field holding JSON text (a schema, tools) also takes the value itself */
            v->dumped = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER);
            if (!v->dumped) return pl_fail(PL_ERR_OUT_OF_MEMORY, FIELD, t->prefix, f->name);
            v->s = v->dumped;
            return PL_OK;
        }
        if (!json_is_string(j)) return bad_json(t, f, j, "a string or null");
        if (!(v->s = json_cstr(j)))
            return pl_fail(PL_ERR_INVALID_ARGUMENT, FIELD ": the string contains a NUL byte",
                           t->prefix, f->name);
        return PL_OK;
    case PL_FIELD_ENUM: {
        if (!json_is_string(j) || !json_cstr(j)) {
            char range[160];
            describe_range(f, range, sizeof range);
            return bad_json(t, f, j, range);
        }
        return parse_text(t, f, json_cstr(j), v);
    }
    case PL_FIELD_IDS: {
        if (json_is_null(j)) return PL_OK;
        bool one = json_is_integer(j);
        if (!one && !json_is_array(j))
            return bad_json(t, f, j, "an array of token ids (or one id, or null)");
        size_t n = one ? 1 : json_array_size(j);
        v->ids = pl_calloc(n ? n : 1, sizeof *v->ids);
        if (!v->ids) return pl_fail(PL_ERR_OUT_OF_MEMORY, FIELD, t->prefix, f->name);
        for (size_t i = 0; i < n; i++) {
            const json_t *x = one ? j : json_array_get(j, i);
            if (!json_is_integer(x) || json_integer_value(x) < 0 ||
                json_integer_value(x) > INT32_MAX)
                return pl_fail(PL_ERR_INVALID_ARGUMENT,
                               FIELD "[%zu]: must be a token id (an integer in [0, 2^31)), not %s",
                               t->prefix, f->name, i, json_kind(x));
            v->ids[i] = (int32_t)json_integer_value(x);
        }
        v->n = n;
        return PL_OK;
    }
    case PL_FIELD_BIAS: {
        if (json_is_null(j)) return PL_OK;
        if (!json_is_object(j))
            return bad_json(t, f, j, "an object of token id to bias ({\"50256\": -100}) or null");
        size_t n = json_object_size(j);
        v->bias = pl_calloc(n ? n : 1, sizeof *v->bias);
        if (!v->bias) return pl_fail(PL_ERR_OUT_OF_MEMORY, FIELD, t->prefix, f->name);
        const char *key;
        json_t *x;
        json_object_foreach((json_t *)j, key, x) {
            uint64_t tok;
            if (!parse_u64(key, &tok, NULL) || tok > INT32_MAX)
                return pl_fail(PL_ERR_INVALID_ARGUMENT,
                               FIELD ": key \"%.32s\" is not a token id (an integer in [0, "
                               "2^31))", t->prefix, f->name, key);
            if (!json_is_number(x) || !isfinite(json_number_value(x)))
                return pl_fail(PL_ERR_INVALID_ARGUMENT,
                               FIELD "[\"%s\"]: must be a number, not %s", t->prefix, f->name,
                               key, json_kind(x));
            v->bias[v->n++] = (pl_logit_bias){(int32_t)tok, (float)json_number_value(x)};
        }
        return PL_OK;
    }
    case PL_FIELD_STRINGS: {
        if (json_is_null(j)) return PL_OK;
        bool one = json_is_string(j);
        if (!one && !json_is_array(j))
            return bad_json(t, f, j, "a string or an array of strings (or null)");
        size_t n = one ? 1 : json_array_size(j);
        v->strs = pl_calloc(n ? n : 1, sizeof *v->strs);
        if (!v->strs) return pl_fail(PL_ERR_OUT_OF_MEMORY, FIELD, t->prefix, f->name);
        for (size_t i = 0; i < n; i++) {
            const json_t *x = one ? j : json_array_get(j, i);
            if (!json_is_string(x))
                return pl_fail(PL_ERR_INVALID_ARGUMENT, FIELD "[%zu]: must be a string, not %s",
                               t->prefix, f->name, i, json_kind(x));
            if (!(v->strs[i] = json_cstr(x)))
                return pl_fail(PL_ERR_INVALID_ARGUMENT,
                               FIELD "[%zu]: the string contains a NUL byte", t->prefix,
                               f->name, i);
        }
        v->n = n;
        return PL_OK;
    }
    }
    return PL_OK;
}

/* Whether json is one JSON integer literal of digits alone ("123", not "0123"), copied into
 * buf: jansson stops at INT64_MAX, so a U64 field's value above it (a seed, which
 * pl_field_to_json writes as such a literal) takes the text path instead. */
static bool unsigned_literal(const char *json, char *buf, size_t cap) {
    const char *p = json + strspn(json, " \t\r\n");
    size_t n = strspn(p, "0123456789");
    if (n == 0 || n >= cap || (p[0] == '0' && n > 1) || p[n + strspn(p + n, " \t\r\n")])
        return false;
    memcpy(buf, p, n);
    buf[n] = '\0';
    return true;
}

pl_status pl_fields_set_json(const pl_field_table *t, void *obj, const char *name,
                             const char *json) {
    const pl_field *f;
    PL_TRY(lookup(t, obj, name, &f));
    if (!json) return pl_fail(PL_ERR_INVALID_ARGUMENT, FIELD ": value is NULL", t->prefix, name);
    char digits[32];
    if ((f->kind == PL_FIELD_U64 || f->kind == PL_FIELD_OPT_U64 || f->kind == PL_FIELD_SIZE) &&
        unsigned_literal(json, digits, sizeof digits)) {
        value v = {0};
        return set_value(t, f, obj, &v, parse_text(t, f, digits, &v));
    }
    json_error_t err;
    json_t *j = json_loads(json, JSON_DECODE_ANY, &err);
    if (!j)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, FIELD ": not JSON (%s at column %d)", t->prefix,
                       f->name, err.text, err.column);
    value v = {0};
    pl_status s = set_value(t, f, obj, &v, parse_json(t, f, j, &v)); /* strings point into j */
    json_decref(j);
    return s;
}

/* ---- values as JSON ------------------------------------------------------------------ */

typedef struct out {
    char *buf;
    size_t cap, len;
} out;

static void put(out *o, const char *fmt, ...) PL_PRINTF(2, 3);
static void put(out *o, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    size_t room = o->len < o->cap ? o->cap - o->len : 0;
    int n = vsnprintf(room ? o->buf + o->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0) o->len += (size_t)n;
}

/* Bytes of the valid UTF-8 character at p; 0 when it is not one (the NUL stops the step). */
static int utf8_len(const unsigned char *p) {
    int k = pl_utf8_step(p, SIZE_MAX);
    return k > 0 ? k : 0;
}

/* A JSON string; bytes that are not UTF-8 (a path may hold any) become U+FFFD. */
static void put_string(out *o, const char *s) {
    if (!s) {
        put(o, "null");
        return;
    }
    put(o, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        int len = utf8_len(p);
        if (len == 0) {
            put(o, "\\ufffd");
            p++;
            continue;
        }
        if (*p == '"' || *p == '\\') put(o, "\\%c", *p);
        else if (*p == '\n') put(o, "\\n");
        else if (*p == '\t') put(o, "\\t");
        else if (*p < 0x20) put(o, "\\u%04x", *p);
        else put(o, "%.*s", len, (const char *)p);
        p += len;
    }
    put(o, "\"");
}

/* The shortest %g precision that reads back as the same value. */
static void put_real(out *o, double v, bool is_float) {
    char b[40];
    for (int prec = is_float ? 6 : 15; prec <= 17; prec++) {
        snprintf(b, sizeof b, "%.*g", prec, v);
        if (is_float ? strtof(b, NULL) == (float)v : strtod(b, NULL) == v) break;
    }
    /* JSON wants a number: "1" is fine, "inf"/"nan" cannot occur for validated fields */
    put(o, "%s", b);
}

size_t pl_field_to_json(const pl_field *f, const void *obj, char *buf, size_t cap) {
    out o = {buf, cap, 0};
    if (cap) buf[0] = '\0';
    if (!f || !obj) {
        put(&o, "null");
        return o.len;
    }
    if (((const head *)obj)->struct_size != 0 && !holds(obj, f)) {
        put(&o, "null"); /* an older caller's struct: the field is not there */
        return o.len;
    }
    const void *p = cat(obj, f->offset);
    switch (f->kind) {
    case PL_FIELD_BOOL: put(&o, "%s", *(const bool *)p ? "true" : "false"); break;
    case PL_FIELD_INT: put(&o, "%d", *(const int *)p); break;
    case PL_FIELD_U64: put(&o, "%llu", (unsigned long long)*(const uint64_t *)p); break;
    case PL_FIELD_SIZE: put(&o, "%zu", *(const size_t *)p); break;
    case PL_FIELD_DOUBLE: put_real(&o, *(const double *)p, false); break;
    case PL_FIELD_FLOAT: put_real(&o, *(const float *)p, true); break;
    case PL_FIELD_STRING: put_string(&o, *(const char *const *)p); break;
    case PL_FIELD_ENUM: {
        int e;
        memcpy(&e, p, sizeof e);
        if (e >= 0 && (size_t)e < n_choices(f))
            put(&o, "\"%.*s\"", (int)choice_len(f->choices[e]), f->choices[e]);
        else put(&o, "%d", e);
        break;
    }
    case PL_FIELD_OPT_U64:
        if (*(const bool *)cat(obj, f->aux_offset))
            put(&o, "%llu", (unsigned long long)*(const uint64_t *)p);
        else put(&o, "null");
        break;
    case PL_FIELD_IDS: {
        size_t n = *(const size_t *)cat(obj, f->aux_offset);
        const int32_t *ids = *(const int32_t *const *)p;
        put(&o, "[");
        for (size_t i = 0; ids && i < n; i++) put(&o, "%s%d", i ? "," : "", (int)ids[i]);
        put(&o, "]");
        break;
    }
    case PL_FIELD_BIAS: {
        size_t n = *(const size_t *)cat(obj, f->aux_offset);
        const pl_logit_bias *b = *(const pl_logit_bias *const *)p;
        put(&o, "{");
        for (size_t i = 0; b && i < n; i++) {
            put(&o, "%s\"%d\":", i ? "," : "", (int)b[i].token);
            put_real(&o, b[i].bias, true);
        }
        put(&o, "}");
        break;
    }
    case PL_FIELD_STRINGS: {
        size_t n = *(const size_t *)cat(obj, f->aux_offset);
        const char *const *ss = *(const char *const *const *)p;
        put(&o, "[");
        for (size_t i = 0; ss && i < n; i++) {
            if (i) put(&o, ",");
            put_string(&o, ss[i]);
        }
        put(&o, "]");
        break;
    }
    }
    return o.len;
}
