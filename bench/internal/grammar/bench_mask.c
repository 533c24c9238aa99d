/*
 * bench/internal/grammar/bench_mask.c - micro-benchmark of the token mask alone (no model): SEQS
 * sequences follow a JSON schema through a tokenizer's vocabulary, each step computing the
 * mask of every sequence and drawing one allowed token uniformly at random (what a
 * random-weight model does), so the parse states met are those of bench_grammar's runs.
 * Reports the CPU time of pl_gram_mask per call: a cold pass (a grammar compiled fresh, every
 * cache empty) and a warm pass (the same grammar and seeds again), plus the time to build the
 * vocabulary's trie and to compile the schema. Not a test: prints key=value lines.
 *
 * Usage: bench_mask TOKENIZER [SEQS, default 32] [TOKENS, default 64] [SCHEMA_FILE]
 *   e.g. bench_mask ../shared/models/llama3
 * Without SCHEMA_FILE it uses bench_grammar.c's nested order schema.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grammar/grammar.h"
#include "tokenizer/tokenizer.h"
#include "util/alloc.h"
#include "util/timer.h"

#include "order_schema.h"


static void die(const char *what) {
    fprintf(stderr, "bench_mask: %s: %s\n", what, pl_last_error());
    exit(1);
}

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t next_rand(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

typedef struct pass {
    double mask_s, worst_s;
    size_t calls, tokens, finished;
} pass;

/* One pass: seqs matchers from g's first state, tokens steps each. */
static pass run_pass(const pl_gram *g, const pl_gram_vocab *v, int seqs, int tokens) {
    int V = pl_gram_vocab_size(v);
    size_t words = ((size_t)V + 63) / 64;
    uint64_t *bits = calloc(words, sizeof *bits);
    int32_t *allowed = malloc((size_t)(V + 1) * sizeof *allowed);
    pl_gram_matcher *m = calloc((size_t)seqs, sizeof *m);
    uint64_t *rng = calloc((size_t)seqs, sizeof *rng);
    bool *done = calloc((size_t)seqs, sizeof *done);
    for (int i = 0; i < seqs; i++) {
        if (pl_gram_matcher_init(&m[i], g) != PL_OK) die("matcher");
        rng[i] = 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1);
    }
    pass p = {0};
    for (int step = 0; step < tokens; step++) {
        for (int i = 0; i < seqs; i++) {
            if (done[i]) continue;
            memset(bits, 0, words * sizeof *bits);
            double t0 = cpu_s();
            if (pl_gram_mask(&m[i], v, NULL, 0, bits) != PL_OK) die("mask");
            double dt = cpu_s() - t0;
            p.mask_s += dt;
            if (dt > p.worst_s) p.worst_s = dt;
            p.calls++;
            int n = 0;
            for (size_t w = 0; w < words; w++)
                for (uint64_t b = bits[w]; b; b &= b - 1)
                    allowed[n++] = (int32_t)(w * 64 + (size_t)__builtin_ctzll(b));
            bool complete = pl_gram_matcher_is_complete(&m[i]);
            if (complete) allowed[n++] = -1; /* end of text */
            if (n == 0) {
                done[i] = true;
                continue;
            }
            int32_t pick = allowed[next_rand(&rng[i]) % (uint64_t)n];
            if (pick < 0) {
                done[i] = true;
                p.finished++;
                continue;
            }
            if (pl_gram_matcher_accept_token(&m[i], v, pick) != PL_OK) die("accept");
            p.tokens++;
        }
    }
    for (int i = 0; i < seqs; i++) pl_gram_matcher_deinit(&m[i]);
    free(m), free(rng), free(done), free(bits), free(allowed);
    return p;
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (!s || fread(s, 1, (size_t)n, f) != (size_t)n) exit(1);
    s[n] = '\0';
    fclose(f);
    return s;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_mask TOKENIZER [SEQS] [TOKENS] [SCHEMA_FILE]\n");
        return 2;
    }
    int seqs = argc > 2 ? atoi(argv[2]) : 32, tokens = argc > 3 ? atoi(argv[3]) : 64;
    char *schema = argc > 4 ? read_file(argv[4]) : NULL;
    pl_tokenizer *t;
    if (pl_tok_load(argv[1], &t) != PL_OK) die("tokenizer");
    double c0 = cpu_s();
    pl_gram_vocab *v;
    if (pl_gram_vocab_create(t, &v) != PL_OK) die("vocabulary");
    printf("vocab_build_cpu_ms=%.1f\n", (cpu_s() - c0) * 1e3);
    const char *text = schema ? schema : k_schema;
    for (int rep = 0; rep < 2; rep++) {
        c0 = cpu_s();
        char *gbnf;
        if (pl_gram_schema_to_gbnf(text, strlen(text), NULL, &gbnf) != PL_OK) die("schema");
        pl_gram *g;
        if (pl_gram_parse(gbnf, strlen(gbnf), t, &g) != PL_OK) die("grammar");
        pl_free(gbnf);
        double compile = cpu_s() - c0;
        pass cold = run_pass(g, v, seqs, tokens);
        pass warm = run_pass(g, v, seqs, tokens);
        pl_gram_cache_stats cs;
        pl_gram_cache_stats_get(g, &cs);
        printf("rep=%d compile_cpu_ms=%.2f calls=%zu tokens=%zu finished=%zu "
               "cold_mask_us_per_call=%.1f cold_worst_ms=%.2f warm_mask_us_per_call=%.1f "
               "warm_worst_ms=%.2f cache_hits=%llu cache_misses=%llu cache_bytes=%llu\n",
               rep, compile * 1e3, cold.calls, cold.tokens, cold.finished,
               cold.mask_s / (double)cold.calls * 1e6, cold.worst_s * 1e3,
               warm.mask_s / (double)warm.calls * 1e6, warm.worst_s * 1e3,
               (unsigned long long)cs.hits, (unsigned long long)cs.misses,
               (unsigned long long)cs.bytes);
        pl_gram_free(g);
    }
    pl_gram_vocab_free(v);
    pl_tok_free(t);
    free(schema);
    return 0;
}
