/*
 * tests/kvevents/test_kvevents.c - the KV event publisher on its own: vLLM's configuration
 * keys, the sha256_cbor hashes against Python's cbor2 + hashlib (hash_vectors.h, from
 * gen_hash_vectors.py), and a publisher fed records as the KV pool's listener would feed
 * them, read back through its replay socket and decoded with msgpack-c: the batches'
 * sequence numbers, the events' layout, runs of chained blocks merged into one BlockStored,
 * a parent removed in the same batch as its children, the end marker. (The whole path
 * through `pagellm serve`, decoded by Python's msgpack and hashed by cbor2, is
 * tests/server/test_kv_events.py.)
 */
#include <criterion/criterion.h>
#include <msgpack.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "hash_vectors.h"
#include "kvevents/kvevents.h"

/* ---- configuration ------------------------------------------------------------------------ */

Test(kvevents, config_defaults_are_vllms) {
    unsetenv("PYTHONHASHSEED");
    unsetenv("VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES");
    pl_kvev_config c;
    cr_assert_eq(pl_kvev_config_parse(NULL, &c), PL_OK);
    cr_assert(!c.enable_kv_cache_events && !c.zmq && !pl_kvev_config_active(&c));
    cr_assert_str_eq(c.endpoint, "tcp://*:5557");
    cr_assert_null(c.replay_endpoint);
    cr_assert_eq(c.buffer_steps, 10000);
    cr_assert_eq(c.hwm, 100000);
    cr_assert_eq(c.max_queue_size, 100000);
    cr_assert_str_eq(c.topic, "");
    cr_assert_str_eq(c.hash_seed, "vllm-none-hash");
    cr_assert(c.int_block_hashes);
    pl_kvev_config_deinit(&c);

    cr_assert_eq(pl_kvev_config_parse("{\"enable_kv_cache_events\": true}", &c), PL_OK);
    cr_assert(c.zmq && pl_kvev_config_active(&c)); /* publisher defaults to zmq when enabled */
    pl_kvev_config_deinit(&c);
    cr_assert_eq(pl_kvev_config_parse("{\"enable_kv_cache_events\": true, \"publisher\": "
                                      "\"null\"}", &c), PL_OK);
    cr_assert(!pl_kvev_config_active(&c));
    pl_kvev_config_deinit(&c);
}

Test(kvevents, config_keys_and_environment) {
    setenv("PYTHONHASHSEED", "0", 1);
    setenv("VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES", "0", 1);
    pl_kvev_config c;
    cr_assert_eq(pl_kvev_config_parse(
                     "{\"enable_kv_cache_events\": true, \"publisher\": \"zmq\", \"endpoint\": "
                     "\"tcp://127.0.0.1:7000\", \"replay_endpoint\": \"tcp://*:7001\", "
                     "\"buffer_steps\": 5, \"hwm\": 7, \"max_queue_size\": 9, \"topic\": \"kv\"}",
                     &c),
                 PL_OK, "%s", pl_last_error());
    cr_assert_str_eq(c.endpoint, "tcp://127.0.0.1:7000");
    cr_assert_str_eq(c.replay_endpoint, "tcp://*:7001");
    cr_assert(c.buffer_steps == 5 && c.hwm == 7 && c.max_queue_size == 9);
    cr_assert_str_eq(c.topic, "kv");
    cr_assert_str_eq(c.hash_seed, "0");
    cr_assert(!c.int_block_hashes);
    pl_kvev_config_deinit(&c);
    unsetenv("PYTHONHASHSEED");
    unsetenv("VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES");
}

