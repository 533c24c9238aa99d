/*
 * template/budget.c - how a render fails: the message with the template line, out of memory
 * (or past the render's memory limit), and the step budget. Every other file of the
 * interpreter calls these; they call nothing of the interpreter back.
 */
#include "template/tmpl_internal.h"

#include <stdio.h>

int pl_tm_fail(pl_tm_rs *rs, pl_status code, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return pl_fail(code, "template line %d: %s", rs->line, msg);
}

int pl_tm_oom(pl_tm_rs *rs) {
    if (rs->a.over_limit)
        return pl_tm_fail(rs, PL_ERR_TOO_LONG, "the render exceeds its memory limit of %zu bytes",
                          rs->lim.max_memory_bytes);
    return pl_tm_fail(rs, PL_ERR_OUT_OF_MEMORY, "out of memory");
}

int pl_tm_charge(pl_tm_rs *rs, uint64_t steps) {
    rs->steps += steps;
    if (rs->steps > rs->lim.max_steps)
        return pl_tm_fail(rs, PL_ERR_TOO_LONG, "the render exceeds its budget of %llu steps",
                          (unsigned long long)rs->lim.max_steps);
    return 0;
}
