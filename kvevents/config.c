/*
 * kvevents/config.c - vLLM's KVEventsConfig from its JSON (--kv-events-config), checked.
 *
 * The keys and defaults are vLLM's (vllm/config/kv_events.py): a configuration written for
 * vLLM means the same here, and a key vLLM does not have is refused rather than ignored (a
 * misspelt "endpiont" must not silently publish on the default port). The two settings vLLM
 * takes from the environment are read from it here too, once, at parse.
 */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "kvevents/kvevents.h"
#include "util/alloc.h"

#define KEY "kv_events_config"

static const char *const KNOWN[] = {"enable_kv_cache_events", "publisher", "endpoint",
                                    "replay_endpoint", "buffer_steps", "hwm",
                                    "max_queue_size", "topic", NULL};

void pl_kvev_config_deinit(pl_kvev_config *c) {
    if (!c) return;
    pl_free(c->endpoint);
    pl_free(c->replay_endpoint);
    pl_free(c->topic);
    pl_free(c->hash_seed);
    memset(c, 0, sizeof *c);
}

static pl_status set_string(char **dst, const char *s, const char *key) {
    char *copy = pl_strdup(s);
    if (!copy) return pl_fail(PL_ERR_OUT_OF_MEMORY, KEY ".%s", key);
    pl_free(*dst);
    *dst = copy;
    return PL_OK;
}

static pl_status get_string(json_t *v, const char *key, bool nullable, char **dst) {
    if (nullable && json_is_null(v)) {
        pl_free(*dst);
        *dst = NULL;
        return PL_OK;
    }
    if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
        return pl_fail(PL_ERR_INVALID_ARGUMENT, KEY ".%s: must be a string%s", key,
                       nullable ? " or null" : "");
    return set_string(dst, json_string_value(v), key);
}

static pl_status get_int(json_t *v, const char *key, int lo, int *dst) {
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > INT32_MAX)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, KEY ".%s: must be an integer in [%d, %d]", key,
                       lo, INT32_MAX);
    *dst = (int)json_integer_value(v);
    return PL_OK;
}

static bool known(const char *key) {
    for (int i = 0; KNOWN[i]; i++)
        if (!strcmp(KNOWN[i], key)) return true;
    return false;
}

static pl_status apply(json_t *root, pl_kvev_config *c) {
    if (!json_is_object(root))
        return pl_fail(PL_ERR_INVALID_ARGUMENT, KEY ": must be a JSON object (vLLM's "
                       "KVEventsConfig), e.g. {\"enable_kv_cache_events\": true}");
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (!known(key))
            return pl_fail(PL_ERR_INVALID_ARGUMENT, KEY ": unknown key \"%s\" (known: "
                           "enable_kv_cache_events, publisher, endpoint, replay_endpoint, "
                           "buffer_steps, hwm, max_queue_size, topic)", key);
    }
    bool has_publisher = false;
    json_object_foreach(root, key, v) {
        if (!strcmp(key, "enable_kv_cache_events")) {
            if (!json_is_boolean(v))
                return pl_fail(PL_ERR_INVALID_ARGUMENT, KEY ".%s: must be true or false", key);
            c->enable_kv_cache_events = json_is_true(v);
        } else if (!strcmp(key, "publisher")) {
            const char *s = json_is_string(v) ? json_string_value(v) : NULL;
            if (json_is_null(v)) continue; /* vLLM's None: decided by enable_kv_cache_events */
            if (!s || (strcmp(s, "zmq") && strcmp(s, "null")))
                return pl_fail(PL_ERR_INVALID_ARGUMENT, KEY ".publisher: must be \"zmq\" or "
                               "\"null\"");
            c->zmq = !strcmp(s, "zmq");
            has_publisher = true;
        } else if (!strcmp(key, "endpoint")) {
            PL_TRY(get_string(v, key, false, &c->endpoint));
        } else if (!strcmp(key, "replay_endpoint")) {
            PL_TRY(get_string(v, key, true, &c->replay_endpoint));
        } else if (!strcmp(key, "topic")) {
            PL_TRY(get_string(v, key, false, &c->topic));
        } else if (!strcmp(key, "buffer_steps")) {
            PL_TRY(get_int(v, key, 0, &c->buffer_steps));
        } else if (!strcmp(key, "hwm")) {
            PL_TRY(get_int(v, key, 0, &c->hwm));
        } else if (!strcmp(key, "max_queue_size")) {
            PL_TRY(get_int(v, key, 1, &c->max_queue_size));
        }
    }
    if (!has_publisher) c->zmq = c->enable_kv_cache_events;
    if (c->endpoint && !c->endpoint[0])
        return pl_fail(PL_ERR_INVALID_ARGUMENT, KEY ".endpoint: is empty");
    if (c->replay_endpoint && !c->replay_endpoint[0])
        return pl_fail(PL_ERR_INVALID_ARGUMENT, KEY ".replay_endpoint: is empty (null: none)");
    return PL_OK;
}

pl_status pl_kvev_config_parse(const char *text, pl_kvev_config *out) {
    pl_kvev_config c = {.buffer_steps = 10000, .hwm = 100000, .max_queue_size = 100000};
    const char *seed = getenv("PYTHONHASHSEED");
    const char *ints = getenv("VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES");
    c.int_block_hashes = !ints || strcmp(ints, "0") != 0;
    pl_status s = set_string(&c.endpoint, "tcp://*:5557", "endpoint");
    if (s == PL_OK) s = set_string(&c.topic, "", "topic");
    if (s == PL_OK) s = set_string(&c.hash_seed, seed ? seed : "vllm-none-hash", "hash_seed");
    if (s == PL_OK && text && text[0]) {
        json_error_t je;
        json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &je);
        if (!root)
            s = pl_fail(PL_ERR_INVALID_ARGUMENT, KEY ": invalid JSON at line %d column %d: %s",
                        je.line, je.column, je.text);
        else
            s = apply(root, &c);
        json_decref(root);
    }
    if (s != PL_OK) {
        pl_kvev_config_deinit(&c);
        return s;
    }
    *out = c;
    return PL_OK;
}
