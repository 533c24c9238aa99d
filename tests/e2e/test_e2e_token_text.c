/*
 * tests/e2e/test_e2e_token_text.c - the text of each logprob position (pl_token_logprobs.text)
 * indexes the text it belongs to exactly, for every kind of tokenizer: SentencePiece (tok512,
 * the Llama 2 model), Metaspace/byte-fallback and byte-level BPE tokenizer.json (tok512's
 * conversion, Llama 3, Qwen3) and vocabularies read from GGUF ("llama" and "gpt2").
 *
 * A random model with the tokenizer's vocabulary samples at temperature 1, so outputs are full
 * of byte tokens, characters spelt over several of them and pieces a stop string cuts. For
 * each completion: the output positions' texts join to the completion's text; the prompt
 * positions' texts, after the first token's part, join to the rest of the prompt's decode;
 * so an echoed prompt followed by the output is indexed by the running offsets exactly
 * (what `text[off:off+len(tok)] == tok` checks in a server's response).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "model_fixtures.h"
#include "pagellm.h"
#include "test_support.h"

static const char *const prompts[] = {
    "Once upon a time",
    "Hello, my dog is cute",
    "  two leading spaces and  a double one",
    "trailing space ",
    "caf\xc3\xa9 na\xc3\xafve r\xc3\xa9sum\xc3\xa9",
    "\xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x8c\xe4\xb8\x96\xe7\x95\x8c",       /* 你好，世界 */
    "emoji \xf0\x9f\x90\x88 cat \xf0\x9f\x98\x80!",
    "line one\nline two\n\nend",
    "digits 1234567890 and 3.14159",
    "tabs\tand\tcode: if (x) { return 0; }",
    "a",
    "The quick brown fox jumps over the lazy dog.",
};
#define N_PROMPTS (sizeof prompts / sizeof prompts[0])

/* A random Llama model of the tokenizer's vocabulary, small enough for 150k ids. */
static void write_model(const char *dir, int vocab) {
    pl_model_config c;
    pl_fixture_family_config(PL_ARCH_LLAMA, 1, &c);
    c.dim = 16, c.n_heads = 2, c.n_kv_heads = 1, c.head_dim = 8, c.hidden_dim = 24;
    c.n_layers = 1;
    c.vocab_size = vocab;
    c.eos_ids[0] = 2, c.n_eos = 1;
    pl_model *m = pl_fixture_family_model(&c, 5);
    cr_assert_not_null(m);
    cr_assert(pl_fixture_write_hf(m, dir, NULL));
    pl_model_free(m);
}

static bool valid_utf8(const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        int n = *p < 0x80 ? 1 : (*p & 0xE0) == 0xC0 ? 2 : (*p & 0xF0) == 0xE0 ? 3
                : (*p & 0xF8) == 0xF0 ? 4 : 0;
        if (!n) return false;
        for (int i = 1; i < n; i++)
            if ((p[i] & 0xC0) != 0x80) return false;
        p += n;
    }
    return true;
}

/* Joins the texts of entries[0..n) and compares with want (want_len bytes). */
static void check_join(const char *what, size_t k, const pl_token_logprobs *e, size_t n,
                       const char *want, size_t want_len) {
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        cr_assert_not_null(e[i].text, "%s %zu: position %zu has no text", what, k, i);
        cr_assert(valid_utf8(e[i].text), "%s %zu: position %zu's text is not UTF-8", what, k, i);
        size_t len = strlen(e[i].text);
        cr_assert(at + len <= want_len && memcmp(want + at, e[i].text, len) == 0,
                  "%s %zu: position %zu (token %d) reads \"%s\" but the text at byte %zu is "
                  "\"%.*s\"", what, k, i, e[i].token, e[i].text, at, (int)(want_len - at),
                  want + at);
        at += len;
    }
    cr_assert_eq(at, want_len, "%s %zu: the positions' texts join to %zu of %zu bytes (\"%s\")",
                 what, k, at, want_len, want);
}

