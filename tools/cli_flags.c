/*
 * tools/cli_flags.c - strict parsing of numbers and of the engine and sampling flags.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cli.h"

bool cli_int(const char *flag, const char *s, long long lo, long long hi, long long *out) {
    if (!s) {
        fprintf(stderr, "pagellm: %s: missing value\n", flag);
        return false;
    }
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno) {
        fprintf(stderr, "pagellm: %s: '%s' is not an integer\n", flag, s);
        return false;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "pagellm: %s: %lld is outside [%lld, %lld]\n", flag, v, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

bool cli_float(const char *flag, const char *s, double lo, double hi, double *out) {
    if (!s) {
        fprintf(stderr, "pagellm: %s: missing value\n", flag);
        return false;
    }
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v)) {
        fprintf(stderr, "pagellm: %s: '%s' is not a number\n", flag, s);
        return false;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "pagellm: %s: %g is outside [%g, %g]\n", flag, v, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

/* SIZE: whole bytes with an optional binary suffix K, M, G or KiB, MiB, GiB (any case; K and
 * KiB both mean 1024, as memory sizes usually do). strtoull alone would accept leading
 * blanks and a sign (wrapping "-1" to 2^64 - 1), so the first character must be a digit. */
static bool parse_size(const char *flag, const char *s, size_t *out) {
    static const struct {
        const char *suffix;
        unsigned shift;
    } units[] = {{"", 0},     {"k", 10},  {"kib", 10}, {"m", 20},
                 {"mib", 20}, {"g", 30},  {"gib", 30}};
    if (!s) {
        fprintf(stderr, "pagellm: %s: missing value\n", flag);
        return false;
    }
    if (*s >= '0' && *s <= '9') {
        errno = 0;
        char *end;
        unsigned long long v = strtoull(s, &end, 10);
        for (size_t k = 0; k < sizeof units / sizeof units[0]; k++) {
            if (strcasecmp(end, units[k].suffix) != 0) continue;
            if (errno == ERANGE || v > (unsigned long long)(SIZE_MAX >> units[k].shift)) {
                fprintf(stderr, "pagellm: %s: '%s' is too large (at most %zu bytes)\n", flag,
                        s, (size_t)SIZE_MAX);
                return false;
            }
            *out = (size_t)v << units[k].shift;
            return true;
        }
    }
    fprintf(stderr, "pagellm: %s: '%s' is not a size (bytes, or a whole number with K, M, G, "
            "KiB, MiB or GiB)\n", flag, s);
    return false;
}

static const char *value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) return NULL;
    return argv[++*i];
}

static bool parse_dtype(const char *flag, const char *s, pl_dtype *out) {
    if (!s) {
        fprintf(stderr, "pagellm: %s: missing value\n", flag);
        return false;
    }
    if (!strcmp(s, "auto")) *out = PL_DTYPE_AUTO;
    else if (!strcmp(s, "f32") || !strcmp(s, "float32")) *out = PL_DTYPE_F32;
    else if (!strcmp(s, "f16") || !strcmp(s, "float16")) *out = PL_DTYPE_F16;
    else if (!strcmp(s, "bf16") || !strcmp(s, "bfloat16")) *out = PL_DTYPE_BF16;
    else {
        fprintf(stderr, "pagellm: %s: '%s' is not one of auto, f32, f16, bf16\n", flag, s);
        return false;
    }
    return true;
}

#define INT_FLAG(name, field, lo, hi)                                                          \
    if (!strcmp(a, name)) {                                                                    \
        long long v_;                                                                          \
        if (!cli_int(name, value(argc, argv, i), lo, hi, &v_)) return -1;                      \
        field = (int)v_;                                                                       \
        return 1;                                                                              \
    }

