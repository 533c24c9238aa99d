/*
 * server/options.c - `pagellm serve`'s flags: the server's own (named as vLLM names them where
 * vLLM has them: --host, --port, --api-key, --served-model-name, --timeout-keep-alive) from
 * the table below, and every engine flag of `generate` from cli/ (the engine's field table).
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "server/srv.h"

typedef enum opt_kind { O_STRING, O_INT, O_SIZE, O_SECONDS, O_OFF, O_ON } opt_kind;

typedef struct opt_row {
    const char *flag;
    opt_kind kind;
    size_t offset;         /* in pl_srv_options */
    long long lo, hi;      /* INT, SIZE, SECONDS */
    const char *value;     /* value name for the help */
    const char *dflt;      /* the default as the help shows it; NULL: none */
    const char *help;
} opt_row;

#define O(field) offsetof(pl_srv_options, field)

static const opt_row ROWS[] = {
    {"--host", O_STRING, O(host), 0, 0, "HOST", "127.0.0.1",
     "address to listen on (0.0.0.0 or :: for every interface)"},
    {"--port", O_INT, O(port), 0, 65535, "N", "8000", "TCP port; 0 = any free port (logged)"},
    {"--api-key", O_STRING, O(api_key), 0, 0, "KEY", NULL,
     "require 'Authorization: Bearer KEY' on /v1/*, /tokenize and /detokenize (also from "
     "PAGELLM_API_KEY)"},
    {"--served-model-name", O_STRING, O(served_model_name), 0, 0, "NAME", NULL,
     "the model's name in the API; unset: --model as given"},
    {"--max-body-size", O_SIZE, O(max_body_bytes), 1024, 1LL << 32, "SIZE", "4M",
     "largest request body (413 past it)"},
    {"--max-prompt-tokens", O_INT, O(max_prompt_tokens), 0, 16777216, "N", "0",
     "longest prompt in tokens (400 past it); 0 = max_model_len"},
    {"--max-n", O_INT, O(max_n), 1, 64, "N", "16", "most samples (n) per prompt"},
    {"--max-choices", O_INT, O(max_choices), 1, 65536, "N", "256",
     "most choices (prompts x n) per request"},
    {"--max-connections", O_INT, O(max_connections), 1, 1000000, "N", "1024",
     "open connections at most (more wait in the listen queue)"},
    {"--max-connections-per-ip", O_INT, O(max_connections_per_ip), 0, 1000000, "N", "0",
     "open connections from one address at most; 0 = no limit"},
    {"--timeout-keep-alive", O_INT, O(timeout_keep_alive), 0, 86400, "S", "5",
     "close a connection idle (or silent) this many seconds; 0 = never"},
    {"--request-timeout", O_INT, O(request_timeout), 0, 86400, "S", "30",
     "close a connection whose request (from its first line to the end of its body) takes "
     "longer; 0 = never"},
    {"--drain-timeout", O_SECONDS, O(drain_timeout), 0, 86400, "S", "30",
     "on SIGTERM/SIGINT, let running requests finish this long, then abort the rest"},
    {"--http-threads", O_INT, O(http_threads), 1, 256, "N", "2",
     "threads answering HTTP (parsing, tokenizing, formatting)"},
    {"--max-pending-deltas", O_INT, O(max_pending_deltas), 1, 1 << 24, "N", "4096",
     "stream events a client may leave unread before its request is aborted"},
    {"--send-buffer", O_SIZE, O(send_buffer_bytes), 0, 1LL << 30, "SIZE", "0",
     "kernel send buffer per connection (SO_SNDBUF); 0 = the kernel's default, which grows to "
     "megabytes: a smaller one holds less for a slow reader"},
    {"--log-interval", O_SECONDS, O(log_interval), 0, 86400, "S", "10",
     "seconds between engine log lines (throughput, queue, KV usage); 0 = none"},
    {"--disable-access-log", O_OFF, O(access_log), 0, 0, NULL, NULL,
     "no log line per request"},
    {"--trust-request-chat-template", O_ON, O(trust_request_chat_template), 0, 0, NULL, NULL,
     "let requests bring their own chat template (\"chat_template\"; rendered in the sandbox "
     "either way); else such a request gets a 400"},
    {"--allowed-origins", O_STRING, O(allowed_origins), 0, 0, "JSON", "[\"*\"]",
     "CORS: origins browsers may call from, a JSON list (vLLM's flag)"},
    {"--allowed-methods", O_STRING, O(allowed_methods), 0, 0, "JSON", "[\"*\"]",
     "CORS: methods a preflight may ask for, a JSON list"},
    {"--allowed-headers", O_STRING, O(allowed_headers), 0, 0, "JSON", "[\"*\"]",
     "CORS: request headers a preflight may ask for, a JSON list"},
    {"--allow-credentials", O_ON, O(cors.credentials), 0, 0, NULL, NULL,
     "CORS: allow credentials (cookies, Authorization) in cross-origin requests"},
    {"--agent-port", O_INT, O(agent_port), 0, 65535, "N", "0",
     "answer HAProxy's agent check on this TCP port (same --host): a weight from the queue "
     "and KV use, \"drain\" while draining (deploy/haproxy/); 0 = off"},
    {"--tool-call-parser", O_STRING, O(tool_call_parser), 0, 0, "NAME", "auto",
     "how chat replies write tool calls, read into message.tool_calls: hermes (Hermes, "
     "Qwen2.5, Qwen3), llama3_json (Llama 3.1/3.2), mistral; auto: from the chat template's "
     "markers; none: never read"},
    {"--reasoning-parser", O_STRING, O(reasoning_parser), 0, 0, "NAME", NULL,
     "how chat replies write their reasoning, read into message.reasoning_content: qwen3, "
     "deepseek_r1 (<think>...</think>); unset: none"},
};

