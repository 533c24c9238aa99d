/*
 * grammar/text.c - writing GBNF text, and the choice front end (a list of strings is a rule
 * of literal alternatives).
 */
#include "grammar/text.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "grammar/grammar.h"
#include "util/alloc.h"

void pl_gt_put(pl_gtext *t, const char *s, size_t n) {
    if (t->oom) return;
    if (t->n + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->n + n + 1) cap *= 2;
        char *p = pl_reallocarray(t->p, cap, 1);
        if (!p) {
            t->oom = true;
            return;
        }
        t->p = p;
        t->cap = cap;
    }
    memcpy(t->p + t->n, s, n);
    t->n += n;
    t->p[t->n] = '\0';
}

void pl_gt_puts(pl_gtext *t, const char *s) { pl_gt_put(t, s, strlen(s)); }

void pl_gt_printf(pl_gtext *t, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof buf) {
        pl_gt_put(t, buf, (size_t)n);
        return;
    }
    char *big = pl_malloc((size_t)n + 1);
    if (!big) {
        t->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    pl_gt_put(t, big, (size_t)n);
    pl_free(big);
}

int pl_gt_utf8(const char *str, size_t n, uint32_t *out) {
    const unsigned char *s = (const unsigned char *)str;
    if (n == 0) return 0;
    int len = s[0] < 0x80 ? 1 : (s[0] >> 5) == 6 ? 2 : (s[0] >> 4) == 14 ? 3 : (s[0] >> 3) == 30 ? 4 : 0;
    if (len == 0 || (size_t)len > n) return 0;
    uint32_t cp = len == 1 ? s[0] : s[0] & (0x7Fu >> len);
    for (int k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[k] & 0x3Fu);
    }
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    *out = cp;
    return len;
}

static void put_cp(pl_gtext *t, uint32_t cp, bool in_class) {
    if (cp == '"' && !in_class) pl_gt_puts(t, "\\\"");
    else if (cp == '\\') pl_gt_puts(t, "\\\\");
    else if (in_class && (cp == ']' || cp == '[' || cp == '-' || cp == '^'))
        pl_gt_printf(t, "\\x%02X", cp);
    else if (cp == '\n') pl_gt_puts(t, "\\n");
    else if (cp == '\r') pl_gt_puts(t, "\\r");
    else if (cp == '\t') pl_gt_puts(t, "\\t");
    else if (cp < 0x20 || cp == 0x7F) pl_gt_printf(t, "\\x%02X", cp);
    else if (cp < 0x80) {
        char c = (char)cp;
        pl_gt_put(t, &c, 1);
    } else if (cp <= 0xFFFF) pl_gt_printf(t, "\\u%04X", cp);
    else pl_gt_printf(t, "\\U%08X", cp);
}

void pl_gt_class_char(pl_gtext *t, uint32_t cp) { put_cp(t, cp, true); }

void pl_gt_literal(pl_gtext *t, const char *s, size_t n) {
    pl_gt_puts(t, "\"");
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int len = pl_gt_utf8(s + i, n - i, &cp);
        if (len == 0) { /* not UTF-8: GBNF terminals are code points; keep the byte's value */
            pl_gt_printf(t, "\\x%02X", (unsigned char)s[i]);
            i++;
            continue;
        }
        put_cp(t, cp, false);
        i += (size_t)len;
    }
    pl_gt_puts(t, "\"");
}

void pl_gt_free(pl_gtext *t) {
    pl_free(t->p);
    memset(t, 0, sizeof *t);
}

pl_status pl_gt_take(pl_gtext *t, char **out) {
    if (t->oom || !t->p) {
        bool oom = t->oom;
        pl_gt_free(t);
        if (oom) return pl_fail(PL_ERR_OUT_OF_MEMORY, "grammar: text");
        *out = pl_strdup("");
        return *out ? PL_OK : pl_fail(PL_ERR_OUT_OF_MEMORY, "grammar: text");
    }
    *out = t->p;
    memset(t, 0, sizeof *t);
    return PL_OK;
}

pl_status pl_gram_choice_to_gbnf(const char *const *choices, size_t n, char **out) {
    if (n == 0) return pl_fail(PL_ERR_INVALID_ARGUMENT, "choice: the list is empty");
    pl_gtext t = {0};
    pl_gt_puts(&t, "root ::= ");
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(choices[i]);
        if (len == 0) {
            pl_gt_free(&t);
            return pl_fail(PL_ERR_INVALID_ARGUMENT, "choice[%zu]: an empty string", i);
        }
        for (size_t k = 0; k < len;) {
            uint32_t cp;
            int l = pl_gt_utf8(choices[i] + k, len - k, &cp);
            if (!l) {
                pl_gt_free(&t);
                return pl_fail(PL_ERR_INVALID_ARGUMENT, "choice[%zu]: not UTF-8 at byte %zu", i, k);
            }
            k += (size_t)l;
        }
        if (i) pl_gt_puts(&t, " | ");
        pl_gt_literal(&t, choices[i], len);
    }
    pl_gt_puts(&t, "\n");
    return pl_gt_take(&t, out);
}
