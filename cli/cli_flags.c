/*
 * cli/cli_flags.c - strict parsing of numbers, and the engine, sampling and chat flags.
 *
 * The flags are not written here: each is a row of pagellm.h's field tables, read through
 * pl_engine_config_fields / pl_sampling_params_fields / pl_chat_options_fields, and set
 * through the library's setters (which check the range and name the field). So a new config field gets its flag, help,
 * range check and default the moment it is added to the table.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

#include "cli/cli.h"

bool cli_int(const char *flag, const char *s, long long lo, long long hi, long long *out) {
    if (!s) {
        fprintf(stderr, "pagellm: %s: missing value\n", flag);
        return false;
    }
    errno = 0;
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno) {
        fprintf(stderr, "pagellm: %s: '%s' is not an integer\n", flag, s);
        return false;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "pagellm: %s: %lld is outside [%lld, %lld]\n", flag, v, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

bool cli_float(const char *flag, const char *s, double lo, double hi, double *out) {
    if (!s) {
        fprintf(stderr, "pagellm: %s: missing value\n", flag);
        return false;
    }
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v)) {
        fprintf(stderr, "pagellm: %s: '%s' is not a number\n", flag, s);
        return false;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "pagellm: %s: %g is outside [%g, %g]\n", flag, v, lo, hi);
        return false;
    }
    *out = v;
    return true;
}

/* ---- flags from the field tables ------------------------------------------------------ */

typedef pl_status (*setter)(void *obj, const char *name, const char *value);

static pl_status set_config(void *obj, const char *name, const char *value) {
    return pl_engine_config_set(obj, name, value);
}

static pl_status set_sampling(void *obj, const char *name, const char *value) {
    return pl_sampling_params_set(obj, name, value);
}

static pl_status set_chat(void *obj, const char *name, const char *value) {
    return pl_chat_options_set(obj, name, value);
}

/* A string field whose value is JSON (the chat options' tools, chat_template_kwargs): the
 * command line also takes a file holding it. */
static bool is_json_field(const pl_field *f) {
    return f->kind == PL_FIELD_STRING && f->value_name && !strcmp(f->value_name, "JSON");
}

/* A boolean's "off" flag: "--enable-prefix-caching" -> "--no-prefix-caching",
 * "--ignore-eos" -> "--no-ignore-eos". */
static void negation(const pl_field *f, char *buf, size_t cap) {
    const char *rest = f->flag + 2;
    if (!strncmp(rest, "enable-", 7)) rest += 7;
    snprintf(buf, cap, "--no-%s", rest);
}

/* Whether a (up to its '=' when inline) spells "--" + name: name is a flag without its
 * dashes or a field name or alias with '_' (cli_is folds '_' and '-'). */
static bool spells(const char *a, const char *name, const char **inline_value) {
    if (a[0] != '-' || a[1] != '-') return false;
    char buf[128];
    size_t k = strcspn(a, "=");
    if (k >= sizeof buf) return false;
    memcpy(buf, a, k);
    buf[k] = '\0';
    char want[128];
    snprintf(want, sizeof want, "--%s", name);
    if (!cli_is(buf, want)) return false;
    *inline_value = a[k] == '=' ? a + k + 1 : NULL;
    return true;
}

/* How argv[*i] names f: 0 not at all; 1 as a flag whose value follows; 2 as "--flag=value"
 * (*inline_value set); 3 as a boolean's "on" flag; 4 as its "off" flag. The flag, the field's
 * name and its aliases all name it ("--kv-dtype", "--kv_dtype", "--kv-cache-dtype"); a
 * boolean's off flag is "--no-" and any of them ("--no-prefix-caching",
 * "--no-enable-prefix-caching"). */
