/*
 * model/model.c - the model module's front door: pl_model_load picks a loader from the path.
 * It calls the loaders and nothing calls it back: what loaders share lives in the helpers
 * (model_internal.h), so a new format is one more loader and one more branch here.
 *
 * Which loader: "dummy:NAME" -> dummy.c; a directory, or a file inside one that is a
 * safetensors file, its index or config.json -> load_hf.c; a file starting with "GGUF" ->
 * load_gguf.c; anything else -> load_llama2c.c, which tells the "ak42"
 * versioned format from the legacy one by its magic.
 *
 * The legacy llama2.c format has no magic: any file is "a header of seven int32" to it. When
 * such a file fails to load and its header does not even look like one (a value outside
 * what any model has), the message says the file is not a model at all, shows how it
 * starts, and names what it looks like (a tokenizer, JSON, a PyTorch archive), keeping the
 * loader's reason after it.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "model/model_internal.h"
#include "util/alloc.h"
#include "util/dtype.h"

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* A file inside a Hugging Face directory: load the directory, with this file as the weights
 * (NULL for config.json: the directory's own weights). */
static pl_status load_hf_file(const char *path, const pl_model_load_options *opt,
                              uint64_t limit, pl_model **out) {
    const char *slash = strrchr(path, '/');
    char *dir = pl_strdup(slash ? path : ".");
    if (!dir) return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
    if (slash) dir[slash == path ? 1 : (size_t)(slash - path)] = '\0';
    const char *weights = ends_with(path, "config.json") ? NULL : path;
    pl_status s = pl_model_load_hf(dir, weights, opt, limit, out);
    pl_free(dir);
    return s;
}

/* Whether the first 28 bytes read as a legacy llama2.c header could be one: every dimension
 * positive and below anything a model has, n_kv_heads <= n_heads (the loader checks the
 * rest, and the file's size). The versioned format has its magic. */
static bool looks_like_llama2c(const unsigned char *b, size_t n) {
    if (n >= 4 && b[0] == 0x32 && b[1] == 0x34 && b[2] == 0x6b && b[3] == 0x61) return true;
    if (n < 28) return false;
    int32_t v[7];
    for (int i = 0; i < 7; i++)
        v[i] = (int32_t)((uint32_t)b[4 * i] | (uint32_t)b[4 * i + 1] << 8 |
                         (uint32_t)b[4 * i + 2] << 16 | (uint32_t)b[4 * i + 3] << 24);
    int32_t vocab = v[5] < 0 && v[5] != INT32_MIN ? -v[5] : v[5];
    return v[0] > 0 && v[0] <= PL_MODEL_MAX_DIM && v[1] > 0 && v[1] <= PL_MODEL_MAX_HIDDEN &&
           v[2] > 0 && v[2] <= PL_MODEL_MAX_LAYERS && v[3] > 0 && v[3] <= PL_MODEL_MAX_HEADS &&
           v[4] > 0 && v[4] <= v[3] && vocab > 0 && vocab <= PL_MODEL_MAX_VOCAB && v[6] > 0 &&
           v[6] <= PL_MODEL_MAX_SEQ;
}

/* What a file starting with b looks like, when it is a known kind of file that is no model. */
static const char *looks_like(const unsigned char *b, size_t n) {
    size_t i = 0;
    while (i < n && (b[i] == ' ' || b[i] == '\n' || b[i] == '\r' || b[i] == '\t')) i++;
    if (i < n && (b[i] == '{' || b[i] == '['))
        return "JSON text: a Hugging Face model is its folder (config.json and .safetensors), "
               "a tokenizer.json goes to --tokenizer";
    if (n >= 4 && !memcmp(b, "PK\x03\x04", 4))
        return "a zip archive, as PyTorch saves .pt/.pth/.bin checkpoints: convert it to "
               "safetensors or GGUF";
    if (n >= 2 && b[0] == 0x80 && b[1] >= 2 && b[1] <= 5)
        return "a Python pickle (an old PyTorch checkpoint): convert it to safetensors or GGUF";
    if (n >= 2 && b[0] == 0x0a && b[1] > 0)
        return "a protocol buffer, as a SentencePiece tokenizer (.model) is: give it with "
               "--tokenizer";
    return NULL;
}

/* The llama2.c loader refused path: when its header could not be one, say the file is not a
 * model, how it starts and what it looks like; else keep the loader's message. */
