/*
 * tests/model/test_formats.c - every model format loads back the weights that were written.
 *
 * Random small configs (odd sizes, GQA) are written by tests/support/model_fixtures.c in
 * llama2.c legacy (tied and untied), ak42 v1, and Hugging Face directories (one safetensors
 * file in F32/F16/BF16, sharded, misaligned data), then loaded with pl_model_load. The
 * expectation for a lossy store is the reference rounded through the stored type (and then
 * through the requested type), so even f16/bf16 weights are compared bit for bit. Configs and
 * the size helpers are checked against values computed here from the definitions.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "model/model.h"
#include "model_fixtures.h"
#include "test_support.h"
#include "util/dtype.h"

#define N_CONFIGS 6

static float round_to(float v, pl_dtype t) {
    if (t == PL_DTYPE_F16) return pl_f16_to_f32(pl_f32_to_f16(v));
    if (t == PL_DTYPE_BF16) return pl_bf16_to_f32(pl_f32_to_bf16(v));
    return v;
}

static void round_weight(const pl_weight *w, pl_dtype t) {
    float *d = (float *)w->data;
    for (size_t i = 0; i < (size_t)w->rows * (size_t)w->cols; i++) d[i] = round_to(d[i], t);
}

/* The f32 reference with every value rounded through `stored` then `matrices` (the requested
 * type; norms are only rounded through `stored` when stored_norms). */
static void round_model(pl_model *m, pl_dtype stored, bool stored_norms, pl_dtype matrices) {
    const pl_model_config *c = &m->cfg;
    for (size_t s = 0; s < pl_model_n_slots(c); s++) {
        int layer;
        pl_tensor_role r = pl_model_slot_role(c, s, &layer);
        if (!pl_model_stores_tensor(c, r)) continue; /* a tied output: the embedding's data */
        if (pl_tensor_spec_of(r)->storage == PL_STORE_F32) {
            if (stored_norms) round_weight(&m->w[s], stored);
        } else {
            round_weight(&m->w[s], stored);
            round_weight(&m->w[s], matrices);
        }
    }
}

static void expect_dtypes(const pl_model *m, pl_dtype matrices) {
    const pl_model_config *c = &m->cfg;
    for (size_t s = 0; s < pl_model_n_slots(c); s++) {
        int layer;
        pl_tensor_role r = pl_model_slot_role(c, s, &layer);
        if (!pl_model_has_tensor(c, r)) continue;
        pl_wtype want = pl_tensor_spec_of(r)->storage == PL_STORE_F32 ? PL_WTYPE_F32
                                                                      : pl_wtype_of_dtype(matrices);
        cr_assert_eq(m->w[s].type, want, "%s of layer %d: %s, want %s",
                     pl_tensor_spec_of(r)->hf, layer, pl_wtype_name(m->w[s].type),
                     pl_wtype_name(want));
    }
    if (m->cfg.tied_embeddings)
        cr_assert_eq(pl_model_weight(m, PL_T_OUTPUT, 0)->data,
                     pl_model_weight(m, PL_T_TOKEN_EMBD, 0)->data);
}

static void expect_llama2c_config(const pl_model_config *want, const pl_model_config *got) {
    cr_assert_eq(got->dim, want->dim);
    cr_assert_eq(got->hidden_dim, want->hidden_dim);
    cr_assert_eq(got->n_layers, want->n_layers);
    cr_assert_eq(got->n_heads, want->n_heads);
    cr_assert_eq(got->n_kv_heads, want->n_kv_heads);
    cr_assert_eq(got->head_dim, want->dim / want->n_heads);
    cr_assert_eq(got->vocab_size, want->vocab_size);
    cr_assert_eq(got->max_seq_len, want->max_seq_len);
    cr_assert_eq(got->tied_embeddings, want->tied_embeddings);
    cr_assert_eq(got->norm_eps, 1e-5f);
    cr_assert_eq(got->rope_theta, 10000.0f);
    cr_assert_eq(got->rope_layout, 0);
    cr_assert_eq(got->rope_scaling, PL_ROPE_SCALING_NONE);
    cr_assert_eq(got->bos_id, 1);
    /* EOS 2, and BOS 1 ends a story too */
    cr_assert_eq(got->n_eos, 2);
    cr_assert_eq(got->eos_ids[0], 2);
    cr_assert_eq(got->eos_ids[1], 1);
}

