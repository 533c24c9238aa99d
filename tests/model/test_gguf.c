/*
 * tests/model/test_gguf.c - GGUF files: the container reader on hand-built files (every
 * length, count, dim, offset and type attacked, each refused with the file and the key,
 * tensor or byte), the model writer and loader round trip (random llama2.c-like configs and
 * the four families, F32/F16/BF16, q/k permuted to llama.cpp's layout and back, Llama 3 and
 * linear RoPE scaling), zero-copy mapping, --dtype conversion, refusals of tensors a model
 * lacks, needs, or stores in a type this build has no weight type for, a truncation at every
 * byte, and an allocation-failure sweep.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "model/model_internal.h"
#include "model_fixtures.h"
#include "util/alloc.h"

// ----------------------------------------------------------------------------
// a byte builder for hand-made files (written from the format, not from the writer)

typedef struct bb {
    uint8_t *p;
    size_t n, cap;
} bb;

static void bput(bb *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void bu32(bb *b, uint32_t v) {
    uint8_t x[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    bput(b, x, 4);
}
static void bu64(bb *b, uint64_t v) {
    bu32(b, (uint32_t)v);
    bu32(b, (uint32_t)(v >> 32));
}
static void bstr(bb *b, const char *s) {
    bu64(b, strlen(s));
    bput(b, s, strlen(s));
}
static void bhead(bb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    bput(b, "GGUF", 4);
    bu32(b, version);
    bu64(b, n_tensors);
    bu64(b, n_kv);
}
static void bkv_u32(bb *b, const char *k, uint32_t v) {
    bstr(b, k);
    bu32(b, PL_GGUF_U32);
    bu32(b, v);
}
static void btensor(bb *b, const char *name, int n_dims, const uint64_t *ne, uint32_t type,
                    uint64_t off) {
    bstr(b, name);
    bu32(b, (uint32_t)n_dims);
    for (int d = 0; d < n_dims; d++) bu64(b, ne[d]);
    bu32(b, type);
    bu64(b, off);
}
static void bpad(bb *b, size_t a) {
    while (b->n % a) bput(b, "", 1);
}

/* Parses b; asserts code and that the message holds each needle. */
static void expect_parse(const bb *b, pl_status code, const char *n1, const char *n2) {
    pl_gguf g;
    pl_clear_error();
    pl_status s = pl_gguf_parse(b->p, b->n, "hand.gguf", &g);
    cr_assert_eq(s, code, "got %s (%s), want %s", pl_status_name(s), pl_last_error(),
                 pl_status_name(code));
    if (s == PL_OK) {
        pl_gguf_free(&g);
        return;
    }
    cr_assert(strstr(pl_last_error(), "hand.gguf"), "%s", pl_last_error());
    if (n1) cr_assert(strstr(pl_last_error(), n1), "\"%s\" lacks \"%s\"", pl_last_error(), n1);
    if (n2) cr_assert(strstr(pl_last_error(), n2), "\"%s\" lacks \"%s\"", pl_last_error(), n2);
}

/* A valid two-tensor file: a u32, a string, an f32 array, a nested array, two F32 tensors. */
static bb valid_file(void) {
    bb b = {0};
    bhead(&b, 3, 2, 4);
    bkv_u32(&b, "a.u32", 7);
    bstr(&b, "a.str");
    bu32(&b, PL_GGUF_STRING);
    bstr(&b, "hello");
    bstr(&b, "a.arr");
    bu32(&b, PL_GGUF_ARRAY);
    bu32(&b, PL_GGUF_F32);
    bu64(&b, 2);
    bu32(&b, 0x3f800000u);
    bu32(&b, 0x40000000u);
    bstr(&b, "a.nested"); /* [[1], []] of u8: skipped, no accessor */
    bu32(&b, PL_GGUF_ARRAY);
    bu32(&b, PL_GGUF_ARRAY);
    bu64(&b, 2);
    bu32(&b, PL_GGUF_U8);
    bu64(&b, 1);
    bput(&b, "\1", 1);
    bu32(&b, PL_GGUF_U8);
    bu64(&b, 0);
    uint64_t ne[2] = {4, 2};
    btensor(&b, "t0", 2, ne, 0, 0);
    btensor(&b, "t1", 1, ne, 0, 32);
    bpad(&b, 32);
    for (int i = 0; i < 8 + 4; i++) bu32(&b, 0x3f800000u); /* t0: 32 bytes, t1: 16 at 32 */
    return b;
}

