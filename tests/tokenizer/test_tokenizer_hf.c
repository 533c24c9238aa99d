/*
 * tests/tokenizer/test_tokenizer_hf.c - the tokenizer.json implementation without the shared
 * models:
 * - tests/data/tok512_hf and tok512_meta (Llama-2 style conversions of tok512.model, committed)
 *   against the oracle fixture: corpus ids, decodes, streams, 1 MB inputs;
 * - small tokenizers written here, one component at a time, with the ids worked out by hand
 *   from the Rust library's rules (split behaviors, Digits, Metaspace schemes, normalizers,
 *   added-token flags, post-processors, every decoder and its streaming);
 * - byte-level streaming that splits emoji and CJK characters across tokens;
 * - facts (BOS/EOS, end-of-generation ids, templates) and the ways of naming a tokenizer;
 * - hostile files (each refused with the status and the JSON path of the bad field,
 *   truncations, bit flips) and allocation failures, with no leak.
 */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hf_oracle.h"
#include "test_support.h"
#include "tok_check.h"
#include "tokenizer/hf.h"
#include "tokenizer/tokenizer.h"
#include "util/alloc.h"
#include "util/utf8.h"

#ifndef PL_TOK_DATA_DIR
#error "PL_TOK_DATA_DIR (tests/data) must be defined"
#endif
#ifndef PL_TOK_TEST_DIR
#error "PL_TOK_TEST_DIR (the build folder with the trained tok_*.model) must be defined"
#endif

// ---- helpers -----------------------------------------------------------------------------------

static pl_tokenizer *load_path(const char *path) {
    pl_tokenizer *t = NULL;
    cr_assert_eq(pl_tok_load(path, &t), PL_OK, "%s: %s", path, pl_last_error());
    return t;
}

static pl_tokenizer *load_data(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", PL_TOK_DATA_DIR, name);
    return load_path(path);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "%s", path);
    cr_assert_eq(fwrite(text, 1, strlen(text), f), strlen(text));
    fclose(f);
}

/* A folder with tokenizer.json = json (and tokenizer_config.json = config when not NULL). */
typedef struct tdir {
    char dir[512], json[600], config[600];
} tdir;

static void tdir_make(tdir *d, const char *json, const char *config) {
    const char *dir = pl_test_tmpdir();
    cr_assert_not_null(dir);
    snprintf(d->dir, sizeof d->dir, "%s", dir);
    snprintf(d->json, sizeof d->json, "%s/tokenizer.json", dir);
    snprintf(d->config, sizeof d->config, "%s/tokenizer_config.json", dir);
    if (json) write_file(d->json, json);
    if (config) write_file(d->config, config);
}

