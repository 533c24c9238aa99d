/*
 * tests/fuzz/fuzz_seeds.c - writes the seed corpora of the fuzz targets:
 *
 *   fuzz_seeds OUTDIR
 *
 * OUTDIR/llama2c/      [dtype byte] + llama2.c legacy and ak42 files of tiny random models
 * OUTDIR/gguf/         [dtype byte] + GGUF files (model/save_gguf.c's writer): tiny random
 *                      models of every family in F32/F16/BF16, with a hand-made "gpt2" or
 *                      "llama" vocabulary and a chat template in some
 * OUTDIR/safetensors/  [dtype byte][u16 config length] + config.json + model.safetensors
 *                      (f32, f16, bf16, misaligned header, tied with lm_head, no tie key;
 *                      Mistral with a window, Qwen2 with biases, Qwen3 with q/k norms)
 * OUTDIR/hf_index/     [mode byte][u16 lengths of config, index, shards 1 and 2] + config.json
 *                      + model.safetensors.index.json + 3 shards (fuzz_hf_index.c): valid
 *                      f32/f16/bf16/misaligned models, loaded by directory or by index path,
 *                      and indexes that misplace a tensor, escape the directory, name the
 *                      index itself or a missing shard, or map nothing
 * OUTDIR/prompts/      JSONL files: every field, ids and text, stop forms, edge values
 * OUTDIR/config/       encoded engine configs (fuzz_config_codec.h): defaults, small valid
 *                      engines with request shapes, boundary values
 * OUTDIR/fields/       setter records for fuzz_fields.c: every field of both tables by name,
 *                      as text and as JSON, with its default and a few typical values
 * The tokenizer corpus is trained by scripts/fuzz.sh with spm_train (no C writer for the
 * SentencePiece protobuf here). Models are written by tests/support/model_fixtures, the
 * writers the loader tests use, so every seed is a valid file the mutations start from.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_config_codec.h"
#include "gguf/gguf.h"
#include "engine/plan.h"
#include "model_fixtures.h"

static _Noreturn void die(const char *what) {
    fprintf(stderr, "fuzz_seeds: %s\n", what);
    exit(1);
}

static void mkdir_p(const char *d) {
    if (mkdir(d, 0755) != 0 && errno != EEXIST) die(d);
}

static void write_seed(const char *dir, const char *name, const void *a, size_t na,
                       const void *b, size_t nb) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(a, 1, na, f) != na || (nb && fwrite(b, 1, nb, f) != nb) || fclose(f))
        die(path);
}

/* Tiny llama2.c-compatible configs: a few KB per file. */
static void tiny_config(pl_model_config *c, int variant) {
    pl_test_rng r;
    pl_test_rng_seed(&r, 99);
    pl_fixture_random_config(&r, c);
    c->dim = variant == 2 ? 16 : 8;
    c->n_heads = 2;
    c->n_kv_heads = variant == 1 ? 1 : 2;
    c->head_dim = c->dim / c->n_heads;
    c->hidden_dim = variant == 2 ? 20 : 12;
    c->n_layers = variant == 2 ? 2 : 1;
    c->vocab_size = 16 + 3 * variant;
    c->max_seq_len = 8;
    c->tied_embeddings = variant != 1;
}

static void llama2c_seeds(const char *out, const char *tmp) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/llama2c", out);
    mkdir_p(dir);
    for (int v = 0; v < 3; v++) {
        pl_model_config c;
        tiny_config(&c, v);
        pl_model *m = pl_fixture_model(&c, 1000 + (uint64_t)v);
        if (!m) die("fixture model");
        for (int fmt = 0; fmt < 2; fmt++) {
            const char *p = pl_fixture_path(tmp, "m.bin");
            bool ok = fmt == 0 ? pl_fixture_write_llama2c(m, p) : pl_fixture_write_ak42(m, p);
            uint8_t *bytes;
            size_t n;
            if (!ok || !pl_fixture_read_file(p, &bytes, &n)) die("llama2c writer");
            for (uint8_t dt = 0; dt < 4; dt += (uint8_t)(v == 0 ? 1 : 4)) {
                char name[64];
                snprintf(name, sizeof name, "%s_v%d_dt%d.bin", fmt ? "ak42" : "legacy", v, dt);
                write_seed(dir, name, &dt, 1, bytes, n);
            }
            free(bytes);
        }
        pl_model_free(m);
    }
}

