/*
 * engine/engine.c - creating and destroying an engine: backend, model, tokenizer, the KV pool
 * sized from memory, scheduler, runner. The step itself is in step.c; the live list of
 * requests the stepping thread holds is the intake's (intake.c), finishing a request is
 * output.c's and freeing one request.c's, all below this file.
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

static pl_status alloc_step_buffers(pl_engine *e, const pl_runner_limits *lim) {
    pl_step_buffers *b = &e->sb;
    size_t S = (size_t)lim->max_seqs, V = (size_t)e->vocab;
    PL_TRY(pl_batch_storage_alloc(&b->batch, lim));
    b->sample_entry = pl_calloc(S, sizeof *b->sample_entry);
    b->logits = pl_calloc(S * V, sizeof *b->logits);
    b->logits_tmp = pl_calloc(V, sizeof *b->logits_tmp);
    b->logits_raw = pl_calloc(V, sizeof *b->logits_raw);
    if (!b->sample_entry || !b->logits || !b->logits_tmp || !b->logits_raw)
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "engine: step buffers");
    return PL_OK;
}

static void free_step_buffers(pl_step_buffers *b) {
    pl_batch_storage_free(&b->batch);
    void *p[] = {b->sample_entry, b->logits, b->logits_tmp, b->logits_raw, b->sampled,
                 b->deltas, b->finished, b->finished_samples};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) pl_free(p[i]);
}

void pl_engine_destroy(pl_engine *e) {
    if (!e) return;
    /* finish everything still queued so blocks return to the pool before it goes */
    for (pl_request *r = e->live_head; r; r = r->next)
        pl_engine_finish_request(e, r, PL_FINISH_ABORT);
    pl_request_free_all(e->live_head, false);
    pl_request_free_all(e->graveyard, true);
    pl_intake_deinit(&e->intake);
    pl_profiler_close_trace(&e->prof);
    pl_sched_destroy(e->sched);
    pl_tp_set_totals(e->tp, e->stats.steps, e->stats.step_tokens);
    pl_tp_stop(e->tp, e->runner); /* the other ranks first: they follow this runner */
    pl_runner_destroy(e->runner);
    pl_kv_pool_destroy(e->pool);
    pl_backend_destroy(e->be);
    pl_sampler_deinit(&e->sampler);
    pl_chat_state_free(&e->chat);
    pl_constrain_deinit(&e->constrain);
    pl_tok_free(e->tok);
    pl_model_free(e->model);
    free_step_buffers(&e->sb);
    pl_free(e);
}

/* Adds id to the end-of-text set (ids outside the model's vocabulary and repeats are left out;
 * past PL_MODEL_MAX_EOS ids the rest are dropped with a warning). */
static void add_eos(pl_engine *e, int32_t id) {
    if (id < 0 || id >= e->vocab || pl_engine_is_eos(e, id)) return;
    if (e->n_eos == PL_MODEL_MAX_EOS) {
        pl_log(PL_LOG_WARN, "engine: more than %d end-of-text ids; id %d left out",
               PL_MODEL_MAX_EOS, (int)id);
        return;
    }
    e->eos_ids[e->n_eos++] = id;
}

static pl_status load_tokenizer(pl_engine *e, const char *tokenizer_path) {
    const char *path = tokenizer_path ? tokenizer_path : e->model->tokenizer_path;
    if (!path) return PL_OK; /* token ids only */
    if (!e->tok) PL_TRY(pl_tok_load(path, &e->tok)); /* (a dummy model's is loaded first) */
    int tv = pl_tok_vocab_size(e->tok);
    if (tv > e->vocab)
        return pl_fail(PL_ERR_FORMAT,
                       "tokenizer %s has %d pieces but model %s has a vocabulary of %d", path, tv,
                       e->model->name, e->vocab);
    if (e->bos_id < 0) e->bos_id = pl_tok_bos_id(e->tok);
    /* End of text: the model's set, and the tokenizer's EOS and end-of-turn tokens (Llama 3
     * Instruct's <|eot_id|>, Qwen's <|im_end|>) that a config may not list. */
    add_eos(e, pl_tok_eos_id(e->tok));
    size_t n_eog;
    const int32_t *eog = pl_tok_eog_ids(e->tok, &n_eog);
    for (size_t i = 0; i < n_eog; i++) add_eos(e, eog[i]);
    return PL_OK;
}

/* Builds everything from e->cfg (validated and resolved); the paths come apart, as the
 * engine keeps none of the caller's strings. */
