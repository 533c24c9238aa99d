/*
 * tests/fuzz/fuzz_config_codec.h - the byte layout fuzz_config reads a pl_engine_config from,
 * shared with the seed generator so seeds decode to the configs they were made from.
 *
 * Layout (little endian, in this order; a short input reads zeros past its end):
 *   u8  model selector: 0 "dummy:tiny", 1 "", 2 NULL, 3 "dummy:nope", 4 "/nonexistent/m.bin",
 *       else "dummy:tiny"
 *   i32 weight_dtype, kv_dtype, backend, n_threads, cuda_device, block_size, max_num_blocks
 *   f64 memory_threshold
 *   u64 memory_limit_bytes
 *   u8  flags: bit 0 enable_prefix_caching, 1 enable_chunked_prefill, 2 log_preemptions
 *   i32 max_batch_size, max_num_seqs, max_total_tokens, max_model_len,
 *       long_prefill_threshold, max_skip_head
 *   f64 watermark
 *   i32 max_waiting, overflow_policy, (unused: the config's old `seed`, kept for the seeds)
 *   u64 dummy_seed
 * Then, for the run fuzz_config does on a valid config, request shapes:
 *   u8 prompt length - 1, u8 max_tokens - 1, u8 n - 1 (mod 4), u8 number of requests (mod 8)
 */
#ifndef PL_TEST_FUZZ_CONFIG_CODEC_H
#define PL_TEST_FUZZ_CONFIG_CODEC_H

#include <stdint.h>
#include <string.h>

#include "pagellm.h"

typedef struct fz_reader {
    const uint8_t *p;
    size_t n;
} fz_reader;

static inline void fz_take(fz_reader *r, void *out, size_t k) {
    memset(out, 0, k);
    size_t c = r->n < k ? r->n : k;
    memcpy(out, r->p, c);
    r->p += c;
    r->n -= c;
}

static inline int32_t fz_i32(fz_reader *r) { int32_t v; fz_take(r, &v, 4); return v; }
static inline uint64_t fz_u64(fz_reader *r) { uint64_t v; fz_take(r, &v, 8); return v; }
static inline double fz_f64(fz_reader *r) { double v; fz_take(r, &v, 8); return v; }
static inline uint8_t fz_u8(fz_reader *r) { uint8_t v; fz_take(r, &v, 1); return v; }

static inline const char *fz_model_name(uint8_t sel) {
    switch (sel) {
    case 1: return "";
    case 2: return NULL;
    case 3: return "dummy:nope";
    case 4: return "/nonexistent/m.bin";
    default: return "dummy:tiny";
    }
}

static inline void fz_decode_config(fz_reader *r, pl_engine_config *c) {
    pl_engine_config_default(c);
    c->model_path = fz_model_name(fz_u8(r));
    c->tokenizer_path = NULL;
    c->weight_dtype = (pl_dtype)fz_i32(r);
    c->kv_dtype = (pl_dtype)fz_i32(r);
    c->backend = (pl_backend_kind)fz_i32(r);
    c->n_threads = fz_i32(r);
    c->cuda_device = fz_i32(r);
    c->block_size = fz_i32(r);
    c->max_num_blocks = fz_i32(r);
    c->memory_threshold = fz_f64(r);
    c->memory_limit_bytes = (size_t)fz_u64(r);
    uint8_t f = fz_u8(r);
    c->enable_prefix_caching = f & 1;
    c->enable_chunked_prefill = (f >> 1) & 1;
    c->log_preemptions = (f >> 2) & 1;
    c->max_batch_size = fz_i32(r);
    c->max_num_seqs = fz_i32(r);
    c->max_total_tokens = fz_i32(r);
    c->max_model_len = fz_i32(r);
    c->long_prefill_threshold = fz_i32(r);
    c->max_skip_head = fz_i32(r);
    c->watermark = fz_f64(r);
    c->max_waiting = fz_i32(r);
    c->overflow_policy = (pl_overflow_policy)fz_i32(r);
    (void)fz_i32(r);
    c->dummy_seed = fz_u64(r);
}

/* The inverse, for seeds: appends the encoding of c (model selector sel) to buf (room for
 * at least 160 bytes); returns the bytes written. */
static inline size_t fz_encode_config(const pl_engine_config *c, uint8_t sel, uint8_t *buf) {
    uint8_t *p = buf;
#define FZ_PUT(v)                                                                              \
    do {                                                                                       \
        __typeof__(v) fz_v = (v);                                                              \
        memcpy(p, &fz_v, sizeof fz_v);                                                         \
        p += sizeof fz_v;                                                                      \
    } while (0)
    FZ_PUT(sel);
    FZ_PUT((int32_t)c->weight_dtype);
    FZ_PUT((int32_t)c->kv_dtype);
    FZ_PUT((int32_t)c->backend);
    FZ_PUT((int32_t)c->n_threads);
    FZ_PUT((int32_t)c->cuda_device);
    FZ_PUT((int32_t)c->block_size);
    FZ_PUT((int32_t)c->max_num_blocks);
    FZ_PUT((double)c->memory_threshold);
    FZ_PUT((uint64_t)c->memory_limit_bytes);
    FZ_PUT((uint8_t)((c->enable_prefix_caching ? 1 : 0) | (c->enable_chunked_prefill ? 2 : 0) |
                     (c->log_preemptions ? 4 : 0)));
    FZ_PUT((int32_t)c->max_batch_size);
    FZ_PUT((int32_t)c->max_num_seqs);
    FZ_PUT((int32_t)c->max_total_tokens);
    FZ_PUT((int32_t)c->max_model_len);
    FZ_PUT((int32_t)c->long_prefill_threshold);
    FZ_PUT((int32_t)c->max_skip_head);
    FZ_PUT((double)c->watermark);
    FZ_PUT((int32_t)c->max_waiting);
    FZ_PUT((int32_t)c->overflow_policy);
    FZ_PUT((int32_t)0);
    FZ_PUT((uint64_t)c->dummy_seed);
#undef FZ_PUT
    return (size_t)(p - buf);
}

#endif
