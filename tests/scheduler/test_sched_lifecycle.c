/*
 * tests/scheduler/test_sched_lifecycle.c - the scheduler's API around a step: config checks,
 * admission control at submit, queue bounds and their policies, abort from every state,
 * capacity, the state machine, and allocation failures.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "sched_harness.h"
#include "scheduler/sched_internal.h"
#include "test_support.h"
#include "util/alloc.h"

static void fill(int32_t *p, int n, int seed) {
    for (int i = 0; i < n; i++) p[i] = (int32_t)((seed * 31 + i * 17) % H_VOCAB);
}

/* A pool + scheduler without the harness, for tests that drive the API by hand. */
typedef struct fixture {
    pl_kv_pool *pool;
    pl_sched *s;
} fixture;

static void fx_init(fixture *f, pl_sched_config c, int block_size, int n_blocks) {
    cr_assert_eq(pl_kv_pool_create(block_size, n_blocks, true, &f->pool), PL_OK);
    cr_assert_eq(pl_sched_create(&c, f->pool, &f->s), PL_OK, "%s", pl_last_error());
}

static void fx_fini(fixture *f) {
    pl_sched_destroy(f->s);
    pl_kv_pool_destroy(f->pool);
}

static void seq_of(pl_seq *q, uint64_t id, int n_prompt, int max_tokens) {
    int32_t p[512];
    fill(p, n_prompt, (int)id);
    cr_assert_eq(pl_seq_init(q, id, p, n_prompt, max_tokens, 0), PL_OK);
}

static pl_sched_counts counts(const pl_sched *s) {
    pl_sched_counts c;
    pl_sched_get_counts(s, &c);
    return c;
}

/* ---- config ---- */

Test(lifecycle, config_from_engine_and_validation) {
    /* Field by field (pl_engine_config_default lives in engine/, which this test does not
     * link): the engine's values, and the resolved max_model_len instead of the config's 0. */
    pl_engine_config e = {.max_batch_size = 32, .max_num_seqs = 256, .max_total_tokens = 4096,
                          .max_model_len = 0, .enable_chunked_prefill = true,
                          .long_prefill_threshold = 7, .max_skip_head = 4, .watermark = 0.01,
                          .max_waiting = 99, .overflow_policy = PL_OVERFLOW_DROP_OLDEST,
                          .log_preemptions = true};
    pl_sched_config c;
    pl_sched_config_from_engine(&e, 2048, &c);
    cr_assert_eq(c.max_batch_size, 32);
    cr_assert_eq(c.max_num_seqs, 256);
    cr_assert_eq(c.max_total_tokens, 4096);
    cr_assert_eq(c.max_model_len, 2048);
    cr_assert_eq(c.long_prefill_threshold, 7);
    cr_assert_eq(c.max_skip_head, 4);
    cr_assert_float_eq(c.watermark, 0.01, 1e-12);
    cr_assert_eq(c.max_waiting, 99);
    cr_assert_eq(c.overflow_policy, PL_OVERFLOW_DROP_OLDEST);
    cr_assert(c.enable_chunked_prefill);
    cr_assert(c.log_preemptions);
    pl_kv_pool *pool;
    cr_assert_eq(pl_kv_pool_create(16, 16, true, &pool), PL_OK);
    struct {
        const char *field;
        pl_sched_config c;
    } bad[9];
    for (int i = 0; i < 9; i++) bad[i].c = c;
    bad[0].field = "max_batch_size", bad[0].c.max_batch_size = 0;
    bad[1].field = "max_num_seqs", bad[1].c.max_num_seqs = 8;
    bad[2].field = "max_total_tokens", bad[2].c.max_total_tokens = 16;
    bad[3].field = "max_model_len", bad[3].c.max_model_len = 0;
    bad[4].field = "max_model_len", bad[4].c.enable_chunked_prefill = false,
    bad[4].c.max_model_len = 8192;
    bad[5].field = "long_prefill_threshold", bad[5].c.long_prefill_threshold = -1;
    bad[6].field = "watermark", bad[6].c.watermark = 1.0;
    bad[7].field = "max_waiting", bad[7].c.max_waiting = -3;
    bad[8].field = "overflow_policy", bad[8].c.overflow_policy = (pl_overflow_policy)7;
    for (int i = 0; i < 9; i++) {
        pl_sched *s = (pl_sched *)&bad; /* must stay untouched */
        cr_assert_eq(pl_sched_create(&bad[i].c, pool, &s), PL_ERR_INVALID_ARGUMENT, "%s",
                     bad[i].field);
        cr_assert(strstr(pl_last_error(), bad[i].field), "%s: %s", bad[i].field,
                  pl_last_error());
        cr_assert_eq(s, (pl_sched *)&bad);
    }
    pl_sched *s;
    cr_assert_eq(pl_sched_create(&c, pool, &s), PL_OK);
    cr_assert_eq(pl_sched_pool(s), pool);
    pl_sched_destroy(s);
    pl_sched_destroy(NULL);
    pl_kv_pool_destroy(pool);
    PL_ASSERT_NO_LEAKS();
}

