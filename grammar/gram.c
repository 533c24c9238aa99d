/*
 * grammar/gram.c - the compiled grammar: building it (rules, classes, the name table), the
 * checks that make matching terminate (every rule defined, no left recursion), and the
 * queries the matcher makes (alternatives of a rule, class membership).
 *
 * Left recursion is found on the graph "rule r may begin with rule s" (s is referenced in an
 * alternative of r after only rules that can match nothing): a cycle there would make the
 * matcher expand forever without consuming a character, so it is refused with the cycle.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/gram_build.h"
#include "util/alloc.h"

/* ---- builder --------------------------------------------------------------------------- */

static uint32_t hash_name(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

void pl_gram_builder_free(pl_gram_builder *b) {
    for (size_t i = 0; i < b->n_rules; i++) {
        pl_free(b->rules[i].e);
        pl_free(b->rules[i].name);
    }
    pl_free(b->rules);
    pl_free(b->ranges);
    pl_free(b->classes);
    pl_free(b->map);
    memset(b, 0, sizeof *b);
}

/* Rehashes into a table at least twice the rules: generated rules (repetitions) count too,
 * and hundreds of them can come between two lookups, so one doubling may not be enough (a
 * full table would make the probe below loop forever). */
static pl_status map_grow(pl_gram_builder *b) {
    size_t cap = b->map_cap ? b->map_cap * 2 : 256;
    while (cap < (b->n_rules + 1) * 2) cap *= 2;
    uint32_t *m = pl_calloc(cap, sizeof *m);
    if (!m) return pl_fail(PL_ERR_OUT_OF_MEMORY, "grammar: rule names");
    for (size_t i = 0; i < b->n_rules; i++) {
        const pl_gram_rule *r = &b->rules[i];
        if (!r->name) continue;
        size_t k = hash_name(r->name, r->name_len) & (cap - 1);
        while (m[k]) k = (k + 1) & (cap - 1);
        m[k] = (uint32_t)i + 1;
    }
    pl_free(b->map);
    b->map = m;
    b->map_cap = cap;
    return PL_OK;
}

static long add_rule(pl_gram_builder *b, char *name, size_t len) {
    if (b->n_rules >= PL_GRAM_MAX_RULES) {
        pl_free(name);
        pl_fail(PL_ERR_TOO_LONG, "more than %d rules", PL_GRAM_MAX_RULES);
        return -1;
    }
    void *p = b->rules;
    if (pl_grow_array(&p, &b->cap_rules, b->n_rules + 1, sizeof(pl_gram_rule),
                      "grammar: rules") != PL_OK) {
        pl_free(name);
        return -1;
    }
    b->rules = p;
    pl_gram_rule *r = &b->rules[b->n_rules];
    memset(r, 0, sizeof *r);
    r->name = name;
    r->name_len = len;
    r->first_ref = (size_t)-1;
    return (long)b->n_rules++;
}

long pl_gram_builder_rule(pl_gram_builder *b, const char *name, size_t len) {
    if ((b->n_rules + 1) * 2 > b->map_cap && map_grow(b) != PL_OK) return -1;
    size_t k = hash_name(name, len) & (b->map_cap - 1);
    while (b->map[k]) {
        const pl_gram_rule *r = &b->rules[b->map[k] - 1];
        if (r->name_len == len && !memcmp(r->name, name, len)) return (long)b->map[k] - 1;
        k = (k + 1) & (b->map_cap - 1);
    }
    char *copy = pl_malloc(len + 1);
    if (!copy) {
        pl_fail(PL_ERR_OUT_OF_MEMORY, "grammar: rule names");
        return -1;
    }
    memcpy(copy, name, len);
    copy[len] = '\0';
    long id = add_rule(b, copy, len);
    if (id >= 0) b->map[k] = (uint32_t)id + 1;
    return id;
}

long pl_gram_builder_gen_rule(pl_gram_builder *b, uint32_t parent) {
    /* generated names are not in the map: GBNF names cannot hold '#' */
    char buf[96];
    const pl_gram_rule *p = &b->rules[parent];
    int n = snprintf(buf, sizeof buf, "%.*s#%zu", (int)(p->name_len > 64 ? 64 : p->name_len),
                     p->name, b->n_rules);
    char *copy = pl_strdup(buf);
    if (!copy) {
        pl_fail(PL_ERR_OUT_OF_MEMORY, "grammar: rule names");
        return -1;
    }
    long id = add_rule(b, copy, (size_t)n);
    if (id >= 0) b->rules[id].defined = true;
    return id;
}

pl_status pl_gram_builder_push(pl_gram_builder *b, uint32_t rule, uint32_t type, uint32_t value) {
    if (b->n_elems >= PL_GRAM_MAX_ELEMENTS)
        return pl_fail(PL_ERR_TOO_LONG, "more than %u grammar elements after expanding "
                       "repetitions", PL_GRAM_MAX_ELEMENTS);
    pl_gram_rule *r = &b->rules[rule];
    void *p = r->e;
    PL_TRY(pl_grow_array(&p, &r->cap, r->n + 1, sizeof(pl_gram_elem), "grammar: elements"));
    r->e = p;
    r->e[r->n++] = (pl_gram_elem){type, value};
    b->n_elems++;
    return PL_OK;
}

static int cmp_pair(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0] ? 1 : 0;
}

