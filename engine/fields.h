/*
 * engine/fields.h - the machinery behind the field tables of pagellm.h (PL_ENGINE_CONFIG_FIELDS,
 * PL_SAMPLING_PARAMS_FIELDS): descriptor rows, defaults, range checks, setters by name from
 * text or JSON, the struct_size check and the storage of copied values.
 *
 * A table is instantiated once per struct (engine/config.c, engine/sampling_params.c) with the
 * macros below; everything else works on the generic pl_field_table.
 *
 * Binary compatibility: a struct's sizes list holds every sizeof the struct has had in a
 * release. When a field is appended, add the old sizeof to the front of the list: programs
 * built against the old header keep working (their struct_size is known; the fields past it
 * take their defaults).
 */
#ifndef PL_ENGINE_FIELDS_H
#define PL_ENGINE_FIELDS_H

#include <stddef.h>

#include "pagellm.h"
#include "util/status.h"

typedef struct pl_field_table {
    const char *prefix;          /* "config", "sampling": messages say "config.block_size" */
    const pl_field *fields;      /* (n) */
    size_t n;
    size_t struct_size;          /* the library's sizeof */
    const size_t *known_sizes;   /* (n_known) every size the struct has had, ascending */
    size_t n_known;
    void (*defaults)(void *obj); /* every field (not struct_size or storage) to its default */
    const pl_field_alias *aliases; /* (n_aliases) other names the setters take */
    size_t n_aliases;
} pl_field_table;

/* A field named in a message (see util/status.h): REF("config.block_size") reads
 * "config.block_size" in pl_last_error, "--block-size" on the command line, "block_size" in
 * JSON; REF_BARE("config.max_batch_size") reads "max_batch_size" in pl_last_error. */
#define PL_REF(name) PL_MARK name PL_MARK
#define PL_REF_BARE(name) PL_MARK_BARE name PL_MARK_BARE

/* PL_OK when obj's struct_size is one of t's known sizes; else PL_ERR_INVALID_ARGUMENT saying
 * what is wrong (never defaulted, an unknown layout, a newer header). obj NULL is refused. */
pl_status pl_fields_check_size(const pl_field_table *t, const void *obj);
/* The caller's struct as the library's full struct: defaults, then the caller's struct_size
 * bytes over them. Checks the size first. dst has the library's size; dst->struct_size is
 * the library's size and dst->storage the caller's (borrowed). */
pl_status pl_fields_take(const pl_field_table *t, const void *src, void *dst);
/* Fills obj (of struct_size bytes) with the defaults of the fields that fit in it. */
void pl_fields_init(const pl_field_table *t, void *obj, size_t struct_size);
/* Frees what the setters copied into obj's storage. */
void pl_fields_deinit(const pl_field_table *t, void *obj);

/* Every field within its range (enums: a known value; lists: count in range, pointer set
 * when the count is not 0). PL_ERR_INVALID_ARGUMENT naming the first bad field. */
pl_status pl_fields_check_ranges(const pl_field_table *t, const void *obj);
/* "config.top_p = 0: must be in (0, 1]". */
pl_status pl_fields_fail_range(const pl_field_table *t, const pl_field *f, double v);

/* The field called name, or one of its aliases; NULL when none. */
const pl_field *pl_fields_find(const pl_field_table *t, const char *name);
pl_status pl_fields_set_text(const pl_field_table *t, void *obj, const char *name,
                             const char *value);
pl_status pl_fields_set_json(const pl_field_table *t, void *obj, const char *name,
                             const char *json);

/* Writes src (src_size bytes, its struct_size ignored) into a caller's out-struct of
 * dst_size bytes: at most dst_size bytes, and struct_size = what was written. */
void pl_fields_fill_out(void *dst, size_t dst_size, const void *src, size_t src_size);

/* ---- instantiating a table --------------------------------------------------------------
 *
 *     #define ROW(...) PL_FIELD_ROW_(pl_engine_config, __VA_ARGS__)
 *     static const pl_field fields[] = {PL_ENGINE_CONFIG_FIELDS(ROW)};
 *     #define DEF(...) PL_FIELD_DEFAULT_(cfg, __VA_ARGS__)
 *     static void defaults(void *p) { pl_engine_config *cfg = p; PL_ENGINE_CONFIG_FIELDS(DEF) }
 *
 * An ENUM field's names come from an array called pl_choices_<its C type> (NULL-terminated,
 * indexed by value) that the instantiating file defines. */

