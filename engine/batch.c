/*
 * engine/batch.c - the scheduler's output as one runner batch: every scheduled token's id,
 * position and KV slot, each sequence's query start, context length and block table, the rows
 * whose logits are sampled, and the copy-on-write block copies. The arrays are the ones
 * PL_BATCH_ARRAYS (engine/runner.h) lists, in sb.batch, sized at create for the largest step.
 */
#include <string.h>

#include "engine/engine_internal.h"

void pl_batch_build(pl_engine *e, const pl_sched_output *so, pl_runner_batch *b) {
    pl_batch_storage *st = &e->sb.batch;
    int bs = e->cfg.block_size, mb = e->max_blocks_per_seq, t = 0, n_sample = 0;
    int max_q = 0, max_ctx = 0;
    for (int i = 0; i < so->n_seqs; i++) {
        const pl_sched_entry *en = &so->entries[i];
        const pl_seq *q = en->seq;
        st->query_start[i] = t;
        for (int j = 0; j < en->n_new; j++, t++) {
            int pos = en->start + j;
            st->token_ids[t] = q->tokens[pos];
            st->positions[t] = pos;
            st->slots[t] = pl_kv_slot(&q->kv, bs, pos);
        }
        st->context_lens[i] = en->start + en->n_new;
        int32_t *row = st->block_tables + (size_t)i * mb;
        memcpy(row, q->kv.block_ids, (size_t)q->kv.n_blocks * sizeof *row);
        memset(row + q->kv.n_blocks, 0, (size_t)(mb - q->kv.n_blocks) * sizeof *row);
        if (en->samples) {
            st->sample_rows[n_sample] = t - 1;
            e->sb.sample_entry[n_sample++] = i;
        }
        if (en->n_new > max_q) max_q = en->n_new;
        if (st->context_lens[i] > max_ctx) max_ctx = st->context_lens[i];
    }
    st->query_start[so->n_seqs] = t;
    for (int i = 0; i < so->n_copies; i++) {
        st->copy_pairs[2 * i] = so->copies[i].src;
        st->copy_pairs[2 * i + 1] = so->copies[i].dst;
    }
    *b = (pl_runner_batch){
        .n_seqs = so->n_seqs, .n_tokens = t, .max_query_len = max_q, .max_context_len = max_ctx,
        .n_sample = n_sample, .n_copies = so->n_copies,
#define POINT(name, type, dev, cap, used) .name = st->name,
        PL_BATCH_ARRAYS(POINT)
#undef POINT
    };
}
