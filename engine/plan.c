/*
 * engine/plan.c - encoding and decoding the step plan (engine/plan.h has the format).
 *
 * The writer and the reader walk the same fields in the same order through a cursor; the
 * reader checks the cursor against the payload's end before every read, then every value
 * against what it will index.
 */
#include "engine/plan.h"

#include <string.h>

static uint64_t fnv1a(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* ---- header ---------------------------------------------------------------------------- */

void pl_plan_header_make(pl_plan_cmd cmd, uint32_t seq, const void *payload, size_t len,
                         pl_plan_header *out) {
    *out = (pl_plan_header){.magic = PL_PLAN_MAGIC, .version = PL_PLAN_VERSION,
                            .cmd = (uint16_t)cmd, .seq = seq, .payload_bytes = (uint32_t)len,
                            .hash = fnv1a(payload, len)};
}

pl_status pl_plan_check_header(const pl_plan_header *h, uint32_t want_seq, size_t max_payload) {
    if (h->magic != PL_PLAN_MAGIC)
        return pl_fail(PL_ERR_FORMAT, "step plan: bad magic %08x", (unsigned)h->magic);
    if (h->version != PL_PLAN_VERSION)
        return pl_fail(PL_ERR_FORMAT, "step plan: version %u, this build reads version %d (run "
                       "the same pagellm on every rank)", (unsigned)h->version, PL_PLAN_VERSION);
    if (h->cmd < PL_PLAN_RUN || h->cmd > PL_PLAN_HEARTBEAT || h->reserved != 0)
        return pl_fail(PL_ERR_FORMAT, "step plan: unknown command %u", (unsigned)h->cmd);
    if (h->seq != want_seq)
        return pl_fail(PL_ERR_FORMAT, "step plan: message %u arrived where %u was expected",
                       (unsigned)h->seq, (unsigned)want_seq);
    if (h->payload_bytes > max_payload)
        return pl_fail(PL_ERR_FORMAT, "step plan: %u payload bytes, at most %zu fit the limits",
                       (unsigned)h->payload_bytes, max_payload);
    if ((h->cmd == PL_PLAN_STOP || h->cmd == PL_PLAN_HEARTBEAT) && h->payload_bytes != 0)
        return pl_fail(PL_ERR_FORMAT, "step plan: command %u carries %u bytes", (unsigned)h->cmd,
                       (unsigned)h->payload_bytes);
    return PL_OK;
}

pl_status pl_plan_check_payload(const pl_plan_header *h, const void *payload) {
    if (fnv1a(payload, h->payload_bytes) != h->hash)
        return pl_fail(PL_ERR_FORMAT, "step plan: payload of message %u does not match its hash",
                       (unsigned)h->seq);
    return PL_OK;
}

/* ---- the cursor ------------------------------------------------------------------------- */

typedef struct cursor {
    unsigned char *p; /* writing */
    const unsigned char *r; /* reading */
    size_t at, cap;
    bool over;
} cursor;

static void put(cursor *c, const void *src, size_t n) {
    if (c->over || n > c->cap - c->at) {
        c->over = true;
        return;
    }
    if (n) memcpy(c->p + c->at, src, n);
    c->at += n;
}

static bool get(cursor *c, void *dst, size_t n) {
    if (c->over || n > c->cap - c->at) {
        c->over = true;
        return false;
    }
    if (n) memcpy(dst, c->r + c->at, n);
    c->at += n;
    return true;
}

static void put_i32(cursor *c, int32_t v) { put(c, &v, sizeof v); }

static bool get_i32(cursor *c, int32_t *v) { return get(c, v, sizeof *v); }

static int blocks_of(int context_len, int block_size) {
    return (context_len + block_size - 1) / block_size;
}

size_t pl_plan_max_payload(const pl_plan_limits *lim) {
    size_t T = (size_t)lim->max_tokens, S = (size_t)lim->max_seqs;
    size_t B = (size_t)lim->max_blocks_per_seq;
    size_t run = 6 * 4 + T * (4 + 4 + 8) + (S + 1) * 4 + S * 4 + S * B * 4 + S * 4 + 2 * S * 4;
    size_t rows = 4 + S * 4;
    return run > rows ? run : rows;
}

/* ---- RUN -------------------------------------------------------------------------------- */

pl_status pl_plan_encode_run(const pl_runner_batch *b, int block_size, int max_blocks_per_seq,
                             void *buf, size_t cap, size_t *out_len) {
    cursor c = {.p = buf, .cap = cap};
    int32_t head[6] = {b->n_seqs, b->n_tokens, b->max_query_len, b->max_context_len,
                       b->n_sample, b->n_copies};
    put(&c, head, sizeof head);
    size_t T = (size_t)b->n_tokens;
    put(&c, b->token_ids, T * sizeof *b->token_ids);
    put(&c, b->positions, T * sizeof *b->positions);
    put(&c, b->slots, T * sizeof *b->slots);
    put(&c, b->query_start, ((size_t)b->n_seqs + 1) * sizeof *b->query_start);
    put(&c, b->context_lens, (size_t)b->n_seqs * sizeof *b->context_lens);
    for (int s = 0; s < b->n_seqs; s++)
        put(&c, b->block_tables + (size_t)s * (size_t)max_blocks_per_seq,
            (size_t)blocks_of(b->context_lens[s], block_size) * sizeof(int32_t));
    put(&c, b->sample_rows, (size_t)b->n_sample * sizeof *b->sample_rows);
    put(&c, b->copy_pairs, 2 * (size_t)b->n_copies * sizeof *b->copy_pairs);
    if (c.over)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "step plan: a batch of %d tokens, %d sequences "
                       "does not fit %zu bytes", b->n_tokens, b->n_seqs, cap);
    *out_len = c.at;
    return PL_OK;
}