/* A tiny vocabulary of each GGUF kind, for the tokenizer half of fuzz_gguf. */
static pl_status add_vocab(pl_gguf_writer *w, int kind, int vocab) {
    static const char *const gpt2[] = {"a", "b", "ab", "\xC4\xA0", "\xC4\xA0\x61\x62",
                                       "<|end|>"};
    static const char *const spm[] = {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b",
                                      "\xE2\x96\x81\x61", "ab", "<0x0A>"};
    if (kind == 1) {
        if (vocab < 6) return PL_OK;
        PL_TRY(pl_gguf_add_str(w, "tokenizer.ggml.model", "gpt2", 4));
        PL_TRY(pl_gguf_add_str(w, "tokenizer.ggml.pre", "llama-bpe", 9));
        PL_TRY(pl_gguf_add_str_array(w, "tokenizer.ggml.tokens", gpt2, NULL, 6));
        int32_t types[6] = {1, 1, 1, 1, 1, 3};
        PL_TRY(pl_gguf_add_array(w, "tokenizer.ggml.token_type", PL_GGUF_I32, types, 6));
        const char *merges[2] = {"a b", "\xC4\xA0 ab"};
        PL_TRY(pl_gguf_add_str_array(w, "tokenizer.ggml.merges", merges, NULL, 2));
    } else {
        if (vocab < 9) return PL_OK;
        PL_TRY(pl_gguf_add_str(w, "tokenizer.ggml.model", "llama", 5));
        PL_TRY(pl_gguf_add_str_array(w, "tokenizer.ggml.tokens", spm, NULL, 9));
        float scores[9] = {0, 0, 0, -1, -2, -3, -4, -5, 0};
        int32_t types[9] = {2, 3, 3, 1, 1, 1, 1, 1, 6};
        PL_TRY(pl_gguf_add_array(w, "tokenizer.ggml.scores", PL_GGUF_F32, scores, 9));
        PL_TRY(pl_gguf_add_array(w, "tokenizer.ggml.token_type", PL_GGUF_I32, types, 9));
    }
    PL_TRY(pl_gguf_add_bool(w, "tokenizer.ggml.add_bos_token", true));
    return pl_gguf_add_str(w, "tokenizer.chat_template", "{{ messages }}", 14);
}

static void gguf_seeds(const char *out, const char *tmp) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/gguf", out);
    mkdir_p(dir);
    const pl_wtype types[] = {PL_WTYPE_F32, PL_WTYPE_F16, PL_WTYPE_BF16};
    for (int a = 0; a < PL_ARCH_COUNT; a++)
        for (int t = 0; t < 3; t++) {
            pl_model_config c;
            tiny_config(&c, t);
            c.arch = (pl_arch)a;
            c.rope_layout = 1;
            if (a == PL_ARCH_MISTRAL) c.sliding_window = 4;
            pl_model *m = pl_fixture_model(&c, 3000 + (uint64_t)(a * 3 + t));
            if (!m) die("fixture model");
            const char *p = pl_fixture_path(tmp, "m.gguf");
            pl_gguf_writer *w;
            if (pl_gguf_writer_create(&w) != PL_OK || add_vocab(w, (a + t) % 2, c.vocab_size) !=
                PL_OK || pl_model_save_gguf(m, types[t], w, p) != PL_OK)
                die(pl_last_error());
            pl_gguf_writer_free(w);
            uint8_t *bytes;
            size_t n;
            if (!pl_fixture_read_file(p, &bytes, &n)) die("gguf writer");
            char name[64];
            uint8_t dt = (uint8_t)(t == 0 ? 2 : 0);
            snprintf(name, sizeof name, "arch%d_%s.gguf", a, pl_wtype_name(types[t]));
            write_seed(dir, name, &dt, 1, bytes, n);
            free(bytes);
            pl_model_free(m);
        }
}

