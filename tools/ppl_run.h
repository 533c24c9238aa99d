/*
 * tools/ppl_run.h - `pagellm perplexity` without its command line (tools/perplexity.c parses
 * the flags; tests call ppl_run directly).
 */
#ifndef PL_TOOLS_PPL_RUN_H
#define PL_TOOLS_PPL_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pagellm.h"
#include "ppl_stats.h"

typedef struct ppl_opts {
    pl_engine_config cfg;    /* the model under test and the engine flags; the base model
                                runs with the same flags */
    const char *text_path;   /* the text (UTF-8); NULL: the base logits file's windows */
    const int32_t *ids;      /* instead of a text (tests): token ids as the tokenizer would
                                give them (BOS first where the model has one) */
    size_t n_ids;
    int ctx;                 /* tokens per window; 0: 512, or the logits file's */
    int batch;               /* tokens the engine computes per step */
    int max_windows;         /* 0: every whole window of the text */
    const char *base;        /* a model, or a file written with save_logits; NULL: none */
    const char *save_logits; /* write the model's log-probabilities here; NULL: no */
    int stats_threads;       /* threads that score tokens; 0: one per online CPU */
    bool progress;           /* a progress bar on stderr (when it is a terminal) */
    FILE *out;               /* the figures (stdout) */
} ppl_opts;

typedef struct ppl_result {
    ppl_summary summary;
    bool has_base;
    int n_windows, ctx;
    double seconds;          /* the model under test's forward passes */
    double tokens_per_s;     /* of those: windows x (ctx - 1) tokens / seconds */
} ppl_result;

/* Runs the windows and prints the figures. Every check of the input (an empty, unreadable or
 * non-UTF-8 text, fewer tokens than one window, a window longer than the model's context, a
 * base with another vocabulary, a malformed logits file) happens before any window runs, and
 * is reported on stderr naming the flag or file. Returns the exit status: 0, 1 (a failure
 * while running), 2 (refused input). res may be NULL. */
int ppl_run(const ppl_opts *o, ppl_result *res);

#endif
