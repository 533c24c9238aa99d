/*
 * template/eval.c - the interpreter: walks the syntax tree and writes the output, as
 * @huggingface/jinja's Interpreter does.
 *
 * Scopes are the oracle's Environments: the global scope holds the globals (true, false,
 * none, range, ...) and the variables; a for loop gets one scope for all its iterations
 * (so `set` inside a loop stays inside it), a macro call gets a scope whose parent is the
 * *caller's* scope, and every scope answers `namespace` itself.
 *
 * Output goes to one buffer. A macro call, a block set or a filter block renders into the
 * same buffer and cuts its part off as a string. break and continue travel up as signals
 * (PL_TM_BREAK, PL_TM_CONTINUE) through expressions and macro calls, like the oracle's exceptions:
 * the loop drops the output of the iteration they interrupt.
 *
 * Limits (pl_tmpl_limits): every node evaluated and every loop iteration costs a step, scans
 * cost by length; nesting (expressions, blocks, calls, nested values) is counted in depth.
 *
 * The one loop between files: this file applies filters (filters.c), and a filter evaluates
 * its arguments through pl_tm_eval_args here, because arguments are expressions. That is the
 * interpreter's own recursion, bounded by the depth limit; everything else this file uses
 * (values, text, JSON, strings, failures and the budget in budget.c) sits below it and never
 * calls back.
 */
#include "template/tmpl_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "util/alloc.h"
#include "util/utf8.h"

/* Functions kept out of the recursive frames (see pl_tm_eval_expr). */
#define NOINLINE __attribute__((noinline))

static int enter(pl_tm_rs *rs) {
    if (++rs->depth > rs->lim.max_depth)
        return pl_tm_fail(rs, PL_ERR_TOO_LONG, "evaluation nested more than %d deep",
                          rs->lim.max_depth);
    return 0;
}

/* ---- output ---------------------------------------------------------------------------- */

static int out_put(pl_tm_rs *rs, pl_tm_str s) {
    pl_tm_out *o = &rs->out;
    if (s.n > rs->lim.max_output_bytes - o->n)
        return pl_tm_fail(rs, PL_ERR_TOO_LONG, "the output exceeds the limit of %zu bytes",
                          rs->lim.max_output_bytes);
    PL_TRY(pl_tm_charge_n(rs, s.n));
    if (pl_buf_reserve(o, s.n + 1, "template: output") != PL_OK) return pl_tm_oom(rs);
    if (s.n) memcpy(o->p + o->n, s.p, s.n);
    o->n += s.n;
    return 0;
}

/* Prints a value as a statement's result: none and undefined print nothing. */
static int out_val(pl_tm_rs *rs, pl_tm_val v) {
    if (v.kind == PL_TM_V_NULL || v.kind == PL_TM_V_UNDEF) return 0;
    pl_tm_str s;
    PL_TRY(pl_tm_to_string(rs, v, &s));
    return out_put(rs, s);
}

/* Moves the output written since `mark` into a string. */
static int cut(pl_tm_rs *rs, size_t mark, pl_tm_str *out) {
    size_t n = rs->out.n - mark;
    char *p;
    PL_TRY(pl_tm_str_new(rs, n, &p));
    if (n) memcpy(p, rs->out.p + mark, n);
    rs->out.n = mark;
    *out = (pl_tm_str){p, n};
    return 0;
}

/* ---- scopes ---------------------------------------------------------------------------- */

static int env_new(pl_tm_rs *rs, pl_tm_env *parent, pl_tm_env **out) {
    pl_tm_env *e = pl_tm_zalloc(&rs->a, sizeof *e);
    if (!e) return pl_tm_oom(rs);
    e->parent = parent;
    *out = e;
    return 0;
}

static int env_set(pl_tm_rs *rs, pl_tm_env *e, pl_tm_str name, pl_tm_val v) {
    PL_TRY(pl_tm_charge_n(rs, e->n));
    for (size_t i = 0; i < e->n; i++)
        if (pl_tm_str_eq(e->names[i], name)) {
            e->vals[i] = v;
            return 0;
        }
    if (e->n == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 8;
        if (cap > rs->lim.max_items)
            return pl_tm_fail(rs, PL_ERR_TOO_LONG, "more than %zu variables in one scope",
                              rs->lim.max_items);
        pl_tm_str *nn = pl_tm_alloc_n(&rs->a, cap, sizeof *nn);
        pl_tm_val *nv = pl_tm_alloc_n(&rs->a, cap, sizeof *nv);
        if (!nn || !nv) return pl_tm_oom(rs);
        if (e->n) {
            memcpy(nn, e->names, e->n * sizeof *nn);
            memcpy(nv, e->vals, e->n * sizeof *nv);
        }
        e->names = nn;
        e->vals = nv;
        e->cap = cap;
    }
    e->names[e->n] = name;
    e->vals[e->n] = v;
    e->n++;
    return 0;
}

static pl_tm_func k_namespace = {.kind = PL_TM_F_NAMESPACE};

static int env_get(pl_tm_rs *rs, pl_tm_env *e, pl_tm_str name, pl_tm_val *out) {
    for (pl_tm_env *s = e; s; s = s->parent) {
        PL_TRY(pl_tm_charge_n(rs, s->n));
        for (size_t i = 0; i < s->n; i++)
            if (pl_tm_str_eq(s->names[i], name)) {
                *out = s->vals[i];
                return 0;
            }
        /* every Environment of the oracle starts with its own `namespace` */
        if (pl_tm_str_eqc(name, "namespace")) {
            *out = (pl_tm_val){.kind = PL_TM_V_FUNC, .u.fn = &k_namespace};
            return 0;
        }
    }
    *out = pl_tm_undef();
    return 0;
}

/* ---- expressions ----------------------------------------------------------------------- */

static int eval_block(pl_tm_rs *rs, pl_tm_node *const *body, size_t n, pl_tm_env *env);
static int call_value(pl_tm_rs *rs, pl_tm_val fn, const pl_tm_val *args, size_t n, pl_tm_env *env,
                      pl_tm_val *out);

static int need_num(pl_tm_rs *rs, pl_tm_val v, const char *what) {
    if (v.kind == PL_TM_V_INT || v.kind == PL_TM_V_UNDEF) return 0;
    return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT,
                      "slice %s must be an integer or undefined, got %s", what,
                      pl_tm_kind_name(v.kind));
}

/* The oracle's slice(): Python's rules, except that an explicit stop of -1 with a negative
 * step means "to the start". */
