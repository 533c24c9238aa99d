/*
 * tests/unit/test_config.c - status strings, the field tables (every field has a default, a
 * range or a reason not to, a flag and help; defaults round-trip through JSON), the setters
 * by name from text and JSON (each kind, errors naming the field, nothing changed on
 * failure), the struct_size check, and the rules between config fields.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "engine/fields.h"
#include "pagellm.h"
#include "test_support.h"

/* Asserts status s == want and that the thread's message contains `needle`. */
#define EXPECT(s, want, needle)                                                                \
    do {                                                                                       \
        pl_status got_ = (s);                                                                  \
        cr_assert_eq(got_, (want), "%s: got %s (%s), want %s", #s, pl_status_name(got_),      \
                     pl_last_error(), pl_status_name(want));                                  \
        cr_assert(strstr(pl_last_error(), (needle)) != NULL,                                   \
                  "%s: message '%s' does not name '%s'", #s, pl_last_error(), (needle));       \
    } while (0)

Test(status, names_and_strings_cover_every_code) {
    pl_status all[] = {
#define ALL(name, value, text) PL_##name,
        PL_STATUS_MAP(ALL)
#undef ALL
    };
    cr_assert_eq(sizeof all / sizeof all[0], 10);
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        cr_assert_neq(strcmp(pl_status_name(all[i]), "PL_ERR_UNKNOWN"), 0);
        cr_assert_neq(strcmp(pl_status_string(all[i]), "unknown status"), 0);
        for (size_t j = 0; j < i; j++)
            cr_assert_neq(strcmp(pl_status_name(all[i]), pl_status_name(all[j])), 0);
    }
    cr_assert_str_eq(pl_status_name(PL_ERR_IO), "PL_ERR_IO");
    cr_assert_eq(PL_ERR_IO, -3);
    cr_assert_str_eq(pl_status_string(PL_ERR_IO), "input/output error");
    cr_assert_str_eq(pl_status_name((pl_status)-77), "PL_ERR_UNKNOWN");
    cr_assert_str_eq(pl_status_string((pl_status)5), "unknown status");
    cr_assert_str_eq(pl_finish_reason_name(PL_FINISH_OVERLOADED), "overloaded");
    cr_assert_str_eq(pl_finish_reason_name((pl_finish_reason)42), "none");
}

/* ---- defaults and rules ---------------------------------------------------------------- */

static pl_engine_config with_model(void) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = "dummy:tiny";
    return c;
}

Test(config, defaults_are_the_documented_values) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    cr_assert_eq(c.struct_size, sizeof c);
    cr_assert_null(c.storage);
    cr_assert_null(c.model_path, "no default model: a forgotten model is an error");
    cr_assert_eq(c.block_size, 16);
    cr_assert_eq(c.max_num_blocks, 0);
    cr_assert_eq(c.max_batch_size, 0);
    cr_assert_eq(c.max_num_seqs, 0);
    cr_assert_eq(c.max_total_tokens, 4096);
    cr_assert_eq(c.max_model_len, 0);
    cr_assert_float_eq(c.memory_threshold, 0.9, 1e-12);
    cr_assert(c.enable_prefix_caching);
    cr_assert(c.enable_chunked_prefill);
    cr_assert_eq(c.dummy_seed, 1234);
    pl_engine_config_resolve(&c);
    cr_assert_eq(c.max_batch_size, 32);
    cr_assert_eq(c.max_num_seqs, 256);

    pl_sampling_params p;
    pl_sampling_params_default(&p);
    cr_assert_eq(p.struct_size, sizeof p);
    cr_assert_float_eq(p.top_p, 1.0f, 0, "top_p 1.0 as in vLLM and OpenAI");
    cr_assert_float_eq(p.temperature, 1.0f, 0);
    cr_assert_eq(p.max_tokens, 100);
    cr_assert_eq(p.n, 1);
    cr_assert_eq(p.logprobs, -1);
    cr_assert_eq(p.prompt_logprobs, -1);
    cr_assert_eq(p.prompt_logits, -1);
    cr_assert(!p.has_seed);
    cr_assert_null(p.stop);
    cr_assert_eq(p.n_stop, 0);
    cr_assert_eq(pl_sampling_params_validate(&p), PL_OK, "%s", pl_last_error());
}

Test(config, a_missing_model_is_an_error) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    EXPECT(pl_engine_config_validate(&c), PL_ERR_INVALID_ARGUMENT, "model_path");
    pl_engine *e = (pl_engine *)&c;
    EXPECT(pl_engine_create(&c, &e), PL_ERR_INVALID_ARGUMENT, "no default model");
    cr_assert_eq(e, (pl_engine *)&c);
    c = with_model();
    cr_assert_eq(pl_engine_config_validate(&c), PL_OK, "%s", pl_last_error());
}

Test(config, null_is_refused) {
    EXPECT(pl_engine_config_validate(NULL), PL_ERR_INVALID_ARGUMENT, "NULL");
    EXPECT(pl_sampling_params_validate(NULL), PL_ERR_INVALID_ARGUMENT, "NULL");
}

