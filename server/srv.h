/*
 * server/srv.h - the insides of `pagellm serve`, shared by the files of server/.
 *
 * Threads and who owns what
 * - The stepping thread (stepper.c) is the only one that calls pl_engine_step, _metrics and
 *   _latency_histogram. Between steps it sleeps in pl_engine_wait. After each step it copies
 *   what the step reported into the requests it belongs to (step results are valid only
 *   until the next step) and hands the connections to resume to the watcher.
 * - libmicrohttpd's threads run the transport (http.c: connections, bodies, suspending and
 *   resuming, sending) and, through it, the routes (routes.c: parse, tokenize, submit and
 *   abort, and turn what the stepping thread copied into responses: a whole JSON body, or
 *   SSE chunks).
 * - The watcher thread (watch.c) resumes the connections the stepping thread has new output
 *   for (so that thread pays one wake-up per step, not one libmicrohttpd call per stream),
 *   notices clients that hang up while their connection is suspended (libmicrohttpd does not
 *   look at a suspended socket), drops connections that send their request too slowly, and
 *   frees dead requests.
 * - The main thread (serve.c) waits for SIGTERM/SIGINT and drains.
 *
 * A request (pl_srv_req) is shared by its connection, the registry (while the engine holds
 * any of its prompts), a stream's response, and a pending resume; it is reference counted,
 * and its memory is freed only by the watcher thread, after the epoll batch in which it may
 * still appear (watch.c says why). req->mu guards the fields the stepping thread writes
 * (events, choices' results, done) and the suspend state.
 *
 * Lock order: reg_mu, then a request's mu, then conn_mu or dead_mu; libmicrohttpd's own
 * locks and the engine's intake lock are taken inside any of them and never call back.
 */
#ifndef PL_SERVER_SRV_H
#define PL_SERVER_SRV_H

#include <jansson.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pagellm.h"
#include "server/log.h"

struct MHD_Connection;
struct MHD_Daemon;

/* ------------------------------------------------------------------------------------------
 * Options (options.c)
 * ---------------------------------------------------------------------------------------- */

/* CORS as vLLM's server answers it (FastAPI's CORSMiddleware, Starlette's rules): the flags'
 * JSON lists parsed once. "*" in a list allows everything. */
typedef struct pl_srv_cors {
    char **origins, **methods, **headers; /* (n_*) as given; headers also get the safelisted */
    size_t n_origins, n_methods, n_headers;
    bool all_origins, all_methods, all_headers;
    bool credentials;                     /* --allow-credentials */
} pl_srv_cors;

typedef struct pl_srv_options {
    const char *host;              /* --host (127.0.0.1) */
    int port;                      /* --port (8000; 0: any free port, printed) */
    const char *api_key;           /* --api-key or PAGELLM_API_KEY; NULL: none */
    const char *served_model_name; /* --served-model-name; NULL: the model's file name */
    size_t max_body_bytes;         /* --max-body-size */
    int max_prompt_tokens;         /* --max-prompt-tokens (0: max_model_len) */
    int max_n;                     /* --max-n: samples per prompt */
    int max_choices;               /* --max-choices: prompts x n per request */
    int max_connections;           /* --max-connections */
    int max_connections_per_ip;    /* --max-connections-per-ip (0: no per-IP limit) */
    int timeout_keep_alive;        /* --timeout-keep-alive seconds (idle connection) */
    int request_timeout;           /* --request-timeout seconds (request line to body end) */
    double drain_timeout;          /* --drain-timeout seconds */
    int http_threads;              /* --http-threads */
    int max_pending_deltas;        /* --max-pending-deltas per streamed request */
    size_t send_buffer_bytes;      /* --send-buffer: SO_SNDBUF of each connection (0: the
                                      kernel's, which grows to megabytes) */
    double log_interval;           /* --log-interval seconds (0: off) */
    bool access_log;               /* off with --disable-access-log */
    bool trust_request_chat_template; /* --trust-request-chat-template */
    const char *allowed_origins, *allowed_methods, *allowed_headers; /* JSON lists (["*"]) */
    pl_srv_cors cors;              /* the three above parsed, and --allow-credentials */
    int agent_port;                /* --agent-port: HAProxy's agent check (0: off) */
    const char *tool_call_parser;  /* --tool-call-parser: a syntax, "auto" or "none" */
    const char *reasoning_parser;  /* --reasoning-parser; NULL: none */
} pl_srv_options;

