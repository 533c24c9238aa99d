/*
 * tests/fuzz/fuzz_plan.c - libFuzzer target: the step plan's decoders (engine/plan.c) on
 * arbitrary payloads, as a rank other than 0 would meet a damaged message.
 *
 * Input: one byte choosing RUN (even) or LOGITS (odd), then the payload (the header's hash is
 * not checked here, so the fuzzer reaches the fields). Limits: 64 tokens, 8 sequences, 16
 * blocks per sequence of 4 tokens, 40 blocks, a vocabulary of 100.
 *
 * Contract: a decoder returns PL_OK or PL_ERR_FORMAT with a message; an accepted RUN has every
 * count, id, position, slot, block, row and pair inside what it indexes, and encodes back to
 * the same bytes (nothing is accepted that the encoder would write differently).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what) {
    fprintf(stderr, "fuzz_plan: %s (%s)\n", what, pl_last_error());
    abort();
}

static const pl_plan_limits lim = {.max_tokens = 64, .max_seqs = 8, .max_blocks_per_seq = 16,
                                   .block_size = 4, .n_blocks = 40, .vocab = 100};

static void check_run(const pl_runner_batch *b) {
    int T = b->n_tokens, S = b->n_seqs;
    if (T < 1 || T > lim.max_tokens || S < 1 || S > lim.max_seqs) fail("counts");
    for (int i = 0; i < T; i++)
        if (b->token_ids[i] < 0 || b->token_ids[i] >= lim.vocab || b->positions[i] < 0 ||
            b->slots[i] < -1 || b->slots[i] >= (int64_t)lim.n_blocks * lim.block_size)
            fail("token row");
    if (b->query_start[0] != 0 || b->query_start[S] != T) fail("query_start");
    for (int s = 0; s < S; s++) {
        if (b->query_start[s + 1] <= b->query_start[s]) fail("query rows");
        if (b->context_lens[s] > lim.max_blocks_per_seq * lim.block_size) fail("context");
        for (int k = 0; k < lim.max_blocks_per_seq; k++) {
            int32_t id = b->block_tables[s * lim.max_blocks_per_seq + k];
            if (id < 0 || id >= lim.n_blocks) fail("block id");
        }
    }
    for (int i = 0; i < b->n_sample; i++)
        if (b->sample_rows[i] < 0 || b->sample_rows[i] >= T) fail("sample row");
    for (int i = 0; i < 2 * b->n_copies; i++)
        if (b->copy_pairs[i] < 0 || b->copy_pairs[i] >= lim.n_blocks) fail("copy pair");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    void *copy = malloc(n ? n : 1); /* exact size: ASan sees any read past the payload */
    if (!copy) return 0;
    memcpy(copy, p, n);
    if (data[0] % 2 == 0) {
        pl_runner_limits rl = {.max_tokens = lim.max_tokens, .max_seqs = lim.max_seqs,
                               .max_blocks_per_seq = lim.max_blocks_per_seq,
                               .block_size = lim.block_size, .n_blocks = lim.n_blocks};
        pl_batch_storage st;
        if (pl_batch_storage_alloc(&st, &rl) != PL_OK) fail("storage");
        pl_runner_batch b;
        pl_status s = pl_plan_decode_run(copy, n, &lim, &st, &b);
        if (s == PL_OK) {
            check_run(&b);
            size_t cap = pl_plan_max_payload(&lim), len = 0;
            unsigned char *again = malloc(cap);
            if (!again) fail("out of memory");
            if (pl_plan_encode_run(&b, lim.block_size, lim.max_blocks_per_seq, again, cap,
                                   &len) != PL_OK)
                fail("an accepted plan does not encode");
            if (len != n || memcmp(again, copy, n) != 0) fail("encode(decode(x)) != x");
            free(again);
        } else if (s != PL_ERR_FORMAT || !pl_last_error()[0]) {
            fail("decode_run: bad refusal");
        }
        pl_batch_storage_free(&st);
    } else {
        int32_t rows[8];
        int k = 0;
        pl_status s = pl_plan_decode_rows(copy, n, &lim, rows, &k);
        if (s == PL_OK) {
            if (k < 1 || k > lim.max_seqs) fail("row count");
            for (int i = 0; i < k; i++)
                if (rows[i] < 0 || rows[i] >= lim.max_tokens) fail("row");
        } else if (s != PL_ERR_FORMAT || !pl_last_error()[0]) {
            fail("decode_rows: bad refusal");
        }
    }
    free(copy);
    return 0;
}
