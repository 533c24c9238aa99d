/*
 * tools/generate.c - `pagellm generate`: text from a model, one prompt or a batch.
 *
 * One text prompt (n = 1, no --json) streams to stdout as it is generated, prompt first, as
 * llama2.c does; one chat (--messages) streams its reply. A chat is rendered with the model's
 * chat template and submitted through pl_engine_submit_chat_json, as `pagellm chat` does. Otherwise every prompt is submitted at once and each completion is printed
 * (and flushed) the moment it finishes: the output is in finish order, and every record says
 * which prompt it answers by "index" (its place among the prompts, from 0, the number text
 * mode prints too) and "line" (its line in the prompts file). A prompt the engine refuses
 * (too long, an id outside the vocabulary, a sampling value) gets a record holding the error
 * and the others run; the exit status is then 1.
 *
 * Ctrl-C (SIGINT) stops cleanly: what is still running or waiting is aborted through
 * pl_engine_abort and printed with finish reason "abort" (with the output it had), records
 * already printed stay, and the exit status is 130. A second Ctrl-C kills at once.
 */
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench/progress.h"
#include "cli/cli.h"
#include "commands.h"

static void usage(void) {
    printf("usage: pagellm generate --model PATH [--tokenizer PATH]\n"
           "                        (--prompt TEXT | --prompt-ids 1,2,3 | --messages FILE.json |\n"
           "                         --prompts FILE.jsonl)\n"
           "                        [chat flags] [sampling flags] [engine flags] [--json]\n\n"
           "  --prompt TEXT         one prompt: streamed as it is generated (unless --json or\n"
           "                        --n > 1)\n"
           "  --prompt-ids 1,2,3    one prompt as token ids (no BOS added)\n"
           "  --messages FILE.json  one chat: a JSON array of {\"role\", \"content\"} messages (-\n"
           "                        reads standard input) rendered with the model's chat\n"
           "                        template (or --chat-template); the reply streams unless\n"
           "                        --json or --n > 1\n"
           "  --prompts FILE.jsonl  one JSON object per line (- reads standard input):\n"
           "                        \"prompt\", \"prompt_token_ids\" or \"messages\" (a chat, with\n"
           "                        optional \"tools\" and \"chat_template_kwargs\" replacing the\n"
           "                        flags'), and any sampling flag's field, named with _\n"
           "                        (max_tokens, temperature, stop, seed, logprobs, ...;\n"
           "                        other keys are refused, values checked per line)\n"
           "  --json                one JSON object per completion: index, line, sample, id,\n"
           "                        prompt_token_ids, output_token_ids, text, finish_reason,\n"
           "                        usage, timings; or index, line and error for a refused\n"
           "                        prompt\n\n"
           "Completions print as they finish, each under its prompt's index (from 0). A refused\n"
           "prompt prints its error and the rest run (exit 1); Ctrl-C aborts what runs, prints\n"
           "it and exits 130. Without a tokenizer, text mode prints token ids.\n\n");
    cli_print_chat_flags();
    cli_print_sampling_flags();
    cli_print_engine_flags();
}

/* ------------------------------------------------------------------------------------------
 * Ctrl-C
 * ---------------------------------------------------------------------------------------- */

static volatile sig_atomic_t g_interrupted;

static void on_sigint(int sig) {
    (void)sig;
    g_interrupted = 1;
}

/* SA_RESETHAND: the first Ctrl-C asks for a clean stop, a second one kills. */
static void catch_sigint(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
}

/* ------------------------------------------------------------------------------------------
 * Records
 * ---------------------------------------------------------------------------------------- */

typedef struct output {
    bool json;
    bool has_tokenizer;    /* else text mode prints token ids */
    bool stdout_tty;       /* the bar is erased before each record */
    const cli_prompt *prompts;
    const pl_chat_options *chat; /* the flags' chat options */
    pl_progress bar;
} output;

static bool has_tokenizer(const pl_engine *e) {
    int32_t *ids = NULL;
    size_t n = 0;
    if (pl_engine_tokenize(e, "a", &ids, &n) != PL_OK) return false;
    pl_free_ids(ids);
    return true;
}

