/*
 * tools/generate.c - `pagellm generate`: text from a model, one prompt or a batch.
 *
 * A single text prompt streams to stdout as it is generated (prompt first, as llama2.c does).
 * A prompts file or --json runs everything as one batch and prints in input order.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "commands.h"

static void usage(void) {
    printf("usage: pagellm generate --model PATH [--tokenizer PATH]\n"
           "                        (--prompt TEXT | --prompt-ids 1,2,3 | --prompts FILE.jsonl)\n"
           "                        [sampling flags] [engine flags] [--json]\n\n");
    cli_print_sampling_flags();
    cli_print_engine_flags();
}

static bool parse_ids(const char *s, int32_t **out, size_t *out_n) {
    size_t cap = 16, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) return false;
    const char *p = s;
    while (*p) {
        char num[32];
        size_t k = 0;
        while (*p && *p != ',' && k < sizeof num - 1) num[k++] = *p++;
        num[k] = '\0';
        long long v;
        if (!cli_int("--prompt-ids", num, 0, INT32_MAX, &v)) {
            free(ids);
            return false;
        }
        if (n == cap) {
            int32_t *g = realloc(ids, 2 * cap * sizeof *ids);
            if (!g) {
                free(ids);
                return false;
            }
            ids = g, cap *= 2;
        }
        ids[n++] = (int32_t)v;
        if (*p == ',') p++;
    }
    if (n == 0) {
        fprintf(stderr, "pagellm: --prompt-ids: no ids given\n");
        free(ids);
        return false;
    }
    *out = ids;
    *out_n = n;
    return true;
}

static void print_json(const pl_completion *c, size_t input_index) {
    json_t *o = json_object();
    json_t *pi = json_array(), *oi = json_array();
    for (size_t i = 0; i < c->n_prompt_ids; i++) json_array_append_new(pi, json_integer(c->prompt_ids[i]));
    for (size_t i = 0; i < c->n_output_ids; i++) json_array_append_new(oi, json_integer(c->output_ids[i]));
    json_object_set_new(o, "index", json_integer((json_int_t)input_index));
    json_object_set_new(o, "sample", json_integer(c->index));
    json_object_set_new(o, "prompt_token_ids", pi);
    json_object_set_new(o, "output_token_ids", oi);
    json_object_set_new(o, "text", json_string(c->text ? c->text : ""));
    json_object_set_new(o, "finish_reason", json_string(pl_finish_reason_name(c->finish_reason)));
    char *s = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (s) printf("%s\n", s);
    free(s);
    json_decref(o);
}

/* Streams one request's text as it is produced. */
static int run_streaming(pl_engine *e, const char *prompt) {
    fputs(prompt, stdout);
    fflush(stdout);
    int rc = 0;
    while (pl_engine_has_pending_work(e)) {
        pl_step_result r;
        if (pl_engine_step(e, &r) != PL_OK) {
            fprintf(stderr, "\npagellm: %s\n", pl_last_error());
            return 1;
        }
        for (size_t i = 0; i < r.n_deltas; i++) fwrite(r.deltas[i].text, 1, r.deltas[i].text_len, stdout);
        for (size_t i = 0; i < r.n_finished; i++)
            if (r.finished[i].finish_reason == PL_FINISH_ERROR) rc = 1;
        fflush(stdout);
    }
    putchar('\n');
    return rc;
}

/* cfg and sp: defaulted by the caller, who deinits them (the flags' lists live there). */
static int generate(int argc, char **argv, pl_engine_config *cfg, pl_sampling_params *sp) {
    const char *prompt = NULL, *ids_arg = NULL, *file = NULL;
    bool json = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int r = cli_engine_flag(cfg, argc, argv, &i);
        if (r == 0) r = cli_sampling_flag(sp, argc, argv, &i);
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
    if ((prompt != NULL) + (ids_arg != NULL) + (file != NULL) != 1) {
        fprintf(stderr, "pagellm generate: give exactly one of --prompt, --prompt-ids, --prompts\n");
        return 2;
    }

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
        if (prompt && !(prompts[0].text = strdup(prompt))) return 1;
        if (ids_arg && !parse_ids(ids_arg, &prompts[0].ids, &prompts[0].n_ids)) {
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
    int rc = 0;
    pl_request_id *ids = calloc(n_prompts, sizeof *ids);
    if (!ids) rc = 1;
    for (size_t i = 0; i < n_prompts && rc == 0; i++) {
        pl_status s = prompts[i].text
            ? pl_engine_submit_request(e, prompts[i].text, &prompts[i].params, &ids[i])
            : pl_engine_submit_tokens(e, prompts[i].ids, prompts[i].n_ids, &prompts[i].params, &ids[i]);
        if (s != PL_OK) {
            fprintf(stderr, "pagellm generate: prompt %zu: %s (%s)\n", i + 1, pl_last_error(),
                    pl_status_name(s));
            rc = 1;
        }
    }
    if (rc == 0 && !json && n_prompts == 1 && prompts[0].text && prompts[0].params.n == 1) {
        rc = run_streaming(e, prompts[0].text);
    } else if (rc == 0) {
        pl_completion *c = NULL;
        size_t n = 0;
        if (pl_engine_run(e, &c, &n) != PL_OK) {
            fprintf(stderr, "pagellm generate: %s\n", pl_last_error());
            rc = 1;
        }
        /* completions come in submit order: map each back to its input line */
        for (size_t k = 0; k < n; k++) {
            size_t input = 0;
            while (input < n_prompts && ids[input] != c[k].id) input++;
            if (c[k].finish_reason == PL_FINISH_ERROR) rc = 1;
            if (json) {
                print_json(&c[k], input);
            } else {
                printf("--- prompt %zu%s", input + 1, c[k].index ? "" : "\n");
                if (c[k].index) printf(" sample %d\n", c[k].index);
                if (prompts[input].text) fputs(prompts[input].text, stdout);
                printf("%s\n", c[k].text);
            }
        }
        pl_completions_free(c, n);
    }
    free(ids);
    pl_engine_destroy(e);
    cli_prompts_free(prompts, n_prompts);
    return rc;
}

int cmd_generate(int argc, char **argv) {
    pl_engine_config cfg;
    pl_engine_config_default(&cfg);
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    int rc = generate(argc, argv, &cfg, &sp);
    pl_sampling_params_deinit(&sp); /* the lists --stop and --stop-id built */
    pl_engine_config_deinit(&cfg);
    return rc;
}
