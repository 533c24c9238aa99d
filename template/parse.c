/*
 * template/parse.c - tokens -> syntax tree, by @huggingface/jinja's grammar, then the checks
 * that refuse what this interpreter does not support.
 *
 * The grammar mirrors the oracle's recursive-descent parser function for function (lowest
 * precedence first): ternary `a if c else b` / select `a if c`, or, and, not, comparisons and
 * (not) in, + - ~, * / // %, **, `is` tests, | filters, unary - +, calls and member access,
 * primaries. Its quirks are kept: commas are optional between list items and call arguments,
 * `x[a b]` reads as x[a], `**` is left-associative, tests and filters bind tighter than
 * arithmetic.
 *
 * Bounds: recursion (nested parentheses, blocks, `not`/unary chains, chained ternaries) stops
 * at PL_TMPL_MAX_NESTING, and any tree deeper than TREE_DEPTH (long operator chains built by
 * loops) is refused, so neither parsing nor evaluation can run the C stack out.
 */
#include "template/tmpl_internal.h"

#include <stdlib.h>
#include <string.h>

#define TREE_DEPTH 256

typedef struct parser {
    const pl_tm_tok *t;
    size_t n, cur;
    pl_tm_arena *a;
    const char *src;
    size_t src_n;
    int depth;
} parser;

typedef struct node_list {
    pl_tm_node **v;
    size_t n, cap;
} node_list;

/* ---- errors ---------------------------------------------------------------------------- */

static const pl_tm_tok *tok_at(const parser *P, size_t i) { return i < P->n ? &P->t[i] : NULL; }

static pl_status syntax(const parser *P, const char *what) {
    const pl_tm_tok *t = tok_at(P, P->cur);
    if (!t) t = P->n ? &P->t[P->n - 1] : NULL;
    if (!t) return pl_fail(PL_ERR_FORMAT, "template: %s", what);
    return pl_fail(PL_ERR_FORMAT, "template line %d, column %d: %s", t->line,
                   pl_tm_column(P->src, P->src_n, t->off), what);
}

static pl_status oom(void) { return pl_fail(PL_ERR_OUT_OF_MEMORY, "template: out of memory"); }

/* ---- nodes ----------------------------------------------------------------------------- */

static int depth_of(const pl_tm_node *n) { return n ? n->tree_depth : 0; }

static pl_tm_node *node(parser *P, pl_tm_node_kind kind, int line) {
    pl_tm_node *n = pl_tm_zalloc(P->a, sizeof *n);
    if (n) {
        n->kind = kind;
        n->line = line;
    }
    return n;
}

/* Records the node's depth once its children are set; refuses trees too deep to evaluate. */
static pl_status seal(parser *P, pl_tm_node *n) {
    int d = depth_of(n->a);
    if (depth_of(n->b) > d) d = depth_of(n->b);
    if (depth_of(n->c) > d) d = depth_of(n->c);
    for (size_t i = 0; i < n->n_args; i++)
        if (depth_of(n->args[i]) > d) d = depth_of(n->args[i]);
    for (size_t i = 0; i < n->n_body; i++)
        if (depth_of(n->body[i]) > d) d = depth_of(n->body[i]);
    for (size_t i = 0; i < n->n_alt; i++) {
        /* an elif chain is walked in a loop, not by recursion: it adds no depth */
        int da = depth_of(n->alt[i]) - (n->alt[i]->is_elif ? 1 : 0);
        if (da > d) d = da;
    }
    n->tree_depth = d + 1;
    if (n->tree_depth > TREE_DEPTH) {
        return pl_fail(PL_ERR_TOO_LONG,
                       "template line %d: expressions or blocks nested more than %d deep", n->line,
                       TREE_DEPTH);
    }
    return PL_OK;
}

static pl_status list_push(parser *P, node_list *l, pl_tm_node *n) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        pl_tm_node **v = pl_tm_alloc_n(P->a, cap, sizeof *v);
        if (!v) return oom();
        if (l->n) memcpy(v, l->v, l->n * sizeof *v);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = n;
    return PL_OK;
}

/* ---- token tests ----------------------------------------------------------------------- */

static bool is(const parser *P, pl_tm_tok_kind k) {
    return P->cur < P->n && P->t[P->cur].kind == k;
}

static bool is_ident_at(const parser *P, size_t i, const char *name) {
    return i < P->n && P->t[i].kind == PL_TM_TK_IDENT && pl_tm_str_eqc(P->t[i].s, name);
}
static bool is_ident(const parser *P, const char *name) { return is_ident_at(P, P->cur, name); }

/* {% name ... where name is one of the given (NULL-terminated) */
static bool is_statement(const parser *P, const char *const *names) {
    if (!is(P, PL_TM_TK_OPEN_STMT)) return false;
    for (; *names; names++)
        if (is_ident_at(P, P->cur + 1, *names)) return true;
    return false;
}

static pl_status expect(parser *P, pl_tm_tok_kind k, const char *what) {
    if (!is(P, k)) return syntax(P, what);
    P->cur++;
    return PL_OK;
}

static pl_status expect_ident(parser *P, const char *name) {
    if (!is_ident(P, name)) {
        char msg[64];
        snprintf(msg, sizeof msg, "expected %s", name);
        return syntax(P, msg);
    }
    P->cur++;
    return PL_OK;
}

static int line_here(const parser *P) {
    const pl_tm_tok *t = tok_at(P, P->cur);
    if (!t) t = P->n ? &P->t[P->n - 1] : NULL;
    return t ? t->line : 1;
}

static pl_status enter(parser *P) {
    if (++P->depth > PL_TMPL_MAX_NESTING)
        return pl_fail(PL_ERR_TOO_LONG, "template line %d: nested more than %d deep", line_here(P),
                       PL_TMPL_MAX_NESTING);
    return PL_OK;
}

/* ---- expressions ----------------------------------------------------------------------- */

static pl_status parse_expression(parser *P, pl_tm_node **out);
static pl_status parse_primary(parser *P, pl_tm_node **out);
static pl_status parse_call(parser *P, pl_tm_node *callee, pl_tm_node **out);

