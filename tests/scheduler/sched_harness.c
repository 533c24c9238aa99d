/*
 * tests/scheduler/sched_harness.c - the fake engine of sched_harness.h.
 *
 * h_step() is one engine step: submit due requests, schedule, check the output against the
 * limits and the policy's promises, do the copy-on-write copies, "run" the fake model over the
 * scheduled positions, update, append sampled tokens (forking parallel samples after the
 * prompt), finish on length, and check the KV pool against every live table.
 */
#include "sched_harness.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/sched_internal.h"
#include "test_support.h"
#include "util/alloc.h"

static uint64_t mix(uint64_t a, uint64_t b) {
    uint64_t x = a ^ (b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2));
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ull;
    x ^= x >> 27;
    x *= 0x81dadef4bc2dd44dull;
    x ^= x >> 33;
    return x;
}

static uint64_t kv_value(uint64_t prev, int32_t token, int pos) {
    return mix(mix(prev, (uint32_t)token), (uint64_t)pos);
}

#define KV_START 0x1234567ull /* "previous value" of position 0 */
#define KV_POISON 0xdeadbeefcafef00dull

int32_t h_reference_next(const int32_t *tokens, int n) {
    uint64_t v = KV_START, h = 0;
    for (int p = 0; p < n; p++) {
        v = kv_value(v, tokens[p], p);
        h = mix(h, v);
    }
    return (int32_t)(h % H_VOCAB);
}

pl_sched_config h_config(h_limits lim) {
    return (pl_sched_config){
        .max_batch_size = lim.max_batch_size,
        .max_num_seqs = lim.max_num_seqs,
        .max_total_tokens = lim.max_total_tokens,
        .max_model_len = lim.max_model_len,
        .enable_chunked_prefill = true,
        .long_prefill_threshold = 0,
        .max_skip_head = 4,
        .watermark = 0.0,
        .max_waiting = 0,
        .overflow_policy = PL_OVERFLOW_REJECT_NEWEST,
        .log_preemptions = false,
    };
}

void h_init(harness *h, const pl_sched_config *cfg, int block_size, int n_blocks,
            bool prefix_caching) {
    memset(h, 0, sizeof *h);
    h->cfg = *cfg;
    h->block_size = block_size;
    h->n_blocks = n_blocks;
    cr_assert_eq(pl_kv_pool_create(block_size, n_blocks, prefix_caching, &h->pool), PL_OK, "%s",
                 pl_last_error());
    cr_assert_eq(pl_sched_create(cfg, h->pool, &h->s), PL_OK, "%s", pl_last_error());
    size_t n_slots = (size_t)n_blocks * (size_t)block_size;
    h->kv = malloc(n_slots * sizeof(uint64_t));
    cr_assert(h->kv);
    for (size_t i = 0; i < n_slots; i++) h->kv[i] = KV_POISON;
}

int h_add(harness *h, h_request q) {
    int n_samples = q.n_samples ? q.n_samples : 1;
    int target_len = q.target_len ? q.target_len : q.max_tokens;
    cr_assert(n_samples >= 1 && n_samples <= H_MAX_SAMPLES);
    /* Each request has its own allocation: the scheduler links its seqs, so it never moves. */
    h->reqs = realloc(h->reqs, (size_t)(h->n_reqs + 1) * sizeof(h_req *));
    h->tables = realloc(h->tables, (size_t)(h->n_reqs + 1) * H_MAX_SAMPLES * sizeof(void *));
    h->before = realloc(h->before, (size_t)(h->n_reqs + 1) * H_MAX_SAMPLES * sizeof(pl_seq_state));
    cr_assert(h->reqs && h->tables && h->before);
    h_req *r = calloc(1, sizeof *r);
    cr_assert(r);
    h->reqs[h->n_reqs] = r;
    r->index = h->n_reqs;
    r->n_samples = n_samples;
    r->target_len = target_len;
    r->arrive_step = q.arrive_step;
    r->first_step = r->finish_step = -1;
    uint64_t id = (uint64_t)h->n_reqs + 1;
    for (int i = 0; i < n_samples; i++) {
        cr_assert_eq(pl_seq_init(&r->seq[i], id, q.prompt, q.n_prompt, q.max_tokens, q.priority),
                     PL_OK, "%s", pl_last_error());
        r->seq[i].user = r;
    }
    r->seq[0].n_forks = n_samples - 1;
    return h->n_reqs++;
}