/* jansson refuses a string that is not UTF-8 (NULL): say so rather than drop the member. */
static json_t *text_json(const char *s) {
    json_t *v = json_string(s ? s : "");
    return v ? v : json_string("(not valid UTF-8)");
}

static json_t *ids_json(const int32_t *ids, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    return a;
}

static void print_ids(const char *what, const int32_t *ids, size_t n) {
    printf("%s:", what);
    for (size_t i = 0; i < n; i++) printf(" %d", ids[i]);
    putchar('\n');
}

/* "--- prompt 3 sample 1 (line 4) [length]": the header of a text-mode record (the sample
 * only for prompts that ask for several). */
static void print_header(const output *o, size_t input, int sample, const char *what) {
    printf("--- prompt %zu", input);
    if (o->prompts[input].params.n > 1) printf(" sample %d", sample);
    if (o->prompts[input].line) printf(" (line %zu)", o->prompts[input].line);
    printf(" [%s]\n", what);
}

static void emit_json(json_t *rec) {
    char *s = json_dumps(rec, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_REAL_PRECISION(9));
    if (s) printf("%s\n", s);
    free(s);
    json_decref(rec);
}

static void begin_record(output *o) {
    if (o->stdout_tty) pl_progress_clear(&o->bar);
}

static void end_record(void) {
    fflush(stdout); /* records reach a pipe as they finish, so an interrupted run keeps them */
}

static void print_completion(output *o, size_t input, const pl_completion *c) {
    begin_record(o);
    const char *reason = pl_finish_reason_name(c->finish_reason);
    if (o->json) {
        json_t *r = json_object();
        json_object_set_new(r, "index", json_integer((json_int_t)input));
        if (o->prompts[input].line)
            json_object_set_new(r, "line", json_integer((json_int_t)o->prompts[input].line));
        json_object_set_new(r, "sample", json_integer(c->index));
        json_object_set_new(r, "id", json_integer((json_int_t)c->id));
        json_object_set_new(r, "prompt_token_ids", ids_json(c->prompt_ids, c->n_prompt_ids));
        json_object_set_new(r, "output_token_ids", ids_json(c->output_ids, c->n_output_ids));
        json_object_set_new(r, "text", text_json(c->text));
        json_object_set_new(r, "finish_reason", json_string(reason));
        json_t *u = json_object(); /* OpenAI's names */
        json_object_set_new(u, "prompt_tokens", json_integer((json_int_t)c->n_prompt_ids));
        json_object_set_new(u, "completion_tokens", json_integer((json_int_t)c->n_output_ids));
        json_object_set_new(u, "total_tokens",
                            json_integer((json_int_t)(c->n_prompt_ids + c->n_output_ids)));
        json_object_set_new(u, "cached_prompt_tokens",
                            json_integer((json_int_t)c->n_cached_prompt_ids));
        json_object_set_new(r, "usage", u);
        json_t *t = json_object();
        json_object_set_new(t, "queue_s", json_real(c->queue_s));
        json_object_set_new(t, "ttft_s", json_real(c->ttft_s));
        json_object_set_new(t, "total_s", json_real(c->total_s));
        json_object_set_new(r, "timings", t);
        json_object_set_new(r, "preemptions", json_integer(c->n_preemptions));
        /* Logprobs hook: when pl_completion carries per-token logprobs (issue 21, API half),
         * a "logprobs" member in OpenAI's shape is added here. */
        emit_json(r);
    } else {
        print_header(o, input, c->index, reason);
        if (o->has_tokenizer) {
            if (o->prompts[input].text) fputs(o->prompts[input].text, stdout);
            printf("%s\n", c->text ? c->text : "");
        } else { /* no text to show: the ids are the output */
            print_ids("prompt ids", c->prompt_ids, c->n_prompt_ids);
            print_ids("output ids", c->output_ids, c->n_output_ids);
        }
    }
    end_record();
}