static pl_model *load(const char *path, pl_dtype dtype) {
    pl_model_load_options o = {dtype, 0, 0};
    pl_model *m = NULL;
    pl_status s = pl_model_load(path, &o, &m);
    cr_assert_eq(s, PL_OK, "%s: %s", path, pl_last_error());
    cr_assert_not_null(m);
    return m;
}

/* A random reference model (tied as drawn, or as `tied` says when it is 0 or 1) and a scratch
 * directory. */
static pl_model *make_ref(pl_test_rng *r, int tied, uint64_t *seed, const char **dir) {
    pl_model_config c;
    pl_fixture_random_config(r, &c);
    if (tied >= 0) c.tied_embeddings = tied;
    *seed = pl_test_rng_u64(r);
    *dir = pl_test_tmpdir();
    cr_assert_not_null(*dir);
    pl_model *m = pl_fixture_model(&c, *seed);
    cr_assert_not_null(m);
    return m;
}

Test(formats, llama2c_legacy_and_ak42_bit_exact_in_f32) {
    pl_test_rng r;
    pl_test_rng_seed(&r, pl_test_run_seed("formats.llama2c"));
    for (int i = 0; i < N_CONFIGS; i++) {
        uint64_t seed;
        const char *dir;
        pl_model *ref = make_ref(&r, i % 2, &seed, &dir);
        const pl_model_config c = ref->cfg;
        const char *legacy = pl_fixture_path(dir, "legacy.bin");
        const char *v1 = pl_fixture_path(dir, "v1.bin");
        cr_assert(pl_fixture_write_llama2c(ref, legacy));
        cr_assert(pl_fixture_write_ak42(ref, v1));
        const char *paths[] = {legacy, v1};
        for (int k = 0; k < 2; k++) {
            pl_model *m = load(paths[k], PL_DTYPE_AUTO);
            expect_llama2c_config(&c, &m->cfg);
            expect_dtypes(m, PL_DTYPE_F32);
            cr_assert(pl_fixture_compare(ref, m, 0, 0), "%s differs (config %d)", paths[k], i);
            cr_assert_null(m->tokenizer_path);
            pl_model_free(m);
        }
        pl_fixture_remove_dir(dir);
        pl_model_free(ref);
    }
    PL_ASSERT_NO_LEAKS();
}

Test(formats, llama2c_file_size_follows_the_format_description) {
    /* 28 + 4 * (params + RoPE tables) bytes, as ../shared/models/README.md derives for
     * stories260K; computed here from the dims. */
    pl_model_config c = {.dim = 12, .hidden_dim = 7, .n_layers = 2, .n_heads = 3,
                         .n_kv_heads = 1, .head_dim = 4, .vocab_size = 9, .max_seq_len = 5,
                         .norm_eps = 1e-5f, .rope_theta = 10000, .bos_id = 1,
                         .eos_ids = {2}, .n_eos = 1};
    for (int tied = 0; tied < 2; tied++) {
        c.tied_embeddings = tied;
        pl_model *ref = pl_fixture_model(&c, 7);
        const char *dir = pl_test_tmpdir();
        const char *path = pl_fixture_path(dir, "m.bin");
        cr_assert(pl_fixture_write_llama2c(ref, path));
        size_t kv = 4, per_layer = 12 + 12 * 12 + 2 * kv * 12 + 12 * 12 + 12 + 3 * 7 * 12;
        size_t floats = 9 * 12 + 2 * per_layer + 12 + 2 * 5 * 2 + (tied ? 0 : 9 * 12);
        struct stat st;
        cr_assert_eq(stat(path, &st), 0);
        cr_assert_eq((size_t)st.st_size, 28 + 4 * floats);
        path = pl_fixture_path(dir, "v1.bin");
        cr_assert(pl_fixture_write_ak42(ref, path));
        cr_assert_eq(stat(path, &st), 0);
        cr_assert_eq((size_t)st.st_size, 256 + 4 * (floats - 2 * 5 * 2));
        pl_fixture_remove_dir(dir);
        pl_model_free(ref);
    }
    PL_ASSERT_NO_LEAKS();
}