Test(gguf, reader_reads_a_hand_made_file) {
    bb b = valid_file();
    pl_gguf g;
    cr_assert_eq(pl_gguf_parse(b.p, b.n, "hand.gguf", &g), PL_OK, "%s", pl_last_error());
    cr_assert_eq(g.version, 3);
    cr_assert_eq(g.n_kv, 4);
    cr_assert_eq(g.n_tensors, 2);
    int64_t v;
    cr_assert_eq(pl_gguf_get_int(&g, "a.u32", true, 0, 0, 100, &v), PL_OK);
    cr_assert_eq(v, 7);
    cr_assert_eq(pl_gguf_get_int(&g, "a.u32", true, 0, 0, 6, &v), PL_ERR_FORMAT);
    cr_assert(strstr(pl_last_error(), "a.u32"));
    pl_gguf_str s;
    cr_assert_eq(pl_gguf_get_str(&g, "a.str", true, &s), PL_OK);
    cr_assert(pl_gguf_str_eq(s, "hello"));
    cr_assert_eq(pl_gguf_get_str(&g, "a.u32", true, &s), PL_ERR_FORMAT);
    cr_assert_eq(pl_gguf_get_str(&g, "missing", true, &s), PL_ERR_FORMAT);
    cr_assert(strstr(pl_last_error(), "missing"));
    const pl_gguf_kv *a;
    cr_assert_eq(pl_gguf_get_array(&g, "a.arr", PL_GGUF_F32, true, &a), PL_OK);
    cr_assert_eq(a->n, 2);
    cr_assert_float_eq(pl_gguf_array_float(a, 1), 2.0, 0);
    cr_assert_eq(pl_gguf_get_array(&g, "a.nested", PL_GGUF_U8, true, &a), PL_ERR_FORMAT);
    const pl_gguf_tensor *t = pl_gguf_tensor_find(&g, "t1");
    cr_assert_not_null(t);
    cr_assert_eq(t->n_bytes, 16);
    cr_assert_eq(t->data, b.p + g.data_offset + 32);
    cr_assert_null(pl_gguf_tensor_find(&g, "t2"));
    pl_gguf_free(&g);
    free(b.p);
}

Test(gguf, reader_truncated_at_every_byte) {
    bb b = valid_file();
    for (size_t k = 0; k < b.n; k++) {
        pl_gguf g;
        pl_status s = pl_gguf_parse(b.p, k, "hand.gguf", &g);
        cr_assert_eq(s, PL_ERR_FORMAT, "cut at %zu: %s", k, pl_last_error());
        cr_assert(strstr(pl_last_error(), "hand.gguf"));
    }
    free(b.p);
    PL_ASSERT_NO_LEAKS();
}

Test(gguf, reader_refuses_hostile_headers) {
    bb b = {0};
    bput(&b, "GGUX", 4);
    bu32(&b, 3);
    expect_parse(&b, PL_ERR_FORMAT, "magic", NULL);
    b.n = 0;
    bhead(&b, 1, 0, 0);
    expect_parse(&b, PL_ERR_UNSUPPORTED, "version 1", NULL);
    b.n = 0;
    bhead(&b, 0x03000000u, 0, 0); /* a big-endian file */
    expect_parse(&b, PL_ERR_UNSUPPORTED, "version", NULL);
    /* counts beyond what the bytes could hold fail before any allocation */
    b.n = 0;
    bhead(&b, 3, 0, UINT64_MAX);
    expect_parse(&b, PL_ERR_FORMAT, "keys", NULL);
    b.n = 0;
    bhead(&b, 3, (uint64_t)1 << 40, 0);
    expect_parse(&b, PL_ERR_FORMAT, "tensors", NULL);
    /* a key length past the end */
    b.n = 0;
    bhead(&b, 3, 0, 1);
    bu64(&b, UINT64_MAX);
    bput(&b, "abcdefghijklmnop", 16);
    expect_parse(&b, PL_ERR_FORMAT, "key 0", NULL);
    /* a string value longer than the file */
    b.n = 0;
    bhead(&b, 3, 0, 1);
    bstr(&b, "k.s");
    bu32(&b, PL_GGUF_STRING);
    bu64(&b, (uint64_t)1 << 62);
    bput(&b, "abcdefghijklmnop", 16);
    expect_parse(&b, PL_ERR_FORMAT, "k.s", NULL);
    /* arrays claiming more elements than bytes, of fixed and of string elements */
    for (int et = 0; et < 2; et++) {
        b.n = 0;
        bhead(&b, 3, 0, 1);
        bstr(&b, "k.arr");
        bu32(&b, PL_GGUF_ARRAY);
        bu32(&b, et ? PL_GGUF_STRING : PL_GGUF_U64);
        bu64(&b, UINT64_MAX / 4);
        bput(&b, "abcdefghijklmnopqrstuvwxyz", 26);
        expect_parse(&b, PL_ERR_FORMAT, "k.arr", "do not fit");
    }
    /* unknown value type, unknown element type, arrays nested too deep */
    b.n = 0;
    bhead(&b, 3, 0, 1);
    bstr(&b, "k.t");
    bu32(&b, 13);
    expect_parse(&b, PL_ERR_FORMAT, "k.t", "not a GGUF type");
    b.n = 0;
    bhead(&b, 3, 0, 1);
    bstr(&b, "k.t");
    bu32(&b, PL_GGUF_ARRAY);
    bu32(&b, 99);
    bu64(&b, 0);
    expect_parse(&b, PL_ERR_FORMAT, "k.t", "element type");
    b.n = 0;
    bhead(&b, 3, 0, 1);
    bstr(&b, "k.deep");
    bu32(&b, PL_GGUF_ARRAY);
    for (int d = 0; d < 5; d++) {
        bu32(&b, PL_GGUF_ARRAY);
        bu64(&b, 1);
    }
    bu32(&b, PL_GGUF_U8);
    bu64(&b, 0);
    expect_parse(&b, PL_ERR_FORMAT, "k.deep", "nested");
    /* a duplicate key, an empty key */
    b.n = 0;
    bhead(&b, 3, 0, 2);
    bkv_u32(&b, "k.dup", 1);
    bkv_u32(&b, "k.dup", 2);
    expect_parse(&b, PL_ERR_FORMAT, "k.dup", "twice");
    b.n = 0;
    bhead(&b, 3, 0, 1);
    bkv_u32(&b, "", 1);
    expect_parse(&b, PL_ERR_FORMAT, "empty", NULL);
    /* alignment: a u32 power of two */
    uint32_t bad_align[] = {0, 3, 48};
    for (int i = 0; i < 3; i++) {
        b.n = 0;
        bhead(&b, 3, 0, 1);
        bkv_u32(&b, "general.alignment", bad_align[i]);
        expect_parse(&b, PL_ERR_FORMAT, "general.alignment", NULL);
    }
    free(b.p);
    PL_ASSERT_NO_LEAKS();
}