/* ---- admission control ---- */

Test(lifecycle, refused_requests_leave_no_trace) {
    fixture f;
    fx_init(&f, H_CONFIG(.max_batch_size = 4, .max_num_seqs = 4, .max_total_tokens = 64,
                         .max_model_len = 100), 16, 4); /* 64 slots */
    pl_seq q;
    seq_of(&q, 7, 60, 41); /* 101 > max_model_len 100 */
    cr_assert_eq(pl_sched_add(f.s, &q, NULL), PL_ERR_TOO_LONG);
    cr_assert(strstr(pl_last_error(), "max_model_len"), "%s", pl_last_error());
    cr_assert_eq(q.state, PL_SEQ_NEW);
    cr_assert_eq(q.arrival, 0);
    pl_seq_deinit(&q);

    seq_of(&q, 8, 60, 6); /* 65 slots = 5 blocks of 16 > 4 */
    cr_assert_eq(pl_sched_check_admissible(f.s, 60, 6), PL_ERR_TOO_LONG);
    cr_assert(strstr(pl_last_error(), "needs 5 KV blocks"), "%s", pl_last_error());
    cr_assert(strstr(pl_last_error(), "has only 4"), "%s", pl_last_error());
    cr_assert_eq(pl_sched_add(f.s, &q, NULL), PL_ERR_TOO_LONG);
    cr_assert_eq(q.state, PL_SEQ_NEW);
    cr_assert_eq(pl_sched_check_admissible(f.s, 0, 5), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_sched_check_admissible(f.s, 5, 0), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_sched_check_admissible(f.s, 60, 5), PL_OK, "64 slots: exactly the pool");
    cr_assert_eq(pl_sched_check_admissible(f.s, (size_t)1 << 62, 5), PL_ERR_TOO_LONG);
    q.n_forks = 4; /* 5 samples > max_num_seqs 4 */
    q.max_tokens = 5;
    cr_assert_eq(pl_sched_add(f.s, &q, NULL), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(q.state, PL_SEQ_NEW);
    pl_sched_counts c = counts(f.s);
    cr_assert_eq(c.n_waiting + c.n_running, 0);
    cr_assert_eq(pl_kv_num_free_blocks(f.pool), 4);

    /* The next accepted request gets the first arrival number: refusals consumed none. */
    q.n_forks = 0;
    cr_assert_eq(pl_sched_add(f.s, &q, NULL), PL_OK);
    cr_assert_eq(q.arrival, 1);
    cr_assert_eq(q.state, PL_SEQ_WAITING);
    fx_fini(&f);
    cr_assert_eq(q.state, PL_SEQ_FINISHED, "destroy finishes what is queued");
    cr_assert_eq(q.finish_reason, PL_FINISH_ABORT);
    pl_seq_deinit(&q);
    PL_ASSERT_NO_LEAKS();
}

Test(lifecycle, capacity_counts_blocks_per_request) {
    fixture f;
    fx_init(&f, H_CONFIG(.max_batch_size = 4, .max_num_seqs = 4, .max_total_tokens = 64,
                         .max_model_len = 4096), 16, 100);
    size_t n = 0;
    /* 100 + 29 - 1 = 128 slots = 8 blocks: 100 / 8 = 12. */
    cr_assert_eq(pl_sched_capacity(f.s, 100, 29, &n), PL_OK);
    cr_assert_eq(n, 12);
    /* 129 slots = 9 blocks: 11. */
    cr_assert_eq(pl_sched_capacity(f.s, 100, 30, &n), PL_OK);
    cr_assert_eq(n, 11);
    cr_assert_eq(pl_sched_capacity(f.s, 1, 1, &n), PL_OK);
    cr_assert_eq(n, 100);
    cr_assert_eq(pl_sched_capacity(f.s, 2000, 1000, &n), PL_OK); /* 188 blocks */
    cr_assert_eq(n, 0);
    cr_assert_eq(pl_sched_capacity(f.s, 4000, 100, &n), PL_ERR_TOO_LONG);
    cr_assert_eq(pl_sched_capacity(f.s, 0, 100, &n), PL_ERR_INVALID_ARGUMENT);
    fx_fini(&f);
}

/* ---- the waiting queue bound ---- */

/* Capacity is running slots + waiting slots: new requests that free running slots will take
 * at the next step are not "waiting" for max_waiting (16 at once with 4 + 4 slots: 8 in). */
Test(lifecycle, admission_counts_running_and_waiting_slots) {
    pl_sched_config c = H_CONFIG(.max_batch_size = 4, .max_num_seqs = 4, .max_total_tokens = 64,
                                 .max_model_len = 128);
    c.max_waiting = 4;
    fixture f;
    fx_init(&f, c, 16, 64);
    pl_seq q[16];
    for (int i = 0; i < 16; i++) seq_of(&q[i], (uint64_t)i + 1, 8, 4);
    int in = 0;
    for (int i = 0; i < 16; i++) {
        pl_status st = pl_sched_add(f.s, &q[i], NULL);
        cr_assert(st == PL_OK || st == PL_ERR_QUEUE_FULL, "%s", pl_last_error());
        in += st == PL_OK;
    }
    cr_assert_eq(in, 8, "%d of 16 admitted with 4 running + 4 waiting slots free", in);
    pl_sched_output o;
    cr_assert_eq(pl_sched_schedule(f.s, &o), PL_OK);
    cr_assert_eq(counts(f.s).n_running, 4);
    cr_assert_eq(counts(f.s).n_waiting, 4);
    /* every slot taken now: the next is refused */
    cr_assert_eq(pl_sched_add(f.s, &q[8], NULL), PL_ERR_QUEUE_FULL);
    cr_assert(strstr(pl_last_error(), "max_waiting"), "%s", pl_last_error());
    fx_fini(&f);
    for (int i = 0; i < 16; i++) pl_seq_deinit(&q[i]);
    PL_ASSERT_NO_LEAKS();
}

Test(lifecycle, reject_newest_when_full) {
    /* max_num_seqs 1: one running slot, taken by the first; then two wait */
    pl_sched_config c = H_CONFIG(.max_batch_size = 1, .max_num_seqs = 1, .max_total_tokens = 64,
                                 .max_model_len = 128);
    c.max_waiting = 2;
    fixture f;
    fx_init(&f, c, 16, 64);
    pl_seq q[5];
    for (int i = 0; i < 5; i++) seq_of(&q[i], (uint64_t)i + 1, 8, 4);
    pl_sched_output o;
    cr_assert_eq(pl_sched_add(f.s, &q[4], NULL), PL_OK);
    cr_assert_eq(pl_sched_schedule(f.s, &o), PL_OK);
    cr_assert_eq(counts(f.s).n_running, 1);
    cr_assert_eq(pl_sched_add(f.s, &q[0], NULL), PL_OK);
    cr_assert_eq(pl_sched_add(f.s, &q[1], NULL), PL_OK);
    pl_seq *dropped = &q[3];
    cr_assert_eq(pl_sched_add(f.s, &q[2], &dropped), PL_ERR_QUEUE_FULL);
    cr_assert(strstr(pl_last_error(), "max_waiting"), "%s", pl_last_error());
    cr_assert_null(dropped);
    cr_assert_eq(q[2].state, PL_SEQ_NEW);
    cr_assert_eq(counts(f.s).n_waiting, 2);
    /* Once the running one finishes, the queue has room again. */
    pl_sched_finish(f.s, &q[4], PL_FINISH_ABORT);
    cr_assert_eq(pl_sched_add(f.s, &q[2], NULL), PL_OK);
    cr_assert_eq(counts(f.s).n_waiting, 3);
    fx_fini(&f);
    for (int i = 0; i < 5; i++) pl_seq_deinit(&q[i]);
    PL_ASSERT_NO_LEAKS();
}

Test(lifecycle, drop_oldest_when_full) {
    /* max_num_seqs 2, both running slots taken by q[4] and q[5]: two wait */
    pl_sched_config c = H_CONFIG(.max_batch_size = 2, .max_num_seqs = 2, .max_total_tokens = 64,
                                 .max_model_len = 128);
    c.max_waiting = 2;
    c.overflow_policy = PL_OVERFLOW_DROP_OLDEST;
    fixture f;
    fx_init(&f, c, 16, 64);
    pl_seq q[6];
    for (int i = 0; i < 6; i++) seq_of(&q[i], (uint64_t)i + 1, 8, 4);
    pl_sched_output o;
    cr_assert_eq(pl_sched_add(f.s, &q[4], NULL), PL_OK);
    cr_assert_eq(pl_sched_add(f.s, &q[5], NULL), PL_OK);
    cr_assert_eq(pl_sched_schedule(f.s, &o), PL_OK);
    cr_assert_eq(counts(f.s).n_running, 2);
    q[1].priority = -1; /* runs first, but is not the oldest */
    pl_seq *dropped = &q[3];
    cr_assert_eq(pl_sched_add(f.s, &q[0], &dropped), PL_OK);
    cr_assert_null(dropped);
    cr_assert_eq(pl_sched_add(f.s, &q[1], &dropped), PL_OK);
    cr_assert_eq(pl_sched_add(f.s, &q[2], NULL), PL_ERR_INVALID_ARGUMENT,
                 "DROP_OLDEST needs out_dropped to report the dropped one");
    cr_assert_eq(q[2].state, PL_SEQ_NEW);
    cr_assert_eq(pl_sched_add(f.s, &q[2], &dropped), PL_OK);
    cr_assert_eq(dropped, &q[0]);
    cr_assert_eq(q[0].state, PL_SEQ_FINISHED);
    cr_assert_eq(q[0].finish_reason, PL_FINISH_OVERLOADED);
    pl_sched_counts n = counts(f.s);
    cr_assert_eq(n.n_waiting, 2);
    pl_sched_finish(f.s, &q[4], PL_FINISH_ABORT);
    pl_sched_finish(f.s, &q[5], PL_FINISH_ABORT);
    cr_assert_eq(pl_sched_schedule(f.s, &o), PL_OK);
    cr_assert_eq(o.n_seqs, 2);
    cr_assert_eq(o.entries[0].seq, &q[1]);
    cr_assert_eq(o.entries[1].seq, &q[2]);
    fx_fini(&f);
    for (int i = 0; i < 6; i++) pl_seq_deinit(&q[i]);
    PL_ASSERT_NO_LEAKS();
}

/* ---- abort ---- */

Test(lifecycle, abort_from_waiting_running_and_preempted_frees_blocks) {
    /* 4 blocks of 4: A (6 tokens) and B (7) run; the third step B preempts itself (see the
     * policy test); C waits. Abort B (preempted), C (waiting), then A (running). */
    harness h;
    pl_sched_config c = H_CONFIG(.max_batch_size = 8, .max_num_seqs = 8, .max_total_tokens = 64,
                                 .max_model_len = 64);
    c.max_skip_head = 0;
    h_init(&h, &c, 4, 4, false);
    int32_t p[7];
    fill(p, 6, 1);
    int a = H_ADD(&h, .prompt = p, .n_prompt = 6, .max_tokens = 4);
    fill(p, 7, 2);
    int b = H_ADD(&h, .prompt = p, .n_prompt = 7, .max_tokens = 4);
    fill(p, 3, 3);
    int cc = H_ADD(&h, .prompt = p, .n_prompt = 3, .max_tokens = 4);
    pl_seq *A = &h.reqs[a]->seq[0], *B = &h.reqs[b]->seq[0], *C = &h.reqs[cc]->seq[0];
    h_step(&h);
    h_step(&h);
    pl_sched_output o = h_step(&h);
    cr_assert_eq(o.n_preempted, 1);
    cr_assert_eq(B->state, PL_SEQ_PREEMPTED);
    cr_assert_eq(C->state, PL_SEQ_WAITING);
    cr_assert_eq(pl_sched_update(h.s, &o), PL_ERR_INVALID_ARGUMENT, "already applied");

    cr_assert_eq(pl_sched_finish(h.s, B, PL_FINISH_ABORT), PL_OK);
    cr_assert_eq(pl_sched_finish(h.s, C, PL_FINISH_ABORT), PL_OK);
    pl_sched_counts n = counts(h.s);
    cr_assert_eq(n.n_waiting, 0);
    cr_assert_eq(n.n_waiting_new, 0);
    cr_assert_eq(n.n_preempted, 0);
    cr_assert_eq(n.n_running, 1);
    h_check_pool(&h);

    /* Abort A between schedule and update: update skips it; its blocks are free at once. */
    cr_assert_eq(pl_sched_schedule(h.s, &o), PL_OK);
    cr_assert_eq(o.n_seqs, 1);
    cr_assert_eq(pl_sched_finish(h.s, A, PL_FINISH_ABORT), PL_OK);
    cr_assert_eq(pl_kv_num_free_blocks(h.pool), 4);
    cr_assert_eq(pl_sched_update(h.s, &o), PL_OK);
    cr_assert_eq(A->finish_reason, PL_FINISH_ABORT);
    cr_assert_eq(B->finish_reason, PL_FINISH_ABORT);
    h_check_all_free(&h);
    h_fini(&h);
    PL_ASSERT_NO_LEAKS();
}

/* ---- the state machine ---- */

Test(lifecycle, transition_table_is_exactly_the_documented_one) {
    const pl_seq_state S[] = {PL_SEQ_NEW, PL_SEQ_WAITING, PL_SEQ_RUNNING, PL_SEQ_PREEMPTED,
                              PL_SEQ_FINISHED};
    const char *ok[] = {"new>waiting", "new>running", "waiting>running", "waiting>finished",
                        "running>preempted", "running>finished", "preempted>waiting",
                        "preempted>finished"};
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 5; j++) {
            char name[64];
            snprintf(name, sizeof name, "%s>%s", pl_seq_state_name(S[i]),
                     pl_seq_state_name(S[j]));
            bool want = false;
            for (size_t k = 0; k < sizeof ok / sizeof ok[0]; k++) want |= !strcmp(ok[k], name);
            cr_assert_eq(pl_sched_transition_allowed(S[i], S[j]), want, "%s", name);
        }
    cr_assert_not(pl_sched_transition_allowed((pl_seq_state)9, PL_SEQ_NEW));
    cr_assert_str_eq(pl_seq_state_name((pl_seq_state)9), "?");
}