static pl_status not_a_model(const char *path) {
    unsigned char b[32];
    size_t n = 0;
    struct stat st;
    long long size = stat(path, &st) == 0 ? (long long)st.st_size : -1;
    FILE *f = fopen(path, "rb");
    if (f) {
        n = fread(b, 1, sizeof b, f);
        fclose(f);
    }
    if (looks_like_llama2c(b, n)) return PL_ERR_FORMAT;
    char why[1024];
    const char *msg = pl_last_error();
    size_t plen = strlen(path);
    if (!strncmp(msg, path, plen) && !strncmp(msg + plen, ": ", 2)) msg += plen + 2;
    snprintf(why, sizeof why, "%s", msg);
    char hex[3 * 16 + 1] = "", text[16 + 1] = "";
    size_t shown = n < 16 ? n : 16;
    for (size_t i = 0, used = 0; i < shown; i++) {
        used += (size_t)snprintf(hex + used, sizeof hex - used, "%s%02x", i ? " " : "", b[i]);
        text[i] = b[i] >= 0x20 && b[i] < 0x7f ? (char)b[i] : '.';
    }
    text[shown] = '\0';
    const char *kind = looks_like(b, n);
    return pl_fail(PL_ERR_FORMAT,
                   "%s: not a GGUF, safetensors or llama2.c file (%lld bytes%s%s \"%s\")%s%s; "
                   "read as a llama2.c header, %s",
                   path, size, n ? ", starting " : "", hex, text, kind ? ": " : "",
                   kind ? kind : "", why);
}

pl_status pl_model_load(const char *path, const pl_model_load_options *opt, pl_model **out) {
    return pl_model_load_within(path, opt, 0, out);
}

static pl_status load_any(const char *path, const pl_model_load_options *opt, uint64_t limit,
                          pl_model **out, const char **format);

pl_status pl_model_load_within(const char *path, const pl_model_load_options *opt,
                               uint64_t limit, pl_model **out) {
    const char *format = NULL;
    pl_status s = load_any(path, opt, limit, out, &format);
    if (s == PL_OK && *out) (*out)->format = format;
    return s;
}

/* Picks the loader; *format: which one. */
static pl_status load_any(const char *path, const pl_model_load_options *opt, uint64_t limit,
                          pl_model **out, const char **format) {
    if (!out) return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_model_load: out is NULL");
    *out = NULL;
    if (!path || !path[0])
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_model_load: path is NULL or empty");
    pl_model_load_options dflt = {PL_DTYPE_AUTO, 0, 0};
    if (!opt) opt = &dflt;
    if (opt->dtype < PL_DTYPE_AUTO || opt->dtype > PL_DTYPE_Q5_K_M)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_model_load: dtype = %d is not a pl_dtype",
                       (int)opt->dtype);
    if (strncmp(path, "dummy:", 6) == 0) {
        *format = "dummy";
        return pl_model_load_dummy(path + 6, opt, limit, out);
    }
    if (pl_dtype_is_quant(opt->dtype))
        return pl_fail(PL_ERR_UNSUPPORTED, "%s: weight_dtype %s draws dummy: models only; "
                       "write a quantised copy of a file with pagellm quantize (or "
                       "pl_model_quantize) and load that", path, pl_dtype_name(opt->dtype));
    *format = "safetensors";

    struct stat st;
    if (stat(path, &st) != 0) return pl_fail(PL_ERR_IO, "%s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) return pl_model_load_hf(path, NULL, opt, limit, out);
    if (!S_ISREG(st.st_mode)) return pl_fail(PL_ERR_IO, "%s: not a regular file", path);
    if (ends_with(path, ".safetensors") || ends_with(path, ".safetensors.index.json") ||
        ends_with(path, "config.json"))
        return load_hf_file(path, opt, limit, out);

    unsigned char magic[4] = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return pl_fail(PL_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t got = fread(magic, 1, sizeof magic, f);
    fclose(f);
    if (got == 4 && memcmp(magic, "GGUF", 4) == 0) {
        *format = "gguf";
        return pl_model_load_gguf(path, opt, limit, out);
    }
    *format = "llama2.c";
    pl_status s = pl_model_load_llama2c(path, opt, limit, out);
    if (s == PL_ERR_FORMAT) return not_a_model(path);
    return s;
}
