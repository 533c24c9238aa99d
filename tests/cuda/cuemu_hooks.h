/*
 * tests/cuda/cuemu_hooks.h - the CPU emulation's test hooks (tests/support/cuemu.h, C++) for
 * C tests linked with the emulated CUDA backend. cuemu_hooks.cpp defines them; a binary that
 * links the nvcc-built backend must not use them.
 */
#ifndef PL_TESTS_CUEMU_HOOKS_H
#define PL_TESTS_CUEMU_HOOKS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The emulated device's total memory; cudaMemGetInfo reports total minus what is allocated. */
void pl_test_cuemu_set_device_memory(size_t total_bytes);
/* Bytes of emulated device memory currently allocated. */
size_t pl_test_cuemu_device_bytes_in_use(void);

#ifdef __cplusplus
}
#endif
#endif