Test(formats, llama2c_converted_on_request) {
    pl_test_rng r;
    pl_test_rng_seed(&r, pl_test_run_seed("formats.llama2c_convert"));
    uint64_t seed;
    const char *dir;
    pl_model *ref = make_ref(&r, -1, &seed, &dir);
    const char *path = pl_fixture_path(dir, "m.bin");
    cr_assert(pl_fixture_write_llama2c(ref, path));
    pl_dtype ts[] = {PL_DTYPE_F16, PL_DTYPE_BF16, PL_DTYPE_F32};
    for (size_t i = 0; i < 3; i++) {
        pl_model *want = pl_fixture_model(&ref->cfg, seed);
        round_model(want, PL_DTYPE_F32, false, ts[i]);
        pl_model *m = load(path, ts[i]);
        expect_dtypes(m, ts[i]);
        cr_assert(pl_fixture_compare(want, m, 0, 0), "as %s", pl_dtype_name(ts[i]));
        pl_model_free(m);
        pl_model_free(want);
    }
    pl_fixture_remove_dir(dir);
    pl_model_free(ref);
    PL_ASSERT_NO_LEAKS();
}

Test(formats, hf_every_dtype_and_layout_bit_exact_through_rounding) {
    pl_test_rng r;
    pl_test_rng_seed(&r, pl_test_run_seed("formats.hf"));
    pl_dtype stored[] = {PL_DTYPE_F32, PL_DTYPE_F16, PL_DTYPE_BF16};
    pl_dtype asked[] = {PL_DTYPE_AUTO, PL_DTYPE_F32, PL_DTYPE_F16, PL_DTYPE_BF16};
    for (int i = 0; i < N_CONFIGS; i++) {
        uint64_t seed;
        const char *dir;
        pl_model *ref = make_ref(&r, -1, &seed, &dir);
        for (size_t s = 0; s < 3; s++) {
            char hf[600];
            snprintf(hf, sizeof hf, "%s/hf-%zu", dir, s);
            pl_fixture_hf_options o = {.dtype = stored[s], .n_shards = 1 + i % 3,
                                       .misalign = i % 2 == 1};
            cr_assert(pl_fixture_write_hf(ref, hf, &o));
            for (size_t a = 0; a < 4; a++) {
                pl_model *want = pl_fixture_model(&ref->cfg, seed);
                round_model(want, stored[s], true, asked[a]);
                pl_model *m = load(hf, asked[a]);
                expect_dtypes(m, asked[a] == PL_DTYPE_AUTO ? stored[s] : asked[a]);
                cr_assert_eq(m->cfg.rope_layout, 1, "HF q/k are stored for rotate-half");
                cr_assert(pl_fixture_compare(want, m, 0, 0), "config %d stored %s asked %s "
                          "shards %d", i, pl_dtype_name(stored[s]), pl_dtype_name(asked[a]),
                          o.n_shards);
                pl_model_free(m);
                pl_model_free(want);
            }
        }
        pl_fixture_remove_dir(dir);
        pl_model_free(ref);
    }
    PL_ASSERT_NO_LEAKS();
}

