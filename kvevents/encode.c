/*
 * kvevents/encode.c - one KVEventBatch as msgpack, in the layout msgspec gives vLLM's
 * structs (array_like=True, omit_defaults=True, tag=True): a struct is an array of its
 * fields in declaration order, a tagged one starts with its class name, and trailing fields
 * left at their defaults are omitted (BlockStored's extra_keys and group_idx,
 * BlockRemoved's group_idx). data_parallel_rank is 0, not its default None, because vLLM's
 * publisher fills in its rank.
 */
#include <msgpack.h>
#include <string.h>

#include "kvevents/kvevents.h"

static int pack_str(msgpack_packer *pk, const char *s) {
    size_t n = strlen(s);
    int rc = msgpack_pack_str(pk, n);
    return rc ? rc : msgpack_pack_str_body(pk, s, n);
}

static int pack_hash(msgpack_packer *pk, const uint8_t h[32], bool as_int) {
    if (as_int) return msgpack_pack_uint64(pk, pl_kvev_hash_u64(h));
    int rc = msgpack_pack_bin(pk, 32);
    return rc ? rc : msgpack_pack_bin_body(pk, h, 32);
}

static int pack_hashes(msgpack_packer *pk, const pl_kvev_event *ev, bool as_int) {
    int rc = msgpack_pack_array(pk, ev->n_hashes);
    for (size_t i = 0; rc == 0 && i < ev->n_hashes; i++) rc = pack_hash(pk, ev->hashes[i], as_int);
    return rc;
}

static int pack_event(msgpack_packer *pk, const pl_kvev_event *ev, int block_size,
                      bool as_int) {
    int rc = 0;
    switch (ev->kind) {
    case PL_KVEV_STORED: {
        size_t n_tokens = ev->n_hashes * (size_t)block_size;
        rc = msgpack_pack_array(pk, 8);
        if (!rc) rc = pack_str(pk, "BlockStored");
        if (!rc) rc = pack_hashes(pk, ev, as_int);
        if (!rc) rc = ev->parent ? pack_hash(pk, ev->parent, as_int) : msgpack_pack_nil(pk);
        if (!rc) rc = msgpack_pack_array(pk, n_tokens);
        for (size_t i = 0; !rc && i < n_tokens; i++) rc = msgpack_pack_int32(pk, ev->tokens[i]);
        if (!rc) rc = msgpack_pack_int(pk, block_size);
        if (!rc) rc = msgpack_pack_nil(pk);       /* lora_id */
        if (!rc) rc = pack_str(pk, "GPU");        /* medium: vLLM's name for the engine's pool */
        if (!rc) rc = msgpack_pack_nil(pk);       /* lora_name */
        return rc;
    }
    case PL_KVEV_REMOVED:
        rc = msgpack_pack_array(pk, 3);
        if (!rc) rc = pack_str(pk, "BlockRemoved");
        if (!rc) rc = pack_hashes(pk, ev, as_int);
        if (!rc) rc = pack_str(pk, "GPU");
        return rc;
    case PL_KVEV_CLEARED:
        rc = msgpack_pack_array(pk, 1);
        return rc ? rc : pack_str(pk, "AllBlocksCleared");
    }
    return -1;
}

pl_status pl_kvev_encode(double ts, const pl_kvev_event *events, size_t n_events,
                         int block_size, bool int_block_hashes, char **out, size_t *out_len) {
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    int rc = msgpack_pack_array(&pk, 3);
    if (!rc) rc = msgpack_pack_double(&pk, ts);
    if (!rc) rc = msgpack_pack_array(&pk, n_events);
    for (size_t i = 0; !rc && i < n_events; i++)
        rc = pack_event(&pk, &events[i], block_size, int_block_hashes);
    if (!rc) rc = msgpack_pack_int(&pk, 0); /* data_parallel_rank */
    if (rc) {
        msgpack_sbuffer_destroy(&sb);
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "kv events: encoding a batch of %zu events",
                       n_events);
    }
    *out_len = sb.size;
    *out = msgpack_sbuffer_release(&sb);
    return PL_OK;
}
