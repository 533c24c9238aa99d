/*
 * bench/workload.c - the prompts a benchmark sends: random token ids, or a dataset file.
 *
 * Random prompts are what vLLM's random dataset makes: every prompt is a shared random prefix
 * of --prefix-len ids followed by its own random ids; lengths are uniform in
 * [len * (1 - r), len * (1 + r)] for --random-range-ratio r. Ids are drawn from
 * [3, vocab_size) so that the usual special ids (unk, bos, eos) do not appear mid-prompt.
 *
 * Dataset files:
 * - JSONL (the `pagellm generate --prompts` format, read with cli/cli.h): "prompt" (text,
 *   needs a tokenizer) or "prompt_token_ids", and "max_tokens" as the output length. Other
 *   sampling fields are ignored: every request samples the same way here. Items are taken
 *   in file order.
 * - ShareGPT JSON: an array of {"conversations": [{"value": prompt}, {"value": answer}, ...]}.
 *   The answer's token count is the output length, so a tokenizer is required. As vLLM does,
 *   items are visited in a seeded random order and kept when the prompt and the answer have
 *   at least 4 tokens, the prompt at most 1024 and both together at most 2048 (and within
 *   max_model_len).
 * --output-len, when given, overrides every item's output length; --num-prompts, when given,
 * keeps only that many items. --dataset-name says which of the three is wanted (vLLM's names:
 * random, sharegpt, custom for JSONL) and is checked against the file; without it the file's
 * first character decides.
 *
 * Online (`bench serve`, pl_bench_model_facts.text_prompts) the same prompts go to a server.
 * With a tokenizer, a random prompt becomes text whose tokenization has the drawn length, as
 * vLLM's random dataset does: the ids are decoded, the text re-encoded, cut or padded with
 * more random ids and decoded again until the count holds (a few rounds at most; the count
 * that results is recorded either way). Without one, prompts stay token ids.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_internal.h"
#include "cli/cli.h"

/* ------------------------------------------------------------------------------------------
 * Flags
 * ---------------------------------------------------------------------------------------- */

void pl_bench_workload_opts_default(pl_bench_workload_opts *o) {
    *o = (pl_bench_workload_opts){.num_prompts = 32, .input_len = 128, .output_len = 128,
                                  .ignore_eos = true};
}

int pl_bench_workload_flag(pl_bench_workload_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    long long n;
    if (cli_is(a, "--num-prompts")) {
        if (!cli_int(a, v, 1, 10000000, &n)) return -1;
        o->num_prompts = n;
        o->num_prompts_set = true;
    } else if (cli_is(a, "--input-len") || cli_is(a, "--random-input-len")) {
        if (!cli_int(a, v, 1, 1 << 24, &n)) return -1;
        o->input_len = n;
    } else if (cli_is(a, "--output-len") || cli_is(a, "--random-output-len")) {
        if (!cli_int(a, v, 1, 1 << 24, &n)) return -1;
        o->output_len = n;
        o->output_len_set = true;
    } else if (cli_is(a, "--prefix-len") || cli_is(a, "--random-prefix-len")) {
        if (!cli_int(a, v, 0, 1 << 24, &n)) return -1;
        o->prefix_len = n;
    } else if (cli_is(a, "--random-range-ratio")) {
        double r;
        if (!cli_float(a, v, 0.0, 0.999, &r)) return -1;
        o->range_ratio = r;
    } else if (cli_is(a, "--seed")) {
        if (!cli_int(a, v, 0, INT64_MAX, &n)) return -1;
        o->seed = (uint64_t)n;
    } else if (cli_is(a, "--dataset") || cli_is(a, "--dataset-path")) {
        if (!v || !v[0]) {
            fprintf(stderr, "pagellm: %s: missing value\n", a);
            return -1;
        }
        o->dataset = v;
    } else if (cli_is(a, "--dataset-name")) {
        if (!v || (strcmp(v, "random") && strcmp(v, "sharegpt") && strcmp(v, "custom") &&
                   strcmp(v, "jsonl"))) {
            fprintf(stderr, "pagellm: %s: %s%s%s (choose random, sharegpt or custom)\n", a,
                    v ? "unknown dataset '" : "missing value", v ? v : "", v ? "'" : "");
            return -1;
        }
        o->dataset_name = !strcmp(v, "jsonl") ? "custom" : v;
    } else if (cli_is(a, "--ignore-eos")) {
        o->ignore_eos = true;
        return 1;
    } else if (cli_is(a, "--no-ignore-eos")) {
        o->ignore_eos = false;
        return 1;
    } else {
        return 0;
    }
    ++*i; /* the value */
    return 1;
}

