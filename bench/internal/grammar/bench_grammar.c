/*
 * bench/internal/grammar/bench_grammar.c - what constrained output costs: the sample phase
 * (which holds the mask) per output token at 32 sequences against the same run without a
 * constraint, as a share of the whole step; and the compile time of a 50-property schema.
 * Public API only. Build (from the repository, after scripts/build.sh build):
 *   cc -O2 -Iinclude bench/internal/grammar/bench_grammar.c build/libpagellm.so \
 *      -Wl,-rpath,$PWD/build -o /tmp/bench_grammar
 *   /tmp/bench_grammar MODEL TOKENIZER [SEQS] [TOKENS] [REPEATS]
 * Prints key=value lines.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pagellm.h"
#include "order_schema.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}


typedef struct run {
    double sample_s, step_s, tokens, wall;
} run;

static run one(const char *model, const char *tok, int seqs, int tokens, const char *schema) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = model;
    c.tokenizer_path = tok;
    c.max_batch_size = seqs;
    pl_engine *e;
    if (pl_engine_create(&c, &e) != PL_OK) {
        fprintf(stderr, "%s\n", pl_last_error());
        exit(1);
    }
    pl_sampling_params p;
    pl_sampling_params_default(&p);
    p.max_tokens = tokens;
    p.min_tokens = schema ? 0 : tokens;
    p.json_schema = schema;
    for (int i = 0; i < seqs; i++) {
        p.seed = (uint64_t)i;
        p.has_seed = true;
        if (pl_engine_submit_request(e, "Write the order as JSON:", &p, NULL) != PL_OK) {
            fprintf(stderr, "%s\n", pl_last_error());
            exit(1);
        }
    }
    double t0 = now();
    pl_completion *out;
    size_t n;
    pl_engine_run(e, &out, &n);
    double wall = now() - t0;
    run r = {0};
    r.wall = wall;
    for (size_t i = 0; i < n; i++) r.tokens += (double)out[i].n_output_ids;
    pl_profile pr;
    pl_engine_get_profile(e, &pr);
    for (int i = 0; i < pr.n_phases; i++)
        if (!strcmp(pr.phases[i].name, "sample")) r.sample_s = pr.phases[i].seconds;
    r.step_s = pr.step_seconds;
    pl_completions_free(out, n);
    pl_engine_destroy(e);
    return r;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_grammar MODEL TOKENIZER [SEQS] [TOKENS] [REPEATS]\n");
        return 2;
    }
    int seqs = argc > 3 ? atoi(argv[3]) : 32, tokens = argc > 4 ? atoi(argv[4]) : 128;
    int reps = argc > 5 ? atoi(argv[5]) : 3;
    for (int k = 0; k < reps; k++) {
        run plain = one(argv[1], argv[2], seqs, tokens, NULL);
        run con = one(argv[1], argv[2], seqs, tokens, k_schema);
        double plain_tok = plain.sample_s / plain.tokens, con_tok = con.sample_s / con.tokens;
        double step_tok = plain.step_s / plain.tokens;
        printf("rep=%d plain_tokens=%.0f constrained_tokens=%.0f sample_us_per_token_plain=%.1f "
               "sample_us_per_token_constrained=%.1f mask_us_per_token=%.1f "
               "step_us_per_token=%.1f mask_share_of_step=%.4f\n",
               k, plain.tokens, con.tokens, plain_tok * 1e6, con_tok * 1e6,
               (con_tok - plain_tok) * 1e6, step_tok * 1e6, (con_tok - plain_tok) / step_tok);
    }
    /* compile time: a 50-property schema, each compile a new text (no cache hit) */
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = argv[1];
    c.tokenizer_path = argv[2];
    pl_engine *e;
    if (pl_engine_create(&c, &e) != PL_OK) return 1;
    char *big = malloc(65536);
    for (int k = 0; k < 6; k++) {
        size_t at = (size_t)sprintf(big, "{\"type\":\"object\",\"properties\":{");
        for (int i = 0; i < 50; i++)
            at += (size_t)sprintf(big + at, "%s\"field_%d_%d\":{\"type\":\"%s\"%s}", i ? "," : "", i, k,
                                  i % 4 == 0 ? "string" : i % 4 == 1 ? "integer"
                                  : i % 4 == 2 ? "boolean" : "number",
                                  i % 4 == 0 ? ",\"maxLength\":20" : "");
        sprintf(big + at, "},\"required\":[\"field_0_%d\"]}", k);
        pl_sampling_params p;
        pl_sampling_params_default(&p);
        p.json_schema = big;
        pl_grammar *g;
        double t0 = now();
        if (pl_grammar_compile(e, &p, &g) != PL_OK) {
            fprintf(stderr, "%s\n", pl_last_error());
            return 1;
        }
        double dt = now() - t0;
        pl_grammar_free(g);
        printf("compile_50_properties_ms=%.2f%s\n", dt * 1e3, k == 0 ? " (first: builds the token trie)" : "");
    }
    free(big);
    pl_engine_destroy(e);
    return 0;
}
