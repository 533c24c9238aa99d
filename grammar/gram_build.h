/*
 * grammar/gram_build.h - what the GBNF parser (gbnf.c) and the compiled grammar (gram.c)
 * share: a grammar under construction. Rules are element lists (alternatives separated by
 * PL_GE_END 0, the last ended by PL_GE_END 1); classes point into one range list. Internal to
 * grammar/.
 */
#ifndef PL_GRAMMAR_GRAM_BUILD_H
#define PL_GRAMMAR_GRAM_BUILD_H

#include <pthread.h>

#include "grammar/grammar.h"

typedef struct pl_gram_rule {
    pl_gram_elem *e;      /* (n, cap) */
    size_t n, cap;
    char *name;           /* generated rules: the parent's name + "-" + a number */
    size_t name_len;
    bool defined;
    size_t first_ref;     /* byte offset of the first reference (undefined-rule messages) */
} pl_gram_rule;

typedef struct pl_gram_builder {
    pl_gram_rule *rules;  /* (n_rules, cap_rules) */
    size_t n_rules, cap_rules;
    uint32_t *ranges;     /* (n_ranges, cap_ranges) lo, hi pairs */
    size_t n_ranges, cap_ranges;
    pl_gram_class *classes;
    size_t n_classes, cap_classes;
    size_t n_elems;       /* over every rule: the expansion budget */
    uint32_t *map;        /* name hash -> rule index + 1 (open addressing; map_cap slots) */
    size_t map_cap;
} pl_gram_builder;

typedef struct pl_gram_cache pl_gram_cache;

struct pl_gram {
    pl_gram_elem *elems;  /* (n_elems) every rule's alternatives, one after another */
    size_t n_elems;
    uint32_t *rule_alts;  /* (n_rules + 1) index into alts where each rule's list begins */
    uint32_t *alts;       /* first position of each alternative */
    size_t n_rules;
    pl_gram_class *classes;
    size_t n_classes;
    uint32_t *ranges;
    uint32_t root;
    pl_gram_cache *cache; /* mask.c */
};

void pl_gram_builder_free(pl_gram_builder *b);
/* The rule named name[0..len), created undefined when new; -1 after an error (set). */
long pl_gram_builder_rule(pl_gram_builder *b, const char *name, size_t len);
/* A new generated rule named after `parent`. */
long pl_gram_builder_gen_rule(pl_gram_builder *b, uint32_t parent);
pl_status pl_gram_builder_push(pl_gram_builder *b, uint32_t rule, uint32_t type, uint32_t value);
/* A class of the ranges (lo, hi pairs, n_pairs of them; normalised here); its index. */
long pl_gram_builder_class(pl_gram_builder *b, const uint32_t *pairs, size_t n_pairs,
                           bool negated);
/* Builds the compiled grammar (root rule index `root`); checks left recursion. On failure the
 * message describes the problem; the builder is always consumed. */
pl_status pl_gram_finish(pl_gram_builder *b, uint32_t root, pl_gram **out);

pl_status pl_gram_cache_create(pl_gram_cache **out);
void pl_gram_walk_free(void *walk);
void pl_gram_cache_free(pl_gram_cache *c);

#endif
