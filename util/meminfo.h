/*
 * util/meminfo.h - how much host memory there is, and how much of it a new allocation can
 * take without pushing other programs out (Linux's MemAvailable: free memory plus the page
 * cache and reclaimable slabs the kernel can give back).
 */
#ifndef PL_UTIL_MEMINFO_H
#define PL_UTIL_MEMINFO_H

#include <stdbool.h>
#include <stddef.h>

#include "util/status.h"

/* MemAvailable and MemTotal of /proc/meminfo, in bytes; where it cannot be read (not Linux, a
 * kernel older than 3.14), free and total physical pages from sysconf. PL_ERR_BACKEND when
 * neither reports anything. */
pl_status pl_host_memory(size_t *out_available, size_t *out_total);

/* The value of `key` ("MemAvailable") in /proc/meminfo's text, in bytes (the file gives kB);
 * false when the key is missing or malformed. */
bool pl_meminfo_value(const char *text, const char *key, size_t *out_bytes);

#endif
