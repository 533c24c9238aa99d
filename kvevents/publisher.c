/*
 * kvevents/publisher.c - the ZeroMQ publisher: the stepping thread's record buffer, the queue
 * of step batches, and the publisher thread (hashes, encoding, PUB, the replay ROUTER).
 *
 * The stepping thread pays for an event an append of a small record (and, for a stored
 * block, a copy of its block_size token ids); at the end of a step one allocation, one copy
 * and one lock hand the step's records over, and a write to an eventfd wakes the publisher.
 * Everything else happens on the publisher thread, which owns the ZeroMQ sockets (they are
 * not thread-safe; they are made here at create, before the thread starts, so that a bad
 * endpoint fails the engine's creation, and handed over by pthread_create's barrier).
 *
 * The publisher thread keeps, per KV block, the sha256 hash of the registration it holds: a
 * stored record's parent is named by block id and that block's hash is the parent hash (the
 * KV cache manager removes a block's registration before the block is reused, and a parent
 * outlives the registration of its child, so in the records' order the parent's hash is the
 * right one). Records are applied in order; consecutive stored blocks that chain (each the
 * parent of the next) become one BlockStored, as vLLM sends a run of newly cached blocks,
 * and consecutive removals one BlockRemoved.
 *
 * Sequence numbers count published batches from 0. A batch dropped before publication (a
 * full queue) never gets one, so subscribers see no gap, but blocks it would have stored are
 * unknown to the publisher: a later child of such a block is not published (its hash cannot
 * be computed) and its removal neither. Dropping is logged (once) and counted.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "kvevents/kvevents.h"
#include "util/alloc.h"
#include "util/log.h"

/* ---- records and batches ---------------------------------------------------------------- */

typedef struct record {
    uint8_t kind;       /* pl_kvev_kind */
    int32_t block;
    int32_t parent;     /* stored: parent block or -1 */
    uint32_t tok;       /* stored: offset of its block_size tokens in the batch's tokens */
} record;

typedef struct batch {
    struct batch *next;
    double ts;
    size_t n_recs;
    record *recs;       /* (n_recs), in the same allocation */
    int32_t *tokens;    /* in the same allocation */
} batch;

typedef struct kept {   /* a published batch kept for replay */
    uint64_t seq;
    char *payload;
    size_t len;
} kept;

struct pl_kvev {
    pl_kvev_config cfg;     /* owned copies of the strings */
    int block_size, n_blocks;

    /* stepping thread */
    record *recs;
    size_t n_recs, cap_recs;
    int32_t *toks;
    size_t n_toks, cap_toks;
    bool step_lost;         /* out of memory while recording: the step's batch is dropped */

    /* queue (mu) */
    pthread_mutex_t mu;
    batch *head, *tail;
    size_t n_queued;
    bool stop;
    bool warned_drop;
    int wake_fd;            /* eventfd: a batch arrived, or stop */

    /* publisher thread */
    pthread_t thread;
    bool started;
    void *zctx, *pub, *replay;
    uint8_t none_hash[32];
    uint8_t (*hash)[32];    /* (n_blocks) the hash of the registration each block holds */
    uint8_t *known;         /* (n_blocks) whether hash[b] is set */
    uint64_t next_seq;
    kept *ring;             /* (buffer_steps) the latest published batches */
    size_t ring_start, ring_n;
    /* scratch of one batch's events */
    struct ev_desc *descs;
    size_t cap_descs;
    pl_kvev_event *evs;
    size_t cap_evs;
    uint8_t (*hbuf)[32];
    size_t cap_hbuf;
    int32_t *tbuf;
    size_t cap_tbuf;

    atomic_uint_fast64_t published, dropped, replays;
};

/* ---- the stepping thread's side --------------------------------------------------------- */

