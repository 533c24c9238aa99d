/*
 * tests/e2e/test_e2e_stories.c - the real stories260K model with its tok512 tokenizer (from
 * PAGELLM_TEST_MODELS): greedy tokens from the engine equal the dense reference for 250+
 * tokens with the f32 and with the default f16 KV cache, on prompts that cross block
 * boundaries, batched and alone; the streamed text equals
 * the tokenizer's decode of the output ids; generation ends at the BOS the model emits; the
 * tokenizer beside the model file is found.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dense_ref.h"
#include "e2e_util.h"
#include "model_fixtures.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "util/alloc.h"
#include "util/dtype.h"

static char model_path[1024], tok_path[1024];

static void paths(void) {
    cr_assert(pl_test_model_path("stories260K.bin", model_path, sizeof model_path));
    cr_assert(pl_test_model_path("tok512.model", tok_path, sizeof tok_path));
}

static pl_engine *stories_engine_kv(pl_backend_kind backend, int block_size, pl_dtype kv) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.kv_dtype = kv;
    c.model_path = model_path;
    c.tokenizer_path = tok_path;
    c.backend = backend;
    c.block_size = block_size;
    c.n_threads = 2;
    return e2e_engine(&c);
}

static pl_engine *stories_engine(pl_backend_kind backend, int block_size) {
    return stories_engine_kv(backend, block_size, PL_DTYPE_AUTO);
}

static const char *prompts[] = {
    "Once upon a time",
    "Lily and Ben went to the park. They saw a big dog with a red ball and",
    "The sun was hot. Tom wanted to swim in the lake with his friends, but his mom said",
    "One day, a little bird",
};
#define N_PROMPTS (int)(sizeof prompts / sizeof prompts[0])

/* One request run step by step: what was streamed and what it finished with (all owned). */
typedef struct streamed_run {
    char *streamed;       /* concatenation of every delta */
    char *text;           /* the completion's text */
    int32_t *ids;         /* (n_ids) output ids */
    size_t n_ids;
    pl_finish_reason reason;
    int32_t stop_string;  /* the completion's */
} streamed_run;

static void run_streaming(pl_engine *e, const char *prompt, const pl_sampling_params *sp,
                          streamed_run *out) {
    cr_assert_eq(pl_engine_submit_request(e, prompt, sp, NULL), PL_OK, "%s", pl_last_error());
    size_t cap = 1 << 16, len = 0;
    *out = (streamed_run){.streamed = calloc(cap, 1)};
    while (pl_engine_has_pending_work(e)) {
        pl_step_result r;
        cr_assert_eq(pl_engine_step(e, &r), PL_OK);
        for (size_t i = 0; i < r.n_deltas; i++) {
            cr_assert_lt(len + r.deltas[i].text_len, cap);
            memcpy(out->streamed + len, r.deltas[i].text, r.deltas[i].text_len);
            len += r.deltas[i].text_len;
        }
        if (r.n_finished) {
            const pl_completion *c = &r.finished[0];
            out->text = strdup(c->text);
            out->n_ids = c->n_output_ids;
            out->ids = malloc((c->n_output_ids + 1) * sizeof(int32_t));
            memcpy(out->ids, c->output_ids, c->n_output_ids * sizeof(int32_t));
            out->reason = c->finish_reason;
            out->stop_string = c->stop_string;
        }
    }
    cr_assert(out->text, "the request finished");
}

static void streamed_run_free(streamed_run *r) {
    free(r->streamed);
    free(r->text);
    free(r->ids);
}

/* The engine with KV cache elements of kv (AUTO: the default, f16) against the dense reference
 * storing its K and V as the engine does (resolved: f32 or f16). */
