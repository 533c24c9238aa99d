/*
 * tests/tokenizer/hf_oracle.h - checks a tokenizer against tests/data/tokenizer_oracle.json,
 * the ids and decodes that @lenml/tokenizers gives (tests/oracle/gen_tokenizer_fixtures.mjs).
 */
#ifndef PL_TESTS_HF_ORACLE_H
#define PL_TESTS_HF_ORACLE_H

#include "tokenizer/tokenizer.h"

/* Every corpus case of tokenizer `name` (as the fixture names it): ids with special strings
 * parsed and as plain text, decode with and without special tokens, and the stream of those
 * ids. Returns the number of cases checked (asserting it is > 0). */
int hf_oracle_check_cases(const char *name, const pl_tokenizer *t);
/* The same from another fixture file of tests/data in that layout
 * (family_tokenizer_oracle.json: tests/oracle/gen_family_tokenizers.mjs). */
int hf_oracle_check_cases_in(const char *file, const char *name, const pl_tokenizer *t);

/* The 1 MB inputs of tokenizer `name` (and the corpus 20 times over, which exercises the word
 * cache of long texts), encoded with special-token strings parsed and nothing added: id count,
 * FNV-1a hash, first and last ids. */
int hf_oracle_check_long(const char *name, const pl_tokenizer *t);

/* The text of a long input as the generator makes it (pl_malloc'd): "repeat" (unit over and
 * over, cut at `bytes`), "times" (bytes = length of unit x times) or "letters" (an LCG). */
char *hf_oracle_long_text(const char *kind, const char *unit, unsigned seed, size_t bytes);

#endif
