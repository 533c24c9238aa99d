/*
 * bench/bench_serve.c - `pagellm bench serve`: the online benchmark of an OpenAI-compatible
 * server (pagellm serve, vLLM, llama.cpp's llama-server, ...).
 *
 * Modelled on `vllm bench serve`, with its flag names and its result block, so that runs
 * against either client read the same. The prompts are bench throughput's (random ids or a
 * dataset, built by workload.c), so one workload can be run offline and online:
 *   - with --tokenizer PATH (a tokenizer loaded here), prompts are text of the asked token
 *     length and input tokens are counted here; without one, random prompts are token-id
 *     arrays, which the completions endpoint takes as "prompt" (the chat endpoint needs text);
 *   - every request streams (stream_options.include_usage, so the server's usage gives the
 *     token counts) and, by default, sets ignore_eos so each one runs to its max_tokens.
 * The model name comes from --model or the server's GET /v1/models, which also gives the
 * vocabulary size random ids need when no tokenizer is at hand (llama-server's meta.n_vocab,
 * a "vocab_size" member as pagellm serve gives; else one past the largest id the server's
 * /tokenize gives for a sample text, as vLLM has one; else --vocab-size) and vLLM's
 * max_model_len.
 *
 * Exit status: 0 when the run completed with at least one successful request (failures are
 * counted in the result, the first one's reason printed), 1 when none succeeded or the server
 * cannot be asked for its model, 2 for a usage error.
 */
#include <curl/curl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include "bench/bench_internal.h"
#include "bench/serve.h"
#include "cli/cli.h"

#define CMD "bench serve"

/* Sampling fields sent only when given (the server's defaults otherwise, as vLLM does). */
static const struct {
    const char *flag, *key;
    bool integer;
    double lo, hi;
} SAMPLING[] = {
    {"--temperature", "temperature", false, 0, 100},
    {"--top-p", "top_p", false, 0, 1},
    {"--top-k", "top_k", true, -1, 1 << 30},
    {"--min-p", "min_p", false, 0, 1},
    {"--frequency-penalty", "frequency_penalty", false, -2, 2},
    {"--presence-penalty", "presence_penalty", false, -2, 2},
    {"--repetition-penalty", "repetition_penalty", false, 0, 100},
};
#define N_SAMPLING (sizeof SAMPLING / sizeof *SAMPLING)

typedef struct opts {
    const char *base_url, *host, *endpoint, *model, *tokenizer, *api_key, *json_path;
    const char *result_dir, *result_filename; /* --save-result's place (vLLM's flags) */
    bool save_result;
    long long port, vocab_size, max_concurrency;
    double request_rate, burstiness;
    pl_bench_workload_opts wo;
    pl_bench_goodput goodput;
    bool metric_on[PL_BENCH_N_METRICS];
    double percentiles[PL_BENCH_MAX_PERCENTILES];
    size_t n_percentiles;
    double sampling[N_SAMPLING];
    bool sampling_set[N_SAMPLING];
    bool progress;
} opts;

static void usage(const pl_bench_workload_opts *d) {
    printf("usage: pagellm bench serve [--base-url URL] [--endpoint PATH] [--model NAME]\n"
           "                           [traffic flags] [workload flags] [--output-json FILE]\n\n"
           "Online benchmark of an OpenAI-compatible server (pagellm serve, vLLM, llama-server):\n"
           "streams every request over HTTP (libcurl, one thread) at the given arrival rate and\n"
           "reports vLLM's `bench serve` figures: throughput, TTFT, TPOT, ITL and E2EL.\n\n");
    printf("server flags:\n"
           "  --base-url URL             server (default http://127.0.0.1:8000; or --host H\n"
           "                             --port P)\n"
           "  --endpoint PATH            /v1/completions (default) or /v1/chat/completions\n"
           "  --model NAME               model name sent in requests (default: the first of\n"
           "                             GET /v1/models); --served-model-name\n"
           "  --api-key KEY              sent as Authorization: Bearer KEY (default:\n"
           "                             $OPENAI_API_KEY)\n"
           "  --tokenizer PATH           a tokenizer here (.model, tokenizer.json, directory,\n"
           "                             .gguf): prompts become text of the asked token length\n"
           "                             and are counted; needed by the chat endpoint and\n"
           "                             ShareGPT. Without it prompts are token-id arrays\n"
           "  --vocab-size N             random ids in [3, N) when neither a tokenizer nor the\n"
           "                             server (its model list's vocab_size, its /tokenize)\n"
           "                             gives the vocabulary size\n"
           "traffic flags:\n"
           "  --request-rate R           requests/s, or inf: all at once (default inf)\n"
           "  --burstiness B             gamma-distributed gaps of shape B: 1 Poisson (default),\n"
           "                             < 1 burstier, > 1 more even, inf evenly spaced\n"
           "  --max-concurrency N        at most N requests open at once (default: no limit)\n"
           "sampling flags (sent only when given; EOS is ignored unless --no-ignore-eos):\n"
           "  --temperature T  --top-p P  --top-k K  --min-p P  --frequency-penalty F\n"
           "  --presence-penalty P  --repetition-penalty R\n");
    pl_bench_print_workload_flags(d);
    printf("output flags:\n"
           "  --goodput KEY:MS ...       objectives for goodput: ttft, tpot, e2el in ms\n"
           "  --percentile-metrics LIST  sections to print: ttft,tpot,itl,e2el (default all)\n"
           "  --metric-percentiles LIST  percentiles of each, e.g. 50,90,99 (default 99)\n"
           "  --output-json FILE         the figures and per-request arrays as JSON\n"
           "  --save-result              the same JSON into --result-dir DIR (default .) as\n"
           "                             --result-filename NAME (default vLLM's:\n"
           "                             BACKEND-RATEqps[-concurrencyN]-MODEL-DATE-TIME.json)\n"
           "  --no-progress              no progress bar (drawn only on a terminal anyway);\n"
           "                             --disable-tqdm\n");
}