static void safetensors_seeds(const char *out, const char *tmp) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/safetensors", out);
    mkdir_p(dir);
    static const struct {
        const char *name;
        pl_fixture_hf_options o;
        int variant;
    } kinds[] = {
        {"f32", {.dtype = PL_DTYPE_F32}, 0},
        {"f16", {.dtype = PL_DTYPE_F16}, 1},
        {"bf16", {.dtype = PL_DTYPE_BF16}, 2},
        {"misaligned", {.dtype = PL_DTYPE_F32, .misalign = true}, 1},
        {"tied_lm_head", {.dtype = PL_DTYPE_F16, .lm_head_when_tied = true}, 0},
        {"no_tie_key", {.dtype = PL_DTYPE_F32, .omit_tie_key = true}, 2},
    };
    /* after the Llama kinds, one of each other architecture: Mistral with a sliding window,
     * Qwen2 with q/k/v biases, Qwen3 with q/k norms and head_dim 6 != dim / n_heads */
    const pl_arch archs[] = {PL_ARCH_MISTRAL, PL_ARCH_QWEN2, PL_ARCH_QWEN3};
    size_t n_llama = sizeof kinds / sizeof kinds[0];
    for (size_t k = 0; k < n_llama + 3; k++) {
        pl_model_config c;
        tiny_config(&c, k < n_llama ? kinds[k].variant : (int)(k - n_llama));
        if (k >= n_llama) {
            c.arch = archs[k - n_llama];
            if (c.arch == PL_ARCH_MISTRAL) c.sliding_window = 4;
            if (c.arch == PL_ARCH_QWEN3) c.head_dim = 6;
        }
        pl_fixture_hf_options o = k < n_llama ? kinds[k].o : (pl_fixture_hf_options){0};
        pl_model *m = pl_fixture_model(&c, 2000 + k);
        char hf[512];
        snprintf(hf, sizeof hf, "%s/hf%zu", tmp, k);
        if (!m || !pl_fixture_write_hf(m, hf, &o)) die("hf writer");
        char cfg_path[600], st_path[600];
        snprintf(cfg_path, sizeof cfg_path, "%s/config.json", hf);
        snprintf(st_path, sizeof st_path, "%s/model.safetensors", hf);
        uint8_t *cj, *st;
        size_t ncj, nst;
        if (!pl_fixture_read_file(cfg_path, &cj, &ncj) || !pl_fixture_read_file(st_path, &st, &nst))
            die("hf read back");
        if (ncj > 0xFFFF) die("config.json too long for the seed layout");
        uint8_t *buf = malloc(3 + ncj + nst);
        buf[0] = (uint8_t)(k % 4); /* load dtype */
        buf[1] = (uint8_t)(ncj & 0xFF);
        buf[2] = (uint8_t)(ncj >> 8);
        memcpy(buf + 3, cj, ncj);
        memcpy(buf + 3 + ncj, st, nst);
        char name[64];
        snprintf(name, sizeof name, "%s.bin",
                 k < n_llama ? kinds[k].name : (const char *[]){"mistral", "qwen2",
                                                                "qwen3"}[k - n_llama]);
        write_seed(dir, name, buf, 3 + ncj + nst, NULL, 0);
        free(buf);
        free(cj);
        free(st);
        pl_model_free(m);
    }
}

/* Replaces the first occurrence of from in *s (length *n, malloc'ed) by to. */
static void replace_first(uint8_t **s, size_t *n, const char *from, const char *to) {
    size_t nf = strlen(from), nt = strlen(to);
    for (size_t i = 0; i + nf <= *n; i++) {
        if (memcmp(*s + i, from, nf) != 0) continue;
        uint8_t *r = malloc(*n - nf + nt);
        if (!r) die("out of memory");
        memcpy(r, *s, i);
        memcpy(r + i, to, nt);
        memcpy(r + i + nt, *s + i + nf, *n - i - nf);
        free(*s);
        *s = r;
        *n = *n - nf + nt;
        return;
    }
    die("replace_first: no match in the index");
}

