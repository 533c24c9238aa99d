/*
 * tests/scheduler/test_sched_policy.c - the scheduling policy of issue 3, one rule per test,
 * on small hand-built workloads whose expected schedules are worked out in the comments.
 * Every step also goes through the harness checks (limits, pool consistency, victims) and
 * every output is compared with the KV-free reference.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "sched_harness.h"
#include "test_support.h"

static void fill(int32_t *p, int n, int seed) {
    for (int i = 0; i < n; i++) p[i] = (int32_t)((seed * 7919 + i * 104729) % H_VOCAB);
}

/* The n_new of every entry of one step, in order, as a string like "32,4". */
static const char *chunks(const pl_sched_output *o) {
    static char buf[256];
    buf[0] = 0;
    for (int i = 0; i < o->n_seqs; i++)
        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%d", i ? "," : "",
                 o->entries[i].n_new);
    return buf;
}

Test(policy, chunked_prefill_splits_100_by_32) {
    harness h;
    pl_sched_config c = H_CONFIG(.max_batch_size = 4, .max_num_seqs = 4, .max_total_tokens = 32,
                                 .max_model_len = 256);
    h_init(&h, &c, 16, 64, false);
    int32_t p[100];
    fill(p, 100, 1);
    H_ADD(&h, .prompt = p, .n_prompt = 100, .max_tokens = 3);
    const int want[] = {32, 32, 32, 4, 1, 1};
    for (int i = 0; i < 6; i++) {
        pl_sched_output o = h_step(&h);
        cr_assert_eq(o.n_seqs, 1);
        cr_assert_eq(o.entries[0].start, i < 4 ? 32 * i : 100 + (i - 4), "step %d", i);
        cr_assert_eq(o.entries[0].n_new, want[i], "step %d: %d", i, o.entries[0].n_new);
        cr_assert_eq(o.entries[0].samples, i >= 3, "only the last chunk and decodes sample");
    }
    cr_assert_eq(h.n_finished, 1);
    h_check_outputs(&h);
    h_check_all_free(&h);
    h_fini(&h);
    PL_ASSERT_NO_LEAKS();
}

Test(policy, long_prefill_threshold_shares_the_budget) {
    /* Budget 64, threshold 20: two 100-token prompts each take 20 per step, not 64 + 0. */
    harness h;
    pl_sched_config c = H_CONFIG(.max_batch_size = 4, .max_num_seqs = 4, .max_total_tokens = 64,
                                 .max_model_len = 256);
    c.long_prefill_threshold = 20;
    h_init(&h, &c, 16, 64, false);
    int32_t p[100];
    fill(p, 100, 2);
    H_ADD(&h, .prompt = p, .n_prompt = 100, .max_tokens = 2);
    fill(p, 100, 3);
    H_ADD(&h, .prompt = p, .n_prompt = 100, .max_tokens = 2);
    for (int i = 0; i < 5; i++) {
        pl_sched_output o = h_step(&h);
        cr_assert_str_eq(chunks(&o), "20,20", "step %d", i);
    }
    pl_sched_output o = h_step(&h); /* both decode */
    cr_assert_str_eq(chunks(&o), "1,1");
    h_run(&h, 20);
    h_check_outputs(&h);
    h_check_all_free(&h);
    h_fini(&h);
    PL_ASSERT_NO_LEAKS();
}

