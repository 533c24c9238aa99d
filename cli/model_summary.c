/*
 * cli/model_summary.c - what the commands say about the model they loaded: one line at the
 * start of generate and serve, and the facts `pagellm info` prints (pl_model_info).
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

/* "260.1K", "1.10B": a count as people read it. */
static void human_count(double v, char *buf, size_t cap) {
    const char *unit[] = {"", "K", "M", "B", "T"};
    int u = 0;
    while (v >= 1000.0 && u < 4) v /= 1000.0, u++;
    snprintf(buf, cap, u ? "%.1f%s" : "%.0f%s", v, unit[u]);
}

/* "1.04 MB", "2.2 GB" (powers of 1000, as file sizes are shown). */
static void human_bytes(double v, char *buf, size_t cap) {
    const char *unit[] = {"B", "KB", "MB", "GB", "TB"};
    int u = 0;
    while (v >= 1000.0 && u < 4) v /= 1000.0, u++;
    snprintf(buf, cap, u ? "%.2f %s" : "%.0f %s", v, unit[u]);
}

static const char *base_name(const char *path) {
    const char *s = path ? strrchr(path, '/') : NULL;
    return s && s[1] ? s + 1 : path ? path : "";
}

void cli_model_summary(const pl_engine *e, char *buf, size_t cap) {
    pl_model_info m;
    pl_engine_model_info(e, &m);
    char params[32], kv[32];
    human_count((double)m.n_params, params, sizeof params);
    human_bytes((double)m.kv_bytes_per_token, kv, sizeof kv);
    snprintf(buf, cap,
             "%s (%s %s): %s params (%s), %d layers, vocab %d, context %d (engine %d), "
             "KV %s %s/token, pool %llu tokens (%.1f requests of %d), tokenizer %s, %d chat "
             "template%s",
             m.name, m.format, m.architecture, params, m.weight_type, m.n_layers, m.vocab_size,
             m.context_length, m.max_model_len,
             m.kv_dtype == PL_DTYPE_F32 ? "f32" : m.kv_dtype == PL_DTYPE_BF16 ? "bf16" : "f16",
             kv, (unsigned long long)m.kv_tokens, m.max_concurrency, m.max_model_len,
             m.tokenizer_kind ? m.tokenizer_kind : "none", m.n_chat_templates,
             m.n_chat_templates == 1 ? "" : "s");
}

void cli_print_model_info(FILE *f, const pl_engine *e) {
    pl_model_info m;
    pl_engine_model_info(e, &m);
    char params[32], bytes[32], kv[32], ctx_bytes[32];
    human_count((double)m.n_params, params, sizeof params);
    human_bytes((double)m.weight_bytes, bytes, sizeof bytes);
    human_bytes((double)m.kv_bytes_per_token, kv, sizeof kv);
    human_bytes((double)m.kv_bytes_per_token * (double)m.context_length, ctx_bytes,
                sizeof ctx_bytes);
    const char *kvt = m.kv_dtype == PL_DTYPE_F32 ? "f32" : m.kv_dtype == PL_DTYPE_BF16 ? "bf16"
                                                                                      : "f16";
    fprintf(f, "model           %s\n", m.name);
    fprintf(f, "format          %s\n", m.format);
    fprintf(f, "architecture    %s\n", m.architecture);
    fprintf(f, "parameters      %s (%llu), %s as loaded\n", params,
            (unsigned long long)m.n_params, bytes);
    fprintf(f, "tensor types    %s (matrices; norms f32)\n", m.weight_type);
    fprintf(f, "shape           %d layers, dim %d, hidden %d, %d heads (%d KV heads), head dim "
               "%d\n", m.n_layers, m.dim, m.hidden_dim, m.n_heads, m.n_kv_heads, m.head_dim);
    fprintf(f, "embeddings      %s\n",
            m.tied_embeddings ? "tied (the output projection is the embedding)"
                              : "separate output projection");
    fprintf(f, "vocabulary      %d (BOS %d, EOS %d", m.vocab_size, m.bos_id, m.eos_id);
    if (m.eot_id >= 0) fprintf(f, ", end of turn %d", m.eot_id);
    fprintf(f, ")\n");
    fprintf(f, "context         %d tokens (RoPE theta %g, RMSNorm eps %g)\n", m.context_length,
            m.rope_theta, m.norm_eps);
    fprintf(f, "KV cache        %s: %s per token, %s for the whole context\n", kvt, kv,
            ctx_bytes);
    if (m.tokenizer_kind)
        fprintf(f, "tokenizer       %s (%s)\n", base_name(m.tokenizer_path), m.tokenizer_kind);
    else
        fprintf(f, "tokenizer       none (token ids only; --tokenizer PATH gives one)\n");
    if (m.n_chat_templates)
        fprintf(f, "chat template   %d%s\n", m.n_chat_templates,
                m.chat_template_override ? " (--chat-template)" : " (the tokenizer's)");
    else
        fprintf(f, "chat template   none (--chat-template FILE gives one)\n");
}