static void hf_index_seeds(const char *out, const char *tmp) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/hf_index", out);
    mkdir_p(dir);
    enum { N_SHARDS = 3 }; /* fuzz_hf_index.c's shard names are the writer's for 3 shards */
    static const char *const shard1 = "\"model-00001-of-00003.safetensors\"";
    static const struct {
        const char *name;
        pl_fixture_hf_options o;
        int variant;
        uint8_t mode;     /* dtype | 4: load through the index path */
        const char *to;   /* replaces the first shard name in the index (NULL: valid) */
    } kinds[] = {
        {"f32", {.dtype = PL_DTYPE_F32}, 0, 0, NULL},
        {"f16_via_index", {.dtype = PL_DTYPE_F16}, 1, 4 | 2, NULL},
        {"bf16", {.dtype = PL_DTYPE_BF16}, 2, 3, NULL},
        {"misaligned_via_index", {.dtype = PL_DTYPE_F32, .misalign = true}, 1, 4 | 1, NULL},
        {"untied", {.dtype = PL_DTYPE_F32}, 1, 0, NULL},
        {"wrong_shard", {.dtype = PL_DTYPE_F32}, 0, 0, "\"model-00002-of-00003.safetensors\""},
        {"escape", {.dtype = PL_DTYPE_F32}, 0, 0, "\"../model-00001-of-00003.safetensors\""},
        {"index_as_shard", {.dtype = PL_DTYPE_F32}, 0, 4,
         "\"model.safetensors.index.json\""},
        {"config_as_shard", {.dtype = PL_DTYPE_F32}, 0, 0, "\"config.json\""},
        {"missing_shard", {.dtype = PL_DTYPE_F32}, 0, 0, "\"model-00004-of-00004.safetensors\""},
        {"not_a_string", {.dtype = PL_DTYPE_F32}, 0, 0, "[1, 2]"},
        {"empty_map", {.dtype = PL_DTYPE_F32}, 0, 0, "" /* whole index replaced below */},
    };
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        pl_model_config c;
        tiny_config(&c, kinds[k].variant);
        pl_model *m = pl_fixture_model(&c, 3000 + k);
        char hf[512];
        snprintf(hf, sizeof hf, "%s/hfi%zu", tmp, k);
        pl_fixture_hf_options o = kinds[k].o;
        o.n_shards = N_SHARDS;
        if (!m || !pl_fixture_write_hf(m, hf, &o)) die("hf writer (sharded)");
        static const char *const files[N_SHARDS + 2] = {
            "config.json", "model.safetensors.index.json", "model-00001-of-00003.safetensors",
            "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"};
        uint8_t *b[N_SHARDS + 2];
        size_t nb[N_SHARDS + 2], total = 1 + 2 * (N_SHARDS + 1);
        for (int f = 0; f < N_SHARDS + 2; f++) {
            char path[600];
            snprintf(path, sizeof path, "%s/%s", hf, files[f]);
            if (!pl_fixture_read_file(path, &b[f], &nb[f])) die("hf read back (sharded)");
        }
        if (kinds[k].to && !kinds[k].to[0]) {
            static const char empty[] = "{\"metadata\": {}, \"weight_map\": {}}\n";
            free(b[1]);
            b[1] = malloc(sizeof empty);
            if (!b[1]) die("out of memory");
            memcpy(b[1], empty, sizeof empty - 1);
            nb[1] = sizeof empty - 1;
        } else if (kinds[k].to) {
            replace_first(&b[1], &nb[1], shard1, kinds[k].to);
        }
        for (int f = 0; f < N_SHARDS + 2; f++) {
            if (f < N_SHARDS + 1 && nb[f] > 0xFFFF) die("a file too long for the seed layout");
            total += nb[f];
        }
        uint8_t *buf = malloc(total), *p = buf;
        if (!buf) die("out of memory");
        *p++ = kinds[k].mode;
        for (int f = 0; f < N_SHARDS + 1; f++) {
            *p++ = (uint8_t)(nb[f] & 0xFF);
            *p++ = (uint8_t)(nb[f] >> 8);
        }
        for (int f = 0; f < N_SHARDS + 2; f++) {
            memcpy(p, b[f], nb[f]);
            p += nb[f];
            free(b[f]);
        }
        char name[64];
        snprintf(name, sizeof name, "%s.bin", kinds[k].name);
        write_seed(dir, name, buf, total, NULL, 0);
        free(buf);
        pl_model_free(m);
    }
}

