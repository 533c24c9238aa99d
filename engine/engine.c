/*
 * engine/engine.c - the engine: create/destroy, the step loop and run.
 *
 * One step: drain the intake -> schedule -> build the batch -> run the model -> update the
 * scheduler -> sample each sequence that reached the end of its tokens -> output processing
 * (detokenise, stop checks, finish) -> report deltas and completions.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine_internal.h"
#include "util/alloc.h"
#include "util/log.h"
#include "util/timer.h"

/* ---- create / destroy ---------------------------------------------------------------- */

static pl_status create_backend(const pl_engine_config *c, pl_backend **out) {
    pl_backend_options opt = {.n_threads = c->n_threads, .device = c->cuda_device,
                              .kv_dtype = c->kv_dtype};
    switch (c->backend) {
    case PL_BACKEND_REF: return pl_backend_ref_create(&opt, out);
    case PL_BACKEND_CUDA: return pl_backend_cuda_create(&opt, out);
    default: return pl_backend_cpu_create(&opt, out);
    }
}

/* The memory the engine may use: memory_limit_bytes, else what the backend reports (all of
 * host memory; a device's free memory). */
static pl_status available_memory(pl_engine *e, size_t *out) {
    size_t free_b = 0, total_b = 0;
    PL_TRY(e->be->ops->memory_info(e->be, &free_b, &total_b));
    if (e->cfg.memory_limit_bytes) total_b = free_b = e->cfg.memory_limit_bytes;
    *out = e->be->is_host ? total_b : free_b;
    return PL_OK;
}

/* Bytes of weights where the backend keeps them: a device may store f32 weights narrower (CUDA
 * keeps f16), so counting the host copy would shrink the pool and refuse models that fit. */
static pl_status stored_weight_bytes(const pl_engine *e, uint64_t *out) {
    pl_wtype wt = pl_model_weight(e->model, PL_T_TOKEN_EMBD, 0)->type;
    if (wt == PL_WTYPE_F32 && e->be->f32_weight_type != PL_WTYPE_NONE)
        wt = e->be->f32_weight_type;
    return pl_model_config_weight_bytes(&e->model->cfg, wt, out);
}

/* Blocks for the KV pool: max_num_blocks, or what memory_threshold of the backend's memory
 * holds after weights and workspace, capped at what max_num_seqs full-length sequences use.
 * Weights count as stored (embedding table and norms too, as the loader's limit check counts
 * them), so both checks report the same number for the same model. */
static pl_status size_pool(pl_engine *e, const pl_runner_limits *lim, int *out_blocks) {
    const pl_engine_config *c = &e->cfg;
    size_t block_bytes = pl_runner_kv_block_bytes(&e->model->cfg, c->block_size, e->be->kv_dtype);
    size_t cap = (size_t)c->max_num_seqs * (size_t)e->max_blocks_per_seq + 1;
    if (cap > (size_t)1 << 30) cap = (size_t)1 << 30;
    size_t avail, work_b = pl_runner_workspace_bytes(&e->model->cfg, lim);
    uint64_t weights_b;
    PL_TRY(stored_weight_bytes(e, &weights_b));
    PL_TRY(available_memory(e, &avail));
    if (weights_b > (uint64_t)avail) /* a device's copy: host copies were checked at load */
        return pl_fail(PL_ERR_OUT_OF_MEMORY,
                       "%s: weights take %llu bytes on backend %s, more than the %zu bytes of "
                       "memory available (memory_limit_bytes, else free device memory)",
                       e->model->name, (unsigned long long)weights_b, e->be->ops->name, avail);
    if (c->max_num_blocks > 0) {
        /* An explicit pool is taken as asked, but under an explicit limit it must fit beside
         * the weights and the workspace (the threshold only shapes a derived pool). */
        uint64_t pool_b = UINT64_MAX, need = UINT64_MAX;
        if (!__builtin_mul_overflow((uint64_t)c->max_num_blocks, (uint64_t)block_bytes, &pool_b) &&
            (__builtin_add_overflow(pool_b, weights_b, &need) ||
             __builtin_add_overflow(need, (uint64_t)work_b, &need)))
            need = UINT64_MAX;
        if (c->memory_limit_bytes && need > (uint64_t)c->memory_limit_bytes)
            return pl_fail(PL_ERR_OUT_OF_MEMORY,
                           "memory_limit_bytes = %zu: %llu bytes of weights + %llu bytes of KV "
                           "cache (max_num_blocks = %d blocks of %zu bytes) + %zu bytes of "
                           "workspace do not fit",
                           c->memory_limit_bytes, (unsigned long long)weights_b,
                           (unsigned long long)pool_b, c->max_num_blocks, block_bytes, work_b);
        *out_blocks = c->max_num_blocks;
        return PL_OK;
    }
    double budget = c->memory_threshold * (double)avail;
    double weights = (double)weights_b;
    double work = (double)work_b;
    double left = budget - weights - work;
    double n = left / (double)block_bytes;
    if (n < 1) {
        return pl_fail(PL_ERR_OUT_OF_MEMORY,
                       "KV cache: %.0f bytes of memory (memory_threshold %.2f of %zu bytes) "
                       "minus %.0f bytes of weights and %.0f bytes of workspace leaves no room "
                       "for one %zu-byte block",
                       budget, c->memory_threshold, avail, weights, work, block_bytes);
    }
    *out_blocks = n > (double)cap ? (int)cap : (int)n;
    return PL_OK;
}

