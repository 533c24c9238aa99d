/*
 * template/tmpl_internal.h - what the files of template/ share: the arena, the tokens, the
 * syntax tree, run-time values and the render state.
 *
 * Data flow: pl_tmpl_parse runs lex.c (the oracle's source rewrites, then tokens) and
 * parse.c (tokens -> tree, then the checks that refuse unsupported constructs); the tree lives
 * in the template's arena until pl_tmpl_free. pl_tmpl_render makes a render state whose arena
 * holds every value made while rendering (eval.c walks the tree; filters.c, methods.c and
 * builtins.c implement the library; value.c and json.c the value model), and frees it at the
 * end, so no value is ever freed on its own and values may share anything.
 *
 * Semantics follow @huggingface/jinja 0.5.11 (see template.h): numbers are doubles with an
 * integer/float flag, `==` is JavaScript's loose equality on the underlying values, strings
 * are UTF-8 but their length and integer indexing count UTF-16 code units.
 */
#ifndef PL_TEMPLATE_INTERNAL_H
#define PL_TEMPLATE_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "template/template.h"
#include "util/buf.h"
#include "util/status.h"

/* ---- arena ----------------------------------------------------------------------------- */

/* Bump allocation in chunks from pl_malloc; freed all at once. `limit` (0: none) caps the bytes
 * taken from the heap; past it allocation fails and `over_limit` is set, so the caller can tell
 * a limit from a real out-of-memory. */
typedef struct pl_tm_chunk pl_tm_chunk;
typedef struct pl_tm_arena {
    pl_tm_chunk *head;
    size_t used_bytes; /* heap bytes held by chunks */
    size_t limit;
    bool over_limit;
} pl_tm_arena;

void pl_tm_arena_init(pl_tm_arena *a, size_t limit);
void pl_tm_arena_free(pl_tm_arena *a);
void *pl_tm_alloc(pl_tm_arena *a, size_t n);  /* 16-byte aligned, not zeroed; NULL on failure */
void *pl_tm_zalloc(pl_tm_arena *a, size_t n); /* zeroed */
void *pl_tm_alloc_n(pl_tm_arena *a, size_t n,
                    size_t sz); /* n * sz with an overflow check, not zeroed */

/* ---- strings --------------------------------------------------------------------------- */

typedef struct pl_tm_str {
    const char *p;
    size_t n;
} pl_tm_str;

#define PL_TM_LIT(s) ((pl_tm_str){(s), sizeof(s) - 1})
bool pl_tm_str_eq(pl_tm_str a, pl_tm_str b);
bool pl_tm_str_eqc(pl_tm_str a, const char *c);

/* ---- tokens (lex.c) -------------------------------------------------------------------- */

typedef enum {
    PL_TM_TK_TEXT,
    PL_TM_TK_NUMBER,
    PL_TM_TK_STRING,
    PL_TM_TK_IDENT,
    PL_TM_TK_EQUALS,
    PL_TM_TK_LPAREN,
    PL_TM_TK_RPAREN,
    PL_TM_TK_OPEN_STMT,
    PL_TM_TK_CLOSE_STMT,
    PL_TM_TK_OPEN_EXPR,
    PL_TM_TK_CLOSE_EXPR,
    PL_TM_TK_LBRACKET,
    PL_TM_TK_RBRACKET,
    PL_TM_TK_LBRACE,
    PL_TM_TK_RBRACE,
    PL_TM_TK_COMMA,
    PL_TM_TK_DOT,
    PL_TM_TK_COLON,
    PL_TM_TK_PIPE,
    PL_TM_TK_ADD,     /* + - ~ */
    PL_TM_TK_MUL,     /* * / // % */
    PL_TM_TK_POW,     /* ** */
    PL_TM_TK_COMPARE, /* < > <= >= == != */
    PL_TM_TK_UNARY,   /* a lone + or - in unary position */
    PL_TM_TK_COMMENT,
} pl_tm_tok_kind;

typedef struct pl_tm_tok {
    pl_tm_tok_kind kind;
    pl_tm_str s;  /* the token's value: text, unescaped string, identifier, operator, number */
    int line;     /* 1-based line in the original source */
    uint32_t off; /* byte offset in the original source */
} pl_tm_tok;

/* 1-based column (in characters) of byte offset off of src, for messages. */
int pl_tm_column(const char *src, size_t len, uint32_t off);

