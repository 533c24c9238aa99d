/*
 * engine/tp_link.c - see tp_link.h.
 *
 * Buffer layout: [header | inline payload ... PL_TP_LINK_INLINE) [rest of the payload]. The
 * leader builds the payload at buf + sizeof(header), so the first chunk is sent without a copy
 * and the rest follows from where it already lies.
 */
#include "engine/tp_link.h"

#include <errno.h>
#include <string.h>
#include <time.h>

#include "util/alloc.h"
#include "util/log.h"
#include "util/timer.h"

#define HDR sizeof(pl_plan_header)

pl_status pl_tp_link_init(pl_tp_link *l, pl_comm *comm, const pl_plan_limits *lim) {
    memset(l, 0, sizeof *l);
    l->comm = comm;
    l->lim = *lim;
    l->max_payload = pl_plan_max_payload(lim);
    l->buf = pl_calloc(1, PL_TP_LINK_INLINE + l->max_payload);
    if (!l->buf) return pl_fail(PL_ERR_OUT_OF_MEMORY, "tensor parallel: plan buffer");
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, &ca);
    pthread_condattr_destroy(&ca);
    l->last_ns = pl_now_ns();
    return PL_OK;
}

void pl_tp_link_stop_keepalive(pl_tp_link *l) {
    if (!l->keepalive_on) return;
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->keepalive, NULL);
    l->keepalive_on = false;
}

void pl_tp_link_deinit(pl_tp_link *l) {
    if (!l->buf) return;
    pl_tp_link_stop_keepalive(l);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    pl_free(l->buf);
    l->buf = NULL;
}

void pl_tp_link_lock(pl_tp_link *l) { pthread_mutex_lock(&l->mu); }
void pl_tp_link_unlock(pl_tp_link *l) { pthread_mutex_unlock(&l->mu); }
void *pl_tp_link_payload_buf(pl_tp_link *l) { return l->buf + HDR; }

pl_status pl_tp_link_send(pl_tp_link *l, pl_plan_cmd cmd, const void *payload, size_t len) {
    if (len > l->max_payload)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "step plan: %zu bytes exceed %zu", len,
                       l->max_payload);
    if (len && payload != l->buf + HDR) memmove(l->buf + HDR, payload, len);
    pl_plan_header h;
    pl_plan_header_make(cmd, l->seq, l->buf + HDR, len, &h);
    memcpy(l->buf, &h, HDR);
    PL_TRY(pl_comm_broadcast(l->comm, l->buf, PL_TP_LINK_INLINE, 0));
    if (HDR + len > PL_TP_LINK_INLINE)
        PL_TRY(pl_comm_broadcast(l->comm, l->buf + PL_TP_LINK_INLINE,
                                 HDR + len - PL_TP_LINK_INLINE, 0));
    l->seq++;
    l->last_ns = pl_now_ns();
    return PL_OK;
}

pl_status pl_tp_link_recv(pl_tp_link *l, pl_plan_header *out_h, const void **out_payload) {
    for (;;) {
        PL_TRY(pl_comm_broadcast(l->comm, l->buf, PL_TP_LINK_INLINE, 0));
        pl_plan_header h;
        memcpy(&h, l->buf, HDR);
        PL_TRY(pl_plan_check_header(&h, l->seq, l->max_payload));
        if (HDR + h.payload_bytes > PL_TP_LINK_INLINE)
            PL_TRY(pl_comm_broadcast(l->comm, l->buf + PL_TP_LINK_INLINE,
                                     HDR + h.payload_bytes - PL_TP_LINK_INLINE, 0));
        PL_TRY(pl_plan_check_payload(&h, l->buf + HDR));
        l->seq++;
        if (h.cmd == PL_PLAN_HEARTBEAT) continue;
        *out_h = h;
        *out_payload = l->buf + HDR;
        return PL_OK;
    }
}

/* ---- the keep-alive thread (leader) ------------------------------------------------------ */

static void *keepalive_main(void *arg) {
    pl_tp_link *l = arg;
    uint64_t interval = (uint64_t)(l->comm->timeout_s * 1e9 / 4);
    if (interval < 1000000) interval = 1000000;
    pthread_mutex_lock(&l->mu);
    while (!l->stop) {
        uint64_t now = pl_now_ns(), due = l->last_ns + interval;
        if (now >= due) {
            pl_status s = pl_tp_link_send(l, PL_PLAN_HEARTBEAT, NULL, 0);
            if (s != PL_OK) {
                /* the next command fails the same way: the engine reports it there */
                l->keepalive_status = s;
                pl_log(PL_LOG_ERROR, "tensor parallel: heartbeat: %s", pl_last_error());
                break;
            }
            continue;
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t wait = due - now;
        ts.tv_sec += (time_t)(wait / 1000000000u);
        ts.tv_nsec += (long)(wait % 1000000000u);
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&l->cv, &l->mu, &ts);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

pl_status pl_tp_link_start_keepalive(pl_tp_link *l) {
    l->stop = false;
    if (pthread_create(&l->keepalive, NULL, keepalive_main, l) != 0)
        return pl_fail(PL_ERR_BACKEND, "tensor parallel: cannot start the keep-alive thread");
    l->keepalive_on = true;
    return PL_OK;
}
