/*
 * server/registry.c - engine request id -> the HTTP request (and which of its prompts) it
 * serves. Open addressing with linear probing; deletion shifts the run back, so there are
 * no tombstones and a lookup stops at the first empty slot. Ids grow by one per submit, and
 * the hash spreads them (a multiplicative hash), so runs stay short. Not thread-safe: the
 * server holds reg_mu.
 */
#include <stdlib.h>

#include "server/srv.h"

static size_t slot_of(pl_request_id id, size_t cap) {
    return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 17) & (cap - 1);
}

static bool grow(pl_srv_registry *g) {
    size_t cap = g->cap ? g->cap * 2 : 64;
    pl_srv_entry *slots = calloc(cap, sizeof *slots);
    if (!slots) return false;
    for (size_t i = 0; i < g->cap; i++) {
        if (!g->slots[i].id) continue;
        size_t k = slot_of(g->slots[i].id, cap);
        while (slots[k].id) k = (k + 1) & (cap - 1);
        slots[k] = g->slots[i];
    }
    free(g->slots);
    g->slots = slots;
    g->cap = cap;
    return true;
}

bool pl_srv_registry_put(pl_srv_registry *g, pl_request_id id, pl_srv_req *req, int prompt) {
    if ((g->n + 1) * 2 > g->cap && !grow(g)) return false;
    size_t k = slot_of(id, g->cap);
    while (g->slots[k].id && g->slots[k].id != id) k = (k + 1) & (g->cap - 1);
    if (!g->slots[k].id) g->n++;
    g->slots[k] = (pl_srv_entry){.id = id, .req = req, .prompt = prompt};
    return true;
}

pl_srv_entry *pl_srv_registry_get(pl_srv_registry *g, pl_request_id id) {
    if (!g->cap || !id) return NULL;
    for (size_t k = slot_of(id, g->cap);; k = (k + 1) & (g->cap - 1)) {
        if (!g->slots[k].id) return NULL;
        if (g->slots[k].id == id) return &g->slots[k];
    }
}

void pl_srv_registry_del(pl_srv_registry *g, pl_request_id id) {
    pl_srv_entry *e = pl_srv_registry_get(g, id);
    if (!e) return;
    size_t mask = g->cap - 1, hole = (size_t)(e - g->slots);
    g->slots[hole].id = 0;
    g->n--;
    /* move back every entry of the run that the hole now separates from its home slot */
    for (size_t k = (hole + 1) & mask; g->slots[k].id; k = (k + 1) & mask) {
        size_t home = slot_of(g->slots[k].id, g->cap);
        bool reachable = hole <= k ? (home <= hole || home > k) : (home <= hole && home > k);
        if (reachable) {
            g->slots[hole] = g->slots[k];
            g->slots[k].id = 0;
            hole = k;
        }
    }
}

void pl_srv_registry_free(pl_srv_registry *g) {
    free(g->slots);
    g->slots = NULL;
    g->cap = g->n = 0;
}
