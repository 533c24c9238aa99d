/*
 * bench/bench.h - the entry points of the benchmark and profiling commands, for tools/main.c.
 *
 * Each takes the arguments after its command name (argv[0] is the first flag) and returns the
 * process exit status: 0 success, 1 runtime failure, 2 usage error (the message names the
 * flag). Everything they print goes to stdout (results) or stderr (errors, progress bar).
 * They see only include/pagellm.h and cli/cli.h.
 */
#ifndef PL_BENCH_BENCH_H
#define PL_BENCH_BENCH_H

/* `pagellm bench SUB ...`: SUB is throughput, latency, sweep, roofline, serve or soak. */
int pl_bench_main(int argc, char **argv);
/* `pagellm profile ...`: a workload with profiling on, trace, summary table, overhead. */
int pl_bench_profile_main(int argc, char **argv);

#endif
