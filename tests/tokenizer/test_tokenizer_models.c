/*
 * tests/tokenizer/test_tokenizer_models.c - the tokenizer on the shared real tokenizers in
 * $PAGELLM_TEST_MODELS (linked with models_main.c: the binary exits 77, SKIP, without it).
 *
 * Facts asserted come from ../shared/models/README.md (tok512: 512 pieces, <unk>/<s>/</s> at
 * 0/1/2, byte pieces <0x00>..<0xFF> at 3..258; tokenizer.model: the Llama tokenizer, 32000
 * pieces, same layout) and from the Llama tokenizer's widely published ids: "Hello world"
 * with BOS is [1, 15043, 3186], "\n" is the byte piece 13, "▁" alone is 29871.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "test_support.h"
#include "tok_check.h"
#include "tokenizer/spm.h"
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

static void check_layout(const pl_tokenizer *t, int vocab) {
    cr_assert_eq(pl_tok_vocab_size(t), vocab);
    cr_assert_eq(pl_tok_bos_id(t), 1);
    cr_assert_eq(pl_tok_eos_id(t), 2);
    cr_assert_str_eq(pl_tok_piece(t, 0), "<unk>");
    cr_assert_str_eq(pl_tok_piece(t, 1), "<s>");
    cr_assert_str_eq(pl_tok_piece(t, 2), "</s>");
    for (int b = 0; b < 256; b++) {
        char want[8];
        snprintf(want, sizeof want, "<0x%02X>", b);
        cr_assert_str_eq(pl_tok_piece(t, 3 + b), want);
        const pl_tok_entry *e = pl_tok_entry_of(t, 3 + b);
        cr_assert_eq(e->kind, PL_TOK_KIND_BYTE);
        cr_assert_eq(e->byte, b);
    }
    cr_assert_eq(pl_tok_entry_of(t, 0)->kind, PL_TOK_KIND_UNKNOWN);
    cr_assert_eq(pl_tok_entry_of(t, 1)->kind, PL_TOK_KIND_CONTROL);
    cr_assert_eq(pl_tok_entry_of(t, 2)->kind, PL_TOK_KIND_CONTROL);
    cr_assert_null(pl_tok_piece(t, vocab));
}

static void round_trip(const pl_tokenizer *t, const char *text) {
    int32_t *ids = NULL;
    size_t n = 0;
    cr_assert_eq(pl_tok_encode(t, text, strlen(text), true, &ids, &n), PL_OK, "%s",
                 pl_last_error());
    cr_assert_eq(ids[0], 1);
    char *back = NULL;
    cr_assert_eq(pl_tok_decode(t, ids, n, 0, &back), PL_OK);
    cr_assert_str_eq(back, text);
    tok_check_stream(t, ids, n, true);
    pl_free(back);
    pl_free(ids);
}

static void random_streams(const pl_tokenizer *t, uint64_t seed, int count) {
    tok_ids k;
    tok_ids_find(t, &k);
    pl_test_rng r;
    pl_test_rng_seed(&r, seed);
    int32_t *ctx = NULL;
    size_t n_ctx = 0;
    cr_assert_eq(pl_tok_encode(t, "Once upon a time", 16, true, &ctx, &n_ctx), PL_OK);
    for (int it = 0; it < count; it++) {
        int32_t ids[48];
        size_t n = tok_random_ids(t, &k, &r, ids, 48);
        tok_check_stream(t, ids, n, it < count / 3);
        tok_check_stream_after(t, ctx, n_ctx, ids, n);
    }
    pl_free(ctx);
}

Test(tok512, layout_matches_the_readme) {
    pl_tokenizer *t = load_shared("tok512.model");
    check_layout(t, 512);
    /* README: add_dummy_prefix and remove_extra_whitespaces are both on. */
    cr_assert_eq(pl_tok_ws_rule_of(t), PL_TOK_WS_ALL);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

Test(tok512, round_trips_and_streams) {
    pl_tokenizer *t = load_shared("tok512.model");
    round_trip(t, "Once upon a time, there was a little girl named Lily.");
    round_trip(t, "She saw a big dog. The dog said: \"Woof!\" 123");
    round_trip(t, "Héllo wörld — 日本語 🐈 ✓");
    random_streams(t, pl_test_run_seed("tok512 streams"), 300);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

Test(llama, layout_and_published_ids) {
    pl_tokenizer *t = load_shared("tokenizer.model");
    check_layout(t, 32000);
    int32_t *ids = NULL;
    size_t n = 0;
    cr_assert_eq(pl_tok_encode(t, "Hello world", 11, true, &ids, &n), PL_OK);
    cr_assert_eq(n, 3);
    cr_assert_eq(ids[0], 1);
    cr_assert_eq(ids[1], 15043);
    cr_assert_eq(ids[2], 3186);
    cr_assert_str_eq(pl_tok_piece(t, 15043), "\xE2\x96\x81Hello");
    cr_assert_str_eq(pl_tok_piece(t, 3186), "\xE2\x96\x81world");
    cr_assert_str_eq(pl_tok_piece(t, 29871), "\xE2\x96\x81");
    char *s = NULL;
    cr_assert_eq(pl_tok_decode(t, ids, n, 0, &s), PL_OK);
    cr_assert_str_eq(s, "Hello world");
    pl_free(s);
    pl_free(ids);
    /* A newline is the byte piece <0x0A> = 13 (no "\n" piece in the Llama vocabulary). */
    cr_assert_eq(pl_tok_encode(t, "a\nb", 3, false, &ids, &n), PL_OK);
    bool has_13 = false;
    for (size_t i = 0; i < n; i++) has_13 |= ids[i] == 13;
    cr_assert(has_13);
    pl_free(ids);
    /* Llama: add_dummy_prefix on, remove_extra_whitespaces off: only the first "▁" goes. */
    cr_assert_eq(pl_tok_ws_rule_of(t), PL_TOK_WS_FIRST);
    int32_t two[] = {29871, 15043};
    cr_assert_eq(pl_tok_decode(t, two, 2, 0, &s), PL_OK);
    cr_assert_str_eq(s, " Hello");
    pl_free(s);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}

Test(llama, round_trips_and_streams) {
    pl_tokenizer *t = load_shared("tokenizer.model");
    round_trip(t, "The quick brown fox jumps over the lazy dog.");
    round_trip(t, "  Indented line\n\tand a tab, then   three spaces.\n");
    round_trip(t, "Ça va? Grüße aus Zürich — 東京タワー 🗼 👩‍💻 ∑x² ≤ 10¹⁰");
    random_streams(t, pl_test_run_seed("llama streams"), 300);
    pl_tok_free(t);
    PL_ASSERT_NO_LEAKS();
}
