/*
 * tests/tokenizer/test_tokenizer_gguf.c - tokenizers stored in and loaded from GGUF metadata:
 * each exported (pl_tok_gguf_export) into a GGUF file that holds nothing else, loaded back
 * from it, and held to the source on the corpus: ids (special tokens added and parsed or
 * not), decodes, streams and the facts (BOS/EOS, add flags, end-of-generation ids, chat
 * templates). SentencePiece models trained here (BPE, with user-defined and control pieces,
 * without the dummy prefix) always run; tok512, the Llama 2 tokenizer.model and the Llama 3 /
 * Qwen3 tokenizer.json files of $PAGELLM_TEST_MODELS (the latter against the oracle fixture)
 * are skipped without it. What GGUF cannot describe is refused at export, and hostile
 * metadata at load, naming the file and the key.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "hf_oracle.h"
#include "model_fixtures.h"
#include "test_support.h"
#include "tok_check.h"
#include "tokenizer/tok_internal.h"
#include "util/alloc.h"

static char g_path[1024];

/* t exported into a fresh GGUF file; returns its path (static storage). */
static const char *export_file(const pl_tokenizer *t) {
    const char *dir = pl_test_tmpdir();
    snprintf(g_path, sizeof g_path, "%s/tok.gguf", dir);
    pl_gguf_writer *w;
    cr_assert_eq(pl_gguf_writer_create(&w), PL_OK);
    cr_assert_eq(pl_tok_gguf_export(t, w), PL_OK, "%s", pl_last_error());
    cr_assert_eq(pl_gguf_writer_write(w, g_path, NULL, NULL), PL_OK, "%s", pl_last_error());
    pl_gguf_writer_free(w);
    return g_path;
}

/* Removes the scratch directory of g_path. */
static void remove_export(void) {
    char *slash = strrchr(g_path, '/');
    if (!slash) return;
    *slash = '\0';
    pl_fixture_remove_dir(g_path);
}

static pl_tokenizer *load(const char *path) {
    pl_tokenizer *t = NULL;
    cr_assert_eq(pl_tok_load(path, &t), PL_OK, "%s: %s", path, pl_last_error());
    return t;
}

static void same_ids(const pl_tokenizer *a, const pl_tokenizer *b, const char *text,
                     unsigned flags) {
    int32_t *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    size_t len = strlen(text);
    cr_assert_eq(pl_tok_encode(a, text, len, flags, &x, &nx), PL_OK, "%s", pl_last_error());
    cr_assert_eq(pl_tok_encode(b, text, len, flags, &y, &ny), PL_OK, "%s", pl_last_error());
    cr_assert(nx == ny && memcmp(x, y, nx * sizeof *x) == 0,
              "\"%s\" (flags %u): %zu ids from the source, %zu from the GGUF", text, flags, nx, ny);
    char *da = NULL, *db = NULL;
    cr_assert_eq(pl_tok_decode(a, x, nx, 0, &da), PL_OK);
    cr_assert_eq(pl_tok_decode(b, y, ny, 0, &db), PL_OK);
    cr_assert_str_eq(da, db);
    tok_check_stream(b, y, ny, false);
    pl_free(da);
    pl_free(db);
    pl_free(x);
    pl_free(y);
}

static const char *const k_extra[] = {
    "", " ", "  two  spaces  ", "\ttab\nnewline\r\n", "1234567 89", "<s> control </s> text",
    "caf\xC3\xA9 na\xC3\xAFve \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xF0\x9F\x90\x88 emoji",
    "<sep> user <ctl> defined \xF0\x9F\x90\x88", "<|begin_of_text|>Hi<|eot_id|>", "'s 'LL ''",
    "e\xCC\x81 decomposed", NULL,
};

/* The corpus lines and the extra strings, with and without special tokens. */
static int same_on_corpus(const pl_tokenizer *a, const pl_tokenizer *b) {
    FILE *f = fopen(PL_TOK_DATA_DIR "/tok_corpus.txt", "rb");
    cr_assert_not_null(f);
    char line[4096];
    int n = 0;
    static const unsigned flags[] = {0, PL_TOK_ADD_SPECIAL,
                                     PL_TOK_ADD_SPECIAL | PL_TOK_PARSE_SPECIAL};
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        for (int k = 0; k < 3; k++) same_ids(a, b, line, flags[k]);
        n++;
    }
    fclose(f);
    for (int i = 0; k_extra[i]; i++)
        for (int k = 0; k < 3; k++) same_ids(a, b, k_extra[i], flags[k]);
    return n;
}

