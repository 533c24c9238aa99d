/*
 * tests/model/test_hostile.c - loaders against damaged and malicious files (issue 7).
 *
 * Every case must fail with a specific status and a message naming the file and the field or
 * tensor, never crash, never allocate what a header claims, and leak nothing (checked under
 * ASan with PL_ASSERT_NO_LEAKS). Covered: truncation at every byte (llama2.c legacy and ak42,
 * a safetensors file, config.json, a shard index), absurd and inconsistent header dims,
 * unknown versions and magics, safetensors headers with overflowing or out-of-file offsets,
 * overlapping tensors, wrong dtypes, missing and duplicated tensors (in one file and across
 * shards), bad JSON, shape mismatches, hostile shard names, config.json field errors, random
 * byte corruption, and allocation failure at every allocation of every loader. Per
 * architecture (issue 18): an unknown or self-contradicting architecture, missing and
 * misshapen biases and q/k norms, a bias in a model said to be Llama, a head_dim the weights
 * contradict, Qwen's use_sliding_window, Mistral's window of the wrong type, EOS lists too
 * long or outside the vocabulary, a broken generation_config.json.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "model/model.h"
#include "model_fixtures.h"
#include "test_support.h"
#include "util/alloc.h"

// ----------------------------------------------------------------------------
// helpers

/* A small config with hidden_dim != dim, so a transposed shape is detectable. */
static pl_model_config small_config(bool tied) {
    pl_model_config c = {.dim = 8, .hidden_dim = 5, .n_layers = 2, .n_heads = 4,
                         .n_kv_heads = 2, .head_dim = 2, .vocab_size = 6, .max_seq_len = 3,
                         .norm_eps = 1e-5f, .rope_theta = 10000, .tied_embeddings = tied,
                         .bos_id = 1, .eos_ids = {2}, .n_eos = 1};
    return c;
}

static pl_status try_load(const char *path, pl_model **out) {
    pl_model *m = (pl_model *)(uintptr_t)1; /* must be reset to NULL on failure */
    pl_clear_error();
    pl_status s = pl_model_load(path, NULL, &m);
    if (s != PL_OK) cr_assert_null(m, "%s: a failed load returned a model", path);
    if (out) *out = m;
    else pl_model_free(m);
    return s;
}

/* Loading path fails with code and a message holding each of the (NULL-ended) strings. */
static void expect_fail_v(const char *path, pl_status code, const char *const *needles) {
    pl_status s = try_load(path, NULL);
    cr_assert_eq(s, code, "%s: got %s (%s), want %s", path, pl_status_name(s), pl_last_error(),
                 pl_status_name(code));
    for (size_t i = 0; needles[i]; i++)
        cr_assert(strstr(pl_last_error(), needles[i]), "message \"%s\" lacks \"%s\"",
                  pl_last_error(), needles[i]);
}
#define expect_fail(path, code, ...) \
    expect_fail_v(path, code, (const char *const[]){__VA_ARGS__, NULL})

static void expect_ok(const char *path) {
    pl_status s = try_load(path, NULL);
    cr_assert_eq(s, PL_OK, "%s: %s", path, pl_last_error());
}

/* Writes the first n bytes of data to path. */
static void write_prefix(const char *path, const uint8_t *data, size_t n) {
    cr_assert(pl_fixture_write_file(path, data, n));
}

static void put_i32(uint8_t *p, int32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)((uint32_t)v >> (8 * i));
}

/* A safetensors file's header as JSON (caller decrefs), and its data section (malloc'd). */
static json_t *read_st(const char *path, uint8_t **data, size_t *n_data) {
    uint8_t *f;
    size_t n;
    cr_assert(pl_fixture_read_file(path, &f, &n));
    uint64_t h = 0;
    for (int i = 7; i >= 0; i--) h = h << 8 | f[i];
    json_error_t err;
    json_t *j = json_loadb((const char *)f + 8, (size_t)h, 0, &err);
    cr_assert_not_null(j, "%s", err.text);
    *n_data = n - 8 - (size_t)h;
    *data = malloc(*n_data + 1);
    memcpy(*data, f + 8 + h, *n_data);
    free(f);
    return j;
}

/* Writes header (stolen) + data as a safetensors file. */
static void write_st(const char *path, json_t *header, const uint8_t *data, size_t n_data) {
    char *text = json_dumps(header, JSON_COMPACT);
    cr_assert(pl_fixture_write_safetensors_raw(path, text, data, n_data));
    free(text);
    json_decref(header);
}

/* An HF directory of the small config in dir; returns the path of model.safetensors. */
static const char *make_hf(const char *dir, pl_model_config c, int n_shards) {
    pl_model *m = pl_fixture_model(&c, 9);
    cr_assert(pl_fixture_write_hf(m, dir, &(pl_fixture_hf_options){.n_shards = n_shards}));
    pl_model_free(m);
    return pl_fixture_path(dir, "model.safetensors");
}

static json_t *read_json(const char *path) {
    json_error_t err;
    json_t *j = json_load_file(path, 0, &err);
    cr_assert_not_null(j, "%s: %s", path, err.text);
    return j;
}

static void write_json(const char *path, json_t *j) {
    cr_assert_eq(json_dump_file(j, path, JSON_INDENT(1)), 0);
    json_decref(j);
}

// ----------------------------------------------------------------------------
// llama2.c files

Test(hostile, llama2c_truncated_at_every_byte) {
    const char *dir = pl_test_tmpdir();
    char full[600], cut[600];
    snprintf(full, sizeof full, "%s/full.bin", dir);
    snprintf(cut, sizeof cut, "%s/cut.bin", dir);
    for (int fmt = 0; fmt < 2; fmt++) {
        for (int tied = 0; tied < 2; tied++) {
            pl_model_config c = small_config(tied);
            pl_model *m = pl_fixture_model(&c, 1);
            cr_assert(fmt ? pl_fixture_write_ak42(m, full) : pl_fixture_write_llama2c(m, full));
            pl_model_free(m);
            uint8_t *data;
            size_t n;
            cr_assert(pl_fixture_read_file(full, &data, &n));
            expect_ok(full);
            /* shrinking one file is much cheaper than writing each prefix afresh */
            write_prefix(cut, data, n);
            for (size_t k = n; k-- > 0;) {
                cr_assert(pl_fixture_truncate(cut, k));
                pl_status s = try_load(cut, NULL);
                cr_assert_eq(s, PL_ERR_FORMAT, "%s cut at %zu of %zu: %s (%s)",
                             fmt ? "ak42" : "legacy", k, n, pl_status_name(s), pl_last_error());
                cr_assert(strstr(pl_last_error(), cut), "message names the file: %s",
                          pl_last_error());
            }
            /* one byte too many is as wrong as one too few: the size is the only check */
            uint8_t *more = malloc(n + 1);
            memcpy(more, data, n);
            more[n] = 0;
            write_prefix(cut, more, n + 1);
            expect_fail(cut, PL_ERR_FORMAT, "trailing");
            free(more);
            free(data);
        }
    }
    pl_fixture_remove_dir(dir);
    PL_ASSERT_NO_LEAKS();
}

