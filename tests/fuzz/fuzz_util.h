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
static const char *const k_fuzz_files[] = {"model.bin", "model.safetensors", "config.json",
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
    if (!w->data || w->rows <= 0 || w->cols <= 0) return 0;
    size_t n = (size_t)w->rows * (size_t)w->cols * pl_dtype_size(w->dtype);
    const volatile unsigned char *p = w->data;
    return p[0] + p[n - 1];
}

static inline unsigned fuzz_touch_model(const pl_model *m) {
    const pl_model_config *c = &m->cfg;
    if (pl_model_config_validate(c) != PL_OK) {
        fprintf(stderr, "fuzz: a loaded model has an invalid config: %s\n", pl_last_error());
        abort();
    }
    unsigned s = fuzz_touch_weight(&m->tok_embed) + fuzz_touch_weight(&m->final_norm) +
                 fuzz_touch_weight(&m->lm_head);
    for (int l = 0; l < c->n_layers; l++) {
        const pl_model_layer *L = &m->layers[l];
        const pl_weight *ws[] = {&L->attn_norm, &L->wq, &L->wk, &L->wv, &L->wo,
                                 &L->ffn_norm, &L->w1, &L->w2, &L->w3};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) s += fuzz_touch_weight(ws[i]);
    }
    /* shapes must agree with the config the engine will trust */
    if (m->tok_embed.rows != c->vocab_size || m->tok_embed.cols != c->dim ||
        m->lm_head.rows != c->vocab_size || m->lm_head.cols != c->dim ||
        (c->n_layers > 0 && (m->layers[0].wq.rows != c->n_heads * c->head_dim ||
                             m->layers[0].wk.rows != c->n_kv_heads * c->head_dim ||
                             m->layers[0].w1.rows != c->hidden_dim))) {
        fprintf(stderr, "fuzz: loaded tensor shapes disagree with the config\n");
        abort();
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
