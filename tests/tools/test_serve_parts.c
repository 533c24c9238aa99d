/*
 * tests/tools/test_serve_parts.c - the parts of `bench serve` (bench/serve.h) on their own:
 * the SSE parser over every way a stream can be cut into reads, what a chunk says, error
 * bodies, the arrival schedule, and the figures computed from hand-made request records
 * (exact values). The client against a server is tests/tools/test_bench_serve.py.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/serve.h"

/* ---- SSE ----------------------------------------------------------------------------- */

typedef struct events {
    char got[16][128];
    size_t n;
    int stop_at; /* return 7 from this event (1-based); 0 never */
} events;

static int collect(void *ctx, const char *data, size_t len) {
    events *e = ctx;
    cr_assert_eq(strlen(data), len, "data is NUL-terminated at len");
    cr_assert_lt(e->n, 16);
    snprintf(e->got[e->n], sizeof e->got[e->n], "%s", data);
    e->n++;
    return e->stop_at && (int)e->n == e->stop_at ? 7 : 0;
}

/* Feeds s in reads of the given sizes (cycled), then finishes. */
static int feed_in_pieces(const char *s, const size_t *sizes, size_t n_sizes, events *e,
                          size_t max_event) {
    pl_bench_sse p;
    pl_bench_sse_init(&p, max_event);
    size_t len = strlen(s), at = 0, k = 0;
    int rc = 0;
    while (at < len && !rc) {
        size_t step = sizes[k++ % n_sizes];
        if (step > len - at) step = len - at;
        rc = pl_bench_sse_feed(&p, s + at, step, collect, e);
        at += step;
    }
    if (!rc) rc = pl_bench_sse_finish(&p, collect, e);
    pl_bench_sse_free(&p);
    return rc;
}

static const char STREAM[] =
    ": keep-alive\r\n"
    "event: message\r\n"
    "data: {\"a\":1}\r\n"
    "\r\n"
    "data:{\"b\":2}\n"
    "id: 7\n"
    "\n"
    "data: line one\r"
    "data: line two\r"
    "\r"
    "retry: 100\n"
    "\n"        /* an event without data: nothing */
    "data\n"    /* a data field without a colon: empty */
    "\n"
    "data:  two spaces\n"
    "\n"
    "data: [DONE]"; /* no blank line at the end of the stream */

static const char *const WANT[] = {"{\"a\":1}", "{\"b\":2}", "line one\nline two", "",
                                   " two spaces", "[DONE]"};

static void check_want(const events *e) {
    cr_assert_eq(e->n, sizeof WANT / sizeof *WANT, "%zu events", e->n);
    for (size_t i = 0; i < e->n; i++) cr_assert_str_eq(e->got[i], WANT[i], "event %zu", i);
}

Test(sse, whole_stream) {
    events e = {0};
    size_t all = sizeof STREAM;
    cr_assert_eq(feed_in_pieces(STREAM, &all, 1, &e, 1024), 0);
    check_want(&e);
}

Test(sse, every_split_point_and_byte_by_byte) {
    size_t len = strlen(STREAM);
    for (size_t cut = 1; cut < len; cut++) {
        events e = {0};
        size_t sizes[2] = {cut, len};
        cr_assert_eq(feed_in_pieces(STREAM, sizes, 2, &e, 1024), 0);
        check_want(&e);
    }
    for (size_t step = 1; step <= 7; step++) {
        events e = {0};
        cr_assert_eq(feed_in_pieces(STREAM, &step, 1, &e, 1024), 0);
        check_want(&e);
    }
}

Test(sse, callback_stops_the_parse) {
    events e = {.stop_at = 2};
    size_t all = sizeof STREAM;
    cr_assert_eq(feed_in_pieces(STREAM, &all, 1, &e, 1024), 7);
    cr_assert_eq(e.n, 2);
}