void h_add_random(harness *h, uint64_t seed, int n, int min_len, int max_len, int max_out,
                  int arrival_spread) {
    pl_test_rng rng;
    pl_test_rng_seed(&rng, seed);
    int32_t shared[64];
    for (int i = 0; i < 64; i++) shared[i] = (int32_t)pl_test_rng_below(&rng, H_VOCAB);
    int32_t *prompt = malloc((size_t)max_len * sizeof(int32_t));
    cr_assert(prompt);
    for (int k = 0; k < n; k++) {
        int len = min_len + (int)pl_test_rng_below(&rng, (uint32_t)(max_len - min_len + 1));
        int n_shared = pl_test_rng_below(&rng, 2) ? (len < 64 ? len : 64) : 0;
        for (int i = 0; i < len; i++)
            prompt[i] = i < n_shared ? shared[i] : (int32_t)pl_test_rng_below(&rng, H_VOCAB);
        int out = 1 + (int)pl_test_rng_below(&rng, (uint32_t)max_out);
        int arrive = arrival_spread ? (int)pl_test_rng_below(&rng, (uint32_t)arrival_spread) : 0;
        H_ADD(h, .prompt = prompt, .n_prompt = len, .max_tokens = out, .arrive_step = arrive);
    }
    free(prompt);
}

void h_check_pool(harness *h) {
    int n = 0;
    for (int r = 0; r < h->n_reqs; r++)
        for (int i = 0; i < h->reqs[r]->n_samples; i++) {
            const pl_seq *q = &h->reqs[r]->seq[i];
            if (q->state == PL_SEQ_RUNNING) h->tables[n++] = &q->kv;
            else cr_assert_eq(q->kv.n_blocks, 0, "request %llu holds %d blocks while %s",
                              (unsigned long long)q->id, q->kv.n_blocks,
                              pl_seq_state_name(q->state));
        }
    cr_assert_eq(pl_kv_check(h->pool, h->tables, n), PL_OK, "step %d: %s", h->step,
                 pl_last_error());
    /* the free running slots admission counts: every slot a sequence holds, waits to take
     * back or will take for its samples, recounted from the sequences */
    int held = 0;
    for (int r = 0; r < h->n_reqs; r++)
        for (int i = 0; i < h->reqs[r]->n_samples; i++) {
            const pl_seq *q = &h->reqs[r]->seq[i];
            if (q->state == PL_SEQ_RUNNING || q->state == PL_SEQ_PREEMPTED ||
                (q->state == PL_SEQ_WAITING && q->aux_list != PL_SCHED_AUX_FRESH))
                held += 1 + q->n_forks;
            else if (q->state == PL_SEQ_WAITING)
                held += q->n_forks;
        }
    pl_sched_counts c;
    pl_sched_get_counts(h->s, &c);
    cr_assert_eq(c.n_free_slots, h->cfg.max_num_seqs - held, "step %d: %d free slots, counted "
                 "%d", h->step, c.n_free_slots, h->cfg.max_num_seqs - held);
}

static void submit_due(harness *h) {
    for (int r = 0; r < h->n_reqs; r++) {
        h_req *q = h->reqs[r];
        if (q->submitted || q->refused || q->arrive_step > h->step) continue;
        pl_seq *dropped = NULL;
        pl_status st = pl_sched_add(h->s, &q->seq[0], &dropped);
        if (st != PL_OK) {
            q->refused = true;
            q->add_status = st;
            cr_assert_eq(q->seq[0].state, PL_SEQ_NEW, "a refused request changed state");
            continue;
        }
        q->submitted = true;
        cr_assert_null(dropped, "no queue bound in the harness");
    }
}

static uint64_t key_priority_arrival(const pl_seq *q) {
    /* (priority, arrival) as one orderable number; priorities in tests are small. */
    return ((uint64_t)(uint32_t)(q->priority + 1000) << 40) | q->arrival;
}

