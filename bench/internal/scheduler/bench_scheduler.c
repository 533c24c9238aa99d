/*
 * bench/internal/scheduler/bench_scheduler.c - a scheduling simulation, not a test.
 *
 * Runs the scheduler over a real KV pool with no model (a sampled token is a random id;
 * a request stops when it reaches its drawn output length, like an EOS), and reports:
 *
 * 1. KV slot utilisation on a mixed-length workload (prompt and output lengths log-uniform in
 *    16..2048, max_tokens 2048, max_model_len 4096): after every step, tokens whose KV is held
 *    divided by the slots the running sequences hold (paged: their blocks), summed over steps.
 *    Compared, for the same running sets, with reserving max_model_len per sequence and with
 *    reserving prompt + max_tokens per sequence (static allocation at admission).
 * 2. Scheduler time per step with 256 running sequences in decode: schedule, update and the
 *    append/stop loop, timed separately, with the prefix cache off and on.
 *
 * Output: key=value lines. Usage: bench_scheduler [n_requests] [timed_steps].
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "scheduler/scheduler.h"
#include "util/timer.h"

#ifndef PL_BUILDTYPE
#define PL_BUILDTYPE "unknown"
#endif

#define CHECK(expr)                                                                           \
    do {                                                                                      \
        pl_status st_ = (expr);                                                               \
        if (st_ != PL_OK) {                                                                   \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, pl_last_error());   \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint64_t rng_u64(void) {
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}
static double rng_unit(void) { return (double)(rng_u64() >> 11) * (1.0 / 9007199254740992.0); }
/* log-uniform integer in [lo, hi] */
static int log_uniform(int lo, int hi) {
    double v = exp(log((double)lo) + rng_unit() * (log((double)hi + 1) - log((double)lo)));
    int n = (int)v;
    return n < lo ? lo : n > hi ? hi : n;
}

typedef struct req {
    pl_seq seq;
    int out_len; /* stop after this many output tokens (simulated EOS) */
} req;

typedef struct sim {
    pl_kv_pool *pool;
    pl_sched *s;
    req *reqs; /* (n) */
    int n;
    int n_finished;
    int block_size;
} sim;

static void sim_init(sim *m, const pl_sched_config *c, int block_size, int n_blocks,
                     bool prefix) {
    memset(m, 0, sizeof *m);
    m->block_size = block_size;
    CHECK(pl_kv_pool_create(block_size, n_blocks, prefix, &m->pool));
    CHECK(pl_sched_create(c, m->pool, &m->s));
}

static void sim_add(sim *m, int n, int prompt_lo, int prompt_hi, int out_lo, int out_hi,
                    int max_tokens) {
    m->reqs = calloc((size_t)n, sizeof(req));
    int32_t *p = malloc((size_t)prompt_hi * sizeof(int32_t));
    if (!m->reqs || !p) exit(1);
    m->n = n;
    for (int i = 0; i < n; i++) {
        int len = log_uniform(prompt_lo, prompt_hi);
        for (int k = 0; k < len; k++) p[k] = (int32_t)(rng_u64() % 32000);
        req *r = &m->reqs[i];
        r->out_len = log_uniform(out_lo, out_hi);
        int mt = max_tokens > 0 ? max_tokens : r->out_len;
        CHECK(pl_seq_init(&r->seq, (uint64_t)i + 1, p, len, mt, 0));
        r->seq.user = r;
        CHECK(pl_sched_add(m->s, &r->seq, NULL));
    }
    free(p);
}

static void sim_fini(sim *m) {
    pl_sched_destroy(m->s);
    for (int i = 0; i < m->n; i++) pl_seq_deinit(&m->reqs[i].seq);
    free(m->reqs);
    pl_kv_pool_destroy(m->pool);
}