Test(lifecycle, invalid_transitions_are_refused) {
    fixture f;
    fx_init(&f, H_CONFIG(.max_batch_size = 4, .max_num_seqs = 4, .max_total_tokens = 32,
                         .max_model_len = 256), 4, 64);
    pl_seq a, b, child;
    seq_of(&a, 1, 10, 2);
    seq_of(&b, 2, 40, 2);
    seq_of(&child, 1, 10, 2);

    cr_assert_eq(pl_sched_finish(f.s, &a, PL_FINISH_ABORT), PL_ERR_INVALID_ARGUMENT, "new");
    cr_assert(strstr(pl_last_error(), "new -> finished"), "%s", pl_last_error());
    cr_assert_eq(pl_sched_append_token(f.s, &a, 5), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_sched_add(f.s, &a, NULL), PL_OK);
    cr_assert_eq(pl_sched_add(f.s, &a, NULL), PL_ERR_INVALID_ARGUMENT, "added twice");
    cr_assert_eq(pl_sched_append_token(f.s, &a, 5), PL_ERR_INVALID_ARGUMENT, "waiting");
    cr_assert_eq(pl_sched_fork(f.s, &a, &child), PL_ERR_INVALID_ARGUMENT, "parent waiting");
    cr_assert_eq(pl_sched_finish(f.s, &a, PL_FINISH_NONE), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(a.state, PL_SEQ_WAITING);

    /* Budget 32: a takes 10, b (40 tokens) gets a 22-token chunk and cannot sample yet. */
    cr_assert_eq(pl_sched_add(f.s, &b, NULL), PL_OK);
    pl_sched_output o;
    cr_assert_eq(pl_sched_schedule(f.s, &o), PL_OK);
    cr_assert_eq(o.n_seqs, 2);
    cr_assert_eq(o.entries[1].seq, &b);
    cr_assert_eq(o.entries[1].n_new, 22);
    cr_assert_not(o.entries[1].samples);
    cr_assert_eq(pl_sched_update(f.s, &o), PL_OK);
    cr_assert_eq(pl_sched_update(f.s, &o), PL_ERR_INVALID_ARGUMENT, "update twice");
    cr_assert_eq(pl_sched_append_token(f.s, &b, 5), PL_ERR_INVALID_ARGUMENT, "mid-prompt");
    cr_assert_eq(pl_sched_append_token(f.s, &a, 5), PL_OK);
    cr_assert_eq(pl_sched_append_token(f.s, &a, 6), PL_ERR_INVALID_ARGUMENT, "not sampled");
    cr_assert_eq(pl_sched_fork(f.s, &a, &child), PL_ERR_INVALID_ARGUMENT, "not computed");

    pl_sched_output o2;
    cr_assert_eq(pl_sched_schedule(f.s, &o2), PL_OK);
    cr_assert_eq(pl_sched_update(f.s, &o), PL_ERR_INVALID_ARGUMENT, "stale output");
    cr_assert_eq(pl_sched_update(f.s, &o2), PL_OK);
    cr_assert_eq(pl_sched_append_token(f.s, &a, 6), PL_OK);
    cr_assert_eq(pl_sched_append_token(f.s, &a, 7), PL_ERR_INVALID_ARGUMENT, "not sampled");
    cr_assert_eq(pl_sched_schedule(f.s, &o2), PL_OK);
    cr_assert_eq(pl_sched_update(f.s, &o2), PL_OK);
    /* a has generated max_tokens = 2: a third token is a bug even after computing. */
    cr_assert_eq(pl_sched_append_token(f.s, &a, 7), PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "max_tokens"), "%s", pl_last_error());

    cr_assert_eq(pl_sched_finish(f.s, &a, PL_FINISH_LENGTH), PL_OK);
    cr_assert_eq(pl_sched_finish(f.s, &a, PL_FINISH_ABORT), PL_ERR_INVALID_ARGUMENT, "twice");
    cr_assert_eq(a.finish_reason, PL_FINISH_LENGTH, "the first reason stays");
    cr_assert_eq(pl_sched_add(f.s, &a, NULL), PL_ERR_INVALID_ARGUMENT, "finished -> waiting");
    cr_assert_eq(pl_sched_fork(f.s, &a, &child), PL_ERR_INVALID_ARGUMENT, "parent finished");
    cr_assert_eq(child.state, PL_SEQ_NEW);
    pl_sched_counts n = counts(f.s);
    cr_assert_eq(n.n_running, 1);
    cr_assert_eq(n.n_waiting, 0);
    fx_fini(&f);
    pl_seq_deinit(&a);
    pl_seq_deinit(&b);
    pl_seq_deinit(&child);
    PL_ASSERT_NO_LEAKS();
}

