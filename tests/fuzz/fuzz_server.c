/*
 * tests/fuzz/fuzz_server.c - libFuzzer target: the server's request parser (server/request.c),
 * the code every HTTP body goes through before anything else: completions and chat bodies into
 * sampling parameters, prompts and chat options; /tokenize and /detokenize bodies.
 *
 * Input: [u8 selector][body]; selector % 4: 0 completions, 1 chat, 2 tokenize, 3 detokenize.
 *
 * Contract: a body is either taken or refused with a 400 (500 only for memory) and a message;
 * what is taken is within the limits (n, prompts x n), has prompts (text non-empty, or ids),
 * validates as the engine will check it, and a chat's messages are a JSON array; the error
 * object always formats; everything is freed (LeakSanitizer).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what) {
    fprintf(stderr, "fuzz_server: %s\n", what);
    abort();
}

static void check_error(const pl_srv_error *err) {
    if (err->status != 400 && err->status != 500) fail("an error status other than 400/500");
    if (!memchr(err->message, '\0', sizeof err->message) || !err->message[0])
        fail("an error without a message");
    json_t *j = pl_srv_error_json(err);
    if (!j) fail("the error object did not format");
    char *text = json_dumps(j, JSON_COMPACT);
    if (!text) fail("the error object did not dump");
    free(text);
    json_decref(j);
}

static void check_request(const pl_srv_request *r, const pl_srv_limits *lim) {
    if (r->n_prompts < 1) fail("no prompt");
    if (r->sp.n < 1 || r->sp.n > lim->max_n) fail("n outside the limit");
    if (r->n_prompts * (size_t)r->sp.n > (size_t)lim->max_choices) fail("too many choices");
    if (pl_sampling_params_validate(&r->sp) != PL_OK) fail("taken parameters do not validate");
    if (r->kind == PL_SRV_CHAT) {
        json_error_t je;
        json_t *m = json_loads(r->messages_json, 0, &je);
        if (!json_is_array(m) || json_array_size(m) == 0) fail("chat messages are not a list");
        json_decref(m);
        return;
    }
    for (size_t i = 0; i < r->n_prompts; i++) {
        const pl_srv_prompt *p = &r->prompts[i];
        if (p->text ? !p->text[0] : p->n_ids == 0) fail("an empty prompt was taken");
        for (size_t k = 0; k < p->n_ids; k++)
            if (p->ids[k] < 0) fail("a negative token id was taken");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int which = data[0] % 4;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    pl_srv_limits lim = {.max_n = 16, .max_choices = 64};
    pl_srv_error err;
    if (which <= 1) {
        pl_srv_request r;
        if (pl_srv_request_parse((pl_srv_kind)which, body, len, &lim, &r, &err)) {
            check_request(&r, &lim);
            pl_srv_request_free(&r);
        } else {
            check_error(&err);
        }
    } else if (which == 2) {
        pl_srv_tokenize t;
        if (pl_srv_tokenize_parse(body, len, &t, &err)) {
            if (!t.prompt == !t.messages_json) fail("tokenize: not exactly one of prompt, messages");
            pl_srv_tokenize_free(&t);
        } else {
            check_error(&err);
        }
    } else {
        int32_t *ids = NULL;
        size_t n = 0;
        if (pl_srv_detokenize_parse(body, len, &ids, &n, &err)) {
            for (size_t i = 0; i < n; i++)
                if (ids[i] < 0) fail("detokenize: a negative id was taken");
            free(ids);
        } else {
            check_error(&err);
        }
    }
    return 0;
}