/* A prompt the engine refused at submit: its record holds the error. */
static void print_refusal(output *o, size_t input, pl_status s, const char *msg) {
    begin_record(o);
    fprintf(stderr, "pagellm generate: prompt %zu", input);
    if (o->prompts[input].line) fprintf(stderr, " (line %zu)", o->prompts[input].line);
    fprintf(stderr, ": %s (%s)\n", msg, pl_status_name(s));
    if (o->json) {
        json_t *r = json_object(), *err = json_object();
        json_object_set_new(r, "index", json_integer((json_int_t)input));
        if (o->prompts[input].line)
            json_object_set_new(r, "line", json_integer((json_int_t)o->prompts[input].line));
        json_object_set_new(err, "status", json_string(pl_status_name(s)));
        json_object_set_new(err, "message", text_json(msg));
        json_object_set_new(r, "error", err);
        emit_json(r);
    } else {
        print_header(o, input, 0, "refused");
        printf("error: %s (%s)\n", msg, pl_status_name(s));
    }
    end_record();
}

/* ------------------------------------------------------------------------------------------
 * Running
 * ---------------------------------------------------------------------------------------- */

/* Streams one request's text as it is produced. */
static int run_streaming(pl_engine *e, const char *prompt, pl_request_id id) {
    fputs(prompt, stdout);
    fflush(stdout);
    int rc = 0;
    bool aborted = false;
    while (pl_engine_has_pending_work(e)) {
        if (g_interrupted && !aborted) {
            pl_engine_abort(e, id); /* NOT_FOUND: it has just finished */
            aborted = true;
        }
        pl_step_result r;
        if (pl_engine_step(e, &r) != PL_OK) {
            fprintf(stderr, "\npagellm generate: %s\n", pl_last_error());
            return 1;
        }
        for (size_t i = 0; i < r.n_deltas; i++) fwrite(r.deltas[i].text, 1, r.deltas[i].text_len, stdout);
        for (size_t i = 0; i < r.n_finished; i++)
            if (r.finished[i].finish_reason == PL_FINISH_ERROR) rc = 1;
        fflush(stdout);
    }
    putchar('\n');
    if (aborted) {
        fprintf(stderr, "pagellm generate: interrupted\n");
        return 130;
    }
    return rc;
}

/* Submits one prompt: text, ids, or a chat with the flags' options (a prompts-file line's own
 * tools and chat_template_kwargs replacing theirs). */
static pl_status submit(pl_engine *e, const cli_prompt *p, const pl_chat_options *chat,
                        pl_request_id *id) {
    if (p->text) return pl_engine_submit_request(e, p->text, &p->params, id);
    if (!p->messages) return pl_engine_submit_tokens(e, p->ids, p->n_ids, &p->params, id);
    pl_chat_options o = *chat; /* a shallow copy: its strings stay the flags' or the line's */
    if (p->tools) o.tools = p->tools;
    if (p->chat_template_kwargs) o.chat_template_kwargs = p->chat_template_kwargs;
    return pl_engine_submit_chat_json(e, p->messages, &o, &p->params, id);
}

/* Request id -> the prompt it came from. */
typedef struct id_entry {
    pl_request_id id;
    size_t input;
} id_entry;

static int cmp_id(const void *a, const void *b) {
    pl_request_id x = ((const id_entry *)a)->id, y = ((const id_entry *)b)->id;
    return (x > y) - (x < y);
}

/* Submits every prompt, then steps until all have finished, printing each record as it
 * comes. Returns the exit status. */
