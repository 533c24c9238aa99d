/*
 * model/safetensors.c - parsing and checking safetensors headers (format in safetensors.h).
 *
 * Hostile files are the normal case here: the header length, every offset and every shape
 * come from the file. The length is checked against the file before the JSON is parsed
 * (json_loadb is given the exact span; nothing relies on a terminating NUL), each tensor's
 * byte count is computed from its shape in checked arithmetic and must equal its offset span,
 * which must lie inside the data section, and the spans are sorted to find overlaps, so a
 * tensor can never alias another one or the header. Duplicate keys inside one header are
 * refused by jansson (JSON_REJECT_DUPLICATES, whose message quotes the key); duplicates
 * across shards by pl_model_st_finish.
 *
 * Lookups sort once and binary-search, so a header listing a million tensors costs
 * O(n log n), not O(n^2).
 *
 * jansson allocates through util/alloc.h (pl_model_json_loadb installs the hooks), so
 * allocation failures inside a parse reach the fault-injection tests and are reported as
 * PL_ERR_OUT_OF_MEMORY, not as malformed JSON. The hooks are process-wide (jansson has no
 * other kind) and installed only over jansson's defaults: an application's own jansson calls
 * then allocate through pl_malloc too, which is malloc, so memory from either side may be
 * freed by the other.
 */
#include "model/safetensors.h"

#include <inttypes.h>
#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/alloc.h"

static const struct {
    const char *name;
    unsigned size;
    pl_wtype type;
} k_dtypes[] = {
    {"F32", 4, PL_WTYPE_F32},   {"F16", 2, PL_WTYPE_F16},   {"BF16", 2, PL_WTYPE_BF16},
    {"F64", 8, PL_WTYPE_NONE},  {"I64", 8, PL_WTYPE_NONE},  {"U64", 8, PL_WTYPE_NONE},
    {"I32", 4, PL_WTYPE_NONE},  {"U32", 4, PL_WTYPE_NONE},  {"I16", 2, PL_WTYPE_NONE},
    {"U16", 2, PL_WTYPE_NONE},  {"I8", 1, PL_WTYPE_NONE},   {"U8", 1, PL_WTYPE_NONE},
    {"BOOL", 1, PL_WTYPE_NONE}, {"F8_E4M3", 1, PL_WTYPE_NONE}, {"F8_E5M2", 1, PL_WTYPE_NONE},
};

// ----------------------------------------------------------------------------
// jansson through util/alloc.h

/* Set by a failed jansson allocation on this thread; cleared before each parse. */
static _Thread_local bool tl_json_oom;
static pthread_once_t g_json_once = PTHREAD_ONCE_INIT;

static void *json_alloc(size_t n) {
    void *p = pl_malloc(n);
    if (!p) tl_json_oom = true;
    return p;
}

static void json_release(void *p) { pl_free(p); }

/* Only over jansson's defaults: an application that set its own allocator keeps it (its
 * objects must be freed by its own free). */
static void json_hooks_install(void) {
    json_malloc_t m;
    json_free_t f;
    json_get_alloc_funcs(&m, &f);
    if (m == malloc && f == free) json_set_alloc_funcs(json_alloc, json_release);
}

json_t *pl_model_json_loadb(const char *buf, size_t len, size_t flags, json_error_t *err,
                            bool *out_of_memory) {
    pthread_once(&g_json_once, json_hooks_install);
    tl_json_oom = false;
    json_t *j = json_loadb(buf, len, flags, err);
    *out_of_memory = !j && (tl_json_oom || json_error_code(err) == json_error_out_of_memory);
    return j;
}

pl_status pl_model_json_load_file(const char *path, json_t **out) {
    *out = NULL;
    pl_model_file f;
    PL_TRY(pl_model_file_map(path, &f));
    pl_status s = PL_OK;
    if (f.size > PL_MODEL_MAX_JSON_BYTES) {
        s = pl_fail(PL_ERR_FORMAT, "%s: %zu bytes is too large for a JSON config", path, f.size);
    } else {
        json_error_t err;
        bool oom;
        *out = pl_model_json_loadb(f.size ? (const char *)f.data : "", f.size,
                                   JSON_REJECT_DUPLICATES, &err, &oom);
        if (!*out && oom)
            s = pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: out of memory parsing %zu bytes of JSON",
                        path, f.size);
        else if (!*out)
            s = pl_fail(PL_ERR_FORMAT, "%s: line %d column %d: %s", path, err.line, err.column,
                        err.text);
        else if (!json_is_object(*out))
            s = pl_fail(PL_ERR_FORMAT, "%s: not a JSON object", path);
    }
    if (s != PL_OK) {
        json_decref(*out);
        *out = NULL;
    }
    pl_model_file_unmap(&f);
    return s;
}