Test(lifecycle, fork_checks_its_arguments) {
    fixture f;
    fx_init(&f, H_CONFIG(.max_batch_size = 2, .max_num_seqs = 2, .max_total_tokens = 64,
                         .max_model_len = 256), 4, 64);
    pl_seq a, other, c1, c2;
    seq_of(&a, 1, 10, 4);
    seq_of(&other, 9, 10, 4); /* a different prompt */
    seq_of(&c1, 1, 10, 4);
    seq_of(&c2, 1, 10, 4);
    cr_assert_eq(pl_sched_add(f.s, &a, NULL), PL_OK);
    pl_sched_output o;
    cr_assert_eq(pl_sched_schedule(f.s, &o), PL_OK);
    cr_assert_eq(pl_sched_update(f.s, &o), PL_OK);
    cr_assert_eq(pl_sched_fork(f.s, &a, &other), PL_ERR_INVALID_ARGUMENT, "prompts differ");
    cr_assert_eq(pl_sched_fork(f.s, &a, &a), PL_ERR_INVALID_ARGUMENT);
    /* No reserved slot (n_forks was 0): the second seq slot is free, then none is. */
    cr_assert_eq(pl_sched_fork(f.s, &a, &c1), PL_OK);
    cr_assert_eq(pl_sched_fork(f.s, &a, &c1), PL_ERR_INVALID_ARGUMENT, "child not new");
    cr_assert_eq(pl_sched_fork(f.s, &a, &c2), PL_ERR_QUEUE_FULL, "max_num_seqs 2");
    cr_assert_eq(c2.state, PL_SEQ_NEW);
    cr_assert_eq(c1.n_computed, 10);
    cr_assert_eq(c1.arrival, a.arrival);
    fx_fini(&f);
    pl_seq_deinit(&a);
    pl_seq_deinit(&other);
    pl_seq_deinit(&c1);
    pl_seq_deinit(&c2);
    PL_ASSERT_NO_LEAKS();
}

