/*
 * tests/tokenizer/hf_oracle.c - see hf_oracle.h. The fixture is read with jansson; the path
 * comes from PL_TOK_DATA_DIR (the source tests/data).
 */
#include "hf_oracle.h"

#include <criterion/criterion.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tok_check.h"
#include "util/alloc.h"

#ifndef PL_TOK_DATA_DIR
#error "PL_TOK_DATA_DIR (tests/data) must be defined"
#endif

static json_t *fixture_file(const char *file) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", PL_TOK_DATA_DIR, file);
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    cr_assert_not_null(root, "%s: line %d: %s", file, err.line, err.text);
    return root;
}

static json_t *fixture(void) { return fixture_file("tokenizer_oracle.json"); }

static int32_t *ids_of(json_t *arr, size_t *n) {
    *n = json_array_size(arr);
    int32_t *v = malloc((*n + 1) * sizeof *v);
    cr_assert_not_null(v);
    for (size_t i = 0; i < *n; i++) v[i] = (int32_t)json_integer_value(json_array_get(arr, i));
    return v;
}

static void print_ids(const char *what, const int32_t *v, size_t n) {
    fprintf(stderr, "  %s (%zu):", what, n);
    for (size_t i = 0; i < n && i < 64; i++) fprintf(stderr, " %d", (int)v[i]);
    fprintf(stderr, n > 64 ? " ...\n" : "\n");
}

static void expect_ids(const pl_tokenizer *t, const char *name, const char *text, size_t len,
                       unsigned flags, const int32_t *want, size_t n_want) {
    int32_t *got = NULL;
    size_t n = 0;
    cr_assert_eq(pl_tok_encode(t, text, len, flags, &got, &n), PL_OK, "%s: %s", name,
                 pl_last_error());
    bool same = n == n_want && (n == 0 || memcmp(got, want, n * sizeof *got) == 0);
    if (!same) {
        fprintf(stderr, "%s: \"%s\" (flags %u)\n", name, text, flags);
        print_ids("want", want, n_want);
        print_ids("got ", got, n);
        cr_assert_fail("%s: ids differ from the oracle for \"%s\"", name, text);
    }
    pl_free(got);
}

static void expect_decode(const pl_tokenizer *t, const char *name, const int32_t *ids, size_t n,
                          unsigned flags, const char *want) {
    char *got = NULL;
    cr_assert_eq(pl_tok_decode(t, ids, n, flags, &got), PL_OK, "%s", pl_last_error());
    cr_assert_str_eq(got, want, "%s: decode (flags %u)", name, flags);
    pl_free(got);
}

int hf_oracle_check_cases(const char *name, const pl_tokenizer *t) {
    return hf_oracle_check_cases_in("tokenizer_oracle.json", name, t);
}

int hf_oracle_check_cases_in(const char *file, const char *name, const pl_tokenizer *t) {
    json_t *root = fixture_file(file);
    json_t *cases = json_object_get(root, "cases");
    int checked = 0;
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        if (strcmp(json_string_value(json_object_get(c, "tokenizer")), name) != 0) continue;
        json_t *jt = json_object_get(c, "text");
        const char *text = json_string_value(jt);
        size_t len = json_string_length(jt);
        unsigned add = json_is_true(json_object_get(c, "add_special")) ? PL_TOK_ADD_SPECIAL : 0;
        size_t n, n_plain;
        int32_t *ids = ids_of(json_object_get(c, "ids"), &n);
        json_t *jp = json_object_get(c, "ids_plain");
        int32_t *plain = jp ? ids_of(jp, &n_plain) : NULL;
        expect_ids(t, name, text, len, add | PL_TOK_PARSE_SPECIAL, ids, n);
        expect_ids(t, name, text, len, add, plain ? plain : ids, plain ? n_plain : n);
        if (n > 0) {
            json_t *jd = json_object_get(c, "decoded"), *js = json_object_get(c, "decoded_skip");
            const char *dec = jd ? json_string_value(jd) : text;
            expect_decode(t, name, ids, n, 0, dec);
            expect_decode(t, name, ids, n, PL_TOK_SKIP_SPECIAL, js ? json_string_value(js) : dec);
            tok_check_stream(t, ids, n, n < 200);
        }
        free(ids);
        free(plain);
        checked++;
    }
    json_decref(root);
    cr_assert_gt(checked, 0, "no oracle cases for %s", name);
    return checked;
}

