/*
 * grammar/runs.h - a tokenizer's tokens seen through one character class (runs.c), for the
 * mask's run path (mask.c). Internal to grammar/.
 *
 * For a class A, each token is either a run of A's characters (it may end inside one, when
 * every character its last bytes could begin is in A), or leaves A at some character: the
 * "exit", a node of the vocabulary's trie at a character boundary after k characters of A.
 * Where every class a parse state can meet over the next characters holds all of A or none
 * of it, the characters of A are interchangeable there: a run of j of them is accepted exactly
 * when the state after any j of them is alive, and an exit after k of them is walked from the
 * state after any k. So one step per run length, and one per (k, exit byte), stand for the
 * whole vocabulary instead of a walk over its trie. The same holds below any node: the tokens
 * under a big exit (those starting with `-` or `.`, say) get tables of their own, relative to
 * it, for when the state after the exit's byte is again one class's.
 */
#ifndef PL_GRAMMAR_RUNS_H
#define PL_GRAMMAR_RUNS_H

#include "grammar/vocab.h"

/* Exits with the same run length and byte, walked from the same state. */
typedef struct pl_gram_run_group {
    uint32_t k;            /* characters of A before the exit */
    uint32_t first, n;     /* exits[first .. first + n) */
    uint8_t byte;          /* the exit node's byte */
} pl_gram_run_group;

typedef struct pl_gram_runs pl_gram_runs;
struct pl_gram_runs {
    uint32_t *ranges;      /* (2 n_pairs) A: inclusive code point ranges, sorted, merged */
    size_t n_pairs;
    uint32_t root;         /* the trie node the table is of: 0, or an exit of a bigger one */
    uint64_t hash;         /* of ranges and root */
    size_t words;          /* of a vocabulary bitmap */
    uint32_t max_full;     /* the longest run a whole token makes (its "index", below) */
    uint32_t max_exit;     /* the longest run before an exit */
    size_t n_full;         /* tokens below root that are runs */
    /* A token that is a run has index j: its characters after root, plus one when it ends
     * inside a character. full_id[full_at[j - 1] .. full_at[j]) have index j (j = 1 ..
     * max_full); tables of the whole trie also keep cum[(j - 1) * words ...], the bitmap of
     * indexes 1..j, for j <= n_cum. */
    int32_t *full_id;
    uint32_t *full_at;
    uint64_t *cum;
    uint32_t n_cum;
    pl_gram_run_group *groups; /* (n_groups) by k, then byte */
    size_t n_groups;
    uint32_t *exits;       /* (n_exits) trie node indices */
    size_t n_exits;
};

/* Bitmaps of runs of up to this many characters are kept whole (tables of the whole trie). */
#define PL_GRAM_RUN_CUM 32

/* The table of class ranges[0 .. 2 n_pairs) (sorted, merged) over the tokens below trie node
 * root (0: all of v's), built at its first use and kept with v (a lock guards the set; a table
 * is immutable and lives as long as v). *out NULL once v's tables hold PL_GRAM_RUNS_BYTES:
 * grammars with ever new classes cannot grow them without bound. */
#define PL_GRAM_RUNS_BYTES (64u << 20)
pl_status pl_gram_runs_get(const pl_gram_vocab *v, const uint32_t *ranges, size_t n_pairs,
                           uint32_t root, const pl_gram_runs **out);
/* Frees a vocabulary's tables. */
void pl_gram_runs_free_set(struct pl_gram_runs_set *set);

#endif