static pl_status binary(parser *P, int op, int line, pl_tm_node *l, pl_tm_node *r,
                        pl_tm_node **out) {
    pl_tm_node *n = node(P, PL_TM_N_BINARY, line);
    if (!n) return oom();
    n->op = op;
    n->a = l;
    n->b = r;
    PL_TRY(seal(P, n));
    *out = n;
    return PL_OK;
}

/* a, b, c -> a tuple; a alone -> a. primary: items are primaries (for loop targets). */
static pl_status parse_sequence(parser *P, bool primary, pl_tm_node **out) {
    int line = line_here(P);
    pl_tm_node *first = NULL;
    PL_TRY(primary ? parse_primary(P, &first) : parse_expression(P, &first));
    if (!is(P, PL_TM_TK_COMMA)) {
        *out = first;
        return PL_OK;
    }
    node_list l = {0};
    PL_TRY(list_push(P, &l, first));
    while (is(P, PL_TM_TK_COMMA)) {
        P->cur++;
        pl_tm_node *e = NULL;
        PL_TRY(primary ? parse_primary(P, &e) : parse_expression(P, &e));
        PL_TRY(list_push(P, &l, e));
    }
    pl_tm_node *t = node(P, PL_TM_N_TUPLE, line);
    if (!t) return oom();
    t->args = l.v;
    t->n_args = l.n;
    PL_TRY(seal(P, t));
    *out = t;
    return PL_OK;
}

/* The arguments of a call ("call") or of a macro/caller definition ("parameters"). */
static pl_status parse_args(parser *P, bool params, pl_tm_node ***out, size_t *out_n) {
    PL_TRY(expect(P, PL_TM_TK_LPAREN, "expected ( for the argument list"));
    node_list l = {0};
    bool saw_keyword = false, saw_spread = false;
    while (!is(P, PL_TM_TK_RPAREN)) {
        if (P->cur >= P->n) return syntax(P, "unexpected end of template in an argument list");
        int line = line_here(P);
        bool kw_spread = is(P, PL_TM_TK_POW);
        bool spread = is(P, PL_TM_TK_MUL) && pl_tm_str_eqc(P->t[P->cur].s, "*");
        if (params && (kw_spread || spread))
            return syntax(P, "argument unpacking is not allowed in parameter declarations");
        pl_tm_node *arg = NULL;
        if (kw_spread) {
            P->cur++;
            pl_tm_node *e = NULL;
            PL_TRY(parse_expression(P, &e));
            if (!(arg = node(P, PL_TM_N_KWSPREAD, line))) return oom();
            arg->a = e;
            PL_TRY(seal(P, arg));
            PL_TRY(list_push(P, &l, arg));
            if (is(P, PL_TM_TK_COMMA)) P->cur++;
            if (!is(P, PL_TM_TK_RPAREN))
                return syntax(P, "** must be applied to the final argument");
            break;
        }
        if (spread) {
            if (saw_spread) return syntax(P, "only one * argument unpacking is allowed");
            saw_spread = true;
            P->cur++;
            pl_tm_node *e = NULL;
            PL_TRY(parse_expression(P, &e));
            if (!(arg = node(P, PL_TM_N_SPREAD, line))) return oom();
            arg->a = e;
            PL_TRY(seal(P, arg));
        } else {
            PL_TRY(parse_expression(P, &arg));
            if (is(P, PL_TM_TK_EQUALS)) {
                P->cur++;
                if (arg->kind != PL_TM_N_IDENT)
                    return syntax(P, params ? "expected an identifier for a parameter"
                                            : "expected an identifier for a keyword argument");
                pl_tm_node *kw = node(P, PL_TM_N_KWARG, line);
                if (!kw) return oom();
                kw->s = arg->s;
                PL_TRY(parse_expression(P, &kw->a));
                PL_TRY(seal(P, kw));
                arg = kw;
            }
            if (params) {
                if (arg->kind != PL_TM_N_IDENT && arg->kind != PL_TM_N_KWARG)
                    return syntax(P, "expected an identifier for a parameter");
                for (size_t i = 0; i < l.n; i++)
                    if (pl_tm_str_eq(l.v[i]->s, arg->s))
                        return syntax(P, "duplicate parameter name");
            }
            if (arg->kind == PL_TM_N_KWARG)
                saw_keyword = true;
            else if (saw_keyword)
                return syntax(P, params ? "non-default parameter follows a default parameter"
                                        : "positional argument follows a keyword argument");
            else if (saw_spread)
                return syntax(P, "positional argument follows * argument unpacking");
        }
        PL_TRY(list_push(P, &l, arg));
        if (is(P, PL_TM_TK_COMMA)) P->cur++;
    }
    PL_TRY(expect(P, PL_TM_TK_RPAREN, "expected ) to close the argument list"));
    *out = l.v;
    *out_n = l.n;
    return PL_OK;
}

/* What is inside [ ]: an index, or a slice of up to three parts. */
static pl_status parse_subscript(parser *P, pl_tm_node **out) {
    pl_tm_node *parts[3] = {0};
    size_t n = 0;
    bool is_slice = false;
    int line = line_here(P);
    while (!is(P, PL_TM_TK_RBRACKET)) {
        if (P->cur >= P->n) return syntax(P, "unexpected end of template in [ ]");
        pl_tm_node *e = NULL;
        if (is(P, PL_TM_TK_COLON)) {
            P->cur++;
            is_slice = true;
        } else {
            PL_TRY(parse_expression(P, &e));
            if (is(P, PL_TM_TK_COLON)) {
                P->cur++;
                is_slice = true;
            }
        }
        if (n == 3) return syntax(P, "expected 0-3 arguments for a slice");
        parts[n++] = e;
    }
    if (n == 0) return syntax(P, "expected at least one argument for a subscript or slice");
    if (!is_slice) {
        *out = parts[0]; /* the oracle ignores anything after the first index */
        return PL_OK;
    }
    pl_tm_node *s = node(P, PL_TM_N_SLICE, line);
    if (!s) return oom();
    s->a = parts[0];
    s->b = parts[1];
    s->c = parts[2];
    PL_TRY(seal(P, s));
    *out = s;
    return PL_OK;
}

