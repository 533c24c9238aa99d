/*
 * tools/ppl_run.c - `pagellm perplexity`: a model's perplexity over a text, and its KL
 * divergence from a base model, the way llama-perplexity measures them.
 *
 * The text is tokenized once (with BOS) and cut into whole non-overlapping windows of ctx
 * tokens; each window's first token becomes BOS (when the model has one) and, as
 * llama-perplexity does, only its second half is scored: the logits at positions first =
 * ctx / 2 .. ctx - 2 against the tokens that follow them, ctx - 1 - first per window, so every
 * scored token has at least ctx / 2 tokens of context. The last token of a window is only
 * ever predicted, so a window is submitted as its first ctx - 1 tokens with
 * sampling.prompt_logits = first: the completion brings those positions' full-vocabulary
 * logits (the last of them is the distribution of the one output token it asks for, which is
 * discarded). Windows are submitted in waves of batch / (ctx - 1), which the engine runs
 * together (chunked prefill of several sequences per step), so this is also a prefill
 * benchmark.
 *
 * A base is either another model (run in this process on the same windows, with the same
 * engine flags, before the model under test in each wave) or a file of log-probabilities a
 * previous run wrote with --save-logits (ppl_logits.h; its windows are then the text's). Both
 * paths give the same figures bit for bit: the base's log-softmax is the same f32 array.
 *
 * Everything that can be refused is checked before the first window runs.
 */
#include "ppl_run.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench/progress.h"
#include "cli/cli.h"
#include "ppl_logits.h"

#define PPL_DEFAULT_CTX 512

/* Reports input the run refuses; returns the exit status 2. */
__attribute__((format(printf, 1, 2))) static int refuse(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "pagellm perplexity: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return 2;
}

/* The byte offset of the first invalid UTF-8 sequence of s (n bytes), or -1. */
static long long utf8_invalid_at(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (len == 0 || i + len > n) return (long long)i;
        unsigned cp = len == 1 ? c : c & (0x7f >> len);
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80) return (long long)i;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        static const unsigned min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return (long long)i; /* overlong, beyond Unicode, or a surrogate */
        i += len;
    }
    return -1;
}

/* ---- the base's logits file ---------------------------------------------------------- */

typedef struct base_file {
    FILE *f;
    ppl_logits_header h;
    int32_t *tokens; /* (n_windows * n_ctx) */
} base_file;

/* 1: path is a logits file (opened and checked into *b), 0: it is not (a model), 2: refused. */
static int open_base_file(const char *path, base_file *b) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0; /* not a file we can read: let the engine say what it is */
    uint8_t hd[PPL_LOGITS_HEADER_BYTES];
    size_t got = fread(hd, 1, sizeof hd, f);
    if (!ppl_logits_is(hd, got)) {
        fclose(f);
        return 0;
    }
    struct stat st;
    char err[256];
    if (fstat(fileno(f), &st) != 0 ||
        !ppl_logits_parse_header(hd, got, (uint64_t)st.st_size, &b->h, err, sizeof err)) {
        fclose(f);
        return refuse("--kl-divergence-base %s: %s", path, err);
    }
    size_t n = (size_t)b->h.n_windows * b->h.n_ctx;
    uint8_t *raw = malloc(n * 4);
    b->tokens = malloc(n * sizeof *b->tokens);
    if (!raw || !b->tokens || fread(raw, 4, n, f) != n) {
        free(raw);
        free(b->tokens);
        fclose(f);
        return refuse("--kl-divergence-base %s: cannot read its %u windows' tokens", path,
                      b->h.n_windows);
    }
    ppl_logits_read_i32(raw, n, b->tokens);
    free(raw);
    if (!ppl_logits_check_tokens(b->tokens, n, b->h.n_vocab, err, sizeof err)) {
        free(b->tokens);
        fclose(f);
        return refuse("--kl-divergence-base %s: %s", path, err);
    }
    b->f = f;
    return 1;
}

/* ---- engines ------------------------------------------------------------------------- */