Test(policy, chunking_off_a_prompt_waits_for_budget) {
    /* Budget 40, prompts A=30, B=30, C=8 in that order. Step 0: A (30) fits; B does not fit
     * the 10 left and waits; C (8) passes it. Step 1: A and C decode (2), then B (30). */
    harness h;
    pl_sched_config c = H_CONFIG(.max_batch_size = 4, .max_num_seqs = 4, .max_total_tokens = 40,
                                 .max_model_len = 40);
    c.enable_chunked_prefill = false;
    h_init(&h, &c, 16, 64, false);
    int32_t p[30];
    fill(p, 30, 4);
    int a = H_ADD(&h, .prompt = p, .n_prompt = 30, .max_tokens = 4);
    fill(p, 30, 5);
    int b = H_ADD(&h, .prompt = p, .n_prompt = 30, .max_tokens = 4);
    fill(p, 8, 6);
    int cc = H_ADD(&h, .prompt = p, .n_prompt = 8, .max_tokens = 4);
    pl_sched_output o = h_step(&h);
    cr_assert_str_eq(chunks(&o), "30,8");
    cr_assert_eq(o.entries[0].seq, &h.reqs[a]->seq[0]);
    cr_assert_eq(o.entries[1].seq, &h.reqs[cc]->seq[0]);
    cr_assert_eq(h.reqs[b]->seq[0].state, PL_SEQ_WAITING);
    o = h_step(&h);
    cr_assert_str_eq(chunks(&o), "1,1,30");
    cr_assert_eq(o.entries[2].seq, &h.reqs[b]->seq[0]);
    h_run(&h, 20);
    h_check_outputs(&h);
    h_check_all_free(&h);
    h_fini(&h);
    PL_ASSERT_NO_LEAKS();
}

/* Five running decodes leave 59 of a 64 budget; head H needs 60 (chunking off) and smalls
 * S1..S8 wait behind it. Exactly max_skip_head smalls may pass H; then admission stops at H
 * until the running ones finish, and H runs before the remaining smalls. */
static void skip_head_case(int max_skip_head) {
    harness h;
    pl_sched_config c = H_CONFIG(.max_batch_size = 16, .max_num_seqs = 16, .max_total_tokens = 64,
                                 .max_model_len = 64);
    c.enable_chunked_prefill = false;
    c.max_skip_head = max_skip_head;
    h_init(&h, &c, 4, 256, false);
    int32_t p[60];
    for (int i = 0; i < 5; i++) {
        fill(p, 4, 10 + i);
        H_ADD(&h, .prompt = p, .n_prompt = 4, .max_tokens = 20);
    }
    fill(p, 60, 20);
    int head = H_ADD(&h, .prompt = p, .n_prompt = 60, .max_tokens = 4, .arrive_step = 1);
    int small[8];
    for (int i = 0; i < 8; i++) {
        fill(p, 4, 30 + i);
        small[i] = H_ADD(&h, .prompt = p, .n_prompt = 4, .max_tokens = 2, .arrive_step = 1);
    }
    h_run(&h, 100);
    int passed = 0;
    for (int i = 0; i < 8; i++)
        passed += h.reqs[small[i]]->first_step < h.reqs[head]->first_step;
    cr_assert_eq(passed, max_skip_head, "%d smalls passed the head, allowed %d", passed,
                 max_skip_head);
    cr_assert_gt(h.reqs[head]->first_step, 1, "the head did have to wait");
    h_check_outputs(&h);
    h_check_all_free(&h);
    h_fini(&h);
}

Test(policy, head_of_line_skipping_is_bounded) {
    skip_head_case(3);
    skip_head_case(0);
    skip_head_case(1);
    PL_ASSERT_NO_LEAKS();
}

Test(policy, watermark_keeps_blocks_free_on_admission) {
    /* 20 blocks of 4, watermark 0.25 -> keep 5 free while anything runs. A (4 tokens, 1 block)
     * is admitted alone (19 free); B (40 tokens, 10 blocks) leaves 9 >= 5: admitted; C (20
     * tokens, 5 blocks) would leave 4: waits; D (16 tokens, 4 blocks) leaves 5: admitted. */
    harness h;
    pl_sched_config c = H_CONFIG(.max_batch_size = 8, .max_num_seqs = 8, .max_total_tokens = 128,
                                 .max_model_len = 80);
    c.watermark = 0.25;
    h_init(&h, &c, 4, 20, false);
    int32_t p[40];
    const int len[] = {4, 40, 20, 16};
    int idx[4];
    for (int i = 0; i < 4; i++) {
        fill(p, len[i], 40 + i);
        idx[i] = H_ADD(&h, .prompt = p, .n_prompt = len[i], .max_tokens = 1);
    }
    pl_sched_output o = h_step(&h);
    cr_assert_str_eq(chunks(&o), "4,40,16");
    cr_assert_eq(h.reqs[idx[2]]->first_step, -1);
    cr_assert_eq(o.entries[2].seq, &h.reqs[idx[3]]->seq[0]);
    /* All finished (max_tokens 1) and freed: C now runs. */
    o = h_step(&h);
    cr_assert_str_eq(chunks(&o), "20");
    h_check_outputs(&h);
    h_check_all_free(&h);
    h_fini(&h);
    PL_ASSERT_NO_LEAKS();
}

