/*
 * util/meminfo.c - see meminfo.h.
 */
#include "util/meminfo.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

bool pl_meminfo_value(const char *text, const char *key, size_t *out_bytes) {
    size_t klen = strlen(key);
    for (const char *line = text; *line;) {
        if (strncmp(line, key, klen) != 0 || line[klen] != ':') {
            const char *nl = strchr(line, '\n');
            if (!nl) break;
            line = nl + 1;
            continue;
        }
        const char *p = line + klen + 1;
        while (*p == ' ' || *p == '\t') p++;
        if (!isdigit((unsigned char)*p)) return false;
        uint64_t kb = 0;
        for (; isdigit((unsigned char)*p); p++) {
            if (kb > (UINT64_MAX - 9) / 10) return false;
            kb = kb * 10 + (uint64_t)(*p - '0');
        }
        while (*p == ' ') p++;
        if (strncmp(p, "kB", 2) != 0 || kb > SIZE_MAX / 1024) return false;
        *out_bytes = (size_t)kb * 1024;
        return true;
    }
    return false;
}

pl_status pl_host_memory(size_t *out_available, size_t *out_total) {
    char text[8192];
    size_t n = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        n = fread(text, 1, sizeof text - 1, f);
        fclose(f);
    }
    text[n] = '\0';
    size_t avail, total;
    if (pl_meminfo_value(text, "MemAvailable", &avail) &&
        pl_meminfo_value(text, "MemTotal", &total)) {
        *out_available = avail;
        *out_total = total;
        return PL_OK;
    }
    long page = sysconf(_SC_PAGESIZE), free_pages = sysconf(_SC_AVPHYS_PAGES),
         pages = sysconf(_SC_PHYS_PAGES);
    if (page <= 0 || free_pages < 0 || pages <= 0)
        return pl_fail(PL_ERR_BACKEND, "memory_info: neither /proc/meminfo nor sysconf reports "
                       "physical memory");
    *out_available = (size_t)free_pages * (size_t)page;
    *out_total = (size_t)pages * (size_t)page;
    return PL_OK;
}
