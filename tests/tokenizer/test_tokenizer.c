/*
 * tests/tokenizer/test_tokenizer.c - the tokenizer on tiny models trained at build time by
 * spm_train from tests/data/tok_corpus.txt (see tests/tokenizer/meson.build for the flags):
 *   tok_bpe, tok_unigram  defaults: add_dummy_prefix + remove_extra_whitespaces (rule ALL)
 *   tok_first            BPE, remove_extra_whitespaces=false (rule FIRST, as Llama), with
 *                        user-defined <sep> and 🐈, control <ctl>, unk surface "<?>"
 *   tok_keep             BPE, no dummy prefix, no whitespace removal (rule KEEP)
 *   tok_nobos            unigram without <s> / </s>, empty unk surface
 *   tok_denorm           BPE with a denormalizer (refused)
 * Loading, round trips, special ids, refusal of bad text, streaming detokenisation against
 * the library's decode over random id sequences, hostile model files, allocation failures.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "test_support.h"
#include "tok_check.h"
#include "tokenizer/spm.h"
#include "tokenizer/tokenizer.h"
#include "util/alloc.h"

#ifndef PL_TOK_TEST_DIR
#error "PL_TOK_TEST_DIR (the build folder holding the trained tok_*.model) must be defined"
#endif

static const char *const TRAINED[] = {"tok_bpe", "tok_unigram", "tok_first", "tok_keep",
                                      "tok_nobos"};
#define N_TRAINED (sizeof TRAINED / sizeof TRAINED[0])

static void model_path(const char *name, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%s.model", PL_TOK_TEST_DIR, name);
}

static pl_tokenizer *load(const char *name) {
    char path[1024];
    model_path(name, path, sizeof path);
    pl_tokenizer *t = NULL;
    cr_assert_eq(pl_tok_load(path, &t), PL_OK, "%s: %s (the models are built by ninja; run "
                 "the test through meson test)", path, pl_last_error());
    return t;
}

/* Reads a whole file into malloc'd memory. */
static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)len + 1);
    cr_assert_not_null(buf);
    cr_assert_eq(fread(buf, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return buf;
}

static void round_trip(const pl_tokenizer *t, const char *text, const char *what) {
    int32_t *ids = NULL;
    size_t n = 0;
    cr_assert_eq(pl_tok_encode(t, text, strlen(text), true, &ids, &n), PL_OK, "%s: %s", what,
                 pl_last_error());
    cr_assert_gt(n, 1);
    cr_assert_eq(ids[0], pl_tok_bos_id(t), "%s: BOS first", what);
    for (size_t i = 1; i < n; i++) {
        cr_assert_neq(ids[i], pl_tok_bos_id(t));
        cr_assert(ids[i] >= 0 && ids[i] < pl_tok_vocab_size(t));
    }
    char *back = NULL;
    cr_assert_eq(pl_tok_decode(t, ids, n, 0, &back), PL_OK, "%s", pl_last_error());
    cr_assert_str_eq(back, text, "%s: round trip", what);
    tok_check_stream(t, ids, n, true);
    pl_free(back);
    pl_free(ids);
}

// ---- loading and the vocabulary -------------------------------------------------------------

Test(tokenizer, trained_models_load_with_expected_special_ids) {
    for (size_t m = 0; m < N_TRAINED; m++) {
        pl_tokenizer *t = load(TRAINED[m]);
        cr_assert_eq(pl_tok_vocab_size(t), 600, "%s", TRAINED[m]);
        cr_assert_str_eq(pl_tok_piece(t, 0), "<unk>");
        if (strcmp(TRAINED[m], "tok_nobos") == 0) {
            cr_assert_eq(pl_tok_bos_id(t), -1);
            cr_assert_eq(pl_tok_eos_id(t), -1);
        } else {
            cr_assert_eq(pl_tok_bos_id(t), 1, "%s", TRAINED[m]);
            cr_assert_eq(pl_tok_eos_id(t), 2, "%s", TRAINED[m]);
            cr_assert_str_eq(pl_tok_piece(t, 1), "<s>");
            cr_assert_str_eq(pl_tok_piece(t, 2), "</s>");
        }
        cr_assert_null(pl_tok_piece(t, -1));
        cr_assert_null(pl_tok_piece(t, 600));
        /* Byte fallback: all 256 byte pieces exist, and each is a BYTE entry of its value. */
        tok_ids k;
        tok_ids_find(t, &k);
        for (int b = 0; b < 256; b++) {
            cr_assert_geq(k.byte_id[b], 0, "%s: no <0x%02X>", TRAINED[m], b);
            const pl_tok_entry *e = pl_tok_entry_of(t, k.byte_id[b]);
            cr_assert_eq(e->kind, PL_TOK_KIND_BYTE);
            cr_assert_eq(e->byte, b);
        }
        pl_tok_free(t);
    }
    PL_ASSERT_NO_LEAKS();
}

Test(tokenizer, whitespace_rule_is_probed_from_the_model_flags) {
    static const struct {
        const char *name;
        pl_tok_ws_rule rule;
    } cases[] = {{"tok_bpe", PL_TOK_WS_ALL}, {"tok_first", PL_TOK_WS_FIRST},
                 {"tok_keep", PL_TOK_WS_KEEP}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pl_tokenizer *t = load(cases[i].name);
        cr_assert_eq(pl_tok_ws_rule_of(t), cases[i].rule, "%s", cases[i].name);
        pl_tok_free(t);
    }
    PL_ASSERT_NO_LEAKS();
}

Test(tokenizer, user_defined_and_control_pieces) {
    pl_tokenizer *t = load("tok_first");
    int32_t *ids = NULL;
    size_t n = 0;
    const char *text = "the cat \xF0\x9F\x90\x88<sep>lamp";
    cr_assert_eq(pl_tok_encode(t, text, strlen(text), false, &ids, &n), PL_OK, "%s",
                 pl_last_error());
    bool seen_sep = false, seen_cat = false;
    for (size_t i = 0; i < n; i++) {
        seen_sep |= strcmp(pl_tok_piece(t, ids[i]), "<sep>") == 0;
        seen_cat |= strcmp(pl_tok_piece(t, ids[i]), "\xF0\x9F\x90\x88") == 0;
    }
    cr_assert(seen_sep && seen_cat, "user-defined symbols are encoded as one piece each");
    char *back = NULL;
    cr_assert_eq(pl_tok_decode(t, ids, n, 0, &back), PL_OK);
    cr_assert_str_eq(back, text);
    pl_free(back);
    /* <ctl> is a control piece: it decodes to nothing, wherever it is. */
    int32_t ctl = -1;
    for (int32_t id = 0; id < pl_tok_vocab_size(t); id++)
        if (strcmp(pl_tok_piece(t, id), "<ctl>") == 0) ctl = id;
    cr_assert_geq(ctl, 0);
    int32_t *with = malloc((n + 2) * sizeof *with);
    with[0] = ctl;
    memcpy(with + 1, ids, n * sizeof *ids);
    with[n + 1] = ctl;
    cr_assert_eq(pl_tok_decode(t, with, n + 2, 0, &back), PL_OK);
    cr_assert_str_eq(back, text);
    pl_free(back);
    tok_check_stream(t, with, n + 2, true);
    free(with);
    pl_free(ids);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

// ---- encode / decode -----------------------------------------------------------------------

Test(tokenizer, round_trips_ascii_and_non_ascii) {
    /* Texts with single spaces and no edge spaces round-trip under every whitespace rule;
     * several are not in the corpus, so byte fallback does real work. */
    static const char *const texts[] = {
        "The lighthouse keeper climbed the stairs.",
        "Numbers 0123456789 and 3.14159, then 2048.",
        "Le gardien écrivait à sa sœur à Montréal.",
        "Zürich, Kraków, São Paulo, Ålesund, Þórshöfn.",
        "灯台の光は毎晩海を照らします。",
        "灯塔的光每天晚上照亮大海。龘",
        "등대의 불빛",
        "Emoji: 🐈 💡 🌊 🚀 👩‍👩‍👧 🇯🇵 and ✓ ✗",
        "Rare: 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ꙮ \xEF\xBF\xBD \xF4\x8F\xBF\xBF end",
        "x",
    };
    for (size_t m = 0; m < N_TRAINED; m++) {
        if (strcmp(TRAINED[m], "tok_nobos") == 0) continue; /* no BOS: see no_bos_model */
        pl_tokenizer *t = load(TRAINED[m]);
        for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) round_trip(t, texts[i],
                                                                                TRAINED[m]);
        pl_tok_free(t);
    }
    PL_ASSERT_NO_LEAKS();
}

Test(tokenizer, whitespace_survives_when_the_model_keeps_it) {
    /* Leading, doubled and trailing spaces, tabs and newlines: exact under KEEP and FIRST
     * (identity normalisation, nothing removed). */
    static const char *const texts[] = {" leading space", "two  spaces", "trailing ",
                                        "tab\there", "line one\nline two\n", "  ", "\n"};
    static const char *const models[] = {"tok_first", "tok_keep"};
    for (size_t m = 0; m < 2; m++) {
        pl_tokenizer *t = load(models[m]);
        for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) round_trip(t, texts[i],
                                                                                models[m]);
        pl_tok_free(t);
    }
    PL_ASSERT_NO_LEAKS();
}