Test(policy, watermark_does_not_block_a_lone_request) {
    /* Watermark 0.5 of 20 blocks, a request needing all 20 blocks: nothing runs, so it starts. */
    harness h;
    pl_sched_config c = H_CONFIG(.max_batch_size = 8, .max_num_seqs = 8, .max_total_tokens = 128,
                                 .max_model_len = 96);
    c.watermark = 0.5;
    h_init(&h, &c, 4, 20, false);
    int32_t p[77];
    fill(p, 77, 50);
    H_ADD(&h, .prompt = p, .n_prompt = 77, .max_tokens = 4); /* 77 + 4 - 1 = 80 slots = 20 blocks */
    pl_sched_output o = h_step(&h);
    cr_assert_eq(o.n_seqs, 1);
    cr_assert_eq(o.entries[0].n_new, 77);
    h_run(&h, 10);
    cr_assert_eq(h.n_finished, 1);
    h_check_outputs(&h);
    h_check_all_free(&h);
    h_fini(&h);
    PL_ASSERT_NO_LEAKS();
}

Test(policy, priorities_then_arrival) {
    /* One sequence at a time. L1, L2 (priority 5) and H1, H2 (priority 0) all arrive at step
     * 0, lows first; H3 (priority 0) arrives at step 3 while H1 runs. Order of first
     * scheduling: H1, H2, H3, L1, L2 (a running sequence is never displaced by priority). */
    harness h;
    pl_sched_config c = H_CONFIG(.max_batch_size = 1, .max_num_seqs = 1, .max_total_tokens = 64,
                                 .max_model_len = 64);
    h_init(&h, &c, 16, 64, false);
    int32_t p[8];
    int id[5];
    const int prio[] = {5, 5, 0, 0, 0}, arrive[] = {0, 0, 0, 0, 3};
    for (int i = 0; i < 5; i++) {
        fill(p, 8, 60 + i);
        id[i] = H_ADD(&h, .prompt = p, .n_prompt = 8, .max_tokens = 6, .priority = prio[i],
                      .arrive_step = arrive[i]);
    }
    h_run(&h, 100);
    const int order[] = {2, 3, 4, 0, 1};
    for (int i = 1; i < 5; i++)
        cr_assert_lt(h.reqs[id[order[i - 1]]]->first_step, h.reqs[id[order[i]]]->first_step,
                     "request %d should start before %d", order[i - 1], order[i]);
    h_check_outputs(&h);
    h_check_all_free(&h);
    h_fini(&h);
    PL_ASSERT_NO_LEAKS();
}

Test(policy, preemption_takes_the_lowest_priority_then_latest) {
    /* 8 blocks of 4. A (prio 0), B (prio 9), C (prio 0), each 8 tokens (2 blocks) and up to 12
     * more: they fill 6 blocks, then grow. The first victim must be B (lowest priority)
     * although C arrived later; the harness checks every victim ranks last among the running. */
    harness h;
    pl_sched_config c = H_CONFIG(.max_batch_size = 8, .max_num_seqs = 8, .max_total_tokens = 64,
                                 .max_model_len = 64);
    h_init(&h, &c, 4, 8, false);
    int32_t p[8];
    const int prio[] = {0, 9, 0};
    int id[3];
    for (int i = 0; i < 3; i++) {
        fill(p, 8, 70 + i);
        id[i] = H_ADD(&h, .prompt = p, .n_prompt = 8, .max_tokens = 12, .priority = prio[i]);
    }
    const pl_seq *first_victim = NULL;
    while (h.n_finished < 3) {
        cr_assert_lt(h.step, 200);
        pl_sched_output o = h_step(&h);
        if (!first_victim && o.n_preempted) first_victim = o.preempted[0];
    }
    cr_assert_eq(first_victim, &h.reqs[id[1]]->seq[0]);
    cr_assert_gt(h.reqs[id[1]]->seq[0].n_preemptions, 0);
    h_check_outputs(&h);
    h_check_all_free(&h);
    h_fini(&h);
    PL_ASSERT_NO_LEAKS();
}