static void help(void) {
    pl_bench_workload_opts d;
    pl_bench_workload_opts_default(&d);
    usage(&d);
}

/* ------------------------------------------------------------------------------------------
 * Flags
 * ---------------------------------------------------------------------------------------- */

/* A positive number or "inf". */
static bool rate_value(const char *flag, const char *v, double *out) {
    if (v && (!strcmp(v, "inf") || !strcmp(v, "infinity") || !strcmp(v, "Infinity"))) {
        *out = INFINITY;
        return true;
    }
    if (!cli_float(flag, v, 0, 1e12, out)) return false;
    if (*out > 0) return true;
    fprintf(stderr, "pagellm: %s: must be positive (or inf)\n", flag);
    return false;
}

/* The metric named by s[0..len) ("ttft", ...), or -1. */
static int metric_named(const char *s, size_t len) {
    for (int m = 0; m < PL_BENCH_N_METRICS; m++)
        if (len == strlen(pl_bench_metric_names[m]) && !strncmp(s, pl_bench_metric_names[m], len))
            return m;
    return -1;
}

/* "ttft:500" pairs after --goodput, up to the next flag. */
static int goodput_flag(opts *o, int argc, char **argv, int *i) {
    int n = 0;
    while (*i + 1 < argc && argv[*i + 1][0] != '-') {
        const char *pair = argv[++*i];
        const char *colon = strchr(pair, ':');
        int k = colon ? metric_named(pair, (size_t)(colon - pair)) : -1;
        double ms;
        if (k < 0 || k == PL_BENCH_METRIC_ITL) { /* ITL is not a request's figure */
            fprintf(stderr, "pagellm: --goodput: '%s' is not KEY:MS with KEY ttft, tpot or e2el\n",
                    pair);
            return -1;
        }
        if (!cli_float("--goodput", colon + 1, 0, 1e12, &ms)) return -1;
        o->goodput.slo_ms[k] = ms;
        o->goodput.set = true;
        n++;
    }
    if (n == 0) {
        fprintf(stderr, "pagellm: --goodput: expected KEY:MS pairs (e.g. ttft:500 tpot:50)\n");
        return -1;
    }
    return 1;
}

static int percentile_metrics_flag(opts *o, const char *v) {
    if (!v || !v[0]) {
        fprintf(stderr, "pagellm: --percentile-metrics: missing value\n");
        return -1;
    }
    bool on[PL_BENCH_N_METRICS] = {false};
    for (const char *p = v; *p;) {
        size_t len = strcspn(p, ",");
        int k = metric_named(p, len);
        if (k < 0) {
            fprintf(stderr, "pagellm: --percentile-metrics: '%.*s' is not one of ttft, tpot, "
                            "itl, e2el\n", (int)len, p);
            return -1;
        }
        on[k] = true;
        p += len;
        if (*p == ',') p++;
    }
    memcpy(o->metric_on, on, sizeof on);
    return 1;
}

static int metric_percentiles_flag(opts *o, const char *v) {
    if (!v || !v[0]) {
        fprintf(stderr, "pagellm: --metric-percentiles: missing value\n");
        return -1;
    }
    size_t n = 0;
    for (const char *p = v; *p;) {
        size_t len = strcspn(p, ",");
        char num[64];
        if (n == PL_BENCH_MAX_PERCENTILES || len == 0 || len >= sizeof num) {
            fprintf(stderr, "pagellm: --metric-percentiles: expected up to %d comma-separated "
                            "numbers in (0, 100], got '%s'\n", PL_BENCH_MAX_PERCENTILES, v);
            return -1;
        }
        memcpy(num, p, len);
        num[len] = '\0';
        if (!cli_float("--metric-percentiles", num, 0, 100, &o->percentiles[n])) return -1;
        if (o->percentiles[n] <= 0) {
            fprintf(stderr, "pagellm: --metric-percentiles: %s is not in (0, 100]\n", num);
            return -1;
        }
        n++;
        p += len;
        if (*p == ',') p++;
    }
    o->n_percentiles = n;
    return 1;
}