Test(tokenizer, encode_without_bos_and_empty_text) {
    pl_tokenizer *t = load("tok_bpe");
    int32_t *ids = NULL;
    size_t n = 99;
    cr_assert_eq(pl_tok_encode(t, "", 0, false, &ids, &n), PL_OK);
    cr_assert_eq(n, 0);
    pl_free(ids);
    cr_assert_eq(pl_tok_encode(t, NULL, 0, true, &ids, &n), PL_OK);
    cr_assert_eq(n, 1);
    cr_assert_eq(ids[0], 1);
    pl_free(ids);
    cr_assert_eq(pl_tok_encode(t, "the lamp", 8, false, &ids, &n), PL_OK);
    cr_assert_gt(n, 0);
    cr_assert_neq(ids[0], 1);
    char *s = NULL;
    cr_assert_eq(pl_tok_decode(t, ids, n, 0, &s), PL_OK);
    cr_assert_str_eq(s, "the lamp");
    pl_free(s);
    pl_free(ids);
    cr_assert_eq(pl_tok_decode(t, NULL, 0, 0, &s), PL_OK);
    cr_assert_str_eq(s, "");
    pl_free(s);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

Test(tokenizer, no_bos_model) {
    pl_tokenizer *t = load("tok_nobos");
    int32_t *ids = NULL;
    size_t n = 0;
    cr_assert_eq(pl_tok_encode(t, "the lamp", 8, true, &ids, &n), PL_OK);
    char *s = NULL;
    cr_assert_eq(pl_tok_decode(t, ids, n, 0, &s), PL_OK);
    cr_assert_str_eq(s, "the lamp", "add_bos without a BOS piece adds nothing");
    pl_free(s);
    pl_free(ids);
    /* Its unk surface is empty (--unk_surface=), so <unk> decodes to nothing. */
    int32_t unk = 0;
    cr_assert_eq(pl_tok_decode(t, &unk, 1, 0, &s), PL_OK);
    cr_assert_str_eq(s, "");
    pl_free(s);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

Test(tokenizer, control_ids_decode_to_nothing_and_unk_to_its_surface) {
    pl_tokenizer *t = load("tok_bpe");
    int32_t *ids = NULL;
    size_t n = 0;
    cr_assert_eq(pl_tok_encode(t, "the cat", 7, false, &ids, &n), PL_OK);
    int32_t seq[32];
    cr_assert_lt(n + 3, 32);
    seq[0] = 1;
    memcpy(seq + 1, ids, n * sizeof *ids);
    seq[n + 1] = 2;
    seq[n + 2] = 1;
    char *s = NULL;
    cr_assert_eq(pl_tok_decode(t, seq, n + 3, 0, &s), PL_OK);
    cr_assert_str_eq(s, "the cat");
    pl_free(s);
    int32_t only[] = {1, 2, 2, 1};
    cr_assert_eq(pl_tok_decode(t, only, 4, 0, &s), PL_OK);
    cr_assert_str_eq(s, "");
    pl_free(s);
    /* spm_train's default unk surface is " \u2047 " (U+2047 DOUBLE QUESTION MARK). */
    int32_t unk = 0;
    cr_assert_eq(pl_tok_decode(t, &unk, 1, 0, &s), PL_OK);
    cr_assert_str_eq(s, " \xE2\x81\x87 ");
    pl_free(s);
    pl_free(ids);
    pl_tok_free(t);
    t = load("tok_first");
    cr_assert_eq(pl_tok_decode(t, &unk, 1, 0, &s), PL_OK);
    cr_assert_str_eq(s, "<?>", "--unk_surface=<?>");
    pl_free(s);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

Test(tokenizer, byte_pieces_decode_like_sentencepiece) {
    pl_tokenizer *t = load("tok_bpe");
    tok_ids k;
    tok_ids_find(t, &k);
    struct {
        unsigned char bytes[6];
        int n;
        const char *want;
    } cases[] = {
        {{0xE2, 0x9C, 0x93}, 3, "\xE2\x9C\x93"},                       /* ✓ */
        {{0xE2, 0x9C}, 2, "\xEF\xBF\xBD\xEF\xBF\xBD"},                 /* cut short: FFFD x2 */
        {{0xC3, 0x41}, 2, "\xEF\xBF\xBD" "A"},                          /* bad trail */
        {{0xC0, 0x80}, 2, "\xEF\xBF\xBD\xEF\xBF\xBD"},                 /* overlong */
        {{0xED, 0xA0, 0x80}, 3, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"}, /* surrogate */
        {{0xF0, 0x9F, 0x90, 0x88}, 4, "\xF0\x9F\x90\x88"},             /* 🐈 */
        {{0x00}, 1, "\xEF\xBF\xBD"},                                    /* NUL: documented */
        {{0x20, 0x61}, 2, " a"},                                        /* not stripped */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int32_t ids[6];
        for (int j = 0; j < cases[i].n; j++) ids[j] = k.byte_id[cases[i].bytes[j]];
        char *s = NULL;
        cr_assert_eq(pl_tok_decode(t, ids, (size_t)cases[i].n, 0, &s), PL_OK);
        cr_assert_str_eq(s, cases[i].want, "case %zu", i);
        pl_free(s);
        tok_check_stream(t, ids, (size_t)cases[i].n, true);
    }
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

Test(tokenizer, decode_refuses_ids_out_of_range) {
    pl_tokenizer *t = load("tok_bpe");
    int32_t ids[] = {5, 600, 7};
    char *s = (char *)"untouched";
    cr_assert_eq(pl_tok_decode(t, ids, 3, 0, &s), PL_ERR_INVALID_ARGUMENT);
    cr_assert_str_eq(s, "untouched");
    cr_assert_not_null(strstr(pl_last_error(), "ids[1]"), "%s", pl_last_error());
    ids[1] = -3;
    cr_assert_eq(pl_tok_decode(t, ids, 3, 0, &s), PL_ERR_INVALID_ARGUMENT);
    pl_detok *d = NULL;
    cr_assert_eq(pl_detok_create(t, 0, &d), PL_OK);
    const char *c;
    size_t n;
    cr_assert_eq(pl_detok_push(d, 600, &c, &n), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_detok_push(d, -1, &c, &n), PL_ERR_INVALID_ARGUMENT);
    cr_assert_not_null(strstr(pl_last_error(), "-1"), "%s", pl_last_error());
    pl_detok_free(d);
    d = NULL;
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

Test(tokenizer, encode_refuses_nul_and_invalid_utf8_with_offsets) {
    pl_tokenizer *t = load("tok_bpe");
    static const struct {
        const char *text;
        size_t len;
        size_t offset;
    } bad[] = {
        {"abc\0def", 7, 3},                 /* NUL */
        {"\0", 1, 0},
        {"ok \xC3", 4, 3},                  /* truncated 2-byte */
        {"ok \xE2\x9C", 5, 3},              /* truncated 3-byte */
        {"a\xC0\x80", 3, 1},                /* overlong NUL */
        {"ab\xE0\x80\xAF", 5, 2},           /* overlong '/' */
        {"\xED\xA0\x80x", 4, 0},            /* surrogate U+D800 */
        {"xyz\xF4\x90\x80\x80", 7, 3},      /* U+110000 */
        {"\xF5\x80\x80\x80", 4, 0},
        {"caf\xFF", 4, 3},
        {"\x80 lone continuation", 19, 0},
        {"\xC3\xA9\xC3(", 5, 2},            /* é then a broken one */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int32_t *ids = (int32_t *)&bad; /* must stay untouched */
        size_t n = 12345;
        cr_assert_eq(pl_tok_encode(t, bad[i].text, bad[i].len, true, &ids, &n),
                     PL_ERR_INVALID_ARGUMENT, "case %zu", i);
        cr_assert_eq(ids, (int32_t *)&bad);
        cr_assert_eq(n, 12345);
        char want[64];
        snprintf(want, sizeof want, "byte offset %zu", bad[i].offset);
        cr_assert_not_null(strstr(pl_last_error(), want), "case %zu: \"%s\" lacks \"%s\"", i,
                           pl_last_error(), want);
    }
    /* The edges of the valid range are accepted. */
    const char *good = "\xF4\x8F\xBF\xBF \xEF\xBF\xBD \xED\x9F\xBF \xEE\x80\x80 \xC2\x80";
    int32_t *ids = NULL;
    size_t n = 0;
    cr_assert_eq(pl_tok_encode(t, good, strlen(good), false, &ids, &n), PL_OK, "%s",
                 pl_last_error());
    pl_free(ids);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

Test(tokenizer, validator_agrees_with_the_tokenizer_on_short_sequences) {
    /* Every 1- and 2-byte string, and 3-byte strings for every lead byte >= 0xE0 and second
     * byte with third bytes at the range edges: pl_tok_encode accepts exactly what the test's
     * own validator accepts. NUL is excluded here (always refused, checked above). */
    pl_tokenizer *t = load("tok_bpe");
    static const unsigned char thirds[] = {0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0};
    int accepted = 0;
    for (unsigned a = 1; a < 256; a++) {
        for (unsigned b = 0; b < 256; b++) {
            size_t n_c = a >= 0xE0 ? sizeof thirds : 1;
            for (size_t ci = 0; ci < n_c; ci++) {
                unsigned char buf[3] = {(unsigned char)a, (unsigned char)b, thirds[ci]};
                size_t len = a >= 0xE0 ? 3 : (b == 0 ? 1 : 2);
                if (a >= 0xE0 && b == 0) continue;
                int32_t *ids = NULL;
                size_t n = 0;
                pl_status s = pl_tok_encode(t, (const char *)buf, len, false, &ids, &n);
                bool valid = tok_utf8_valid((const char *)buf, len, NULL);
                cr_assert_eq(s == PL_OK, valid, "%02X %02X %02X (len %zu)", buf[0], buf[1],
                             buf[2], len);
                if (s == PL_OK) {
                    accepted++;
                    pl_free(ids);
                } else {
                    cr_assert_eq(s, PL_ERR_INVALID_ARGUMENT);
                }
            }
        }
    }
    cr_assert_gt(accepted, 10000);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

// ---- streaming detokenisation --------------------------------------------------------------

Test(detok, random_sequences_equal_the_full_decode) {
    uint64_t seed = pl_test_run_seed("detok random sequences");
    for (size_t m = 0; m < N_TRAINED; m++) {
        pl_tokenizer *t = load(TRAINED[m]);
        tok_ids k;
        tok_ids_find(t, &k);
        pl_test_rng r;
        pl_test_rng_seed(&r, seed + m);
        int32_t *ctx = NULL;
        size_t n_ctx = 0;
        cr_assert_eq(pl_tok_encode(t, "Hi", 2, false, &ctx, &n_ctx), PL_OK);
        for (int it = 0; it < 300; it++) {
            int32_t ids[48];
            size_t n = tok_random_ids(t, &k, &r, ids, 48);
            tok_check_stream(t, ids, n, it < 100);
            tok_check_stream_after(t, ctx, n_ctx, ids, n);
        }
        pl_free(ctx);
        pl_tok_free(t);
    }
    PL_ASSERT_NO_LEAKS();
}

Test(detok, leading_space_rules) {
    /* "▁" pieces at the start: dropped once (FIRST), dropped while the text is empty (ALL),
     * never (KEEP); after a prompt, always kept. The expected strings are the library's
     * behaviour, checked by tok_check_stream against pl_tok_decode as well. */
    static const struct {
        const char *model;
        const char *first_two_spaces_then_the; /* decode of [▁, ▁, ▁the] */
    } cases[] = {{"tok_first", "  the"}, {"tok_bpe", "the"}, {"tok_keep", NULL}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pl_tokenizer *t = load(cases[i].model);
        int32_t sp = -1, the = -1;
        for (int32_t id = 0; id < pl_tok_vocab_size(t); id++) {
            if (strcmp(pl_tok_piece(t, id), "\xE2\x96\x81") == 0) sp = id;
            if (strcmp(pl_tok_piece(t, id), "\xE2\x96\x81the") == 0) the = id;
        }
        cr_assert_geq(the, 0, "%s has ▁the", cases[i].model);
        if (sp >= 0 && cases[i].first_two_spaces_then_the) {
            int32_t ids[] = {1, sp, sp, the};
            char *s = NULL;
            cr_assert_eq(pl_tok_decode(t, ids, 4, 0, &s), PL_OK);
            cr_assert_str_eq(s, cases[i].first_two_spaces_then_the, "%s", cases[i].model);
            pl_free(s);
            tok_check_stream(t, ids, 4, true);
        }
        pl_detok *d = NULL;
        cr_assert_eq(pl_detok_create(t, PL_TOK_AFTER_PROMPT, &d), PL_OK);
        const char *c;
        size_t n;
        cr_assert_eq(pl_detok_push(d, the, &c, &n), PL_OK);
        cr_assert_eq(n, 4);
        cr_assert_eq(memcmp(c, " the", 4), 0, "after a prompt the space is real");
        pl_detok_free(d);
    d = NULL;
        cr_assert_eq(pl_detok_create(t, 0, &d), PL_OK);
        cr_assert_eq(pl_detok_push(d, the, &c, &n), PL_OK);
        bool keep = strcmp(cases[i].model, "tok_keep") == 0;
        cr_assert_eq(n, keep ? 4u : 3u, "%s", cases[i].model);
        pl_detok_free(d);
    d = NULL;
        pl_tok_free(t);
    }
    PL_ASSERT_NO_LEAKS();
}

Test(detok, holds_back_byte_pieces_until_the_character_is_complete) {
    pl_tokenizer *t = load("tok_bpe");
    tok_ids k;
    tok_ids_find(t, &k);
    pl_detok *d = NULL;
    cr_assert_eq(pl_detok_create(t, PL_TOK_AFTER_PROMPT, &d), PL_OK);
    const char *c;
    size_t n, len;
    cr_assert_str_eq(pl_detok_text(d, &len), "");
    cr_assert_eq(len, 0);
    unsigned char check[] = {0xE2, 0x9C, 0x93}; /* ✓ */
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(pl_detok_push(d, k.byte_id[check[i]], &c, &n), PL_OK);
        if (i < 2) {
            cr_assert_eq(n, 0, "byte %d of 3 must be held back", i);
            /* pl_detok_text shows the held-back bytes as U+FFFD each, as decode would. */
            const char *all = pl_detok_text(d, &len);
            cr_assert_eq(len, 3u * (unsigned)(i + 1));
            cr_assert_eq(memcmp(all, "\xEF\xBF\xBD\xEF\xBF\xBD", len), 0);
        } else {
            cr_assert_eq(n, 3);
            cr_assert_eq(memcmp(c, "\xE2\x9C\x93", 3), 0);
        }
    }
    cr_assert_str_eq(pl_detok_text(d, NULL), "\xE2\x9C\x93");
    /* An incomplete character closed by a normal piece: U+FFFD per byte, then the piece. */
    cr_assert_eq(pl_detok_push(d, k.byte_id[0xF0], &c, &n), PL_OK);
    cr_assert_eq(n, 0);
    cr_assert_eq(pl_detok_push(d, k.byte_id[0x9F], &c, &n), PL_OK);
    cr_assert_eq(n, 0);
    int32_t a = -1;
    for (int32_t id = 0; id < pl_tok_vocab_size(t); id++)
        if (strcmp(pl_tok_piece(t, id), "a") == 0) a = id;
    cr_assert_geq(a, 0);
    cr_assert_eq(pl_detok_push(d, a, &c, &n), PL_OK);
    cr_assert_eq(n, 7);
    cr_assert_eq(memcmp(c, "\xEF\xBF\xBD\xEF\xBF\xBD" "a", 7), 0);
    cr_assert_str_eq(c, "\xEF\xBF\xBD\xEF\xBF\xBD" "a", "chunk followed by a NUL");
    pl_detok_free(d);
    d = NULL;
    pl_detok_free(d);
    d = NULL; /* deinit twice is harmless */
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

Test(detok, long_stream_is_amortised_constant) {
    /* 100k pushes cost a logarithmic number of allocations (geometric growth), and the text
     * equals the decode at the end. */
    pl_tokenizer *t = load("tok_unigram");
    tok_ids k;
    tok_ids_find(t, &k);
    pl_test_rng r;
    pl_test_rng_seed(&r, 7);
    enum { N = 100000 };
    int32_t *ids = malloc(N * sizeof *ids);
    size_t n = 0;
    while (n < N) n += tok_random_ids(t, &k, &r, ids + n, N - n < 40 ? N - n : 40);
    pl_detok *d = NULL;
    cr_assert_eq(pl_detok_create(t, 0, &d), PL_OK);
    unsigned long before = pl_alloc_count();
    for (size_t i = 0; i < n; i++) {
        const char *c;
        size_t cl;
        cr_assert_eq(pl_detok_push(d, ids[i], &c, &cl), PL_OK);
    }
    unsigned long allocs = pl_alloc_count() - before;
    cr_assert_lt(allocs, 40, "%lu allocations for %zu pushes", allocs, n);
    char *want = NULL;
    cr_assert_eq(pl_tok_decode(t, ids, n, 0, &want), PL_OK);
    size_t len;
    const char *got = pl_detok_text(d, &len);
    cr_assert_eq(len, strlen(want));
    cr_assert(memcmp(got, want, len) == 0, "100k-id stream differs from decode");
    pl_free(want);
    free(ids);
    pl_detok_free(d);
    d = NULL;
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

// ---- bad files -----------------------------------------------------------------------------

Test(tokenizer, missing_file_is_io_error_naming_the_path) {
    pl_tokenizer *t = (pl_tokenizer *)&t;
    const char *path = "/nonexistent/dir/tok.model";
    cr_assert_eq(pl_tok_load(path, &t), PL_ERR_IO);
    cr_assert_eq(t, (pl_tokenizer *)&t, "out untouched on failure");
    cr_assert_not_null(strstr(pl_last_error(), path), "%s", pl_last_error());
    cr_assert_eq(pl_tok_load(PL_TOK_TEST_DIR, &t), PL_ERR_IO, "a directory");
    cr_assert_not_null(strstr(pl_last_error(), PL_TOK_TEST_DIR), "%s", pl_last_error());
    cr_assert_eq(pl_tok_load(NULL, &t), PL_ERR_INVALID_ARGUMENT);
    PL_ASSERT_NO_LEAKS();
}

Test(tokenizer, denormalizer_is_refused) {
    char path[1024];
    model_path("tok_denorm", path, sizeof path);
    pl_tokenizer *t = NULL;
    cr_assert_eq(pl_tok_load(path, &t), PL_ERR_UNSUPPORTED, "%s", pl_last_error());
    cr_assert_not_null(strstr(pl_last_error(), path));
    cr_assert_null(t);
    PL_ASSERT_NO_LEAKS();
}

/* Loads bytes through the file `path` that names memfd `fd` (thousands of rewrites of a disk
 * file cost seconds here; a memfd costs nothing). A failure must be FORMAT naming the file, a
 * success a working tokenizer whose streaming still matches its decode. Returns the status. */
static pl_status load_hostile(int fd, const char *path, const void *data, size_t n,
                              pl_test_rng *r) {
    cr_assert_eq(ftruncate(fd, 0), 0);
    cr_assert_eq(pwrite(fd, data, n, 0), (ssize_t)n);
    pl_tokenizer *t = NULL;
    pl_status s = pl_tok_load(path, &t);
    if (s != PL_OK) {
        /* UNSUPPORTED: a flipped bit could in principle create a denormalizer field. */
        cr_assert(s == PL_ERR_FORMAT || s == PL_ERR_UNSUPPORTED, "%zu bytes: %s: %s", n,
                  pl_status_name(s), pl_last_error());
        cr_assert_not_null(strstr(pl_last_error(), path), "%s", pl_last_error());
        cr_assert_null(t);
        return s;
    }
    int32_t *ids = NULL;
    size_t n_ids = 0;
    const char *text = "The cat \xF0\x9F\x90\x88 slept. 12";
    if (pl_tok_encode(t, text, strlen(text), true, &ids, &n_ids) == PL_OK) {
        char *back = NULL;
        cr_assert_eq(pl_tok_decode(t, ids, n_ids, 0, &back), PL_OK, "%s", pl_last_error());
        pl_free(back);
        pl_free(ids);
    }
    tok_ids k;
    tok_ids_find(t, &k);
    for (int it = 0; it < 20; it++) {
        int32_t seq[24];
        size_t len = tok_random_ids(t, &k, r, seq, 24);
        tok_check_stream(t, seq, len, false);
    }
    pl_tok_free(t);
    return s;
}

Test(tokenizer, hostile_files_fail_cleanly) {
    int fd = memfd_create("hostile.model", 0);
    cr_assert_geq(fd, 0, "memfd_create");
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    char src[1024];
    model_path("tok_bpe", src, sizeof src);
    size_t n = 0;
    unsigned char *good = slurp(src, &n);
    pl_test_rng r;
    pl_test_rng_seed(&r, pl_test_run_seed("hostile tokenizer files"));

    cr_assert_eq(load_hostile(fd, path, "", 0, &r), PL_ERR_FORMAT, "empty file");
    /* Truncated at every 7th byte and at each of the last 64: only cuts inside the trailing
     * optional fields can leave a loadable model. */
    int loaded = 0, tried = 0;
    for (size_t cut = 1; cut < n; cut++) {
        if (cut % 7 != 0 && cut + 64 < n) continue;
        tried++;
        loaded += load_hostile(fd, path, good, cut, &r) == PL_OK;
    }
    cr_assert_lt(loaded * 20, tried, "%d of %d truncations loaded", loaded, tried);
    /* Random bytes. */
    unsigned char *junk = malloc(n);
    for (int it = 0; it < 200; it++) {
        size_t len = 1 + pl_test_rng_below(&r, (uint32_t)n);
        for (size_t i = 0; i < len; i++) junk[i] = (unsigned char)pl_test_rng_u64(&r);
        cr_assert_eq(load_hostile(fd, path, junk, len, &r), PL_ERR_FORMAT);
    }
    /* Bit flips in a real model: may still load (a changed score or piece), must not crash. */
    int flipped_ok = 0;
    for (int it = 0; it < 300; it++) {
        memcpy(junk, good, n);
        int flips = 1 + (int)pl_test_rng_below(&r, 4);
        for (int f = 0; f < flips; f++) {
            size_t at = pl_test_rng_below(&r, (uint32_t)n);
            junk[at] ^= (unsigned char)(1u << pl_test_rng_below(&r, 8));
        }
        flipped_ok += load_hostile(fd, path, junk, n, &r) == PL_OK;
    }
    fprintf(stderr, "hostile: %d/%d truncations and %d/300 bit-flipped models loaded\n", loaded,
            tried, flipped_ok);
    free(junk);
    free(good);
    close(fd);
    PL_ASSERT_NO_LEAKS();
}

// ---- allocation failures -------------------------------------------------------------------

Test(tokenizer, every_allocation_failure_is_reported_and_leaks_nothing) {
    char path[1024];
    model_path("tok_first", path, sizeof path);
    const char *text = "Ünïcode 🐈 text";
    pl_tokenizer *t = NULL;
    int failures = 0;
    PL_ALLOC_SWEEP(failures, k, pl_tok_load(path, &t), cr_assert_null(t););
    cr_assert_gt(failures, 3);
    int32_t *ids = NULL;
    size_t n = 0;
    PL_ALLOC_SWEEP(failures, k, pl_tok_encode(t, text, strlen(text), true, &ids, &n), {});
    char *back = NULL;
    PL_ALLOC_SWEEP(failures, k, pl_tok_decode(t, ids, n, 0, &back), {});
    cr_assert_str_eq(back, text);
    pl_free(back);
    /* A failed push leaves the detok as it was: retrying gives the same stream. */
    pl_detok *d = NULL;
    cr_assert_eq(pl_detok_create(t, 0, &d), PL_OK);
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
    cr_assert_eq(len, strlen(text));
    cr_assert_eq(memcmp(all, text, len), 0);
    free(all);
    pl_detok_free(d);
    d = NULL;
    pl_free(ids);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}
