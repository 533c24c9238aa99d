/*
 * tests/model/test_arch.c - the tables: the tensor table and the architecture rows
 * (model/arch.c), the weight storage types (util/wtype.c), and the figures computed from them.
 *
 * The table is data every loader trusts, so its invariants are checked as such: one row per
 * role, names unique in each format, "%d" exactly in per-layer names, the llama2.c orders
 * complete, storage as the role implies. Each family's loaded tensors and size figures are
 * checked against sums written out by hand from the families' shapes.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "model/model.h"
#include "model_fixtures.h"
#include "util/dtype.h"
#include "util/wtype.h"

// ----------------------------------------------------------------------------
// the tensor table

static int count_pct_d(const char *s) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, "%d")) != NULL; p += 2) n++;
    return n;
}

Test(arch, tensor_table_rows) {
    bool legacy[16] = {false}, v1[16] = {false};
    pl_model_config llama;
    pl_fixture_family_config(PL_ARCH_LLAMA, 1, &llama);
    for (int r = 0; r < PL_T_COUNT; r++) {
        const pl_tensor_spec *t = pl_tensor_spec_of((pl_tensor_role)r);
        cr_assert_not_null(t);
        cr_assert_eq((int)t->role, r, "row %d holds role %d", r, (int)t->role);
        cr_assert_not_null(t->hf);
        cr_assert_not_null(t->gguf);
        int per_layer = pl_tensor_role_per_layer(t->role) ? 1 : 0;
        /* a per-expert tensor is one per expert in Hugging Face files, stacked in GGUF */
        cr_assert_eq(count_pct_d(t->hf), per_layer + (t->per_expert ? 1 : 0), "%s", t->hf);
        cr_assert_eq(count_pct_d(t->gguf), per_layer, "%s", t->gguf);
        cr_assert(!t->per_expert || t->when == PL_WHEN_MOE, "%s", t->hf);
        /* vectors (norms, biases) are f32; matrices take the model's type but the routers' */
        if (t->rows == PL_DIM_NONE) cr_assert_eq(t->storage, PL_STORE_F32, "%s", t->hf);
        cr_assert_neq(t->cols, PL_DIM_NONE, "%s", t->hf);
        /* llama2.c holds exactly the Llama tensors, each once per order */
        cr_assert_eq(t->llama2c != NULL, pl_model_has_tensor(&llama, t->role), "%s", t->hf);
        cr_assert_eq(t->l2c_legacy >= 0, t->llama2c != NULL);
        cr_assert_eq(t->l2c_v1 >= 0, t->llama2c != NULL);
        if (t->llama2c) {
            cr_assert(!legacy[t->l2c_legacy] && !v1[t->l2c_v1], "%s placed twice", t->llama2c);
            legacy[t->l2c_legacy] = v1[t->l2c_v1] = true;
        }
    }
    /* legacy: 0..12 but 11 (the RoPE tables); v1: 0..11 */
    for (int i = 0; i <= 12; i++) cr_assert_eq(legacy[i], i != 11, "legacy position %d", i);
    for (int i = 0; i <= 11; i++) cr_assert(v1[i], "v1 position %d", i);
    cr_assert_null(pl_tensor_spec_of(PL_T_COUNT));
    cr_assert_null(pl_tensor_spec_of((pl_tensor_role)-1));
    /* within each architecture, every tensor it has has its own name in each format */
    for (int a = 0; a < PL_ARCH_COUNT; a++) {
        pl_model_config c;
        pl_fixture_family_config((pl_arch)a, 1, &c);
        for (int r = 0; r < PL_T_COUNT; r++)
            for (int k = 0; k < r && pl_model_has_tensor(&c, (pl_tensor_role)r); k++) {
                if (!pl_model_has_tensor(&c, (pl_tensor_role)k)) continue;
                cr_assert_str_neq(pl_tensor_hf_name((pl_arch)a, (pl_tensor_role)r),
                                  pl_tensor_hf_name((pl_arch)a, (pl_tensor_role)k));
                cr_assert_str_neq(pl_tensor_gguf_name((pl_arch)a, (pl_tensor_role)r),
                                  pl_tensor_gguf_name((pl_arch)a, (pl_tensor_role)k));
            }
    }
    cr_assert_str_eq(pl_tensor_hf_name(PL_ARCH_MIXTRAL, PL_T_FFN_DOWN_EXPS),
                     "model.layers.%d.block_sparse_moe.experts.%d.w2.weight");
    cr_assert_str_eq(pl_tensor_hf_name(PL_ARCH_GEMMA2, PL_T_FFN_NORM),
                     "model.layers.%d.pre_feedforward_layernorm.weight");
    cr_assert_str_eq(pl_tensor_hf_name(PL_ARCH_GEMMA2, PL_T_ATTN_POST_NORM),
                     "model.layers.%d.post_attention_layernorm.weight");
    cr_assert_null(pl_tensor_hf_name(PL_ARCH_COUNT, PL_T_ATTN_Q));
    long layer, expert;
    cr_assert(pl_tensor_name_match2("a.%d.b.%d.c", "a.12.b.3.c", &layer, &expert));
    cr_assert(layer == 12 && expert == 3);
    cr_assert_not(pl_tensor_name_match2("a.%d.b.%d.c", "a.12.b.c", &layer, &expert));
    cr_assert_not(pl_tensor_name_match2("a.%d.b.%d.c", "a.12.b.3.cd", &layer, &expert));
}

