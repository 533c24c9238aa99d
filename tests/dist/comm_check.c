/*
 * tests/dist/comm_check.c - the communicator cases under mpirun (tests/dist/test_comm_mpi.py
 * drives it with 1-4 ranks):
 *
 *   comm_check cases   every case of comm_cases.c on the MPI communicator; rank 0 then runs
 *                      the same cases on the threads communicator with as many ranks in this
 *                      process and compares the digests: MPI equals the in-process reference
 *                      bit for bit. Prints "digest RANK HEX" per rank.
 *   comm_check kill K  rank K kills itself (SIGKILL) before an all-reduce; every other rank's
 *                      all-reduce must fail within the timeout (1 s) naming its rank, the
 *                      operation and rank K: it prints the message and exits 3.
 *   comm_check hang K  the same with rank K stopped (SIGSTOP) instead.
 * Exit status: 0 when every check held, 1 otherwise (the reason on stderr).
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm_cases.h"
#include "util/timer.h"

typedef struct tjob {
    pl_comm_threads_world *w;
    int rank;
    bool ok;
    uint64_t digest;
    char err[512];
} tjob;

static void *thread_rank(void *arg) {
    tjob *j = arg;
    pl_comm *c;
    if (pl_comm_threads_create(j->w, j->rank, &c) != PL_OK) {
        snprintf(j->err, sizeof j->err, "%s", pl_last_error());
        return NULL;
    }
    j->ok = comm_cases_run(c, &j->digest, j->err, sizeof j->err);
    pl_comm_destroy(c);
    return NULL;
}

/* The same cases on size threads: the digest of rank 0. */
static bool threads_reference(int size, uint64_t *out) {
    pl_comm_threads_world *w;
    if (pl_comm_threads_world_create(size, 60.0, &w) != PL_OK) return false;
    tjob jobs[64] = {{0}};
    pthread_t t[64];
    for (int r = 0; r < size; r++) {
        jobs[r] = (tjob){.w = w, .rank = r};
        pthread_create(&t[r], NULL, thread_rank, &jobs[r]);
    }
    bool ok = true;
    for (int r = 0; r < size; r++) {
        pthread_join(t[r], NULL);
        if (!jobs[r].ok) {
            fprintf(stderr, "threads reference, rank %d: %s\n", r, jobs[r].err);
            ok = false;
        }
    }
    *out = jobs[0].digest;
    return ok;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: comm_check cases | kill RANK | hang RANK\n");
        return 2;
    }
    bool cases = !strcmp(argv[1], "cases");
    int victim = argc > 2 ? atoi(argv[2]) : -1;
    pl_comm *c;
    if (pl_comm_mpi_create(cases ? 60.0 : 1.0, &c) != PL_OK) {
        fprintf(stderr, "mpi: %s\n", pl_last_error());
        return 1;
    }
    if (cases) {
        uint64_t d = 0, ref = 0;
        char err[512];
        if (!comm_cases_run(c, &d, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        printf("digest %d %016llx\n", c->rank, (unsigned long long)d);
        fflush(stdout);
        if (c->rank == 0) {
            if (!threads_reference(c->size, &ref)) return 1;
            if (ref != d) {
                fprintf(stderr, "MPI digest %016llx differs from the threads reference %016llx\n",
                        (unsigned long long)d, (unsigned long long)ref);
                return 1;
            }
            printf("threads reference %016llx: equal\n", (unsigned long long)ref);
        }
        pl_comm_barrier(c);
        pl_comm_destroy(c);
        return 0;
    }
    float x[4097];
    for (int i = 0; i < 4097; i++) x[i] = (float)i;
    /* one collective that works first, so the failure is not at start-up */
    if (pl_comm_all_reduce_sum(c, x, 4097) != PL_OK) {
        fprintf(stderr, "first all_reduce: %s\n", pl_last_error());
        return 1;
    }
    if (c->rank == victim) raise(!strcmp(argv[1], "kill") ? SIGKILL : SIGSTOP);
    uint64_t t0 = pl_now_ns();
    pl_status s = pl_comm_all_reduce_sum(c, x, 4097);
    double secs = (double)(pl_now_ns() - t0) * 1e-9;
    if (s == PL_OK) {
        fprintf(stderr, "rank %d: the all_reduce succeeded without rank %d\n", c->rank, victim);
        return 1;
    }
    printf("rank %d failed after %.2f s: %s\n", c->rank, secs, pl_last_error());
    fflush(stdout);
    pl_comm_destroy(c); /* broken: MPI is not finalised */
    return 3;
}