void pl_bench_print_workload_flags(const pl_bench_workload_opts *d) {
    printf("workload flags:\n"
           "  --num-prompts N (%lld)      --input-len N (%lld)     --output-len N (%lld)\n"
           "  --random-range-ratio R (0) lengths uniform in [len*(1-R), len*(1+R)]\n"
           "  --prefix-len N (0)         shared random prefix (exercises prefix caching)\n"
           "  --dataset FILE             JSONL prompts (prompt or prompt_token_ids, max_tokens)\n"
           "                             or ShareGPT JSON (needs a tokenizer); --dataset-path\n"
           "  --dataset-name NAME        random, sharegpt or custom (JSONL): checked against\n"
           "                             the file (default: random, or what --dataset holds)\n"
           "  --seed N (0)               seed of the random prompts / dataset sampling\n"
           "  --no-ignore-eos            stop at EOS (default: ignore EOS, as vLLM benchmarks)\n",
           d->num_prompts, d->input_len, d->output_len);
}

/* ------------------------------------------------------------------------------------------
 * Random prompts
 * ---------------------------------------------------------------------------------------- */

/* splitmix64: small, seedable, good enough for benchmark inputs. */
static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi] (hi >= lo). */
static long long rng_range(uint64_t *s, long long lo, long long hi) {
    uint64_t span = (uint64_t)(hi - lo) + 1;
    return lo + (long long)(rng_next(s) % span);
}

static void length_range(long long len, double r, long long *lo, long long *hi) {
    *lo = (long long)floor((double)len * (1.0 - r));
    *hi = (long long)ceil((double)len * (1.0 + r));
    if (*lo < 1) *lo = 1;
    if (*hi < *lo) *hi = *lo;
}

/* Tokens of text as submit would see them (the engine's rule for BOS, else the tokenizer's). */
static pl_status encode(const pl_bench_model_facts *f, const char *text, int32_t **ids,
                        size_t *n) {
    if (f->engine) return pl_engine_tokenize(f->engine, text, ids, n);
    return pl_tokenizer_encode(f->tok, text, strlen(text), PL_ENCODE_ADD_SPECIAL, ids, n);
}

/* The ids of [lo, hi] that decode alone to text (not special, not a lone byte or part of a
 * character): random text prompts are drawn from them, so that cutting a prompt's tokens
 * never leaves half a character that re-encodes longer. *n_out 0 when none qualify. */
static int32_t *text_ids(const pl_tokenizer *t, int32_t lo, int32_t hi, size_t *n_out) {
    *n_out = 0;
    int32_t *ok = malloc(((size_t)(hi - lo) + 1) * sizeof *ok);
    if (!ok) return NULL;
    for (int32_t id = lo; id <= hi; id++) {
        char *s = NULL;
        size_t len = 0;
        if (pl_tokenizer_decode(t, &id, 1, PL_DECODE_SKIP_SPECIAL, &s, &len) == PL_OK && len &&
            !strstr(s, "\xEF\xBF\xBD")) /* U+FFFD: an invalid byte sequence */
            ok[(*n_out)++] = id;
        pl_free_text(s);
    }
    return ok;
}