typedef struct bad_header {
    int32_t h[7]; /* dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len */
    const char *field;
} bad_header;

Test(hostile, llama2c_absurd_dims_fail_fast_on_the_field) {
    const bad_header cases[] = {
        {{64, 172, 1000000000, 8, 4, 512, 512}, "n_layers"},
        {{-1, 172, 5, 8, 4, 512, 512}, "dim"},
        {{0, 172, 5, 8, 4, 512, 512}, "dim"},
        {{64, INT32_MAX, 5, 8, 4, 512, 512}, "hidden_dim"},
        {{64, 0, 5, 8, 4, 512, 512}, "hidden_dim"},
        {{64, 172, 0, 8, 4, 512, 512}, "n_layers"},
        {{64, 172, 5, 0, 4, 512, 512}, "n_heads"},
        {{64, 172, 5, -8, 4, 512, 512}, "n_heads"},
        {{64, 172, 5, 8, 16, 512, 512}, "n_kv_heads"},
        {{64, 172, 5, 8, 0, 512, 512}, "n_kv_heads"},
        {{64, 172, 5, 8, 3, 512, 512}, "n_kv_heads"},
        {{64, 172, 5, 8, 4, INT32_MIN, 512}, "vocab_size"},
        {{64, 172, 5, 8, 4, 0, 512}, "vocab_size"},
        {{64, 172, 5, 8, 4, 512, -5}, "seq_len"},
        {{64, 172, 5, 8, 4, 512, INT32_MAX}, "seq_len"},
        {{65, 172, 5, 8, 4, 512, 512}, "n_heads"},
        {{24, 172, 5, 8, 4, 512, 512}, "head_dim"},
        /* consistent and plausible, but the file is only the header: the implied size fails */
        {{4096, 11008, 32, 32, 32, 32000, 4096}, "implies"},
    };
    const char *dir = pl_test_tmpdir();
    char path[600];
    snprintf(path, sizeof path, "%s/bad.bin", dir);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t hdr[28];
        for (int k = 0; k < 7; k++) put_i32(hdr + 4 * k, cases[i].h[k]);
        write_prefix(path, hdr, sizeof hdr);
        unsigned long before = pl_alloc_count();
        clock_t t0 = clock();
        const char *field = strcmp(cases[i].field, "seq_len") == 0 ? "max_seq_len"
                                                                     : cases[i].field;
        expect_fail(path, PL_ERR_FORMAT, field, path);
        cr_assert_lt(pl_alloc_count() - before, 4u, "case %zu allocated", i);
        cr_assert_lt((double)(clock() - t0) / CLOCKS_PER_SEC, 0.05, "case %zu was slow", i);
    }
    pl_fixture_remove_dir(dir);
    PL_ASSERT_NO_LEAKS();
}

Test(hostile, ak42_versions_flags_and_magics) {
    const char *dir = pl_test_tmpdir();
    char path[600];
    snprintf(path, sizeof path, "%s/v.bin", dir);
    pl_model_config c = small_config(true);
    pl_model *m = pl_fixture_model(&c, 2);
    cr_assert(pl_fixture_write_ak42(m, path));
    pl_model_free(m);
    uint8_t v[4];
    put_i32(v, 2);
    cr_assert(pl_fixture_overwrite(path, 4, v, 4));
    expect_fail(path, PL_ERR_UNSUPPORTED, "version 2");
    put_i32(v, 7);
    cr_assert(pl_fixture_overwrite(path, 4, v, 4));
    expect_fail(path, PL_ERR_UNSUPPORTED, "version 7");
    put_i32(v, 1);
    cr_assert(pl_fixture_overwrite(path, 4, v, 4));
    expect_ok(path);
    uint8_t flag = 2;
    cr_assert(pl_fixture_overwrite(path, 36, &flag, 1));
    expect_fail(path, PL_ERR_FORMAT, "shared_classifier");
    /* the shared flag says untied, so a classifier is missing: the size is wrong */
    flag = 0;
    cr_assert(pl_fixture_overwrite(path, 36, &flag, 1));
    expect_fail(path, PL_ERR_FORMAT, "truncated");
    /* negative vocab is no flag in v1 */
    put_i32(v, -6);
    cr_assert(pl_fixture_overwrite(path, 28, v, 4));
    expect_fail(path, PL_ERR_FORMAT, "vocab_size");

    /* "GGUF" goes to the GGUF loader (tests/model/test_gguf.c), which finds it truncated */
    cr_assert(pl_fixture_write_file(path, "GGUF\3\0\0\0", 8));
    expect_fail(path, PL_ERR_FORMAT, "truncated");
    pl_fixture_remove_dir(dir);
    PL_ASSERT_NO_LEAKS();
}