static pl_status parse_member(parser *P, pl_tm_node *object, pl_tm_node **out) {
    while (is(P, PL_TM_TK_DOT) || is(P, PL_TM_TK_LBRACKET)) {
        bool computed = is(P, PL_TM_TK_LBRACKET);
        int line = line_here(P);
        P->cur++;
        pl_tm_node *prop = NULL;
        if (computed) {
            PL_TRY(parse_subscript(P, &prop));
            PL_TRY(expect(P, PL_TM_TK_RBRACKET, "expected ] to close a subscript"));
        } else {
            PL_TRY(parse_primary(P, &prop));
            if (prop->kind != PL_TM_N_IDENT && prop->kind != PL_TM_N_INT)
                return syntax(P, "expected an identifier or integer after .");
        }
        pl_tm_node *m = node(P, PL_TM_N_MEMBER, line);
        if (!m) return oom();
        m->a = object;
        m->b = prop;
        m->computed = computed;
        PL_TRY(seal(P, m));
        object = m;
    }
    *out = object;
    return PL_OK;
}

static pl_status parse_call(parser *P, pl_tm_node *callee, pl_tm_node **out) {
    for (;;) {
        pl_tm_node *c = node(P, PL_TM_N_CALL, line_here(P));
        if (!c) return oom();
        c->a = callee;
        PL_TRY(parse_args(P, false, &c->args, &c->n_args));
        PL_TRY(seal(P, c));
        PL_TRY(parse_member(P, c, &callee));
        if (!is(P, PL_TM_TK_LPAREN)) break;
    }
    *out = callee;
    return PL_OK;
}

static pl_status parse_number(parser *P, const pl_tm_tok *t, pl_tm_node **out) {
    char buf[64];
    bool is_float = memchr(t->s.p, '.', t->s.n) != NULL;
    double v;
    if (t->s.n < sizeof buf) {
        memcpy(buf, t->s.p, t->s.n);
        buf[t->s.n] = 0;
        v = strtod(buf, NULL);
    } else {
        char *big = pl_tm_alloc(P->a, t->s.n + 1);
        if (!big) return oom();
        memcpy(big, t->s.p, t->s.n);
        big[t->s.n] = 0;
        v = strtod(big, NULL);
    }
    pl_tm_node *n = node(P, is_float ? PL_TM_N_FLOAT : PL_TM_N_INT, t->line);
    if (!n) return oom();
    n->num = v;
    PL_TRY(seal(P, n));
    *out = n;
    return PL_OK;
}

static pl_status parse_primary(parser *P, pl_tm_node **out) {
    const pl_tm_tok *t = tok_at(P, P->cur);
    if (!t) return syntax(P, "unexpected end of template in an expression");
    P->cur++;
    switch (t->kind) {
    case PL_TM_TK_NUMBER:
        return parse_number(P, t, out);
    case PL_TM_TK_STRING: {
        pl_tm_str s = t->s;
        if (is(P, PL_TM_TK_STRING)) { /* adjacent literals join */
            size_t total = s.n;
            for (size_t i = P->cur; i < P->n && P->t[i].kind == PL_TM_TK_STRING; i++)
                total += P->t[i].s.n;
            char *p = pl_tm_alloc(P->a, total + 1);
            if (!p) return oom();
            memcpy(p, s.p, s.n);
            size_t k = s.n;
            while (is(P, PL_TM_TK_STRING)) {
                memcpy(p + k, P->t[P->cur].s.p, P->t[P->cur].s.n);
                k += P->t[P->cur].s.n;
                P->cur++;
            }
            s = (pl_tm_str){p, k};
        }
        pl_tm_node *n = node(P, PL_TM_N_STR, t->line);
        if (!n) return oom();
        n->s = s;
        PL_TRY(seal(P, n));
        *out = n;
        return PL_OK;
    }
    case PL_TM_TK_IDENT: {
        pl_tm_node *n = node(P, PL_TM_N_IDENT, t->line);
        if (!n) return oom();
        n->s = t->s;
        PL_TRY(seal(P, n));
        *out = n;
        return PL_OK;
    }
    case PL_TM_TK_LPAREN: /* nesting is counted by parse_expression */
        PL_TRY(parse_sequence(P, false, out));
        return expect(P, PL_TM_TK_RPAREN, "expected ) to close a parenthesis");
    case PL_TM_TK_LBRACKET: {
        node_list l = {0};
        while (!is(P, PL_TM_TK_RBRACKET)) {
            if (P->cur >= P->n) return syntax(P, "unexpected end of template in a list");
            pl_tm_node *e = NULL;
            PL_TRY(parse_expression(P, &e));
            PL_TRY(list_push(P, &l, e));
            if (is(P, PL_TM_TK_COMMA)) P->cur++;
        }
        P->cur++;
        pl_tm_node *n = node(P, PL_TM_N_LIST, t->line);
        if (!n) return oom();
        n->args = l.v;
        n->n_args = l.n;
        PL_TRY(seal(P, n));
        *out = n;
        return PL_OK;
    }
    case PL_TM_TK_LBRACE: {
        node_list keys = {0}, vals = {0};
        while (!is(P, PL_TM_TK_RBRACE)) {
            if (P->cur >= P->n) return syntax(P, "unexpected end of template in a dict");
            pl_tm_node *k, *v;
            PL_TRY(parse_expression(P, &k));
            PL_TRY(expect(P, PL_TM_TK_COLON, "expected : between a key and its value"));
            PL_TRY(parse_expression(P, &v));
            PL_TRY(list_push(P, &keys, k));
            PL_TRY(list_push(P, &vals, v));
            if (is(P, PL_TM_TK_COMMA)) P->cur++;
        }
        P->cur++;
        pl_tm_node *n = node(P, PL_TM_N_DICT, t->line);
        if (!n) return oom();
        n->args = keys.v;
        n->n_args = keys.n;
        n->body = vals.v;
        n->n_body = vals.n;
        PL_TRY(seal(P, n));
        *out = n;
        return PL_OK;
    }
    default:
        P->cur--;
        return syntax(P, "unexpected token in an expression");
    }
}

