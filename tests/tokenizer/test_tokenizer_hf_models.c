/*
 * tests/tokenizer/test_tokenizer_hf_models.c - the tokenizer.json implementation on the real
 * Llama 3 and Qwen3 tokenizers in $PAGELLM_TEST_MODELS (linked with models_main.c: the binary
 * exits 77, SKIP, without it): ids, decodes and streams equal to the oracle on the corpus and
 * on 1 MB inputs; the facts the engine and chat templates read; and tok512_hf (a conversion of
 * tok512.model to tokenizer.json) against the SentencePiece library on the same model.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "hf_oracle.h"
#include "test_support.h"
#include "tok_check.h"
#include "tokenizer/hf.h"
#include "tokenizer/tokenizer.h"
#include "util/alloc.h"

static pl_tokenizer *load_shared(const char *name) {
    char path[1024];
    cr_assert(pl_test_model_path(name, path, sizeof path), "%s missing from PAGELLM_TEST_MODELS",
              name);
    pl_tokenizer *t = NULL;
    cr_assert_eq(pl_tok_load(path, &t), PL_OK, "%s: %s", path, pl_last_error());
    return t;
}

Test(tokenizer_hf_models, llama3_equals_the_oracle) {
    pl_tokenizer *t = load_shared("llama3");
    int n = hf_oracle_check_cases("llama3", t);
    fprintf(stderr, "llama3: %d oracle cases\n", n);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

Test(tokenizer_hf_models, qwen3_equals_the_oracle) {
    pl_tokenizer *t = load_shared("qwen3/tokenizer.json");
    int n = hf_oracle_check_cases("qwen3", t);
    fprintf(stderr, "qwen3: %d oracle cases\n", n);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

Test(tokenizer_hf_models, one_megabyte_inputs_equal_the_oracle, .timeout = 120) {
    pl_tokenizer *t = load_shared("llama3/tokenizer.json");
    hf_oracle_check_long("llama3", t);
    pl_tok_free(t);
    t = load_shared("qwen3");
    hf_oracle_check_long("qwen3", t);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

// ---- facts ---------------------------------------------------------------------------------------

Test(tokenizer_hf_models, llama3_facts) {
    pl_tokenizer *t = load_shared("llama3");
    cr_assert_str_eq(pl_tok_type(t), "bpe");
    cr_assert_eq(pl_tok_vocab_size(t), 128256);
    cr_assert_eq(pl_tok_bos_id(t), 128000);
    cr_assert_str_eq(pl_tok_bos_text(t), "<|begin_of_text|>");
    cr_assert_eq(pl_tok_eos_id(t), 128001);
    cr_assert_str_eq(pl_tok_eos_text(t), "<|end_of_text|>");
    /* this tokenizer.json's post-processor is ByteLevel: no BOS added (the template writes it) */
    cr_assert(!pl_tok_add_bos(t) && !pl_tok_add_eos(t));
    size_t n;
    const int32_t *eog = pl_tok_eog_ids(t, &n);
    cr_assert_eq(n, 2);
    cr_assert_eq(eog[0], 128001);
    cr_assert_eq(eog[1], 128009);
    cr_assert_eq(pl_tok_token_id(t, "<|eot_id|>"), 128009);
    cr_assert_eq(pl_tok_token_id(t, "Hello"), 9906);
    cr_assert(pl_tok_is_special(t, 128000) && !pl_tok_is_special(t, 9906));
    cr_assert_str_eq(pl_tok_piece(t, 11), ",");
    cr_assert_str_eq(pl_tok_piece(t, 856), "\xC4\xA0my"); /* "Ġmy" */
    const char *tpl = pl_tok_chat_template(t, NULL);
    cr_assert_not_null(tpl);
    cr_assert_not_null(strstr(tpl, "<|start_header_id|>"));
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

