/*
 * bench/serve_client.c - the requests of `bench serve`, all on one thread (see serve.h).
 *
 * libcurl's multi interface drives every transfer: the loop starts the requests whose arrival
 * time has come (while fewer than --max-concurrency are open), lets libcurl move bytes, and
 * sleeps in curl_multi_poll until a socket is ready or the next arrival is due. Bytes reach
 * write_cb as they come off the socket; it feeds them to the request's SSE parser, whose
 * events are timed with the clock read when the bytes arrived: TTFT is the first content
 * chunk, each later content chunk adds one inter-token latency (the gap since the previous
 * chunk, as vLLM's client measures it, however many tokens the chunk carries), and E2EL ends
 * at the last content chunk.
 *
 * A request fails, with the reason kept, on: a transport error (refused, reset, a stream cut
 * before its end), an HTTP status other than 200 (the body's error message), an error object
 * in the stream, an event that is not JSON, a stream without "data: [DONE]", or one that never
 * carried output.
 */
#include <curl/curl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench_internal.h"
#include "bench/serve.h"

enum {
    MAX_EVENT = 8 << 20,     /* bytes one streamed event may hold */
    MAX_ERROR_BODY = 16384,  /* bytes of an error response kept for its message */
    MAX_GET_BODY = 16 << 20, /* bytes of a GET response */
};

typedef struct req {
    pl_bench_serve_result *r;
    size_t index;
    const char *run_id;      /* X-Request-Id: pagellm-bench-RUN-INDEX, unique across runs */
    CURL *easy;
    struct curl_slist *headers;
    pl_bench_sse sse;
    bool chat;
    double t_start;          /* absolute clock at send */
    double t_now;            /* absolute clock of the bytes being parsed */
    char *body;              /* a non-200 response's body (MAX_ERROR_BODY at most) */
    size_t body_len;
    int max_tokens;
    long long bar_counted;   /* tokens this request added to the bar */
    bool failed;             /* a reason is recorded (r->error, unless memory ran out) */
    pl_progress *bar;
    char curl_err[CURL_ERROR_SIZE];
} req;

static void set_error(req *q, const char *fmt, ...) {
    if (q->failed) return; /* the first reason is the one that counts */
    q->failed = true;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    q->r->error = strdup(buf); /* NULL when memory ran out: failed still says it */
}

/* One content chunk of k tokens and its text, arrived at t (seconds since the send). */
static bool record_chunk(pl_bench_serve_result *r, double t, uint32_t k, const char *text,
                         size_t len) {
    if (r->n_chunks == r->cap_chunks) {
        size_t c = r->cap_chunks ? r->cap_chunks * 2 : 64;
        double *itl = realloc(r->itl, c * sizeof *itl);
        if (!itl) return false;
        r->itl = itl;
        uint32_t *tokens = realloc(r->chunk_tokens, c * sizeof *tokens);
        if (!tokens) return false;
        r->chunk_tokens = tokens;
        r->cap_chunks = c;
    }
    if (r->n_chunks == 0)
        r->ttft_s = t;
    else
        r->itl[r->n_chunks - 1] = t - r->e2el_s;
    r->e2el_s = t;
    r->chunk_tokens[r->n_chunks++] = k;
    r->chunk_token_sum += k;
    if (len) {
        if (r->text_len + len + 1 > r->text_cap) {
            size_t c = r->text_cap ? r->text_cap : 256;
            while (c < r->text_len + len + 1) c *= 2;
            char *text2 = realloc(r->text, c);
            if (!text2) return false;
            r->text = text2;
            r->text_cap = c;
        }
        memcpy(r->text + r->text_len, text, len);
        r->text_len += len;
        r->text[r->text_len] = '\0';
    }
    return true;
}

static void bar_add(req *q, long long k) {
    if (!q->bar || k <= 0) return;
    q->bar->done += (uint64_t)k;
    if (q->bar->total < q->bar->done) q->bar->total = q->bar->done;
    q->bar_counted += k;
    pl_progress_update(q->bar);
}