Test(sse, limits) {
    events e = {0};
    size_t one = 1;
    /* a line longer than the limit, fed a byte at a time */
    cr_assert_eq(feed_in_pieces("data: 0123456789abcdef\n\n", &one, 1, &e, 16),
                 PL_BENCH_SSE_TOO_LONG);
    /* data lines that together exceed it */
    cr_assert_eq(feed_in_pieces("data: 0123456\ndata: 0123456\ndata: 0123456\n\n", &one, 1,
                                &e, 16),
                 PL_BENCH_SSE_TOO_LONG);
    cr_assert_eq(e.n, 0);
    /* exactly at the limit is fine */
    cr_assert_eq(feed_in_pieces("data: 0123456789\n\n", &one, 1, &e, 16), 0);
    cr_assert_eq(e.n, 1);
    cr_assert_str_eq(e.got[0], "0123456789");
}

/* ---- chunks -------------------------------------------------------------------------- */

static pl_bench_chunk parse_ok(const char *data, bool chat, json_t **root) {
    pl_bench_chunk c;
    char err[256];
    cr_assert(pl_bench_chunk_parse(data, strlen(data), chat, &c, root, err, sizeof err),
              "%s: %s", data, err);
    return c;
}

Test(chunk, completions_and_chat) {
    json_t *root;
    pl_bench_chunk c = parse_ok("{\"choices\":[{\"text\":\" hi\",\"finish_reason\":null}]}",
                                false, &root);
    cr_assert(c.has_choice && pl_bench_chunk_has_content(&c) && !c.has_usage && !c.done);
    cr_assert_eq(c.text_len, 3);
    cr_assert_eq(memcmp(c.text, " hi", 3), 0);
    cr_assert_eq(c.n_tokens, 0);
    json_decref(root);

    c = parse_ok("{\"choices\":[{\"text\":\"\",\"token_ids\":[5,6,7]}]}", false, &root);
    cr_assert_eq(c.n_tokens, 3);
    cr_assert(pl_bench_chunk_has_content(&c), "tokens without text are content");
    json_decref(root);

    c = parse_ok("{\"choices\":[{\"text\":\"ab\",\"logprobs\":{\"tokens\":[\"a\",\"b\"]}}]}",
                 false, &root);
    cr_assert_eq(c.n_tokens, 2);
    json_decref(root);

    c = parse_ok("{\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}", true,
                 &root);
    cr_assert(c.has_choice && !pl_bench_chunk_has_content(&c), "a role chunk is not content");
    json_decref(root);

    c = parse_ok("{\"choices\":[{\"delta\":{\"content\":\"x\"},\"logprobs\":{\"content\":"
                 "[{},{}]}}]}", true, &root);
    cr_assert(pl_bench_chunk_has_content(&c));
    cr_assert_eq(c.n_tokens, 2);
    json_decref(root);

    c = parse_ok("{\"choices\":[{\"delta\":{\"content\":null,\"reasoning_content\":\"hm\"}}]}",
                 true, &root);
    cr_assert_eq(c.text_len, 2, "reasoning is output");
    json_decref(root);

    /* the chat shape read as completions: no text */
    c = parse_ok("{\"choices\":[{\"delta\":{\"content\":\"x\"}}]}", false, &root);
    cr_assert(!pl_bench_chunk_has_content(&c));
    json_decref(root);
}

Test(chunk, usage_done_and_errors) {
    json_t *root;
    pl_bench_chunk c = parse_ok("{\"choices\":[],\"usage\":{\"prompt_tokens\":12,"
                                "\"completion_tokens\":5,\"total_tokens\":17}}",
                                false, &root);
    cr_assert(c.has_usage && !c.has_choice);
    cr_assert_eq(c.prompt_tokens, 12);
    cr_assert_eq(c.completion_tokens, 5);
    json_decref(root);

    c = parse_ok("{\"usage\":{\"completion_tokens\":-1}}", false, &root);
    cr_assert(!c.has_usage, "a negative count is no count");
    json_decref(root);

    c = parse_ok(" [DONE] ", false, &root);
    cr_assert(c.done && root == NULL);

    c = parse_ok("{\"error\":{\"message\":\"bad\\nthing\",\"type\":\"x\"}}", false, &root);
    cr_assert_str_eq(c.error, "bad thing", "control characters become spaces");
    json_decref(root);
    c = parse_ok("{\"error\":\"plain\"}", false, &root);
    cr_assert_str_eq(c.error, "plain");
    json_decref(root);
    c = parse_ok("{\"object\":\"error\",\"message\":\"vllm style\",\"code\":400}", false, &root);
    cr_assert_str_eq(c.error, "vllm style");
    json_decref(root);
    c = parse_ok("{\"error\":{\"code\":7}}", false, &root);
    cr_assert_str_eq(c.error, "{\"code\":7}", "an error without a message is shown whole");
    json_decref(root);
    c = parse_ok("{\"error\":null,\"choices\":[{\"text\":\"a\"}]}", false, &root);
    cr_assert_str_eq(c.error, "", "error: null is no error");
    json_decref(root);
}