/* Parses argv (engine flags through cli/, the rest here) into opt and cfg. Returns -1 to go
 * on, else the exit status (0 after --help, 2 on a usage error, message printed). */
int pl_srv_options_parse(int argc, char **argv, pl_srv_options *opt, pl_engine_config *cfg);

/* ------------------------------------------------------------------------------------------
 * Errors as OpenAI's error object (request.c)
 * ---------------------------------------------------------------------------------------- */

typedef struct pl_srv_error {
    int status;          /* HTTP status */
    const char *type;    /* "invalid_request_error", "server_error", ... (static) */
    const char *code;    /* NULL or "invalid_api_key", "queue_full", ... (static) */
    char param[64];      /* the request field at fault, "" when none */
    char message[1024];
} pl_srv_error;

/* Sets *err (returns false, for `return pl_srv_fail(...)`). */
bool pl_srv_fail(pl_srv_error *err, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* {"error": {"message", "type", "param", "code"}} (new reference). */
json_t *pl_srv_error_json(const pl_srv_error *err);
/* The HTTP status, type and code for a failed engine call; the message is pl_last_error()'s.
 * param: the request field, when known. */
bool pl_srv_fail_status(pl_srv_error *err, pl_status s, const char *param);

/* ------------------------------------------------------------------------------------------
 * Request bodies (request.c): the untrusted-input parser, fuzzed by tests/fuzz/fuzz_server.c
 * ---------------------------------------------------------------------------------------- */

typedef enum pl_srv_kind { PL_SRV_COMPLETION = 0, PL_SRV_CHAT = 1 } pl_srv_kind;

typedef struct pl_srv_prompt {
    char *text;       /* NULL when given as ids */
    int32_t *ids;     /* given, or the text's tokens once tokenized */
    size_t n_ids;
} pl_srv_prompt;

typedef struct pl_srv_limits {
    int max_n;        /* samples per prompt */
    int max_choices;  /* prompts x n */
} pl_srv_limits;

/* OpenAI's tool_choice. */
typedef enum pl_srv_tool_choice {
    PL_SRV_TOOLS_AUTO = 0,   /* the model may call tools (the default when tools are given) */
    PL_SRV_TOOLS_NONE,       /* it may not: the template gets no tools, nothing is parsed */
    PL_SRV_TOOLS_REQUIRED,   /* it must call one or more */
    PL_SRV_TOOLS_NAMED,      /* it must call this one */
} pl_srv_tool_choice;

/* A completions or chat completions body, checked. */
typedef struct pl_srv_request {
    pl_srv_kind kind;
    char *model;                   /* NULL when not given */
    pl_srv_prompt *prompts;        /* (n_prompts) completions: >= 1; chat: exactly 1 (the
                                      rendered chat, text set by the handler) */
    size_t n_prompts;
    char *messages_json;           /* chat: the messages array as JSON text */
    pl_chat_options chat;          /* chat: tools, chat_template_kwargs, ... */
    pl_sampling_params sp;         /* every sampling field the body gave */
    bool has_max_tokens;           /* else the handler sets what the context leaves */
    bool stream, include_usage, echo;
    bool add_special_tokens;       /* completions' text prompts get BOS (default true) */
    bool chat_logprobs;            /* chat: logprobs were asked for */
    int prompt_logprobs;           /* the body's prompt_logprobs (-1: not asked for) */
    bool has_skip_special;         /* the body set skip_special_tokens */
    /* chat: tools */
    pl_srv_tool_choice tool_choice;
    char *tool_name;               /* PL_SRV_TOOLS_NAMED: the function */
    bool parallel_tool_calls;      /* default true */
    json_t *tools;                 /* the tools given (NULL: none) */
    const char *constraint_param;  /* the field that constrains the output (response_format,
                                      structured_outputs, guided_*), static; NULL: none */
} pl_srv_request;

/* Parses body[0..len). On failure fills err (400 naming the field) and leaves nothing to
 * free. The model name is checked by the handler (404). */
bool pl_srv_request_parse(pl_srv_kind kind, const char *body, size_t len,
                          const pl_srv_limits *lim, pl_srv_request *out, pl_srv_error *err);
void pl_srv_request_free(pl_srv_request *r);

/* POST /tokenize: {"prompt", "add_special_tokens"} or {"messages", "add_generation_prompt",
 * "tools", "chat_template_kwargs", "add_special_tokens"}, "return_token_strs". */
typedef struct pl_srv_tokenize {
    char *prompt;              /* NULL for a chat */
    char *messages_json;
    pl_chat_options chat;
    bool add_special_tokens;   /* default true for a prompt, false for a chat (vLLM) */
    bool return_token_strs;
} pl_srv_tokenize;
bool pl_srv_tokenize_parse(const char *body, size_t len, pl_srv_tokenize *out,
                           pl_srv_error *err);
void pl_srv_tokenize_free(pl_srv_tokenize *t);

/* POST /detokenize: {"tokens": [ids]}. *out_ids: caller frees (free). */
bool pl_srv_detokenize_parse(const char *body, size_t len, int32_t **out_ids, size_t *out_n,
                             pl_srv_error *err);

/* ------------------------------------------------------------------------------------------
 * Token strings (vocab.c): what each id adds to a text, for the alternatives of logprobs
 * ---------------------------------------------------------------------------------------- */

typedef struct pl_srv_vocab {
    char **text;    /* (n) NUL-terminated UTF-8; NULL table without a tokenizer */
    int n;
} pl_srv_vocab;

bool pl_srv_vocab_init(pl_srv_vocab *v, const pl_engine *e);
void pl_srv_vocab_free(pl_srv_vocab *v);
/* The string of id ("" out of range or without a tokenizer). */
const char *pl_srv_vocab_text(const pl_srv_vocab *v, int32_t id);

/* ------------------------------------------------------------------------------------------
 * Requests in flight (req.c)
 * ---------------------------------------------------------------------------------------- */

/* What the stepping thread copies out of a step for a streamed request. */
typedef struct pl_srv_event {
    struct pl_srv_event *next;
    int choice;
    bool is_finish;            /* the choice finished (its result is in choices[choice]) */
    int32_t token;             /* -1: none (held-back text flushed at the end) */
    bool has_logprobs;
    pl_token_logprobs lp;      /* lp.top points at tops */
    size_t text_len;
    char *text;                /* points after tops */
    pl_logprob tops[];         /* (lp.n_top), then text_len + 1 bytes, then lp.text's */
} pl_srv_event;

/* A copied list of logprobs: entries, their tops and texts in one allocation (free()). */
typedef struct pl_srv_logprobs {
    pl_token_logprobs *entries; /* (n) */
    size_t n;
} pl_srv_logprobs;
bool pl_srv_logprobs_copy(const pl_token_logprobs *src, size_t n, pl_srv_logprobs *out);
void pl_srv_logprobs_free(pl_srv_logprobs *l);

/* One choice of a response: sample `sample` of prompt `prompt`. */
typedef struct pl_srv_choice {
    int prompt;
    bool finished;             /* written by the stepping thread under req->mu */
    pl_finish_reason reason;
    size_t n_prompt, n_cached, n_out;
    double queue_s, ttft_s, total_s;
    char *text;                /* whole responses: the final text */
    size_t text_len;
    pl_srv_logprobs lp;        /* whole responses with logprobs */
    pl_srv_logprobs prompt_lp; /* echo with logprobs (sample 0 of each prompt) */
    int32_t *out_ids;          /* whole responses with logprobs */
    /* tokens drawn so far and when the first came (pl_srv_now), counted from the deltas by
     * the stepping thread under req->mu: the access log of a request abandoned before its
     * completion arrives still has them */
    size_t n_drawn;
    double t_first_token;
    int stop_string;           /* the completion's: which stop string ended it, or -1 */
    int32_t last_id;           /* its last output id (-1: none): a stop id ended it? */
    pl_reply_parser *reply;    /* a stream whose reply is read for reasoning or tool calls
                                  (the HTTP thread's) */
    /* streaming: the HTTP thread's */
    bool role_sent, finish_sent;
    size_t text_offset;        /* characters streamed so far (logprobs' text_offset) */
} pl_srv_choice;

typedef struct pl_srv pl_srv;
typedef struct pl_srv_conn pl_srv_conn;

/* What a stream's next() did. */
typedef enum pl_srv_next {
    PL_SRV_NEXT_MORE,  /* appended to r->out; call again once it is sent */
    PL_SRV_NEXT_END,   /* appended the last of the stream */
    PL_SRV_NEXT_WAIT,  /* nothing yet: the connection sleeps until the stepping thread has
                          more (r->ev_head, r->done or r->overflow) */
    PL_SRV_NEXT_FAIL,  /* out of memory: the stream ends with an error */
} pl_srv_next;

typedef struct pl_srv_req {
    pthread_mutex_t mu;
    atomic_int refs;
    pl_srv *srv;
    struct pl_srv_req *dead_next;   /* the watcher's list of requests to free */
    /* the connection (set by the HTTP thread; conn NULL once the request completed) */
    struct MHD_Connection *conn;
    pl_srv_conn *sock;
    char id[48];                    /* "cmpl-...", "chatcmpl-...", or "req-..." */
    char method[8];
    char path[96];
    char url_id[256];               /* a prefix route's id: the URL after the prefix */
    double t_start;                 /* monotonic seconds */
    int status;                     /* HTTP status sent (access log) */
    /* an error found in the headers, sent once the body is in (HTTP thread) */
    pl_srv_error pending;
    bool has_pending;
    const char *allow;              /* 405: the route's method */
    struct {                        /* headers every answer carries (CORS) */
        const char *name;
        char value[512];
    } extra[6];
    int n_extra;
    /* the body (HTTP thread) */
    char *body;
    size_t body_len, body_cap;
    bool too_large, processed, responded;
    /* the request */
    pl_srv_kind kind;
    pl_srv_request rq;
    bool has_rq;
    const char *tool_parser;        /* chat: the syntax its tool calls are read in; NULL: none */
    bool read_reply;                /* chat: replies are read for tool calls or reasoning */
    int n_per_prompt;               /* n */
    int n_choices;                  /* n_prompts * n */
    pl_srv_choice *choices;         /* (n_choices) */
    pl_request_id *engine_ids;      /* (rq.n_prompts), 0 when not submitted */
    int *samples_left;              /* (rq.n_prompts) */
    int prompts_left;               /* engine requests not finished */
    uint64_t created;               /* unix seconds */
    /* shared with the stepping and watcher threads (mu) */
    bool submitted;
    bool done;                      /* every choice finished */
    bool client_gone;               /* hung up while suspended */
    bool overflow;                  /* a stream's pending deltas passed the bound: aborted */
    bool suspended;                 /* the connection is suspended */
    bool to_resume;                 /* in the stepping thread's list of connections to resume */
    pl_srv_event *ev_head, *ev_tail;
    int n_events;
    /* streaming output (HTTP thread) */
    pl_srv_next (*next)(pl_srv *s, struct pl_srv_req *r); /* the stream's (pl_srv_response) */
    bool stream_ended;
    char *out;
    size_t out_len, out_pos, out_cap;
} pl_srv_req;

/* A new request with one reference (the connection's). NULL when out of memory. */
pl_srv_req *pl_srv_req_create(pl_srv *s);
void pl_srv_req_ref(pl_srv_req *r);
/* Drops a reference; the last hands the request to the watcher to free. */
void pl_srv_req_unref(pl_srv_req *r);
/* Frees now (the watcher's, and paths where no other thread saw it). */
void pl_srv_req_destroy(pl_srv_req *r);
/* Aborts the engine requests of r not finished yet (r->mu held; the engine's intake lock is
 * the innermost of all); returns how many. */
size_t pl_srv_req_abort_locked(pl_srv_req *r);
/* Resumes the suspended connection. Called with r->mu held. */
void pl_srv_req_resume_locked(pl_srv_req *r);
/* Takes the first max_n queued events (NULL when none), with r->mu held: the rest stay
 * queued, counted against --max-pending-deltas. */
pl_srv_event *pl_srv_req_take_events_locked(pl_srv_req *r, int max_n);
void pl_srv_events_free(pl_srv_event *ev);

/* ------------------------------------------------------------------------------------------
 * Registry: engine request id -> the HTTP request and prompt it serves (registry.c)
 * ---------------------------------------------------------------------------------------- */

typedef struct pl_srv_entry {
    pl_request_id id;           /* 0: empty slot */
    pl_srv_req *req;
    int prompt;
} pl_srv_entry;

typedef struct pl_srv_registry {
    pl_srv_entry *slots;        /* (cap), a power of two; linear probing, backward-shift
                                   deletion (no tombstones) */
    size_t cap, n;
} pl_srv_registry;

bool pl_srv_registry_put(pl_srv_registry *g, pl_request_id id, pl_srv_req *req, int prompt);
pl_srv_entry *pl_srv_registry_get(pl_srv_registry *g, pl_request_id id);
void pl_srv_registry_del(pl_srv_registry *g, pl_request_id id);
void pl_srv_registry_free(pl_srv_registry *g);

/* ------------------------------------------------------------------------------------------
 * The server
 * ---------------------------------------------------------------------------------------- */

/* What the stepping thread hands an HTTP thread for /metrics (and its log). */
typedef struct pl_srv_histogram {
    uint64_t counts[32];        /* cumulative, at the bounds metrics_text.c lists */
    uint64_t count;
    double sum;
} pl_srv_histogram;

typedef struct pl_srv_snapshot {
    pl_metrics m;
    pl_srv_histogram hist[5];   /* indexed by pl_latency */
    double step_s;              /* stepping thread: time in pl_engine_step */
    double deliver_s;           /* time copying results into requests and resuming */
    double idle_s;              /* time in pl_engine_wait */
    double step_cpu_s, deliver_cpu_s; /* the same two in the thread's CPU time */
    double uptime_s;
} pl_srv_snapshot;

struct pl_srv {
    pl_srv_options opt;
    pl_engine *e;
    pl_model_info info;
    bool prefix_caching;            /* the engine's configuration, for vllm:cache_config_info */
    double memory_threshold;
    const pl_tokenizer *tok;        /* NULL: token ids only */
    char model_name[256];
    pl_srv_vocab vocab;
    bool has_chat_template;
    const char *tool_parser;        /* --tool-call-parser resolved (auto: from the engine's
                                       chat template); NULL: tool calls are not read */
    uint64_t nonce;                 /* random, for ids */
    atomic_uint_fast64_t next_serial;
    double t_start;
    struct MHD_Daemon *daemon;
    int port;                       /* bound */

    /* registry (reg_mu): taken by submitters around submit + put, and by the stepping
     * thread while it delivers a step */
    pthread_mutex_t reg_mu;
    pl_srv_registry reg;

    /* stepping thread */
    pthread_t stepper;
    bool stepper_started;
    double clock_step_s, clock_deliver_s, clock_idle_s; /* the stepping thread's, wall */
    double cpu_step_s, cpu_deliver_s;                     /* and its CPU time */
    pl_srv_req **resume;            /* the stepping thread's: requests to resume after a step */
    size_t n_resume, cap_resume;
    pl_srv_req **handoff;           /* (dead_mu) handed to the watcher, which resumes them */
    size_t n_handoff, cap_handoff;
    atomic_bool stop;               /* the stepping thread ends */
    pthread_mutex_t snap_mu;
    pthread_cond_t snap_cv;
    uint64_t snap_asked, snap_given;
    bool stepping;                  /* (snap_mu) inside a step */
    uint64_t steps_begun, snap_at;  /* (snap_mu) steps begun; their number when snap was taken */
    pl_srv_snapshot snap;           /* the latest; one is taken when the thread starts */

    /* connections and draining */
    atomic_int active;              /* requests between their first callback and completion */
    atomic_bool draining;
    atomic_bool failed;             /* the engine cannot step any more (a tensor-parallel rank
                                       died or hung): /health says so, the server stops */
    char failure[256];              /* why (written before failed is set) */
    atomic_bool backend_lost;       /* the stepping thread logged the lost backend once */
    atomic_uint_fast64_t served;    /* requests completed */
    atomic_uint_fast64_t aborted_disconnect, aborted_overflow;

    /* the agent check (agent.c) */
    pthread_t agent;
    bool agent_started;
    int agent_fd, agent_wake[2];

    /* watcher (watch.c) */
    pthread_t watcher;
    bool watcher_started;
    int watch_epfd, wake_fd;
    atomic_bool watch_stop;
    pthread_mutex_t conn_mu;        /* the connection list and records */
    pl_srv_conn *conns;
    pthread_mutex_t dead_mu;
    pl_srv_req *dead;
    pl_srv_conn *dead_conns;
    size_t n_dead;
};

/* stepper.c */
bool pl_srv_stepper_start(pl_srv *s);
void pl_srv_stepper_stop(pl_srv *s);
/* A snapshot of now or of the moment before the step under way. Between steps the stepping
 * thread takes a fresh one first; during a step the one taken just before it is returned at
 * once if there is one, else the one taken when the step ends. Waits at most timeout_s (false
 * on timeout). Either way a fresh one is taken when the step ends. */
bool pl_srv_snapshot_get(pl_srv *s, pl_srv_snapshot *out, double timeout_s);
/* Aborts every engine request the registry holds (the drain's end). */
void pl_srv_abort_all(pl_srv *s);

/* ------------------------------------------------------------------------------------------
 * The HTTP exchange: the transport (http.c, libmicrohttpd's mechanics) calls the routes
 * (routes.c, the endpoints as one table), which fill a response and never call back
 * ---------------------------------------------------------------------------------------- */

typedef struct pl_srv_response {
    int status;                    /* 0: nothing to send, close the connection */
    const char *type;              /* Content-Type (static) */
    char *body;                    /* malloc'd, taken by the transport */
    size_t len;
    const char *header, *value;    /* one more header (static), or NULL */
    /* A stream: a chunked body whose chunks next() appends to r->out. */
    pl_srv_next (*next)(pl_srv *s, pl_srv_req *r);
    /* The answer comes once every choice finished (r->done): the connection sleeps until then,
     * and pl_srv_route_answer gives it. */
    bool wait;
} pl_srv_response;

/* The request headers the routes read. */
typedef struct pl_srv_headers {
    const char *authorization, *content_length; /* NULL when absent */
    const char *origin, *cookie;                /* CORS */
    const char *request_method, *request_headers; /* a preflight's Access-Control-Request-* */
} pl_srv_headers;

/* cors.c */
/* Parses opt's three lists (JSON arrays of strings) into opt->cors; false after printing
 * which flag is wrong. */
bool pl_srv_cors_init(pl_srv_options *opt);
void pl_srv_cors_free(pl_srv_cors *c);
/* A preflight (OPTIONS with Origin and Access-Control-Request-Method): true with *out set
 * (200 "OK", or 400 "Disallowed CORS origin, method" naming what failed) and its headers in
 * r->extra. False: not a preflight. */
bool pl_srv_cors_preflight(const pl_srv_cors *c, pl_srv_req *r, const char *method,
                           const pl_srv_headers *h, pl_srv_response *out);
/* Any other request from an allowed Origin: the headers its answer carries, into r->extra. */
void pl_srv_cors_simple(const pl_srv_cors *c, pl_srv_req *r, const pl_srv_headers *h);

/* routes.c */
/* The headers arrived: picks the route (r->kind, r->path, r->allow) and checks the method,
 * API key, draining and Content-Length. A refusal waits for the body (r->pending); returns
 * true when *out must be sent now instead (413: the body is not read). */
bool pl_srv_route_headers(pl_srv *s, pl_srv_req *r, const char *url, const char *method,
                          const pl_srv_headers *h, pl_srv_response *out);
/* The body is in: the pending refusal, or the route's answer. */
void pl_srv_route_body(pl_srv *s, pl_srv_req *r, pl_srv_response *out);
/* A waiting request is done: its answer. */
void pl_srv_route_answer(pl_srv *s, pl_srv_req *r, pl_srv_response *out);

/* http.c */
bool pl_srv_http_start(pl_srv *s);
void pl_srv_http_stop(pl_srv *s);

/* watch.c: connection records (libmicrohttpd's socket context): hang-ups, the slow-client
 * reaper */
bool pl_srv_watch_start(pl_srv *s);
void pl_srv_watch_stop(pl_srv *s);
/* libmicrohttpd's connection notifications (started / closed). */
void pl_srv_conn_opened(pl_srv *s, int fd, void **socket_context);
void pl_srv_conn_closed(pl_srv *s, void **socket_context);
/* The request line arrived / the body was read / the response completed. */
void pl_srv_conn_reading(pl_srv *s, pl_srv_conn *c);
void pl_srv_conn_busy(pl_srv *s, pl_srv_conn *c);
void pl_srv_conn_idle(pl_srv *s, pl_srv_conn *c);
/* The request the connection is answering (NULL: none), for a hang-up to find. */
void pl_srv_conn_attach(pl_srv *s, pl_srv_conn *c, pl_srv_req *r);
/* Whether the client hung up; checked under r->mu before suspending (c may be NULL). */
bool pl_srv_conn_hung_up(const pl_srv_conn *c);
/* Hands a dead request to the watcher, which frees it after its current batch. */
void pl_srv_watch_bury(pl_srv *s, pl_srv_req *r);
/* Hands the watcher reqs[0..n) to resume (each with a reference and to_resume set, which
 * the watcher drops and clears); false when out of memory (then nothing was taken). */
bool pl_srv_watch_resume(pl_srv *s, pl_srv_req **reqs, size_t n);

/* respond.c: response bodies (new references) and SSE chunks */
json_t *pl_srv_response_json(pl_srv *s, pl_srv_req *r);
/* Appends the SSE chunks for ev (and the final ones once every choice finished) to r->out. */
bool pl_srv_stream_event(pl_srv *s, pl_srv_req *r, const pl_srv_event *ev);
bool pl_srv_stream_error(pl_srv_req *r, const pl_srv_error *err);
bool pl_srv_stream_done(pl_srv *s, pl_srv_req *r);
/* The usage object of r (new reference). */
json_t *pl_srv_usage_json(const pl_srv_req *r);
/* JSON text of v (compact) appended to r->out as "data: ...\n\n". */
bool pl_srv_out_data(pl_srv_req *r, json_t *v);
bool pl_srv_out_append(pl_srv_req *r, const char *p, size_t n);
/* Finish reason as OpenAI names it. */
const char *pl_srv_finish_name(pl_finish_reason r);
/* The options a reply of choice i of r is read with (false: it is not read). */
bool pl_srv_reply_options(const pl_srv *s, const pl_srv_req *r, int i, pl_reply_options *out);

/* agent.c: HAProxy's agent check on --agent-port */
bool pl_srv_agent_start(pl_srv *s);
void pl_srv_agent_stop(pl_srv *s);
/* The agent's answer (a line ending in "\n") for this occupancy and state. */
void pl_srv_agent_line(const pl_occupancy *o, bool draining, bool failed, char *out, size_t cap);

/* metrics_text.c */
/* Prometheus text of the snapshot; caller frees. */
char *pl_srv_metrics_text(pl_srv *s, const pl_srv_snapshot *snap, size_t *out_len);
/* The latency buckets of kind (upper bounds, seconds). */
const double *pl_srv_buckets(pl_latency kind, size_t *out_n);

#endif
