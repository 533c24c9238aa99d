/*
 * tests/fuzz/fuzz_schema.c - libFuzzer target: the input is a JSON Schema (or a regex, when
 * the first byte is odd). It is converted to GBNF; what converts must parse as a grammar
 * whose first state expands within the limits.
 *
 * What must hold: a conversion either succeeds or fails with a status and a message naming
 * its place, nothing to free; the GBNF it writes always parses (a converter bug otherwise);
 * nothing leaks; bounded time (a hang is a libFuzzer timeout).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "util/alloc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    char *gbnf = NULL;
    pl_status st = data[0] & 1 ? pl_gram_regex_to_gbnf(text, len, NULL, &gbnf)
                               : pl_gram_schema_to_gbnf(text, len, data[0] & 2 ? "p-" : NULL, &gbnf);
    if (st != PL_OK) {
        if (gbnf || !pl_last_error()[0]) abort();
        return 0;
    }
    /* a prefixed grammar is for embedding: give it the root a caller would write */
    if (!(data[0] & 1) && (data[0] & 2)) {
        size_t n = strlen(gbnf);
        char *full = pl_malloc(n + 32);
        if (!full) abort();
        memcpy(full, gbnf, n);
        strcpy(full + n, "root ::= p-root\n");
        pl_free(gbnf);
        gbnf = full;
    }
    pl_gram *g = NULL;
    st = pl_gram_parse(gbnf, strlen(gbnf), NULL, &g);
    /* what the converters write must parse; only size limits and left recursion (a schema
     * that is nothing but a reference to itself) may refuse it */
    if (st != PL_OK && st != PL_ERR_TOO_LONG && !strstr(pl_last_error(), "left recursion")) abort();
    if (g) {
        pl_gram_matcher m;
        if (pl_gram_matcher_init(&m, g) == PL_OK) pl_gram_matcher_deinit(&m);
        pl_gram_free(g);
    }
    pl_free(gbnf);
    return 0;
}