/* An engine for model holding wave windows of ctx tokens at once: its pool sized for them
 * (not for memory_threshold of the machine: two engines may share it), batch tokens a step,
 * logits rows in chunks of up to 512. */
static pl_engine *make_engine(const ppl_opts *o, const char *model, int ctx, int wave) {
    pl_engine_config c = o->cfg; /* shares cfg's storage: never deinit this copy */
    if (model != o->cfg.model_path) c.tokenizer_path = NULL;
    c.model_path = model;
    c.max_total_tokens = o->batch;
    c.max_batch_size = o->batch < 512 ? o->batch : 512;
    c.max_num_seqs = c.max_batch_size;
    c.max_num_blocks = wave * ((ctx + c.block_size - 1) / c.block_size + 1);
    c.enable_prefix_caching = false;
    c.max_model_len = 0;
    pl_engine *e = NULL;
    if (pl_engine_create(&c, &e) != PL_OK) {
        fprintf(stderr, "pagellm perplexity: %s: %s\n", model, pl_last_error());
        return NULL;
    }
    return e;
}

/* Runs the windows [w0, w0 + n) (ctx tokens each in win) through e; cs gets one completion
 * per window, in order, each with its scored positions' logits. */
static bool run_windows(pl_engine *e, const int32_t *win, int w0, int n, int ctx,
                        pl_completion **cs, size_t *n_cs) {
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.max_tokens = 1;
    sp.temperature = 0.0f;
    sp.prompt_logits = ctx / 2;
    for (int w = w0; w < w0 + n; w++)
        if (pl_engine_submit_tokens(e, win + (size_t)w * ctx, (size_t)ctx - 1, &sp, NULL) !=
            PL_OK) {
            fprintf(stderr, "pagellm perplexity: window %d: %s\n", w + 1, pl_last_error());
            return false;
        }
    if (pl_engine_run(e, cs, n_cs) != PL_OK || *n_cs != (size_t)n) {
        fprintf(stderr, "pagellm perplexity: %s\n", pl_last_error());
        return false;
    }
    for (size_t i = 0; i < *n_cs; i++)
        if ((*cs)[i].finish_reason == PL_FINISH_ERROR || !(*cs)[i].prompt_logits) {
            fprintf(stderr, "pagellm perplexity: window %d failed\n", w0 + (int)i + 1);
            return false;
        }
    return true;
}

/* ---- scoring a window on threads ------------------------------------------------------ */

typedef struct score_job {
    float *lp;             /* (rows, V): logits in, log-probabilities out */
    const float *base_lp;  /* (rows, V) or NULL */
    const int32_t *next;   /* (rows) the token each row predicts */
    int rows, V;
    ppl_token *out;        /* (rows) */
    atomic_int row;
} score_job;

static void *score_main(void *arg) {
    score_job *J = arg;
    for (int r; (r = atomic_fetch_add(&J->row, 1)) < J->rows;) {
        float *lp = J->lp + (size_t)r * J->V;
        ppl_log_softmax(lp, J->V, lp);
        J->out[r] = ppl_score(lp, J->base_lp ? J->base_lp + (size_t)r * J->V : NULL, J->V,
                              J->next[r]);
    }
    return NULL;
}

static void score(score_job *J, int n_threads) {
    atomic_init(&J->row, 0);
    pthread_t t[64];
    int started = 0;
    for (; started < n_threads - 1 && started < 64; started++)
        if (pthread_create(&t[started], NULL, score_main, J) != 0) break;
    score_main(J);
    for (int i = 0; i < started; i++) pthread_join(t[i], NULL);
}

/* Log-softmax of every row in place (the base model's rows), on threads. */
static void log_softmax_rows(float *x, int rows, int V, int n_threads) {
    int32_t *zero = calloc((size_t)rows, sizeof *zero);
    ppl_token *tmp = malloc((size_t)rows * sizeof *tmp);
    score_job J = {.lp = x, .next = zero, .rows = rows, .V = V, .out = tmp};
    if (zero && tmp) score(&J, n_threads);
    else
        for (int r = 0; r < rows; r++) ppl_log_softmax(x + (size_t)r * V, V, x + (size_t)r * V);
    free(zero);
    free(tmp);
}