static NOINLINE int eval_slice(pl_tm_rs *rs, pl_tm_val obj, const pl_tm_node *sl, pl_tm_env *env,
                               pl_tm_val *out) {
    if (!pl_tm_is_arr(obj) && obj.kind != PL_TM_V_STR)
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "slice object must be an array or string");
    pl_tm_val start = pl_tm_undef(), stop = pl_tm_undef(), step = pl_tm_undef();
    if (sl->a) PL_TRY(pl_tm_eval_expr(rs, sl->a, env, &start));
    if (sl->b) PL_TRY(pl_tm_eval_expr(rs, sl->b, env, &stop));
    if (sl->c) PL_TRY(pl_tm_eval_expr(rs, sl->c, env, &step));
    PL_TRY(need_num(rs, start, "start"));
    PL_TRY(need_num(rs, stop, "stop"));
    PL_TRY(need_num(rs, step, "step"));
    /* a string slices by code points */
    size_t len = 0;
    const char **cps = NULL; /* start of each code point, and one past the end */
    if (obj.kind == PL_TM_V_STR) {
        pl_tm_str s = obj.u.s;
        PL_TRY(pl_tm_charge_n(rs, s.n));
        cps = pl_tm_alloc_n(&rs->a, s.n + 1, sizeof *cps);
        if (!cps) return pl_tm_oom(rs);
        for (size_t i = 0; i < s.n;) {
            uint32_t cp;
            cps[len++] = s.p + i;
            i += (size_t)pl_utf8_decode(s.p + i, s.n - i, &cp);
        }
        cps[len] = s.p + s.n;
    } else {
        len = obj.u.arr->n;
    }
    double L = (double)len;
    double st = step.kind == PL_TM_V_UNDEF ? 1 : step.u.num;
    double dir = st > 0 ? 1 : st < 0 ? -1 : st == 0 ? 0 : NAN;
    double a, b;
    if (dir >= 0) {
        a = start.kind == PL_TM_V_UNDEF ? 0 : start.u.num;
        a = a < 0 ? fmax(L + a, 0) : fmin(a, L);
        b = stop.kind == PL_TM_V_UNDEF ? L : stop.u.num;
        b = b < 0 ? fmax(L + b, 0) : fmin(b, L);
    } else {
        a = start.kind == PL_TM_V_UNDEF ? L - 1 : start.u.num;
        a = a < 0 ? fmax(L + a, -1) : fmin(a, L - 1);
        b = stop.kind == PL_TM_V_UNDEF ? -1 : stop.u.num;
        b = b < -1 ? fmax(L + b, -1) : fmin(b, L - 1);
    }
    size_t count = 0;
    for (double i = a; dir * i < dir * b; i += st) count++;
    if (obj.kind == PL_TM_V_STR) {
        size_t bytes = 0;
        for (double i = a; dir * i < dir * b; i += st) {
            size_t k = (size_t)i;
            bytes += (size_t)(cps[k + 1] - cps[k]);
        }
        char *p;
        PL_TRY(pl_tm_str_new(rs, bytes, &p));
        size_t o = 0;
        for (double i = a; dir * i < dir * b; i += st) {
            size_t k = (size_t)i, n = (size_t)(cps[k + 1] - cps[k]);
            memcpy(p + o, cps[k], n);
            o += n;
        }
        *out = pl_tm_strv((pl_tm_str){p, bytes});
        return 0;
    }
    pl_tm_array *r;
    PL_TRY(pl_tm_arr_new(rs, count, &r));
    size_t o = 0;
    for (double i = a; dir * i < dir * b; i += st) r->v[o++] = obj.u.arr->v[(size_t)i];
    *out = (pl_tm_val){.kind = PL_TM_V_ARRAY, .u.arr = r};
    return 0;
}

/* JavaScript's Array.prototype.at / String.prototype.at: -1 is the last; strings count UTF-16
 * units (half of a surrogate pair reads as U+FFFD). */
static NOINLINE int index_at(pl_tm_rs *rs, pl_tm_val obj, double idx, pl_tm_val *out) {
    if (isnan(idx)) idx = 0;
    idx = trunc(idx);
    *out = pl_tm_undef();
    if (pl_tm_is_arr(obj)) {
        double n = (double)obj.u.arr->n, k = idx < 0 ? n + idx : idx;
        if (k >= 0 && k < n) *out = obj.u.arr->v[(size_t)k];
        return 0;
    }
    pl_tm_str s = obj.u.s;
    PL_TRY(pl_tm_charge_n(rs, s.n));
    double n = (double)pl_tm_utf16_len(s), k = idx < 0 ? n + idx : idx;
    if (!(k >= 0 && k < n)) return 0;
    size_t unit = 0;
    for (size_t i = 0; i < s.n;) {
        uint32_t cp;
        int len = pl_utf8_decode(s.p + i, s.n - i, &cp);
        size_t units = cp >= 0x10000 ? 2 : 1;
        if ((double)(unit + units) > k) {
            if (units == 2) {
                *out = pl_tm_strv(PL_TM_LIT("\xEF\xBF\xBD"));
            } else {
                *out = pl_tm_strv((pl_tm_str){s.p + i, (size_t)len});
            }
            return 0;
        }
        unit += units;
        i += (size_t)len;
    }
    return 0;
}

static NOINLINE int eval_member(pl_tm_rs *rs, const pl_tm_node *n, pl_tm_env *env, pl_tm_val *out) {
    pl_tm_val obj, prop;
    PL_TRY(pl_tm_eval_expr(rs, n->a, env, &obj));
    if (n->computed) {
        if (n->b->kind == PL_TM_N_SLICE) return eval_slice(rs, obj, n->b, env, out);
        PL_TRY(pl_tm_eval_expr(rs, n->b, env, &prop));
    } else if (n->b->kind == PL_TM_N_INT) {
        prop = pl_tm_int(n->b->num);
    } else {
        prop = pl_tm_strv(n->b->s);
    }
    rs->line = n->line;
    *out = pl_tm_undef();
    if (pl_tm_is_obj(obj) || obj.kind == PL_TM_V_NS) {
        if (prop.kind != PL_TM_V_STR)
            return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT,
                              "cannot access a property with a non-string: got %s",
                              pl_tm_kind_name(prop.kind));
        pl_tm_map *m;
        PL_TRY(pl_tm_obj_map(rs, obj, &m));
        const pl_tm_val *v = pl_tm_map_get(rs, m, prop.u.s);
        if (v) {
            *out = *v;
            return 0;
        }
        if (obj.kind == PL_TM_V_NS) return 0;
        if (obj.kind == PL_TM_V_LOOP && pl_tm_str_eqc(prop.u.s, "cycle")) {
            pl_tm_func *f = pl_tm_zalloc(&rs->a, sizeof *f);
            if (!f) return pl_tm_oom(rs);
            f->kind = PL_TM_F_CYCLE;
            f->self = obj;
            *out = (pl_tm_val){.kind = PL_TM_V_FUNC, .u.fn = f};
            return 0;
        }
        return pl_tm_builtin_member(rs, obj, prop.u.s, out);
    }
    if (pl_tm_is_arr(obj) || obj.kind == PL_TM_V_STR) {
        if (prop.kind == PL_TM_V_INT) return index_at(rs, obj, prop.u.num, out);
        if (prop.kind == PL_TM_V_STR) return pl_tm_builtin_member(rs, obj, prop.u.s, out);
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT,
                          "cannot access a property with a non-string/non-number: got %s",
                          pl_tm_kind_name(prop.kind));
    }
    if (prop.kind != PL_TM_V_STR)
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT,
                          "cannot access a property with a non-string: got %s",
                          pl_tm_kind_name(prop.kind));
    return 0; /* numbers, booleans, none, undefined, functions: no members */
}

