/*
 * tests/fuzz/fuzz_reply.c - libFuzzer target: a chat reply read into reasoning, content and
 * tool calls (reply/), whole and streamed.
 *
 * Contract: any text parses (PL_OK); whole, every call has an id, a non-empty name and
 * arguments that are a JSON object, and content is NULL only when there are calls; streamed
 * in pieces of sizes taken from the input, every delta's text is within bounds, tool indices
 * come in order with the first delta of each call carrying its id and name, the parser counts
 * the calls it announced, and when the stream announced no call its content and reasoning
 * join to the whole parse's up to the first NUL (calls that break midway may differ: a stream
 * has sent them); nothing leaks.
 *
 * Input: byte 0 picks the tool syntax (b % 4: none, hermes, llama3_json, mistral) and the
 * reasoning syntax (b / 4 % 3: none, qwen3, deepseek_r1) and whether the prompt opened the
 * reasoning (b & 0x80); byte 1 the piece size (1 + b % 16); the rest is the reply.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pagellm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what) {
    fprintf(stderr, "fuzz_reply: %s\n", what);
    abort();
}

typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

static void put(buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = 2 * (b->n + n + 1);
        b->p = realloc(b->p, b->cap);
        if (!b->p) fail("out of memory");
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

/* The whole parse's strings are C strings: a NUL in the reply ends what they show (pagellm.h),
 * while the stream's deltas carry every byte, so the two are compared up to the first NUL. */
static bool same(const char *whole, const buf *streamed) {
    const char *w = whole ? whole : "";
    size_t n = streamed->n ? strnlen(streamed->p, streamed->n) : 0;
    return strlen(w) == n && (!n || memcmp(w, streamed->p, n) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    static const char *const tools[] = {NULL, "hermes", "llama3_json", "mistral"};
    static const char *const rsns[] = {NULL, "qwen3", "deepseek_r1"};
    pl_reply_options o;
    pl_reply_options_default(&o);
    o.tool_parser = tools[data[0] % 4];
    o.reasoning_parser = rsns[data[0] / 4 % 3];
    o.prompt = data[0] & 0x80 ? "<|im_start|>assistant\n<think>\n" : NULL;
    o.id_seed = data[1];
    size_t piece = 1 + data[1] % 16;
    const char *text = (const char *)data + 2;
    size_t len = size - 2;

    pl_reply *r;
    if (pl_reply_parse(text, len, &o, &r) != PL_OK) fail("whole parse failed");
    if (!r->content && r->n_tool_calls == 0) fail("no content and no calls");
    for (size_t i = 0; i < r->n_tool_calls; i++) {
        const pl_tool_call *c = &r->tool_calls[i];
        if (!c->id || !c->id[0] || !c->name || !c->name[0] || !c->arguments) fail("call parts");
        json_t *v = json_loads(c->arguments, 0, NULL);
        if (!json_is_object(v)) fail("arguments are not a JSON object");
        json_decref(v);
    }

    pl_reply_parser *p;
    if (pl_reply_parser_create(&o, &p) != PL_OK) fail("create failed");
    buf content = {0}, reasoning = {0};
    int calls = 0;
    for (size_t at = 0;;) {
        size_t n = len - at < piece ? len - at : piece;
        bool end = at + n == len;
        const pl_reply_delta *d;
        size_t nd;
        if (pl_reply_parser_feed(p, text + at, n, end, &d, &nd) != PL_OK) fail("feed failed");
        for (size_t i = 0; i < nd; i++) {
            if (d[i].len && !d[i].text) fail("delta text");
            for (size_t k = 0; k < d[i].len; k++) (void)*(volatile const char *)(d[i].text + k);
            if (d[i].part == PL_REPLY_TOOL_CALL) {
                if (d[i].tool_id) {
                    if (d[i].tool_index != calls || !d[i].tool_name || !d[i].tool_name[0])
                        fail("a call's first delta");
                    calls++;
                } else if (d[i].tool_index < 0 || d[i].tool_index >= calls) {
                    fail("arguments of a call not announced");
                }
            } else {
                if (d[i].tool_id || d[i].tool_index != -1) fail("text delta with call fields");
                put(d[i].part == PL_REPLY_CONTENT ? &content : &reasoning, d[i].text, d[i].len);
            }
        }
        at += n;
        if (end) break;
    }
    if (pl_reply_parser_tool_calls(p) != (size_t)calls) fail("call count");
    if (calls == 0 && r->n_tool_calls == 0) {
        if (!same(r->content, &content)) fail("streamed content differs from the whole parse");
        if (!same(r->reasoning_content, &reasoning))
            fail("streamed reasoning differs from the whole parse");
    }
    free(content.p);
    free(reasoning.p);
    pl_reply_parser_free(p);
    pl_reply_free(r);
    return 0;
}