long pl_gram_builder_class(pl_gram_builder *b, const uint32_t *pairs, size_t n_pairs,
                           bool negated) {
    uint32_t *tmp = pl_malloc((n_pairs ? n_pairs : 1) * 2 * sizeof *tmp);
    if (!tmp) {
        pl_fail(PL_ERR_OUT_OF_MEMORY, "grammar: classes");
        return -1;
    }
    if (n_pairs) memcpy(tmp, pairs, n_pairs * 2 * sizeof *tmp);
    for (size_t i = 0; i < n_pairs; i++)
        if (tmp[2 * i] > tmp[2 * i + 1]) { /* [z-a] matches nothing, as llama.cpp */
            tmp[2 * i] = 1;
            tmp[2 * i + 1] = 0;
        }
    qsort(tmp, n_pairs, 2 * sizeof *tmp, cmp_pair);
    size_t m = 0;
    for (size_t i = 0; i < n_pairs; i++) {
        if (tmp[2 * i] > tmp[2 * i + 1]) continue;
        if (m && tmp[2 * i] <= tmp[2 * (m - 1) + 1] + 1) {
            if (tmp[2 * i + 1] > tmp[2 * (m - 1) + 1]) tmp[2 * (m - 1) + 1] = tmp[2 * i + 1];
        } else {
            tmp[2 * m] = tmp[2 * i];
            tmp[2 * m + 1] = tmp[2 * i + 1];
            m++;
        }
    }
    void *p = b->ranges;
    pl_status st = pl_grow_array(&p, &b->cap_ranges, b->n_ranges + 2 * m + 1, sizeof(uint32_t),
                                 "grammar: classes");
    b->ranges = p;
    void *q = b->classes;
    if (st == PL_OK)
        st = pl_grow_array(&q, &b->cap_classes, b->n_classes + 1, sizeof(pl_gram_class),
                           "grammar: classes");
    b->classes = q;
    if (st != PL_OK) {
        pl_free(tmp);
        return -1;
    }
    pl_gram_class *c = &b->classes[b->n_classes];
    c->first = (uint32_t)b->n_ranges;
    c->n = (uint32_t)m;
    c->negated = negated;
    memcpy(b->ranges + b->n_ranges, tmp, 2 * m * sizeof *tmp);
    b->n_ranges += 2 * m;
    c->ascii[0] = c->ascii[1] = 0;
    for (size_t i = 0; i < m; i++)
        for (uint32_t cp = tmp[2 * i]; cp <= tmp[2 * i + 1] && cp < 128; cp++)
            c->ascii[cp >> 6] |= 1ull << (cp & 63);
    if (negated) {
        c->ascii[0] = ~c->ascii[0];
        c->ascii[1] = ~c->ascii[1];
    }
    pl_free(tmp);
    return (long)b->n_classes++;
}

