/*
 * util/log.h - the library's logging: one process-wide hook, stderr by default.
 */
#ifndef PL_UTIL_LOG_H
#define PL_UTIL_LOG_H

#include "util/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { PL_LOG_DEBUG = 0, PL_LOG_INFO = 1, PL_LOG_WARN = 2, PL_LOG_ERROR = 3 } pl_log_level;

/* Logs at or above the level set by the PAGELLM_LOG environment variable (debug, info, warn,
 * error; default warn) reach stderr. */
void pl_log(pl_log_level level, const char *fmt, ...) PL_PRINTF(2, 3);

#ifdef __cplusplus
}
#endif
#endif