/* An SSE event: non-zero stops the transfer (the request has failed). */
static int on_event(void *ctx, const char *data, size_t len) {
    req *q = ctx;
    pl_bench_serve_result *r = q->r;
    pl_bench_chunk ch;
    json_t *root = NULL;
    char err[256];
    if (!pl_bench_chunk_parse(data, len, q->chat, &ch, &root, err, sizeof err)) {
        set_error(q, "%s", err);
        return 1;
    }
    int rc = 0;
    if (ch.done) {
        r->saw_done = true;
    } else if (ch.error[0]) {
        set_error(q, "error in the stream: %s", ch.error);
        rc = 1;
    } else {
        if (pl_bench_chunk_has_content(&ch)) {
            uint32_t k = ch.n_tokens > 0 ? (uint32_t)ch.n_tokens : 1;
            if (!record_chunk(r, q->t_now - q->t_start, k, ch.text, ch.text_len)) {
                set_error(q, "out of memory recording a chunk");
                rc = 1;
            }
            /* the bar completes only when the last request ends: each holds its last
             * token back until then */
            long long room = (long long)q->max_tokens - 1 - q->bar_counted;
            bar_add(q, (long long)k < room ? (long long)k : room);
        }
        if (ch.has_usage) {
            r->usage_tokens = ch.completion_tokens;
            if (ch.prompt_tokens >= 0) r->prompt_tokens = ch.prompt_tokens;
        }
    }
    json_decref(root);
    return rc;
}

static size_t write_cb(char *ptr, size_t size, size_t nmemb, void *userdata) {
    req *q = userdata;
    size_t n = size * nmemb;
    q->t_now = pl_bench_now_s();
    if (q->r->http_status == 0)
        curl_easy_getinfo(q->easy, CURLINFO_RESPONSE_CODE, &q->r->http_status);
    if (q->r->http_status != 200) { /* keep the start of the body for its error message */
        size_t keep = q->body_len + n > MAX_ERROR_BODY ? MAX_ERROR_BODY - q->body_len : n;
        if (keep) {
            char *b = realloc(q->body, q->body_len + keep + 1);
            if (!b) return 0;
            q->body = b;
            memcpy(b + q->body_len, ptr, keep);
            q->body_len += keep;
            b[q->body_len] = '\0';
        }
        return n;
    }
    int rc = pl_bench_sse_feed(&q->sse, ptr, n, on_event, q);
    if (rc == PL_BENCH_SSE_TOO_LONG)
        set_error(q, "a streamed line or event is over %d bytes", MAX_EVENT);
    else if (rc == PL_BENCH_SSE_NOMEM)
        set_error(q, "out of memory reading the stream");
    return rc ? 0 : n; /* 0 makes libcurl stop the transfer (CURLE_WRITE_ERROR) */
}

static struct curl_slist *add_header(struct curl_slist *h, bool *ok, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    struct curl_slist *n = curl_slist_append(h, line);
    if (!n) *ok = false;
    return n ? n : h;
}

/* Headers every request sends; "Expect:" keeps libcurl from waiting for "100 Continue"
 * before a large body, which servers that do not answer it would turn into a 1 s stall. */
static struct curl_slist *base_headers(const char *api_key, bool *ok) {
    struct curl_slist *h = NULL;
    h = add_header(h, ok, "Content-Type: application/json");
    h = add_header(h, ok, "Accept: text/event-stream");
    h = add_header(h, ok, "Expect:");
    if (api_key) h = add_header(h, ok, "Authorization: Bearer %s", api_key);
    return h;
}

static bool start_request(CURLM *m, const pl_bench_serve_target *t, req *q, const char *body,
                          double t0) {
    bool ok = true;
    q->headers = base_headers(t->api_key, &ok);
    q->headers = add_header(q->headers, &ok, "X-Request-Id: pagellm-bench-%s-%zu", q->run_id,
                            q->index);
    q->easy = curl_easy_init();
    if (!ok || !q->easy) return false;
    pl_bench_sse_init(&q->sse, MAX_EVENT);
    CURL *e = q->easy;
    curl_easy_setopt(e, CURLOPT_URL, t->url);
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, q->headers);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, q);
    curl_easy_setopt(e, CURLOPT_PRIVATE, q);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, q->curl_err);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    q->t_start = pl_bench_now_s();
    q->r->start_s = q->t_start - t0;
    q->r->sent = true;
    return curl_multi_add_handle(m, e) == CURLM_OK;
}

