/*
 * server/log.c - see log.h.
 */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "server/log.h"

double pl_srv_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

void pl_srv_log(const char *level, const char *fmt, ...) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    struct tm tm;
    localtime_r(&t.tv_sec, &tm);
    char line[2048];
    int n = snprintf(line, sizeof line, "%s %02d:%02d:%02d.%03ld ", level, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, t.tv_nsec / 1000000);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", line); /* one call: lines of different threads do not mix */
}
