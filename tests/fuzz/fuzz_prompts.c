/*
 * tests/fuzz/fuzz_prompts.c - libFuzzer target: the JSONL prompts file parser
 * (cli_prompts_parse from cli/prompts_file.c), then every parsed prompt submitted to an
 * engine (dummy:tiny; with PL_FUZZ_TOKENIZER naming a SentencePiece model of at most 512
 * pieces, text prompts are tokenized too, and chat lines rendered with a small template that
 * reads their messages, tools and template variables) and aborted before it runs.
 *
 * Contract: a parse fails with "NAME:LINE: ..." (or "NAME: ..." when no line is at fault) in
 * err and nothing allocated, or returns prompts whose fields are well formed, each with the
 * line it came from (increasing, within the input's lines); submit accepts or refuses each
 * with a status and a message (never crashes on a hostile value); nothing leaks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pagellm.h"
#include "cli/cli.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static pl_engine *g_engine;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = "dummy:tiny";
    c.tokenizer_path = getenv("PL_FUZZ_TOKENIZER");
    c.backend = PL_BACKEND_REF;
    c.max_num_blocks = 256;
    c.max_waiting = 0;
    c.chat_template = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
                      "{% if tools %}{{ tools | tojson }}{% endif %}{{ extra | default('') }}";
    if (pl_engine_create(&c, &g_engine) != PL_OK) {
        fprintf(stderr, "fuzz_prompts: engine: %s\n", pl_last_error());
        abort();
    }
    return 0;
}

static void fail(const char *what) {
    fprintf(stderr, "fuzz_prompts: %s\n", what);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    pl_sampling_params def;
    pl_sampling_params_default(&def);
    cli_prompt *p = NULL;
    size_t n = 0;
    char err[256] = "";
    if (!cli_prompts_parse("fuzz.jsonl", (const char *)data, size, &def, &p, &n, err,
                           sizeof err)) {
        if (strncmp(err, "fuzz.jsonl:", 11) != 0) fail("parse failure without FILE:LINE");
        if (p != NULL) fail("parse failure returned prompts");
        return 0;
    }
    if (n == 0) fail("parse succeeded with no prompts");
    size_t lines = 1;
    for (size_t i = 0; i < size; i++) lines += data[i] == '\n';
    for (size_t i = 0; i < n; i++) {
        if (p[i].line == 0 || p[i].line > lines || (i > 0 && p[i].line <= p[i - 1].line))
            fail("prompt line numbers not increasing within the input");
        if ((p[i].text != NULL) + (p[i].ids != NULL) + (p[i].messages != NULL) != 1)
            fail("prompt with none or several of text, ids, messages");
        if (!p[i].messages && (p[i].tools || p[i].chat_template_kwargs))
            fail("tools or chat_template_kwargs without messages");
        if (p[i].ids && p[i].n_ids == 0) fail("empty ids");
        if (p[i].params.n_stop > CLI_MAX_STOP) fail("n_stop out of range");
        for (size_t k = 0; k < p[i].params.n_stop; k++)
            if (!p[i].params.stop[k] || !p[i].params.stop[k][0]) fail("empty stop string");
        pl_request_id id = 0;
        pl_chat_options co;
        pl_chat_options_default(&co);
        co.tools = p[i].tools;
        co.chat_template_kwargs = p[i].chat_template_kwargs;
        pl_status s = p[i].text ? pl_engine_submit_request(g_engine, p[i].text, &p[i].params, &id)
                      : p[i].ids
                          ? pl_engine_submit_tokens(g_engine, p[i].ids, p[i].n_ids, &p[i].params, &id)
                          : pl_engine_submit_chat_json(g_engine, p[i].messages, &co, &p[i].params,
                                                       &id);
        if (s == PL_OK) {
            if (pl_engine_abort(g_engine, id) != PL_OK) fail("abort of a fresh request");
        } else if (!pl_last_error()[0]) {
            fail("submit refused without a message");
        }
    }
    /* one step drains the aborts: nothing is computed, every request is reported */
    while (pl_engine_has_pending_work(g_engine)) {
        pl_step_result res;
        if (pl_engine_step(g_engine, &res) != PL_OK) fail("step");
        if (res.n_scheduled_seqs != 0) fail("an aborted request was scheduled");
    }
    cli_prompts_free(p, n);
    return 0;
}
