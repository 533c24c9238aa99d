/*
 * tools/info.c - `pagellm info MODEL`: what a model file holds (architecture, shapes,
 * parameter count, tensor types, tokenizer, chat template, context, KV bytes per token),
 * from the library's pl_model_info. The engine is made with a one-block KV pool: the facts
 * need the model loaded, not memory for requests.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "commands.h"

static void usage(void) {
    printf("usage: pagellm info (MODEL | --model PATH) [--tokenizer PATH] [--json]\n"
           "                    [engine flags]\n\n"
           "What a model holds: file format, architecture, parameters and their types, layer\n"
           "shapes, vocabulary, context, the KV cache's bytes per token, the tokenizer and chat\n"
           "templates found with it. Engine flags apply as generate takes them (--dtype and\n"
           "--kv-dtype change what is reported).\n\n"
           "  --json          the facts as one JSON object (pl_model_info's names)\n\n");
    cli_print_engine_flags();
}

static json_t *str_or_null(const char *s) { return s ? json_string(s) : json_null(); }

static void print_json(const pl_engine *e) {
    pl_model_info m;
    pl_engine_model_info(e, &m);
    const char *dt[] = {"auto", "f32", "f16", "bf16"};
    json_t *o = json_object();
    json_object_set_new(o, "name", json_string(m.name));
    json_object_set_new(o, "format", json_string(m.format));
    json_object_set_new(o, "architecture", json_string(m.architecture));
    json_object_set_new(o, "n_params", json_integer((json_int_t)m.n_params));
    json_object_set_new(o, "weight_bytes", json_integer((json_int_t)m.weight_bytes));
    json_object_set_new(o, "weight_type", json_string(m.weight_type));
    json_object_set_new(o, "n_layers", json_integer(m.n_layers));
    json_object_set_new(o, "dim", json_integer(m.dim));
    json_object_set_new(o, "hidden_dim", json_integer(m.hidden_dim));
    json_object_set_new(o, "n_heads", json_integer(m.n_heads));
    json_object_set_new(o, "n_kv_heads", json_integer(m.n_kv_heads));
    json_object_set_new(o, "head_dim", json_integer(m.head_dim));
    json_object_set_new(o, "tied_embeddings", json_boolean(m.tied_embeddings));
    json_object_set_new(o, "vocab_size", json_integer(m.vocab_size));
    json_object_set_new(o, "bos_id", json_integer(m.bos_id));
    json_object_set_new(o, "eos_id", json_integer(m.eos_id));
    json_object_set_new(o, "eot_id", json_integer(m.eot_id));
    json_object_set_new(o, "context_length", json_integer(m.context_length));
    json_object_set_new(o, "rope_theta", json_real(m.rope_theta));
    json_object_set_new(o, "norm_eps", json_real(m.norm_eps));
    json_object_set_new(o, "kv_dtype", json_string(m.kv_dtype >= 0 && m.kv_dtype <= 3
                                                        ? dt[m.kv_dtype] : "?"));
    json_object_set_new(o, "kv_bytes_per_token", json_integer((json_int_t)m.kv_bytes_per_token));
    json_object_set_new(o, "tokenizer_path", str_or_null(m.tokenizer_path));
    json_object_set_new(o, "tokenizer_kind", str_or_null(m.tokenizer_kind));
    json_object_set_new(o, "n_chat_templates", json_integer(m.n_chat_templates));
    json_object_set_new(o, "chat_template_override", json_boolean(m.chat_template_override));
    char *s = json_dumps(o, JSON_INDENT(2) | JSON_REAL_PRECISION(9));
    if (s) printf("%s\n", s);
    free(s);
    json_decref(o);
}

static int info(int argc, char **argv, pl_engine_config *cfg) {
    bool json = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int r = cli_engine_flag(cfg, argc, argv, &i);
        if (r < 0) return 2;
        if (r > 0) continue;
        if (cli_is(a, "--help") || !strcmp(a, "-h")) {
            usage();
            return 0;
        } else if (cli_is(a, "--json")) {
            json = true;
        } else if (i == 0 && a[0] != '-' && !cfg->model_path) {
            cfg->model_path = a;
        } else {
            return cli_unknown_flag("info", a, usage);
        }
    }
    if (!cfg->model_path) {
        fprintf(stderr, "pagellm info: give the model: pagellm info MODEL (a file, a directory "
                        "or dummy:NAME)\n");
        return 2;
    }
    if (cfg->max_num_blocks == 0) cfg->max_num_blocks = 1; /* no pool: only the facts */
    pl_engine *e = NULL;
    if (pl_engine_create(cfg, &e) != PL_OK) {
        fprintf(stderr, "pagellm info: %s\n", pl_last_error_as(PL_NAMING_FLAG));
        return 1;
    }
    if (json) print_json(e);
    else cli_print_model_info(stdout, e);
    pl_engine_destroy(e);
    return 0;
}

int cmd_info(int argc, char **argv) {
    pl_engine_config cfg;
    pl_engine_config_default(&cfg);
    int rc = info(argc, argv, &cfg);
    pl_engine_config_deinit(&cfg);
    return rc;
}