/* Turns p's ids into text that submit would tokenize into p->n_ids tokens (the special
 * tokens the tokenizer adds included), and records the count of the text it ends with. The
 * ids are first mapped onto `pool` (n_pool; none: kept), which keeps the random stream and a
 * shared prefix as they were drawn. */
static int ids_to_text(const pl_bench_model_facts *f, pl_bench_prompt *p, size_t n_special,
                       const int32_t *pool, size_t n_pool, uint64_t *st, int32_t lo_id,
                       int32_t hi_id) {
    size_t target = p->n_ids, n = p->n_ids > n_special ? p->n_ids - n_special : 1;
    int32_t *ids = malloc((target + 1) * sizeof *ids);
    char *text = NULL;
    size_t count = 0;
    if (!ids) return 1;
    memcpy(ids, p->ids, (n < p->n_ids ? n : p->n_ids) * sizeof *ids);
    for (size_t k = 0; n_pool && k < n; k++) ids[k] = pool[(size_t)(ids[k] - lo_id) % n_pool];
    for (int round = 0;; round++) {
        int32_t *back = NULL;
        size_t nb = 0;
        pl_free_text(text);
        text = NULL;
        if (pl_tokenizer_decode(f->tok, ids, n, PL_DECODE_SKIP_SPECIAL, &text, NULL) != PL_OK ||
            encode(f, text, &back, &count) != PL_OK)
            goto fail;
        pl_free_ids(back);
        if (count == target || round == 7) break; /* the last text stands, whatever its count */
        /* the text's own tokens, cut or padded by what the count missed */
        if (pl_tokenizer_encode(f->tok, text, strlen(text), 0, &back, &nb) != PL_OK) goto fail;
        size_t want = count > target ? (nb > count - target ? nb - (count - target) : 1)
                                     : nb + (target - count);
        if (want > target) want = target;
        n = nb < want ? nb : want;
        memcpy(ids, back, n * sizeof *ids);
        pl_free_ids(back);
        for (; n < want; n++)
            ids[n] = n_pool ? pool[rng_range(st, 0, (long long)n_pool - 1)]
                            : (int32_t)rng_range(st, lo_id, hi_id);
    }
    free(ids);
    p->text = strdup(text);
    pl_free_text(text);
    if (!p->text) return 1;
    free(p->ids);
    p->ids = NULL;
    p->n_ids = 0;
    p->n_tokens = count;
    return 0;
fail:
    fprintf(stderr, "pagellm: turning random ids into text: %s\n", pl_last_error_as(PL_NAMING_FLAG));
    pl_free_text(text);
    free(ids);
    return 1;
}

/* How many tokens the tokenizer adds to any text (BOS, EOS): the count of "". */
static size_t special_count(const pl_bench_model_facts *f) {
    int32_t *ids = NULL;
    size_t n = 0;
    if (encode(f, "", &ids, &n) != PL_OK) return 0;
    pl_free_ids(ids);
    return n;
}