/* Appends a token to every seq that sampled; finishes those at their length. */
static void sim_sample(sim *m, const pl_sched_output *o) {
    for (int i = 0; i < o->n_seqs; i++) {
        if (!o->entries[i].samples) continue;
        pl_seq *q = o->entries[i].seq;
        CHECK(pl_sched_append_token(m->s, q, (int32_t)(rng_u64() % 32000)));
        req *r = q->user;
        if (pl_seq_n_generated(q) >= r->out_len) {
            CHECK(pl_sched_finish(m->s, q, PL_FINISH_LENGTH));
            m->n_finished++;
        }
    }
}

/* ---- 1. utilisation ---- */

static void utilisation(int n_requests, double watermark, const char *tag) {
    const int bs = 16, max_model_len = 4096, max_tokens = 2048, n_blocks = 4096;
    pl_sched_config c = {
        .max_batch_size = 256, .max_num_seqs = 256, .max_total_tokens = 8192,
        .max_model_len = max_model_len, .enable_chunked_prefill = true,
        .long_prefill_threshold = 0, .max_skip_head = 4, .watermark = watermark,
        .max_waiting = 0, .overflow_policy = PL_OVERFLOW_REJECT_NEWEST, .log_preemptions = false,
    };
    sim m;
    sim_init(&m, &c, bs, n_blocks, false);
    rng_state = 0x2545f4914f6cdd1dull; /* the same workload for every watermark */
    sim_add(&m, n_requests, 16, 2048, 16, 2048, max_tokens);
    double real = 0, paged = 0, reserve_len = 0, reserve_req = 0, reserve_oracle = 0;
    double running_sum = 0;
    long steps = 0, tokens = 0;
    uint64_t t0 = pl_now_ns();
    while (m.n_finished < m.n) {
        pl_sched_output o;
        CHECK(pl_sched_schedule(m.s, &o));
        CHECK(pl_sched_update(m.s, &o));
        tokens += o.n_tokens;
        /* Measured after update (KV of this step computed), before sampling. */
        pl_sched_counts n;
        pl_sched_get_counts(m.s, &n);
        for (int i = 0; i < m.n; i++) {
            const pl_seq *q = &m.reqs[i].seq;
            if (q->state != PL_SEQ_RUNNING) continue;
            real += q->n_computed;
            reserve_len += max_model_len;
            reserve_req += q->n_prompt + q->max_tokens - 1;
            reserve_oracle += q->n_prompt + m.reqs[i].out_len - 1;
        }
        paged += (double)(pl_kv_num_blocks(m.pool) - pl_kv_num_free_blocks(m.pool)) * bs;
        running_sum += n.n_running;
        sim_sample(&m, &o);
        steps++;
    }
    double ms = (double)(pl_now_ns() - t0) / 1e6;
    /* Tokens computed at least once: every prompt token and every output token but the last.
     * What is computed beyond that is recomputation after preemptions. */
    long needed = 0;
    for (int i = 0; i < m.n; i++) needed += m.reqs[i].seq.n_prompt + m.reqs[i].out_len - 1;
    pl_sched_counts n;
    pl_sched_get_counts(m.s, &n);
    printf("%s_requests=%d\n%s_block_size=%d\n%s_kv_blocks=%d\n%s_max_model_len=%d\n"
           "%s_watermark=%.2f\n%s_steps=%ld\n%s_tokens=%ld\n%s_mean_running=%.1f\n"
           "%s_preemptions=%llu\n",
           tag, n_requests, tag, bs, tag, n_blocks, tag, max_model_len, tag, watermark, tag,
           steps, tag, tokens, tag, running_sum / steps, tag,
           (unsigned long long)n.n_preemptions);
    printf("%s_recomputed_fraction=%.4f\n", tag, (double)(tokens - needed) / (double)needed);
    printf("%s_paged_fraction=%.4f\n%s_paged_waste=%.4f\n", tag, real / paged, tag,
           1 - real / paged);
    printf("%s_reserve_max_model_len_fraction=%.4f\n%s_reserve_max_model_len_waste=%.4f\n",
           tag, real / reserve_len, tag, 1 - real / reserve_len);
    printf("%s_reserve_prompt_plus_max_tokens_fraction=%.4f\n", tag, real / reserve_req);
    printf("%s_reserve_prompt_plus_true_output_fraction=%.4f\n", tag, real / reserve_oracle);
    printf("%s_sim_ms=%.1f\n", tag, ms);
    sim_fini(&m);
}

