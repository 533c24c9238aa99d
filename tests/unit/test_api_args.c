/*
 * tests/unit/test_api_args.c - every public function refuses NULL pointers and out-of-range
 * values with PL_ERR_INVALID_ARGUMENT (or the documented code) and a message naming the
 * argument or field, and leaves its OUT parameters and the engine untouched.
 *
 * Registered from tests/soak/meson.build (suite e2e). Functions returning void or a value
 * must simply not crash on NULL (each is called once with NULL here).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

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

static pl_engine *tiny_engine(void) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = "dummy:tiny";
    c.backend = PL_BACKEND_REF;
    c.max_num_blocks = 64;
    c.max_model_len = 128;
    c.max_num_seqs = 2;
    c.max_batch_size = 2;
    c.max_waiting = 2;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_create(&c, &e), PL_OK, "%s", pl_last_error());
    return e;
}

Test(api_args, static_queries_take_anything) {
    cr_assert_str_eq(pl_status_name((pl_status)12345), "PL_ERR_UNKNOWN");
    cr_assert_str_eq(pl_status_string((pl_status)-999), "unknown status");
    cr_assert_str_eq(pl_finish_reason_name((pl_finish_reason)77), "none");
    cr_assert_not_null(pl_version());
    cr_assert_not_null(pl_last_error());
    /* the NULL no-ops */
    pl_engine_config_default(NULL);
    pl_sampling_params_default(NULL);
    pl_engine_destroy(NULL);
    pl_completions_free(NULL, 5);
    pl_free_ids(NULL);
    pl_engine_metrics(NULL, NULL);
    pl_metrics m;
    memset(&m, 0xAB, sizeof m);
    pl_engine_metrics(NULL, &m);
    cr_assert_eq(m.requests_finished, 0, "metrics of NULL are zero");
    pl_engine_get_profile(NULL, NULL);
    pl_engine_reset_profile(NULL);
    cr_assert_eq(pl_engine_weight_bytes(NULL), 0);
    cr_assert_eq(pl_engine_matmul_params(NULL), 0);
    cr_assert(!pl_engine_has_pending_work(NULL));
    PL_ASSERT_NO_LEAKS();
}

