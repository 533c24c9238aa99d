/*
 * tests/fuzz/fuzz_llama2c.c - libFuzzer target: the llama2.c loaders (legacy header and
 * "ak42" versioned) on arbitrary bytes written as model.bin.
 *
 * The first byte chooses the load dtype (AUTO, F32, F16, BF16: the conversion paths); the
 * rest is the file. A load must succeed with a model whose config validates and whose every
 * tensor lies inside readable memory, or fail with a status and a message; never crash, never
 * try to allocate what the file cannot back.
 */
#include <stdint.h>

#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    pl_model_load_options opt = {.dtype = (pl_dtype)(data[0] & 3), .dummy_seed = 0};
    const char *path = fuzz_path(0, "model.bin");
    fuzz_write(path, data + 1, size - 1);
    return fuzz_check_load(path, &opt);
}