Test(hostile, paths_and_arguments) {
    pl_model *m = NULL;
    cr_assert_eq(pl_model_load(NULL, NULL, &m), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_model_load("", NULL, &m), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_model_load("dummy:tiny", NULL, NULL), PL_ERR_INVALID_ARGUMENT);
    pl_model_load_options o = {(pl_dtype)9, 0, 0};
    cr_assert_eq(pl_model_load("dummy:tiny", &o, &m), PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "dtype"));
    cr_assert_null(m);
    expect_fail("/nonexistent/model.bin", PL_ERR_IO, "/nonexistent/model.bin");
    expect_fail("/dev/null", PL_ERR_IO, "not a regular file");
    const char *dir = pl_test_tmpdir();
    expect_fail(dir, PL_ERR_IO, "config.json");
    /* a FIFO must be refused, not waited on (opening one for reading blocks) */
    char fifo[600];
    snprintf(fifo, sizeof fifo, "%s/fifo.bin", dir);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    expect_fail(fifo, PL_ERR_IO, "not a regular file");
    snprintf(fifo, sizeof fifo, "%s/config.json", dir);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    expect_fail(dir, PL_ERR_IO, "not a regular file");
    cr_assert_eq(remove(fifo), 0);
    /* a config without weights */
    pl_model_config c = small_config(false);
    cr_assert(pl_fixture_write_hf_config(&c, dir, false));
    expect_fail(dir, PL_ERR_NOT_FOUND, "model.safetensors");
    pl_fixture_remove_dir(dir);
    pl_model_free(NULL);
    PL_ASSERT_NO_LEAKS();
}

// ----------------------------------------------------------------------------
// safetensors

Test(hostile, safetensors_truncated_at_every_byte) {
    const char *dir = pl_test_tmpdir();
    char st[600];
    snprintf(st, sizeof st, "%s", make_hf(dir, small_config(false), 1));
    uint8_t *data;
    size_t n;
    cr_assert(pl_fixture_read_file(st, &data, &n));
    for (size_t k = n; k-- > 0;) {
        cr_assert(pl_fixture_truncate(st, k));
        pl_status s = try_load(dir, NULL);
        cr_assert_eq(s, PL_ERR_FORMAT, "cut at %zu of %zu: %s (%s)", k, n, pl_status_name(s),
                     pl_last_error());
        cr_assert(strstr(pl_last_error(), "model.safetensors"), "%s", pl_last_error());
    }
    write_prefix(st, data, n);
    expect_ok(dir);
    free(data);
    pl_fixture_remove_dir(dir);
    PL_ASSERT_NO_LEAKS();
}

Test(hostile, json_files_truncated_at_every_byte) {
    const char *dir = pl_test_tmpdir();
    make_hf(dir, small_config(true), 3);
    const char *names[] = {"config.json", "model.safetensors.index.json"};
    for (size_t f = 0; f < 2; f++) {
        char path[600];
        snprintf(path, sizeof path, "%s/%s", dir, names[f]);
        uint8_t *data;
        size_t n;
        cr_assert(pl_fixture_read_file(path, &data, &n));
        size_t last = n;
        while (last > 0 && data[last - 1] != '}') last--;
        cr_assert_gt(last, 0);
        for (size_t k = last; k-- > 0;) { /* every prefix missing the closing brace */
            cr_assert(pl_fixture_truncate(path, k));
            expect_fail(path, PL_ERR_FORMAT, names[f]);
            expect_fail(dir, PL_ERR_FORMAT, names[f]);
        }
        write_prefix(path, data, n);
        expect_ok(dir);
        free(data);
    }
    pl_fixture_remove_dir(dir);
    PL_ASSERT_NO_LEAKS();
}

Test(hostile, safetensors_header_length_attacks) {
    const char *dir = pl_test_tmpdir();
    char st[600];
    snprintf(st, sizeof st, "%s", make_hf(dir, small_config(false), 1));
    uint8_t *data;
    size_t n;
    cr_assert(pl_fixture_read_file(st, &data, &n));
    const uint64_t lens[] = {UINT64_MAX, (uint64_t)1 << 63, (uint64_t)n - 7, (uint64_t)n};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        uint8_t le[8];
        for (int b = 0; b < 8; b++) le[b] = (uint8_t)(lens[i] >> (8 * b));
        write_prefix(st, data, n);
        cr_assert(pl_fixture_overwrite(st, 0, le, 8));
        expect_fail(dir, PL_ERR_FORMAT, "header length");
    }
    /* a zero-length header and a header that is not an object */
    cr_assert(pl_fixture_write_safetensors_raw(st, "", NULL, 0));
    expect_fail(dir, PL_ERR_FORMAT, "JSON");
    cr_assert(pl_fixture_write_safetensors_raw(st, "[1, 2]", NULL, 0));
    expect_fail(dir, PL_ERR_FORMAT, "not an object");
    cr_assert(pl_fixture_write_safetensors_raw(st, "{\"a\": [1, 2", NULL, 0));
    expect_fail(dir, PL_ERR_FORMAT, "JSON");
    cr_assert(pl_fixture_write_safetensors_raw(st, "{\"a\": 5}", NULL, 0));
    expect_fail(dir, PL_ERR_FORMAT, "tensor a");
    free(data);
    pl_fixture_remove_dir(dir);
    PL_ASSERT_NO_LEAKS();
}

/* One edit of a tensor entry and the expected failure. */
typedef struct entry_case {
    const char *tensor;
    const char *key;   /* field to replace */
    const char *value; /* JSON text */
    pl_status code;
    const char *needle;
} entry_case;

