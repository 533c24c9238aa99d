/*
 * cli/suggest.c - flags spelt another way, and "did you mean" for the ones that are unknown.
 *
 * Flags are compared with '_' and '-' alike (vLLM's Python arguments are spelt with
 * underscores), so "--max_num_seqs" is "--max-num-seqs". An unknown flag is compared with
 * every flag its command's --help lists (the help is the one list of what a command takes;
 * it is printed into a temporary file only on this error path) and with the field tables'
 * flags and aliases.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

static char fold(char c) { return c == '_' ? '-' : c; }

bool cli_is(const char *arg, const char *flag) {
    if (arg[0] != '-' || arg[1] != '-') return !strcmp(arg, flag);
    for (; *arg && *flag; arg++, flag++)
        if (fold(*arg) != fold(*flag)) return false;
    return !*arg && !*flag;
}

/* Edit distance with adjacent swaps (optimal string alignment), '_' and '-' alike. */
static size_t distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63) return 64;
    size_t d[64][64];
    for (size_t i = 0; i <= la; i++) d[i][0] = i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            size_t cost = fold(a[i - 1]) != fold(b[j - 1]);
            size_t best = d[i - 1][j - 1] + cost;
            if (d[i - 1][j] + 1 < best) best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    return d[la][lb];
}

/* How close b is to what was typed (a): lower is closer; (size_t)-1 when not close. A
 * candidate that starts with the typed text ("--max-tok" of "--max-tokens") is close. */
static size_t closeness(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    size_t d = distance(a, b);
    size_t limit = la < 6 ? 1 : la < 12 ? 2 : la / 4;
    if (d <= limit) return d;
    if (la >= 5 && lb > la) {
        size_t i = 0;
        while (i < la && fold(a[i]) == fold(b[i])) i++;
        if (i == la) return limit + 1;
    }
    return (size_t)-1;
}

const char *cli_closest(const char *typed, const char *const *names, size_t n) {
    const char *best = NULL;
    size_t best_c = (size_t)-1;
    for (size_t i = 0; i < n; i++) {
        if (!names[i]) continue;
        size_t c = closeness(typed, names[i]);
        if (c < best_c) best_c = c, best = names[i];
    }
    return best;
}

/* ---- unknown flags ------------------------------------------------------------------- */

typedef struct names {
    char **v;
    size_t n, cap;
} names;

static void add(names *ns, const char *s, size_t len) {
    if (ns->n == ns->cap) {
        size_t cap = ns->cap ? 2 * ns->cap : 64;
        char **g = realloc(ns->v, cap * sizeof *g);
        if (!g) return;
        ns->v = g, ns->cap = cap;
    }
    char *c = malloc(len + 1);
    if (!c) return;
    memcpy(c, s, len);
    c[len] = '\0';
    ns->v[ns->n++] = c;
}

/* Every "--flag" and "-f" in text, where a flag starts a word. */
static void scan_flags(names *ns, const char *text) {
    for (const char *p = text; *p; p++) {
        if (*p != '-' || (p > text && !strchr(" \t\n,([|", p[-1]))) continue;
        const char *q = p + 1;
        if (*q == '-') q++;
        const char *start = q;
        while ((*q >= 'a' && *q <= 'z') || (*q >= '0' && *q <= '9') || *q == '-') q++;
        if (q == start || (q - p == 2 && p[1] != '-' && !strchr(" ,=\n", *q))) continue;
        add(ns, p, (size_t)(q - p));
        p = q - 1;
    }
}

/* What help() prints, read back through a temporary file (the help functions print to
 * stdout). NULL when that fails: the message then goes without a suggestion. */
static char *capture(void (*help)(void)) {
    fflush(stdout);
    FILE *tmp = tmpfile();
    if (!tmp) return NULL;
    int saved = dup(STDOUT_FILENO);
    if (saved < 0 || dup2(fileno(tmp), STDOUT_FILENO) < 0) {
        if (saved >= 0) close(saved);
        fclose(tmp);
        return NULL;
    }
    help();
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    long len = ftell(tmp);
    char *text = len >= 0 ? malloc((size_t)len + 1) : NULL;
    if (text) {
        rewind(tmp);
        size_t got = fread(text, 1, (size_t)len, tmp);
        text[got] = '\0';
    }
    fclose(tmp);
    return text;
}

static void add_aliases(names *ns, const pl_field_alias *a, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char flag[96];
        int len = snprintf(flag, sizeof flag, "--%s", a[i].alias);
        for (char *c = flag; *c; c++)
            if (*c == '_') *c = '-';
        if (len > 0 && (size_t)len < sizeof flag) add(ns, flag, (size_t)len);
    }
}

int cli_unknown_flag(const char *cmd, const char *typed, void (*help)(void)) {
    names ns = {0};
    char *text = help ? capture(help) : NULL;
    if (text) scan_flags(&ns, text);
    free(text);
    size_t n;
    const pl_field_alias *a = pl_engine_config_aliases(&n);
    add_aliases(&ns, a, n);
    a = pl_sampling_params_aliases(&n);
    add_aliases(&ns, a, n);
    char name[128];
    size_t k = strcspn(typed, "=");
    snprintf(name, sizeof name, "%.*s", (int)(k < 127 ? k : 127), typed);
    bool known = false;
    for (size_t i = 0; i < ns.n && !known; i++) known = cli_is(name, ns.v[i]);
    const char *near = known ? NULL : cli_closest(name, (const char *const *)ns.v, ns.n);
    if (known)
        fprintf(stderr, "pagellm %s: %s: missing value (see --help)\n", cmd, typed);
    else if (near)
        fprintf(stderr, "pagellm %s: unknown flag '%s' (did you mean %s?)\n", cmd, typed, near);
    else if (typed[0] != '-')
        fprintf(stderr, "pagellm %s: unexpected argument '%s' (flags start with --; see "
                        "--help)\n", cmd, typed);
    else
        fprintf(stderr, "pagellm %s: unknown flag '%s' (see --help)\n", cmd, typed);
    for (size_t i = 0; i < ns.n; i++) free(ns.v[i]);
    free(ns.v);
    return 2;
}
