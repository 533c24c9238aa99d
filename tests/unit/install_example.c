/*
 * tests/unit/install_example.c - a user's program, built against the installed library with
 * `pkg-config --cflags --libs pagellm` by check_install.sh: proves the header, the shared
 * library's exports and the .pc file work together.
 */
#include <pagellm.h>
#include <stdio.h>

int main(void) {
    pl_engine_config cfg;
    pl_engine_config_default(&cfg);
    cfg.model_path = "dummy:tiny";
    cfg.max_num_blocks = 64;
    pl_engine *e;
    if (pl_engine_create(&cfg, &e) != PL_OK) {
        fprintf(stderr, "%s\n", pl_last_error());
        return 1;
    }
    pl_sampling_params sp;
    pl_sampling_params_default(&sp);
    sp.temperature = 0.0f;
    sp.max_tokens = 8;
    sp.ignore_eos = true;
    int32_t prompt[4] = {1, 10, 20, 30};
    if (pl_engine_submit_tokens(e, prompt, 4, &sp, NULL) != PL_OK) return 1;
    pl_completion *c;
    size_t n;
    if (pl_engine_run(e, &c, &n) != PL_OK || n != 1 || c[0].n_output_ids != 8) return 1;
    printf("ok %s %zu tokens\n", pl_version(), c[0].n_output_ids);
    pl_completions_free(c, n);
    pl_engine_destroy(e);
    return 0;
}