// ----------------------------------------------------------------------------
// headers

static uint64_t rd_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static pl_status push(pl_st_table *tab, const pl_st_tensor *t) {
    if (tab->n == tab->cap) {
        size_t cap = tab->cap ? 2 * tab->cap : 64;
        pl_st_tensor *nt = pl_reallocarray(tab->t, cap, sizeof *nt);
        if (!nt) return pl_fail(PL_ERR_OUT_OF_MEMORY, "safetensors: out of memory");
        tab->t = nt;
        tab->cap = cap;
    }
    tab->t[tab->n++] = *t;
    return PL_OK;
}

/* A JSON integer in [0, INT64_MAX]. */
static bool get_u63(json_t *v, uint64_t *out) {
    if (!json_is_integer(v)) return false;
    json_int_t i = json_integer_value(v);
    if (i < 0) return false;
    *out = (uint64_t)i;
    return true;
}

/* Checks one entry of the header and fills t (name not yet set). */
static pl_status parse_entry(const pl_model_file *f, const char *key, json_t *v,
                             const uint8_t *data, uint64_t data_len, pl_st_tensor *t) {
    const char *path = f->path;
    if (!json_is_object(v))
        return pl_fail(PL_ERR_FORMAT, "%s: tensor %s: entry is not a JSON object", path, key);
    json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape"),
           *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd))
        return pl_fail(PL_ERR_FORMAT, "%s: tensor %s: \"dtype\" missing or not a string", path,
                       key);
    const char *dname = json_string_value(jd);
    unsigned esize = 0;
    for (size_t i = 0; i < sizeof k_dtypes / sizeof k_dtypes[0]; i++) {
        if (strcmp(dname, k_dtypes[i].name) == 0) {
            esize = k_dtypes[i].size;
            t->type = k_dtypes[i].type;
            snprintf(t->dtype, sizeof t->dtype, "%s", k_dtypes[i].name);
        }
    }
    if (!esize)
        return pl_fail(PL_ERR_FORMAT, "%s: tensor %s: unknown dtype \"%.32s\"", path, key, dname);
    if (!json_is_array(js) || json_array_size(js) > PL_ST_MAX_RANK)
        return pl_fail(PL_ERR_FORMAT, "%s: tensor %s: \"shape\" missing or not an array of at "
                       "most %d dims", path, key, PL_ST_MAX_RANK);
    t->rank = (int)json_array_size(js);
    uint64_t numel = 1;
    for (int d = 0; d < t->rank; d++) {
        uint64_t dim;
        if (!get_u63(json_array_get(js, (size_t)d), &dim))
            return pl_fail(PL_ERR_FORMAT, "%s: tensor %s: shape[%d] is not a non-negative integer",
                           path, key, d);
        t->shape[d] = (int64_t)dim;
        if (!pl_model_mul_ok(numel, dim, &numel))
            return pl_fail(PL_ERR_FORMAT, "%s: tensor %s: shape overflows", path, key);
    }
    uint64_t need, begin, end;
    if (!pl_model_mul_ok(numel, esize, &need))
        return pl_fail(PL_ERR_FORMAT, "%s: tensor %s: shape overflows", path, key);
    if (!json_is_array(jo) || json_array_size(jo) != 2 ||
        !get_u63(json_array_get(jo, 0), &begin) || !get_u63(json_array_get(jo, 1), &end))
        return pl_fail(PL_ERR_FORMAT, "%s: tensor %s: \"data_offsets\" is not [begin, end] of "
                       "non-negative integers", path, key);
    if (begin > end || end > data_len)
        return pl_fail(PL_ERR_FORMAT, "%s: tensor %s: data_offsets [%" PRIu64 ", %" PRIu64
                       "] fall outside the data section of %" PRIu64 " bytes", path, key, begin,
                       end, data_len);
    if (end - begin != need)
        return pl_fail(PL_ERR_FORMAT, "%s: tensor %s: data_offsets span %" PRIu64
                       " bytes but its shape of %s needs %" PRIu64, path, key, end - begin,
                       t->dtype, need);
    t->data = data + begin;
    t->n_bytes = need;
    return PL_OK;
}

static int by_data(const void *a, const void *b) {
    const pl_st_tensor *x = *(const pl_st_tensor *const *)a, *y = *(const pl_st_tensor *const *)b;
    return x->data < y->data ? -1 : x->data > y->data;
}

