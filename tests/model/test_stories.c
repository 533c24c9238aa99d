/*
 * tests/model/test_stories.c - the real stories260K.bin from PAGELLM_TEST_MODELS.
 *
 * Linked with models_main.c: without PAGELLM_TEST_MODELS the binary exits 77 (SKIP). The
 * expected values come from ../shared/models/README.md (header, parameter count, tensor
 * order) and from the file itself read here with stdio at offsets derived from that table; the
 * stored freq_cis tables (llama2.c's own RoPE) check pl_model_rope_inv_freq to 3e-6.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "test_support.h"

/* (n) floats of the file at float index `at` (after the 28-byte header). */
static float *read_floats(const char *path, size_t at, size_t n) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    float *v = malloc(n * sizeof *v);
    cr_assert_eq(fseek(f, (long)(28 + 4 * at), SEEK_SET), 0);
    cr_assert_eq(fread(v, sizeof *v, n, f), n);
    fclose(f);
    return v;
}

static void expect_floats(const char *path, size_t at, const pl_weight *w, const char *what) {
    size_t n = (size_t)w->rows * w->cols;
    float *want = read_floats(path, at, n);
    cr_assert_eq(w->type, PL_WTYPE_F32);
    cr_assert_eq(memcmp(want, w->data, n * 4), 0, "%s differs from the file", what);
    free(want);
}

#define W pl_model_weight

Test(stories260k, header_weights_and_parameter_count) {
    char path[1024];
    cr_assert(pl_test_model_path("stories260K.bin", path, sizeof path));
    pl_model *m = NULL;
    cr_assert_eq(pl_model_load(path, NULL, &m), PL_OK, "%s", pl_last_error());
    const pl_model_config *c = &m->cfg;
    cr_assert_eq(c->dim, 64);
    cr_assert_eq(c->hidden_dim, 172);
    cr_assert_eq(c->n_layers, 5);
    cr_assert_eq(c->n_heads, 8);
    cr_assert_eq(c->n_kv_heads, 4);
    cr_assert_eq(c->vocab_size, 512);
    cr_assert_eq(c->max_seq_len, 512);
    cr_assert_eq(c->head_dim, 8);
    cr_assert(c->tied_embeddings);
    cr_assert_eq(c->bos_id, 1);
    cr_assert_eq(c->n_eos, 2, "EOS, and BOS: a story ends with BOS");
    cr_assert_eq(c->eos_ids[0], 2);
    cr_assert_eq(c->eos_ids[1], 1);
    cr_assert_eq(c->rope_layout, 0);
    cr_assert_eq(c->rope_theta, 10000.0f);
    cr_assert_eq(c->norm_eps, 1e-5f);
    /* tok512.model beside it (llama2.c's tok<vocab>.model), not Llama's tokenizer.model */
    cr_assert_not_null(m->tokenizer_path);
    const char *tok = strrchr(m->tokenizer_path, '/');
    cr_assert_str_eq(tok ? tok + 1 : m->tokenizer_path, "tok512.model");

    /* parameters: every distinct tensor once (the classifier is the embedding) */
    size_t params = 0;
    for (size_t s = 0; s < pl_model_n_slots(c); s++) {
        int layer;
        if (pl_model_stores_tensor(c, pl_model_slot_role(c, s, &layer)))
            params += (size_t)m->w[s].rows * m->w[s].cols;
    }
    cr_assert_eq(params, 260032);
    cr_assert_eq(W(m, PL_T_OUTPUT, 0)->data, W(m, PL_T_TOKEN_EMBD, 0)->data);

    /* offsets (in floats) from the README's tensor table */
    size_t emb = 512 * 64, att = 5 * 64, wq = 5 * 64 * 64, wk = 5 * 32 * 64, ffn = 5 * 64,
           w1 = 5 * 172 * 64;
    expect_floats(path, 0, W(m, PL_T_TOKEN_EMBD, 0), "token_embedding");
    expect_floats(path, emb + 64, W(m, PL_T_ATTN_NORM, 1), "rms_att[1]");
    expect_floats(path, emb + att + 2 * 64 * 64, W(m, PL_T_ATTN_Q, 2), "wq[2]");
    expect_floats(path, emb + att + wq + 4 * 32 * 64, W(m, PL_T_ATTN_K, 4), "wk[4]");
    expect_floats(path, emb + att + wq + wk + 32 * 64, W(m, PL_T_ATTN_V, 1), "wv[1]");
    expect_floats(path, emb + att + wq + 2 * wk + 3 * 64 * 64, W(m, PL_T_ATTN_OUT, 3), "wo[3]");
    expect_floats(path, emb + att + 2 * wq + 2 * wk, W(m, PL_T_FFN_NORM, 0), "rms_ffn[0]");
    size_t after_ffn = emb + att + 2 * wq + 2 * wk + ffn;
    expect_floats(path, after_ffn + 172 * 64, W(m, PL_T_FFN_GATE, 1), "w1[1]");
    expect_floats(path, after_ffn + w1 + 4 * 64 * 172, W(m, PL_T_FFN_DOWN, 4), "w2[4]");
    expect_floats(path, after_ffn + 2 * w1 + 2 * 172 * 64, W(m, PL_T_FFN_UP, 2), "w3[2]");
    expect_floats(path, after_ffn + 3 * w1, W(m, PL_T_OUTPUT_NORM, 0), "rms_final");

    /* RoPE: the stored freq_cis tables (512 x 4 each) are cos/sin(pos * inv_freq[j]) */
    float inv[4];
    pl_model_rope_inv_freq(c, inv);
    size_t freq_at = after_ffn + 3 * w1 + 64;
    float *re = read_floats(path, freq_at, 2048), *im = read_floats(path, freq_at + 2048, 2048);
    for (int pos = 0; pos < 512; pos++)
        for (int j = 0; j < 4; j++) {
            double a = (double)pos * inv[j];
            cr_assert_leq(fabs(cos(a) - re[pos * 4 + j]), 3e-6, "cos at pos %d j %d", pos, j);
            cr_assert_leq(fabs(sin(a) - im[pos * 4 + j]), 3e-6, "sin at pos %d j %d", pos, j);
        }
    free(re);
    free(im);
    cr_assert_eq(pl_model_matmul_params(m), (size_t)5 * (2 * 64 * 64 + 2 * 32 * 64 +
                                                         3 * 172 * 64) + 512 * 64);
    pl_model_free(m);
    PL_ASSERT_NO_LEAKS();
}

Test(stories260k, converted_to_half_precision) {
    char path[1024];
    cr_assert(pl_test_model_path("stories260K.bin", path, sizeof path));
    pl_model *f = NULL, *h = NULL;
    cr_assert_eq(pl_model_load(path, NULL, &f), PL_OK, "%s", pl_last_error());
    pl_model_load_options o = {PL_DTYPE_BF16, 0, 0};
    cr_assert_eq(pl_model_load(path, &o, &h), PL_OK, "%s", pl_last_error());
    cr_assert_eq(W(h, PL_T_FFN_DOWN, 3)->type, PL_WTYPE_BF16);
    cr_assert_eq(W(h, PL_T_FFN_NORM, 3)->type, PL_WTYPE_F32);
    cr_assert_eq(W(h, PL_T_OUTPUT, 0)->data, W(h, PL_T_TOKEN_EMBD, 0)->data);
    cr_assert_eq(pl_model_weight_bytes(h) * 2, pl_model_weight_bytes(f));
    pl_model_free(f);
    pl_model_free(h);
    PL_ASSERT_NO_LEAKS();
}