static void greedy_matches_dense(pl_dtype kv, pl_dtype resolved) {
    paths();
    pl_model *m;
    cr_assert_eq(pl_model_load(model_path, NULL, &m), PL_OK, "%s", pl_last_error());
    pl_engine *e = stories_engine_kv(PL_BACKEND_CPU, 16, kv);
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
        cr_assert(d);
        dense_ref_set_kv_dtype(d, resolved);
        cr_assert_eq(dense_ref_greedy(d, c[i].prompt_ids, np, 256, want), 0);
        for (int k = 0; k < 256; k++)
            cr_assert_eq(c[i].output_ids[k], want[k], "%s KV: prompt %d token %d: engine %d "
                         "dense %d", pl_dtype_name(resolved), i, k, c[i].output_ids[k], want[k]);
        dense_ref_free(d);
        free(want);
    }
    pl_completions_free(c, n);
    pl_engine_destroy(e);
    pl_model_free(m);
    PL_ASSERT_NO_LEAKS();
}

Test(stories, greedy_matches_dense_reference_for_256_tokens, .timeout = 240) {
    greedy_matches_dense(PL_DTYPE_F32, PL_DTYPE_F32);
}

Test(stories, greedy_matches_dense_reference_for_256_tokens_with_the_default_f16_kv,
     .timeout = 240) {
    greedy_matches_dense(PL_DTYPE_AUTO, PL_DTYPE_F16);
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
    streamed_run run;
    run_streaming(e, prompts[0], &sp, &run);
    cr_assert_eq(run.reason, PL_FINISH_STOP, "a TinyStories story ends with BOS");
    cr_assert_eq(run.ids[run.n_ids - 1], 1);
    cr_assert_gt(run.n_ids, 20);
    cr_assert_str_eq(run.streamed, run.text, "the concatenated deltas are the text");
    char *decoded;
    cr_assert_eq(pl_tok_decode(t, run.ids, run.n_ids, 0, &decoded), PL_OK);
    cr_assert_str_eq(run.text, decoded, "text %s\nvs decode %s", run.text, decoded);
    cr_assert(strlen(run.text) > 50, "a story: %s", run.text);
    pl_free(decoded);
    streamed_run_free(&run);
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

Test(stories, stop_strings_end_the_text_and_are_never_streamed, .timeout = 120) {
    paths();
    pl_engine *e = stories_engine(PL_BACKEND_CPU, 16);
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.temperature = 0.0f;
    sp.max_tokens = 200;
    streamed_run full;
    run_streaming(e, prompts[0], &sp, &full);
    cr_assert_str_eq(full.streamed, full.text);
    /* stop at the second sentence's start: a string that spans several tokens */
    const char *dot = strstr(full.text, ". ");
    cr_assert(dot && strlen(dot) > 8, "%s", full.text);
    char stop[8];
    memcpy(stop, dot, 5);
    stop[5] = '\0';
    size_t want_len = (size_t)(strstr(full.text, stop) - full.text);
    const char *stops[] = {stop};
    sp.stop = stops;
    sp.n_stop = 1;
    streamed_run cut;
    run_streaming(e, prompts[0], &sp, &cut);
    cr_assert_eq(cut.reason, PL_FINISH_STOP);
    cr_assert_eq(strlen(cut.text), want_len, "'%s' stop '%s' in '%s'", cut.text, stop, full.text);
    cr_assert_eq(strncmp(cut.text, full.text, want_len), 0);
    cr_assert_str_eq(cut.streamed, cut.text, "the stream never showed the stop string");
    cr_assert_eq(cut.stop_string, 0, "the completion says which stop string ended it");
    /* which of several: the earliest match; at the same place the first listed */
    char prefix[4];
    memcpy(prefix, stop, 3);
    prefix[3] = '\0';
    char later[8];
    memcpy(later, full.text + want_len + 6, 6);
    later[6] = '\0';
    const char *several[] = {"zqzqzq", stop, prefix, later};
    sp.stop = several;
    sp.n_stop = 4;
    streamed_run cut2;
    run_streaming(e, prompts[0], &sp, &cut2);
    cr_assert_eq(cut2.reason, PL_FINISH_STOP);
    cr_assert_str_eq(cut2.text, cut.text);
    cr_assert_eq(cut2.stop_string, 1, "stop string %d", cut2.stop_string);
    several[1] = several[2];
    several[2] = stop;
    streamed_run_free(&cut2);
    run_streaming(e, prompts[0], &sp, &cut2);
    cr_assert_eq(cut2.stop_string, 1, "stop string %d", cut2.stop_string);
    /* a stop id, or no stop: -1 */
    sp.n_stop = 0;
    sp.stop_ids = full.ids + 3;
    sp.n_stop_ids = 1;
    streamed_run by_id;
    run_streaming(e, prompts[0], &sp, &by_id);
    cr_assert_eq(by_id.reason, PL_FINISH_STOP);
    cr_assert_eq(by_id.stop_string, -1);
    cr_assert_eq(full.stop_string, -1);
    streamed_run_free(&by_id);
    streamed_run_free(&cut2);
    streamed_run_free(&full);
    streamed_run_free(&cut);
    pl_engine_destroy(e);
    PL_ASSERT_NO_LEAKS();
}

// ----------------------------------------------------------------------------
// the tokenizer beside the model (issue 21)

/* Greedy text of "Once upon a time" from an engine on model with tokenizer_path NULL (found
 * beside the model or not at all): the completion's text, malloc'd, or NULL when submit is
 * refused (the message is left in pl_last_error). */
static char *once_upon_a_time(const char *model) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = model;
    c.tokenizer_path = NULL;
    c.n_threads = 2;
    pl_engine *e = e2e_engine(&c);
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.temperature = 0.0f;
    sp.max_tokens = 24;
    char *text = NULL;
    if (pl_engine_submit_request(e, "Once upon a time", &sp, NULL) == PL_OK) {
        pl_completion *out;
        size_t n;
        cr_assert_eq(pl_engine_run(e, &out, &n), PL_OK, "%s", pl_last_error());
        cr_assert_eq(n, 1);
        text = strdup(out[0].text);
        pl_completions_free(out, n);
    }
    pl_engine_destroy(e);
    return text;
}

