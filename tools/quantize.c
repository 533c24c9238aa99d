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
    printf("usage: pagellm quantize IN OUT TYPE [--tokenizer PATH | --no-tokenizer]\n\n"
           "Writes the model IN (a llama2.c .bin, a Hugging Face directory, a GGUF file or\n"
           "dummy:NAME) as the GGUF file OUT with its matrices stored as TYPE (f32, f16, bf16,\n"
           "and the block-quantised GGUF types this build has). Norms and biases stay f32. The\n"
           "tokenizer (vocabulary, BOS/EOS, chat templates) goes into the file, so generate\n"
           "needs no --tokenizer for it: a GGUF source's own, else the one beside the model.\n\n"
           "  --tokenizer PATH      store this tokenizer instead (a tokenizer.json, a directory\n"
           "                        holding one, a SentencePiece .model, or a GGUF file)\n"
           "  --no-tokenizer        store no tokenizer\n");
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
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage();
            pl_engine_config_deinit(&cfg);
            return 0;
        } else if (!strcmp(a, "--tokenizer") || !strncmp(a, "--tokenizer=", 12)) {
            if (cli_engine_flag(&cfg, argc, argv, &i) <= 0) rc = 2;
        } else if (!strcmp(a, "--no-tokenizer")) {
            opt.no_tokenizer = true;
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "pagellm quantize: unknown flag '%s' (see --help)\n", a);
            rc = 2;
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
        opt.tokenizer_path = cfg.tokenizer_path;
        pl_status s = pl_model_quantize(pos[0], pos[1], pos[2], &opt);
        if (s != PL_OK) {
            fprintf(stderr, "pagellm quantize: %s: %s\n", pl_status_name(s), pl_last_error());
            rc = 1;
        } else {
            fprintf(stderr, "pagellm quantize: wrote %s (%s)\n", pos[1], pos[2]);
        }
    }
    pl_engine_config_deinit(&cfg);
    return rc;
}