Test(arch, architecture_rows) {
    for (int a = 0; a < PL_ARCH_COUNT; a++) {
        const pl_arch_info *i = pl_arch_get((pl_arch)a);
        cr_assert_not_null(i);
        cr_assert_eq((int)i->arch, a);
        cr_assert_eq(pl_arch_by_hf_class(i->hf_class), i);
        cr_assert_eq(pl_arch_by_model_type(i->model_type), i);
        cr_assert(strstr(pl_arch_hf_class_list(), i->hf_class), "%s", i->hf_class);
    }
    cr_assert(pl_arch_get(PL_ARCH_QWEN2)->qkv_bias && !pl_arch_get(PL_ARCH_QWEN2)->qk_norm);
    cr_assert(pl_arch_get(PL_ARCH_QWEN3)->qk_norm && !pl_arch_get(PL_ARCH_QWEN3)->qkv_bias);
    cr_assert(pl_arch_get(PL_ARCH_MISTRAL)->sliding_window);
    cr_assert_null(pl_arch_get(PL_ARCH_COUNT));
    cr_assert_null(pl_arch_by_hf_class("GPT2LMHeadModel"));
    cr_assert_null(pl_arch_by_hf_class(NULL));
}

Test(arch, slots_and_roles_are_inverse) {
    pl_model_config c;
    pl_fixture_family_config(PL_ARCH_QWEN3, 0, &c);
    c.n_layers = 5;
    size_t n = pl_model_n_slots(&c);
    cr_assert_eq(n, 3 + 5 * (size_t)PL_T_N_LAYER);
    for (size_t s = 0; s < n; s++) {
        int layer;
        pl_tensor_role r = pl_model_slot_role(&c, s, &layer);
        cr_assert_eq(pl_tensor_role_per_layer(r), layer >= 0);
        cr_assert_eq(pl_model_slot(&c, r, layer), s, "slot %zu", s);
    }
    /* model order: the embedding first, the output projection last */
    cr_assert_eq(pl_model_slot(&c, PL_T_TOKEN_EMBD, 0), 0);
    cr_assert_eq(pl_model_slot(&c, PL_T_OUTPUT, 0), n - 1);
}

/* Which tensors each family has: Llama's nine per layer; Qwen2 the biases; Qwen3 the norms;
 * the MoE families a router and three stacked expert tensors instead of the dense FFN's three
 * (Qwen2-MoE also the shared expert's four); Gemma two post-norms (Gemma 3 q/k norms too). */
