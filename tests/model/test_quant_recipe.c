/*
 * tests/model/test_quant_recipe.c - the types pl_model_save_gguf_recipe gives each tensor: the
 * K-quant mixes' layers written out by hand from llama.cpp's rule (first and last eighth of the
 * layers and every third between) for 5, 12 and 22 layers, the fallback chain for rows that
 * are not whole blocks, and files written with each recipe read back: every tensor's type in
 * the file, general.file_type, the report of what fell back, and the weights within the
 * stored type's error of the f32 source.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "gguf/gguf.h"
#include "model/model_internal.h"
#include "model_fixtures.h"

static pl_quant_recipe recipe(const char *name) {
    pl_quant_recipe r;
    cr_assert_eq(pl_quant_recipe_parse(name, &r), PL_OK, "%s: %s", name, pl_last_error());
    return r;
}

Test(quant_recipe, names_and_file_types) {
    static const struct {
        const char *name;
        pl_wtype base;
        int mix, ftype;
    } rows[] = {{"q4_k_m", PL_WTYPE_Q4_K, 1, 15}, {"Q5_K_M", PL_WTYPE_Q5_K, 1, 17},
                {"q8_0", PL_WTYPE_Q8_0, 0, 7},    {"Q4_0", PL_WTYPE_Q4_0, 0, 2},
                {"q4_k", PL_WTYPE_Q4_K, 0, 14},   {"q6_k", PL_WTYPE_Q6_K, 0, 18},
                {"f32", PL_WTYPE_F32, 0, 0},      {"F16", PL_WTYPE_F16, 0, 1},
                {"bf16", PL_WTYPE_BF16, 0, 32}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        pl_quant_recipe r = recipe(rows[i].name);
        cr_assert_eq(r.base, rows[i].base, "%s", rows[i].name);
        cr_assert_eq(r.mix != 0, rows[i].mix != 0, "%s", rows[i].name);
        cr_assert_eq(r.file_type, rows[i].ftype, "%s", rows[i].name);
    }
    pl_quant_recipe r;
    cr_assert_eq(pl_quant_recipe_parse("q4_k_s", &r), PL_ERR_UNSUPPORTED);
    cr_assert(strstr(pl_last_error(), "q4_k_s"));
    cr_assert_eq(pl_quant_recipe_parse("q2_k", &r), PL_ERR_UNSUPPORTED); /* no weight type */
}

Test(quant_recipe, fallback_chain) {
    static const struct {
        pl_wtype t;
        int cols;
        pl_wtype want;
    } rows[] = {
        {PL_WTYPE_Q4_K, 512, PL_WTYPE_Q4_K}, {PL_WTYPE_Q4_K, 288, PL_WTYPE_Q4_0},
        {PL_WTYPE_Q5_K, 288, PL_WTYPE_Q8_0}, {PL_WTYPE_Q6_K, 288, PL_WTYPE_Q8_0},
        {PL_WTYPE_Q4_K, 172, PL_WTYPE_F16},  {PL_WTYPE_Q6_K, 172, PL_WTYPE_F16},
        {PL_WTYPE_Q8_0, 64, PL_WTYPE_Q8_0},  {PL_WTYPE_Q4_0, 172, PL_WTYPE_F16},
        {PL_WTYPE_Q8_0, 33, PL_WTYPE_F16},   {PL_WTYPE_F16, 7, PL_WTYPE_F16},
        {PL_WTYPE_F32, 7, PL_WTYPE_F32},     {PL_WTYPE_BF16, 3, PL_WTYPE_BF16},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        cr_assert_eq(pl_quant_fallback(rows[i].t, rows[i].cols), rows[i].want, "%s at %d",
                     pl_wtype_name(rows[i].t), rows[i].cols);
}

static pl_model_config config(int n_layers, int dim, int hidden, bool tied) {
    pl_model_config c;
    pl_fixture_family_config(PL_ARCH_LLAMA, 1, &c);
    c.rope_scaling = PL_ROPE_SCALING_NONE;
    c.n_layers = n_layers, c.dim = dim, c.hidden_dim = hidden;
    c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = dim / 4;
    c.vocab_size = 96, c.max_seq_len = 64, c.tied_embeddings = tied;
    return c;
}

/* The layers whose attn_v and ffn_down a mix stores in Q6_K, by hand from llama.cpp's
 * use_more_bits: i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2. */
static void check_mix_layers(int n_layers, const int *want, int n_want) {
    pl_model_config c = config(n_layers, 256, 512, false);
    for (int k = 0; k < 2; k++) {
        pl_quant_recipe r = recipe(k ? "q5_k_m" : "q4_k_m");
        pl_wtype base = k ? PL_WTYPE_Q5_K : PL_WTYPE_Q4_K;
        for (int l = 0; l < n_layers; l++) {
            bool more = false;
            for (int i = 0; i < n_want; i++) more |= want[i] == l;
            pl_wtype big = more ? PL_WTYPE_Q6_K : base;
            cr_assert_eq(pl_quant_recipe_type(&r, &c, PL_T_ATTN_V, l, NULL), big, "v %d/%d", l,
                         n_layers);
            cr_assert_eq(pl_quant_recipe_type(&r, &c, PL_T_FFN_DOWN, l, NULL), big, "down %d", l);
            static const pl_tensor_role plain[] = {PL_T_ATTN_Q, PL_T_ATTN_K, PL_T_ATTN_OUT,
                                                   PL_T_FFN_GATE, PL_T_FFN_UP};
            for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++)
                cr_assert_eq(pl_quant_recipe_type(&r, &c, plain[i], l, NULL), base);
            cr_assert_eq(pl_quant_recipe_type(&r, &c, PL_T_ATTN_NORM, l, NULL), PL_WTYPE_F32);
            cr_assert_eq(pl_quant_recipe_type(&r, &c, PL_T_FFN_NORM, l, NULL), PL_WTYPE_F32);
        }
        cr_assert_eq(pl_quant_recipe_type(&r, &c, PL_T_OUTPUT, 0, NULL), PL_WTYPE_Q6_K);
        cr_assert_eq(pl_quant_recipe_type(&r, &c, PL_T_TOKEN_EMBD, 0, NULL), base, "untied");
        cr_assert_eq(pl_quant_recipe_type(&r, &c, PL_T_OUTPUT_NORM, 0, NULL), PL_WTYPE_F32);
    }
}

