/*
 * dist/nccl_sum.cu - the summing phase of the NCCL all-reduce (dist/comm_nccl.c): part r of
 * every rank's buffer, received into `others`, summed in rank order into this rank's own part,
 * so the GPU result equals the threaded reference's and MPI's to the bit (only additions, in
 * the same order: nothing for nvcc to contract into an FMA).
 */
#include <cuda_runtime.h>
#include <stddef.h>

/* own (n): this rank's part, replaced by the sum; others ((size - 1), n): the other ranks'
 * parts in rank order, this rank left out. */
static __global__ void sum_parts_kernel(float *own, const float *others, int rank, int size,
                                        size_t n) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float s = 0.0f;
        for (int r = 0, k = 0; r < size; r++) {
            float x = r == rank ? own[i] : others[(size_t)k++ * n + i];
            s = r == 0 ? x : s + x;
        }
        own[i] = s;
    }
}

extern "C" int pl_nccl_sum_parts(float *own, const float *others, int rank, int size, size_t n,
                                 void *stream) {
    if (n == 0) return 0;
    size_t blocks = (n + 255) / 256;
    if (blocks > 4096) blocks = 4096;
    sum_parts_kernel<<<(unsigned)blocks, 256, 0, (cudaStream_t)stream>>>(own, others, rank, size,
                                                                         n);
    return (int)cudaGetLastError();
}