static double js_pow(double a, double b) {
    if (isnan(b) || (fabs(a) == 1 && isinf(b))) return NAN;
    return pow(a, b);
}

static NOINLINE int eval_binary(pl_tm_rs *rs, const pl_tm_node *n, pl_tm_env *env, pl_tm_val *out) {
    pl_tm_val l, r;
    PL_TRY(pl_tm_eval_expr(rs, n->a, env, &l));
    if (n->op == PL_TM_OP_AND || n->op == PL_TM_OP_OR) {
        bool t = pl_tm_truthy(l);
        if ((n->op == PL_TM_OP_AND) != t) {
            *out = l;
            return 0;
        }
        return pl_tm_eval_expr(rs, n->b, env, out);
    }
    PL_TRY(pl_tm_eval_expr(rs, n->b, env, &r));
    rs->line = n->line;
    int op = n->op;
    if (op == PL_TM_OP_EQ || op == PL_TM_OP_NE) {
        bool eq;
        PL_TRY(pl_tm_loose_eq(rs, l, r, &eq));
        *out = pl_tm_bool(op == PL_TM_OP_EQ ? eq : !eq);
        return 0;
    }
    if (l.kind == PL_TM_V_UNDEF || r.kind == PL_TM_V_UNDEF) {
        if (r.kind == PL_TM_V_UNDEF && (op == PL_TM_OP_IN || op == PL_TM_OP_NOTIN)) {
            *out = pl_tm_bool(op == PL_TM_OP_NOTIN);
            return 0;
        }
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "an operation on an undefined value");
    }
    if (l.kind == PL_TM_V_NULL || r.kind == PL_TM_V_NULL)
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "an operation on none");
    if (op == PL_TM_OP_CONCAT) {
        pl_tm_str a, b;
        PL_TRY(pl_tm_js_string(rs, l, &a));
        PL_TRY(pl_tm_js_string(rs, r, &b));
        pl_tm_str s;
        PL_TRY(pl_tm_str_cat(rs, a, b, &s));
        *out = pl_tm_strv(s);
        return 0;
    }
    bool ln = pl_tm_is_num(l) || l.kind == PL_TM_V_BOOL,
         rn = pl_tm_is_num(r) || r.kind == PL_TM_V_BOOL;
    if (op == PL_TM_OP_POW && ln && rn) {
        double a = l.kind == PL_TM_V_BOOL ? l.u.b : l.u.num,
               b = r.kind == PL_TM_V_BOOL ? r.u.b : r.u.num;
        if (a == 0 && b < 0)
            return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT,
                              "0.0 cannot be raised to a negative power");
        double x = js_pow(a, b);
        if (!isfinite(x))
            return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "** gives no finite real number");
        *out = (l.kind == PL_TM_V_FLOAT || r.kind == PL_TM_V_FLOAT || b < 0) ? pl_tm_float(x)
                                                                             : pl_tm_int(x);
        return 0;
    }
    if (pl_tm_is_num(l) && pl_tm_is_num(r)) {
        double a = l.u.num, b = r.u.num;
        bool fl = l.kind == PL_TM_V_FLOAT || r.kind == PL_TM_V_FLOAT;
        switch (op) {
        case PL_TM_OP_ADD:
            *out = fl ? pl_tm_float(a + b) : pl_tm_int(a + b);
            return 0;
        case PL_TM_OP_SUB:
            *out = fl ? pl_tm_float(a - b) : pl_tm_int(a - b);
            return 0;
        case PL_TM_OP_MUL:
            *out = fl ? pl_tm_float(a * b) : pl_tm_int(a * b);
            return 0;
        case PL_TM_OP_DIV:
            *out = pl_tm_float(a / b);
            return 0;
        case PL_TM_OP_FLOORDIV:
            *out = fl ? pl_tm_float(floor(a / b)) : pl_tm_int(floor(a / b));
            return 0;
        case PL_TM_OP_MOD:
            *out = fl ? pl_tm_float(fmod(a, b)) : pl_tm_int(fmod(a, b));
            return 0;
        case PL_TM_OP_LT:
            *out = pl_tm_bool(a < b);
            return 0;
        case PL_TM_OP_GT:
            *out = pl_tm_bool(a > b);
            return 0;
        case PL_TM_OP_GE:
            *out = pl_tm_bool(a >= b);
            return 0;
        case PL_TM_OP_LE:
            *out = pl_tm_bool(a <= b);
            return 0;
        }
    } else if (pl_tm_is_arr(l) && pl_tm_is_arr(r)) {
        if (op == PL_TM_OP_ADD) {
            pl_tm_array *c;
            PL_TRY(pl_tm_arr_new(rs, l.u.arr->n + r.u.arr->n, &c));
            if (l.u.arr->n) memcpy(c->v, l.u.arr->v, l.u.arr->n * sizeof *c->v);
            if (r.u.arr->n) memcpy(c->v + l.u.arr->n, r.u.arr->v, r.u.arr->n * sizeof *c->v);
            *out = (pl_tm_val){.kind = PL_TM_V_ARRAY, .u.arr = c};
            return 0;
        }
    } else if (pl_tm_is_arr(r)) {
        if (op == PL_TM_OP_IN || op == PL_TM_OP_NOTIN) {
            PL_TRY(pl_tm_charge_n(rs, r.u.arr->n));
            bool found = false;
            for (size_t i = 0; i < r.u.arr->n && !found; i++)
                found = pl_tm_strict_eq(r.u.arr->v[i], l);
            *out = pl_tm_bool(op == PL_TM_OP_IN ? found : !found);
            return 0;
        }
    }
    if ((l.kind == PL_TM_V_STR || r.kind == PL_TM_V_STR) && op == PL_TM_OP_ADD) {
        pl_tm_str a, b, s;
        PL_TRY(pl_tm_js_string(rs, l, &a));
        PL_TRY(pl_tm_js_string(rs, r, &b));
        PL_TRY(pl_tm_str_cat(rs, a, b, &s));
        *out = pl_tm_strv(s);
        return 0;
    }
    if (l.kind == PL_TM_V_STR && r.kind == PL_TM_V_STR &&
        (op == PL_TM_OP_IN || op == PL_TM_OP_NOTIN)) {
        PL_TRY(pl_tm_charge_n(rs, r.u.s.n));
        bool found = l.u.s.n == 0 ||
                     (l.u.s.n <= r.u.s.n && memmem(r.u.s.p, r.u.s.n, l.u.s.p, l.u.s.n) != NULL);
        *out = pl_tm_bool(op == PL_TM_OP_IN ? found : !found);
        return 0;
    }
    if (l.kind == PL_TM_V_STR && pl_tm_is_obj(r) && (op == PL_TM_OP_IN || op == PL_TM_OP_NOTIN)) {
        pl_tm_map *m;
        PL_TRY(pl_tm_obj_map(rs, r, &m));
        bool found = pl_tm_map_get(rs, m, l.u.s) != NULL;
        *out = pl_tm_bool(op == PL_TM_OP_IN ? found : !found);
        return 0;
    }
    static const char *const names[] = {
        [PL_TM_OP_ADD] = "+", [PL_TM_OP_SUB] = "-",        [PL_TM_OP_CONCAT] = "~",
        [PL_TM_OP_MUL] = "*", [PL_TM_OP_DIV] = "/",        [PL_TM_OP_FLOORDIV] = "//",
        [PL_TM_OP_MOD] = "%", [PL_TM_OP_POW] = "**",       [PL_TM_OP_LT] = "<",
        [PL_TM_OP_GT] = ">",  [PL_TM_OP_LE] = "<=",        [PL_TM_OP_GE] = ">=",
        [PL_TM_OP_IN] = "in", [PL_TM_OP_NOTIN] = "not in",
    };
    return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "unknown operator \"%s\" between %s and %s",
                      names[op], pl_tm_kind_name(l.kind), pl_tm_kind_name(r.kind));
}