Test(hostile, safetensors_entry_attacks) {
    const entry_case cases[] = {
        {"model.layers.0.self_attn.q_proj.weight", "dtype", "\"I32\"", PL_ERR_UNSUPPORTED,
         "dtype I32"},
        {"model.layers.1.mlp.up_proj.weight", "dtype", "\"F16\"", PL_ERR_FORMAT, "span"},
        {"model.norm.weight", "dtype", "\"Q9_K\"", PL_ERR_FORMAT, "unknown dtype"},
        {"model.norm.weight", "dtype", "7", PL_ERR_FORMAT, "dtype"},
        {"model.norm.weight", "data_offsets", "[9223372036854775000, 9223372036854775807]",
         PL_ERR_FORMAT, "outside the data section"},
        {"model.norm.weight", "data_offsets", "[0, 18446744073709551615]", PL_ERR_FORMAT,
         "JSON"},
        {"model.norm.weight", "data_offsets", "[-4, 28]", PL_ERR_FORMAT, "data_offsets"},
        {"model.norm.weight", "data_offsets", "[40, 8]", PL_ERR_FORMAT, "outside"},
        {"model.norm.weight", "data_offsets", "[0]", PL_ERR_FORMAT, "data_offsets"},
        {"model.norm.weight", "data_offsets", "\"0-32\"", PL_ERR_FORMAT, "data_offsets"},
        {"model.norm.weight", "shape", "[4611686018427387904, 4611686018427387904]",
         PL_ERR_FORMAT, "overflow"},
        {"model.norm.weight", "shape", "[8, -1]", PL_ERR_FORMAT, "shape"},
        {"model.norm.weight", "shape", "[1, 1, 1, 1, 1, 1, 1, 1, 1, 8]", PL_ERR_FORMAT, "shape"},
        {"model.norm.weight", "shape", "[1, 8]", PL_ERR_FORMAT, "model.norm.weight has shape"},
        {"model.layers.1.mlp.gate_proj.weight", "shape", "[8, 5]", PL_ERR_FORMAT,
         "model.layers.1.mlp.gate_proj.weight has shape [8, 5], config needs [5, 8]"},
        {"lm_head.weight", "shape", "[8, 6]", PL_ERR_FORMAT, "lm_head.weight has shape"},
    };
    const char *dir = pl_test_tmpdir();
    char st[600];
    snprintf(st, sizeof st, "%s", make_hf(dir, small_config(false), 1));
    uint8_t *data;
    size_t n_data;
    json_t *orig = read_st(st, &data, &n_data);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *h = json_deep_copy(orig);
        json_t *e = json_object_get(h, cases[i].tensor);
        cr_assert_not_null(e, "%s", cases[i].tensor);
        /* jansson cannot hold integers past INT64_MAX: splice the value in as text */
        json_object_set_new(e, cases[i].key, json_string("@@"));
        char *text = json_dumps(h, JSON_COMPACT);
        char *at = strstr(text, "\"@@\"");
        cr_assert_not_null(at);
        size_t len = strlen(text) + strlen(cases[i].value) + 1;
        char *edited = malloc(len);
        snprintf(edited, len, "%.*s%s%s", (int)(at - text), text, cases[i].value, at + 4);
        cr_assert(pl_fixture_write_safetensors_raw(st, edited, data, n_data));
        expect_fail(dir, cases[i].code, cases[i].needle);
        free(edited);
        free(text);
        json_decref(h);
    }
    json_decref(orig);
    free(data);
    pl_fixture_remove_dir(dir);
    PL_ASSERT_NO_LEAKS();
}

Test(hostile, safetensors_missing_duplicated_overlapping_and_extra_tensors) {
    const char *dir = pl_test_tmpdir();
    char st[600];
    snprintf(st, sizeof st, "%s", make_hf(dir, small_config(false), 1));
    uint8_t *data;
    size_t n_data;
    json_t *orig = read_st(st, &data, &n_data);

    json_t *h = json_deep_copy(orig);
    json_object_del(h, "model.layers.1.mlp.up_proj.weight");
    write_st(st, h, data, n_data);
    expect_fail(dir, PL_ERR_NOT_FOUND, "missing tensor model.layers.1.mlp.up_proj.weight");

    h = json_deep_copy(orig);
    json_object_del(h, "lm_head.weight"); /* untied in the config: the classifier is required */
    write_st(st, h, data, n_data);
    expect_fail(dir, PL_ERR_NOT_FOUND, "lm_head.weight");

    /* the same key twice in one header (jansson's message quotes it) */
    char *text = json_dumps(orig, JSON_COMPACT);
    char *dup_entry = json_dumps(json_object_get(orig, "model.norm.weight"), JSON_COMPACT);
    size_t len = strlen(text) + strlen(dup_entry) + 64;
    char *dup = malloc(len);
    snprintf(dup, len, "{\"model.norm.weight\":%s,%s", dup_entry, text + 1);
    cr_assert(pl_fixture_write_safetensors_raw(st, dup, data, n_data));
    expect_fail(dir, PL_ERR_FORMAT, "model.norm.weight", "duplicate");
    free(dup);
    free(dup_entry);
    free(text);

    /* two tensors of equal size sharing bytes */
    h = json_deep_copy(orig);
    json_t *k = json_object_get(json_object_get(h, "model.layers.0.self_attn.k_proj.weight"),
                                "data_offsets");
    json_object_set(json_object_get(h, "model.layers.0.self_attn.v_proj.weight"),
                    "data_offsets", k);
    write_st(st, h, data, n_data);
    expect_fail(dir, PL_ERR_FORMAT, "overlap", "model.layers.0.self_attn.");

    /* a layer the config does not have (an empty tensor, so it overlaps nothing) */
    h = json_deep_copy(orig);
    json_object_set_new(h, "model.layers.7.mlp.up_proj.weight",
                        json_pack("{s:s, s:[i], s:[i, i]}", "dtype", "F32", "shape", 0,
                                  "data_offsets", 0, 0));
    write_st(st, h, data, n_data);
    expect_fail(dir, PL_ERR_FORMAT, "model.layers.7.mlp.up_proj.weight", "num_hidden_layers");

    /* unknown tensors elsewhere are ignored, and so is odd metadata */
    h = json_deep_copy(orig);
    json_object_set_new(h, "model.layers.0.self_attn.rotary_emb.inv_freq",
                        json_pack("{s:s, s:[i], s:[i, i]}", "dtype", "F64", "shape", 0,
                                  "data_offsets", 0, 0));
    json_object_set_new(h, "__metadata__", json_integer(3));
    write_st(st, h, data, n_data);
    expect_ok(dir);

    json_decref(orig);
    free(data);
    pl_fixture_remove_dir(dir);
    PL_ASSERT_NO_LEAKS();
}

