/*
 * server/http.c - the transport: libmicrohttpd's daemon and each request from its headers to
 * its last byte. What to answer is the routes' (routes.c); this file only moves bytes,
 * suspends and resumes connections, and writes the access log.
 *
 * libmicrohttpd (Debian's libmicrohttpd 0.9.75) runs an epoll loop on --http-threads threads;
 * its callbacks run there and must not block. A request goes:
 *   headers  -> the routes pick the route and check what the headers allow; an early answer
 *               (404, 405, 401, 503, 413) needs no body
 *   body     -> appended up to --max-body-size (a chunked body past it closes the connection)
 *   complete -> the routes' response (pl_srv_response), sent as it says:
 *               - a whole body at once;
 *               - `wait`: the connection is suspended until the stepping thread has delivered
 *                 every choice; libmicrohttpd calls back, and the routes' answer is sent;
 *               - a stream: a 200 with a chunked body whose reader sends what the response's
 *                 next() appends, and suspends the connection when it has nothing (returning
 *                 0 without suspending would spin).
 *   done     -> the completion callback aborts whatever is unfinished (a client that went
 *               away), writes the access-log line and drops the connection's reference.
 */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv.h"

/* ---- sending ----------------------------------------------------------------------------- */

static enum MHD_Result send_body(pl_srv_req *r, struct MHD_Connection *c, int status,
                                 const char *type, char *body, size_t len,
                                 const char *header, const char *value) {
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (header) MHD_add_response_header(resp, header, value);
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    r->status = status;
    r->responded = true;
    return ok;
}

/* Suspends r's connection unless the client has hung up (then: gone, aborted). r->mu held;
 * returns whether it suspended. */
static bool suspend_locked(pl_srv *s, pl_srv_req *r) {
    if (r->client_gone || pl_srv_conn_hung_up(r->sock)) {
        if (!r->client_gone && !r->done && pl_srv_req_abort_locked(r) > 0)
            atomic_fetch_add(&s->aborted_disconnect, 1);
        r->client_gone = true;
        return false;
    }
    r->suspended = true;
    MHD_suspend_connection(r->conn);
    return true;
}

static enum MHD_Result deliver(pl_srv *s, pl_srv_req *r, struct MHD_Connection *c,
                               const pl_srv_response *resp);

/* A whole response: answer if every choice is in, else sleep until the watcher resumes the
 * connection (the stepping thread delivered the last choice, or the client hung up). */
static enum MHD_Result wait_or_answer(pl_srv *s, pl_srv_req *r, struct MHD_Connection *c) {
    pthread_mutex_lock(&r->mu);
    bool done = r->done;
    if (!done) suspend_locked(s, r);
    bool gone = r->client_gone;
    pthread_mutex_unlock(&r->mu);
    if (gone) return MHD_NO; /* closes the connection */
    if (!done) return MHD_YES;
    pl_srv_response resp;
    pl_srv_route_answer(s, r, &resp);
    return deliver(s, r, c, &resp);
}

/* The chunked body: sends what the stream's next() appended to r->out; suspends when it has
 * nothing, unless something arrived since it looked. */
static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    pl_srv_req *r = cls;
    pl_srv *s = r->srv;
    for (;;) {
        if (r->out_pos < r->out_len) {
            size_t n = r->out_len - r->out_pos < max ? r->out_len - r->out_pos : max;
            memcpy(buf, r->out + r->out_pos, n);
            r->out_pos += n;
            return (ssize_t)n;
        }
        r->out_len = r->out_pos = 0;
        if (r->stream_ended) return MHD_CONTENT_READER_END_OF_STREAM;
        switch (r->next(s, r)) {
        case PL_SRV_NEXT_MORE:
            continue;
        case PL_SRV_NEXT_END:
            r->stream_ended = true;
            continue;
        case PL_SRV_NEXT_FAIL:
            return MHD_CONTENT_READER_END_WITH_ERROR;
        case PL_SRV_NEXT_WAIT:
            break;
        }
        pthread_mutex_lock(&r->mu);
        bool idle = !r->ev_head && !r->done && !r->overflow;
        bool suspended = idle && !r->client_gone && suspend_locked(s, r);
        pthread_mutex_unlock(&r->mu);
        if (idle) return suspended ? 0 : MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

static void stream_free(void *cls) { pl_srv_req_unref(cls); }

static enum MHD_Result start_stream(pl_srv_req *r, struct MHD_Connection *c,
                                    const pl_srv_response *resp) {
    r->next = resp->next;
    pl_srv_req_ref(r); /* the response's */
    struct MHD_Response *mr =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_reader, r, stream_free);
    if (!mr) {
        pl_srv_req_unref(r);
        return MHD_NO;
    }
    MHD_add_response_header(mr, MHD_HTTP_HEADER_CONTENT_TYPE, resp->type);
    if (resp->header) MHD_add_response_header(mr, resp->header, resp->value);
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)resp->status, mr);
    MHD_destroy_response(mr);
    r->status = resp->status;
    r->responded = true;
    return ok;
}