/* The source after the oracle's rewrites (trailing newline, lstrip_blocks, trim_blocks,
 * `generation` tags) cut into tokens. Token strings point into `a`. PL_ERR_FORMAT with
 * line:column on a lexical error. */
pl_status pl_tm_lex(const char *src, size_t len, pl_tm_arena *a, pl_tm_tok **out_toks,
                    size_t *out_n);

/* ---- syntax tree (parse.c) -------------------------------------------------------------- */

/* Node kinds and the fields each uses (names without the PL_TM_N_ prefix in comments). */
typedef enum {
    /* statements */
    PL_TM_N_TEXT,     /* s */
    PL_TM_N_OUTPUT,   /* a: the expression of {{ }} */
    PL_TM_N_IF,       /* a: test, body, alt (an elif is an IF alone in alt, with is_elif) */
    PL_TM_N_FOR,      /* a: target (IDENT or TUPLE), b: iterable, body, alt: else */
    PL_TM_N_SET,      /* a: target, b: value (NULL for a block set: body) */
    PL_TM_N_MACRO,    /* s: name, args: parameters (IDENT, or KWARG with a default), body */
    PL_TM_N_CALLBLK,  /* a: the CALL, args: caller parameters, body */
    PL_TM_N_FILTBLK,  /* a: filter (IDENT or CALL), body */
    PL_TM_N_BREAK,
    PL_TM_N_CONTINUE,
    PL_TM_N_COMMENT,
    /* expressions */
    PL_TM_N_INT,      /* num */
    PL_TM_N_FLOAT,    /* num */
    PL_TM_N_STR,      /* s */
    PL_TM_N_IDENT,    /* s */
    PL_TM_N_LIST,     /* args */
    PL_TM_N_TUPLE,    /* args */
    PL_TM_N_DICT,     /* args: keys, body: values (as expressions) */
    PL_TM_N_BINARY,   /* op, a, b */
    PL_TM_N_UNARY,    /* op ('-', '+', or 'n' for not), a */
    PL_TM_N_MEMBER,   /* a: object, b: property (IDENT or INT when !computed; SLICE or any) */
    PL_TM_N_SLICE,    /* a, b, c: start, stop, step (each may be NULL) */
    PL_TM_N_CALL,     /* a: callee, args */
    PL_TM_N_KWARG,    /* s: name, a: value */
    PL_TM_N_SPREAD,   /* a (*x in a call) */
    PL_TM_N_KWSPREAD, /* a (**x in a call) */
    PL_TM_N_FILTER,   /* a: operand, b: filter (IDENT, or CALL with an IDENT callee) */
    PL_TM_N_TEST,     /* a: operand, s: test name, negate */
    PL_TM_N_SELECT,   /* a: value, b: condition (`a if b` without else; a for loop's filter) */
    PL_TM_N_TERNARY,  /* a: condition, b: if true, c: if false */
} pl_tm_node_kind;

/* Binary operators. */
enum {
    PL_TM_OP_ADD = 1,
    PL_TM_OP_SUB,
    PL_TM_OP_CONCAT,
    PL_TM_OP_MUL,
    PL_TM_OP_DIV,
    PL_TM_OP_FLOORDIV,
    PL_TM_OP_MOD,
    PL_TM_OP_POW,
    PL_TM_OP_EQ,
    PL_TM_OP_NE,
    PL_TM_OP_LT,
    PL_TM_OP_GT,
    PL_TM_OP_LE,
    PL_TM_OP_GE,
    PL_TM_OP_IN,
    PL_TM_OP_NOTIN,
    PL_TM_OP_AND,
    PL_TM_OP_OR,
};

typedef struct pl_tm_node pl_tm_node;
struct pl_tm_node {
    pl_tm_node_kind kind;
    int op;
    int line;
    int tree_depth; /* 1 + the deepest child's (an elif chain counts once) */
    bool computed, negate, is_elif;
    pl_tm_str s;
    double num;
    pl_tm_node *a, *b, *c;
    pl_tm_node **args;
    size_t n_args;
    pl_tm_node **body;
    size_t n_body;
    pl_tm_node **alt;
    size_t n_alt;
};

/* ---- values (value.c) ------------------------------------------------------------------ */

typedef enum {
    PL_TM_V_UNDEF,
    PL_TM_V_NULL,
    PL_TM_V_BOOL,
    PL_TM_V_INT, /* num holds an integral (or non-finite) double, as the oracle's IntegerValue */
    PL_TM_V_FLOAT,
    PL_TM_V_STR,
    PL_TM_V_ARRAY,
    PL_TM_V_TUPLE,
    PL_TM_V_OBJECT,
    PL_TM_V_KWARGS, /* keyword arguments passed to a function: an object */
    PL_TM_V_NS,     /* namespace(): the only mutable value */
    PL_TM_V_LOOP,   /* the `loop` object of a for loop, an object made on demand */
    PL_TM_V_FUNC,
} pl_tm_kind;

