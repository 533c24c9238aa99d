/*
 * tests/fuzz/fuzz_gguf.c - libFuzzer target: GGUF files, as a model and as a tokenizer.
 *
 * The first byte chooses the load dtype (bits 0-1: AUTO, F32, F16, BF16); the rest is the
 * file, written as model.gguf. The model loader must give a model whose every tensor is
 * readable and shaped as its config says, or fail with a message; then the tokenizer loader
 * reads the same file's metadata and, when it succeeds, encodes and decodes a fixed text
 * (special tokens parsed) and checks that the decode is a proper string. Neither may crash,
 * leak, or allocate what the file cannot back.
 */
#include <stdint.h>

#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"
#include "util/alloc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_tokenizer(const char *path) {
    pl_tokenizer *t = NULL;
    pl_status s = pl_tok_load(path, &t);
    if (s != PL_OK) {
        if (t != NULL || pl_last_error()[0] == '\0') {
            fprintf(stderr, "fuzz: failed tokenizer load left a tokenizer or no message\n");
            abort();
        }
        return;
    }
    static const char text[] = "Hello <s> world, caf\xC3\xA9 12345 \xF0\x9F\x90\x88!\n";
    int32_t *ids = NULL;
    size_t n = 0;
    if (pl_tok_encode(t, text, sizeof text - 1, PL_TOK_ADD_SPECIAL | PL_TOK_PARSE_SPECIAL, &ids,
                      &n) == PL_OK) {
        char *out = NULL;
        if (pl_tok_decode(t, ids, n, 0, &out) == PL_OK) {
            if (strlen(out) > 64 * (n + 1) * 16) abort(); /* reads the whole string */
            pl_free(out);
        }
        pl_free(ids);
    }
    pl_tok_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    pl_model_load_options opt = {.dtype = (pl_dtype)(data[0] & 3), .dummy_seed = 0};
    const char *path = fuzz_path(0, "model.gguf");
    fuzz_write(path, data + 1, size - 1);
    fuzz_check_load(path, &opt);
    check_tokenizer(path);
    return 0;
}
