/*
 * grammar/grammar.h - constrained decoding: grammars, the matcher that follows one sequence's
 * output through a grammar, and the token masks that keep sampling inside it.
 *
 *   GBNF text ─────────────────────────── gbnf.c ──► pl_gram (rules as flat element arrays)
 *   JSON Schema ── schema.c ──► GBNF text ─┘              │
 *   regex ──────── regex.c ───► GBNF text ─┘              │  + pl_gram_vocab (vocab.c: each
 *   choice list ── text.c ────► GBNF text ─┘              │    token's bytes in a byte trie)
 *                                                         ▼
 *              pl_gram_matcher (match.c: one sequence's parse state, a set of stacks)
 *                                                         │
 *              pl_gram_mask (mask.c: allowed tokens of a state, a trie walk, cached per state)
 *
 * Grammars are GBNF as llama.cpp writes it (grammars/ folder work unchanged): rules
 * `name ::= alternatives`, literals "...", classes [...] and [^...], `.`, groups, `* + ?`,
 * `{m}`, `{m,}`, `{m,n}`, comments, token references `<[id]>`, `<piece>`, `!<...>`. Terminals
 * are Unicode code points; the matcher consumes the UTF-8 bytes of tokens, holding the bytes
 * of an unfinished character (a token may end inside one) until the next token completes it.
 *
 * A parse state is a set of stacks of grammar positions (the llama.cpp model): each stack's
 * top is a terminal to match next, the entries below it are where to continue after each
 * rule being matched ends; an empty stack means the grammar is complete. Rules that end with
 * a reference continue in the referenced rule without a frame (tail calls), so `x*` does not
 * grow the stack. Left recursion is refused at compile (it would expand forever).
 *
 * Limits (each failure is PL_ERR_TOO_LONG or PL_ERR_INVALID_ARGUMENT naming what and where):
 * grammar text size, rules, elements after expanding repetitions, stacks per state, stack
 * depth. Compile time is linear in the expanded size.
 *
 * Threads: a pl_gram and a pl_gram_vocab are immutable once built (a pl_gram's mask cache is
 * behind its own mutex), so any number of matchers in any threads may share them. A matcher
 * belongs to one thread at a time.
 */
#ifndef PL_GRAMMAR_GRAMMAR_H
#define PL_GRAMMAR_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/status.h"

typedef struct pl_tokenizer pl_tokenizer;

/* ---- limits ------------------------------------------------------------------------------ */

#define PL_GRAM_MAX_TEXT (16u << 20)       /* GBNF text bytes */
#define PL_GRAM_MAX_RULES 65536            /* rules, generated ones included */
#define PL_GRAM_MAX_ELEMENTS (1u << 21)    /* elements after expanding repetitions */
#define PL_GRAM_MAX_REPEAT 10000           /* m and n of {m,n} */
#define PL_GRAM_MAX_STACKS 4096            /* stacks in one parse state */
#define PL_GRAM_MAX_DEPTH 2048             /* entries in one stack */
#define PL_GRAM_MAX_NEST 256               /* nested groups in GBNF text */

/* ---- the compiled grammar ---------------------------------------------------------------- */

typedef enum pl_gram_etype {
    PL_GE_END = 0,   /* end of an alternative (value: 1 when the rule's last one) */
    PL_GE_RULE = 1,  /* reference to rule `value` */
    PL_GE_CLASS = 2, /* one code point of class `value` (a literal is a one-range class) */
    PL_GE_TOKEN = 3, /* token id `value` */
    PL_GE_TOKEN_NOT = 4, /* any token but `value` (end-of-text ids excepted) */
} pl_gram_etype;

typedef struct pl_gram_elem {
    uint32_t type;   /* pl_gram_etype */
    uint32_t value;
} pl_gram_elem;

typedef struct pl_gram_class {
    uint32_t first, n;   /* ranges[first .. first + n): inclusive (lo, hi) pairs, sorted */
    bool negated;
    uint64_t ascii[2];   /* membership of code points < 128 (negation applied) */
} pl_gram_class;

typedef struct pl_gram pl_gram;

/* Parses GBNF text[0..len) (no NUL needed). tok (may be NULL) resolves `<piece>` token
 * references; `<[id]>` needs none. Errors: PL_ERR_INVALID_ARGUMENT "grammar line L column C:
 * problem" (syntax, an undefined rule, no root, left recursion naming the rules), PL_ERR_TOO_LONG
 * (a limit), PL_ERR_OUT_OF_MEMORY. */
pl_status pl_gram_parse(const char *text, size_t len, const pl_tokenizer *tok, pl_gram **out);
void pl_gram_free(pl_gram *g); /* NULL is a no-op */

/* What the matcher and the tests read. */
const pl_gram_elem *pl_gram_elems(const pl_gram *g, size_t *out_n);
const pl_gram_class *pl_gram_class_at(const pl_gram *g, uint32_t i);
const uint32_t *pl_gram_ranges(const pl_gram *g);
/* Alternatives of rule r: their first positions. */
const uint32_t *pl_gram_alts(const pl_gram *g, uint32_t r, size_t *out_n);
uint32_t pl_gram_root(const pl_gram *g);
size_t pl_gram_n_rules(const pl_gram *g);
bool pl_gram_class_has(const pl_gram *g, const pl_gram_class *c, uint32_t cp);
/* Whether class c holds some code point in [lo, hi]. */
bool pl_gram_class_meets(const pl_gram *g, const pl_gram_class *c, uint32_t lo, uint32_t hi);

/* ---- text front ends: each writes GBNF text (*out pl_malloc'd, NUL-terminated) -------- */