typedef struct pl_tm_array pl_tm_array;
typedef struct pl_tm_map pl_tm_map;
typedef struct pl_tm_func pl_tm_func;
typedef struct pl_tm_loop pl_tm_loop;

typedef struct pl_tm_val {
    pl_tm_kind kind;
    union {
        bool b;
        double num;
        pl_tm_str s;
        pl_tm_array *arr; /* PL_TM_V_ARRAY, PL_TM_V_TUPLE */
        pl_tm_map *map;   /* PL_TM_V_OBJECT, PL_TM_V_KWARGS, PL_TM_V_NS */
        pl_tm_loop *loop;
        pl_tm_func *fn;
    } u;
} pl_tm_val;

struct pl_tm_array {
    size_t n;
    pl_tm_val *v;
};

/* Insertion-ordered map; only a namespace's ever changes after it is made. */
struct pl_tm_map {
    size_t n, cap;
    pl_tm_str *k;
    pl_tm_val *v;
};

struct pl_tm_loop {
    double index0, length;
    const pl_tm_val *items; /* the iterated items (for previtem/nextitem/cycle) */
    pl_tm_map *made;        /* the object form, made on first use */
};

typedef enum {
    PL_TM_F_RANGE,
    PL_TM_F_NAMESPACE,
    PL_TM_F_RAISE,
    PL_TM_F_STRFTIME,
    PL_TM_F_METHOD, /* a string/object method bound to `self` */
    PL_TM_F_MACRO,
    PL_TM_F_CALLER,
    PL_TM_F_CYCLE,
} pl_tm_func_kind;

typedef struct pl_tm_env pl_tm_env;
struct pl_tm_func {
    pl_tm_func_kind kind;
    int method;             /* PL_TM_F_METHOD: which (methods.c) */
    pl_tm_val self;         /* PL_TM_F_METHOD: receiver; PL_TM_F_CYCLE: the loop */
    const pl_tm_node *node; /* PL_TM_F_MACRO: PL_TM_N_MACRO; PL_TM_F_CALLER: PL_TM_N_CALLBLK */
    pl_tm_env *env;         /* PL_TM_F_CALLER: the scope of the call block */
};

static inline pl_tm_val pl_tm_undef(void) { return (pl_tm_val){.kind = PL_TM_V_UNDEF}; }
static inline pl_tm_val pl_tm_null(void) { return (pl_tm_val){.kind = PL_TM_V_NULL}; }
static inline pl_tm_val pl_tm_bool(bool b) { return (pl_tm_val){.kind = PL_TM_V_BOOL, .u.b = b}; }
static inline pl_tm_val pl_tm_int(double x) { return (pl_tm_val){.kind = PL_TM_V_INT, .u.num = x}; }
static inline pl_tm_val pl_tm_float(double x) {
    return (pl_tm_val){.kind = PL_TM_V_FLOAT, .u.num = x};
}
static inline pl_tm_val pl_tm_strv(pl_tm_str s) {
    return (pl_tm_val){.kind = PL_TM_V_STR, .u.s = s};
}
static inline bool pl_tm_is_num(pl_tm_val v) {
    return v.kind == PL_TM_V_INT || v.kind == PL_TM_V_FLOAT;
}
static inline bool pl_tm_is_arr(pl_tm_val v) {
    return v.kind == PL_TM_V_ARRAY || v.kind == PL_TM_V_TUPLE;
}
/* The oracle's ObjectValue (plain objects, keyword arguments and the loop object). */
static inline bool pl_tm_is_obj(pl_tm_val v) {
    return v.kind == PL_TM_V_OBJECT || v.kind == PL_TM_V_KWARGS || v.kind == PL_TM_V_LOOP;
}

/* ---- render state (eval.c) ------------------------------------------------------------- */

struct pl_tm_env {
    pl_tm_env *parent;
    size_t n, cap;
    pl_tm_str *names;
    pl_tm_val *vals;
};

typedef pl_buf pl_tm_out; /* the render's output */

