/*
 * server/serve.c - `pagellm serve`: start the engine and the threads, wait for SIGTERM or
 * SIGINT, drain, stop.
 *
 * The drain: new requests get 503 (and /health says "draining"); requests already accepted
 * run until they finish or --drain-timeout passes; the rest are aborted, and each of those
 * is still answered (a 503 error object, or an error event and [DONE] on a stream) before the
 * daemon stops. A second signal skips the wait. The exit status is 0: stopping on a signal
 * is how a server ends. A lost backend (a device fault: pl_engine_health) ends it too, since
 * no request can run any more: the stepping thread has answered every request with an error,
 * /health says "failed" (503), and the daemon drains and exits with status 3 so a
 * supervisor restarts it.
 *
 * Signals arrive through a handler that writes their number to a pipe the main thread reads:
 * blocking them and calling sigwait would not do, because threads this thread did not make
 * (OpenBLAS starts its own when the library loads) leave them unblocked, and the kernel
 * hands a process's signal to any thread that does not block it.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "server/server.h"
#include "server/srv.h"

/* Idle keep-alive connections each hold a descriptor: take what the hard limit allows. */
static void raise_fd_limit(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

static int g_signal_pipe[2] = {-1, -1}; /* the handler's only state */

static void on_signal(int sig) {
    int saved = errno;
    unsigned char b = (unsigned char)sig;
    if (write(g_signal_pipe[1], &b, 1) < 0) { /* full: a signal is pending anyway */ }
    errno = saved;
}

static bool catch_signals(void) {
    if (pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return false;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    return true;
}

/* The handlers stay: a signal that arrives while the process exits (a supervisor's SIGTERM
 * right after the drain) must not turn a clean exit into death by that signal. With the pipe
 * closed they write to nothing. */
static void release_signals(void) {
    int fds[2] = {g_signal_pipe[0], g_signal_pipe[1]};
    g_signal_pipe[0] = g_signal_pipe[1] = -1; /* before closing: no write into a reused fd */
    for (int i = 0; i < 2; i++)
        if (fds[i] >= 0) close(fds[i]);
}

/* The next signal's number, waiting at most timeout_s (< 0: for ever); 0 when none came. */
static int next_signal(double timeout_s) {
    struct pollfd p = {.fd = g_signal_pipe[0], .events = POLLIN};
    int ms = timeout_s < 0 ? -1 : (int)(timeout_s * 1e3);
    if (poll(&p, 1, ms) <= 0) return 0;
    unsigned char b = 0;
    return read(g_signal_pipe[0], &b, 1) == 1 ? b : 0;
}

static size_t registry_size(pl_srv *s) {
    pthread_mutex_lock(&s->reg_mu);
    size_t n = s->reg.n;
    pthread_mutex_unlock(&s->reg_mu);
    return n;
}

/* Waits until nothing is in flight, at most until deadline; returns early (true) on a
 * signal. */
static bool wait_quiet(pl_srv *s, double deadline) {
    while (pl_srv_now() < deadline) {
        if (atomic_load(&s->active) == 0 && registry_size(s) == 0) return false;
        if (next_signal(0.02)) return true;
    }
    return false;
}

static void drain(pl_srv *s) {
    atomic_store(&s->draining, true);
    double t0 = pl_srv_now();
    size_t running = registry_size(s);
    pl_srv_log("INFO", "draining: %d request(s) in flight, %zu in the engine; new ones get 503 "
               "(at most %.0f s; a second signal aborts at once)", atomic_load(&s->active),
               running, s->opt.drain_timeout);
    bool again = wait_quiet(s, t0 + s->opt.drain_timeout);
    size_t left = registry_size(s);
    if (left > 0) {
        pl_srv_log("INFO", "%s: aborting %zu request(s) still in the engine",
                   again ? "second signal" : "--drain-timeout passed", left);
        pl_srv_abort_all(s);
    }
    /* Every engine request is finished before the daemon stops: only those keep a connection
     * suspended, and libmicrohttpd must not be stopped with one. Aborting again catches a
     * request whose body was still arriving when the drain began. */
    double end = pl_srv_now() + 60.0, next_abort = 0;
    while (registry_size(s) > 0 && pl_srv_now() < end) {
        if (pl_srv_now() >= next_abort) {
            pl_srv_abort_all(s);
            next_abort = pl_srv_now() + 0.5;
        }
        nanosleep(&(struct timespec){0, 20000000}, NULL);
    }
    /* the aborted are answered (503 / an error event); a client that reads nothing is not
     * waited for long */
    end = pl_srv_now() + 5.0;
    while (atomic_load(&s->active) > 0 && pl_srv_now() < end)
        nanosleep(&(struct timespec){0, 20000000}, NULL);
    pl_srv_log("INFO", "drained in %.2f s; %llu request(s) served since start", pl_srv_now() - t0,
               (unsigned long long)atomic_load(&s->served));
}

/* --served-model-name, else --model as given (as vLLM names it). */
static void model_name(pl_srv *s, const char *model_path) {
    const char *name = s->opt.served_model_name ? s->opt.served_model_name : model_path;
    snprintf(s->model_name, sizeof s->model_name, "%s", name);
}

/* The text of --chat-template (a file, or the template itself; NULL: unset), else the
 * tokenizer's template for tools. Caller frees. */
static char *template_text(const pl_srv *s, const pl_engine_config *cfg) {
    const char *v = cfg->chat_template;
    if (!v) {
        const char *t = pl_tokenizer_chat_template(s->tok, "tool_use");
        if (!t) t = pl_tokenizer_chat_template(s->tok, NULL);
        return t ? strdup(t) : NULL;
    }
    FILE *f = fopen(v, "rb");
    if (!f) return strdup(v);
    char *text = NULL;
    size_t len = 0, cap = 0, got;
    char chunk[4096];
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0 && len < (1u << 24)) {
        if (len + got + 1 > cap) {
            cap = 2 * (len + got + 1);
            char *g = realloc(text, cap);
            if (!g) break;
            text = g;
        }
        memcpy(text + len, chunk, got);
        len += got;
        text[len] = '\0';
    }
    fclose(f);
    return text;
}

/* --tool-call-parser: a syntax as given, none, or auto: the one the chat template writes. */
static void tool_parser(pl_srv *s, const pl_engine_config *cfg) {
    const char *p = s->opt.tool_call_parser;
    if (!strcmp(p, "none")) return;
    if (strcmp(p, "auto") != 0) {
        s->tool_parser = p;
        return;
    }
    char *t = template_text(s, cfg);
    s->tool_parser = pl_reply_tool_parser_for(t);
    free(t);
}

static bool init(pl_srv *s, const pl_srv_options *opt, const pl_engine_config *cfg) {
    s->opt = *opt;
    s->t_start = pl_srv_now();
    s->watch_epfd = s->wake_fd = -1;
    s->agent_fd = s->agent_wake[0] = s->agent_wake[1] = -1;
    if (getrandom(&s->nonce, sizeof s->nonce, 0) != (ssize_t)sizeof s->nonce)
        s->nonce = (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)getpid();
    atomic_init(&s->next_serial, 1);
    pthread_mutex_init(&s->reg_mu, NULL);
    pthread_mutex_init(&s->snap_mu, NULL);
    pthread_cond_init(&s->snap_cv, NULL);
    pthread_mutex_init(&s->conn_mu, NULL);
    pthread_mutex_init(&s->dead_mu, NULL);
    if (pl_engine_create(cfg, &s->e) != PL_OK) {
        pl_srv_log("ERROR", "%s", pl_last_error_as(PL_NAMING_FLAG)); /* serve's flags did it */
        return false;
    }
    pl_engine_model_info(s->e, &s->info);
    s->prefix_caching = cfg->enable_prefix_caching;
    s->memory_threshold = cfg->memory_threshold;
    s->tok = pl_engine_tokenizer(s->e);
    model_name(s, cfg->model_path);
    tool_parser(s, cfg);
    if (!pl_srv_vocab_init(&s->vocab, s->e)) {
        pl_srv_log("ERROR", "out of memory (token strings)");
        return false;
    }
    return true;
}

static void fini(pl_srv *s) {
    pl_srv_agent_stop(s);
    pl_srv_http_stop(s);
    pl_srv_stepper_stop(s);
    pl_srv_watch_stop(s);
    pl_srv_vocab_free(&s->vocab);
    pl_srv_registry_free(&s->reg);
    free(s->resume);
    pl_engine_destroy(s->e);
    pthread_mutex_destroy(&s->reg_mu);
    pthread_mutex_destroy(&s->snap_mu);
    pthread_cond_destroy(&s->snap_cv);
    pthread_mutex_destroy(&s->conn_mu);
    pthread_mutex_destroy(&s->dead_mu);
}

static int serve(const pl_srv_options *opt, const pl_engine_config *cfg) {
    if (!catch_signals()) return 1;
    raise_fd_limit();
    pl_srv *s = calloc(1, sizeof *s);
    if (!s) {
        release_signals();
        return 1;
    }
    int rc = 1;
    if (!init(s, opt, cfg)) goto out;
    if (!pl_srv_watch_start(s) || !pl_srv_stepper_start(s)) {
        pl_srv_log("ERROR", "cannot start the server's threads");
        goto out;
    }
    if (!pl_srv_http_start(s) || !pl_srv_agent_start(s)) goto out;
    char summary[1024];
    cli_model_summary(s->e, summary, sizeof summary);
    pl_srv_log("INFO", "model %s: %s; %d KV blocks of %d tokens%s", s->model_name, summary,
               s->info.kv_blocks, s->info.block_size,
               s->opt.api_key ? "; API key required" : "");
    if (s->info.tensor_parallel_size > 1)
        pl_srv_log("INFO", "tensor parallel: %s", s->info.distributed);
    pl_srv_log("INFO", "KV cache: %s", s->info.kv_sizing ? s->info.kv_sizing : "?");
    if (s->tool_parser || s->opt.reasoning_parser)
        pl_srv_log("INFO", "chat replies read for tool calls: %s; reasoning: %s",
                   s->tool_parser ? s->tool_parser : "no",
                   s->opt.reasoning_parser ? s->opt.reasoning_parser : "no");
    pl_srv_log("INFO", "listening on http://%s%s%s:%d", strchr(s->opt.host, ':') ? "[" : "",
               s->opt.host, strchr(s->opt.host, ':') ? "]" : "", s->port);
    int sig = 0;
    /* a signal, or the engine failing for good (a backend lost to a device fault, a
     * tensor-parallel rank that died or hung) */
    while (!(sig = next_signal(0.1)) && pl_engine_health(s->e) == PL_OK) continue;
    if (!sig) {
        /* for good: new requests are refused from now on, /health says why */
        snprintf(s->failure, sizeof s->failure, "%s", pl_last_error());
        atomic_store(&s->draining, true);
        atomic_store(&s->failed, true);
        pl_srv_log("ERROR", "the engine failed: %s", s->failure);
        /* what is in flight fails at the next step and is answered with the error; the exit
         * status tells whoever started the server (mpirun ends the other ranks) */
        pl_srv_log("ERROR", "stopping: the engine cannot serve any more");
        s->opt.drain_timeout = 2.0;
        drain(s);
        /* a moment more of 503s for health checkers (a balancer polling every second) before
         * the port closes; a signal ends it */
        next_signal(2.0);
        rc = 3;
        goto out;
    }
    pl_srv_log("INFO", "%s received", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    drain(s);
    rc = 0;
out:
    fini(s);
    free(s);
    release_signals();
    return rc;
}

int pl_serve_main(int argc, char **argv) {
    pl_engine_config cfg;
    pl_engine_config_default(&cfg);
    pl_srv_options opt;
    int rc = pl_srv_options_parse(argc, argv, &opt, &cfg);
    if (rc < 0) {
        rc = cli_rank_role("serve", &cfg); /* a tensor-parallel worker ends here */
        if (rc == 0) rc = serve(&opt, &cfg);
    }
    pl_srv_cors_free(&opt.cors);
    pl_engine_config_deinit(&cfg);
    return rc;
}
