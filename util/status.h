/*
 * util/status.h - setting and reading the thread-local error detail.
 *
 * Every failing path in the library ends in `return pl_fail(code, "fmt", ...)`, which records a
 * message for pl_last_error() and returns the code, so callers can write one line per check.
 */
#ifndef PL_UTIL_STATUS_H
#define PL_UTIL_STATUS_H

#include "pagellm.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define PL_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define PL_PRINTF(a, b)
#endif

/* A field named in a message, so that each interface can name it its own way
 * (pl_last_error_as: the command line's flag, the JSON key): PL_MARK "config.block_size"
 * PL_MARK is written "config.block_size" by pl_last_error; PL_MARK_BARE "config.block_size"
 * PL_MARK_BARE is written "block_size" (a field mentioned in passing). */
#define PL_MARK "\x1f"
#define PL_MARK_BARE "\x1e"
#define PL_MARK_CHAR '\x1f'
#define PL_MARK_BARE_CHAR '\x1e'

/* This thread's last error as recorded, with its marks (for pl_last_error_as). */
const char *pl_last_error_marked(void);

/* Records the formatted message as this thread's last error and returns code. */
pl_status pl_fail(pl_status code, const char *fmt, ...) PL_PRINTF(2, 3);

/* Prepends "prefix: " to this thread's last error and returns code; for adding context
 * (a file name, a field) to a failure reported further down. */
pl_status pl_fail_prefix(pl_status code, const char *fmt, ...) PL_PRINTF(2, 3);

/* Clears this thread's last error (the next pl_last_error() returns ""). */
void pl_clear_error(void);

/* Evaluates a pl_status expression and returns it from the caller when it failed. */
#define PL_TRY(expr)                                                                          \
    do {                                                                                      \
        pl_status pl_try_s_ = (expr);                                                         \
        if (pl_try_s_ != PL_OK) return pl_try_s_;                                             \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
