/*
 * tools/quantize.c - `pagellm quantize IN OUT TYPE`: a model (llama2.c, Hugging Face, GGUF,
 * dummy:NAME) written as a GGUF file in TYPE, with its tokenizer, through pl_model_quantize.
 * --tokenizer is the engine table's flag (same forms, same help); --no-tokenizer is this
 * command's own.
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "commands.h"

static void usage(void) {
    printf("usage: pagellm quantize IN OUT TYPE [--tokenizer PATH | --no-tokenizer]\n"
           "                        [--threads N] [--allow-requantize]\n\n"
           "Writes the model IN (a llama2.c .bin, a Hugging Face directory, a GGUF file or\n"
           "dummy:NAME) as the GGUF file OUT with its matrices stored as TYPE: f32, f16, bf16,\n"
           "q8_0, q4_0, q4_k, q5_k, q6_k, or the mixes q4_k_m and q5_k_m (q4_k / q5_k, but q6_k\n"
           "for the output projection, or the embedding when tied, and for attn_v and ffn_down\n"
           "in the first and last eighth of the layers and every third layer between). A tensor\n"
           "whose rows are not whole blocks of its type falls back (q4_k -> q4_0; q5_k, q6_k ->\n"
           "q8_0; q8_0, q4_0 -> f16) and is named on stderr. Norms and biases stay f32. The\n"
           "tokenizer (vocabulary, BOS/EOS, chat templates) goes into the file, so generate\n"
           "needs no --tokenizer for it: a GGUF source's own, else the one beside the model.\n\n"
           "  --tokenizer PATH      store this tokenizer instead (a tokenizer.json, a directory\n"
           "                        holding one, a SentencePiece .model, or a GGUF file)\n"
           "  --no-tokenizer        store no tokenizer\n"
           "  -t, --threads N       threads converting the tensors (default 0: every core)\n"
           "  --allow-requantize    convert matrices that are block-quantised already to\n"
           "                        another type (refused otherwise: the second rounding adds\n"
           "                        its error to the first; tensors already of their target\n"
           "                        type are copied as they are either way)\n");
}

/* Tensors per stored type, for the summary line; fallbacks are printed as they come. */
typedef struct tally {
    const char *type[16];
    int count[16];
    int n_types, n_tensors, n_fallback;
} tally;

static void on_tensor(void *user, const char *name, int rows, int cols, const char *type,
                      const char *asked) {
    tally *t = user;
    t->n_tensors++;
    if (strcmp(type, asked) != 0) {
        t->n_fallback++;
        fprintf(stderr, "pagellm quantize: %s (%d x %d): rows of %d are not whole %s blocks: "
                "stored as %s\n", name, rows, cols, cols, asked, type);
    }
    int i = 0;
    while (i < t->n_types && strcmp(t->type[i], type) != 0) i++;
    if (i == t->n_types && i < 16) t->type[t->n_types++] = type; /* static names */
    if (i < 16) t->count[i]++;
}

int cmd_quantize(int argc, char **argv) {
    const char *pos[3];
    int n_pos = 0;
    pl_engine_config cfg;
    pl_engine_config_default(&cfg);
    pl_quantize_options opt;
    pl_quantize_options_default(&opt);
    int rc = 0;
    for (int i = 0; i < argc && rc == 0; i++) {
        const char *a = argv[i];
        if (cli_is(a, "--help") || !strcmp(a, "-h")) {
            usage();
            pl_engine_config_deinit(&cfg);
            return 0;
        } else if (cli_is(a, "--tokenizer") || !strncmp(a, "--tokenizer=", 12)) {
            if (cli_engine_flag(&cfg, argc, argv, &i) <= 0) rc = 2;
        } else if (cli_is(a, "--no-tokenizer")) {
            opt.no_tokenizer = true;
        } else if (!strcmp(a, "--allow-requantize")) {
            opt.allow_requantize = true;
        } else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
            long long n;
            if (!cli_int(a, i + 1 < argc ? argv[i + 1] : NULL, 0, 1024, &n)) rc = 2;
            else opt.n_threads = (int)n, i++;
        } else if (a[0] == '-' && a[1] != '\0') {
            rc = cli_unknown_flag("quantize", a, usage);
        } else if (n_pos < 3) {
            pos[n_pos++] = a;
        } else {
            fprintf(stderr, "pagellm quantize: unexpected argument '%s' (see --help)\n", a);
            rc = 2;
        }
    }
    if (rc == 0 && n_pos != 3) {
        fprintf(stderr, "pagellm quantize: give IN, OUT and TYPE (see --help)\n");
        rc = 2;
    }
    if (rc == 0 && opt.no_tokenizer && cfg.tokenizer_path) {
        fprintf(stderr, "pagellm quantize: --tokenizer and --no-tokenizer contradict\n");
        rc = 2;
    }
    if (rc == 0) {
        tally t = {0};
        opt.tokenizer_path = cfg.tokenizer_path;
        opt.on_tensor = on_tensor;
        opt.user = &t;
        pl_status s = pl_model_quantize(pos[0], pos[1], pos[2], &opt);
        if (s != PL_OK) {
            fprintf(stderr, "pagellm quantize: %s: %s\n", pl_status_name(s), pl_last_error_as(PL_NAMING_FLAG));
            rc = 1;
        } else {
            char types[256] = "";
            for (int i = 0, o = 0; i < t.n_types && o < (int)sizeof types; i++)
                o += snprintf(types + o, sizeof types - (size_t)o, "%s%s %d", i ? ", " : "",
                              t.type[i], t.count[i]);
            fprintf(stderr, "pagellm quantize: wrote %s (%s: %s; %d of %d tensors fell back)\n",
                    pos[1], pos[2], types, t.n_fallback, t.n_tensors);
        }
    }
    pl_engine_config_deinit(&cfg);
    return rc;
}