static void same_facts(const pl_tokenizer *a, const pl_tokenizer *b) {
    cr_assert_eq(pl_tok_vocab_size(a), pl_tok_vocab_size(b));
    cr_assert_eq(pl_tok_bos_id(a), pl_tok_bos_id(b));
    cr_assert_eq(pl_tok_eos_id(a), pl_tok_eos_id(b));
    cr_assert_eq(pl_tok_add_bos(a), pl_tok_add_bos(b));
    cr_assert_eq(pl_tok_add_eos(a), pl_tok_add_eos(b));
    size_t na, nb;
    const int32_t *ea = pl_tok_eog_ids(a, &na), *eb = pl_tok_eog_ids(b, &nb);
    cr_assert(na == nb && memcmp(ea, eb, na * sizeof *ea) == 0, "end-of-generation ids");
    for (int32_t id = 0; id < pl_tok_vocab_size(a); id++) {
        cr_assert_str_eq(pl_tok_piece(a, id), pl_tok_piece(b, id));
        cr_assert_eq(pl_tok_is_special(a, id), pl_tok_is_special(b, id), "id %d", id);
    }
    cr_assert_eq(pl_tok_chat_template_count(a), pl_tok_chat_template_count(b));
    for (size_t i = 0; i < pl_tok_chat_template_count(a); i++) {
        const char *name = pl_tok_chat_template_name(a, i);
        cr_assert_str_eq(pl_tok_chat_template(a, name), pl_tok_chat_template(b, name));
    }
}

static void round_trip(const char *src) {
    pl_tokenizer *a = load(src);
    pl_tokenizer *b = load(export_file(a));
    cr_assert_str_eq(pl_tok_type(a), pl_tok_type(b));
    same_facts(a, b);
    cr_assert_gt(same_on_corpus(a, b), 30);
    pl_tok_free(a);
    pl_tok_free(b);
    remove_export();
}

Test(tokenizer_gguf, sentencepiece_models_trained_here) {
    static const char *const names[] = {"tok_bpe", "tok_first", "tok_keep"};
    for (size_t i = 0; i < 3; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s.model", PL_TOK_TEST_DIR, names[i]);
        round_trip(path);
    }
    PL_ASSERT_NO_LEAKS();
}

Test(tokenizer_gguf, what_gguf_cannot_describe_is_refused_at_export) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tok_unigram.model", PL_TOK_TEST_DIR);
    pl_tokenizer *t = load(path);
    pl_gguf_writer *w;
    cr_assert_eq(pl_gguf_writer_create(&w), PL_OK);
    cr_assert_eq(pl_tok_gguf_export(t, w), PL_ERR_UNSUPPORTED);
    cr_assert(strstr(pl_last_error(), "unigram"), "%s", pl_last_error());
    pl_gguf_writer_free(w);
    pl_tok_free(t);
    /* tok512_meta: a Metaspace BPE tokenizer.json, not byte-level */
    t = load(PL_TOK_DATA_DIR "/tok512_meta");
    cr_assert_eq(pl_gguf_writer_create(&w), PL_OK);
    cr_assert_eq(pl_tok_gguf_export(t, w), PL_ERR_UNSUPPORTED);
    cr_assert(strstr(pl_last_error(), "byte-level"), "%s", pl_last_error());
    pl_gguf_writer_free(w);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

static bool have_models(void) { return pl_test_models_dir() != NULL; }

static void shared_path(const char *name, char *buf, size_t cap) {
    cr_assert(pl_test_model_path(name, buf, cap));
}

Test(tokenizer_gguf, tok512_and_llama2_sentencepiece) {
    if (!have_models()) cr_skip_test("PAGELLM_TEST_MODELS is not set");
    char path[1024];
    shared_path("tok512.model", path, sizeof path);
    round_trip(path);
    shared_path("tokenizer.model", path, sizeof path);
    round_trip(path);
    PL_ASSERT_NO_LEAKS();
}