Test(hostile, shard_index_attacks) {
    const char *dir = pl_test_tmpdir();
    make_hf(dir, small_config(false), 3);
    char index[600];
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir);
    json_t *orig = read_json(index);
    expect_ok(dir);

    const char *bad_names[] = {"../model-00001-of-00003.safetensors", "sub/x.safetensors", "",
                               "..", "."};
    for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
        json_t *j = json_deep_copy(orig);
        json_object_set_new(json_object_get(j, "weight_map"), "model.norm.weight",
                            json_string(bad_names[i]));
        write_json(index, j);
        expect_fail(dir, PL_ERR_FORMAT, "weight_map[model.norm.weight]");
    }
    json_t *j = json_deep_copy(orig);
    json_object_set_new(json_object_get(j, "weight_map"), "model.norm.weight",
                        json_string("model-00009-of-00009.safetensors"));
    write_json(index, j);
    expect_fail(dir, PL_ERR_IO, "model-00009-of-00009.safetensors");

    j = json_deep_copy(orig);
    json_object_set_new(json_object_get(j, "weight_map"), "model.norm.weight",
                        json_string("model-00001-of-00003.safetensors"));
    write_json(index, j);
    expect_fail(dir, PL_ERR_FORMAT, "model.norm.weight", "does not hold it");

    j = json_deep_copy(orig);
    json_object_set_new(j, "weight_map", json_object());
    write_json(index, j);
    expect_fail(dir, PL_ERR_FORMAT, "weight_map");
    j = json_deep_copy(orig);
    json_object_set_new(j, "weight_map", json_integer(1));
    write_json(index, j);
    expect_fail(dir, PL_ERR_FORMAT, "weight_map");
    write_json(index, json_deep_copy(orig));
    expect_ok(dir);

    /* the second shard replaced by a copy of the first: its tensors are in two files */
    char s1[600], s2[600];
    snprintf(s1, sizeof s1, "%s/model-00001-of-00003.safetensors", dir);
    snprintf(s2, sizeof s2, "%s/model-00002-of-00003.safetensors", dir);
    uint8_t *d;
    size_t n;
    cr_assert(pl_fixture_read_file(s1, &d, &n));
    cr_assert(pl_fixture_write_file(s2, d, n));
    free(d);
    expect_fail(dir, PL_ERR_FORMAT, "duplicated", "model.embed_tokens.weight");
    json_decref(orig);
    pl_fixture_remove_dir(dir);
    PL_ASSERT_NO_LEAKS();
}

/* One config.json edit and the expected failure. */
typedef struct config_case {
    const char *key;
    const char *value; /* JSON text; NULL deletes the key */
    pl_status code;
    const char *needle;
} config_case;

Test(hostile, config_json_attacks) {
    const config_case cases[] = {
        {"hidden_size", NULL, PL_ERR_FORMAT, "\"hidden_size\" is missing"},
        {"hidden_size", "\"64\"", PL_ERR_FORMAT, "\"hidden_size\" is not an integer"},
        {"hidden_size", "8.5", PL_ERR_FORMAT, "hidden_size"},
        {"hidden_size", "7", PL_ERR_FORMAT, "head_dim"},
        {"num_hidden_layers", "1000000000", PL_ERR_FORMAT, "num_hidden_layers = 1000000000"},
        {"num_hidden_layers", "1e30", PL_ERR_FORMAT, "num_hidden_layers"},
        {"num_hidden_layers", "-2", PL_ERR_FORMAT, "num_hidden_layers = -2"},
        {"intermediate_size", "1099511627776", PL_ERR_FORMAT, "intermediate_size"},
        {"num_attention_heads", "0", PL_ERR_FORMAT, "num_attention_heads"},
        {"num_key_value_heads", "3", PL_ERR_FORMAT, "not a multiple of num_key_value_heads = 3"},
        {"vocab_size", "4194305", PL_ERR_FORMAT, "vocab_size"},
        {"max_position_embeddings", "0", PL_ERR_FORMAT, "max_position_embeddings = 0"},
        {"rms_norm_eps", "-1", PL_ERR_FORMAT, "rms_norm_eps = -1"},
        {"rms_norm_eps", "\"small\"", PL_ERR_FORMAT, "rms_norm_eps"},
        {"rope_theta", "0", PL_ERR_FORMAT, "rope_theta"},
        {"rope_theta", "1e300", PL_ERR_FORMAT, "rope_theta"},
        {"eos_token_id", "6", PL_ERR_FORMAT, "eos_token_id = 6"},
        {"eos_token_id", "[]", PL_ERR_FORMAT, "eos_token_id"},
        {"eos_token_id", "[2, \"</s>\"]", PL_ERR_FORMAT, "\"eos_token_id\"[1]"},
        {"head_dim", "3", PL_ERR_FORMAT, "head_dim = 3 must be even"},
        {"head_dim", "\"2\"", PL_ERR_FORMAT, "\"head_dim\" is not an integer"},
        {"architectures", "[\"Qwen2ForCausalLM\"]", PL_ERR_FORMAT,
         "model_type llama does not match architecture Qwen2ForCausalLM"},
        {"architectures", "[\"LlamaForCausalLM\", \"Qwen3ForCausalLM\"]", PL_ERR_FORMAT,
         "lists both"},
        {"architectures", "[\"Qwen2MoeForCausalLM\"]", PL_ERR_UNSUPPORTED, "Qwen3ForCausalLM"},
        {"attention_bias", "\"yes\"", PL_ERR_FORMAT, "\"attention_bias\" is not a boolean"},
        {"mlp_bias", "true", PL_ERR_UNSUPPORTED, "mlp_bias"},
        {"tie_word_embeddings", "\"true\"", PL_ERR_FORMAT, "tie_word_embeddings"},
        {"bos_token_id", "\"<s>\"", PL_ERR_FORMAT, "bos_token_id"},
        {"tie_word_embeddings", "1", PL_ERR_FORMAT, "tie_word_embeddings"},
        {"architectures", "[\"GPT2LMHeadModel\"]", PL_ERR_UNSUPPORTED, "GPT2LMHeadModel"},
        {"architectures", "\"LlamaForCausalLM\"", PL_ERR_FORMAT, "architectures"},
        {"model_type", "\"gpt2\"", PL_ERR_UNSUPPORTED, "gpt2"},
        {"hidden_act", "\"gelu\"", PL_ERR_UNSUPPORTED, "hidden_act"},
        {"attention_bias", "true", PL_ERR_UNSUPPORTED, "attention_bias"},
        {"rope_scaling", "{\"type\": \"yarn\", \"factor\": 4}", PL_ERR_UNSUPPORTED, "yarn"},
        {"rope_scaling", "{\"rope_type\": \"llama3\", \"factor\": 8}", PL_ERR_FORMAT,
         "low_freq_factor"},
        {"rope_scaling", "{\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 4, "
                         "\"high_freq_factor\": 1, \"original_max_position_embeddings\": 8192}",
         PL_ERR_FORMAT, "high_freq_factor"},
        {"rope_scaling", "{\"type\": \"linear\", \"factor\": 0}", PL_ERR_FORMAT, "factor"},
        {"rope_scaling", "{\"factor\": 2}", PL_ERR_FORMAT, "rope_type"},
        {"rope_scaling", "[]", PL_ERR_FORMAT, "rope_scaling"},
    };
    const char *dir = pl_test_tmpdir();
    make_hf(dir, small_config(false), 1);
    char cfg[600];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    json_t *orig = read_json(cfg);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *j = json_deep_copy(orig);
        if (cases[i].value) {
            json_error_t err;
            json_t *v = json_loads(cases[i].value, JSON_DECODE_ANY, &err);
            cr_assert_not_null(v, "case %zu: %s", i, err.text);
            json_object_set_new(j, cases[i].key, v);
        } else {
            json_object_del(j, cases[i].key);
        }
        write_json(cfg, j);
        expect_fail(dir, cases[i].code, cases[i].needle, "config.json");
    }
    /* no architecture at all, a non-object, not JSON */
    json_t *j = json_deep_copy(orig);
    json_object_del(j, "architectures");
    json_object_del(j, "model_type");
    write_json(cfg, j);
    expect_fail(dir, PL_ERR_FORMAT, "architectures");
    cr_assert(pl_fixture_write_file(cfg, "[1]", 3));
    expect_fail(dir, PL_ERR_FORMAT, "not a JSON object");
    cr_assert(pl_fixture_write_file(cfg, "\0\1\2", 3));
    expect_fail(dir, PL_ERR_FORMAT, "config.json");
    write_json(cfg, orig);
    expect_ok(dir);
    pl_fixture_remove_dir(dir);
    PL_ASSERT_NO_LEAKS();
}

