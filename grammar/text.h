/*
 * grammar/text.h - writing GBNF text (the front ends' output): a growable buffer, literals
 * and class members with the escapes GBNF needs. Internal to grammar/.
 */
#ifndef PL_GRAMMAR_TEXT_H
#define PL_GRAMMAR_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/status.h"

typedef struct pl_gtext {
    char *p;       /* (n + 1, cap) NUL-terminated */
    size_t n, cap;
    bool oom;      /* an append failed: the text is incomplete */
} pl_gtext;

void pl_gt_put(pl_gtext *t, const char *s, size_t n);
void pl_gt_puts(pl_gtext *t, const char *s);
void pl_gt_printf(pl_gtext *t, const char *fmt, ...) PL_PRINTF(2, 3);
/* "s" as a GBNF literal (s: UTF-8 bytes; other bytes as \x..). */
void pl_gt_literal(pl_gtext *t, const char *s, size_t n);
/* One code point as a member of a GBNF class [...]. */
void pl_gt_class_char(pl_gtext *t, uint32_t cp);
void pl_gt_free(pl_gtext *t);
/* Moves the text out (NULL and PL_ERR_OUT_OF_MEMORY when an append failed). */
pl_status pl_gt_take(pl_gtext *t, char **out);

/* Decodes one UTF-8 character of s[0..n): its length (0 when invalid). */
int pl_gt_utf8(const char *s, size_t n, uint32_t *cp);

/* regex.c: the expression for re (anchors dropped) appended to out; json: inside a JSON
 * string (characters as they appear escaped). *anch_start / *anch_end: the anchors it had.
 * Errors: "regex at offset N: ...". */
pl_status pl_gram_regex_expr(const char *re, size_t len, bool json, pl_gtext *out,
                             bool *anch_start, bool *anch_end);

#endif
