/*
 * tests/threads/tsan_tp.c - tensor parallelism's threads under ThreadSanitizer (scripts/tsan.sh;
 * a plain program: Criterion's runner cannot start under TSan). Exit 0 when every check passed.
 *
 *   1. the threads communicator: every case of tests/dist/comm_cases.c on 3 ranks, then a
 *      rank that never comes (the others time out, the world is aborted);
 *   2. an engine split over 2 threads (distributed_backend threads) driven as in
 *      tsan_threads: submitters and an aborter against the stepping thread, with a short
 *      timeout so the keep-alive thread sends heartbeats whenever the engine idles; every
 *      completion against a sequential run of the same engine.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_cases.h"
#include "test_support.h"
#include "threads_util.h"

typedef struct job {
    pl_comm_threads_world *w;
    int rank;
    bool skip;
    bool ok;
    uint64_t digest;
    char err[512];
} job;

static void *rank_main(void *arg) {
    job *j = arg;
    pl_comm *c;
    if (pl_comm_threads_create(j->w, j->rank, &c) != PL_OK) return NULL;
    if (j->skip) {
        j->ok = true;
    } else if (j->w && j->digest == 1) { /* the timeout case */
        float x[3] = {1, 2, 3};
        j->ok = pl_comm_all_reduce_sum(c, x, 3) == PL_ERR_BACKEND;
    } else {
        j->ok = comm_cases_run(c, &j->digest, j->err, sizeof j->err);
    }
    pl_comm_destroy(c);
    return NULL;
}

static bool comm_round(bool timeout_case) {
    pl_comm_threads_world *w;
    if (pl_comm_threads_world_create(3, timeout_case ? 0.2 : 30.0, &w) != PL_OK) return false;
    job jobs[3];
    pthread_t t[3];
    for (int r = 0; r < 3; r++) {
        jobs[r] = (job){.w = w, .rank = r, .skip = timeout_case && r == 2,
                        .digest = timeout_case ? 1 : 0};
        pthread_create(&t[r], NULL, rank_main, &jobs[r]);
    }
    bool ok = true;
    for (int r = 0; r < 3; r++) {
        pthread_join(t[r], NULL);
        if (!jobs[r].ok) {
            fprintf(stderr, "tsan_tp: rank %d: %s\n", r, jobs[r].err);
            ok = false;
        }
    }
    return ok && (timeout_case || (jobs[0].digest == jobs[1].digest &&
                                   jobs[1].digest == jobs[2].digest));
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 2;
    uint64_t seed = pl_test_run_seed("tsan_tp");
    for (int i = 0; i < rounds; i++) {
        if (!comm_round(false) || !comm_round(true)) {
            fprintf(stderr, "tsan_tp: FAILED: communicator\n");
            return 1;
        }
        pl_engine_config c;
        thr_config(&c, PL_BACKEND_CPU, 512, NULL);
        c.tensor_parallel_size = 2;
        c.distributed_backend = PL_DIST_THREADS;
        c.distributed_timeout = 0.4; /* heartbeats every 0.1 s while idle */
        c.n_threads = 1;
        int n = 24;
        thr_job *jobs = thr_make_jobs(n, seed + (uint64_t)i, false);
        c.max_waiting = 0; /* the reference submits everything at once */
        thr_result res;
        bool ok = jobs && thr_reference(&c, jobs, n);
        c.max_num_blocks = 36;
        c.max_waiting = 12;
        if (ok) ok = thr_run(&c, jobs, n, 3, true, &res);
        thr_jobs_free(jobs, n);
        if (!ok) {
            fprintf(stderr, "tsan_tp: FAILED: %s\n", thr_failure());
            return 1;
        }
        printf("tsan_tp: round %d: %ld accepted, %ld completions, %ld aborted, %ld steps\n", i,
               res.accepted, res.completions, res.aborted, res.steps);
    }
    printf("tsan_tp: %d rounds passed\n", rounds);
    return 0;
}
