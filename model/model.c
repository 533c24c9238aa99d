/*
 * model/model.c - the model module's front door: pl_model_load picks a loader from the path.
 * It calls the loaders and nothing calls it back: what loaders share lives in the helpers
 * (model_internal.h), so a new format is one more loader and one more branch here.
 *
 * Which loader: "dummy:NAME" -> dummy.c; a directory, or a file inside one that is a
 * safetensors file, its index or config.json -> load_hf.c; a file starting with "GGUF" ->
 * load_gguf.c; anything else -> load_llama2c.c, which tells the "ak42"
 * versioned format from the legacy one by its magic.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "model/model_internal.h"
#include "util/alloc.h"

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

pl_status pl_model_load(const char *path, const pl_model_load_options *opt, pl_model **out) {
    return pl_model_load_within(path, opt, 0, out);
}

pl_status pl_model_load_within(const char *path, const pl_model_load_options *opt,
                               uint64_t limit, pl_model **out) {
    if (!out) return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_model_load: out is NULL");
    *out = NULL;
    if (!path || !path[0])
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_model_load: path is NULL or empty");
    pl_model_load_options dflt = {PL_DTYPE_AUTO, 0, 0};
    if (!opt) opt = &dflt;
    if (opt->dtype < PL_DTYPE_AUTO || opt->dtype > PL_DTYPE_BF16)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_model_load: dtype = %d is not a pl_dtype",
                       (int)opt->dtype);
    if (strncmp(path, "dummy:", 6) == 0) return pl_model_load_dummy(path + 6, opt, limit, out);

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
    if (got == 4 && memcmp(magic, "GGUF", 4) == 0)
        return pl_model_load_gguf(path, opt, limit, out);
    return pl_model_load_llama2c(path, opt, limit, out);
}
