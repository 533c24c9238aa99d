/*
 * server/watch.c - the watcher thread: clients that hang up, slow clients, and the freeing of
 * dead requests and connection records.
 *
 * Hang-ups. libmicrohttpd does not look at a suspended connection's socket, and a request
 * waiting for the engine (a whole response, or a stream between tokens) is suspended. So
 * every connection's socket is in this thread's epoll set from its start to its close,
 * edge-triggered on EPOLLRDHUP (and HUP/ERR; not on input: a pipelined next request is not a
 * hang-up). A hang-up marks the connection; if its request is suspended, the request is
 * marked gone, its engine requests are aborted at once (their KV blocks are freed by the next
 * step) and the connection resumed so libmicrohttpd closes it. A request about to suspend
 * looks at the mark first (pl_srv_conn_hung_up), so a hang-up just before a suspend is not
 * missed. Watching per connection rather than per suspension keeps epoll_ctl out of the
 * stepping thread's path: resuming a stream after each token is one libmicrohttpd call.
 *
 * Why this thread frees requests and connection records. An epoll event carries a record
 * pointer, and a batch returned by epoll_wait may name a connection that closed since. So a
 * closed connection's record, and a request that lost its last reference (it is reached from
 * the record), go to this thread, which frees them only after the batch in progress: anything
 * seen in a batch is alive until the end of that batch. This is the server's one deliberate
 * loop between files: req.c's last unref calls pl_srv_watch_bury here, and this thread calls
 * pl_srv_req_destroy there after the batch.
 *
 * Slow clients. Each record says what its connection is doing since when: idle (between
 * requests), reading a request (from its request line) or busy (being answered). Once a
 * second the records are checked: idle longer than --timeout-keep-alive, or reading longer
 * than --request-timeout, and the socket is shut down, which libmicrohttpd sees as the
 * client's close. libmicrohttpd's own timeout only closes silent connections; one byte a
 * second keeps it from firing, this does not.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/srv.h"

enum { CONN_IDLE, CONN_READING, CONN_BUSY, CONN_DROPPED };

struct pl_srv_conn {
    pl_srv_conn *prev, *next;   /* the live list (conn_mu) */
    pl_srv_conn *dead_next;     /* the watcher's list of records to free */
    int fd;
    int phase;                  /* conn_mu */
    double since;               /* conn_mu */
    pl_srv_req *req;            /* the request being answered, or NULL (conn_mu) */
    atomic_bool hung_up;
};

static void wake_watcher(pl_srv *s) {
    uint64_t one = 1;
    if (write(s->wake_fd, &one, sizeof one) < 0) { /* it wakes within a second anyway */ }
}

/* ---- connection records ------------------------------------------------------------------ */

void pl_srv_conn_opened(pl_srv *s, int fd, void **socket_context) {
    pl_srv_conn *c = calloc(1, sizeof *c);
    if (!c) return; /* then the connection is neither watched nor reaped */
    c->fd = fd;
    if (s->opt.send_buffer_bytes > 0) {
        int size = (int)s->opt.send_buffer_bytes;
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
    }
    c->phase = CONN_IDLE;
    c->since = pl_srv_now();
    atomic_init(&c->hung_up, false);
    pthread_mutex_lock(&s->conn_mu);
    c->next = s->conns;
    if (s->conns) s->conns->prev = c;
    s->conns = c;
    pthread_mutex_unlock(&s->conn_mu);
    struct epoll_event ev = {.events = EPOLLRDHUP | EPOLLHUP | EPOLLERR | EPOLLET, .data.ptr = c};
    if (epoll_ctl(s->watch_epfd, EPOLL_CTL_ADD, fd, &ev) != 0)
        pl_srv_log("WARN", "cannot watch a connection for hang-ups: %s", strerror(errno));
    *socket_context = c;
}

