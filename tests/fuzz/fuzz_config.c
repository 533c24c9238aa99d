/*
 * tests/fuzz/fuzz_config.c - libFuzzer target: pl_engine_config_validate on configs decoded
 * from arbitrary bytes (fuzz_config_codec.h), and for a valid config within small limits
 * (dummy:tiny, a few thousand KV blocks, two backend threads) a real engine: create, a few
 * requests of fuzzed shape, steps until they finish, destroy.
 *
 * Contract: validate returns PL_OK or PL_ERR_INVALID_ARGUMENT with a message; create on a
 * validated config succeeds or fails with a status and a message; an accepted request
 * finishes within a bounded number of steps (a config the validator accepts must not
 * livelock the scheduler); nothing crashes or leaks.
 */
#include <stdio.h>
#include <stdlib.h>

#include "fuzz_config_codec.h"
#include "pagellm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool small_enough(const pl_engine_config *c) {
    if (c->backend == PL_BACKEND_CPU && (c->n_threads < 1 || c->n_threads > 2)) return false;
    if (c->max_num_blocks == 0 && (c->memory_limit_bytes == 0 ||
                                   c->memory_limit_bytes > ((size_t)64 << 20)))
        return false;
    return c->max_num_blocks <= 4096 && c->max_batch_size <= 64 && c->max_num_seqs <= 256 &&
           c->max_total_tokens <= 4096;
}

static void fail(const char *what) {
    fprintf(stderr, "fuzz_config: %s (%s)\n", what, pl_last_error());
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_reader r = {data, size};
    pl_engine_config c;
    fz_decode_config(&r, &c);
    pl_status s = pl_engine_config_validate(&c);
    if (s != PL_OK) {
        if (s != PL_ERR_INVALID_ARGUMENT || !pl_last_error()[0]) fail("validate: bad refusal");
        pl_engine *e = (pl_engine *)&c; /* a sentinel: create must leave it untouched */
        if (pl_engine_create(&c, &e) != s || e != (pl_engine *)&c) fail("create != validate");
        return 0;
    }
    if (!small_enough(&c)) return 0;
    pl_engine *e = NULL;
    s = pl_engine_create(&c, &e);
    if (s != PL_OK) {
        if (e != NULL || !pl_last_error()[0]) fail("create: failure left an engine or no message");
        return 0;
    }
    int len = 1 + fz_u8(&r), max_tokens = 1 + fz_u8(&r), n = 1 + (fz_u8(&r) & 3);
    int n_req = fz_u8(&r) & 7;
    int32_t prompt[256];
    for (int i = 0; i < len; i++) prompt[i] = 3 + (i * 7) % 500;
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.temperature = 0.0f;
    sp.max_tokens = max_tokens;
    sp.n = n;
    sp.ignore_eos = true;
    int accepted = 0;
    for (int i = 0; i < n_req; i++) {
        prompt[0] = 1 + i; /* distinct prompts, some prefix sharing */
        s = pl_engine_submit_tokens(e, prompt, (size_t)len, &sp, NULL);
        if (s == PL_OK) accepted += n;
        else if (!pl_last_error()[0]) fail("submit: refusal without a message");
    }
    int reported = 0;
    /* every step makes progress on something: prompt chunks of >= 1 token or one token per
     * sequence, so this bound is generous */
    long bound = 64 + (long)n_req * n * (len + max_tokens) * 4;
    for (long k = 0; k < bound && pl_engine_has_pending_work(e); k++) {
        pl_step_result res;
        s = pl_engine_step(e, &res);
        if (s != PL_OK) fail("step failed");
        reported += (int)res.n_finished;
    }
    if (pl_engine_has_pending_work(e) || reported != accepted) {
        pl_metrics m;
        pl_engine_metrics(e, &m);
        fprintf(stderr, "fuzz_config: %d of %d samples finished after %ld steps (waiting %d, "
                "running %d, blocks %d)\n", reported, accepted, bound, m.n_waiting, m.n_running,
                m.kv_blocks_total);
        abort();
    }
    pl_engine_destroy(e);
    return 0;
}
