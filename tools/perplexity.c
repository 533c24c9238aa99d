/*
 * tools/perplexity.c - `pagellm perplexity`: the command line of ppl_run.c (perplexity over a
 * text and KL divergence against a base model, as llama-perplexity computes them).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "commands.h"
#include "ppl_run.h"

static void usage(void) {
    printf("usage: pagellm perplexity --model PATH --file TEXT [--ctx-size N] [--batch-size N]\n"
           "                          [--kl-divergence-base BASE] [--save-logits FILE]\n"
           "                          [--chunks N] [engine flags]\n\n"
           "Perplexity of the model over a text, as llama-perplexity computes it: the text is\n"
           "tokenized (with BOS) and cut into whole windows of --ctx-size tokens, each starting\n"
           "with BOS, and the second half of each window is scored. Prints the running\n"
           "perplexity after each window and \"Final estimate: PPL = P +/- E\" (E the standard\n"
           "error). The windows run through the engine's batching, several at once.\n\n"
           "  --file TEXT           the text (UTF-8)\n"
           "  --ctx-size N (512)    tokens per window, at most the model's context\n"
           "  --batch-size N (2048) tokens computed per engine step; windows run together in\n"
           "                        waves of N / (ctx-size - 1)\n"
           "  --chunks N            score only the first N windows\n"
           "  --kl-divergence-base BASE\n"
           "                        compare with a base: a model (same vocabulary; e.g. the\n"
           "                        F32/F16 file the tested one was quantised from), run in this\n"
           "                        process on the same windows with the same engine flags, or\n"
           "                        a file written by --save-logits (its windows are then the\n"
           "                        ones scored; --file may be left out). Prints per window and\n"
           "                        at the end llama-perplexity's statistics: mean KLD with its\n"
           "                        uncertainty, its percentiles and maximum, \"Same top p\" and\n"
           "                        the RMS of the change in the true token's probability\n"
           "  --save-logits FILE    write this model's log-probabilities at the scored\n"
           "                        positions (4 bytes x vocabulary per position), to be a\n"
           "                        --kl-divergence-base later\n"
           "  --no-progress         no progress bar on stderr\n\n"
           "Refused before anything runs: an empty text, one that is not UTF-8 or shorter than\n"
           "one window, a window longer than the model's context, a base with another\n"
           "vocabulary.\n\n");
    cli_print_engine_flags();
}

int cmd_perplexity(int argc, char **argv) {
    ppl_opts o = {.batch = 2048, .progress = true, .out = stdout};
    pl_engine_config_default(&o.cfg);
    int rc = 2;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long n;
        int r = cli_engine_flag(&o.cfg, argc, argv, &i);
        if (r < 0) goto done;
        if (r > 0) continue;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage();
            rc = 0;
            goto done;
        } else if (!strcmp(a, "--file") && v) {
            o.text_path = argv[++i];
        } else if (!strcmp(a, "--ctx-size")) {
            if (!cli_int(a, v, 4, 1 << 24, &n)) goto done;
            o.ctx = (int)n;
            i++;
        } else if (!strcmp(a, "--batch-size")) {
            if (!cli_int(a, v, 1, 1 << 24, &n)) goto done;
            o.batch = (int)n;
            i++;
        } else if (!strcmp(a, "--chunks")) {
            if (!cli_int(a, v, 1, 1 << 30, &n)) goto done;
            o.max_windows = (int)n;
            i++;
        } else if (!strcmp(a, "--kl-divergence-base") && v) {
            o.base = argv[++i];
        } else if (!strcmp(a, "--save-logits") && v) {
            o.save_logits = argv[++i];
        } else if (!strcmp(a, "--no-progress")) {
            o.progress = false;
        } else {
            fprintf(stderr, "pagellm perplexity: unknown flag or missing value: %s "
                    "(pagellm perplexity --help)\n", a);
            goto done;
        }
    }
    if (!o.cfg.model_path) {
        fprintf(stderr, "pagellm perplexity: --model is required (pagellm perplexity --help)\n");
        goto done;
    }
    if (pl_engine_config_validate(&o.cfg) != PL_OK) {
        fprintf(stderr, "pagellm perplexity: %s\n", pl_last_error());
        goto done;
    }
    o.stats_threads = o.cfg.n_threads;
    rc = ppl_run(&o, NULL);
done:
    pl_engine_config_deinit(&o.cfg);
    return rc;
}
