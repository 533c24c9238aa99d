/*
 * kernels/cuda_stub.c - the CUDA backend's constructor in builds without nvcc, and in the
 * installed static library of builds with it (PL_CUDA_STUB_STATIC: a program linked
 * statically needs no CUDA libraries unless it asks for them; see meson.build).
 */
#include "kernels/backend.h"

pl_status pl_backend_cuda_create(const pl_backend_options *opt, pl_backend **out) {
    (void)opt;
    (void)out;
#ifdef PL_CUDA_STUB_STATIC
    return pl_fail(PL_ERR_UNSUPPORTED,
                   "backend cuda: the static libpagellm.a has no CUDA backend (link the shared "
                   "library, libpagellm.so, for CUDA)");
#else
    return pl_fail(PL_ERR_UNSUPPORTED,
                   "backend cuda: this build has no CUDA support (rebuild with nvcc on PATH and "
                   "-Dcuda=enabled)");
#endif
}