/* One tensor info (ne, type, offset) over 64 bytes of data. */
static void one_tensor(bb *b, const char *name, int n_dims, const uint64_t *ne, uint32_t type,
                       uint64_t off) {
    b->n = 0;
    bhead(b, 3, 1, 0);
    btensor(b, name, n_dims, ne, type, off);
    bpad(b, 32);
    for (int i = 0; i < 16; i++) bu32(b, 0);
}

Test(gguf, reader_refuses_hostile_tensors) {
    bb b = {0};
    uint64_t ok[2] = {4, 2};
    one_tensor(&b, "t", 2, ok, 0, 0);
    expect_parse(&b, PL_OK, NULL, NULL);
    uint64_t five[5] = {4, 2, 1, 1, 1};
    one_tensor(&b, "t", 5, five, 0, 0);
    expect_parse(&b, PL_ERR_FORMAT, "tensor t", "n_dims");
    one_tensor(&b, "t", 0, ok, 0, 0);
    expect_parse(&b, PL_ERR_FORMAT, "tensor t", "n_dims");
    uint64_t zero[2] = {4, 0};
    one_tensor(&b, "t", 2, zero, 0, 0);
    expect_parse(&b, PL_ERR_FORMAT, "tensor t", "ne[1]");
    uint64_t huge[2] = {(uint64_t)1 << 40, (uint64_t)1 << 40}; /* the product overflows */
    one_tensor(&b, "t", 2, huge, 0, 0);
    expect_parse(&b, PL_ERR_FORMAT, "tensor t", "overflows");
    uint64_t big[2] = {(uint64_t)1 << 30, 2}; /* fits in 64 bits, not in the file */
    one_tensor(&b, "t", 2, big, 0, 0);
    expect_parse(&b, PL_ERR_FORMAT, "tensor t", "past the end");
    one_tensor(&b, "t", 2, ok, 0, 8);
    expect_parse(&b, PL_ERR_FORMAT, "tensor t", "offset 8");
    one_tensor(&b, "t", 2, ok, 0, 64);
    expect_parse(&b, PL_ERR_FORMAT, "tensor t", "past the end");
    one_tensor(&b, "t", 2, ok, 0, UINT64_MAX - 31);
    expect_parse(&b, PL_ERR_FORMAT, "tensor t", NULL);
    one_tensor(&b, "t", 2, ok, 77, 0);
    expect_parse(&b, PL_ERR_UNSUPPORTED, "tensor t", "type id 77");
    uint64_t q[2] = {33, 1}; /* Q8_0 rows must be whole blocks of 32 */
    one_tensor(&b, "t", 2, q, 8, 0);
    expect_parse(&b, PL_ERR_FORMAT, "tensor t", "Q8_0");
    /* duplicates and overlaps */
    b.n = 0;
    bhead(&b, 3, 2, 0);
    btensor(&b, "same", 2, ok, 0, 0);
    btensor(&b, "same", 2, ok, 0, 32);
    bpad(&b, 32);
    for (int i = 0; i < 16; i++) bu32(&b, 0);
    expect_parse(&b, PL_ERR_FORMAT, "same", "twice");
    b.n = 0;
    bhead(&b, 3, 2, 0);
    uint64_t long_t[1] = {16};
    btensor(&b, "a", 1, long_t, 0, 0);
    btensor(&b, "b", 1, ok, 0, 32);
    bpad(&b, 32);
    for (int i = 0; i < 16; i++) bu32(&b, 0);
    expect_parse(&b, PL_ERR_FORMAT, "overlap", NULL);
    /* a name with a NUL */
    b.n = 0;
    bhead(&b, 3, 1, 0);
    bu64(&b, 3);
    bput(&b, "a\0b", 3);
    bu32(&b, 1);
    bu64(&b, 4);
    bu32(&b, 0);
    bu64(&b, 0);
    expect_parse(&b, PL_ERR_FORMAT, "NUL", NULL);
    free(b.p);
    PL_ASSERT_NO_LEAKS();
}