static int match(const pl_field *f, const pl_field_alias *aliases, size_t n_aliases,
                 const char *a, const char **inline_value) {
    if (!f->flag) return 0;
    const char *spellings[16];
    size_t n = 0;
    char neg[64];
    negation(f, neg, sizeof neg);
    spellings[n++] = f->flag + 2;
    spellings[n++] = f->name;
    for (size_t i = 0; i < n_aliases && n < 16; i++)
        if (!strcmp(aliases[i].name, f->name)) spellings[n++] = aliases[i].alias;
    if (f->short_flag && a[0] == '-' && a[1] == f->short_flag && !a[2]) return 1;
    for (size_t i = 0; i < n; i++) {
        const char *v = NULL;
        if (spells(a, spellings[i], &v)) {
            if (f->kind == PL_FIELD_BOOL && !v) return 3;
            if (v) *inline_value = v;
            return v ? 2 : 1;
        }
        if (f->kind == PL_FIELD_BOOL) {
            char off[96];
            snprintf(off, sizeof off, "no-%s", spellings[i]);
            if (spells(a, off, &v) && !v) return 4;
        }
    }
    if (f->kind == PL_FIELD_BOOL && spells(a, neg + 2, inline_value) && !*inline_value) return 4;
    return 0;
}

/* A value the library refused: its message names the field by its flag; an alias typed is
 * named first, so the user sees what they wrote. */
static int refused(const pl_field *f, const char *typed) {
    char name[128];
    size_t k = strcspn(typed, "=");
    snprintf(name, sizeof name, "%.*s", (int)(k < 127 ? k : 127), typed);
    const char *msg = pl_last_error_as(PL_NAMING_FLAG);
    if (!strncmp(msg, f->flag, strlen(f->flag)) && cli_is(name, f->flag))
        fprintf(stderr, "pagellm: %s\n", msg);
    else
        fprintf(stderr, "pagellm: %s: %s\n", name, msg);
    return -1;
}

/* vLLM's dotted form of a JSON-valued flag: "--kv-events-config.endpoint VALUE" (or
 * "...endpoint=VALUE") sets one key of the object the flag holds, merged into what earlier
 * flags gave; "a.b" reaches into nested objects, '-' in a key reads as '_'. The value is JSON
 * when it parses as JSON (true, 5, null, "x"), else the text itself. Returns 1 (set), 0 (not
 * this form), -1 (refused, message printed). */
static int dotted_flag(const pl_field *f, void *obj, setter set, int argc, char **argv,
                       int *i) {
    const char *a = argv[*i];
    if (!f->flag || !is_json_field(f)) return 0;
    size_t len = strlen(f->flag);
    if (strncmp(a, f->flag, len) != 0 || a[len] != '.' || !a[len + 1]) return 0;
    const char *key = a + len + 1, *eq = strchr(key, '='), *value;
    size_t key_len = eq ? (size_t)(eq - key) : strlen(key);
    if (eq) {
        value = eq + 1;
    } else if (*i + 1 < argc) {
        value = argv[++*i];
    } else {
        fprintf(stderr, "pagellm: %s: missing value\n", a);
        return -1;
    }
    const char *cur = *(const char **)((char *)obj + f->offset);
    json_t *root = cur ? json_loads(cur, 0, NULL) : json_object();
    if (!json_is_object(root)) {
        fprintf(stderr, "pagellm: %.*s: %s does not hold a JSON object to set a key in\n",
                (int)(len + 1 + key_len), a, f->flag);
        json_decref(root);
        return -1;
    }
    json_t *v = json_loads(value, JSON_DECODE_ANY, NULL);
    if (!v) v = json_string(value);
    char path[256];
    snprintf(path, sizeof path, "%.*s", (int)key_len, key);
    for (char *c = path; *c; c++)
        if (*c == '-') *c = '_';
    json_t *node = root;
    int rc = 1;
    for (char *part = path, *dot; rc == 1; part = dot + 1) {
        dot = strchr(part, '.');
        if (!*part || (dot && dot == part)) {
            fprintf(stderr, "pagellm: %s: an empty key\n", a);
            rc = -1;
            break;
        }
        if (!dot) {
            json_object_set(node, part, v);
            break;
        }
        *dot = '\0';
        json_t *child = json_object_get(node, part);
        if (!child) {
            child = json_object();
            json_object_set_new(node, part, child);
        } else if (!json_is_object(child)) {
            fprintf(stderr, "pagellm: %s: %s is not an object\n", a, part);
            rc = -1;
        }
        node = child;
    }
    json_decref(v);
    char *text = rc == 1 ? json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    if (rc == 1 && (!text || set(obj, f->name, text) != PL_OK)) {
        fprintf(stderr, "pagellm: %s: %s\n", a, text ? pl_last_error() : "out of memory");
        rc = -1;
    }
    free(text);
    return rc;
}