Test(policy, a_sequence_that_is_the_victim_stops_the_running_pass) {
    /* 4 blocks of 4. A (6 tokens) and B (7 tokens) take 2 blocks each. Step 1: both decode in
     * their blocks. Step 2: A's position 7 fits; B's position 8 needs a block, none is free,
     * and B is the tail: B preempts itself, only A runs, and nothing is admitted. */
    harness h;
    pl_sched_config c = H_CONFIG(.max_batch_size = 8, .max_num_seqs = 8, .max_total_tokens = 64,
                                 .max_model_len = 64);
    c.max_skip_head = 0;
    h_init(&h, &c, 4, 4, false);
    int32_t p[7];
    fill(p, 6, 80);
    int a = H_ADD(&h, .prompt = p, .n_prompt = 6, .max_tokens = 4);
    fill(p, 7, 81);
    int b = H_ADD(&h, .prompt = p, .n_prompt = 7, .max_tokens = 4);
    fill(p, 2, 82);
    /* arrives in the preempting step */
    int late = H_ADD(&h, .prompt = p, .n_prompt = 2, .max_tokens = 1, .arrive_step = 2);
    h_step(&h);
    h_step(&h);
    pl_sched_output o = h_step(&h);
    cr_assert_eq(o.n_seqs, 1);
    cr_assert_eq(o.entries[0].seq, &h.reqs[a]->seq[0]);
    cr_assert_eq(o.n_preempted, 1);
    cr_assert_eq(o.preempted[0], &h.reqs[b]->seq[0]);
    cr_assert_eq(h.reqs[b]->seq[0].state, PL_SEQ_PREEMPTED);
    cr_assert_eq(h.reqs[b]->seq[0].n_computed, 0, "recomputed from scratch");
    cr_assert_eq(pl_seq_n_generated(&h.reqs[b]->seq[0]), 2, "keeps what it generated");
    cr_assert_eq(h.reqs[late]->seq[0].state, PL_SEQ_WAITING, "no admission in this step");
    pl_sched_counts n;
    pl_sched_get_counts(h.s, &n);
    cr_assert_eq(n.n_preempted, 1);
    cr_assert_eq(n.n_preemptions, 1);
    cr_assert_eq(n.n_waiting, 2);
    cr_assert_eq(n.n_waiting_new, 1, "a preempted seq does not count against max_waiting");
    /* B went to the front of the waiting queue: with no skipping allowed, the later arrival
     * (which would fit) waits until B is back. */
    while (h.reqs[b]->seq[0].state != PL_SEQ_RUNNING) {
        cr_assert_eq(h.reqs[late]->first_step, -1);
        cr_assert_lt(h.step, 50);
        h_step(&h);
    }
    h_run(&h, 50);
    h_check_outputs(&h);
    h_check_all_free(&h);
    h_fini(&h);
    PL_ASSERT_NO_LEAKS();
}