Test(gguf, type_table_agrees_with_the_weight_types) {
    int mapped = 0;
    for (uint32_t id = 0; id < 64; id++) {
        const pl_gguf_type_info *ti = pl_gguf_type_info_of(id);
        if (!ti) continue;
        cr_assert_eq(pl_gguf_type_by_name(ti->name), ti);
        pl_wtype w = pl_gguf_wtype(ti);
        if (w == PL_WTYPE_NONE) continue;
        const pl_wtype_traits *tr = pl_wtype_traits_of(w);
        cr_assert_eq(tr->block_elems, ti->block_elems, "%s", ti->name);
        cr_assert_eq(tr->block_bytes, ti->block_bytes, "%s", ti->name);
        cr_assert_eq(pl_gguf_type_of_wtype(w), ti);
        mapped++;
    }
    /* every weight type has its GGUF row */
    for (int w = PL_WTYPE_NONE + 1; w < PL_WTYPE_COUNT; w++)
        if (pl_wtype_traits_of((pl_wtype)w))
            cr_assert_not_null(pl_gguf_type_of_wtype((pl_wtype)w), "%s",
                               pl_wtype_name((pl_wtype)w));
    cr_assert_geq(mapped, 3);
    cr_assert_eq(pl_gguf_type_info_of(0)->block_bytes, 4);
    cr_assert_eq(pl_gguf_type_by_name("q4_k")->block_bytes, 144);
    cr_assert_eq(pl_gguf_type_by_name("Q6_K")->block_bytes, 210);
    cr_assert_eq(pl_gguf_type_by_name("q8_0")->block_bytes, 34);
    cr_assert_eq(pl_gguf_type_by_name("Q4_0")->block_bytes, 18);
    cr_assert_eq(pl_gguf_type_by_name("Q5_K")->block_bytes, 176);
}

// ----------------------------------------------------------------------------
// models

static void save(const pl_model *m, pl_wtype type, const char *path) {
    pl_gguf_writer *w;
    cr_assert_eq(pl_gguf_writer_create(&w), PL_OK);
    cr_assert_eq(pl_model_save_gguf(m, type, w, path), PL_OK, "%s", pl_last_error());
    pl_gguf_writer_free(w);
}

static pl_status load(const char *path, pl_dtype dt, pl_model **out) {
    pl_model_load_options o = {dt, 0, 0};
    pl_clear_error();
    *out = (pl_model *)(uintptr_t)1;
    pl_status s = pl_model_load(path, &o, out);
    if (s != PL_OK) cr_assert_null(*out, "a failed load returned a model");
    return s;
}

static void same_config(const pl_model_config *a, const pl_model_config *b) {
    cr_assert_eq(a->arch, b->arch);
    cr_assert_eq(a->dim, b->dim);
    cr_assert_eq(a->hidden_dim, b->hidden_dim);
    cr_assert_eq(a->n_layers, b->n_layers);
    cr_assert_eq(a->n_heads, b->n_heads);
    cr_assert_eq(a->n_kv_heads, b->n_kv_heads);
    cr_assert_eq(a->head_dim, b->head_dim);
    cr_assert_eq(a->vocab_size, b->vocab_size);
    cr_assert_eq(a->max_seq_len, b->max_seq_len);
    cr_assert_float_eq(a->norm_eps, b->norm_eps, 0);
    cr_assert_float_eq(a->rope_theta, b->rope_theta, 0);
    cr_assert_eq(a->sliding_window, b->sliding_window);
    cr_assert_eq(a->tied_embeddings, b->tied_embeddings);
    cr_assert_eq(a->bos_id, b->bos_id);
    cr_assert_eq(a->n_eos, b->n_eos);
    for (int i = 0; i < a->n_eos; i++) cr_assert_eq(a->eos_ids[i], b->eos_ids[i]);
    /* the rotation itself: the same frequencies, however the scaling is spelt */
    float fa[PL_MODEL_MAX_HEAD_DIM / 2], fb[PL_MODEL_MAX_HEAD_DIM / 2];
    pl_model_rope_inv_freq(a, fa);
    pl_model_rope_inv_freq(b, fb);
    cr_assert(pl_allclose("inv_freq", fa, fb, (size_t)a->head_dim / 2, 0, 2e-5f));
}