Test(api_args, config_and_create) {
    EXPECT(pl_engine_config_validate(NULL), PL_ERR_INVALID_ARGUMENT, "config");
    pl_engine_config c;
    pl_engine_config_default(&c);
    pl_engine *e = (pl_engine *)&c; /* sentinel: must stay untouched */
    EXPECT(pl_engine_create(NULL, &e), PL_ERR_INVALID_ARGUMENT, "config");
    cr_assert_eq(e, (pl_engine *)&c);
    EXPECT(pl_engine_create(&c, NULL), PL_ERR_INVALID_ARGUMENT, "out");

    /* one bad field at a time: the message names it */
    struct {
        const char *field;
        pl_engine_config c;
    } bad[32];
    int n = 0;
#define BAD(f, stmt)                                                                           \
    do {                                                                                       \
        pl_engine_config_default(&bad[n].c);                                                   \
        pl_engine_config *x = &bad[n].c;                                                       \
        x->model_path = "dummy:tiny";                                                          \
        stmt;                                                                                  \
        bad[n++].field = f;                                                                    \
    } while (0)
    BAD("model_path", x->model_path = NULL);
    BAD("model_path", x->model_path = "");
    BAD("weight_dtype", x->weight_dtype = (pl_dtype)11);
    BAD("kv_dtype", x->kv_dtype = PL_DTYPE_Q4_0); /* the quantised types are for weights */
    BAD("kv_dtype", x->kv_dtype = (pl_dtype)-1);
    BAD("backend", x->backend = (pl_backend_kind)3);
    BAD("n_threads", x->n_threads = -1);
    BAD("cuda_device", x->cuda_device = -5);
    BAD("block_size", x->block_size = 0);
    BAD("block_size", x->block_size = 24);
    BAD("block_size", x->block_size = 512);
    BAD("max_num_blocks", x->max_num_blocks = -1);
    BAD("memory_threshold", x->memory_threshold = 0.0);
    BAD("memory_threshold", x->memory_threshold = NAN);
    BAD("memory_threshold", x->memory_threshold = 1.5);
    BAD("max_batch_size", x->max_batch_size = -1);
    BAD("max_num_seqs", x->max_num_seqs = -1);
    BAD("max_num_seqs", (x->max_num_seqs = 4, x->max_batch_size = 8));
    BAD("max_total_tokens", x->max_total_tokens = 0);
    BAD("max_model_len", x->max_model_len = -3);
    BAD("max_model_len", (x->enable_chunked_prefill = false, x->max_model_len = 8192));
    BAD("long_prefill_threshold", x->long_prefill_threshold = -1);
    BAD("max_skip_head", x->max_skip_head = -1);
    BAD("watermark", x->watermark = 1.0);
    BAD("watermark", x->watermark = NAN);
    BAD("max_waiting", x->max_waiting = -1);
    BAD("overflow_policy", x->overflow_policy = (pl_overflow_policy)2);
#undef BAD
    for (int i = 0; i < n; i++) {
        EXPECT(pl_engine_config_validate(&bad[i].c), PL_ERR_INVALID_ARGUMENT, bad[i].field);
        e = (pl_engine *)&c;
        EXPECT(pl_engine_create(&bad[i].c, &e), PL_ERR_INVALID_ARGUMENT, bad[i].field);
        cr_assert_eq(e, (pl_engine *)&c, "a failed create touched *out");
    }
    /* valid config, model that is not there: a file-level code naming it */
    c.model_path = "/nonexistent/dir/model.bin";
    EXPECT(pl_engine_create(&c, &e), PL_ERR_IO, "/nonexistent/dir/model.bin");
    c.model_path = "dummy:no-such-preset";
    EXPECT(pl_engine_create(&c, &e), PL_ERR_NOT_FOUND, "no-such-preset");
    c.model_path = "dummy:tiny";
    c.tokenizer_path = "/nonexistent/tok.model";
    pl_status s = pl_engine_create(&c, &e);
    cr_assert(s == PL_ERR_IO || s == PL_ERR_NOT_FOUND, "%s", pl_status_name(s));
    cr_assert(strstr(pl_last_error(), "/nonexistent/tok.model"), "%s", pl_last_error());
    c.tokenizer_path = NULL;
    c.max_model_len = 100000; /* more than the model's 512 */
    EXPECT(pl_engine_create(&c, &e), PL_ERR_INVALID_ARGUMENT, "max_model_len");
    cr_assert_eq(e, (pl_engine *)&c);
    PL_ASSERT_NO_LEAKS();
}

/* A sampling parameter set with one bad value. */
typedef struct bad_sp {
    const char *field;
    pl_sampling_params p;
} bad_sp;

