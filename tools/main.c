/*
 * tools/main.c - the pagellm command line: dispatches to a subcommand.
 */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "pagellm.h"

static void usage(FILE *f) {
    fprintf(f,
            "pagellm %s - paged-KV LLM inference\n\n"
            "usage: pagellm COMMAND [flags]   (pagellm COMMAND --help for its flags)\n\n"
            "commands:\n"
            "  generate    generate text for one prompt or a JSONL file of prompts\n"
            "  bench       benchmarks: throughput, latency, sweep, roofline\n"
            "  profile     run a workload with profiling on: trace, time per phase and op\n",
            pl_version());
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version")) {
        printf("pagellm %s\n", pl_version());
        return 0;
    }
    if (!strcmp(cmd, "generate")) return cmd_generate(argc - 2, argv + 2);
    if (!strcmp(cmd, "bench")) return pl_bench_main(argc - 2, argv + 2);
    if (!strcmp(cmd, "profile")) return pl_bench_profile_main(argc - 2, argv + 2);
    fprintf(stderr, "pagellm: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