static void prompts_seeds(const char *out) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/prompts", out);
    mkdir_p(dir);
    static const char *files[][2] = {
        {"text.jsonl", "{\"prompt\": \"Once upon a time\"}\n"},
        {"ids.jsonl", "{\"prompt_token_ids\": [1, 5, 9, 511], \"max_tokens\": 8}\n"},
        {"all_fields.jsonl",
         "{\"prompt\": \"Hi\", \"max_tokens\": 4, \"min_tokens\": 1, \"temperature\": 0.7, "
         "\"top_p\": 0.9, \"top_k\": 40, \"min_p\": 0.05, \"seed\": 7, \"ignore_eos\": true, "
         "\"n\": 2, \"stop\": [\".\", \"\\n\"], \"priority\": -1, \"repetition_penalty\": 1.1, "
         "\"presence_penalty\": 0.5, \"frequency_penalty\": -0.5}\n"},
        {"many.jsonl",
         "{\"prompt\": \"a\"}\n\n  \n{\"prompt_token_ids\": [1]}\r\n"
         "{\"prompt\": \"h\\u00e9llo \\u2713\", \"stop\": \"llo\"}\n"},
        {"edge.jsonl",
         "{\"prompt_token_ids\": [0, 2147483647], \"max_tokens\": 16777216, \"top_p\": 0}\n"},
        {"bad_json.jsonl", "{\"prompt\": \"unterminated}\n"},
        {"chat.jsonl",
         "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, "
         "{\"role\": \"user\", \"content\": \"Once upon a time\"}], \"max_tokens\": 4}\n"
         "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"tools\": [{\"type\": "
         "\"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}], "
         "\"chat_template_kwargs\": {\"extra\": \"!\"}}\n"},
        {"nul.jsonl", "{\"prompt\": \"a\\u0000b\"}\n"},
        {"dup.jsonl", "{\"prompt\": \"a\", \"prompt\": \"b\"}\n"},
        {"not_object.jsonl", "[1, 2, 3]\n"},
        {"unknown_key.jsonl", "{\"prompt_token_ids\": [1]}\n{\"prompt\": \"a\", "
                              "\"temprature\": 0, \"colour\": 1}\n"},
        {"stop_array.jsonl", "{\"prompt\": \"x\", \"stop\": [\"a\",\"b\",\"c\",\"d\",\"e\",\"f\","
                             "\"g\",\"h\",\"i\"]}\n"},
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        write_seed(dir, files[i][0], files[i][1], strlen(files[i][1]), NULL, 0);
}

static void config_seeds(const char *out) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/config", out);
    mkdir_p(dir);
    uint8_t buf[256];
    pl_engine_config c;
    for (int k = 0; k < 8; k++) {
        pl_engine_config_default(&c);
        uint8_t sel = 0;
        /* a small valid engine the target will run */
        c.backend = PL_BACKEND_REF;
        c.max_num_blocks = 64;
        c.block_size = 4;
        c.max_batch_size = 4;
        c.max_num_seqs = 8;
        c.max_total_tokens = 32;
        c.max_model_len = 64;
        switch (k) {
        case 0: pl_engine_config_default(&c); break; /* defaults: validated, not run */
        case 1: break;
        case 2: c.enable_chunked_prefill = false; break;
        case 3: c.overflow_policy = PL_OVERFLOW_DROP_OLDEST; c.max_waiting = 1; break;
        case 4: c.block_size = 1; c.max_num_blocks = 200; c.long_prefill_threshold = 3; break;
        case 5: c.backend = PL_BACKEND_CPU; c.n_threads = 1; c.watermark = 0.2; break;
        case 6: c.max_num_blocks = 0; c.memory_limit_bytes = 8u << 20; c.memory_threshold = 0.5;
                break;
        case 7: sel = 3; break; /* an unknown dummy preset */
        }
        size_t n = fz_encode_config(&c, sel, buf);
        /* request shapes: prompt 6, max_tokens 5, n 2, 3 requests */
        buf[n++] = 5;
        buf[n++] = 4;
        buf[n++] = 1;
        buf[n++] = 3;
        char name[32];
        snprintf(name, sizeof name, "config%d.bin", k);
        write_seed(dir, name, buf, n, NULL, 0);
    }
}

/* One fuzz_fields record: [selector][name length][name][u16 value length][value]. */
static size_t field_record(uint8_t *buf, uint8_t sel, const char *name, const char *value) {
    size_t n = 0, nl = strlen(name), vl = strlen(value);
    buf[n++] = sel;
    buf[n++] = (uint8_t)nl;
    memcpy(buf + n, name, nl);
    n += nl;
    buf[n++] = (uint8_t)(vl & 0xFF);
    buf[n++] = (uint8_t)(vl >> 8);
    memcpy(buf + n, value, vl);
    return n + vl;
}

