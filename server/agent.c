/*
 * server/agent.c - HAProxy's agent check (--agent-port): HAProxy connects to this port every
 * agent-inter, reads one line and applies it to the server (deploy/haproxy/haproxy.cfg).
 *
 * The line (HAProxy's words, which may be combined):
 * - "up ready W%\n" normally: operational and administrative state back to normal (after a
 *   drain or a failure told earlier) and a weight of W percent of the configured one, from
 *   the queue and the KV pool: W = 100 x (1 - kv_usage) / (1 + waiting), at least 1. An idle
 *   replica weighs 100; one with its pool half full weighs 50; four waiting requests divide
 *   the weight by five. So least-connections and the consistent hash (whose ring HAProxy
 *   rebuilds from weights) send new work where it will be scheduled soonest, while /health
 *   (503 once the queue is 80% full) takes a saturated replica out altogether;
 * - "drain\n" after SIGTERM: weight 0 for new connections while those in flight finish;
 * - "down #engine failed\n" once the engine cannot step any more.
 *
 * The figures are pl_engine_occupancy's (what the stepping thread published at its last
 * drain or retirement; no step is waited for). One thread: accept, write the line, close.
 * HAProxy sends nothing unless agent-send is configured, and what it sends is not read.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/srv.h"

void pl_srv_agent_line(const pl_occupancy *o, bool draining, bool failed, char *out,
                       size_t cap) {
    if (failed) {
        snprintf(out, cap, "down #engine failed\n");
        return;
    }
    if (draining) {
        snprintf(out, cap, "drain\n");
        return;
    }
    double free_kv = 1.0 - (o->kv_usage > 1 ? 1 : o->kv_usage < 0 ? 0 : o->kv_usage);
    double w = 100.0 * free_kv / (1.0 + (o->n_waiting > 0 ? o->n_waiting : 0));
    int pct = (int)lround(w);
    if (pct < 1) pct = 1; /* 0% would drain it: /health decides when it is out */
    if (pct > 100) pct = 100;
    snprintf(out, cap, "up ready %d%%\n", pct);
}

static void answer(pl_srv *s, int fd) {
    pl_occupancy o;
    pl_engine_occupancy(s->e, &o);
    bool failed = atomic_load(&s->failed) || pl_engine_health(s->e) != PL_OK;
    char line[64];
    pl_srv_agent_line(&o, atomic_load(&s->draining), failed, line, sizeof line);
    /* a fresh socket's send buffer holds a line: this does not block */
    if (send(fd, line, strlen(line), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) { /* it hung up */ }
    close(fd);
}

static void *agent_main(void *arg) {
    pl_srv *s = arg;
    for (;;) {
        struct pollfd p[2] = {{.fd = s->agent_fd, .events = POLLIN},
                              {.fd = s->agent_wake[0], .events = POLLIN}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (p[1].revents) break;
        if (p[0].revents & POLLIN) {
            int fd = accept4(s->agent_fd, NULL, NULL, SOCK_CLOEXEC);
            if (fd >= 0) answer(s, fd);
        }
    }
    return NULL;
}

static int listen_on(const char *host, int port) {
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host, service, &hints, &res);
    if (rc != 0) {
        pl_srv_log("ERROR", "--agent-port %d: %s: %s", port, host, gai_strerror(rc));
        return -1;
    }
    int fd = -1, err = 0;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) continue;
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 64) != 0) {
            err = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0)
        pl_srv_log("ERROR", "--agent-port %d: cannot listen on %s: %s", port, host,
                   strerror(err ? err : EADDRNOTAVAIL));
    return fd;
}

bool pl_srv_agent_start(pl_srv *s) {
    if (s->opt.agent_port == 0) return true;
    s->agent_fd = listen_on(s->opt.host, s->opt.agent_port);
    if (s->agent_fd < 0) return false;
    if (pipe2(s->agent_wake, O_CLOEXEC) != 0 ||
        pthread_create(&s->agent, NULL, agent_main, s) != 0) {
        pl_srv_log("ERROR", "--agent-port: cannot start the agent thread");
        return false;
    }
    s->agent_started = true;
    pl_srv_log("INFO", "agent check on port %d (HAProxy: agent-check agent-port %d)",
               s->opt.agent_port, s->opt.agent_port);
    return true;
}

void pl_srv_agent_stop(pl_srv *s) {
    if (s->agent_started) {
        if (write(s->agent_wake[1], "x", 1) < 0) { /* the thread is gone already */ }
        pthread_join(s->agent, NULL);
        s->agent_started = false;
    }
    for (int i = 0; i < 2; i++)
        if (s->agent_wake[i] >= 0) close(s->agent_wake[i]), s->agent_wake[i] = -1;
    if (s->agent_fd >= 0) close(s->agent_fd), s->agent_fd = -1;
}
