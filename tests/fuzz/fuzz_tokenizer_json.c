/*
 * tests/fuzz/fuzz_tokenizer_json.c - libFuzzer target: pl_tok_load on arbitrary bytes as a
 * Hugging Face tokenizer.json, then, if it loads, encode (with and without special tokens
 * added and parsed) and decode of a few texts, and the streaming detokeniser on the encoded
 * ids and on a sample of every id, held to pl_tok_decode.
 *
 * Seeds (scripts/fuzz.sh): the committed tokenizers of tests/data (tok512_hf, tok512_meta) and
 * the small ones in tests/fuzz/tokenizer_json/, which between them use every component the
 * loader supports. What must hold: a load either fails with a status and a message, or yields
 * a tokenizer whose ids are in range, whose decode succeeds and whose stream concatenates to
 * its decode.
 */
#include <stdint.h>

#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"
#include "util/alloc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what) {
    fprintf(stderr, "fuzz: %s (%s)\n", what, pl_last_error());
    abort();
}

/* Streams ids and checks the text against decode. */
static void stream(const pl_tokenizer *t, const int32_t *ids, size_t n, unsigned flags) {
    pl_detok *d = NULL;
    if (pl_detok_create(t, flags, &d) != PL_OK) return;
    for (size_t i = 0; i < n; i++) {
        const char *piece;
        size_t k;
        if (pl_detok_push(d, ids[i], &piece, &k) != PL_OK) fail("push of an id in range failed");
    }
    char *want = NULL;
    if (pl_tok_decode(t, ids, n, flags & PL_TOK_SKIP_SPECIAL, &want) != PL_OK) fail("decode");
    size_t len;
    const char *got = pl_detok_text(d, &len);
    if (!(flags & PL_TOK_AFTER_PROMPT) && (strlen(want) != len || strcmp(want, got) != 0)) {
        fprintf(stderr, "fuzz: streamed \"%s\", decode gives \"%s\"\n", got, want);
        abort();
    }
    pl_free(want);
    pl_detok_free(d);
}

static void exercise(const pl_tokenizer *t) {
    static const char *texts[] = {"Once upon a time", "", " 12345 h\xc3\xa9llo \xe2\x9c\x93",
                                  "<s></s><unk>\n\t  x", "<|im_start|>user\nhi<|im_end|>",
                                  "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9 \xE4\xBD\xA0 A\xCC\x8A"};
    static const unsigned flags[] = {0, PL_TOK_ADD_SPECIAL | PL_TOK_PARSE_SPECIAL};
    int nv = pl_tok_vocab_size(t);
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        for (size_t f = 0; f < 2; f++) {
            int32_t *ids = NULL;
            size_t n = 0;
            if (pl_tok_encode(t, texts[i], strlen(texts[i]), flags[f], &ids, &n) != PL_OK)
                continue; /* a damaged regex may hit its match limit: an error, not a crash */
            for (size_t k = 0; k < n; k++)
                if (ids[k] < 0 || ids[k] >= nv) {
                    fprintf(stderr, "fuzz: encode gave id %d outside [0, %d)\n", ids[k], nv);
                    abort();
                }
            stream(t, ids, n, 0);
            stream(t, ids, n, PL_TOK_SKIP_SPECIAL);
            pl_free(ids);
        }
    }
    /* every id (sampled for big vocabularies), in one stream */
    size_t step = nv > 2048 ? (size_t)nv / 2048 : 1, n = 0;
    int32_t *all = pl_malloc(((size_t)nv / step + 1) * sizeof *all);
    if (!all) return;
    for (size_t id = 0; id < (size_t)nv; id += step) all[n++] = (int32_t)id;
    stream(t, all, n, 0);
    stream(t, all, n, PL_TOK_AFTER_PROMPT | PL_TOK_SKIP_SPECIAL);
    pl_free(all);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_path(0, "tokenizer.json");
    fuzz_write(path, data, size);
    pl_tokenizer *t = NULL;
    pl_status s = pl_tok_load(path, &t);
    if (s == PL_OK) {
        exercise(t);
        pl_tok_free(t);
    } else if (t != NULL || pl_last_error()[0] == '\0') {
        fprintf(stderr, "fuzz: failed load left a tokenizer or no message (%s)\n",
                pl_status_name(s));
        abort();
    }
    return 0;
}