#define BAD(...) pl_fail(PL_ERR_FORMAT, "step plan: " __VA_ARGS__)

/* Reads n int32 into dst, each in [lo, hi). */
static pl_status get_ids(cursor *c, int32_t *dst, size_t n, int64_t lo, int64_t hi,
                         const char *what) {
    if (!get(c, dst, n * sizeof *dst)) return BAD("truncated in %s", what);
    for (size_t i = 0; i < n; i++)
        if (dst[i] < lo || dst[i] >= hi)
            return BAD("%s[%zu] = %d outside [%lld, %lld)", what, i, (int)dst[i], (long long)lo,
                       (long long)hi);
    return PL_OK;
}

pl_status pl_plan_decode_run(const void *payload, size_t len, const pl_plan_limits *lim,
                             pl_batch_storage *st, pl_runner_batch *out) {
    cursor c = {.r = payload, .cap = len};
    int32_t h[6];
    if (!get(&c, h, sizeof h)) return BAD("truncated RUN header");
    int S = h[0], T = h[1], mq = h[2], mc = h[3], ns = h[4], nc = h[5];
    int B = lim->max_blocks_per_seq, bs = lim->block_size;
    if (S < 1 || S > lim->max_seqs || T < 1 || T > lim->max_tokens || ns < 0 ||
        ns > lim->max_seqs || nc < 0 || nc > lim->max_seqs)
        return BAD("%d sequences, %d tokens, %d samples, %d copies outside the limits (%d "
                   "sequences, %d tokens)", S, T, ns, nc, lim->max_seqs, lim->max_tokens);
    int64_t n_slots = (int64_t)lim->n_blocks * bs, max_ctx = (int64_t)B * bs;
    PL_TRY(get_ids(&c, st->token_ids, (size_t)T, 0, lim->vocab, "token_ids"));
    PL_TRY(get_ids(&c, st->positions, (size_t)T, 0, max_ctx, "positions"));
    if (!get(&c, st->slots, (size_t)T * sizeof *st->slots)) return BAD("truncated in slots");
    for (int i = 0; i < T; i++)
        if (st->slots[i] < -1 || st->slots[i] >= n_slots)
            return BAD("slots[%d] = %lld outside [-1, %lld)", i, (long long)st->slots[i],
                       (long long)n_slots);
    PL_TRY(get_ids(&c, st->query_start, (size_t)S + 1, 0, (int64_t)T + 1, "query_start"));
    PL_TRY(get_ids(&c, st->context_lens, (size_t)S, 1, max_ctx + 1, "context_lens"));
    if (st->query_start[0] != 0 || st->query_start[S] != T)
        return BAD("query_start runs from %d to %d over %d tokens", (int)st->query_start[0],
                   (int)st->query_start[S], T);
    int max_q = 0, max_c = 0;
    for (int s = 0; s < S; s++) {
        int q = st->query_start[s + 1] - st->query_start[s];
        if (q < 1 || q > st->context_lens[s])
            return BAD("sequence %d has %d query rows and a context of %d", s, q,
                       (int)st->context_lens[s]);
        if (q > max_q) max_q = q;
        if (st->context_lens[s] > max_c) max_c = st->context_lens[s];
        int nb = blocks_of(st->context_lens[s], bs);
        int32_t *row = st->block_tables + (size_t)s * (size_t)B;
        PL_TRY(get_ids(&c, row, (size_t)nb, 0, lim->n_blocks, "block_tables"));
        memset(row + nb, 0, (size_t)(B - nb) * sizeof *row);
    }
    if (mq != max_q || mc != max_c)
        return BAD("max_query_len %d / max_context_len %d, the sequences give %d / %d", mq, mc,
                   max_q, max_c);
    PL_TRY(get_ids(&c, st->sample_rows, (size_t)ns, 0, T, "sample_rows"));
    PL_TRY(get_ids(&c, st->copy_pairs, 2 * (size_t)nc, 0, lim->n_blocks, "copy_pairs"));
    if (c.at != len) return BAD("%zu bytes left over after a RUN", len - c.at);
    *out = (pl_runner_batch){
        .n_seqs = S, .n_tokens = T, .max_query_len = mq, .max_context_len = mc,
        .n_sample = ns, .n_copies = nc,
#define PTR(name, type, dev, cap, used) .name = st->name,
        PL_BATCH_ARRAYS(PTR)
#undef PTR
    };
    return PL_OK;
}

/* ---- LOGITS ----------------------------------------------------------------------------- */

pl_status pl_plan_encode_rows(const int32_t *rows, int n_rows, void *buf, size_t cap,
                              size_t *out_len) {
    cursor c = {.p = buf, .cap = cap};
    put_i32(&c, n_rows);
    put(&c, rows, (size_t)n_rows * sizeof *rows);
    if (c.over) return pl_fail(PL_ERR_INVALID_ARGUMENT, "step plan: %d rows do not fit", n_rows);
    *out_len = c.at;
    return PL_OK;
}

pl_status pl_plan_decode_rows(const void *payload, size_t len, const pl_plan_limits *lim,
                              int32_t *rows, int *out_n) {
    cursor c = {.r = payload, .cap = len};
    int32_t n;
    if (!get_i32(&c, &n)) return BAD("truncated LOGITS");
    if (n < 1 || n > lim->max_seqs) return BAD("%d logit rows (1 .. %d)", n, lim->max_seqs);
    PL_TRY(get_ids(&c, rows, (size_t)n, 0, lim->max_tokens, "rows"));
    if (c.at != len) return BAD("%zu bytes left over after LOGITS", len - c.at);
    *out_n = n;
    return PL_OK;
}