Test(formats, hf_config_fields_round_trip) {
    pl_model_config c = {.dim = 24, .hidden_dim = 37, .n_layers = 2, .n_heads = 4,
                         .n_kv_heads = 2, .head_dim = 6, .vocab_size = 50, .max_seq_len = 64,
                         .norm_eps = 1e-6f, .rope_theta = 500000.0f, .rope_layout = 0,
                         .rope_scaling = PL_ROPE_SCALING_LLAMA3, .rope_factor = 8.0f,
                         .rope_low_freq_factor = 1.0f, .rope_high_freq_factor = 4.0f,
                         .rope_original_max_pos = 32, .tied_embeddings = false, .bos_id = 0,
                         .eos_ids = {49}, .n_eos = 1};
    pl_model *ref = pl_fixture_model(&c, 3);
    const char *dir = pl_test_tmpdir();
    cr_assert(pl_fixture_write_hf(ref, dir, NULL));
    pl_model *m = load(dir, PL_DTYPE_AUTO);
    pl_model_config g = m->cfg;
    cr_assert_eq(g.dim, 24);
    cr_assert_eq(g.hidden_dim, 37);
    cr_assert_eq(g.n_heads, 4);
    cr_assert_eq(g.n_kv_heads, 2);
    cr_assert_eq(g.head_dim, 6);
    cr_assert_eq(g.vocab_size, 50);
    cr_assert_eq(g.max_seq_len, 64);
    cr_assert_eq(g.norm_eps, 1e-6f);
    cr_assert_eq(g.rope_theta, 500000.0f);
    cr_assert_eq(g.rope_scaling, PL_ROPE_SCALING_LLAMA3);
    cr_assert_eq(g.rope_factor, 8.0f);
    cr_assert_eq(g.rope_low_freq_factor, 1.0f);
    cr_assert_eq(g.rope_high_freq_factor, 4.0f);
    cr_assert_eq(g.rope_original_max_pos, 32);
    cr_assert_eq(g.bos_id, 0);
    cr_assert_eq(g.n_eos, 1, "one EOS id; BOS does not end a text");
    cr_assert_eq(g.eos_ids[0], 49);
    cr_assert_not(g.tied_embeddings);
    cr_assert(pl_fixture_compare(ref, m, 0, 0));
    pl_model_free(m);

    /* linear scaling, and a head_dim that is not dim / n_heads (written as "head_dim") */
    pl_model_free(ref);
    c.rope_scaling = PL_ROPE_SCALING_LINEAR;
    c.rope_factor = 2.5f;
    c.head_dim = 8;
    c.bos_id = -1;
    ref = pl_fixture_model(&c, 4);
    pl_fixture_remove_dir(dir);
    dir = pl_test_tmpdir();
    cr_assert(pl_fixture_write_hf(ref, dir, NULL));
    m = load(dir, PL_DTYPE_AUTO);
    cr_assert_eq(m->cfg.rope_scaling, PL_ROPE_SCALING_LINEAR);
    cr_assert_eq(m->cfg.rope_factor, 2.5f);
    cr_assert_eq(m->cfg.head_dim, 8);
    cr_assert_eq(m->cfg.bos_id, -1);
    cr_assert_eq(pl_model_weight(m, PL_T_ATTN_Q, 0)->rows, 32);
    cr_assert_eq(pl_model_weight(m, PL_T_ATTN_OUT, 0)->cols, 32);
    cr_assert(pl_fixture_compare(ref, m, 0, 0));
    pl_model_free(m);
    pl_fixture_remove_dir(dir);
    pl_model_free(ref);
    PL_ASSERT_NO_LEAKS();
}

