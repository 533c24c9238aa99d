/*
 * dist/comm_mpi.c - one rank per process over MPI (Open MPI), host buffers.
 *
 * The collectives are built from nonblocking point-to-point messages that this file polls
 * against a deadline, rather than from MPI_Allreduce and friends, for two reasons:
 *   - the summation order: MPI leaves it to the library (and to the message sizes), so two
 *     runs, or MPI and the threaded reference, could differ in the last bit. Here element i
 *     is summed in rank order by the rank that owns its part, as everywhere in dist/.
 *   - the timeout: a blocking MPI collective waits forever for a dead or stopped peer. Here
 *     the wait ends at the deadline and names the ranks whose messages did not come.
 * All-reduce is a reduce-scatter (rank r receives part r of every buffer, sums it in rank
 * order) followed by an all-gather of the parts: each rank sends and receives 2 (size-1)/size
 * of the buffer, what a ring moves, in 2 (size-1) messages per phase; for the 2-8 ranks of
 * tensor parallelism the message count does not matter.
 *
 * Messages of one collective carry its tag (a counter every rank advances in step), so a late
 * message of an earlier collective is never taken for a current one. A failure leaves the
 * communicator broken; destroying a broken one does not finalise MPI (a dead peer would make
 * MPI_Finalize wait): the process exits and mpirun ends the job.
 */
#include "dist/comm.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "util/alloc.h"
#include "util/timer.h"

typedef struct mctx {
    MPI_Comm comm;
    bool finalize;        /* this file initialised MPI */
    unsigned long seq;    /* collectives so far: the tag of the next */
    float *scratch;       /* (size - 1) parts received in the reduce-scatter */
    size_t scratch_cap;   /* floats */
    MPI_Request *reqs;    /* (2 * size) */
    int *peer;            /* (2 * size) the rank each request talks to */
    bool *is_recv;        /* (2 * size) */
    int n_reqs;
} mctx;

static int next_tag(mctx *m) { return (int)(m->seq++ % 30000) + 1; }

static pl_status mpi_failed(pl_comm *c, pl_comm_op op, const char *call, int rc) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof msg, "error %d", rc);
    return pl_comm_failf(c, op, "%s: %s", call, msg);
}

static pl_status post(pl_comm *c, pl_comm_op op, bool recv, void *buf, size_t n, MPI_Datatype t,
                      int peer, int tag) {
    mctx *m = c->ctx;
    if (n > INT_MAX)
        return pl_comm_failf(c, op, "%zu elements in one message exceed MPI's int count", n);
    MPI_Request *rq = &m->reqs[m->n_reqs];
    int rc = recv ? MPI_Irecv(buf, (int)n, t, peer, tag, m->comm, rq)
                  : MPI_Isend(buf, (int)n, t, peer, tag, m->comm, rq);
    if (rc != MPI_SUCCESS) return mpi_failed(c, op, recv ? "MPI_Irecv" : "MPI_Isend", rc);
    m->peer[m->n_reqs] = peer;
    m->is_recv[m->n_reqs] = recv;
    m->n_reqs++;
    return PL_OK;
}

/* Polls the posted requests until all completed or the deadline passed; then names the
 * peers whose messages are missing (receives first: a send to a live peer completes). */
static pl_status wait_posted(pl_comm *c, pl_comm_op op) {
    mctx *m = c->ctx;
    uint64_t start = pl_now_ns(), deadline = start + (uint64_t)(c->timeout_s * 1e9);
    for (unsigned a = 0;; a++) {
        int done = 0;
        int rc = MPI_Testall(m->n_reqs, m->reqs, &done, MPI_STATUSES_IGNORE);
        if (rc != MPI_SUCCESS) return mpi_failed(c, op, "MPI_Testall", rc);
        if (done) {
            m->n_reqs = 0;
            return PL_OK;
        }
        if (pl_now_ns() > deadline) break;
        pl_comm_backoff(pl_now_ns() - start);
    }
    char missing[200] = "";
    size_t len = 0;
    for (int pass = 0; pass < 2 && len == 0; pass++)
        for (int i = 0; i < m->n_reqs && len + 12 < sizeof missing; i++) {
            int flag = 1;
            if (m->reqs[i] == MPI_REQUEST_NULL || m->is_recv[i] != (pass == 0)) continue;
            MPI_Request_get_status(m->reqs[i], &flag, MPI_STATUS_IGNORE);
            if (!flag)
                len += (size_t)snprintf(missing + len, sizeof missing - len, "%s%d",
                                        len ? ", " : "", m->peer[i]);
        }
    m->n_reqs = 0; /* the communicator is broken from here: the requests are abandoned */
    return pl_comm_failf(c, op, "timed out after %.1f s waiting for rank %s "
                         "(--distributed-timeout)", c->timeout_s, len ? missing : "?");
}