Test(arch, tensors_of_each_family) {
    const struct {
        pl_arch arch;
        int per_layer;
    } want[] = {{PL_ARCH_LLAMA, 9},     {PL_ARCH_MISTRAL, 9},   {PL_ARCH_QWEN2, 12},
                {PL_ARCH_QWEN3, 11},    {PL_ARCH_MIXTRAL, 10},  {PL_ARCH_QWEN2_MOE, 17},
                {PL_ARCH_QWEN3_MOE, 12}, {PL_ARCH_GEMMA2, 11},  {PL_ARCH_GEMMA3, 13},
                {PL_ARCH_PHI3, 9}};
    cr_assert_eq(sizeof want / sizeof want[0], PL_ARCH_COUNT);
    for (size_t i = 0; i < PL_ARCH_COUNT; i++) {
        pl_model_config c;
        pl_fixture_family_config(want[i].arch, 1, &c);
        int n = 0;
        for (int r = PL_T_FIRST_LAYER; r <= PL_T_LAST_LAYER; r++)
            n += pl_model_has_tensor(&c, (pl_tensor_role)r);
        cr_assert_eq(n, want[i].per_layer, "arch %d", (int)want[i].arch);
        cr_assert(pl_model_stores_tensor(&c, PL_T_OUTPUT), "untied");
        c.tied_embeddings = true;
        cr_assert(pl_model_has_tensor(&c, PL_T_OUTPUT));
        cr_assert_not(pl_model_stores_tensor(&c, PL_T_OUTPUT), "tied: the embedding's data");
    }
}

// ----------------------------------------------------------------------------
// size figures, against sums written out from the shapes

static uint64_t pad64(uint64_t n) { return (n + 63) / 64 * 64; }

/* Qwen3's family config: dim 40, hidden 71, 4 heads and 2 KV heads of 14, vocab 103, 2 layers;
 * Qwen2's: dim 36, hidden 83, 6 heads and 2 KV heads of 6, vocab 101, 2 layers. */
Test(arch, size_figures_of_the_families) {
    pl_model_config q3, q2;
    pl_fixture_family_config(PL_ARCH_QWEN3, 1, &q3); /* untied */
    pl_fixture_family_config(PL_ARCH_QWEN2, 0, &q2); /* tied */
    /* matrices per layer, Qwen3: q 56x40, k 28x40, v 28x40, o 40x56, gate/up 71x40, down 40x71 */
    size_t q3_layer = 56 * 40 + 2 * 28 * 40 + 40 * 56 + 3 * 71 * 40;
    size_t q3_params = 2 * q3_layer + 103 * 40;
    /* Qwen2: q 36x36, k, v 12x36, o 36x36, gate/up 83x36, down 36x83; tied classifier once */
    size_t q2_layer = 36 * 36 + 2 * 12 * 36 + 36 * 36 + 3 * 83 * 36;
    size_t q2_params = 2 * q2_layer + 101 * 36;
    /* every stored tensor from a 64-byte boundary, matrices in wt, vectors in f32 */
    const pl_wtype wts[] = {PL_WTYPE_F32, PL_WTYPE_F16, PL_WTYPE_BF16};
    for (int k = 0; k < 3; k++) {
        uint64_t es = wts[k] == PL_WTYPE_F32 ? 4 : 2;
        uint64_t q3_bytes = 2 * pad64(103 * 40 * es) + pad64(40 * 4) /* embd, output, norm */
                            + 2 * (pad64(56 * 40 * es) + 2 * pad64(28 * 40 * es) +
                                   pad64(40 * 56 * es) + 3 * pad64(71 * 40 * es) +
                                   2 * pad64(40 * 4) + 2 * pad64(14 * 4));
        uint64_t q2_bytes = pad64(101 * 36 * es) + pad64(36 * 4) +
                            2 * (pad64(36 * 36 * es) + 2 * pad64(12 * 36 * es) +
                                 pad64(36 * 36 * es) + 3 * pad64(83 * 36 * es) +
                                 2 * pad64(36 * 4) + pad64(36 * 4) + 2 * pad64(12 * 4));
        uint64_t got;
        cr_assert_eq(pl_model_config_weight_bytes(&q3, wts[k], &got), PL_OK, "%s",
                     pl_last_error());
        cr_assert_eq(got, q3_bytes, "qwen3 %s: %llu, want %llu", pl_wtype_name(wts[k]),
                     (unsigned long long)got, (unsigned long long)q3_bytes);
        cr_assert_eq(pl_model_config_weight_bytes(&q2, wts[k], &got), PL_OK);
        cr_assert_eq(got, q2_bytes, "qwen2 %s: %llu, want %llu", pl_wtype_name(wts[k]),
                     (unsigned long long)got, (unsigned long long)q2_bytes);
        pl_model *m3, *m2;
        cr_assert_eq(pl_model_alloc(&q3, wts[k], "q3", &m3), PL_OK, "%s", pl_last_error());
        cr_assert_eq(pl_model_alloc(&q2, wts[k], "q2", &m2), PL_OK, "%s", pl_last_error());
        cr_assert_eq(pl_model_matmul_params(m3), q3_params);
        cr_assert_eq(pl_model_matmul_params(m2), q2_params);
        cr_assert_eq(pl_model_weight_bytes(m3), q3_params * es);
        cr_assert_eq(pl_model_weight_bytes(m2), q2_params * es);
        cr_assert_eq(pl_model_weight(m2, PL_T_ATTN_K_BIAS, 1)->type, PL_WTYPE_F32);
        cr_assert_eq(pl_model_weight(m2, PL_T_ATTN_K_BIAS, 1)->cols, 12);
        cr_assert_eq(pl_model_weight(m3, PL_T_ATTN_Q_NORM, 0)->cols, 14);
        cr_assert_null(pl_model_weight(m3, PL_T_ATTN_Q_BIAS, 0)->data, "Qwen3 has no biases");
        pl_model_free(m3);
        pl_model_free(m2);
    }
    cr_assert_eq(pl_model_config_weight_bytes(&q3, PL_WTYPE_NONE, &(uint64_t){0}),
                 PL_ERR_INVALID_ARGUMENT);
    PL_ASSERT_NO_LEAKS();
}