static void check_output(harness *h, const pl_sched_output *out) {
    const pl_sched_config *c = &h->cfg;
    pl_sched_counts counts;
    pl_sched_get_counts(h->s, &counts);
    cr_assert_leq(out->n_seqs, c->max_batch_size, "step %d: %d seqs", h->step, out->n_seqs);
    cr_assert_leq(out->n_tokens, c->max_total_tokens, "step %d: %d tokens", h->step,
                  out->n_tokens);
    cr_assert_leq(counts.n_running, c->max_num_seqs, "step %d: %d running", h->step,
                  counts.n_running);
    cr_assert_eq(counts.n_preempted, out->n_preempted);
    int sum = 0;
    for (int i = 0; i < out->n_seqs; i++) {
        const pl_sched_entry *e = &out->entries[i];
        const pl_seq *q = e->seq;
        cr_assert_eq(q->state, PL_SEQ_RUNNING);
        cr_assert_eq(e->start, q->n_computed);
        cr_assert_geq(e->n_new, 1);
        cr_assert_leq(e->start + e->n_new, q->n_tokens);
        cr_assert_geq(q->kv.n_tokens, e->start + e->n_new, "slots for every scheduled token");
        cr_assert_eq(e->samples, e->start + e->n_new == q->n_tokens);
        if (c->long_prefill_threshold > 0)
            cr_assert_leq(e->n_new, c->long_prefill_threshold);
        if (!c->enable_chunked_prefill && e->start < q->n_tokens - 1)
            cr_assert(e->samples, "chunked prefill is off but a prompt was cut");
        for (int j = 0; j < i; j++) cr_assert_neq(out->entries[j].seq, q, "scheduled twice");
        sum += e->n_new;
    }
    cr_assert_eq(sum, out->n_tokens);
    if (out->n_preempted > 0) {
        h->n_preempt_steps++;
        /* No admission in a step that preempted: everything scheduled was running. */
        for (int i = 0; i < out->n_seqs; i++) {
            const pl_seq *q = out->entries[i].seq;
            const h_req *r = q->user;
            int k = (int)(q - r->seq);
            cr_assert_eq(h->before[r->index * H_MAX_SAMPLES + k], PL_SEQ_RUNNING,
                         "step %d preempted and admitted request %llu", h->step,
                         (unsigned long long)q->id);
        }
        /* Victims are the lowest-priority, latest arrivals: every seq still running ranks
         * before each of them. */
        for (int v = 0; v < out->n_preempted; v++) {
            const pl_seq *victim = out->preempted[v];
            cr_assert_eq(victim->state, PL_SEQ_PREEMPTED);
            for (int r = 0; r < h->n_reqs; r++)
                for (int k = 0; k < h->reqs[r]->n_samples; k++) {
                    const pl_seq *q = &h->reqs[r]->seq[k];
                    if (q->state == PL_SEQ_RUNNING)
                        cr_assert_leq(key_priority_arrival(q), key_priority_arrival(victim));
                }
        }
    }
    if (counts.n_running > h->max_running) h->max_running = counts.n_running;
    if (out->n_seqs > h->max_step_seqs) h->max_step_seqs = out->n_seqs;
    if (out->n_tokens > h->max_step_tokens) h->max_step_tokens = out->n_tokens;
    h->total_tokens += out->n_tokens;
}

/* The fake forward pass: copies first, then every scheduled position in order. */
static void run_model(harness *h, const pl_sched_output *out) {
    int bs = h->block_size;
    for (int i = 0; i < out->n_copies; i++)
        memcpy(&h->kv[(size_t)out->copies[i].dst * bs], &h->kv[(size_t)out->copies[i].src * bs],
               (size_t)bs * sizeof(uint64_t));
    for (int i = 0; i < out->n_seqs; i++) {
        const pl_sched_entry *e = &out->entries[i];
        const pl_seq *q = e->seq;
        for (int p = e->start; p < e->start + e->n_new; p++) {
            uint64_t prev = p == 0 ? KV_START : h->kv[pl_kv_slot(&q->kv, bs, p - 1)];
            h->kv[pl_kv_slot(&q->kv, bs, p)] = kv_value(prev, q->tokens[p], p);
        }
    }
}

static int32_t sample(const harness *h, const pl_seq *q) {
    uint64_t hsh = 0;
    for (int p = 0; p < q->n_tokens; p++)
        hsh = mix(hsh, h->kv[pl_kv_slot(&q->kv, h->block_size, p)]);
    return (int32_t)(hsh % H_VOCAB);
}