/* stories260K.bin in a folder with tok512.model, or with that tokenizer called
 * tokenizer.model: text prompts work without naming the tokenizer, and give what naming it
 * gives. Alone in its folder, submitting text is refused with a message that names no CLI
 * flag. */
Test(stories, the_tokenizer_beside_a_llama2c_file_is_found, .timeout = 120) {
    paths();
    pl_engine *named = stories_engine(PL_BACKEND_CPU, 16);
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.temperature = 0.0f;
    sp.max_tokens = 24;
    cr_assert_eq(pl_engine_submit_request(named, "Once upon a time", &sp, NULL), PL_OK);
    pl_completion *out;
    size_t n;
    cr_assert_eq(pl_engine_run(named, &out, &n), PL_OK, "%s", pl_last_error());
    char *want = strdup(out[0].text);
    cr_assert_gt(strlen(want), 10);
    pl_completions_free(out, n);
    pl_engine_destroy(named);

    const char *names[] = {"tok512.model", "tokenizer.model", NULL};
    for (int i = 0; i < 3; i++) {
        const char *tmp = pl_test_tmpdir();
        cr_assert(tmp);
        char dir[512], model[600], tok[600];
        snprintf(dir, sizeof dir, "%s", tmp);
        snprintf(model, sizeof model, "%s/stories260K.bin", dir);
        cr_assert_eq(symlink(model_path, model), 0);
        if (names[i]) {
            snprintf(tok, sizeof tok, "%s/%s", dir, names[i]);
            cr_assert_eq(symlink(tok_path, tok), 0);
        }
        char *got = once_upon_a_time(model);
        if (names[i]) {
            cr_assert_not_null(got, "%s beside the model: %s", names[i], pl_last_error());
            cr_assert_str_eq(got, want, "%s beside the model", names[i]);
        } else {
            cr_assert_null(got, "no tokenizer anywhere, and text was accepted");
            cr_assert(strstr(pl_last_error(), "no tokenizer"), "%s", pl_last_error());
            cr_assert_null(strstr(pl_last_error(), "--"), "a library message names a flag: %s",
                           pl_last_error());
        }
        free(got);
        pl_fixture_remove_dir(dir);
    }
    free(want);
    PL_ASSERT_NO_LEAKS();
}