static pl_status engine_init(pl_engine *e, const char *model_path, const char *tokenizer_path,
                             const char *chat_template) {
    pl_engine_config *c = &e->cfg;
    /* The backend first: on a host backend its memory (or memory_limit_bytes) bounds the
     * weights, which the loader checks from the header or config before reading or generating
     * any, so a model that cannot fit is refused at once and with the numbers. A device's
     * memory bounds the device copy instead, which may be narrower (f16 for f32 weights):
     * pl_rank_pool_blocks checks it, before anything is uploaded. */
    PL_TRY(pl_rank_backend_create(c, 0, pl_tp_threads_per_rank(c), &e->be));
    size_t avail;
    PL_TRY(pl_rank_memory(&e->cfg, e->be, &avail));
    pl_model_load_options mo = {.dtype = c->weight_dtype, .dummy_seed = c->dummy_seed};
    if (!strncmp(model_path, "dummy:", 6) && tokenizer_path) {
        /* random weights take the tokenizer's vocabulary when it is larger */
        PL_TRY(pl_tok_load(tokenizer_path, &e->tok));
        mo.dummy_vocab = pl_tok_vocab_size(e->tok);
    }
    /* with tensor parallelism this rank keeps 1/N of the weights: the whole model may be N
     * times this rank's memory (the loader maps it; the shard is what stays) */
    size_t limit = e->be->is_host ? avail * (size_t)c->tensor_parallel_size : 0;
    PL_TRY(pl_model_load_within(model_path, &mo, limit, &e->model));
    pl_engine_name_weights(e);
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
    PL_TRY(pl_engine_config_check_model_len(c, e->max_model_len, c->max_model_len == 0));
    e->max_blocks_per_seq = (e->max_model_len + c->block_size - 1) / c->block_size;
    /* Tensor parallelism: the other ranks start here, and this one keeps its shard. From now
     * on a failure is told to them: every step up to the runner goes through an agreement. */
    if (c->tensor_parallel_size > 1 || c->distributed_backend == PL_DIST_MPI ||
        c->distributed_backend == PL_DIST_NCCL) /* one MPI rank: what one GPU can check */
        PL_TRY(pl_tp_start(c, e->model, e->be, &e->tp));
    pl_runner_limits lim = {.max_tokens = c->max_total_tokens, .max_seqs = c->max_batch_size,
                            .max_blocks_per_seq = e->max_blocks_per_seq,
                            .block_size = c->block_size};
    pl_status st = load_tokenizer(e, tokenizer_path);
    if (st == PL_OK) st = pl_chat_state_init(&e->chat, e->tok, chat_template);
    if (st == PL_OK) st = pl_rank_pool_blocks(&e->cfg, e->model, e->be, &lim, &lim.n_blocks);
    if (e->tp) st = pl_tp_agree_blocks(e->tp, st, e->model, &lim, lim.n_blocks, &lim.n_blocks);
    PL_TRY(st);
    e->n_blocks = lim.n_blocks;
    PL_TRY(pl_kv_pool_create(c->block_size, lim.n_blocks, c->enable_prefix_caching, &e->pool));
    pl_sched_config sc;
    pl_sched_config_from_engine(c, e->max_model_len, &sc);
    PL_TRY(pl_sched_create(&sc, e->pool, &e->sched));
    st = pl_runner_create(e->model, e->be, &lim, &e->runner);
    if (e->tp) {
        lim.n_blocks = e->n_blocks;
        st = pl_tp_connect(e->tp, c, e->runner, e->model, &lim, st);
    }
    PL_TRY(st);
    pl_runner_set_op_hook(e->runner, pl_profiler_op, &e->prof);
    PL_TRY(pl_sampler_init(&e->sampler, e->vocab));
    PL_TRY(alloc_step_buffers(e, &lim));
    pl_intake_publish(e);
    pl_log(PL_LOG_INFO, "engine: model %s, backend %s, %d KV blocks of %d tokens, max_model_len %d",
           e->model->name, e->be->ops->name, lim.n_blocks, c->block_size, e->max_model_len);
    return PL_OK;
}

/* A test hook: PAGELLM_FAULT_FORWARD=ID makes every forward pass whose batch holds a prompt
 * beginning with token ID fail with PL_ERR_BACKEND, as a device failure would, so that a
 * program serving the engine (pagellm serve's 500 answers) can be tested end to end; its
 * other requests run as usual. Read once, here; unset or not a token id: off. */
static int32_t fault_token_from_env(void) {
    const char *v = getenv("PAGELLM_FAULT_FORWARD");
    if (!v || !v[0]) return -1;
    char *end;
    long id = strtol(v, &end, 10);
    return *end || id < 0 || id > INT32_MAX ? -1 : (int32_t)id;
}

pl_status pl_engine_create(const pl_engine_config *cfg, pl_engine **out) {
    if (!out) return pl_fail(PL_ERR_INVALID_ARGUMENT, "engine_create: out is NULL");
    pl_engine_config c;
    PL_TRY(pl_engine_config_take(cfg, &c));
    pl_engine *e = pl_calloc(1, sizeof *e);
    if (!e) return pl_fail(PL_ERR_OUT_OF_MEMORY, "engine: state");
    e->cfg = c;
    e->cfg.model_path = NULL; /* not kept: the strings are the caller's */
    e->cfg.tokenizer_path = NULL;
    e->cfg.chat_template = NULL;
    e->cfg.storage = NULL;
    atomic_init(&e->next_id, 1);
    e->fault_token = fault_token_from_env();
    pl_status s = pl_intake_init(&e->intake);
    if (s != PL_OK) {
        pl_free(e);
        return s;
    }
    s = pl_constrain_init(&e->constrain);
    if (s != PL_OK) {
        pl_intake_deinit(&e->intake);
        pl_free(e);
        return s;
    }
    s = engine_init(e, c.model_path, c.tokenizer_path, c.chat_template);
    if (s != PL_OK) {
        pl_engine_destroy(e);
        return s;
    }
    *out = e;
    return PL_OK;
}