/* ---- queries ----------------------------------------------------------------------------- */

const pl_gram_elem *pl_gram_elems(const pl_gram *g, size_t *out_n) {
    if (out_n) *out_n = g->n_elems;
    return g->elems;
}
const pl_gram_class *pl_gram_class_at(const pl_gram *g, uint32_t i) { return &g->classes[i]; }
const uint32_t *pl_gram_ranges(const pl_gram *g) { return g->ranges; }
uint32_t pl_gram_root(const pl_gram *g) { return g->root; }
size_t pl_gram_n_rules(const pl_gram *g) { return g->n_rules; }

const uint32_t *pl_gram_alts(const pl_gram *g, uint32_t r, size_t *out_n) {
    *out_n = g->rule_alts[r + 1] - g->rule_alts[r];
    return g->alts + g->rule_alts[r];
}

bool pl_gram_class_has(const pl_gram *g, const pl_gram_class *c, uint32_t cp) {
    if (cp < 128) return (c->ascii[cp >> 6] >> (cp & 63)) & 1;
    const uint32_t *r = g->ranges + c->first;
    size_t lo = 0, hi = c->n; /* binary search for the last range starting <= cp */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (r[2 * mid] <= cp) lo = mid + 1;
        else hi = mid;
    }
    bool in = lo > 0 && cp <= r[2 * (lo - 1) + 1];
    return in != c->negated;
}

bool pl_gram_class_meets(const pl_gram *g, const pl_gram_class *c, uint32_t lo, uint32_t hi) {
    const uint32_t *r = g->ranges + c->first;
    if (!c->negated) {
        for (uint32_t i = 0; i < c->n; i++)
            if (r[2 * i] <= hi && r[2 * i + 1] >= lo) return true;
        return false;
    }
    /* negated: some point of [lo, hi] is outside every range (ranges are merged, sorted) */
    uint32_t at = lo;
    for (uint32_t i = 0; i < c->n && at <= hi; i++) {
        if (r[2 * i + 1] < at) continue;
        if (r[2 * i] > at) return true;
        if (r[2 * i + 1] >= hi) return false;
        at = r[2 * i + 1] + 1;
    }
    return at <= hi;
}

void pl_gram_free(pl_gram *g) {
    if (!g) return;
    pl_gram_cache_free(g->cache);
    pl_free(g->elems);
    pl_free(g->rule_alts);
    pl_free(g->alts);
    pl_free(g->classes);
    pl_free(g->ranges);
    pl_free(g);
}

/* ---- finishing: nullable rules, left recursion ------------------------------------------- */

static const char *shown(const pl_gram_rule *r) {
    return r->name ? r->name : "?";
}

/* The name a message gives rule i: a generated rule's name is its parent's (before '#'). */
static int shown_len(const pl_gram_rule *r) {
    const char *hash = memchr(r->name, '#', r->name_len);
    return hash ? (int)(hash - r->name) : (int)r->name_len;
}

/* Marks the rules that can match nothing, in time linear in the elements (a hostile grammar
 * can chain thousands of rules each made nullable only by the next: repeated passes until
 * nothing changes would be quadratic). Each alternative counts its rule references not yet
 * known nullable (one with a terminal never becomes nullable); a rule found nullable
 * decrements the alternatives that reference it, and an alternative reaching 0 makes its own
 * rule nullable. */
