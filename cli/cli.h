/*
 * cli/cli.h - the command-line layer shared by the pagellm program (tools/) and its benchmark
 * commands (bench/): strict number parsing, the engine, sampling and chat flags (generated
 * from the field tables of pagellm.h, so every field has exactly one flag, help line, range
 * and default), the files commands read whole (messages, JSON flag values, chat templates),
 * and the prompts file (JSONL) reader.
 *
 * It sees only pagellm.h (and jansson). Every parse error prints "pagellm: <flag>: <problem>"
 * on stderr; commands then exit 2 (usage) or 1 (runtime failure).
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
/* Prints text with the cursor at column col, wrapped before column 100 onto lines that start
 * at column indent, and a newline: the help text of every flag table. */
void cli_wrap(const char *text, int col, int indent);
/* Token ids in s, separated by commas, white space or the brackets of a JSON array
 * ("1,5,9", "[1, 5, 9]"), each in [0, INT32_MAX]: *out (malloc'd, the caller frees) and
 * *out_n >= 1. None, or one that is not such an integer, prints "pagellm: WHAT: ..." and
 * returns false. */
bool cli_id_list(const char *what, const char *s, int32_t **out, size_t *out_n);

/* If argv[*i] is the flag of a field of pl_engine_config ("--block-size N",
 * "--block-size=N", a short flag "-m PATH", for booleans "--enable-prefix-caching" and
 * "--no-prefix-caching"), sets that field (advancing *i past a separate value) and returns
 * 1; returns 0 when it is not an engine flag, -1 on a missing or refused value (message
 * printed). String fields point into argv (which lives as long as the process); list
 * fields are copied into cfg's storage: pl_engine_config_deinit frees them. */
int cli_engine_flag(pl_engine_config *cfg, int argc, char **argv, int *i);
/* The same for the fields of pl_sampling_params (--max-tokens, -n, --temperature, ...;
 * --stop and --stop-id add to their lists: pl_sampling_params_deinit frees them). The
 * constraints: --json-schema takes a file or the JSON text (as the JSON chat flags),
 * --grammar a file or the GBNF text, --choice a comma-separated list (\, for a comma in a
 * choice; the flag may repeat), all copied into p's storage. */
int cli_sampling_flag(pl_sampling_params *p, int argc, char **argv, int *i);
/* The same for the fields of pl_chat_options (--no-generation-prompt, --tools,
 * --chat-template-kwargs, --template-name). A JSON-valued flag takes a file holding the JSON
 * ("-": standard input), or the JSON text itself when no such file exists and it starts with
 * [ or { (as --chat-template takes a file or the template text); the JSON's syntax is checked
 * here, the message naming the flag, the file, line and column. Values are copied into o's
 * storage: pl_chat_options_deinit frees them. */
int cli_chat_flag(pl_chat_options *o, int argc, char **argv, int *i);
/* On stdout, one entry per flag: short and long form, value, help, choices and default. */
void cli_print_engine_flags(void);
void cli_print_sampling_flags(void);
void cli_print_chat_flags(void);

/* Tensor parallelism under mpirun (pagellm.h): on a rank other than 0 runs the worker and
 * exits the process with its status (0, or 1 with the error printed as "pagellm CMD: ...");
 * returns 0 where the command goes on (rank 0, or no launch), 2 when the launch and the
 * flags disagree (the message printed). Call it once the flags are parsed, before reading
 * any input: only rank 0 reads stdin and prompt files. */
int cli_rank_role(const char *cmd, const pl_engine_config *cfg);

/* ---- files read whole. On failure each returns false with "PATH: problem" in err. ---- */

/* The whole file ("-": standard input, named <stdin>) into *out (NUL-terminated; free());
 * *out_len bytes, which may hold NUL bytes. */
bool cli_read_file(const char *path, char **out, size_t *out_len, char *err, size_t err_cap);
/* A chat's messages: a file ("-": standard input) holding a JSON array of objects, each with
 * a string "role" (OpenAI's shape; other members reach the template as written). *out_json:
 * the file's text (free()). Errors name the file, and the line and column of bad JSON. */
bool cli_messages_load(const char *path, char **out_json, char *err, size_t err_cap);
struct json_t;
/* The check of cli_messages_load on a parsed value; why gets the problem. */
bool cli_check_messages(const struct json_t *v, char *why, size_t cap);
/* A JSON flag's value (see cli_chat_flag) as JSON text in *out (free()); err starts with
 * the flag. */
bool cli_json_arg(const char *flag, const char *value, char **out, char *err, size_t err_cap);
/* A chat template flag's value: a regular file's contents, else the value itself when it is
 * template text (holds {{ or {%: the engine's rule for config.chat_template). *out: free(). */
bool cli_template_arg(const char *flag, const char *value, char **out, char *err,
                      size_t err_cap);

/* A grammar flag's value (--grammar): a regular file's contents ("-": standard input), else
 * the value itself when it is grammar text (holds ::=). *out: free(). */
bool cli_grammar_arg(const char *flag, const char *value, char **out, char *err,
                     size_t err_cap);

/* The most stop strings a prompts file line may give (the table's limit). */
#define CLI_MAX_STOP 64

/* One prompt of a prompts file: text, ids or a chat, with its sampling parameters. */
typedef struct cli_prompt {
    char *text;           /* exactly one of text, ids and messages is set */
    int32_t *ids;
    size_t n_ids;
    char *messages;       /* a chat: its messages, tools and chat_template_kwargs as JSON text */
    char *tools;          /* NULL: none given */
    char *chat_template_kwargs;
    size_t line;                /* the file line it came from (from 1); 0 when not from a file */
    /* The defaults with the line's fields set: its storage holds the copies the line made;
     * a list the line did not set still points into the defaults', so they outlive it. */
    pl_sampling_params params;
} cli_prompt;

/* Reads a JSONL file ("-": standard input, named <stdin> in messages): one object per line
 * with "prompt" (string), "prompt_token_ids" (array of ints) or "messages" (a chat: an array
 * of message objects, with optional "tools" (array) and "chat_template_kwargs" (object)),
 * and optional fields of pl_sampling_params by their names (max_tokens, temperature, stop
 * as a string or an array, seed, logprobs, ...: pl_sampling_params_set_json) that override
 * defaults; any other key is an error. Blank lines are skipped. On failure returns
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