/* Returns 1 (a flag of this command, parsed), 0 (not one), -1 (bad value). */
static int serve_flag(opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    const char **str = NULL;
    long long n;
    if (cli_is(a, "--base-url")) str = &o->base_url;
    else if (cli_is(a, "--host")) str = &o->host;
    else if (cli_is(a, "--endpoint")) str = &o->endpoint;
    else if (cli_is(a, "--model") || cli_is(a, "--served-model-name")) str = &o->model;
    else if (cli_is(a, "--tokenizer")) str = &o->tokenizer;
    else if (cli_is(a, "--api-key")) str = &o->api_key;
    else if (cli_is(a, "--output-json")) str = &o->json_path;
    else if (cli_is(a, "--result-dir")) str = &o->result_dir;
    else if (cli_is(a, "--result-filename")) str = &o->result_filename;
    if (str) {
        if (!v || !v[0]) {
            fprintf(stderr, "pagellm: %s: missing value\n", a);
            return -1;
        }
        *str = v;
    } else if (cli_is(a, "--port")) {
        if (!cli_int(a, v, 1, 65535, &n)) return -1;
        o->port = n;
    } else if (cli_is(a, "--vocab-size")) {
        if (!cli_int(a, v, 4, 1 << 30, &n)) return -1;
        o->vocab_size = n;
    } else if (cli_is(a, "--max-concurrency")) {
        if (!cli_int(a, v, 1, 1 << 20, &n)) return -1;
        o->max_concurrency = n;
    } else if (cli_is(a, "--request-rate")) {
        if (!rate_value(a, v, &o->request_rate)) return -1;
    } else if (cli_is(a, "--burstiness")) {
        if (!rate_value(a, v, &o->burstiness)) return -1;
    } else if (cli_is(a, "--goodput")) {
        return goodput_flag(o, argc, argv, i);
    } else if (cli_is(a, "--percentile-metrics")) {
        if (percentile_metrics_flag(o, v) < 0) return -1;
    } else if (cli_is(a, "--metric-percentiles")) {
        if (metric_percentiles_flag(o, v) < 0) return -1;
    } else if (cli_is(a, "--no-progress") || cli_is(a, "--disable-tqdm")) {
        o->progress = false;
        return 1;
    } else if (cli_is(a, "--save-result")) {
        o->save_result = true;
        return 1;
    } else {
        for (size_t k = 0; k < N_SAMPLING; k++) {
            if (!cli_is(a, SAMPLING[k].flag)) continue;
            double x;
            if (SAMPLING[k].integer) {
                if (!cli_int(a, v, (long long)SAMPLING[k].lo, (long long)SAMPLING[k].hi, &n))
                    return -1;
                x = (double)n;
            } else if (!cli_float(a, v, SAMPLING[k].lo, SAMPLING[k].hi, &x)) {
                return -1;
            }
            o->sampling[k] = x;
            o->sampling_set[k] = true;
            ++*i;
            return 1;
        }
        return 0;
    }
    ++*i;
    return 1;
}

static void opts_default(opts *o) {
    memset(o, 0, sizeof *o);
    o->endpoint = "/v1/completions";
    o->request_rate = INFINITY;
    o->burstiness = 1.0;
    pl_bench_workload_opts_default(&o->wo);
    for (int k = 0; k < PL_BENCH_N_METRICS; k++) {
        o->goodput.slo_ms[k] = -1;
        o->metric_on[k] = true;
    }
    o->percentiles[0] = 99;
    o->n_percentiles = 1;
    o->progress = true;
}

/* ------------------------------------------------------------------------------------------
 * The server's model
 * ---------------------------------------------------------------------------------------- */

typedef struct server_model {
    char name[512];
    int vocab_size;     /* 0 when the list does not say */
    int max_model_len;  /* 0 when the list does not say */
} server_model;

static int int_member(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) && json_integer_value(v) > 0 && json_integer_value(v) < (1 << 30)
               ? (int)json_integer_value(v) : 0;
}

/* GET /v1/models: the entry named `want` (NULL: the first). Returns an exit status. */
static int ask_models(const char *base, const char *api_key, const char *want,
                      server_model *out) {
    char url[2048], err[512];
    snprintf(url, sizeof url, "%s/v1/models", base);
    char *body = NULL;
    long status = 0;
    if (!pl_bench_http_get(url, api_key, &body, &status, err, sizeof err)) {
        fprintf(stderr, "pagellm " CMD ": cannot reach the server: GET %s: %s\n", url, err);
        return 1;
    }
    int rc = 1;
    json_error_t jerr;
    json_t *root = NULL;
    if (status != 200) {
        char msg[512];
        pl_bench_error_message(body, strlen(body), msg, sizeof msg);
        fprintf(stderr, "pagellm " CMD ": GET %s: HTTP %ld%s%s\n", url, status,
                msg[0] ? ": " : "", msg);
        goto done;
    }
    root = json_loads(body, 0, &jerr);
    json_t *data = json_object_get(root, "data");
    json_t *pick = NULL;
    for (size_t i = 0; i < json_array_size(data) && !pick; i++) {
        json_t *m = json_array_get(data, i);
        const char *id = json_string_value(json_object_get(m, "id"));
        if (id && (!want || !strcmp(id, want))) pick = m;
    }
    if (!pick) {
        fprintf(stderr, "pagellm " CMD ": GET %s: %s%s%s\n", url,
                !root ? "the answer is not JSON" : want ? "no model named " : "no model listed",
                want && root ? want : "", want && root ? " (give --model NAME)" : "");
        goto done;
    }
    snprintf(out->name, sizeof out->name, "%s", json_string_value(json_object_get(pick, "id")));
    out->max_model_len = int_member(pick, "max_model_len");
    out->vocab_size = int_member(pick, "vocab_size");
    if (!out->vocab_size) out->vocab_size = int_member(json_object_get(pick, "meta"), "n_vocab");
    rc = 0;
done:
    json_decref(root);
    free(body);
    return rc;
}

/* ------------------------------------------------------------------------------------------
 * Requests
 * ---------------------------------------------------------------------------------------- */

/* The JSON body of prompt p; *out (caller frees) is NULL when memory runs out. Returns an exit
 * status (2: a token-id prompt for the chat endpoint without a tokenizer to decode it). */
