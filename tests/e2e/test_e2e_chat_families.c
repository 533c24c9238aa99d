/*
 * tests/e2e/test_e2e_chat_families.c - chats end to end on the four families as downloaded
 * (chat_families.h: random weights, the real tokenizers and chat templates), through the C
 * API on the ref and cpu backends:
 *
 * - the rendered chat is the family's template (its markers, its generation prompt), and the
 *   prompt ids the engine queues equal encode(apply_chat_template(...)) with special tokens
 *   parsed and nothing added (computed apart, with a tokenizer loaded alone);
 * - the greedy reply equals the dense reference's tokens on those ids, and ends on the
 *   family's end-of-turn token where the model emits it (planted at a known step: Llama 3's
 *   <|eot_id|> comes from the tokenizer, its config.json lists only <|end_of_text|>); with
 *   ignore_eos the engine goes on past it and still equals the reference, and its text
 *   appears in the output only with skip_special_tokens off;
 * - a second turn (the first reply as the assistant's message, then a new user message), as
 *   plain-text structs through pl_engine_submit_chat, the same;
 * - both turns batched give what each gives alone.
 *
 * llama3, qwen2 and qwen3 read their tokenizers from PAGELLM_TEST_MODELS and skip without it;
 * mistral's is in tests/data and always runs.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_families.h"
#include "model_fixtures.h"
#include "pagellm.h"
#include "test_support.h"

TestSuite(chat_families, .timeout = 300.0);

#define MAX_TOKENS 24

static const char *const SYSTEM = "You are a terse assistant.";
static const char *const USER_1 = "Name three colours.";
static const char *const USER_2 = "And three more, please?";

/* [system, user 1] and, with reply, [system, user 1, assistant reply, user 2] as JSON. */
static char *conversation(const char *reply) {
    json_t *a = json_pack("[{s:s, s:s}, {s:s, s:s}]", "role", "system", "content", SYSTEM, "role",
                          "user", "content", USER_1);
    cr_assert_not_null(a);
    if (reply) {
        json_t *more = json_pack("[{s:s, s:s}, {s:s, s:s}]", "role", "assistant", "content", reply,
                                 "role", "user", "content", USER_2);
        cr_assert_not_null(more, "the reply is not UTF-8");
        json_array_extend(a, more);
        json_decref(more);
    }
    char *s = json_dumps(a, JSON_COMPACT);
    json_decref(a);
    cr_assert_not_null(s);
    return s;
}

typedef struct reply {
    int32_t *prompt;
    size_t n_prompt;
    int32_t *out;
    size_t n_out;
    char *text;
    pl_finish_reason reason;
} reply;

static void reply_free(reply *r) {
    free(r->prompt);
    free(r->out);
    free(r->text);
    memset(r, 0, sizeof *r);
}

static void keep(const pl_completion *c, reply *r) {
    r->n_prompt = c->n_prompt_ids;
    r->prompt = malloc((c->n_prompt_ids + 1) * sizeof *r->prompt);
    memcpy(r->prompt, c->prompt_ids, c->n_prompt_ids * sizeof *r->prompt);
    r->n_out = c->n_output_ids;
    r->out = malloc((c->n_output_ids + 1) * sizeof *r->out);
    memcpy(r->out, c->output_ids, c->n_output_ids * sizeof *r->out);
    r->text = strdup(c->text ? c->text : "");
    r->reason = c->finish_reason;
}

/* Runs what was submitted; replies are matched to ids (want[i] gets ids[i]'s). */
static void run(pl_engine *e, const pl_request_id *ids, reply *want, int n) {
    pl_completion *cs;
    size_t nc;
    cr_assert_eq(pl_engine_run(e, &cs, &nc), PL_OK, "%s", pl_last_error());
    cr_assert_eq(nc, (size_t)n);
    for (size_t k = 0; k < nc; k++)
        for (int i = 0; i < n; i++)
            if (cs[k].id == ids[i]) keep(&cs[k], &want[i]);
    pl_completions_free(cs, nc);
}

static pl_sampling_params greedy(bool ignore_eos) {
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.temperature = 0.0f;
    sp.max_tokens = MAX_TOKENS;
    sp.ignore_eos = ignore_eos;
    return sp;
}

/* The reply must be the dense reference's greedy tokens on its prompt ids, cut at the first
 * stop id. Returns whether a stop id ended it. */