static pl_status alloc_step_buffers(pl_engine *e) {
    pl_step_buffers *b = &e->sb;
    size_t T = (size_t)e->cfg.max_total_tokens, S = (size_t)e->cfg.max_batch_size;
    b->ids = pl_calloc(T, 4);
    b->positions = pl_calloc(T, 4);
    b->slots = pl_calloc(T, 8);
    b->query_start = pl_calloc(S + 1, 4);
    b->context_lens = pl_calloc(S, 4);
    b->block_tables = pl_calloc(S * (size_t)e->max_blocks_per_seq, 4);
    b->sample_rows = pl_calloc(S, 4);
    b->sample_entry = pl_calloc(S, 4);
    b->copy_pairs = pl_calloc(2 * S, 4);
    b->logits = pl_calloc(S * (size_t)e->vocab, 4);
    b->logits_tmp = pl_calloc((size_t)e->vocab, 4);
    if (!b->ids || !b->positions || !b->slots || !b->query_start || !b->context_lens ||
        !b->block_tables || !b->sample_rows || !b->sample_entry || !b->copy_pairs || !b->logits ||
        !b->logits_tmp)
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "engine: step buffers");
    return PL_OK;
}

static void free_step_buffers(pl_step_buffers *b) {
    void *p[] = {b->ids, b->positions, b->slots, b->query_start, b->context_lens,
                 b->block_tables, b->sample_rows, b->sample_entry, b->copy_pairs, b->logits,
                 b->logits_tmp, b->sampled, b->deltas, b->finished, b->finished_samples};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) pl_free(p[i]);
}

static void free_requests(pl_request *r, bool graveyard) {
    while (r) {
        pl_request *n = graveyard ? r->inbox_next : r->next;
        pl_request_free(r);
        r = n;
    }
}

void pl_engine_destroy(pl_engine *e) {
    if (!e) return;
    /* finish everything still queued so blocks return to the pool before it goes */
    for (pl_request *r = e->live_head; r; r = r->next)
        for (int i = 0; i < r->n_samples; i++) pl_output_finish(e, &r->samples[i], PL_FINISH_ABORT);
    free_requests(e->live_head, false);
    free_requests(e->graveyard, true);
    pl_intake_deinit(&e->intake);
    pl_profiler_close_trace(&e->prof);
    pl_sched_destroy(e->sched);
    pl_runner_destroy(e->runner);
    pl_kv_pool_destroy(e->pool);
    pl_backend_destroy(e->be);
    pl_sampler_deinit(&e->sampler);
    pl_tok_free(e->tok);
    pl_model_free(e->model);
    free_step_buffers(&e->sb);
    pl_free(e);
}

static pl_status load_tokenizer(pl_engine *e) {
    const char *path = e->cfg.tokenizer_path ? e->cfg.tokenizer_path : e->model->tokenizer_path;
    if (!path) return PL_OK; /* token ids only */
    PL_TRY(pl_tok_load(path, &e->tok));
    int tv = pl_tok_vocab_size(e->tok);
    if (tv > e->vocab)
        return pl_fail(PL_ERR_FORMAT,
                       "tokenizer %s has %d pieces but model %s has a vocabulary of %d", path, tv,
                       e->model->name, e->vocab);
    if (e->n_eos == 0 && pl_tok_eos_id(e->tok) >= 0) e->eos_ids[e->n_eos++] = pl_tok_eos_id(e->tok);
    if (e->bos_id < 0) e->bos_id = pl_tok_bos_id(e->tok);
    return PL_OK;
}

