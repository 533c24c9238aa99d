/*
 * tools/cli.h - shared pieces of the pagellm command line: strict number parsing, the engine
 * flags every command accepts, and the prompts file (JSONL) reader.
 *
 * The command line sees only pagellm.h. Every parse error prints "pagellm: <flag>: <problem>"
 * on stderr; commands then exit 2 (usage) or 1 (runtime failure).
 */
#ifndef PL_TOOLS_CLI_H
#define PL_TOOLS_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pagellm.h"

/* Strict parsers: the whole string must be a number within [lo, hi]. Print the error naming
 * flag and return false on failure. */
bool cli_int(const char *flag, const char *s, long long lo, long long hi, long long *out);
bool cli_float(const char *flag, const char *s, double lo, double hi, double *out);

/* If argv[*i] is an engine flag, parses it (and its value, advancing *i) into cfg and returns
 * 1; returns 0 when it is not an engine flag, -1 on a bad value (message printed). */
int cli_engine_flag(pl_engine_config *cfg, int argc, char **argv, int *i);
/* Same for sampling flags (--max-tokens, --temperature, ...). stop strings point into argv. */
int cli_sampling_flag(pl_sampling_params *p, int argc, char **argv, int *i);
void cli_print_engine_flags(void);
void cli_print_sampling_flags(void);

/* One prompt of a prompts file: text or ids, with its sampling parameters. */
typedef struct cli_prompt {
    char *text;           /* NULL when ids are given */
    int32_t *ids;
    size_t n_ids;
    size_t line;          /* the file line it came from (from 1); 0 when not from a file */
    pl_sampling_params params;
    char *stop_storage[PL_MAX_STOP_STRINGS]; /* owned copies params.stop points at */
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
