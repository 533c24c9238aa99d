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
#include "util/status.h"

/* ---- arena ----------------------------------------------------------------------------- */

/* Bump allocation in chunks from pl_malloc; freed all at once. `limit` (0: none) caps the bytes
 * taken from the heap; past it allocation fails and `over_limit` is set, so the caller can tell
 * a limit from a real out-of-memory. */
typedef struct tm_chunk tm_chunk;
typedef struct tm_arena {
    tm_chunk *head;
    size_t used_bytes; /* heap bytes held by chunks */
    size_t limit;
    bool over_limit;
} tm_arena;

void tm_arena_init(tm_arena *a, size_t limit);
void tm_arena_free(tm_arena *a);
void *tm_alloc(tm_arena *a, size_t n);            /* 16-byte aligned, not zeroed; NULL on failure */
void *tm_zalloc(tm_arena *a, size_t n);           /* zeroed */
void *tm_alloc_n(tm_arena *a, size_t n, size_t sz); /* n * sz with an overflow check, not zeroed */

/* ---- strings --------------------------------------------------------------------------- */

typedef struct tm_str {
    const char *p;
    size_t n;
} tm_str;

#define TM_LIT(s) ((tm_str){(s), sizeof(s) - 1})
bool tm_str_eq(tm_str a, tm_str b);
bool tm_str_eqc(tm_str a, const char *c);

/* ---- tokens (lex.c) -------------------------------------------------------------------- */

typedef enum {
    TK_TEXT,
    TK_NUMBER,
    TK_STRING,
    TK_IDENT,
    TK_EQUALS,
    TK_LPAREN,
    TK_RPAREN,
    TK_OPEN_STMT,
    TK_CLOSE_STMT,
    TK_OPEN_EXPR,
    TK_CLOSE_EXPR,
    TK_LBRACKET,
    TK_RBRACKET,
    TK_LBRACE,
    TK_RBRACE,
    TK_COMMA,
    TK_DOT,
    TK_COLON,
    TK_PIPE,
    TK_ADD,     /* + - ~ */
    TK_MUL,     /* * / // % */
    TK_POW,     /* ** */
    TK_COMPARE, /* < > <= >= == != */
    TK_UNARY,   /* a lone + or - in unary position */
    TK_COMMENT,
} tm_tok_kind;

typedef struct tm_tok {
    tm_tok_kind kind;
    tm_str s; /* the token's value: text, unescaped string, identifier, operator, number */
    int line;     /* 1-based line in the original source */
    uint32_t off; /* byte offset in the original source */
} tm_tok;

/* 1-based column (in characters) of byte offset off of src, for messages. */
int tm_column(const char *src, size_t len, uint32_t off);

/* The source after the oracle's rewrites (trailing newline, lstrip_blocks, trim_blocks,
 * `generation` tags) cut into tokens. Token strings point into `a`. PL_ERR_FORMAT with
 * line:column on a lexical error. */
pl_status tm_lex(const char *src, size_t len, tm_arena *a, tm_tok **out_toks, size_t *out_n);

/* ---- syntax tree (parse.c) -------------------------------------------------------------- */

typedef enum {
    /* statements */
    N_TEXT,    /* s */
    N_OUTPUT,  /* a: the expression of {{ }} */
    N_IF,      /* a: test, body, alt (an elif is an N_IF alone in alt, with is_elif) */
    N_FOR,     /* a: target (N_IDENT or N_TUPLE), b: iterable, c: the `if` filter or NULL, body,
                  alt: else */
    N_SET,     /* a: target, b: value (NULL for a block set: body) */
    N_MACRO,   /* s: name, args: parameters (N_IDENT or N_KWARG with a default), body */
    N_CALLBLK, /* a: the N_CALL, args: caller parameters, body */
    N_FILTBLK, /* a: filter (N_IDENT or N_CALL), body */
    N_BREAK,
    N_CONTINUE,
    N_COMMENT,
    /* expressions */
    N_INT,     /* num */
    N_FLOAT,   /* num */
    N_STR,     /* s */
    N_IDENT,   /* s */
    N_LIST,    /* args */
    N_TUPLE,   /* args */
    N_DICT,    /* args: keys, body: values (as expressions) */
    N_BINARY,  /* op, a, b */
    N_UNARY,   /* op ('-', '+', or 'n' for not), a */
    N_MEMBER,  /* a: object, b: property (N_IDENT/N_INT when !computed, N_SLICE or any) */
    N_SLICE,   /* a, b, c: start, stop, step (each may be NULL) */
    N_CALL,    /* a: callee, args */
    N_KWARG,   /* s: name, a: value */
    N_SPREAD,  /* a (*x in a call) */
    N_KWSPREAD, /* a (**x in a call) */
    N_FILTER,  /* a: operand, b: filter (N_IDENT or N_CALL with an N_IDENT callee) */
    N_TEST,    /* a: operand, s: test name, negate */
    N_SELECT,  /* a: value, b: condition (`a if b` without else) */
    N_TERNARY, /* a: condition, b: if true, c: if false */
} tm_node_kind;