/* Sends what the routes answered. */
static enum MHD_Result deliver(pl_srv *s, pl_srv_req *r, struct MHD_Connection *c,
                               const pl_srv_response *resp) {
    if (resp->next) return start_stream(r, c, resp);
    if (resp->wait) return wait_or_answer(s, r, c);
    if (!resp->status) return MHD_NO; /* nothing could be made (out of memory): close */
    return send_body(r, c, resp->status, resp->type, resp->body, resp->len, resp->header,
                     resp->value);
}

/* ---- libmicrohttpd's callbacks ---------------------------------------------------------------- */

static bool append_body(pl_srv *s, pl_srv_req *r, const char *data, size_t n) {
    if (r->body_len + n > s->opt.max_body_bytes) return false;
    if (r->body_len + n + 1 > r->body_cap) {
        size_t cap = r->body_cap ? r->body_cap : 4096;
        while (cap < r->body_len + n + 1) cap *= 2;
        char *g = realloc(r->body, cap);
        if (!g) return false;
        r->body = g;
        r->body_cap = cap;
    }
    memcpy(r->body + r->body_len, data, n);
    r->body_len += n;
    r->body[r->body_len] = '\0';
    return true;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version_,
                                  const char *upload_data, size_t *upload_size, void **con_cls) {
    (void)version_;
    pl_srv *s = cls;
    pl_srv_req *r = *con_cls;
    pl_srv_response resp;
    if (!r) {
        if (!(r = pl_srv_req_create(s))) return MHD_NO;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        r->sock = ci ? ci->socket_context : NULL;
        r->conn = c;
        pl_srv_conn_attach(s, r->sock, r);
        snprintf(r->method, sizeof r->method, "%s", method);
        snprintf(r->path, sizeof r->path, "%.*s", (int)(sizeof r->path - 1), url);
        *con_cls = r;
        atomic_fetch_add(&s->active, 1);
        pl_srv_headers h = {
            .authorization = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                         MHD_HTTP_HEADER_AUTHORIZATION),
            .content_length = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                          MHD_HTTP_HEADER_CONTENT_LENGTH),
        };
        if (pl_srv_route_headers(s, r, url, method, &h, &resp)) return deliver(s, r, c, &resp);
        return MHD_YES;
    }
    if (*upload_size > 0) {
        size_t n = *upload_size;
        *upload_size = 0;
        if (r->responded || r->has_pending) return MHD_YES; /* to be refused: drop it */
        if (!append_body(s, r, upload_data, n)) {
            r->too_large = true;
            return MHD_NO; /* a body past the limit with no Content-Length: close */
        }
        return MHD_YES;
    }
    if (r->responded) return MHD_YES;
    if (!r->processed) {
        if (!r->has_pending) { /* a refusal is answered without being processed */
            r->processed = true;
            pl_srv_conn_busy(s, r->sock);
        }
        pl_srv_route_body(s, r, &resp);
        return deliver(s, r, c, &resp);
    }
    return wait_or_answer(s, r, c); /* resumed */
}

static void client_address(struct MHD_Connection *c, char *buf, size_t cap) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    snprintf(buf, cap, "-");
    if (!ci || !ci->client_addr) return;
    const struct sockaddr *a = ci->client_addr;
    char host[64] = "?";
    int port = 0;
    if (a->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)a;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
        port = ntohs(in->sin_port);
    } else if (a->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in = (const struct sockaddr_in6 *)a;
        inet_ntop(AF_INET6, &in->sin6_addr, host, sizeof host);
        port = ntohs(in->sin6_port);
    }
    snprintf(buf, cap, "%s:%d", host, port);
}

/* What the access log says of a request's choices, read under r->mu: a request that did not
 * finish is still being written by the stepping thread. */