Test(tokenizer_hf_models, qwen3_facts) {
    pl_tokenizer *t = load_shared("qwen3");
    cr_assert_eq(pl_tok_vocab_size(t), 151669);
    cr_assert_eq(pl_tok_bos_id(t), -1);
    cr_assert_null(pl_tok_bos_text(t));
    cr_assert_eq(pl_tok_eos_id(t), 151645);
    cr_assert_str_eq(pl_tok_eos_text(t), "<|im_end|>");
    size_t n;
    const int32_t *eog = pl_tok_eog_ids(t, &n);
    cr_assert_eq(n, 2);
    cr_assert_eq(eog[0], 151643); /* <|endoftext|> */
    cr_assert_eq(eog[1], 151645);
    cr_assert_eq(pl_tok_token_id(t, "<think>"), 151667);
    cr_assert(!pl_tok_is_special(t, 151667), "<think> is an added token, not a special one");
    cr_assert_not_null(strstr(pl_tok_chat_template(t, "default"), "<|im_start|>"));
    /* the tool-call tags are not special: PARSE_SPECIAL or not, they are one id each */
    int32_t *ids = NULL;
    size_t k = 0;
    cr_assert_eq(pl_tok_encode(t, "<think>x</think>", 16, 0, &ids, &k), PL_OK);
    cr_assert_eq(ids[0], 151667);
    cr_assert_eq(ids[k - 1], 151668);
    pl_free(ids);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

// ---- streaming on real vocabularies ----------------------------------------------------------

/* The ids of the one-byte tokens of a byte-level vocabulary, so tok_random_ids can spell
 * characters byte by byte. */
static void byte_tokens(const pl_tokenizer *t, tok_ids *k) {
    tok_ids_find(t, k);
    for (int b = 0; b < 256; b++) {
        char ch[4] = {0};
        pl_hf_char_of_byte((uint8_t)b, ch);
        k->byte_id[b] = pl_tok_token_id(t, ch);
        cr_assert_geq(k->byte_id[b], 0, "byte %d has no token", b);
    }
    k->n_special = 0;
    static const char *const specials[] = {"<|eot_id|>", "<|im_end|>", "<|begin_of_text|>",
                                           "<think>"};
    for (size_t i = 0; i < 4; i++) {
        int32_t id = pl_tok_token_id(t, specials[i]);
        if (id >= 0) k->special[k->n_special++] = id;
    }
}

Test(tokenizer_hf_models, emoji_and_cjk_split_across_tokens_stream_whole, .timeout = 120) {
    static const char *const names[] = {"llama3", "qwen3"};
    const char *text = "Family: \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D"
                       "\xF0\x9F\x91\xA7\xE2\x80\x8D\xF0\x9F\x91\xA6, flag \xF0\x9F\x8F\xB3"
                       "\xEF\xB8\x8F\xE2\x80\x8D\xF0\x9F\x8C\x88, \xE4\xBD\xA0\xE5\xA5\xBD\xE4"
                       "\xB8\x96\xE7\x95\x8C \xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D"
                       "\xE0\xA4\xA4\xE0\xA5\x87 \xF0\x9F\xA7\x91\xF0\x9F\x8F\xBD\xE2\x80\x8D"
                       "\xF0\x9F\x92\xBB";
    pl_test_rng r;
    pl_test_rng_seed(&r, pl_test_run_seed("real byte-level streams"));
    for (size_t m = 0; m < 2; m++) {
        pl_tokenizer *t = load_shared(names[m]);
        int32_t *ids = NULL;
        size_t n = 0;
        cr_assert_eq(pl_tok_encode(t, text, strlen(text), 0, &ids, &n), PL_OK);
        /* some token must end inside a character, or the test proves nothing */
        pl_detok *d = NULL;
        cr_assert_eq(pl_detok_create(t, 0, &d), PL_OK);
        int held = 0;
        for (size_t i = 0; i < n; i++) {
            const char *c;
            size_t cl;
            cr_assert_eq(pl_detok_push(d, ids[i], &c, &cl), PL_OK);
            size_t tl;
            pl_detok_text(d, &tl);
            char *prefix = NULL;
            cr_assert_eq(pl_tok_decode(t, ids, i + 1, 0, &prefix), PL_OK);
            held += strstr(prefix, "\xEF\xBF\xBD") != NULL; /* this prefix ends mid-character */
            pl_free(prefix);
        }
        pl_detok_free(d);
        cr_assert_gt(held, 0, "%s: no token split a character", names[m]);
        tok_check_stream(t, ids, n, true);
        pl_free(ids);
        /* random ids: any token, byte tokens spelling characters, special tokens */
        tok_ids k;
        byte_tokens(t, &k);
        int32_t seq[64];
        for (int it = 0; it < 200; it++) {
            size_t len = tok_random_ids(t, &k, &r, seq, 64);
            tok_check_stream_flags(t, seq, len, it % 2 ? PL_TOK_SKIP_SPECIAL : 0, it < 20);
        }
        int32_t *ctx = NULL;
        size_t n_ctx = 0;
        cr_assert_eq(pl_tok_encode(t, "Hello", 5, 0, &ctx, &n_ctx), PL_OK);
        for (int it = 0; it < 50; it++) {
            size_t len = tok_random_ids(t, &k, &r, seq, 32);
            tok_check_stream_after(t, ctx, n_ctx, seq, len);
        }
        pl_free(ctx);
        pl_tok_free(t);
    }
    PL_ASSERT_NO_LEAKS();
}

// ---- a tokenizer.json against the SentencePiece library -----------------------------------------

/* tests/data/tok512_hf is tok512.model converted as transformers converts Llama tokenizers;
 * on text that SentencePiece's whitespace cleanup leaves alone (tok512 collapses runs of
 * spaces and trims them, which the conversion does not), both must give the same ids. */
Test(tokenizer_hf_models, tok512_json_equals_sentencepiece_on_the_same_model) {
    pl_tokenizer *spm = load_shared("tok512.model");
    char path[1024];
    snprintf(path, sizeof path, "%s/tok512_hf", PL_TOK_DATA_DIR);
    pl_tokenizer *hf = NULL;
    cr_assert_eq(pl_tok_load(path, &hf), PL_OK, "%s", pl_last_error());
    FILE *f = fopen(PL_TOK_DATA_DIR "/tok_corpus.txt", "rb");
    cr_assert_not_null(f);
    char line[4096];
    int compared = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        size_t len = strlen(line);
        if (len == 0 || line[0] == ' ' || line[len - 1] == ' ' || strstr(line, "  ") ||
            strchr(line, '\t'))
            continue;
        int32_t *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        cr_assert_eq(pl_tok_encode(spm, line, len, PL_TOK_ADD_SPECIAL, &a, &na), PL_OK);
        cr_assert_eq(pl_tok_encode(hf, line, len, PL_TOK_ADD_SPECIAL, &b, &nb), PL_OK);
        cr_assert(na == nb && memcmp(a, b, na * sizeof *a) == 0,
                  "\"%s\": SentencePiece and the tokenizer.json differ", line);
        char *da = NULL, *db = NULL;
        cr_assert_eq(pl_tok_decode(spm, a, na, 0, &da), PL_OK);
        cr_assert_eq(pl_tok_decode(hf, b, nb, PL_TOK_SKIP_SPECIAL, &db), PL_OK);
        cr_assert_str_eq(da, db);
        pl_free(da);
        pl_free(db);
        pl_free(a);
        pl_free(b);
        compared++;
    }
    fclose(f);
    cr_assert_gt(compared, 30);
    pl_tok_free(hf);
    pl_tok_free(spm);
    PL_ASSERT_NO_LEAKS();
}