/* JSON Schema (schema[0..len), JSON text) to GBNF. prefix (may be NULL or "") is put before
 * every rule name so several schemas can live in one grammar; the schema's rule is
 * <prefix>root. with_root_alias: also a `root` rule when prefix is set. Errors:
 * PL_ERR_INVALID_ARGUMENT "json_schema at /properties/a/maxLength: problem" (a keyword not
 * supported is refused, never ignored), PL_ERR_TOO_LONG (a limit, with its pointer). */
pl_status pl_gram_schema_to_gbnf(const char *schema, size_t len, const char *prefix,
                                 char **out);
/* A regular expression (the subset regex.c lists) that the whole output must match, as the
 * rule <prefix>root. Errors name the offset. */
pl_status pl_gram_regex_to_gbnf(const char *re, size_t len, const char *prefix, char **out);
/* One of the strings (as they are, no quoting in the output). */
pl_status pl_gram_choice_to_gbnf(const char *const *choices, size_t n, char **out);

/* ---- tokens ------------------------------------------------------------------------------ */

/* A tokenizer's tokens as grammar input: the bytes each adds to an output it continues (the
 * SentencePiece "▁" as a space, byte tokens as their byte), in a byte trie. Special tokens
 * (control, added special ones, unknown) have no bytes: only token references match them. */
typedef struct pl_gram_vocab pl_gram_vocab;

pl_status pl_gram_vocab_create(const pl_tokenizer *t, pl_gram_vocab **out);
void pl_gram_vocab_free(pl_gram_vocab *v);
int pl_gram_vocab_size(const pl_gram_vocab *v);
/* The bytes of token id (NULL, *out_len 0 for a token without text). */
const char *pl_gram_vocab_bytes(const pl_gram_vocab *v, int32_t id, size_t *out_len);

/* ---- the matcher ------------------------------------------------------------------------ */

/* One parse state: stacks (bottom first) stored one after another, and the bytes of a
 * character not finished yet. */
typedef struct pl_gram_state {
    uint32_t *pos;         /* (n_pos, cap_pos) the stacks' positions, one stack after another */
    uint32_t *start;       /* (n + 1, cap_start) where each stack begins in pos */
    size_t n_pos, cap_pos, cap_start;
    uint32_t n;            /* stacks */
    uint32_t partial;      /* the code point bits of an unfinished character so far */
    uint8_t need;          /* continuation bytes it still needs (0: none pending) */
    uint8_t have;          /* bytes of it seen */
} pl_gram_state;

typedef struct pl_gram_matcher {
    const pl_gram *g;
    pl_gram_state cur;
    void *scratch;         /* expansion scratch (match.c) */
    void *walk;            /* the mask's trie walk buffers (mask.c), made at first use */
} pl_gram_matcher;

/* The state at the start of the grammar. PL_ERR_OUT_OF_MEMORY, PL_ERR_TOO_LONG. */
pl_status pl_gram_matcher_init(pl_gram_matcher *m, const pl_gram *g);
void pl_gram_matcher_deinit(pl_gram_matcher *m);
/* dst (deinit'd or zeroed) becomes a copy of src. */
pl_status pl_gram_matcher_copy(pl_gram_matcher *dst, const pl_gram_matcher *src);
/* Feeds bytes; PL_ERR_INVALID_ARGUMENT (the state unchanged) when the grammar refuses them. */
pl_status pl_gram_matcher_accept_bytes(pl_gram_matcher *m, const char *s, size_t n);
/* Feeds one token (its bytes, or a token reference); refused as above. */
pl_status pl_gram_matcher_accept_token(pl_gram_matcher *m, const pl_gram_vocab *v, int32_t id);
/* The grammar is complete here (the output may end). */
bool pl_gram_matcher_is_complete(const pl_gram_matcher *m);
/* Something more may follow (some stack is not empty, or a character is unfinished). */
bool pl_gram_matcher_can_continue(const pl_gram_matcher *m);

/* Advances st by one byte into out (cleared first). false: refused (out then empty). Used by
 * the mask's trie walk. scratch from the matcher. */
bool pl_gram_state_step(const pl_gram *g, const pl_gram_state *st, uint8_t byte,
                        pl_gram_state *out, void *scratch, pl_status *err);
pl_status pl_gram_state_copy(pl_gram_state *dst, const pl_gram_state *src);
void pl_gram_state_free(pl_gram_state *s);
pl_status pl_gram_scratch_create(void **out);
void pl_gram_scratch_free(void *scratch);

/* ---- masks ------------------------------------------------------------------------------ */

/* Sets in bits (ceil(vocab / 64) words, zeroed by the caller) every token the grammar allows
 * next from m's state: tokens whose bytes it accepts (one that ends inside a character whose
 * bytes the grammar may still complete included) and token references at a stack's top.
 * End-of-text tokens are the caller's (allowed when pl_gram_matcher_is_complete). Results are
 * cached per state in the grammar (bounded memory), so a state seen before costs a copy.
 * eog (n_eog) are excluded from `!<...>` matches. PL_ERR_OUT_OF_MEMORY. */
pl_status pl_gram_mask(pl_gram_matcher *m, const pl_gram_vocab *v, const int32_t *eog,
                       size_t n_eog, uint64_t *bits);

/* Cache figures since the grammar was built (benchmarks, tests). */
typedef struct pl_gram_cache_stats {
    uint64_t hits, misses, bytes, entries, resets;
} pl_gram_cache_stats;
void pl_gram_cache_stats_get(const pl_gram *g, pl_gram_cache_stats *out);
/* Bytes of cached masks a grammar keeps at most (all dropped when full). */
#define PL_GRAM_CACHE_BYTES (64u << 20)

#endif
