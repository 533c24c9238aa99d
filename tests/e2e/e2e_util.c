/*
 * tests/e2e/e2e_util.c - see e2e_util.h.
 */
#include "e2e_util.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void e2e_prompts_make(e2e_prompts *p, int n, int min_len, int max_len, int vocab, uint64_t seed) {
    pl_test_rng r;
    pl_test_rng_seed(&r, seed);
    p->n = n;
    p->ids = calloc((size_t)n, sizeof *p->ids);
    p->len = calloc((size_t)n, sizeof *p->len);
    for (int i = 0; i < n; i++) {
        int len = min_len + (int)pl_test_rng_below(&r, (uint32_t)(max_len - min_len + 1));
        p->len[i] = len;
        p->ids[i] = malloc((size_t)len * sizeof(int32_t));
        p->ids[i][0] = 1; /* BOS */
        for (int k = 1; k < len; k++) p->ids[i][k] = 3 + (int32_t)pl_test_rng_below(&r, (uint32_t)(vocab - 3));
    }
}

void e2e_prompts_free(e2e_prompts *p) {
    for (int i = 0; i < p->n; i++) free(p->ids[i]);
    free(p->ids);
    free(p->len);
}

void e2e_outputs_free(e2e_outputs *o) {
    for (int i = 0; i < o->n; i++) free(o->ids[i]);
    free(o->ids);
    free(o->len);
    free(o->reason);
}

static void store(e2e_outputs *out, int i, const pl_completion *c) {
    out->len[i] = (int)c->n_output_ids;
    out->ids[i] = malloc((c->n_output_ids + 1) * sizeof(int32_t));
    memcpy(out->ids[i], c->output_ids, c->n_output_ids * sizeof(int32_t));
    out->reason[i] = c->finish_reason;
}

void e2e_run(pl_engine *e, const e2e_prompts *p, const pl_sampling_params *sp,
             bool one_at_a_time, e2e_outputs *out) {
    out->n = p->n;
    out->ids = calloc((size_t)p->n, sizeof *out->ids);
    out->len = calloc((size_t)p->n, sizeof *out->len);
    out->reason = calloc((size_t)p->n, sizeof *out->reason);
    pl_request_id *ids = calloc((size_t)p->n, sizeof *ids);
    int next = 0;
    while (next < p->n) {
        int upto = one_at_a_time ? next + 1 : p->n;
        for (; next < upto; next++) {
            pl_status s = pl_engine_submit_tokens(e, p->ids[next], (size_t)p->len[next], sp,
                                                  &ids[next]);
            cr_assert_eq(s, PL_OK, "submit %d: %s", next, pl_last_error());
        }
        pl_completion *c;
        size_t n;
        pl_status s = pl_engine_run(e, &c, &n);
        cr_assert_eq(s, PL_OK, "run: %s", pl_last_error());
        for (size_t k = 0; k < n; k++) {
            if (c[k].index != 0) continue;
            int i = 0;
            while (i < p->n && ids[i] != c[k].id) i++;
            cr_assert_lt(i, p->n, "completion for an unknown id %llu", (unsigned long long)c[k].id);
            store(out, i, &c[k]);
        }
        pl_completions_free(c, n);
    }
    free(ids);
}

bool e2e_outputs_equal(const char *what, const e2e_outputs *a, const e2e_outputs *b) {
    for (int i = 0; i < a->n; i++) {
        int n = a->len[i] < b->len[i] ? a->len[i] : b->len[i];
        for (int k = 0; k < n; k++)
            if (a->ids[i][k] != b->ids[i][k]) {
                fprintf(stderr, "%s: prompt %d differs at output %d: %d vs %d\n", what, i, k,
                        a->ids[i][k], b->ids[i][k]);
                return false;
            }
        if (a->len[i] != b->len[i]) {
            fprintf(stderr, "%s: prompt %d lengths %d vs %d\n", what, i, a->len[i], b->len[i]);
            return false;
        }
    }
    return true;
}

pl_engine *e2e_engine(const pl_engine_config *cfg) {
    pl_engine *e = NULL;
    pl_status s = pl_engine_create(cfg, &e);
    cr_assert_eq(s, PL_OK, "engine_create(%s): %s", cfg->model_path, pl_last_error());
    return e;
}