Test(lifecycle, forks_reserve_sequence_slots_at_admission) {
    /* max_num_seqs 4: A asks for 3 samples (2 forks), so B (1 sample) fits beside it but C
     * must wait; after the fork 4 run. */
    fixture f;
    fx_init(&f, H_CONFIG(.max_batch_size = 4, .max_num_seqs = 4, .max_total_tokens = 64,
                         .max_model_len = 256), 4, 64);
    pl_seq a, b, cc, k1, k2;
    seq_of(&a, 1, 10, 4);
    seq_of(&b, 2, 10, 4);
    seq_of(&cc, 3, 10, 4);
    seq_of(&k1, 1, 10, 4);
    seq_of(&k2, 1, 10, 4);
    a.n_forks = 2;
    cr_assert_eq(pl_sched_add(f.s, &a, NULL), PL_OK);
    cr_assert_eq(pl_sched_add(f.s, &b, NULL), PL_OK);
    cr_assert_eq(pl_sched_add(f.s, &cc, NULL), PL_OK);
    pl_sched_output o;
    cr_assert_eq(pl_sched_schedule(f.s, &o), PL_OK);
    cr_assert_eq(o.n_seqs, 2);
    cr_assert_eq(cc.state, PL_SEQ_WAITING);
    cr_assert_eq(pl_sched_update(f.s, &o), PL_OK);
    cr_assert_eq(pl_sched_fork(f.s, &a, &k1), PL_OK);
    cr_assert_eq(pl_sched_fork(f.s, &a, &k2), PL_OK);
    cr_assert_eq(counts(f.s).n_running, 4);
    cr_assert_eq(a.n_forks, 0);
    fx_fini(&f);
    pl_seq *all[] = {&a, &b, &cc, &k1, &k2};
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(all[i]->state, PL_SEQ_FINISHED);
        pl_seq_deinit(all[i]);
    }
    PL_ASSERT_NO_LEAKS();
}

