/*
 * bench/sse.c - server-sent events, parsed incrementally (see serve.h).
 *
 * Bytes are gathered into the current line; at a line end the line is interpreted: blank ends
 * the event, "data" adds to the event's data, anything else is skipped. So a line or event
 * split anywhere across reads (in the middle of "\r\n", of a UTF-8 character, of a JSON
 * string) is parsed the same as one that came whole.
 */
#include <stdlib.h>
#include <string.h>

#include "bench/serve.h"

void pl_bench_sse_init(pl_bench_sse *p, size_t max_event) {
    memset(p, 0, sizeof *p);
    p->max_event = max_event;
}

void pl_bench_sse_free(pl_bench_sse *p) {
    free(p->buf);
    free(p->data);
    memset(p, 0, sizeof *p);
}

/* Appends n bytes to *buf (keeping a NUL after them). */
static int append(char **buf, size_t *len, size_t *cap, const char *s, size_t n, size_t max) {
    if (*len + n > max) return PL_BENCH_SSE_TOO_LONG;
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + n + 1) c *= 2;
        char *b = realloc(*buf, c);
        if (!b) return PL_BENCH_SSE_NOMEM;
        *buf = b;
        *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = '\0';
    return 0;
}

static int dispatch(pl_bench_sse *p, pl_bench_sse_fn fn, void *ctx) {
    if (!p->has_data) return 0;
    /* the data lines were each followed by '\n': the last one is not part of the data */
    size_t n = p->data_len - 1;
    p->data[n] = '\0';
    p->has_data = false;
    p->data_len = 0;
    return fn(ctx, p->data, n);
}

/* The line in p->buf (p->len bytes) is complete. */
static int end_line(pl_bench_sse *p, pl_bench_sse_fn fn, void *ctx) {
    const char *line = p->buf ? p->buf : "";
    size_t len = p->len;
    p->len = 0;
    if (len == 0) return dispatch(p, fn, ctx);
    if (line[0] == ':') return 0; /* a comment */
    const char *colon = memchr(line, ':', len);
    size_t name_len = colon ? (size_t)(colon - line) : len;
    if (name_len != 4 || memcmp(line, "data", 4)) return 0; /* event, id, retry, unknown */
    const char *value = colon ? colon + 1 : line + len;
    if (value < line + len && *value == ' ') value++;
    size_t vlen = (size_t)(line + len - value);
    int rc = append(&p->data, &p->data_len, &p->data_cap, value, vlen, p->max_event);
    if (!rc) rc = append(&p->data, &p->data_len, &p->data_cap, "\n", 1, p->max_event + 1);
    p->has_data = true;
    return rc;
}

int pl_bench_sse_feed(pl_bench_sse *p, const char *bytes, size_t n, pl_bench_sse_fn fn,
                      void *ctx) {
    size_t i = 0;
    while (i < n) {
        if (p->after_cr && bytes[i] == '\n') { /* the second half of "\r\n" */
            p->after_cr = false;
            i++;
            continue;
        }
        p->after_cr = false;
        /* the run of bytes up to the next line end joins the current line */
        size_t j = i;
        while (j < n && bytes[j] != '\n' && bytes[j] != '\r') j++;
        int rc = append(&p->buf, &p->len, &p->cap, bytes + i, j - i, p->max_event);
        if (rc) return rc;
        if (j == n) break;
        p->after_cr = bytes[j] == '\r';
        i = j + 1;
        if ((rc = end_line(p, fn, ctx))) return rc;
    }
    return 0;
}

int pl_bench_sse_finish(pl_bench_sse *p, pl_bench_sse_fn fn, void *ctx) {
    int rc = 0;
    if (p->len) rc = end_line(p, fn, ctx);
    if (!rc) rc = dispatch(p, fn, ctx);
    return rc;
}
