/*
 * tests/python/c_api_run.c - the C API's side of the Python package's checks: the same
 * prompts generated straight through pagellm.h, with nothing of the binding in between.
 *
 *   c_api_run json  MODEL TOKENIZER PROMPTS MAX_TOKENS LOGPROBS PROMPT_LOGPROBS THREADS
 *       greedy completions of PROMPTS (one prompt per line), one JSON object per line in
 *       submit order: output ids, and logprobs with every float as C99 hex ("%a": exact)
 *   c_api_run bench MODEL TOKENIZER PROMPTS MAX_TOKENS THREADS [LOGPROBS]
 *       one engine; for every line read from standard input, generates all PROMPTS greedily
 *       (submit each, pl_engine_run, free) and prints the seconds it took and those inside
 *       pl_engine_run, in wall time and then in this thread's CPU time: the C side of
 *       python/bench/overhead.py, which alternates it with the binding's runs
 */
#include <pagellm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_PROMPTS 1024

static int fail(const char *what) {
    fprintf(stderr, "c_api_run: %s: %s\n", what, pl_last_error());
    return 1;
}

static size_t read_prompts(const char *path, char **out) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = 0;
    char line[65536];
    while (n < MAX_PROMPTS && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        out[n++] = strdup(line);
    }
    fclose(f);
    return n;
}

static void print_position(const pl_token_logprobs *lp) {
    printf("[%d, \"%a\", %d, [", lp->token, (double)lp->logprob, lp->rank);
    for (int j = 0; j < lp->n_top; j++)
        printf("%s[%d, \"%a\"]", j ? ", " : "", lp->top[j].token, (double)lp->top[j].logprob);
    printf("]]");
}

static void print_completion(const pl_completion *c) {
    printf("{\"index\": %llu, \"sample\": %d, \"output_ids\": [", (unsigned long long)c->id - 1,
           c->index);
    for (size_t i = 0; i < c->n_output_ids; i++) printf("%s%d", i ? ", " : "", c->output_ids[i]);
    printf("], \"logprobs\": [");
    for (size_t i = 0; i < c->n_logprobs; i++) {
        if (i) printf(", ");
        print_position(&c->logprobs[i]);
    }
    printf("], \"prompt_logprobs\": [");
    for (size_t i = 0; i < c->n_prompt_logprobs; i++) {
        if (i) printf(", ");
        print_position(&c->prompt_logprobs[i]);
    }
    printf("]}\n");
}

static double clock_s(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static double now_s(void) { return clock_s(CLOCK_MONOTONIC); }
static double cpu_s(void) { return clock_s(CLOCK_THREAD_CPUTIME_ID); }

int main(int argc, char **argv) {
    bool json = argc == 9 && !strcmp(argv[1], "json");
    bool bench = (argc == 7 || argc == 8) && !strcmp(argv[1], "bench");
    if (!json && !bench) {
        fprintf(stderr, "usage: c_api_run json MODEL TOKENIZER PROMPTS MAX_TOKENS LOGPROBS "
                        "PROMPT_LOGPROBS THREADS\n"
                        "       c_api_run bench MODEL TOKENIZER PROMPTS MAX_TOKENS THREADS "
                        "[LOGPROBS]\n");
        return 2;
    }
    char *prompts[MAX_PROMPTS];
    size_t n = read_prompts(argv[4], prompts);
    if (n == 0) {
        fprintf(stderr, "c_api_run: no prompts in %s\n", argv[4]);
        return 1;
    }
    pl_engine_config cfg;
    pl_engine_config_default(&cfg);
    cfg.model_path = argv[2];
    cfg.tokenizer_path = argv[3];
    cfg.n_threads = atoi(argv[json ? 8 : 6]);
    pl_engine *e;
    if (pl_engine_create(&cfg, &e) != PL_OK) return fail("create");
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.temperature = 0.0f;
    sp.max_tokens = atoi(argv[5]);
    if (json) {
        sp.logprobs = atoi(argv[6]);
        sp.prompt_logprobs = atoi(argv[7]);
    } else if (argc == 8) {
        sp.logprobs = atoi(argv[7]);
    }
    int rc = 0;
    char go[64];
    while (rc == 0 && (json || fgets(go, sizeof go, stdin))) {
        double t0 = now_s(), c0 = cpu_s();
        for (size_t i = 0; i < n && rc == 0; i++)
            if (pl_engine_submit_request(e, prompts[i], &sp, NULL) != PL_OK) rc = fail("submit");
        pl_completion *c = NULL;
        size_t nc = 0;
        double t_run = now_s(), c_run = cpu_s();
        if (rc == 0 && pl_engine_run(e, &c, &nc) != PL_OK) rc = fail("run");
        double t_end = now_s(), c_end = cpu_s();
        if (json)
            for (size_t i = 0; i < nc; i++) print_completion(&c[i]);
        pl_completions_free(c, nc);
        if (!json)
            printf("%.9f %.9f %.9f %.9f\n", now_s() - t0, t_end - t_run, cpu_s() - c0,
                   c_end - c_run);
        fflush(stdout);
        if (json) break;
    }
    pl_engine_destroy(e);
    for (size_t i = 0; i < n; i++) free(prompts[i]);
    return rc;
}
