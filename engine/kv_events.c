/*
 * engine/kv_events.c - the prefix-cache events of config.kv_events_config: the KV pool's
 * listener forwarding to the publisher of kvevents/ (vLLM's event stream over ZeroMQ).
 *
 * kvcache/ knows nothing of the publisher (it tells a listener what it registers and drops,
 * by block id); kvevents/ knows nothing of the pool. The engine joins them here and closes
 * each step's batch at the step's end. Only rank 0 has a pool, so only it publishes.
 */
#include "engine/engine_internal.h"
#include "kvevents/kvevents.h"
#include "util/log.h"

static void on_stored(void *ctx, int32_t block, int32_t parent, const int32_t *tokens,
                      int n_tokens) {
    (void)n_tokens; /* the pool's block size, which the publisher was made with */
    pl_kvev_stored(ctx, block, parent, tokens);
}

static void on_removed(void *ctx, int32_t block) { pl_kvev_removed(ctx, block); }

static void on_cleared(void *ctx) { pl_kvev_cleared(ctx); }

pl_status pl_engine_kv_events_start(pl_engine *e) {
    pl_kvev_config kc;
    PL_TRY(pl_kvev_config_parse(e->cfg.kv_events_config, &kc));
    pl_status s = PL_OK;
    if (pl_kvev_config_active(&kc)) {
        if (!e->cfg.enable_prefix_caching)
            pl_log(PL_LOG_WARN, "kv events are on but prefix caching is off "
                   "(--enable-prefix-caching): no block is ever stored, nothing is published");
        s = pl_kvev_create(&kc, e->cfg.block_size, e->n_blocks, &e->kvev);
        if (s == PL_OK)
            pl_kv_set_listener(e->pool, &(pl_kv_listener){.ctx = e->kvev, .stored = on_stored,
                                                          .removed = on_removed,
                                                          .cleared = on_cleared});
    }
    pl_kvev_config_deinit(&kc);
    return s;
}

void pl_engine_kv_events_end_step(pl_engine *e) {
    if (e->kvev) pl_kvev_end_step(e->kvev);
}

void pl_engine_kv_events_stop(pl_engine *e) {
    if (!e->kvev) return;
    if (e->pool) pl_kv_set_listener(e->pool, NULL);
    pl_kvev_destroy(e->kvev);
    e->kvev = NULL;
}
