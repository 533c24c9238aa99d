/*
 * engine/error_names.c - the last error with the fields it names written as the user's
 * interface names them (pl_last_error_as): the command line's flags, JSON keys, or the C
 * structs' members.
 *
 * Messages name fields between marks (util/status.h: "config.max_total_tokens" between
 * PL_MARK); here each marked name is looked up in its table (by field name or alias) and
 * written the asked way, so no caller rewrites message text. JSON keys and keyword
 * arguments are vLLM's names where the field has one (its first alias: what the Python
 * package's and the server's users type).
 */
#include <stdio.h>
#include <string.h>

#include "pagellm.h"
#include "util/status.h"

#define CAP 1024

static _Thread_local char tl_named[CAP];

/* The field ref names (table "config", name a field or an alias); *out_alias: its first
 * alias, vLLM's name (NULL when it has none). */
static const pl_field *find(const char *table, size_t table_len, const char *name,
                            size_t name_len, const char **out_alias) {
    const pl_field *fields;
    const pl_field_alias *aliases = NULL;
    size_t n, n_aliases = 0;
    if (table_len == 6 && !memcmp(table, "config", 6)) {
        fields = pl_engine_config_fields(&n);
        aliases = pl_engine_config_aliases(&n_aliases);
    } else if (table_len == 8 && !memcmp(table, "sampling", 8)) {
        fields = pl_sampling_params_fields(&n);
        aliases = pl_sampling_params_aliases(&n_aliases);
    } else if (table_len == 4 && !memcmp(table, "chat", 4)) {
        fields = pl_chat_options_fields(&n);
    } else {
        return NULL;
    }
    for (size_t i = 0; i < n_aliases; i++)
        if (strlen(aliases[i].alias) == name_len && !memcmp(aliases[i].alias, name, name_len)) {
            name = aliases[i].name;
            name_len = strlen(name);
        }
    for (size_t i = 0; i < n; i++) {
        if (strlen(fields[i].name) != name_len || memcmp(fields[i].name, name, name_len))
            continue;
        *out_alias = NULL;
        for (size_t k = 0; k < n_aliases && !*out_alias; k++)
            if (!strcmp(aliases[k].name, fields[i].name)) *out_alias = aliases[k].alias;
        return &fields[i];
    }
    return NULL;
}

/* Appends text[0..len) at *o (within CAP). */
static void put(size_t *o, const char *text, size_t len) {
    if (*o + len >= CAP) len = CAP - 1 - *o;
    memcpy(tl_named + *o, text, len);
    *o += len;
}

/* One marked name, ref[0..len) ("config.block_size"), the asked way. */
static void name_field(size_t *o, const char *ref, size_t len, bool bare, pl_naming naming) {
    const char *dot = memchr(ref, '.', len), *alias = NULL;
    const pl_field *f = dot ? find(ref, (size_t)(dot - ref), dot + 1,
                                   len - (size_t)(dot - ref) - 1, &alias) : NULL;
    if (!f || naming == PL_NAMING_C) { /* as pl_last_error writes it */
        if (bare && dot) put(o, dot + 1, len - (size_t)(dot - ref) - 1);
        else put(o, ref, len);
        return;
    }
    const char *name = naming == PL_NAMING_FLAG && f->flag ? f->flag
                       : naming == PL_NAMING_JSON && alias ? alias : f->name;
    put(o, name, strlen(name));
}

const char *pl_last_error_as(pl_naming naming) {
    if (naming == PL_NAMING_C) return pl_last_error();
    const char *p = pl_last_error_marked();
    size_t o = 0;
    while (*p) {
        if (*p == PL_MARK_CHAR || *p == PL_MARK_BARE_CHAR) {
            char mark = *p;
            const char *end = strchr(p + 1, mark);
            if (!end) { /* a lone mark (cut by the buffer's end): drop it */
                p++;
                continue;
            }
            name_field(&o, p + 1, (size_t)(end - p - 1), mark == PL_MARK_BARE_CHAR, naming);
            p = end + 1;
            continue;
        }
        const char *next = p + strcspn(p, PL_MARK PL_MARK_BARE);
        put(&o, p, (size_t)(next - p));
        p = next;
    }
    tl_named[o] = '\0';
    return tl_named;
}