static NOINLINE int eval_unary(pl_tm_rs *rs, const pl_tm_node *n, pl_tm_env *env, pl_tm_val *out) {
    pl_tm_val v;
    PL_TRY(pl_tm_eval_expr(rs, n->a, env, &v));
    if (n->op == 'n') {
        *out = pl_tm_bool(!pl_tm_truthy(v));
        return 0;
    }
    double sign = n->op == '-' ? -1 : 1;
    if (v.kind == PL_TM_V_INT || v.kind == PL_TM_V_BOOL) {
        *out = pl_tm_int(sign * (v.kind == PL_TM_V_BOOL ? (double)v.u.b : v.u.num));
        return 0;
    }
    if (v.kind == PL_TM_V_FLOAT) {
        *out = pl_tm_float(sign * v.u.num);
        return 0;
    }
    rs->line = n->line;
    return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "unknown operator \"%c\" for %s", n->op,
                      pl_tm_kind_name(v.kind));
}

int pl_tm_eval_args(pl_tm_rs *rs, pl_tm_node *const *args, size_t n, pl_tm_env *env,
                    pl_tm_val **out_pos, size_t *out_n, pl_tm_map **out_kw) {
    size_t cap = 0;
    for (size_t i = 0; i < n; i++)
        if (args[i]->kind != PL_TM_N_KWARG && args[i]->kind != PL_TM_N_KWSPREAD) cap++;
    pl_tm_val *pos = NULL;
    size_t np = 0;
    /* positional arguments (and *spreads) first, then keyword arguments, as the oracle */
    for (size_t i = 0; i < n; i++) {
        const pl_tm_node *a = args[i];
        if (a->kind == PL_TM_N_KWARG || a->kind == PL_TM_N_KWSPREAD) continue;
        pl_tm_val v;
        PL_TRY(pl_tm_eval_expr(rs, a->kind == PL_TM_N_SPREAD ? a->a : a, env, &v));
        size_t add = 1;
        if (a->kind == PL_TM_N_SPREAD) {
            if (!pl_tm_is_arr(v))
                return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT,
                                  "cannot unpack non-iterable type: %s", pl_tm_kind_name(v.kind));
            add = v.u.arr->n;
        }
        if (!pos || np + add > cap) {
            size_t ncap = np + add > cap ? np + add + cap : cap;
            if (ncap > rs->lim.max_items)
                return pl_tm_fail(rs, PL_ERR_TOO_LONG, "more than %zu arguments",
                                  rs->lim.max_items);
            pl_tm_val *p = pl_tm_alloc_n(&rs->a, ncap ? ncap : 1, sizeof *p);
            if (!p) return pl_tm_oom(rs);
            if (np) memcpy(p, pos, np * sizeof *p);
            pos = p;
            cap = ncap;
        }
        if (a->kind == PL_TM_N_SPREAD) {
            if (add) memcpy(pos + np, v.u.arr->v, add * sizeof *pos);
            np += add;
        } else {
            pos[np++] = v;
        }
    }
    pl_tm_map *kw = NULL;
    for (size_t i = 0; i < n; i++) {
        const pl_tm_node *a = args[i];
        if (a->kind != PL_TM_N_KWARG && a->kind != PL_TM_N_KWSPREAD) continue;
        if (!kw) PL_TRY(pl_tm_map_new(rs, 4, &kw));
        pl_tm_val v;
        PL_TRY(pl_tm_eval_expr(rs, a->a, env, &v));
        if (a->kind == PL_TM_N_KWARG) {
            if (pl_tm_map_get(rs, kw, a->s))
                return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT,
                                  "got multiple values for keyword argument '%.*s'", (int)a->s.n,
                                  a->s.p);
            PL_TRY(pl_tm_map_set(rs, kw, a->s, v));
            continue;
        }
        if (v.kind != PL_TM_V_OBJECT && v.kind != PL_TM_V_KWARGS && v.kind != PL_TM_V_LOOP)
            return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT,
                              "argument after ** must be a mapping, not %s",
                              pl_tm_kind_name(v.kind));
        pl_tm_map *m;
        PL_TRY(pl_tm_obj_map(rs, v, &m));
        for (size_t k = 0; k < m->n; k++) {
            if (pl_tm_map_get(rs, kw, m->k[k]))
                return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT,
                                  "got multiple values for keyword argument '%.*s'", (int)m->k[k].n,
                                  m->k[k].p);
            PL_TRY(pl_tm_map_set(rs, kw, m->k[k], m->v[k]));
        }
    }
    *out_pos = pos;
    *out_n = np;
    *out_kw = kw;
    return 0;
}