/* Writes m as every float type, loads each back and compares. */
static void round_trip(const pl_model *m, const char *dir) {
    const pl_wtype types[] = {PL_WTYPE_F32, PL_WTYPE_F16, PL_WTYPE_BF16};
    const float tol[] = {0, 1e-3f, 8e-3f};
    for (int i = 0; i < 3; i++) {
        const char *path = pl_fixture_path(dir, "m.gguf");
        save(m, types[i], path);
        pl_model *got;
        cr_assert_eq(load(path, PL_DTYPE_AUTO, &got), PL_OK, "%s", pl_last_error());
        same_config(&m->cfg, &got->cfg);
        int want_layout = m->cfg.arch == PL_ARCH_QWEN2 || m->cfg.arch == PL_ARCH_QWEN3 ? 1 : 0;
        cr_assert_eq(got->cfg.rope_layout, want_layout);
        cr_assert_eq(pl_model_weight(got, PL_T_ATTN_Q, 0)->type, types[i]);
        cr_assert_eq(pl_model_weight(got, PL_T_ATTN_NORM, 0)->type, PL_WTYPE_F32,
                     "norms stay f32");
        cr_assert(pl_fixture_compare(m, got, tol[i] * 1e-2f, tol[i]), "%s",
                  pl_wtype_name(types[i]));
        pl_model_free(got);
    }
}

Test(gguf, random_models_round_trip, .timeout = 120) {
    const char *dir = pl_test_tmpdir();
    pl_test_rng r;
    pl_test_rng_seed(&r, 77);
    for (int k = 0; k < 12; k++) {
        pl_model_config c;
        pl_fixture_random_config(&r, &c);
        if (k % 3 == 1) c.n_eos = 0, c.bos_id = -1;
        if (k % 4 == 2) pl_fixture_set_rope_linear(&c, 2.5f);
        pl_model *m = pl_fixture_model(&c, 100 + (uint64_t)k);
        round_trip(m, dir);
        pl_model_free(m);
    }
    pl_fixture_remove_dir(dir);
    PL_ASSERT_NO_LEAKS();
}

Test(gguf, families_round_trip) {
    const char *dir = pl_test_tmpdir();
    for (int a = 0; a < PL_ARCH_COUNT; a++)
        for (int v = 0; v < 2; v++) {
            pl_model_config c;
            pl_fixture_family_config((pl_arch)a, v, &c);
            if (a == PL_ARCH_MISTRAL && v) c.sliding_window = 16;
            pl_model *m = pl_fixture_model(&c, 5 + (uint64_t)a);
            round_trip(m, dir);
            pl_model_free(m);
        }
    /* Llama 3 scaling with Llama 3.1's own numbers, at a real head size */
    pl_model_config c;
    pl_fixture_family_config(PL_ARCH_LLAMA, 1, &c);
    c.head_dim = 128, c.n_heads = 2, c.n_kv_heads = 1, c.dim = 256;
    pl_fixture_set_rope_llama3(&c, 8.0f, 1.0f, 4.0f, 8192);
    pl_model *m = pl_fixture_model(&c, 3);
    round_trip(m, dir);
    pl_model_free(m);
    pl_fixture_remove_dir(dir);
    PL_ASSERT_NO_LEAKS();
}

Test(gguf, rope_factors_that_no_scaling_gives_are_refused) {
    pl_model_config c;
    pl_fixture_family_config(PL_ARCH_LLAMA, 0, &c);
    float f[4] = {1.0f, 3.0f, 1.5f, 8.0f}; /* not monotone: no clamped line gives it */
    cr_assert_eq(pl_model_rope_from_factors(&c, f, 8192, "x.gguf"), PL_ERR_UNSUPPORTED);
    cr_assert(strstr(pl_last_error(), "rope_freqs"));
    float g[4] = {1.0f, 1.0f, 0.0f, 1.0f};
    cr_assert_eq(pl_model_rope_from_factors(&c, g, 8192, "x.gguf"), PL_ERR_FORMAT);
}

/* Whether p lies inside one of m's own heap blocks (a copy) rather than a mapping. */
static bool owned(const pl_model *m, const void *p) {
    const pl_model_backing *b = m->priv;
    for (size_t i = 0; i < b->n_files; i++)
        if ((const uint8_t *)p >= b->files[i].data &&
            (const uint8_t *)p < b->files[i].data + b->files[i].size)
            return false;
    return true;
}

