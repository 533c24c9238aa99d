/*
 * tests/soak/test_soak_stories.c - the soak with text: stories260K + tok512 from
 * PAGELLM_TEST_MODELS (exits 77, SKIP, without them), text prompts, stop strings, streaming.
 *
 * 400 random requests (text prompts of common words; a third with 1-2 stop strings; n = 1 or
 * 2; greedy or seeded; random aborts; PL_SOAK_STORIES_REQUESTS scales the count down, e.g.
 * under valgrind) through a 48-block pool of 4-token blocks. After every
 * step: pl_kv_check over every live table. Each sample, when reported: exactly once; the
 * text streamed through its deltas equals its completion text (a prefix of it when aborted);
 * no stop string occurs in a text a stop string could have cut; greedy samples equal an
 * unpressured run's tokens and text.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "pagellm.h"
#include "test_support.h"

#define MAX_REQ 400

static const char *const k_words[] = {
    "Once", "upon", "a", "time", "there", "was", "little", "girl", "named", "Lily", "she",
    "liked", "to", "play", "in", "the", "park", "with", "her", "dog", "one", "day", "saw",
    "big", "red", "ball", "and", "said", "happy", "mom", "tree", "sun", "went", "home"};
#define N_WORDS (sizeof k_words / sizeof k_words[0])
static const char *const k_stops[] = {".", " the", "and", "!", " he", "day", ",", "\n", "Lily"};
#define N_STOPS (sizeof k_stops / sizeof k_stops[0])

typedef struct sample_rec {
    char *streamed;       /* concatenated deltas */
    size_t n_streamed, cap;
    bool reported;
} sample_rec;

typedef struct story_req {
    char text[400];
    pl_sampling_params sp;
    const char *stop[2];  /* sp.stop */
    bool greedy;
    int32_t *ref;         /* reference tokens (greedy) */
    int n_ref;
    char *ref_text;
    pl_request_id id;
    bool abort_accepted;
    int n_reported;
    sample_rec s[2];
} story_req;

static void append(sample_rec *r, const char *t, size_t n) {
    if (r->n_streamed + n + 1 > r->cap) {
        r->cap = (r->n_streamed + n + 1) * 2;
        r->streamed = realloc(r->streamed, r->cap);
    }
    memcpy(r->streamed + r->n_streamed, t, n);
    r->n_streamed += n;
    r->streamed[r->n_streamed] = '\0';
}

static void make(story_req *w, int n_req, uint64_t seed) {
    pl_test_rng r;
    pl_test_rng_seed(&r, seed);
    for (int i = 0; i < n_req; i++) {
        story_req *q = &w[i];
        int words = 1 + (int)pl_test_rng_below(&r, 24);
        size_t n = 0;
        for (int k = 0; k < words; k++) {
            const char *wd = k_words[pl_test_rng_below(&r, N_WORDS)];
            n += (size_t)snprintf(q->text + n, sizeof q->text - n, "%s%s", k ? " " : "", wd);
        }
        pl_sampling_params *sp = &q->sp;
        pl_sampling_params_default(sp);
        sp->max_tokens = 1 + (int)pl_test_rng_below(&r, 40);
        sp->n = pl_test_rng_below(&r, 4) == 0 ? 2 : 1;
        sp->priority = (int)pl_test_rng_below(&r, 2);
        q->greedy = pl_test_rng_below(&r, 5) != 0;
        sp->temperature = q->greedy ? 0.0f : 0.8f;
        sp->has_seed = true;
        sp->seed = pl_test_rng_u64(&r);
        if (pl_test_rng_below(&r, 3) == 0) {
            sp->n_stop = 1 + pl_test_rng_below(&r, 2);
            for (size_t k = 0; k < sp->n_stop; k++)
                q->stop[k] = k_stops[pl_test_rng_below(&r, N_STOPS)];
            sp->stop = q->stop;
        }
    }
}

static pl_engine *engine(const char *model, const char *tok, int blocks) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = model;
    c.tokenizer_path = tok;
    c.backend = PL_BACKEND_CPU;
    c.n_threads = 1;
    /* greedy tokens under pressure must equal the unpressured run's: exact only with f32 K/V
     * (docs/api.md, "Greedy output and batching") */
    c.kv_dtype = PL_DTYPE_F32;
    c.block_size = 4;
    c.max_num_blocks = blocks;
    c.max_model_len = 128;
    c.max_batch_size = 8;
    c.max_num_seqs = 16;
    c.max_total_tokens = 64;
    c.max_waiting = 0;
    pl_engine *e;
    cr_assert_eq(pl_engine_create(&c, &e), PL_OK, "%s", pl_last_error());
    return e;
}

static bool can_cut(const pl_sampling_params *p, const char *text) {
    for (size_t k = 0; k < p->n_stop; k++)
        if (strstr(text, p->stop[k])) return true;
    return false;
}