static int request_body(const opts *o, bool chat, const char *model, const pl_tokenizer *tok,
                        const pl_bench_prompt *p, size_t index, char **out) {
    *out = NULL;
    json_t *b = json_object();
    json_object_set_new(b, "model", json_string(model));
    char *decoded = NULL;
    const char *text = p->text;
    if (chat && !text) {
        if (!tok) {
            fprintf(stderr, "pagellm " CMD ": prompt %zu is token ids: the chat endpoint takes "
                            "text (give --tokenizer PATH to decode it)\n", index + 1);
            json_decref(b);
            return 2;
        }
        if (pl_tokenizer_decode(tok, p->ids, p->n_ids, PL_DECODE_SKIP_SPECIAL, &decoded,
                                NULL) != PL_OK) {
            fprintf(stderr, "pagellm " CMD ": prompt %zu: %s\n", index + 1, pl_last_error_as(PL_NAMING_FLAG));
            json_decref(b);
            return 2;
        }
        text = decoded;
    }
    if (chat) {
        json_t *msg = json_object();
        json_object_set_new(msg, "role", json_string("user"));
        json_object_set_new(msg, "content", json_string(text));
        json_object_set_new(b, "messages", json_pack("[o]", msg));
        json_object_set_new(b, "max_completion_tokens", json_integer(p->output_len));
    } else if (text) {
        json_object_set_new(b, "prompt", json_string(text));
        json_object_set_new(b, "max_tokens", json_integer(p->output_len));
    } else {
        json_t *ids = json_array();
        for (size_t k = 0; k < p->n_ids; k++) json_array_append_new(ids, json_integer(p->ids[k]));
        json_object_set_new(b, "prompt", ids);
        json_object_set_new(b, "max_tokens", json_integer(p->output_len));
    }
    json_object_set_new(b, "stream", json_true());
    json_object_set_new(b, "stream_options", json_pack("{s:b}", "include_usage", 1));
    if (o->wo.ignore_eos) json_object_set_new(b, "ignore_eos", json_true());
    for (size_t k = 0; k < N_SAMPLING; k++) {
        if (!o->sampling_set[k]) continue;
        json_object_set_new(b, SAMPLING[k].key, SAMPLING[k].integer
                                                    ? json_integer((json_int_t)o->sampling[k])
                                                    : json_real(o->sampling[k]));
    }
    *out = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    pl_free_text(decoded);
    if (*out) return 0;
    fprintf(stderr, "pagellm " CMD ": out of memory building request %zu\n", index + 1);
    return 1;
}

/* ------------------------------------------------------------------------------------------
 * Report
 * ---------------------------------------------------------------------------------------- */

/* Python's "{s:{c}^{n}}": s centred in n columns of c, the odd column on the right. */
static void centred(const char *s, char c, int n) {
    int len = (int)strlen(s), pad = n > len ? n - len : 0;
    for (int i = 0; i < pad / 2; i++) putchar(c);
    fputs(s, stdout);
    for (int i = 0; i < pad - pad / 2; i++) putchar(c);
    putchar('\n');
}

/* vLLM's "{:<40} {:<10}" rows (the value left-aligned in 10 columns). */
static void row_int(const char *label, long long v) {
    char num[32];
    snprintf(num, sizeof num, "%lld", v);
    printf("%-40s %-10s\n", label, num);
}

static void row_float(const char *label, double v) {
    char num[64];
    snprintf(num, sizeof num, "%.2f", v);
    printf("%-40s %-10s\n", label, num);
}

/* "99", "99.9": how vLLM names a percentile. */
static void percentile_word(double p, char *buf, size_t cap) {
    if (p == floor(p))
        snprintf(buf, cap, "%d", (int)p);
    else
        snprintf(buf, cap, "%.15g", p);
}

static const char *const METRIC_LABEL[PL_BENCH_N_METRICS] = {"TTFT", "TPOT", "ITL", "E2EL"};
static const char *const METRIC_TITLE[PL_BENCH_N_METRICS] = {
    "Time to First Token", "Time per Output Token (excl. 1st token)", "Inter-token Latency",
    "End-to-end Latency"};

static void print_result(const opts *o, const pl_bench_serve_metrics *m) {
    centred(" Serving Benchmark Result ", '=', 50);
    row_int("Successful requests:", (long long)m->completed);
    row_int("Failed requests:", (long long)m->failed);
    if (o->max_concurrency) row_int("Maximum request concurrency:", o->max_concurrency);
    if (!isinf(o->request_rate)) row_float("Request rate configured (RPS):", o->request_rate);
    row_float("Benchmark duration (s):", m->duration_s);
    row_int("Total input tokens:", m->total_input);
    row_int("Total generated tokens:", m->total_output);
    row_float("Request throughput (req/s):", m->request_throughput);
    if (o->goodput.set) row_float("Request goodput (req/s):", m->request_goodput);
    row_float("Output token throughput (tok/s):", m->output_throughput);
    row_float("Peak output token throughput (tok/s):", m->max_output_tokens_per_s);
    row_float("Peak concurrent requests:", (double)m->max_concurrent_requests);
    row_float("Total token throughput (tok/s):", m->total_token_throughput);
    for (int k = 0; k < PL_BENCH_N_METRICS; k++) {
        if (!o->metric_on[k]) continue;
        const pl_bench_serve_stats *s = &m->stats[k];
        char label[96], word[32];
        centred(METRIC_TITLE[k], '-', 50);
        snprintf(label, sizeof label, "Mean %s (ms):", METRIC_LABEL[k]);
        row_float(label, s->mean_ms);
        snprintf(label, sizeof label, "Median %s (ms):", METRIC_LABEL[k]);
        row_float(label, s->median_ms);
        for (size_t p = 0; p < m->n_percentiles; p++) {
            percentile_word(m->percentiles[p], word, sizeof word);
            snprintf(label, sizeof label, "P%s %s (ms):", word, METRIC_LABEL[k]);
            row_float(label, s->pct_ms[p]);
        }
    }
    centred("", '=', 50);
}

