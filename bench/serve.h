/*
 * bench/serve.h - the parts of `pagellm bench serve`, the online benchmark client:
 *
 *   sse.c            server-sent events, parsed incrementally from whatever bytes arrive
 *   serve_chunk.c    what one streamed event of an OpenAI-compatible server says
 *   serve_client.c   libcurl's multi interface: every request on one thread, sent on a
 *                    schedule, its chunks timed as they arrive; and one blocking GET
 *   serve_schedule.c the arrival times (Poisson, or gamma for a burstiness other than 1)
 *   serve_metrics.c  the figures of vLLM's `bench serve` from the requests' records
 *   bench_serve.c    the command: flags, workload, request bodies, report
 *
 * Everything a server sends is untrusted: malformed events, oversized lines and error objects
 * fail that request with a message, never the client.
 */
#ifndef PL_BENCH_SERVE_H
#define PL_BENCH_SERVE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bench/progress.h"

/* ------------------------------------------------------------------------------------------
 * Server-sent events (sse.c)
 *
 * The text/event-stream format: lines end with "\n", "\r\n" or "\r"; "data: X" lines add X to
 * the event's data (several are joined with "\n"); a blank line ends the event; lines starting
 * with ':' are comments (keep-alive pings); other fields (event, id, retry) are ignored. An
 * event with no data line is not dispatched. At the end of the stream a last event without its
 * blank line is dispatched too (some servers omit it).
 * ---------------------------------------------------------------------------------------- */

/* Called once per event with its data (NUL-terminated, len bytes). Returns 0 to go on; any
 * other value stops the parse and is returned by pl_bench_sse_feed. */
typedef int (*pl_bench_sse_fn)(void *ctx, const char *data, size_t len);

typedef struct pl_bench_sse {
    char *buf;          /* the current line (len bytes) */
    size_t len, cap;
    char *data;         /* the event's data lines so far, each followed by '\n' */
    size_t data_len, data_cap;
    bool has_data;      /* a data line was seen in this event */
    bool after_cr;      /* the last byte was '\r': a following '\n' ends nothing */
    size_t max_event;   /* most bytes a line or an event's data may hold */
} pl_bench_sse;

#define PL_BENCH_SSE_TOO_LONG (-1) /* a line or an event exceeded max_event */
#define PL_BENCH_SSE_NOMEM (-2)

void pl_bench_sse_init(pl_bench_sse *p, size_t max_event);
/* Parses n bytes, calling fn for every event they complete. Returns 0, fn's non-zero value,
 * or PL_BENCH_SSE_TOO_LONG / PL_BENCH_SSE_NOMEM (the parser is then unusable: free it). */
int pl_bench_sse_feed(pl_bench_sse *p, const char *bytes, size_t n, pl_bench_sse_fn fn,
                      void *ctx);
/* The end of the stream: dispatches a pending event. Same returns. */
int pl_bench_sse_finish(pl_bench_sse *p, pl_bench_sse_fn fn, void *ctx);
void pl_bench_sse_free(pl_bench_sse *p);

/* ------------------------------------------------------------------------------------------
 * One streamed chunk (serve_chunk.c)
 * ---------------------------------------------------------------------------------------- */

typedef struct pl_bench_chunk {
    bool done;                /* the data was "[DONE]" */
    bool has_choice;          /* choices[0] is an object */
    const char *text;         /* completions: choices[0].text; chat: delta.content, else
                                 delta.reasoning_content; points into *root; NULL if none */
    size_t text_len;
    int n_tokens;             /* tokens the chunk names (choices[0].token_ids, or its logprobs'
                                 tokens / content entries); 0 when it names none */
    bool has_usage;           /* a usage object with completion_tokens */
    long long prompt_tokens;  /* usage.prompt_tokens; -1 when absent */
    long long completion_tokens;
    char error[512];          /* an error object's message (or the object), "" when none */
} pl_bench_chunk;

/* Reads one event's data. Returns false for data that is not a JSON object (err says why);
 * *root (NULL on failure) is what out->text points into: the caller json_decref's it. */
bool pl_bench_chunk_parse(const char *data, size_t len, bool chat, pl_bench_chunk *out,
                          json_t **root, char *err, size_t err_cap);
/* A content chunk carries output: text or tokens. A chunk with neither (a role announcement,
 * an empty final chunk with finish_reason) is not timed. */
static inline bool pl_bench_chunk_has_content(const pl_bench_chunk *c) {
    return c->has_choice && (c->text_len > 0 || c->n_tokens > 0);
}
/* An error object's message from an HTTP error body (JSON or not), at most cap bytes. */
void pl_bench_error_message(const char *body, size_t len, char *out, size_t cap);

/* ------------------------------------------------------------------------------------------
 * The client (serve_client.c)
 * ---------------------------------------------------------------------------------------- */

