/*
 * tests/kvcache/test_kv_property.c - a randomized property test of the KV cache manager.
 *
 * Many sequences over a small pool go through random interleaved operations: admit (prefix
 * lookup + take + allocate the rest), append (decode or a chunk), fork, free, bare lookups,
 * registration with partial progress, and the occasional reset. Next to the pool the test
 * simulates the backend's KV memory: one 64-bit value per slot, (n_blocks, block_size). A
 * "computed" position p of a sequence holds kv(p) = a hash of the sequence's tokens 0..p (what
 * real K/V depend on), and copy-on-write pairs are copied block-wise as the backend would.
 *
 * After every call into the manager: pl_kv_check against the live tables. After every
 * operation: every live sequence reads back exactly its own kv(p) at every position through its
 * block table. That one check covers sharing (a prefix hit handing out wrong KV, a collision
 * sharing a block), copy-on-write (a missing or wrong copy) and writes into shared blocks;
 * each write also asserts its block has one owner and no registration. Prefix hits are also
 * compared token by token with the stored block tokens. At the end everything is freed and the
 * pool must be whole.
 *
 * Runs: fixed seeds in several shapes (block_size 1 with a colliding hash, caching off, ...)
 * plus one seed per run from pl_test_run_seed, printed, replayable with PL_TEST_SEED=...
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "kv_test.h"
#include "test_support.h"

enum { MAX_SEQS = 10, MAX_TOKENS = 64, N_BASES = 4, ALPHABET = 3 };

typedef struct prop_cfg {
    uint64_t seed;
    int block_size;
    int n_blocks;
    bool prefix_caching;
    bool weak_hash; /* weak_hash() below: collisions everywhere */
    int n_ops;
} prop_cfg;

typedef struct seq {
    bool live;
    pl_kv_table t;
    int32_t tokens[MAX_TOKENS]; /* (t.n_tokens) */
    uint64_t kv[MAX_TOKENS];    /* (t.n_tokens) expected KV of each position */
} seq;

typedef struct prop {
    const prop_cfg *cfg;
    pl_kv_pool *pool;
    pl_test_rng rng;
    seq seqs[MAX_SEQS];
    uint64_t *mem; /* (n_blocks, block_size) simulated KV memory */
    int32_t bases[N_BASES][MAX_TOKENS];
    int op; /* index of the current operation, for failure messages */
    long n_hits_tokens;
    long n_cow;
    long n_oom;
    /* the listener's mirror: (n_blocks) each */
    bool *ev_reg;      /* registered, as the events tell it */
    uint64_t *ev_key;  /* kv() of the block's last position, rebuilt from the events */
    long n_stored, n_removed, n_cleared;
} prop;

/* 4 values; blocks that differ only in tokens 0 vs 1 of their last position collide even
 * under the same parent, and equal blocks under different parents collide all the time. */
static uint64_t weak_hash(uint64_t parent_hash, const int32_t *tokens, int n) {
    return (parent_hash * 31u + (uint64_t)tokens[n - 1] / 2u) & 3u;
}