static void append_and_finish(harness *h, h_req *r, pl_seq *q, int32_t tok) {
    cr_assert_eq(pl_sched_append_token(h->s, q, tok), PL_OK, "%s", pl_last_error());
    if (pl_seq_n_generated(q) >= r->target_len) {
        cr_assert_eq(pl_sched_finish(h->s, q, PL_FINISH_LENGTH), PL_OK, "%s", pl_last_error());
        if (++r->n_done == r->n_samples) {
            r->finish_step = h->step;
            h->n_finished++;
        }
    }
}

pl_sched_output h_step(harness *h) {
    submit_due(h);
    for (int r = 0; r < h->n_reqs; r++)
        for (int k = 0; k < H_MAX_SAMPLES; k++)
            h->before[r * H_MAX_SAMPLES + k] = h->reqs[r]->seq[k].state;
    pl_sched_output out;
    cr_assert_eq(pl_sched_schedule(h->s, &out), PL_OK, "%s", pl_last_error());
    check_output(h, &out);
    h_check_pool(h); /* after allocation, before the step runs */
    run_model(h, &out);
    cr_assert_eq(pl_sched_update(h->s, &out), PL_OK, "%s", pl_last_error());
    for (int i = 0; i < out.n_seqs; i++) {
        const pl_sched_entry *e = &out.entries[i];
        h_req *r = e->seq->user;
        if (r->first_step < 0) r->first_step = h->step;
        if (!e->samples) continue;
        pl_seq *q = e->seq;
        int32_t tok = sample(h, q);
        if (q == &r->seq[0] && !r->forked && r->n_samples > 1) {
            /* Parallel samples share the prompt's KV; each draws its own first token (here:
             * the model's token plus its index), so each has its own continuation. */
            for (int k = 1; k < r->n_samples; k++) {
                cr_assert_eq(pl_sched_fork(h->s, q, &r->seq[k]), PL_OK, "%s", pl_last_error());
                append_and_finish(h, r, &r->seq[k], (tok + k) % H_VOCAB);
            }
            r->forked = true;
        }
        append_and_finish(h, r, q, tok);
    }
    h_check_pool(h);
    h->step++;
    return out;
}

void h_run(harness *h, int max_steps) {
    for (;;) {
        int pending = 0;
        for (int r = 0; r < h->n_reqs; r++)
            pending += !h->reqs[r]->refused && h->reqs[r]->finish_step < 0;
        if (!pending) return;
        cr_assert_lt(h->step, max_steps, "not finished after %d steps (%d pending)", max_steps,
                     pending);
        h_step(h);
    }
}

void h_check_outputs(const harness *h) {
    for (int r = 0; r < h->n_reqs; r++) {
        const h_req *q = h->reqs[r];
        if (q->refused) continue;
        for (int k = 0; k < q->n_samples; k++) {
            const pl_seq *s = &q->seq[k];
            cr_assert_eq(s->state, PL_SEQ_FINISHED);
            cr_assert_eq(pl_seq_n_generated(s), q->target_len);
            int32_t *buf = malloc((size_t)s->n_tokens * sizeof(int32_t));
            cr_assert(buf);
            memcpy(buf, s->tokens, (size_t)s->n_prompt * sizeof(int32_t));
            for (int i = s->n_prompt; i < s->n_tokens; i++) {
                int32_t want = h_reference_next(buf, i);
                if (i == s->n_prompt) want = (want + k) % H_VOCAB;
                cr_assert_eq(s->tokens[i], want,
                             "request %d sample %d output %d: got %d, reference %d", r, k,
                             i - s->n_prompt, s->tokens[i], want);
                buf[i] = want;
            }
            free(buf);
        }
    }
}

void h_check_all_free(const harness *h) {
    cr_assert_eq(pl_kv_num_free_blocks(h->pool), h->n_blocks, "blocks still in use");
    cr_assert_eq(pl_kv_check(h->pool, NULL, 0), PL_OK, "%s", pl_last_error());
    pl_sched_counts c;
    pl_sched_get_counts(h->s, &c);
    cr_assert_eq(c.n_waiting + c.n_running, 0);
}

void h_fini(harness *h) {
    pl_sched_destroy(h->s);
    for (int r = 0; r < h->n_reqs; r++) {
        for (int k = 0; k < h->reqs[r]->n_samples; k++) pl_seq_deinit(&h->reqs[r]->seq[k]);
        free(h->reqs[r]);
    }
    pl_kv_pool_destroy(h->pool);
    free(h->kv);
    free(h->reqs);
    free(h->tables);
    free(h->before);
}