Test(gguf, mapped_without_copy_and_converted_on_request) {
    const char *dir = pl_test_tmpdir();
    pl_model_config c;
    pl_fixture_family_config(PL_ARCH_QWEN2, 1, &c);
    pl_model *m = pl_fixture_model(&c, 1);
    const char *path = pl_fixture_path(dir, "q.gguf");
    save(m, PL_WTYPE_F16, path);
    pl_model *got;
    cr_assert_eq(load(path, PL_DTYPE_AUTO, &got), PL_OK);
    cr_assert(!owned(got, pl_model_weight(got, PL_T_ATTN_Q, 1)->data), "f16 read in place");
    cr_assert(!owned(got, pl_model_weight(got, PL_T_ATTN_Q_BIAS, 1)->data), "f32 in place");
    pl_model_free(got);
    cr_assert_eq(load(path, PL_DTYPE_BF16, &got), PL_OK);
    cr_assert_eq(pl_model_weight(got, PL_T_FFN_UP, 0)->type, PL_WTYPE_BF16);
    cr_assert(owned(got, pl_model_weight(got, PL_T_FFN_UP, 0)->data));
    cr_assert_eq(pl_model_weight(got, PL_T_FFN_NORM, 0)->type, PL_WTYPE_F32);
    cr_assert(pl_fixture_compare(m, got, 1e-4f, 1e-2f));
    pl_model_free(got);
    /* the memory limit is checked from the tensor directory */
    pl_model_load_options o = {PL_DTYPE_AUTO, 0, 0};
    got = NULL;
    cr_assert_eq(pl_model_load_within(path, &o, 1000, &got), PL_ERR_OUT_OF_MEMORY);
    cr_assert(strstr(pl_last_error(), "q.gguf"));
    pl_model_free(m);
    pl_fixture_remove_dir(dir);
    PL_ASSERT_NO_LEAKS();
}

// ----------------------------------------------------------------------------
// rewriting a valid file with one change

typedef struct edit {
    const char *drop_key;    /* leave this key out */
    const char *drop_tensor; /* leave this tensor out */
    const char *rename_from, *rename_to;
    const char *retype;      /* this tensor as Q2_K (zero data of that size), a GGUF type
                                without a weight type here */
    const char *extra;       /* add this tensor (a copy of attn_norm of layer 0's shape) */
    const char *set_u32_key; /* replace this key by set_u32 */
    uint32_t set_u32;
} edit;

static void rewrite(const char *src, const char *dst, const edit *e) {
    uint8_t *data;
    size_t n;
    cr_assert(pl_fixture_read_file(src, &data, &n));
    pl_gguf g;
    cr_assert_eq(pl_gguf_parse(data, n, src, &g), PL_OK);
    pl_gguf_writer *w;
    cr_assert_eq(pl_gguf_writer_create(&w), PL_OK);
    for (size_t i = 0; i < g.n_kv; i++) {
        const pl_gguf_kv *kv = &g.kv[i];
        if (e->drop_key && pl_gguf_str_eq(kv->key, e->drop_key)) continue;
        if (e->set_u32_key && pl_gguf_str_eq(kv->key, e->set_u32_key)) continue;
        cr_assert_eq(pl_gguf_add_kv_copy(w, kv), PL_OK);
    }
    if (e->set_u32_key) cr_assert_eq(pl_gguf_add_u32(w, e->set_u32_key, e->set_u32), PL_OK);
    void *zeros = calloc(1, 1 << 20);
    for (size_t i = 0; i < g.n_tensors; i++) {
        const pl_gguf_tensor *t = &g.tensors[i];
        char name[300];
        snprintf(name, sizeof name, "%.*s", (int)t->name.n, t->name.p);
        if (e->drop_tensor && strcmp(name, e->drop_tensor) == 0) continue;
        const char *out = e->rename_from && strcmp(name, e->rename_from) == 0 ? e->rename_to
                                                                               : name;
        if (e->retype && strcmp(name, e->retype) == 0) {
            uint64_t ne[2] = {256, t->ne[1]};
            cr_assert_eq(pl_gguf_add_tensor(w, out, pl_gguf_type_by_name("Q2_K"), t->n_dims, ne,
                                            zeros), PL_OK);
            continue;
        }
        cr_assert_eq(pl_gguf_add_tensor(w, out, t->type, t->n_dims, t->ne, t->data), PL_OK);
        if (e->extra && strcmp(name, "blk.0.attn_norm.weight") == 0)
            cr_assert_eq(pl_gguf_add_tensor(w, e->extra, t->type, t->n_dims, t->ne, t->data),
                         PL_OK);
    }
    cr_assert_eq(pl_gguf_writer_write(w, dst, NULL, NULL), PL_OK, "%s", pl_last_error());
    pl_gguf_writer_free(w);
    pl_gguf_free(&g);
    free(zeros);
    free(data);
}

