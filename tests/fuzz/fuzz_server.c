/*
 * tests/fuzz/fuzz_server.c - libFuzzer target: the server's request parser (server/request.c),
 * the code every HTTP body goes through before anything else: completions and chat bodies into
 * sampling parameters, prompts and chat options; /tokenize and /detokenize bodies.
 *
 * Input: [u8 selector][body]; selector % 4: 0 completions, 1 chat, 2 tokenize, 3 detokenize;
 * a selector >= 0x80: CORS (server/cors.c), the body being "origin\nmethod\nrequested
 * headers\ncookie" as a browser's headers, under the default and an explicit configuration.
 *
 * Contract: a body is either taken or refused with a 400 (500 only for memory) and a message;
 * what is taken is within the limits (n, prompts x n), has prompts (text, "" being BOS alone,
 * or ids),
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
        if (!p->text && p->n_ids == 0) fail("an empty id list was taken");
        for (size_t k = 0; k < p->n_ids; k++)
            if (p->ids[k] < 0) fail("a negative token id was taken");
    }
}

/* The CORS answers to one browser request: a preflight is 200 "OK" or 400 "Disallowed CORS
 * ..." with at most the headers there is room for, each a C string. */
static void check_cors(const char *body, size_t len) {
    char *copy = malloc(len + 1), *f[4] = {NULL, NULL, NULL, NULL};
    if (!copy) return;
    memcpy(copy, body, len);
    copy[len] = '\0';
    char *p = copy;
    for (int i = 0; i < 4 && p; i++) {
        f[i] = p;
        p = strchr(p, '\n');
        if (p) *p++ = '\0';
    }
    static const char *const configs[][4] = {
        {NULL, NULL, NULL, ""},
        {"[\"http://a.example\", \"https://b\"]", "[\"GET\", \"POST\"]", "[\"Authorization\"]",
         "credentials"},
    };
    for (size_t k = 0; k < 2; k++) {
        pl_srv_options o = {.allowed_origins = configs[k][0], .allowed_methods = configs[k][1],
                            .allowed_headers = configs[k][2]};
        o.cors.credentials = configs[k][3][0] != '\0';
        if (!pl_srv_cors_init(&o)) fail("cors: a fixed configuration refused");
        pl_srv_headers h = {.origin = f[0], .request_method = f[1], .request_headers = f[2],
                            .cookie = f[3]};
        for (int pre = 0; pre < 2; pre++) {
            pl_srv_req r;
            memset(&r, 0, sizeof r);
            pl_srv_response out = {0};
            if (pl_srv_cors_preflight(&o.cors, &r, pre ? "OPTIONS" : "POST", &h, &out)) {
                if (!pre || !f[0] || !f[1]) fail("cors: a preflight that is none");
                if (out.status &&
                    !(out.status == 200 && !strcmp(out.body, "OK")) &&
                    !(out.status == 400 && !strncmp(out.body, "Disallowed CORS ", 16)))
                    fail("cors: a preflight answer other than OK / Disallowed CORS");
                free(out.body);
            } else {
                pl_srv_cors_simple(&o.cors, &r, &h);
            }
            if (r.n_extra < 0 || r.n_extra > (int)(sizeof r.extra / sizeof r.extra[0]))
                fail("cors: extra headers out of bounds");
            for (int i = 0; i < r.n_extra; i++)
                if (!memchr(r.extra[i].value, '\0', sizeof r.extra[i].value))
                    fail("cors: a header value without its NUL");
        }
        pl_srv_cors_free(&o.cors);
    }
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (data[0] >= 0x80) {
        check_cors((const char *)data + 1, size - 1);
        return 0;
    }
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