static int bad_sampling(bad_sp *b) {
    int n = 0;
#define BAD(f, stmt)                                                                           \
    do {                                                                                       \
        pl_sampling_params_default(&b[n].p);                                                   \
        pl_sampling_params *x = &b[n].p;                                                       \
        stmt;                                                                                  \
        b[n++].field = f;                                                                      \
    } while (0)
    BAD("max_tokens", x->max_tokens = -1);
    BAD("max_tokens", x->max_tokens = -7);
    BAD("min_tokens", x->min_tokens = -1);
    BAD("min_tokens", (x->max_tokens = 4, x->min_tokens = 5));
    BAD("temperature", x->temperature = -0.5f);
    BAD("temperature", x->temperature = NAN);
    BAD("temperature", x->temperature = INFINITY);
    BAD("top_p", x->top_p = 0.0f);
    BAD("top_p", x->top_p = 1.5f);
    BAD("top_p", x->top_p = NAN);
    BAD("top_k", x->top_k = -2);
    BAD("min_p", x->min_p = -0.1f);
    BAD("min_p", x->min_p = NAN);
    BAD("repetition_penalty", x->repetition_penalty = 0.0f);
    BAD("repetition_penalty", x->repetition_penalty = INFINITY);
    BAD("repetition_penalty", x->repetition_penalty = NAN);
    BAD("presence_penalty", x->presence_penalty = 2.5f);
    BAD("presence_penalty", x->presence_penalty = NAN);
    BAD("frequency_penalty", x->frequency_penalty = -3.0f);
    static const int32_t ids[2] = {1, 512}, neg[1] = {-1}, many[1025] = {0};
    static const char *const null_stop[1] = {NULL}, *const empty_stop[1] = {""},
                             *const stops[65] = {"x"};
    BAD("stop_ids", (x->n_stop_ids = 1025, x->stop_ids = many));
    BAD("stop_ids", (x->n_stop_ids = 1, x->stop_ids = NULL));
    BAD("stop_ids", (x->n_stop_ids = 1, x->stop_ids = neg));
    BAD("stop_ids", (x->n_stop_ids = 2, x->stop_ids = ids));
    BAD("stop", (x->n_stop = 65, x->stop = stops));
    BAD("stop", (x->n_stop = 1, x->stop = NULL));
    BAD("stop", (x->n_stop = 1, x->stop = null_stop));
    BAD("stop", (x->n_stop = 1, x->stop = empty_stop));
    BAD("logprobs", x->logprobs = 21);
    BAD("prompt_logprobs", x->prompt_logprobs = -2);
    BAD("prompt_logits", x->prompt_logits = -2);
    BAD("n", x->n = 0);
    BAD("n", x->n = 65);
#undef BAD
    return n;
}

