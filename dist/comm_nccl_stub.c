/*
 * dist/comm_nccl_stub.c - the NCCL communicator of a build without NCCL (no CUDA toolkit, or
 * no nccl.h / libnccl in it when it was configured; also the installed static library, which
 * holds no CUDA code).
 */
#include "dist/comm.h"

pl_status pl_comm_nccl_create(pl_comm *mpi, int device, void *stream, pl_comm **out) {
    return pl_fail(PL_ERR_UNSUPPORTED,
                   "--distributed-backend nccl: this pagellm was built without NCCL (it needs "
                   "the CUDA toolkit's nccl.h and libnccl; `pagellm --version` lists what is "
                   "built in)");
}

bool pl_comm_have_nccl(void) { return false; }

const char *pl_comm_nccl_version(void) { return ""; }