typedef struct bad_case {
    const char *field; /* must appear in the message */
    void (*apply)(pl_engine_config *c);
} bad_case;

static void bs0(pl_engine_config *c) { c->block_size = 0; }
static void bs3(pl_engine_config *c) { c->block_size = 24; }
static void bs512(pl_engine_config *c) { c->block_size = 512; }
static void bsneg(pl_engine_config *c) { c->block_size = -16; }
static void mbsneg(pl_engine_config *c) { c->max_batch_size = -1; }
static void mtt(pl_engine_config *c) { c->max_total_tokens = 16; c->max_batch_size = 17; }
static void mtt_derived(pl_engine_config *c) { c->max_total_tokens = 31; } /* batch 32 */
static void mem0(pl_engine_config *c) { c->memory_threshold = 0.0; }
static void mem_big(pl_engine_config *c) { c->memory_threshold = 1.5; }
static void mem_nan(pl_engine_config *c) { c->memory_threshold = NAN; }
static void mem_neg(pl_engine_config *c) { c->memory_threshold = -0.1; }
static void nblocks(pl_engine_config *c) { c->max_num_blocks = -1; }
static void seqs(pl_engine_config *c) { c->max_num_seqs = 4; c->max_batch_size = 8; }
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
static void kvquant(pl_engine_config *c) { c->kv_dtype = PL_DTYPE_Q8_0; } /* weights only */
static void lpt(pl_engine_config *c) { c->long_prefill_threshold = -1; }
static void nochunk(pl_engine_config *c) {
    c->enable_chunked_prefill = false;
    c->max_model_len = 8192;
}
/* "--no-chunked-prefill --long-prefill-threshold 10" was accepted silently */
static void nochunk_lpt(pl_engine_config *c) {
    c->enable_chunked_prefill = false;
    c->long_prefill_threshold = 10;
}

Test(config, every_nonsensical_field_is_named) {
    bad_case cases[] = {
        {"block_size", bs0},         {"block_size", bs3},       {"block_size", bs512},
        {"block_size", bsneg},       {"max_batch_size", mbsneg}, {"max_total_tokens", mtt},
        {"max_total_tokens", mtt_derived},
        {"memory_threshold", mem0},  {"memory_threshold", mem_big},
        {"memory_threshold", mem_nan}, {"memory_threshold", mem_neg},
        {"max_num_blocks", nblocks}, {"max_num_seqs", seqs},    {"model_path", model},
        {"model_path", model_null},  {"backend", backend},      {"n_threads", threads},
        {"max_model_len", mml},      {"watermark", wm},         {"overflow_policy", policy},
        {"max_waiting", waiting},    {"weight_dtype", dtype},   {"kv_dtype", kvdtype},
        {"kv_dtype", kvquant},
        {"long_prefill_threshold", lpt}, {"max_model_len", nochunk},
        {"long_prefill_threshold", nochunk_lpt},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pl_engine_config c = with_model();
        cases[i].apply(&c);
        cr_assert_eq(pl_engine_config_validate(&c), PL_ERR_INVALID_ARGUMENT, "case %zu (%s)", i,
                     cases[i].field);
        cr_assert(strstr(pl_last_error(), cases[i].field), "case %zu: message '%s' lacks '%s'",
                  i, pl_last_error(), cases[i].field);
    }
}

Test(config, every_power_of_two_block_size_is_accepted) {
    for (int bs = 1; bs <= 256; bs *= 2) {
        pl_engine_config c = with_model();
        c.block_size = bs;
        cr_assert_eq(pl_engine_config_validate(&c), PL_OK, "block_size %d: %s", bs,
                     pl_last_error());
    }
}

/* "--max-num-seqs 4" alone used to fail with "must be >= max_batch_size (32)". */
Test(config, batch_and_sequence_limits_derive_from_each_other) {
    pl_engine_config c = with_model();
    c.max_num_seqs = 4;
    cr_assert_eq(pl_engine_config_validate(&c), PL_OK, "%s", pl_last_error());
    pl_engine_config_resolve(&c);
    cr_assert_eq(c.max_batch_size, 4);
    cr_assert_eq(c.max_num_seqs, 4);
    c = with_model();
    c.max_batch_size = 512;
    c.max_total_tokens = 4096;
    cr_assert_eq(pl_engine_config_validate(&c), PL_OK, "%s", pl_last_error());
    pl_engine_config_resolve(&c);
    cr_assert_eq(c.max_num_seqs, 512);
    c = with_model();
    c.max_batch_size = 8;
    pl_engine_config_resolve(&c);
    cr_assert_eq(c.max_num_seqs, 256);
}

/* ---- the tables ------------------------------------------------------------------------- */

static size_t member_size(const pl_field *f) {
    switch (f->kind) {
    case PL_FIELD_BOOL: return sizeof(bool);
    case PL_FIELD_INT: return sizeof(int);
    case PL_FIELD_U64: return sizeof(uint64_t);
    case PL_FIELD_SIZE: return sizeof(size_t);
    case PL_FIELD_DOUBLE: return sizeof(double);
    case PL_FIELD_FLOAT: return sizeof(float);
    case PL_FIELD_STRING: return sizeof(char *);
    case PL_FIELD_ENUM: return sizeof(int);
    case PL_FIELD_IDS:
    case PL_FIELD_STRINGS:
    case PL_FIELD_BIAS: return sizeof(void *);
    case PL_FIELD_OPT_U64: return sizeof(uint64_t);
    }
    return 0;
}

