/*
 * tests/scheduler/sched_harness.h - a fake engine around the scheduler: a deterministic fake
 * model that really goes through the block tables, the step loop, and the checks every step
 * must pass.
 *
 * The fake model keeps one uint64 "KV value" per slot (kv: (n_blocks * block_size)). Computing
 * position p of a sequence writes kv[slot(p)] = mix(kv[slot(p-1)], token[p], p), reading the
 * previous position through the block table as attention would, so a value depends on the whole
 * prefix. Sampling folds the values of every position 0 .. n_tokens-1, read through the table,
 * into the next token. So a wrong slot, a missing copy-on-write copy, a prefix-cache hit on the
 * wrong block or a token computed twice or never all change the output; and the output is
 * checked against h_reference(), which computes the same function from the token ids alone,
 * without any KV cache.
 */
#ifndef PL_TEST_SCHED_HARNESS_H
#define PL_TEST_SCHED_HARNESS_H

#include <stdbool.h>
#include <stdint.h>

#include "scheduler/scheduler.h"

#define H_VOCAB 1000
#define H_MAX_SAMPLES 4

typedef struct h_req {
    int index;         /* in harness.reqs */
    pl_seq seq[H_MAX_SAMPLES]; /* seq[0] is the request; seq[1..n_samples) its forked samples */
    int n_samples;
    int target_len;    /* output tokens after which the fake engine finishes it (<= max_tokens) */
    int arrive_step;   /* the harness submits it at the start of this step */
    bool submitted;    /* added to the scheduler */
    bool refused;      /* pl_sched_add refused it (status in add_status) */
    pl_status add_status;
    bool forked;
    int n_done;        /* samples finished */
    int first_step;    /* step it was first scheduled in; -1 before */
    int finish_step;   /* step its last sample finished in; -1 before */
} h_req;

typedef struct harness {
    pl_kv_pool *pool;
    pl_sched *s;
    pl_sched_config cfg;
    int block_size;
    int n_blocks;
    uint64_t *kv;      /* (n_blocks * block_size) fake KV values */
    h_req **reqs;      /* (n_reqs) */
    int n_reqs;
    int step;          /* steps run */
    int n_finished;    /* requests whose every sample finished */
    /* observed maxima and totals */
    int max_step_seqs;
    int max_step_tokens;
    int max_running;
    int n_preempt_steps;
    long total_tokens;
    /* scratch for pl_kv_check */
    const pl_kv_table **tables;
    pl_seq_state *before; /* (n_reqs * H_MAX_SAMPLES) state of each seq before the step */
} harness;

void h_init(harness *h, const pl_sched_config *cfg, int block_size, int n_blocks,
            bool prefix_caching);

/* The limits a test sets; everything else of the config is h_config's. */
typedef struct h_limits {
    int max_batch_size, max_num_seqs, max_total_tokens, max_model_len;
} h_limits;
/* A sensible test config: chunked prefill on, no watermark, no queue bound. */
pl_sched_config h_config(h_limits lim);
/* H_CONFIG(.max_batch_size = 4, .max_num_seqs = 4, .max_total_tokens = 32, .max_model_len = 256) */
#define H_CONFIG(...) h_config((h_limits){__VA_ARGS__})

/* A request to add; fields left 0 take the defaults noted. */
typedef struct h_request {
    const int32_t *prompt; /* (n_prompt), copied */
    int n_prompt;
    int max_tokens;
    int target_len;        /* output tokens after which it finishes; 0 = max_tokens */
    int priority;
    int arrive_step;       /* the step it is submitted at the start of */
    int n_samples;         /* 0 = 1 */
} h_request;
/* Adds a request (not yet submitted); returns its index. */
int h_add(harness *h, h_request r);
/* H_ADD(&h, .prompt = p, .n_prompt = 100, .max_tokens = 3) */
#define H_ADD(h, ...) h_add((h), (h_request){__VA_ARGS__})
/* Random prompts, many sharing a common prefix (exercises the prefix cache). */
void h_add_random(harness *h, uint64_t seed, int n, int min_len, int max_len, int max_out,
                  int arrival_spread);
/* One full engine step with every check. Returns the scheduler's output for inspection. */
pl_sched_output h_step(harness *h);
/* Steps until every request finished (or was refused); fails the test after max_steps. */
void h_run(harness *h, int max_steps);
/* Verifies every sample's output against the KV-free reference. */
void h_check_outputs(const harness *h);
/* Everything finished: every block free, pool consistent. */
void h_check_all_free(const harness *h);
void h_fini(harness *h);

/* The next token the fake model gives after tokens[0..n). */
int32_t h_reference_next(const int32_t *tokens, int n);
/* The pool check against every live table. */
void h_check_pool(harness *h);

#endif