/* A small model of another architecture: Qwen2 (biases), Qwen3 (head_dim 4, q/k norms) or
 * Mistral, vocabulary 40 (room for an EOS list). */
static pl_model_config family_config(pl_arch arch) {
    pl_model_config c = small_config(false);
    c.arch = arch;
    c.vocab_size = 40;
    c.rope_layout = 1;
    if (arch == PL_ARCH_QWEN3) c.head_dim = 4; /* q: 4 heads x 4 = 16, dim 8 */
    if (arch == PL_ARCH_MISTRAL) c.sliding_window = 2;
    return c;
}

/* model.safetensors of dir with header entry `name` replaced by `entry` (JSON text; NULL
 * deletes it), the data kept. */
static void edit_tensor(const char *dir, const json_t *orig, const uint8_t *data, size_t n_data,
                        const char *name, const char *entry) {
    json_t *h = json_deep_copy(orig);
    if (entry) {
        json_error_t err;
        json_t *v = json_loads(entry, 0, &err);
        cr_assert_not_null(v, "%s", err.text);
        json_object_set_new(h, name, v);
    } else {
        json_object_del(h, name);
    }
    write_st(pl_fixture_path(dir, "model.safetensors"), h, data, n_data);
}

/* The data_offsets begin of tensor name in a header. */
static long long begin_of(const json_t *h, const char *name) {
    return json_integer_value(
        json_array_get(json_object_get(json_object_get(h, name), "data_offsets"), 0));
}

