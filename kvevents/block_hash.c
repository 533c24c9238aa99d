/*
 * kvevents/block_hash.c - vLLM's sha256_cbor block hashes, so that a router which hashes a
 * prompt's tokens itself (llm-d computes the chain from the tokens of a request it has not
 * yet routed) finds the very keys pagellm published.
 *
 * vLLM hashes a full block as sha256(cbor2.dumps((parent_hash, tuple(token_ids),
 * extra_keys), canonical=True)) with extra_keys None (no LoRA, multimodal inputs or cache
 * salt here), and the first block's parent is NONE_HASH = sha256(cbor2.dumps(seed)).
 * Canonical CBOR writes every integer in its shortest form, which libcbor does when each is
 * built at the narrowest width that holds it; a tuple and a list are both a definite array.
 */
#include <cbor.h>
#include <nettle/sha2.h>
#include <string.h>

#include "kvevents/kvevents.h"

static pl_status digest(cbor_item_t *item, uint8_t out[32]) {
    unsigned char *buf = NULL;
    size_t cap = 0;
    size_t len = item ? cbor_serialize_alloc(item, &buf, &cap) : 0;
    if (item) cbor_decref(&item);
    if (len == 0) {
        free(buf);
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "kv events: block hash");
    }
    struct sha256_ctx ctx;
    sha256_init(&ctx);
    sha256_update(&ctx, len, buf);
    sha256_digest(&ctx, 32, out);
    free(buf); /* libcbor allocates with malloc */
    return PL_OK;
}

static cbor_item_t *uint_item(uint32_t v) {
    if (v <= UINT8_MAX) return cbor_build_uint8((uint8_t)v);
    if (v <= UINT16_MAX) return cbor_build_uint16((uint16_t)v);
    return cbor_build_uint32(v);
}

/* Pushes item into array, taking the reference; false (item released) on failure. */
static bool push(cbor_item_t *array, cbor_item_t *item) {
    if (!item) return false;
    bool ok = cbor_array_push(array, item);
    cbor_decref(&item); /* the array holds its own reference when the push succeeded */
    return ok;
}

pl_status pl_kvev_none_hash(const char *seed, uint8_t out[32]) {
    return digest(cbor_build_stringn(seed, strlen(seed)), out);
}

pl_status pl_kvev_block_hash(const uint8_t parent[32], const int32_t *tokens, int n,
                             uint8_t out[32]) {
    cbor_item_t *root = cbor_new_definite_array(3);
    cbor_item_t *ids = cbor_new_definite_array((size_t)n);
    bool ok = root && ids;
    for (int i = 0; ok && i < n; i++) ok = push(ids, uint_item((uint32_t)tokens[i]));
    ok = ok && push(root, cbor_build_bytestring(parent, 32));
    if (ok) {
        ok = push(root, ids);
        ids = NULL;
    }
    ok = ok && push(root, cbor_new_null());
    if (ids) cbor_decref(&ids);
    if (!ok) {
        if (root) cbor_decref(&root);
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "kv events: block hash");
    }
    return digest(root, out);
}

uint64_t pl_kvev_hash_u64(const uint8_t h[32]) {
    uint64_t v = 0;
    for (int i = 24; i < 32; i++) v = v << 8 | h[i];
    return v;
}
