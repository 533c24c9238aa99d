/*
 * server/watch.c - the watcher thread: hang-ups of suspended clients, slow clients, and the
 * freeing of dead requests.
 *
 * Hang-ups. libmicrohttpd does not look at a suspended connection's socket, and a request
 * waiting for the engine (a whole response, or a stream between tokens) is suspended. So its
 * socket is in this thread's epoll set for EPOLLRDHUP/HUP/ERR (not for input: a pipelined
 * next request is not a hang-up) while it is suspended. A hang-up marks the request gone,
 * aborts its engine requests at once (their KV blocks are freed by the next step) and
 * resumes the connection so libmicrohttpd closes it. The socket leaves the set before any
 * resume, under the request's lock, so it is never watched once libmicrohttpd may close it.
 *
 * Why this thread frees requests. An epoll event carries a request pointer; a batch returned
 * by epoll_wait may name a request whose watch another thread removed since, and which may
 * then have lost its last reference. So the last reference hands the request to this thread
 * (pl_srv_watch_bury), which frees it only after finishing the batch in progress: a request
 * seen in a batch is alive until the end of that batch.
 *
 * Slow clients. Each connection has a record (libmicrohttpd's socket context) saying what it
 * is doing since when: idle (between requests), reading a request (from its request line) or
 * busy (the request is being answered). Once a second the records are checked: idle longer
 * than --timeout-keep-alive, or reading longer than --request-timeout, and the socket is
 * shut down, which libmicrohttpd sees as the client's close. libmicrohttpd's own timeout
 * only closes silent connections; one byte a second keeps it from firing, this does not.
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
    pl_srv_conn *prev, *next;
    int fd;
    int phase;
    double since;
};

/* ---- connection records ------------------------------------------------------------------ */

void pl_srv_conn_opened(pl_srv *s, int fd, void **socket_context) {
    pl_srv_conn *c = calloc(1, sizeof *c);
    if (!c) return; /* then the connection is simply not reaped */
    c->fd = fd;
    c->phase = CONN_IDLE;
    c->since = pl_srv_now();
    pthread_mutex_lock(&s->conn_mu);
    c->next = s->conns;
    if (s->conns) s->conns->prev = c;
    s->conns = c;
    pthread_mutex_unlock(&s->conn_mu);
    *socket_context = c;
}

void pl_srv_conn_closed(pl_srv *s, void **socket_context) {
    pl_srv_conn *c = *socket_context;
    if (!c) return;
    pthread_mutex_lock(&s->conn_mu);
    if (c->prev) c->prev->next = c->next;
    else s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    pthread_mutex_unlock(&s->conn_mu);
    free(c);
    *socket_context = NULL;
}

static void set_phase(pl_srv *s, pl_srv_conn *c, int phase) {
    if (!c) return;
    pthread_mutex_lock(&s->conn_mu);
    if (c->phase != CONN_DROPPED) {
        c->phase = phase;
        c->since = pl_srv_now();
    }
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
        /* the record lives until libmicrohttpd's close notification, which takes conn_mu:
         * the socket is still open here */
        shutdown(c->fd, SHUT_RDWR);
        c->phase = CONN_DROPPED;
        n++;
    }
    pthread_mutex_unlock(&s->conn_mu);
    if (n) pl_srv_log("INFO", "dropped %d connection(s) idle past --timeout-keep-alive or "
                      "sending a request slower than --request-timeout", n);
}

/* ---- hang-ups ---------------------------------------------------------------------------- */

void pl_srv_watch_add_locked(pl_srv *s, pl_srv_req *r) {
    if (!r->sock) return;
    struct epoll_event ev = {.events = EPOLLRDHUP | EPOLLHUP | EPOLLERR | EPOLLONESHOT,
                             .data.ptr = r};
    if (epoll_ctl(s->watch_epfd, EPOLL_CTL_ADD, r->sock->fd, &ev) != 0)
        pl_srv_log("WARN", "cannot watch a connection for hang-ups: %s", strerror(errno));
}

void pl_srv_watch_del_locked(pl_srv *s, pl_srv_req *r) {
    if (r->sock) epoll_ctl(s->watch_epfd, EPOLL_CTL_DEL, r->sock->fd, NULL);
}

static void hung_up(pl_srv *s, pl_srv_req *r) {
    pthread_mutex_lock(&r->mu);
    if (r->suspended) { /* else resumed meanwhile: libmicrohttpd sees the close itself */
        r->client_gone = true;
        if (!r->done && pl_srv_req_abort_locked(r) > 0)
            atomic_fetch_add(&s->aborted_disconnect, 1);
        pl_srv_req_resume_locked(r);
    }
    pthread_mutex_unlock(&r->mu);
}

/* ---- dead requests ------------------------------------------------------------------------ */

void pl_srv_watch_bury(pl_srv *s, pl_srv_req *r) {
    pthread_mutex_lock(&s->dead_mu);
    r->dead_next = s->dead;
    s->dead = r;
    bool wake = ++s->n_dead == 256;
    pthread_mutex_unlock(&s->dead_mu);
    if (wake) {
        uint64_t one = 1;
        if (write(s->wake_fd, &one, sizeof one) < 0) { /* the 1 s timeout frees them anyway */ }
    }
}

static void free_dead(pl_srv *s) {
    pthread_mutex_lock(&s->dead_mu);
    pl_srv_req *r = s->dead;
    s->dead = NULL;
    s->n_dead = 0;
    pthread_mutex_unlock(&s->dead_mu);
    while (r) {
        pl_srv_req *next = r->dead_next;
        pl_srv_req_destroy(r);
        r = next;
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
        free_dead(s); /* after the batch: see the file comment */
        if (pl_srv_now() >= next_reap) {
            reap_slow(s);
            next_reap = pl_srv_now() + 1.0;
        }
    }
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
        uint64_t one = 1;
        if (write(s->wake_fd, &one, sizeof one) < 0) { /* it wakes within a second anyway */ }
        pthread_join(s->watcher, NULL);
        s->watcher_started = false;
    }
    free_dead(s);
    if (s->watch_epfd >= 0) close(s->watch_epfd);
    if (s->wake_fd >= 0) close(s->wake_fd);
    s->watch_epfd = s->wake_fd = -1;
}