static int field_flag(const pl_field *fields, size_t n, const pl_field_alias *aliases,
                      size_t n_aliases, void *obj, setter set, int argc, char **argv, int *i) {
    const char *a = argv[*i], *value = NULL;
    for (size_t k = 0; k < n; k++) {
        const pl_field *f = &fields[k];
        int dotted = dotted_flag(f, obj, set, argc, argv, i);
        if (dotted) return dotted;
        int how = match(f, aliases, n_aliases, a, &value);
        if (!how) continue;
        if (how == 1) {
            if (*i + 1 >= argc) {
                fprintf(stderr, "pagellm: %s: missing value\n", a);
                return -1;
            }
            value = argv[++*i];
        } else if (how == 3 || how == 4) {
            value = how == 3 ? "true" : "false";
        }
        if (is_json_field(f)) {
            char *json, err[1024];
            if (!cli_json_arg(f->flag, value, &json, err, sizeof err)) {
                fprintf(stderr, "pagellm: %s\n", err);
                return -1;
            }
            pl_status s = set(obj, f->name, json); /* copied into the struct's storage */
            free(json);
            if (s != PL_OK) return refused(f, a);
            return 1;
        }
        if (f->kind == PL_FIELD_STRING && f->value_name && !strcmp(f->value_name, "GBNF")) {
            char *text, err[1024];
            if (!cli_grammar_arg(f->flag, value, &text, err, sizeof err)) {
                fprintf(stderr, "pagellm: %s\n", err);
                return -1;
            }
            pl_status s = set(obj, f->name, text); /* copied into the struct's storage */
            free(text);
            if (s != PL_OK) return refused(f, a);
            return 1;
        }
        if (f->kind == PL_FIELD_STRINGS && f->value_name && !strcmp(f->value_name, "A,B")) {
            /* a comma-separated list, each item appended; "\\," is a comma inside an item */
            size_t len = strlen(value);
            char *item = malloc(len + 1);
            if (!item) {
                fprintf(stderr, "pagellm: %s: out of memory\n", f->flag);
                return -1;
            }
            size_t k = 0;
            for (size_t j = 0; j <= len; j++) {
                if (value[j] == '\\' && value[j + 1] == ',') {
                    item[k++] = ',';
                    j++;
                    continue;
                }
                if (value[j] != ',' && value[j] != '\0') {
                    item[k++] = value[j];
                    continue;
                }
                item[k] = '\0';
                k = 0;
                if (set(obj, f->name, item) != PL_OK) {
                    free(item);
                    return refused(f, a);
                }
            }
            free(item);
            return 1;
        }
        if (f->kind == PL_FIELD_STRING) {
            /* argv outlives every engine the command makes: point at it, copy nothing */
            *(const char **)((char *)obj + f->offset) = value;
            return 1;
        }
        if (set(obj, f->name, value) != PL_OK) return refused(f, a);
        return 1;
    }
    return 0;
}

int cli_engine_flag(pl_engine_config *c, int argc, char **argv, int *i) {
    size_t n, n_aliases;
    const pl_field *f = pl_engine_config_fields(&n);
    const pl_field_alias *al = pl_engine_config_aliases(&n_aliases);
    return field_flag(f, n, al, n_aliases, c, set_config, argc, argv, i);
}

/* "-n" was --max-tokens (llama.cpp's meaning) while "--n" is the number of samples (vLLM's):
 * two meanings one keystroke apart, so "-n" is refused with both spelt out. */