Test(chunk, refused) {
    pl_bench_chunk c;
    json_t *root;
    char err[256];
    cr_assert(!pl_bench_chunk_parse("not json", 8, false, &c, &root, err, sizeof err));
    cr_assert(root == NULL && strstr(err, "not JSON") && strstr(err, "'not json'"), "%s", err);
    cr_assert(!pl_bench_chunk_parse("[1,2]", 5, false, &c, &root, err, sizeof err));
    cr_assert(root == NULL && strstr(err, "not a JSON object"), "%s", err);
    cr_assert(!pl_bench_chunk_parse("", 0, false, &c, &root, err, sizeof err));
}

Test(chunk, error_bodies) {
    char msg[64];
    const char *j = "{\"error\":{\"message\":\"Model not found\",\"type\":\"NotFoundError\"}}";
    pl_bench_error_message(j, strlen(j), msg, sizeof msg);
    cr_assert_str_eq(msg, "Model not found");
    j = "{\"detail\":\"Not Found\"}";
    pl_bench_error_message(j, strlen(j), msg, sizeof msg);
    cr_assert_str_eq(msg, "Not Found");
    j = "<html>\r\nBad Gateway</html>";
    pl_bench_error_message(j, strlen(j), msg, sizeof msg);
    cr_assert_str_eq(msg, "<html>  Bad Gateway</html>");
    pl_bench_error_message(NULL, 0, msg, sizeof msg);
    cr_assert_str_eq(msg, "");
    char tiny[8];
    pl_bench_error_message("0123456789", 10, tiny, sizeof tiny);
    cr_assert_str_eq(tiny, "0123456", "cut to the buffer");
}

/* ---- arrivals ------------------------------------------------------------------------ */

Test(arrivals, infinite_rate_is_all_at_once) {
    double t[5];
    pl_bench_arrivals(5, INFINITY, 1.0, 3, t);
    for (int i = 0; i < 5; i++) cr_assert_eq(t[i], 0.0);
}

Test(arrivals, poisson_is_seeded_and_ends_at_n_over_rate) {
    enum { N = 50 };
    double a[N], b[N], c[N];
    pl_bench_arrivals(N, 5.0, 1.0, 11, a);
    pl_bench_arrivals(N, 5.0, 1.0, 11, b);
    pl_bench_arrivals(N, 5.0, 1.0, 12, c);
    cr_assert_eq(memcmp(a, b, sizeof a), 0, "the same seed, the same schedule");
    cr_assert_neq(memcmp(a, c, sizeof a), 0, "another seed, another schedule");
    cr_assert_float_eq(a[N - 1], N / 5.0, 1e-12);
    for (int i = 1; i < N; i++) cr_assert_geq(a[i], a[i - 1]);
    cr_assert_gt(a[0], 0.0, "the first arrival is a gap after the start, as vLLM's");
}