Test(lifecycle, seq_init_checks_and_grows) {
    pl_seq q;
    int32_t p[3] = {1, 2, 3};
    cr_assert_eq(pl_seq_init(&q, 1, p, 0, 4, 0), PL_ERR_INVALID_ARGUMENT);
    pl_seq_deinit(&q);
    cr_assert_eq(pl_seq_init(&q, 1, NULL, 3, 4, 0), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_seq_init(&q, 1, p, 3, 0, 0), PL_ERR_INVALID_ARGUMENT);
    cr_assert_eq(pl_seq_init(NULL, 1, p, 3, 4, 0), PL_ERR_INVALID_ARGUMENT);
    pl_alloc_fail_after(0);
    cr_assert_eq(pl_seq_init(&q, 1, p, 3, 4, 0), PL_ERR_OUT_OF_MEMORY);
    pl_alloc_fail_after(-1);
    cr_assert_null(q.tokens);
    pl_seq_deinit(&q);
    pl_seq_deinit(NULL);
    PL_ASSERT_NO_LEAKS();
}

/* ---- allocation failures ---- */

Test(lifecycle, create_and_api_calls_fail_cleanly_without_memory) {
    pl_kv_pool *pool;
    cr_assert_eq(pl_kv_pool_create(4, 64, true, &pool), PL_OK);
    pl_sched_config c = H_CONFIG(.max_batch_size = 4, .max_num_seqs = 4, .max_total_tokens = 64,
                                 .max_model_len = 256);
    pl_sched *s = NULL;
    pl_alloc_fail_after(0);
    cr_assert_eq(pl_sched_create(&c, pool, &s), PL_ERR_OUT_OF_MEMORY);
    pl_alloc_fail_after(-1);
    cr_assert_null(s);
    cr_assert_eq(pl_sched_create(&c, pool, &s), PL_OK);

    pl_seq a, k;
    seq_of(&a, 1, 6, 200);
    seq_of(&k, 1, 6, 200);
    cr_assert_eq(pl_sched_add(s, &a, NULL), PL_OK);
    pl_sched_output o;
    pl_alloc_fail_after(0); /* the first step grows the output arrays */
    cr_assert_eq(pl_sched_schedule(s, &o), PL_ERR_OUT_OF_MEMORY);
    pl_alloc_fail_after(-1);
    cr_assert_eq(o.n_seqs, 0);
    cr_assert_eq(a.state, PL_SEQ_WAITING, "nothing half-admitted");
    cr_assert_eq(pl_kv_num_free_blocks(pool), 64);
    cr_assert_eq(pl_sched_schedule(s, &o), PL_OK);
    cr_assert_eq(o.n_seqs, 1);
    cr_assert_eq(pl_sched_update(s, &o), PL_OK);

    pl_alloc_fail_after(0);
    cr_assert_eq(pl_sched_fork(s, &a, &k), PL_ERR_OUT_OF_MEMORY);
    pl_alloc_fail_after(-1);
    cr_assert_eq(k.state, PL_SEQ_NEW);
    cr_assert_eq(k.kv.n_blocks, 0);

    /* Token storage starts at prompt + 64 and grows: fail the growth, nothing changes. */
    int n_before = 0;
    for (int i = 0; i < 200; i++) {
        if ((size_t)a.n_tokens == a.cap_tokens) {
            n_before = a.n_tokens;
            pl_alloc_fail_after(0);
            cr_assert_eq(pl_sched_append_token(s, &a, 9), PL_ERR_OUT_OF_MEMORY);
            pl_alloc_fail_after(-1);
            cr_assert_eq(a.n_tokens, n_before);
        }
        cr_assert_eq(pl_sched_append_token(s, &a, (int32_t)i), PL_OK, "%s", pl_last_error());
        if (i == 199) break;
        cr_assert_eq(pl_sched_schedule(s, &o), PL_OK);
        cr_assert_eq(pl_sched_update(s, &o), PL_OK);
    }
    cr_assert_gt(n_before, 0, "the growth path was reached");
    const pl_kv_table *t[] = {&a.kv};
    cr_assert_eq(pl_kv_check(pool, t, 1), PL_OK, "%s", pl_last_error());
    pl_sched_destroy(s);
    cr_assert_eq(pl_kv_num_free_blocks(pool), 64);
    pl_seq_deinit(&a);
    pl_seq_deinit(&k);
    pl_kv_pool_destroy(pool);
    PL_ASSERT_NO_LEAKS();
}