Test(formats, hf_tied_embeddings_and_tokenizer_beside) {
    pl_model_config c = {.dim = 8, .hidden_dim = 5, .n_layers = 1, .n_heads = 2,
                         .n_kv_heads = 1, .head_dim = 4, .vocab_size = 11, .max_seq_len = 16,
                         .norm_eps = 1e-5f, .rope_theta = 10000, .tied_embeddings = true,
                         .bos_id = 1, .eos_ids = {2}, .n_eos = 1};
    pl_model *ref = pl_fixture_model(&c, 5);
    /* tie_word_embeddings: true, no lm_head.weight */
    const char *dir = pl_test_tmpdir();
    cr_assert(pl_fixture_write_hf(ref, dir, NULL));
    pl_model *m = load(dir, PL_DTYPE_AUTO);
    cr_assert(m->cfg.tied_embeddings);
    cr_assert_eq(pl_model_weight(m, PL_T_OUTPUT, 0)->data,
                 pl_model_weight(m, PL_T_TOKEN_EMBD, 0)->data);
    cr_assert_null(m->tokenizer_path);
    pl_model_free(m);
    /* a tokenizer.model beside the weights is reported */
    cr_assert(pl_fixture_write_file(pl_fixture_path(dir, "tokenizer.model"), "x", 1));
    m = load(dir, PL_DTYPE_AUTO);
    cr_assert_not_null(m->tokenizer_path);
    cr_assert_str_eq(m->tokenizer_path, pl_fixture_path(dir, "tokenizer.model"));
    pl_model_free(m);
    /* with a tokenizer.json too (Llama 2 and Mistral directories ship both), the JSON one:
     * Llama 3's and Qwen's byte-level BPE exists only as tokenizer.json */
    cr_assert(pl_fixture_write_file(pl_fixture_path(dir, "tokenizer.json"), "{}", 2));
    m = load(dir, PL_DTYPE_AUTO);
    cr_assert_str_eq(m->tokenizer_path, pl_fixture_path(dir, "tokenizer.json"));
    pl_model_free(m);
    /* the key left out and no lm_head: tied */
    pl_fixture_remove_dir(dir);
    dir = pl_test_tmpdir();
    cr_assert(pl_fixture_write_hf(ref, dir, &(pl_fixture_hf_options){.omit_tie_key = true}));
    m = load(dir, PL_DTYPE_AUTO);
    cr_assert(m->cfg.tied_embeddings);
    cr_assert(pl_fixture_compare(ref, m, 0, 0));
    pl_model_free(m);
    /* tied in the config and an lm_head written too: the config wins */
    pl_fixture_remove_dir(dir);
    dir = pl_test_tmpdir();
    cr_assert(pl_fixture_write_hf(ref, dir, &(pl_fixture_hf_options){.lm_head_when_tied = true}));
    m = load(dir, PL_DTYPE_BF16);
    cr_assert(m->cfg.tied_embeddings);
    cr_assert_eq(pl_model_weight(m, PL_T_OUTPUT, 0)->data,
                 pl_model_weight(m, PL_T_TOKEN_EMBD, 0)->data, "tied and converted: one copy");
    pl_model_free(m);
    pl_fixture_remove_dir(dir);
    pl_model_free(ref);
    PL_ASSERT_NO_LEAKS();
}

Test(formats, hf_loads_through_a_file_inside_the_directory_and_mistral_configs) {
    pl_test_rng r;
    pl_test_rng_seed(&r, pl_test_run_seed("formats.hf_paths"));
    uint64_t seed;
    const char *dir;
    pl_model *ref = make_ref(&r, -1, &seed, &dir);
    cr_assert(pl_fixture_write_hf(ref, dir, NULL));
    const char *files[] = {"model.safetensors", "config.json"};
    for (size_t i = 0; i < 2; i++) {
        pl_model *m = load(pl_fixture_path(dir, files[i]), PL_DTYPE_AUTO);
        cr_assert(pl_fixture_compare(ref, m, 0, 0));
        pl_model_free(m);
    }
    /* MistralForCausalLM has the same tensors, and a sliding window that the attention
     * applies (the context stays max_position_embeddings); an EOS list keeps every id */
    char cfg[2048];
    snprintf(cfg, sizeof cfg,
             "{\"architectures\": [\"MistralForCausalLM\"], \"model_type\": \"mistral\", "
             "\"hidden_size\": %d, \"intermediate_size\": %d, \"num_hidden_layers\": %d, "
             "\"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"vocab_size\": %d, "
             "\"max_position_embeddings\": 4096, \"sliding_window\": 100, \"rms_norm_eps\": "
             "1e-05, \"rope_theta\": 1000000.0, \"tie_word_embeddings\": %s, \"bos_token_id\": 1,"
             " \"eos_token_id\": [2, 1]}",
             ref->cfg.dim, ref->cfg.hidden_dim, ref->cfg.n_layers, ref->cfg.n_heads,
             ref->cfg.n_kv_heads, ref->cfg.vocab_size,
             ref->cfg.tied_embeddings ? "true" : "false");
    cr_assert(pl_fixture_write_file(pl_fixture_path(dir, "config.json"), cfg, strlen(cfg)));
    pl_model *m = load(dir, PL_DTYPE_AUTO);
    cr_assert_eq(m->cfg.arch, PL_ARCH_MISTRAL);
    cr_assert_eq(m->cfg.max_seq_len, 4096);
    cr_assert_eq(m->cfg.sliding_window, 100);
    cr_assert_eq(m->cfg.rope_theta, 1e6f);
    cr_assert_eq(m->cfg.n_eos, 2);
    cr_assert_eq(m->cfg.eos_ids[0], 2);
    cr_assert_eq(m->cfg.eos_ids[1], 1);
    ref->cfg.arch = PL_ARCH_MISTRAL; /* the same tensors */
    cr_assert(pl_fixture_compare(ref, m, 0, 0));
    pl_model_free(m);
    pl_fixture_remove_dir(dir);
    pl_model_free(ref);
    PL_ASSERT_NO_LEAKS();
}

