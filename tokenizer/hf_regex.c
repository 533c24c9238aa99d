/*
 * tokenizer/hf_regex.c - the pre-tokenizer and normalizer regexes on PCRE2: compiled once at
 * load (with the JIT when the platform has it), matched with per-call state so a tokenizer
 * stays shareable between threads.
 *
 * Patterns in tokenizer.json are written for Oniguruma (Rust's tokenizers); the ones real
 * tokenizers use (\p{L}, \p{N}, \s, (?i:...), (?!...), classes) mean the same in PCRE2 with
 * PCRE2_UTF | PCRE2_UCP. Every allocation goes through pl_malloc, and a match limit turns a
 * pathological pattern into an error instead of an endless backtrack.
 */
#include <string.h>

#include "tokenizer/hf.h"
#include "util/alloc.h"
#include "util/utf8.h"

/* Generous for real patterns (a 1 MB run of spaces under the Llama 3 pattern needs a few
 * million), small enough that a catastrophic pattern stops within a second or so. */
#define MATCH_LIMIT 200000000u
#define JIT_STACK_MAX (8u << 20)

static void *gmalloc(PCRE2_SIZE n, void *data) {
    (void)data;
    return pl_malloc(n);
}

static void gfree(void *p, void *data) {
    (void)data;
    pl_free(p);
}

pl_status pl_tok_regex_compile(pl_tok_regex *re, const char *pattern, size_t len, bool literal,
                               const char *file, const char *jpath) {
    *re = (pl_tok_regex){0};
    pcre2_general_context *g = pcre2_general_context_create(gmalloc, gfree, NULL);
    pcre2_compile_context *cc = g ? pcre2_compile_context_create(g) : NULL;
    if (!cc) {
        pcre2_general_context_free(g);
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: %s: compiling the regex", file, jpath);
    }
    int err = 0;
    PCRE2_SIZE off = 0;
    uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    re->code = pcre2_compile((PCRE2_SPTR)pattern, len, opts, &err, &off, cc);
    pcre2_compile_context_free(cc);
    pcre2_general_context_free(g);
    if (!re->code) {
        if (err == PCRE2_ERROR_HEAPLIMIT || err == PCRE2_ERROR_NOMEMORY)
            return pl_fail(PL_ERR_OUT_OF_MEMORY, "%s: %s: compiling the regex", file, jpath);
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return pl_fail(PL_ERR_FORMAT, "%s: %s: the regex does not compile: %s at offset %zu",
                       file, jpath, (const char *)msg, (size_t)off);
    }
    /* Without the JIT (an unsupported platform, or no executable memory) the interpreter runs
     * the same pattern, only slower. */
    re->jit = pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE) == 0;
    return PL_OK;
}

void pl_tok_regex_free(pl_tok_regex *re) {
    pcre2_code_free(re->code);
    *re = (pl_tok_regex){0};
}

pl_status pl_tok_matcher_init(pl_tok_matcher *m) {
    *m = (pl_tok_matcher){0};
    m->gctx = pcre2_general_context_create(gmalloc, gfree, NULL);
    if (m->gctx) m->mctx = pcre2_match_context_create(m->gctx);
    if (m->mctx) m->md = pcre2_match_data_create(1, m->gctx);
    if (!m->md) {
        pl_tok_matcher_free(m);
        return pl_fail(PL_ERR_OUT_OF_MEMORY, "tokenizer: regex match state");
    }
    pcre2_set_match_limit(m->mctx, MATCH_LIMIT);
    return PL_OK;
}

void pl_tok_matcher_free(pl_tok_matcher *m) {
    pcre2_jit_stack_free(m->stack);
    pcre2_match_data_free(m->md);
    pcre2_match_context_free(m->mctx);
    pcre2_general_context_free(m->gctx);
    *m = (pl_tok_matcher){0};
}

/* One match attempt at or after from. rc as pcre2_match. */
static int match_once(const pl_tok_regex *re, pl_tok_matcher *m, const char *s, size_t len,
                      size_t from) {
    int rc = pcre2_match(re->code, (PCRE2_SPTR)s, len, from, PCRE2_NO_UTF_CHECK, m->md, m->mctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !m->stack) {
        /* The default 32 KiB machine stack is too small for this subject: give the JIT a
         * bigger one (allocated once per call that needs it) and retry. */
        m->stack = pcre2_jit_stack_create(64u << 10, JIT_STACK_MAX, m->gctx);
        if (!m->stack) return PCRE2_ERROR_NOMEMORY;
        pcre2_jit_stack_assign(m->mctx, NULL, m->stack);
        rc = pcre2_match(re->code, (PCRE2_SPTR)s, len, from, PCRE2_NO_UTF_CHECK, m->md, m->mctx);
    }
    return rc;
}

static size_t next_char(const char *s, size_t len, size_t at) {
    at++;
    while (at < len && pl_utf8_is_cont((unsigned char)s[at])) at++;
    return at;
}

pl_status pl_tok_regex_next(const pl_tok_regex *re, pl_tok_matcher *m, const char *s, size_t len,
                            pl_tok_regex_iter *it, size_t *out_start, size_t *out_end,
                            bool *found) {
    *found = false;
    while (it->pos <= len) {
        int rc = match_once(re, m, s, len, it->pos);
        if (rc == PCRE2_ERROR_NOMATCH) {
            it->pos = len + 1;
            return PL_OK;
        }
        if (rc == PCRE2_ERROR_NOMEMORY || rc == PCRE2_ERROR_HEAPLIMIT)
            return pl_fail(PL_ERR_OUT_OF_MEMORY, "tokenizer: regex match");
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return pl_fail(PL_ERR_FORMAT, "tokenizer: a pre-tokenizer regex failed at byte %zu "
                           "of a %zu-byte piece: %s", it->pos, len, (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m->md);
        size_t st = ov[0], en = ov[1];
        /* An empty match where the previous match ended is not a new match: step over one
         * character and look again, so the iteration always moves forward. */
        if (st == en && it->started && st == it->last_end) {
            if (st >= len) {
                it->pos = len + 1;
                return PL_OK;
            }
            it->pos = next_char(s, len, st);
            continue;
        }
        it->started = true;
        it->last_end = en;
        it->pos = en;
        *out_start = st;
        *out_end = en;
        *found = true;
        return PL_OK;
    }
    return PL_OK;
}