Test(hostile, architecture_attacks) {
    const char *dir = pl_test_tmpdir();
    char st[600];
    uint8_t *data;
    size_t n_data;

    /* Qwen2: its biases are required, and shaped as the config says */
    make_hf(dir, family_config(PL_ARCH_QWEN2), 1);
    snprintf(st, sizeof st, "%s", pl_fixture_path(dir, "model.safetensors"));
    expect_ok(dir);
    json_t *orig = read_st(st, &data, &n_data);
    edit_tensor(dir, orig, data, n_data, "model.layers.1.self_attn.k_proj.bias", NULL);
    expect_fail(dir, PL_ERR_NOT_FOUND, "missing tensor model.layers.1.self_attn.k_proj.bias");
    char entry[256];
    long long b = begin_of(orig, "model.layers.0.self_attn.q_proj.bias");
    snprintf(entry, sizeof entry, "{\"dtype\":\"F32\",\"shape\":[1,8],\"data_offsets\":[%lld,%lld]}",
             b, b + 32);
    edit_tensor(dir, orig, data, n_data, "model.layers.0.self_attn.q_proj.bias", entry);
    expect_fail(dir, PL_ERR_FORMAT, "model.layers.0.self_attn.q_proj.bias", "[1, 8]",
                "config needs [8]");
    write_st(st, json_deep_copy(orig), data, n_data);
    expect_ok(dir);
    /* the same files said to be Llama's: a bias Llama does not have */
    char cfg[600];
    snprintf(cfg, sizeof cfg, "%s", pl_fixture_path(dir, "config.json"));
    json_t *qcfg = read_json(cfg);
    json_t *j = json_deep_copy(qcfg);
    json_object_set_new(j, "architectures", json_pack("[s]", "LlamaForCausalLM"));
    json_object_set_new(j, "model_type", json_string("llama"));
    write_json(cfg, j);
    expect_fail(dir, PL_ERR_FORMAT, "model.safetensors", "_proj.bias",
                "not part of a LlamaForCausalLM model");
    const struct {
        const char *key, *value;
        pl_status code;
        const char *needle;
    } qwen_cases[] = {
        {"use_sliding_window", "true", PL_ERR_UNSUPPORTED, "use_sliding_window = true"},
        {"use_sliding_window", "1", PL_ERR_FORMAT, "\"use_sliding_window\" is not a boolean"},
        {"attention_bias", "true", PL_OK, NULL}, /* what Qwen2 has anyway */
        {"eos_token_id", "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17]",
         PL_ERR_FORMAT, "more than 16"},
        {"eos_token_id", "[2, 40]", PL_ERR_FORMAT, "eos_token_id = 40 is outside the vocabulary"},
    };
    for (size_t i = 0; i < sizeof qwen_cases / sizeof qwen_cases[0]; i++) {
        j = json_deep_copy(qcfg);
        json_object_set_new(j, qwen_cases[i].key, json_loads(qwen_cases[i].value,
                                                             JSON_DECODE_ANY, NULL));
        write_json(cfg, j);
        if (qwen_cases[i].code == PL_OK) expect_ok(dir);
        else expect_fail(dir, qwen_cases[i].code, qwen_cases[i].needle, "config.json");
    }
    /* generation_config.json: read when present, named in its errors */
    write_json(cfg, json_deep_copy(qcfg));
    char gen[600];
    snprintf(gen, sizeof gen, "%s", pl_fixture_path(dir, "generation_config.json"));
    cr_assert(pl_fixture_write_file(gen, "{\"eos_token_id\": [2, 39]}", 25));
    pl_model *m;
    cr_assert_eq(try_load(dir, &m), PL_OK, "%s", pl_last_error());
    cr_assert_eq(m->cfg.n_eos, 2);
    cr_assert_eq(m->cfg.eos_ids[1], 39);
    pl_model_free(m);
    const char *const bad_gen[] = {"{\"eos_token_id\": [2, 40]}", "{\"eos_token_id\": \"x\"}",
                                   "[2]", "{\"eos_token_id\": 2"};
    for (size_t i = 0; i < sizeof bad_gen / sizeof bad_gen[0]; i++) {
        cr_assert(pl_fixture_write_file(gen, bad_gen[i], strlen(bad_gen[i])));
        expect_fail(dir, PL_ERR_FORMAT, "generation_config.json");
    }
    json_decref(qcfg);
    json_decref(orig);
    free(data);
    pl_fixture_remove_dir(dir);

    /* Qwen3: q/k norms of head_dim, head_dim given apart from hidden_size */
    dir = pl_test_tmpdir();
    make_hf(dir, family_config(PL_ARCH_QWEN3), 1);
    snprintf(st, sizeof st, "%s", pl_fixture_path(dir, "model.safetensors"));
    snprintf(cfg, sizeof cfg, "%s", pl_fixture_path(dir, "config.json"));
    expect_ok(dir);
    orig = read_st(st, &data, &n_data);
    edit_tensor(dir, orig, data, n_data, "model.layers.0.self_attn.k_norm.weight", NULL);
    expect_fail(dir, PL_ERR_NOT_FOUND, "missing tensor model.layers.0.self_attn.k_norm.weight");
    b = begin_of(orig, "model.layers.1.self_attn.q_norm.weight");
    snprintf(entry, sizeof entry, "{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[%lld,%lld]}",
             b, b + 8);
    edit_tensor(dir, orig, data, n_data, "model.layers.1.self_attn.q_norm.weight", entry);
    expect_fail(dir, PL_ERR_FORMAT, "model.layers.1.self_attn.q_norm.weight", "shape [2]",
                "config needs [4]");
    write_st(st, json_deep_copy(orig), data, n_data);
    expect_ok(dir);
    qcfg = read_json(cfg);
    j = json_deep_copy(qcfg);
    json_object_del(j, "head_dim"); /* then 8 / 4 = 2: the weights say otherwise */
    write_json(cfg, j);
    expect_fail(dir, PL_ERR_FORMAT, "self_attn.q_proj.weight", "config needs [8, 8]");
    j = json_deep_copy(qcfg);
    json_object_set_new(j, "attention_bias", json_true());
    write_json(cfg, j);
    expect_fail(dir, PL_ERR_UNSUPPORTED, "attention_bias", "Qwen3ForCausalLM");
    json_decref(qcfg);
    json_decref(orig);
    free(data);
    pl_fixture_remove_dir(dir);

    /* Mistral: the window is an integer, null or absent */
    dir = pl_test_tmpdir();
    make_hf(dir, family_config(PL_ARCH_MISTRAL), 1);
    snprintf(cfg, sizeof cfg, "%s", pl_fixture_path(dir, "config.json"));
    cr_assert_eq(try_load(dir, &m), PL_OK, "%s", pl_last_error());
    cr_assert_eq(m->cfg.sliding_window, 2);
    pl_model_free(m);
    qcfg = read_json(cfg);
    const char *const windows[] = {"\"4096\"", "-1", "1e3"};
    for (size_t i = 0; i < 3; i++) {
        j = json_deep_copy(qcfg);
        json_object_set_new(j, "sliding_window", json_loads(windows[i], JSON_DECODE_ANY, NULL));
        write_json(cfg, j);
        expect_fail(dir, PL_ERR_FORMAT, "sliding_window", "config.json");
    }
    j = json_deep_copy(qcfg);
    json_object_set_new(j, "sliding_window", json_null());
    write_json(cfg, j);
    cr_assert_eq(try_load(dir, &m), PL_OK, "%s", pl_last_error());
    cr_assert_eq(m->cfg.sliding_window, 0, "null: no window");
    pl_model_free(m);
    json_decref(qcfg);
    pl_fixture_remove_dir(dir);
    PL_ASSERT_NO_LEAKS();
}

// ----------------------------------------------------------------------------
// random damage and allocation failure

