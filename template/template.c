/*
 * template/template.c - pl_tmpl_parse and pl_tmpl_free: lex, parse and check into the
 * template's arena (see template.h for what is supported and refused).
 */
#include "template/tmpl_internal.h"

#include "util/alloc.h"

pl_status pl_tmpl_parse(const char *src, size_t len, pl_tmpl **out) {
    if (!src || !out) return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_tmpl_parse: NULL argument");
    if (len > PL_TMPL_MAX_SOURCE)
        return pl_fail(PL_ERR_TOO_LONG, "template: %zu bytes exceeds the limit of %zu", len,
                       PL_TMPL_MAX_SOURCE);
    pl_tmpl *t = pl_calloc(1, sizeof *t);
    if (!t) return pl_fail(PL_ERR_OUT_OF_MEMORY, "template: out of memory");
    pl_tm_arena_init(&t->a, 0);
    pl_tm_tok *toks = NULL;
    size_t n = 0;
    pl_status st = pl_tm_lex(src, len, &t->a, &toks, &n);
    if (st == PL_OK) st = pl_tm_parse(toks, n, src, len, &t->a, &t->body, &t->n_body);
    pl_free(toks);
    if (st != PL_OK) {
        pl_tmpl_free(t);
        return st;
    }
    *out = t;
    return PL_OK;
}

void pl_tmpl_free(pl_tmpl *t) {
    if (!t) return;
    pl_tm_arena_free(&t->a);
    pl_free(t);
}