#define PL_FIELD_AUX_BOOL(S, name) 0
#define PL_FIELD_AUX_INT(S, name) 0
#define PL_FIELD_AUX_U64(S, name) 0
#define PL_FIELD_AUX_SIZE(S, name) 0
#define PL_FIELD_AUX_DOUBLE(S, name) 0
#define PL_FIELD_AUX_FLOAT(S, name) 0
#define PL_FIELD_AUX_STRING(S, name) 0
#define PL_FIELD_AUX_ENUM(S, name) 0
#define PL_FIELD_AUX_IDS(S, name) offsetof(S, n_##name)
#define PL_FIELD_AUX_STRINGS(S, name) offsetof(S, n_##name)
#define PL_FIELD_AUX_OPT_U64(S, name) offsetof(S, has_##name)
#define PL_FIELD_AUX_BIAS(S, name) offsetof(S, n_##name)

#define PL_FIELD_CHOICES_BOOL(ctype) NULL
#define PL_FIELD_CHOICES_INT(ctype) NULL
#define PL_FIELD_CHOICES_U64(ctype) NULL
#define PL_FIELD_CHOICES_SIZE(ctype) NULL
#define PL_FIELD_CHOICES_DOUBLE(ctype) NULL
#define PL_FIELD_CHOICES_FLOAT(ctype) NULL
#define PL_FIELD_CHOICES_STRING(ctype) NULL
#define PL_FIELD_CHOICES_ENUM(ctype) pl_choices_##ctype
#define PL_FIELD_CHOICES_IDS(ctype) NULL
#define PL_FIELD_CHOICES_STRINGS(ctype) NULL
#define PL_FIELD_CHOICES_OPT_U64(ctype) NULL
#define PL_FIELD_CHOICES_BIAS(ctype) NULL

#define PL_FIELD_ROW_(S, kind_, ctype_, name_, def_, range_, flag_, short_, value_, help_)   \
    {.name = #name_, .kind = PL_FIELD_##kind_, .offset = offsetof(S, name_),                  \
     .aux_offset = PL_FIELD_AUX_##kind_(S, name_), .range = PL_RANGE_STRUCT(range_),          \
     .choices = PL_FIELD_CHOICES_##kind_(ctype_), .flag = flag_, .short_flag = short_,        \
     .value_name = value_, .help = help_},

/* An alias row: PL_ENGINE_CONFIG_ALIASES(PL_FIELD_ALIAS_) */
#define PL_FIELD_ALIAS_(field, alias) {alias, #field},

#define PL_FIELD_SET_BOOL(o, name, def) (o)->name = (def);
#define PL_FIELD_SET_INT(o, name, def) (o)->name = (def);
#define PL_FIELD_SET_U64(o, name, def) (o)->name = (def);
#define PL_FIELD_SET_SIZE(o, name, def) (o)->name = (def);
#define PL_FIELD_SET_DOUBLE(o, name, def) (o)->name = (def);
#define PL_FIELD_SET_FLOAT(o, name, def) (o)->name = (def);
#define PL_FIELD_SET_STRING(o, name, def) (o)->name = (def);
#define PL_FIELD_SET_ENUM(o, name, def) (o)->name = (def);
#define PL_FIELD_SET_IDS(o, name, def) (o)->name = (def), (o)->n_##name = 0;
#define PL_FIELD_SET_STRINGS(o, name, def) (o)->name = (def), (o)->n_##name = 0;
#define PL_FIELD_SET_OPT_U64(o, name, def) (o)->name = (def), (o)->has_##name = false;
#define PL_FIELD_SET_BIAS(o, name, def) (o)->name = (def), (o)->n_##name = 0;
#define PL_FIELD_DEFAULT_(o, kind, ctype, name, def, ...) PL_FIELD_SET_##kind(o, name, def)

#endif
