/*
 * tests/unit/test_field_names.c - the other names of fields (vLLM's, through the alias
 * tables) and the naming of fields in messages per interface (pl_last_error_as): the C
 * members, the command line's flags, JSON keys.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "pagellm.h"
#include "test_support.h"

static const pl_field *field_named(const pl_field *f, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(f[i].name, name)) return &f[i];
    return NULL;
}

static void check_aliases(const pl_field *f, size_t n, const pl_field_alias *a, size_t n_a) {
    cr_assert_gt(n_a, 0);
    for (size_t i = 0; i < n_a; i++) {
        cr_assert(field_named(f, n, a[i].name), "alias %s names no field (%s)", a[i].alias,
                  a[i].name);
        cr_assert_null(field_named(f, n, a[i].alias), "alias %s hides a field of that name",
                       a[i].alias);
        for (size_t j = 0; j < i; j++)
            cr_assert_str_neq(a[i].alias, a[j].alias, "alias %s twice", a[i].alias);
    }
}

Test(aliases, every_alias_names_a_field_and_hides_none) {
    size_t n, n_a;
    const pl_field *f = pl_engine_config_fields(&n);
    const pl_field_alias *a = pl_engine_config_aliases(&n_a);
    check_aliases(f, n, a, n_a);
    f = pl_sampling_params_fields(&n);
    a = pl_sampling_params_aliases(&n_a);
    check_aliases(f, n, a, n_a);
}

Test(aliases, the_setters_take_vllms_names) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    cr_assert_eq(pl_engine_config_set(&c, "max_num_batched_tokens", "512"), PL_OK);
    cr_assert_eq(c.max_total_tokens, 512);
    cr_assert_eq(pl_engine_config_set_json(&c, "gpu_memory_utilization", "0.5"), PL_OK);
    cr_assert_float_eq(c.memory_threshold, 0.5, 1e-12);
    cr_assert_eq(pl_engine_config_set_json(&c, "kv_cache_dtype", "\"float32\""), PL_OK);
    cr_assert_eq(c.kv_dtype, PL_DTYPE_F32);
    cr_assert_eq(pl_engine_config_set(&c, "num_gpu_blocks_override", "77"), PL_OK);
    cr_assert_eq(c.max_num_blocks, 77);
    /* a misspelt alias is suggested like a field */
    cr_assert_eq(pl_engine_config_set(&c, "gpu_memory_utilisation", "0.5"), PL_ERR_NOT_FOUND);
    cr_assert(strstr(pl_last_error(), "did you mean 'gpu_memory_utilization'"), "%s",
              pl_last_error());
    pl_engine_config_deinit(&c);

    pl_sampling_params p;
    pl_sampling_params_default(&p);
    cr_assert_eq(pl_sampling_params_set_json(&p, "stop_token_ids", "[7, 9]"), PL_OK);
    cr_assert_eq(p.n_stop_ids, 2);
    cr_assert_eq(p.stop_ids[1], 9);
    pl_sampling_params_deinit(&p);
}

Test(naming, a_range_error_names_the_field_each_way) {
    pl_sampling_params p;
    pl_sampling_params_default(&p);
    cr_assert_eq(pl_sampling_params_set(&p, "top_p", "0"), PL_ERR_INVALID_ARGUMENT);
    cr_assert_str_eq(pl_last_error(), "sampling.top_p = 0: must be in (0, 1]");
    cr_assert_str_eq(pl_last_error_as(PL_NAMING_C), "sampling.top_p = 0: must be in (0, 1]");
    cr_assert_str_eq(pl_last_error_as(PL_NAMING_FLAG), "--top-p = 0: must be in (0, 1]");
    cr_assert_str_eq(pl_last_error_as(PL_NAMING_JSON), "top_p = 0: must be in (0, 1]");
    /* set through an alias: the field's own names */
    cr_assert_eq(pl_sampling_params_set_json(&p, "stop_token_ids", "[-1]"),
                 PL_ERR_INVALID_ARGUMENT);
    cr_assert(!strncmp(pl_last_error_as(PL_NAMING_FLAG), "--stop-id[0]", 12), "%s",
              pl_last_error_as(PL_NAMING_FLAG));
    cr_assert(!strncmp(pl_last_error_as(PL_NAMING_JSON), "stop_token_ids[0]", 17), "%s",
              pl_last_error_as(PL_NAMING_JSON));
    pl_sampling_params_deinit(&p);
}

Test(naming, a_rule_between_fields_names_both) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = "dummy:tiny";
    c.max_total_tokens = 2;
    c.max_batch_size = 4;
    cr_assert_eq(pl_engine_config_validate(&c), PL_ERR_INVALID_ARGUMENT);
    cr_assert_str_eq(pl_last_error(), "config.max_total_tokens = 2: must be >= max_batch_size "
                                      "(4), or a full batch of decodes cannot run");
    cr_assert_str_eq(pl_last_error_as(PL_NAMING_FLAG), "--max-total-tokens = 2: must be >= "
                     "--max-batch-size (4), or a full batch of decodes cannot run");
    cr_assert_str_eq(pl_last_error_as(PL_NAMING_JSON), "max_num_batched_tokens = 2: must be >= "
                     "max_batch_size (4), or a full batch of decodes cannot run");
    c.max_total_tokens = 4096;
    c.model_path = NULL;
    cr_assert_eq(pl_engine_config_validate(&c), PL_ERR_INVALID_ARGUMENT);
    cr_assert(!strncmp(pl_last_error_as(PL_NAMING_FLAG), "--model is not set", 18), "%s",
              pl_last_error_as(PL_NAMING_FLAG));
}