Test(api_args, submit_abort_and_queries) {
    pl_engine *e = tiny_engine();
    int32_t ids[] = {1, 5, 9};
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    pl_request_id id = 777;

    EXPECT(pl_engine_submit_tokens(NULL, ids, 3, &sp, &id), PL_ERR_INVALID_ARGUMENT, "engine");
    EXPECT(pl_engine_submit_tokens(e, NULL, 3, &sp, &id), PL_ERR_INVALID_ARGUMENT, "prompt");
    EXPECT(pl_engine_submit_tokens(e, ids, 0, &sp, &id), PL_ERR_INVALID_ARGUMENT, "prompt");
    int32_t neg[] = {1, -4}, big[] = {1, 512};
    EXPECT(pl_engine_submit_tokens(e, neg, 2, &sp, &id), PL_ERR_INVALID_ARGUMENT, "vocabulary");
    EXPECT(pl_engine_submit_tokens(e, big, 2, &sp, &id), PL_ERR_INVALID_ARGUMENT, "vocabulary");
    EXPECT(pl_engine_submit_request(NULL, "x", &sp, &id), PL_ERR_INVALID_ARGUMENT, "engine");
    EXPECT(pl_engine_submit_request(e, NULL, &sp, &id), PL_ERR_INVALID_ARGUMENT, "prompt");
    /* dummy:tiny has no tokenizer: text is refused, saying so */
    EXPECT(pl_engine_submit_request(e, "hello", &sp, &id), PL_ERR_INVALID_ARGUMENT, "tokenizer");
    cr_assert_eq(id, 777, "a refused submit wrote *out_id");

    bad_sp bad[40];
    int n = bad_sampling(bad);
    for (int i = 0; i < n; i++)
        EXPECT(pl_engine_submit_tokens(e, ids, 3, &bad[i].p, &id), PL_ERR_INVALID_ARGUMENT,
               bad[i].field);
    sp.max_tokens = 126; /* 3 + 126 > max_model_len 128 */
    EXPECT(pl_engine_submit_tokens(e, ids, 3, &sp, &id), PL_ERR_TOO_LONG, "max_model_len");
    sp.max_tokens = 4;
    cr_assert_eq(id, 777);
    cr_assert(!pl_engine_has_pending_work(e), "refused submits left work behind");

    /* the bound (2 running + max_waiting 2 slots, REJECT_NEWEST) */
    sp.n = 1;
    cr_assert_eq(pl_engine_submit_tokens(e, ids, 3, &sp, &id), PL_OK);
    pl_request_id first = id;
    cr_assert_eq(pl_engine_submit_tokens(e, ids, 3, NULL, NULL), PL_OK, "NULL params/out_id");
    cr_assert_eq(pl_engine_submit_tokens(e, ids, 3, &sp, NULL), PL_OK);
    cr_assert_eq(pl_engine_submit_tokens(e, ids, 3, &sp, NULL), PL_OK);
    EXPECT(pl_engine_submit_tokens(e, ids, 3, &sp, &id), PL_ERR_QUEUE_FULL, "max_waiting");

    EXPECT(pl_engine_abort(NULL, first), PL_ERR_INVALID_ARGUMENT, "engine");
    EXPECT(pl_engine_abort(e, 0), PL_ERR_NOT_FOUND, "0");
    EXPECT(pl_engine_abort(e, first + 1000), PL_ERR_NOT_FOUND, "id");
    cr_assert_eq(pl_engine_abort(e, first), PL_OK);

    pl_step_result r;
    EXPECT(pl_engine_step(NULL, &r), PL_ERR_INVALID_ARGUMENT, "engine");
    pl_completion *c = (pl_completion *)&r;
    size_t nc = 99;
    EXPECT(pl_engine_run(NULL, &c, &nc), PL_ERR_INVALID_ARGUMENT, "NULL");
    EXPECT(pl_engine_run(e, NULL, &nc), PL_ERR_INVALID_ARGUMENT, "NULL");
    EXPECT(pl_engine_run(e, &c, NULL), PL_ERR_INVALID_ARGUMENT, "NULL");
    cr_assert_eq(nc, 99);
    cr_assert_eq(pl_engine_run(e, &c, &nc), PL_OK, "%s", pl_last_error());
    cr_assert_eq(nc, 4);
    cr_assert_eq(c[0].finish_reason, PL_FINISH_ABORT);
    /* finished: aborting again is NOT_FOUND */
    EXPECT(pl_engine_abort(e, first), PL_ERR_NOT_FOUND, "id");
    pl_completions_free(c, nc);

    size_t cap = 1234;
    EXPECT(pl_engine_capacity(NULL, 4, 4, &cap), PL_ERR_INVALID_ARGUMENT, "NULL");
    EXPECT(pl_engine_capacity(e, 4, 4, NULL), PL_ERR_INVALID_ARGUMENT, "NULL");
    cr_assert_eq(pl_engine_capacity(e, 0, 4, &cap), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_engine_capacity(e, 4, 0, &cap), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_engine_capacity(e, 100, 100, &cap), PL_ERR_TOO_LONG);
    cr_assert_eq(pl_engine_capacity(e, SIZE_MAX, SIZE_MAX, &cap), PL_ERR_TOO_LONG);
    cr_assert_eq(cap, 1234, "a failed capacity wrote *out_requests");

    int32_t *out_ids = NULL;
    size_t n_out = 0;
    EXPECT(pl_engine_tokenize(NULL, "x", &out_ids, &n_out), PL_ERR_INVALID_ARGUMENT, "NULL");
    EXPECT(pl_engine_tokenize(e, NULL, &out_ids, &n_out), PL_ERR_INVALID_ARGUMENT, "NULL");
    EXPECT(pl_engine_tokenize(e, "x", NULL, &n_out), PL_ERR_INVALID_ARGUMENT, "NULL");
    EXPECT(pl_engine_tokenize(e, "x", &out_ids, &n_out), PL_ERR_INVALID_ARGUMENT, "tokenizer");
    cr_assert_null(out_ids);

    EXPECT(pl_engine_set_profiling(NULL, true, NULL), PL_ERR_INVALID_ARGUMENT, "engine");
    EXPECT(pl_engine_set_profiling(e, true, "/nonexistent/dir/trace.json"), PL_ERR_IO,
           "/nonexistent/dir/trace.json");
    pl_engine_get_profile(e, NULL);
    pl_engine_metrics(e, NULL);

    /* after all that, the engine still works */
    sp = (pl_sampling_params){0};
    pl_sampling_params_default(&sp);
    sp.temperature = 0.0f;
    sp.max_tokens = 3;
    sp.ignore_eos = true;
    cr_assert_eq(pl_engine_submit_tokens(e, ids, 3, &sp, &id), PL_OK);
    cr_assert_eq(pl_engine_run(e, &c, &nc), PL_OK);
    cr_assert_eq(nc, 1);
    cr_assert_eq(c[0].n_output_ids, 3);
    pl_completions_free(c, nc);
    pl_engine_destroy(e);
    PL_ASSERT_NO_LEAKS();
}