Test(quant_recipe, mix_layers_as_llama_cpp_picks_them) {
    check_mix_layers(5, (const int[]){2, 4}, 2);
    check_mix_layers(12, (const int[]){0, 3, 6, 9, 10, 11}, 6);            /* stories110M */
    check_mix_layers(22, (const int[]){0, 1, 4, 7, 10, 13, 16, 19, 20, 21}, 10); /* TinyLlama */
    check_mix_layers(32, (const int[]){0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31},
                     16); /* Llama 2 7B */
}

Test(quant_recipe, tied_embedding_is_the_output) {
    pl_model_config c = config(2, 256, 512, true);
    pl_quant_recipe r = recipe("q4_k_m");
    cr_assert_eq(pl_quant_recipe_type(&r, &c, PL_T_TOKEN_EMBD, 0, NULL), PL_WTYPE_Q6_K);
    r = recipe("q4_k");
    cr_assert_eq(pl_quant_recipe_type(&r, &c, PL_T_TOKEN_EMBD, 0, NULL), PL_WTYPE_Q4_K);
}

// ----------------------------------------------------------------------------
// files

typedef struct seen {
    char name[64][48];
    pl_wtype type[64], asked[64];
    int n, fell_back;
} seen;

static void on_tensor(void *user, const char *name, pl_wtype type, pl_wtype asked, int rows,
                      int cols) {
    seen *s = user;
    cr_assert_lt(s->n, 64);
    cr_assert_gt(rows, 0);
    cr_assert_gt(cols, 0);
    snprintf(s->name[s->n], sizeof s->name[0], "%s", name);
    s->type[s->n] = type;
    s->asked[s->n] = asked;
    s->fell_back += type != asked;
    s->n++;
}

/* Largest |error| a stored type may add to a weight of magnitude <= amax (generous: the
 * tests of util/quant pin the exact errors; here a wrong type or row would be far off). */
static float type_tol(pl_wtype t, float amax) {
    switch (t) {
    case PL_WTYPE_F32: return 0;
    case PL_WTYPE_F16: return amax * 1e-3f;
    case PL_WTYPE_Q8_0: return amax / 100;
    case PL_WTYPE_Q6_K: return amax / 20;
    default: return amax / 4; /* 4- and 5-bit */
    }
}

/* Writes m with recipe `name`, checks the file's types against the recipe, its file_type,
 * the report, and that it loads back with each weight within its type's error. */
