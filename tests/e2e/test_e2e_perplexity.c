/*
 * tests/e2e/test_e2e_perplexity.c - `pagellm perplexity` (tools/ppl_run.c) against figures
 * computed here from the dense reference (tests/e2e/dense_ref.c), written apart from the tool:
 * a random model in f32 (the base) and its Q4_0 copy written by pl_model_quantize, windows of
 * random token ids, every window's scored positions run through both models densely, and
 * perplexity, KL divergence, "Same top p", RMS Δp and the KLD percentiles computed in double
 * with llama-perplexity's definitions.
 *
 * The engine runs on the ref backend with an f32 KV cache, whose logits equal the dense
 * reference's within ~1e-5 (tests/kernels/tolerances.h, TOL_LOGITS): the figures must then
 * agree to 1e-4 relative (the KL divergence, a sum of terms of either sign, to 1e-4 of its
 * value plus 1e-6). The same figures from a saved-logits file must equal the in-process
 * base's bit for bit.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dense_ref.h"
#include "model_fixtures.h"
#include "pagellm.h"
#include "tools/ppl_run.h"

enum { CTX = 24, N_WINDOWS = 3, FIRST = CTX / 2, SCORED = CTX - 1 - FIRST };

typedef struct files {
    char base[512], quant[512], logits[512];
    pl_model_config cfg;
} files;

/* A random llama2.c model (the base) and its Q4_0 GGUF copy. */
static void make_models(files *f) {
    pl_test_rng r;
    pl_test_rng_seed(&r, 31);
    pl_fixture_random_config(&r, &f->cfg);
    f->cfg.dim = 64, f->cfg.n_heads = 4, f->cfg.n_kv_heads = 2, f->cfg.head_dim = 16;
    f->cfg.hidden_dim = 96, f->cfg.n_layers = 2, f->cfg.vocab_size = 96;
    f->cfg.max_seq_len = 64;
    pl_model *m = pl_fixture_model(&f->cfg, 7);
    cr_assert_not_null(m);
    const char *dir = pl_test_tmpdir();
    snprintf(f->base, sizeof f->base, "%s/base.bin", dir);
    snprintf(f->quant, sizeof f->quant, "%s/q4_0.gguf", dir);
    snprintf(f->logits, sizeof f->logits, "%s/base.logits", dir);
    cr_assert(pl_fixture_write_llama2c(m, f->base));
    pl_model_free(m);
    pl_quantize_options qo;
    pl_quantize_options_default(&qo);
    qo.no_tokenizer = true;
    cr_assert_eq(pl_model_quantize(f->base, f->quant, "q4_0", &qo), PL_OK, "%s",
                 pl_last_error());
}

/* The windows' ids (BOS 1 first in each, as the tool puts it) and the text-like id stream the
 * tool is given (BOS first, as a tokenizer gives it). */
static void make_ids(int32_t *stream, int n, int vocab) {
    pl_test_rng r;
    pl_test_rng_seed(&r, 32);
    for (int i = 0; i < n; i++) stream[i] = 3 + (int32_t)pl_test_rng_below(&r, (uint32_t)vocab - 3);
    stream[0] = 1;
}

