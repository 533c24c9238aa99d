/*
 * tests/e2e/chat_families.c - see chat_families.h.
 */
#include "chat_families.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dense_ref.h"
#include "model_fixtures.h"
#include "pagellm.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

#ifndef PL_TEST_DATA_DIR
#error "PL_TEST_DATA_DIR: the repository's tests/data (set by tests/e2e/meson.build)"
#endif

static const chat_family k_families[CHAT_FAMILY_COUNT] = {
    {"llama3", PL_ARCH_LLAMA, true, "llama3/tokenizer.json", "llama3/tokenizer_config.json",
     "<|eot_id|>", {"<|end_of_text|>"}, "<|begin_of_text|>"},
    {"mistral", PL_ARCH_MISTRAL, false, "@data/tok512_meta/tokenizer.json",
     "@data/templates/mistral-7b-instruct-v0.3.tokenizer_config.json", "</s>", {"</s>"}, "<s>"},
    {"qwen2", PL_ARCH_QWEN2, true, "qwen3/tokenizer.json",
     "@data/templates/qwen2.5-3b-instruct.tokenizer_config.json", "<|im_end|>",
     {"<|im_end|>", "<|endoftext|>"}, "<|endoftext|>"},
    {"qwen3", PL_ARCH_QWEN3, true, "qwen3/tokenizer.json", "qwen3/tokenizer_config.json",
     "<|im_end|>", {"<|im_end|>", "<|endoftext|>"}, "<|endoftext|>"},
};

const chat_family *chat_family_at(int i) {
    return i >= 0 && i < CHAT_FAMILY_COUNT ? &k_families[i] : NULL;
}

const chat_family *chat_family_find(const char *name) {
    for (int i = 0; i < CHAT_FAMILY_COUNT; i++)
        if (!strcmp(k_families[i].name, name)) return &k_families[i];
    return NULL;
}

/* A family file's absolute path: "@data/x" under tests/data, else under the models folder. */
static bool source_path(const char *rel, char *buf, size_t cap) {
    if (!strncmp(rel, "@data/", 6)) {
        snprintf(buf, cap, "%s/%s", PL_TEST_DATA_DIR, rel + 6);
        return true;
    }
    const char *models = pl_test_models_dir();
    if (!models) return false;
    /* a relative PAGELLM_TEST_MODELS would make a link relative to the model directory */
    char *abs = realpath(models, NULL);
    if (!abs) {
        fprintf(stderr, "chat_families: %s: %s\n", models, strerror(errno));
        return false;
    }
    snprintf(buf, cap, "%s/%s", abs, rel);
    free(abs);
    return true;
}

static bool link_file(const char *rel, const char *dir, const char *name) {
    char src[1024], dst[1024];
    if (!source_path(rel, src, sizeof src)) return false;
    snprintf(dst, sizeof dst, "%s/%s", dir, name);
    remove(dst);
    if (symlink(src, dst) != 0) {
        fprintf(stderr, "chat_families: symlink %s -> %s: %s\n", dst, src, strerror(errno));
        return false;
    }
    return true;
}

bool chat_prompt_ids(const char *dir, const char *messages, const char *tools, int32_t **out,
                     size_t *n_out) {
    pl_tokenizer *t;
    if (pl_tokenizer_load(dir, &t) != PL_OK) {
        fprintf(stderr, "chat_families: tokenizer %s: %s\n", dir, pl_last_error());
        return false;
    }
    pl_chat_options o;
    pl_chat_options_default(&o);
    o.tools = tools;
    char *text = NULL;
    size_t len = 0;
    int32_t *ids = NULL;
    size_t n = 0;
    bool ok = pl_tokenizer_apply_chat_template(t, messages, &o, &text, &len) == PL_OK &&
              pl_tokenizer_encode(t, text, len, PL_ENCODE_PARSE_SPECIAL, &ids, &n) == PL_OK;
    if (!ok) fprintf(stderr, "chat_families: %s: %s\n", dir, pl_last_error());
    if (ok) {
        *out = malloc((n ? n : 1) * sizeof **out);
        ok = *out != NULL;
        if (ok) memcpy(*out, ids, n * sizeof *ids);
        *n_out = n;
    }
    pl_free_ids(ids);
    pl_free_text(text);
    pl_tokenizer_free(t);
    return ok;
}

bool chat_dense_greedy(const pl_model *m, const int32_t *prompt, size_t n_prompt, int n_out,
                       int32_t *out) {
    dense_ref *d = dense_ref_create(m, (int)n_prompt + n_out);
    if (!d) {
        fprintf(stderr, "chat_families: dense reference: out of memory\n");
        return false;
    }
    dense_ref_set_kv_dtype(d, PL_DTYPE_F32);
    int rc = dense_ref_greedy(d, prompt, (int)n_prompt, n_out, out);
    dense_ref_free(d);
    if (rc != 0) fprintf(stderr, "chat_families: dense reference: %zu + %d tokens too long\n",
                         n_prompt, n_out);
    return rc == 0;
}

static bool is_stop(const chat_family_model *fm, int32_t id) {
    for (int i = 0; i < fm->n_stop; i++)
        if (fm->stop_ids[i] == id) return true;
    return false;
}

int chat_expected_reply(const chat_family_model *fm, const int32_t *greedy, int max_tokens,
                        bool *stopped) {
    *stopped = false;
    for (int i = 0; i < max_tokens; i++)
        if (is_stop(fm, greedy[i])) {
            *stopped = true;
            return i + 1;
        }
    return max_tokens;
}

static void add_stop(chat_family_model *fm, int32_t id) {
    if (id < 0 || is_stop(fm, id) || fm->n_stop == CHAT_MAX_STOP) return;
    fm->stop_ids[fm->n_stop++] = id;
}