Test(kvevents, config_refusals_name_the_key) {
    static const struct {
        const char *json, *needle;
    } bad[] = {
        {"{\"endpiont\": \"tcp://*:1\"}", "unknown key \"endpiont\""},
        {"{\"enable_kv_cache_events\": 1}", "kv_events_config.enable_kv_cache_events"},
        {"{\"publisher\": \"kafka\"}", "kv_events_config.publisher"},
        {"{\"endpoint\": 5}", "kv_events_config.endpoint"},
        {"{\"endpoint\": \"\"}", "kv_events_config.endpoint"},
        {"{\"buffer_steps\": -1}", "kv_events_config.buffer_steps"},
        {"{\"max_queue_size\": 0}", "kv_events_config.max_queue_size"},
        {"{\"hwm\": 1.5}", "kv_events_config.hwm"},
        {"[1]", "must be a JSON object"},
        {"{\"topic\": \"a\\u0000b\"}", "invalid JSON"},
        {"{\"hwm\": 1, \"hwm\": 2}", "invalid JSON"},
        {"{", "invalid JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pl_kvev_config c;
        cr_assert_eq(pl_kvev_config_parse(bad[i].json, &c), PL_ERR_INVALID_ARGUMENT, "%s",
                     bad[i].json);
        cr_assert(strstr(pl_last_error(), bad[i].needle), "%s -> %s", bad[i].json,
                  pl_last_error());
    }
}

/* ---- hashes ----------------------------------------------------------------------------- */

Test(kvevents, hashes_equal_cbor2_and_hashlib) {
    for (size_t i = 0; i < sizeof NONE_VECTORS / sizeof NONE_VECTORS[0]; i++) {
        uint8_t h[32];
        cr_assert_eq(pl_kvev_none_hash(NONE_VECTORS[i].seed, h), PL_OK);
        cr_assert_eq(memcmp(h, NONE_VECTORS[i].hash, 32), 0, "seed \"%s\"",
                     NONE_VECTORS[i].seed);
    }
    for (size_t i = 0; i < sizeof CHAIN_VECTORS / sizeof CHAIN_VECTORS[0]; i++) {
        const chain_vector *v = &CHAIN_VECTORS[i];
        uint8_t parent[32];
        cr_assert_eq(pl_kvev_none_hash(v->seed, parent), PL_OK);
        for (int b = 0; b < v->n_blocks; b++) {
            uint8_t h[32];
            cr_assert_eq(pl_kvev_block_hash(parent, v->tokens + b * v->block_size,
                                            v->block_size, h),
                         PL_OK);
            cr_assert_eq(memcmp(h, v->hash[b], 32), 0, "chain %zu block %d", i, b);
            memcpy(parent, h, 32);
        }
    }
    uint8_t h[32] = {0};
    for (int i = 24; i < 32; i++) h[i] = (uint8_t)(i - 23);
    cr_assert_eq(pl_kvev_hash_u64(h), 0x0102030405060708ull);
}

/* ---- the publisher, read back through replay ---------------------------------------------- */

enum { BS = 4 };

typedef struct got_batch {
    int64_t seq;
    char *payload;      /* msgpack-c's objects point into it (strings are not copied) */
    msgpack_unpacked u; /* the payload, decoded */
} got_batch;

static void got_free(got_batch *g, int n) {
    for (int i = 0; i < n; i++) {
        msgpack_unpacked_destroy(&g[i].u);
        free(g[i].payload);
    }
}

/* Asks the replay socket for every batch from start; fills out (up to max) and returns how
 * many came before the end marker. */
static int replay(const char *ep, uint64_t start, got_batch *out, int max) {
    void *ctx = zmq_ctx_new();
    void *req = zmq_socket(ctx, ZMQ_DEALER);
    int timeout = 5000;
    zmq_setsockopt(req, ZMQ_RCVTIMEO, &timeout, sizeof timeout);
    cr_assert_eq(zmq_connect(req, ep), 0);
    uint8_t sb[8];
    for (int i = 7; i >= 0; i--, start >>= 8) sb[i] = (uint8_t)start;
    zmq_send(req, "", 0, ZMQ_SNDMORE);
    zmq_send(req, sb, 8, 0);
    int n = 0;
    for (;;) {
        char empty[8], seq[8];
        cr_assert_eq(zmq_recv(req, empty, sizeof empty, 0), 0, "replay: no answer");
        cr_assert_eq(zmq_recv(req, seq, sizeof seq, 0), 8);
        zmq_msg_t m;
        zmq_msg_init(&m);
        cr_assert_geq(zmq_msg_recv(&m, req, 0), 0);
        uint64_t u = 0; /* big-endian, signed: -1 ends the replay (shifted unsigned: no UB) */
        for (int i = 0; i < 8; i++) u = u << 8 | (uint8_t)seq[i];
        int64_t s = (int64_t)u;
        if (s == -1) {
            cr_assert_eq(zmq_msg_size(&m), 0);
            zmq_msg_close(&m);
            break;
        }
        cr_assert_lt(n, max);
        out[n].seq = s;
        out[n].payload = malloc(zmq_msg_size(&m));
        memcpy(out[n].payload, zmq_msg_data(&m), zmq_msg_size(&m));
        msgpack_unpacked_init(&out[n].u);
        cr_assert_eq(msgpack_unpack_next(&out[n].u, out[n].payload, zmq_msg_size(&m), NULL),
                     MSGPACK_UNPACK_SUCCESS);
        zmq_msg_close(&m);
        n++;
    }
    zmq_close(req);
    zmq_ctx_term(ctx);
    return n;
}

static void assert_str(msgpack_object o, const char *s) {
    cr_assert_eq(o.type, MSGPACK_OBJECT_STR);
    cr_assert_eq(o.via.str.size, strlen(s));
    cr_assert_eq(memcmp(o.via.str.ptr, s, strlen(s)), 0, "expected %s", s);
}

static uint64_t as_u64(msgpack_object o) {
    cr_assert_eq(o.type, MSGPACK_OBJECT_POSITIVE_INTEGER);
    return o.via.u64;
}

/* One event: ["BlockStored", hashes, parent, tokens, block_size, nil, "GPU", nil]. */
static void assert_stored(msgpack_object ev, const uint64_t *hashes, int n, const uint64_t *parent,
                          const int32_t *tokens) {
    cr_assert_eq(ev.type, MSGPACK_OBJECT_ARRAY);
    cr_assert_eq(ev.via.array.size, 8);
    msgpack_object *f = ev.via.array.ptr;
    assert_str(f[0], "BlockStored");
    cr_assert_eq(f[1].via.array.size, (uint32_t)n);
    for (int i = 0; i < n; i++) cr_assert_eq(as_u64(f[1].via.array.ptr[i]), hashes[i]);
    if (parent) cr_assert_eq(as_u64(f[2]), *parent);
    else cr_assert_eq(f[2].type, MSGPACK_OBJECT_NIL);
    cr_assert_eq(f[3].via.array.size, (uint32_t)(n * BS));
    for (int i = 0; i < n * BS; i++) cr_assert_eq(as_u64(f[3].via.array.ptr[i]), (uint64_t)tokens[i]);
    cr_assert_eq(as_u64(f[4]), BS);
    cr_assert_eq(f[5].type, MSGPACK_OBJECT_NIL);
    assert_str(f[6], "GPU");
    cr_assert_eq(f[7].type, MSGPACK_OBJECT_NIL);
}

Test(kvevents, publisher_batches_through_replay) {
    unsetenv("PYTHONHASHSEED");
    unsetenv("VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES");
    char pub_ep[128], rep_ep[128], cfg_json[512];
    snprintf(pub_ep, sizeof pub_ep, "ipc:///tmp/pl-kvev-pub-%d", (int)getpid());
    snprintf(rep_ep, sizeof rep_ep, "ipc:///tmp/pl-kvev-replay-%d", (int)getpid());
    snprintf(cfg_json, sizeof cfg_json,
             "{\"enable_kv_cache_events\": true, \"endpoint\": \"%s\", \"replay_endpoint\": "
             "\"%s\", \"buffer_steps\": 2}", pub_ep, rep_ep);
    pl_kvev_config c;
    cr_assert_eq(pl_kvev_config_parse(cfg_json, &c), PL_OK, "%s", pl_last_error());
    pl_kvev *p = NULL;
    cr_assert_eq(pl_kvev_create(&c, BS, 16, &p), PL_OK, "%s", pl_last_error());
    pl_kvev_config_deinit(&c);

    /* step 1: a chain 5 <- 6 <- 7 (one run), a lone block 2, block 5 removed (the chain's
     * root, after its children were stored: its hash was the parent's) */
    const int32_t t[4][BS] = {{1, 2, 3, 4}, {300, 70000, 0, 23}, {24, 24, 24, 24}, {9, 9, 9, 9}};
    pl_kvev_stored(p, 5, -1, t[0]);
    pl_kvev_stored(p, 6, 5, t[1]);
    pl_kvev_stored(p, 7, 6, t[2]);
    pl_kvev_stored(p, 2, -1, t[3]);
    pl_kvev_removed(p, 5);
    pl_kvev_end_step(p);
    pl_kvev_end_step(p); /* an empty step publishes nothing */
    /* step 2: a child of 7 (a new run whose parent is 7), then everything cleared */
    pl_kvev_stored(p, 8, 7, t[3]);
    pl_kvev_cleared(p);
    pl_kvev_removed(p, 8); /* cleared already: no hash to remove, no event */
    pl_kvev_end_step(p);
    /* step 3 */
    pl_kvev_stored(p, 3, -1, t[1]);
    pl_kvev_end_step(p);

    uint8_t none[32], h5[32], h6[32], h7[32], h2[32], h8[32], h3[32];
    pl_kvev_none_hash("vllm-none-hash", none);
    pl_kvev_block_hash(none, t[0], BS, h5);
    pl_kvev_block_hash(h5, t[1], BS, h6);
    pl_kvev_block_hash(h6, t[2], BS, h7);
    pl_kvev_block_hash(none, t[3], BS, h2);
    pl_kvev_block_hash(h7, t[3], BS, h8);
    pl_kvev_block_hash(none, t[1], BS, h3);

    got_batch got[8];
    int n = 0;
    for (int tries = 0; tries < 500 && n < 2; tries++) { /* the publisher thread may lag */
        got_free(got, n);
        n = replay(rep_ep, 0, got, 8);
        if (n < 2) usleep(10000);
    }
    /* buffer_steps = 2: the first of the three batches is gone from the replay buffer */
    cr_assert_eq(n, 2);
    cr_assert_eq(got[0].seq, 1);
    cr_assert_eq(got[1].seq, 2);
    got_free(got, n);
    n = replay(rep_ep, 2, got, 8);
    cr_assert_eq(n, 1);
    cr_assert_eq(got[0].seq, 2);
    msgpack_object b = got[0].u.data;
    cr_assert_eq(b.type, MSGPACK_OBJECT_ARRAY);
    cr_assert_eq(b.via.array.size, 3);
    cr_assert_eq(b.via.array.ptr[0].type, MSGPACK_OBJECT_FLOAT64);
    cr_assert_gt(b.via.array.ptr[0].via.f64, 1.6e9); /* seconds since the epoch */
    cr_assert_eq(as_u64(b.via.array.ptr[2]), 0);     /* data_parallel_rank */
    msgpack_object evs = b.via.array.ptr[1];
    cr_assert_eq(evs.via.array.size, 1);
    uint64_t u3 = pl_kvev_hash_u64(h3);
    assert_stored(evs.via.array.ptr[0], &u3, 1, NULL, t[1]);
    got_free(got, 1);
    pl_kvev_stats st;
    pl_kvev_get_stats(p, &st);
    cr_assert_eq(st.batches_published, 3);
    cr_assert_eq(st.batches_dropped, 0);
    cr_assert_geq(st.replays_served, 2);
    pl_kvev_destroy(p);

    /* the first two batches, with a replay buffer large enough: a fresh publisher */
    snprintf(cfg_json, sizeof cfg_json,
             "{\"enable_kv_cache_events\": true, \"endpoint\": \"%s\", \"replay_endpoint\": "
             "\"%s\"}", pub_ep, rep_ep);
    cr_assert_eq(pl_kvev_config_parse(cfg_json, &c), PL_OK);
    cr_assert_eq(pl_kvev_create(&c, BS, 16, &p), PL_OK, "%s", pl_last_error());
    pl_kvev_config_deinit(&c);
    pl_kvev_stored(p, 5, -1, t[0]);
    pl_kvev_stored(p, 6, 5, t[1]);
    pl_kvev_stored(p, 7, 6, t[2]);
    pl_kvev_stored(p, 2, -1, t[3]);
    pl_kvev_removed(p, 5);
    pl_kvev_end_step(p);
    pl_kvev_stored(p, 8, 7, t[3]);
    pl_kvev_cleared(p);
    pl_kvev_removed(p, 8);
    pl_kvev_end_step(p);
    n = 0;
    for (int tries = 0; tries < 500 && n < 2; tries++) {
        got_free(got, n);
        n = replay(rep_ep, 0, got, 8);
        if (n < 2) usleep(10000);
    }
    cr_assert_eq(n, 2);
    cr_assert_eq(got[0].seq, 0);
    evs = got[0].u.data.via.array.ptr[1];
    cr_assert_eq(evs.via.array.size, 3);
    uint64_t chain[3] = {pl_kvev_hash_u64(h5), pl_kvev_hash_u64(h6), pl_kvev_hash_u64(h7)};
    int32_t chain_tokens[3 * BS];
    memcpy(chain_tokens, t, sizeof chain_tokens);
    assert_stored(evs.via.array.ptr[0], chain, 3, NULL, chain_tokens);
    uint64_t u2 = pl_kvev_hash_u64(h2);
    assert_stored(evs.via.array.ptr[1], &u2, 1, NULL, t[3]);
    msgpack_object rm = evs.via.array.ptr[2];
    cr_assert_eq(rm.via.array.size, 3);
    assert_str(rm.via.array.ptr[0], "BlockRemoved");
    cr_assert_eq(rm.via.array.ptr[1].via.array.size, 1);
    cr_assert_eq(as_u64(rm.via.array.ptr[1].via.array.ptr[0]), chain[0]);
    assert_str(rm.via.array.ptr[2], "GPU");

    cr_assert_eq(got[1].seq, 1);
    evs = got[1].u.data.via.array.ptr[1];
    cr_assert_eq(evs.via.array.size, 2);
    uint64_t u8 = pl_kvev_hash_u64(h8), parent7 = chain[2];
    assert_stored(evs.via.array.ptr[0], &u8, 1, &parent7, t[3]);
    cr_assert_eq(evs.via.array.ptr[1].via.array.size, 1);
    assert_str(evs.via.array.ptr[1].via.array.ptr[0], "AllBlocksCleared");
    got_free(got, n);
    pl_kvev_destroy(p);
}

Test(kvevents, bad_endpoint_fails_creation) {
    pl_kvev_config c;
    cr_assert_eq(pl_kvev_config_parse("{\"enable_kv_cache_events\": true, \"endpoint\": "
                                      "\"nonsense://x\"}", &c), PL_OK);
    pl_kvev *p = NULL;
    cr_assert_eq(pl_kvev_create(&c, BS, 16, &p), PL_ERR_IO);
    cr_assert(strstr(pl_last_error(), "kv_events_config.endpoint"), "%s", pl_last_error());
    cr_assert_null(p);
    pl_kvev_config_deinit(&c);
}