static NOINLINE int eval_call(pl_tm_rs *rs, const pl_tm_node *n, pl_tm_env *env, pl_tm_val *out) {
    pl_tm_val *pos;
    size_t np;
    pl_tm_map *kw;
    PL_TRY(pl_tm_eval_args(rs, n->args, n->n_args, env, &pos, &np, &kw));
    if (kw && kw->n) {
        /* keyword arguments travel as a last KeywordArgumentsValue */
        pl_tm_val *p = pl_tm_alloc_n(&rs->a, np + 1, sizeof *p);
        if (!p) return pl_tm_oom(rs);
        if (np) memcpy(p, pos, np * sizeof *p);
        p[np++] = (pl_tm_val){.kind = PL_TM_V_KWARGS, .u.map = kw};
        pos = p;
    }
    pl_tm_val fn;
    PL_TRY(pl_tm_eval_expr(rs, n->a, env, &fn));
    rs->line = n->line;
    return call_value(rs, fn, pos, np, env, out);
}

/* The cases of pl_tm_eval_expr with locals live apart, so the frame that recursion repeats stays
 * small (the evaluation depth limit then bounds the C stack tightly). */
static NOINLINE int eval_list(pl_tm_rs *rs, const pl_tm_node *n, pl_tm_env *env, pl_tm_val *out) {
    pl_tm_array *a;
    PL_TRY(pl_tm_arr_new(rs, n->n_args, &a));
    for (size_t i = 0; i < n->n_args; i++) PL_TRY(pl_tm_eval_expr(rs, n->args[i], env, &a->v[i]));
    *out = (pl_tm_val){.kind = n->kind == PL_TM_N_LIST ? PL_TM_V_ARRAY : PL_TM_V_TUPLE, .u.arr = a};
    return 0;
}

static NOINLINE int eval_dict(pl_tm_rs *rs, const pl_tm_node *n, pl_tm_env *env, pl_tm_val *out) {
    pl_tm_map *m;
    PL_TRY(pl_tm_map_new(rs, n->n_args, &m));
    for (size_t i = 0; i < n->n_args; i++) {
        pl_tm_val k, v;
        PL_TRY(pl_tm_eval_expr(rs, n->args[i], env, &k));
        if (k.kind != PL_TM_V_STR) {
            rs->line = n->line;
            return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "object keys must be strings: got %s",
                              pl_tm_kind_name(k.kind));
        }
        PL_TRY(pl_tm_eval_expr(rs, n->body[i], env, &v));
        PL_TRY(pl_tm_map_set(rs, m, k.u.s, v));
    }
    *out = (pl_tm_val){.kind = PL_TM_V_OBJECT, .u.map = m};
    return 0;
}

static NOINLINE int eval_filter(pl_tm_rs *rs, const pl_tm_node *n, pl_tm_env *env, pl_tm_val *out) {
    pl_tm_val v;
    PL_TRY(pl_tm_eval_expr(rs, n->a, env, &v));
    rs->line = n->line;
    return pl_tm_apply_filter(rs, v, n->b, env, out);
}

static NOINLINE int eval_test(pl_tm_rs *rs, const pl_tm_node *n, pl_tm_env *env, pl_tm_val *out) {
    pl_tm_val v;
    bool r;
    PL_TRY(pl_tm_eval_expr(rs, n->a, env, &v));
    rs->line = n->line;
    PL_TRY(pl_tm_apply_test(rs, n->s, v, NULL, &r));
    *out = pl_tm_bool(n->negate ? !r : r);
    return 0;
}

static NOINLINE int eval_conditional(pl_tm_rs *rs, const pl_tm_node *n, pl_tm_env *env,
                                     pl_tm_val *out) {
    pl_tm_val c;
    PL_TRY(pl_tm_eval_expr(rs, n->kind == PL_TM_N_SELECT ? n->b : n->a, env, &c));
    if (n->kind == PL_TM_N_SELECT) {
        if (!pl_tm_truthy(c)) {
            *out = pl_tm_undef();
            return 0;
        }
        return pl_tm_eval_expr(rs, n->a, env, out);
    }
    return pl_tm_eval_expr(rs, pl_tm_truthy(c) ? n->b : n->c, env, out);
}

int pl_tm_eval_expr(pl_tm_rs *rs, const pl_tm_node *n, pl_tm_env *env, pl_tm_val *out) {
    PL_TRY(enter(rs));
    PL_TRY(pl_tm_charge(rs, 1));
    rs->line = n->line;
    int rc = 0;
    switch (n->kind) {
    case PL_TM_N_INT:
        *out = pl_tm_int(n->num);
        break;
    case PL_TM_N_FLOAT:
        *out = pl_tm_float(n->num);
        break;
    case PL_TM_N_STR:
        *out = pl_tm_strv(n->s);
        break;
    case PL_TM_N_IDENT:
        rc = env_get(rs, env, n->s, out);
        break;
    case PL_TM_N_LIST:
    case PL_TM_N_TUPLE:
        rc = eval_list(rs, n, env, out);
        break;
    case PL_TM_N_DICT:
        rc = eval_dict(rs, n, env, out);
        break;
    case PL_TM_N_BINARY:
        rc = eval_binary(rs, n, env, out);
        break;
    case PL_TM_N_UNARY:
        rc = eval_unary(rs, n, env, out);
        break;
    case PL_TM_N_MEMBER:
        rc = eval_member(rs, n, env, out);
        break;
    case PL_TM_N_CALL:
        rc = eval_call(rs, n, env, out);
        break;
    case PL_TM_N_FILTER:
        rc = eval_filter(rs, n, env, out);
        break;
    case PL_TM_N_TEST:
        rc = eval_test(rs, n, env, out);
        break;
    case PL_TM_N_SELECT:
    case PL_TM_N_TERNARY:
        rc = eval_conditional(rs, n, env, out);
        break;
    default:
        rc = pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "this expression cannot be evaluated here");
        break;
    }
    rs->depth--;
    return rc;
}

