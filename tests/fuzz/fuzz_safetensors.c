/*
 * tests/fuzz/fuzz_safetensors.c - libFuzzer target: the Hugging Face loader (config.json +
 * model.safetensors in a directory).
 *
 * Input layout: byte 0 chooses the load dtype (AUTO, F32, F16, BF16); bytes 1-2 are the
 * config's length L (little endian); then L bytes of config.json, then the safetensors file.
 * When the input is too short for L, the rest is all config and the safetensors file is
 * empty. Same contract as fuzz_llama2c.
 */
#include <stdint.h>

#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 3) return 0;
    pl_model_load_options opt = {.dtype = (pl_dtype)(data[0] & 3), .dummy_seed = 0};
    size_t L = (size_t)data[1] | (size_t)data[2] << 8;
    data += 3;
    size -= 3;
    if (L > size) L = size;
    fuzz_write(fuzz_path(0, "config.json"), data, L);
    fuzz_write(fuzz_path(1, "model.safetensors"), data + L, size - L);
    return fuzz_check_load(fuzz_dir(), &opt);
}
