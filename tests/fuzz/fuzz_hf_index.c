/*
 * tests/fuzz/fuzz_hf_index.c - libFuzzer target: a sharded Hugging Face directory, i.e.
 * config.json + model.safetensors.index.json + the shards it names (model/load_hf.c,
 * load_index: weight_map parsing, shard-name checks, mapping each shard once, and every entry
 * against the tensors its shard holds).
 *
 * Input layout: byte 0: bits 0-1 the load dtype (AUTO, F32, F16, BF16), bit 2 load through the
 * index file's path instead of the directory; then four u16 lengths (little endian): config.json
 * C, the index I, shard 1 S1, shard 2 S2; then C bytes of config.json, I bytes of index, S1 and
 * S2 bytes of the shards model-00001-of-00003.safetensors and model-00002-of-00003.safetensors,
 * and the rest is model-00003-of-00003.safetensors. A length past the end of the input takes
 * what is left (later files are then empty). The seeds (fuzz_seeds.c) are three-shard models
 * written by the loader tests' writer, so the shard names in their indexes are these. Same
 * contract as fuzz_llama2c: a failed load leaves no model and names the problem.
 */
#include <stdbool.h>
#include <stdint.h>

#include "fuzz_util.h"

#define N_SHARDS 3

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_index[128], g_shards[N_SHARDS][128];

/* The files this target writes beyond fuzz_util.h's list; runs before fuzz_util.h's cleanup
 * (registered after it), which then removes the directory. */
static void cleanup_index_files(void) {
    unlink(g_index);
    for (int k = 0; k < N_SHARDS; k++) unlink(g_shards[k]);
}

static size_t take(const uint8_t **data, size_t *size, size_t want) {
    size_t n = want < *size ? want : *size;
    *data += n;
    *size -= n;
    return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    enum { HEADER = 1 + 2 * (N_SHARDS + 1) };
    if (size < HEADER) return 0;
    if (!g_index[0]) {
        snprintf(g_index, sizeof g_index, "%s/model.safetensors.index.json", fuzz_dir());
        for (int k = 0; k < N_SHARDS; k++)
            snprintf(g_shards[k], sizeof g_shards[k], "%s/model-%05d-of-%05d.safetensors",
                     fuzz_dir(), k + 1, N_SHARDS);
        atexit(cleanup_index_files);
    }
    pl_model_load_options opt = {.dtype = (pl_dtype)(data[0] & 3), .dummy_seed = 0};
    bool via_index = data[0] & 4;
    size_t len[N_SHARDS + 1];
    for (int k = 0; k < N_SHARDS + 1; k++)
        len[k] = (size_t)data[1 + 2 * k] | (size_t)data[2 + 2 * k] << 8;
    data += HEADER;
    size -= HEADER;

    const uint8_t *p = data;
    size_t n = take(&data, &size, len[0]);
    fuzz_write(fuzz_path(0, "config.json"), p, n);
    p = data;
    n = take(&data, &size, len[1]);
    fuzz_write(g_index, p, n);
    for (int k = 0; k < N_SHARDS; k++) {
        p = data;
        n = k + 1 < N_SHARDS ? take(&data, &size, len[k + 2]) : take(&data, &size, size);
        fuzz_write(g_shards[k], p, n);
    }

    return fuzz_check_load(via_index ? g_index : fuzz_dir(), &opt);
}