static int build_random(const pl_bench_workload_opts *o, const pl_bench_model_facts *f,
                        uint64_t seed, pl_bench_workload *w) {
    long long in_lo, in_hi, out_lo, out_hi;
    length_range(o->input_len, o->range_ratio, &in_lo, &in_hi);
    length_range(o->output_len, o->range_ratio, &out_lo, &out_hi);
    long long longest = o->prefix_len + in_hi + out_hi;
    if (f->max_model_len > 0 && longest > f->max_model_len) {
        fprintf(stderr,
                "pagellm: --input-len/--output-len: prefix %lld + input up to %lld + output up to "
                "%lld = %lld tokens exceeds the model's max_model_len %d\n",
                o->prefix_len, in_hi, out_hi, longest, f->max_model_len);
        return 2;
    }
    if (f->engine) {
        size_t capacity = 0;
        pl_status s = pl_engine_capacity(f->engine, (size_t)(o->prefix_len + in_hi),
                                         (size_t)out_hi, &capacity);
        if (s != PL_OK || capacity == 0) {
            fprintf(stderr,
                    "pagellm: the KV pool cannot hold one request of %lld + %lld tokens: %s\n",
                    o->prefix_len + in_hi, out_hi, s != PL_OK ? pl_last_error_as(PL_NAMING_FLAG) : "0 fit");
            return 1;
        }
    }
    bool to_text = f->text_prompts && f->tok;
    size_t n_special = to_text ? special_count(f) : 0;
    int32_t lo_id = f->vocab_size > 3 ? 3 : 0, hi_id = f->vocab_size - 1;
    if (hi_id < lo_id) {
        fprintf(stderr, "pagellm: the model reports an empty vocabulary\n");
        return 1;
    }
    uint64_t st = seed * 0x2545F4914F6CDD1Dull + 1;
    int32_t *prefix = malloc(((size_t)o->prefix_len + 1) * sizeof *prefix);
    size_t n_pool = 0;
    int32_t *pool = to_text ? text_ids(f->tok, lo_id, hi_id, &n_pool) : NULL;
    w->prompts = calloc((size_t)o->num_prompts, sizeof *w->prompts);
    if (!prefix || !w->prompts || (to_text && !pool)) goto oom;
    for (long long k = 0; k < o->prefix_len; k++)
        prefix[k] = (int32_t)rng_range(&st, lo_id, hi_id);
    for (long long i = 0; i < o->num_prompts; i++) {
        pl_bench_prompt *p = &w->prompts[w->n];
        long long in = rng_range(&st, in_lo, in_hi);
        p->output_len = (int)rng_range(&st, out_lo, out_hi);
        p->n_ids = (size_t)(o->prefix_len + in);
        p->ids = malloc(p->n_ids * sizeof *p->ids);
        if (!p->ids) goto oom;
        w->n++;
        memcpy(p->ids, prefix, (size_t)o->prefix_len * sizeof *prefix);
        for (size_t k = (size_t)o->prefix_len; k < p->n_ids; k++)
            p->ids[k] = (int32_t)rng_range(&st, lo_id, hi_id);
        p->n_tokens = p->n_ids;
        if (to_text && ids_to_text(f, p, n_special, pool, n_pool, &st, lo_id, hi_id)) {
            free(prefix);
            free(pool);
            pl_bench_workload_free(w);
            return 1;
        }
    }
    free(prefix);
    free(pool);
    return 0;
oom:
    free(prefix);
    free(pool);
    pl_bench_workload_free(w);
    fprintf(stderr, "pagellm: out of memory for %lld prompts\n", o->num_prompts);
    return 1;
}

/* ------------------------------------------------------------------------------------------
 * Dataset files
 * ---------------------------------------------------------------------------------------- */

static bool has_tokenizer(const pl_bench_model_facts *f) {
    int32_t *ids = NULL;
    size_t n = 0;
    if (!f->tok && !f->engine) return false;
    if (encode(f, "a", &ids, &n) != PL_OK) return false;
    pl_free_ids(ids);
    return true;
}

/* A dataset line's chat as the ids submit_chat would queue: rendered with the model's template
 * (the line's tools and chat_template_kwargs), special tokens parsed, nothing added. */
static bool chat_ids(const pl_engine *e, const cli_prompt *cp, pl_bench_prompt *p) {
    pl_chat_options co;
    pl_chat_options_default(&co);
    co.tools = cp->tools;
    co.chat_template_kwargs = cp->chat_template_kwargs;
    char *text;
    size_t len;
    if (pl_engine_apply_chat_template_json(e, cp->messages, &co, &text, &len) != PL_OK)
        return false;
    int32_t *ids;
    size_t n;
    pl_status s = pl_tokenizer_encode(pl_engine_tokenizer(e), text, len, PL_ENCODE_PARSE_SPECIAL,
                                      &ids, &n);
    pl_free_text(text);
    if (s != PL_OK) return false;
    /* the workload's arrays are malloc'd (pl_bench_workload_free) */
    p->ids = malloc((n ? n : 1) * sizeof *p->ids);
    if (p->ids) memcpy(p->ids, ids, n * sizeof *ids);
    p->n_ids = n;
    pl_free_ids(ids);
    return p->ids != NULL;
}