typedef struct log_counts {
    size_t prompt, out;
    double ttft;       /* the first choice's; -1: none */
} log_counts;

static log_counts count_locked(const pl_srv_req *r) {
    log_counts k = {.ttft = -1};
    for (int i = 0; i < r->n_choices; i++) {
        const pl_srv_choice *ch = &r->choices[i];
        k.out += ch->n_out;
        if (i % r->n_per_prompt == 0) k.prompt += ch->n_prompt;
        if (ch->n_out && (k.ttft < 0 || ch->ttft_s < k.ttft)) k.ttft = ch->ttft_s;
    }
    return k;
}

static void access_log(pl_srv *s, pl_srv_req *r, struct MHD_Connection *c,
                       enum MHD_RequestTerminationCode toe, const log_counts *k, bool aborted,
                       bool slow) {
    if (!s->opt.access_log) return;
    char addr[96];
    client_address(c, addr, sizeof addr);
    char extra[96] = "";
    if (r->n_choices)
        snprintf(extra, sizeof extra, " prompt_tokens=%zu completion_tokens=%zu ttft_ms=%.1f",
                 k->prompt, k->out, k->ttft >= 0 ? k->ttft * 1e3 : 0.0);
    const char *note = slow ? " (aborted: the client read the stream too slowly)"
                       : aborted ? " (aborted: the client went away)"
                       : toe != MHD_REQUEST_TERMINATED_COMPLETED_OK ? " (connection closed early)"
                                                                    : "";
    pl_srv_log("INFO", "%s \"%s %s\" %d id=%s%s total_ms=%.1f%s", addr, r->method, r->path,
               r->status, r->id[0] ? r->id : "-", extra, (pl_srv_now() - r->t_start) * 1e3, note);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    pl_srv *s = cls;
    pl_srv_req *r = *con_cls;
    if (!r) return;
    *con_cls = NULL;
    pthread_mutex_lock(&r->mu);
    bool aborted = false;
    if (r->submitted && !r->done && !r->overflow) { /* a slow reader's is aborted already */
        aborted = pl_srv_req_abort_locked(r) > 0;
        if (aborted && !r->client_gone) atomic_fetch_add(&s->aborted_disconnect, 1);
    }
    bool slow = r->overflow, gone = r->client_gone;
    log_counts k = count_locked(r);
    pl_srv_conn *sock = r->sock;
    r->conn = NULL;
    r->sock = NULL; /* freed with the connection; nothing watches it any more */
    pthread_mutex_unlock(&r->mu);
    access_log(s, r, c, toe, &k, aborted || gone, slow);
    pl_srv_conn_idle(s, sock);
    atomic_fetch_add(&s->served, 1);
    atomic_fetch_sub(&s->active, 1);
    pl_srv_req_unref(r);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    pl_srv *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (ci) pl_srv_conn_opened(s, ci->connect_fd, socket_context);
    } else {
        pl_srv_conn_closed(s, socket_context);
    }
}

/* The request line arrived: the request's read deadline starts. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c) {
    (void)uri;
    pl_srv *s = cls;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    if (ci && ci->socket_context) pl_srv_conn_reading(s, ci->socket_context);
    return NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r')) msg[--n] = '\0';
    pl_srv_log("WARN", "libmicrohttpd: %s", msg);
}

bool pl_srv_http_start(pl_srv *s) {
    char port[16];
    snprintf(port, sizeof port, "%d", s->opt.port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV}, *ai = NULL;
    int rc = getaddrinfo(s->opt.host, port, &hints, &ai);
    if (rc != 0 || !ai) {
        pl_srv_log("ERROR", "--host %s: %s", s->opt.host, gai_strerror(rc));
        return false;
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ERROR_LOG | (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    s->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, s,
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s, /* first: it covers the other options */
        MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)(s->opt.http_threads > 1 ? s->opt.http_threads : 0),
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->opt.max_connections,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)s->opt.max_connections_per_ip,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->opt.timeout_keep_alive,
        MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
        MHD_OPTION_URI_LOG_CALLBACK, on_uri, s,
        MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->daemon) {
        pl_srv_log("ERROR", "cannot listen on %s:%d (in use, or not an address of this machine)",
                   s->opt.host, s->opt.port);
        return false;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : s->opt.port;
    return true;
}

void pl_srv_http_stop(pl_srv *s) {
    if (s->daemon) MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
}