static int refuse_short_n(const char *a) {
    if (strcmp(a, "-n") != 0) return 0;
    fprintf(stderr, "pagellm: -n: ambiguous, and not a flag: output tokens are --max-tokens N "
                    "(llama.cpp's -n), samples per prompt are --n N (vLLM's n)\n");
    return -1;
}

int cli_sampling_flag(pl_sampling_params *p, int argc, char **argv, int *i) {
    if (refuse_short_n(argv[*i])) return -1;
    size_t n, n_aliases;
    const pl_field *f = pl_sampling_params_fields(&n);
    const pl_field_alias *al = pl_sampling_params_aliases(&n_aliases);
    return field_flag(f, n, al, n_aliases, p, set_sampling, argc, argv, i);
}

int cli_chat_flag(pl_chat_options *o, int argc, char **argv, int *i) {
    size_t n;
    const pl_field *f = pl_chat_options_fields(&n);
    return field_flag(f, n, NULL, 0, o, set_chat, argc, argv, i);
}

void cli_wrap(const char *text, int col, int indent) {
    const int width = 100;
    const char *p = text;
    while (*p) {
        const char *word = p;
        while (*p && *p != ' ') p++;
        int len = (int)(p - word);
        if (col + 1 + len > width && col > indent) {
            printf("\n%*s", indent, "");
            col = indent;
        } else if (col > indent) {
            putchar(' ');
            col++;
        }
        printf("%.*s", len, word);
        col += len;
        while (*p == ' ') p++;
    }
    putchar('\n');
}

/* "auto, f32, f16, bf16" (first names only; aliases after '|' are accepted, not listed). */
static void choices_text(const pl_field *f, char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; f->choices[i] && used < cap; i++) {
        const char *c = f->choices[i], *bar = strchr(c, '|');
        int len = bar ? (int)(bar - c) : (int)strlen(c);
        used += (size_t)snprintf(buf + used, cap - used, "%s%.*s", i ? ", " : "", len, c);
    }
}

/* " (also --kv-cache-dtype)": the aliases of f whose flags differ from its own. */
static void aliases_text(const pl_field *f, const pl_field_alias *aliases, size_t n_aliases,
                         char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n_aliases && used < cap; i++) {
        if (strcmp(aliases[i].name, f->name) != 0) continue;
        char flag[96];
        snprintf(flag, sizeof flag, "--%s", aliases[i].alias);
        if (cli_is(flag, f->flag)) continue;
        for (char *c = flag; *c; c++)
            if (*c == '_') *c = '-';
        used += (size_t)snprintf(buf + used, cap - used, "%s%s", used ? ", " : " (also ", flag);
    }
    if (used && used < cap) snprintf(buf + used, cap - used, ")");
}

