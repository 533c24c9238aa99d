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
/* How many devices the emulation has (1 at start). */
void pl_test_cuemu_set_device_count(int n);
/* After n more kernel launches, the next one faults with an illegal address, which sticks for
 * the rest of the "process" as on a GPU (cuemu.h); clear_sticky ends it (a restart). */
void pl_test_cuemu_inject_illegal_address(long n);
void pl_test_cuemu_clear_sticky(void);

#ifdef __cplusplus
}
#endif
#endif
