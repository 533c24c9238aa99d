/* placeholder: replaced by the CUDA backend */
#include <cuda_runtime.h>
extern "C" int pl_cuda_placeholder(void) { int n = 0; return cudaGetDeviceCount(&n) == cudaSuccess ? n : -1; }