static bool check_reply(const char *what, const pl_model *m, const chat_family_model *fm,
                        const reply *r, bool ignore_eos) {
    int32_t dense[MAX_TOKENS];
    cr_assert(chat_dense_greedy(m, r->prompt, r->n_prompt, MAX_TOKENS, dense), "%s", what);
    bool stopped = false;
    int len = ignore_eos ? MAX_TOKENS : chat_expected_reply(fm, dense, MAX_TOKENS, &stopped);
    cr_assert_eq(r->n_out, (size_t)len, "%s: %zu reply tokens, the reference %d", what, r->n_out,
                 len);
    for (int i = 0; i < len; i++)
        cr_assert_eq(r->out[i], dense[i], "%s: reply token %d is %d, the reference's %d", what, i,
                     r->out[i], dense[i]);
    cr_assert_eq(r->reason, stopped ? PL_FINISH_STOP : PL_FINISH_LENGTH, "%s: finish reason %d",
                 what, (int)r->reason);
    return stopped;
}

static void check_prompt(const char *what, const reply *r, const int32_t *want, size_t n) {
    cr_assert_eq(r->n_prompt, n, "%s: %zu prompt ids, encode(apply_chat_template) gives %zu", what,
                 r->n_prompt, n);
    cr_assert_arr_eq(r->prompt, want, n * sizeof *want, "%s: prompt ids differ", what);
}

/* The family's template rendered the chat: its markers around the messages and its
 * generation prompt at the end. */
static void check_rendering(const chat_family *f, const char *dir) {
    pl_tokenizer *t;
    cr_assert_eq(pl_tokenizer_load(dir, &t), PL_OK, "%s", pl_last_error());
    char *msgs = conversation(NULL), *text;
    cr_assert_eq(pl_tokenizer_apply_chat_template(t, msgs, NULL, &text, NULL), PL_OK, "%s",
                 pl_last_error());
    const char *head, *tail;
    if (!strcmp(f->name, "llama3")) {
        head = "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n";
        tail = "Name three colours.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
    } else if (!strcmp(f->name, "mistral")) {
        head = "<s>[INST] You are a terse assistant.\n\nName three colours.";
        tail = "[/INST]";
    } else {
        head = "<|im_start|>system\nYou are a terse assistant.<|im_end|>\n";
        tail = "<|im_start|>user\nName three colours.<|im_end|>\n<|im_start|>assistant\n";
    }
    cr_assert(!strncmp(text, head, strlen(head)), "%s: the chat begins\n%s", f->name, text);
    size_t lt = strlen(text), ls = strlen(tail);
    cr_assert(lt >= ls && !strcmp(text + lt - ls, tail), "%s: the chat ends\n%s", f->name, text);
    pl_free_text(text);
    free(msgs);
    pl_tokenizer_free(t);
}

static pl_engine *engine(const char *dir, pl_backend_kind backend) {
    pl_engine_config ec;
    pl_engine_config_default(&ec);
    ec.model_path = dir;
    ec.backend = backend;
    ec.kv_dtype = PL_DTYPE_F32; /* greedy tokens then do not depend on the batch */
    ec.block_size = 4;
    ec.max_num_blocks = 256;
    ec.max_total_tokens = 32; /* prompts are chunked */
    ec.n_threads = 2;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_create(&ec, &e), PL_OK, "%s: %s", dir, pl_last_error());
    return e;
}

