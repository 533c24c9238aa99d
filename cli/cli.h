/*
 * cli/cli.h - the command-line layer shared by the pagellm program (tools/) and its benchmark
 * commands (bench/): strict number parsing, the engine and sampling flags (generated from
 * the field tables of pagellm.h, so every field has exactly one flag, help line, range and
 * default), and the prompts file (JSONL) reader.
 *
 * It sees only pagellm.h. Every parse error prints "pagellm: <flag>: <problem>" on stderr;
 * commands then exit 2 (usage) or 1 (runtime failure).
 */
#ifndef PL_CLI_CLI_H
#define PL_CLI_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pagellm.h"

/* Strict parsers: the whole string must be a number within [lo, hi]. Print the error naming
 * flag and return false on failure. */
bool cli_int(const char *flag, const char *s, long long lo, long long hi, long long *out);
bool cli_float(const char *flag, const char *s, double lo, double hi, double *out);

/* If argv[*i] is the flag of a field of pl_engine_config ("--block-size N",
 * "--block-size=N", a short flag "-m PATH", for booleans "--enable-prefix-caching" and
 * "--no-prefix-caching"), sets that field (advancing *i past a separate value) and returns
 * 1; returns 0 when it is not an engine flag, -1 on a missing or refused value (message
 * printed). String fields point into argv (which lives as long as the process); list
 * fields are copied into cfg's storage: pl_engine_config_deinit frees them. */
int cli_engine_flag(pl_engine_config *cfg, int argc, char **argv, int *i);
/* The same for the fields of pl_sampling_params (--max-tokens, -n, --temperature, ...;
 * --stop and --stop-id add to their lists: pl_sampling_params_deinit frees them). */
int cli_sampling_flag(pl_sampling_params *p, int argc, char **argv, int *i);
/* On stdout, one entry per flag: short and long form, value, help, choices and default. */
void cli_print_engine_flags(void);
void cli_print_sampling_flags(void);

/* The most stop strings a prompts file line may give (the table's limit). */
#define CLI_MAX_STOP 64

/* One prompt of a prompts file: text or ids, with its sampling parameters. */
typedef struct cli_prompt {
    char *text;           /* NULL when ids are given */
    int32_t *ids;
    size_t n_ids;
    size_t line;                /* the file line it came from (from 1); 0 when not from a file */
    pl_sampling_params params;  /* never deinit: its storage is the defaults' */
    char **stop_storage;        /* (n_stop_storage) owned copies params.stop points at */
    size_t n_stop_storage;
} cli_prompt;

/* Reads a JSONL file ("-": standard input, named <stdin> in messages): one object per line
 * with "prompt" (string) or "prompt_token_ids" (array of ints), and optional sampling fields
 * (max_tokens, min_tokens, temperature, top_p, top_k, min_p, seed, ignore_eos, n, stop
 * (string or array), priority, repetition_penalty, presence_penalty, frequency_penalty) that
 * override defaults; any other key is an error. Blank lines are skipped. On failure returns
 * false with "FILE:LINE: problem" in err ("FILE: problem" when no line is at fault: the file
 * cannot be opened or read (with strerror's reason) or holds no prompt). */
bool cli_prompts_load(const char *path, const pl_sampling_params *defaults, cli_prompt **out,
                      size_t *out_n, char *err, size_t err_cap);
/* Same, from a buffer (the fuzz target's entry point); name is used in messages. */
bool cli_prompts_parse(const char *name, const char *data, size_t len,
                       const pl_sampling_params *defaults, cli_prompt **out, size_t *out_n,
                       char *err, size_t err_cap);
void cli_prompts_free(cli_prompt *p, size_t n);

#endif
