/*
 * tests/e2e/chat_families.h - chat models of the four families as a user downloads them: a
 * random-weight Hugging Face directory (tests/e2e/families.h's shapes) whose vocabulary is a
 * REAL tokenizer's and whose tokenizer_config.json carries the family's real chat template.
 *
 *   llama3  - ../shared/models/llama3 (tokenizer.json, tokenizer_config.json); config.json's
 *             eos_token_id is <|end_of_text|> only, as the first Llama 3 Instruct releases
 *             shipped it, so <|eot_id|> ends a reply through the tokenizer's end-of-turn ids
 *   mistral - tests/data/tok512_meta/tokenizer.json (a Metaspace/byte-fallback conversion)
 *             with the Mistral Instruct v0.3 template (tests/data/templates); </s> ends a turn
 *   qwen2   - ../shared/models/qwen3/tokenizer.json with the Qwen2.5 Instruct template
 *             (tests/data/templates: the same special tokens and ids); <|im_end|>
 *   qwen3   - ../shared/models/qwen3 (both files); <|im_end|>
 *
 * The tokenizer files are symbolic links into PAGELLM_TEST_MODELS or the repository's
 * tests/data (never copies into the repository). The output projection is untied so that
 * "planting" can make the end-of-turn token win at a chosen step of a chosen chat without
 * changing anything before it: its row becomes a scaled copy of the row of a token the
 * greedy reply picks there (the hidden states do not depend on the output rows).
 *
 * Plain C (no Criterion): chat_family_tool links it too. Functions print why on failure.
 */
#ifndef PL_TEST_CHAT_FAMILIES_H
#define PL_TEST_CHAT_FAMILIES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

#define CHAT_FAMILY_COUNT 4
/* The planted end of turn comes within this many reply tokens. */
#define CHAT_PLANT_WITHIN 16
#define CHAT_MAX_STOP 24

typedef struct chat_family {
    const char *name;       /* "llama3", "mistral", "qwen2", "qwen3" */
    pl_arch arch;
    bool needs_models;      /* its tokenizer comes from PAGELLM_TEST_MODELS */
    const char *tokenizer;  /* tokenizer.json: relative to the models folder or tests/data */
    const char *config;     /* tokenizer_config.json, likewise (never both roots mixed up:
                               "@data/" prefixes a tests/data path) */
    const char *eot;        /* the end-of-turn token */
    const char *eos[3];     /* config.json / generation_config.json's eos_token_id, as text */
    const char *bos;        /* config.json's bos_token_id, as text */
} chat_family;

const chat_family *chat_family_at(int i);
const chat_family *chat_family_find(const char *name);

typedef struct chat_family_model {
    int vocab;
    int32_t eot;                      /* the end-of-turn id */
    int32_t stop_ids[CHAT_MAX_STOP];  /* what ends a reply: config.json's ids, the
                                         tokenizer's EOS and end-of-generation tokens */
    int n_stop;
    int32_t *prompt_ids;              /* (n_prompt) the planted chat's, as submit_chat makes
                                         them; malloc'd, NULL without a planted chat */
    size_t n_prompt;
    int plant_step;                   /* where the planted reply has the end of turn */
} chat_family_model;

typedef enum { CHAT_FAMILY_OK, CHAT_FAMILY_SKIP, CHAT_FAMILY_FAIL } chat_family_result;

/* Writes f's model into dir (created) from seed. With plant_messages (a chat, JSON), the
 * greedy reply to that chat (add_generation_prompt on, no tools) ends with the end-of-turn
 * token within CHAT_PLANT_WITHIN tokens, with at least three tokens before it. SKIP when f
 * needs PAGELLM_TEST_MODELS and it is unset. out->prompt_ids: free(). */
chat_family_result chat_family_write(const chat_family *f, const char *dir, uint64_t seed,
                                     const char *plant_messages, chat_family_model *out);

/* The ids submit_chat queues for messages with the tokenizer of dir: the chat template
 * rendered (tools may be NULL), encoded with special tokens parsed and nothing added.
 * *out: free(). */
bool chat_prompt_ids(const char *dir, const char *messages, const char *tools, int32_t **out,
                     size_t *n_out);

/* Greedy tokens of the dense reference (f32 KV) on m after prompt: n_out of them, with no
 * stop. out: (n_out). */
bool chat_dense_greedy(const pl_model *m, const int32_t *prompt, size_t n_prompt, int n_out,
                       int32_t *out);

/* The reply the engine must give: the greedy tokens up to and including the first stop id,
 * at most max_tokens. Returns its length; *stopped says whether a stop id ended it. */
int chat_expected_reply(const chat_family_model *fm, const int32_t *greedy, int max_tokens,
                        bool *stopped);

#endif