static int build_jsonl(const pl_bench_workload_opts *o, const pl_bench_model_facts *f,
                       pl_bench_workload *w) {
    pl_sampling_params defaults;
    pl_sampling_params_default(&defaults);
    defaults.max_tokens = (int)o->output_len;
    cli_prompt *cp = NULL;
    size_t n = 0;
    char err[512];
    if (!cli_prompts_load(o->dataset, &defaults, &cp, &n, err, sizeof err)) {
        fprintf(stderr, "pagellm: --dataset: %s\n", err);
        return 2;
    }
    if (n == 0) {
        fprintf(stderr, "pagellm: --dataset: %s holds no prompts\n", o->dataset);
        cli_prompts_free(cp, n);
        return 2;
    }
    size_t take = n;
    if (o->num_prompts_set && (size_t)o->num_prompts < n) take = (size_t)o->num_prompts;
    if (o->num_prompts_set && (size_t)o->num_prompts > n)
        fprintf(stderr, "pagellm: --num-prompts %lld: %s holds only %zu prompts; using them all\n",
                o->num_prompts, o->dataset, n);
    bool tok = has_tokenizer(f);
    int rc = 0;
    w->prompts = calloc(take, sizeof *w->prompts);
    if (!w->prompts) goto oom;
    for (size_t i = 0; i < take; i++) {
        pl_bench_prompt *p = &w->prompts[i];
        if ((cp[i].text && !tok && !f->text_prompts) || (cp[i].messages && !tok)) {
            fprintf(stderr, "pagellm: --dataset: %s: prompt %zu is %s but the model has no "
                            "tokenizer (give --tokenizer, or use prompt_token_ids)\n",
                    o->dataset, i + 1, cp[i].text ? "text" : "a chat");
            rc = 2;
            goto fail;
        }
        p->output_len = o->output_len_set ? (int)o->output_len : cp[i].params.max_tokens;
        if (cp[i].messages && !f->engine) {
            fprintf(stderr, "pagellm: --dataset: %s:%zu: chat lines are rendered by an engine's "
                            "template; against a server, give prompts or prompt_token_ids\n",
                    o->dataset, cp[i].line);
            rc = 2;
            goto fail;
        } else if (cp[i].messages) {
            if (!chat_ids(f->engine, &cp[i], p)) {
                fprintf(stderr, "pagellm: --dataset: %s:%zu: messages: %s\n", o->dataset,
                        cp[i].line, pl_last_error_as(PL_NAMING_FLAG));
                rc = 2;
                goto fail;
            }
        } else if (cp[i].text) {
            if (!(p->text = strdup(cp[i].text))) goto oom;
            if (tok && f->text_prompts) {
                int32_t *ids = NULL;
                if (encode(f, p->text, &ids, &p->n_tokens) != PL_OK) p->n_tokens = 0;
                pl_free_ids(ids);
            }
        } else {
            p->n_ids = p->n_tokens = cp[i].n_ids;
            if (!(p->ids = malloc((p->n_ids ? p->n_ids : 1) * sizeof *p->ids))) goto oom;
            memcpy(p->ids, cp[i].ids, p->n_ids * sizeof *p->ids);
        }
        w->n++;
    }
    cli_prompts_free(cp, n);
    return 0;
oom:
    fprintf(stderr, "pagellm: out of memory reading %s\n", o->dataset);
    rc = 1;
fail:
    cli_prompts_free(cp, n);
    pl_bench_workload_free(w);
    return rc;
}