/* A step whose schedule fails part-way is not run at all (the engine gives up on it); the
 * next step must still produce exactly the reference tokens: slots given in the failed step
 * are reused and its copy-on-write copies are carried over. Swept over the failing step and
 * the allocation that fails. */
Test(lifecycle, failed_schedules_lose_nothing) {
    int n_failures = 0;
    for (int fail_step = 0; fail_step < 12; fail_step++)
        for (int k = 0; k < 4; k++) {
            harness h;
            pl_sched_config c = H_CONFIG(.max_batch_size = 8, .max_num_seqs = 8,
                                         .max_total_tokens = 24, .max_model_len = 64);
            h_init(&h, &c, 4, 24, true);
            int32_t p[20];
            for (int i = 0; i < 6; i++) {
                fill(p, 10 + i, 100 + i);
                H_ADD(&h, .prompt = p, .n_prompt = 10 + i, .max_tokens = 8, .arrive_step = i / 2,
                      .n_samples = i % 3 == 0 ? 3 : 1);
            }
            while (h.step < 200) {
                if (h.step == fail_step) {
                    pl_sched_output o;
                    pl_alloc_fail_after(k);
                    pl_status st = pl_sched_schedule(h.s, &o);
                    pl_alloc_fail_after(-1);
                    if (st != PL_OK) {
                        cr_assert_eq(st, PL_ERR_OUT_OF_MEMORY);
                        n_failures++;
                    }
                    h_check_pool(&h); /* and the step is not run */
                }
                h_step(&h);
                if (h.n_finished == h.n_reqs) break;
            }
            cr_assert_eq(h.n_finished, h.n_reqs);
            h_check_outputs(&h);
            h_check_all_free(&h);
            h_fini(&h);
        }
    cr_assert_gt(n_failures, 4, "the sweep hit allocation failures (%d)", n_failures);
    PL_ASSERT_NO_LEAKS();
}
