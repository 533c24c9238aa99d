/*
 * util/log.c - leveled logging to stderr, threshold from PAGELLM_LOG.
 */
#include "util/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int threshold(void) {
    const char *v = getenv("PAGELLM_LOG");
    if (!v) return PL_LOG_WARN;
    if (!strcmp(v, "debug")) return PL_LOG_DEBUG;
    if (!strcmp(v, "info")) return PL_LOG_INFO;
    if (!strcmp(v, "error")) return PL_LOG_ERROR;
    return PL_LOG_WARN;
}

void pl_log(pl_log_level level, const char *fmt, ...) {
    if ((int)level < threshold()) return;
    static const char *names[] = {"debug", "info", "warn", "error"};
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "pagellm %s: %s\n", names[level], line);
}