/* The gaps' coefficient of variation is 1/sqrt(shape) for a gamma distribution. */
Test(arrivals, gamma_gaps_have_the_shape_asked_for) {
    enum { N = 40000 };
    double *t = malloc(N * sizeof *t);
    const double shapes[] = {0.25, 0.5, 1.0, 2.0, 8.0};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        pl_bench_arrivals(N, 100.0, shapes[s], 5, t);
        double sum = 0, ss = 0, prev = 0;
        for (int i = 0; i < N; i++) {
            sum += t[i] - prev;
            prev = t[i];
        }
        double mean = sum / N;
        prev = 0;
        for (int i = 0; i < N; i++) {
            ss += (t[i] - prev - mean) * (t[i] - prev - mean);
            prev = t[i];
        }
        double cv = sqrt(ss / N) / mean, want = 1.0 / sqrt(shapes[s]);
        cr_assert_float_eq(mean, 0.01, 1e-12, "mean gap 1/rate (after scaling)");
        cr_assert(fabs(cv - want) < 0.05 * want, "shape %g: CV %g, expected %g", shapes[s], cv,
                  want);
    }
    pl_bench_arrivals(N, 100.0, INFINITY, 5, t);
    for (int i = 0; i < N; i++) cr_assert_float_eq(t[i], (i + 1) * 0.01, 1e-9);
    free(t);
}

/* ---- metrics ------------------------------------------------------------------------- */

/* A successful request sent at start, first chunk after ttft, then chunks at the gaps. */
static pl_bench_serve_result req(double start, double ttft, const double *gaps, size_t n_gaps,
                                 long long out_tokens, long long prompt) {
    pl_bench_serve_result r = {.sent = true, .success = true, .start_s = start, .ttft_s = ttft,
                               .prompt_tokens = prompt, .usage_tokens = out_tokens,
                               .output_tokens = out_tokens};
    r.n_chunks = n_gaps + 1;
    r.itl = calloc(n_gaps + 1, sizeof *r.itl);
    r.chunk_tokens = calloc(n_gaps + 1, sizeof *r.chunk_tokens);
    double e = ttft;
    for (size_t i = 0; i < n_gaps; i++) {
        r.itl[i] = gaps[i];
        e += gaps[i];
    }
    for (size_t i = 0; i <= n_gaps; i++) r.chunk_tokens[i] = 1;
    r.chunk_token_sum = (long long)r.n_chunks;
    r.e2el_s = e;
    return r;
}

