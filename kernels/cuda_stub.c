/*
 * kernels/cuda_stub.c - the CUDA backend's constructor in builds without nvcc.
 */
#include "kernels/backend.h"

pl_status pl_backend_cuda_create(const pl_backend_options *opt, pl_backend **out) {
    (void)opt;
    (void)out;
    return pl_fail(PL_ERR_UNSUPPORTED,
                   "backend cuda: this build has no CUDA support (rebuild with nvcc on PATH and "
                   "-Dcuda=enabled)");
}