static pl_status engine_init(pl_engine *e) {
    pl_engine_config *c = &e->cfg;
    /* The backend first: on a host backend its memory (or memory_limit_bytes) bounds the
     * weights, which the loader checks from the header or config before reading or generating
     * any, so a model that cannot fit is refused at once and with the numbers. A device's
     * memory bounds the device copy instead, which may be narrower (f16 for f32 weights):
     * size_pool checks it, before anything is uploaded. */
    PL_TRY(create_backend(c, &e->be));
    size_t avail;
    PL_TRY(available_memory(e, &avail));
    pl_model_load_options mo = {.dtype = c->weight_dtype, .dummy_seed = c->dummy_seed};
    PL_TRY(pl_model_load_within(c->model_path, &mo, e->be->is_host ? avail : 0, &e->model));
    const pl_model_config *mc = &e->model->cfg;
    e->vocab = mc->vocab_size;
    e->bos_id = mc->bos_id;
    e->n_eos = mc->n_eos;
    memcpy(e->eos_ids, mc->eos_ids, sizeof e->eos_ids);
    e->max_model_len = c->max_model_len ? c->max_model_len : mc->max_seq_len;
    if (e->max_model_len > mc->max_seq_len)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "config.max_model_len = %d: the model %s supports at most %d",
                       c->max_model_len, e->model->name, mc->max_seq_len);
    if (!c->enable_chunked_prefill && e->max_model_len > c->max_total_tokens)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "config.max_total_tokens = %d: must be >= max_model_len (%d) when chunked "
                       "prefill is off", c->max_total_tokens, e->max_model_len);
    e->max_blocks_per_seq = (e->max_model_len + c->block_size - 1) / c->block_size;
    PL_TRY(load_tokenizer(e));

    pl_runner_limits lim = {.max_tokens = c->max_total_tokens, .max_seqs = c->max_batch_size,
                            .max_blocks_per_seq = e->max_blocks_per_seq,
                            .block_size = c->block_size};
    PL_TRY(size_pool(e, &lim, &lim.n_blocks));
    PL_TRY(pl_kv_pool_create(c->block_size, lim.n_blocks, c->enable_prefix_caching, &e->pool));
    pl_sched_config sc;
    pl_sched_config_from_engine(c, e->max_model_len, &sc);
    PL_TRY(pl_sched_create(&sc, e->pool, &e->sched));
    PL_TRY(pl_runner_create(e->model, e->be, &lim, &e->runner));
    pl_runner_set_op_hook(e->runner, pl_profiler_op, &e->prof);
    PL_TRY(pl_sampler_init(&e->sampler, e->vocab));
    PL_TRY(alloc_step_buffers(e));
    pl_log(PL_LOG_INFO, "engine: model %s, backend %s, %d KV blocks of %d tokens, max_model_len %d",
           e->model->name, e->be->ops->name, lim.n_blocks, c->block_size, e->max_model_len);
    return PL_OK;
}

pl_status pl_engine_create(const pl_engine_config *cfg, pl_engine **out) {
    if (!out) return pl_fail(PL_ERR_INVALID_ARGUMENT, "engine_create: out is NULL");
    PL_TRY(pl_engine_config_validate(cfg));
    pl_engine *e = pl_calloc(1, sizeof *e);
    if (!e) return pl_fail(PL_ERR_OUT_OF_MEMORY, "engine: state");
    e->cfg = *cfg;
    e->cfg.model_path = NULL; /* not kept: the strings are the caller's */
    e->cfg.tokenizer_path = NULL;
    atomic_init(&e->next_id, 1);
    pl_status s = pl_intake_init(&e->intake);
    if (s != PL_OK) {
        pl_free(e);
        return s;
    }
    e->cfg.model_path = cfg->model_path;
    e->cfg.tokenizer_path = cfg->tokenizer_path;
    s = engine_init(e);
    e->cfg.model_path = NULL;
    e->cfg.tokenizer_path = NULL;
    if (s != PL_OK) {
        pl_engine_destroy(e);
        return s;
    }
    *out = e;
    return PL_OK;
}

/* ---- intake drain -------------------------------------------------------------------- */