static void expect_load_fail(const char *path, pl_status code, const char *n1, const char *n2) {
    pl_model *m;
    pl_status s = load(path, PL_DTYPE_AUTO, &m);
    cr_assert_eq(s, code, "got %s (%s), want %s", pl_status_name(s), pl_last_error(),
                 pl_status_name(code));
    cr_assert(strstr(pl_last_error(), path), "names the file: %s", pl_last_error());
    if (n1) cr_assert(strstr(pl_last_error(), n1), "\"%s\" lacks \"%s\"", pl_last_error(), n1);
    if (n2) cr_assert(strstr(pl_last_error(), n2), "\"%s\" lacks \"%s\"", pl_last_error(), n2);
}

Test(gguf, model_level_refusals) {
    const char *dir = pl_test_tmpdir();
    char src[600], bad[600];
    snprintf(src, sizeof src, "%s/src.gguf", dir);
    snprintf(bad, sizeof bad, "%s/bad.gguf", dir);
    pl_model_config c;
    pl_fixture_family_config(PL_ARCH_LLAMA, 1, &c);
    c.dim = 256, c.n_heads = 8, c.n_kv_heads = 2, c.head_dim = 32;
    pl_model *m = pl_fixture_model(&c, 2);
    save(m, PL_WTYPE_F32, src);
    pl_model_free(m);
    pl_model *ok;
    cr_assert_eq(load(src, PL_DTYPE_AUTO, &ok), PL_OK, "%s", pl_last_error());
    pl_model_free(ok);

    rewrite(src, bad, &(edit){.retype = "blk.1.ffn_up.weight"});
    expect_load_fail(bad, PL_ERR_UNSUPPORTED, "blk.1.ffn_up.weight",
                     "type Q2_K is not supported by this build");
    rewrite(src, bad, &(edit){.drop_tensor = "blk.1.attn_v.weight"});
    expect_load_fail(bad, PL_ERR_NOT_FOUND, "blk.1.attn_v.weight", NULL);
    rewrite(src, bad, &(edit){.drop_tensor = "token_embd.weight"});
    expect_load_fail(bad, PL_ERR_NOT_FOUND, "token_embd.weight", NULL);
    rewrite(src, bad, &(edit){.extra = "blk.0.attn_q.bias"});
    expect_load_fail(bad, PL_ERR_FORMAT, "blk.0.attn_q.bias", "not part of");
    rewrite(src, bad, &(edit){.extra = "blk.7.attn_norm.weight"});
    expect_load_fail(bad, PL_ERR_FORMAT, "blk.7.attn_norm.weight", "block_count");
    rewrite(src, bad, &(edit){.extra = "mystery.weight"});
    expect_load_fail(bad, PL_ERR_FORMAT, "mystery.weight", NULL);
    rewrite(src, bad, &(edit){.rename_from = "blk.0.attn_k.weight",
                              .rename_to = "blk.0.attn_kk.weight"});
    expect_load_fail(bad, PL_ERR_FORMAT, "blk.0.attn_kk.weight", "not part of");
    rewrite(src, bad, &(edit){.drop_key = "llama.embedding_length"});
    expect_load_fail(bad, PL_ERR_FORMAT, "llama.embedding_length", "missing");
    rewrite(src, bad, &(edit){.drop_key = "general.architecture"});
    expect_load_fail(bad, PL_ERR_FORMAT, "general.architecture", NULL);
    rewrite(src, bad, &(edit){.set_u32_key = "llama.block_count", .set_u32 = 1000000000});
    expect_load_fail(bad, PL_ERR_FORMAT, "llama.block_count", NULL);
    rewrite(src, bad, &(edit){.set_u32_key = "llama.attention.head_count_kv", .set_u32 = 3});
    expect_load_fail(bad, PL_ERR_FORMAT, "llama.attention.head_count_kv", NULL);
    rewrite(src, bad, &(edit){.set_u32_key = "llama.embedding_length", .set_u32 = 128});
    expect_load_fail(bad, PL_ERR_FORMAT, "token_embd.weight", "ne");
    rewrite(src, bad, &(edit){.set_u32_key = "llama.rope.dimension_count", .set_u32 = 16});
    expect_load_fail(bad, PL_ERR_UNSUPPORTED, "partial rotary", NULL);
    rewrite(src, bad, &(edit){.set_u32_key = "llama.expert_count", .set_u32 = 8});
    expect_load_fail(bad, PL_ERR_UNSUPPORTED, "mixture-of-experts", NULL);
    rewrite(src, bad, &(edit){.set_u32_key = "tokenizer.ggml.eos_token_id", .set_u32 = 5000});
    expect_load_fail(bad, PL_ERR_FORMAT, "tokenizer.ggml.eos_token_id", NULL);
    rewrite(src, bad, &(edit){.set_u32_key = "general.architecture", .set_u32 = 1});
    expect_load_fail(bad, PL_ERR_FORMAT, "general.architecture", "not a string");
    pl_fixture_remove_dir(dir);
    PL_ASSERT_NO_LEAKS();
}

