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

/* How argv[*i] names f: 0 not at all; 1 as a flag whose value follows; 2 as "--flag=value"
 * (*inline_value set); 3 as a boolean's "on" flag; 4 as its "off" flag. */
static int match(const pl_field *f, const char *a, const char **inline_value) {
    if (!f->flag) return 0;
    size_t len = strlen(f->flag);
    if (f->kind == PL_FIELD_BOOL) {
        char neg[64];
        negation(f, neg, sizeof neg);
        if (!strcmp(a, f->flag)) return 3;
        if (!strcmp(a, neg)) return 4;
    } else if (!strcmp(a, f->flag)) {
        return 1;
    } else if (f->short_flag && a[0] == '-' && a[1] == f->short_flag && !a[2]) {
        return 1;
    }
    if (!strncmp(a, f->flag, len) && a[len] == '=') {
        *inline_value = a + len + 1;
        return 2;
    }
    return 0;
}

static int field_flag(const pl_field *fields, size_t n, void *obj, setter set, int argc,
                      char **argv, int *i) {
    const char *a = argv[*i], *value = NULL;
    for (size_t k = 0; k < n; k++) {
        const pl_field *f = &fields[k];
        int how = match(f, a, &value);
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
            if (s != PL_OK) {
                fprintf(stderr, "pagellm: %s: %s\n", f->flag, pl_last_error());
                return -1;
            }
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
            if (s != PL_OK) {
                fprintf(stderr, "pagellm: %s: %s\n", f->flag, pl_last_error());
                return -1;
            }
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
                    fprintf(stderr, "pagellm: %s: %s\n", f->flag, pl_last_error());
                    free(item);
                    return -1;
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
        if (set(obj, f->name, value) != PL_OK) {
            fprintf(stderr, "pagellm: %s: %s\n", f->flag, pl_last_error());
            return -1;
        }
        return 1;
    }
    return 0;
}

int cli_engine_flag(pl_engine_config *c, int argc, char **argv, int *i) {
    size_t n;
    const pl_field *f = pl_engine_config_fields(&n);
    return field_flag(f, n, c, set_config, argc, argv, i);
}

int cli_sampling_flag(pl_sampling_params *p, int argc, char **argv, int *i) {
    size_t n;
    const pl_field *f = pl_sampling_params_fields(&n);
    return field_flag(f, n, p, set_sampling, argc, argv, i);
}

int cli_chat_flag(pl_chat_options *o, int argc, char **argv, int *i) {
    size_t n;
    const pl_field *f = pl_chat_options_fields(&n);
    return field_flag(f, n, o, set_chat, argc, argv, i);
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

static void print_fields(const char *title, const pl_field *fields, size_t n,
                         const void *defaults) {
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
                     f->kind == PL_FIELD_STRINGS || f->kind == PL_FIELD_OPT_U64;
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
        bool gbnf = f->value_name && !strcmp(f->value_name, "GBNF");
        bool list = f->value_name && !strcmp(f->value_name, "A,B");
        snprintf(text, sizeof text, "%s%s%s%s", f->help,
                 is_json_field(f) ? " (the JSON text, or a file holding it)"
                 : gbnf ? " (the grammar text, or a file holding it)"
                 : list ? " (comma-separated; \\, for a comma; repeatable)" : "",
                 choices, dflt);
        cli_wrap(text, indent, indent);
    }
}

void cli_print_engine_flags(void) {
    pl_engine_config d;
    pl_engine_config_default(&d);
    size_t n;
    const pl_field *f = pl_engine_config_fields(&n);
    print_fields("engine flags [default]", f, n, &d);
}

void cli_print_sampling_flags(void) {
    pl_sampling_params d;
    pl_sampling_params_default(&d);
    size_t n;
    const pl_field *f = pl_sampling_params_fields(&n);
    print_fields("sampling flags [default]", f, n, &d);
}

void cli_print_chat_flags(void) {
    pl_chat_options d;
    pl_chat_options_default(&d);
    size_t n;
    const pl_field *f = pl_chat_options_fields(&n);
    print_fields("chat flags [default]", f, n, &d);
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