static pl_status parse_call_member(parser *P, pl_tm_node **out) {
    pl_tm_node *p = NULL;
    PL_TRY(parse_primary(P, &p));
    PL_TRY(parse_member(P, p, &p));
    if (is(P, PL_TM_TK_LPAREN)) return parse_call(P, p, out);
    *out = p;
    return PL_OK;
}

static pl_status parse_unary_sign(parser *P, pl_tm_node **out) {
    const pl_tm_tok *t = tok_at(P, P->cur);
    if (t && (t->kind == PL_TM_TK_UNARY || t->kind == PL_TM_TK_ADD) &&
        (pl_tm_str_eqc(t->s, "-") || pl_tm_str_eqc(t->s, "+"))) {
        P->cur++;
        PL_TRY(enter(P));
        pl_tm_node *n = node(P, PL_TM_N_UNARY, t->line);
        if (!n) return oom();
        n->op = t->s.p[0];
        PL_TRY(parse_unary_sign(P, &n->a));
        P->depth--;
        PL_TRY(seal(P, n));
        *out = n;
        return PL_OK;
    }
    return parse_call_member(P, out);
}

static pl_status parse_filter(parser *P, pl_tm_node **out) {
    pl_tm_node *operand = NULL;
    PL_TRY(parse_unary_sign(P, &operand));
    while (is(P, PL_TM_TK_PIPE)) {
        int line = line_here(P);
        P->cur++;
        pl_tm_node *f = NULL;
        PL_TRY(parse_primary(P, &f));
        if (f->kind != PL_TM_N_IDENT) return syntax(P, "expected an identifier for the filter");
        if (is(P, PL_TM_TK_LPAREN)) {
            PL_TRY(parse_call(P, f, &f));
            if (f->kind != PL_TM_N_CALL || f->a->kind != PL_TM_N_IDENT)
                return pl_fail(PL_ERR_UNSUPPORTED,
                               "template line %d: an attribute or call after a filter's "
                               "arguments (`x|f(...).y`) is not supported",
                               line);
        }
        pl_tm_node *n = node(P, PL_TM_N_FILTER, line);
        if (!n) return oom();
        n->a = operand;
        n->b = f;
        PL_TRY(seal(P, n));
        operand = n;
    }
    *out = operand;
    return PL_OK;
}

static pl_status parse_test(parser *P, pl_tm_node **out) {
    pl_tm_node *operand = NULL;
    PL_TRY(parse_filter(P, &operand));
    while (is_ident(P, "is")) {
        int line = line_here(P);
        P->cur++;
        bool negate = is_ident(P, "not");
        if (negate) P->cur++;
        pl_tm_node *t = NULL;
        PL_TRY(parse_primary(P, &t));
        if (t->kind != PL_TM_N_IDENT) return syntax(P, "expected an identifier for the test");
        if (is(P, PL_TM_TK_LPAREN))
            return pl_fail(PL_ERR_UNSUPPORTED,
                           "template line %d: tests with arguments (`is %.*s(...)`) are not "
                           "supported",
                           line, (int)t->s.n, t->s.p);
        pl_tm_node *n = node(P, PL_TM_N_TEST, line);
        if (!n) return oom();
        n->a = operand;
        n->s = t->s;
        n->negate = negate;
        PL_TRY(seal(P, n));
        operand = n;
    }
    *out = operand;
    return PL_OK;
}

static pl_status parse_power(parser *P, pl_tm_node **out) {
    pl_tm_node *l = NULL;
    PL_TRY(parse_test(P, &l));
    while (is(P, PL_TM_TK_POW)) {
        int line = line_here(P);
        P->cur++;
        pl_tm_node *r = NULL;
        PL_TRY(parse_test(P, &r));
        PL_TRY(binary(P, PL_TM_OP_POW, line, l, r, &l));
    }
    *out = l;
    return PL_OK;
}

static pl_status parse_multiplicative(parser *P, pl_tm_node **out) {
    pl_tm_node *l = NULL;
    PL_TRY(parse_power(P, &l));
    while (is(P, PL_TM_TK_MUL)) {
        const pl_tm_tok *t = &P->t[P->cur++];
        int op = pl_tm_str_eqc(t->s, "*")    ? PL_TM_OP_MUL
                 : pl_tm_str_eqc(t->s, "/")  ? PL_TM_OP_DIV
                 : pl_tm_str_eqc(t->s, "//") ? PL_TM_OP_FLOORDIV
                                             : PL_TM_OP_MOD;
        pl_tm_node *r = NULL;
        PL_TRY(parse_power(P, &r));
        PL_TRY(binary(P, op, t->line, l, r, &l));
    }
    *out = l;
    return PL_OK;
}

static pl_status parse_additive(parser *P, pl_tm_node **out) {
    pl_tm_node *l = NULL;
    PL_TRY(parse_multiplicative(P, &l));
    while (is(P, PL_TM_TK_ADD)) {
        const pl_tm_tok *t = &P->t[P->cur++];
        int op = t->s.p[0] == '+'   ? PL_TM_OP_ADD
                 : t->s.p[0] == '-' ? PL_TM_OP_SUB
                                    : PL_TM_OP_CONCAT;
        pl_tm_node *r = NULL;
        PL_TRY(parse_multiplicative(P, &r));
        PL_TRY(binary(P, op, t->line, l, r, &l));
    }
    *out = l;
    return PL_OK;
}

static pl_status parse_comparison(parser *P, pl_tm_node **out) {
    pl_tm_node *l = NULL;
    PL_TRY(parse_additive(P, &l));
    for (;;) {
        int op, line = line_here(P);
        if (is_ident(P, "not") && is_ident_at(P, P->cur + 1, "in")) {
            op = PL_TM_OP_NOTIN;
            P->cur += 2;
        } else if (is_ident(P, "in")) {
            op = PL_TM_OP_IN;
            P->cur++;
        } else if (is(P, PL_TM_TK_COMPARE)) {
            pl_tm_str s = P->t[P->cur++].s;
            op = pl_tm_str_eqc(s, "==")   ? PL_TM_OP_EQ
                 : pl_tm_str_eqc(s, "!=") ? PL_TM_OP_NE
                 : pl_tm_str_eqc(s, "<")  ? PL_TM_OP_LT
                 : pl_tm_str_eqc(s, ">")  ? PL_TM_OP_GT
                 : pl_tm_str_eqc(s, "<=") ? PL_TM_OP_LE
                                          : PL_TM_OP_GE;
        } else {
            break;
        }
        pl_tm_node *r = NULL;
        PL_TRY(parse_additive(P, &r));
        PL_TRY(binary(P, op, line, l, r, &l));
    }
    *out = l;
    return PL_OK;
}