char *hf_oracle_long_text(const char *kind, const char *unit, unsigned seed, size_t bytes) {
    char *s = pl_malloc(bytes + 1);
    cr_assert_not_null(s);
    if (strcmp(kind, "repeat") == 0 || strcmp(kind, "times") == 0) {
        size_t u = strlen(unit);
        for (size_t i = 0; i < bytes; i++) s[i] = unit[i % u];
    } else {
        uint32_t x = seed;
        for (size_t i = 0; i < bytes; i++) {
            x = x * 1664525u + 1013904223u;
            s[i] = (char)('a' + (x >> 24) % 26);
        }
    }
    s[bytes] = '\0';
    return s;
}

static uint64_t fnv64(const int32_t *ids, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        for (int k = 0; k < 4; k++) {
            h ^= ((uint32_t)ids[i] >> (8 * k)) & 0xFF;
            h *= 0x100000001b3ull;
        }
    return h;
}

int hf_oracle_check_long(const char *name, const pl_tokenizer *t) {
    json_t *root = fixture();
    int checked = 0;
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(root, "long"), i, c) {
        if (strcmp(json_string_value(json_object_get(c, "tokenizer")), name) != 0) continue;
        json_t *g = json_object_get(c, "gen");
        const char *kind = json_string_value(json_object_get(g, "kind"));
        json_t *unit = json_object_get(g, "unit");
        size_t bytes = strcmp(kind, "times") == 0
                           ? json_string_length(unit) *
                                 (size_t)json_integer_value(json_object_get(g, "times"))
                           : (size_t)json_integer_value(json_object_get(g, "bytes"));
        char *text = hf_oracle_long_text(kind, unit ? json_string_value(unit) : "",
                                         (unsigned)json_integer_value(json_object_get(g, "seed")),
                                         bytes);
        int32_t *ids = NULL;
        size_t n = 0;
        cr_assert_eq(pl_tok_encode(t, text, bytes, PL_TOK_PARSE_SPECIAL, &ids, &n), PL_OK, "%s",
                     pl_last_error());
        size_t want_n = (size_t)json_integer_value(json_object_get(c, "n_ids"));
        char hash[17];
        snprintf(hash, sizeof hash, "%016" PRIx64, fnv64(ids, n));
        const char *what = strcmp(kind, "repeat") == 0 ? json_string_value(unit) : kind;
        cr_assert_eq(n, want_n, "%s, 1 MB of \"%s\": %zu ids, the oracle %zu", name, what, n,
                     want_n);
        size_t nh, nt;
        int32_t *head = ids_of(json_object_get(c, "head"), &nh);
        int32_t *tail = ids_of(json_object_get(c, "tail"), &nt);
        cr_assert_eq(memcmp(ids, head, nh * sizeof *ids), 0, "%s, \"%s\": first ids", name, what);
        cr_assert_eq(memcmp(ids + n - nt, tail, nt * sizeof *ids), 0, "%s, \"%s\": last ids",
                     name, what);
        cr_assert_str_eq(hash, json_string_value(json_object_get(c, "fnv64")),
                         "%s, \"%s\": hash of the ids", name, what);
        free(head);
        free(tail);
        pl_free(ids);
        pl_free(text);
        checked++;
    }
    json_decref(root);
    cr_assert_gt(checked, 0, "no long inputs for %s", name);
    return checked;
}
