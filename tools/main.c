/*
 * tools/main.c - the pagellm command line: dispatches to a subcommand.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "commands.h"
#include "pagellm.h"

static void usage(FILE *f) {
    fprintf(f,
            "pagellm %s - paged-KV LLM inference\n\n"
            "usage: pagellm COMMAND [flags]   (pagellm help COMMAND for its flags; a flag may be\n"
            "                                  spelt with '_' for '-', as --max_num_seqs)\n\n"
            "commands:\n"
            "  generate    generate text for one prompt, a chat or a JSONL file of prompts\n"
            "  chat        talk with a chat model in the terminal; the reply streams\n"
            "  tokenize    text or a chat to token ids\n"
            "  detokenize  token ids to text\n"
            "  bench       benchmarks: throughput, latency, sweep, roofline, serve, soak\n"
            "  profile     run a workload with profiling on: trace, time per phase and op\n"
            "  quantize    write a model as a GGUF file in another weight type\n"
            "  info        what a model holds: architecture, shapes, parameters, tensor types,\n"
            "              tokenizer, chat template, context, KV bytes per token\n"
            "  perplexity  perplexity over a text; KL divergence from a base model\n"
            "  serve       an OpenAI-compatible HTTP server (completions, chat, streaming)\n"
            "  doctor      checks of this machine: comm (tensor-parallel all-reduce speed)\n"
            "  version     print the version (also --version)\n"
            "  help        this text (also --help, -h); help COMMAND: that command's flags\n",
            pl_version());
}

/* Debian 12's OpenBLAS 0.3.21 does not know AMD Zen 4/5 and runs its AVX2 kernels there, at
 * 35-55% of the speed of its AVX-512 ones (large prefill matmuls, and the GEMM peak that `bench
 * roofline` reports). It reads OPENBLAS_CORETYPE only while loading, before main, so the
 * command runs itself again with the variable set. A value the user set is kept. */
static void select_openblas_kernels(char **argv) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (getenv("OPENBLAS_CORETYPE")) return;
    __builtin_cpu_init();
    if (!__builtin_cpu_is("amd") || !__builtin_cpu_supports("avx512f") ||
        !__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512dq") ||
        !__builtin_cpu_supports("avx512vl"))
        return;
    if (setenv("OPENBLAS_CORETYPE", "SkylakeX", 1) != 0) return;
    execv("/proc/self/exe", argv); /* only returns on failure: go on with what OpenBLAS chose */
#else
    (void)argv;
#endif
}

/* The subcommands, for dispatch and for "did you mean". */
static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
} COMMANDS[] = {
    {"generate", cmd_generate},     {"chat", cmd_chat},         {"tokenize", cmd_tokenize},
    {"detokenize", cmd_detokenize}, {"bench", pl_bench_main},   {"profile", pl_bench_profile_main},
    {"quantize", cmd_quantize},     {"serve", pl_serve_main},   {"info", cmd_info},
    {"doctor", cmd_doctor},         {"perplexity", cmd_perplexity},
};
#define N_COMMANDS (sizeof COMMANDS / sizeof COMMANDS[0])

/* argv[0] is the command's name, the rest its flags. */
static int dispatch(int argc, char **argv) {
    const char *cmd = argv[0];
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("pagellm %s\n", pl_version());
        printf("tensor parallelism: %s\n", pl_distributed_backends());
        return 0;
    }
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        if (argc < 2 || !strcmp(argv[1], "help")) {
            usage(stdout);
            return 0;
        }
        /* "help generate" is "generate --help"; "help bench serve" is "bench serve --help" */
        char **help_argv = calloc((size_t)argc + 1, sizeof *help_argv);
        if (!help_argv) return 1;
        for (int i = 1; i < argc; i++) help_argv[i - 1] = argv[i];
        help_argv[argc - 1] = "--help";
        int rc = dispatch(argc, help_argv);
        free(help_argv);
        return rc;
    }
    const char *names[N_COMMANDS + 2];
    for (size_t i = 0; i < N_COMMANDS; i++) {
        if (!strcmp(cmd, COMMANDS[i].name)) return COMMANDS[i].run(argc - 1, argv + 1);
        names[i] = COMMANDS[i].name;
    }
    names[N_COMMANDS] = "version";
    names[N_COMMANDS + 1] = "help";
    const char *near = cli_closest(cmd, names, N_COMMANDS + 2);
    fprintf(stderr, "pagellm: unknown command '%s'", cmd);
    if (near) fprintf(stderr, " (did you mean '%s'?)", near);
    fprintf(stderr, "\n\n");
    usage(stderr);
    return 2;
}

int main(int argc, char **argv) {
    select_openblas_kernels(argv);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    return dispatch(argc - 1, argv + 1);
}