static pl_status parse_not(parser *P, pl_tm_node **out) {
    if (!is_ident(P, "not")) return parse_comparison(P, out);
    int line = line_here(P);
    P->cur++;
    PL_TRY(enter(P));
    pl_tm_node *n = node(P, PL_TM_N_UNARY, line);
    if (!n) return oom();
    n->op = 'n';
    PL_TRY(parse_not(P, &n->a));
    P->depth--;
    PL_TRY(seal(P, n));
    *out = n;
    return PL_OK;
}

static pl_status parse_and(parser *P, pl_tm_node **out) {
    pl_tm_node *l = NULL;
    PL_TRY(parse_not(P, &l));
    while (is_ident(P, "and")) {
        int line = line_here(P);
        P->cur++;
        pl_tm_node *r = NULL;
        PL_TRY(parse_not(P, &r));
        PL_TRY(binary(P, PL_TM_OP_AND, line, l, r, &l));
    }
    *out = l;
    return PL_OK;
}

static pl_status parse_or(parser *P, pl_tm_node **out) {
    pl_tm_node *l = NULL;
    PL_TRY(parse_and(P, &l));
    while (is_ident(P, "or")) {
        int line = line_here(P);
        P->cur++;
        pl_tm_node *r = NULL;
        PL_TRY(parse_and(P, &r));
        PL_TRY(binary(P, PL_TM_OP_OR, line, l, r, &l));
    }
    *out = l;
    return PL_OK;
}

static pl_status parse_expression(parser *P, pl_tm_node **out) {
    PL_TRY(enter(P));
    pl_tm_node *a = NULL;
    PL_TRY(parse_or(P, &a));
    if (is_ident(P, "if")) {
        int line = line_here(P);
        P->cur++;
        pl_tm_node *test = NULL;
        PL_TRY(parse_or(P, &test));
        pl_tm_node *n;
        if (is_ident(P, "else")) {
            P->cur++;
            if (!(n = node(P, PL_TM_N_TERNARY, line))) return oom();
            n->a = test;
            n->b = a;
            PL_TRY(parse_expression(P, &n->c)); /* chained ternaries recurse */
        } else {
            if (!(n = node(P, PL_TM_N_SELECT, line))) return oom();
            n->a = a;
            n->b = test;
        }
        PL_TRY(seal(P, n));
        a = n;
    }
    P->depth--;
    *out = a;
    return PL_OK;
}

/* ---- statements ------------------------------------------------------------------------ */

static pl_status parse_any(parser *P, pl_tm_node **out);

/* Statements until {% one-of-names %} (not consumed); the last name is the block's end. */
static pl_status parse_body(parser *P, const char *const *names, pl_tm_node ***out, size_t *out_n) {
    node_list l = {0};
    while (!is_statement(P, names)) {
        if (P->cur >= P->n) {
            const char *const *last = names;
            while (last[1]) last++;
            char msg[96];
            snprintf(msg, sizeof msg, "unexpected end of template: expected {%% %s %%}", *last);
            return syntax(P, msg);
        }
        pl_tm_node *s = NULL;
        PL_TRY(parse_any(P, &s));
        if (s->kind == PL_TM_N_COMMENT) continue;
        PL_TRY(list_push(P, &l, s));
    }
    *out = l.v;
    *out_n = l.n;
    return PL_OK;
}

/* {% end<name> %} */
static pl_status parse_end(parser *P, const char *name) {
    PL_TRY(expect(P, PL_TM_TK_OPEN_STMT, "expected {%"));
    PL_TRY(expect_ident(P, name));
    return expect(P, PL_TM_TK_CLOSE_STMT, "expected %}");
}

static pl_status parse_set(parser *P, int line, pl_tm_node **out) {
    pl_tm_node *n = node(P, PL_TM_N_SET, line);
    if (!n) return oom();
    PL_TRY(parse_sequence(P, false, &n->a));
    if (is(P, PL_TM_TK_EQUALS)) {
        P->cur++;
        PL_TRY(parse_sequence(P, false, &n->b));
    } else {
        PL_TRY(expect(P, PL_TM_TK_CLOSE_STMT, "expected %} or = in a set statement"));
        static const char *const end[] = {"endset", NULL};
        PL_TRY(parse_body(P, end, &n->body, &n->n_body));
        PL_TRY(expect(P, PL_TM_TK_OPEN_STMT, "expected {%"));
        PL_TRY(expect_ident(P, "endset"));
    }
    PL_TRY(expect(P, PL_TM_TK_CLOSE_STMT, "expected %}"));
    PL_TRY(seal(P, n));
    *out = n;
    return PL_OK;
}

/* if/elif chains are built in a loop; each elif is an PL_TM_N_IF alone in its parent's alt. */
static pl_status parse_if(parser *P, int line, pl_tm_node **out) {
    static const char *const stops[] = {"elif", "else", "endif", NULL};
    static const char *const endif[] = {"endif", NULL};
    pl_tm_node *head = NULL, *tail = NULL;
    for (;;) {
        pl_tm_node *n = node(P, PL_TM_N_IF, line);
        if (!n) return oom();
        n->is_elif = head != NULL;
        PL_TRY(parse_expression(P, &n->a));
        PL_TRY(expect(P, PL_TM_TK_CLOSE_STMT, "expected %} after the if condition"));
        PL_TRY(parse_body(P, stops, &n->body, &n->n_body));
        if (tail) {
            pl_tm_node **alt = pl_tm_alloc_n(P->a, 1, sizeof *alt);
            if (!alt) return oom();
            alt[0] = n;
            tail->alt = alt;
            tail->n_alt = 1;
        } else {
            head = n;
        }
        tail = n;
        if (is_statement(P, (const char *const[]){"elif", NULL})) {
            line = P->t[P->cur + 1].line;
            P->cur += 2;
            continue;
        }
        if (is_statement(P, (const char *const[]){"else", NULL})) {
            P->cur += 2;
            PL_TRY(expect(P, PL_TM_TK_CLOSE_STMT, "expected %} after else"));
            PL_TRY(parse_body(P, endif, &n->alt, &n->n_alt));
        }
        break;
    }
    /* depths bottom-up now that the chain is complete */
    node_list chain = {0};
    for (pl_tm_node *n = head; n; n = (n->n_alt == 1 && n->alt[0]->is_elif) ? n->alt[0] : NULL)
        PL_TRY(list_push(P, &chain, n));
    while (chain.n) PL_TRY(seal(P, chain.v[--chain.n]));
    PL_TRY(parse_end(P, "endif"));
    *out = head;
    return PL_OK;
}

