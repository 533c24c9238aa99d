/*
 * tests/fuzz/fuzz_fields.c - libFuzzer target: the setters by name (pl_engine_config_set,
 * pl_sampling_params_set and their _json forms: the text an HTTP server or a command line
 * hands the library) on arbitrary names and values, several in a row on one struct.
 *
 * Input: records of [u8 selector][u8 name length][name][u16 value length][value]; selector
 * bit 0: config or sampling parameters, bit 1: text or JSON, bit 2: name taken from the table
 * (the first name byte picks the row) instead of the raw bytes.
 *
 * Contract: each call returns PL_OK, PL_ERR_INVALID_ARGUMENT or PL_ERR_NOT_FOUND (or
 * PL_ERR_OUT_OF_MEMORY) with a message; a refused value leaves the struct byte for byte as
 * it was; every field of the result formats as JSON that sets back to the same value;
 * validate never crashes; deinit frees everything (LeakSanitizer).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pagellm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what) {
    fprintf(stderr, "fuzz_fields: %s (%s)\n", what, pl_last_error());
    abort();
}

typedef struct target {
    void *obj;
    size_t size;
    const pl_field *fields;
    size_t n;
    pl_status (*set)(void *, const char *, const char *);
    pl_status (*set_json)(void *, const char *, const char *);
} target;

static pl_status cset(void *o, const char *n, const char *v) {
    return pl_engine_config_set(o, n, v);
}
static pl_status cjson(void *o, const char *n, const char *v) {
    return pl_engine_config_set_json(o, n, v);
}
static pl_status sset(void *o, const char *n, const char *v) {
    return pl_sampling_params_set(o, n, v);
}
static pl_status sjson(void *o, const char *n, const char *v) {
    return pl_sampling_params_set_json(o, n, v);
}

static void round_trip(const target *t) {
    char json[8192];
    for (size_t i = 0; i < t->n; i++) {
        size_t len = pl_field_to_json(&t->fields[i], t->obj, json, sizeof json);
        if (len >= sizeof json) continue; /* a long list: nothing to check within the buffer */
        /* a scratch copy of the struct: setting must reproduce the same JSON */
        unsigned char copy[2048];
        if (t->size > sizeof copy) fail("struct larger than the scratch copy");
        memcpy(copy, t->obj, t->size);
        ((void **)copy)[1] = NULL; /* fresh storage: the copy's allocations are its own */
        if (t->set_json(copy, t->fields[i].name, json) != PL_OK) fail("own JSON refused");
        char again[8192];
        pl_field_to_json(&t->fields[i], copy, again, sizeof again);
        /* strings that were not UTF-8 come back with U+FFFD: equal from the second round */
        if (strcmp(json, again) != 0 && !strstr(json, "\\ufffd"))
            fail("JSON round trip changed the value");
        if (t->set == cset) pl_engine_config_deinit((pl_engine_config *)copy);
        else pl_sampling_params_deinit((pl_sampling_params *)copy);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    pl_engine_config cfg;
    pl_sampling_params sp;
    pl_engine_config_default(&cfg);
    pl_sampling_params_default(&sp);
    target ts[2];
    ts[0] = (target){&cfg, sizeof cfg, NULL, 0, cset, cjson};
    ts[0].fields = pl_engine_config_fields(&ts[0].n);
    ts[1] = (target){&sp, sizeof sp, NULL, 0, sset, sjson};
    ts[1].fields = pl_sampling_params_fields(&ts[1].n);

    size_t at = 0;
    for (int calls = 0; calls < 16 && at + 2 <= size; calls++) {
        uint8_t sel = data[at], name_len = data[at + 1];
        at += 2;
        if (at + name_len + 2 > size) break;
        const uint8_t *name_bytes = data + at;
        at += name_len;
        size_t value_len = (size_t)data[at] | (size_t)data[at + 1] << 8;
        at += 2;
        if (value_len > size - at) value_len = size - at;
        char name[256], *value = malloc(value_len + 1);
        if (!value) return 0;
        memcpy(value, data + at, value_len);
        value[value_len] = '\0'; /* a NUL inside cuts it short, as any C caller's would */
        at += value_len;

        const target *t = &ts[sel & 1];
        if ((sel & 4) && name_len > 0) {
            snprintf(name, sizeof name, "%s", t->fields[name_bytes[0] % t->n].name);
        } else {
            memcpy(name, name_bytes, name_len);
            name[name_len] = '\0';
        }
        unsigned char before[2048];
        memcpy(before, t->obj, t->size);
        pl_status s = (sel & 2) ? t->set_json(t->obj, name, value) : t->set(t->obj, name, value);
        free(value);
        if (s != PL_OK) {
            if (s != PL_ERR_INVALID_ARGUMENT && s != PL_ERR_NOT_FOUND &&
                s != PL_ERR_OUT_OF_MEMORY)
                fail("unexpected status");
            if (!pl_last_error()[0]) fail("a refusal without a message");
            /* out of memory may leave a new, empty storage list; nothing else changes */
            if (s != PL_ERR_OUT_OF_MEMORY && memcmp(before, t->obj, t->size) != 0)
                fail("a refused value changed the struct");
        }
    }
    (void)pl_engine_config_validate(&cfg);
    (void)pl_sampling_params_validate(&sp);
    round_trip(&ts[0]);
    round_trip(&ts[1]);
    pl_engine_config_deinit(&cfg);
    pl_sampling_params_deinit(&sp);
    return 0;
}
