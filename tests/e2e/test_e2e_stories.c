/*
 * tests/e2e/test_e2e_stories.c - the real stories260K model with its tok512 tokenizer (from
 * PAGELLM_TEST_MODELS): greedy tokens from the engine equal the dense reference for 250+
 * tokens, on prompts that cross block boundaries, batched and alone; the streamed text equals
 * the tokenizer's decode of the output ids; generation ends at the BOS the model emits.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "dense_ref.h"
#include "e2e_util.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/alloc.h"

static char model_path[1024], tok_path[1024];

static void paths(void) {
    cr_assert(pl_test_model_path("stories260K.bin", model_path, sizeof model_path));
    cr_assert(pl_test_model_path("tok512.model", tok_path, sizeof tok_path));
}

static pl_engine *stories_engine(pl_backend_kind backend, int block_size) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = model_path;
    c.tokenizer_path = tok_path;
    c.backend = backend;
    c.block_size = block_size;
    c.n_threads = 2;
    return e2e_engine(&c);
}

static const char *prompts[] = {
    "Once upon a time",
    "Lily and Ben went to the park. They saw a big dog with a red ball and",
    "The sun was hot. Tom wanted to swim in the lake with his friends, but his mom said",
    "One day, a little bird",
};
#define N_PROMPTS (int)(sizeof prompts / sizeof prompts[0])

Test(stories, greedy_matches_dense_reference_for_256_tokens, .timeout = 240) {
    paths();
    pl_model *m;
    cr_assert_eq(pl_model_load(model_path, NULL, &m), PL_OK, "%s", pl_last_error());
    pl_engine *e = stories_engine(PL_BACKEND_CPU, 16);
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.temperature = 0.0f;
    sp.max_tokens = 256;
    sp.ignore_eos = true;
    pl_request_id ids[N_PROMPTS];
    for (int i = 0; i < N_PROMPTS; i++)
        cr_assert_eq(pl_engine_submit_request(e, prompts[i], &sp, &ids[i]), PL_OK, "%s",
                     pl_last_error());
    pl_completion *c;
    size_t n;
    cr_assert_eq(pl_engine_run(e, &c, &n), PL_OK, "%s", pl_last_error());
    cr_assert_eq(n, (size_t)N_PROMPTS);
    for (int i = 0; i < N_PROMPTS; i++) {
        cr_assert_eq(c[i].id, ids[i]);
        cr_assert_eq(c[i].n_output_ids, 256);
        cr_assert_eq(c[i].prompt_ids[0], 1, "prompts start with BOS");
        int np = (int)c[i].n_prompt_ids;
        int32_t *want = malloc(256 * sizeof(int32_t));
        dense_ref *d = dense_ref_create(m, np + 256);
        cr_assert_eq(dense_ref_greedy(d, c[i].prompt_ids, np, 256, want), 0);
        for (int k = 0; k < 256; k++)
            cr_assert_eq(c[i].output_ids[k], want[k], "prompt %d token %d: engine %d dense %d", i,
                         k, c[i].output_ids[k], want[k]);
        dense_ref_free(d);
        free(want);
    }
    pl_completions_free(c, n);
    pl_engine_destroy(e);
    pl_model_free(m);
    PL_ASSERT_NO_LEAKS();
}

Test(stories, text_is_the_decode_of_the_ids_and_the_story_ends_at_bos, .timeout = 120) {
    paths();
    pl_tokenizer *t;
    cr_assert_eq(pl_tok_load(tok_path, &t), PL_OK, "%s", pl_last_error());
    pl_engine *e = stories_engine(PL_BACKEND_CPU, 8);
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.temperature = 0.0f;
    sp.max_tokens = 400;
    pl_request_id id;
    cr_assert_eq(pl_engine_submit_request(e, prompts[0], &sp, &id), PL_OK);
    /* stream: the concatenated deltas are the completion's text */
    size_t cap = 1 << 16, len = 0;
    char *streamed = calloc(cap, 1);
    pl_completion done = {0};
    char *final_text = NULL;
    int32_t *out_ids = NULL;
    while (pl_engine_has_pending_work(e)) {
        pl_step_result r;
        cr_assert_eq(pl_engine_step(e, &r), PL_OK);
        for (size_t i = 0; i < r.n_deltas; i++) {
            cr_assert_lt(len + r.deltas[i].text_len, cap);
            memcpy(streamed + len, r.deltas[i].text, r.deltas[i].text_len);
            len += r.deltas[i].text_len;
        }
        if (r.n_finished) {
            done = r.finished[0];
            final_text = strdup(done.text);
            out_ids = malloc((done.n_output_ids + 1) * sizeof(int32_t));
            memcpy(out_ids, done.output_ids, done.n_output_ids * sizeof(int32_t));
        }
    }
    cr_assert(final_text);
    cr_assert_eq(done.finish_reason, PL_FINISH_STOP, "a TinyStories story ends with BOS");
    cr_assert_eq(out_ids[done.n_output_ids - 1], 1);
    cr_assert_gt(done.n_output_ids, 20);
    cr_assert_str_eq(streamed, final_text);
    char *decoded;
    cr_assert_eq(pl_tok_decode(t, out_ids, done.n_output_ids, &decoded), PL_OK);
    cr_assert_str_eq(final_text, decoded, "text %s\nvs decode %s", final_text, decoded);
    cr_assert(strlen(final_text) > 50, "a story: %s", final_text);
    pl_free(decoded);
    free(streamed);
    free(final_text);
    free(out_ids);
    pl_tok_free(t);
    pl_engine_destroy(e);
    PL_ASSERT_NO_LEAKS();
}