static pl_status m_all_reduce(pl_comm *c, float *buf, size_t n) {
    mctx *m = c->ctx;
    int tag = next_tag(m);
    size_t lo, hi;
    pl_comm_part(n, c->size, c->rank, &lo, &hi);
    size_t mine = hi - lo, need = (size_t)(c->size - 1) * mine;
    if (need > m->scratch_cap) {
        float *p = pl_reallocarray(m->scratch, need, sizeof *p);
        if (!p) return pl_comm_failf(c, PL_COMM_ALL_REDUCE, "out of memory for %zu floats", need);
        m->scratch = p;
        m->scratch_cap = need;
    }
    /* reduce-scatter: part r of every rank's buffer comes to rank r */
    for (int r = 0, k = 0; r < c->size; r++) {
        if (r == c->rank) continue;
        PL_TRY(post(c, PL_COMM_ALL_REDUCE, true, m->scratch + (size_t)k++ * mine, mine, MPI_FLOAT,
                    r, tag));
        size_t plo, phi;
        pl_comm_part(n, c->size, r, &plo, &phi);
        PL_TRY(post(c, PL_COMM_ALL_REDUCE, false, buf + plo, phi - plo, MPI_FLOAT, r, tag));
    }
    PL_TRY(wait_posted(c, PL_COMM_ALL_REDUCE));
    /* element i = ((x_0 + x_1) + x_2) + ... in rank order, x_rank being this buffer's own */
    for (size_t i = 0; i < mine; i++) {
        float s = 0;
        for (int r = 0, k = 0; r < c->size; r++) {
            float x = r == c->rank ? buf[lo + i] : m->scratch[(size_t)k++ * mine + i];
            s = r == 0 ? x : s + x;
        }
        buf[lo + i] = s;
    }
    /* all-gather of the summed parts */
    tag = next_tag(m);
    for (int r = 0; r < c->size; r++) {
        if (r == c->rank) continue;
        size_t plo, phi;
        pl_comm_part(n, c->size, r, &plo, &phi);
        PL_TRY(post(c, PL_COMM_ALL_REDUCE, true, buf + plo, phi - plo, MPI_FLOAT, r, tag));
        PL_TRY(post(c, PL_COMM_ALL_REDUCE, false, buf + lo, mine, MPI_FLOAT, r, tag));
    }
    return wait_posted(c, PL_COMM_ALL_REDUCE);
}

static pl_status m_all_gather(pl_comm *c, const void *send, size_t n_bytes, void *recv) {
    mctx *m = c->ctx;
    int tag = next_tag(m);
    char *out = recv;
    for (int r = 0; r < c->size; r++) {
        if (r == c->rank) continue;
        PL_TRY(post(c, PL_COMM_ALL_GATHER, true, out + (size_t)r * n_bytes, n_bytes, MPI_BYTE, r,
                    tag));
        PL_TRY(post(c, PL_COMM_ALL_GATHER, false, (void *)send, n_bytes, MPI_BYTE, r, tag));
    }
    if (out + (size_t)c->rank * n_bytes != send)
        memmove(out + (size_t)c->rank * n_bytes, send, n_bytes);
    return wait_posted(c, PL_COMM_ALL_GATHER);
}

static pl_status m_broadcast(pl_comm *c, void *buf, size_t n_bytes, int root) {
    mctx *m = c->ctx;
    int tag = next_tag(m);
    if (c->rank == root) {
        for (int r = 0; r < c->size; r++)
            if (r != root) PL_TRY(post(c, PL_COMM_BROADCAST, false, buf, n_bytes, MPI_BYTE, r, tag));
    } else {
        PL_TRY(post(c, PL_COMM_BROADCAST, true, buf, n_bytes, MPI_BYTE, root, tag));
    }
    return wait_posted(c, PL_COMM_BROADCAST);
}

static pl_status m_barrier(pl_comm *c) {
    mctx *m = c->ctx;
    int tag = next_tag(m);
    static char none;
    for (int r = 0; r < c->size; r++) {
        if (r == c->rank) continue;
        PL_TRY(post(c, PL_COMM_BARRIER, true, &none, 0, MPI_BYTE, r, tag));
        PL_TRY(post(c, PL_COMM_BARRIER, false, &none, 0, MPI_BYTE, r, tag));
    }
    return wait_posted(c, PL_COMM_BARRIER);
}