/* Parameters a config implies: every stored tensor's rows x cols, per layer where it is. */
static uint64_t params_of(const pl_model_config *c, uint64_t *vector_params) {
    uint64_t n = 0, v = 0;
    for (int r = 0; r < PL_T_COUNT; r++) {
        if (!pl_model_stores_tensor(c, (pl_tensor_role)r)) continue;
        int rows, cols;
        pl_model_tensor_shape(c, (pl_tensor_role)r, &rows, &cols);
        uint64_t k = (uint64_t)rows * (uint64_t)cols *
                     (pl_tensor_role_per_layer((pl_tensor_role)r) ? (uint64_t)c->n_layers : 1);
        n += k;
        if (pl_tensor_spec_of((pl_tensor_role)r)->storage == PL_STORE_F32) v += k;
    }
    *vector_params = v;
    return n;
}

/* Real configs against their published parameter counts (the safetensors metadata of
 * Llama-3.2-1B: 1,235,814,400; of Qwen2.5-0.5B: 494,032,768): the table's shapes, biases and
 * tied output are right at scale, and so are the bytes (bf16 matrices, f32 norms and biases;
 * every tensor there is a multiple of 64 bytes, so no padding). */
Test(arch, published_parameter_counts) {
    pl_model_config llama = {.arch = PL_ARCH_LLAMA, .dim = 2048, .hidden_dim = 8192,
                             .n_layers = 16, .n_heads = 32, .n_kv_heads = 8, .head_dim = 64,
                             .vocab_size = 128256, .max_seq_len = 131072, .norm_eps = 1e-5f,
                             .rope_theta = 500000.0f, .rope_layout = 1,
                             .rope_scaling = PL_ROPE_SCALING_LLAMA3, .rope_factor = 32.0f,
                             .rope_low_freq_factor = 1.0f, .rope_high_freq_factor = 4.0f,
                             .rope_original_max_pos = 8192, .tied_embeddings = true,
                             .bos_id = 128000, .eos_ids = {128001, 128008, 128009}, .n_eos = 3};
    pl_model_config qwen = {.arch = PL_ARCH_QWEN2, .dim = 896, .hidden_dim = 4864,
                            .n_layers = 24, .n_heads = 14, .n_kv_heads = 2, .head_dim = 64,
                            .vocab_size = 151936, .max_seq_len = 32768, .norm_eps = 1e-6f,
                            .rope_theta = 1000000.0f, .rope_layout = 1, .rope_factor = 1.0f,
                            .tied_embeddings = true, .bos_id = 151643,
                            .eos_ids = {151643}, .n_eos = 1};
    /* Mixtral-8x7B (46,702,792,704), Qwen3-30B-A3B (30,532,122,624), Gemma-2-2B
     * (2,614,341,888), Phi-3-mini-4k (3,821,079,552): experts, routers, post-norms, fused
     * tensors split */
    pl_model_config mixtral = {.arch = PL_ARCH_MIXTRAL, .dim = 4096, .hidden_dim = 14336,
                               .n_layers = 32, .n_heads = 32, .n_kv_heads = 8, .head_dim = 128,
                               .vocab_size = 32000, .max_seq_len = 32768, .norm_eps = 1e-5f,
                               .rope_theta = 1e6f, .rope_layout = 1, .bos_id = 1,
                               .n_experts = 8, .n_experts_used = 2, .expert_hidden_dim = 14336,
                               .norm_topk_prob = true};
    pl_model_config qwen3moe = {.arch = PL_ARCH_QWEN3_MOE, .dim = 2048, .hidden_dim = 6144,
                                .n_layers = 48, .n_heads = 32, .n_kv_heads = 4, .head_dim = 128,
                                .vocab_size = 151936, .max_seq_len = 40960, .norm_eps = 1e-6f,
                                .rope_theta = 1e6f, .rope_layout = 1, .bos_id = 151643,
                                .n_experts = 128, .n_experts_used = 8, .expert_hidden_dim = 768,
                                .norm_topk_prob = true};
    pl_model_config gemma2 = {.arch = PL_ARCH_GEMMA2, .dim = 2304, .hidden_dim = 9216,
                              .n_layers = 26, .n_heads = 8, .n_kv_heads = 4, .head_dim = 256,
                              .vocab_size = 256000, .max_seq_len = 8192, .norm_eps = 1e-6f,
                              .rope_theta = 10000.0f, .rope_layout = 1, .sliding_window = 4096,
                              .swa_pattern = 2, .tied_embeddings = true, .bos_id = 2,
                              .query_pre_attn_scalar = 256.0f, .attn_softcap = 50.0f,
                              .final_softcap = 30.0f};
    pl_model_config phi3 = {.arch = PL_ARCH_PHI3, .dim = 3072, .hidden_dim = 8192,
                            .n_layers = 32, .n_heads = 32, .n_kv_heads = 32, .head_dim = 96,
                            .vocab_size = 32064, .max_seq_len = 4096, .norm_eps = 1e-5f,
                            .rope_theta = 10000.0f, .rope_layout = 1, .sliding_window = 2047,
                            .bos_id = 1};
    const struct {
        const pl_model_config *c;
        uint64_t params;
    } cases[] = {{&llama, 1235814400ull},   {&qwen, 494032768ull},
                 {&mixtral, 46702792704ull}, {&qwen3moe, 30532122624ull},
                 {&gemma2, 2614341888ull},   {&phi3, 3821079552ull}};
    for (int i = 0; i < 6; i++) {
        uint64_t vec, n = params_of(cases[i].c, &vec), bytes;
        cr_assert_eq(n, cases[i].params, "case %d: %llu parameters", i, (unsigned long long)n);
        cr_assert_eq(pl_model_config_weight_bytes(cases[i].c, PL_WTYPE_BF16, &bytes), PL_OK,
                     "%s", pl_last_error());
        cr_assert_eq(bytes, 2 * (n - vec) + 4 * vec, "case %d: %llu bytes", i,
                     (unsigned long long)bytes);
        uint64_t total, active;
        pl_model_config_params(cases[i].c, &total, &active);
        cr_assert_eq(total, cases[i].params);
        if (!pl_arch_get(cases[i].c->arch)->moe) cr_assert_eq(active, total);
    }
    /* active: Qwen3-30B-A3B's "3.3B activated" (8 of 128 experts), Mixtral's 12.9B */
    uint64_t total, active;
    pl_model_config_params(&qwen3moe, &total, &active);
    cr_assert_eq(active, 3353032704ull, "%llu", (unsigned long long)active);
    pl_model_config_params(&mixtral, &total, &active);
    cr_assert_eq(active, 12879925248ull, "%llu", (unsigned long long)active);
}

