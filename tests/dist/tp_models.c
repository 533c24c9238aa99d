/*
 * tests/dist/tp_models.c - writes the random-weight models the mpirun tests split: one
 * Hugging Face directory per family (pl_fixture_tp_config, the weights of
 * pl_fixture_family_model), named llama, mistral, qwen2, qwen3 under DIR:
 *   llama    tied, GQA (6 heads, 2 KV heads)
 *   mistral  untied, one KV head (fewer than the ranks: replicated)
 *   qwen2    tied, q/k/v biases
 *   qwen3    untied, q/k norms, head_dim apart from dim / n_heads
 * usage: tp_models DIR
 */
#include <stdio.h>
#include <sys/stat.h>

#include "model_fixtures.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: tp_models DIR\n");
        return 2;
    }
    static const struct { pl_arch arch; int variant; const char *name; } models[] = {
        {PL_ARCH_LLAMA, 0, "llama"}, {PL_ARCH_MISTRAL, 1, "mistral"},
        {PL_ARCH_QWEN2, 0, "qwen2"}, {PL_ARCH_QWEN3, 1, "qwen3"},
    };
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        pl_model_config c;
        pl_fixture_tp_config(models[i].arch, models[i].variant, &c);
        pl_model *m = pl_fixture_family_model(&c, 31 + i);
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/%s", argv[1], models[i].name);
        mkdir(dir, 0755);
        pl_fixture_hf_options o = {.dtype = PL_DTYPE_F32};
        if (!m || !pl_fixture_write_hf(m, dir, &o)) {
            fprintf(stderr, "tp_models: cannot write %s\n", dir);
            return 1;
        }
        pl_model_free(m);
    }
    return 0;
}