static void m_abort(pl_comm *c, const char *why) {
    fprintf(stderr, "pagellm: rank %d: aborting the MPI job: %s\n", c->rank, why);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static void m_destroy(pl_comm *c) {
    mctx *m = c->ctx;
    if (m) {
        /* broken: a peer may be dead, and freeing or finalising could wait for it */
        if (!c->broken) {
            MPI_Comm_free(&m->comm);
            if (m->finalize) MPI_Finalize();
        }
        pl_free(m->scratch);
        pl_free(m->reqs);
        pl_free(m->peer);
        pl_free(m->is_recv);
        pl_free(m);
    }
    pl_free(c);
}

static const pl_comm_ops mpi_ops = {
    .name = "mpi", .all_reduce_sum = m_all_reduce, .all_gather = m_all_gather,
    .broadcast = m_broadcast, .barrier = m_barrier, .abort = m_abort, .destroy = m_destroy,
};

/* "Open MPI v4.1.4" from the library's long version string. */
static void library_name(char *out, size_t cap) {
    char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    if (MPI_Get_library_version(v, &len) != MPI_SUCCESS) v[0] = '\0';
    v[strcspn(v, ",\n")] = '\0';
    snprintf(out, cap, "%s", v[0] ? v : "MPI");
}

pl_status pl_comm_mpi_create(double timeout_s, pl_comm **out) {
    int inited = 0, level = 0;
    bool finalize = false;
    MPI_Initialized(&inited);
    if (!inited) {
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &level) != MPI_SUCCESS)
            return pl_fail(PL_ERR_BACKEND, "MPI_Init_thread failed (run under mpirun)");
        finalize = true;
    } else {
        MPI_Query_thread(&level);
    }
    /* the engine calls MPI from its stepping thread and its keep-alive thread, one at a time */
    if (level < MPI_THREAD_SERIALIZED) {
        if (finalize) MPI_Finalize();
        return pl_fail(PL_ERR_UNSUPPORTED,
                       "the MPI library provides thread level %d; tensor parallelism needs "
                       "MPI_THREAD_SERIALIZED", level);
    }
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    pl_comm *c = NULL;
    mctx *m = pl_calloc(1, sizeof *m);
    pl_status s = m ? pl_comm_alloc(&mpi_ops, rank, size, timeout_s, &c)
                    : pl_fail(PL_ERR_OUT_OF_MEMORY, "MPI communicator: state");
    if (s == PL_OK) {
        c->ctx = m;
        m->finalize = finalize;
        m->reqs = pl_calloc(2 * (size_t)size, sizeof *m->reqs);
        m->peer = pl_calloc(2 * (size_t)size, sizeof *m->peer);
        m->is_recv = pl_calloc(2 * (size_t)size, sizeof *m->is_recv);
        if (!m->reqs || !m->peer || !m->is_recv)
            s = pl_fail(PL_ERR_OUT_OF_MEMORY, "MPI communicator: requests");
    }
    if (s == PL_OK && MPI_Comm_dup(MPI_COMM_WORLD, &m->comm) != MPI_SUCCESS)
        s = pl_fail(PL_ERR_BACKEND, "MPI_Comm_dup failed");
    if (s != PL_OK) {
        if (c) {
            c->broken = true; /* nothing to free on the MPI side */
            m_destroy(c);
        } else {
            pl_free(m);
        }
        if (finalize) MPI_Finalize();
        return s;
    }
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    /* one host (shared memory) or several (the network) */
    MPI_Comm node;
    int node_size = size;
    if (MPI_Comm_split_type(m->comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) ==
        MPI_SUCCESS) {
        MPI_Comm_size(node, &node_size);
        MPI_Comm_free(&node);
    }
    char lib[64];
    library_name(lib, sizeof lib);
    if (node_size == size)
        snprintf(c->transport, sizeof c->transport, "%s, one host (shared memory)", lib);
    else
        snprintf(c->transport, sizeof c->transport, "%s, %d ranks per host (network between "
                 "hosts)", lib, node_size);
    *out = c;
    return PL_OK;
}

bool pl_comm_have_mpi(void) { return true; }

const char *pl_comm_mpi_version(void) {
    static char v[64]; /* MPI_Get_library_version may be called before MPI_Init */
    if (!v[0]) library_name(v, sizeof v);
    return v;
}