/* ---- the run ----------------------------------------------------------------------------- */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void print_window(FILE *f, ppl_stats *st, int w, bool has_base) {
    ppl_summary s;
    ppl_stats_summarize(st, &s);
    if (!has_base) {
        fprintf(f, "[%d]%.4f,", w, s.ppl.val);
    } else {
        fprintf(f, "%4d    %9.4f ± %9.4f    %10.5f ± %10.5f    %10.5f ± %10.5f    %6.3f ± %6.3f %%"
                   "    %6.3f ± %6.3f %%\n",
                w, s.ppl.val, s.ppl.unc, s.log_ratio.val, s.log_ratio.unc, s.kld.val, s.kld.unc,
                100.0 * s.dp_rms.val, 100.0 * s.dp_rms.unc, 100.0 * s.same_top.val,
                100.0 * s.same_top.unc);
    }
    fflush(f);
}

int ppl_run(const ppl_opts *o, ppl_result *res) {
    FILE *out = o->out ? o->out : stdout;
    int rc = 2, ctx = o->ctx;
    char *text = NULL;
    int32_t *ids = NULL, *win = NULL;
    size_t n_ids = 0;
    pl_engine *e = NULL, *eb = NULL;
    base_file bf = {0};
    FILE *save = NULL;
    float *base_lp = NULL;
    ppl_token *tok = NULL;
    ppl_stats st = {0};
    bool base_is_file = false;
    if (o->batch < 1) return refuse("--batch-size %d: must be at least 1", o->batch);
    if (o->base) {
        int b = open_base_file(o->base, &bf);
        if (b == 2) return 2;
        base_is_file = b == 1;
        if (base_is_file) {
            if (ctx && ctx != (int)bf.h.n_ctx) {
                rc = refuse("--ctx-size %d: the logits file holds windows of %u tokens", ctx,
                            bf.h.n_ctx);
                goto done;
            }
            ctx = (int)bf.h.n_ctx;
        }
    }
    if (!ctx) ctx = PPL_DEFAULT_CTX;
    if (ctx < 4) {
        rc = refuse("--ctx-size %d: a window needs at least 4 tokens", ctx);
        goto done;
    }
    /* the text: read and checked before a model is loaded */
    size_t text_len = 0;
    if (o->text_path) {
        char err[512];
        if (!cli_read_file(o->text_path, &text, &text_len, err, sizeof err)) {
            fprintf(stderr, "pagellm perplexity: --file: %s\n", err);
            goto done;
        }
        if (text_len == 0) {
            rc = refuse("--file %s: the text is empty", o->text_path);
            goto done;
        }
        long long bad = utf8_invalid_at((const unsigned char *)text, text_len);
        if (bad >= 0) {
            rc = refuse("--file %s: not UTF-8 text (invalid byte sequence at byte %lld)",
                        o->text_path, bad);
            goto done;
        }
    } else if (!o->ids && !base_is_file) {
        rc = refuse("give the text (--file)");
        goto done;
    }

    const int first = ctx / 2, scored = ctx - 1 - first;
    int wave = o->batch / (ctx - 1);
    if (wave < 1) wave = 1;
    e = make_engine(o, o->cfg.model_path, ctx, wave);
    if (!e) goto done;
    pl_model_info mi;
    pl_engine_model_info(e, &mi);
    const int V = mi.vocab_size;
    if (ctx > mi.context_length) {
        rc = refuse("--ctx-size %d: larger than the model's context (%d tokens)", ctx,
                    mi.context_length);
        goto done;
    }
    if (base_is_file && (int)bf.h.n_vocab != V) {
        rc = refuse("--kl-divergence-base %s: a vocabulary of %u tokens, the model's has %d",
                    o->base, bf.h.n_vocab, V);
        goto done;
    }

    /* the windows */
    int n_windows;
    if (text) {
        pl_status s = pl_engine_tokenize(e, text, &ids, &n_ids);
        if (s != PL_OK) {
            fprintf(stderr, "pagellm perplexity: --file %s: %s\n", o->text_path, pl_last_error());
            goto done;
        }
    } else if (o->ids) {
        n_ids = o->n_ids;
    }
    const int32_t *src = text ? ids : o->ids;
    if (base_is_file) {
        n_windows = (int)bf.h.n_windows;
        if (src) { /* the text must be the one the file was computed on */
            bool same = n_ids / (size_t)ctx >= (size_t)n_windows;
            for (size_t i = 0; same && i < (size_t)n_windows * ctx; i++)
                same = i % (size_t)ctx == 0 || src[i] == bf.tokens[i];
            if (!same) {
                rc = refuse("--kl-divergence-base %s: computed on another text (its %d windows "
                            "of %d tokens are not this text's)", o->base, n_windows, ctx);
                goto done;
            }
        }
    } else {
        n_windows = (int)(n_ids / (size_t)ctx);
        if (n_windows < 1) {
            rc = refuse("--file %s: %zu tokens, fewer than one window (--ctx-size %d)",
                        o->text_path ? o->text_path : "(ids)", n_ids, ctx);
            goto done;
        }
    }
    if (o->max_windows > 0 && n_windows > o->max_windows) n_windows = o->max_windows;
    win = malloc((size_t)n_windows * ctx * sizeof *win);
    if (!win) goto oom;
    if (base_is_file) {
        memcpy(win, bf.tokens, (size_t)n_windows * ctx * sizeof *win);
    } else {
        memcpy(win, src, (size_t)n_windows * ctx * sizeof *win);
        if (mi.bos_id >= 0)
            for (int w = 0; w < n_windows; w++) win[(size_t)w * ctx] = mi.bos_id;
    }
    for (size_t i = 0; i < (size_t)n_windows * ctx; i++)
        if (win[i] < 0 || win[i] >= V) {
            rc = refuse("token %zu of the windows is %d, outside the model's vocabulary of %d", i,
                        win[i], V);
            goto done;
        }
    if (o->base && !base_is_file) {
        eb = make_engine(o, o->base, ctx, wave);
        if (!eb) goto done;
        pl_model_info bi;
        pl_engine_model_info(eb, &bi);
        if (bi.vocab_size != V) {
            rc = refuse("--kl-divergence-base %s: a vocabulary of %d tokens, the model's has %d",
                        o->base, bi.vocab_size, V);
            goto done;
        }
        if (ctx > bi.context_length) {
            rc = refuse("--ctx-size %d: larger than the base model's context (%d tokens)", ctx,
                        bi.context_length);
            goto done;
        }
    }
    if (o->save_logits) {
        save = fopen(o->save_logits, "wb");
        ppl_logits_header h = {.n_vocab = (uint32_t)V, .n_ctx = (uint32_t)ctx,
                               .n_windows = (uint32_t)n_windows, .first = (uint32_t)first};
        if (!save || !ppl_logits_write_header(save, &h, win)) {
            fprintf(stderr, "pagellm perplexity: --save-logits %s: cannot write\n",
                    o->save_logits);
            rc = 1;
            goto done;
        }
    }
    st.has_base = o->base != NULL;
    tok = malloc((size_t)scored * sizeof *tok);
    if (!tok) goto oom;
    if (base_is_file) {
        base_lp = malloc((size_t)scored * V * sizeof *base_lp);
        if (!base_lp) goto oom;
    }

    /* ---- the work ---- */
    rc = 1;
    int n_threads = o->stats_threads > 0 ? o->stats_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n_threads < 1) n_threads = 1;
    fprintf(stderr, "perplexity: %zu tokens, %d windows of %d tokens (the last %d of each "
            "scored), %d windows a wave, batch %d tokens\n", text ? n_ids : (size_t)n_windows * ctx,
            n_windows, ctx, scored, wave, o->batch);
    if (st.has_base)
        fprintf(out, "chunk             PPL               ln(PPL(Q)/PPL(base))          KL "
                     "Divergence              Δp RMS            Same top p\n");
    pl_progress bar;
    pl_progress_start(&bar, o->progress, "windows", (uint64_t)n_windows);
    snprintf(bar.label, sizeof bar.label, "perplexity");
    bool out_tty = isatty(fileno(out));
    double seconds = 0;
    for (int w0 = 0; w0 < n_windows; w0 += wave) {
        int n = n_windows - w0 < wave ? n_windows - w0 : wave;
        pl_completion *bc = NULL, *qc = NULL;
        size_t n_bc = 0, n_qc = 0;
        if (eb) {
            if (!run_windows(eb, win, w0, n, ctx, &bc, &n_bc)) goto done;
            for (int i = 0; i < n; i++) log_softmax_rows(bc[i].prompt_logits, scored, V, n_threads);
        }
        double t0 = now_s();
        bool ok = run_windows(e, win, w0, n, ctx, &qc, &n_qc);
        seconds += now_s() - t0;
        if (!ok) {
            pl_completions_free(bc, n_bc);
            goto done;
        }
        for (int i = 0; i < n && ok; i++) {
            const int w = w0 + i;
            const float *blp = NULL;
            if (eb) blp = bc[i].prompt_logits;
            if (base_is_file) {
                if (fread(base_lp, sizeof *base_lp, (size_t)scored * V, bf.f) !=
                    (size_t)scored * V) {
                    fprintf(stderr, "pagellm perplexity: --kl-divergence-base %s: cannot read "
                            "window %d\n", o->base, w + 1);
                    ok = false;
                    break;
                }
                blp = base_lp;
            }
            score_job J = {.lp = qc[i].prompt_logits, .base_lp = blp,
                           .next = win + (size_t)w * ctx + first + 1, .rows = scored, .V = V,
                           .out = tok};
            score(&J, n_threads);
            for (int r = 0; r < scored && ok; r++) ok = ppl_stats_add(&st, &tok[r]);
            if (save && fwrite(qc[i].prompt_logits, sizeof(float), (size_t)scored * V, save) !=
                            (size_t)scored * V) {
                fprintf(stderr, "pagellm perplexity: --save-logits %s: write failed\n",
                        o->save_logits);
                ok = false;
            }
            if (out_tty) pl_progress_clear(&bar);
            print_window(out, &st, w + 1, st.has_base);
        }
        pl_completions_free(bc, n_bc);
        pl_completions_free(qc, n_qc);
        if (!ok) goto done;
        bar.done += (uint64_t)n;
        pl_progress_update(&bar);
    }
    pl_progress_finish(&bar);
    fprintf(out, "\n");
    if (save && fclose(save) != 0) {
        save = NULL;
        fprintf(stderr, "pagellm perplexity: --save-logits %s: write failed\n", o->save_logits);
        goto done;
    }
    save = NULL;
    ppl_summary sum;
    ppl_stats_summarize(&st, &sum);
    ppl_stats_print(out, &sum, st.has_base);
    double tps = seconds > 0 ? (double)n_windows * (ctx - 1) / seconds : 0;
    fprintf(stderr, "perplexity: %.2f s in the model's forward passes, %.1f tokens/s\n", seconds,
            tps);
    if (res)
        *res = (ppl_result){.summary = sum, .has_base = st.has_base, .n_windows = n_windows,
                            .ctx = ctx, .seconds = seconds, .tokens_per_s = tps};
    rc = 0;
    goto done;
oom:
    fprintf(stderr, "pagellm perplexity: out of memory\n");
    rc = 1;
done:
    if (save) fclose(save);
    if (bf.f) fclose(bf.f);
    free(bf.tokens);
    free(base_lp);
    free(tok);
    free(win);
    free(text);
    pl_free_ids(ids);
    ppl_stats_free(&st);
    pl_engine_destroy(eb);
    pl_engine_destroy(e);
    return rc;
}