static void live_append(pl_engine *e, pl_request *r) {
    r->prev = e->live_tail;
    r->next = NULL;
    if (e->live_tail) e->live_tail->next = r;
    else e->live_head = r;
    e->live_tail = r;
}

static void live_remove(pl_engine *e, pl_request *r) {
    if (r->prev) r->prev->next = r->next;
    else e->live_head = r->next;
    if (r->next) r->next->prev = r->prev;
    else e->live_tail = r->prev;
}

static void finish_request(pl_engine *e, pl_request *r, pl_finish_reason reason) {
    for (int i = 0; i < r->n_samples; i++) pl_output_finish(e, &r->samples[i], reason);
}

static void drain_intake(pl_engine *e) {
    pl_intake *in = &e->intake;
    pthread_mutex_lock(&in->mu);
    pl_request *r = in->head;
    in->head = in->tail = NULL;
    in->n_queued = 0;
    while (r) {
        pl_request *next = r->inbox_next;
        r->inbox_next = NULL;
        live_append(e, r);
        pl_seq *dropped = NULL;
        pl_status s = pl_sched_add(e->sched, &r->samples[0].seq, &dropped);
        if (s != PL_OK) { /* only if the queue filled behind the submit-time check */
            pl_log(PL_LOG_WARN, "request %llu not queued: %s", (unsigned long long)r->id,
                   pl_last_error());
            finish_request(e, r, PL_FINISH_OVERLOADED);
        }
        if (dropped) finish_request(e, ((pl_sample *)dropped->user)->req, PL_FINISH_OVERLOADED);
        r = next;
    }
    for (size_t i = 0; i < in->n_aborts; i++) {
        pl_request *a = pl_id_map_get(&in->live, in->aborts[i]);
        if (a) finish_request(e, a, PL_FINISH_ABORT);
    }
    in->n_aborts = 0;
    /* The drained requests now count as waiting: a submit made while this step runs must see
     * them, or it passes the max_waiting check and the next drain finds the queue full (the
     * request then ends "overloaded" under REJECT_NEWEST instead of being refused). */
    pl_sched_counts c;
    pl_sched_get_counts(e->sched, &c);
    in->n_waiting_new = c.n_waiting_new;
    pthread_mutex_unlock(&in->mu);
}

/* Requests whose every sample was reported leave the live list; they are freed at the start
 * of the next step so this step's result can still point into them. */
static void retire_reported(pl_engine *e) {
    pl_intake *in = &e->intake;
    pthread_mutex_lock(&in->mu);
    for (pl_request *r = e->live_head, *n; r; r = n) {
        n = r->next;
        if (r->n_unreported > 0) continue;
        live_remove(e, r);
        pl_id_map_del(&in->live, r->id);
        r->inbox_next = e->graveyard;
        e->graveyard = r;
    }
    pl_sched_counts c;
    pl_sched_get_counts(e->sched, &c);
    in->n_waiting_new = c.n_waiting_new;
    pthread_mutex_unlock(&in->mu);
}

/* ---- one step ------------------------------------------------------------------------ */

static void build_batch(pl_engine *e, const pl_sched_output *so, pl_runner_batch *b) {
    pl_step_buffers *sb = &e->sb;
    int bs = e->cfg.block_size, mb = e->max_blocks_per_seq, t = 0, n_sample = 0;
    int max_q = 0, max_ctx = 0;
    for (int i = 0; i < so->n_seqs; i++) {
        const pl_sched_entry *en = &so->entries[i];
        const pl_seq *q = en->seq;
        sb->query_start[i] = t;
        for (int j = 0; j < en->n_new; j++, t++) {
            int pos = en->start + j;
            sb->ids[t] = q->tokens[pos];
            sb->positions[t] = pos;
            sb->slots[t] = pl_kv_slot(&q->kv, bs, pos);
        }
        sb->context_lens[i] = en->start + en->n_new;
        int32_t *row = sb->block_tables + (size_t)i * mb;
        memcpy(row, q->kv.block_ids, (size_t)q->kv.n_blocks * 4);
        memset(row + q->kv.n_blocks, 0, (size_t)(mb - q->kv.n_blocks) * 4);
        if (en->samples) {
            sb->sample_rows[n_sample] = t - 1;
            sb->sample_entry[n_sample++] = i;
        }
        if (en->n_new > max_q) max_q = en->n_new;
        if (sb->context_lens[i] > max_ctx) max_ctx = sb->context_lens[i];
    }
    sb->query_start[so->n_seqs] = t;
    for (int i = 0; i < so->n_copies; i++) {
        sb->copy_pairs[2 * i] = so->copies[i].src;
        sb->copy_pairs[2 * i + 1] = so->copies[i].dst;
    }
    *b = (pl_runner_batch){
        .n_seqs = so->n_seqs, .n_tokens = t, .token_ids = sb->ids, .positions = sb->positions,
        .slots = sb->slots, .query_start = sb->query_start, .context_lens = sb->context_lens,
        .block_tables = sb->block_tables, .max_query_len = max_q, .max_context_len = max_ctx,
        .sample_rows = sb->sample_rows, .n_sample = n_sample, .copy_pairs = sb->copy_pairs,
        .n_copies = so->n_copies,
    };
}