/* Token count of text as submit would see it; the tokenizer adds BOS, which is part of a
 * prompt but not of an answer (count_bos false). -1 on failure. */
static long long token_count(const pl_bench_model_facts *f, const char *text, bool count_bos,
                             int32_t **keep_ids) {
    int32_t *ids = NULL;
    size_t n = 0;
    if (encode(f, text, &ids, &n) != PL_OK) return -1;
    long long c = (long long)n - (count_bos || n == 0 ? 0 : 1);
    if (keep_ids)
        *keep_ids = ids;
    else
        pl_free_ids(ids);
    return c;
}

static int build_sharegpt(const pl_bench_workload_opts *o, const pl_bench_model_facts *f,
                          uint64_t seed, pl_bench_workload *w) {
    if (!has_tokenizer(f)) {
        fprintf(stderr, "pagellm: --dataset: %s is ShareGPT JSON: output lengths come from the "
                        "answers' token counts, which needs a tokenizer (give --tokenizer)\n",
                o->dataset);
        return 2;
    }
    json_error_t jerr;
    json_t *root = json_load_file(o->dataset, 0, &jerr);
    if (!root) {
        fprintf(stderr, "pagellm: --dataset: %s:%d:%d: %s\n", o->dataset, jerr.line, jerr.column,
                jerr.text);
        return 2;
    }
    if (!json_is_array(root)) {
        fprintf(stderr, "pagellm: --dataset: %s: expected a JSON array of conversations\n",
                o->dataset);
        json_decref(root);
        return 2;
    }
    size_t total = json_array_size(root);
    size_t want = o->num_prompts_set ? (size_t)o->num_prompts : total;
    size_t *order = malloc((total ? total : 1) * sizeof *order);
    w->prompts = calloc(want ? want : 1, sizeof *w->prompts);
    if (!order || !w->prompts) {
        free(order);
        json_decref(root);
        fprintf(stderr, "pagellm: out of memory reading %s\n", o->dataset);
        return 1;
    }
    uint64_t st = seed * 0x2545F4914F6CDD1Dull + 7;
    for (size_t i = 0; i < total; i++) order[i] = i;
    for (size_t i = total; i > 1; i--) { /* Fisher-Yates */
        size_t j = (size_t)(rng_next(&st) % i);
        size_t t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }
    size_t skipped = 0;
    for (size_t k = 0; k < total && w->n < want; k++) {
        json_t *conv = json_object_get(json_array_get(root, order[k]), "conversations");
        const char *q = json_string_value(json_object_get(json_array_get(conv, 0), "value"));
        const char *a = json_string_value(json_object_get(json_array_get(conv, 1), "value"));
        if (!q || !a || !q[0] || !a[0]) {
            skipped++;
            continue;
        }
        int32_t *ids = NULL;
        long long np = token_count(f, q, true, &ids);
        long long no = token_count(f, a, false, NULL);
        long long limit = f->max_model_len > 0 ? f->max_model_len : 2048;
        if (np < 4 || no < 4 || np > 1024 || np + no > 2048 ||
            np + (o->output_len_set ? o->output_len : no) > limit) {
            pl_free_ids(ids);
            skipped++;
            continue;
        }
        pl_bench_prompt *p = &w->prompts[w->n];
        p->n_tokens = (size_t)np;
        if (f->text_prompts) { /* the server tokenizes the conversation's own text */
            pl_free_ids(ids);
            if (!(p->text = strdup(q))) break;
        } else {
            p->n_ids = (size_t)np;
            p->ids = malloc((size_t)np * sizeof *p->ids);
            if (!p->ids) {
                pl_free_ids(ids);
                break;
            }
            memcpy(p->ids, ids, (size_t)np * sizeof *ids);
            pl_free_ids(ids);
        }
        p->output_len = (int)(o->output_len_set ? o->output_len : no);
        w->n++;
    }
    free(order);
    json_decref(root);
    if (w->n == 0) {
        fprintf(stderr, "pagellm: --dataset: %s: no usable conversation (%zu skipped: missing "
                        "turns, or lengths out of bounds)\n", o->dataset, skipped);
        pl_bench_workload_free(w);
        return 2;
    }
    if (w->n < want && o->num_prompts_set)
        fprintf(stderr, "pagellm: --num-prompts %lld: only %zu usable conversations in %s\n",
                o->num_prompts, w->n, o->dataset);
    return 0;
}

