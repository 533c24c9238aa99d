/*
 * tests/cuda/cuemu_hooks.cpp - C entry points to the emulation's test hooks (cuemu_hooks.h).
 * cuemu's state is one inline function-local static, so this translation unit and the
 * emulated backend's objects share it.
 */
#include "cuemu_hooks.h"

#include "cuemu.h"

extern "C" void pl_test_cuemu_set_device_memory(size_t total_bytes) {
    cuemu::set_device_memory(total_bytes);
}

extern "C" size_t pl_test_cuemu_device_bytes_in_use(void) { return cuemu::device_bytes_in_use(); }

extern "C" void pl_test_cuemu_set_device_count(int n) { cuemu::set_device_count(n); }

extern "C" void pl_test_cuemu_inject_illegal_address(long n) {
    cuemu::inject_fault_after_launches(n, cudaErrorIllegalAddress);
}

extern "C" void pl_test_cuemu_clear_sticky(void) { cuemu::clear_sticky_error(); }