/* With a tokenizer: text that is not valid UTF-8 or holds nothing is refused. Uses the
 * shared tok512 model when PAGELLM_TEST_MODELS is set (dummy:tiny has 512 ids too). */
Test(api_args, text_prompts_with_tokenizer) {
    char tok[512];
    if (!pl_test_models_dir() || !pl_test_model_path("tok512.model", tok, sizeof tok)) {
        cr_skip_test("PAGELLM_TEST_MODELS unset: no tokenizer to test text prompts with");
    }
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = "dummy:tiny";
    c.tokenizer_path = tok;
    c.backend = PL_BACKEND_REF;
    c.max_num_blocks = 64;
    pl_engine *e;
    cr_assert_eq(pl_engine_create(&c, &e), PL_OK, "%s", pl_last_error());
    pl_request_id id = 5;
    /* "" is not among them: it is BOS alone (test_e2e_api.c) */
    static const char *bad[] = {"\xff", "ab\xc3", "\xc0\x80", "\xed\xa0\x80",
                                "\xf4\x90\x80\x80", "ok \xe2\x82"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pl_status s = pl_engine_submit_request(e, bad[i], NULL, &id);
        cr_assert_eq(s, PL_ERR_INVALID_ARGUMENT, "prompt %zu: %s", i, pl_status_name(s));
        cr_assert(strstr(pl_last_error(), "prompt") || strstr(pl_last_error(), "text") ||
                  strstr(pl_last_error(), "UTF-8"), "%s", pl_last_error());
    }
    cr_assert_eq(id, 5);
    int32_t *ids;
    size_t n;
    cr_assert_eq(pl_engine_tokenize(e, "\xff", &ids, &n), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_engine_tokenize(e, "Once upon", &ids, &n), PL_OK);
    pl_free_ids(ids);
    pl_engine_destroy(e);
    PL_ASSERT_NO_LEAKS();
}

/* The case: --max-waiting 4 --max-num-seqs 4 and 16 requests at once. 4 running and 4
 * waiting slots are free, so 8 are taken and all of them finish (none dropped as overloaded
 * when the step drains them). */
Test(api_args, admission_is_running_plus_waiting_slots) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = "dummy:tiny";
    c.backend = PL_BACKEND_REF;
    c.max_num_blocks = 64;
    c.max_model_len = 128;
    c.max_num_seqs = 4;
    c.max_batch_size = 4;
    c.max_waiting = 4;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_create(&c, &e), PL_OK, "%s", pl_last_error());
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.max_tokens = 3;
    const int32_t ids[] = {1, 5, 9};
    int in = 0;
    for (int i = 0; i < 16; i++) {
        pl_status st = pl_engine_submit_tokens(e, ids, 3, &sp, NULL);
        cr_assert(st == PL_OK || st == PL_ERR_QUEUE_FULL, "%s", pl_last_error());
        in += st == PL_OK;
    }
    cr_assert_eq(in, 8, "%d of 16 taken with 4 running + 4 waiting slots free", in);
    pl_completion *out;
    size_t n;
    cr_assert_eq(pl_engine_run(e, &out, &n), PL_OK, "%s", pl_last_error());
    cr_assert_eq(n, 8);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(out[i].finish_reason, PL_FINISH_LENGTH, "request %zu: %s", i,
                     pl_finish_reason_name(out[i].finish_reason));
    pl_completions_free(out, n);
    pl_engine_destroy(e);
    PL_ASSERT_NO_LEAKS();
}
