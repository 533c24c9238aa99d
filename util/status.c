/*
 * util/status.c - status names and strings (generated from PL_STATUS_MAP), finish reason
 * names, and the thread-local last-error message.
 */
#include "util/status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define PL_ERROR_CAP 1024

static _Thread_local char tl_error[PL_ERROR_CAP]; /* with the marks of field names */
static _Thread_local char tl_plain[PL_ERROR_CAP]; /* as pl_last_error gives it */

const char *pl_version(void) { return "0.1.0"; }

const char *pl_status_name(pl_status s) {
    switch (s) {
#define NAME(name, value, text)                                                               \
    case PL_##name: return "PL_" #name;
        PL_STATUS_MAP(NAME)
#undef NAME
    }
    return "PL_ERR_UNKNOWN";
}

const char *pl_status_string(pl_status s) {
    switch (s) {
#define TEXT(name, value, text)                                                               \
    case PL_##name: return text;
        PL_STATUS_MAP(TEXT)
#undef TEXT
    }
    return "unknown status";
}

const char *pl_last_error_marked(void) { return tl_error; }

/* The marks dropped, and a bare mark's "prefix." with them. */
const char *pl_last_error(void) {
    size_t o = 0;
    for (const char *p = tl_error; *p;) {
        if (*p == PL_MARK_CHAR) {
            p++;
            continue;
        }
        if (*p == PL_MARK_BARE_CHAR) {
            const char *end = strchr(p + 1, PL_MARK_BARE_CHAR);
            const char *dot = end ? memchr(p + 1, '.', (size_t)(end - p - 1)) : NULL;
            p = dot ? dot + 1 : p + 1;
            continue;
        }
        tl_plain[o++] = *p++;
    }
    tl_plain[o] = '\0';
    return tl_plain;
}

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
#define TEXT(name, value, text)                                                               \
    case PL_FINISH_##name: return text;
        PL_FINISH_REASON_MAP(TEXT)
#undef TEXT
    }
    return "none";
}