static int run_batch(pl_engine *e, const cli_prompt *prompts, size_t n_prompts, output *o) {
    id_entry *ids = calloc(n_prompts ? n_prompts : 1, sizeof *ids);
    if (!ids) {
        fprintf(stderr, "pagellm generate: out of memory\n");
        return 1;
    }
    size_t n_ids = 0, n_refused = 0, n_failed = 0, n_aborted = 0, n_samples = 0, n_done = 0;
    uint64_t budget = 0;
    for (size_t i = 0; i < n_prompts && !g_interrupted; i++) {
        const cli_prompt *p = &prompts[i];
        pl_request_id id = 0;
        pl_status s = submit(e, p, o->chat, &id);
        if (s != PL_OK) {
            print_refusal(o, i, s, pl_last_error());
            n_refused++;
            continue;
        }
        ids[n_ids++] = (id_entry){.id = id, .input = i};
        n_samples += (size_t)p->params.n;
        budget += (uint64_t)p->params.max_tokens * (uint64_t)p->params.n;
    }
    qsort(ids, n_ids, sizeof *ids, cmp_id);
    pl_progress_start(&o->bar, budget > 0, "output tokens", budget); /* none: all refused */

    int rc = 0;
    bool aborted = false;
    while (pl_engine_has_pending_work(e)) {
        if (g_interrupted && !aborted) {
            /* finished requests answer NOT_FOUND: nothing to do for them */
            for (size_t k = 0; k < n_ids; k++) pl_engine_abort(e, ids[k].id);
            aborted = true;
        }
        pl_step_result r = {0}; /* stays empty if a failed step reports nothing */
        pl_status s = pl_engine_step(e, &r);
        if (s != PL_OK) {
            pl_progress_clear(&o->bar);
            fprintf(stderr, "pagellm generate: %s (%s)\n", pl_last_error(), pl_status_name(s));
            rc = 1;
            /* a backend failure finishes the running requests with reason error, reported
             * in r; anything else leaves nothing to report */
            if (s != PL_ERR_BACKEND) break;
        }
        o->bar.done += r.n_deltas;
        for (size_t k = 0; k < r.n_finished; k++) {
            const pl_completion *c = &r.finished[k];
            id_entry key = {.id = c->id}, *hit = bsearch(&key, ids, n_ids, sizeof *ids, cmp_id);
            if (!hit) continue; /* not ours: cannot happen, nothing to print it under */
            const cli_prompt *p = &prompts[hit->input];
            uint64_t unused = (uint64_t)p->params.max_tokens > c->n_output_ids
                                  ? (uint64_t)p->params.max_tokens - c->n_output_ids : 0;
            o->bar.total = o->bar.total > unused ? o->bar.total - unused : 0; /* given back */
            if (c->finish_reason == PL_FINISH_ERROR) n_failed++;
            if (c->finish_reason == PL_FINISH_ABORT) n_aborted++;
            n_done++;
            snprintf(o->bar.note, sizeof o->bar.note, "%zu/%zu samples", n_done, n_samples);
            print_completion(o, hit->input, c);
        }
        pl_progress_update(&o->bar);
    }
    pl_progress_finish(&o->bar);
    free(ids);
    if (n_refused)
        fprintf(stderr, "pagellm generate: %zu of %zu prompts refused (their records say why)\n",
                n_refused, n_prompts);
    if (n_failed)
        fprintf(stderr, "pagellm generate: %zu of %zu samples failed (finish reason error)\n",
                n_failed, n_samples);
    if (g_interrupted) {
        fprintf(stderr, "pagellm generate: interrupted: %zu of %zu samples aborted, %zu "
                        "finished before\n", n_aborted, n_samples, n_done - n_aborted);
        return 130;
    }
    return rc || n_refused || n_failed ? 1 : 0;
}

/* cfg, sp and chat: defaulted by the caller, who deinits them (the flags' lists live
 * there). */