/* Binary operators. */
enum {
    OP_ADD = 1, OP_SUB, OP_CONCAT, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW,
    OP_EQ, OP_NE, OP_LT, OP_GT, OP_LE, OP_GE, OP_IN, OP_NOTIN, OP_AND, OP_OR,
};

typedef struct tm_node tm_node;
struct tm_node {
    tm_node_kind kind;
    int op;
    int line;
    int tree_depth; /* 1 + the deepest child's (an elif chain counts once) */
    bool computed, negate, is_elif;
    tm_str s;
    double num;
    tm_node *a, *b, *c;
    tm_node **args;
    size_t n_args;
    tm_node **body;
    size_t n_body;
    tm_node **alt;
    size_t n_alt;
};

/* ---- values (value.c) ------------------------------------------------------------------ */

typedef enum {
    V_UNDEF,
    V_NULL,
    V_BOOL,
    V_INT,   /* num holds an integral (or non-finite) double, as the oracle's IntegerValue */
    V_FLOAT,
    V_STR,
    V_ARRAY,
    V_TUPLE,
    V_OBJECT,
    V_KWARGS, /* keyword arguments passed to a function: an object */
    V_NS,     /* namespace(): the only mutable value */
    V_LOOP,   /* the `loop` object of a for loop, an object made on demand */
    V_FUNC,
} tm_kind;

typedef struct tm_array tm_array;
typedef struct tm_map tm_map;
typedef struct tm_func tm_func;
typedef struct tm_loop tm_loop;

typedef struct tm_val {
    tm_kind kind;
    union {
        bool b;
        double num;
        tm_str s;
        tm_array *arr; /* V_ARRAY, V_TUPLE */
        tm_map *map;   /* V_OBJECT, V_KWARGS, V_NS */
        tm_loop *loop;
        tm_func *fn;
    } u;
} tm_val;

struct tm_array {
    size_t n;
    tm_val *v;
};

/* Insertion-ordered map; only a namespace's ever changes after it is made. */
struct tm_map {
    size_t n, cap;
    tm_str *k;
    tm_val *v;
};

struct tm_loop {
    double index0, length;
    const tm_val *items; /* the iterated items (for previtem/nextitem/cycle) */
    tm_map *made;        /* the object form, made on first use */
};

typedef enum {
    F_RANGE,
    F_NAMESPACE,
    F_RAISE,
    F_STRFTIME,
    F_METHOD, /* a string/object method bound to `self` */
    F_MACRO,
    F_CALLER,
    F_CYCLE,
} tm_func_kind;

typedef struct tm_env tm_env;
struct tm_func {
    tm_func_kind kind;
    int method;         /* F_METHOD: which (methods.c) */
    tm_val self;        /* F_METHOD: receiver; F_CYCLE: the loop */
    const tm_node *node; /* F_MACRO: N_MACRO; F_CALLER: N_CALLBLK */
    tm_env *env;        /* F_CALLER: the scope of the call block */
};

static inline tm_val tm_undef(void) { return (tm_val){.kind = V_UNDEF}; }
static inline tm_val tm_null(void) { return (tm_val){.kind = V_NULL}; }
static inline tm_val tm_bool(bool b) { return (tm_val){.kind = V_BOOL, .u.b = b}; }
static inline tm_val tm_int(double x) { return (tm_val){.kind = V_INT, .u.num = x}; }
static inline tm_val tm_float(double x) { return (tm_val){.kind = V_FLOAT, .u.num = x}; }
static inline tm_val tm_strv(tm_str s) { return (tm_val){.kind = V_STR, .u.s = s}; }
static inline bool tm_is_num(tm_val v) { return v.kind == V_INT || v.kind == V_FLOAT; }
static inline bool tm_is_arr(tm_val v) { return v.kind == V_ARRAY || v.kind == V_TUPLE; }
/* The oracle's ObjectValue (plain objects, keyword arguments and the loop object). */
static inline bool tm_is_obj(tm_val v) {
    return v.kind == V_OBJECT || v.kind == V_KWARGS || v.kind == V_LOOP;
}