typedef struct pl_tm_rs {
    pl_tm_arena a;
    pl_tmpl_limits lim;
    uint64_t steps;
    int depth;
    int calls; /* nested macro/caller calls */
    int line;  /* line of the node being evaluated, for messages */
    pl_tm_out out;
} pl_tm_rs;

/* Evaluates an expression (eval.c). */
int pl_tm_eval_expr(pl_tm_rs *rs, const pl_tm_node *n, pl_tm_env *env, pl_tm_val *out);
/* Evaluates call arguments: positional ones (with *spreads) into *out_pos, keyword ones (with
 * **spreads) into *out_kw (NULL when there are none). */
int pl_tm_eval_args(pl_tm_rs *rs, pl_tm_node *const *args, size_t n, pl_tm_env *env,
                    pl_tm_val **out_pos, size_t *out_n, pl_tm_map **out_kw);

/* Internal results: 0 ok, a negative pl_status, or a loop signal. */
#define PL_TM_BREAK 1
#define PL_TM_CONTINUE 2

/* Failures and the budget (budget.c, below every other file of the render). */
/* Records a render failure naming the current line; returns code. */
int pl_tm_fail(pl_tm_rs *rs, pl_status code, const char *fmt, ...) PL_PRINTF(3, 4);
/* PL_ERR_TOO_LONG when the arena hit its limit, else PL_ERR_OUT_OF_MEMORY. */
int pl_tm_oom(pl_tm_rs *rs);
/* Charges work; fails with PL_ERR_TOO_LONG past the step budget. */
int pl_tm_charge(pl_tm_rs *rs, uint64_t steps);
/* Charges work proportional to n bytes or elements scanned. */
static inline int pl_tm_charge_n(pl_tm_rs *rs, size_t n) { return pl_tm_charge(rs, 1 + n / 16); }

/* ---- value helpers (value.c) ----------------------------------------------------------- */

/* A string of n bytes in the arena; fails past max_output_bytes. */
int pl_tm_str_new(pl_tm_rs *rs, size_t n, char **out_p);
int pl_tm_str_cat(pl_tm_rs *rs, pl_tm_str a, pl_tm_str b, pl_tm_str *out);
/* A string built by appending (in the arena, doubling): linear where repeated pl_tm_str_cat
 * would be quadratic. */
typedef struct pl_tm_sb {
    char *p;
    size_t n, cap;
} pl_tm_sb;
int pl_tm_sb_put(pl_tm_rs *rs, pl_tm_sb *b, pl_tm_str s);
static inline pl_tm_str pl_tm_sb_str(const pl_tm_sb *b) {
    return (pl_tm_str){b->p ? b->p : "", b->n};
}
int pl_tm_arr_new(pl_tm_rs *rs, size_t n, pl_tm_array **out);
int pl_tm_map_new(pl_tm_rs *rs, size_t cap, pl_tm_map **out);
int pl_tm_map_set(pl_tm_rs *rs, pl_tm_map *m, pl_tm_str k, pl_tm_val v); /* replaces or appends */
/* Lookup; NULL when absent. Charges the scan. */
const pl_tm_val *pl_tm_map_get(pl_tm_rs *rs, const pl_tm_map *m, pl_tm_str k);
/* The map behind an object-like value (makes the loop object on first use). */
int pl_tm_obj_map(pl_tm_rs *rs, pl_tm_val v, pl_tm_map **out);

bool pl_tm_truthy(pl_tm_val v);
const char *pl_tm_kind_name(pl_tm_kind k); /* the oracle's type names ("StringValue") */

/* JavaScript number -> string (Number.prototype.toString). buf >= 32 bytes. */
size_t pl_tm_num_js(double x, char *buf);
/* Values as text and equality (text.c). */
/* The oracle's toString of a value (FloatValue 1 -> "1.0", arrays/objects -> JSON). */
int pl_tm_to_string(pl_tm_rs *rs, pl_tm_val v, pl_tm_str *out);
/* The JavaScript toString of the underlying value (`value.toString()`: FloatValue 1 -> "1",
 * arrays -> elements joined with ",", objects -> "[object Map]"). */
int pl_tm_js_string(pl_tm_rs *rs, pl_tm_val v, pl_tm_str *out);
/* JavaScript's `==` and `===` on the underlying values. */
int pl_tm_loose_eq(pl_tm_rs *rs, pl_tm_val a, pl_tm_val b, bool *out);
bool pl_tm_strict_eq(pl_tm_val a, pl_tm_val b);