/* ShareGPT files are one JSON array; JSONL files are one object per line. */
static int dataset_kind(const char *path, bool *is_array) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "pagellm: --dataset: cannot open %s: %s\n", path, strerror(errno));
        return 2;
    }
    int c;
    while ((c = fgetc(f)) != EOF && (c == ' ' || c == '\t' || c == '\n' || c == '\r')) {}
    fclose(f);
    *is_array = c == '[';
    return 0;
}

int pl_bench_workload_check(const pl_bench_workload_opts *o) {
    const char *name = o->dataset_name;
    if (name && !strcmp(name, "random") && o->dataset) {
        fprintf(stderr, "pagellm: --dataset-name random makes its own prompts: it takes no "
                        "--dataset-path (%s); name the file's kind (sharegpt or custom)\n",
                o->dataset);
        return 2;
    }
    if (name && strcmp(name, "random") && !o->dataset) {
        fprintf(stderr, "pagellm: --dataset-name %s needs --dataset-path FILE\n", name);
        return 2;
    }
    return 0;
}

int pl_bench_workload_build_for(const pl_bench_workload_opts *o, const pl_bench_model_facts *f,
                                uint64_t seed_offset, pl_bench_workload *out) {
    memset(out, 0, sizeof *out);
    uint64_t seed = o->seed + seed_offset;
    const char *name = o->dataset_name;
    int rc = pl_bench_workload_check(o);
    if (rc) return rc;
    if (!o->dataset) return build_random(o, f, seed, out);
    bool is_array = false;
    if ((rc = dataset_kind(o->dataset, &is_array))) return rc;
    if (name && is_array != !strcmp(name, "sharegpt")) {
        fprintf(stderr, "pagellm: --dataset-name %s: %s holds %s\n", name, o->dataset,
                is_array ? "a JSON array (ShareGPT: --dataset-name sharegpt)"
                         : "JSON lines (--dataset-name custom)");
        return 2;
    }
    return is_array ? build_sharegpt(o, f, seed, out) : build_jsonl(o, f, out);
}

int pl_bench_workload_build(const pl_bench_workload_opts *o, const pl_engine *e,
                            uint64_t seed_offset, pl_bench_workload *out) {
    pl_metrics m;
    pl_engine_metrics(e, &m);
    pl_bench_model_facts f = {.vocab_size = m.vocab_size, .max_model_len = m.max_model_len,
                              .engine = e, .tok = pl_engine_tokenizer(e)};
    return pl_bench_workload_build_for(o, &f, seed_offset, out);
}

void pl_bench_workload_free(pl_bench_workload *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n; i++) {
        free(w->prompts[i].ids);
        free(w->prompts[i].text);
    }
    free(w->prompts);
    memset(w, 0, sizeof *w);
}

void pl_bench_workload_describe(const pl_bench_workload_opts *o, const pl_bench_workload *w,
                                char *buf, size_t cap) {
    if (o->dataset) {
        snprintf(buf, cap, "%zu prompts from %s (seed %llu)", w->n, o->dataset,
                 (unsigned long long)o->seed);
        return;
    }
    snprintf(buf, cap, "%zu random prompts (seed %llu): input %lld, output %lld, range ratio "
                       "%.2f, shared prefix %lld%s",
             w->n, (unsigned long long)o->seed, o->input_len, o->output_len, o->range_ratio,
             o->prefix_len, o->ignore_eos ? ", ignore EOS" : "");
}