/* The transfer ended with libcurl's code `res`: decide success and settle the bar. */
static void finish_request(req *q, CURLcode res) {
    pl_bench_serve_result *r = q->r;
    if (r->http_status == 0) curl_easy_getinfo(q->easy, CURLINFO_RESPONSE_CODE, &r->http_status);
    if (res != CURLE_OK) {
        set_error(q, "%s%s%s", curl_easy_strerror(res), q->curl_err[0] ? ": " : "",
                  q->curl_err);
    } else if (r->http_status != 200) {
        char msg[768];
        pl_bench_error_message(q->body, q->body_len, msg, sizeof msg);
        set_error(q, "HTTP %ld%s%s", r->http_status, msg[0] ? ": " : "", msg);
    } else {
        q->t_now = pl_bench_now_s();
        int rc = pl_bench_sse_finish(&q->sse, on_event, q);
        if (rc == PL_BENCH_SSE_NOMEM) set_error(q, "out of memory reading the stream");
        char *type = NULL;
        curl_easy_getinfo(q->easy, CURLINFO_CONTENT_TYPE, &type);
        if (!r->saw_done && r->n_chunks == 0 && (!type || !strstr(type, "text/event-stream")))
            set_error(q, "the response is not an event stream (Content-Type: %s): the server "
                         "did not stream", type ? type : "none");
        if (!r->saw_done)
            set_error(q, "the stream ended without data: [DONE] (%zu content chunks)",
                      r->n_chunks);
        if (r->n_chunks == 0) set_error(q, "the response carried no output");
    }
    r->success = !q->failed;
    r->output_tokens = r->usage_tokens >= 0 ? r->usage_tokens : r->chunk_token_sum;
    if (q->bar) {
        /* the usage may count more than the chunks showed; an early stop or a failure gives
         * back the rest of its max_tokens */
        long long got = r->success ? r->output_tokens : q->bar_counted;
        if (got > q->bar_counted) bar_add(q, got - q->bar_counted);
        long long unused = (long long)q->max_tokens - q->bar_counted;
        if (unused > 0)
            q->bar->total = q->bar->total > (uint64_t)unused ? q->bar->total - (uint64_t)unused
                                                             : 0;
        if (q->bar->total < q->bar->done) q->bar->total = q->bar->done;
        pl_progress_update(q->bar);
    }
    pl_bench_sse_free(&q->sse);
    free(q->body);
    q->body = NULL;
}

static void release(CURLM *m, req *q) {
    if (q->easy) {
        curl_multi_remove_handle(m, q->easy);
        curl_easy_cleanup(q->easy);
    }
    curl_slist_free_all(q->headers);
    q->easy = NULL;
    q->headers = NULL;
}

int pl_bench_serve_run(const pl_bench_serve_target *t, char *const *bodies,
                       const int *max_tokens, const double *arrivals, size_t n,
                       pl_progress *bar, pl_bench_serve_result *out, double *duration_s) {
    memset(out, 0, n * sizeof *out);
    *duration_s = 0;
    req *qs = calloc(n ? n : 1, sizeof *qs);
    CURLM *m = curl_multi_init();
    if (!qs || !m) {
        free(qs);
        if (m) curl_multi_cleanup(m);
        fprintf(stderr, "pagellm bench serve: out of memory for %zu requests\n", n);
        return 1;
    }
    char run_id[32];
    snprintf(run_id, sizeof run_id, "%llx",
             (unsigned long long)time(NULL) << 20 ^ (unsigned long long)getpid());
    for (size_t i = 0; i < n; i++) {
        qs[i] = (req){.r = &out[i], .index = i, .run_id = run_id, .chat = t->chat,
                      .max_tokens = max_tokens[i], .bar = bar};
        out[i].prompt_tokens = out[i].usage_tokens = -1;
        out[i].arrival_s = arrivals[i];
    }
    size_t next = 0, open = 0, finished = 0;
    size_t cap = t->max_concurrency > 0 ? (size_t)t->max_concurrency : (size_t)-1;
    int rc = 0;
    double t0 = pl_bench_now_s(), t_end = t0;
    while (finished < n) {
        double now = pl_bench_now_s() - t0;
        while (next < n && arrivals[next] <= now && open < cap) {
            if (!start_request(m, t, &qs[next], bodies[next], t0)) {
                fprintf(stderr, "pagellm bench serve: cannot set up request %zu (libcurl)\n",
                        next);
                rc = 1;
                goto done;
            }
            next++;
            open++;
        }
        int running = 0;
        CURLMcode mc = curl_multi_perform(m, &running);
        if (mc != CURLM_OK) {
            fprintf(stderr, "pagellm bench serve: libcurl: %s\n", curl_multi_strerror(mc));
            rc = 1;
            goto done;
        }
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            char *priv = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &priv);
            req *q = (req *)priv;
            finished++;
            if (bar) snprintf(bar->note, sizeof bar->note, "%zu/%zu requests", finished, n);
            finish_request(q, msg->data.result);
            release(m, q);
            open--;
            t_end = pl_bench_now_s();
        }
        if (finished == n) break;
        /* sleep until a socket is ready or the next arrival is due (at most 1 s, so the bar's
         * rate keeps moving) */
        int wait_ms = 1000;
        if (next < n && open < cap) {
            double due = arrivals[next] - (pl_bench_now_s() - t0);
            if (due <= 0) continue;
            wait_ms = due >= 1.0 ? 1000 : (int)ceil(due * 1000.0);
        }
        mc = curl_multi_poll(m, NULL, 0, wait_ms, NULL);
        if (mc != CURLM_OK) {
            fprintf(stderr, "pagellm bench serve: libcurl: %s\n", curl_multi_strerror(mc));
            rc = 1;
            goto done;
        }
    }
    *duration_s = t_end - t0;
