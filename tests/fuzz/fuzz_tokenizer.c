/*
 * tests/fuzz/fuzz_tokenizer.c - libFuzzer target: pl_tok_load on arbitrary bytes (a
 * SentencePiece model file), then, if it loads, encode/decode/streaming decode of a few
 * texts and of every piece id, which walks the tables the loader built.
 *
 * The bytes are parsed by the sentencepiece library (not instrumented: coverage comes from
 * our shim and tables); what must hold is that a load either fails with a status and a
 * message or yields a tokenizer whose every call is safe.
 */
#include <stdint.h>

#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"
#include "util/alloc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void exercise(pl_tokenizer *t) {
    static const char *texts[] = {"Once upon a time", "", " 12345 h\xc3\xa9llo \xe2\x9c\x93",
                                  "<s></s><unk>\n\t  x"};
    int nv = pl_tok_vocab_size(t);
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        if (pl_tok_encode(t, texts[i], strlen(texts[i]), true, &ids, &n) == PL_OK) {
            for (size_t k = 0; k < n; k++)
                if (ids[k] < 0 || ids[k] >= nv) {
                    fprintf(stderr, "fuzz: encode gave id %d outside [0, %d)\n", ids[k], nv);
                    abort();
                }
            char *text = NULL;
            if (pl_tok_decode(t, ids, n, 0, &text) == PL_OK) pl_free(text);
            pl_free(ids);
        }
    }
    /* every id through the streaming detokeniser (bounded: big vocabularies are sampled) */
    pl_detok *d = NULL;
    if (pl_detok_create(t, PL_TOK_AFTER_PROMPT, &d) != PL_OK) return;
    int step = nv > 4096 ? nv / 4096 : 1;
    for (int id = 0; id < nv; id += step) {
        const char *piece;
        size_t n;
        if (pl_detok_push(d, id, &piece, &n) != PL_OK) break;
    }
    pl_detok_free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_path(0, "tok.model");
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