static pl_status parse_for(parser *P, int line, pl_tm_node **out) {
    static const char *const stops[] = {"else", "endfor", NULL};
    static const char *const endfor[] = {"endfor", NULL};
    pl_tm_node *n = node(P, PL_TM_N_FOR, line);
    if (!n) return oom();
    PL_TRY(parse_sequence(P, true, &n->a));
    if (n->a->kind != PL_TM_N_IDENT && n->a->kind != PL_TM_N_TUPLE)
        return syntax(P, "expected an identifier or tuple for the loop variable");
    if (!is_ident(P, "in")) return syntax(P, "expected `in` after the loop variable");
    P->cur++;
    PL_TRY(parse_expression(P, &n->b));
    PL_TRY(expect(P, PL_TM_TK_CLOSE_STMT, "expected %} after the for loop header"));
    PL_TRY(parse_body(P, stops, &n->body, &n->n_body));
    if (is_statement(P, (const char *const[]){"else", NULL})) {
        P->cur += 2;
        PL_TRY(expect(P, PL_TM_TK_CLOSE_STMT, "expected %} after else"));
        PL_TRY(parse_body(P, endfor, &n->alt, &n->n_alt));
    }
    PL_TRY(parse_end(P, "endfor"));
    PL_TRY(seal(P, n));
    *out = n;
    return PL_OK;
}

static pl_status parse_macro(parser *P, int line, pl_tm_node **out) {
    static const char *const end[] = {"endmacro", NULL};
    pl_tm_node *n = node(P, PL_TM_N_MACRO, line);
    if (!n) return oom();
    pl_tm_node *name = NULL;
    PL_TRY(parse_primary(P, &name));
    if (name->kind != PL_TM_N_IDENT) return syntax(P, "expected an identifier after macro");
    n->s = name->s;
    PL_TRY(parse_args(P, true, &n->args, &n->n_args));
    PL_TRY(expect(P, PL_TM_TK_CLOSE_STMT, "expected %} after the macro header"));
    PL_TRY(parse_body(P, end, &n->body, &n->n_body));
    PL_TRY(parse_end(P, "endmacro"));
    PL_TRY(seal(P, n));
    *out = n;
    return PL_OK;
}

static pl_status parse_call_block(parser *P, int line, pl_tm_node **out) {
    static const char *const end[] = {"endcall", NULL};
    pl_tm_node *n = node(P, PL_TM_N_CALLBLK, line);
    if (!n) return oom();
    if (is(P, PL_TM_TK_LPAREN)) PL_TRY(parse_args(P, true, &n->args, &n->n_args));
    pl_tm_node *callee = NULL;
    PL_TRY(parse_primary(P, &callee));
    if (callee->kind != PL_TM_N_IDENT) return syntax(P, "expected an identifier after call");
    pl_tm_node *c = node(P, PL_TM_N_CALL, line);
    if (!c) return oom();
    c->a = callee;
    PL_TRY(parse_args(P, false, &c->args, &c->n_args));
    PL_TRY(seal(P, c));
    n->a = c;
    PL_TRY(expect(P, PL_TM_TK_CLOSE_STMT, "expected %} after the call header"));
    PL_TRY(parse_body(P, end, &n->body, &n->n_body));
    PL_TRY(parse_end(P, "endcall"));
    PL_TRY(seal(P, n));
    *out = n;
    return PL_OK;
}

static pl_status parse_filter_block(parser *P, int line, pl_tm_node **out) {
    static const char *const end[] = {"endfilter", NULL};
    pl_tm_node *n = node(P, PL_TM_N_FILTBLK, line);
    if (!n) return oom();
    pl_tm_node *f = NULL;
    PL_TRY(parse_primary(P, &f));
    if (f->kind == PL_TM_N_IDENT && is(P, PL_TM_TK_LPAREN)) PL_TRY(parse_call(P, f, &f));
    if (!(f->kind == PL_TM_N_IDENT || (f->kind == PL_TM_N_CALL && f->a->kind == PL_TM_N_IDENT)))
        return syntax(P, "expected a filter name after filter");
    n->a = f;
    PL_TRY(expect(P, PL_TM_TK_CLOSE_STMT, "expected %} after the filter header"));
    PL_TRY(parse_body(P, end, &n->body, &n->n_body));
    PL_TRY(parse_end(P, "endfilter"));
    PL_TRY(seal(P, n));
    *out = n;
    return PL_OK;
}