static pl_status find_nullable(const pl_gram_builder *b, bool *nullable) {
    size_t n = b->n_rules, n_alts = 0, n_refs = 0;
    for (size_t r = 0; r < n; r++)
        for (size_t i = 0; i < b->rules[r].n; i++) {
            n_alts += b->rules[r].e[i].type == PL_GE_END;
            n_refs += b->rules[r].e[i].type == PL_GE_RULE;
        }
    uint32_t *left = pl_malloc((n_alts ? n_alts : 1) * sizeof *left);     /* per alternative */
    uint32_t *owner = pl_malloc((n_alts ? n_alts : 1) * sizeof *owner);   /* its rule */
    uint32_t *ref_at = pl_calloc(n + 1, sizeof *ref_at);                  /* per rule: */
    uint32_t *ref_alt = pl_malloc((n_refs ? n_refs : 1) * sizeof *ref_alt); /* alts naming it */
    uint32_t *queue = pl_malloc((n ? n : 1) * sizeof *queue);
    pl_status st = PL_OK;
    if (!left || !owner || !ref_at || !ref_alt || !queue) {
        st = pl_fail(PL_ERR_OUT_OF_MEMORY, "grammar: nullable rules");
        goto done;
    }
    for (size_t r = 0; r < n; r++)
        for (size_t i = 0; i < b->rules[r].n; i++)
            if (b->rules[r].e[i].type == PL_GE_RULE) ref_at[b->rules[r].e[i].value + 1]++;
    for (size_t r = 0; r < n; r++) ref_at[r + 1] += ref_at[r];
    size_t qn = 0, a = 0;
    for (size_t r = 0; r < n; r++) {
        uint32_t refs = 0;
        bool terminal = false;
        for (size_t i = 0; i < b->rules[r].n; i++) {
            const pl_gram_elem *e = &b->rules[r].e[i];
            if (e->type == PL_GE_RULE) {
                ref_alt[ref_at[e->value]++] = (uint32_t)a;
                refs++;
            } else if (e->type != PL_GE_END) {
                terminal = true;
            } else {
                owner[a] = (uint32_t)r;
                left[a] = terminal ? UINT32_MAX : refs;
                if (left[a] == 0 && !nullable[r]) nullable[queue[qn++] = (uint32_t)r] = true;
                a++;
                refs = 0;
                terminal = false;
            }
        }
    }
    /* the fill moved each ref_at to the next rule's start: shift back */
    for (size_t r = n; r > 0; r--) ref_at[r] = ref_at[r - 1];
    ref_at[0] = 0;
    for (size_t q = 0; q < qn; q++) {
        uint32_t s = queue[q];
        for (uint32_t k = ref_at[s]; k < ref_at[s + 1]; k++) {
            uint32_t alt = ref_alt[k];
            if (left[alt] == UINT32_MAX || --left[alt] != 0) continue;
            if (!nullable[owner[alt]]) nullable[queue[qn++] = owner[alt]] = true;
        }
    }
done:
    pl_free(left);
    pl_free(owner);
    pl_free(ref_at);
    pl_free(ref_alt);
    pl_free(queue);
    return st;
}

