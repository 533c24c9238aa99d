/*
 * cli/cli_files.c - the files a command reads whole: the prompts file's bytes, a chat's
 * messages, a JSON flag's value, a chat template.
 *
 * Every failure names the file (and for JSON the line and column), so a user who passed the
 * wrong file sees which.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"

bool cli_read_file(const char *path, char **out, size_t *out_len, char *err, size_t err_cap) {
    bool is_stdin = !strcmp(path, "-");
    const char *name = is_stdin ? "<stdin>" : path;
    FILE *f = is_stdin ? stdin : fopen(path, "rb");
    if (!f) {
        snprintf(err, err_cap, "%s: cannot open: %s", path, strerror(errno));
        return false;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int read_errno = 0;
    for (;;) {
        if (len + 1 >= cap) { /* room for the NUL too */
            size_t nc = cap ? 2 * cap : 65536;
            char *g = realloc(buf, nc);
            if (!g) {
                free(buf);
                if (!is_stdin) fclose(f);
                snprintf(err, err_cap, "%s: out of memory", name);
                return false;
            }
            buf = g, cap = nc;
        }
        errno = 0;
        size_t r = fread(buf + len, 1, cap - 1 - len, f);
        len += r;
        if (r == 0) {
            read_errno = errno;
            break;
        }
    }
    bool io_err = ferror(f);
    if (!is_stdin) fclose(f);
    if (io_err) {
        free(buf);
        /* a directory opens but cannot be read: errno says so (EISDIR) */
        snprintf(err, err_cap, "%s: cannot read: %s", name,
                 read_errno ? strerror(read_errno) : "read error");
        return false;
    }
    buf[len] = '\0';
    *out = buf;
    *out_len = len;
    return true;
}

/* Parses text as JSON, naming where as "WHERE: invalid JSON at line L, column C: ...". */
static json_t *parse_json(const char *where, const char *text, size_t len, char *err,
                          size_t err_cap) {
    json_error_t jerr;
    json_t *v = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (!v)
        snprintf(err, err_cap, "%s: invalid JSON at line %d, column %d: %s", where, jerr.line,
                 jerr.column, jerr.text);
    return v;
}

bool cli_check_messages(const json_t *v, char *why, size_t cap) {
    if (!json_is_array(v)) {
        snprintf(why, cap, "must be a JSON array of messages ({\"role\": ..., \"content\": ...})");
        return false;
    }
    if (json_array_size(v) == 0) {
        snprintf(why, cap, "holds no message");
        return false;
    }
    for (size_t i = 0; i < json_array_size(v); i++) {
        const json_t *m = json_array_get(v, i);
        if (!json_is_object(m)) {
            snprintf(why, cap, "message %zu is not a JSON object", i + 1);
            return false;
        }
        if (!json_is_string(json_object_get(m, "role"))) {
            snprintf(why, cap, "message %zu: \"role\" must be a string", i + 1);
            return false;
        }
    }
    return true;
}

bool cli_messages_load(const char *path, char **out_json, char *err, size_t err_cap) {
    char *text;
    size_t len;
    if (!cli_read_file(path, &text, &len, err, err_cap)) return false;
    const char *name = strcmp(path, "-") ? path : "<stdin>";
    if (strlen(text) != len) {
        snprintf(err, err_cap, "%s: holds a NUL byte", name);
        free(text);
        return false;
    }
    json_t *v = parse_json(name, text, len, err, err_cap);
    if (!v) {
        free(text);
        return false;
    }
    char why[256];
    bool ok = cli_check_messages(v, why, sizeof why);
    json_decref(v);
    if (!ok) {
        snprintf(err, err_cap, "%s: %s", name, why);
        free(text);
        return false;
    }
    *out_json = text; /* the file's own text: numbers and key order exactly as written */
    return true;
}

static bool is_regular_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

bool cli_json_arg(const char *flag, const char *value, char **out, char *err, size_t err_cap) {
    char *text;
    size_t len;
    char where[600];
    if (is_regular_file(value) || !strcmp(value, "-")) {
        char ferr[512];
        if (!cli_read_file(value, &text, &len, ferr, sizeof ferr)) {
            snprintf(err, err_cap, "%s %s", flag, ferr);
            return false;
        }
        snprintf(where, sizeof where, "%s %s", flag, strcmp(value, "-") ? value : "<stdin>");
        if (strlen(text) != len) {
            snprintf(err, err_cap, "%s: holds a NUL byte", where);
            free(text);
            return false;
        }
    } else {
        const char *p = value + strspn(value, " \t\r\n");
        if (*p != '[' && *p != '{') {
            snprintf(err, err_cap, "%s: '%.200s': no such file, and not JSON text (an array "
                     "or object)", flag, value);
            return false;
        }
        if (!(text = strdup(value))) {
            snprintf(err, err_cap, "%s: out of memory", flag);
            return false;
        }
        len = strlen(text);
        snprintf(where, sizeof where, "%s", flag);
    }
    json_t *v = parse_json(where, text, len, err, err_cap);
    if (!v) {
        free(text);
        return false;
    }
    json_decref(v);
    *out = text;
    return true;
}

bool cli_template_arg(const char *flag, const char *value, char **out, char *err,
                      size_t err_cap) {
    if (is_regular_file(value)) {
        char ferr[512];
        size_t len;
        if (!cli_read_file(value, out, &len, ferr, sizeof ferr)) {
            snprintf(err, err_cap, "%s %s", flag, ferr);
            return false;
        }
        if (strlen(*out) != len) {
            snprintf(err, err_cap, "%s %s: holds a NUL byte", flag, value);
            free(*out);
            return false;
        }
        return true;
    }
    /* the engine's rule for config.chat_template: template text has {{ or {% */
    if (!strstr(value, "{{") && !strstr(value, "{%")) {
        snprintf(err, err_cap, "%s: '%.200s': no such file, and not template text (no {{ or {%%)",
                 flag, value);
        return false;
    }
    if (!(*out = strdup(value))) {
        snprintf(err, err_cap, "%s: out of memory", flag);
        return false;
    }
    return true;
}

bool cli_grammar_arg(const char *flag, const char *value, char **out, char *err, size_t err_cap) {
    if (is_regular_file(value) || !strcmp(value, "-")) {
        char ferr[512];
        size_t len;
        if (!cli_read_file(value, out, &len, ferr, sizeof ferr)) {
            snprintf(err, err_cap, "%s %s", flag, ferr);
            return false;
        }
        if (strlen(*out) != len) {
            snprintf(err, err_cap, "%s %s: holds a NUL byte", flag, value);
            free(*out);
            return false;
        }
        return true;
    }
    /* grammar text has a rule */
    if (!strstr(value, "::=")) {
        snprintf(err, err_cap, "%s: '%.200s': no such file, and not grammar text (no ::=)", flag,
                 value);
        return false;
    }
    if (!(*out = strdup(value))) {
        snprintf(err, err_cap, "%s: out of memory", flag);
        return false;
    }
    return true;
}