static bool add_record(pl_kvev *p, pl_kvev_kind kind, int32_t block, int32_t parent,
                       const int32_t *tokens) {
    if (p->step_lost) return false;
    if (pl_grow_array((void **)&p->recs, &p->cap_recs, p->n_recs + 1, sizeof *p->recs,
                      "kv events") != PL_OK)
        return p->step_lost = true, false;
    record *r = &p->recs[p->n_recs];
    *r = (record){.kind = (uint8_t)kind, .block = block, .parent = parent};
    if (tokens) {
        size_t bs = (size_t)p->block_size;
        if (pl_grow_array((void **)&p->toks, &p->cap_toks, p->n_toks + bs, sizeof *p->toks,
                          "kv events") != PL_OK)
            return p->step_lost = true, false;
        memcpy(p->toks + p->n_toks, tokens, bs * sizeof *p->toks);
        r->tok = (uint32_t)p->n_toks;
        p->n_toks += bs;
    }
    p->n_recs++;
    return true;
}

void pl_kvev_stored(pl_kvev *p, int32_t block, int32_t parent_block, const int32_t *tokens) {
    add_record(p, PL_KVEV_STORED, block, parent_block, tokens);
}

void pl_kvev_removed(pl_kvev *p, int32_t block) {
    add_record(p, PL_KVEV_REMOVED, block, -1, NULL);
}

void pl_kvev_cleared(pl_kvev *p) { add_record(p, PL_KVEV_CLEARED, -1, -1, NULL); }

static double wall_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void wake(pl_kvev *p) {
    uint64_t one = 1;
    if (write(p->wake_fd, &one, sizeof one) < 0) { /* the counter is full: already awake */ }
}

static void count_drop(pl_kvev *p, const char *why) {
    atomic_fetch_add(&p->dropped, 1);
    if (!p->warned_drop) {
        p->warned_drop = true;
        pl_log(PL_LOG_WARN, "kv events: a step's events were dropped (%s); routers may miss "
               "blocks until they are evicted (counted in batches_dropped, logged once)", why);
    }
}

void pl_kvev_end_step(pl_kvev *p) {
    if (!p || (p->n_recs == 0 && !p->step_lost)) return;
    bool lost = p->step_lost;
    size_t n_recs = p->n_recs, n_toks = p->n_toks;
    p->n_recs = p->n_toks = 0;
    p->step_lost = false;
    batch *b = lost ? NULL
                    : pl_malloc(sizeof *b + n_recs * sizeof(record) + n_toks * sizeof(int32_t));
    if (!b) {
        pthread_mutex_lock(&p->mu);
        count_drop(p, "out of memory");
        pthread_mutex_unlock(&p->mu);
        return;
    }
    b->next = NULL;
    b->ts = wall_now();
    b->n_recs = n_recs;
    b->recs = (record *)(b + 1);
    b->tokens = (int32_t *)(b->recs + n_recs);
    memcpy(b->recs, p->recs, n_recs * sizeof(record));
    if (n_toks) memcpy(b->tokens, p->toks, n_toks * sizeof(int32_t));
    pthread_mutex_lock(&p->mu);
    bool full = p->n_queued >= (size_t)p->cfg.max_queue_size;
    if (full) {
        count_drop(p, "the publisher's queue is full (kv_events_config.max_queue_size)");
    } else {
        if (p->tail) p->tail->next = b;
        else p->head = b;
        p->tail = b;
        p->n_queued++;
    }
    pthread_mutex_unlock(&p->mu);
    if (full) pl_free(b);
    else wake(p);
}

void pl_kvev_get_stats(const pl_kvev *p, pl_kvev_stats *out) {
    pl_kvev *m = (pl_kvev *)p; /* atomics are state, not value */
    *out = (pl_kvev_stats){.batches_published = atomic_load(&m->published),
                           .batches_dropped = atomic_load(&m->dropped),
                           .replays_served = atomic_load(&m->replays)};
}

/* ---- the publisher thread: records -> events -> payload ---------------------------------- */

/* An event being built: offsets into the scratch arrays, which may still grow. */
typedef struct ev_desc {
    pl_kvev_kind kind;
    size_t h0, n_h;   /* its hashes: hbuf[h0 .. h0 + n_h) */
    long parent;      /* stored: the parent's hash at hbuf[parent]; -1 at depth 0 */
    size_t t0;        /* stored: its tokens from tbuf[t0] */
} ev_desc;

/* Grows the scratch arrays for a batch of n records (each adds at most one event, two
 * hashes (its own and a parent's) and block_size tokens). */
