/*
 * engine/id_map.c - request id -> request, open addressing with linear probing.
 *
 * Ids come from a counter, so a multiplicative hash spreads them well. Deleted slots become
 * tombstones; the table is rebuilt when live + tombstones pass 3/4 of capacity.
 */
#include <string.h>

#include "engine/engine_internal.h"
#include "util/alloc.h"

#define TOMB UINT64_MAX

static size_t slot_of(uint64_t id, size_t cap) {
    return (size_t)((id * 0x9e3779b97f4a7c15ull) >> 17) & (cap - 1);
}

static pl_status rehash(pl_id_map *m, size_t cap) {
    uint64_t *keys = pl_calloc(cap, sizeof *keys);
    pl_request **vals = pl_calloc(cap, sizeof *vals);
    if (!keys || !vals) {
        pl_free(keys);
        pl_free(vals);
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "request map: %zu slots", cap);
    }
    for (size_t i = 0; i < m->cap; i++) {
        uint64_t k = m->keys[i];
        if (k == 0 || k == TOMB) continue;
        size_t j = slot_of(k, cap);
        while (keys[j]) j = (j + 1) & (cap - 1);
        keys[j] = k;
        vals[j] = m->vals[i];
    }
    pl_free(m->keys);
    pl_free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = cap;
    m->n_tomb = 0;
    return PL_OK;
}

pl_status pl_id_map_put(pl_id_map *m, uint64_t id, pl_request *r) {
    if ((m->n + m->n_tomb + 1) * 4 > m->cap * 3) {
        size_t cap = m->cap ? m->cap : 64;
        while ((m->n + 1) * 2 > cap) cap *= 2;
        PL_TRY(rehash(m, cap));
    }
    size_t j = slot_of(id, m->cap);
    while (m->keys[j] != 0 && m->keys[j] != TOMB) j = (j + 1) & (m->cap - 1);
    if (m->keys[j] == TOMB) m->n_tomb--;
    m->keys[j] = id;
    m->vals[j] = r;
    m->n++;
    return PL_OK;
}

static size_t find(const pl_id_map *m, uint64_t id) {
    if (!m->cap) return SIZE_MAX;
    size_t j = slot_of(id, m->cap);
    for (size_t probes = 0; probes < m->cap && m->keys[j] != 0; probes++) {
        if (m->keys[j] == id) return j;
        j = (j + 1) & (m->cap - 1);
    }
    return SIZE_MAX;
}

pl_request *pl_id_map_get(const pl_id_map *m, uint64_t id) {
    size_t j = find(m, id);
    return j == SIZE_MAX ? NULL : m->vals[j];
}

void pl_id_map_del(pl_id_map *m, uint64_t id) {
    size_t j = find(m, id);
    if (j == SIZE_MAX) return;
    m->keys[j] = TOMB;
    m->vals[j] = NULL;
    m->n--;
    m->n_tomb++;
}

void pl_id_map_free(pl_id_map *m) {
    pl_free(m->keys);
    pl_free(m->vals);
    memset(m, 0, sizeof *m);
}