Test(gguf, unknown_architecture_and_duplicate_tensor_names) {
    const char *dir = pl_test_tmpdir();
    const char *path = pl_fixture_path(dir, "h.gguf");
    bb b = {0};
    bhead(&b, 3, 0, 1);
    bstr(&b, "general.architecture");
    bu32(&b, PL_GGUF_STRING);
    bstr(&b, "gpt2");
    cr_assert(pl_fixture_write_file(path, b.p, b.n));
    expect_load_fail(path, PL_ERR_UNSUPPORTED, "general.architecture = gpt2", NULL);
    uint64_t ne[1] = {4};
    b.n = 0;
    bhead(&b, 3, 2, 0);
    btensor(&b, "token_embd.weight", 1, ne, 0, 0);
    btensor(&b, "token_embd.weight", 1, ne, 0, 32);
    bpad(&b, 32);
    for (int i = 0; i < 16; i++) bu32(&b, 0);
    cr_assert(pl_fixture_write_file(path, b.p, b.n));
    expect_load_fail(path, PL_ERR_FORMAT, "token_embd.weight", "twice");
    free(b.p);
    pl_fixture_remove_dir(dir);
    PL_ASSERT_NO_LEAKS();
}

Test(gguf, model_truncated_at_every_byte, .timeout = 120) {
    const char *dir = pl_test_tmpdir();
    char full[600], cut[600];
    snprintf(full, sizeof full, "%s/full.gguf", dir);
    snprintf(cut, sizeof cut, "%s/cut.gguf", dir);
    pl_model_config c;
    pl_test_rng r;
    pl_test_rng_seed(&r, 3);
    pl_fixture_random_config(&r, &c);
    c.n_layers = 1, c.vocab_size = 5;
    pl_model *m = pl_fixture_model(&c, 1);
    save(m, PL_WTYPE_F16, full);
    pl_model_free(m);
    uint8_t *data;
    size_t n;
    cr_assert(pl_fixture_read_file(full, &data, &n));
    cr_assert(pl_fixture_write_file(cut, data, n));
    for (size_t k = n; k-- > 0;) {
        cr_assert(pl_fixture_truncate(cut, k));
        pl_model *got;
        pl_status s = load(cut, PL_DTYPE_AUTO, &got);
        /* an empty file is no GGUF: it goes to the llama2.c loader, which says truncated */
        cr_assert_eq(s, PL_ERR_FORMAT, "cut at %zu of %zu: %s (%s)", k, n, pl_status_name(s),
                     pl_last_error());
        cr_assert(strstr(pl_last_error(), cut), "names the file: %s", pl_last_error());
    }
    free(data);
    pl_fixture_remove_dir(dir);
    PL_ASSERT_NO_LEAKS();
}

/* Writes m as F16 GGUF at path through a writer of its own: one call for the sweep. */
static pl_status save_f16(const pl_model *m, const char *path) {
    pl_gguf_writer *w = NULL;
    pl_status s = pl_gguf_writer_create(&w);
    if (s == PL_OK) s = pl_model_save_gguf(m, PL_WTYPE_F16, w, path);
    pl_gguf_writer_free(w);
    return s;
}

Test(gguf, allocation_failure_at_every_allocation) {
    const char *dir = pl_test_tmpdir();
    const char *path = pl_fixture_path(dir, "a.gguf");
    pl_model_config c;
    pl_fixture_family_config(PL_ARCH_QWEN3, 0, &c);
    pl_model *m = pl_fixture_model(&c, 8);
    save(m, PL_WTYPE_BF16, path);
    const pl_dtype dts[] = {PL_DTYPE_AUTO, PL_DTYPE_F32};
    for (int d = 0; d < 2; d++) {
        int n_fail = 0;
        pl_model_load_options o = {dts[d], 0, 0};
        pl_model *got = NULL;
        PL_ALLOC_SWEEP(n_fail, k, (got = (pl_model *)(uintptr_t)1, pl_model_load(path, &o, &got)),
                       cr_assert_null(got););
        cr_assert(pl_fixture_compare(m, got, 1e-4f, 1e-2f));
        pl_model_free(got);
        cr_assert_gt(n_fail, 2);
    }
    /* and writing */
    int n_write_fail = 0;
    PL_ALLOC_SWEEP(n_write_fail, k, save_f16(m, path), {});
    pl_model_free(m);
    pl_fixture_remove_dir(dir);
    PL_ASSERT_NO_LEAKS();
}