static bool scratch_for(pl_kvev *p, size_t n) {
    return pl_grow_array((void **)&p->descs, &p->cap_descs, n, sizeof *p->descs,
                         "kv events") == PL_OK &&
           pl_grow_array((void **)&p->evs, &p->cap_evs, n, sizeof *p->evs, "kv events") ==
               PL_OK &&
           pl_grow_array((void **)&p->hbuf, &p->cap_hbuf, 2 * n, sizeof *p->hbuf,
                         "kv events") == PL_OK &&
           pl_grow_array((void **)&p->tbuf, &p->cap_tbuf, n * (size_t)p->block_size,
                         sizeof *p->tbuf, "kv events") == PL_OK;
}

/* Turns b's records into events (p->evs, over the scratch arrays, which must hold b) and
 * updates the per-block hashes. Returns the number of events. */
static size_t to_events(pl_kvev *p, const batch *b) {
    size_t n_ev = 0, n_h = 0, n_t = 0;
    size_t bs = (size_t)p->block_size;
    int32_t run_end = -1; /* the block ending the current BlockStored run, -1: none */
    for (size_t i = 0; i < b->n_recs; i++) {
        const record *r = &b->recs[i];
        ev_desc *cur = n_ev ? &p->descs[n_ev - 1] : NULL;
        if (r->kind == PL_KVEV_CLEARED) {
            memset(p->known, 0, (size_t)p->n_blocks);
            p->descs[n_ev++] = (ev_desc){.kind = PL_KVEV_CLEARED, .parent = -1};
            run_end = -1;
            continue;
        }
        if (r->block < 0 || r->block >= p->n_blocks) continue;
        if (r->kind == PL_KVEV_REMOVED) {
            run_end = -1;
            if (!p->known[r->block]) continue; /* its store was dropped */
            p->known[r->block] = 0;
            memcpy(p->hbuf[n_h], p->hash[r->block], 32);
            if (cur && cur->kind == PL_KVEV_REMOVED) cur->n_h++;
            else p->descs[n_ev++] = (ev_desc){.kind = PL_KVEV_REMOVED, .h0 = n_h, .n_h = 1,
                                              .parent = -1};
            n_h++;
            continue;
        }
        /* stored: its hash chains from its parent's (NONE_HASH at depth 0) */
        const uint8_t *parent = p->none_hash;
        p->known[r->block] = 0;
        if (r->parent >= 0) {
            if (r->parent >= p->n_blocks || !p->known[r->parent]) { /* the parent's was lost */
                run_end = -1;
                continue;
            }
            parent = p->hash[r->parent];
        }
        uint8_t h[32];
        if (pl_kvev_block_hash(parent, b->tokens + r->tok, p->block_size, h) != PL_OK) {
            run_end = -1;
            continue;
        }
        if (!(cur && cur->kind == PL_KVEV_STORED && run_end >= 0 && r->parent == run_end)) {
            ev_desc d = {.kind = PL_KVEV_STORED, .parent = -1, .t0 = n_t};
            if (r->parent >= 0) { /* by value: the parent may be removed later in the batch */
                memcpy(p->hbuf[n_h], parent, 32);
                d.parent = (long)n_h++;
            }
            d.h0 = n_h;
            p->descs[n_ev++] = d;
            cur = &p->descs[n_ev - 1];
        }
        memcpy(p->hash[r->block], h, 32);
        p->known[r->block] = 1;
        memcpy(p->hbuf[n_h++], h, 32);
        memcpy(p->tbuf + n_t, b->tokens + r->tok, bs * sizeof(int32_t));
        n_t += bs;
        cur->n_h++;
        run_end = r->block;
    }
    for (size_t i = 0; i < n_ev; i++) {
        const ev_desc *d = &p->descs[i];
        p->evs[i] = (pl_kvev_event){
            .kind = d->kind, .n_hashes = d->n_h,
            .hashes = (const uint8_t(*)[32])p->hbuf + d->h0,
            .parent = d->parent >= 0 ? p->hbuf[d->parent] : NULL,
            .tokens = d->kind == PL_KVEV_STORED ? p->tbuf + d->t0 : NULL,
        };
    }
    return n_ev;
}

/* ---- the publisher thread: sockets --------------------------------------------------------- */

