/*
 * tests/fuzz/fuzz_kvevents.c - libFuzzer target: the KV event publisher's inputs that do not
 * come from the engine: --kv-events-config's JSON (kvevents/config.c), and the batch encoder
 * (kvevents/encode.c) on events derived from the data.
 *
 * Input: first byte even: the rest is the configuration text (NUL-terminated here); odd: the
 * rest describes events, 3 bytes each (kind, number of hashes 0..7, token seed), encoded with
 * block size 1..8 and both hash forms.
 *
 * Contract: the parser returns PL_OK (then every number is in range and the strings set) or
 * PL_ERR_INVALID_ARGUMENT / PL_ERR_OUT_OF_MEMORY with a message naming kv_events_config, and
 * leaks nothing either way; the encoder's output is one msgpack array [ts, events, 0] that
 * msgpack-c decodes whole, with one event per event given and each event's hash count kept.
 */
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvevents/kvevents.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what) {
    fprintf(stderr, "fuzz_kvevents: %s (%s)\n", what, pl_last_error());
    abort();
}

static void config(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return;
    memcpy(text, data, size);
    text[size] = '\0';
    pl_kvev_config c;
    pl_status s = pl_kvev_config_parse(text, &c);
    free(text);
    if (s == PL_OK) {
        if (!c.endpoint || !c.endpoint[0] || !c.topic || !c.hash_seed || c.buffer_steps < 0 ||
            c.hwm < 0 || c.max_queue_size < 1 || (c.replay_endpoint && !c.replay_endpoint[0]))
            fail("accepted a bad configuration");
        pl_kvev_config_deinit(&c);
    } else if ((s != PL_ERR_INVALID_ARGUMENT && s != PL_ERR_OUT_OF_MEMORY) ||
               !strstr(pl_last_error(), "kv_events_config")) {
        fail("refusal without the key");
    }
}

static void encode(const uint8_t *data, size_t size) {
    enum { MAX_EV = 64, MAX_H = 7, MAX_BS = 8 };
    static uint8_t hashes[MAX_EV][MAX_H][32];
    static int32_t tokens[MAX_EV][MAX_H * MAX_BS];
    static uint8_t parent[32];
    pl_kvev_event ev[MAX_EV];
    int bs = size ? 1 + data[0] % MAX_BS : 1;
    bool ints = size && (data[0] & 0x80);
    size_t n = 0;
    for (size_t i = 1; i + 3 <= size && n < MAX_EV; i += 3, n++) {
        pl_kvev_kind kind = (pl_kvev_kind)(data[i] % 3);
        size_t nh = data[i + 1] % (MAX_H + 1);
        for (size_t h = 0; h < nh; h++) memset(hashes[n][h], data[i + 2] + (int)h, 32);
        for (int t = 0; t < (int)nh * bs; t++) tokens[n][t] = data[i + 2] * 1000 + t;
        ev[n] = (pl_kvev_event){.kind = kind, .n_hashes = kind == PL_KVEV_CLEARED ? 0 : nh,
                                .hashes = (const uint8_t(*)[32])hashes[n],
                                .parent = data[i + 2] & 1 ? parent : NULL,
                                .tokens = tokens[n]};
    }
    char *out = NULL;
    size_t len = 0;
    if (pl_kvev_encode(1.5, ev, n, bs, ints, &out, &len) != PL_OK) return; /* out of memory */
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    if (msgpack_unpack_next(&u, out, len, &off) != MSGPACK_UNPACK_SUCCESS || off != len)
        fail("not one msgpack object");
    msgpack_object b = u.data;
    if (b.type != MSGPACK_OBJECT_ARRAY || b.via.array.size != 3 ||
        b.via.array.ptr[1].type != MSGPACK_OBJECT_ARRAY || b.via.array.ptr[1].via.array.size != n)
        fail("batch shape");
    for (size_t i = 0; i < n; i++) {
        msgpack_object e = b.via.array.ptr[1].via.array.ptr[i];
        uint32_t want = ev[i].kind == PL_KVEV_STORED ? 8 : ev[i].kind == PL_KVEV_REMOVED ? 3 : 1;
        if (e.type != MSGPACK_OBJECT_ARRAY || e.via.array.size != want) fail("event shape");
        if (ev[i].kind != PL_KVEV_CLEARED && e.via.array.ptr[1].via.array.size != ev[i].n_hashes)
            fail("hash count");
        if (ev[i].kind == PL_KVEV_STORED &&
            e.via.array.ptr[3].via.array.size != ev[i].n_hashes * (size_t)bs)
            fail("token count");
    }
    msgpack_unpacked_destroy(&u);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    if (data[0] % 2 == 0) config(data + 1, size - 1);
    else encode(data + 1, size - 1);
    return 0;
}