/* Every row is complete, and the rows tile the struct after its two header members: the
 * struct is generated from the table, so a member without a row cannot exist; this checks
 * the offsets the rows report. */
static void check_table(const char *what, const pl_field *f, size_t n, size_t struct_size) {
    cr_assert_gt(n, 10, "%s", what);
    size_t end = offsetof(pl_engine_config, storage) + sizeof(void *);
    for (size_t i = 0; i < n; i++) {
        cr_assert(f[i].name && f[i].name[0], "%s row %zu", what, i);
        cr_assert(f[i].help && strlen(f[i].help) > 10, "%s.%s: help", what, f[i].name);
        cr_assert(f[i].flag && !strncmp(f[i].flag, "--", 2), "%s.%s: flag", what, f[i].name);
        cr_assert((f[i].value_name != NULL) == (f[i].kind != PL_FIELD_BOOL), "%s.%s: value name",
                  what, f[i].name);
        bool numeric = f[i].kind == PL_FIELD_INT || f[i].kind == PL_FIELD_DOUBLE ||
                       f[i].kind == PL_FIELD_FLOAT || f[i].kind == PL_FIELD_IDS ||
                       f[i].kind == PL_FIELD_STRINGS || f[i].kind == PL_FIELD_BIAS;
        if (numeric) cr_assert(f[i].range.is_set, "%s.%s: a range", what, f[i].name);
        if (f[i].range.is_set) cr_assert_leq(f[i].range.min, f[i].range.max);
        cr_assert_eq(f[i].choices != NULL, f[i].kind == PL_FIELD_ENUM, "%s.%s", what, f[i].name);
        /* in declaration order, each member after the previous one, gaps only padding */
        cr_assert_geq(f[i].offset, end, "%s.%s overlaps", what, f[i].name);
        cr_assert_lt(f[i].offset - end, 8, "%s.%s: a gap before it", what, f[i].name);
        end = f[i].offset + member_size(&f[i]);
        if (f[i].aux_offset) {
            cr_assert_geq(f[i].aux_offset, end);
            end = f[i].aux_offset + (f[i].kind == PL_FIELD_OPT_U64 ? sizeof(bool) : sizeof(size_t));
        }
        for (size_t j = 0; j < i; j++) {
            cr_assert_str_neq(f[i].name, f[j].name);
            cr_assert_str_neq(f[i].flag, f[j].flag, "%s: flag %s twice", what, f[i].flag);
            if (f[i].short_flag) cr_assert_neq(f[i].short_flag, f[j].short_flag);
        }
    }
    cr_assert_lt(struct_size - end, 8, "%s: bytes after the last row", what);
}

Test(fields, every_row_is_complete_and_tiles_its_struct) {
    size_t n;
    const pl_field *f = pl_engine_config_fields(&n);
    check_table("config", f, n, sizeof(pl_engine_config));
    f = pl_sampling_params_fields(&n);
    check_table("sampling", f, n, sizeof(pl_sampling_params));
    /* the flags llama.cpp and vLLM users type */
    f = pl_engine_config_fields(&n);
    bool m = false, t = false, c = false;
    for (size_t i = 0; i < n; i++) {
        m |= f[i].short_flag == 'm' && !strcmp(f[i].name, "model_path");
        t |= f[i].short_flag == 't' && !strcmp(f[i].name, "n_threads");
        c |= f[i].short_flag == 'c' && !strcmp(f[i].name, "max_model_len");
    }
    cr_assert(m && t && c);
}

/* Each default, written as JSON and set back, gives the same struct; defaults pass their
 * own range check. */
Test(fields, defaults_round_trip_through_json) {
    size_t n;
    const pl_field *f = pl_engine_config_fields(&n);
    for (size_t i = 0; i < n; i++) {
        pl_engine_config a, b;
        pl_engine_config_default(&a);
        pl_engine_config_default(&b);
        char json[256];
        cr_assert_lt(pl_field_to_json(&f[i], &a, json, sizeof json), sizeof json);
        cr_assert_eq(pl_engine_config_set_json(&b, f[i].name, json), PL_OK, "%s = %s: %s",
                     f[i].name, json, pl_last_error());
        char again[256];
        pl_field_to_json(&f[i], &b, again, sizeof again);
        cr_assert_str_eq(json, again, "%s", f[i].name);
        pl_engine_config_deinit(&b);
    }
    f = pl_sampling_params_fields(&n);
    for (size_t i = 0; i < n; i++) {
        pl_sampling_params a, b;
        pl_sampling_params_default(&a);
        pl_sampling_params_default(&b);
        char json[256];
        pl_field_to_json(&f[i], &a, json, sizeof json);
        cr_assert_eq(pl_sampling_params_set_json(&b, f[i].name, json), PL_OK, "%s = %s: %s",
                     f[i].name, json, pl_last_error());
        cr_assert_eq(memcmp(&a.max_tokens, &b.max_tokens,
                            sizeof a - offsetof(pl_sampling_params, max_tokens)),
                     0, "%s: %s changed the struct", f[i].name, json);
        pl_sampling_params_deinit(&b);
    }
    PL_ASSERT_NO_LEAKS();
}

