/*
 * bench/soak.h - `pagellm bench soak`: the long soak (10,000 random requests through a KV
 * pool small enough to preempt all the time, with random aborts), reporting requests/s,
 * preemptions, peak RSS and memory growth, and checking that every request finished exactly
 * once with a consistent finish reason and that every KV block is free at the end.
 *
 * Sees only include/pagellm.h and cli/cli.h (engine flags). Returns the process exit
 * status: 0 all checks passed, 1 a check or the engine failed, 2 usage error.
 */
#ifndef PL_BENCH_SOAK_H
#define PL_BENCH_SOAK_H

/* argv[0] is the first flag (the arguments after "soak"). */
int cmd_bench_soak(int argc, char **argv);

#endif