static void tdir_remove(tdir *d) {
    unlink(d->json);
    unlink(d->config);
    char p[600];
    snprintf(p, sizeof p, "%s/chat_template.jinja", d->dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/tokenizer.model", d->dir);
    unlink(p);
    rmdir(d->dir);
}

/* Loads a tokenizer.json given as text. */
static pl_tokenizer *load_json(const char *json) {
    tdir d;
    tdir_make(&d, json, NULL);
    pl_tokenizer *t = NULL;
    pl_status s = pl_tok_load(d.json, &t);
    tdir_remove(&d);
    cr_assert_eq(s, PL_OK, "%s\n%s", pl_last_error(), json);
    return t;
}

/* A tokenizer.json from its parts (each raw JSON text). */
static char *tok_json(const char *normalizer, const char *pre, const char *model_opts,
                      const char *vocab, const char *merges, const char *added, const char *post,
                      const char *decoder) {
    const char *fmt = "{\"version\": \"1.0\", \"truncation\": null, \"padding\": null,"
                      " \"added_tokens\": [%s], \"normalizer\": %s, \"pre_tokenizer\": %s,"
                      " \"post_processor\": %s, \"decoder\": %s,"
                      " \"model\": {\"type\": \"BPE\", %s \"vocab\": {%s}, \"merges\": [%s]}}";
    size_t n = strlen(fmt) + strlen(normalizer) + strlen(pre) + strlen(model_opts) +
               strlen(vocab) + strlen(merges) + strlen(added) + strlen(post) + strlen(decoder);
    char *s = malloc(n + 1);
    cr_assert_not_null(s);
    snprintf(s, n + 1, fmt, added, normalizer, pre, post, decoder, model_opts, vocab, merges);
    return s;
}

static void expect_encode(const pl_tokenizer *t, const char *text, unsigned flags,
                          const int32_t *want, size_t n_want) {
    int32_t *ids = NULL;
    size_t n = 0;
    cr_assert_eq(pl_tok_encode(t, text, strlen(text), flags, &ids, &n), PL_OK, "\"%s\": %s", text,
                 pl_last_error());
    bool same = n == n_want && (n == 0 || memcmp(ids, want, n * sizeof *ids) == 0);
    if (!same) {
        fprintf(stderr, "\"%s\" (flags %u): want", text, flags);
        for (size_t i = 0; i < n_want; i++) fprintf(stderr, " %d", want[i]);
        fprintf(stderr, ", got");
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n");
    }
    cr_assert(same, "ids of \"%s\" (flags %u)", text, flags);
    pl_free(ids);
}

#define ENC(t, text, flags, ...)                                                                \
    do {                                                                                      \
        static const int32_t want_[] = {__VA_ARGS__};                                         \
        expect_encode((t), (text), (flags), want_, sizeof want_ / sizeof want_[0]);           \
    } while (0)
#define ENC_NONE(t, text, flags) expect_encode((t), (text), (flags), NULL, 0)

static void expect_decode(const pl_tokenizer *t, const int32_t *ids, size_t n, unsigned flags,
                          const char *want) {
    char *s = NULL;
    cr_assert_eq(pl_tok_decode(t, ids, n, flags, &s), PL_OK, "%s", pl_last_error());
    cr_assert_str_eq(s, want);
    pl_free(s);
    tok_check_stream_flags(t, ids, n, flags & PL_TOK_SKIP_SPECIAL, true);
}

#define DEC(t, flags, want, ...)                                                                \
    do {                                                                                      \
        static const int32_t ids_[] = {__VA_ARGS__};                                          \
        expect_decode((t), ids_, sizeof ids_ / sizeof ids_[0], (flags), (want));             \
    } while (0)

// ---- the oracle on the committed Llama-2 style tokenizers ---------------------------------------

Test(tokenizer_hf, tok512_hf_equals_the_oracle) {
    pl_tokenizer *t = load_data("tok512_hf");
    cr_assert_str_eq(pl_tok_type(t), "bpe");
    hf_oracle_check_cases("tok512_hf", t);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

Test(tokenizer_hf, tok512_meta_equals_the_oracle) {
    pl_tokenizer *t = load_data("tok512_meta/tokenizer.json");
    hf_oracle_check_cases("tok512_meta", t);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

Test(tokenizer_hf, one_megabyte_inputs_equal_the_oracle, .timeout = 120) {
    pl_tokenizer *t = load_data("tok512_hf");
    hf_oracle_check_long("tok512_hf", t);
    pl_tok_free(t);
    t = load_data("tok512_meta");
    hf_oracle_check_long("tok512_meta", t);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

Test(tokenizer_hf, random_streams_equal_decode) {
    static const char *const names[] = {"tok512_hf", "tok512_meta"};
    pl_test_rng r;
    pl_test_rng_seed(&r, pl_test_run_seed("hf random streams"));
    for (size_t m = 0; m < 2; m++) {
        pl_tokenizer *t = load_data(names[m]);
        tok_ids k;
        tok_ids_find(t, &k);
        cr_assert_geq(k.byte_id[0xE4], 0, "byte tokens found");
        int32_t ids[64];
        for (int it = 0; it < 300; it++) {
            size_t n = tok_random_ids(t, &k, &r, ids, 64);
            tok_check_stream_flags(t, ids, n, it % 2 ? PL_TOK_SKIP_SPECIAL : 0, it < 60);
        }
        /* After a prompt: the first output token keeps its space. */
        int32_t *ctx = NULL;
        size_t n_ctx = 0;
        cr_assert_eq(pl_tok_encode(t, "Once upon", 9, PL_TOK_ADD_SPECIAL, &ctx, &n_ctx), PL_OK);
        for (int it = 0; it < 100; it++) {
            size_t n = tok_random_ids(t, &k, &r, ids, 32);
            tok_check_stream_after(t, ctx, n_ctx, ids, n);
        }
        pl_free(ctx);
        pl_tok_free(t);
    }
    PL_ASSERT_NO_LEAKS();
}

// ---- pre-tokenizers -----------------------------------------------------------------------------

/* Words that are tokens of the vocabulary come out as one id (ignore_merges), others as one id
 * per character, so the ids show where the pre-tokenizer cut. */
static const char SPLIT_VOCAB[] = "\"a\": 0, \"b\": 1, \"-\": 2, \"a-\": 3, \"-b\": 4, "
                                  "\"--\": 5, \"a-b\": 6, \"c\": 7";

static pl_tokenizer *split_tok(const char *pattern, const char *behavior, bool invert) {
    char pre[512];
    snprintf(pre, sizeof pre, "{\"type\": \"Split\", \"pattern\": %s, \"behavior\": \"%s\", "
             "\"invert\": %s}", pattern, behavior, invert ? "true" : "false");
    char *json = tok_json("null", pre, "\"ignore_merges\": true,", SPLIT_VOCAB, "", "", "null",
                          "null");
    pl_tokenizer *t = load_json(json);
    free(json);
    return t;
}

Test(tokenizer_hf, split_behaviors) {
    pl_tokenizer *t = split_tok("{\"String\": \"-\"}", "Isolated", false);
    ENC(t, "a-b", 0, 0, 2, 1);
    ENC(t, "a--b", 0, 0, 2, 2, 1);
    ENC(t, "ab", 0, 0, 1);
    pl_tok_free(t);
    t = split_tok("{\"String\": \"-\"}", "Removed", false);
    ENC(t, "a-b", 0, 0, 1);
    ENC(t, "-a--b-", 0, 0, 1);
    pl_tok_free(t);
    t = split_tok("{\"String\": \"-\"}", "MergedWithPrevious", false);
    ENC(t, "a-b", 0, 3, 1);
    ENC(t, "-b", 0, 2, 1); /* a match with nothing before it stands alone */
    pl_tok_free(t);
    t = split_tok("{\"String\": \"-\"}", "MergedWithNext", false);
    ENC(t, "a-b", 0, 0, 4);
    ENC(t, "a-", 0, 0, 2);
    pl_tok_free(t);
    t = split_tok("{\"String\": \"-\"}", "Contiguous", false);
    ENC(t, "a--b", 0, 0, 5, 1);
    pl_tok_free(t);
    /* invert: what the pattern matches is what is kept between the cuts */
    t = split_tok("{\"Regex\": \"[ab]\"}", "Removed", true);
    ENC(t, "a-b", 0, 0, 1);
    pl_tok_free(t);
    t = split_tok("{\"Regex\": \"-+\"}", "Removed", true);
    ENC(t, "a--b", 0, 5);
    pl_tok_free(t);
    t = split_tok("{\"Regex\": \"a-?\"}", "Isolated", false);
    ENC(t, "a-ba", 0, 3, 1, 0);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

Test(tokenizer_hf, digits) {
    static const char vocab[] = "\"a\": 0, \"b\": 1, \"1\": 2, \"2\": 3, \"12\": 4, \"ab\": 5, "
                                "\"\\u0663\": 6, \"1\\u06632\": 7";
    char *json = tok_json("null", "{\"type\": \"Digits\", \"individual_digits\": false}",
                          "\"ignore_merges\": true,", vocab, "", "", "null", "null");
    pl_tokenizer *t = load_json(json);
    free(json);
    ENC(t, "ab12a", 0, 5, 4, 0);
    ENC(t, "1\xD9\xA3" "2", 0, 7); /* U+0663 ARABIC-INDIC THREE is numeric too */
    pl_tok_free(t);
    json = tok_json("null", "{\"type\": \"Digits\", \"individual_digits\": true}",
                    "\"ignore_merges\": true,", vocab, "", "", "null", "null");
    t = load_json(json);
    free(json);
    ENC(t, "ab12a", 0, 5, 2, 3, 0);
    ENC(t, "1\xD9\xA3" "2", 0, 2, 6, 3);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

static pl_tokenizer *metaspace_tok(const char *scheme, bool split) {
    static const char vocab[] = "\"\\u2581\": 0, \"a\": 1, \"b\": 2, \"\\u2581a\": 3, "
                                "\"\\u2581b\": 4, \"\\u2581a\\u2581b\": 5";
    char pre[256];
    snprintf(pre, sizeof pre, "{\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", "
             "\"prepend_scheme\": \"%s\", \"split\": %s}", scheme, split ? "true" : "false");
    char *json = tok_json("null", pre, "\"ignore_merges\": true,", vocab, "",
                          "{\"id\": 6, \"content\": \"<x>\", \"special\": true, "
                          "\"normalized\": false}",
                          "null", "{\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", "
                          "\"prepend_scheme\": \"always\"}");
    pl_tokenizer *t = load_json(json);
    free(json);
    return t;
}

Test(tokenizer_hf, metaspace_schemes) {
    pl_tokenizer *t = metaspace_tok("always", true);
    ENC(t, "a b", 0, 3, 4);
    ENC(t, " a", 0, 3);      /* already starts with the replacement: nothing prepended */
    ENC(t, "a<x>b", PL_TOK_PARSE_SPECIAL, 3, 6, 4);
    pl_tok_free(t);
    t = metaspace_tok("always", false);
    ENC(t, "a b", 0, 5);
    pl_tok_free(t);
    t = metaspace_tok("never", true);
    ENC(t, "a b", 0, 1, 4);
    pl_tok_free(t);
    t = metaspace_tok("first", true);
    ENC(t, "a<x>b", PL_TOK_PARSE_SPECIAL, 3, 6, 2); /* only the piece at the text's start */
    ENC(t, "<x>b", PL_TOK_PARSE_SPECIAL, 6, 2);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

// ---- normalizers ----------------------------------------------------------------------------------

static pl_tokenizer *char_tok(const char *normalizer, const char *vocab) {
    char *json = tok_json(normalizer, "null", "", vocab, "", "", "null", "null");
    pl_tokenizer *t = load_json(json);
    free(json);
    return t;
}

Test(tokenizer_hf, normalizers) {
    /* Lowercase maps code points one at a time: İ -> i + U+0307, Σ -> σ even at a word's end */
    pl_tokenizer *t = char_tok("{\"type\": \"Lowercase\"}",
                               "\"h\": 0, \"e\": 1, \"l\": 2, \"o\": 3, \"i\": 4, "
                               "\"\\u0307\": 5, \"\\u03c3\": 6, \"\\u03b1\": 7");
    ENC(t, "HEllO", 0, 0, 1, 2, 2, 3);
    ENC(t, "\xC4\xB0", 0, 4, 5);
    ENC(t, "\xCE\x91\xCE\xA3", 0, 7, 6);
    pl_tok_free(t);
    t = char_tok("{\"type\": \"NFKC\"}", "\"f\": 0, \"i\": 1, \"1\": 2, \"\\u00e9\": 3");
    ENC(t, "\xEF\xAC\x81", 0, 0, 1); /* ﬁ */
    ENC(t, "\xE2\x91\xA0", 0, 2);    /* ① */
    ENC(t, "e\xCC\x81", 0, 3);       /* e + combining acute -> é */
    pl_tok_free(t);
    t = char_tok("{\"type\": \"NFC\"}", "\"\\u00e9\": 0, \"\\u03a9\": 1, \"\\ufb01\": 2");
    ENC(t, "e\xCC\x81", 0, 0);
    ENC(t, "\xE2\x84\xA6", 0, 1);    /* OHM SIGN -> GREEK CAPITAL OMEGA */
    ENC(t, "\xEF\xAC\x81", 0, 2);    /* NFC keeps compatibility characters */
    pl_tok_free(t);
    t = char_tok("{\"type\": \"NFD\"}", "\"e\": 0, \"\\u0301\": 1");
    ENC(t, "\xC3\xA9", 0, 0, 1);
    pl_tok_free(t);
    t = char_tok("{\"type\": \"NFKD\"}", "\"f\": 0, \"i\": 1, \"e\": 2, \"\\u0301\": 3");
    ENC(t, "\xEF\xAC\x81\xC3\xA9", 0, 0, 1, 2, 3);
    pl_tok_free(t);
    /* A sequence: runs of white space become one space, then "▁" before non-empty text */
    t = char_tok("{\"type\": \"Sequence\", \"normalizers\": ["
                 "{\"type\": \"Replace\", \"pattern\": {\"Regex\": \"\\\\s+\"}, \"content\": \" \"},"
                 "{\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\\u2581\"},"
                 "{\"type\": \"Prepend\", \"prepend\": \"\\u2581\"}]}",
                 "\"\\u2581\": 0, \"a\": 1, \"b\": 2");
    ENC(t, "a \t\n b", 0, 0, 1, 0, 2);
    ENC_NONE(t, "", 0);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

// ---- added tokens ---------------------------------------------------------------------------------

static pl_tokenizer *added_tok(void) {
    static const char vocab[] = "\"a\": 0, \"b\": 1, \" \": 2, \"x\": 3, \"w\": 4, \"<\": 5, "
                                "\"s\": 6, \">\": 7, \"[\": 8, \"l\": 9, \"r\": 10, \"]\": 11";
    static const char added[] =
        "{\"id\": 12, \"content\": \"<s>\", \"special\": true, \"normalized\": false},"
        "{\"id\": 13, \"content\": \"<s><s>\", \"special\": true, \"normalized\": false},"
        "{\"id\": 14, \"content\": \"[l]\", \"lstrip\": true, \"special\": false, "
        "\"normalized\": false},"
        "{\"id\": 15, \"content\": \"[r]\", \"rstrip\": true, \"special\": false, "
        "\"normalized\": false},"
        "{\"id\": 16, \"content\": \"ab\", \"single_word\": true, \"special\": false, "
        "\"normalized\": false},"
        "{\"id\": 17, \"content\": \"XB\", \"special\": false, \"normalized\": true},"
        "{\"id\": 0, \"content\": \"a\", \"special\": false, \"normalized\": false}";
    char *json = tok_json("{\"type\": \"Lowercase\"}", "null", "", vocab, "", added, "null",
                          "null");
    pl_tokenizer *t = load_json(json);
    free(json);
    return t;
}

Test(tokenizer_hf, added_tokens) {
    pl_tokenizer *t = added_tok();
    cr_assert_eq(pl_tok_vocab_size(t), 18);
    ENC(t, "a<s>b", PL_TOK_PARSE_SPECIAL, 0, 12, 1);
    ENC(t, "a<s>b", 0, 0, 5, 6, 7, 1);                /* special strings as plain text */
    ENC(t, "<s><s><s>", PL_TOK_PARSE_SPECIAL, 13, 12); /* leftmost-longest */
    ENC(t, "a  [l]b", 0, 0, 14, 1);                   /* lstrip takes the spaces before */
    ENC(t, "a[r]  b", 0, 0, 15, 1);                   /* rstrip the spaces after */
    ENC(t, "x ab x", 0, 3, 2, 16, 2, 3);              /* single_word: a word on its own */
    ENC(t, "xab", 0, 3, 0, 1);                        /* not inside a word */
    ENC(t, "ab", 0, 16);
    ENC(t, "aXB", 0, 0, 17);                          /* normalized: matched after Lowercase */
    ENC(t, "xb", 0, 17);
    /* the non-special added tokens are never special */
    cr_assert(pl_tok_is_special(t, 12) && pl_tok_is_special(t, 13));
    cr_assert(!pl_tok_is_special(t, 14) && !pl_tok_is_special(t, 0));
    cr_assert_eq(pl_tok_token_id(t, "<s><s>"), 13);
    cr_assert_eq(pl_tok_token_id(t, "XB"), 17);
    cr_assert_eq(pl_tok_token_id(t, "nope"), -1);
    cr_assert_str_eq(pl_tok_piece(t, 15), "[r]");
    /* decode with no decoder: pieces joined by spaces; skip drops special ones */
    DEC(t, 0, "a <s> b", 0, 12, 1);
    DEC(t, PL_TOK_SKIP_SPECIAL, "a b", 0, 12, 1);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

// ---- post-processors ------------------------------------------------------------------------------

Test(tokenizer_hf, template_processing) {
    static const char vocab[] = "\"<s>\": 0, \"</s>\": 1, \"a\": 2";
    static const char post[] =
        "{\"type\": \"Sequence\", \"processors\": ["
        "{\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": false},"
        "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\", "
        "\"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}, {\"SpecialToken\": "
        "{\"id\": \"</s>\", \"type_id\": 0}}], \"pair\": [], \"special_tokens\": {"
        "\"<s>\": {\"id\": \"<s>\", \"ids\": [0], \"tokens\": [\"<s>\"]},"
        "\"</s>\": {\"id\": \"</s>\", \"ids\": [1], \"tokens\": [\"</s>\"]}}}]}";
    char *json = tok_json("null", "null", "", vocab, "",
                          "{\"id\": 0, \"content\": \"<s>\", \"special\": true},"
                          "{\"id\": 1, \"content\": \"</s>\", \"special\": true}",
                          post, "null");
    pl_tokenizer *t = load_json(json);
    free(json);
    ENC(t, "aa", PL_TOK_ADD_SPECIAL, 0, 2, 2, 1);
    ENC(t, "aa", 0, 2, 2);
    ENC(t, "", PL_TOK_ADD_SPECIAL, 0, 1);
    cr_assert_eq(pl_tok_bos_id(t), 0);
    cr_assert_eq(pl_tok_eos_id(t), 1);
    cr_assert_str_eq(pl_tok_bos_text(t), "<s>");
    cr_assert(pl_tok_add_bos(t) && pl_tok_add_eos(t));
    size_t n;
    const int32_t *eog = pl_tok_eog_ids(t, &n);
    cr_assert_eq(n, 1);
    cr_assert_eq(eog[0], 1);
    cr_assert(pl_tok_is_eog(t, 1) && !pl_tok_is_eog(t, 0));
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

// ---- decoders -------------------------------------------------------------------------------------

static pl_tokenizer *dec_tok(const char *decoder) {
    static const char vocab[] =
        "\"a\": 0, \" \": 1, \"b\": 2, \"\\u2581a\": 3, \"\\u2581\\u2581\": 4, \"b\\u2581\": 5, "
        "\"<0xE4>\": 6, \"<0xBD>\": 7, \"<0xA0>\": 8, \"<0xFF>\": 9, \"<0x00>\": 10, "
        "\"\\u2581\\u2581x\": 11, \"<0x+F>\": 12, \"ab\": 13";
    char *json = tok_json("null", "null", "", vocab, "", "", "null", decoder);
    pl_tokenizer *t = load_json(json);
    free(json);
    return t;
}

Test(tokenizer_hf, strip_after_fuse_holds_trailing_characters) {
    pl_tokenizer *t = dec_tok("{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Fuse\"}, "
                              "{\"type\": \"Strip\", \"content\": \" \", \"start\": 1, "
                              "\"stop\": 2}]}");
    DEC(t, 0, "a ", 1, 0, 1, 1, 1);   /* " a   ": one leading and two trailing spaces cut */
    DEC(t, 0, " a  b", 1, 1, 0, 1, 1, 2);
    DEC(t, 0, "", 1);
    /* a stream holds the trailing spaces back until they stop being trailing */
    pl_detok *d = NULL;
    cr_assert_eq(pl_detok_create(t, 0, &d), PL_OK);
    const char *c;
    size_t n;
    cr_assert_eq(pl_detok_push(d, 0, &c, &n), PL_OK);
    cr_assert_eq(n, 1);
    cr_assert_eq(pl_detok_push(d, 1, &c, &n), PL_OK);
    cr_assert_eq(n, 0, "a trailing space is held");
    cr_assert_str_eq(pl_detok_text(d, NULL), "a");
    cr_assert_eq(pl_detok_push(d, 2, &c, &n), PL_OK);
    cr_assert_eq(n, 2);
    cr_assert_eq(memcmp(c, " b", 2), 0);
    pl_detok_free(d);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

Test(tokenizer_hf, replace_across_tokens_after_fuse) {
    pl_tokenizer *t = dec_tok("{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Fuse\"}, "
                              "{\"type\": \"Replace\", \"pattern\": {\"String\": \"ab\"}, "
                              "\"content\": \"<X>\"}]}");
    DEC(t, 0, "<X>", 0, 2);
    DEC(t, 0, "a<X>a", 0, 0, 2, 0);
    DEC(t, 0, "<X><X>", 13, 0, 2);
    pl_tok_free(t);
    /* before Fuse, Replace works inside each token only */
    t = dec_tok("{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": "
                "{\"String\": \"ab\"}, \"content\": \"<X>\"}, {\"type\": \"Fuse\"}]}");
    DEC(t, 0, "ab<X>", 0, 2, 13);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

Test(tokenizer_hf, metaspace_decoder_drops_the_first_tokens_replacements) {
    pl_tokenizer *t = dec_tok("{\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", "
                              "\"prepend_scheme\": \"always\", \"split\": true}");
    DEC(t, 0, "a  b ", 3, 4, 5);
    DEC(t, 0, "x", 11);       /* every replacement of the first token, as Rust does */
    DEC(t, 0, "  x", 4, 11);
    pl_tok_free(t);
    t = dec_tok("{\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", "
                "\"prepend_scheme\": \"never\"}");
    DEC(t, 0, " a  b ", 3, 4, 5);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

Test(tokenizer_hf, byte_fallback_decodes_like_text_decoder) {
    pl_tokenizer *t = dec_tok("{\"type\": \"Sequence\", \"decoders\": [{\"type\": "
                              "\"ByteFallback\"}, {\"type\": \"Fuse\"}]}");
    DEC(t, 0, "\xE4\xBD\xA0", 6, 7, 8);                 /* 你 */
    DEC(t, 0, "\xEF\xBF\xBD" "a", 6, 7, 0);             /* cut short: one U+FFFD */
    DEC(t, 0, "\xEF\xBF\xBD\xEF\xBF\xBD", 9, 7);        /* two invalid bytes */
    DEC(t, 0, "\xEF\xBF\xBD\xE4\xBD\xA0", 6, 6, 7, 8);  /* a lone lead, then a character */
    DEC(t, 0, "a\xEF\xBF\xBD" "b", 0, 10, 2);           /* NUL becomes U+FFFD */
    DEC(t, 0, "\x0F", 12);                               /* "<0x+F>": Rust's from_str_radix */
    DEC(t, 0, "\xEF\xBF\xBD", 6);                        /* held back, then rendered */
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

Test(tokenizer_hf, no_decoder_joins_pieces_with_spaces) {
    pl_tokenizer *t = dec_tok("null");
    DEC(t, 0, "a b \xE2\x96\x81" "a", 0, 2, 3);
    pl_detok *d = NULL;
    cr_assert_eq(pl_detok_create(t, PL_TOK_AFTER_PROMPT, &d), PL_OK);
    const char *c;
    size_t n;
    cr_assert_eq(pl_detok_push(d, 0, &c, &n), PL_OK);
    cr_assert_eq(n, 2, "after a prompt the first piece gets its separator");
    cr_assert_eq(memcmp(c, " a", 2), 0);
    pl_detok_free(d);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

// ---- byte-level -----------------------------------------------------------------------------------

/* A byte-level tokenizer whose ids are the bytes (id b is byte b's character), plus "Ġa"
 * (256) from the one merge "Ġ a", and one added special token (257). */
static pl_tokenizer *byte_tok(void) {
    size_t cap = 16384, n = 0;
    char *vocab = malloc(cap);
    cr_assert_not_null(vocab);
    for (int b = 0; b < 256; b++) {
        char ch[4];
        int k = pl_hf_char_of_byte((uint8_t)b, ch);
        uint32_t cp;
        pl_utf8_decode(ch, (size_t)k, &cp);
        n += (size_t)snprintf(vocab + n, cap - n, "%s\"\\u%04x\": %d", b ? ", " : "", cp, b);
        (void)k;
    }
    snprintf(vocab + n, cap - n, ", \"\\u0120a\": 256");
    char *json = tok_json("null",
                          "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
                          "\"use_regex\": true}",
                          "", vocab, "\"\\u0120 a\"",
                          "{\"id\": 257, \"content\": \"<|end|>\", \"special\": true, "
                          "\"normalized\": false}",
                          "null", "{\"type\": \"ByteLevel\"}");
    pl_tokenizer *t = load_json(json);
    free(json);
    free(vocab);
    return t;
}

Test(tokenizer_hf, byte_level_streams_split_characters) {
    pl_tokenizer *t = byte_tok();
    const char *text = "h\xC3\xA9llo a \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D"
                       "\xF0\x9F\x91\xA7 \xE4\xBD\xA0\xE5\xA5\xBD!";
    int32_t *ids = NULL;
    size_t n = 0;
    cr_assert_eq(pl_tok_encode(t, text, strlen(text), 0, &ids, &n), PL_OK, "%s", pl_last_error());
    /* every byte is its own id except " a", which merged */
    cr_assert_eq(n, strlen(text) - 1);
    cr_assert_eq(ids[0], 'h');
    cr_assert_eq(ids[1], 0xC3);
    cr_assert_eq(ids[6], 256);
    char *back = NULL;
    cr_assert_eq(pl_tok_decode(t, ids, n, 0, &back), PL_OK);
    cr_assert_str_eq(back, text);
    pl_free(back);
    tok_check_stream(t, ids, n, true); /* no chunk ever holds part of a character */
    /* the 4-byte emoji arrives one byte at a time: nothing is emitted until its last byte */
    pl_detok *d = NULL;
    cr_assert_eq(pl_detok_create(t, 0, &d), PL_OK);
    const char *c;
    size_t cl;
    static const uint8_t cat[] = {0xF0, 0x9F, 0x90, 0x88};
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(pl_detok_push(d, cat[i], &c, &cl), PL_OK);
        cr_assert_eq(cl, i < 3 ? 0u : 4u, "byte %d", i);
    }
    cr_assert_eq(pl_detok_push(d, 0xF0, &c, &cl), PL_OK);
    cr_assert_str_eq(pl_detok_text(d, NULL), "\xF0\x9F\x90\x88\xEF\xBF\xBD");
    cr_assert_eq(pl_detok_push(d, 'x', &c, &cl), PL_OK); /* the held byte turns out invalid */
    cr_assert_eq(cl, 4);
    cr_assert_eq(memcmp(c, "\xEF\xBF\xBDx", 4), 0);
    pl_detok_free(d);
    /* random bytes, valid or not, and the special token, with and without skipping it */
    pl_test_rng r;
    pl_test_rng_seed(&r, pl_test_run_seed("byte-level streams"));
    int32_t seq[48];
    for (int it = 0; it < 400; it++) {
        size_t len = 1 + pl_test_rng_below(&r, 48);
        for (size_t i = 0; i < len; i++)
            seq[i] = (int32_t)pl_test_rng_below(&r, 10) == 0 ? 257
                                                              : (int32_t)pl_test_rng_below(&r, 257);
        tok_check_stream_flags(t, seq, len, it % 2 ? PL_TOK_SKIP_SPECIAL : 0, it < 100);
    }
    DEC(t, 0, "a<|end|>b", 'a', 257, 'b');
    DEC(t, PL_TOK_SKIP_SPECIAL, "ab", 'a', 257, 'b');
    pl_free(ids);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

Test(tokenizer_hf, byte_level_decoder_on_pieces_outside_the_alphabet) {
    /* Rust maps every character of a piece to its byte; a piece with a character outside the
     * alphabet keeps its own UTF-8. "é" is in the alphabet (it stands for byte 0xE9), so alone
     * it is an invalid byte; "€" is not, so it stays. */
    static const char vocab[] = "\"a\": 0, \"\\u00e9\": 1, \"\\u20ac\": 2, \"\\u20aca\": 3";
    char *json = tok_json("null", "null", "", vocab, "", "", "null", "{\"type\": \"ByteLevel\"}");
    pl_tokenizer *t = load_json(json);
    free(json);
    DEC(t, 0, "a\xEF\xBF\xBD" "a", 0, 1, 0);
    DEC(t, 0, "\xE2\x82\xAC" "a", 2, 0);
    DEC(t, 0, "\xE2\x82\xAC" "a\xE2\x82\xAC", 3, 2);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

// ---- facts, configs and paths -------------------------------------------------------------------

Test(tokenizer_hf, facts_of_the_llama2_style_conversion) {
    pl_tokenizer *t = load_data("tok512_hf");
    cr_assert_eq(pl_tok_vocab_size(t), 512);
    cr_assert_eq(pl_tok_bos_id(t), 1);
    cr_assert_eq(pl_tok_eos_id(t), 2);
    cr_assert_str_eq(pl_tok_bos_text(t), "<s>");
    cr_assert_str_eq(pl_tok_eos_text(t), "</s>");
    cr_assert(pl_tok_add_bos(t) && !pl_tok_add_eos(t));
    size_t n;
    const int32_t *eog = pl_tok_eog_ids(t, &n);
    cr_assert_eq(n, 1);
    cr_assert_eq(eog[0], 2);
    cr_assert(pl_tok_is_special(t, 0) && pl_tok_is_special(t, 1) && !pl_tok_is_special(t, 3));
    cr_assert_eq(pl_tok_token_id(t, "<0x41>"), 3 + 0x41);
    cr_assert_eq(pl_tok_chat_template_count(t), 2);
    cr_assert_str_eq(pl_tok_chat_template_name(t, 1), "tool_use");
    cr_assert_null(pl_tok_chat_template_name(t, 2));
    cr_assert_str_eq(pl_tok_chat_template(t, "tool_use"), "{{ tools | tojson }}");
    cr_assert_not_null(strstr(pl_tok_chat_template(t, NULL), "messages"));
    cr_assert_null(pl_tok_chat_template(t, "rag"));
    ENC(t, "", PL_TOK_ADD_SPECIAL, 1);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

/* tok512_hf's tokenizer.json with another tokenizer_config.json. */
static pl_tokenizer *with_config(const char *config, pl_status *out_status) {
    char src[1024];
    snprintf(src, sizeof src, "%s/tok512_hf/tokenizer.json", PL_TOK_DATA_DIR);
    FILE *f = fopen(src, "rb");
    cr_assert_not_null(f);
    static char json[1 << 16];
    size_t n = fread(json, 1, sizeof json - 1, f);
    fclose(f);
    json[n] = '\0';
    tdir d;
    tdir_make(&d, json, config);
    pl_tokenizer *t = NULL;
    *out_status = pl_tok_load(d.dir, &t);
    tdir_remove(&d);
    return t;
}

Test(tokenizer_hf, tokenizer_config_fields) {
    pl_status s;
    /* LlamaTokenizer: transformers rebuilds the template from add_bos_token / add_eos_token */
    pl_tokenizer *t = with_config("{\"tokenizer_class\": \"LlamaTokenizerFast\", "
                                  "\"bos_token\": {\"__type\": \"AddedToken\", \"content\": \"<s>\"},"
                                  " \"eos_token\": \"</s>\", \"add_eos_token\": true, "
                                  "\"model_max_length\": 1000000000000000019884624838656}", &s);
    cr_assert_eq(s, PL_OK, "%s", pl_last_error());
    cr_assert(pl_tok_add_bos(t) && pl_tok_add_eos(t));
    ENC(t, "", PL_TOK_ADD_SPECIAL, 1, 2);
    cr_assert_eq(pl_tok_chat_template_count(t), 0);
    pl_tok_free(t);
    t = with_config("{\"tokenizer_class\": \"LlamaTokenizer\", \"add_bos_token\": false, "
                    "\"bos_token\": null, \"chat_template\": \"{{ bos_token }}\"}", &s);
    cr_assert_eq(s, PL_OK, "%s", pl_last_error());
    cr_assert_eq(pl_tok_bos_id(t), -1);
    cr_assert_null(pl_tok_bos_text(t));
    ENC_NONE(t, "", PL_TOK_ADD_SPECIAL);
    cr_assert_str_eq(pl_tok_chat_template(t, "default"), "{{ bos_token }}");
    pl_tok_free(t);
    /* other classes keep the tokenizer.json's post-processor; an unknown eos string keeps its
     * text without an id */
    t = with_config("{\"tokenizer_class\": \"PreTrainedTokenizerFast\", "
                    "\"add_bos_token\": false, \"eos_token\": \"<|nope|>\"}", &s);
    cr_assert_eq(s, PL_OK, "%s", pl_last_error());
    ENC(t, "", PL_TOK_ADD_SPECIAL, 1);
    cr_assert_eq(pl_tok_eos_id(t), -1);
    cr_assert_str_eq(pl_tok_eos_text(t), "<|nope|>");
    pl_tok_free(t);
    /* bad fields */
    static const struct {
        const char *config, *field;
    } bad[] = {
        {"[1]", "expected a JSON object"},
        {"{\"bos_token\": 5}", "bos_token"},
        {"{\"eos_token\": {\"content\": 1}}", "eos_token.content"},
        {"{\"add_bos_token\": \"yes\"}", "add_bos_token"},
        {"{\"tokenizer_class\": 3}", "tokenizer_class"},
        {"{\"chat_template\": 3}", "chat_template"},
        {"{\"chat_template\": [{\"name\": \"a\"}]}", "chat_template[0]"},
        {"{\"chat_template\": [{\"name\": \"a\", \"template\": \"x\"}, {\"name\": \"a\", "
         "\"template\": \"y\"}]}", "two templates named"},
        {"{\"a\": 1, \"a\": 2}", "duplicate"},
        {"{\"bos_token\": \"<s>\"", "tokenizer_config.json"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        t = with_config(bad[i].config, &s);
        cr_assert_eq(s, PL_ERR_FORMAT, "%s: %s", bad[i].config, pl_status_name(s));
        cr_assert_null(t);
        cr_assert_not_null(strstr(pl_last_error(), bad[i].field), "%s", pl_last_error());
        cr_assert_not_null(strstr(pl_last_error(), "tokenizer_config.json"), "%s",
                           pl_last_error());
    }
    PL_ASSERT_NO_LEAKS();
}

Test(tokenizer_hf, chat_template_jinja_beside_the_config) {
    char src[1024];
    snprintf(src, sizeof src, "%s/tok512_hf/tokenizer.json", PL_TOK_DATA_DIR);
    FILE *f = fopen(src, "rb");
    static char json[1 << 16];
    size_t n = fread(json, 1, sizeof json - 1, f);
    fclose(f);
    json[n] = '\0';
    tdir d;
    tdir_make(&d, json, "{\"eos_token\": \"</s>\"}");
    char p[700];
    snprintf(p, sizeof p, "%s/chat_template.jinja", d.dir);
    write_file(p, "{% for m in messages %}[{{ m.role }}]{% endfor %}");
    pl_tokenizer *t = load_path(d.json); /* the file: its config is read from beside it */
    tdir_remove(&d);
    cr_assert_str_eq(pl_tok_chat_template(t, NULL), "{% for m in messages %}[{{ m.role }}]"
                     "{% endfor %}");
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

Test(tokenizer_hf, directory_with_a_sentencepiece_model_and_its_config) {
    char src[1024];
    snprintf(src, sizeof src, "%s/tok_first.model", PL_TOK_TEST_DIR);
    FILE *f = fopen(src, "rb");
    cr_assert_not_null(f, "%s (built by ninja)", src);
    static unsigned char model[1 << 20];
    size_t n = fread(model, 1, sizeof model, f);
    fclose(f);
    tdir d;
    tdir_make(&d, NULL, "{\"add_eos_token\": true, \"chat_template\": \"T\"}");
    char p[700];
    snprintf(p, sizeof p, "%s/tokenizer.model", d.dir);
    FILE *o = fopen(p, "wb");
    cr_assert_eq(fwrite(model, 1, n, o), n);
    fclose(o);
    pl_tokenizer *t = NULL;
    pl_status s = pl_tok_load(d.dir, &t);
    tdir_remove(&d);
    cr_assert_eq(s, PL_OK, "%s", pl_last_error());
    cr_assert_str_eq(pl_tok_type(t), "sentencepiece");
    cr_assert_str_eq(pl_tok_chat_template(t, NULL), "T");
    int32_t *ids = NULL;
    size_t k = 0;
    cr_assert_eq(pl_tok_encode(t, "the cat", 7, PL_TOK_ADD_SPECIAL, &ids, &k), PL_OK);
    cr_assert_eq(ids[0], 1);
    cr_assert_eq(ids[k - 1], 2, "add_eos_token from the config");
    pl_free(ids);
    /* parse_special on SentencePiece: the control piece's string becomes its id */
    int32_t ctl = pl_tok_token_id(t, "<ctl>");
    cr_assert_geq(ctl, 0);
    cr_assert_eq(pl_tok_encode(t, "a<ctl>b", 7, PL_TOK_PARSE_SPECIAL, &ids, &k), PL_OK);
    bool seen = false;
    for (size_t i = 0; i < k; i++) seen = seen || ids[i] == ctl;
    cr_assert(seen, "<ctl> parsed");
    pl_free(ids);
    cr_assert_eq(pl_tok_encode(t, "a<ctl>b", 7, 0, &ids, &k), PL_OK);
    for (size_t i = 0; i < k; i++) cr_assert_neq(ids[i], ctl, "<ctl> as text");
    pl_free(ids);
    pl_tok_free(t);
    /* an empty directory */
    tdir_make(&d, NULL, NULL);
    t = (pl_tokenizer *)&d;
    cr_assert_eq(pl_tok_load(d.dir, &t), PL_ERR_IO);
    cr_assert_eq(t, (pl_tokenizer *)&d, "out untouched");
    cr_assert_not_null(strstr(pl_last_error(), d.dir));
    tdir_remove(&d);
    PL_ASSERT_NO_LEAKS();
}

// ---- hostile files -------------------------------------------------------------------------------

/* A small valid tokenizer.json to break one field at a time. */
#define GOOD_VOCAB "\"a\": 0, \"b\": 1, \"ab\": 2"
#define GOOD_PRE "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\s+\"}, " \
                 "\"behavior\": \"Isolated\", \"invert\": false}"

typedef struct hostile {
    const char *normalizer, *pre, *opts, *vocab, *merges, *added, *post, *decoder;
    pl_status want;
    const char *field; /* a substring of the message: the JSON path and what is wrong */
} hostile;

Test(tokenizer_hf, hostile_fields_are_refused_by_path) {
    static const char deep[] =
        "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Sequence\", \"normalizers\": ["
        "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Sequence\", \"normalizers\": ["
        "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Sequence\", \"normalizers\": ["
        "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Sequence\", \"normalizers\": ["
        "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"}]}]}]}]}]}]}]}]}]}";
    static const hostile cases[] = {
        {"5", "null", "", GOOD_VOCAB, "", "", "null", "null", PL_ERR_FORMAT,
         "normalizer: expected an object"},
        {"{\"type\": \"Precompiled\", \"precompiled_charsmap\": \"\"}", "null", "", GOOD_VOCAB,
         "", "", "null", "null", PL_ERR_UNSUPPORTED, "normalizer.type: normalizer \"Precompiled\""},
        {deep, "null", "", GOOD_VOCAB, "", "", "null", "null", PL_ERR_UNSUPPORTED, "nested"},
        {"{\"type\": \"Replace\", \"pattern\": {\"String\": \"a\", \"Regex\": \"b\"}, "
         "\"content\": \"\"}", "null", "", GOOD_VOCAB, "", "", "null", "null", PL_ERR_FORMAT,
         "normalizer.pattern: expected exactly one"},
        {"null", "{\"type\": \"Whitespace\"}", "", GOOD_VOCAB, "", "", "null", "null",
         PL_ERR_UNSUPPORTED, "pre_tokenizer.type: pre-tokenizer \"Whitespace\""},
        {"null", "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(a\"}, \"behavior\": "
         "\"Isolated\", \"invert\": false}", "", GOOD_VOCAB, "", "", "null", "null",
         PL_ERR_FORMAT, "pre_tokenizer.pattern.Regex: the regex does not compile"},
        {"null", "{\"type\": \"Sequence\", \"pretokenizers\": [" GOOD_PRE ", {\"type\": "
         "\"Split\", \"pattern\": {\"String\": \"x\"}, \"behavior\": \"Sideways\", \"invert\": "
         "false}]}", "", GOOD_VOCAB, "", "", "null", "null", PL_ERR_FORMAT,
         "pre_tokenizer.pretokenizers[1].behavior"},
        {"null", "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"ByteLevel\"}, "
         GOOD_PRE "]}", "", GOOD_VOCAB, "", "", "null", "null", PL_ERR_UNSUPPORTED,
         "after ByteLevel"},
        {"null", "{\"type\": \"Metaspace\", \"replacement\": \"ab\"}", "", GOOD_VOCAB, "", "",
         "null", "null", PL_ERR_FORMAT, "pre_tokenizer.replacement: expected one character"},
        {"null", "null", "\"dropout\": 0.1,", GOOD_VOCAB, "", "", "null", "null",
         PL_ERR_UNSUPPORTED, "model.dropout"},
        {"null", "null", "\"continuing_subword_prefix\": \"##\",", GOOD_VOCAB, "", "", "null",
         "null", PL_ERR_UNSUPPORTED, "model.continuing_subword_prefix"},
        {"null", "null", "\"unk_token\": \"<unk>\",", GOOD_VOCAB, "", "", "null", "null",
         PL_ERR_FORMAT, "model.unk_token"},
        {"null", "null", "\"byte_fallback\": 1,", GOOD_VOCAB, "", "", "null", "null",
         PL_ERR_FORMAT, "model.byte_fallback: expected true or false"},
        {"null", "null", "", "\"a\": \"zero\"", "", "", "null", "null", PL_ERR_FORMAT,
         "model.vocab[\"a\"]: expected an integer"},
        {"null", "null", "", "\"a\": 0, \"b\": 0", "", "", "null", "null", PL_ERR_FORMAT,
         "is also the id of"},
        {"null", "null", "", "\"a\": 0, \"b\": 2", "", "", "null", "null", PL_ERR_FORMAT,
         "without gaps"},
        {"null", "null", "", "", "", "", "null", "null", PL_ERR_FORMAT, "model.vocab: empty"},
        {"null", "null", "", GOOD_VOCAB, "\"a c\"", "", "null", "null", PL_ERR_FORMAT,
         "model.merges[0]: \"c\" is not in the vocabulary"},
        {"null", "null", "", GOOD_VOCAB, "\"a b\", \"b a\"", "", "null", "null", PL_ERR_FORMAT,
         "model.merges[1]: \"ba\" is not in the vocabulary"},
        {"null", "null", "", GOOD_VOCAB, "\"a  b\"", "", "null", "null", PL_ERR_FORMAT,
         "model.merges[0]: \"a  b\" is not two tokens"},
        {"null", "null", "", GOOD_VOCAB, "[\"a\"]", "", "null", "null", PL_ERR_FORMAT,
         "model.merges[0]: expected"},
        {"null", "null", "", GOOD_VOCAB, "", "{\"id\": 9, \"content\": \"<x>\"}", "null", "null",
         PL_ERR_FORMAT, "added_tokens[0]: id 9 is out of range"},
        {"null", "null", "", GOOD_VOCAB, "", "{\"id\": 1, \"content\": \"<x>\"}", "null", "null",
         PL_ERR_FORMAT, "which is the vocabulary's id of \"b\""},
        {"null", "null", "", GOOD_VOCAB, "",
         "{\"id\": 3, \"content\": \"<x>\"}, {\"id\": 4, \"content\": \"<x>\"}", "null", "null",
         PL_ERR_FORMAT, "is the token of ids 3 and 4"},
        {"null", "null", "", GOOD_VOCAB, "",
         "{\"id\": 3, \"content\": \"<x>\"}, {\"id\": 3, \"content\": \"<y>\"}", "null", "null",
         PL_ERR_FORMAT, "added_tokens[1]: id 3 is also the id of another added token"},
        {"null", "null", "", GOOD_VOCAB, "",
         "{\"id\": 3, \"content\": \"<x>\"}, {\"id\": 5, \"content\": \"<y>\"}, "
         "{\"id\": 0, \"content\": \"a\"}", "null", "null", PL_ERR_FORMAT, "no token has id 4"},
        {"null", "null", "", GOOD_VOCAB, "", "{\"id\": 3, \"content\": \"\"}", "null", "null",
         PL_ERR_FORMAT, "added_tokens[0]: content of 0 bytes"},
        {"null", "null", "", GOOD_VOCAB, "", "{\"id\": 3, \"content\": \"<x>\", \"special\": "
         "\"yes\"}", "null", "null", PL_ERR_FORMAT, "added_tokens[0].special"},
        {"null", "null", "", GOOD_VOCAB, "", "", "{\"type\": \"BertProcessing\"}", "null",
         PL_ERR_UNSUPPORTED, "post_processor.type: post-processor \"BertProcessing\""},
        {"null", "null", "", GOOD_VOCAB, "", "",
         "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\", "
         "\"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], "
         "\"special_tokens\": {}}", "null", PL_ERR_FORMAT,
         "post_processor.single[0]: special token \"<s>\" is not in special_tokens"},
        {"null", "null", "", GOOD_VOCAB, "", "",
         "{\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\", "
         "\"type_id\": 0}}], \"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [0]}}}",
         "null", PL_ERR_FORMAT, "no sequence \"A\""},
        {"null", "null", "", GOOD_VOCAB, "", "",
         "{\"type\": \"TemplateProcessing\", \"single\": [{\"Sequence\": {\"id\": \"A\", "
         "\"type_id\": 0}}, {\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}}], "
         "\"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [77]}}}", "null",
         PL_ERR_FORMAT, "not an id of the vocabulary"},
        {"null", "null", "", GOOD_VOCAB, "", "", "null", "{\"type\": \"WordPiece\"}",
         PL_ERR_UNSUPPORTED, "decoder.type: decoder \"WordPiece\""},
        {"null", "null", "", GOOD_VOCAB, "", "", "null",
         "{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Fuse\"}, {\"type\": "
         "\"ByteLevel\"}]}", PL_ERR_UNSUPPORTED, "decoder.decoders[1]: a ByteLevel decoder"},
        {"null", "null", "", GOOD_VOCAB, "", "", "null",
         "{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Fuse\"}, {\"type\": "
         "\"ByteFallback\"}]}", PL_ERR_UNSUPPORTED, "ByteFallback after Fuse"},
        {"null", "null", "", GOOD_VOCAB, "", "", "null",
         "{\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 99}",
         PL_ERR_UNSUPPORTED, "decoder.stop"},
        {"null", "null", "", GOOD_VOCAB, "", "", "null",
         "{\"type\": \"Replace\", \"pattern\": {\"Regex\": \"x\"}, \"content\": \"\"}",
         PL_ERR_UNSUPPORTED, "decoder.pattern.Regex"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const hostile *h = &cases[i];
        char *json = tok_json(h->normalizer, h->pre, h->opts, h->vocab, h->merges, h->added,
                              h->post, h->decoder);
        tdir d;
        tdir_make(&d, json, NULL);
        pl_tokenizer *t = NULL;
        pl_status s = pl_tok_load(d.json, &t);
        tdir_remove(&d);
        cr_assert_eq(s, h->want, "case %zu: %s, %s", i, pl_status_name(s), pl_last_error());
        cr_assert_null(t);
        cr_assert_not_null(strstr(pl_last_error(), h->field), "case %zu: \"%s\" not in: %s", i,
                           h->field, pl_last_error());
        cr_assert_not_null(strstr(pl_last_error(), "tokenizer.json"), "%s", pl_last_error());
        free(json);
    }
    /* the whole file's shape */
    static const struct {
        const char *json, *field;
        pl_status want;
    } whole[] = {
        {"{\"model\": ", "line 1", PL_ERR_FORMAT},
        {"[]", "expected a JSON object", PL_ERR_FORMAT},
        {"{\"version\": \"1.0\"}", "model: expected an object", PL_ERR_FORMAT},
        {"{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}", "model.type", PL_ERR_UNSUPPORTED},
        {"{\"truncation\": {\"max_length\": 5}, \"model\": {}}", "truncation",
         PL_ERR_UNSUPPORTED},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
         "\"model\": {}}", "duplicate", PL_ERR_FORMAT},
    };
    for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++) {
        tdir d;
        tdir_make(&d, whole[i].json, NULL);
        pl_tokenizer *t = NULL;
        pl_status s = pl_tok_load(d.json, &t);
        tdir_remove(&d);
        cr_assert_eq(s, whole[i].want, "%s: %s", whole[i].json, pl_last_error());
        cr_assert_not_null(strstr(pl_last_error(), whole[i].field), "%s", pl_last_error());
    }
    PL_ASSERT_NO_LEAKS();
}