Test(soak_stories, text_stop_strings_streaming, .timeout = 300) {
    char model[512], tok[512];
    cr_assert(pl_test_model_path("stories260K.bin", model, sizeof model));
    cr_assert(pl_test_model_path("tok512.model", tok, sizeof tok));
    const char *env = getenv("PL_SOAK_STORIES_REQUESTS");
    const int N_REQ = env && atoi(env) >= 40 && atoi(env) <= MAX_REQ ? atoi(env) : MAX_REQ;
    story_req *w = calloc(MAX_REQ, sizeof *w);
    uint64_t seed = pl_test_run_seed("soak_stories");
    make(w, N_REQ, seed);

    /* reference: greedy ones, n = 1, big pool */
    pl_engine *ref = engine(model, tok, 4096);
    for (int i = 0; i < N_REQ; i++) {
        if (!w[i].greedy) continue;
        pl_sampling_params sp = w[i].sp;
        sp.n = 1;
        cr_assert_eq(pl_engine_submit_request(ref, w[i].text, &sp, &w[i].id), PL_OK, "%s",
                     pl_last_error());
    }
    pl_completion *c;
    size_t nc;
    cr_assert_eq(pl_engine_run(ref, &c, &nc), PL_OK);
    for (size_t k = 0, i = 0; k < nc; k++) {
        while (!w[i].greedy) i++;
        cr_assert_eq(c[k].id, w[i].id);
        w[i].n_ref = (int)c[k].n_output_ids;
        w[i].ref = malloc((c[k].n_output_ids + 1) * sizeof(int32_t));
        memcpy(w[i].ref, c[k].output_ids, c[k].n_output_ids * sizeof(int32_t));
        w[i].ref_text = strdup(c[k].text);
        w[i++].id = 0;
    }
    pl_completions_free(c, nc);
    pl_engine_destroy(ref);

    pl_engine *e = engine(model, tok, 48);
    int *by_id = calloc(N_REQ + 8, sizeof *by_id);
    const pl_kv_table **tables = malloc(1024 * sizeof *tables);
    pl_test_rng r;
    pl_test_rng_seed(&r, seed + 1);
    int next = 0;
    long preempt = 0, stops = 0, aborts = 0, checked = 0;
    while (next < N_REQ || pl_engine_has_pending_work(e)) {
        for (int k = (int)pl_test_rng_below(&r, 3); k > 0 && next < N_REQ; k--, next++) {
            story_req *q = &w[next];
            cr_assert_eq(pl_engine_submit_request(e, q->text, &q->sp, &q->id), PL_OK, "%s",
                         pl_last_error());
            by_id[q->id] = next;
        }
        if (next > 0 && pl_test_rng_below(&r, 15) == 0) {
            story_req *q = &w[pl_test_rng_below(&r, (uint32_t)next)];
            if (pl_engine_abort(e, q->id) == PL_OK) q->abort_accepted = true;
        }
        pl_step_result res;
        cr_assert_eq(pl_engine_step(e, &res), PL_OK, "%s", pl_last_error());
        preempt += res.n_preempted;
        int nt = 0;
        for (pl_request *rq = e->live_head; rq; rq = rq->next)
            for (int i = 0; i < rq->n_samples && nt < 1024; i++)
                tables[nt++] = &rq->samples[i].seq.kv;
        cr_assert_eq(pl_kv_check(e->pool, tables, nt), PL_OK, "%s", pl_last_error());
        for (size_t k = 0; k < res.n_deltas; k++) {
            const pl_stream_delta *d = &res.deltas[k];
            story_req *q = &w[by_id[d->id]];
            cr_assert(d->index >= 0 && d->index < q->sp.n);
            cr_assert(!q->s[d->index].reported, "delta after the completion was reported");
            append(&q->s[d->index], d->text, d->text_len);
        }
        for (size_t k = 0; k < res.n_finished; k++) {
            const pl_completion *cp = &res.finished[k];
            story_req *q = &w[by_id[cp->id]];
            sample_rec *sr = &q->s[cp->index];
            cr_assert(!sr->reported, "reported twice");
            sr->reported = true;
            q->n_reported++;
            const char *streamed = sr->streamed ? sr->streamed : "";
            if (cp->finish_reason == PL_FINISH_ABORT) {
                cr_assert(q->abort_accepted);
                cr_assert(!strncmp(cp->text, streamed, strlen(streamed)),
                          "streamed '%s' is not a prefix of '%s'", streamed, cp->text);
                aborts++;
                continue;
            }
            cr_assert(!q->abort_accepted, "%s after an accepted abort",
                      pl_finish_reason_name(cp->finish_reason));
            cr_assert_str_eq(streamed, cp->text, "request %llu sample %d: streamed text "
                             "differs from the completion", (unsigned long long)cp->id,
                             cp->index);
            cr_assert(!can_cut(&q->sp, cp->text), "a stop string remains in '%s'", cp->text);
            if (cp->finish_reason == PL_FINISH_STOP) stops++;
            if (q->greedy) {
                cr_assert_eq((int)cp->n_output_ids, q->n_ref, "request %llu: %zu tokens, "
                             "reference %d", (unsigned long long)cp->id, cp->n_output_ids,
                             q->n_ref);
                cr_assert(!memcmp(cp->output_ids, q->ref, (size_t)q->n_ref * 4));
                cr_assert_str_eq(cp->text, q->ref_text);
                checked++;
            }
        }
    }
    for (int i = 0; i < N_REQ; i++) cr_assert_eq(w[i].n_reported, w[i].sp.n);
    pl_metrics m;
    pl_engine_metrics(e, &m);
    cr_assert_eq(m.kv_blocks_used, 0);
    fprintf(stderr, "soak_stories: %d requests, %ld preemptions, %ld stopped, %ld aborted, "
            "%ld greedy samples equal to the reference (tokens and text)\n", N_REQ, preempt,
            stops, aborts, checked);
    cr_assert_gt(preempt, N_REQ / 20);
    cr_assert_gt(stops, N_REQ / 40);
    pl_engine_destroy(e);
    for (int i = 0; i < N_REQ; i++) {
        free(w[i].ref);
        free(w[i].ref_text);
        free(w[i].s[0].streamed);
        free(w[i].s[1].streamed);
    }
    free(w);
    free(by_id);
    free(tables);
    PL_ASSERT_NO_LEAKS();
}