/* Found by fuzz_fields: a value was range-checked before it was stored, so 1e-46 passed
 * top_p's (0, 1] and was stored as the float 0, which then read back as an error; and -0 was
 * kept, formatted as -0 and read back as 0. What is stored is checked and reads back the same. */
Test(fields, a_number_is_checked_as_it_is_stored_and_reads_back_the_same) {
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    cr_assert_eq(pl_sampling_params_set(&sp, "top_p", "1e-46"), PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "top_p"), "%s", pl_last_error());
    cr_assert_eq(pl_sampling_params_set_json(&sp, "top_p", "1e-46"), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(sp.top_p, 1.0f);
    size_t n;
    const pl_field *f = pl_sampling_params_fields(&n);
    const char *const zeros[] = {"temperature", "min_p", "presence_penalty"};
    for (size_t z = 0; z < 3; z++) {
        cr_assert_eq(pl_sampling_params_set(&sp, zeros[z], "-0"), PL_OK, "%s", pl_last_error());
        for (size_t i = 0; i < n; i++) {
            if (strcmp(f[i].name, zeros[z]) != 0) continue;
            char json[64];
            pl_field_to_json(&f[i], &sp, json, sizeof json);
            cr_assert_str_eq(json, "0", "%s", zeros[z]);
        }
    }
    /* a logit_bias id longer than the parser's buffer was split: 25 digits read as 7:12 */
    cr_assert_eq(pl_sampling_params_set(&sp, "logit_bias", "0000000000000000000000712"),
                 PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(sp.n_logit_bias, 0u);
    cr_assert_eq(pl_sampling_params_set(&sp, "logit_bias", "7:-0"), PL_OK, "%s", pl_last_error());
    cr_assert_eq(sp.n_logit_bias, 1u);
    cr_assert(!signbit(sp.logit_bias[0].bias));
    pl_sampling_params_deinit(&sp);
    PL_ASSERT_NO_LEAKS();
}

/* ---- setters ---------------------------------------------------------------------------- */

Test(fields, json_values_of_every_kind) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    /* BOOL */
    cr_assert_eq(pl_engine_config_set_json(&c, "enable_prefix_caching", "false"), PL_OK);
    cr_assert(!c.enable_prefix_caching);
    EXPECT(pl_engine_config_set_json(&c, "enable_prefix_caching", "1"), PL_ERR_INVALID_ARGUMENT,
           "config.enable_prefix_caching: must be true or false, not an integer");
    /* INT */
    cr_assert_eq(pl_engine_config_set_json(&c, "block_size", "32"), PL_OK);
    cr_assert_eq(c.block_size, 32);
    EXPECT(pl_engine_config_set_json(&c, "block_size", "16.5"), PL_ERR_INVALID_ARGUMENT,
           "config.block_size: must be an integer, not 16.5");
    /* JSON has one number type: a whole number written 64.0 or 6.4e1 is that integer (as
     * OpenAI's clients and vLLM's server take max_tokens: 3.0) */
    cr_assert_eq(pl_engine_config_set_json(&c, "block_size", "64.0"), PL_OK, "%s", pl_last_error());
    cr_assert_eq(c.block_size, 64);
    cr_assert_eq(pl_engine_config_set_json(&c, "block_size", "1.6e1"), PL_OK);
    cr_assert_eq(c.block_size, 16);
    cr_assert_eq(pl_engine_config_set_json(&c, "dummy_seed", "7.0"), PL_OK);
    cr_assert_eq(c.dummy_seed, 7u);
    cr_assert_eq(pl_engine_config_set_json(&c, "memory_limit_bytes", "2048.0"), PL_OK);
    cr_assert_eq(c.memory_limit_bytes, 2048u);
    EXPECT(pl_engine_config_set_json(&c, "block_size", "1e300"), PL_ERR_INVALID_ARGUMENT,
           "block_size");
    EXPECT(pl_engine_config_set_json(&c, "dummy_seed", "-2.0"), PL_ERR_INVALID_ARGUMENT,
           "config.dummy_seed: must be a non-negative integer");
    cr_assert_eq(pl_engine_config_set_json(&c, "block_size", "32"), PL_OK);
    EXPECT(pl_engine_config_set_json(&c, "block_size", "\"16\""), PL_ERR_INVALID_ARGUMENT,
           "not a string");
    EXPECT(pl_engine_config_set_json(&c, "block_size", "300"), PL_ERR_INVALID_ARGUMENT,
           "config.block_size = 300: must be in [1, 256]");
    EXPECT(pl_engine_config_set_json(&c, "block_size", "4294967312"), PL_ERR_INVALID_ARGUMENT,
           "block_size");
    cr_assert_eq(c.block_size, 32, "a refused value changes nothing");
    /* U64 */
    cr_assert_eq(pl_engine_config_set_json(&c, "dummy_seed", "9007199254740993"), PL_OK);
    cr_assert_eq(c.dummy_seed, 9007199254740993ull);
    EXPECT(pl_engine_config_set_json(&c, "dummy_seed", "-1"), PL_ERR_INVALID_ARGUMENT,
           "config.dummy_seed: must be a non-negative integer");
    /* SIZE: bytes or a size string */
    cr_assert_eq(pl_engine_config_set_json(&c, "memory_limit_bytes", "1048576"), PL_OK);
    cr_assert_eq(c.memory_limit_bytes, 1048576u);
    cr_assert_eq(pl_engine_config_set_json(&c, "memory_limit_bytes", "\"512M\""), PL_OK);
    cr_assert_eq(c.memory_limit_bytes, (size_t)512 << 20);
    EXPECT(pl_engine_config_set_json(&c, "memory_limit_bytes", "\"12Q\""),
           PL_ERR_INVALID_ARGUMENT, "config.memory_limit_bytes: '12Q' is not a size");
    /* DOUBLE */
    cr_assert_eq(pl_engine_config_set_json(&c, "memory_threshold", "0.5"), PL_OK);
    cr_assert_float_eq(c.memory_threshold, 0.5, 0);
    EXPECT(pl_engine_config_set_json(&c, "memory_threshold", "1.5"), PL_ERR_INVALID_ARGUMENT,
           "config.memory_threshold = 1.5: must be in (0, 1]");
    EXPECT(pl_engine_config_set_json(&c, "watermark", "1"), PL_ERR_INVALID_ARGUMENT,
           "config.watermark = 1: must be in [0, 1)");
    /* STRING: copied, null unsets */
    char path[] = "models/x.bin";
    cr_assert_eq(pl_engine_config_set_json(&c, "model_path", "\"models/x.bin\""), PL_OK);
    cr_assert_str_eq(c.model_path, path);
    cr_assert_eq(pl_engine_config_set_json(&c, "tokenizer_path", "null"), PL_OK);
    cr_assert_null(c.tokenizer_path);
    EXPECT(pl_engine_config_set_json(&c, "model_path", "\"a\\u0000b\""), PL_ERR_INVALID_ARGUMENT,
           "NUL");
    EXPECT(pl_engine_config_set_json(&c, "model_path", "7"), PL_ERR_INVALID_ARGUMENT,
           "config.model_path: must be a string or null");
    /* ENUM: a name or an alias */
    cr_assert_eq(pl_engine_config_set_json(&c, "kv_dtype", "\"f32\""), PL_OK);
    cr_assert_eq(c.kv_dtype, PL_DTYPE_F32);
    cr_assert_eq(pl_engine_config_set_json(&c, "weight_dtype", "\"bfloat16\""), PL_OK);
    cr_assert_eq(c.weight_dtype, PL_DTYPE_BF16);
    cr_assert_eq(pl_engine_config_set_json(&c, "overflow_policy", "\"drop_oldest\""), PL_OK);
    cr_assert_eq(c.overflow_policy, PL_OVERFLOW_DROP_OLDEST);
    EXPECT(pl_engine_config_set_json(&c, "kv_dtype", "\"f8\""), PL_ERR_INVALID_ARGUMENT,
           "config.kv_dtype: 'f8' is not one of auto, f32, f16, bf16");
    EXPECT(pl_engine_config_set_json(&c, "backend", "2"), PL_ERR_INVALID_ARGUMENT,
           "config.backend: must be one of cpu, ref, cuda, not an integer");
    /* malformed JSON, unknown names */
    EXPECT(pl_engine_config_set_json(&c, "block_size", "{"), PL_ERR_INVALID_ARGUMENT,
           "config.block_size: not JSON");
    EXPECT(pl_engine_config_set_json(&c, "blok_size", "16"), PL_ERR_NOT_FOUND,
           "no field 'blok_size' (did you mean 'block_size'?)");
    EXPECT(pl_engine_config_set_json(&c, "xyzzy", "16"), PL_ERR_NOT_FOUND, "no field 'xyzzy'");
    pl_engine_config_deinit(&c);
    cr_assert_null(c.storage);

    pl_sampling_params p;
    pl_sampling_params_default(&p);
    /* FLOAT */
    cr_assert_eq(pl_sampling_params_set_json(&p, "temperature", "0.25"), PL_OK);
    cr_assert_float_eq(p.temperature, 0.25f, 0);
    EXPECT(pl_sampling_params_set_json(&p, "top_p", "0"), PL_ERR_INVALID_ARGUMENT,
           "sampling.top_p = 0: must be in (0, 1]");
    EXPECT(pl_sampling_params_set_json(&p, "temperature", "1e300"), PL_ERR_INVALID_ARGUMENT,
           "temperature");
    /* IDS: an array, one id, null */
    cr_assert_eq(pl_sampling_params_set_json(&p, "stop_ids", "[5, 6, 7]"), PL_OK);
    cr_assert_eq(p.n_stop_ids, 3);
    cr_assert_eq(p.stop_ids[2], 7);
    cr_assert_eq(pl_sampling_params_set_json(&p, "stop_ids", "9"), PL_OK);
    cr_assert_eq(p.n_stop_ids, 1, "JSON replaces a list");
    cr_assert_eq(p.stop_ids[0], 9);
    EXPECT(pl_sampling_params_set_json(&p, "stop_ids", "[1, -2]"), PL_ERR_INVALID_ARGUMENT,
           "sampling.stop_ids[1]: must be a token id");
    EXPECT(pl_sampling_params_set_json(&p, "stop_ids", "{}"), PL_ERR_INVALID_ARGUMENT,
           "sampling.stop_ids: must be an array of token ids");
    cr_assert_eq(p.n_stop_ids, 1);
    cr_assert_eq(pl_sampling_params_set_json(&p, "stop_ids", "null"), PL_OK);
    cr_assert_eq(p.n_stop_ids, 0);
    /* STRINGS: an array, one string */
    cr_assert_eq(pl_sampling_params_set_json(&p, "stop", "[\"\\n\\n\", \"END\"]"), PL_OK);
    cr_assert_eq(p.n_stop, 2);
    cr_assert_str_eq(p.stop[0], "\n\n");
    cr_assert_str_eq(p.stop[1], "END");
    cr_assert_eq(pl_sampling_params_set_json(&p, "stop", "\"x\""), PL_OK);
    cr_assert_eq(p.n_stop, 1);
    EXPECT(pl_sampling_params_set_json(&p, "stop", "[\"a\", 3]"), PL_ERR_INVALID_ARGUMENT,
           "sampling.stop[1]: must be a string, not an integer");
    EXPECT(pl_sampling_params_set_json(&p, "stop", "[\"\"]"), PL_ERR_INVALID_ARGUMENT,
           "empty string");
    char many[600] = "[";
    for (int i = 0; i < 65; i++) strcat(many, i ? ",\"s\"" : "\"s\"");
    strcat(many, "]");
    EXPECT(pl_sampling_params_set_json(&p, "stop", many), PL_ERR_INVALID_ARGUMENT,
           "sampling.stop: 65 entries: must be a count in [0, 64]");
    cr_assert_str_eq(p.stop[0], "x");
    /* OPT_U64 */
    cr_assert_eq(pl_sampling_params_set_json(&p, "seed", "42"), PL_OK);
    cr_assert(p.has_seed);
    cr_assert_eq(p.seed, 42);
    /* above INT64_MAX (jansson's limit) up to UINT64_MAX: what pl_field_to_json writes */
    cr_assert_eq(pl_sampling_params_set_json(&p, "seed", "18446744073709551615"), PL_OK, "%s",
                 pl_last_error());
    cr_assert_eq(p.seed, UINT64_MAX);
    EXPECT(pl_sampling_params_set_json(&p, "seed", "18446744073709551616"),
           PL_ERR_INVALID_ARGUMENT, "sampling.seed");
    EXPECT(pl_sampling_params_set_json(&p, "seed", "042"), PL_ERR_INVALID_ARGUMENT, "not JSON");
    cr_assert_eq(p.seed, UINT64_MAX);
    cr_assert_eq(pl_sampling_params_set_json(&p, "seed", "null"), PL_OK);
    cr_assert(!p.has_seed);
    EXPECT(pl_sampling_params_set_json(&p, "temprature", "0"), PL_ERR_NOT_FOUND,
           "did you mean 'temperature'?");
    cr_assert_eq(pl_sampling_params_validate(&p), PL_OK, "%s", pl_last_error());
    pl_sampling_params_deinit(&p);
    PL_ASSERT_NO_LEAKS();
}

