/*
 * tools/chat.c - `pagellm chat`: a conversation with a chat model in the terminal.
 *
 * Each line read is a user message. The whole conversation (the --system message, then every
 * user and assistant turn) is rendered with the model's chat template and submitted through
 * pl_engine_submit_chat_json each turn, so the prompt is exactly what the template makes of
 * the history; the reply streams to stdout as it is generated and joins the history as the
 * assistant's message (its text as printed, the end-of-turn token not included).
 *
 * On a terminal a "> " prompt is shown; on a pipe nothing but the replies is printed (one
 * per line in text mode, one JSON record per reply with --json), which is how scripts and
 * tests drive it. Ctrl-C stops the reply being generated (it is kept, cut, in the history)
 * and the chat goes on; at the prompt it only clears the line. /exit, /quit or end of input
 * (Ctrl-D) leave; /reset forgets the conversation but the system message.
 */
#include <errno.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "commands.h"

static void usage(void) {
    printf("usage: pagellm chat --model PATH [--tokenizer PATH] [--system TEXT] [--json]\n"
           "                    [chat flags] [sampling flags] [engine flags]\n\n"
           "A conversation with a chat model: each line of input is a user message; the reply\n"
           "streams as it is generated. The conversation is rendered with the model's chat\n"
           "template (or --chat-template) every turn.\n\n"
           "  --system TEXT   a system message first in the conversation\n"
           "  --json          one JSON object per reply instead of its streamed text: turn,\n"
           "                  prompt_token_ids, output_token_ids, text, finish_reason, usage\n\n"
           "In the chat: /exit or /quit (or Ctrl-D) leaves, /reset starts a new conversation\n"
           "(keeping --system); Ctrl-C stops the reply being generated and the chat goes on.\n"
           "Without a terminal, no prompt is shown and each reply ends with a newline. The\n"
           "exit status is 1 when a turn failed (its message is on stderr).\n\n");
    cli_print_chat_flags();
    cli_print_sampling_flags();
    cli_print_engine_flags();
}

/* ------------------------------------------------------------------------------------------
 * Ctrl-C: stops a reply, never the chat
 * ---------------------------------------------------------------------------------------- */

static volatile sig_atomic_t g_interrupted;

static void on_sigint(int sig) {
    (void)sig;
    g_interrupted = 1;
}

/* At the prompt without SA_RESTART: a Ctrl-C ends the blocked read (EINTR), clearing the
 * line. During a reply with it: a write to the terminal cut by the signal is restarted, so
 * no streamed text is lost. */
static void catch_sigint(bool restart) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sa.sa_flags = restart ? SA_RESTART : 0;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

/* ------------------------------------------------------------------------------------------
 * The conversation
 * ---------------------------------------------------------------------------------------- */

typedef struct chat {
    pl_engine *e;
    const pl_chat_options *opt;
    const pl_sampling_params *sp;
    const char *system;
    json_t *messages; /* the history, in OpenAI's shape */
    bool json, interactive;
    int turn;
} chat;

static bool add_message(json_t *msgs, const char *role, const char *content) {
    json_t *m = json_pack("{s:s, s:s}", "role", role, "content", content);
    if (!m) { /* content that is not UTF-8: the template cannot take it either */
        m = json_pack("{s:s, s:s}", "role", role, "content", "");
        if (!m) return false;
    }
    return json_array_append_new(msgs, m) == 0;
}

static void reset(chat *c) {
    json_array_clear(c->messages);
    if (c->system) add_message(c->messages, "system", c->system);
}

static json_t *ids_json(const int32_t *ids, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    return a;
}