/* What one request did. Times are seconds from the benchmark's start. */
typedef struct pl_bench_serve_result {
    bool sent, success;
    double arrival_s;        /* when its arrival time came (the schedule) */
    double start_s;          /* when it was sent (later under --max-concurrency) */
    double ttft_s;           /* start -> first content chunk */
    double e2el_s;           /* start -> last content chunk (vLLM's latency) */
    double *itl;             /* (n_chunks - 1) gaps between content chunks, owned */
    uint32_t *chunk_tokens;  /* (n_chunks) tokens of each content chunk (1 when unnamed) */
    size_t n_chunks, cap_chunks;
    long long chunk_token_sum;
    long long prompt_tokens; /* usage.prompt_tokens; -1 when the server sent none */
    long long usage_tokens;  /* usage.completion_tokens; -1 when the server sent none */
    long long output_tokens; /* usage's, else chunk_token_sum (set when it finishes) */
    bool saw_done;           /* data: [DONE] arrived */
    long http_status;
    char *text;              /* the generated text, owned */
    size_t text_len, text_cap;
    char *error;             /* why it failed, owned; NULL on success */
} pl_bench_serve_result;

typedef struct pl_bench_serve_target {
    const char *url;       /* base URL + endpoint */
    bool chat;             /* chat completions: delta.content */
    const char *api_key;   /* "Authorization: Bearer KEY"; NULL none */
    int max_concurrency;   /* at most this many in flight; 0 no limit */
} pl_bench_serve_target;

/* Sends request i (body bodies[i], asking for max_tokens[i]) at arrivals[i] seconds after the
 * start (or when a slot frees under max_concurrency), all on this thread, and fills out[i]
 * (zeroed here). bar (may be NULL): counts output tokens against a total the caller set to
 * the sum of max_tokens; unused budget is given back as requests end. *duration_s: start ->
 * last request finished. Returns an exit status: 1 when libcurl itself fails (a failed
 * request is recorded in its result, not an error here). */
int pl_bench_serve_run(const pl_bench_serve_target *t, char *const *bodies,
                       const int *max_tokens, const double *arrivals, size_t n,
                       pl_progress *bar, pl_bench_serve_result *out, double *duration_s);
void pl_bench_serve_results_free(pl_bench_serve_result *r, size_t n);

/* GET url (with the API key when set); *body (caller frees) holds the response, *status its
 * HTTP status. Returns false with err set when no response came (connection refused, ...). */
bool pl_bench_http_get(const char *url, const char *api_key, char **body, long *status,
                       char *err, size_t err_cap);
/* The same with a POST of json_body (NULL: a GET). */
bool pl_bench_http_post(const char *url, const char *api_key, const char *json_body,
                        char **body, long *status, char *err, size_t err_cap);

/* ------------------------------------------------------------------------------------------
 * Arrivals (serve_schedule.c)
 * ---------------------------------------------------------------------------------------- */

/* n arrival times (seconds from the start, non-decreasing) at `rate` requests/s: gaps drawn
 * from a gamma distribution of shape `burstiness` and mean 1/rate (burstiness 1: exponential,
 * a Poisson process; 0 < b < 1 burstier, b > 1 more even), then scaled, as vLLM does, so that
 * the last arrival is at exactly n / rate. rate infinite (or <= 0): every arrival at 0. */
void pl_bench_arrivals(size_t n, double rate, double burstiness, uint64_t seed, double *out);

/* ------------------------------------------------------------------------------------------
 * Metrics (serve_metrics.c)
 * ---------------------------------------------------------------------------------------- */

enum { PL_BENCH_METRIC_TTFT, PL_BENCH_METRIC_TPOT, PL_BENCH_METRIC_ITL, PL_BENCH_METRIC_E2EL,
       PL_BENCH_N_METRICS };

#define PL_BENCH_MAX_PERCENTILES 16

typedef struct pl_bench_serve_stats {
    double mean_ms, median_ms, std_ms;
    double pct_ms[PL_BENCH_MAX_PERCENTILES]; /* at the percentiles asked for */
} pl_bench_serve_stats;

/* The service level objectives of --goodput, in ms; negative when not set. */
typedef struct pl_bench_goodput {
    double slo_ms[PL_BENCH_N_METRICS]; /* ttft, tpot, e2el (itl is not a request's figure) */
    bool set;
} pl_bench_goodput;

typedef struct pl_bench_serve_metrics {
    size_t completed, failed;
    double duration_s;
    long long total_input, total_output;
    double request_throughput, request_goodput, output_throughput, total_token_throughput;
    double max_output_tokens_per_s; /* the busiest whole second of output */
    size_t max_concurrent_requests; /* most requests open at one instant */
    size_t good;                    /* requests within every goodput objective */
    pl_bench_serve_stats stats[PL_BENCH_N_METRICS];
    const double *percentiles;      /* (n_percentiles <= PL_BENCH_MAX_PERCENTILES) as asked,
                                       not owned */
    size_t n_percentiles;
} pl_bench_serve_metrics;

extern const char *const pl_bench_metric_names[PL_BENCH_N_METRICS]; /* "ttft", ... */

/* Computes the figures of vLLM's calculate_metrics. prompt_len[i]: the workload's count for
 * request i, used when the server reported none. Returns an exit status (1: out of memory). */
int pl_bench_serve_metrics_compute(const pl_bench_serve_result *r, const long long *prompt_len,
                                   size_t n, double duration_s, const double *percentiles,
                                   size_t n_percentiles, const pl_bench_goodput *goodput,
                                   pl_bench_serve_metrics *out);
/* A request's TPOT (s): (e2el - ttft) / (output_tokens - 1); 0 for one token or none. */
double pl_bench_serve_tpot(const pl_bench_serve_result *r);

#endif