Test(fields, text_values_as_flags_give_them) {
    pl_sampling_params p;
    pl_sampling_params_default(&p);
    /* "--top-p 0" said "outside [1e-09, 1]" */
    EXPECT(pl_sampling_params_set(&p, "top_p", "0"), PL_ERR_INVALID_ARGUMENT,
           "sampling.top_p = 0: must be in (0, 1]");
    EXPECT(pl_sampling_params_set(&p, "max_tokens", "12x"), PL_ERR_INVALID_ARGUMENT,
           "sampling.max_tokens: '12x' is not an integer");
    EXPECT(pl_sampling_params_set(&p, "temperature", "nan"), PL_ERR_INVALID_ARGUMENT,
           "is not a finite number");
    EXPECT(pl_sampling_params_set(&p, "ignore_eos", "maybe"), PL_ERR_INVALID_ARGUMENT,
           "true or false");
    cr_assert_eq(pl_sampling_params_set(&p, "ignore_eos", "on"), PL_OK);
    cr_assert(p.ignore_eos);
    /* lists grow one flag at a time */
    cr_assert_eq(pl_sampling_params_set(&p, "stop", "a"), PL_OK);
    cr_assert_eq(pl_sampling_params_set(&p, "stop", "bc"), PL_OK);
    cr_assert_eq(p.n_stop, 2);
    cr_assert_str_eq(p.stop[0], "a");
    cr_assert_str_eq(p.stop[1], "bc");
    cr_assert_eq(pl_sampling_params_set(&p, "stop_ids", "1,2"), PL_OK);
    cr_assert_eq(pl_sampling_params_set(&p, "stop_ids", "3"), PL_OK);
    cr_assert_eq(p.n_stop_ids, 3);
    cr_assert_eq(p.stop_ids[0], 1);
    cr_assert_eq(p.stop_ids[2], 3);
    EXPECT(pl_sampling_params_set(&p, "stop_ids", "4,,5"), PL_ERR_INVALID_ARGUMENT, "stop_ids");
    EXPECT(pl_sampling_params_set(&p, "stop_ids", "-1"), PL_ERR_INVALID_ARGUMENT, "stop_ids");
    EXPECT(pl_sampling_params_set(&p, "stop", ""), PL_ERR_INVALID_ARGUMENT, "empty");
    cr_assert_eq(p.n_stop_ids, 3);
    cr_assert_eq(p.n_stop, 2);
    cr_assert_eq(pl_sampling_params_set(&p, "seed", "7"), PL_OK);
    cr_assert(p.has_seed);
    cr_assert_eq(pl_sampling_params_set(&p, "seed", ""), PL_OK);
    cr_assert(!p.has_seed);
    /* an unchanged struct after each refusal: compare with a copy */
    pl_sampling_params before = p;
    EXPECT(pl_sampling_params_set(&p, "n", "65"), PL_ERR_INVALID_ARGUMENT,
           "sampling.n = 65: must be in [1, 64]");
    cr_assert_eq(memcmp(&before, &p, sizeof p), 0);
    EXPECT(pl_sampling_params_set(&p, NULL, "1"), PL_ERR_INVALID_ARGUMENT, "NULL");
    EXPECT(pl_sampling_params_set(&p, "n", NULL), PL_ERR_INVALID_ARGUMENT, "NULL");
    pl_sampling_params_deinit(&p);

    pl_engine_config c;
    pl_engine_config_default(&c);
    cr_assert_eq(pl_engine_config_set(&c, "memory_limit_bytes", "4GiB"), PL_OK);
    cr_assert_eq(c.memory_limit_bytes, (size_t)4 << 30);
    EXPECT(pl_engine_config_set(&c, "memory_limit_bytes", "-1"), PL_ERR_INVALID_ARGUMENT,
           "is not a size");
    EXPECT(pl_engine_config_set(&c, "memory_limit_bytes", "99999999999T"),
           PL_ERR_INVALID_ARGUMENT, "is not a size");
    cr_assert_eq(pl_engine_config_set(&c, "backend", "REF"), PL_OK);
    cr_assert_eq(c.backend, PL_BACKEND_REF);
    cr_assert_eq(pl_engine_config_set(&c, "model_path", "dummy:tiny"), PL_OK);
    cr_assert_eq(pl_engine_config_validate(&c), PL_OK, "%s", pl_last_error());
    pl_engine_config_deinit(&c);
    PL_ASSERT_NO_LEAKS();
}