/* libmicrohttpd calls this before it closes the socket. */
void pl_srv_conn_closed(pl_srv *s, void **socket_context) {
    pl_srv_conn *c = *socket_context;
    if (!c) return;
    epoll_ctl(s->watch_epfd, EPOLL_CTL_DEL, c->fd, NULL);
    pthread_mutex_lock(&s->conn_mu);
    if (c->prev) c->prev->next = c->next;
    else s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    c->req = NULL;
    pthread_mutex_unlock(&s->conn_mu);
    pthread_mutex_lock(&s->dead_mu);
    c->dead_next = s->dead_conns;
    s->dead_conns = c;
    pthread_mutex_unlock(&s->dead_mu);
    *socket_context = NULL;
}

void pl_srv_conn_attach(pl_srv *s, pl_srv_conn *c, pl_srv_req *r) {
    if (!c) return;
    pthread_mutex_lock(&s->conn_mu);
    c->req = r;
    pthread_mutex_unlock(&s->conn_mu);
}

bool pl_srv_conn_hung_up(const pl_srv_conn *c) { return c && atomic_load(&c->hung_up); }

static void set_phase(pl_srv *s, pl_srv_conn *c, int phase) {
    if (!c) return;
    pthread_mutex_lock(&s->conn_mu);
    if (c->phase != CONN_DROPPED) {
        c->phase = phase;
        c->since = pl_srv_now();
    }
    if (phase == CONN_IDLE) c->req = NULL; /* the request completed */
    pthread_mutex_unlock(&s->conn_mu);
}

void pl_srv_conn_reading(pl_srv *s, pl_srv_conn *c) { set_phase(s, c, CONN_READING); }
void pl_srv_conn_busy(pl_srv *s, pl_srv_conn *c) { set_phase(s, c, CONN_BUSY); }
void pl_srv_conn_idle(pl_srv *s, pl_srv_conn *c) { set_phase(s, c, CONN_IDLE); }

static void reap_slow(pl_srv *s) {
    double now = pl_srv_now();
    int n = 0;
    pthread_mutex_lock(&s->conn_mu);
    for (pl_srv_conn *c = s->conns; c; c = c->next) {
        int keep = s->opt.timeout_keep_alive, read = s->opt.request_timeout;
        double limit = c->phase == CONN_IDLE ? (keep > 0 ? keep + 1.0 : -1)
                       : c->phase == CONN_READING ? (read > 0 ? (double)read : -1) : -1;
        if (limit <= 0 || now - c->since <= limit) continue;
        /* the record is in the list until libmicrohttpd's close notification, which takes
         * conn_mu: the socket is still open here */
        shutdown(c->fd, SHUT_RDWR);
        c->phase = CONN_DROPPED;
        n++;
    }
    pthread_mutex_unlock(&s->conn_mu);
    if (n) pl_srv_log("INFO", "dropped %d connection(s) idle past --timeout-keep-alive or "
                      "sending a request slower than --request-timeout", n);
}

/* ---- hang-ups ---------------------------------------------------------------------------- */

static void hung_up(pl_srv *s, pl_srv_conn *c) {
    atomic_store(&c->hung_up, true); /* before looking at the request: see pl_srv_conn_hung_up */
    pthread_mutex_lock(&s->conn_mu);
    pl_srv_req *r = c->req;
    if (r) pl_srv_req_ref(r);
    pthread_mutex_unlock(&s->conn_mu);
    if (!r) return; /* between requests: libmicrohttpd reads the end itself */
    pthread_mutex_lock(&r->mu);
    if (r->suspended) { /* else libmicrohttpd is at work on it and sees the close itself */
        r->client_gone = true;
        if (!r->done && pl_srv_req_abort_locked(r) > 0) atomic_fetch_add(&s->aborted_disconnect, 1);
        pl_srv_req_resume_locked(r);
    }
    pthread_mutex_unlock(&r->mu);
    pl_srv_req_unref(r);
}

/* ---- dead requests and records ------------------------------------------------------------- */

void pl_srv_watch_bury(pl_srv *s, pl_srv_req *r) {
    pthread_mutex_lock(&s->dead_mu);
    r->dead_next = s->dead;
    s->dead = r;
    bool wake = ++s->n_dead == 256;
    pthread_mutex_unlock(&s->dead_mu);
    if (wake) wake_watcher(s);
}

