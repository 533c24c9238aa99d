/*
 * tests/soak/bench_soak_main.c - runs `pagellm bench soak` (bench/soak.c) as its own program,
 * so the bench command is built and run small in the test suite (and its full 10,000-request
 * run can be made without the pagellm binary): bench_soak [flags of bench soak].
 */
#include "bench/soak.h"

int main(int argc, char **argv) { return cmd_bench_soak(argc - 1, argv + 1); }