/* ---- struct_size ----------------------------------------------------------------------- */

Test(abi, a_struct_with_a_wrong_size_is_refused_with_a_clear_message) {
    pl_engine_config c = with_model();
    c.struct_size = 0;
    EXPECT(pl_engine_config_validate(&c), PL_ERR_INVALID_ARGUMENT,
           "config.struct_size = 0: the struct was not filled by its _default function");
    pl_engine *e = NULL;
    EXPECT(pl_engine_create(&c, &e), PL_ERR_INVALID_ARGUMENT, "struct_size");
    cr_assert_null(e);
    c.struct_size = 24; /* shorter than any pl_engine_config there was */
    EXPECT(pl_engine_config_validate(&c), PL_ERR_INVALID_ARGUMENT,
           "no pagellm version had that size");
    c.struct_size = sizeof c + 64; /* a newer header's */
    EXPECT(pl_engine_config_validate(&c), PL_ERR_INVALID_ARGUMENT,
           "built against a newer pagellm.h");
    EXPECT(pl_engine_config_set(&c, "block_size", "8"), PL_ERR_INVALID_ARGUMENT, "struct_size");

    pl_sampling_params p;
    pl_sampling_params_default(&p);
    p.struct_size = sizeof p - 4; /* (sizeof p - 8 is a size it had: before skip_special_tokens) */
    EXPECT(pl_sampling_params_validate(&p), PL_ERR_INVALID_ARGUMENT, "sampling.struct_size");
    EXPECT(pl_sampling_params_set_json(&p, "n", "2"), PL_ERR_INVALID_ARGUMENT, "struct_size");

    /* an unknown size given to init: nothing past it is written, and the struct is refused */
    unsigned char buf[sizeof(pl_engine_config) + 16];
    memset(buf, 0xA5, sizeof buf);
    pl_engine_config_init((pl_engine_config *)buf, 40);
    for (size_t i = 40; i < sizeof buf; i++) cr_assert_eq(buf[i], 0xA5, "byte %zu written", i);
    EXPECT(pl_engine_config_validate((pl_engine_config *)buf), PL_ERR_INVALID_ARGUMENT,
           "struct_size = 0");
}