static pl_status check_left_recursion(const pl_gram_builder *b) {
    size_t n = b->n_rules;
    bool *nullable = pl_calloc(n ? n : 1, sizeof *nullable);
    uint8_t *mark = pl_calloc(n ? n : 1, 1);
    uint32_t *stack = pl_malloc((n ? n : 1) * 2 * sizeof *stack);
    uint32_t *edge_at = NULL, *edges = NULL;
    pl_status st = PL_OK;
    if (!nullable || !mark || !stack) {
        st = pl_fail(PL_ERR_OUT_OF_MEMORY, "grammar: left recursion check");
        goto done;
    }
    st = find_nullable(b, nullable);
    if (st != PL_OK) goto done;
    /* edges "r may begin with s", as one list per rule */
    size_t n_edges = 0;
    for (size_t r = 0; r < n; r++) n_edges += b->rules[r].n;
    edge_at = pl_malloc((n + 1) * sizeof *edge_at);
    edges = pl_malloc((n_edges ? n_edges : 1) * sizeof *edges);
    if (!edge_at || !edges) {
        st = pl_fail(PL_ERR_OUT_OF_MEMORY, "grammar: left recursion check");
        goto done;
    }
    n_edges = 0;
    for (size_t r = 0; r < n; r++) {
        const pl_gram_rule *R = &b->rules[r];
        edge_at[r] = (uint32_t)n_edges;
        bool blocked = false;
        for (size_t i = 0; i < R->n; i++) {
            const pl_gram_elem *e = &R->e[i];
            if (e->type == PL_GE_END) blocked = false;
            else if (blocked) continue;
            else if (e->type == PL_GE_RULE) {
                edges[n_edges++] = e->value;
                blocked = !nullable[e->value];
            } else blocked = true;
        }
    }
    edge_at[n] = (uint32_t)n_edges;
    /* iterative DFS: mark 1 = on the path, 2 = done; stack holds (rule, next edge) */
    for (size_t s0 = 0; s0 < n && st == PL_OK; s0++) {
        if (mark[s0]) continue;
        size_t sp = 1;
        stack[0] = (uint32_t)s0;
        stack[1] = edge_at[s0];
        mark[s0] = 1;
        while (sp > 0 && st == PL_OK) {
            uint32_t r = stack[2 * (sp - 1)], k = stack[2 * (sp - 1) + 1];
            if (k >= edge_at[r + 1]) {
                mark[r] = 2;
                sp--;
                continue;
            }
            stack[2 * (sp - 1) + 1] = k + 1;
            uint32_t next = edges[k];
            if (mark[next] == 2) continue;
            if (mark[next] == 1) {
                char msg[512];
                size_t used = 0, from = 0;
                while (stack[2 * from] != next) from++;
                for (size_t j = from; j < sp && used < sizeof msg - 80; j++)
                    used += (size_t)snprintf(msg + used, sizeof msg - used, "%.*s -> ",
                                             shown_len(&b->rules[stack[2 * j]]),
                                             shown(&b->rules[stack[2 * j]]));
                snprintf(msg + used, sizeof msg - used, "%.*s", shown_len(&b->rules[next]),
                         shown(&b->rules[next]));
                st = pl_fail(PL_ERR_INVALID_ARGUMENT,
                             "left recursion: %s (a rule that can begin with itself would "
                             "expand forever; write it as a repetition, e.g. "
                             "x ::= y (\"+\" y)*)", msg);
                break;
            }
            mark[next] = 1;
            stack[2 * sp] = next;
            stack[2 * sp + 1] = edge_at[next];
            sp++;
        }
    }
done:
    pl_free(edge_at);
    pl_free(edges);
    pl_free(nullable);
    pl_free(mark);
    pl_free(stack);
    return st;
}

pl_status pl_gram_finish(pl_gram_builder *b, uint32_t root, pl_gram **out) {
    pl_status st = check_left_recursion(b);
    if (st != PL_OK) {
        pl_gram_builder_free(b);
        return st;
    }
    pl_gram *g = pl_calloc(1, sizeof *g);
    size_t n_alts = 0;
    for (size_t r = 0; r < b->n_rules; r++)
        for (size_t i = 0; i < b->rules[r].n; i++) n_alts += b->rules[r].e[i].type == PL_GE_END;
    if (g) {
        g->elems = pl_malloc((b->n_elems ? b->n_elems : 1) * sizeof *g->elems);
        g->rule_alts = pl_malloc((b->n_rules + 1) * sizeof *g->rule_alts);
        g->alts = pl_malloc((n_alts ? n_alts : 1) * sizeof *g->alts);
    }
    if (!g || !g->elems || !g->rule_alts || !g->alts ||
        pl_gram_cache_create(&g->cache) != PL_OK) {
        pl_gram_free(g);
        pl_gram_builder_free(b);
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "grammar: %zu elements", b->n_elems);
    }
    size_t at = 0, a = 0;
    for (size_t r = 0; r < b->n_rules; r++) {
        const pl_gram_rule *R = &b->rules[r];
        g->rule_alts[r] = (uint32_t)a;
        bool alt_start = true;
        for (size_t i = 0; i < R->n; i++) {
            if (alt_start) g->alts[a++] = (uint32_t)(at + i);
            alt_start = R->e[i].type == PL_GE_END;
        }
        memcpy(g->elems + at, R->e, R->n * sizeof *R->e);
        at += R->n;
    }
    g->rule_alts[b->n_rules] = (uint32_t)a;
    g->n_elems = at;
    g->n_rules = b->n_rules;
    g->root = root;
    g->classes = b->classes;
    g->n_classes = b->n_classes;
    g->ranges = b->ranges;
    b->classes = NULL;
    b->ranges = NULL;
    pl_gram_builder_free(b);
    *out = g;
    return PL_OK;
}
