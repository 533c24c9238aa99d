/*
 * engine/tp_link.h - the channel that carries step plans (engine/plan.h) from rank 0 to the
 * other ranks of a tensor-parallel group, over the group's communicator.
 *
 * A message goes out as one broadcast of a fixed-size first chunk (the header and, for a
 * decode step, the whole payload) and, for a larger payload, one broadcast of the rest.
 *
 * Rank 0 (the leader) sends one command at a time: pl_tp_link_lock / _unlock bracket a
 * command together with the collectives it implies (a RUN's all-reduces and logits gather),
 * so nothing else enters the communicator in between. A keep-alive thread, started on the
 * leader, sends a HEARTBEAT whenever nothing went out for a quarter of the communicator's
 * timeout: the other ranks wait for the next message with that timeout and so learn within
 * it that rank 0 died or hung, however long the engine stays idle.
 */
#ifndef PL_ENGINE_TP_LINK_H
#define PL_ENGINE_TP_LINK_H

#include <pthread.h>
#include <stdbool.h>

#include "dist/comm.h"
#include "engine/plan.h"

/* The first chunk of every message: the header and up to this much payload. */
#define PL_TP_LINK_INLINE 4096

typedef struct pl_tp_link {
    pl_comm *comm;             /* the caller's */
    pl_plan_limits lim;
    size_t max_payload;
    uint32_t seq;              /* messages sent (leader) or received (others) */
    unsigned char *buf;        /* PL_TP_LINK_INLINE + max_payload bytes */
    /* the leader */
    pthread_mutex_t mu;        /* one command at a time */
    pthread_cond_t cv;         /* wakes the keep-alive thread early (stop) */
    pthread_t keepalive;
    bool keepalive_on, stop;
    uint64_t last_ns;          /* when the last message went out */
    pl_status keepalive_status;/* the keep-alive thread's failure, if any */
} pl_tp_link;

pl_status pl_tp_link_init(pl_tp_link *l, pl_comm *comm, const pl_plan_limits *lim);
/* Stops the keep-alive thread (if any) and frees the buffer. */
void pl_tp_link_deinit(pl_tp_link *l);

/* Leader: starts / stops (and joins) the keep-alive thread. */
pl_status pl_tp_link_start_keepalive(pl_tp_link *l);
void pl_tp_link_stop_keepalive(pl_tp_link *l);
void pl_tp_link_lock(pl_tp_link *l);
void pl_tp_link_unlock(pl_tp_link *l);
/* Leader, lock held: sends cmd with payload (len bytes). */
pl_status pl_tp_link_send(pl_tp_link *l, pl_plan_cmd cmd, const void *payload, size_t len);
/* The leader's scratch for building a payload (max_payload bytes; lock held). */
void *pl_tp_link_payload_buf(pl_tp_link *l);

/* The others: the next command other than a heartbeat; *out_payload (valid until the next
 * call) holds its checked payload. */
pl_status pl_tp_link_recv(pl_tp_link *l, pl_plan_header *out_h, const void **out_payload);

#endif