/* The mechanism a later version relies on: a struct with an appended field, and a program
 * built before it (a shorter, known size) gets the new field's default. */
typedef struct v2 {
    size_t struct_size;
    void *storage;
    int a;
    double b; /* added in "version 2" */
} v2;

static const char *const no_choices[] = {NULL};
static const pl_field v2_fields[] = {
    {.name = "a", .kind = PL_FIELD_INT, .offset = offsetof(v2, a),
     .range = PL_RANGE_STRUCT(PL_RANGE(0, 10)), .flag = "--a", .value_name = "N", .help = "a"},
    {.name = "b", .kind = PL_FIELD_DOUBLE, .offset = offsetof(v2, b),
     .range = PL_RANGE_STRUCT(PL_RANGE(0, 1)), .flag = "--b", .value_name = "F", .help = "b"},
};
static void v2_defaults(void *p) {
    ((v2 *)p)->a = 3;
    ((v2 *)p)->b = 0.5;
}
static const size_t v2_sizes[] = {offsetof(v2, b), sizeof(v2)};
static const pl_field_table v2_table = {
    .prefix = "v2", .fields = v2_fields, .n = 2, .struct_size = sizeof(v2),
    .known_sizes = v2_sizes, .n_known = 2, .defaults = v2_defaults,
};

