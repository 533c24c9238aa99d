/*
 * tests/fuzz/fuzz_template.c - libFuzzer target: the input is a chat template. It is parsed
 * and, if it parses, rendered with a fixed chat (system, user, assistant with a tool call,
 * tool result, tools, special tokens, extra variables) under tight limits.
 *
 * What must hold: a parse or render either succeeds or fails with a status, a message and
 * nothing to free; a rendered text is NUL-terminated at its length and valid UTF-8 (every
 * string operation keeps whole characters); nothing leaks, nothing runs past its limits
 * (a hang is a libFuzzer timeout).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "template/template.h"
#include "util/alloc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char k_chat[] =
    "{\"messages\": ["
    "{\"role\": \"system\", \"content\": \"Be brief.\"},"
    "{\"role\": \"user\", \"content\": \"Weather in Paris? \\u00e9\\u65e5 \\ud83d\\ude00\"},"
    "{\"role\": \"assistant\", \"content\": \"<think>\\nplan\\n</think>\\n\\n\", \"tool_calls\": "
    "[{\"id\": \"abcDEF123\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
    "\"arguments\": {\"city\": \"Paris\", \"days\": 2}}}]},"
    "{\"role\": \"tool\", \"tool_call_id\": \"abcDEF123\", \"content\": \"21.5 C\"},"
    "{\"role\": \"assistant\", \"content\": \"It is 21.5 C.\"},"
    "{\"role\": \"user\", \"content\": \"  Thanks!\\n\"}],"
    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
    "\"description\": \"Get the weather\", \"parameters\": {\"type\": \"object\", \"properties\": "
    "{\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\", \"default\": 1.5}}, "
    "\"required\": [\"city\"]}}}],"
    "\"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\","
    "\"enable_thinking\": false, \"date_string\": \"26 Jul 2024\", \"n\": null, \"list\": [3, 1, "
    "2],"
    "\"obj\": {\"b\": 1, \"2\": [true, false], \"a\": {\"x\": \"y\"}}}";

static bool valid_utf8(const unsigned char *p, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        size_t k = c < 0x80                   ? 1
                   : (c >= 0xC2 && c <= 0xDF) ? 2
                   : (c >= 0xE0 && c <= 0xEF) ? 3
                   : (c >= 0xF0 && c <= 0xF4) ? 4
                                              : 0;
        if (!k || i + k > n) return false;
        uint32_t cp = k == 1 ? c : k == 2 ? (c & 0x1F) : k == 3 ? (c & 0x0F) : (c & 0x07);
        for (size_t j = 1; j < k; j++) {
            if ((p[i + j] & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (p[i + j] & 0x3F);
        }
        static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min[k] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += k;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static json_t *vars;
    if (!vars) {
        json_error_t err;
        vars = json_loads(k_chat, 0, &err);
        if (!vars) {
            fprintf(stderr, "fuzz: bad fixed chat: %s\n", err.text);
            abort();
        }
    }
    pl_tmpl *t = NULL;
    pl_status s = pl_tmpl_parse((const char *)data, size, &t);
    if (s != PL_OK) {
        if (t != NULL || pl_last_error()[0] == '\0') {
            fprintf(stderr, "fuzz: failed parse left a template or no message (%s)\n",
                    pl_status_name(s));
            abort();
        }
        return 0;
    }
    pl_tmpl_limits lim;
    pl_tmpl_limits_default(&lim);
    lim.max_steps = 200000;
    lim.max_output_bytes = (size_t)1 << 20;
    lim.max_memory_bytes = (size_t)64 << 20;
    lim.max_items = 100000;
    char *out = NULL;
    size_t n = 0;
    s = pl_tmpl_render_limited(t, vars, &lim, &out, &n);
    if (s == PL_OK) {
        if (!out || out[n] != '\0' || !valid_utf8((const unsigned char *)out, n)) {
            fprintf(stderr, "fuzz: rendered text is not NUL-terminated valid UTF-8\n");
            abort();
        }
        pl_free(out);
    } else if (out != NULL || pl_last_error()[0] == '\0') {
        fprintf(stderr, "fuzz: failed render left output or no message (%s)\n", pl_status_name(s));
        abort();
    }
    pl_tmpl_free(t);
    return 0;
}
