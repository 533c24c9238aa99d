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
 * whole vocabulary instead of a walk over its trie.
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
    pl_gram_runs *next;    /* the vocabulary's list */
    uint32_t *ranges;      /* (2 n_pairs) A: inclusive code point ranges, sorted, merged */
    size_t n_pairs;
    size_t words;          /* of a vocabulary bitmap */
    uint32_t max_full;     /* the longest run a whole token makes (its "index", below) */
    uint32_t max_exit;     /* the longest run before an exit */
    size_t n_full;         /* tokens that are runs */
    /* A token that is a run has index j: its characters, plus one when it ends inside a
     * character. cum[(j - 1) * words ...] is the bitmap of tokens of index 1..j, j <= n_cum;
     * longer ones are listed in `late` by index. */
    uint64_t *cum;
    uint32_t n_cum;
    int32_t *late_id;
    uint32_t *late_j;
    size_t n_late;
    pl_gram_run_group *groups; /* (n_groups) by k, then byte */
    size_t n_groups;
    uint32_t *exits;       /* (n_exits) trie node indices */
    size_t n_exits;
};

/* Bitmaps of runs of up to this many characters are kept whole. */
#define PL_GRAM_RUN_CUM 32

/* The table of class ranges[0 .. 2 n_pairs) (sorted, merged) over v's tokens, built at its
 * first use and kept with v (a lock guards the list; the table itself is immutable). */
pl_status pl_gram_runs_get(const pl_gram_vocab *v, const uint32_t *ranges, size_t n_pairs,
                           const pl_gram_runs **out);
/* Frees a vocabulary's list of tables. */
void pl_gram_runs_free(pl_gram_runs *r);

#endif
