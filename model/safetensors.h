/*
 * model/safetensors.h - reading the tensor tables of safetensors files (internal to model/).
 *
 * A safetensors file is: uint64 little-endian N, N bytes of JSON (an object mapping tensor
 * name -> {"dtype", "shape", "data_offsets": [begin, end]}, plus an optional "__metadata__"),
 * then the data section; offsets are relative to its start. The parser checks everything
 * structural (JSON shape, known dtype, size of shape x dtype == end - begin, offsets inside the
 * data section, no two tensors overlapping) and records where each tensor's bytes are; whether
 * a tensor's dtype and shape suit the model is the caller's business.
 */
#ifndef PL_MODEL_SAFETENSORS_H
#define PL_MODEL_SAFETENSORS_H

#include <jansson.h>

#include "model/model_internal.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PL_ST_MAX_RANK 8
/* The reference implementation refuses larger headers too; this bounds the JSON parse. */
#define PL_ST_MAX_HEADER (100u << 20)

typedef struct pl_st_tensor {
    char *name;                      /* owned */
    char dtype[12];                  /* as written, e.g. "BF16" */
    pl_wtype type;                   /* PL_WTYPE_NONE when not F32/F16/BF16 */
    int rank;
    int64_t shape[PL_ST_MAX_RANK];   /* (rank) */
    const uint8_t *data;             /* inside the file's mapping; any alignment */
    uint64_t n_bytes;
    int file;                        /* which file (index given to pl_model_st_parse) */
} pl_st_tensor;

typedef struct pl_st_table {
    pl_st_tensor *t; /* (n), room for cap; sorted by name after pl_model_st_finish */
    size_t n, cap;
} pl_st_table;

/* Parses f's header and appends its tensors to tab, tagged with file_index.
 * Errors: PL_ERR_FORMAT naming f->path and the tensor or field; PL_ERR_OUT_OF_MEMORY. */
pl_status pl_model_st_parse(const pl_model_file *f, int file_index, pl_st_table *tab);
/* Sorts the table by name for lookup. Errors: PL_ERR_FORMAT naming a tensor present twice
 * (in two shards) and the files, whose paths are file_paths[file index]. */
pl_status pl_model_st_finish(pl_st_table *tab, const char *const *file_paths);
/* The tensor called name, or NULL. Needs pl_model_st_finish. */
const pl_st_tensor *pl_model_st_find(const pl_st_table *tab, const char *name);
void pl_model_st_table_free(pl_st_table *tab);

/* json_loadb for every JSON document model/ reads (config.json, indexes, safetensors headers).
 * The first call routes jansson's allocations through util/alloc.h (json_set_alloc_funcs,
 * once per process under pthread_once), so the fault hook reaches them. On failure
 * *out_of_memory tells an allocation failure (report PL_ERR_OUT_OF_MEMORY) from malformed
 * JSON (PL_ERR_FORMAT): jansson's own error code says "out of memory" on only some of its
 * paths, so a failed allocation on this thread during the parse counts too. */
json_t *pl_model_json_loadb(const char *buf, size_t len, size_t flags, json_error_t *err,
                            bool *out_of_memory);

/* JSON files model/ reads (config.json, generation_config.json, indexes) are at most this. */
#define PL_MODEL_MAX_JSON_BYTES (16u << 20)
/* Maps path and parses it as one JSON object (duplicate keys refused) into *out (caller
 * decrefs). Errors: PL_ERR_IO (cannot open), PL_ERR_FORMAT (too large, not JSON, not an
 * object: the message names the file and the line), PL_ERR_OUT_OF_MEMORY. */
pl_status pl_model_json_load_file(const char *path, json_t **out);

#ifdef __cplusplus
}
#endif
#endif