// ----------------------------------------------------------------------------
// weight storage types

Test(wtype, table_and_block_sizes) {
    const struct {
        pl_wtype t;
        pl_dtype d;
        const char *name;
        int bytes;
    } rows[] = {{PL_WTYPE_F32, PL_DTYPE_F32, "f32", 4},
                {PL_WTYPE_F16, PL_DTYPE_F16, "f16", 2},
                {PL_WTYPE_BF16, PL_DTYPE_BF16, "bf16", 2}};
    for (size_t i = 0; i < 3; i++) {
        const pl_wtype_traits *tr = pl_wtype_traits_of(rows[i].t);
        cr_assert_not_null(tr);
        cr_assert_str_eq(tr->name, rows[i].name);
        cr_assert_eq(tr->block_elems, 1);
        cr_assert_eq(tr->block_bytes, rows[i].bytes);
        cr_assert_not_null(tr->to_f32);
        cr_assert_not_null(tr->from_f32);
        cr_assert_eq(tr->backends, PL_WTYPE_ON_REF | PL_WTYPE_ON_CPU | PL_WTYPE_ON_CUDA);
        cr_assert_eq(pl_wtype_dtype(rows[i].t), rows[i].d);
        cr_assert_eq(pl_wtype_of_dtype(rows[i].d), rows[i].t);
        uint64_t n;
        cr_assert(pl_wtype_bytes(rows[i].t, 1001, &n));
        cr_assert_eq(n, 1001u * (uint64_t)rows[i].bytes);
        cr_assert_not(pl_wtype_bytes(rows[i].t, UINT64_MAX / 2 + 1, &n), "overflow");
    }
    cr_assert_null(pl_wtype_traits_of(PL_WTYPE_NONE));
    cr_assert_null(pl_wtype_traits_of(PL_WTYPE_COUNT));
    cr_assert_str_eq(pl_wtype_name(PL_WTYPE_NONE), "none");
    cr_assert_eq(pl_wtype_of_dtype(PL_DTYPE_AUTO), PL_WTYPE_NONE);
    cr_assert_not(pl_wtype_bytes(PL_WTYPE_NONE, 4, &(uint64_t){0}));
}

