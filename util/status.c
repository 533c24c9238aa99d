/*
 * util/status.c - status names and strings, and the thread-local last-error message.
 */
#include "util/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define PL_ERROR_CAP 1024

static _Thread_local char tl_error[PL_ERROR_CAP];

const char *pl_version(void) { return "0.1.0"; }

const char *pl_status_name(pl_status s) {
    switch (s) {
    case PL_OK: return "PL_OK";
    case PL_ERR_INVALID_ARGUMENT: return "PL_ERR_INVALID_ARGUMENT";
    case PL_ERR_OUT_OF_MEMORY: return "PL_ERR_OUT_OF_MEMORY";
    case PL_ERR_IO: return "PL_ERR_IO";
    case PL_ERR_FORMAT: return "PL_ERR_FORMAT";
    case PL_ERR_UNSUPPORTED: return "PL_ERR_UNSUPPORTED";
    case PL_ERR_NOT_FOUND: return "PL_ERR_NOT_FOUND";
    case PL_ERR_TOO_LONG: return "PL_ERR_TOO_LONG";
    case PL_ERR_QUEUE_FULL: return "PL_ERR_QUEUE_FULL";
    case PL_ERR_BACKEND: return "PL_ERR_BACKEND";
    }
    return "PL_ERR_UNKNOWN";
}

const char *pl_status_string(pl_status s) {
    switch (s) {
    case PL_OK: return "success";
    case PL_ERR_INVALID_ARGUMENT: return "invalid argument";
    case PL_ERR_OUT_OF_MEMORY: return "out of memory";
    case PL_ERR_IO: return "input/output error";
    case PL_ERR_FORMAT: return "malformed file";
    case PL_ERR_UNSUPPORTED: return "not supported";
    case PL_ERR_NOT_FOUND: return "not found";
    case PL_ERR_TOO_LONG: return "request too long";
    case PL_ERR_QUEUE_FULL: return "waiting queue full";
    case PL_ERR_BACKEND: return "backend failure";
    }
    return "unknown status";
}

const char *pl_last_error(void) { return tl_error; }

void pl_clear_error(void) { tl_error[0] = '\0'; }

pl_status pl_fail(pl_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tl_error, sizeof tl_error, fmt, ap);
    va_end(ap);
    return code;
}

pl_status pl_fail_prefix(pl_status code, const char *fmt, ...) {
    char prefix[PL_ERROR_CAP], old[PL_ERROR_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, tl_error, sizeof old);
    size_t n = strlen(prefix);
    if (n > sizeof tl_error - 3) n = sizeof tl_error - 3;
    memcpy(tl_error, prefix, n);
    memcpy(tl_error + n, ": ", 2);
    size_t room = sizeof tl_error - n - 3, m = strlen(old);
    if (m > room) m = room;
    memcpy(tl_error + n + 2, old, m);
    tl_error[n + 2 + m] = '\0';
    return code;
}

const char *pl_finish_reason_name(pl_finish_reason r) {
    switch (r) {
    case PL_FINISH_NONE: return "none";
    case PL_FINISH_STOP: return "stop";
    case PL_FINISH_LENGTH: return "length";
    case PL_FINISH_ABORT: return "abort";
    case PL_FINISH_OVERLOADED: return "overloaded";
    case PL_FINISH_ERROR: return "error";
    }
    return "none";
}