/* ---- 2. time per step at 256 running sequences ---- */

static void step_time(int timed_steps, bool prefix) {
    const int bs = 16, n_seqs = 256, prompt = 512;
    const int out = 64 + timed_steps; /* nobody finishes while timed */
    pl_sched_config c = {
        .max_batch_size = n_seqs, .max_num_seqs = n_seqs, .max_total_tokens = 8192,
        .max_model_len = prompt + out, .enable_chunked_prefill = true,
        .long_prefill_threshold = 0, .max_skip_head = 4, .watermark = 0.01, .max_waiting = 0,
        .overflow_policy = PL_OVERFLOW_REJECT_NEWEST, .log_preemptions = false,
    };
    int n_blocks = n_seqs * ((prompt + out) / bs + 2);
    sim m;
    sim_init(&m, &c, bs, n_blocks, prefix);
    sim_add(&m, n_seqs, prompt, prompt, out, out, out);
    /* Warm up: every prompt computed, output arrays at their size. */
    for (int i = 0; i < 40; i++) {
        pl_sched_output o;
        CHECK(pl_sched_schedule(m.s, &o));
        CHECK(pl_sched_update(m.s, &o));
        sim_sample(&m, &o);
    }
    uint64_t t_sched = 0, t_update = 0, t_append = 0;
    int min_seqs = n_seqs;
    for (int i = 0; i < timed_steps; i++) {
        pl_sched_output o;
        uint64_t a = pl_now_ns();
        CHECK(pl_sched_schedule(m.s, &o));
        uint64_t b = pl_now_ns();
        CHECK(pl_sched_update(m.s, &o));
        uint64_t d = pl_now_ns();
        sim_sample(&m, &o);
        uint64_t e = pl_now_ns();
        t_sched += b - a;
        t_update += d - b;
        t_append += e - d;
        if (o.n_seqs < min_seqs) min_seqs = o.n_seqs;
    }
    const char *tag = prefix ? "prefix_on" : "prefix_off";
    printf("step_%s_seqs_per_step_min=%d\n", tag, min_seqs);
    printf("step_%s_schedule_us=%.2f\n", tag, (double)t_sched / timed_steps / 1e3);
    printf("step_%s_update_us=%.2f\n", tag, (double)t_update / timed_steps / 1e3);
    printf("step_%s_append_us=%.2f\n", tag, (double)t_append / timed_steps / 1e3);
    printf("step_%s_total_us=%.2f\n", tag,
           (double)(t_sched + t_update + t_append) / timed_steps / 1e3);
    printf("step_%s_ns_per_seq=%.1f\n", tag,
           (double)(t_sched + t_update + t_append) / timed_steps / n_seqs);
    sim_fini(&m);
}

int main(int argc, char **argv) {
    int n_requests = argc > 1 ? atoi(argv[1]) : 2000;
    int timed_steps = argc > 2 ? atoi(argv[2]) : 2000;
    if (n_requests < 1 || timed_steps < 1) {
        fprintf(stderr, "usage: %s [n_requests >= 1] [timed_steps >= 1]\n", argv[0]);
        return 2;
    }
    printf("buildtype=%s\n", PL_BUILDTYPE);
    if (strstr(PL_BUILDTYPE, "debug") && !strstr(PL_BUILDTYPE, "optimized"))
        fprintf(stderr, "warning: a debug build; times are not representative\n");
    utilisation(n_requests, 0.01, "util");
    utilisation(n_requests, 0.10, "util_wm10");
    step_time(timed_steps, false);
    step_time(timed_steps, true);
    return 0;
}
