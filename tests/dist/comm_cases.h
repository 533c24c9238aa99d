/*
 * tests/dist/comm_cases.h - the communicator checks every implementation passes, written once
 * and run by every rank: by the Criterion suite on the threads communicator (test_comm.c) and
 * by comm_check.c under mpirun on the MPI one.
 */
#ifndef PL_TESTS_COMM_CASES_H
#define PL_TESTS_COMM_CASES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dist/comm.h"

/* Runs every case on c (each rank calls it with its handle). Returns false with the first
 * problem in err; *digest gets a hash of every all-reduce result's bits (equal on every rank
 * and on every implementation of the same size). */
bool comm_cases_run(pl_comm *c, uint64_t *digest, char *err, size_t cap);

#endif
