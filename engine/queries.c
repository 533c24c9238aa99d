/*
 * engine/queries.c - what a caller may ask an engine from any thread: capacity, the model's
 * facts, tokenize and detokenize. Each reads only what create set up and never changes
 * afterwards (the tokenizer is immutable, the pool's size fixed).
 */
#include <stdio.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "engine/fields.h"
#include "util/alloc.h"
#include "util/dtype.h"
#include "util/wtype.h"

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

pl_status pl_engine_detokenize(const pl_engine *e, const int32_t *ids, size_t n,
                               char **out_text, size_t *out_len) {
    if (!e || (!ids && n > 0) || !out_text)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "detokenize: NULL argument");
    if (!e->tok) return pl_fail(PL_ERR_INVALID_ARGUMENT, "detokenize: no tokenizer is loaded");
    /* ids the tokenizer knows but the model does not (a model vocabulary padded past the
     * tokenizer's is the usual case the other way round) are refused like submit does */
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= e->vocab)
            return pl_fail(PL_ERR_INVALID_ARGUMENT,
                           "detokenize: id %d at index %zu is outside the vocabulary [0, %d)",
                           (int)ids[i], i, e->vocab);
    char *text;
    PL_TRY(pl_tok_decode(e->tok, ids, n, PL_TOK_SKIP_SPECIAL, &text));
    if (out_len) *out_len = strlen(text);
    *out_text = text;
    return PL_OK;
}

void pl_free_text(char *text) { pl_free(text); }

/* Every weight of the model as stored (tied embeddings once): a loop over its tensor slots. */
static void count_params(const pl_model *m, uint64_t *out_params, uint64_t *out_bytes) {
    const pl_model_config *c = &m->cfg;
    uint64_t n = 0, bytes = 0;
    for (size_t i = 0; i < pl_model_n_slots(c); i++) {
        int layer;
        pl_tensor_role r = pl_model_slot_role(c, i, &layer);
        const pl_weight *w = &m->w[i];
        if (!w->data || !pl_model_stores_tensor(c, r)) continue;
        uint64_t k = (uint64_t)w->rows * (uint64_t)w->cols, b = 0;
        pl_wtype_bytes(w->type, k, &b);
        n += k;
        bytes += b;
    }
    *out_params = n;
    *out_bytes = bytes;
}

/* The matrices' types (norms and biases, always f32, aside) by how many weights each holds,
 * most first, joined by '+' ("q4_k+q6_k"); weight_dtype is their pl_dtype when there is one
 * float type, else AUTO. */
void pl_engine_name_weights(pl_engine *e) {
    const pl_model *m = e->model;
    const pl_model_config *c = &m->cfg;
    count_params(m, &e->n_params, &e->param_bytes);
    uint64_t count[PL_WTYPE_COUNT] = {0};
    for (size_t i = 0; i < pl_model_n_slots(c); i++) {
        int layer;
        pl_tensor_role r = pl_model_slot_role(c, i, &layer);
        const pl_weight *w = &m->w[i];
        if (!w->data || !pl_model_stores_tensor(c, r) ||
            pl_model_tensor_type(r, PL_WTYPE_NONE) == PL_WTYPE_F32 || w->type >= PL_WTYPE_COUNT)
            continue;
        count[w->type] += (uint64_t)w->rows * (uint64_t)w->cols;
    }
    int n = 0;
    size_t o = 0;
    e->weight_type[0] = '\0';
    for (;;) {
        int best = 0;
        for (int t = 1; t < PL_WTYPE_COUNT; t++)
            if (count[t] > count[best]) best = t;
        if (!count[best]) break;
        int k = snprintf(e->weight_type + o, sizeof e->weight_type - o, "%s%s", n ? "+" : "",
                         pl_wtype_name((pl_wtype)best));
        if (k > 0 && o + (size_t)k < sizeof e->weight_type) o += (size_t)k;
        e->weight_dtype = n ? PL_DTYPE_AUTO : pl_wtype_dtype((pl_wtype)best);
        count[best] = 0;
        n++;
    }
}

/* The tokenizer's first end-of-generation token that is not the EOS: Llama 3's <|eot_id|>,
 * Qwen's <|im_end|> (chat models end a turn with it). */
static int end_of_turn(const pl_engine *e) {
    if (!e->tok) return -1;
    size_t n;
    const int32_t *eog = pl_tok_eog_ids(e->tok, &n);
    int eos = e->n_eos > 0 ? e->eos_ids[0] : -1, tok_eos = pl_tok_eos_id(e->tok);
    for (size_t i = 0; i < n; i++)
        if (eog[i] != eos && eog[i] != tok_eos && eog[i] < e->vocab) return eog[i];
    return -1;
}

pl_status pl_engine_model_info_sized(const pl_engine *e, pl_model_info *dst, size_t dst_size) {
    if (!e) return pl_fail(PL_ERR_INVALID_ARGUMENT, "model_info: engine is NULL");
    if (!dst) return PL_OK;
    const pl_model *m = e->model;
    const pl_model_config *c = &m->cfg;
    pl_model_config lc; /* a tensor-parallel rank's KV heads */
    pl_model_local_config(m, &lc);
    pl_model_info info = {
        .struct_size = sizeof info,
        .name = m->name,
        .architecture = pl_arch_get(c->arch)->model_type,
        .vocab_size = e->vocab,
        .bos_id = e->bos_id,
        .eos_id = e->n_eos > 0 ? e->eos_ids[0] : -1,
        .eot_id = end_of_turn(e),
        .context_length = c->max_seq_len,
        .max_model_len = e->max_model_len,
        .weight_dtype = e->weight_dtype,
        .kv_dtype = e->be->kv_dtype,
        .n_layers = c->n_layers, .dim = c->dim, .n_heads = c->n_heads,
        .n_kv_heads = c->n_kv_heads, .head_dim = c->head_dim, .hidden_dim = c->hidden_dim,
        .kv_bytes_per_token = pl_runner_kv_block_bytes(&lc, 1, e->be->kv_dtype),
        .block_size = e->cfg.block_size,
        .kv_blocks = e->n_blocks,
        .kv_tokens = (uint64_t)e->n_blocks * (uint64_t)e->cfg.block_size,
        .max_batch_size = e->cfg.max_batch_size,
        .max_num_seqs = e->cfg.max_num_seqs,
    };
    info.weight_type = e->weight_type;
    info.n_params = e->n_params;
    info.weight_bytes = e->param_bytes;
    info.tensor_parallel_size = e->cfg.tensor_parallel_size;
    info.distributed = e->tp ? e->tp->info : "";
    info.max_concurrency = (double)info.kv_tokens / (double)e->max_model_len;
    pl_fields_fill_out(dst, dst_size, &info, sizeof info);
    return PL_OK;
}