Test(hostile, random_header_corruption_never_crashes) {
    pl_test_rng r;
    pl_test_rng_seed(&r, pl_test_run_seed("hostile.corruption"));
    const char *dir = pl_test_tmpdir();
    char bin[600], v1[600], hf[600], st[700];
    snprintf(bin, sizeof bin, "%s/m.bin", dir);
    snprintf(v1, sizeof v1, "%s/v1.bin", dir);
    snprintf(hf, sizeof hf, "%s/hf", dir);
    pl_model_config c = small_config(false);
    pl_model *m = pl_fixture_model(&c, 3);
    cr_assert(pl_fixture_write_llama2c(m, bin));
    cr_assert(pl_fixture_write_ak42(m, v1));
    cr_assert(pl_fixture_write_hf(m, hf, NULL));
    pl_model_free(m);
    snprintf(st, sizeof st, "%s/model.safetensors", hf);
    const char *files[] = {bin, v1, st};
    const char *load_paths[] = {bin, v1, hf};
    size_t regions[] = {28, 40, 0}; /* bytes worth hitting: the headers */
    int outcomes[3][2] = {{0}};
    for (size_t f = 0; f < 3; f++) {
        uint8_t *orig;
        size_t n;
        cr_assert(pl_fixture_read_file(files[f], &orig, &n));
        size_t region = regions[f];
        if (!region) { /* safetensors: the length field and the JSON header */
            uint64_t h = 0;
            for (int b = 7; b >= 0; b--) h = h << 8 | orig[b];
            region = 8 + (size_t)h;
        }
        uint8_t *buf = malloc(n);
        for (int it = 0; it < 400; it++) {
            memcpy(buf, orig, n);
            int flips = 1 + (int)pl_test_rng_below(&r, 4);
            for (int k = 0; k < flips; k++) {
                size_t at = pl_test_rng_below(&r, (uint32_t)region);
                buf[at] = it % 2 ? (uint8_t)pl_test_rng_u64(&r)
                                 : (uint8_t)(buf[at] ^ (1u << pl_test_rng_below(&r, 8)));
            }
            /* in place, same size: rewriting through O_TRUNC makes ext4 flush on close */
            cr_assert(pl_fixture_overwrite(files[f], 0, buf, region));
            pl_model *got = NULL;
            pl_status s = try_load(load_paths[f], &got);
            cr_assert(s == PL_OK || s == PL_ERR_FORMAT || s == PL_ERR_UNSUPPORTED ||
                          s == PL_ERR_NOT_FOUND,
                      "%s iteration %d: %s (%s)", files[f], it, pl_status_name(s),
                      pl_last_error());
            if (s != PL_OK) cr_assert_neq(pl_last_error()[0], '\0');
            outcomes[f][s == PL_OK]++;
            pl_model_free(got);
        }
        cr_assert(pl_fixture_overwrite(files[f], 0, orig, region));
        free(buf);
        free(orig);
    }
    /* header damage is nearly always detected (a flip in a float of a JSON number can pass) */
    for (int f = 0; f < 3; f++) cr_assert_gt(outcomes[f][0], 300, "file %d", f);
    pl_fixture_remove_dir(dir);
    PL_ASSERT_NO_LEAKS();
}

Test(hostile, allocation_failure_at_every_allocation) {
    const char *dir = pl_test_tmpdir();
    char bin[600], v1[600], hf1[600], hf3[600];
    snprintf(bin, sizeof bin, "%s/m.bin", dir);
    snprintf(v1, sizeof v1, "%s/v1.bin", dir);
    snprintf(hf1, sizeof hf1, "%s/hf1", dir);
    snprintf(hf3, sizeof hf3, "%s/hf3", dir);
    pl_model_config c = small_config(false);
    pl_model *m = pl_fixture_model(&c, 4);
    cr_assert(pl_fixture_write_llama2c(m, bin));
    cr_assert(pl_fixture_write_ak42(m, v1));
    cr_assert(pl_fixture_write_hf(m, hf1, &(pl_fixture_hf_options){.dtype = PL_DTYPE_BF16}));
    cr_assert(pl_fixture_write_hf(m, hf3, &(pl_fixture_hf_options){.n_shards = 3}));
    /* the other architectures' tensors (biases, q/k norms) and generation_config.json */
    char q2[600], q3[600];
    snprintf(q2, sizeof q2, "%s/qwen2", dir);
    snprintf(q3, sizeof q3, "%s/qwen3", dir);
    pl_model_config c2 = family_config(PL_ARCH_QWEN2), c3 = family_config(PL_ARCH_QWEN3);
    c2.eos_ids[1] = 7, c2.n_eos = 2;
    pl_model *m2 = pl_fixture_model(&c2, 6), *m3 = pl_fixture_model(&c3, 7);
    cr_assert(pl_fixture_write_hf(m2, q2, &(pl_fixture_hf_options){.dtype = PL_DTYPE_BF16}));
    cr_assert(pl_fixture_write_hf(m3, q3, NULL));
    const char *paths[] = {bin, v1, hf1, hf3, "dummy:tiny", q2, q3};
    pl_dtype dts[] = {PL_DTYPE_F16, PL_DTYPE_AUTO, PL_DTYPE_AUTO, PL_DTYPE_BF16, PL_DTYPE_BF16,
                      PL_DTYPE_AUTO, PL_DTYPE_F16};
    const pl_model *refs[] = {m, m, m, m, NULL, m2, m3};
    for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++) {
        int n_fail = 0;
        pl_model_load_options o = {dts[p], 0, 0};
        pl_model *got = NULL;
        PL_ALLOC_SWEEP(n_fail, n,
                       (got = (pl_model *)(uintptr_t)1, pl_model_load(paths[p], &o, &got)),
                       cr_assert_null(got, "%s", paths[p]););
        cr_assert(!refs[p] || pl_fixture_compare(refs[p], got, 1e-2f, 1e-2f), "%s", paths[p]);
        pl_model_free(got);
        cr_assert_gt(n_fail, 2, "%s: the sweep reached no allocation", paths[p]);
    }
    pl_model_free(m);
    pl_model_free(m2);
    pl_model_free(m3);
    pl_fixture_remove_dir(dir);
    PL_ASSERT_NO_LEAKS();
}

/* jansson allocates through util/alloc.h, so the sweep reaches allocations inside the JSON
 * parses (config.json, the index, the safetensors headers), and each surfaces as
 * PL_ERR_OUT_OF_MEMORY, not as malformed JSON. */
Test(hostile, allocation_failure_inside_json_parsing) {
    const char *dir = pl_test_tmpdir();
    char hf[600];
    snprintf(hf, sizeof hf, "%s/hf", dir);
    pl_model_config c = small_config(true);
    pl_model *m = pl_fixture_model(&c, 5);
    cr_assert(pl_fixture_write_hf(m, hf, &(pl_fixture_hf_options){.n_shards = 2}));
    pl_model_free(m);
    int in_json[3] = {0}; /* failures in config.json, the index, a safetensors header */
    int n_fail = 0;
    pl_model *got = NULL;
    PL_ALLOC_SWEEP(n_fail, n, (got = NULL, pl_model_load(hf, NULL, &got)), {
        const char *e = pl_last_error();
        if (strstr(e, "out of memory parsing")) {
            if (strstr(e, "config.json")) in_json[0]++;
            else if (strstr(e, "index.json")) in_json[1]++;
            else if (strstr(e, "header JSON")) in_json[2]++;
        }
    });
    pl_model_free(got);
    for (int i = 0; i < 3; i++)
        cr_assert_gt(in_json[i], 0, "no failure inside JSON document %d was reached", i);
    pl_fixture_remove_dir(dir);
    PL_ASSERT_NO_LEAKS();
}
