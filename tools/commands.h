/*
 * tools/commands.h - the subcommands of the pagellm program. Each returns the exit status:
 * 0 success, 1 runtime failure, 2 usage error.
 */
#ifndef PL_TOOLS_COMMANDS_H
#define PL_TOOLS_COMMANDS_H

int cmd_generate(int argc, char **argv);   /* generate.c */
int cmd_chat(int argc, char **argv);       /* chat.c */
int cmd_tokenize(int argc, char **argv);   /* tokenize.c */
int cmd_detokenize(int argc, char **argv); /* tokenize.c */
int cmd_quantize(int argc, char **argv);   /* quantize.c */
int cmd_doctor(int argc, char **argv);     /* doctor.c */

/* `bench` and `profile` are implemented in bench/ (library pl_bench): pl_bench_main and
 * pl_bench_profile_main, same convention. */
#include "bench/bench.h"
/* `serve` is server/ (library pl_server): pl_serve_main, same convention. */
#include "server/server.h"

#endif