Test(stories, ref_and_cpu_backends_and_block_sizes_agree, .timeout = 240) {
    paths();
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.temperature = 0.0f;
    sp.max_tokens = 96;
    sp.ignore_eos = true;
    int32_t *first = NULL;
    size_t n_first = 0;
    struct { pl_backend_kind b; int bs; } runs[] = {
        {PL_BACKEND_CPU, 16}, {PL_BACKEND_REF, 16}, {PL_BACKEND_CPU, 1}, {PL_BACKEND_CPU, 32},
    };
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        pl_engine *e = stories_engine(runs[r].b, runs[r].bs);
        cr_assert_eq(pl_engine_submit_request(e, prompts[1], &sp, NULL), PL_OK);
        pl_completion *c;
        size_t n;
        cr_assert_eq(pl_engine_run(e, &c, &n), PL_OK);
        if (!first) {
            n_first = c[0].n_output_ids;
            first = malloc(n_first * sizeof(int32_t));
            memcpy(first, c[0].output_ids, n_first * sizeof(int32_t));
        } else {
            cr_assert_eq(c[0].n_output_ids, n_first);
            for (size_t k = 0; k < n_first; k++)
                cr_assert_eq(c[0].output_ids[k], first[k], "run %zu token %zu", r, k);
        }
        pl_completions_free(c, n);
        pl_engine_destroy(e);
    }
    free(first);
    PL_ASSERT_NO_LEAKS();
}

/* Runs one greedy request and returns (strdup'd) the concatenated stream and final text. */
static void run_text(pl_engine *e, const char *prompt, const pl_sampling_params *sp,
                     char **streamed_out, char **text_out, pl_finish_reason *reason) {
    cr_assert_eq(pl_engine_submit_request(e, prompt, sp, NULL), PL_OK, "%s", pl_last_error());
    size_t cap = 1 << 16, len = 0;
    char *streamed = calloc(cap, 1);
    while (pl_engine_has_pending_work(e)) {
        pl_step_result r;
        cr_assert_eq(pl_engine_step(e, &r), PL_OK);
        for (size_t i = 0; i < r.n_deltas; i++) {
            cr_assert_lt(len + r.deltas[i].text_len, cap);
            memcpy(streamed + len, r.deltas[i].text, r.deltas[i].text_len);
            len += r.deltas[i].text_len;
        }
        if (r.n_finished) {
            *text_out = strdup(r.finished[0].text);
            *reason = r.finished[0].finish_reason;
        }
    }
    *streamed_out = streamed;
}

Test(stories, stop_strings_end_the_text_and_are_never_streamed, .timeout = 120) {
    paths();
    pl_engine *e = stories_engine(PL_BACKEND_CPU, 16);
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.temperature = 0.0f;
    sp.max_tokens = 200;
    char *streamed, *full;
    pl_finish_reason why;
    run_text(e, prompts[0], &sp, &streamed, &full, &why);
    cr_assert_str_eq(streamed, full);
    /* stop at the second sentence's start: a string that spans several tokens */
    const char *dot = strstr(full, ". ");
    cr_assert(dot && strlen(dot) > 8, "%s", full);
    char stop[8];
    memcpy(stop, dot, 5);
    stop[5] = '\0';
    size_t want_len = (size_t)(strstr(full, stop) - full);
    free(streamed);
    sp.stop[0] = stop;
    sp.n_stop = 1;
    char *text;
    run_text(e, prompts[0], &sp, &streamed, &text, &why);
    cr_assert_eq(why, PL_FINISH_STOP);
    cr_assert_eq(strlen(text), want_len, "'%s' stop '%s' in '%s'", text, stop, full);
    cr_assert_eq(strncmp(text, full, want_len), 0);
    cr_assert_str_eq(streamed, text, "the stream never showed the stop string");
    free(streamed);
    free(text);
    free(full);
    pl_engine_destroy(e);
    PL_ASSERT_NO_LEAKS();
}