int cli_engine_flag(pl_engine_config *c, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    if (!strcmp(a, "--model")) {
        if (!(c->model_path = value(argc, argv, i))) goto missing;
        return 1;
    }
    if (!strcmp(a, "--tokenizer")) {
        if (!(c->tokenizer_path = value(argc, argv, i))) goto missing;
        return 1;
    }
    if (!strcmp(a, "--dtype")) return parse_dtype(a, value(argc, argv, i), &c->weight_dtype) ? 1 : -1;
    if (!strcmp(a, "--kv-dtype")) return parse_dtype(a, value(argc, argv, i), &c->kv_dtype) ? 1 : -1;
    if (!strcmp(a, "--backend")) {
        const char *v = value(argc, argv, i);
        if (!v) goto missing;
        if (!strcmp(v, "cpu")) c->backend = PL_BACKEND_CPU;
        else if (!strcmp(v, "ref")) c->backend = PL_BACKEND_REF;
        else if (!strcmp(v, "cuda")) c->backend = PL_BACKEND_CUDA;
        else {
            fprintf(stderr, "pagellm: --backend: '%s' is not one of cpu, ref, cuda\n", v);
            return -1;
        }
        return 1;
    }
    INT_FLAG("--threads", c->n_threads, 0, 1024)
    INT_FLAG("--cuda-device", c->cuda_device, 0, 1024)
    INT_FLAG("--block-size", c->block_size, 1, 256)
    INT_FLAG("--max-num-blocks", c->max_num_blocks, 0, 1 << 30)
    INT_FLAG("--max-batch-size", c->max_batch_size, 1, 1 << 16)
    INT_FLAG("--max-num-seqs", c->max_num_seqs, 1, 1 << 20)
    INT_FLAG("--max-total-tokens", c->max_total_tokens, 1, 1 << 24)
    INT_FLAG("--max-model-len", c->max_model_len, 0, 1 << 24)
    INT_FLAG("--long-prefill-threshold", c->long_prefill_threshold, 0, 1 << 24)
    INT_FLAG("--max-skip-head", c->max_skip_head, 0, 1 << 20)
    INT_FLAG("--max-waiting", c->max_waiting, 0, 1 << 24)
    if (!strcmp(a, "--weight-seed")) {
        long long v;
        if (!cli_int(a, value(argc, argv, i), 0, INT64_MAX, &v)) return -1;
        c->dummy_seed = (uint64_t)v;
        return 1;
    }
    if (!strcmp(a, "--memory-limit"))
        return parse_size(a, value(argc, argv, i), &c->memory_limit_bytes) ? 1 : -1;
    if (!strcmp(a, "--memory-threshold")) {
        double v;
        if (!cli_float(a, value(argc, argv, i), 1e-6, 1.0, &v)) return -1;
        c->memory_threshold = v;
        return 1;
    }
    if (!strcmp(a, "--watermark")) {
        double v;
        if (!cli_float(a, value(argc, argv, i), 0.0, 0.99, &v)) return -1;
        c->watermark = v;
        return 1;
    }
    if (!strcmp(a, "--overflow-policy")) {
        const char *v = value(argc, argv, i);
        if (!v) goto missing;
        if (!strcmp(v, "reject-newest")) c->overflow_policy = PL_OVERFLOW_REJECT_NEWEST;
        else if (!strcmp(v, "drop-oldest")) c->overflow_policy = PL_OVERFLOW_DROP_OLDEST;
        else {
            fprintf(stderr, "pagellm: --overflow-policy: '%s' is not reject-newest or drop-oldest\n", v);
            return -1;
        }
        return 1;
    }
    if (!strcmp(a, "--no-prefix-caching")) { c->enable_prefix_caching = false; return 1; }
    if (!strcmp(a, "--enable-prefix-caching")) { c->enable_prefix_caching = true; return 1; }
    if (!strcmp(a, "--no-chunked-prefill")) { c->enable_chunked_prefill = false; return 1; }
    if (!strcmp(a, "--log-preemptions")) { c->log_preemptions = true; return 1; }
    return 0;
missing:
    fprintf(stderr, "pagellm: %s: missing value\n", a);
    return -1;
}