/* Tensors first..tab->n-1 come from one file: refuse any two whose bytes overlap. */
static pl_status check_overlaps(const pl_model_file *f, pl_st_table *tab, size_t first) {
    size_t n = tab->n - first;
    if (n < 2) return PL_OK;
    const pl_st_tensor **v = pl_calloc(n, sizeof *v);
    if (!v) return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: out of memory", f->path);
    size_t k = 0;
    for (size_t i = first; i < tab->n; i++)
        if (tab->t[i].n_bytes) v[k++] = &tab->t[i];
    qsort(v, k, sizeof *v, by_data);
    pl_status s = PL_OK;
    for (size_t i = 1; i < k && s == PL_OK; i++)
        if (v[i]->data < v[i - 1]->data + v[i - 1]->n_bytes)
            s = pl_fail(PL_ERR_FORMAT, "%s: tensors %s and %s overlap", f->path, v[i - 1]->name,
                        v[i]->name);
    pl_free(v);
    return s;
}

pl_status pl_model_st_parse(const pl_model_file *f, int file_index, pl_st_table *tab) {
    const char *path = f->path;
    if (f->size < 8)
        return pl_fail(PL_ERR_FORMAT, "%s: truncated: %zu bytes, no safetensors header length",
                       path, f->size);
    uint64_t hlen = rd_u64(f->data);
    if (hlen > (uint64_t)f->size - 8)
        return pl_fail(PL_ERR_FORMAT, "%s: header length %" PRIu64 " exceeds the file (%zu "
                       "bytes)", path, hlen, f->size);
    if (hlen > PL_ST_MAX_HEADER)
        return pl_fail(PL_ERR_FORMAT, "%s: header length %" PRIu64 " exceeds the limit of %u",
                       path, hlen, PL_ST_MAX_HEADER);
    json_error_t err;
    bool oom;
    json_t *root = pl_model_json_loadb((const char *)f->data + 8, (size_t)hlen,
                                       JSON_REJECT_DUPLICATES, &err, &oom);
    if (!root && oom)
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: out of memory parsing the %" PRIu64
                       "-byte header JSON", path, hlen);
    if (!root)
        return pl_fail(PL_ERR_FORMAT, "%s: header JSON: %s (at byte %d)", path, err.text,
                       8 + err.position);
    if (!json_is_object(root)) {
        json_decref(root);
        return pl_fail(PL_ERR_FORMAT, "%s: header JSON is not an object", path);
    }
    const uint8_t *data = f->data + 8 + hlen;
    uint64_t data_len = (uint64_t)f->size - 8 - hlen;
    size_t first = tab->n;
    pl_status s = PL_OK;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) continue;
        pl_st_tensor t = {0};
        t.file = file_index;
        s = parse_entry(f, key, v, data, data_len, &t);
        if (s != PL_OK) break;
        t.name = pl_strdup(key);
        if (!t.name) {
            s = pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
            break;
        }
        s = push(tab, &t);
        if (s != PL_OK) {
            pl_free(t.name);
            break;
        }
    }
    json_decref(root);
    if (s == PL_OK) s = check_overlaps(f, tab, first);
    return s;
}

static int by_name(const void *a, const void *b) {
    return strcmp(((const pl_st_tensor *)a)->name, ((const pl_st_tensor *)b)->name);
}

pl_status pl_model_st_finish(pl_st_table *tab, const char *const *file_paths) {
    if (tab->n > 1) qsort(tab->t, tab->n, sizeof tab->t[0], by_name);
    for (size_t i = 1; i < tab->n; i++)
        if (strcmp(tab->t[i].name, tab->t[i - 1].name) == 0)
            return pl_fail(PL_ERR_FORMAT, "tensor %s is duplicated (in %s and %s)",
                           tab->t[i].name, file_paths[tab->t[i - 1].file],
                           file_paths[tab->t[i].file]);
    return PL_OK;
}

const pl_st_tensor *pl_model_st_find(const pl_st_table *tab, const char *name) {
    if (!tab->n) return NULL;
    pl_st_tensor key = {0};
    key.name = (char *)name;
    return bsearch(&key, tab->t, tab->n, sizeof tab->t[0], by_name);
}

void pl_model_st_table_free(pl_st_table *tab) {
    for (size_t i = 0; i < tab->n; i++) pl_free(tab->t[i].name);
    pl_free(tab->t);
    memset(tab, 0, sizeof *tab);
}
