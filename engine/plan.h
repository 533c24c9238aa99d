/*
 * engine/plan.h - the step plan: what rank 0 of a tensor-parallel group tells the other ranks
 * to run, as a compact, versioned binary message (no pickling: fixed-width fields in a stated
 * order, every length checked before use).
 *
 * A message is a header and a payload. The header (pl_plan_header, 32 bytes) names the
 * command, carries the format version, a sequence number both sides count (a rank that
 * missed or repeated a message stops instead of running the wrong step), the payload's
 * length and an FNV-1a hash of it. Payloads, all integers little-endian as the machine holds
 * them (every rank of a group runs the same build on the same architecture; the version and
 * the hash catch a mismatch):
 *
 *   RUN       i32 n_seqs, n_tokens, max_query_len, max_context_len, n_sample, n_copies;
 *             i32 token_ids[n_tokens], positions[n_tokens]; i64 slots[n_tokens];
 *             i32 query_start[n_seqs + 1], context_lens[n_seqs];
 *             for each sequence its ceil(context_len / block_size) block ids (i32) only: the
 *             compact form of the block table; i32 sample_rows[n_sample];
 *             i32 copy_pairs[2 n_copies]
 *   LOGITS    i32 n_rows; i32 rows[n_rows] (prompt logprobs: more rows of the last RUN)
 *   STOP      empty: the engine is going away
 *   HEARTBEAT empty: rank 0 is alive and idle
 *
 * Decoding checks every count against the runner's limits and every id, slot, position, row
 * and block against what it indexes, so a damaged message fails with PL_ERR_FORMAT and never
 * makes a rank read or write out of bounds (tests/fuzz/fuzz_plan.c).
 */
#ifndef PL_ENGINE_PLAN_H
#define PL_ENGINE_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "engine/runner.h"

#define PL_PLAN_MAGIC 0x50544c50u /* "PLTP" */
#define PL_PLAN_VERSION 1

typedef enum pl_plan_cmd {
    PL_PLAN_RUN = 1,
    PL_PLAN_LOGITS = 2,
    PL_PLAN_STOP = 3,
    PL_PLAN_HEARTBEAT = 4,
} pl_plan_cmd;

typedef struct pl_plan_header {
    uint32_t magic;
    uint16_t version;
    uint16_t cmd;           /* pl_plan_cmd */
    uint32_t seq;           /* messages sent before this one */
    uint32_t payload_bytes;
    uint64_t hash;          /* FNV-1a of the payload */
    uint64_t reserved;      /* 0 */
} pl_plan_header;

/* What a decoded plan must fit: the runner's limits and the model's vocabulary. */
typedef struct pl_plan_limits {
    int max_tokens, max_seqs, max_blocks_per_seq, block_size, n_blocks, vocab;
} pl_plan_limits;

/* The largest payload a plan within lim can have (a receive buffer's size). */
size_t pl_plan_max_payload(const pl_plan_limits *lim);

/* A header for a payload of len bytes. */
void pl_plan_header_make(pl_plan_cmd cmd, uint32_t seq, const void *payload, size_t len,
                         pl_plan_header *out);
/* PL_ERR_FORMAT unless h is a header of this version with sequence number want_seq, a known
 * command and a payload of at most max_payload bytes (the hash is checked by
 * pl_plan_check_payload once the payload is there). */
pl_status pl_plan_check_header(const pl_plan_header *h, uint32_t want_seq, size_t max_payload);
pl_status pl_plan_check_payload(const pl_plan_header *h, const void *payload);

/* RUN: b into buf (cap bytes), *out_len the bytes written. PL_ERR_INVALID_ARGUMENT when it
 * does not fit. */
pl_status pl_plan_encode_run(const pl_runner_batch *b, int block_size, int max_blocks_per_seq,
                             void *buf, size_t cap, size_t *out_len);
/* RUN: the payload (len bytes) into st's arrays, *out pointing at them (unused block table
 * entries 0). */
pl_status pl_plan_decode_run(const void *payload, size_t len, const pl_plan_limits *lim,
                             pl_batch_storage *st, pl_runner_batch *out);
/* LOGITS: rows (n_rows) into buf. */
pl_status pl_plan_encode_rows(const int32_t *rows, int n_rows, void *buf, size_t cap,
                              size_t *out_len);
/* LOGITS: into rows (room for lim->max_seqs), *out_n of them; each row < n_tokens of the
 * last RUN (the caller checks that against its batch). */
pl_status pl_plan_decode_rows(const void *payload, size_t len, const pl_plan_limits *lim,
                              int32_t *rows, int *out_n);

#endif
