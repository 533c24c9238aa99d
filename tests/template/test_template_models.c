/*
 * tests/template/test_template_models.c - the real chat templates of ../shared/models (llama3
 * and qwen3 tokenizer_config.json, read from $PAGELLM_TEST_MODELS; linked with models_main.c,
 * so the binary exits 77, SKIP, without it) against what the oracle rendered from the same
 * files (tests/data/templates/<model>-real.expected.json).
 */
#include <criterion/criterion.h>
#include <stdio.h>

#include "test_support.h"
#include "tmpl_check.h"

static void real(const char *model) {
    char path[1024], name[256], exp_name[256];
    snprintf(name, sizeof name, "%s/tokenizer_config.json", model);
    cr_assert(pl_test_model_path(name, path, sizeof path), "%s missing", name);
    json_t *cfg = tmpl_load_json(path);
    snprintf(exp_name, sizeof exp_name, "%s-real.expected.json", model);
    json_t *expected = tmpl_fixture(exp_name);
    cr_assert(tmpl_check_family(cfg, expected) >= 10);
    json_decref(cfg);
    json_decref(expected);
    PL_ASSERT_NO_LEAKS();
}

Test(template_models, llama3) { real("llama3"); }
Test(template_models, qwen3) { real("qwen3"); }