static int generate(int argc, char **argv, pl_engine_config *cfg, pl_sampling_params *sp,
                    pl_chat_options *chat) {
    const char *prompt = NULL, *ids_arg = NULL, *file = NULL, *messages = NULL;
    bool json = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int r = cli_engine_flag(cfg, argc, argv, &i);
        if (r == 0) r = cli_sampling_flag(sp, argc, argv, &i);
        if (r == 0) r = cli_chat_flag(chat, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage();
            return 0;
        } else if ((!strcmp(a, "--prompt") || !strcmp(a, "-p")) && i + 1 < argc) {
            prompt = argv[++i];
        } else if (!strcmp(a, "--prompt-ids") && i + 1 < argc) {
            ids_arg = argv[++i];
        } else if (!strcmp(a, "--prompts") && i + 1 < argc) {
            file = argv[++i];
        } else if (!strcmp(a, "--messages") && i + 1 < argc) {
            messages = argv[++i];
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else {
            fprintf(stderr, "pagellm generate: unknown or incomplete flag '%s' (see --help)\n", a);
            return 2;
        }
    }
    if (!cfg->model_path) {
        fprintf(stderr, "pagellm generate: --model is required (a file, directory or dummy:NAME)\n");
        return 2;
    }
    if ((prompt != NULL) + (ids_arg != NULL) + (file != NULL) + (messages != NULL) != 1) {
        fprintf(stderr, "pagellm generate: give exactly one of --prompt, --prompt-ids, "
                        "--messages, --prompts\n");
        return 2;
    }

    int role = cli_rank_role("generate", cfg); /* a tensor-parallel worker does not return */
    if (role) return role;
    cli_prompt *prompts = NULL;
    size_t n_prompts = 0;
    char err[512];
    if (file) {
        if (!cli_prompts_load(file, sp, &prompts, &n_prompts, err, sizeof err)) {
            fprintf(stderr, "pagellm generate: %s\n", err);
            return 2;
        }
    } else {
        prompts = calloc(1, sizeof *prompts);
        if (!prompts) return 1;
        n_prompts = 1;
        prompts[0].params = *sp;
        prompts[0].params.storage = NULL; /* sp keeps its own: freed by the caller */
        if (prompt && !(prompts[0].text = strdup(prompt))) {
            cli_prompts_free(prompts, n_prompts);
            return 1;
        }
        if (messages && !cli_messages_load(messages, &prompts[0].messages, err, sizeof err)) {
            fprintf(stderr, "pagellm generate: --messages %s\n", err);
            cli_prompts_free(prompts, n_prompts);
            return 2;
        }
        if (ids_arg && !cli_id_list("--prompt-ids", ids_arg, &prompts[0].ids, &prompts[0].n_ids)) {
            cli_prompts_free(prompts, n_prompts);
            return 2;
        }
    }

    pl_engine *e = NULL;
    if (pl_engine_create(cfg, &e) != PL_OK) {
        fprintf(stderr, "pagellm generate: %s\n", pl_last_error());
        cli_prompts_free(prompts, n_prompts);
        return 1;
    }
    pl_model_info info;
    if (cfg->tensor_parallel_size > 1 && pl_engine_model_info(e, &info) == PL_OK)
        fprintf(stderr, "pagellm generate: tensor parallel: %s\n", info.distributed);
    g_interrupted = 0;
    catch_sigint();
    int rc;
    if (!json && n_prompts == 1 && (prompts[0].text || prompts[0].messages) &&
        prompts[0].params.n == 1) {
        pl_request_id id = 0;
        pl_status s = submit(e, &prompts[0], chat, &id);
        if (s == PL_OK) {
            rc = run_streaming(e, prompts[0].text ? prompts[0].text : "", id);
        } else {
            fprintf(stderr, "pagellm generate: %s (%s)\n", pl_last_error(), pl_status_name(s));
            rc = 1;
        }
    } else {
        output o = {.json = json, .has_tokenizer = has_tokenizer(e),
                    .stdout_tty = isatty(STDOUT_FILENO), .prompts = prompts, .chat = chat};
        rc = run_batch(e, prompts, n_prompts, &o);
    }
    signal(SIGINT, SIG_DFL);
    pl_engine_destroy(e);
    cli_prompts_free(prompts, n_prompts);
    return rc;
}

int cmd_generate(int argc, char **argv) {
    pl_engine_config cfg;
    pl_engine_config_default(&cfg);
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    pl_chat_options chat;
    pl_chat_options_default(&chat);
    int rc = generate(argc, argv, &cfg, &sp, &chat);
    pl_chat_options_deinit(&chat); /* the JSON values the chat flags copied */
    pl_sampling_params_deinit(&sp); /* the lists --stop and --stop-id built */
    pl_engine_config_deinit(&cfg);
    return rc;
}
