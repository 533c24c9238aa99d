/*
 * tests/tokenizer/test_tokenizer_hf_models.c - the tokenizer.json implementation on the real
 * Llama 3 and Qwen3 tokenizers in $PAGELLM_TEST_MODELS (linked with models_main.c: the binary
 * exits 77, SKIP, without it): ids, decodes and streams equal to the oracle on the corpus and
 * on 1 MB inputs; the facts the engine and chat templates read; and tok512_hf (a conversion of
 * tok512.model to tokenizer.json) against the SentencePiece library on the same model.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "hf_oracle.h"
#include "test_support.h"
#include "tok_check.h"
#include "tokenizer/tokenizer.h"
#include "util/alloc.h"

static pl_tokenizer *load_shared(const char *name) {
    char path[1024];
    cr_assert(pl_test_model_path(name, path, sizeof path), "%s missing from PAGELLM_TEST_MODELS",
              name);
    pl_tokenizer *t = NULL;
    cr_assert_eq(pl_tok_load(path, &t), PL_OK, "%s: %s", path, pl_last_error());
    return t;
}

Test(tokenizer_hf_models, llama3_equals_the_oracle) {
    pl_tokenizer *t = load_shared("llama3");
    int n = hf_oracle_check_cases("llama3", t);
    fprintf(stderr, "llama3: %d oracle cases\n", n);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

Test(tokenizer_hf_models, qwen3_equals_the_oracle) {
    pl_tokenizer *t = load_shared("qwen3/tokenizer.json");
    int n = hf_oracle_check_cases("qwen3", t);
    fprintf(stderr, "qwen3: %d oracle cases\n", n);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

Test(tokenizer_hf_models, one_megabyte_inputs_equal_the_oracle, .timeout = 120) {
    pl_tokenizer *t = load_shared("llama3/tokenizer.json");
    hf_oracle_check_long("llama3", t);
    pl_tok_free(t);
    t = load_shared("qwen3");
    hf_oracle_check_long("qwen3", t);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}