/* JSON.stringify-like serialisation as the oracle's toJSON (json.c). indent < 0: none. */
typedef struct pl_tm_json_opt {
    int indent;
    bool ensure_ascii;
    pl_tm_str item_sep, key_sep; /* .p NULL: defaults */
    bool undefined_as_null;
} pl_tm_json_opt;
int pl_tm_to_json(pl_tm_rs *rs, pl_tm_val v, const pl_tm_json_opt *opt, pl_tm_str *out);
/* From a jansson value, as JSON.parse and the oracle's conversion make it. */
int pl_tm_from_json(pl_tm_rs *rs, const json_t *j, int depth, pl_tm_val *out);

/* ---- strings as JavaScript sees them (jstr.c) ------------------------------------------ */

/* Length in UTF-16 code units. */
size_t pl_tm_utf16_len(pl_tm_str s);
/* Byte length of the JavaScript white space (\s, String.prototype.trim) at p, else 0. */
int pl_tm_js_space(const char *p, size_t n);
/* Byte length of JavaScript white space ending at p + n (looking backwards), else 0. */
int pl_tm_js_space_back(const char *p, size_t n);
pl_tm_str pl_tm_trim(pl_tm_str s, bool left, bool right);
/* Compares as JavaScript's < does (UTF-16 code units). */
int pl_tm_js_cmp(pl_tm_str a, pl_tm_str b);
/* toUpperCase / toLowerCase: exact for ASCII and for characters without case; other letters
 * are PL_ERR_UNSUPPORTED (see template.h). */
int pl_tm_case(pl_tm_rs *rs, pl_tm_str s, bool upper, pl_tm_str *out);
/* JavaScript ToNumber of a string (NaN when not a number), parseInt(s, 10), parseFloat(s). */
double pl_tm_js_to_number(pl_tm_str s);
double pl_tm_js_parse_int(pl_tm_str s);
double pl_tm_js_parse_float(pl_tm_str s);

/* ---- the library ----------------------------------------------------------------------- */

/* filters.c */
bool pl_tm_filter_known(pl_tm_str name);
bool pl_tm_test_known(pl_tm_str name);
int pl_tm_apply_test(pl_tm_rs *rs, pl_tm_str name, pl_tm_val v, const pl_tm_val *arg, bool *out);
int pl_tm_apply_filter(pl_tm_rs *rs, pl_tm_val operand, const pl_tm_node *filter, pl_tm_env *env,
                       pl_tm_val *out);

/* methods.c: str.upper(), dict.items(), ... */
bool pl_tm_method_known(pl_tm_str name);
/* The builtin member `name` of v (a bound method, or a string's/array's length), or undefined. */
int pl_tm_builtin_member(pl_tm_rs *rs, pl_tm_val v, pl_tm_str name, pl_tm_val *out);
int pl_tm_call_method(pl_tm_rs *rs, const pl_tm_func *f, const pl_tm_val *args, size_t n,
                      pl_tm_val *out);
/* Shared by the `sort` filter and dict.dictsort(). */
int pl_tm_compare(pl_tm_rs *rs, pl_tm_val a, pl_tm_val b, bool case_sensitive, int *out);
int pl_tm_sort(pl_tm_rs *rs, pl_tm_val *v, size_t n,
               int (*key)(pl_tm_rs *, pl_tm_val, void *, pl_tm_val *), void *key_ctx,
               bool case_sensitive, bool reverse);
int pl_tm_str_replace(pl_tm_rs *rs, pl_tm_str s, pl_tm_str from, pl_tm_str to, double count,
                      pl_tm_str *out);
int pl_tm_obj_items(pl_tm_rs *rs, pl_tm_val obj, pl_tm_val *out);

/* builtins.c: range(), namespace(), raise_exception(), strftime_now() */
bool pl_tm_global_known(pl_tm_str name);
int pl_tm_global_lookup(pl_tm_str name, pl_tm_val *out); /* 1 if name is a builtin global */
int pl_tm_call_builtin(pl_tm_rs *rs, const pl_tm_func *f, const pl_tm_val *args, size_t n,
                       pl_tm_val *out);

/* ---- the template ---------------------------------------------------------------------- */

struct pl_tmpl {
    pl_tm_arena a;
    pl_tm_node **body;
    size_t n_body;
};

/* Tokens -> tree, then the checks that refuse unsupported constructs. src is the original
 * source (for columns in messages). */
pl_status pl_tm_parse(const pl_tm_tok *toks, size_t n, const char *src, size_t src_n,
                      pl_tm_arena *a, pl_tm_node ***out_body, size_t *out_n);

#endif