static void keep(pl_kvev *p, uint64_t seq, char *payload, size_t len) {
    size_t cap = (size_t)p->cfg.buffer_steps;
    if (cap == 0) {
        free(payload);
        return;
    }
    if (p->ring_n == cap) { /* the oldest goes */
        free(p->ring[p->ring_start].payload);
        p->ring_start = (p->ring_start + 1) % cap;
        p->ring_n--;
    }
    p->ring[(p->ring_start + p->ring_n) % cap] = (kept){.seq = seq, .payload = payload,
                                                        .len = len};
    p->ring_n++;
}

static void seq_bytes(int64_t seq, uint8_t out[8]) {
    uint64_t v = (uint64_t)seq;
    for (int i = 7; i >= 0; i--, v >>= 8) out[i] = (uint8_t)v;
}

static void publish(pl_kvev *p, const batch *b) {
    if (!scratch_for(p, b->n_recs)) {
        atomic_fetch_add(&p->dropped, 1);
        return;
    }
    size_t n_ev = to_events(p, b);
    if (n_ev == 0) return; /* every record concerned a dropped block */
    char *payload = NULL;
    size_t len = 0;
    if (pl_kvev_encode(b->ts, p->evs, n_ev, p->block_size, p->cfg.int_block_hashes, &payload,
                       &len) != PL_OK) {
        atomic_fetch_add(&p->dropped, 1);
        return;
    }
    uint64_t seq = p->next_seq++;
    uint8_t sb[8];
    seq_bytes((int64_t)seq, sb);
    const char *topic = p->cfg.topic;
    /* PUB never blocks: past the high-water mark ZeroMQ drops for the slow subscriber */
    zmq_send(p->pub, topic, strlen(topic), ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(p->pub, sb, sizeof sb, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(p->pub, payload, len, ZMQ_DONTWAIT);
    atomic_fetch_add(&p->published, 1);
    keep(p, seq, payload, len);
}

/* Receives one multipart message into up to 3 frames (the rest are read and dropped);
 * returns the number of frames, -1 when none was waiting. */
static int recv_frames(void *sock, zmq_msg_t *f, int max) {
    int n = 0, more = 1;
    while (more) {
        zmq_msg_t part;
        zmq_msg_init(&part);
        if (zmq_msg_recv(&part, sock, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
            zmq_msg_close(&part);
            return n == 0 ? -1 : n;
        }
        more = zmq_msg_more(&part);
        if (n < max) {
            zmq_msg_init(&f[n]);
            zmq_msg_move(&f[n], &part);
        }
        zmq_msg_close(&part);
        n++;
    }
    return n;
}

static void send_reply(void *sock, zmq_msg_t *id, int64_t seq, const char *payload,
                       size_t len) {
    uint8_t sb[8];
    seq_bytes(seq, sb);
    zmq_send(sock, zmq_msg_data(id), zmq_msg_size(id), ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(sock, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(sock, sb, sizeof sb, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(sock, payload, len, ZMQ_DONTWAIT);
}

/* A replay request [identity, empty, start (8 bytes, big-endian)]: every kept batch from
 * start on, then the end marker (sequence -1, empty payload). Anything else is ignored. */
static void serve_replays(pl_kvev *p) {
    for (;;) {
        zmq_msg_t f[3];
        int n = recv_frames(p->replay, f, 3);
        if (n < 0) return;
        bool ok = n == 3 && zmq_msg_size(&f[1]) == 0 && zmq_msg_size(&f[2]) == 8;
        if (ok) {
            const uint8_t *d = zmq_msg_data(&f[2]);
            uint64_t start = 0;
            for (int i = 0; i < 8; i++) start = start << 8 | d[i];
            size_t cap = (size_t)p->cfg.buffer_steps;
            for (size_t i = 0; i < p->ring_n; i++) {
                const kept *k = &p->ring[(p->ring_start + i) % cap];
                if (k->seq >= start) send_reply(p->replay, &f[0], (int64_t)k->seq, k->payload,
                                                k->len);
            }
            send_reply(p->replay, &f[0], -1, "", 0);
            atomic_fetch_add(&p->replays, 1);
        } else {
            pl_log(PL_LOG_WARN, "kv events: ignored a replay request of %d frame(s) (expected "
                   "an empty frame and an 8-byte start sequence)", n > 0 ? n - 1 : 0);
        }
        for (int i = 0; i < (n < 3 ? n : 3); i++) zmq_msg_close(&f[i]);
    }
}

static batch *take_all(pl_kvev *p, bool *out_stop) {
    pthread_mutex_lock(&p->mu);
    batch *b = p->head;
    p->head = p->tail = NULL;
    p->n_queued = 0;
    *out_stop = p->stop;
    pthread_mutex_unlock(&p->mu);
    return b;
}

static void *publisher_main(void *arg) {
    pl_kvev *p = arg;
    for (;;) {
        zmq_pollitem_t items[2] = {{.fd = p->wake_fd, .events = ZMQ_POLLIN}};
        int n_items = 1;
        if (p->replay) items[n_items++] = (zmq_pollitem_t){.socket = p->replay,
                                                           .events = ZMQ_POLLIN};
        if (zmq_poll(items, n_items, -1) < 0 && zmq_errno() != EINTR) {
            pl_log(PL_LOG_ERROR, "kv events: zmq_poll: %s", zmq_strerror(zmq_errno()));
            break;
        }
        if (items[0].revents & ZMQ_POLLIN) {
            uint64_t v;
            if (read(p->wake_fd, &v, sizeof v) < 0) { /* nothing: a spurious wake-up */ }
        }
        bool stop;
        for (batch *b = take_all(p, &stop), *next; b; b = next) {
            next = b->next;
            publish(p, b);
            pl_free(b);
        }
        if (n_items > 1 && (items[1].revents & ZMQ_POLLIN)) serve_replays(p);
        if (stop) break;
    }
    return NULL;
}

/* ---- create / destroy --------------------------------------------------------------------- */

/* vLLM's rule: bind what names no host (a wildcard) or is local, connect to the rest. */
static bool binds(const char *ep) {
    return strchr(ep, '*') || strstr(ep, "::") || !strncmp(ep, "ipc://", 6) ||
           !strncmp(ep, "inproc://", 9);
}

static pl_status open_socket(pl_kvev *p, int type, const char *ep, bool bind_only,
                             const char *key, void **out) {
    void *s = zmq_socket(p->zctx, type);
    if (!s)
        return pl_fail(PL_ERR_IO, "kv_events_config.%s: %s", key, zmq_strerror(zmq_errno()));
    int linger = 100; /* ms: let the last batches out at shutdown, without hanging on it */
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    if (type == ZMQ_PUB) zmq_setsockopt(s, ZMQ_SNDHWM, &p->cfg.hwm, sizeof p->cfg.hwm);
    int rc = bind_only || binds(ep) ? zmq_bind(s, ep) : zmq_connect(s, ep);
    if (rc != 0) {
        pl_status st = pl_fail(PL_ERR_IO, "kv_events_config.%s: cannot %s %s: %s", key,
                               bind_only || binds(ep) ? "bind" : "connect to", ep,
                               zmq_strerror(zmq_errno()));
        zmq_close(s);
        return st;
    }
    *out = s;
    return PL_OK;
}

static void unlink_ipc(const char *ep) {
    if (ep && !strncmp(ep, "ipc://", 6) && ep[6] && ep[6] != '@') unlink(ep + 6);
}

static pl_status copy_string(char **dst, const char *src) {
    if (!src) return *dst = NULL, PL_OK;
    *dst = pl_strdup(src);
    return *dst ? PL_OK : pl_fail(PL_ERR_OUT_OF_MEMORY, "kv events: configuration");
}

pl_status pl_kvev_create(const pl_kvev_config *c, int block_size, int n_blocks, pl_kvev **out) {
    if (!c || !pl_kvev_config_active(c) || block_size < 1 || n_blocks < 1 || !out)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "kv events: nothing to publish");
    pl_kvev *p = pl_calloc(1, sizeof *p);
    if (!p) return pl_fail(PL_ERR_OUT_OF_MEMORY, "kv events: publisher");
    p->cfg = *c;
    p->cfg.endpoint = p->cfg.replay_endpoint = p->cfg.topic = p->cfg.hash_seed = NULL;
    p->block_size = block_size;
    p->n_blocks = n_blocks;
    p->wake_fd = -1;
    pthread_mutex_init(&p->mu, NULL);
    pl_status s = copy_string(&p->cfg.endpoint, c->endpoint);
    if (s == PL_OK) s = copy_string(&p->cfg.replay_endpoint, c->replay_endpoint);
    if (s == PL_OK) s = copy_string(&p->cfg.topic, c->topic ? c->topic : "");
    if (s == PL_OK) s = copy_string(&p->cfg.hash_seed, c->hash_seed ? c->hash_seed : "");
    if (s == PL_OK) {
        p->hash = pl_calloc((size_t)n_blocks, sizeof *p->hash);
        p->known = pl_calloc((size_t)n_blocks, 1);
        p->ring = c->buffer_steps ? pl_calloc((size_t)c->buffer_steps, sizeof *p->ring) : NULL;
        if (!p->hash || !p->known || (c->buffer_steps && !p->ring))
            s = pl_fail(PL_ERR_OUT_OF_MEMORY, "kv events: state for %d blocks, %d kept "
                        "batches (kv_events_config.buffer_steps)", n_blocks, c->buffer_steps);
    }
    if (s == PL_OK) s = pl_kvev_none_hash(p->cfg.hash_seed, p->none_hash);
    if (s == PL_OK && (p->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
        s = pl_fail(PL_ERR_IO, "kv events: eventfd: %s", strerror(errno));
    if (s == PL_OK && !(p->zctx = zmq_ctx_new()))
        s = pl_fail(PL_ERR_IO, "kv events: zmq context: %s", zmq_strerror(zmq_errno()));
    if (s == PL_OK) s = open_socket(p, ZMQ_PUB, p->cfg.endpoint, false, "endpoint", &p->pub);
    if (s == PL_OK && p->cfg.replay_endpoint)
        s = open_socket(p, ZMQ_ROUTER, p->cfg.replay_endpoint, true, "replay_endpoint",
                        &p->replay);
    if (s == PL_OK) {
        if (pthread_create(&p->thread, NULL, publisher_main, p) != 0)
            s = pl_fail(PL_ERR_IO, "kv events: cannot start the publisher thread");
        else
            p->started = true;
    }
    if (s != PL_OK) {
        pl_kvev_destroy(p);
        return s;
    }
    pl_log(PL_LOG_INFO, "kv events: publishing on %s%s%s (topic \"%s\", %s block hashes)",
           p->cfg.endpoint, p->replay ? ", replay on " : "",
           p->replay ? p->cfg.replay_endpoint : "", p->cfg.topic,
           p->cfg.int_block_hashes ? "64-bit integer" : "32-byte");
    *out = p;
    return PL_OK;
}

void pl_kvev_destroy(pl_kvev *p) {
    if (!p) return;
    if (p->started) {
        pl_kvev_end_step(p); /* records of a step that did not end */
        pthread_mutex_lock(&p->mu);
        p->stop = true;
        pthread_mutex_unlock(&p->mu);
        wake(p);
        pthread_join(p->thread, NULL);
    }
    for (batch *b = p->head, *next; b; b = next) {
        next = b->next;
        pl_free(b);
    }
    if (p->pub) zmq_close(p->pub);
    if (p->replay) zmq_close(p->replay);
    if (p->zctx) zmq_ctx_term(p->zctx);
    /* ZeroMQ leaves the files of bound ipc:// endpoints behind; they are ours */
    if (p->pub) unlink_ipc(p->cfg.endpoint);
    if (p->replay) unlink_ipc(p->cfg.replay_endpoint);
    if (p->wake_fd >= 0) close(p->wake_fd);
    size_t cap = (size_t)p->cfg.buffer_steps;
    for (size_t i = 0; i < p->ring_n; i++) free(p->ring[(p->ring_start + i) % cap].payload);
    pl_free(p->ring);
    pl_free(p->hash);
    pl_free(p->known);
    pl_free(p->recs);
    pl_free(p->toks);
    pl_free(p->descs);
    pl_free(p->evs);
    pl_free(p->hbuf);
    pl_free(p->tbuf);
    pthread_mutex_destroy(&p->mu);
    pl_kvev_config_deinit(&p->cfg);
    pl_free(p);
}