static void free_dead(pl_srv *s) {
    pthread_mutex_lock(&s->dead_mu);
    pl_srv_req *r = s->dead;
    pl_srv_conn *c = s->dead_conns;
    s->dead = NULL;
    s->dead_conns = NULL;
    s->n_dead = 0;
    pthread_mutex_unlock(&s->dead_mu);
    while (r) {
        pl_srv_req *next = r->dead_next;
        pl_srv_req_destroy(r);
        r = next;
    }
    while (c) {
        pl_srv_conn *next = c->dead_next;
        free(c);
        c = next;
    }
}

/* ---- resumes handed over by the stepping thread ------------------------------------------- */

bool pl_srv_watch_resume(pl_srv *s, pl_srv_req **reqs, size_t n) {
    pthread_mutex_lock(&s->dead_mu);
    bool ok = true, was_empty = s->n_handoff == 0;
    if (s->n_handoff + n > s->cap_handoff) {
        size_t cap = s->cap_handoff ? s->cap_handoff : 64;
        while (cap < s->n_handoff + n) cap *= 2;
        pl_srv_req **g = realloc(s->handoff, cap * sizeof *g);
        if (g) s->handoff = g, s->cap_handoff = cap;
        else ok = false;
    }
    if (ok) {
        memcpy(s->handoff + s->n_handoff, reqs, n * sizeof *reqs);
        s->n_handoff += n;
    }
    pthread_mutex_unlock(&s->dead_mu);
    if (ok && was_empty) wake_watcher(s); /* else a wake-up is on its way */
    return ok;
}

static void resume_handed(pl_srv *s) {
    for (;;) {
        pthread_mutex_lock(&s->dead_mu);
        size_t n = s->n_handoff;
        pl_srv_req **list = s->handoff;
        s->handoff = NULL;
        s->n_handoff = s->cap_handoff = 0;
        pthread_mutex_unlock(&s->dead_mu);
        if (n == 0) {
            free(list);
            return;
        }
        for (size_t i = 0; i < n; i++) {
            pl_srv_req *r = list[i];
            pthread_mutex_lock(&r->mu);
            r->to_resume = false;
            pl_srv_req_resume_locked(r);
            pthread_mutex_unlock(&r->mu);
            pl_srv_req_unref(r);
        }
        free(list);
    }
}

/* ---- the thread --------------------------------------------------------------------------- */

static void *watcher_main(void *arg) {
    pl_srv *s = arg;
    double next_reap = pl_srv_now() + 1.0;
    while (!atomic_load(&s->watch_stop)) {
        struct epoll_event evs[64];
        int n = epoll_wait(s->watch_epfd, evs, 64, 1000);
        for (int i = 0; i < n; i++) {
            if (!evs[i].data.ptr) { /* the wake eventfd */
                uint64_t v;
                if (read(s->wake_fd, &v, sizeof v) < 0) { /* nothing pending */ }
                continue;
            }
            hung_up(s, evs[i].data.ptr);
        }
        resume_handed(s);
        free_dead(s); /* after the batch: see the file comment */
        if (pl_srv_now() >= next_reap) {
            reap_slow(s);
            next_reap = pl_srv_now() + 1.0;
        }
    }
    resume_handed(s);
    free_dead(s);
    return NULL;
}

bool pl_srv_watch_start(pl_srv *s) {
    s->watch_epfd = epoll_create1(EPOLL_CLOEXEC);
    s->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (s->watch_epfd < 0 || s->wake_fd < 0) return false;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(s->watch_epfd, EPOLL_CTL_ADD, s->wake_fd, &ev) != 0) return false;
    atomic_store(&s->watch_stop, false);
    if (pthread_create(&s->watcher, NULL, watcher_main, s) != 0) return false;
    s->watcher_started = true;
    return true;
}

void pl_srv_watch_stop(pl_srv *s) {
    if (s->watcher_started) {
        atomic_store(&s->watch_stop, true);
        wake_watcher(s);
        pthread_join(s->watcher, NULL);
        s->watcher_started = false;
    }
    resume_handed(s);
    free_dead(s);
    if (s->watch_epfd >= 0) close(s->watch_epfd);
    if (s->wake_fd >= 0) close(s->wake_fd);
    s->watch_epfd = s->wake_fd = -1;
}
