// bench/peer/llama_greedy.cpp - greedy token ids from llama.cpp, for families_check.py.
//
// Built OUTSIDE this repository against a llama.cpp build (families_check.py compiles it with
// the include and library directories given to it):
//
//   llama_greedy MODEL.gguf N_OUT N_CTX ID,ID,... [ID,ID,... ...]
//
// For each prompt (token ids; the context is cleared between prompts) prints one line:
// the N_OUT greedy ids after it, comma-separated, a tab, and for each step the gap between
// the two largest logits (so a caller can tell a near tie from a disagreement). CPU only,
// f32 K/V cache, flash attention off, N_CTX tokens of context (longrope picks its factors
// by it, as pagellm does by max_model_len).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "llama.h"

static std::vector<llama_token> parse_ids(const char *s) {
    std::vector<llama_token> ids;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s) break;
        ids.push_back((llama_token)v);
        s = *end == ',' ? end + 1 : end;
    }
    return ids;
}

static void quiet(enum ggml_log_level level, const char *text, void *) {
    if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: llama_greedy MODEL.gguf N_OUT N_CTX ID,ID,... [...]\n");
        return 2;
    }
    const int n_out = atoi(argv[2]), n_ctx = atoi(argv[3]);
    llama_log_set(quiet, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "llama_greedy: cannot load %s\n", argv[1]);
        return 1;
    }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)n_ctx;
    cp.n_batch = (uint32_t)n_ctx;
    cp.n_ubatch = (uint32_t)n_ctx;
    cp.n_seq_max = 1;
    cp.n_threads = 2;
    cp.n_threads_batch = 2;
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) {
        fprintf(stderr, "llama_greedy: no context\n");
        return 1;
    }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    for (int a = 4; a < argc; a++) {
        std::vector<llama_token> prompt = parse_ids(argv[a]);
        llama_memory_clear(llama_get_memory(ctx), true);
        std::vector<llama_token> out;
        std::string gaps;
        llama_batch batch = llama_batch_get_one(prompt.data(), (int32_t)prompt.size());
        for (int k = 0; k < n_out; k++) {
            if (llama_decode(ctx, batch) != 0) {
                fprintf(stderr, "llama_greedy: decode failed\n");
                return 1;
            }
            const float *lg = llama_get_logits_ith(ctx, -1);
            int best = 0;
            for (int i = 1; i < n_vocab; i++)
                if (lg[i] > lg[best]) best = i;
            float second = -1e30f;
            for (int i = 0; i < n_vocab; i++)
                if (i != best && lg[i] > second) second = lg[i];
            char g[32];
            snprintf(g, sizeof g, "%s%.6g", k ? "," : "", (double)(lg[best] - second));
            gaps += g;
            out.push_back(best);
            batch = llama_batch_get_one(&out.back(), 1);
        }
        for (size_t i = 0; i < out.size(); i++) printf("%s%d", i ? "," : "", out[i]);
        printf("\t%s\n", gaps.c_str());
    }
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