static pl_status parse_statement(parser *P, pl_tm_node **out) {
    PL_TRY(expect(P, PL_TM_TK_OPEN_STMT, "expected {%"));
    if (!is(P, PL_TM_TK_IDENT)) return syntax(P, "expected a statement name after {%");
    const pl_tm_tok *t = &P->t[P->cur];
    int line = t->line;
    static const char *const jinja_only[] = {
        "include",       "import", "from",     "extends",   "block", "endblock",
        "raw",           "endraw", "with",     "endwith",   "do",    "autoescape",
        "endautoescape", "trans",  "endtrans", "pluralize", NULL};
    for (const char *const *j = jinja_only; *j; j++)
        if (pl_tm_str_eqc(t->s, *j))
            return pl_fail(PL_ERR_UNSUPPORTED,
                           "template line %d: the statement {%% %s %%} is not supported", line, *j);
    PL_TRY(enter(P));
    P->cur++;
    pl_status st;
    if (pl_tm_str_eqc(t->s, "set"))
        st = parse_set(P, line, out);
    else if (pl_tm_str_eqc(t->s, "if"))
        st = parse_if(P, line, out);
    else if (pl_tm_str_eqc(t->s, "for"))
        st = parse_for(P, line, out);
    else if (pl_tm_str_eqc(t->s, "macro"))
        st = parse_macro(P, line, out);
    else if (pl_tm_str_eqc(t->s, "call"))
        st = parse_call_block(P, line, out);
    else if (pl_tm_str_eqc(t->s, "filter"))
        st = parse_filter_block(P, line, out);
    else if (pl_tm_str_eqc(t->s, "break") || pl_tm_str_eqc(t->s, "continue")) {
        bool brk = pl_tm_str_eqc(t->s, "break");
        st = expect(P, PL_TM_TK_CLOSE_STMT, "expected %}");
        if (st == PL_OK) {
            pl_tm_node *n = node(P, brk ? PL_TM_N_BREAK : PL_TM_N_CONTINUE, line);
            if (!n) return oom();
            st = seal(P, n);
            *out = n;
        }
    } else {
        P->cur--;
        char msg[96];
        snprintf(msg, sizeof msg, "unknown statement {%% %.*s %%}",
                 (int)(t->s.n > 40 ? 40 : t->s.n), t->s.p);
        return syntax(P, msg);
    }
    P->depth--;
    return st;
}

static pl_status parse_any(parser *P, pl_tm_node **out) {
    const pl_tm_tok *t = &P->t[P->cur];
    pl_tm_node *n;
    switch (t->kind) {
    case PL_TM_TK_COMMENT:
        P->cur++;
        if (!(n = node(P, PL_TM_N_COMMENT, t->line))) return oom();
        *out = n;
        return seal(P, n);
    case PL_TM_TK_TEXT:
        P->cur++;
        if (!(n = node(P, PL_TM_N_TEXT, t->line))) return oom();
        n->s = t->s;
        *out = n;
        return seal(P, n);
    case PL_TM_TK_OPEN_STMT:
        return parse_statement(P, out);
    case PL_TM_TK_OPEN_EXPR:
        P->cur++;
        if (!(n = node(P, PL_TM_N_OUTPUT, t->line))) return oom();
        PL_TRY(parse_expression(P, &n->a));
        PL_TRY(expect(P, PL_TM_TK_CLOSE_EXPR, "expected }} to close the expression"));
        *out = n;
        return seal(P, n);
    default:
        return syntax(P, "unexpected token");
    }
}

/* ---- checks: refuse what the interpreter would not render right --------------------------- */

typedef struct checker {
    pl_tm_str *bound; /* every name a set, for, macro or parameter binds anywhere (then sorted) */
    size_t n_bound, cap_bound;
    pl_tm_arena *a;
} checker;

static pl_status bind(checker *C, pl_tm_str name) {
    if (C->n_bound == C->cap_bound) {
        size_t cap = C->cap_bound ? C->cap_bound * 2 : 16;
        pl_tm_str *v = pl_tm_alloc_n(C->a, cap, sizeof *v);
        if (!v) return oom();
        if (C->n_bound) memcpy(v, C->bound, C->n_bound * sizeof *v);
        C->bound = v;
        C->cap_bound = cap;
    }
    C->bound[C->n_bound++] = name;
    return PL_OK;
}

static int cmp_name(const void *pa, const void *pb) {
    const pl_tm_str *a = pa, *b = pb;
    if (a->n != b->n) return a->n < b->n ? -1 : 1;
    return a->n ? memcmp(a->p, b->p, a->n) : 0;
}

static bool is_bound(const checker *C, pl_tm_str name) {
    return C->n_bound && bsearch(&name, C->bound, C->n_bound, sizeof *C->bound, cmp_name) != NULL;
}

static pl_status bind_target(checker *C, const pl_tm_node *t) {
    if (!t) return PL_OK;
    if (t->kind == PL_TM_N_IDENT) return bind(C, t->s);
    if (t->kind == PL_TM_N_TUPLE)
        for (size_t i = 0; i < t->n_args; i++) PL_TRY(bind_target(C, t->args[i]));
    return PL_OK;
}

/* The elif that continues n's chain, walked in a loop rather than by recursion. */
static const pl_tm_node *elif_of(const pl_tm_node *n) {
    return n->kind == PL_TM_N_IF && n->n_alt == 1 && n->alt[0]->is_elif ? n->alt[0] : NULL;
}

static pl_status collect(checker *C, const pl_tm_node *n) {
again:
    if (!n) return PL_OK;
    if (n->kind == PL_TM_N_SET || n->kind == PL_TM_N_FOR) PL_TRY(bind_target(C, n->a));
    if (n->kind == PL_TM_N_MACRO) PL_TRY(bind(C, n->s));
    if (n->kind == PL_TM_N_MACRO || n->kind == PL_TM_N_CALLBLK)
        for (size_t i = 0; i < n->n_args; i++) PL_TRY(bind(C, n->args[i]->s));
    PL_TRY(collect(C, n->a));
    PL_TRY(collect(C, n->b));
    PL_TRY(collect(C, n->c));
    for (size_t i = 0; i < n->n_args; i++) PL_TRY(collect(C, n->args[i]));
    for (size_t i = 0; i < n->n_body; i++) PL_TRY(collect(C, n->body[i]));
    if (elif_of(n)) {
        n = elif_of(n);
        goto again;
    }
    for (size_t i = 0; i < n->n_alt; i++) PL_TRY(collect(C, n->alt[i]));
    return PL_OK;
}

static pl_status unsupported(const pl_tm_node *n, const char *what, pl_tm_str name) {
    return pl_fail(PL_ERR_UNSUPPORTED, "template line %d: %s `%.*s` is not supported", n->line,
                   what, (int)(name.n > 60 ? 60 : name.n), name.p);
}

