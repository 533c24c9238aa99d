/*
 * tools/main.c - the pagellm command line: dispatches to a subcommand.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "pagellm.h"

static void usage(FILE *f) {
    fprintf(f,
            "pagellm %s - paged-KV LLM inference\n\n"
            "usage: pagellm COMMAND [flags]   (pagellm COMMAND --help for its flags)\n\n"
            "commands:\n"
            "  generate    generate text for one prompt, a chat or a JSONL file of prompts\n"
            "  chat        talk with a chat model in the terminal; the reply streams\n"
            "  tokenize    text or a chat to token ids\n"
            "  detokenize  token ids to text\n"
            "  bench       benchmarks: throughput, latency, sweep, roofline, serve, soak\n"
            "  profile     run a workload with profiling on: trace, time per phase and op\n"
            "  quantize    write a model as a GGUF file in another weight type\n"
            "  serve       an OpenAI-compatible HTTP server (completions, chat, streaming)\n"
            "  doctor      checks of this machine: comm (tensor-parallel all-reduce speed)\n"
            "  version     print the version (also --version)\n"
            "  help        this text (also --help, -h)\n",
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

int main(int argc, char **argv) {
    select_openblas_kernels(argv);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
        printf("pagellm %s\n", pl_version());
        printf("tensor parallelism: %s\n", pl_distributed_backends());
        return 0;
    }
    if (!strcmp(cmd, "generate")) return cmd_generate(argc - 2, argv + 2);
    if (!strcmp(cmd, "chat")) return cmd_chat(argc - 2, argv + 2);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 2, argv + 2);
    if (!strcmp(cmd, "detokenize")) return cmd_detokenize(argc - 2, argv + 2);
    if (!strcmp(cmd, "bench")) return pl_bench_main(argc - 2, argv + 2);
    if (!strcmp(cmd, "profile")) return pl_bench_profile_main(argc - 2, argv + 2);
    if (!strcmp(cmd, "quantize")) return cmd_quantize(argc - 2, argv + 2);
    if (!strcmp(cmd, "serve")) return pl_serve_main(argc - 2, argv + 2);
    if (!strcmp(cmd, "doctor")) return cmd_doctor(argc - 2, argv + 2);
    fprintf(stderr, "pagellm: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