/* Samples one token for s from logits (vocab, modified in place). */
static int32_t sample_one(pl_engine *e, pl_sample *s, float *logits) {
    const pl_sampling_params *p = &s->req->params;
    const pl_seq *q = &s->seq;
    int n_out = pl_seq_n_generated(q);
    if (n_out < p->min_tokens) { /* no end of text before min_tokens */
        for (int i = 0; i < e->n_eos && !p->ignore_eos; i++) logits[e->eos_ids[i]] = -INFINITY;
        for (int i = 0; i < p->n_stop_ids; i++) logits[p->stop_ids[i]] = -INFINITY;
    }
    return pl_sampler_sample(&e->sampler, logits, p, q->tokens, q->n_prompt, n_out, &s->rng);
}

/* Forks samples 1..n-1 of a request off sample 0 once its prompt is computed. */
static void fork_samples(pl_engine *e, pl_request *r) {
    r->forked = true;
    for (int i = 1; i < r->n_samples; i++) {
        pl_sample *c = &r->samples[i];
        if (c->finished) continue;
        pl_status s = pl_sched_fork(e->sched, &r->samples[0].seq, &c->seq);
        if (s != PL_OK) {
            pl_log(PL_LOG_WARN, "request %llu sample %d: fork failed: %s",
                   (unsigned long long)r->id, i, pl_last_error());
            pl_output_finish(e, c, PL_FINISH_ERROR);
        }
    }
}

static pl_status push_sampled(pl_step_buffers *sb, size_t *n, pl_sample *s, int32_t tok) {
    void *p = sb->sampled;
    pl_status st = pl_grow_array(&p, &sb->cap_sampled, *n + 1, sizeof(pl_sampled),
                                 "engine: sampled tokens");
    sb->sampled = p;
    PL_TRY(st);
    sb->sampled[(*n)++] = (pl_sampled){s, tok};
    return PL_OK;
}

/* Draws every sampling sequence's token into sb->sampled; nothing is appended yet, so the
 * sample and detokenise phases are timed apart. A request's first draw forks its other
 * samples off sample 0, which draw from copies of the same logits row. */
static pl_status sample_tokens(pl_engine *e, const pl_sched_output *so, size_t *n_out) {
    pl_step_buffers *sb = &e->sb;
    int V = e->vocab, n_sample = 0;
    *n_out = 0;
    for (int i = 0; i < so->n_seqs; i++)
        if (so->entries[i].samples) n_sample++;
    for (int k = 0; k < n_sample; k++) {
        pl_sample *s = so->entries[sb->sample_entry[k]].seq->user;
        if (s->finished) continue; /* aborted meanwhile */
        float *row = sb->logits + (size_t)k * V;
        pl_request *r = s->req;
        if (!r->forked && s->index == 0) {
            fork_samples(e, r);
            for (int i = 1; i < r->n_samples; i++) {
                pl_sample *c = &r->samples[i];
                if (c->finished) continue;
                memcpy(sb->logits_tmp, row, (size_t)V * sizeof(float));
                PL_TRY(push_sampled(sb, n_out, c, sample_one(e, c, sb->logits_tmp)));
            }
        }
        PL_TRY(push_sampled(sb, n_out, s, sample_one(e, s, row)));
    }
    return PL_OK;
}

/* Appends the drawn tokens: detokenise, stop checks, stream deltas. */
static pl_status append_tokens(pl_engine *e, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const pl_sampled *d = &e->sb.sampled[i];
        if (!d->s->finished) PL_TRY(pl_output_on_token(e, d->s, d->tok));
    }
    return PL_OK;
}

