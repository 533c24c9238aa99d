/*
 * bench/bench_main.c - `pagellm bench SUB`: dispatches to the benchmark subcommands.
 */
#include <stdio.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/bench_internal.h"
#include "bench/soak.h"

static void usage(FILE *f) {
    fprintf(f, "usage: pagellm bench SUB [flags]   (pagellm bench SUB --help for its flags)\n\n"
               "  throughput  offline batch benchmark (vLLM's `bench throughput`)\n"
               "  latency     time of one batch, with percentiles (vLLM's `bench latency`)\n"
               "  sweep       throughput against max batch size and prompt/output lengths:\n"
               "              CSV and a plot\n"
               "  roofline    this machine's memory bandwidth and f32 GEMM peak\n"
               "  serve       online benchmark of an OpenAI-compatible server (vLLM's\n"
               "              `bench serve`): TTFT, TPOT, ITL, E2EL at a request rate\n"
               "  soak        10,000 random requests under KV pressure: requests/s, preemptions,\n"
               "              memory\n\n"
               "Every command takes --output-json FILE, and throughput/latency/sweep/soak take\n"
               "--profile FILE (see also `pagellm profile`).\n");
}

int pl_bench_main(int argc, char **argv) {
    if (argc < 1) {
        usage(stderr);
        return 2;
    }
    const char *sub = argv[0];
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(sub, "throughput")) return pl_bench_throughput_main(argc - 1, argv + 1);
    if (!strcmp(sub, "latency")) return pl_bench_latency_main(argc - 1, argv + 1);
    if (!strcmp(sub, "sweep")) return pl_bench_sweep_main(argc - 1, argv + 1);
    if (!strcmp(sub, "roofline")) return pl_bench_roofline_main(argc - 1, argv + 1);
    if (!strcmp(sub, "serve")) return pl_bench_serve_main(argc - 1, argv + 1);
    if (!strcmp(sub, "soak")) return cmd_bench_soak(argc - 1, argv + 1);
    fprintf(stderr, "pagellm bench: unknown benchmark '%s'\n", sub);
    usage(stderr);
    return 2;
}