Test(formats, sizes_per_token) {
    pl_model_config c = {.dim = 12, .hidden_dim = 7, .n_layers = 3, .n_heads = 3,
                         .n_kv_heads = 1, .head_dim = 4, .vocab_size = 9, .max_seq_len = 5,
                         .norm_eps = 1e-5f, .rope_theta = 10000, .bos_id = 1,
                         .eos_ids = {2}, .n_eos = 1};
    for (int tied = 0; tied < 2; tied++) {
        c.tied_embeddings = tied;
        pl_model *ref = pl_fixture_model(&c, 1);
        /* q (12x12) + k, v (4x12 each) + o (12x12) + gate, up (7x12) + down (12x7), and the
         * classifier (9x12) once per token whether tied or not */
        size_t per_layer = 144 + 48 + 48 + 144 + 84 + 84 + 84;
        size_t params = 3 * per_layer + 108;
        cr_assert_eq(pl_model_matmul_params(ref), params);
        cr_assert_eq(pl_model_weight_bytes(ref), 4 * params);
        const char *dir = pl_test_tmpdir();
        cr_assert(pl_fixture_write_hf(ref, dir, &(pl_fixture_hf_options){.dtype = PL_DTYPE_F16}));
        pl_model *m = load(dir, PL_DTYPE_AUTO);
        cr_assert_eq(pl_model_weight_bytes(m), 2 * params);
        cr_assert_eq(pl_model_matmul_params(m), params);
        pl_model_free(m);
        pl_fixture_remove_dir(dir);
        pl_model_free(ref);
    }
    PL_ASSERT_NO_LEAKS();
}

Test(formats, rope_permutations_are_inverse) {
    pl_test_rng r;
    pl_test_rng_seed(&r, 11);
    float a[6 * 8 * 3], b[6 * 8 * 3], c[6 * 8 * 3];
    pl_test_fill(&r, a, 6 * 8 * 3, 1.0f);
    pl_fixture_permute_to_half(b, a, 6, 8, 3);
    pl_fixture_permute_to_interleaved(c, b, 6, 8, 3);
    cr_assert_eq(memcmp(a, c, sizeof a), 0);
    /* head 1, half row 1 (j = 1, p = 0): interleaved row 8 + 2 */
    cr_assert_eq(b[(8 + 1) * 3], a[(8 + 2) * 3]);
    /* head 1, second half, j = 1 (p = 1): interleaved row 8 + 3 */
    cr_assert_eq(b[(8 + 4 + 1) * 3], a[(8 + 3) * 3]);
}

Test(formats, write_all_then_load_every_format) {
    pl_test_rng r;
    pl_test_rng_seed(&r, pl_test_run_seed("formats.write_all"));
    uint64_t seed;
    const char *dir;
    pl_model *ref = make_ref(&r, -1, &seed, &dir);
    cr_assert(pl_fixture_write_all(ref, dir));
    int n = 0;
    for (const pl_fixture_format *f = pl_fixture_formats(); f->path; f++, n++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, f->path);
        pl_model *m = load(path, PL_DTYPE_AUTO);
        expect_dtypes(m, f->stored);
        /* f16 keeps 11 significant bits, bf16 8: relative error 2^-11 and 2^-8 */
        float rtol = f->stored == PL_DTYPE_F16    ? 0x1p-11f
                     : f->stored == PL_DTYPE_BF16 ? 0x1p-8f
                                                  : 0.0f;
        cr_assert(pl_fixture_compare(ref, m, f->stored == PL_DTYPE_F16 ? 6e-8f : 0, rtol), "%s",
                  f->path);
        pl_model_free(m);
    }
    cr_assert_eq(n, 6);
    pl_fixture_remove_dir(dir);
    pl_model_free(ref);
    PL_ASSERT_NO_LEAKS();
}