static void fail_step(pl_engine *e, const pl_sched_output *so) {
    for (int i = 0; i < so->n_seqs; i++) {
        pl_sample *s = so->entries[i].seq->user;
        finish_request(e, s->req, PL_FINISH_ERROR);
    }
}

static void note_first_scheduled(const pl_sched_output *so, uint64_t now) {
    for (int i = 0; i < so->n_seqs; i++) {
        pl_request *r = ((pl_sample *)so->entries[i].seq->user)->req;
        if (!r->t_first_sched_ns) r->t_first_sched_ns = now;
    }
}

static void account_step(pl_engine *e, const pl_sched_output *so) {
    pl_engine_stats *st = &e->stats;
    st->steps++;
    st->step_seqs += (uint64_t)so->n_seqs;
    st->step_tokens += (uint64_t)so->n_tokens;
    for (int i = 0; i < so->n_seqs; i++) {
        const pl_sched_entry *en = &so->entries[i];
        int prompt_end = en->seq->n_prompt;
        if (en->start < prompt_end) {
            int end = en->start + en->n_new < prompt_end ? en->start + en->n_new : prompt_end;
            st->prompt_tokens_computed += (uint64_t)(end - en->start);
        }
    }
    pl_kv_stats kv;
    pl_kv_get_stats(e->pool, &kv);
    if (kv.usage > st->kv_usage_peak) st->kv_usage_peak = kv.usage;
}

pl_status pl_engine_step(pl_engine *e, pl_step_result *out) {
    if (!e) return pl_fail(PL_ERR_INVALID_ARGUMENT, "step: engine is NULL");
    pl_profiler *pr = &e->prof;
    uint64_t t0 = pl_now_ns(), t = t0, u;
    free_requests(e->graveyard, true);
    e->graveyard = NULL;
    e->sb.n_deltas = 0;
    e->sb.n_finished = 0;
    drain_intake(e);
    pl_profiler_phase(pr, PL_PHASE_DRAIN, t, u = pl_now_ns());

    pl_sched_output so;
    pl_status st = pl_sched_schedule(e->sched, &so);
    pl_profiler_phase(pr, PL_PHASE_SCHEDULE, u, t = pl_now_ns());
    if (st != PL_OK && so.n_seqs == 0) goto done; /* out of host memory: nothing runnable */
    st = PL_OK;
    if (so.n_seqs > 0) {
        note_first_scheduled(&so, t0);
        pl_runner_batch b;
        build_batch(e, &so, &b);
        pl_profiler_phase(pr, PL_PHASE_BATCH, t, u = pl_now_ns());
        st = pl_runner_run(e->runner, &b, e->sb.logits);
        pl_profiler_phase(pr, PL_PHASE_FORWARD, u, t = pl_now_ns());
        if (st != PL_OK) {
            pl_log(PL_LOG_ERROR, "step: forward pass failed: %s", pl_last_error());
            fail_step(e, &so);
        } else {
            size_t n_sampled = 0;
            pl_status us = pl_sched_update(e->sched, &so);
            if (us == PL_OK) us = sample_tokens(e, &so, &n_sampled);
            pl_profiler_phase(pr, PL_PHASE_SAMPLE, t, u = pl_now_ns());
            if (us == PL_OK) us = append_tokens(e, n_sampled);
            pl_profiler_phase(pr, PL_PHASE_DETOKENIZE, u, t = pl_now_ns());
            if (us != PL_OK) {
                st = us;
                fail_step(e, &so);
            }
        }
        account_step(e, &so);
    }
done:;
    pl_status cs = pl_output_collect(e);
    if (st == PL_OK) st = cs;
    retire_reported(e);
    uint64_t t_end = pl_now_ns();
    pl_profiler_phase(pr, PL_PHASE_OUTPUT, t, t_end);
    if (pr->trace) {
        pl_kv_stats kv;
        pl_kv_get_stats(e->pool, &kv);
        pl_profiler_counters(pr, t_end, so.n_seqs, so.n_tokens, kv.usage);
    }
    pr->steps++;
    pr->step_ns += t_end - t0;
    e->stats.elapsed_ns += t_end - t0;
    if (out) {
        *out = (pl_step_result){
            .deltas = e->sb.deltas, .n_deltas = e->sb.n_deltas, .finished = e->sb.finished,
            .n_finished = e->sb.n_finished, .n_scheduled_seqs = so.n_seqs,
            .n_scheduled_tokens = so.n_tokens, .n_preempted = so.n_preempted,
        };
    }
    return st;
}