static void print_record(const chat *c, const pl_completion *done) {
    json_t *r = json_object();
    json_object_set_new(r, "turn", json_integer(c->turn));
    json_object_set_new(r, "prompt_token_ids", ids_json(done->prompt_ids, done->n_prompt_ids));
    json_object_set_new(r, "output_token_ids", ids_json(done->output_ids, done->n_output_ids));
    json_t *t = json_string(done->text ? done->text : "");
    json_object_set_new(r, "text", t ? t : json_string("(not valid UTF-8)"));
    json_object_set_new(r, "finish_reason", json_string(pl_finish_reason_name(done->finish_reason)));
    json_t *u = json_object();
    json_object_set_new(u, "prompt_tokens", json_integer((json_int_t)done->n_prompt_ids));
    json_object_set_new(u, "completion_tokens", json_integer((json_int_t)done->n_output_ids));
    json_object_set_new(r, "usage", u);
    char *s = json_dumps(r, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (s) printf("%s\n", s);
    free(s);
    json_decref(r);
}

/* Steps the one request until it finishes, streaming its text (text mode), and gives its
 * text (malloc'd, NULL when the reply failed). Returns false on an engine failure. */
static bool run_reply(chat *c, pl_request_id id, char **out_text) {
    *out_text = NULL;
    bool aborted = false, ok = true;
    while (pl_engine_has_pending_work(c->e)) {
        if (g_interrupted && !aborted) {
            pl_engine_abort(c->e, id); /* NOT_FOUND: it has just finished */
            aborted = true;
        }
        pl_step_result r = {0};
        pl_status s = pl_engine_step(c->e, &r);
        if (s != PL_OK) {
            fprintf(stderr, "\npagellm chat: %s (%s)\n", pl_last_error(), pl_status_name(s));
            ok = false;
            if (s != PL_ERR_BACKEND) break; /* nothing to report */
        }
        if (!c->json) {
            for (size_t i = 0; i < r.n_deltas; i++)
                fwrite(r.deltas[i].text, 1, r.deltas[i].text_len, stdout);
            fflush(stdout);
        }
        for (size_t i = 0; i < r.n_finished; i++) {
            const pl_completion *done = &r.finished[i];
            if (done->id != id) continue;
            if (c->json) print_record(c, done);
            else putchar('\n');
            fflush(stdout);
            if (done->finish_reason == PL_FINISH_ERROR) {
                fprintf(stderr, "pagellm chat: the reply failed\n");
                ok = false;
            } else {
                *out_text = strdup(done->text ? done->text : "");
            }
        }
    }
    if (aborted) fprintf(stderr, "pagellm chat: reply stopped (Ctrl-C)\n");
    g_interrupted = 0;
    return ok;
}

/* One user message: submit the conversation, stream the reply, keep both. Returns false when
 * the turn failed (the message and the conversation are left as they were). */
static bool turn(chat *c, const char *line) {
    if (!add_message(c->messages, "user", line)) return false;
    char *msgs = json_dumps(c->messages, JSON_COMPACT);
    pl_request_id id = 0;
    pl_status s = msgs ? pl_engine_submit_chat_json(c->e, msgs, c->opt, c->sp, &id)
                       : PL_ERR_OUT_OF_MEMORY;
    free(msgs);
    if (s != PL_OK) {
        fprintf(stderr, "pagellm chat: %s (%s)%s\n", pl_last_error(), pl_status_name(s),
                s == PL_ERR_TOO_LONG ? "; /reset starts a new conversation" : "");
        json_array_remove(c->messages, json_array_size(c->messages) - 1);
        return false;
    }
    char *reply;
    bool ok = run_reply(c, id, &reply);
    if (!reply) {
        json_array_remove(c->messages, json_array_size(c->messages) - 1);
        return false;
    }
    add_message(c->messages, "assistant", reply);
    free(reply);
    c->turn++;
    return ok;
}

/* Reads lines until /exit or the end of input. Returns the exit status. */
static int converse(chat *c) {
    if (c->interactive)
        fprintf(stderr, "pagellm chat: /exit or Ctrl-D leaves, /reset starts over, Ctrl-C stops "
                        "a reply\n");
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    for (;;) {
        if (c->interactive) {
            fputs("> ", stdout);
            fflush(stdout);
        }
        errno = 0;
        catch_sigint(false);
        ssize_t n = getline(&line, &cap, stdin);
        catch_sigint(true);
        if (n < 0) {
            if (errno == EINTR && g_interrupted) { /* Ctrl-C at the prompt: a fresh line */
                g_interrupted = 0;
                clearerr(stdin);
                if (c->interactive) fputs("\n", stdout);
                continue;
            }
            if (c->interactive) fputs("\n", stdout);
            break;
        }
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
        if (line[strspn(line, " \t")] == '\0') continue; /* a blank line is no message */
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
        if (!strcmp(line, "/reset")) {
            reset(c);
            if (c->interactive) fprintf(stderr, "pagellm chat: a new conversation\n");
            continue;
        }
        if (strlen(line) != (size_t)n) {
            fprintf(stderr, "pagellm chat: a line with a NUL byte is not a message\n");
            rc = 1;
            continue;
        }
        g_interrupted = 0;
        if (!turn(c, line)) rc = 1;
    }
    free(line);
    return rc;
}

/* A model that cannot chat is refused before the first line is read. */
static bool check_template(pl_engine *e, const pl_chat_options *opt) {
    char *text = NULL;
    pl_status s = pl_engine_apply_chat_template_json(
        e, "[{\"role\": \"user\", \"content\": \"hello\"}]", opt, &text, NULL);
    pl_free_text(text);
    if (s == PL_OK || s == PL_ERR_INVALID_ARGUMENT) return true; /* a template may raise on
                                                                    this chat, not on all */
    fprintf(stderr, "pagellm chat: %s (%s)%s\n", pl_last_error(), pl_status_name(s),
            s == PL_ERR_NOT_FOUND ? "; --chat-template FILE gives one" : "");
    return false;
}

static int run_chat(int argc, char **argv, pl_engine_config *cfg, pl_sampling_params *sp,
                    pl_chat_options *opt) {
    chat c = {.opt = opt, .sp = sp};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int r = cli_engine_flag(cfg, argc, argv, &i);
        if (r == 0) r = cli_sampling_flag(sp, argc, argv, &i);
        if (r == 0) r = cli_chat_flag(opt, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage();
            return 0;
        } else if (!strcmp(a, "--system") && i + 1 < argc) {
            c.system = argv[++i];
        } else if (!strcmp(a, "--json")) {
            c.json = true;
        } else {
            fprintf(stderr, "pagellm chat: unknown or incomplete flag '%s' (see --help)\n", a);
            return 2;
        }
    }
    if (!cfg->model_path) {
        fprintf(stderr, "pagellm chat: --model is required (a Hugging Face directory of a chat "
                        "model, or a model with --tokenizer and --chat-template)\n");
        return 2;
    }
    if (sp->n != 1) {
        fprintf(stderr, "pagellm chat: --n: a chat has one reply per turn\n");
        return 2;
    }
    int role = cli_rank_role("chat", cfg); /* a tensor-parallel worker does not return */
    if (role) return role;
    if (pl_engine_create(cfg, &c.e) != PL_OK) {
        fprintf(stderr, "pagellm chat: %s\n", pl_last_error());
        return 1;
    }
    int rc = 1;
    if (!pl_engine_tokenizer(c.e)) {
        fprintf(stderr, "pagellm chat: the model has no tokenizer (give --tokenizer)\n");
    } else if (check_template(c.e, opt) && (c.messages = json_array())) {
        reset(&c);
        c.interactive = isatty(STDIN_FILENO);
        g_interrupted = 0;
        rc = converse(&c);
        signal(SIGINT, SIG_DFL);
    }
    json_decref(c.messages);
    pl_engine_destroy(c.e);
    return rc;
}

int cmd_chat(int argc, char **argv) {
    pl_engine_config cfg;
    pl_engine_config_default(&cfg);
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    pl_chat_options opt;
    pl_chat_options_default(&opt);
    int rc = run_chat(argc, argv, &cfg, &sp, &opt);
    pl_chat_options_deinit(&opt);
    pl_sampling_params_deinit(&sp);
    pl_engine_config_deinit(&cfg);
    return rc;
}