/* The reference converters agree with util/dtype.h's scalar ones, from unaligned sources too,
 * and converting through the table equals rounding element by element (chunks included). */
Test(wtype, converters) {
    enum { N = 5000 }; /* more than one of pl_wtype_convert's chunks */
    static float src[N], back[N];
    static uint8_t bytes[2 * N + 1], conv[4 * N];
    pl_test_rng r;
    pl_test_rng_seed(&r, 3);
    pl_test_fill(&r, src, N, 100.0f);
    const pl_wtype half[] = {PL_WTYPE_F16, PL_WTYPE_BF16};
    for (int h = 0; h < 2; h++) {
        const pl_wtype_traits *tr = pl_wtype_traits_of(half[h]);
        tr->from_f32(src, bytes + 1, N); /* odd address: not aligned for uint16_t */
        tr->to_f32(bytes + 1, back, N);
        for (int i = 0; i < N; i++) {
            float want = half[h] == PL_WTYPE_F16 ? pl_f16_to_f32(pl_f32_to_f16(src[i]))
                                                 : pl_bf16_to_f32(pl_f32_to_bf16(src[i]));
            cr_assert_eq(back[i], want, "%s element %d", tr->name, i);
        }
        /* f16 <-> bf16 through the table: via f32, rounding once more */
        pl_wtype other = half[1 - h];
        pl_wtype_convert(conv, other, bytes + 1, half[h], N);
        pl_wtype_traits_of(other)->to_f32(conv, back, N);
        for (int i = 0; i < N; i++) {
            float mid = half[h] == PL_WTYPE_F16 ? pl_f16_to_f32(pl_f32_to_f16(src[i]))
                                                : pl_bf16_to_f32(pl_f32_to_bf16(src[i]));
            float want = other == PL_WTYPE_F16 ? pl_f16_to_f32(pl_f32_to_f16(mid))
                                               : pl_bf16_to_f32(pl_f32_to_bf16(mid));
            cr_assert_eq(back[i], want, "%s -> %s element %d", tr->name,
                         pl_wtype_name(other), i);
        }
    }
    pl_wtype_convert(conv, PL_WTYPE_F32, src, PL_WTYPE_F32, N);
    cr_assert_eq(memcmp(conv, src, sizeof src), 0);
}