/* One figure of a request, in seconds, for the per-request arrays. */
typedef double (*figure_fn)(const pl_bench_serve_result *r);
static double ttft_of(const pl_bench_serve_result *r) { return r->ttft_s; }
static double e2el_of(const pl_bench_serve_result *r) { return r->e2el_s; }
static double start_of(const pl_bench_serve_result *r) { return r->start_s; }
static double arrival_of(const pl_bench_serve_result *r) { return r->arrival_s; }
static double queue_of(const pl_bench_serve_result *r) { /* waited for a free slot */
    return r->start_s > r->arrival_s ? r->start_s - r->arrival_s : 0;
}
static double tpot_of(const pl_bench_serve_result *r) {
    return r->success ? pl_bench_serve_tpot(r) : 0;
}

static json_t *figure_array(const pl_bench_serve_result *r, size_t n, figure_fn f) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_real(f(&r[i])));
    return a;
}

/* vLLM's result keys (per-request arrays in workload order), then pagellm's. */
static json_t *result_json(const opts *o, bool chat, const char *base, const char *model,
                           const pl_bench_workload *w, const long long *prompt_len,
                           const pl_bench_serve_result *r, const pl_bench_serve_metrics *m,
                           const char *desc) {
    json_t *j = json_object();
    char date[32];
    time_t now = time(NULL);
    struct tm tm;
    strftime(date, sizeof date, "%Y%m%d-%H%M%S", localtime_r(&now, &tm));
    json_object_set_new(j, "date", json_string(date));
    json_object_set_new(j, "backend", json_string(chat ? "openai-chat" : "openai"));
    json_object_set_new(j, "model_id", json_string(model));
    json_object_set_new(j, "tokenizer_id", o->tokenizer ? json_string(o->tokenizer) : json_null());
    json_object_set_new(j, "num_prompts", json_integer((json_int_t)w->n));
    json_object_set_new(j, "request_rate", isinf(o->request_rate) ? json_string("inf")
                                                                   : json_real(o->request_rate));
    json_object_set_new(j, "burstiness", isinf(o->burstiness) ? json_string("inf")
                                                               : json_real(o->burstiness));
    json_object_set_new(j, "max_concurrency", o->max_concurrency
                                                  ? json_integer(o->max_concurrency)
                                                  : json_null());
    json_object_set_new(j, "duration", json_real(m->duration_s));
    json_object_set_new(j, "completed", json_integer((json_int_t)m->completed));
    json_object_set_new(j, "failed", json_integer((json_int_t)m->failed));
    json_object_set_new(j, "total_input_tokens", json_integer(m->total_input));
    json_object_set_new(j, "total_output_tokens", json_integer(m->total_output));
    json_object_set_new(j, "request_throughput", json_real(m->request_throughput));
    json_object_set_new(j, "request_goodput", o->goodput.set ? json_real(m->request_goodput)
                                                             : json_null());
    json_object_set_new(j, "output_throughput", json_real(m->output_throughput));
    json_object_set_new(j, "total_token_throughput", json_real(m->total_token_throughput));
    json_object_set_new(j, "max_output_tokens_per_s", json_real(m->max_output_tokens_per_s));
    json_object_set_new(j, "max_concurrent_requests",
                        json_integer((json_int_t)m->max_concurrent_requests));
    json_t *in = json_array(), *outl = json_array(), *itls = json_array(), *texts = json_array(),
           *errs = json_array();
    for (size_t i = 0; i < w->n; i++) {
        json_array_append_new(in, json_integer(r[i].prompt_tokens >= 0 ? r[i].prompt_tokens
                                                                        : prompt_len[i]));
        json_array_append_new(outl, json_integer(r[i].success ? r[i].output_tokens : 0));
        json_t *g = json_array();
        for (size_t k = 0; k + 1 < r[i].n_chunks; k++)
            json_array_append_new(g, json_real(r[i].itl[k]));
        json_array_append_new(itls, g);
        json_array_append_new(texts, json_stringn(r[i].text ? r[i].text : "", r[i].text_len));
        json_array_append_new(errs, json_string(r[i].success ? "" : r[i].error ? r[i].error
                                                                                : "out of memory"));
    }
    json_object_set_new(j, "input_lens", in);
    json_object_set_new(j, "output_lens", outl);
    json_object_set_new(j, "ttfts", figure_array(r, w->n, ttft_of));
    json_object_set_new(j, "itls", itls);
    json_object_set_new(j, "latencies", figure_array(r, w->n, e2el_of));
    json_object_set_new(j, "start_times", figure_array(r, w->n, start_of));
    json_object_set_new(j, "queue_times", figure_array(r, w->n, queue_of));
    json_object_set_new(j, "generated_texts", texts);
    json_object_set_new(j, "errors", errs);
    for (int k = 0; k < PL_BENCH_N_METRICS; k++) {
        if (!o->metric_on[k]) continue;
        const char *name = pl_bench_metric_names[k];
        char key[64], word[32];
        snprintf(key, sizeof key, "mean_%s_ms", name);
        json_object_set_new(j, key, json_real(m->stats[k].mean_ms));
        snprintf(key, sizeof key, "median_%s_ms", name);
        json_object_set_new(j, key, json_real(m->stats[k].median_ms));
        snprintf(key, sizeof key, "std_%s_ms", name);
        json_object_set_new(j, key, json_real(m->stats[k].std_ms));
        for (size_t p = 0; p < m->n_percentiles; p++) {
            percentile_word(m->percentiles[p], word, sizeof word);
            snprintf(key, sizeof key, "p%s_%s_ms", word, name);
            json_object_set_new(j, key, json_real(m->stats[k].pct_ms[p]));
        }
    }
    /* pagellm's: where it ran, the schedule, TPOT per request, the objectives, the build */
    json_object_set_new(j, "base_url", json_string(base));
    json_object_set_new(j, "endpoint", json_string(o->endpoint));
    json_object_set_new(j, "arrival_times", figure_array(r, w->n, arrival_of));
    json_object_set_new(j, "tpots", figure_array(r, w->n, tpot_of));
    json_object_set_new(j, "good_requests", o->goodput.set ? json_integer((json_int_t)m->good)
                                                           : json_null());
    json_t *slo = json_object();
    for (int k = 0; k < PL_BENCH_N_METRICS; k++)
        if (o->goodput.slo_ms[k] >= 0)
            json_object_set_new(slo, pl_bench_metric_names[k], json_real(o->goodput.slo_ms[k]));
    json_object_set_new(j, "goodput_slo_ms", slo);
    json_t *wj = json_object();
    json_object_set_new(wj, "description", json_string(desc));
    json_object_set_new(wj, "input_len", json_integer(o->wo.input_len));
    json_object_set_new(wj, "output_len", json_integer(o->wo.output_len));
    json_object_set_new(wj, "prefix_len", json_integer(o->wo.prefix_len));
    json_object_set_new(wj, "random_range_ratio", json_real(o->wo.range_ratio));
    json_object_set_new(wj, "dataset", o->wo.dataset ? json_string(o->wo.dataset) : json_null());
    json_object_set_new(wj, "seed", json_integer((json_int_t)o->wo.seed));
    json_object_set_new(wj, "ignore_eos", json_boolean(o->wo.ignore_eos));
    json_object_set_new(j, "workload", wj);
    json_object_set_new(j, "build", pl_bench_build_json());
    return j;
}

