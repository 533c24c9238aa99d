/*
 * tests/fuzz/fuzz_util.h - what the libFuzzer targets share: a per-process scratch directory
 * (in /dev/shm when it exists: every input is written to a file, since the loaders take
 * paths), writing a file there, and touching every byte range a loaded model claims.
 *
 * Each target is one LLVMFuzzerTestOneInput; a crash, an ASan/UBSan report, a leak, or an
 * abort() from a violated post-condition check is a finding.
 */
#ifndef PL_TEST_FUZZ_UTIL_H
#define PL_TEST_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "util/dtype.h"

/* The scratch directory, made on first use; removed (with the files the targets write, whose
 * names are fixed) at exit. */
static char g_fuzz_dir[64];
static const char *const k_fuzz_files[] = {"model.bin", "model.gguf", "model.safetensors",
                                           "config.json",
                                           "tok.model", "tokenizer.json", NULL};

static inline void fuzz_cleanup(void) {
    char p[128];
    for (int i = 0; k_fuzz_files[i]; i++) {
        snprintf(p, sizeof p, "%s/%s", g_fuzz_dir, k_fuzz_files[i]);
        unlink(p);
    }
    rmdir(g_fuzz_dir);
}

static inline const char *fuzz_dir(void) {
    if (!g_fuzz_dir[0]) {
        snprintf(g_fuzz_dir, sizeof g_fuzz_dir, "%s/pl_fuzz_XXXXXX",
                 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
        if (!mkdtemp(g_fuzz_dir)) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(fuzz_cleanup);
    }
    return g_fuzz_dir;
}

/* "<scratch>/<name>" in a static buffer per name slot (slot < 4). */
static inline const char *fuzz_path(int slot, const char *name) {
    static char buf[4][128];
    snprintf(buf[slot], sizeof buf[slot], "%s/%s", fuzz_dir(), name);
    return buf[slot];
}

static inline void fuzz_write(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

/* Reads the first and last element of a tensor: a pointer or size the loader got wrong
 * (outside the mapping or the allocation) faults or trips ASan here. */
static inline unsigned fuzz_touch_weight(const pl_weight *w) {
    uint64_t n = 0;
    if (!w->data || w->rows <= 0 || w->cols <= 0 ||
        !pl_wtype_bytes(w->type, (uint64_t)w->rows * (uint64_t)w->cols, &n) || n == 0)
        return 0;
    const volatile unsigned char *p = w->data;
    return p[0] + p[n - 1];
}

static inline unsigned fuzz_touch_model(const pl_model *m) {
    const pl_model_config *c = &m->cfg;
    if (pl_model_config_validate(c) != PL_OK) {
        fprintf(stderr, "fuzz: a loaded model has an invalid config: %s\n", pl_last_error());
        abort();
    }
    /* every tensor the architecture has is there, shaped as the config says (the engine
     * trusts both), and readable end to end */
    unsigned s = 0;
    for (size_t k = 0; k < pl_model_n_slots(c); k++) {
        int layer, rows, cols;
        pl_tensor_role r = pl_model_slot_role(c, k, &layer);
        const pl_weight *w = &m->w[k];
        if (!pl_model_has_tensor(c, r)) continue;
        pl_model_tensor_shape(c, r, &rows, &cols);
        if (!w->data || w->rows != rows || w->cols != cols) {
            fprintf(stderr, "fuzz: tensor %s of layer %d is %dx%d, the config says %dx%d\n",
                    pl_tensor_spec_of(r)->hf, layer, w->rows, w->cols, rows, cols);
            abort();
        }
        s += fuzz_touch_weight(w);
    }
    return s;
}

/* The loader's contract on any input: a model whose every weight is readable and whose
 * shapes agree with its config, or no model and a message. */
static inline int fuzz_check_load(const char *path, const pl_model_load_options *opt) {
    pl_model *m = NULL;
    pl_status s = pl_model_load(path, opt, &m);
    if (s == PL_OK) {
        fuzz_touch_model(m);
        pl_model_free(m);
    } else if (m != NULL || pl_last_error()[0] == '\0') {
        fprintf(stderr, "fuzz: failed load left a model or no message (%s)\n",
                pl_status_name(s));
        abort();
    }
    return 0;
}

#endif