static void check_engine(const char *model, const char *tokenizer) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = model;
    c.tokenizer_path = tokenizer;
    c.max_model_len = 96;
    c.max_num_blocks = 256;
    c.block_size = 8;
    pl_engine *e = NULL;
    cr_assert_eq(pl_engine_create(&c, &e), PL_OK, "%s: %s", model, pl_last_error());
    const pl_tokenizer *tok = pl_engine_tokenizer(e);
    cr_assert_not_null(tok);
    static const char *const stops[] = {"e", "\n", "th"};
    for (int round = 0; round < 2; round++) {
        pl_request_id ids[N_PROMPTS];
        for (size_t k = 0; k < N_PROMPTS; k++) {
            pl_sampling_params sp;
            pl_sampling_params_default(&sp);
            sp.max_tokens = 16;
            sp.temperature = 1.0f;
            sp.top_p = 1.0f;
            sp.logprobs = 1;
            sp.prompt_logprobs = 1;
            sp.n = 2 - round;
            char seed[32];
            snprintf(seed, sizeof seed, "%zu", k * 7 + (size_t)round);
            cr_assert_eq(pl_sampling_params_set(&sp, "seed", seed), PL_OK);
            if (round == 1) { /* stop strings cut pieces */
                sp.stop = stops;
                sp.n_stop = 3;
            }
            cr_assert_eq(pl_engine_submit_request(e, prompts[k], &sp, &ids[k]), PL_OK, "%s",
                         pl_last_error());
        }
        pl_completion *out;
        size_t n;
        cr_assert_eq(pl_engine_run(e, &out, &n), PL_OK, "%s", pl_last_error());
        cr_assert_eq(n, (size_t)(2 - round) * N_PROMPTS);
        for (size_t i = 0; i < n; i++) {
            const pl_completion *cp = &out[i];
            size_t k = 0;
            while (ids[k] != cp->id) k++;
            cr_assert_eq(cp->n_logprobs, cp->n_output_ids);
            check_join("output", k, cp->logprobs, cp->n_logprobs, cp->text, strlen(cp->text));
            if (cp->index != 0) continue;
            /* the prompt: its decode, minus the first token's part, joined by the entries */
            cr_assert_eq(cp->n_prompt_logprobs, cp->n_prompt_ids - 1);
            char *text;
            size_t *off = malloc((cp->n_prompt_ids + 1) * sizeof *off);
            cr_assert_eq(pl_tokenizer_decode_offsets(tok, cp->prompt_ids, cp->n_prompt_ids,
                                                     PL_DECODE_SKIP_SPECIAL, &text, off),
                         PL_OK, "%s", pl_last_error());
            char *whole;
            size_t whole_len;
            cr_assert_eq(pl_engine_detokenize(e, cp->prompt_ids, cp->n_prompt_ids, &whole,
                                              &whole_len), PL_OK);
            cr_assert_str_eq(text, whole, "prompt %zu: decode_offsets and detokenize differ", k);
            cr_assert_eq(off[cp->n_prompt_ids], whole_len);
            check_join("prompt", k, cp->prompt_logprobs, cp->n_prompt_logprobs, whole + off[1],
                       whole_len - off[1]);
            pl_free_text(text);
            pl_free_text(whole);
            free(off);
        }
        pl_completions_free(out, n);
    }
    pl_engine_destroy(e);
}

/* The tokenizer at path (a file of the models folder, or of tests/data with "@data/"), with a
 * random model of its size; also through a GGUF file carrying both (pl_model_quantize). */
static void check_tokenizer(const char *name, bool gguf_too) {
    char path[1024];
    if (!strncmp(name, "@data/", 6)) {
        snprintf(path, sizeof path, "%s/%s", PL_TEST_DATA_DIR, name + 6);
    } else if (!pl_test_model_path(name, path, sizeof path)) {
        cr_skip_test("PAGELLM_TEST_MODELS unset: no %s", name);
    }
    pl_tokenizer *t;
    cr_assert_eq(pl_tokenizer_load(path, &t), PL_OK, "%s: %s", path, pl_last_error());
    int vocab = pl_tokenizer_vocab_size(t);
    pl_tokenizer_free(t);
    const char *dir = pl_test_tmpdir();
    char model[1024], gguf[1100];
    snprintf(model, sizeof model, "%s/model", dir);
    write_model(model, vocab);
    check_engine(model, path);
    if (gguf_too) {
        snprintf(gguf, sizeof gguf, "%s/model.gguf", dir);
        pl_quantize_options o;
        pl_quantize_options_default(&o);
        o.tokenizer_path = path;
        cr_assert_eq(pl_model_quantize(model, gguf, "f32", &o), PL_OK, "%s", pl_last_error());
        check_engine(gguf, NULL);
    }
    pl_fixture_remove_dir(dir);
    PL_ASSERT_NO_LEAKS();
}

Test(token_text, tok512_json) { check_tokenizer("@data/tok512_hf/tokenizer.json", false); }
Test(token_text, tok512_sentencepiece_and_gguf) { check_tokenizer("tok512.model", true); }
Test(token_text, llama2_sentencepiece) { check_tokenizer("tokenizer.model", false); }
Test(token_text, llama3_and_gguf, .timeout = 120) { check_tokenizer("llama3", true); }
Test(token_text, qwen3, .timeout = 120) { check_tokenizer("qwen3", false); }