#define N_ROWS (sizeof ROWS / sizeof ROWS[0])

static void defaults(pl_srv_options *o) {
    *o = (pl_srv_options){
        .host = "127.0.0.1", .port = 8000, .api_key = getenv("PAGELLM_API_KEY"),
        .max_body_bytes = 4u << 20, .max_n = 16, .max_choices = 256, .max_connections = 1024,
        .timeout_keep_alive = 5, .request_timeout = 30, .drain_timeout = 30, .http_threads = 2,
        .max_pending_deltas = 4096, .log_interval = 10, .access_log = true,
        .tool_call_parser = "auto",
    };
    if (o->api_key && !o->api_key[0]) o->api_key = NULL;
}

/* "4M", "512K", "1G", "4096" (powers of 1024). */
static bool parse_size(const char *s, long long lo, long long hi, size_t *out) {
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (end == s || errno || !isfinite(v) || v < 0) return false;
    double mult = 1;
    if (*end == 'K' || *end == 'k') mult = 1024.0, end++;
    else if (*end == 'M' || *end == 'm') mult = 1048576.0, end++;
    else if (*end == 'G' || *end == 'g') mult = 1073741824.0, end++;
    if (*end == 'i' && mult > 1) end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end) return false;
    v *= mult;
    if (v < (double)lo || v > (double)hi) return false;
    *out = (size_t)v;
    return true;
}

static bool set_row(const opt_row *r, pl_srv_options *o, const char *value) {
    void *p = (char *)o + r->offset;
    long long i;
    double d;
    switch (r->kind) {
    case O_STRING: *(const char **)p = value; return true;
    case O_OFF: *(bool *)p = false; return true;
    case O_ON: *(bool *)p = true; return true;
    case O_INT:
        if (!cli_int(r->flag, value, r->lo, r->hi, &i)) return false;
        *(int *)p = (int)i;
        return true;
    case O_SECONDS:
        if (!cli_float(r->flag, value, (double)r->lo, (double)r->hi, &d)) return false;
        *(double *)p = d;
        return true;
    case O_SIZE:
        if (!parse_size(value, r->lo, r->hi, (size_t *)p)) {
            fprintf(stderr, "pagellm: %s: '%s' is not a size in [%lld, %lld] bytes (4M, 512K)\n",
                    r->flag, value, r->lo, r->hi);
            return false;
        }
        return true;
    }
    return false;
}