Test(metrics, figures_of_a_known_run) {
    /* times are multiples of 1/8 s, exact in binary, so ties are ties */
    const double g1[] = {0.125, 0.25}, g2[] = {0.25};
    pl_bench_serve_result r[4];
    r[0] = req(0.0, 0.5, g1, 2, 3, 10);    /* chunks at 0.5, 0.625, 0.875; open until 0.875 */
    r[1] = req(0.25, 1.0, g2, 1, 5, -1);   /* usage: 5 tokens in 2 chunks, at 1.25 and 1.5 */
    r[2] = req(0.875, 0.125, NULL, 0, 1, 4); /* one token; sent as r[0] ends */
    r[3] = (pl_bench_serve_result){.sent = true}; /* failed */
    long long prompt_len[4] = {99, 7, 99, 99};
    double pct[2] = {50, 90};
    pl_bench_goodput gp = {.slo_ms = {600, 250, -1, -1}, .set = true};
    pl_bench_serve_metrics m;
    cr_assert_eq(pl_bench_serve_metrics_compute(r, prompt_len, 4, 2.0, pct, 2, &gp, &m), 0);
    cr_assert_eq(m.completed, 3);
    cr_assert_eq(m.failed, 1);
    cr_assert_eq(m.total_input, 10 + 7 + 4, "usage's prompt count, else the workload's");
    cr_assert_eq(m.total_output, 3 + 5 + 1);
    cr_assert_float_eq(m.request_throughput, 1.5, 1e-12);
    cr_assert_float_eq(m.output_throughput, 4.5, 1e-12);
    cr_assert_float_eq(m.total_token_throughput, 15.0, 1e-12);
    /* TTFT 0.5, 1.0, 0.125 */
    double mean = 1.625 / 3;
    cr_assert_float_eq(m.stats[PL_BENCH_METRIC_TTFT].mean_ms, 1e3 * mean, 1e-9);
    cr_assert_float_eq(m.stats[PL_BENCH_METRIC_TTFT].median_ms, 500, 1e-9);
    cr_assert_float_eq(m.stats[PL_BENCH_METRIC_TTFT].pct_ms[0], 500, 1e-9);
    cr_assert_float_eq(m.stats[PL_BENCH_METRIC_TTFT].pct_ms[1], 900, 1e-9); /* 0.5 + 0.8 * 0.5 */
    cr_assert_float_eq(m.stats[PL_BENCH_METRIC_TTFT].std_ms,
                       1e3 * sqrt(((0.5 - mean) * (0.5 - mean) + (1.0 - mean) * (1.0 - mean) +
                                   (0.125 - mean) * (0.125 - mean)) / 3), 1e-9);
    /* TPOT: (0.875 - 0.5) / 2 and (1.25 - 1.0) / 4; the one-token request has none */
    cr_assert_float_eq(m.stats[PL_BENCH_METRIC_TPOT].mean_ms, (187.5 + 62.5) / 2, 1e-9);
    /* ITL: the gaps 0.125, 0.25, 0.25 */
    cr_assert_float_eq(m.stats[PL_BENCH_METRIC_ITL].median_ms, 250, 1e-9);
    cr_assert_float_eq(m.stats[PL_BENCH_METRIC_ITL].mean_ms, 625.0 / 3, 1e-9);
    /* E2EL 0.875, 1.25, 0.125 */
    cr_assert_float_eq(m.stats[PL_BENCH_METRIC_E2EL].median_ms, 875, 1e-9);
    /* open: [0, 0.875), [0.25, 1.25), [0.875, 1.0): 2 at most, since an end at the instant of
     * a start comes first */
    cr_assert_eq(m.max_concurrent_requests, 2);
    /* chunks at 0.5 0.625 0.875 | 1.25 1.5 | 1.0: second 0 holds 3, second 1 holds 3 */
    cr_assert_float_eq(m.max_output_tokens_per_s, 3, 1e-12);
    /* goodput, TTFT <= 600 ms and TPOT <= 250 ms: r[0] (500, 187.5) and r[2] (125, 0) */
    cr_assert_eq(m.good, 2);
    cr_assert_float_eq(m.request_goodput, 1.0, 1e-12);
    for (int i = 0; i < 3; i++) {
        free(r[i].itl);
        free(r[i].chunk_tokens);
    }
}

Test(metrics, nothing_succeeded) {
    pl_bench_serve_result r[2] = {{.sent = true}, {.sent = true}};
    long long prompt_len[2] = {1, 1};
    double pct[1] = {99};
    pl_bench_serve_metrics m;
    cr_assert_eq(pl_bench_serve_metrics_compute(r, prompt_len, 2, 1.0, pct, 1, NULL, &m), 0);
    cr_assert_eq(m.completed, 0);
    cr_assert_eq(m.failed, 2);
    cr_assert_eq(m.total_input, 0);
    cr_assert_eq(m.max_concurrent_requests, 0);
    cr_assert_eq(m.stats[PL_BENCH_METRIC_TTFT].mean_ms, 0);
    cr_assert_eq(m.max_output_tokens_per_s, 0);
}

Test(metrics, peak_output_counts_the_tokens_chunks_name) {
    const double g[] = {0.1};
    pl_bench_serve_result r = req(0.0, 0.2, g, 1, 8, 3);
    r.chunk_tokens[0] = 5;
    r.chunk_tokens[1] = 3;
    long long prompt_len[1] = {3};
    double pct[1] = {99};
    pl_bench_serve_metrics m;
    cr_assert_eq(pl_bench_serve_metrics_compute(&r, prompt_len, 1, 1.0, pct, 1, NULL, &m), 0);
    cr_assert_float_eq(m.max_output_tokens_per_s, 8, 1e-12);
    cr_assert_float_eq(pl_bench_serve_tpot(&r) * 1e3, 100.0 / 7, 1e-9);
    free(r.itl);
    free(r.chunk_tokens);
}