void cli_print_engine_flags(void) {
    printf("engine flags:\n"
           "  --model PATH|dummy:NAME   llama2.c .bin, Hugging Face dir, or dummy:tiny|stories15m|\n"
           "                            stories110m|tinyllama-1.1b|llama2-7b (seeded weights)\n"
           "  --tokenizer PATH          SentencePiece .model (default: beside the model)\n"
           "  --dtype auto|f32|f16|bf16 weight storage      --kv-dtype auto|f32|f16|bf16\n"
           "  --weight-seed N           seed of dummy weights\n"
           "  --backend cpu|ref|cuda    --threads N (0 = all cores)   --cuda-device N\n"
           "  --block-size N (16)       --max-num-blocks N (0 = from memory)\n"
           "  --memory-limit SIZE       memory for weights + KV cache: bytes or 512M, 4GiB...\n"
           "                            (0 = physical memory); weights must fit it\n"
           "  --memory-threshold F (0.9) --max-batch-size N (32)  --max-num-seqs N (256)\n"
           "  --max-total-tokens N (4096) --max-model-len N (model's)\n"
           "  --no-prefix-caching       --no-chunked-prefill   --long-prefill-threshold N\n"
           "  --max-skip-head N (4)     --watermark F (0.01)   --max-waiting N (4096)\n"
           "  --overflow-policy reject-newest|drop-oldest     --log-preemptions\n");
}

int cli_sampling_flag(pl_sampling_params *p, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    INT_FLAG("--max-tokens", p->max_tokens, 1, 1 << 24)
    INT_FLAG("--min-tokens", p->min_tokens, 0, 1 << 24)
    INT_FLAG("--top-k", p->top_k, 0, 1 << 24)
    INT_FLAG("--n", p->n, 1, 64)
    INT_FLAG("--priority", p->priority, -1000000, 1000000)
    struct { const char *name; float *field; double lo, hi; } floats[] = {
        {"--temperature", &p->temperature, 0.0, 100.0},
        {"--top-p", &p->top_p, 1e-9, 1.0},
        {"--min-p", &p->min_p, 0.0, 1.0},
        {"--repetition-penalty", &p->repetition_penalty, 1e-6, 100.0},
        {"--presence-penalty", &p->presence_penalty, -2.0, 2.0},
        {"--frequency-penalty", &p->frequency_penalty, -2.0, 2.0},
    };
    for (size_t k = 0; k < sizeof floats / sizeof floats[0]; k++)
        if (!strcmp(a, floats[k].name)) {
            double v;
            if (!cli_float(a, value(argc, argv, i), floats[k].lo, floats[k].hi, &v)) return -1;
            *floats[k].field = (float)v;
            return 1;
        }
    if (!strcmp(a, "--seed")) {
        long long v;
        if (!cli_int(a, value(argc, argv, i), 0, INT64_MAX, &v)) return -1;
        p->seed = (uint64_t)v;
        p->has_seed = true;
        return 1;
    }
    if (!strcmp(a, "--ignore-eos")) { p->ignore_eos = true; return 1; }
    if (!strcmp(a, "--stop")) {
        const char *v = value(argc, argv, i);
        if (!v || !v[0]) {
            fprintf(stderr, "pagellm: --stop: missing or empty value\n");
            return -1;
        }
        if (p->n_stop >= PL_MAX_STOP_STRINGS) {
            fprintf(stderr, "pagellm: --stop: at most %d stop strings\n", PL_MAX_STOP_STRINGS);
            return -1;
        }
        p->stop[p->n_stop++] = v;
        return 1;
    }
    if (!strcmp(a, "--stop-id")) {
        long long v;
        if (!cli_int(a, value(argc, argv, i), 0, INT32_MAX, &v)) return -1;
        if (p->n_stop_ids >= PL_MAX_STOP_IDS) {
            fprintf(stderr, "pagellm: --stop-id: at most %d stop ids\n", PL_MAX_STOP_IDS);
            return -1;
        }
        p->stop_ids[p->n_stop_ids++] = (int32_t)v;
        return 1;
    }
    return 0;
}

void cli_print_sampling_flags(void) {
    printf("sampling flags:\n"
           "  --max-tokens N (100)  --min-tokens N  --temperature T (1.0; 0 = greedy)\n"
           "  --top-p P (0.9)  --top-k K (0 = off)  --min-p P  --seed S  --n N  --priority N\n"
           "  --repetition-penalty F  --presence-penalty F  --frequency-penalty F\n"
           "  --stop STR (repeatable)  --stop-id ID (repeatable)  --ignore-eos\n");
}