bool pl_engine_has_pending_work(const pl_engine *e) {
    if (!e) return false;
    pl_engine *m = (pl_engine *)e; /* the lock is state, not value */
    pthread_mutex_lock(&m->intake.mu);
    bool queued = m->intake.n_queued > 0 || m->intake.n_aborts > 0;
    pthread_mutex_unlock(&m->intake.mu);
    return queued || e->live_head != NULL;
}

/* ---- run ----------------------------------------------------------------------------- */

/* Moves the buffers of the step's i-th finished sample into a caller-owned completion: no
 * allocation, so a completion the step reported cannot be lost on its way out. output_ids
 * points into the prompt_ids block (pl_completions_free frees that one). */
static void take_completion(pl_engine *e, size_t i, pl_completion *dst) {
    pl_sample *s = e->sb.finished_samples[i];
    *dst = e->sb.finished[i];
    dst->prompt_ids = pl_seq_take_tokens(&s->seq);
    dst->output_ids = dst->prompt_ids + dst->n_prompt_ids;
    dst->text = s->text;
    s->text = NULL;
    s->text_len = s->text_cap = s->streamed = 0;
}

void pl_completions_free(pl_completion *c, size_t n) {
    if (!c) return;
    for (size_t i = 0; i < n; i++) {
        pl_free(c[i].prompt_ids); /* output_ids lies in the same block */
        pl_free(c[i].text);
    }
    pl_free(c);
}

static int by_id_then_index(const void *a, const void *b) {
    const pl_completion *x = a, *y = b;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    return x->index - y->index;
}

/* Samples of the requests the stepping thread holds: at most this many finish in the next
 * step, unless it drains new ones from the intake. */
static size_t live_samples(const pl_engine *e) {
    size_t n = 0;
    for (const pl_request *r = e->live_head; r; r = r->next) n += (size_t)r->n_samples;
    return n;
}

static pl_status grow_completions(pl_completion **all, size_t *cap, size_t want) {
    void *p = *all;
    pl_status st = pl_grow_array(&p, cap, want, sizeof(pl_completion), "run: completions");
    *all = p;
    return st;
}

/* Room is made before each step for every sample that may finish in it: a step reports its
 * completions once, so growing after it could lose them. What finished before a failure is
 * handed back with it. */
pl_status pl_engine_run(pl_engine *e, pl_completion **out_completions, size_t *out_n) {
    if (!e || !out_completions || !out_n)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "run: NULL argument");
    pl_completion *all = NULL;
    size_t n = 0, cap = 0;
    pl_status st = PL_OK;
    while (st == PL_OK && pl_engine_has_pending_work(e)) {
        st = grow_completions(&all, &cap, n + live_samples(e));
        if (st != PL_OK) break;
        pl_step_result r;
        pl_status s = pl_engine_step(e, &r);
        for (size_t i = 0; i < r.n_finished && st == PL_OK; i++) {
            st = grow_completions(&all, &cap, n + 1); /* only for requests drained this step */
            if (st == PL_OK) take_completion(e, i, &all[n++]);
        }
        /* a failed forward pass finished its requests with reason error; keep going */
        if (s != PL_OK && s != PL_ERR_BACKEND && st == PL_OK) st = s;
    }
    if (n > 1) qsort(all, n, sizeof *all, by_id_then_index);
    *out_completions = all;
    *out_n = n;
    return st;
}

/* ---- queries ------------------------------------------------------------------------- */

pl_status pl_engine_capacity(const pl_engine *e, size_t prompt_len, size_t max_tokens,
                             size_t *out_requests) {
    if (!e || !out_requests) return pl_fail(PL_ERR_INVALID_ARGUMENT, "capacity: NULL argument");
    return pl_sched_capacity(e->sched, prompt_len, max_tokens, out_requests);
}

pl_status pl_engine_tokenize(const pl_engine *e, const char *text, int32_t **out_ids,
                             size_t *out_n) {
    if (!e || !text || !out_ids || !out_n)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "tokenize: NULL argument");
    if (!e->tok) return pl_fail(PL_ERR_INVALID_ARGUMENT, "tokenize: no tokenizer is loaded");
    return pl_tok_encode(e->tok, text, strlen(text), e->bos_id >= 0, out_ids, out_n);
}

void pl_free_ids(int32_t *ids) { pl_free(ids); }
