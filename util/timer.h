/*
 * util/timer.h - a monotonic clock.
 */
#ifndef PL_UTIL_TIMER_H
#define PL_UTIL_TIMER_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Nanoseconds from CLOCK_MONOTONIC: only differences mean anything. */
uint64_t pl_now_ns(void);

#ifdef __cplusplus
}
#endif
#endif