static void fields_seeds(const char *out) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/fields", out);
    mkdir_p(dir);
    pl_engine_config c;
    pl_sampling_params sp;
    pl_engine_config_default(&c);
    pl_sampling_params_default(&sp);
    static const char *const texts[] = {"1", "0", "true", "f16", "512M", "0.5", "a,b", "7,8"};
    static const char *const jsons[] = {"1", "null", "[1,2]", "[\"x\",\"yz\"]", "\"f32\"",
                                        "0.25", "\"4GiB\"", "false"};
    for (int which = 0; which < 2; which++) {
        size_t nf;
        const pl_field *f = which ? pl_sampling_params_fields(&nf) : pl_engine_config_fields(&nf);
        for (size_t i = 0; i < nf; i++) {
            uint8_t buf[1024];
            size_t n = 0;
            char def[256];
            pl_field_to_json(&f[i], which ? (const void *)&sp : (const void *)&c, def, sizeof def);
            n += field_record(buf + n, (uint8_t)(which | 2), f[i].name, def);
            n += field_record(buf + n, (uint8_t)which, f[i].name, texts[i % 8]);
            n += field_record(buf + n, (uint8_t)(which | 2), f[i].name, jsons[i % 8]);
            char name[64];
            snprintf(name, sizeof name, "%s-%s.bin", which ? "sampling" : "config", f[i].name);
            write_seed(dir, name, buf, n, NULL, 0);
        }
    }
}

/* Step plans (tests/fuzz/fuzz_plan.c): a prefill with a decode beside it, a decode batch
 * with copy-on-write pairs, LOGITS rows; the limits are fuzz_plan's. */
static void plan_seeds(const char *out) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/plan", out);
    mkdir_p(dir);
    int32_t ids[6] = {1, 5, 9, 13, 17, 21}, pos[6] = {0, 1, 2, 3, 4, 9}, qs[3] = {0, 5, 6};
    int32_t ctx[2] = {5, 10}, tables[2 * 16] = {3, 7}, rows[2] = {4, 5}, pairs[2] = {7, 8};
    int64_t slots[6] = {12, 13, 14, 15, 28, 9};
    tables[16] = 0, tables[17] = 4, tables[18] = 2;
    pl_runner_batch b = {.n_seqs = 2, .n_tokens = 6, .max_query_len = 5, .max_context_len = 10,
                         .n_sample = 2, .n_copies = 0, .token_ids = ids, .positions = pos,
                         .slots = slots, .query_start = qs, .context_lens = ctx,
                         .block_tables = tables, .sample_rows = rows, .copy_pairs = pairs};
    unsigned char buf[4096];
    size_t len;
    unsigned char run = 0, logits = 1;
    if (pl_plan_encode_run(&b, 4, 16, buf, sizeof buf, &len) != PL_OK) die("plan seed");
    write_seed(dir, "prefill_and_decode", &run, 1, buf, len);
    b.n_copies = 1;
    if (pl_plan_encode_run(&b, 4, 16, buf, sizeof buf, &len) != PL_OK) die("plan seed");
    write_seed(dir, "copy_on_write", &run, 1, buf, len);
    if (pl_plan_encode_rows(rows, 2, buf, sizeof buf, &len) != PL_OK) die("plan seed");
    write_seed(dir, "logits", &logits, 1, buf, len);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz_seeds OUTDIR\n");
        return 2;
    }
    const char *out = argv[1];
    mkdir_p(out);
    const char *tmp = pl_test_tmpdir();
    if (!tmp) die("temporary directory");
    char tmpdir[512];
    snprintf(tmpdir, sizeof tmpdir, "%s", tmp);
    llama2c_seeds(out, tmpdir);
    gguf_seeds(out, tmpdir);
    safetensors_seeds(out, tmpdir);
    hf_index_seeds(out, tmpdir);
    prompts_seeds(out);
    config_seeds(out);
    fields_seeds(out);
    plan_seeds(out);
    pl_fixture_remove_dir(tmpdir);
    printf("fuzz_seeds: corpora written under %s\n", out);
    return 0;
}