/* ---- render state (eval.c) ------------------------------------------------------------- */

struct tm_env {
    tm_env *parent;
    size_t n, cap;
    tm_str *names;
    tm_val *vals;
};

typedef struct tm_out {
    char *p;
    size_t n, cap;
} tm_out;

typedef struct tm_rs {
    tm_arena a;
    pl_tmpl_limits lim;
    uint64_t steps;
    int depth;
    int calls; /* nested macro/caller calls */
    int line;  /* line of the node being evaluated, for messages */
    tm_out out;
} tm_rs;

/* Evaluates an expression (eval.c). */
int tm_eval_expr(tm_rs *rs, const tm_node *n, tm_env *env, tm_val *out);
/* Evaluates call arguments: positional ones (with *spreads) into *out_pos, keyword ones (with
 * **spreads) into *out_kw (NULL when there are none). */
int tm_eval_args(tm_rs *rs, tm_node *const *args, size_t n, tm_env *env, tm_val **out_pos,
                 size_t *out_n, tm_map **out_kw);

/* Internal results: 0 ok, a negative pl_status, or a loop signal. */
#define TM_BREAK 1
#define TM_CONTINUE 2

/* Records a render failure naming the current line; returns code. */
int tm_fail(tm_rs *rs, pl_status code, const char *fmt, ...) PL_PRINTF(3, 4);
/* PL_ERR_TOO_LONG when the arena hit its limit, else PL_ERR_OUT_OF_MEMORY. */
int tm_oom(tm_rs *rs);
/* Charges work; fails with PL_ERR_TOO_LONG past the step budget. */
int tm_charge(tm_rs *rs, uint64_t steps);
/* Charges work proportional to n bytes or elements scanned. */
static inline int tm_charge_n(tm_rs *rs, size_t n) { return tm_charge(rs, 1 + n / 16); }

/* ---- value helpers (value.c) ----------------------------------------------------------- */

/* A string of n bytes in the arena; fails past max_output_bytes. */
int tm_str_new(tm_rs *rs, size_t n, char **out_p);
int tm_str_cat(tm_rs *rs, tm_str a, tm_str b, tm_str *out);
/* A string built by appending (in the arena, doubling): linear where repeated tm_str_cat
 * would be quadratic. */
typedef struct tm_sb {
    char *p;
    size_t n, cap;
} tm_sb;
int tm_sb_put(tm_rs *rs, tm_sb *b, tm_str s);
static inline tm_str tm_sb_str(const tm_sb *b) { return (tm_str){b->p ? b->p : "", b->n}; }
int tm_arr_new(tm_rs *rs, size_t n, tm_array **out);
int tm_map_new(tm_rs *rs, size_t cap, tm_map **out);
int tm_map_set(tm_rs *rs, tm_map *m, tm_str k, tm_val v); /* replaces or appends */
/* Lookup; NULL when absent. Charges the scan. */
const tm_val *tm_map_get(tm_rs *rs, const tm_map *m, tm_str k);
/* The map behind an object-like value (makes the loop object on first use). */
int tm_obj_map(tm_rs *rs, tm_val v, tm_map **out);

bool tm_truthy(tm_val v);
const char *tm_kind_name(tm_kind k); /* the oracle's type names ("StringValue") */

/* JavaScript number -> string (Number.prototype.toString). buf >= 32 bytes. */
size_t tm_num_js(double x, char *buf);
/* The oracle's toString of a value (FloatValue 1 -> "1.0", arrays/objects -> JSON). */
int tm_to_string(tm_rs *rs, tm_val v, tm_str *out);
/* The JavaScript toString of the underlying value (`value.toString()`: FloatValue 1 -> "1",
 * arrays -> elements joined with ",", objects -> "[object Map]"). */