static void check_family(const char *name) {
    const chat_family *f = chat_family_find(name);
    cr_assert_not_null(f);
    char *dir = strdup(pl_test_tmpdir());
    char *first = conversation(NULL);
    chat_family_model fm;
    chat_family_result wr = chat_family_write(f, dir, 21, first, &fm);
    if (wr == CHAT_FAMILY_SKIP) {
        pl_fixture_remove_dir(dir);
        free(dir);
        free(first);
        cr_skip_test("%s needs PAGELLM_TEST_MODELS", name);
    }
    cr_assert_eq(wr, CHAT_FAMILY_OK, "%s: writing the model", name);
    check_rendering(f, dir);
    pl_model *m;
    cr_assert_eq(pl_model_load(dir, &(pl_model_load_options){.dtype = PL_DTYPE_AUTO}, &m), PL_OK,
                 "%s", pl_last_error());
    cr_assert_eq(m->cfg.vocab_size, fm.vocab);

    const pl_backend_kind backends[] = {PL_BACKEND_REF, PL_BACKEND_CPU};
    for (int b = 0; b < 2; b++) {
        char what[96];
        pl_engine *e = engine(dir, backends[b]);
        /* the end of turn the engine reports: the family's marker (Qwen's <|im_end|>, not the
         * <|endoftext|> its generation_config also lists); none apart from EOS for Mistral */
        pl_model_info info;
        cr_assert_eq(pl_engine_model_info(e, &info), PL_OK);
        int32_t eot = pl_tokenizer_token_id(pl_engine_tokenizer(e), f->eot);
        int32_t want = strcmp(f->eot, "</s>") ? eot : -1;
        cr_assert_eq(info.eot_id, want, "%s: eot_id %d, want %d (%s)", name, info.eot_id, want,
                     f->eot);
        /* turn 1: ends on the end-of-turn token */
        pl_sampling_params sp = greedy(false);
        pl_request_id id[2];
        reply r1 = {0}, r1_on = {0};
        cr_assert_eq(pl_engine_submit_chat_json(e, first, NULL, &sp, &id[0]), PL_OK, "%s",
                     pl_last_error());
        run(e, id, &r1, 1);
        snprintf(what, sizeof what, "%s, backend %d, turn 1", name, (int)backends[b]);
        check_prompt(what, &r1, fm.prompt_ids, fm.n_prompt);
        cr_assert(check_reply(what, m, &fm, &r1, false), "%s: no end of turn", what);
        cr_assert_eq(r1.n_out, (size_t)fm.plant_step + 1, "%s", what);
        cr_assert_eq(r1.out[r1.n_out - 1], fm.eot, "%s: ended on %d, not the end of turn %d",
                     what, r1.out[r1.n_out - 1], fm.eot);
        /* ignore_eos: it goes on past the end of turn, still the reference's tokens */
        sp = greedy(true);
        cr_assert_eq(pl_engine_submit_chat_json(e, first, NULL, &sp, &id[0]), PL_OK);
        run(e, id, &r1_on, 1);
        check_reply(what, m, &fm, &r1_on, true);
        /* the end of turn gives no text, unless skip_special_tokens is off */
        cr_assert_null(strstr(r1_on.text, f->eot), "%s: %s", what, r1_on.text);
        reply r1_sp = {0};
        sp.skip_special_tokens = false;
        cr_assert_eq(pl_engine_submit_chat_json(e, first, NULL, &sp, &id[0]), PL_OK);
        run(e, id, &r1_sp, 1);
        cr_assert(r1_sp.n_out == r1_on.n_out &&
                      !memcmp(r1_sp.out, r1_on.out, r1_on.n_out * sizeof *r1_on.out), "%s", what);
        const char *at = strstr(r1_sp.text, f->eot);
        cr_assert(at && (size_t)(at - r1_sp.text) == strlen(r1.text) &&
                      !strncmp(r1_sp.text, r1.text, strlen(r1.text)),
                  "%s: the end of turn's text follows the reply: %s", what, r1_sp.text);
        reply_free(&r1_sp);

        /* turn 2, as plain-text structs */
        const pl_chat_message msgs[] = {{"system", SYSTEM}, {"user", USER_1},
                                        {"assistant", r1.text}, {"user", USER_2}};
        char *second = conversation(r1.text);
        int32_t *want2;
        size_t n_want2;
        cr_assert(chat_prompt_ids(dir, second, NULL, &want2, &n_want2));
        sp = greedy(false);
        reply r2 = {0};
        cr_assert_eq(pl_engine_submit_chat(e, msgs, 4, NULL, &sp, &id[0]), PL_OK, "%s",
                     pl_last_error());
        run(e, id, &r2, 1);
        snprintf(what, sizeof what, "%s, backend %d, turn 2", name, (int)backends[b]);
        check_prompt(what, &r2, want2, n_want2);
        check_reply(what, m, &fm, &r2, false);

        /* both at once */
        reply both[2] = {{0}};
        cr_assert_eq(pl_engine_submit_chat_json(e, first, NULL, &sp, &id[0]), PL_OK);
        cr_assert_eq(pl_engine_submit_chat(e, msgs, 4, NULL, &sp, &id[1]), PL_OK);
        run(e, id, both, 2);
        cr_assert(both[0].n_out == r1.n_out &&
                      !memcmp(both[0].out, r1.out, r1.n_out * sizeof *r1.out),
                  "%s: turn 1 batched differs", what);
        cr_assert(both[1].n_out == r2.n_out &&
                      !memcmp(both[1].out, r2.out, r2.n_out * sizeof *r2.out),
                  "%s: turn 2 batched differs", what);
        reply_free(&both[0]);
        reply_free(&both[1]);
        reply_free(&r2);
        free(want2);
        free(second);
        reply_free(&r1_on);
        reply_free(&r1);
        pl_engine_destroy(e);
    }
    pl_model_free(m);
    free(fm.prompt_ids);
    free(first);
    pl_fixture_remove_dir(dir);
    free(dir);
    PL_ASSERT_NO_LEAKS();
}

Test(chat_families, llama3) { check_family("llama3"); }
Test(chat_families, mistral) { check_family("mistral"); }
Test(chat_families, qwen2) { check_family("qwen2"); }
Test(chat_families, qwen3) { check_family("qwen3"); }