/* Whether the subtree reads `name` as a variable. */
static bool reads(const pl_tm_node *n, const char *name) {
again:
    if (!n) return false;
    if (n->kind == PL_TM_N_IDENT && pl_tm_str_eqc(n->s, name)) return true;
    if (n->kind == PL_TM_N_MEMBER && !n->computed) return reads(n->a, name);
    if (n->kind == PL_TM_N_FILTER || n->kind == PL_TM_N_FILTBLK) {
        /* a filter's name is syntax, not a variable */
        const pl_tm_node *f = n->kind == PL_TM_N_FILTER ? n->b : n->a;
        for (size_t i = 0; f->kind == PL_TM_N_CALL && i < f->n_args; i++)
            if (reads(f->args[i], name)) return true;
        if (n->kind == PL_TM_N_FILTER) return reads(n->a, name);
        for (size_t i = 0; i < n->n_body; i++)
            if (reads(n->body[i], name)) return true;
        return false;
    }
    if (n->kind == PL_TM_N_KWARG) return reads(n->a, name);
    if (reads(n->a, name) || reads(n->b, name) || reads(n->c, name)) return true;
    for (size_t i = 0; i < n->n_args; i++)
        if (reads(n->args[i], name)) return true;
    for (size_t i = 0; i < n->n_body; i++)
        if (reads(n->body[i], name)) return true;
    if (elif_of(n)) {
        n = elif_of(n);
        goto again;
    }
    for (size_t i = 0; i < n->n_alt; i++)
        if (reads(n->alt[i], name)) return true;
    return false;
}

static bool declares(const pl_tm_node *macro, const char *name) {
    for (size_t i = 0; i < macro->n_args; i++)
        if (pl_tm_str_eqc(macro->args[i]->s, name)) return true;
    return false;
}

static pl_status check_filter(const pl_tm_node *at, const pl_tm_node *f) {
    const pl_tm_node *id = f->kind == PL_TM_N_CALL ? f->a : f;
    if (!pl_tm_filter_known(id->s)) return unsupported(at, "the filter", id->s);
    /* filters that take a test by name: the name must be a test we have */
    bool takes_test = pl_tm_str_eqc(id->s, "selectattr") || pl_tm_str_eqc(id->s, "rejectattr") ||
                      pl_tm_str_eqc(id->s, "select") || pl_tm_str_eqc(id->s, "reject");
    if (takes_test && f->kind == PL_TM_N_CALL) {
        size_t k = (pl_tm_str_eqc(id->s, "select") || pl_tm_str_eqc(id->s, "reject")) ? 0 : 1;
        if (k < f->n_args && f->args[k]->kind == PL_TM_N_STR && !pl_tm_test_known(f->args[k]->s))
            return unsupported(at, "the test", f->args[k]->s);
    }
    return PL_OK;
}

static pl_status check(const checker *C, const pl_tm_node *n) {
again:
    if (!n) return PL_OK;
    switch (n->kind) {
    case PL_TM_N_FILTER:
    case PL_TM_N_FILTBLK: {
        /* the filter's name is not a function: check only its arguments */
        const pl_tm_node *f = n->kind == PL_TM_N_FILTER ? n->b : n->a;
        PL_TRY(check_filter(n, f));
        for (size_t i = 0; f->kind == PL_TM_N_CALL && i < f->n_args; i++)
            PL_TRY(check(C, f->args[i]));
        if (n->kind == PL_TM_N_FILTER) {
            n = n->a;
            goto again;
        }
        for (size_t i = 0; i < n->n_body; i++) PL_TRY(check(C, n->body[i]));
        return PL_OK;
    }
    case PL_TM_N_TEST:
        if (!pl_tm_test_known(n->s)) return unsupported(n, "the test", n->s);
        break;
    case PL_TM_N_CALL:
        if (n->a->kind == PL_TM_N_IDENT && !pl_tm_global_known(n->a->s) && !is_bound(C, n->a->s))
            return unsupported(n, "the function", n->a->s);
        if (n->a->kind == PL_TM_N_MEMBER && !n->a->computed && n->a->b->kind == PL_TM_N_IDENT &&
            !pl_tm_method_known(n->a->b->s))
            return unsupported(n, "the method", n->a->b->s);
        break;
    case PL_TM_N_MACRO:
    case PL_TM_N_CALLBLK:
        for (size_t i = 0; i < n->n_body; i++) {
            static const char *const special[] = {"varargs", "kwargs"};
            for (size_t k = 0; k < 2; k++)
                if (!declares(n, special[k]) && reads(n->body[i], special[k]))
                    return unsupported(n, "reading the macro variable",
                                       PL_TM_LIT("varargs/kwargs"));
        }
        break;
    default:
        break;
    }
    PL_TRY(check(C, n->a));
    PL_TRY(check(C, n->b));
    PL_TRY(check(C, n->c));
    for (size_t i = 0; i < n->n_args; i++) PL_TRY(check(C, n->args[i]));
    for (size_t i = 0; i < n->n_body; i++) PL_TRY(check(C, n->body[i]));
    if (elif_of(n)) {
        n = elif_of(n);
        goto again;
    }
    for (size_t i = 0; i < n->n_alt; i++) PL_TRY(check(C, n->alt[i]));
    return PL_OK;
}

/* ---- entry ----------------------------------------------------------------------------- */

pl_status pl_tm_parse(const pl_tm_tok *toks, size_t n, const char *src, size_t src_n,
                      pl_tm_arena *a, pl_tm_node ***out_body, size_t *out_n) {
    parser P = {.t = toks, .n = n, .a = a, .src = src, .src_n = src_n};
    node_list body = {0};
    while (P.cur < P.n) {
        pl_tm_node *s = NULL;
        PL_TRY(parse_any(&P, &s));
        if (s->kind != PL_TM_N_COMMENT) PL_TRY(list_push(&P, &body, s));
    }
    checker C = {.a = a};
    for (size_t i = 0; i < body.n; i++) PL_TRY(collect(&C, body.v[i]));
    if (C.n_bound) qsort(C.bound, C.n_bound, sizeof *C.bound, cmp_name);
    for (size_t i = 0; i < body.n; i++) PL_TRY(check(&C, body.v[i]));
    *out_body = body.v;
    *out_n = body.n;
    return PL_OK;
}