done:
    for (size_t i = 0; i < n; i++) {
        pl_bench_sse_free(&qs[i].sse);
        free(qs[i].body);
        release(m, &qs[i]);
    }
    curl_multi_cleanup(m);
    free(qs);
    return rc;
}

void pl_bench_serve_results_free(pl_bench_serve_result *r, size_t n) {
    if (!r) return;
    for (size_t i = 0; i < n; i++) {
        free(r[i].itl);
        free(r[i].chunk_tokens);
        free(r[i].text);
        free(r[i].error);
    }
}

typedef struct get_buf {
    char *data;
    size_t len;
    bool too_big;
} get_buf;

static size_t get_cb(char *ptr, size_t size, size_t nmemb, void *userdata) {
    get_buf *b = userdata;
    size_t n = size * nmemb;
    if (b->len + n > MAX_GET_BODY) {
        b->too_big = true;
        return 0;
    }
    char *d = realloc(b->data, b->len + n + 1);
    if (!d) return 0;
    memcpy(d + b->len, ptr, n);
    b->data = d;
    b->len += n;
    d[b->len] = '\0';
    return n;
}

bool pl_bench_http_get(const char *url, const char *api_key, char **body, long *status,
                       char *err, size_t err_cap) {
    return pl_bench_http_post(url, api_key, NULL, body, status, err, err_cap);
}

bool pl_bench_http_post(const char *url, const char *api_key, const char *json_body,
                        char **body, long *status, char *err, size_t err_cap) {
    *body = NULL;
    *status = 0;
    bool ok = true;
    struct curl_slist *h = NULL;
    if (api_key) h = add_header(h, &ok, "Authorization: Bearer %s", api_key);
    if (json_body) h = add_header(h, &ok, "Content-Type: application/json");
    CURL *e = curl_easy_init();
    if (!ok || !e) {
        snprintf(err, err_cap, "out of memory");
        curl_slist_free_all(h);
        if (e) curl_easy_cleanup(e);
        return false;
    }
    get_buf b = {0};
    char cerr[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    if (json_body) curl_easy_setopt(e, CURLOPT_POSTFIELDS, json_body);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, get_cb);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT, 60L);
    CURLcode res = curl_easy_perform(e);
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, status);
    curl_easy_cleanup(e);
    curl_slist_free_all(h);
    if (res != CURLE_OK) {
        if (b.too_big)
            snprintf(err, err_cap, "the response is over %d bytes", MAX_GET_BODY);
        else
            snprintf(err, err_cap, "%s%s%s", curl_easy_strerror(res), cerr[0] ? ": " : "", cerr);
        free(b.data);
        return false;
    }
    *body = b.data ? b.data : strdup("");
    return *body != NULL;
}
