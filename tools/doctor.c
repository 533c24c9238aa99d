/*
 * tools/doctor.c - `pagellm doctor comm`: what the tensor-parallel communicator gives on this
 * machine, measured as nccl-tests' all_reduce_perf reports it: per size, the time of one
 * all-reduce, the algorithm bandwidth (size / time) and the bus bandwidth (what each link
 * carries: algbw x 2 (N - 1) / N), and whether every element came back right. Under mpirun
 * every rank runs it; rank 0 prints.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "commands.h"

static void usage(void) {
    printf("usage: pagellm doctor comm [flags]\n\n"
           "All-reduces (sum, f32) of doubling sizes over the ranks of tensor parallelism: the\n"
           "threads of this process, or every rank of `mpirun -n N pagellm doctor comm\n"
           "--tensor-parallel-size N`. Prints latency, algorithm and bus bandwidth per size, as\n"
           "nccl-tests does, and checks every result.\n\n"
           "flags:\n"
           "  --tensor-parallel-size N    ranks [2]\n"
           "  --distributed-backend NAME  auto, mpi, nccl, threads [auto]\n"
           "  --distributed-timeout S     seconds a collective may wait [10]\n"
           "  --backend NAME              cuda with nccl (device buffers) [cpu]\n"
           "  --min-bytes N               smallest size [8]\n"
           "  --max-bytes N               largest size [16777216]\n"
           "  --iters N                   timed all-reduces per size [20]\n");
}

static int doctor_comm(int argc, char **argv) {
    pl_engine_config cfg;
    pl_engine_config_default(&cfg);
    cfg.model_path = "dummy:tiny"; /* no model is loaded; the config only has to validate */
    cfg.tensor_parallel_size = 2;
    long long lo = 8, hi = 16 << 20, iters = 20;
    int rc = 2;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int r = cli_engine_flag(&cfg, argc, argv, &i);
        if (r < 0) goto out;
        if (r > 0) continue;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage();
            rc = 0;
            goto out;
        } else if (!strcmp(a, "--min-bytes") && i + 1 < argc) {
            if (!cli_int("--min-bytes", argv[++i], 4, 1ll << 32, &lo)) goto out;
        } else if (!strcmp(a, "--max-bytes") && i + 1 < argc) {
            if (!cli_int("--max-bytes", argv[++i], 4, 1ll << 32, &hi)) goto out;
        } else if (!strcmp(a, "--iters") && i + 1 < argc) {
            if (!cli_int("--iters", argv[++i], 1, 100000, &iters)) goto out;
        } else {
            fprintf(stderr, "pagellm doctor comm: unknown or incomplete flag '%s' (see --help)\n",
                    a);
            goto out;
        }
    }
    if (lo > hi) {
        fprintf(stderr, "pagellm doctor comm: --min-bytes %lld exceeds --max-bytes %lld\n", lo,
                hi);
        goto out;
    }
    size_t sizes[64], n = 0;
    for (long long b = lo; b <= hi && n < 64; b *= 2) sizes[n++] = (size_t)(b + 3) / 4 * 4;
    pl_comm_bench_row rows[64];
    memset(rows, 0, sizeof rows);
    const char *info = "";
    pl_status s = pl_comm_benchmark(&cfg, sizes, n, (int)iters, rows, &info);
    if (s != PL_OK) {
        fprintf(stderr, "pagellm doctor comm: %s\n", pl_last_error());
        rc = s == PL_ERR_INVALID_ARGUMENT ? 2 : 1;
        goto out;
    }
    rc = 0;
    if (rows[0].bytes == 0) goto out; /* a rank other than 0: rank 0 prints */
    printf("# pagellm doctor comm: all-reduce (sum, f32), %s\n", info);
    printf("# %12s %12s %12s %12s %12s %8s\n", "size(B)", "count", "time(us)", "algbw(GB/s)",
           "busbw(GB/s)", "correct");
    bool all_ok = true;
    for (size_t i = 0; i < n; i++) {
        const pl_comm_bench_row *r = &rows[i];
        printf("  %12zu %12zu %12.2f %12.3f %12.3f %8s\n", r->bytes, r->bytes / 4,
               r->seconds * 1e6, r->algbw_gbs, r->busbw_gbs, r->correct ? "yes" : "NO");
        all_ok &= r->correct;
    }
    if (!all_ok) {
        fprintf(stderr, "pagellm doctor comm: an all-reduce gave a wrong sum\n");
        rc = 1;
    }
out:
    pl_engine_config_deinit(&cfg);
    return rc;
}

int cmd_doctor(int argc, char **argv) {
    if (argc < 1 || !strcmp(argv[0], "--help") || !strcmp(argv[0], "-h")) {
        printf("usage: pagellm doctor CHECK [flags]   (pagellm doctor CHECK --help)\n\n"
               "checks:\n"
               "  comm   all-reduce latency and bandwidth of the tensor-parallel ranks\n");
        return argc < 1 ? 2 : 0;
    }
    if (!strcmp(argv[0], "comm")) return doctor_comm(argc - 1, argv + 1);
    fprintf(stderr, "pagellm doctor: unknown check '%s' (comm)\n", argv[0]);
    return 2;
}