/* log-softmax (double) of the dense model's logits at positions FIRST .. CTX-2 of a window. */
static void dense_rows(const pl_model *m, const int32_t *win, double *lp /* (SCORED, V) */) {
    int V = m->cfg.vocab_size;
    dense_ref *d = dense_ref_create(m, CTX);
    cr_assert_not_null(d);
    for (int pos = 0; pos < CTX - 1; pos++) {
        const float *x = dense_ref_forward(d, win[pos], pos);
        if (pos < FIRST) continue;
        double mx = -INFINITY, sum = 0;
        for (int t = 0; t < V; t++) mx = x[t] > mx ? x[t] : mx;
        for (int t = 0; t < V; t++) sum += exp((double)x[t] - mx);
        for (int t = 0; t < V; t++)
            lp[(size_t)(pos - FIRST) * V + t] = (double)x[t] - mx - log(sum);
    }
    dense_ref_free(d);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The value at fraction q of sorted v, linearly between neighbours (llama-perplexity's). */
static double at_fraction(const double *v, int n, double q) {
    double p = q * (n - 1);
    int i = (int)floor(p);
    return i + 1 < n ? v[i] + (p - i) * (v[i + 1] - v[i]) : v[n - 1];
}

typedef struct expect {
    double ppl, ppl_unc, ppl_base, kld, kld_unc, kld_max, kld_p99, kld_median, same_top, dp_rms;
} expect;

static void dense_figures(const files *f, const int32_t *stream, expect *e) {
    pl_model *q, *b;
    cr_assert_eq(pl_model_load(f->quant, NULL, &q), PL_OK, "%s", pl_last_error());
    cr_assert_eq(pl_model_load(f->base, NULL, &b), PL_OK, "%s", pl_last_error());
    int V = q->cfg.vocab_size, n = N_WINDOWS * SCORED;
    double *lq = malloc((size_t)SCORED * V * sizeof *lq), *lb = malloc((size_t)SCORED * V * 8);
    double *kld = malloc((size_t)n * sizeof *kld);
    double s_nll = 0, s_nll2 = 0, s_nllb = 0, s_kld = 0, s_kld2 = 0, s_dp2 = 0;
    int same = 0, k = 0;
    for (int w = 0; w < N_WINDOWS; w++) {
        int32_t win[CTX];
        memcpy(win, stream + w * CTX, sizeof win);
        win[0] = 1; /* BOS */
        dense_rows(q, win, lq);
        dense_rows(b, win, lb);
        for (int r = 0; r < SCORED; r++, k++) {
            const double *a = lq + (size_t)r * V, *c = lb + (size_t)r * V;
            int tok = win[FIRST + r + 1], ta = 0, tc = 0;
            double nll = -a[tok], kl = 0;
            for (int t = 0; t < V; t++) {
                kl += exp(c[t]) * (c[t] - a[t]);
                ta = a[t] > a[ta] ? t : ta;
                tc = c[t] > c[tc] ? t : tc;
            }
            double dp = exp(a[tok]) - exp(c[tok]);
            s_nll += nll, s_nll2 += nll * nll, s_nllb += -c[tok];
            s_kld += kl, s_kld2 += kl * kl, s_dp2 += dp * dp;
            same += ta == tc;
            kld[k] = kl;
        }
    }
    double mean = s_nll / n, var = s_nll2 / n - mean * mean;
    e->ppl = exp(mean);
    e->ppl_unc = e->ppl * sqrt(var / (n - 1));
    e->ppl_base = exp(s_nllb / n);
    e->kld = s_kld / n;
    e->kld_unc = sqrt((s_kld2 / n - e->kld * e->kld) / (n - 1));
    qsort(kld, (size_t)n, sizeof *kld, cmp_double);
    e->kld_max = kld[n - 1];
    e->kld_p99 = at_fraction(kld, n, 0.99);
    e->kld_median = n % 2 ? kld[n / 2] : 0.5 * (kld[n / 2 - 1] + kld[n / 2]);
    e->same_top = (double)same / n;
    e->dp_rms = sqrt(s_dp2 / n);
    free(lq), free(lb), free(kld);
    pl_model_free(q);
    pl_model_free(b);
}

static void opts_for(const files *f, ppl_opts *o, const int32_t *stream, size_t n, FILE *out) {
    memset(o, 0, sizeof *o);
    pl_engine_config_default(&o->cfg);
    o->cfg.model_path = f->quant;
    o->cfg.backend = PL_BACKEND_REF;
    o->cfg.kv_dtype = PL_DTYPE_F32;
    o->cfg.n_threads = 1;
    o->ids = stream;
    o->n_ids = n;
    o->ctx = CTX;
    o->batch = 2 * (CTX - 1); /* two windows a step: batching across windows */
    o->stats_threads = 2;
    o->out = out;
}

static void close_rel(const char *what, double got, double want, double rel, double abs_tol) {
    cr_assert(fabs(got - want) <= rel * fabs(want) + abs_tol, "%s: %.9g, dense %.9g", what, got,
              want);
}

Test(perplexity, figures_equal_the_dense_computation_and_the_saved_logits_path) {
    files f;
    make_models(&f);
    int32_t stream[N_WINDOWS * CTX + 5]; /* a partial window at the end is not scored */
    make_ids(stream, N_WINDOWS * CTX + 5, f.cfg.vocab_size);
    expect e;
    dense_figures(&f, stream, &e);
    cr_assert(e.kld > 1e-4 && e.same_top < 1.0 && e.ppl > 2,
              "the figures must be far from trivial (kld %g, same top %g)", e.kld, e.same_top);

    /* the Q4_0 model with the f32 model as a base run in the same process; saving logits */
    FILE *out = tmpfile();
    ppl_opts o;
    opts_for(&f, &o, stream, N_WINDOWS * CTX + 5, out);
    o.base = f.base;
    ppl_result r;
    cr_assert_eq(ppl_run(&o, &r), 0);
    cr_assert_eq(r.n_windows, N_WINDOWS);
    cr_assert_eq(r.summary.count, (size_t)N_WINDOWS * SCORED);
    close_rel("PPL(Q)", r.summary.ppl.val, e.ppl, 1e-4, 0);
    close_rel("PPL(Q) error", r.summary.ppl.unc, e.ppl_unc, 1e-3, 0);
    close_rel("PPL(base)", r.summary.ppl_base.val, e.ppl_base, 1e-4, 0);
    close_rel("mean KLD", r.summary.kld.val, e.kld, 1e-4, 1e-6);
    close_rel("KLD error", r.summary.kld.unc, e.kld_unc, 1e-3, 1e-6);
    close_rel("max KLD", r.summary.kld_max, e.kld_max, 1e-4, 1e-6);
    close_rel("99% KLD", r.summary.kld_p99, e.kld_p99, 1e-4, 1e-6);
    close_rel("median KLD", r.summary.kld_median, e.kld_median, 1e-4, 1e-6);
    cr_assert_float_eq(r.summary.same_top.val, e.same_top, 1e-12, "same top p %g, dense %g",
                       r.summary.same_top.val, e.same_top);
    close_rel("RMS dp", r.summary.dp_rms.val, e.dp_rms, 1e-4, 1e-7);
    /* the printed lines carry the figures in llama-perplexity's wording */
    rewind(out);
    char buf[8192];
    size_t len = fread(buf, 1, sizeof buf - 1, out);
    buf[len] = 0;
    fclose(out);
    char want[128];
    snprintf(want, sizeof want, "Mean    KLD: %10.6f ± %10.6f", r.summary.kld.val,
             r.summary.kld.unc);
    cr_assert(strstr(buf, want), "no '%s' in\n%s", want, buf);
    snprintf(want, sizeof want, "Same top p: %6.3f ± %5.3f %%", 100 * r.summary.same_top.val,
             100 * r.summary.same_top.unc);
    cr_assert(strstr(buf, want), "no '%s' in\n%s", want, buf);
    cr_assert(strstr(buf, "99.0%   KLD:") && strstr(buf, "Maximum KLD:") &&
              strstr(buf, "RMS Δp    :"), "%s", buf);

    /* the base's log-probabilities saved by a run of the base model, then read back: the same
     * figures, bit for bit */
    opts_for(&f, &o, stream, N_WINDOWS * CTX + 5, NULL);
    o.cfg.model_path = f.base;
    o.save_logits = f.logits;
    o.out = tmpfile();
    ppl_result rb;
    cr_assert_eq(ppl_run(&o, &rb), 0);
    fclose(o.out);
    close_rel("PPL of the base alone", rb.summary.ppl.val, e.ppl_base, 1e-4, 0);
    opts_for(&f, &o, NULL, 0, tmpfile());
    o.ctx = 0; /* the file's */
    o.base = f.logits;
    ppl_result rf;
    cr_assert_eq(ppl_run(&o, &rf), 0);
    fclose(o.out);
    cr_assert_eq(rf.n_windows, N_WINDOWS);
    cr_assert(memcmp(&rf.summary, &r.summary, sizeof r.summary) == 0,
              "figures from the saved logits differ from the in-process base's (mean KLD %.9g "
              "vs %.9g)", rf.summary.kld.val, r.summary.kld.val);
}

/* Input the tool refuses before running anything, with exit status 2: fewer ids than one
 * window, a window longer than the model's context, a base with another vocabulary, a
 * truncated or foreign logits file, a logits file of other windows. */
Test(perplexity, refuses_bad_input_before_any_work) {
    files f;
    make_models(&f);
    int32_t stream[N_WINDOWS * CTX];
    make_ids(stream, N_WINDOWS * CTX, f.cfg.vocab_size);
    ppl_opts o;
    opts_for(&f, &o, stream, CTX - 1, tmpfile());
    cr_assert_eq(ppl_run(&o, NULL), 2); /* shorter than one window */
    o.n_ids = N_WINDOWS * CTX;
    o.ctx = 2 * f.cfg.max_seq_len;
    cr_assert_eq(ppl_run(&o, NULL), 2); /* longer than the model's context */
    o.ctx = CTX;
    o.base = "dummy:tiny"; /* vocabulary 512, not 96 */
    cr_assert_eq(ppl_run(&o, NULL), 2);
    /* a logits file: written, then cut short, then given another text */
    o.base = NULL;
    o.save_logits = f.logits;
    cr_assert_eq(ppl_run(&o, NULL), 0);
    o.save_logits = NULL;
    o.base = f.logits;
    stream[CTX + 3] = stream[CTX + 3] == 5 ? 6 : 5;
    cr_assert_eq(ppl_run(&o, NULL), 2); /* the windows are not the file's */
    uint8_t *bytes;
    size_t n;
    cr_assert(pl_fixture_read_file(f.logits, &bytes, &n));
    cr_assert(pl_fixture_truncate(f.logits, n - 4));
    o.ids = NULL;
    cr_assert_eq(ppl_run(&o, NULL), 2); /* truncated */
    memcpy(bytes, "PLLOGITS\x02", 9);     /* a version this build does not read */
    cr_assert(pl_fixture_write_file(f.logits, bytes, n));
    cr_assert_eq(ppl_run(&o, NULL), 2);
    free(bytes);
    fclose(o.out);
}