static void usage(void) {
    printf("usage: pagellm serve (MODEL | --model PATH) [server flags] [engine flags]\n\n"
           "An OpenAI-compatible HTTP server (docs/server.md): POST /v1/completions,\n"
           "/v1/chat/completions (streamed with \"stream\": true), /tokenize, /detokenize; GET\n"
           "/v1/models, /health, /metrics (Prometheus, vLLM's names under pagellm:), /version.\n"
           "SIGTERM or SIGINT stops taking requests (503), lets running ones finish for\n"
           "--drain-timeout seconds, aborts the rest and exits 0. A device fault that leaves\n"
           "the backend unusable, or a tensor-parallel rank that dies or hangs (/health:\n"
           "\"failed\"), drains and exits 3.\n\n");
    printf("server flags [default]:\n");
    for (size_t k = 0; k < N_ROWS; k++) {
        const opt_row *r = &ROWS[k];
        char head[64];
        snprintf(head, sizeof head, "      %s%s%s", r->flag, r->value ? " " : "",
                 r->value ? r->value : "");
        printf("%-34s", head);
        if (strlen(head) >= 34) printf("\n%34s", "");
        char text[512];
        snprintf(text, sizeof text, "%s%s%s%s", r->help, r->dflt ? " [" : "",
                 r->dflt ? r->dflt : "", r->dflt ? "]" : "");
        cli_wrap(text, 34, 34);
    }
    printf("\n");
    cli_print_engine_flags();
}

/* A parser name the library knows (checked by asking it), or auto/none for tool calls. */
static bool parser_name(const char *flag, const char *name, bool tools) {
    if (!name || (tools && (!strcmp(name, "auto") || !strcmp(name, "none")))) return true;
    pl_reply_options o;
    pl_reply_options_default(&o);
    if (tools) o.tool_parser = name;
    else o.reasoning_parser = name;
    pl_reply_parser *p;
    if (pl_reply_parser_create(&o, &p) != PL_OK) {
        fprintf(stderr, "pagellm serve: %s: %s%s\n", flag, pl_last_error(),
                tools ? "; or auto, none" : "");
        return false;
    }
    pl_reply_parser_free(p);
    return true;
}

int pl_srv_options_parse(int argc, char **argv, pl_srv_options *opt, pl_engine_config *cfg) {
    defaults(opt);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int r = cli_engine_flag(cfg, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (cli_is(a, "--help") || !strcmp(a, "-h")) {
            usage();
            return 0;
        }
        const opt_row *row = NULL;
        const char *value = NULL;
        char name[128];
        size_t k_eq = strcspn(a, "=");
        snprintf(name, sizeof name, "%.*s", (int)(k_eq < 127 ? k_eq : 127), a);
        for (size_t k = 0; k < N_ROWS && !row; k++) {
            if (cli_is(a, ROWS[k].flag)) row = &ROWS[k];
            else if (a[k_eq] == '=' && cli_is(name, ROWS[k].flag) && ROWS[k].kind != O_OFF &&
                     ROWS[k].kind != O_ON)
                row = &ROWS[k], value = a + k_eq + 1;
        }
        if (!row && i == 0 && a[0] != '-' && !cfg->model_path) {
            cfg->model_path = a; /* `pagellm serve MODEL`, as `vllm serve MODEL` */
            continue;
        }
        if (!row) return cli_unknown_flag("serve", a, usage);
        if (row->kind != O_OFF && row->kind != O_ON && !value) {
            if (i + 1 >= argc) {
                fprintf(stderr, "pagellm: %s: missing value\n", a);
                return 2;
            }
            value = argv[++i];
        }
        if (!set_row(row, opt, value)) return 2;
    }
    if (!cfg->model_path) {
        fprintf(stderr, "pagellm serve: --model is required (a file, directory or dummy:NAME)\n");
        return 2;
    }
    if (opt->api_key && !opt->api_key[0]) opt->api_key = NULL;
    if (!pl_srv_cors_init(opt)) return 2;
    if (!parser_name("--tool-call-parser", opt->tool_call_parser, true) ||
        !parser_name("--reasoning-parser", opt->reasoning_parser, false))
        return 2;
    return -1;
}