static void print_fields(const char *title, const pl_field *fields, size_t n,
                         const pl_field_alias *aliases, size_t n_aliases, const void *defaults) {
    printf("%s:\n", title);
    for (size_t k = 0; k < n; k++) {
        const pl_field *f = &fields[k];
        if (!f->flag) continue;
        char head[96], neg[64] = "";
        if (f->kind == PL_FIELD_BOOL) negation(f, neg, sizeof neg);
        const char *value_name = is_json_field(f) ? "JSON|FILE"
                                 : f->value_name && !strcmp(f->value_name, "GBNF") ? "GBNF|FILE"
                                 : f->value_name;
        int col = snprintf(head, sizeof head, "  %c%c%s%s%s%s%s%s", f->short_flag ? '-' : ' ',
                           f->short_flag ? f->short_flag : ' ', f->short_flag ? ", " : "  ",
                           f->flag, value_name ? " " : "", value_name ? value_name : "",
                           neg[0] ? ", " : "", neg);
        printf("%s", head);
        int indent = 34;
        if (col >= indent - 1) {
            printf("\n%*s", indent, "");
        } else {
            printf("%*s", indent - col, "");
        }
        char text[1024], dflt[128] = "", choices[200] = "";
        if (f->kind == PL_FIELD_ENUM) {
            char names[160];
            choices_text(f, names, sizeof names);
            snprintf(choices, sizeof choices, " (%s)", names);
        }
        bool unset = f->kind == PL_FIELD_STRING || f->kind == PL_FIELD_IDS ||
                     f->kind == PL_FIELD_STRINGS || f->kind == PL_FIELD_OPT_U64 ||
                     f->kind == PL_FIELD_BIAS;
        if (!unset) {
            char v[96];
            pl_field_to_json(f, defaults, v, sizeof v);
            if (v[0] == '"') { /* an enum's name: without the quotes */
                size_t l = strlen(v);
                memmove(v, v + 1, l - 2);
                v[l - 2] = '\0';
            }
            snprintf(dflt, sizeof dflt, " [%s]", v);
        }
        char also[160];
        aliases_text(f, aliases, n_aliases, also, sizeof also);
        bool gbnf = f->value_name && !strcmp(f->value_name, "GBNF");
        bool list = f->value_name && !strcmp(f->value_name, "A,B");
        snprintf(text, sizeof text, "%s%s%s%s%s", f->help,
                 is_json_field(f) ? " (the JSON text, or a file holding it)"
                 : gbnf ? " (the grammar text, or a file holding it)"
                 : list ? " (comma-separated; \\, for a comma; repeatable)" : "",
                 choices, dflt, also);
        cli_wrap(text, indent, indent);
    }
}

void cli_print_engine_flags(void) {
    pl_engine_config d;
    pl_engine_config_default(&d);
    size_t n;
    const pl_field *f = pl_engine_config_fields(&n);
    size_t n_aliases;
    const pl_field_alias *al = pl_engine_config_aliases(&n_aliases);
    print_fields("engine flags [default]", f, n, al, n_aliases, &d);
}

void cli_sampling_defaults(pl_sampling_params *p) {
    pl_sampling_params_default(p);
    p->max_tokens = 0;
}

void cli_print_sampling_flags(void) {
    pl_sampling_params d;
    pl_sampling_params_default(&d);
    cli_print_sampling_flags_from(&d);
}

void cli_print_sampling_flags_from(const pl_sampling_params *defaults) {
    const pl_sampling_params d = *defaults;
    size_t n;
    const pl_field *f = pl_sampling_params_fields(&n);
    size_t n_aliases;
    const pl_field_alias *al = pl_sampling_params_aliases(&n_aliases);
    print_fields("sampling flags [default]", f, n, al, n_aliases, &d);
}

void cli_print_chat_flags(void) {
    pl_chat_options d;
    pl_chat_options_default(&d);
    size_t n;
    const pl_field *f = pl_chat_options_fields(&n);
    print_fields("chat flags [default]", f, n, NULL, 0, &d);
}

bool cli_id_list(const char *what, const char *s, int32_t **out, size_t *out_n) {
    size_t cap = 64, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) return false;
    const char *seps = ", \t\r\n[]";
    const char *p = s + strspn(s, seps);
    while (*p) {
        size_t k = strcspn(p, seps);
        char num[32];
        char where[96];
        snprintf(where, sizeof where, "%s: id %zu", what, n + 1);
        long long v;
        if (k >= sizeof num) {
            fprintf(stderr, "pagellm: %s: '%.32s...' is not an integer\n", where, p);
            free(ids);
            return false;
        }
        memcpy(num, p, k);
        num[k] = '\0';
        if (!cli_int(where, num, 0, INT32_MAX, &v)) {
            free(ids);
            return false;
        }
        if (n == cap) {
            int32_t *g = realloc(ids, 2 * cap * sizeof *ids);
            if (!g) {
                free(ids);
                return false;
            }
            ids = g, cap *= 2;
        }
        ids[n++] = (int32_t)v;
        p += k;
        p += strspn(p, seps);
    }
    if (n == 0) {
        fprintf(stderr, "pagellm: %s: no ids given\n", what);
        free(ids);
        return false;
    }
    *out = ids;
    *out_n = n;
    return true;
}