Test(abi, a_shorter_known_struct_gets_the_defaults_of_the_fields_it_lacks) {
    (void)no_choices;
    unsigned char old[offsetof(v2, b) + 8];
    memset(old, 0x5A, sizeof old);
    pl_fields_init(&v2_table, old, offsetof(v2, b));
    cr_assert_eq(old[offsetof(v2, b)], 0x5A, "init wrote past the old struct");
    EXPECT(pl_fields_set_text(&v2_table, old, "a", "7"), PL_OK, "");
    v2 full;
    cr_assert_eq(pl_fields_take(&v2_table, old, &full), PL_OK, "%s", pl_last_error());
    cr_assert_eq(full.a, 7);
    cr_assert_float_eq(full.b, 0.5, 0);
    cr_assert_eq(full.struct_size, sizeof(v2));
    EXPECT(pl_fields_set_text(&v2_table, old, "b", "0.25"), PL_ERR_INVALID_ARGUMENT,
           "v2.b: not in this struct");
    cr_assert_eq(old[offsetof(v2, b)], 0x5A, "a setter wrote past the old struct");
}

/* A binding that does not compile the header learns the sizes from the library, and a
 * struct of that size set by name is one the library accepts. */
Test(abi, struct_sizes_for_bindings_are_the_librarys) {
    cr_assert_eq(pl_engine_config_struct_size(), sizeof(pl_engine_config));
    cr_assert_eq(pl_sampling_params_struct_size(), sizeof(pl_sampling_params));
    cr_assert_eq(pl_chat_options_struct_size(), sizeof(pl_chat_options));
    double buf[1024 / sizeof(double)]; /* aligned for every member, as a binding allocates */
    cr_assert_leq(pl_engine_config_struct_size(), sizeof buf);
    pl_engine_config *c = (pl_engine_config *)buf;
    pl_engine_config_init(c, pl_engine_config_struct_size());
    cr_assert_eq(c->struct_size, sizeof(pl_engine_config));
    EXPECT(pl_engine_config_set(c, "model_path", "dummy:tiny"), PL_OK, "");
    EXPECT(pl_engine_config_validate(c), PL_OK, "");
    pl_engine_config_deinit(c);
    pl_sampling_params *p = (pl_sampling_params *)buf;
    pl_sampling_params_init(p, pl_sampling_params_struct_size());
    EXPECT(pl_sampling_params_set_json(p, "stop", "[\"x\"]"), PL_OK, "");
    EXPECT(pl_sampling_params_validate(p), PL_OK, "");
    pl_sampling_params_deinit(p);
    pl_chat_options *o = (pl_chat_options *)buf;
    pl_chat_options_init(o, pl_chat_options_struct_size());
    cr_assert_eq(o->struct_size, sizeof(pl_chat_options));
    EXPECT(pl_chat_options_set(o, "tools", "[]"), PL_OK, "");
    pl_chat_options_deinit(o);
    PL_ASSERT_NO_LEAKS();
}

/* The structs the library fills get at most the caller's bytes. */
Test(abi, filled_structs_take_the_callers_size) {
    pl_metrics m;
    memset(&m, 0xCD, sizeof m);
    pl_engine_metrics_sized(NULL, &m, offsetof(pl_metrics, samples_finished));
    cr_assert_eq(m.struct_size, offsetof(pl_metrics, samples_finished));
    cr_assert_eq(m.requests_finished, 0);
    unsigned char *rest = (unsigned char *)&m.samples_finished;
    cr_assert_eq(rest[0], 0xCD, "written past the caller's size");
    pl_engine_metrics(NULL, &m);
    cr_assert_eq(m.struct_size, sizeof m);
    cr_assert_eq(m.samples_finished, 0);
}
