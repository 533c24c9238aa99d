/*
 * tests/template/tmpl_check.h - what the template suites share: loading a JSON fixture of
 * tests/data/templates, rendering a template with variables, and comparing with what the
 * oracle (@huggingface/jinja, through tests/oracle/gen_template_fixtures.mjs) rendered.
 */
#ifndef PL_TEST_TMPL_CHECK_H
#define PL_TEST_TMPL_CHECK_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "template/template.h"

/* tests/data/templates/<name> parsed; fails the test when missing or invalid. */
json_t *tmpl_fixture(const char *name);
/* A JSON file anywhere, parsed; fails the test when missing or invalid. */
json_t *tmpl_load_json(const char *path);

/* Parses src (failing the test on an error). */
pl_tmpl *tmpl_parse_ok(const char *src);

/* Renders t with vars and checks the outcome against a fixture case object: its "expect"
 * string byte for byte, or, for "error", a failure with PL_ERR_INVALID_ARGUMENT (and, when the
 * template raised, the oracle's message). Returns true when they agree, printing a diff on
 * stderr (prefixed with `what`) when not. */
bool tmpl_check_case(const pl_tmpl *t, const json_t *vars, const json_t *kase, const char *what);

/* Parses src and checks as tmpl_check_case; a syntax error (PL_ERR_FORMAT) agrees with a case
 * where the oracle failed. */
bool tmpl_check_source(const char *src, const json_t *vars, const json_t *kase, const char *what);

/* Checks every case of a family fixture (<family>.expected.json) rendered with the template
 * and special tokens of tokenizer_config; returns the number of cases checked. */
size_t tmpl_check_family(const json_t *tokenizer_config, const json_t *expected);

/* Renders src with vars (JSON text, or NULL) under the default limits; returns the status
 * and sets *out (pl_free) on success. */
pl_status tmpl_render_src(const char *src, const char *vars_json, char **out);

#endif