/* The tokenizer's facts: vocabulary, the ids of the family's tokens, what ends a reply. */
static bool read_tokenizer(const chat_family *f, const char *dir, pl_model_config *c,
                           chat_family_model *fm) {
    pl_tokenizer *t;
    if (pl_tokenizer_load(dir, &t) != PL_OK) {
        fprintf(stderr, "chat_families: %s: tokenizer %s: %s\n", f->name, dir, pl_last_error());
        return false;
    }
    bool ok = true;
    fm->vocab = c->vocab_size = pl_tokenizer_vocab_size(t);
    fm->eot = pl_tokenizer_token_id(t, f->eot);
    c->bos_id = pl_tokenizer_token_id(t, f->bos);
    c->n_eos = 0;
    for (int i = 0; i < 3 && f->eos[i]; i++) c->eos_ids[c->n_eos++] = pl_tokenizer_token_id(t, f->eos[i]);
    for (int i = 0; i < c->n_eos; i++) ok &= c->eos_ids[i] >= 0;
    if (!ok || fm->eot < 0 || c->bos_id < 0) {
        fprintf(stderr, "chat_families: %s: the tokenizer lacks one of its family's tokens\n",
                f->name);
        ok = false;
    }
    fm->n_stop = 0;
    for (int i = 0; i < c->n_eos; i++) add_stop(fm, c->eos_ids[i]);
    add_stop(fm, pl_tok_eos_id(t));
    size_t n_eog;
    const int32_t *eog = pl_tok_eog_ids(t, &n_eog);
    for (size_t i = 0; i < n_eog; i++) add_stop(fm, eog[i]);
    if (!is_stop(fm, fm->eot)) {
        fprintf(stderr, "chat_families: %s: %s is not an end-of-generation token\n", f->name,
                f->eot);
        ok = false;
    }
    pl_tokenizer_free(t);
    return ok;
}

/* Makes fm->eot's output row a scaled copy of the row of a token the greedy reply to the
 * prompt picks at some step k, then checks that the reply now ends there (or earlier, where
 * the copy already wins) after at least three tokens. Tries the steps in turn. */
static bool plant(const chat_family *f, pl_model *m, chat_family_model *fm) {
    const pl_weight *out = pl_model_weight(m, PL_T_OUTPUT, 0);
    float *w = (float *)out->data;
    const int dim = out->cols;
    int32_t before[CHAT_PLANT_WITHIN], after[CHAT_PLANT_WITHIN];
    float *saved = malloc((size_t)dim * sizeof *saved);
    if (!saved || !chat_dense_greedy(m, fm->prompt_ids, fm->n_prompt, CHAT_PLANT_WITHIN, before)) {
        free(saved);
        return false;
    }
    memcpy(saved, w + (size_t)fm->eot * dim, (size_t)dim * sizeof *saved);
    /* a small gain: the copy then wins where its token would (or nearly would), so the
     * reply runs for several decode steps before it ends */
    for (int k = CHAT_PLANT_WITHIN / 2; k < CHAT_PLANT_WITHIN; k++) {
        int32_t x = before[k];
        bool fresh = !is_stop(fm, x);
        for (int j = 0; j < k && fresh; j++) fresh = before[j] != x;
        if (!fresh) continue;
        for (int i = 0; i < dim; i++) w[(size_t)fm->eot * dim + i] = 1.02f * w[(size_t)x * dim + i];
        if (!chat_dense_greedy(m, fm->prompt_ids, fm->n_prompt, CHAT_PLANT_WITHIN, after))
            break;
        bool stopped;
        int len = chat_expected_reply(fm, after, CHAT_PLANT_WITHIN, &stopped);
        if (stopped && after[len - 1] == fm->eot && len >= 4) {
            fm->plant_step = len - 1;
            free(saved);
            return true;
        }
        memcpy(w + (size_t)fm->eot * dim, saved, (size_t)dim * sizeof *saved);
    }
    free(saved);
    fprintf(stderr, "chat_families: %s: no step of the reply could be made its end of turn\n",
            f->name);
    return false;
}

chat_family_result chat_family_write(const chat_family *f, const char *dir, uint64_t seed,
                                     const char *plant_messages, chat_family_model *out) {
    memset(out, 0, sizeof *out);
    if (f->needs_models && !pl_test_models_dir()) return CHAT_FAMILY_SKIP;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "chat_families: mkdir %s: %s\n", dir, strerror(errno));
        return CHAT_FAMILY_FAIL;
    }
    if (!link_file(f->tokenizer, dir, "tokenizer.json") ||
        !link_file(f->config, dir, "tokenizer_config.json"))
        return CHAT_FAMILY_FAIL;
    pl_model_config c;
    pl_fixture_family_config(f->arch, 1, &c); /* odd variant: an untied output projection */
    c.max_seq_len = 512;
    if (!read_tokenizer(f, dir, &c, out)) return CHAT_FAMILY_FAIL;
    pl_model *m = pl_fixture_family_model(&c, seed);
    if (!m) return CHAT_FAMILY_FAIL;
    bool ok = true;
    if (plant_messages) {
        ok = chat_prompt_ids(dir, plant_messages, NULL, &out->prompt_ids, &out->n_prompt) &&
             plant(f, m, out);
    }
    ok = ok && pl_fixture_write_hf(m, dir, &(pl_fixture_hf_options){.dtype = PL_DTYPE_F32});
    pl_model_free(m);
    if (!ok) {
        free(out->prompt_ids);
        out->prompt_ids = NULL;
        return CHAT_FAMILY_FAIL;
    }
    return CHAT_FAMILY_OK;
}