Test(naming, a_field_without_a_flag_and_unmarked_text_pass_through) {
    pl_chat_options o;
    pl_chat_options_default(&o);
    cr_assert_eq(pl_chat_options_set_json(&o, "chat_template", "5"), PL_ERR_INVALID_ARGUMENT);
    cr_assert(!strncmp(pl_last_error_as(PL_NAMING_FLAG), "chat_template:", 14), "%s",
              pl_last_error_as(PL_NAMING_FLAG));
    pl_chat_options_deinit(&o);
    cr_assert_eq(pl_engine_config_set(NULL, "block_size", "16"), PL_ERR_INVALID_ARGUMENT);
    cr_assert_str_eq(pl_last_error_as(PL_NAMING_FLAG), pl_last_error());
    /* the marks never reach pl_last_error */
    pl_engine_config c;
    pl_engine_config_default(&c);
    cr_assert_eq(pl_engine_config_set(&c, "block_size", "x"), PL_ERR_INVALID_ARGUMENT);
    cr_assert_null(strpbrk(pl_last_error(), "\x1e\x1f"));
    cr_assert_str_eq(pl_last_error(), "config.block_size: 'x' is not an integer");
}

Test(bias, logit_bias_from_text_and_json) {
    pl_sampling_params p;
    pl_sampling_params_default(&p);
    cr_assert_eq(p.n_logit_bias, 0);
    cr_assert(p.skip_special_tokens && !p.include_stop_str_in_output);
    /* text: comma-separated ID:BIAS, appended (a repeated flag) */
    cr_assert_eq(pl_sampling_params_set(&p, "logit_bias", "5:-100,7:2.5"), PL_OK);
    cr_assert_eq(pl_sampling_params_set(&p, "logit_bias", "9:1,7:2.5"), PL_OK);
    cr_assert_eq(p.n_logit_bias, 3, "a token given again replaces its entry");
    cr_assert_eq(p.logit_bias[0].token, 5);
    cr_assert_float_eq(p.logit_bias[0].bias, -100.0f, 0);
    cr_assert_eq(p.logit_bias[2].token, 9);
    size_t n;
    const pl_field *f = pl_sampling_params_fields(&n);
    const pl_field *lb = NULL;
    for (size_t i = 0; i < n; i++)
        if (!strcmp(f[i].name, "logit_bias")) lb = &f[i];
    cr_assert(lb && lb->kind == PL_FIELD_BIAS);
    char buf[128];
    pl_field_to_json(lb, &p, buf, sizeof buf);
    cr_assert_str_eq(buf, "{\"5\":-100,\"7\":2.5,\"9\":1}");
    /* JSON: OpenAI's object, replacing; what to_json wrote reads back */
    cr_assert_eq(pl_sampling_params_set_json(&p, "logit_bias", "{\"42\": 3}"), PL_OK);
    cr_assert_eq(p.n_logit_bias, 1);
    cr_assert_eq(p.logit_bias[0].token, 42);
    cr_assert_eq(pl_sampling_params_set_json(&p, "logit_bias", "{\"5\":-100,\"7\":2.5}"), PL_OK);
    pl_field_to_json(lb, &p, buf, sizeof buf);
    cr_assert_str_eq(buf, "{\"5\":-100,\"7\":2.5}");
    cr_assert_eq(pl_sampling_params_set_json(&p, "logit_bias", "null"), PL_OK);
    cr_assert_eq(p.n_logit_bias, 0);
    cr_assert_eq(pl_sampling_params_validate(&p), PL_OK);
    /* refusals name the field; nothing changes */
    cr_assert_eq(pl_sampling_params_set(&p, "logit_bias", "5:101"), PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error_as(PL_NAMING_FLAG), "--logit-bias"), "%s",
              pl_last_error_as(PL_NAMING_FLAG));
    cr_assert(strstr(pl_last_error(), "[-100, 100]"), "%s", pl_last_error());
    cr_assert_eq(pl_sampling_params_set(&p, "logit_bias", "x:1"), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_sampling_params_set(&p, "logit_bias", "5"), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_sampling_params_set_json(&p, "logit_bias", "{\"-1\": 1}"),
                 PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_sampling_params_set_json(&p, "logit_bias", "{\"1\": \"a\"}"),
                 PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_sampling_params_set_json(&p, "logit_bias", "[1, 2]"),
                 PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error_as(PL_NAMING_JSON), "logit_bias: must be an object"), "%s",
              pl_last_error_as(PL_NAMING_JSON));
    cr_assert_eq(p.n_logit_bias, 0);
    /* a caller's own array is checked as submit does */
    pl_logit_bias bad[] = {{3, 1.0f}, {4, 1000.0f}};
    p.logit_bias = bad;
    p.n_logit_bias = 2;
    cr_assert_eq(pl_sampling_params_validate(&p), PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "sampling.logit_bias[1].bias = 1000"), "%s",
              pl_last_error());
    p.logit_bias = NULL;
    p.n_logit_bias = 0;
    pl_sampling_params_deinit(&p);
}