Test(policy, prefix_cache_skips_cached_tokens_but_computes_the_last) {
    /* Block 16. A: 64-token prompt, runs and finishes; its 4 full blocks stay cached. B: the
     * same prompt: at most 63 tokens may come from the cache, so 3 blocks (48) do and B
     * computes 16. C: A's prompt + 1 token: 64 cached, computes 1. D: a 16-token prompt equal
     * to A's first block: nothing may be taken (at most 15), computes 16. */
    harness h;
    pl_sched_config c = H_CONFIG(.max_batch_size = 4, .max_num_seqs = 4, .max_total_tokens = 128,
                                 .max_model_len = 256);
    h_init(&h, &c, 16, 64, true);
    int32_t p[65];
    fill(p, 65, 90);
    H_ADD(&h, .prompt = p, .n_prompt = 64, .max_tokens = 2);
    h_run(&h, 10);
    int b = H_ADD(&h, .prompt = p, .n_prompt = 64, .max_tokens = 2, .arrive_step = h.step);
    pl_sched_output o = h_step(&h);
    cr_assert_eq(o.n_seqs, 1);
    cr_assert_eq(o.entries[0].seq, &h.reqs[b]->seq[0]);
    cr_assert_eq(o.entries[0].start, 48);
    cr_assert_eq(o.entries[0].n_new, 16);
    cr_assert(o.entries[0].samples);
    cr_assert_eq(h.reqs[b]->seq[0].n_cached_prompt, 48);
    h_run(&h, 20);
    int cc = H_ADD(&h, .prompt = p, .n_prompt = 65, .max_tokens = 2, .arrive_step = h.step);
    o = h_step(&h);
    cr_assert_eq(o.entries[0].seq, &h.reqs[cc]->seq[0]);
    cr_assert_eq(o.entries[0].start, 64);
    cr_assert_eq(o.entries[0].n_new, 1);
    h_run(&h, 30);
    int d = H_ADD(&h, .prompt = p, .n_prompt = 16, .max_tokens = 2, .arrive_step = h.step);
    o = h_step(&h);
    cr_assert_eq(o.entries[0].seq, &h.reqs[d]->seq[0]);
    cr_assert_eq(o.entries[0].start, 0);
    cr_assert_eq(o.entries[0].n_new, 16);
    h_run(&h, 40);
    pl_kv_stats st;
    pl_kv_get_stats(h.pool, &st);
    cr_assert_eq(st.prefix_hits_tokens, 48 + 64);
    h_check_outputs(&h); /* B's output equals A's: both are the reference's */
    cr_assert_eq(memcmp(h.reqs[0]->seq[0].tokens, h.reqs[b]->seq[0].tokens, 66 * 4), 0);
    h_check_all_free(&h);
    h_fini(&h);
    PL_ASSERT_NO_LEAKS();
}

Test(policy, fork_shares_the_prompt_and_copies_on_write) {
    /* Block 4, prompt 6: blocks [0..3] full and [4,5] partial. Three samples: after the prompt
     * step the two children share both blocks. Next step the parent writes position 6 into
     * the shared partial block (copy 1), then child 1 into the block it still shares with
     * child 2 (copy 2); child 2 is then alone in it: no copy. */
    harness h;
    pl_sched_config c = H_CONFIG(.max_batch_size = 8, .max_num_seqs = 8, .max_total_tokens = 64,
                                 .max_model_len = 64);
    h_init(&h, &c, 4, 32, true);
    int32_t p[6];
    fill(p, 6, 100);
    int r = H_ADD(&h, .prompt = p, .n_prompt = 6, .max_tokens = 5, .n_samples = 3);
    pl_sched_output o = h_step(&h);
    cr_assert_eq(o.n_seqs, 1);
    pl_sched_counts n;
    pl_sched_get_counts(h.s, &n);
    cr_assert_eq(n.n_running, 3);
    cr_assert_eq(pl_kv_num_free_blocks(h.pool), 30, "children share the prompt's 2 blocks");
    o = h_step(&h);
    cr_assert_eq(o.n_seqs, 3);
    cr_assert_eq(o.entries[0].seq, &h.reqs[r]->seq[0]);
    cr_assert_eq(o.entries[1].seq, &h.reqs[r]->seq[1], "a child runs right after its parent");
    cr_assert_eq(o.n_copies, 2);
    cr_assert_eq(pl_kv_num_free_blocks(h.pool), 28);
    h_run(&h, 20);
    h_check_outputs(&h); /* each sample continues from its own first token */
    for (int k = 1; k < 3; k++)
        cr_assert_neq(memcmp(h.reqs[r]->seq[0].tokens, h.reqs[r]->seq[k].tokens, 11 * 4), 0);
    h_check_all_free(&h);
    h_fini(&h);
    PL_ASSERT_NO_LEAKS();
}
