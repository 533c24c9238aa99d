/*
 * dist/comm_mpi_stub.c - the MPI communicator of a build without MPI (libopenmpi-dev absent
 * when it was configured).
 */
#include "dist/comm.h"

pl_status pl_comm_mpi_create(double timeout_s, pl_comm **out) {
    return pl_fail(PL_ERR_UNSUPPORTED,
                   "--distributed-backend mpi: this pagellm was built without MPI (install "
                   "libopenmpi-dev and rebuild; `pagellm --version` lists what is built in)");
}

bool pl_comm_have_mpi(void) { return false; }

const char *pl_comm_mpi_version(void) { return ""; }