/* ---- calls ----------------------------------------------------------------------------- */

/* The oracle's bindMacroArguments: positional, then keyword, then defaults (evaluated in the
 * new scope, after every parameter is bound). */
static int bind_params(pl_tm_rs *rs, const char *who, pl_tm_node *const *params, size_t n_params,
                       const pl_tm_val *args, size_t n, pl_tm_env *scope) {
    pl_tm_map *kw = NULL;
    if (n && args[n - 1].kind == PL_TM_V_KWARGS) {
        const pl_tm_map *src = args[--n].u.map;
        PL_TRY(pl_tm_map_new(rs, src->n, &kw));
        for (size_t i = 0; i < src->n; i++) PL_TRY(pl_tm_map_set(rs, kw, src->k[i], src->v[i]));
    }
    bool *pending = NULL;
    if (n_params) {
        pending = pl_tm_zalloc(&rs->a, n_params * sizeof *pending);
        if (!pending) return pl_tm_oom(rs);
    }
    for (size_t i = 0; i < n_params; i++) {
        const pl_tm_node *p = params[i];
        pl_tm_val v = pl_tm_undef();
        bool have = i < n;
        if (have) v = args[i];
        if (!have && kw) {
            for (size_t k = 0; k < kw->n; k++)
                if (pl_tm_str_eq(kw->k[k], p->s)) {
                    v = kw->v[k];
                    have = true;
                    memmove(kw->k + k, kw->k + k + 1, (kw->n - k - 1) * sizeof *kw->k);
                    memmove(kw->v + k, kw->v + k + 1, (kw->n - k - 1) * sizeof *kw->v);
                    kw->n--;
                    break;
                }
        }
        if (!have && p->kind == PL_TM_N_KWARG) pending[i] = true;
        PL_TRY(env_set(rs, scope, p->s, v));
    }
    if (kw && kw->n)
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "macro %s takes no keyword argument '%.*s'",
                          who, (int)kw->k[0].n, kw->k[0].p);
    if (n > n_params)
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT,
                          "macro %s takes not more than %zu argument(s)", who, n_params);
    for (size_t i = 0; i < n_params; i++) {
        if (!pending[i]) continue;
        pl_tm_val v;
        PL_TRY(pl_tm_eval_expr(rs, params[i]->a, scope, &v));
        PL_TRY(env_set(rs, scope, params[i]->s, v));
    }
    return 0;
}

static int call_value(pl_tm_rs *rs, pl_tm_val fnv, const pl_tm_val *args, size_t n, pl_tm_env *env,
                      pl_tm_val *out) {
    if (fnv.kind != PL_TM_V_FUNC)
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT,
                          "cannot call something that is not a function: got %s",
                          pl_tm_kind_name(fnv.kind));
    const pl_tm_func *f = fnv.u.fn;
    if (f->kind == PL_TM_F_METHOD) return pl_tm_call_method(rs, f, args, n, out);
    if (f->kind == PL_TM_F_CYCLE) {
        if (n && args[n - 1].kind == PL_TM_V_KWARGS) n--;
        if (n == 0) return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "loop.cycle() needs arguments");
        *out = args[(size_t)fmod(f->self.u.loop->index0, (double)n)];
        return 0;
    }
    if (f->kind != PL_TM_F_MACRO && f->kind != PL_TM_F_CALLER)
        return pl_tm_call_builtin(rs, f, args, n, out);
    if (++rs->calls > rs->lim.max_calls)
        return pl_tm_fail(rs, PL_ERR_TOO_LONG, "macro calls nested more than %d deep",
                          rs->lim.max_calls);
    const pl_tm_node *m = f->node;
    pl_tm_env *scope = NULL;
    PL_TRY(env_new(rs, f->kind == PL_TM_F_MACRO ? env : f->env, &scope));
    char who[80];
    if (f->kind == PL_TM_F_MACRO)
        snprintf(who, sizeof who, "'%.*s'", (int)(m->s.n > 60 ? 60 : m->s.n), m->s.p);
    else
        snprintf(who, sizeof who, "None");
    size_t mark = rs->out.n;
    int rc = bind_params(rs, who, m->args, m->n_args, args, n, scope);
    if (rc == 0) rc = eval_block(rs, m->body, m->n_body, scope);
    rs->calls--;
    if (rc) return rc; /* an error, or break/continue travelling to an enclosing loop */
    pl_tm_str s;
    PL_TRY(cut(rs, mark, &s));
    *out = pl_tm_strv(s);
    return 0;
}

/* ---- statements ------------------------------------------------------------------------ */

/* Binds a for loop's target to one item (unpacking `k, v`). */
static int bind_target(pl_tm_rs *rs, const pl_tm_node *target, pl_tm_val item, pl_tm_env *scope) {
    if (target->kind == PL_TM_N_IDENT) return env_set(rs, scope, target->s, item);
    if (item.kind != PL_TM_V_ARRAY)
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "cannot unpack non-iterable type: %s",
                          pl_tm_kind_name(item.kind));
    if (item.u.arr->n != target->n_args)
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "too %s items to unpack",
                          target->n_args > item.u.arr->n ? "few" : "many");
    for (size_t j = 0; j < target->n_args; j++) {
        if (target->args[j]->kind != PL_TM_N_IDENT)
            return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "cannot unpack to a non-identifier");
        PL_TRY(env_set(rs, scope, target->args[j]->s, item.u.arr->v[j]));
    }
    return 0;
}

