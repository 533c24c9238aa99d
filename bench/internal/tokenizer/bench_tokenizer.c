/*
 * bench/internal/tokenizer/bench_tokenizer.c - micro-benchmark of encoding: throughput on one
 * core for a text file (English prose), and the time of 1 MB inputs that would make a naive
 * merge quadratic (one word without spaces, one character repeated, spaces, digits,
 * newlines). Not a test: it only checks that encoding succeeded, then prints key=value lines.
 *
 * The text is read once and, if shorter than --min-bytes, repeated (joined by a newline) up to
 * that size; each measurement encodes the whole text, repeatedly for at least the given time,
 * and reports the best of the repeats (MB = 10^6 bytes), in CPU time of the encoding thread
 * (what one core costs, unaffected by other processes taking turns on a shared machine) and
 * in wall time.
 *
 * Usage: bench_tokenizer TOKENIZER TEXT_FILE [seconds, default 2] [min bytes, default 1000000]
 *   e.g. bench_tokenizer ../shared/models/llama3 /usr/share/common-licenses/GPL-3
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tokenizer/tokenizer.h"
#include "util/alloc.h"
#include "util/timer.h"

#ifndef PL_BUILDTYPE
#define PL_BUILDTYPE "unknown"
#endif

static void die(const char *what) {
    fprintf(stderr, "bench_tokenizer: %s: %s\n", what, pl_last_error());
    exit(1);
}

static char *read_text(const char *path, size_t min_bytes, size_t *out_n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (len <= 0) {
        fprintf(stderr, "%s: empty\n", path);
        exit(1);
    }
    size_t unit = (size_t)len, n = unit;
    while (n < min_bytes) n += unit + 1;
    char *s = malloc(n + 1);
    if (!s || fread(s, 1, unit, f) != unit) {
        fprintf(stderr, "%s: read failed\n", path);
        exit(1);
    }
    fclose(f);
    for (size_t at = unit; at < n; at += unit + 1) {
        s[at] = '\n';
        memcpy(s + at + 1, s, unit);
    }
    s[n] = '\0';
    *out_n = n;
    return s;
}

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Encodes text repeatedly for `seconds` (at least 3 times); *cpu and *wall get the best time
 * of one encode in seconds. */
static void time_encode(const pl_tokenizer *t, const char *text, size_t n, double seconds,
                        size_t *out_ids, double *cpu, double *wall) {
    *cpu = *wall = 1e30;
    uint64_t start = pl_now_ns();
    int reps = 0;
    do {
        int32_t *ids;
        size_t k;
        uint64_t t0 = pl_now_ns();
        double c0 = cpu_s();
        if (pl_tok_encode(t, text, n, 0, &ids, &k) != PL_OK) die("encode");
        double dc = cpu_s() - c0, dt = (double)(pl_now_ns() - t0) * 1e-9;
        if (dc < *cpu) *cpu = dc;
        if (dt < *wall) *wall = dt;
        *out_ids = k;
        pl_free(ids);
    } while (++reps < 3 || (double)(pl_now_ns() - start) * 1e-9 < seconds);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_tokenizer TOKENIZER TEXT_FILE [seconds] [min bytes]\n");
        return 2;
    }
    double seconds = argc > 3 ? atof(argv[3]) : 2.0;
    size_t min_bytes = argc > 4 ? (size_t)atol(argv[4]) : 1000000;
    if (!(seconds > 0)) seconds = 2.0;
    uint64_t t0 = pl_now_ns();
    pl_tokenizer *t;
    if (pl_tok_load(argv[1], &t) != PL_OK) die("load");
    double load_s = (double)(pl_now_ns() - t0) * 1e-9;
    size_t n;
    char *text = read_text(argv[2], min_bytes, &n);
    printf("buildtype=%s\ntokenizer=%s\ntype=%s\nload_s=%.3f\n", PL_BUILDTYPE, argv[1],
           pl_tok_type(t), load_s);
    size_t n_ids;
    double cpu, wall;
    time_encode(t, text, n, seconds, &n_ids, &cpu, &wall);
    printf("text=%s\ntext_bytes=%zu\nids=%zu\nencode_cpu_s=%.4f\nencode_wall_s=%.4f\n"
           "encode_MB_per_s=%.2f\nencode_wall_MB_per_s=%.2f\n", argv[2], n, n_ids, cpu, wall,
           (double)n / cpu * 1e-6, (double)n / wall * 1e-6);
    free(text);

    static const struct {
        const char *name, *unit;
    } runs[] = {{"one_word", NULL}, {"repeat_a", "a"}, {"spaces", " "},
                {"digits", "0123456789"}, {"newlines", "\n"}};
    const size_t mb = 1u << 20;
    char *s = malloc(mb + 1);
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        if (runs[r].unit) {
            size_t u = strlen(runs[r].unit);
            for (size_t i = 0; i < mb; i++) s[i] = runs[r].unit[i % u];
        } else { /* letters from a 32-bit LCG, as the oracle fixture's generator makes them */
            uint32_t x = 12345;
            for (size_t i = 0; i < mb; i++) {
                x = x * 1664525u + 1013904223u;
                s[i] = (char)('a' + (x >> 24) % 26);
            }
        }
        time_encode(t, s, mb, seconds / 4, &n_ids, &cpu, &wall);
        printf("%s_1MiB_cpu_s=%.4f\n%s_1MiB_wall_s=%.4f\n%s_1MiB_ids=%zu\n", runs[r].name, cpu,
               runs[r].name, wall, runs[r].name, n_ids);
    }
    free(s);
    pl_tok_free(t);
    return 0;
}