/* ------------------------------------------------------------------------------------------
 * The command
 * ---------------------------------------------------------------------------------------- */

/* The server's base URL without a trailing '/', in buf. */
static int base_url(const opts *o, char *buf, size_t cap) {
    if (o->base_url && (o->host || o->port)) {
        fprintf(stderr, "pagellm " CMD ": --base-url and --host/--port: give one or the other\n");
        return 2;
    }
    if (o->base_url)
        snprintf(buf, cap, "%s", o->base_url);
    else
        snprintf(buf, cap, "http://%s:%lld", o->host ? o->host : "127.0.0.1",
                 o->port ? o->port : 8000);
    size_t len = strlen(buf);
    while (len > 0 && buf[len - 1] == '/') buf[--len] = '\0';
    if (strncmp(buf, "http://", 7) && strncmp(buf, "https://", 8)) {
        fprintf(stderr, "pagellm " CMD ": --base-url: '%s' is not an http:// or https:// URL\n",
                buf);
        return 2;
    }
    return 0;
}

/* Every open request holds a socket: allow the process as many descriptors as it may have. */
static void raise_fd_limit(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

static bool ends_with(const char *s, const char *tail) {
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && !strcmp(s + a - b, tail);
}

typedef struct run_state {
    pl_tokenizer *tok;
    pl_bench_workload w;
    char **bodies;
    int *max_tokens;
    long long *prompt_len;
    double *arrivals;
    pl_bench_serve_result *results;
} run_state;

static void run_state_free(run_state *s) {
    pl_bench_serve_results_free(s->results, s->w.n);
    free(s->results);
    for (size_t i = 0; s->bodies && i < s->w.n; i++) free(s->bodies[i]);
    free(s->bodies);
    free(s->max_tokens);
    free(s->prompt_len);
    free(s->arrivals);
    pl_bench_workload_free(&s->w);
    pl_tokenizer_free(s->tok);
}

/* A vocabulary size when the model list gives none: one past the largest id the server's
 * /tokenize (vLLM's and pagellm's) gives for a sample of varied text, so random ids are ids
 * the model has. 0 when the server has no such route or no tokenizer. */
static int ask_tokenize(const char *base, const char *api_key, const char *model) {
    static const char sample[] =
        "The quick brown fox jumps over the lazy dog while zebras, yaks and quokkas watch. "
        "Quantum physicists synthesize extraordinary hypotheses; archaeologists excavate "
        "Byzantine amphitheaters near Thessaloniki in 1987 and 2024. Mississippi, Kilimanjaro, "
        "Reykjavik, Saskatchewan, Ouagadougou: uncharacteristically idiosyncratic "
        "onomatopoeia, pneumonoultramicroscopic silicovolcanoconiosis, zygomorphic xylophones.";
    json_t *req = json_pack("{s:s, s:s, s:b}", "model", model, "prompt", sample,
                            "add_special_tokens", 0);
    char *text = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    char url[2048], err[512], *body = NULL;
    long status = 0;
    snprintf(url, sizeof url, "%s/tokenize", base);
    int vocab = 0;
    if (text && pl_bench_http_post(url, api_key, text, &body, &status, err, sizeof err) &&
        status == 200) {
        json_t *root = json_loads(body, 0, NULL);
        json_t *ids = json_object_get(root, "tokens");
        for (size_t i = 0; i < json_array_size(ids); i++) {
            json_t *x = json_array_get(ids, i);
            if (json_is_integer(x) && json_integer_value(x) >= vocab &&
                json_integer_value(x) < (1 << 30))
                vocab = (int)json_integer_value(x) + 1;
        }
        json_decref(root);
    }
    free(body);
    free(text);
    return vocab;
}

/* Facts for the workload: the vocabulary and length limit from the tokenizer, the flags and
 * the server's model list (or its /tokenize); the model name sent. Returns an exit status. */
static int resolve_model(const opts *o, const char *base, bool chat, const pl_tokenizer *tok,
                         server_model *sm, pl_bench_model_facts *f) {
    bool random = !o->wo.dataset;
    bool need_vocab = random && !tok && !o->vocab_size;
    memset(sm, 0, sizeof *sm);
    if (o->model) snprintf(sm->name, sizeof sm->name, "%s", o->model);
    if (chat && random && !tok) {
        fprintf(stderr, "pagellm " CMD ": the chat endpoint takes text: random prompts need "
                        "--tokenizer PATH to become text\n");
        return 2;
    }
    if (!o->model || need_vocab) {
        int rc = ask_models(base, o->api_key, o->model, sm);
        if (rc && !o->model) {
            fprintf(stderr, "pagellm " CMD ": (give --model NAME when the server does not list "
                            "its models)\n");
            return rc;
        }
    }
    *f = (pl_bench_model_facts){.vocab_size = (int)o->vocab_size,
                                .max_model_len = sm->max_model_len, .tok = tok,
                                .text_prompts = true};
    if (!f->vocab_size) f->vocab_size = tok ? pl_tokenizer_vocab_size(tok) : sm->vocab_size;
    if (need_vocab && !f->vocab_size && sm->name[0] &&
        (f->vocab_size = ask_tokenize(base, o->api_key, sm->name)) > 3)
        fprintf(stderr, "pagellm " CMD ": the server's model list gives no vocabulary size: "
                        "random ids below %d, one past the largest its /tokenize gives for a "
                        "sample text (--vocab-size or --tokenizer sets it)\n", f->vocab_size);
    if (need_vocab && f->vocab_size <= 3) {
        fprintf(stderr, "pagellm " CMD ": random prompts are token ids of the model's vocabulary, "
                        "whose size neither the server's model list nor its /tokenize gives: "
                        "pass --tokenizer PATH or --vocab-size N\n");
        return 2;
    }
    return 0;
}

/* Bodies, budgets and counts of every prompt. Returns an exit status. */
static int prepare(const opts *o, bool chat, const char *model, run_state *s) {
    size_t n = s->w.n;
    s->bodies = calloc(n, sizeof *s->bodies);
    s->max_tokens = calloc(n, sizeof *s->max_tokens);
    s->prompt_len = calloc(n, sizeof *s->prompt_len);
    s->arrivals = calloc(n, sizeof *s->arrivals);
    s->results = calloc(n, sizeof *s->results);
    if (!s->bodies || !s->max_tokens || !s->prompt_len || !s->arrivals || !s->results) {
        fprintf(stderr, "pagellm " CMD ": out of memory for %zu requests\n", n);
        return 1;
    }
    for (size_t i = 0; i < n; i++) {
        const pl_bench_prompt *p = &s->w.prompts[i];
        int rc = request_body(o, chat, model, s->tok, p, i, &s->bodies[i]);
        if (rc) return rc;
        s->max_tokens[i] = p->output_len;
        s->prompt_len[i] = (long long)p->n_tokens;
    }
    pl_bench_arrivals(n, o->request_rate, o->burstiness, o->wo.seed, s->arrivals);
    return 0;
}

/* Where --save-result writes: --result-dir / (--result-filename, or vLLM's name
 * "{backend}-{rate}qps[-concurrency{N}]-{model}-{%Y%m%d-%H%M%S}.json", the rate as Python
 * prints a float and the model's last path component). */
static void result_path(const opts *o, bool chat, const char *model, char *out, size_t cap) {
    const char *dir = o->result_dir && o->result_dir[0] ? o->result_dir : ".";
    if (o->result_filename) {
        snprintf(out, cap, "%s/%s", dir, o->result_filename);
        return;
    }
    char rate[32], conc[40] = "", when[32];
    if (isinf(o->request_rate)) snprintf(rate, sizeof rate, "inf");
    else if (o->request_rate == floor(o->request_rate))
        snprintf(rate, sizeof rate, "%.1f", o->request_rate);
    else snprintf(rate, sizeof rate, "%g", o->request_rate);
    if (o->max_concurrency) snprintf(conc, sizeof conc, "-concurrency%lld", o->max_concurrency);
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(when, sizeof when, "%Y%m%d-%H%M%S", &tm);
    const char *slash = strrchr(model, '/');
    snprintf(out, cap, "%s/%s-%sqps%s-%s-%s.json", dir, chat ? "openai-chat" : "openai", rate,
             conc, slash ? slash + 1 : model, when);
}

static void report_failures(const pl_bench_serve_result *r, size_t n) {
    size_t failed = 0, first = n;
    for (size_t i = 0; i < n; i++) {
        if (r[i].success) continue;
        if (!failed++) first = i;
    }
    if (!failed) return;
    fprintf(stderr, "pagellm " CMD ": %zu of %zu requests failed; the first (request %zu): %s\n",
            failed, n, first, r[first].error ? r[first].error : "out of memory");
}

int pl_bench_serve_main(int argc, char **argv) {
    opts o;
    opts_default(&o);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (cli_is(a, "--help") || !strcmp(a, "-h")) {
            pl_bench_workload_opts d;
            pl_bench_workload_opts_default(&d);
            usage(&d);
            return 0;
        }
        int r = serve_flag(&o, argc, argv, &i);
        if (r == 0) r = pl_bench_workload_flag(&o.wo, argc, argv, &i);
        if (r < 0) return 2;
        if (r == 0) return cli_unknown_flag(CMD, a, help);
    }
    if (o.endpoint[0] != '/' ||
        (!ends_with(o.endpoint, "/completions") && !ends_with(o.endpoint, "/chat/completions"))) {
        fprintf(stderr, "pagellm " CMD ": --endpoint: '%s' is neither a completions nor a chat "
                        "completions path (/v1/completions, /v1/chat/completions)\n", o.endpoint);
        return 2;
    }
    bool chat = ends_with(o.endpoint, "/chat/completions");
    if (pl_bench_workload_check(&o.wo)) return 2;
    char base[1024], url[2048];
    int rc = base_url(&o, base, sizeof base);
    if (rc) return rc;
    snprintf(url, sizeof url, "%s%s", base, o.endpoint);
    if (!o.api_key) {
        const char *env = getenv("OPENAI_API_KEY");
        if (env && env[0]) o.api_key = env;
    }
    raise_fd_limit();
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "pagellm " CMD ": libcurl failed to initialise\n");
        return 1;
    }
    run_state s = {0};
    json_t *root = NULL;
    if (o.tokenizer && pl_tokenizer_load(o.tokenizer, &s.tok) != PL_OK) {
        fprintf(stderr, "pagellm " CMD ": --tokenizer: %s\n", pl_last_error_as(PL_NAMING_FLAG));
        rc = 2;
        goto done;
    }
    server_model sm;
    pl_bench_model_facts facts;
    if ((rc = resolve_model(&o, base, chat, s.tok, &sm, &facts))) goto done;
    if ((rc = pl_bench_workload_build_for(&o.wo, &facts, 0, &s.w))) goto done;
    if ((rc = prepare(&o, chat, sm.name, &s))) goto done;

    char desc[512];
    pl_bench_workload_describe(&o.wo, &s.w, desc, sizeof desc);
    printf("Server: %s (model %s)\n", url, sm.name);
    size_t n_text = 0;
    for (size_t i = 0; i < s.w.n; i++) n_text += s.w.prompts[i].text != NULL;
    printf("Workload: %s; prompts as %s\n", desc,
           chat || n_text == s.w.n ? "text" : n_text ? "text and token ids" : "token ids");
    if (isinf(o.request_rate))
        printf("Traffic request rate: inf\n");
    else
        printf("Traffic request rate: %g\n", o.request_rate);
    char burst[32];
    snprintf(burst, sizeof burst, isinf(o.burstiness) ? "inf" : "%g", o.burstiness);
    printf("Burstiness factor: %s (%s)\n", burst,
           o.burstiness == 1.0 ? "Poisson process"
           : isinf(o.burstiness) ? "evenly spaced" : "Gamma distribution");
    if (o.max_concurrency)
        printf("Maximum request concurrency: %lld\n", o.max_concurrency);
    else
        printf("Maximum request concurrency: None\n");
    fflush(stdout);

    uint64_t budget = 0;
    for (size_t i = 0; i < s.w.n; i++) budget += (uint64_t)s.max_tokens[i];
    pl_progress bar;
    pl_progress_start(&bar, o.progress, "output tokens", budget);
    pl_bench_serve_target t = {.url = url, .chat = chat, .api_key = o.api_key,
                               .max_concurrency = (int)o.max_concurrency};
    double duration = 0;
    rc = pl_bench_serve_run(&t, s.bodies, s.max_tokens, s.arrivals, s.w.n, &bar, s.results,
                            &duration);
    pl_progress_finish(&bar);
    if (rc) goto done;
    report_failures(s.results, s.w.n);
    pl_bench_serve_metrics m;
    if ((rc = pl_bench_serve_metrics_compute(s.results, s.prompt_len, s.w.n, duration,
                                             o.percentiles, o.n_percentiles, &o.goodput, &m)))
        goto done;
    print_result(&o, &m);
    if (o.json_path || o.save_result)
        root = result_json(&o, chat, base, sm.name, &s.w, s.prompt_len, s.results, &m, desc);
    if (o.json_path && !pl_bench_write_json(o.json_path, root)) rc = 1;
    if (o.save_result) {
        char path[4096];
        result_path(&o, chat, sm.name, path, sizeof path);
        if (o.result_dir) mkdir(o.result_dir, 0777); /* as vLLM makes it; EEXIST is fine */
        if (!pl_bench_write_json(path, root)) rc = 1;
        else fprintf(stderr, "pagellm " CMD ": results saved to %s\n", path);
    }
    if (!rc && m.completed == 0) {
        fprintf(stderr, "pagellm " CMD ": no request succeeded\n");
        rc = 1;
    }
done:
    json_decref(root);
    run_state_free(&s);
    curl_global_cleanup();
    return rc;
}