int tm_js_string(tm_rs *rs, tm_val v, tm_str *out);
/* JavaScript's `==` and `===` on the underlying values. */
int tm_loose_eq(tm_rs *rs, tm_val a, tm_val b, bool *out);
bool tm_strict_eq(tm_val a, tm_val b);

/* JSON.stringify-like serialisation as the oracle's toJSON (json.c). indent < 0: none. */
typedef struct tm_json_opt {
    int indent;
    bool ensure_ascii;
    tm_str item_sep, key_sep; /* .p NULL: defaults */
    bool undefined_as_null;
} tm_json_opt;
int tm_to_json(tm_rs *rs, tm_val v, const tm_json_opt *opt, tm_str *out);
/* From a jansson value, as JSON.parse and the oracle's conversion make it. */
int tm_from_json(tm_rs *rs, const json_t *j, int depth, tm_val *out);

/* ---- strings as JavaScript sees them (jstr.c) ------------------------------------------ */

/* Length in UTF-16 code units. */
size_t tm_utf16_len(tm_str s);
/* Decodes one code point at p (valid UTF-8 assumed); returns its byte length. */
int tm_utf8_next(const char *p, size_t n, uint32_t *cp);
int tm_utf8_put(uint32_t cp, char *out); /* returns bytes written (1..4) */
/* Byte length of the JavaScript white space (\s, String.prototype.trim) at p, else 0. */
int tm_js_space(const char *p, size_t n);
/* Byte length of JavaScript white space ending at p + n (looking backwards), else 0. */
int tm_js_space_back(const char *p, size_t n);
tm_str tm_trim(tm_str s, bool left, bool right);
/* Compares as JavaScript's < does (UTF-16 code units). */
int tm_js_cmp(tm_str a, tm_str b);
/* toUpperCase / toLowerCase: exact for ASCII and for characters without case; other letters
 * are PL_ERR_UNSUPPORTED (see template.h). */
int tm_case(tm_rs *rs, tm_str s, bool upper, tm_str *out);
/* JavaScript ToNumber of a string (NaN when not a number), parseInt(s, 10), parseFloat(s). */
double tm_js_to_number(tm_str s);
double tm_js_parse_int(tm_str s);
double tm_js_parse_float(tm_str s);

/* ---- the library ----------------------------------------------------------------------- */

/* filters.c */
bool tm_filter_known(tm_str name);
bool tm_test_known(tm_str name);
int tm_apply_test(tm_rs *rs, tm_str name, tm_val v, const tm_val *arg, bool *out);
int tm_apply_filter(tm_rs *rs, tm_val operand, const tm_node *filter, tm_env *env,
                    tm_val *out);

/* methods.c: str.upper(), dict.items(), ... */
bool tm_method_known(tm_str name);
/* The builtin member `name` of v (a bound method, or a string's/array's length), or undefined. */
int tm_builtin_member(tm_rs *rs, tm_val v, tm_str name, tm_val *out);
int tm_call_method(tm_rs *rs, const tm_func *f, const tm_val *args, size_t n, tm_val *out);
/* Shared by the `sort` filter and dict.dictsort(). */
int tm_compare(tm_rs *rs, tm_val a, tm_val b, bool case_sensitive, int *out);
int tm_sort(tm_rs *rs, tm_val *v, size_t n, int (*key)(tm_rs *, tm_val, void *, tm_val *),
            void *key_ctx, bool case_sensitive, bool reverse);
int tm_str_replace(tm_rs *rs, tm_str s, tm_str from, tm_str to, double count, tm_str *out);
int tm_obj_items(tm_rs *rs, tm_val obj, tm_val *out);

/* builtins.c: range(), namespace(), raise_exception(), strftime_now() */
bool tm_global_known(tm_str name);
int tm_global_lookup(tm_str name, tm_val *out); /* 1 if name is a builtin global */
int tm_call_builtin(tm_rs *rs, const tm_func *f, const tm_val *args, size_t n, tm_val *out);

/* ---- the template ---------------------------------------------------------------------- */

struct pl_tmpl {
    tm_arena a;
    tm_node **body;
    size_t n_body;
};

/* Tokens -> tree, then the checks that refuse unsupported constructs. src is the original
 * source (for columns in messages). */
pl_status tm_parse(const tm_tok *toks, size_t n, const char *src, size_t src_n, tm_arena *a,
                   tm_node ***out_body, size_t *out_n);

#endif
