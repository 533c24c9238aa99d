/*
 * tests/fuzz/fuzz_sse.c - libFuzzer target: what `bench serve` reads from a server (bench/sse.c
 * and bench/serve_chunk.c): a response body parsed as server-sent events, cut into reads at
 * sizes taken from the input, every event read as a streamed chunk of both endpoints, and the
 * body read as an HTTP error response.
 *
 * Contract: the parser returns 0, or PL_BENCH_SSE_TOO_LONG when a line or an event's data
 * passes its limit; the events (and their number) do not depend on how the bytes were cut;
 * every event's data is NUL-terminated at its length and never longer than the limit; a chunk
 * is either refused with a message or read with text inside its JSON and counts >= -1; error
 * messages are printable (no control characters) and within their buffer; nothing leaks.
 *
 * Input: byte 0 picks the read size (1 + b % 64), the rest is the body.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/serve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { LIMIT = 4096 };

typedef struct seen {
    unsigned long long hash; /* of every event's data, in order */
    size_t n;
} seen;

static void fail(const char *what) {
    fprintf(stderr, "fuzz_sse: %s\n", what);
    abort();
}

static void check_printable(const char *s, size_t cap) {
    size_t len = strnlen(s, cap);
    if (len == cap) fail("message not terminated in its buffer");
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) fail("control character in a message");
}

static int on_event(void *ctx, const char *d, size_t len) {
    seen *s = ctx;
    if (strlen(d) > len || d[len] != '\0') fail("event data not NUL-terminated at its length");
    if (len > LIMIT) fail("event over the limit");
    for (size_t i = 0; i < len; i++) s->hash = s->hash * 1099511628211ull + (unsigned char)d[i];
    s->hash = s->hash * 1099511628211ull + 0xff;
    s->n++;
    for (int chat = 0; chat < 2; chat++) {
        pl_bench_chunk c;
        json_t *root = NULL;
        char err[128];
        if (!pl_bench_chunk_parse(d, len, chat, &c, &root, err, sizeof err)) {
            if (root) fail("a refused chunk left a JSON tree");
            if (!err[0]) fail("a refused chunk without a message");
            continue;
        }
        if (c.done && root) fail("[DONE] with a JSON tree");
        if (c.text && strlen(c.text) != c.text_len) fail("text length");
        if (c.n_tokens < 0 || c.prompt_tokens < -1 || c.completion_tokens < -1) fail("counts");
        if (c.has_usage && c.completion_tokens < 0) fail("usage without a count");
        check_printable(c.error, sizeof c.error);
        json_decref(root);
    }
    return 0;
}

static int parse(const uint8_t *body, size_t n, size_t step, seen *s) {
    pl_bench_sse p;
    pl_bench_sse_init(&p, LIMIT);
    int rc = 0;
    for (size_t at = 0; at < n && !rc; at += step)
        rc = pl_bench_sse_feed(&p, (const char *)body + at, n - at < step ? n - at : step,
                               on_event, s);
    if (!rc) rc = pl_bench_sse_finish(&p, on_event, s);
    pl_bench_sse_free(&p);
    if (rc != 0 && rc != PL_BENCH_SSE_TOO_LONG) fail("unexpected parser status");
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    size_t step = 1 + data[0] % 64;
    const uint8_t *body = data + 1;
    size_t n = size - 1;
    seen a = {0}, b = {0};
    int ra = parse(body, n, step, &a);
    int rb = parse(body, n, n ? n : 1, &b);
    if (ra != rb) fail("the status depends on how the body was cut");
    if (ra == 0 && (a.n != b.n || a.hash != b.hash))
        fail("the events depend on how the body was cut");
    char msg[96];
    pl_bench_error_message((const char *)body, n, msg, sizeof msg);
    check_printable(msg, sizeof msg);
    return 0;
}
