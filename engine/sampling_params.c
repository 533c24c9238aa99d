/*
 * engine/sampling_params.c - per-request sampling parameters: their table
 * (PL_SAMPLING_PARAMS_FIELDS in pagellm.h) instantiated and the rules between fields.
 */
#include <stddef.h>
#include <string.h>

#include "engine/engine_internal.h"
#include "engine/fields.h"

_Static_assert(sizeof(pl_sampling_params) <= 1024, "pl_fields_init's buffer");

#define ROW(...) PL_FIELD_ROW_(pl_sampling_params, __VA_ARGS__)
static const pl_field fields[] = {PL_SAMPLING_PARAMS_FIELDS(ROW)};

static void defaults(void *obj) {
    pl_sampling_params *p = obj;
#define DEF(...) PL_FIELD_DEFAULT_(p, __VA_ARGS__)
    PL_SAMPLING_PARAMS_FIELDS(DEF)
#undef DEF
}

static const pl_field_alias aliases[] = {PL_SAMPLING_PARAMS_ALIASES(PL_FIELD_ALIAS_)};

/* Every sizeof pl_sampling_params has had in a release (see engine/fields.h): before the
 * constraint fields (json_schema ...), before skip_special_tokens (the struct then ended
 * there, rounded up to its alignment), and now. */
#define SIZE_BEFORE_(member)                                                                   \
    ((offsetof(pl_sampling_params, member) + _Alignof(pl_sampling_params) - 1) /               \
     _Alignof(pl_sampling_params) * _Alignof(pl_sampling_params))
static const size_t sizes[] = {offsetof(pl_sampling_params, json_schema),
                               SIZE_BEFORE_(skip_special_tokens), sizeof(pl_sampling_params)};

static const pl_field_table pl_sampling_params_table = {
    .prefix = "sampling", .fields = fields, .n = sizeof fields / sizeof fields[0],
    .struct_size = sizeof(pl_sampling_params), .known_sizes = sizes,
    .n_known = sizeof sizes / sizeof sizes[0], .defaults = defaults,
    .aliases = aliases, .n_aliases = sizeof aliases / sizeof aliases[0],
};

const pl_field_alias *pl_sampling_params_aliases(size_t *out_n) {
    if (out_n) *out_n = pl_sampling_params_table.n_aliases;
    return aliases;
}

const pl_field *pl_sampling_params_fields(size_t *out_n) {
    if (out_n) *out_n = pl_sampling_params_table.n;
    return fields;
}

void pl_sampling_params_init(pl_sampling_params *p, size_t struct_size) {
    pl_fields_init(&pl_sampling_params_table, p, struct_size);
}

void pl_sampling_params_deinit(pl_sampling_params *p) {
    pl_fields_deinit(&pl_sampling_params_table, p);
}

size_t pl_sampling_params_struct_size(void) { return pl_sampling_params_table.struct_size; }

pl_status pl_sampling_params_set(pl_sampling_params *p, const char *name, const char *value) {
    return pl_fields_set_text(&pl_sampling_params_table, p, name, value);
}

pl_status pl_sampling_params_set_json(pl_sampling_params *p, const char *name,
                                      const char *json) {
    return pl_fields_set_json(&pl_sampling_params_table, p, name, json);
}

static pl_status check(const pl_sampling_params *p, int vocab) {
    PL_TRY(pl_fields_check_ranges(&pl_sampling_params_table, p));
    if (p->max_tokens > 0 && p->min_tokens > p->max_tokens)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       PL_REF("sampling.min_tokens") " = %d: must be in [0, "
                       PL_REF_BARE("sampling.max_tokens") "] (" PL_REF_BARE("sampling.max_tokens")
                       " = %d)",
                       p->min_tokens, p->max_tokens);
    for (size_t i = 0; vocab > 0 && i < p->n_logit_bias; i++)
        if (p->logit_bias[i].token >= vocab)
            return pl_fail(PL_ERR_INVALID_ARGUMENT,
                           PL_REF("sampling.logit_bias") ": token %d is outside the vocabulary "
                           "[0, %d)", (int)p->logit_bias[i].token, vocab);
    int n_constraints = (p->json_schema != NULL) + (p->grammar != NULL) + (p->regex != NULL) +
                        (p->n_choice > 0);
    if (n_constraints > 1)
        return pl_fail(PL_ERR_INVALID_ARGUMENT,
                       "sampling: " PL_REF_BARE("sampling.json_schema") ", "
                       PL_REF_BARE("sampling.grammar") ", " PL_REF_BARE("sampling.regex") " and "
                       PL_REF_BARE("sampling.choice") " exclude each other (%d are set)",
                       n_constraints);
    for (size_t i = 0; vocab > 0 && i < p->n_stop_ids; i++)
        if (p->stop_ids[i] >= vocab)
            return pl_fail(PL_ERR_INVALID_ARGUMENT,
                           PL_REF("sampling.stop_ids") "[%zu] = %d: outside the vocabulary "
                           "[0, %d)", i,
                           (int)p->stop_ids[i], vocab);
    return PL_OK;
}

pl_status pl_sampling_params_validate(const pl_sampling_params *p) {
    if (!p) return pl_fail(PL_ERR_INVALID_ARGUMENT, "sampling parameters are NULL");
    pl_sampling_params full;
    PL_TRY(pl_fields_take(&pl_sampling_params_table, p, &full));
    return check(&full, 0);
}

pl_status pl_sampling_params_take(const pl_sampling_params *p, int vocab,
                                  pl_sampling_params *out) {
    PL_TRY(pl_fields_take(&pl_sampling_params_table, p, out));
    PL_TRY(check(out, vocab));
    out->storage = NULL; /* the caller's; the request copies what it keeps */
    if (out->top_k < 0) out->top_k = 0; /* -1 (vLLM's "off") and 0 mean the same */
    return PL_OK;
}