static NOINLINE int eval_for(pl_tm_rs *rs, const pl_tm_node *n, pl_tm_env *env) {
    pl_tm_env *scope = NULL;
    PL_TRY(env_new(rs, env, &scope));
    const pl_tm_node *iter_node = n->b, *test = NULL;
    if (iter_node->kind == PL_TM_N_SELECT) {
        test = iter_node->b;
        iter_node = iter_node->a;
    }
    pl_tm_val it;
    PL_TRY(pl_tm_eval_expr(rs, iter_node, scope, &it));
    rs->line = n->line;
    const pl_tm_val *items;
    size_t count;
    if (pl_tm_is_arr(it)) {
        items = it.u.arr->v;
        count = it.u.arr->n;
    } else if (pl_tm_is_obj(it)) {
        pl_tm_map *m;
        PL_TRY(pl_tm_obj_map(rs, it, &m));
        pl_tm_array *keys;
        PL_TRY(pl_tm_arr_new(rs, m->n, &keys));
        for (size_t i = 0; i < m->n; i++) keys->v[i] = pl_tm_strv(m->k[i]);
        items = keys->v;
        count = keys->n;
    } else {
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT,
                          "expected an iterable or object in a for loop: got %s",
                          pl_tm_kind_name(it.kind));
    }
    const pl_tm_val *sel = items;
    size_t n_sel = count;
    if (test) {
        pl_tm_env *ts = NULL; /* the loop filter sees the item in its own scope */
        PL_TRY(env_new(rs, scope, &ts));
        pl_tm_val *keep = count ? pl_tm_alloc_n(&rs->a, count, sizeof *keep) : NULL;
        if (count && !keep) return pl_tm_oom(rs);
        n_sel = 0;
        for (size_t i = 0; i < count; i++) {
            PL_TRY(pl_tm_charge(rs, 1));
            rs->line = n->line;
            PL_TRY(bind_target(rs, n->a, items[i], ts));
            pl_tm_val c;
            PL_TRY(pl_tm_eval_expr(rs, test, ts, &c));
            if (pl_tm_truthy(c)) keep[n_sel++] = items[i];
        }
        sel = keep;
    }
    bool none = true;
    for (size_t i = 0; i < n_sel; i++) {
        PL_TRY(pl_tm_charge(rs, 1));
        pl_tm_loop *L = pl_tm_zalloc(&rs->a, sizeof *L);
        if (!L) return pl_tm_oom(rs);
        L->index0 = (double)i;
        L->length = (double)n_sel;
        L->items = sel;
        PL_TRY(
            env_set(rs, scope, PL_TM_LIT("loop"), (pl_tm_val){.kind = PL_TM_V_LOOP, .u.loop = L}));
        rs->line = n->line;
        PL_TRY(bind_target(rs, n->a, sel[i], scope));
        size_t mark = rs->out.n;
        int rc = eval_block(rs, n->body, n->n_body, scope);
        if (rc == PL_TM_CONTINUE || rc == PL_TM_BREAK) {
            rs->out.n = mark; /* the oracle loses the interrupted iteration's output */
            if (rc == PL_TM_BREAK) break;
            continue;
        }
        if (rc) return rc;
        none = false;
    }
    if (none) return eval_block(rs, n->alt, n->n_alt, scope);
    return 0;
}

static NOINLINE int eval_set(pl_tm_rs *rs, const pl_tm_node *n, pl_tm_env *env) {
    pl_tm_val v;
    if (n->b) {
        PL_TRY(pl_tm_eval_expr(rs, n->b, env, &v));
    } else {
        size_t mark = rs->out.n;
        PL_TRY(eval_block(rs, n->body, n->n_body, env));
        pl_tm_str s;
        PL_TRY(cut(rs, mark, &s));
        v = pl_tm_strv(s);
    }
    rs->line = n->line;
    const pl_tm_node *t = n->a;
    if (t->kind == PL_TM_N_IDENT) return env_set(rs, env, t->s, v);
    if (t->kind == PL_TM_N_TUPLE) {
        if (!pl_tm_is_arr(v))
            return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT,
                              "cannot unpack non-iterable type in set: %s",
                              pl_tm_kind_name(v.kind));
        if (v.u.arr->n != t->n_args)
            return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "too %s items to unpack in set",
                              t->n_args > v.u.arr->n ? "few" : "many");
        for (size_t i = 0; i < t->n_args; i++) {
            if (t->args[i]->kind != PL_TM_N_IDENT)
                return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT,
                                  "cannot unpack to a non-identifier in set");
            PL_TRY(env_set(rs, env, t->args[i]->s, v.u.arr->v[i]));
        }
        return 0;
    }
    if (t->kind == PL_TM_N_MEMBER) {
        pl_tm_val obj;
        PL_TRY(pl_tm_eval_expr(rs, t->a, env, &obj));
        rs->line = n->line;
        if (obj.kind != PL_TM_V_NS)
            return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT,
                              "cannot assign an attribute of a non-namespace object");
        /* the oracle takes the identifier's name even in ns[name] */
        if (t->b->kind != PL_TM_N_IDENT)
            return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT,
                              "cannot assign to a member with a non-identifier property");
        return pl_tm_map_set(rs, obj.u.map, t->b->s, v);
    }
    return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "invalid target of an assignment");
}

static NOINLINE int eval_call_block(pl_tm_rs *rs, const pl_tm_node *n, pl_tm_env *env) {
    pl_tm_func *caller = pl_tm_zalloc(&rs->a, sizeof *caller);
    if (!caller) return pl_tm_oom(rs);
    caller->kind = PL_TM_F_CALLER;
    caller->node = n;
    caller->env = env;
    const pl_tm_node *call = n->a;
    pl_tm_val *pos;
    size_t np;
    pl_tm_map *kw;
    PL_TRY(pl_tm_eval_args(rs, call->args, call->n_args, env, &pos, &np, &kw));
    if (!kw) PL_TRY(pl_tm_map_new(rs, 0, &kw));
    pl_tm_val *args =
        pl_tm_alloc_n(&rs->a, np + 1, sizeof *args); /* the oracle always passes kwargs */
    if (!args) return pl_tm_oom(rs);
    if (np) memcpy(args, pos, np * sizeof *args);
    args[np] = (pl_tm_val){.kind = PL_TM_V_KWARGS, .u.map = kw};
    pl_tm_val fn;
    PL_TRY(pl_tm_eval_expr(rs, call->a, env, &fn));
    pl_tm_env *scope = NULL;
    PL_TRY(env_new(rs, env, &scope));
    PL_TRY(
        env_set(rs, scope, PL_TM_LIT("caller"), (pl_tm_val){.kind = PL_TM_V_FUNC, .u.fn = caller}));
    rs->line = n->line;
    pl_tm_val r;
    PL_TRY(call_value(rs, fn, args, np + 1, scope, &r));
    return out_val(rs, r);
}