static void byte_level_equals_the_oracle(const char *name) {
    if (!have_models()) cr_skip_test("PAGELLM_TEST_MODELS is not set");
    char path[1024];
    shared_path(name, path, sizeof path);
    pl_tokenizer *a = load(path);
    pl_tokenizer *b = load(export_file(a));
    cr_assert_str_eq(pl_tok_type(b), "bpe");
    same_facts(a, b);
    cr_assert_gt(hf_oracle_check_cases(name, b), 50);
    cr_assert_gt(same_on_corpus(a, b), 30);
    pl_tok_free(a);
    pl_tok_free(b);
    remove_export();
    PL_ASSERT_NO_LEAKS();
}

Test(tokenizer_gguf, llama3_gpt2_vocabulary_equals_the_oracle, .timeout = 120) {
    byte_level_equals_the_oracle("llama3");
}

Test(tokenizer_gguf, qwen3_gpt2_vocabulary_equals_the_oracle, .timeout = 120) {
    byte_level_equals_the_oracle("qwen3");
}

// ----------------------------------------------------------------------------
// hostile metadata

typedef pl_status (*meta_fn)(pl_gguf_writer *w);

static void expect_load_fail(meta_fn fn, pl_status code, const char *needle) {
    const char *dir = pl_test_tmpdir();
    char path[1024];
    snprintf(path, sizeof path, "%s/h.gguf", dir);
    pl_gguf_writer *w;
    cr_assert_eq(pl_gguf_writer_create(&w), PL_OK);
    cr_assert_eq(fn(w), PL_OK);
    cr_assert_eq(pl_gguf_writer_write(w, path, NULL, NULL), PL_OK);
    pl_gguf_writer_free(w);
    pl_tokenizer *t = NULL;
    pl_status s = pl_tok_load(path, &t);
    cr_assert_eq(s, code, "got %s (%s), want %s", pl_status_name(s), pl_last_error(),
                 pl_status_name(code));
    cr_assert_null(t);
    cr_assert(strstr(pl_last_error(), path), "names the file: %s", pl_last_error());
    cr_assert(strstr(pl_last_error(), needle), "\"%s\" lacks \"%s\"", pl_last_error(), needle);
    pl_fixture_remove_dir(dir);
}

static const char *const k_tokens[] = {"<unk>", "<s>", "</s>", "a", "b", "ab", "\xE2\x96\x81"};
static const char *const k_bytes[] = {"a", "b", "ab", "c", "<|end|>"};

static pl_status gpt2(pl_gguf_writer *w, const char *pre, const char *merge) {
    PL_TRY(pl_gguf_add_str(w, "tokenizer.ggml.model", "gpt2", 4));
    if (pre) PL_TRY(pl_gguf_add_str(w, "tokenizer.ggml.pre", pre, strlen(pre)));
    PL_TRY(pl_gguf_add_str_array(w, "tokenizer.ggml.tokens", k_bytes, NULL, 5));
    int32_t types[5] = {1, 1, 1, 1, 3};
    PL_TRY(pl_gguf_add_array(w, "tokenizer.ggml.token_type", PL_GGUF_I32, types, 5));
    const char *merges[1] = {merge};
    return pl_gguf_add_str_array(w, "tokenizer.ggml.merges", merges, NULL, 1);
}