static void write_and_check(const pl_model *m, const char *name, int want_fallbacks) {
    pl_quant_recipe r = recipe(name);
    const char *path = pl_fixture_path(pl_test_tmpdir(), "recipe.gguf");
    pl_gguf_writer *w;
    cr_assert_eq(pl_gguf_writer_create(&w), PL_OK);
    seen s = {0};
    cr_assert_eq(pl_model_save_gguf_recipe(m, &r, on_tensor, &s, w, path), PL_OK, "%s",
                 pl_last_error());
    pl_gguf_writer_free(w);
    cr_assert_eq(s.fell_back, want_fallbacks, "%s: %d tensors fell back", name, s.fell_back);

    pl_gguf_file f;
    cr_assert_eq(pl_gguf_open(path, &f), PL_OK, "%s", pl_last_error());
    int64_t ft;
    cr_assert_eq(pl_gguf_get_int(&f.g, "general.file_type", true, 0, 0, 1000, &ft), PL_OK);
    cr_assert_eq(ft, r.file_type, "%s", name);
    const pl_model_config *c = &m->cfg;
    int n = 0;
    for (size_t slot = 0; slot < pl_model_n_slots(c); slot++) {
        int layer, rows, cols;
        pl_tensor_role role = pl_model_slot_role(c, slot, &layer);
        if (!pl_model_stores_tensor(c, role)) continue;
        char tn[64];
        snprintf(tn, sizeof tn, pl_tensor_spec_of(role)->gguf, layer);
        const pl_gguf_tensor *t = pl_gguf_tensor_find(&f.g, tn);
        cr_assert_not_null(t, "%s", tn);
        pl_wtype asked;
        pl_wtype want = pl_quant_recipe_type(&r, c, role, layer, &asked);
        cr_assert_eq(pl_gguf_wtype(t->type), want, "%s %s: %s", name, tn, t->type->name);
        pl_model_tensor_shape(c, role, &rows, &cols);
        cr_assert_eq(cols % pl_wtype_traits_of(want)->block_elems, 0);
        cr_assert_str_eq(s.name[n], tn, "report order");
        cr_assert_eq(s.type[n], want);
        cr_assert_eq(s.asked[n], asked);
        n++;
    }
    cr_assert_eq(n, s.n);
    pl_gguf_close(&f);

    pl_model *got;
    pl_model_load_options o = {PL_DTYPE_AUTO, 0, 0};
    cr_assert_eq(pl_model_load(path, &o, &got), PL_OK, "%s", pl_last_error());
    for (size_t slot = 0; slot < pl_model_n_slots(c); slot++) {
        int layer;
        pl_tensor_role role = pl_model_slot_role(c, slot, &layer);
        if (!pl_model_stores_tensor(c, role)) continue;
        const pl_weight *a = &m->w[slot], *b = &got->w[slot];
        cr_assert_eq(b->type, pl_quant_recipe_type(&r, c, role, layer, NULL));
        if (role == PL_T_ATTN_Q || role == PL_T_ATTN_K) continue; /* rows permuted */
        size_t k = (size_t)a->rows * (size_t)a->cols;
        float *x = malloc(k * sizeof *x), *y = malloc(k * sizeof *y);
        pl_wtype_traits_of(a->type)->to_f32(a->data, x, k);
        pl_wtype_traits_of(b->type)->to_f32(b->data, y, k);
        float amax = 0, err = 0;
        for (size_t i = 0; i < k; i++) {
            amax = fmaxf(amax, fabsf(x[i]));
            err = fmaxf(err, fabsf(x[i] - y[i]));
        }
        cr_assert_leq(err, type_tol(b->type, amax), "%s slot %zu (%s): error %g of %g", name,
                      slot, pl_wtype_name(b->type), err, amax);
        free(x);
        free(y);
    }
    pl_model_free(got);
}

Test(quant_recipe, files_hold_the_recipe_types, .timeout = 60) {
    /* 256-wide rows, hidden 512: every K-quant fits, nothing falls back */
    pl_model_config c = config(5, 256, 512, false);
    pl_model *m = pl_fixture_model(&c, 3);
    write_and_check(m, "q4_k_m", 0);
    write_and_check(m, "q5_k_m", 0);
    write_and_check(m, "q8_0", 0);
    write_and_check(m, "f16", 0);
    pl_model_free(m);
}

Test(quant_recipe, rows_that_are_not_whole_blocks_fall_back, .timeout = 60) {
    /* stories15M's width (288: not whole 256-blocks) with a hidden size of whole blocks (768),
     * so the layers' ffn_down keep their K-quant: 2 layers x 6 matrices + embedding + output
     * at 288 fall back, the 2 ffn_down do not */
    pl_model_config c = config(2, 288, 768, false);
    pl_model *m = pl_fixture_model(&c, 5);
    write_and_check(m, "q4_k_m", 2 * 6 + 2);
    write_and_check(m, "q6_k", 2 * 6 + 2);
    write_and_check(m, "q8_0", 0);
    pl_model_free(m);
    /* stories260K's hidden size (172) is not whole 32-blocks either: ffn_down falls to f16 */
    c = config(2, 64, 172, true);
    m = pl_fixture_model(&c, 7);
    write_and_check(m, "q4_0", 2);
    write_and_check(m, "q4_k_m", 2 * 7 + 1);
    pl_model_free(m);
}