Test(tokenizer_hf, truncated_and_damaged_files_fail_cleanly, .timeout = 120) {
    char src[1024];
    snprintf(src, sizeof src, "%s/tok512_hf/tokenizer.json", PL_TOK_DATA_DIR);
    FILE *f = fopen(src, "rb");
    static char good[1 << 16];
    size_t n = fread(good, 1, sizeof good - 1, f);
    fclose(f);
    tdir d;
    tdir_make(&d, NULL, NULL);
    char *buf = malloc(n + 1);
    pl_test_rng r;
    pl_test_rng_seed(&r, pl_test_run_seed("hostile tokenizer.json"));
    int loaded = 0;
    for (int it = 0; it < 400; it++) {
        size_t len = n;
        memcpy(buf, good, n);
        if (it < 200) {
            len = it * (n / 200); /* truncated at 200 points */
        } else {
            for (int k = 0; k < 1 + (int)pl_test_rng_below(&r, 4); k++)
                buf[pl_test_rng_below(&r, (uint32_t)n)] ^= (char)(1u << pl_test_rng_below(&r, 8));
        }
        FILE *o = fopen(d.json, "wb");
        fwrite(buf, 1, len, o);
        fclose(o);
        pl_tokenizer *t = NULL;
        pl_status s = pl_tok_load(d.json, &t);
        if (s != PL_OK) {
            cr_assert(s == PL_ERR_FORMAT || s == PL_ERR_UNSUPPORTED, "%s: %s", pl_status_name(s),
                      pl_last_error());
            cr_assert_not_null(strstr(pl_last_error(), d.json), "%s", pl_last_error());
            cr_assert_null(t);
            continue;
        }
        cr_assert_geq(it, 200, "a truncated file loaded");
        loaded++;
        int32_t *ids = NULL;
        size_t k = 0;
        const char *text = "The cat \xF0\x9F\x90\x88 slept. 12 <s>";
        if (pl_tok_encode(t, text, strlen(text), PL_TOK_PARSE_SPECIAL | PL_TOK_ADD_SPECIAL, &ids,
                          &k) == PL_OK) {
            for (size_t j = 0; j < k; j++) cr_assert(ids[j] >= 0 && ids[j] < pl_tok_vocab_size(t));
            tok_check_stream(t, ids, k, false);
            pl_free(ids);
        }
        pl_tok_free(t);
    }
    fprintf(stderr, "hostile tokenizer.json: %d of 200 damaged files still loaded\n", loaded);
    free(buf);
    tdir_remove(&d);
    PL_ASSERT_NO_LEAKS();
}

