/*
 * kvevents/kvevents.h - prefix-cache events for routers: vLLM's KV event stream (the one
 * llm-d's precise prefix-cache scorer and Dynamo's KV router subscribe to), published over
 * ZeroMQ.
 *
 * What goes over the wire is vLLM's, so a subscriber written for vLLM reads pagellm
 * unchanged:
 * - a PUB socket sends one multipart message per engine step that changed the prefix cache:
 *   [topic, sequence number (8 bytes, big-endian, from 0), payload];
 * - the payload is msgpack of vLLM's KVEventBatch in msgspec's array layout:
 *   [ts (float seconds since the epoch), [events...], data_parallel_rank (0)], each event a
 *   tagged array: ["BlockStored", block_hashes, parent_block_hash | nil, token_ids,
 *   block_size, lora_id (nil), medium ("GPU"), lora_name (nil)], ["BlockRemoved",
 *   block_hashes, medium], ["AllBlocksCleared"];
 * - a block's hash is vLLM's sha256_cbor chain: sha256 of the canonical CBOR of
 *   (parent hash (32 bytes), (its token ids), None), the parent of a first block being
 *   NONE_HASH = sha256_cbor(seed) (the seed: $PYTHONHASHSEED, else "vllm-none-hash", as vLLM
 *   has it for sha256); on the wire as vLLM's default (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1):
 *   the digest's last 8 bytes as an unsigned integer, or with that variable set to 0 the 32
 *   bytes;
 * - an optional ROUTER replay socket: a request [empty frame, start sequence (8 bytes)] gets
 *   every kept batch from that sequence on, each as [empty, sequence, payload], then
 *   [empty, -1 (8 bytes), empty].
 *
 * Threads: the engine's stepping thread records what the KV cache manager tells it
 * (pl_kvev_stored/_removed/_cleared: an append to a buffer) and hands each step's records to
 * the publisher thread at the step's end (pl_kvev_end_step: one copy and one lock); the
 * publisher thread hashes, encodes, sends and answers replays. A step never waits for it:
 * past max_queue_size pending batches a step's events are dropped (counted, logged once).
 */
#ifndef PL_KVEVENTS_H
#define PL_KVEVENTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* vLLM's KVEventsConfig (--kv-events-config), with its defaults. */
typedef struct pl_kvev_config {
    bool enable_kv_cache_events; /* false */
    bool zmq;                    /* publisher: "zmq" (true) or "null"; default: zmq when
                                    enabled */
    char *endpoint;              /* default: TCP port 5557 on every interface (host '*');
                                    bound when it has '*', "::", ipc:// or inproc://, else
                                    connected to */
    char *replay_endpoint;       /* NULL: no replay socket */
    int buffer_steps;            /* 10000 batches kept for replay */
    int hwm;                     /* 100000: the PUB socket's send high-water mark */
    int max_queue_size;          /* 100000 batches waiting for the publisher thread */
    char *topic;                 /* "" */
    /* from the environment, as vLLM reads them */
    char *hash_seed;             /* $PYTHONHASHSEED, else "vllm-none-hash" */
    bool int_block_hashes;       /* $VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES != "0" (default 1) */
} pl_kvev_config;

/* Parses the JSON object text (NULL or "": the defaults) into *out (deinit it). Unknown keys
 * and wrong types are refused, the message naming "kv_events_config.KEY".
 * PL_ERR_INVALID_ARGUMENT or PL_ERR_OUT_OF_MEMORY; on failure nothing to free. */
pl_status pl_kvev_config_parse(const char *json, pl_kvev_config *out);
void pl_kvev_config_deinit(pl_kvev_config *c);
/* Whether the configuration publishes anything. */
static inline bool pl_kvev_config_active(const pl_kvev_config *c) {
    return c->enable_kv_cache_events && c->zmq;
}

/* ---- block hashes (vLLM's sha256_cbor) ------------------------------------------------ */

/* sha256 of the canonical CBOR of the text string seed: vLLM's NONE_HASH. */
pl_status pl_kvev_none_hash(const char *seed, uint8_t out[32]);
/* sha256 of the canonical CBOR of [parent (32 bytes), [tokens (n, each >= 0)], null]. */
pl_status pl_kvev_block_hash(const uint8_t parent[32], const int32_t *tokens, int n,
                             uint8_t out[32]);
/* The hash as vLLM's int form has it: the digest's last 8 bytes, big-endian. */
uint64_t pl_kvev_hash_u64(const uint8_t h[32]);

/* ---- one batch's payload (encode.c) ----------------------------------------------------- */

typedef enum pl_kvev_kind {
    PL_KVEV_STORED = 0,
    PL_KVEV_REMOVED = 1,
    PL_KVEV_CLEARED = 2,
} pl_kvev_kind;

typedef struct pl_kvev_event {
    pl_kvev_kind kind;
    const uint8_t (*hashes)[32]; /* (n_hashes) stored: a chain, parent first; removed: any */
    size_t n_hashes;
    const uint8_t *parent;       /* stored: the first block's parent, NULL at depth 0 */
    const int32_t *tokens;       /* stored: n_hashes * block_size token ids */
} pl_kvev_event;

/* msgpack of [ts, [events], 0] into *out (malloc'd, the caller frees).
 * PL_ERR_OUT_OF_MEMORY. */
pl_status pl_kvev_encode(double ts, const pl_kvev_event *events, size_t n_events,
                         int block_size, bool int_block_hashes, char **out, size_t *out_len);

/* ---- the publisher ---------------------------------------------------------------------- */

typedef struct pl_kvev pl_kvev;

/* Binds (or connects) the sockets and starts the publisher thread. block_size and n_blocks:
 * the KV pool's. PL_ERR_IO naming kv_events_config.endpoint / replay_endpoint when a socket
 * cannot be set up, PL_ERR_OUT_OF_MEMORY. c must be active. */
pl_status pl_kvev_create(const pl_kvev_config *c, int block_size, int n_blocks, pl_kvev **out);
/* Publishes what is pending (at most about a second), stops the thread, closes the sockets.
 * NULL is a no-op. */
void pl_kvev_destroy(pl_kvev *p);

/* The stepping thread's side (one thread). block: a KV pool block id; parent_block: the
 * block holding the parent registration, -1 at depth 0; tokens: block_size ids. */
void pl_kvev_stored(pl_kvev *p, int32_t block, int32_t parent_block, const int32_t *tokens);
void pl_kvev_removed(pl_kvev *p, int32_t block);
void pl_kvev_cleared(pl_kvev *p);
/* The step ended: its records become one batch for the publisher thread (nothing when
 * there are none). */
void pl_kvev_end_step(pl_kvev *p);

typedef struct pl_kvev_stats {
    uint64_t batches_published; /* sent on the PUB socket */
    uint64_t batches_dropped;   /* a full queue, or out of memory */
    uint64_t replays_served;
} pl_kvev_stats;
/* Any thread. */
void pl_kvev_get_stats(const pl_kvev *p, pl_kvev_stats *out);

#ifdef __cplusplus
}
#endif
#endif
