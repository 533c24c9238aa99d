/*
 * tests/e2e/chat_family_tool.c - the chat models of chat_families.h and their dense reference,
 * for the command-line tests (tests/tools/test_chat_cli.py), which drive `pagellm` itself.
 *
 *   chat_family_tool write FAMILY DIR SEED MESSAGES.json
 *       writes the model (the greedy reply to the chat in MESSAGES.json ends with the
 *       family's end of turn) and prints one JSON object: family, vocab, eot, stop_ids,
 *       prompt_ids (the chat's, as submit_chat makes them), plant_step. Exit 77 when the
 *       family needs PAGELLM_TEST_MODELS and it is unset.
 *   chat_family_tool greedy DIR N ID,ID,...
 *       prints the dense reference's N greedy tokens after the prompt ids, comma-separated.
 *   chat_family_tool family MODEL_TYPE DIR SEED [TOKENIZER_DIR VOCAB]
 *       writes the random model of test_e2e_families.c of that family (config.json's
 *       model_type: mixtral, qwen2_moe, gemma2, ...) in Hugging Face form; with TOKENIZER_DIR,
 *       with a vocabulary of VOCAB (the tokenizer's) and that directory's tokenizer.json (and
 *       tokenizer_config.json) beside it.
 *
 * Exit 0, or 1 with the reason on stderr.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat_families.h"
#include "model/model.h"
#include "model_fixtures.h"

static int cmd_write(const char *family, const char *dir, const char *seed, const char *msgs) {
    const chat_family *f = chat_family_find(family);
    if (!f) {
        fprintf(stderr, "chat_family_tool: unknown family %s\n", family);
        return 1;
    }
    uint8_t *text;
    size_t len;
    if (!pl_fixture_read_file(msgs, &text, &len)) return 1;
    char *json = realloc(text, len + 1);
    if (!json) return 1;
    json[len] = '\0';
    chat_family_model fm;
    chat_family_result r = chat_family_write(f, dir, strtoull(seed, NULL, 10), json, &fm);
    free(json);
    if (r == CHAT_FAMILY_SKIP) {
        fprintf(stderr, "SKIP: %s needs PAGELLM_TEST_MODELS\n", family);
        return 77;
    }
    if (r != CHAT_FAMILY_OK) return 1;
    printf("{\"family\": \"%s\", \"vocab\": %d, \"eot\": %d, \"plant_step\": %d, \"stop_ids\": [",
           family, fm.vocab, fm.eot, fm.plant_step);
    for (int i = 0; i < fm.n_stop; i++) printf(i ? ", %d" : "%d", fm.stop_ids[i]);
    printf("], \"prompt_ids\": [");
    for (size_t i = 0; i < fm.n_prompt; i++) printf(i ? ", %d" : "%d", fm.prompt_ids[i]);
    printf("]}\n");
    free(fm.prompt_ids);
    return 0;
}

static int cmd_greedy(const char *dir, const char *n_arg, const char *ids_arg) {
    int n_out = atoi(n_arg);
    size_t cap = strlen(ids_arg) / 2 + 2, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    int32_t *out = malloc((size_t)(n_out > 0 ? n_out : 1) * sizeof *out);
    if (!ids || !out || n_out <= 0) return 1;
    for (const char *p = ids_arg; *p;) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || n == cap) {
            fprintf(stderr, "chat_family_tool: bad id list at '%s'\n", p);
            return 1;
        }
        ids[n++] = (int32_t)v;
        p = *end == ',' ? end + 1 : end;
    }
    pl_model *m;
    pl_model_load_options lo = {.dtype = PL_DTYPE_AUTO};
    if (pl_model_load(dir, &lo, &m) != PL_OK) {
        fprintf(stderr, "chat_family_tool: %s: %s\n", dir, pl_last_error());
        return 1;
    }
    bool ok = chat_dense_greedy(m, ids, n, n_out, out);
    if (ok) {
        for (int i = 0; i < n_out; i++) printf(i ? ",%d" : "%d", out[i]);
        printf("\n");
    }
    pl_model_free(m);
    free(ids);
    free(out);
    return ok ? 0 : 1;
}

static bool copy_file(const char *from, const char *to) {
    uint8_t *b;
    size_t n;
    if (!pl_fixture_read_file(from, &b, &n)) return false;
    bool ok = pl_fixture_write_file(to, b, n);
    free(b);
    return ok;
}

static int cmd_family(const char *type, const char *dir, const char *seed, const char *tok,
                      int vocab) {
    const pl_arch_info *a = pl_arch_by_model_type(type);
    if (!a) {
        fprintf(stderr, "chat_family_tool: unknown model_type %s\n", type);
        return 1;
    }
    pl_model_config c;
    pl_fixture_family_config(a->arch, 1, &c);
    if (tok) c.vocab_size = vocab;
    pl_model *m = pl_fixture_family_model(&c, strtoull(seed, NULL, 10));
    bool ok = m && pl_fixture_write_hf(m, dir, NULL);
    pl_model_free(m);
    if (ok && tok) {
        char from[1024], to[1024];
        const char *names[] = {"tokenizer.json", "tokenizer_config.json"};
        for (int i = 0; i < 2 && ok; i++) {
            snprintf(from, sizeof from, "%s/%s", tok, names[i]);
            snprintf(to, sizeof to, "%s/%s", dir, names[i]);
            ok = copy_file(from, to);
        }
    }
    return ok ? 0 : 1;
}

int main(int argc, char **argv) {
    if ((argc == 5 || argc == 7) && !strcmp(argv[1], "family"))
        return cmd_family(argv[2], argv[3], argv[4], argc == 7 ? argv[5] : NULL,
                          argc == 7 ? atoi(argv[6]) : 0);
    if (argc == 6 && !strcmp(argv[1], "write")) return cmd_write(argv[2], argv[3], argv[4], argv[5]);
    if (argc == 5 && !strcmp(argv[1], "greedy")) return cmd_greedy(argv[2], argv[3], argv[4]);
    fprintf(stderr, "usage: chat_family_tool write FAMILY DIR SEED MESSAGES.json\n"
                    "       chat_family_tool greedy DIR N ID,ID,...\n"
                    "       chat_family_tool family MODEL_TYPE DIR SEED [TOKENIZER_DIR VOCAB]\n");
    return 1;
}
