/*
 * tests/template/test_template_oracle.c - the interpreter against the oracle's fixtures:
 * every small construct of constructs.json, 1500 seeded random templates of random.json, and
 * the chat templates of Llama 3.1, Llama 3.2, Mistral Instruct v0.3, Qwen2.5, TinyLlama,
 * Gemma 2, Gemma 3, Phi-3 and Phi-3.5
 * (tests/data/templates/<family>.*) on their conversations (written and random), byte for
 * byte. Fixtures: tests/oracle/gen_template_fixtures.mjs.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "test_support.h"
#include "tmpl_check.h"

Test(template_oracle, constructs) {
    json_t *f = tmpl_fixture("constructs.json");
    const json_t *cases = json_object_get(f, "cases");
    cr_assert(json_array_size(cases) > 100, "too few construct cases");
    size_t i, bad = 0;
    const json_t *c;
    json_array_foreach(cases, i, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        pl_tmpl *t = tmpl_parse_ok(json_string_value(json_object_get(c, "template")));
        if (!tmpl_check_case(t, json_object_get(c, "vars"), c, name)) bad++;
        pl_tmpl_free(t);
    }
    cr_expect_eq(bad, 0, "%zu of %zu construct cases differ from the oracle", bad,
                 json_array_size(cases));
    json_decref(f);
    PL_ASSERT_NO_LEAKS();
}

Test(template_oracle, random_templates) {
    json_t *f = tmpl_fixture("random.json");
    size_t g, i, bad = 0, total = 0, rendered = 0;
    const json_t *grp, *c;
    json_array_foreach(json_object_get(f, "groups"), g, grp) {
        const char *gname = json_string_value(json_object_get(grp, "name"));
        json_array_foreach(json_object_get(grp, "cases"), i, c) {
            char what[128];
            snprintf(what, sizeof what, "random/%s/%zu", gname, i);
            if (!tmpl_check_source(json_string_value(json_object_get(c, "template")),
                                   json_object_get(grp, "vars"), c, what))
                bad++;
            rendered += json_object_get(c, "expect") != NULL;
            total++;
        }
    }
    cr_expect_gt(total, 1000);
    cr_expect_gt(rendered, total / 2, "most random cases should render, not fail");
    cr_expect_eq(bad, 0, "%zu of %zu random cases differ from the oracle", bad, total);
    json_decref(f);
    PL_ASSERT_NO_LEAKS();
}

static void family(const char *name) {
    char cfg_name[256], exp_name[256];
    snprintf(cfg_name, sizeof cfg_name, "%s.tokenizer_config.json", name);
    snprintf(exp_name, sizeof exp_name, "%s.expected.json", name);
    json_t *cfg = tmpl_fixture(cfg_name), *expected = tmpl_fixture(exp_name);
    cr_assert(tmpl_check_family(cfg, expected) >= 10);
    json_decref(cfg);
    json_decref(expected);
    PL_ASSERT_NO_LEAKS();
}

Test(template_oracle, llama_3_1) { family("llama-3.1-8b-instruct"); }
Test(template_oracle, llama_3_2) { family("llama-3.2-3b-instruct"); }
Test(template_oracle, mistral_v0_3) { family("mistral-7b-instruct-v0.3"); }
Test(template_oracle, qwen2_5) { family("qwen2.5-3b-instruct"); }
Test(template_oracle, tinyllama) { family("tinyllama-1.1b-chat-v1.0"); }
/* issue 30's families (tests/oracle/gen_family_tokenizers.mjs wrote their configs) */
Test(template_oracle, gemma_2) { family("gemma-2-2b-it"); }
Test(template_oracle, gemma_3) { family("gemma-3-1b-it"); }
Test(template_oracle, phi_3) { family("phi-3-mini-4k-instruct"); }
Test(template_oracle, phi_3_5) { family("phi-3.5-mini-instruct"); }