// ---- allocation failures --------------------------------------------------------------------------

Test(tokenizer_hf, every_allocation_failure_is_reported_and_leaks_nothing, .timeout = 120) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tok512_hf", PL_TOK_DATA_DIR);
    pl_tokenizer *t = NULL;
    int failures = 0;
    PL_ALLOC_SWEEP(failures, k, pl_tok_load(path, &t), cr_assert_null(t););
    cr_assert_gt(failures, 10);
    const char *text = "<s>Ünïcode 🐈 text   with  spaces</s>";
    int32_t *ids = NULL;
    size_t n = 0;
    PL_ALLOC_SWEEP(failures, k,
                   pl_tok_encode(t, text, strlen(text), PL_TOK_PARSE_SPECIAL, &ids, &n), {});
    char *back = NULL;
    PL_ALLOC_SWEEP(failures, k, pl_tok_decode(t, ids, n, 0, &back), {});
    cr_assert_str_eq(back, "<s> Ünïcode 🐈 text   with  spaces</s>");
    pl_free(back);
    /* a failed push leaves the detok as it was: retrying gives the same stream */
    pl_detok *d = NULL;
    PL_ALLOC_SWEEP(failures, k, pl_detok_create(t, 0, &d), {});
    size_t cap = 256, len = 0;
    char *all = malloc(cap);
    for (size_t i = 0; i < n; i++) {
        const char *c;
        size_t cl;
        pl_alloc_fail_after(0);
        pl_status s = pl_detok_push(d, ids[i], &c, &cl);
        pl_alloc_fail_after(-1);
        if (s != PL_OK) {
            cr_assert_eq(s, PL_ERR_OUT_OF_MEMORY);
            cr_assert_eq(pl_detok_push(d, ids[i], &c, &cl), PL_OK);
        }
        cr_assert_lt(len + cl, cap);
        memcpy(all + len, c, cl);
        len += cl;
    }
    all[len] = '\0';
    cr_assert_str_eq(all, "<s> Ünïcode 🐈 text   with  spaces</s>");
    free(all);
    pl_detok_free(d);
    pl_free(ids);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}