static NOINLINE int eval_stmt(pl_tm_rs *rs, const pl_tm_node *n, pl_tm_env *env) {
    PL_TRY(pl_tm_charge(rs, 1));
    rs->line = n->line;
    switch (n->kind) {
    case PL_TM_N_TEXT:
        return out_put(rs, n->s);
    case PL_TM_N_OUTPUT: {
        pl_tm_val v;
        PL_TRY(pl_tm_eval_expr(rs, n->a, env, &v));
        rs->line = n->line;
        return out_val(rs, v);
    }
    case PL_TM_N_IF:
        for (;;) { /* an elif chain, in a loop */
            pl_tm_val c;
            PL_TRY(pl_tm_eval_expr(rs, n->a, env, &c));
            if (pl_tm_truthy(c)) return eval_block(rs, n->body, n->n_body, env);
            if (n->n_alt == 1 && n->alt[0]->is_elif) {
                n = n->alt[0];
                rs->line = n->line;
                continue;
            }
            return eval_block(rs, n->alt, n->n_alt, env);
        }
    case PL_TM_N_FOR:
        return eval_for(rs, n, env);
    case PL_TM_N_SET:
        return eval_set(rs, n, env);
    case PL_TM_N_MACRO: {
        pl_tm_func *f = pl_tm_zalloc(&rs->a, sizeof *f);
        if (!f) return pl_tm_oom(rs);
        f->kind = PL_TM_F_MACRO;
        f->node = n;
        return env_set(rs, env, n->s, (pl_tm_val){.kind = PL_TM_V_FUNC, .u.fn = f});
    }
    case PL_TM_N_CALLBLK:
        return eval_call_block(rs, n, env);
    case PL_TM_N_FILTBLK: {
        size_t mark = rs->out.n;
        PL_TRY(eval_block(rs, n->body, n->n_body, env));
        pl_tm_str s;
        PL_TRY(cut(rs, mark, &s));
        pl_tm_val r;
        rs->line = n->line;
        PL_TRY(pl_tm_apply_filter(rs, pl_tm_strv(s), n->a, env, &r));
        return out_val(rs, r);
    }
    case PL_TM_N_BREAK:
        return PL_TM_BREAK;
    case PL_TM_N_CONTINUE:
        return PL_TM_CONTINUE;
    default:
        return 0;
    }
}

static int eval_block(pl_tm_rs *rs, pl_tm_node *const *body, size_t n, pl_tm_env *env) {
    PL_TRY(enter(rs));
    for (size_t i = 0; i < n; i++) {
        int rc = eval_stmt(rs, body[i], env);
        if (rc) {
            rs->depth--;
            return rc;
        }
    }
    rs->depth--;
    return 0;
}

/* ---- entry ----------------------------------------------------------------------------- */

void pl_tmpl_limits_default(pl_tmpl_limits *out) {
    out->max_steps = 20000000;
    out->max_output_bytes = (size_t)16 << 20;
    out->max_memory_bytes = (size_t)256 << 20;
    out->max_depth = 400;
    out->max_calls = 64;
    out->max_items = 1000000;
}

static const char *const k_globals[] = {
    "false", "true", "none", "raise_exception", "range", "strftime_now", "True",
    "False", "None", NULL};

static int setup_globals(pl_tm_rs *rs, pl_tm_env *g) {
    for (const char *const *name = k_globals; *name; name++) {
        pl_tm_str s = {*name, strlen(*name)};
        pl_tm_val v;
        pl_tm_global_lookup(s, &v);
        PL_TRY(env_set(rs, g, s, v));
    }
    return 0;
}

static int set_vars(pl_tm_rs *rs, pl_tm_env *g, const json_t *vars) {
    if (!vars) return 0;
    if (!json_is_object(vars))
        return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "the variables must be a JSON object");
    pl_tm_val all;
    PL_TRY(pl_tm_from_json(rs, vars, 0, &all));
    const pl_tm_map *m = all.u.map;
    for (size_t i = 0; i < m->n; i++) {
        bool taken = pl_tm_str_eqc(m->k[i], "namespace");
        for (size_t k = 0; k < g->n && !taken; k++) taken = pl_tm_str_eq(g->names[k], m->k[i]);
        if (taken)
            return pl_tm_fail(rs, PL_ERR_INVALID_ARGUMENT, "variable already declared: %.*s",
                              (int)(m->k[i].n > 60 ? 60 : m->k[i].n), m->k[i].p);
        PL_TRY(env_set(rs, g, m->k[i], m->v[i]));
    }
    return 0;
}

pl_status pl_tmpl_render_limited(const pl_tmpl *t, const json_t *vars, const pl_tmpl_limits *limits,
                                 char **out_text, size_t *out_len) {
    if (!t || !out_text)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "pl_tmpl_render: NULL template or output");
    pl_tm_rs rs = {.line = 1};
    pl_tmpl_limits dflt;
    pl_tmpl_limits_default(&dflt);
    rs.lim = limits ? *limits : dflt;
    /* a field left at 0 takes its default */
    if (rs.lim.max_steps == 0) rs.lim.max_steps = dflt.max_steps;
    if (rs.lim.max_output_bytes == 0) rs.lim.max_output_bytes = dflt.max_output_bytes;
    if (rs.lim.max_memory_bytes == 0) rs.lim.max_memory_bytes = dflt.max_memory_bytes;
    if (rs.lim.max_depth <= 0) rs.lim.max_depth = dflt.max_depth;
    if (rs.lim.max_calls <= 0) rs.lim.max_calls = dflt.max_calls;
    if (rs.lim.max_items == 0) rs.lim.max_items = dflt.max_items;
    pl_tm_arena_init(&rs.a, rs.lim.max_memory_bytes);
    pl_tm_env *g = NULL;
    int rc = env_new(&rs, NULL, &g);
    if (rc == 0) rc = setup_globals(&rs, g);
    if (rc == 0) rc = set_vars(&rs, g, vars);
    if (rc == 0) rc = eval_block(&rs, t->body, t->n_body, g);
    if (rc == PL_TM_BREAK || rc == PL_TM_CONTINUE)
        rc = pl_tm_fail(&rs, PL_ERR_INVALID_ARGUMENT, "%s outside a for loop",
                        rc == PL_TM_BREAK ? "break" : "continue");
    if (rc == 0 && rs.out.n + 1 > rs.out.cap) rc = out_put(&rs, (pl_tm_str){"", 0});
    if (rc == 0 && !rs.out.p) {
        rs.out.p = pl_malloc(1);
        if (!rs.out.p) rc = pl_tm_oom(&rs);
    }
    pl_tm_arena_free(&rs.a);
    if (rc) {
        pl_free(rs.out.p);
        return (pl_status)rc;
    }
    rs.out.p[rs.out.n] = 0;
    *out_text = rs.out.p;
    if (out_len) *out_len = rs.out.n;
    return PL_OK;
}

pl_status pl_tmpl_render(const pl_tmpl *t, const json_t *vars, char **out_text, size_t *out_len) {
    return pl_tmpl_render_limited(t, vars, NULL, out_text, out_len);
}