static pl_status h_no_model(pl_gguf_writer *w) {
    return pl_gguf_add_str_array(w, "tokenizer.ggml.tokens", k_tokens, NULL, 7);
}
static pl_status h_bad_model(pl_gguf_writer *w) {
    PL_TRY(pl_gguf_add_str(w, "tokenizer.ggml.model", "t5", 2));
    return h_no_model(w);
}
static pl_status h_tokens_not_strings(pl_gguf_writer *w) {
    int32_t v[3] = {1, 2, 3};
    PL_TRY(pl_gguf_add_str(w, "tokenizer.ggml.model", "llama", 5));
    return pl_gguf_add_array(w, "tokenizer.ggml.tokens", PL_GGUF_I32, v, 3);
}
static pl_status h_types_count(pl_gguf_writer *w) {
    PL_TRY(pl_gguf_add_str(w, "tokenizer.ggml.model", "llama", 5));
    PL_TRY(h_no_model(w));
    int32_t types[3] = {2, 3, 3};
    return pl_gguf_add_array(w, "tokenizer.ggml.token_type", PL_GGUF_I32, types, 3);
}
static pl_status h_type_value(pl_gguf_writer *w) {
    PL_TRY(pl_gguf_add_str(w, "tokenizer.ggml.model", "llama", 5));
    PL_TRY(h_no_model(w));
    int32_t types[7] = {2, 3, 3, 1, 1, 9, 1};
    return pl_gguf_add_array(w, "tokenizer.ggml.token_type", PL_GGUF_I32, types, 7);
}
static pl_status h_no_unk(pl_gguf_writer *w) {
    PL_TRY(pl_gguf_add_str(w, "tokenizer.ggml.model", "llama", 5));
    return h_no_model(w);
}
static pl_status h_bad_utf8(pl_gguf_writer *w) {
    PL_TRY(pl_gguf_add_str(w, "tokenizer.ggml.model", "llama", 5));
    const char *t[2] = {"<unk>", "\xC3"};
    return pl_gguf_add_str_array(w, "tokenizer.ggml.tokens", t, NULL, 2);
}
static pl_status h_bos_range(pl_gguf_writer *w) {
    PL_TRY(pl_gguf_add_str(w, "tokenizer.ggml.model", "llama", 5));
    PL_TRY(h_no_model(w));
    int32_t types[7] = {2, 3, 3, 1, 1, 1, 1};
    PL_TRY(pl_gguf_add_array(w, "tokenizer.ggml.token_type", PL_GGUF_I32, types, 7));
    return pl_gguf_add_u32(w, "tokenizer.ggml.bos_token_id", 70);
}
static pl_status h_charsmap(pl_gguf_writer *w) {
    PL_TRY(pl_gguf_add_str(w, "tokenizer.ggml.model", "llama", 5));
    PL_TRY(h_no_model(w));
    uint8_t b[4] = {1, 2, 3, 4};
    return pl_gguf_add_array(w, "tokenizer.ggml.precompiled_charsmap", PL_GGUF_U8, b, 4);
}
static pl_status h_pre(pl_gguf_writer *w) { return gpt2(w, "tekken-9", "a b"); }
static pl_status h_merge_unknown(pl_gguf_writer *w) { return gpt2(w, "gpt2", "a c"); }
static pl_status h_merge_no_space(pl_gguf_writer *w) { return gpt2(w, "gpt2", "ab"); }
static pl_status h_dup_tokens(pl_gguf_writer *w) {
    PL_TRY(pl_gguf_add_str(w, "tokenizer.ggml.model", "gpt2", 4));
    const char *t[3] = {"a", "b", "a"};
    PL_TRY(pl_gguf_add_str_array(w, "tokenizer.ggml.tokens", t, NULL, 3));
    const char *merges[1] = {"a b"};
    return pl_gguf_add_str_array(w, "tokenizer.ggml.merges", merges, NULL, 1);
}
static pl_status h_template_type(pl_gguf_writer *w) {
    PL_TRY(gpt2(w, "gpt2", "a b"));
    return pl_gguf_add_u32(w, "tokenizer.chat_template", 3);
}

Test(tokenizer_gguf, hostile_metadata_is_refused_by_key) {
    expect_load_fail(h_no_model, PL_ERR_FORMAT, "tokenizer.ggml.model");
    expect_load_fail(h_bad_model, PL_ERR_UNSUPPORTED, "t5");
    expect_load_fail(h_tokens_not_strings, PL_ERR_FORMAT, "tokenizer.ggml.tokens");
    expect_load_fail(h_types_count, PL_ERR_FORMAT, "tokenizer.ggml.token_type");
    expect_load_fail(h_type_value, PL_ERR_FORMAT, "tokenizer.ggml.token_type[5]");
    expect_load_fail(h_no_unk, PL_ERR_FORMAT, "unknown token");
    expect_load_fail(h_bad_utf8, PL_ERR_FORMAT, "tokenizer.ggml.tokens[1]");
    expect_load_fail(h_bos_range, PL_ERR_FORMAT, "tokenizer.ggml.bos_token_id");
    expect_load_fail(h_charsmap, PL_ERR_UNSUPPORTED, "precompiled_charsmap");
    expect_load_fail(h_pre, PL_ERR_UNSUPPORTED, "tekken-9");
    expect_load_fail(h_merge_unknown, PL_ERR_FORMAT, "tokenizer.ggml.merges[0]");
    expect_load_fail(h_merge_no_space, PL_ERR_FORMAT, "tokenizer.ggml.merges[0]");
    expect_load_fail(h_dup_tokens, PL_ERR_FORMAT, "tokenizer.ggml.tokens[2]");
    expect_load_fail(h_template_type, PL_ERR_FORMAT, "tokenizer.chat_template");
    PL_ASSERT_NO_LEAKS();
}

