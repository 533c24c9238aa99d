/*
 * engine/config.c - the engine configuration: its table (PL_ENGINE_CONFIG_FIELDS in pagellm.h)
 * instantiated, the rules between fields, and the values derived from others.
 *
 * Each rule is written once, here: validation is the first thing pl_engine_create does, and
 * the rule that needs the model (chunked prefill off: the context must fit one step) is the
 * same function run again when the model's length is known. Every message names the field,
 * the value given and what is allowed, so a user can fix a flag without reading the source.
 */
#include <string.h>

#include "engine/engine_internal.h"
#include "engine/fields.h"

/* ---- the table ----------------------------------------------------------------------- */

static const char *const pl_choices_pl_dtype[] = {"auto", "f32|float32|float", "f16|float16|half",
                                                  "bf16|bfloat16", NULL};
static const char *const pl_choices_pl_backend_kind[] = {"cpu", "ref", "cuda", NULL};
static const char *const pl_choices_pl_overflow_policy[] = {"reject-newest", "drop-oldest", NULL};
static const char *const pl_choices_pl_dist_backend[] = {"auto", "mpi", "nccl", "threads", NULL};

/* The setters store enums as int. */
_Static_assert(sizeof(pl_dtype) == sizeof(int) && sizeof(pl_backend_kind) == sizeof(int) &&
                   sizeof(pl_overflow_policy) == sizeof(int) &&
                   sizeof(pl_dist_backend) == sizeof(int),
               "enum fields must be int-sized");
_Static_assert(sizeof(pl_engine_config) <= 1024, "pl_fields_init's buffer");

#define ROW(...) PL_FIELD_ROW_(pl_engine_config, __VA_ARGS__)
static const pl_field fields[] = {PL_ENGINE_CONFIG_FIELDS(ROW)};

static void defaults(void *obj) {
    pl_engine_config *c = obj;
#define DEF(...) PL_FIELD_DEFAULT_(c, __VA_ARGS__)
    PL_ENGINE_CONFIG_FIELDS(DEF)
#undef DEF
}

/* Every sizeof pl_engine_config has had in a release (see engine/fields.h). */
static const size_t sizes[] = {sizeof(pl_engine_config)};

static const pl_field_table pl_engine_config_table = {
    .prefix = "config", .fields = fields, .n = sizeof fields / sizeof fields[0],
    .struct_size = sizeof(pl_engine_config), .known_sizes = sizes,
    .n_known = sizeof sizes / sizeof sizes[0], .defaults = defaults,
};

const pl_field *pl_engine_config_fields(size_t *out_n) {
    if (out_n) *out_n = pl_engine_config_table.n;
    return fields;
}

void pl_engine_config_init(pl_engine_config *cfg, size_t struct_size) {
    pl_fields_init(&pl_engine_config_table, cfg, struct_size);
}

void pl_engine_config_deinit(pl_engine_config *cfg) {
    pl_fields_deinit(&pl_engine_config_table, cfg);
}

size_t pl_engine_config_struct_size(void) { return pl_engine_config_table.struct_size; }

pl_status pl_engine_config_set(pl_engine_config *cfg, const char *name, const char *value) {
    return pl_fields_set_text(&pl_engine_config_table, cfg, name, value);
}

pl_status pl_engine_config_set_json(pl_engine_config *cfg, const char *name, const char *json) {
    return pl_fields_set_json(&pl_engine_config_table, cfg, name, json);
}

/* ---- rules between fields ------------------------------------------------------------ */

/* max_batch_size and max_num_seqs: each 0 is derived from the other, so either alone says
 * what the user means ("--max-num-seqs 4" lowers the batch too). */
void pl_engine_config_resolve(pl_engine_config *c) {
    if (pl_fields_check_size(&pl_engine_config_table, c) != PL_OK) return;
    if (c->max_batch_size == 0) {
        int seqs = c->max_num_seqs ? c->max_num_seqs : 256;
        c->max_batch_size = seqs < 32 ? seqs : 32;
    }
    if (c->max_num_seqs == 0) c->max_num_seqs = c->max_batch_size > 256 ? c->max_batch_size : 256;
}

pl_status pl_engine_config_check_model_len(const pl_engine_config *c, int max_model_len,
                                           bool from_model) {
    if (c->enable_chunked_prefill || max_model_len <= c->max_total_tokens) return PL_OK;
    if (from_model)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "config.max_total_tokens = %d: with chunked prefill off it must be >= "
                       "max_model_len (the model's %d), or a long prompt could never be "
                       "scheduled; set max_model_len lower or enable chunked prefill",
                       c->max_total_tokens, max_model_len);
    return pl_fail(PL_ERR_INVALID_ARGUMENT,
                   "config.max_model_len = %d: must be <= max_total_tokens (%d) when chunked "
                   "prefill is off, or a long prompt could never be scheduled",
                   max_model_len, c->max_total_tokens);
}

static pl_status check_rules(const pl_engine_config *c) {
    if (!c->model_path || !c->model_path[0])
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "config.model_path is not set: give a model file, a Hugging Face "
                       "directory or dummy:NAME (there is no default model)");
    int bs = c->block_size;
    if ((bs & (bs - 1)) != 0)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "config.block_size = %d: must be a power of two in [1, 256]", bs);
    if (c->max_batch_size && c->max_num_seqs && c->max_num_seqs < c->max_batch_size)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "config.max_num_seqs = %d: must be >= max_batch_size (%d) (leave one of "
                       "them 0 to derive it from the other)",
                       c->max_num_seqs, c->max_batch_size);
    pl_engine_config r = *c;
    pl_engine_config_resolve(&r);
    if (r.max_total_tokens < r.max_batch_size)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "config.max_total_tokens = %d: must be >= max_batch_size (%d), or a full "
                       "batch of decodes cannot run",
                       r.max_total_tokens, r.max_batch_size);
    if (!c->enable_chunked_prefill && c->long_prefill_threshold > 0)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "config.long_prefill_threshold = %d: applies only with chunked prefill, "
                       "which is off (enable_chunked_prefill = false)",
                       c->long_prefill_threshold);
    if (c->max_model_len) PL_TRY(pl_engine_config_check_model_len(c, c->max_model_len, false));
    return PL_OK;
}

pl_status pl_engine_config_validate(const pl_engine_config *cfg) {
    if (!cfg) return pl_fail(PL_ERR_INVALID_ARGUMENT, "config is NULL");
    pl_engine_config c;
    PL_TRY(pl_fields_take(&pl_engine_config_table, cfg, &c));
    PL_TRY(pl_fields_check_ranges(&pl_engine_config_table, &c));
    return check_rules(&c);
}

pl_status pl_engine_config_take(const pl_engine_config *cfg, pl_engine_config *out) {
    if (!cfg) return pl_fail(PL_ERR_INVALID_ARGUMENT, "config is NULL");
    PL_TRY(pl_engine_config_validate(cfg));
    PL_TRY(pl_fields_take(&pl_engine_config_table, cfg, out));
    pl_engine_config_resolve(out);
    return PL_OK;
}
