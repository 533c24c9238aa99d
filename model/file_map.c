/*
 * model/file_map.c - read-only memory mappings of model files, with bounds checks.
 *
 * Weights are used straight from the mapping when their stored type is the one asked for, so
 * loading a model costs no copy and the page cache is shared between processes. Only regular
 * files are mapped: a FIFO or a device has no meaningful size and could block.
 *
 * Known limit: if another process truncates a file while it is mapped, touching the lost pages
 * raises SIGBUS. Every check here is against the size seen at open time.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/model_internal.h"
#include "util/alloc.h"

pl_status pl_model_file_map(const char *path, pl_model_file *out) {
    memset(out, 0, sizeof *out);
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer; it is refused
     * below, and means nothing for a regular file. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return pl_fail(PL_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return pl_fail(PL_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return pl_fail(PL_ERR_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > (uint64_t)SIZE_MAX) {
        close(fd);
        return pl_fail(PL_ERR_IO, "%s: %lld bytes do not fit the address space", path,
                       (long long)st.st_size);
    }
    char *name = pl_strdup(path);
    if (!name) {
        close(fd);
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    }
    size_t size = (size_t)st.st_size;
    void *p = NULL;
    if (size > 0) {
        p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            pl_free(name);
            return pl_fail(e == ENOMEM ? PL_ERR_OUT_OF_MEMORY : PL_ERR_IO,
                           "%s: cannot map %zu bytes: %s", path, size, strerror(e));
        }
    }
    close(fd); /* the mapping keeps the file referenced */
    out->path = name;
    out->data = p;
    out->size = size;
    return PL_OK;
}

void pl_model_file_unmap(pl_model_file *f) {
    if (!f) return;
    if (f->data) munmap((void *)f->data, f->size);
    pl_free(f->path);
    memset(f, 0, sizeof *f);
}

bool pl_model_file_has(const pl_model_file *f, uint64_t off, uint64_t len) {
    uint64_t end;
    return pl_model_add_ok(off, len, &end) && end <= (uint64_t)f->size;
}