/* kv(p) from kv(p-1) and token p: splitmix64 finalizer, independent of the pool's hash. */
static uint64_t kv_next(uint64_t prev, int32_t token) {
    uint64_t z = prev + 0x9e3779b97f4a7c15ull + (uint64_t)(uint32_t)token * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void check_pool(prop *P) {
    const pl_kv_table *live[MAX_SEQS];
    int n = 0;
    for (int i = 0; i < MAX_SEQS; i++)
        if (P->seqs[i].live) live[n++] = &P->seqs[i].t;
    pl_status s = pl_kv_check(P->pool, live, n);
    cr_assert_eq(s, PL_OK, "seed %llu op %d: %s", (unsigned long long)P->cfg->seed, P->op,
                 pl_last_error());
}

static uint64_t kv_next(uint64_t prev, int32_t token);

/* ---- the listener's mirror ------------------------------------------------------------- */

static void ev_stored(void *ctx, int32_t b, int32_t parent, const int32_t *tokens, int n) {
    prop *P = ctx;
    cr_assert_eq(n, P->cfg->block_size);
    cr_assert(!P->ev_reg[b], "op %d: block %d stored twice", P->op, (int)b);
    cr_assert(parent == -1 || (parent >= 0 && P->ev_reg[parent] && parent != b),
              "op %d: block %d stored under parent %d, not registered", P->op, (int)b,
              (int)parent);
    uint64_t k = parent >= 0 ? P->ev_key[parent] : 0x5eedull;
    for (int i = 0; i < n; i++) k = kv_next(k, tokens[i]);
    P->ev_reg[b] = true;
    P->ev_key[b] = k;
    P->n_stored++;
}

static void ev_removed(void *ctx, int32_t b) {
    prop *P = ctx;
    cr_assert(P->ev_reg[b], "op %d: block %d removed, never stored", P->op, (int)b);
    P->ev_reg[b] = false;
    P->n_removed++;
}

static void ev_cleared(void *ctx) {
    prop *P = ctx;
    memset(P->ev_reg, 0, (size_t)P->cfg->n_blocks * sizeof(bool));
    P->n_cleared++;
}

static void check_events(prop *P) {
    int bs = P->cfg->block_size;
    for (int32_t b = 0; b < P->cfg->n_blocks; b++)
        cr_assert_eq(P->ev_reg[b], pl_kv_block_is_cached(P->pool, b),
                     "seed %llu op %d: events say block %d is%s registered",
                     (unsigned long long)P->cfg->seed, P->op, (int)b, P->ev_reg[b] ? "" : " not");
    for (int i = 0; i < MAX_SEQS; i++) {
        const seq *s = &P->seqs[i];
        if (!s->live) continue;
        for (int k = 0; k < s->t.n_cached && k < s->t.n_blocks; k++) {
            int32_t b = s->t.block_ids[k];
            if (!pl_kv_block_is_cached(P->pool, b)) continue; /* a duplicate's own block */
            cr_assert_eq(P->ev_key[b], s->kv[(k + 1) * bs - 1],
                         "seed %llu op %d: seq %d block %d (%d): the events' chain differs",
                         (unsigned long long)P->cfg->seed, P->op, i, k, (int)b);
        }
    }
}

static void check_kv(prop *P) {
    int bs = P->cfg->block_size;
    for (int i = 0; i < MAX_SEQS; i++) {
        const seq *s = &P->seqs[i];
        if (!s->live) continue;
        for (int p = 0; p < s->t.n_tokens; p++) {
            int64_t slot = pl_kv_slot(&s->t, bs, p);
            cr_assert_eq(P->mem[slot], s->kv[p],
                         "seed %llu op %d: seq %d reads wrong KV at position %d (block %d)",
                         (unsigned long long)P->cfg->seed, P->op, i, p,
                         (int)s->t.block_ids[p / bs]);
        }
    }
}

/* The step's forward pass: writes KV for positions from..t.n_tokens-1 of s. */
static void compute(prop *P, seq *s, int from) {
    int bs = P->cfg->block_size;
    for (int p = from; p < s->t.n_tokens; p++) {
        int32_t b = s->t.block_ids[p / bs];
        cr_assert_eq(pl_kv_block_ref_count(P->pool, b), 1,
                     "seed %llu op %d: write into shared block %d",
                     (unsigned long long)P->cfg->seed, P->op, (int)b);
        cr_assert(!pl_kv_block_is_cached(P->pool, b), "seed %llu op %d: write into cached block",
                  (unsigned long long)P->cfg->seed, P->op);
        P->mem[pl_kv_slot(&s->t, bs, p)] = s->kv[p];
    }
}

static void set_tokens(seq *s, int from, int to, const int32_t *src) {
    for (int p = from; p < to; p++) {
        s->tokens[p] = src[p - from];
        s->kv[p] = kv_next(p > 0 ? s->kv[p - 1] : 0x5eedull, s->tokens[p]);
    }
}

static int free_slot(prop *P) {
    int start = (int)pl_test_rng_below(&P->rng, MAX_SEQS);
    for (int k = 0; k < MAX_SEQS; k++)
        if (!P->seqs[(start + k) % MAX_SEQS].live) return (start + k) % MAX_SEQS;
    return -1;
}

static int live_slot(prop *P) {
    int start = (int)pl_test_rng_below(&P->rng, MAX_SEQS);
    for (int k = 0; k < MAX_SEQS; k++)
        if (P->seqs[(start + k) % MAX_SEQS].live) return (start + k) % MAX_SEQS;
    return -1;
}

/* A prompt of n tokens: a prefix of one of the base sequences (so prompts share prefixes),
 * then random tokens from a small alphabet (so equal blocks recur under different parents). */
static void make_prompt(prop *P, int32_t *out, int n) {
    const int32_t *base = P->bases[pl_test_rng_below(&P->rng, N_BASES)];
    int shared = (int)pl_test_rng_below(&P->rng, (uint32_t)n + 1);
    for (int i = 0; i < n; i++)
        out[i] = i < shared ? base[i] : (int32_t)pl_test_rng_below(&P->rng, ALPHABET);
}

/* Verifies a prefix hit of got tokens for query q in table t: whole blocks within the limit,
 * stored tokens equal to the query. */
static void check_hit(prop *P, const pl_kv_table *t, const int32_t *q, int got, int limit) {
    int bs = P->cfg->block_size;
    cr_assert(got >= 0 && got % bs == 0 && got <= (limit > 0 ? limit : 0),
              "seed %llu op %d: took %d tokens (limit %d)", (unsigned long long)P->cfg->seed,
              P->op, got, limit);
    cr_assert_eq(t->n_tokens, got);
    for (int i = 0; i < got / bs; i++) {
        int32_t b = t->block_ids[i];
        cr_assert(pl_kv_block_is_cached(P->pool, b));
        cr_assert_eq(memcmp(pl_kv_block_tokens(P->pool, b), q + i * bs, (size_t)bs * 4), 0,
                     "seed %llu op %d: hit block %d holds other tokens",
                     (unsigned long long)P->cfg->seed, P->op, (int)b);
    }
    P->n_hits_tokens += got;
}

static void op_free(prop *P, int i) {
    pl_kv_free(P->pool, &P->seqs[i].t);
    P->seqs[i].live = false;
    check_pool(P);
}

static void op_register(prop *P, seq *s, int n_computed) {
    pl_kv_register_full_blocks(P->pool, &s->t, s->tokens, n_computed);
    check_pool(P);
}

/* Admission: count, take the cached prefix, allocate and compute the rest; preempted (freed)
 * when the pool is full. */
static void op_admit(prop *P) {
    int i = free_slot(P);
    if (i < 0) return;
    seq *s = &P->seqs[i];
    int32_t prompt[MAX_TOKENS];
    int n = 1 + (int)pl_test_rng_below(&P->rng, MAX_TOKENS * 3 / 4);
    make_prompt(P, prompt, n);
    int limit = n - 1;

    int counted = -1, free_hits = -1, got = -1;
    cr_assert_eq(pl_kv_count_prefix(P->pool, prompt, n, limit, &counted, &free_hits), PL_OK);
    int free_before = pl_kv_num_free_blocks(P->pool);
    pl_kv_table_init(&s->t);
    s->live = true;
    cr_assert_eq(pl_kv_take_prefix(P->pool, &s->t, prompt, n, limit, &got), PL_OK);
    check_pool(P);
    check_hit(P, &s->t, prompt, got, limit);
    cr_assert_eq(got, counted);
    cr_assert_eq(free_before - pl_kv_num_free_blocks(P->pool), free_hits);
    set_tokens(s, 0, n, prompt); /* kv of the hit part must equal what the blocks hold */
    check_kv(P);

    int needed = -1;
    pl_kv_copy copies[1];
    int n_copies = -1;
    int want = pl_kv_blocks_needed(P->pool, &s->t, n - got);
    pl_status st = pl_kv_allocate(P->pool, &s->t, n - got, copies, &n_copies, &needed);
    check_pool(P);
    cr_assert_eq(needed, want);
    cr_assert_eq(n_copies, 0); /* a taken prefix is whole blocks: nothing partial to copy */
    if (st == PL_ERR_OUT_OF_MEMORY) {
        cr_assert_gt(needed, pl_kv_num_free_blocks(P->pool));
        cr_assert_eq(s->t.n_tokens, got);
        P->n_oom++;
        op_free(P, i);
        return;
    }
    cr_assert_eq(st, PL_OK, "%s", pl_last_error());
    compute(P, s, got);
    /* Chunked progress sometimes: register only part of what was computed. */
    int n_reg = pl_test_rng_below(&P->rng, 4) == 0 ? (int)pl_test_rng_below(&P->rng, n + 1) : n;
    op_register(P, s, n_reg);
}

/* Decode (one token) or a chunk, with copy-on-write when the last block is shared. */
static void op_append(prop *P) {
    int i = live_slot(P);
    if (i < 0) return;
    seq *s = &P->seqs[i];
    int room = MAX_TOKENS - s->t.n_tokens;
    int n_new = pl_test_rng_below(&P->rng, 3) != 0 ? 1
                : (int)pl_test_rng_below(&P->rng, (uint32_t)(2 * P->cfg->block_size + 2));
    if (n_new > room) n_new = room;

    pl_kv_table before = s->t;
    int32_t ids_before[MAX_TOKENS];
    if (s->t.n_blocks > 0)
        memcpy(ids_before, s->t.block_ids, (size_t)s->t.n_blocks * sizeof(int32_t));
    int last = s->t.n_blocks - 1;
    bool shared_partial = s->t.n_tokens % P->cfg->block_size != 0 &&
                          pl_kv_block_ref_count(P->pool, s->t.block_ids[last]) > 1;
    pl_kv_copy copies[1] = {{-1, -1}};
    int n_copies = -1, needed = -1;
    pl_status st = pl_kv_allocate(P->pool, &s->t, n_new, copies, &n_copies, &needed);
    check_pool(P);
    if (st == PL_ERR_OUT_OF_MEMORY) {
        cr_assert_gt(needed, pl_kv_num_free_blocks(P->pool));
        cr_assert_eq(n_copies, 0);
        cr_assert_eq(s->t.n_tokens, before.n_tokens);
        cr_assert_eq(s->t.n_blocks, before.n_blocks);
        if (before.n_blocks > 0)
            cr_assert_eq(memcmp(s->t.block_ids, ids_before, (size_t)before.n_blocks * 4), 0);
        P->n_oom++;
        /* Preempt it sometimes, as the scheduler would. */
        if (pl_test_rng_below(&P->rng, 2) == 0) op_free(P, i);
        return;
    }
    cr_assert_eq(st, PL_OK, "%s", pl_last_error());
    /* A copy exactly when the old last block was partial and shared (and tokens were added). */
    cr_assert_eq(n_copies, shared_partial && n_new > 0 ? 1 : 0, "seed %llu op %d",
                 (unsigned long long)P->cfg->seed, P->op);
    if (n_copies == 1) {
        cr_assert_eq(copies[0].src, ids_before[last]);
        cr_assert_eq(copies[0].dst, s->t.block_ids[last]);
        int bs = P->cfg->block_size;
        memcpy(P->mem + (size_t)copies[0].dst * bs, P->mem + (size_t)copies[0].src * bs,
               (size_t)bs * sizeof(uint64_t));
        P->n_cow++;
    }
    int32_t fresh[MAX_TOKENS];
    for (int k = 0; k < n_new; k++) fresh[k] = (int32_t)pl_test_rng_below(&P->rng, ALPHABET);
    set_tokens(s, before.n_tokens, s->t.n_tokens, fresh);
    compute(P, s, before.n_tokens);
    op_register(P, s, s->t.n_tokens);
}

static void op_fork(prop *P) {
    int i = live_slot(P), j = free_slot(P);
    if (i < 0 || j < 0) return;
    seq *c = &P->seqs[j];
    pl_kv_table_init(&c->t);
    cr_assert_eq(pl_kv_fork(P->pool, &P->seqs[i].t, &c->t), PL_OK, "%s", pl_last_error());
    c->live = true;
    memcpy(c->tokens, P->seqs[i].tokens, sizeof c->tokens);
    memcpy(c->kv, P->seqs[i].kv, sizeof c->kv);
    check_pool(P);
}

/* A bare lookup: a prompt or a live sequence's tokens, taken into a temporary table. */
static void op_lookup(prop *P) {
    int32_t q[MAX_TOKENS];
    int n, i = live_slot(P);
    if (i >= 0 && pl_test_rng_below(&P->rng, 2) == 0 && P->seqs[i].t.n_tokens > 0) {
        n = P->seqs[i].t.n_tokens;
        memcpy(q, P->seqs[i].tokens, (size_t)n * sizeof(int32_t));
    } else {
        n = 1 + (int)pl_test_rng_below(&P->rng, MAX_TOKENS);
        make_prompt(P, q, n);
    }
    int limit = (int)pl_test_rng_below(&P->rng, (uint32_t)n + 2) - 1; /* -1 .. n */
    int j = free_slot(P);
    if (j < 0) return;
    seq *s = &P->seqs[j];
    pl_kv_table_init(&s->t);
    s->live = true;
    int got = -1;
    cr_assert_eq(pl_kv_take_prefix(P->pool, &s->t, q, n, limit, &got), PL_OK);
    check_pool(P);
    check_hit(P, &s->t, q, got, limit);
    set_tokens(s, 0, got, q);
    check_kv(P);
    if (pl_test_rng_below(&P->rng, 2) == 0) op_free(P, j); /* else it lives on */
}

static void run_property(const prop_cfg *cfg) {
    prop *P = calloc(1, sizeof *P);
    cr_assert_not_null(P);
    P->cfg = cfg;
    pl_test_rng_seed(&P->rng, cfg->seed);
    P->pool = kv_test_pool(cfg->block_size, cfg->n_blocks, cfg->prefix_caching);
    if (cfg->weak_hash) cr_assert_eq(pl_kv_pool_set_hash_fn(P->pool, weak_hash), PL_OK);
    P->mem = calloc((size_t)cfg->n_blocks * (size_t)cfg->block_size, sizeof(uint64_t));
    cr_assert_not_null(P->mem);
    P->ev_reg = calloc((size_t)cfg->n_blocks, sizeof(bool));
    P->ev_key = calloc((size_t)cfg->n_blocks, sizeof(uint64_t));
    cr_assert(P->ev_reg && P->ev_key);
    pl_kv_set_listener(P->pool, &(pl_kv_listener){.ctx = P, .stored = ev_stored,
                                                  .removed = ev_removed, .cleared = ev_cleared});
    for (int b = 0; b < N_BASES; b++)
        for (int k = 0; k < MAX_TOKENS; k++)
            P->bases[b][k] = (int32_t)pl_test_rng_below(&P->rng, ALPHABET);

    for (P->op = 0; P->op < cfg->n_ops; P->op++) {
        uint32_t r = pl_test_rng_below(&P->rng, 1000);
        if (r < 200) {
            op_admit(P);
        } else if (r < 550) {
            op_append(P);
        } else if (r < 650) {
            op_fork(P);
        } else if (r < 820) {
            int i = live_slot(P);
            if (i >= 0) op_free(P, i);
        } else if (r < 920) {
            op_lookup(P);
        } else if (r < 998) {
            int i = live_slot(P);
            if (i >= 0)
                op_register(P, &P->seqs[i],
                            (int)pl_test_rng_below(&P->rng, (uint32_t)P->seqs[i].t.n_tokens + 1));
        } else {
            pl_kv_reset_prefix_cache(P->pool);
            check_pool(P);
        }
        check_kv(P);
        check_events(P);
    }

    for (int i = 0; i < MAX_SEQS; i++)
        if (P->seqs[i].live) op_free(P, i);
    pl_kv_stats st;
    pl_kv_get_stats(P->pool, &st);
    cr_assert_eq(st.n_blocks_free, cfg->n_blocks);
    cr_assert_eq(st.n_blocks_used, 0);
    cr_assert_eq(st.cow_copies, (uint64_t)P->n_cow);
    cr_assert_eq(st.prefix_hits_tokens, (uint64_t)P->n_hits_tokens);
    if (!cfg->prefix_caching) cr_assert_eq(st.n_blocks_cached, 0);
    pl_kv_reset_prefix_cache(P->pool);
    check_pool(P);
    fprintf(stderr,
            "kvcache property: seed %llu bs %d blocks %d: %d ops, %ld prefix-hit tokens, %ld "
            "copies, %ld full-pool refusals, %llu evictions\n",
            (unsigned long long)cfg->seed, cfg->block_size, cfg->n_blocks, cfg->n_ops,
            P->n_hits_tokens, P->n_cow, P->n_oom, (unsigned long long)st.evictions);
    /* Each shape must actually exercise what it is for. */
    if (cfg->block_size > 1) cr_assert_gt(P->n_cow, 0); /* block_size 1 has no partial block */
    cr_assert_gt(P->n_oom, 0);
    if (cfg->prefix_caching) {
        cr_assert_gt(P->n_hits_tokens, 0);
        cr_assert_gt(st.evictions, 0);
        cr_assert_gt(P->n_stored, 0);
        cr_assert_eq((uint64_t)P->n_removed, st.evictions); /* every eviction told */
        cr_assert_gt(P->n_cleared, 0);
    } else {
        cr_assert_eq(P->n_stored + P->n_removed, 0);
    }
    pl_kv_pool_destroy(P->pool);
    free(P->ev_reg);
    free(P->ev_key);
    free(P->mem);
    free(P);
    PL_ASSERT_NO_LEAKS();
}

Test(kv_property, block_size_4_xxhash) {
    prop_cfg c = {.seed = 1, .block_size = 4, .n_blocks = 40, .prefix_caching = true,
                  .n_ops = 100000};
    run_property(&c);
}

Test(kv_property, block_size_1_colliding_hash) {
    prop_cfg c = {.seed = 2, .block_size = 1, .n_blocks = 96, .prefix_caching = true,
                  .weak_hash = true, .n_ops = 100000};
    run_property(&c);
}

Test(kv_property, block_size_16_caching_off) {
    prop_cfg c = {.seed = 3, .block_size = 16, .n_blocks = 14, .prefix_caching = false,
                  .n_ops = 100000};
    run_property(&c);
}

Test(kv_property, per_run_seed) {
    uint64_t seed = pl_test_run_seed("kvcache property");
    pl_test_rng r;
    pl_test_rng_seed(&r, seed);
    static const int sizes[] = {1, 2, 4, 8};
    prop_cfg c = {.seed = seed, .block_size = sizes[pl_test_rng_below(&r, 4)],
                  .prefix_caching = true, .weak_hash = pl_test_rng_below(&r, 2) == 0,
                  .n_ops = 100000};
    /* Enough blocks for a few sequences, never all of them at full length. */
    int per_seq = MAX_TOKENS / c.block_size;
    c.n_blocks = per_seq * 2 + (int)pl_test_rng_below(&r, (uint32_t)per_seq * 2);
    fprintf(stderr, "kvcache property: per-run shape bs %d blocks %d weak_hash %d\n",
            c.block_size, c.n_blocks, (int)c.weak_hash);
    run_property(&c);
}
