/*
 * tests/unit/test_config.c - status strings, the last-error channel and config validation.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "pagellm.h"
#include "test_support.h"

Test(status, names_and_strings_cover_every_code) {
    pl_status all[] = {PL_OK, PL_ERR_INVALID_ARGUMENT, PL_ERR_OUT_OF_MEMORY, PL_ERR_IO,
                       PL_ERR_FORMAT, PL_ERR_UNSUPPORTED, PL_ERR_NOT_FOUND, PL_ERR_TOO_LONG,
                       PL_ERR_QUEUE_FULL, PL_ERR_BACKEND};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        cr_assert_neq(strcmp(pl_status_name(all[i]), "PL_ERR_UNKNOWN"), 0);
        cr_assert_neq(strcmp(pl_status_string(all[i]), "unknown status"), 0);
        for (size_t j = 0; j < i; j++)
            cr_assert_neq(strcmp(pl_status_name(all[i]), pl_status_name(all[j])), 0);
    }
    cr_assert_str_eq(pl_status_name(PL_ERR_IO), "PL_ERR_IO");
    cr_assert_str_eq(pl_status_string(PL_ERR_IO), "input/output error");
    cr_assert_str_eq(pl_status_name((pl_status)-77), "PL_ERR_UNKNOWN");
    cr_assert_str_eq(pl_status_string((pl_status)5), "unknown status");
}

Test(config, defaults_are_valid_and_documented_values) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    cr_assert_eq(pl_engine_config_validate(&c), PL_OK, "%s", pl_last_error());
    cr_assert_eq(c.block_size, 16);
    cr_assert_eq(c.max_num_blocks, 0);
    cr_assert_eq(c.max_batch_size, 32);
    cr_assert_eq(c.max_num_seqs, 256);
    cr_assert_eq(c.max_total_tokens, 4096);
    cr_assert_eq(c.max_model_len, 0);
    cr_assert_float_eq(c.memory_threshold, 0.9, 1e-12);
    cr_assert(c.enable_prefix_caching);
    cr_assert(c.enable_chunked_prefill);
}

Test(config, null_is_refused) {
    cr_assert_eq(pl_engine_config_validate(NULL), PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "NULL"));
}

typedef struct bad_case {
    const char *field; /* must appear in the message */
    void (*apply)(pl_engine_config *c);
} bad_case;

static void bs0(pl_engine_config *c) { c->block_size = 0; }
static void bs3(pl_engine_config *c) { c->block_size = 24; }
static void bs512(pl_engine_config *c) { c->block_size = 512; }
static void bsneg(pl_engine_config *c) { c->block_size = -16; }
static void mbs0(pl_engine_config *c) { c->max_batch_size = 0; }
static void mtt(pl_engine_config *c) { c->max_total_tokens = c->max_batch_size - 1; }
static void mem0(pl_engine_config *c) { c->memory_threshold = 0.0; }
static void mem_big(pl_engine_config *c) { c->memory_threshold = 1.5; }
static void mem_nan(pl_engine_config *c) { c->memory_threshold = NAN; }
static void mem_neg(pl_engine_config *c) { c->memory_threshold = -0.1; }
static void nblocks(pl_engine_config *c) { c->max_num_blocks = -1; }
static void seqs(pl_engine_config *c) { c->max_num_seqs = 4; }
static void model(pl_engine_config *c) { c->model_path = ""; }
static void model_null(pl_engine_config *c) { c->model_path = NULL; }
static void backend(pl_engine_config *c) { c->backend = (pl_backend_kind)7; }
static void threads(pl_engine_config *c) { c->n_threads = -2; }
static void mml(pl_engine_config *c) { c->max_model_len = -5; }
static void wm(pl_engine_config *c) { c->watermark = NAN; }
static void policy(pl_engine_config *c) { c->overflow_policy = (pl_overflow_policy)9; }
static void waiting(pl_engine_config *c) { c->max_waiting = -1; }
static void dtype(pl_engine_config *c) { c->weight_dtype = (pl_dtype)11; }
static void kvdtype(pl_engine_config *c) { c->kv_dtype = (pl_dtype)-3; }
static void lpt(pl_engine_config *c) { c->long_prefill_threshold = -1; }
static void nochunk(pl_engine_config *c) {
    c->enable_chunked_prefill = false;
    c->max_model_len = 8192;
}

Test(config, every_nonsensical_field_is_named) {
    bad_case cases[] = {
        {"block_size", bs0},         {"block_size", bs3},       {"block_size", bs512},
        {"block_size", bsneg},       {"max_batch_size", mbs0},  {"max_total_tokens", mtt},
        {"memory_threshold", mem0},  {"memory_threshold", mem_big},
        {"memory_threshold", mem_nan}, {"memory_threshold", mem_neg},
        {"max_num_blocks", nblocks}, {"max_num_seqs", seqs},    {"model_path", model},
        {"model_path", model_null},  {"backend", backend},      {"n_threads", threads},
        {"max_model_len", mml},      {"watermark", wm},         {"overflow_policy", policy},
        {"max_waiting", waiting},    {"weight_dtype", dtype},   {"kv_dtype", kvdtype},
        {"long_prefill_threshold", lpt}, {"max_model_len", nochunk},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pl_engine_config c;
        pl_engine_config_default(&c);
        cases[i].apply(&c);
        cr_assert_eq(pl_engine_config_validate(&c), PL_ERR_INVALID_ARGUMENT, "case %zu (%s)", i,
                     cases[i].field);
        cr_assert(strstr(pl_last_error(), cases[i].field), "case %zu: message '%s' lacks '%s'",
                  i, pl_last_error(), cases[i].field);
    }
}

Test(config, every_power_of_two_block_size_is_accepted) {
    for (int bs = 1; bs <= 256; bs *= 2) {
        pl_engine_config c;
        pl_engine_config_default(&c);
        c.block_size = bs;
        cr_assert_eq(pl_engine_config_validate(&c), PL_OK, "block_size %d: %s", bs, pl_last_error());
    }
}
