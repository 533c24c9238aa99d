/*
 * tests/e2e/test_cuda_families.c - the random-weight models of every family of
 * test_e2e_families.c (Llama 3, Mistral, Qwen2, Qwen3, Mixtral, Qwen2-MoE, Qwen3-MoE, Gemma 2,
 * Gemma 3, Phi-3) on the CUDA backend (under the CPU emulation in suite 'cuda',
 * natively in suite 'gpu'): greedy tokens equal the dense reference's for 200 tokens per
 * prompt, alone and batched.
 *
 * Precision: the CUDA backend multiplies f16 weights by activations it first rounds to f16
 * (kernels/cuda/matmul.cu). The model is loaded as f16 on both sides and the dense reference
 * rounds each product's input the same way (dense_ref_set_round_matmul_inputs), with an f32
 * KV cache; what remains is f32 against double accumulation, far below the gaps between the
 * top logits of these models over the tokens compared.
 */
#include <criterion/criterion.h>

#include "families.h"

/* Both variants for the dense families; one (tied) for the families added since, whose
 * emulated runs take longer (the experts' grouped kernels), to keep the suite's time. */
static void check(pl_arch arch) {
    const family_case cases[] = {{.arch = arch, .variant = 0, .seed = 11},
                                 {.arch = arch, .variant = 1, .seed = 12}};
    int n = arch <= PL_ARCH_QWEN3 ? 2 : 1;
    for (int i = 0; i < n; i++) {
        family_run f;
        family_setup(&f, &cases[i], PL_DTYPE_F16, true);
        family_check_engine(&f, PL_BACKEND_CUDA, true);
        family_check_engine(&f, PL_BACKEND_CUDA, false);
        family_teardown(&f);
    }
    PL_ASSERT_NO_LEAKS();
}

Test(cuda_families, llama3_matches_the_dense_reference, .timeout = 240) { check(PL_ARCH_LLAMA); }
Test(cuda_families, mistral_matches_the_dense_reference, .timeout = 240) {
    check(PL_ARCH_MISTRAL);
}
Test(cuda_families, qwen2_matches_the_dense_reference, .timeout = 240) { check(PL_ARCH_QWEN2); }
Test(cuda_families, qwen3_matches_the_dense_reference, .timeout = 240) { check(PL_ARCH_QWEN3); }
Test(cuda_families, mixtral_matches_the_dense_reference, .timeout = 240) {
    check(PL_ARCH_MIXTRAL);
}
Test(cuda_families, qwen2_moe_matches_the_dense_reference, .timeout = 240) {
    check(PL_ARCH_QWEN2_MOE);
}
Test(cuda_families, qwen3_moe_matches_the_dense_reference, .timeout = 240) {
    check(PL_ARCH_QWEN3_MOE);
}
Test(cuda_families, gemma2_matches_the_dense_reference, .timeout = 240) {
    check(PL_ARCH_GEMMA2);
}
Test(cuda_families, gemma3_matches_the_dense_reference, .timeout = 240) {
    check(PL_ARCH_GEMMA3);
}
Test(cuda_families, phi3_matches_the_dense_reference, .timeout = 240) { check(PL_ARCH_PHI3); }