/* A tiny gpt2 vocabulary by hand: merges apply, the control token is special, BOS added as
 * the file says, and the GPT-2 split keeps a space with the word after it. */
static pl_status h_tiny(pl_gguf_writer *w) {
    PL_TRY(pl_gguf_add_str(w, "tokenizer.ggml.model", "gpt2", 4));
    PL_TRY(pl_gguf_add_str(w, "tokenizer.ggml.pre", "gpt2", 4));
    const char *t[6] = {"a", "b", "ab", "\xC4\xA0", "\xC4\xA0\x61\x62", "<|end|>"};
    PL_TRY(pl_gguf_add_str_array(w, "tokenizer.ggml.tokens", t, NULL, 6));
    int32_t types[6] = {1, 1, 1, 1, 1, 3};
    PL_TRY(pl_gguf_add_array(w, "tokenizer.ggml.token_type", PL_GGUF_I32, types, 6));
    const char *merges[2] = {"a b", "\xC4\xA0 ab"};
    PL_TRY(pl_gguf_add_str_array(w, "tokenizer.ggml.merges", merges, NULL, 2));
    PL_TRY(pl_gguf_add_u32(w, "tokenizer.ggml.bos_token_id", 5));
    PL_TRY(pl_gguf_add_u32(w, "tokenizer.ggml.eos_token_id", 5));
    PL_TRY(pl_gguf_add_bool(w, "tokenizer.ggml.add_bos_token", true));
    PL_TRY(pl_gguf_add_str(w, "tokenizer.chat_template", "{{ x }}", 7));
    return pl_gguf_add_str(w, "tokenizer.chat_template.tool_use", "{{ y }}", 7);
}

Test(tokenizer_gguf, a_hand_made_gpt2_vocabulary) {
    const char *dir = pl_test_tmpdir();
    char path[1024];
    snprintf(path, sizeof path, "%s/tiny.gguf", dir);
    pl_gguf_writer *w;
    cr_assert_eq(pl_gguf_writer_create(&w), PL_OK);
    cr_assert_eq(h_tiny(w), PL_OK);
    cr_assert_eq(pl_gguf_writer_write(w, path, NULL, NULL), PL_OK);
    pl_gguf_writer_free(w);
    pl_tokenizer *t = load(path);
    int32_t *ids;
    size_t n;
    cr_assert_eq(pl_tok_encode(t, "ab ab<|end|>", 12, PL_TOK_ADD_SPECIAL | PL_TOK_PARSE_SPECIAL,
                               &ids, &n), PL_OK, "%s", pl_last_error());
    int32_t want[] = {5, 2, 4, 5};
    cr_assert_eq(n, 4);
    cr_assert_arr_eq(ids, want, sizeof want);
    pl_free(ids);
    cr_assert(pl_tok_is_special(t, 5));
    cr_assert(pl_tok_is_eog(t, 5));
    cr_assert_str_eq(pl_tok_chat_template(t, NULL), "{{ x }}");
    cr_assert_str_eq(pl_tok_chat_template(t, "tool_use"), "{{ y }}");
    char *text;
    int32_t dec[] = {2, 4};
    cr_assert_eq(pl_tok_decode(t, dec, 2, 0, &text), PL_OK);
    cr_assert_str_eq(text, "ab ab");
    pl_free(text);
    pl_tok_free(t);
    pl_fixture_remove_dir(dir);
    PL_ASSERT_NO_LEAKS();
}
