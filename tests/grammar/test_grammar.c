/*
 * tests/grammar/test_grammar.c - the constrained-decoding engine: GBNF syntax as llama.cpp
 * writes it, errors with their places (line:column, JSON pointer, regex offset), the limits
 * against hostile input, the matcher over bytes (characters split across tokens), masks equal
 * to trying every token, the per-state cache, and the engine's constrained requests (seeded
 * output independent of the batch, n > 1, refusals at submit).
 *
 * The tokenizer cases read ../shared/models (PAGELLM_TEST_MODELS) and skip without it.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "pagellm.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"
#include "util/alloc.h"

static pl_gram *parse_ok(const char *text) {
    pl_gram *g = NULL;
    pl_status st = pl_gram_parse(text, strlen(text), NULL, &g);
    cr_assert_eq(st, PL_OK, "%s\n%s", pl_last_error(), text);
    return g;
}

/* Whether the whole of s is in the grammar's language (fed byte by byte). */
static bool matches(pl_gram *g, const char *s) {
    pl_gram_matcher m;
    cr_assert_eq(pl_gram_matcher_init(&m, g), PL_OK, "%s", pl_last_error());
    bool ok = true;
    for (size_t i = 0; s[i] && ok; i++) ok = pl_gram_matcher_accept_bytes(&m, s + i, 1) == PL_OK;
    ok = ok && pl_gram_matcher_is_complete(&m);
    pl_gram_matcher_deinit(&m);
    return ok;
}

static void expect_error(const char *text, pl_status code, const char *needle) {
    pl_gram *g = NULL;
    pl_status st = pl_gram_parse(text, strlen(text), NULL, &g);
    cr_assert_eq(st, code, "%s -> %s (%s)", text, pl_status_name(st), pl_last_error());
    cr_assert(strstr(pl_last_error(), needle), "'%s' not in '%s'", needle, pl_last_error());
    cr_assert_null(g);
}

Test(grammar, gbnf_syntax) {
    pl_gram *g = parse_ok(
        "# a comment line\n"
        "root ::= greeting (\",\" ws name)? \"!\"{1,3} tail   # trailing comment\n"
        "greeting ::= \"hi\" | \"hello\" |\n"
        "   \"h\\x65y\"\n"
        "name ::= [A-Z] [a-z\\u00e9]* ( \"-\" [A-Z] [a-z]+ )*\n"
        "ws ::= [ \\t]{0,2}\n"
        "tail ::= ( [^\\n!] . )?\n");
    cr_assert(matches(g, "hi!"));
    cr_assert(matches(g, "hey, Ann-Marie!!"));
    cr_assert(matches(g, "hello,  Ren\xc3\xa9!!!"));
    cr_assert(matches(g, "hi!xy"));
    cr_assert(matches(g, "hi!x\xe2\x9c\x93"), "any character after one that is not !");
    cr_assert(!matches(g, "hi!!!!"), "{1,3} allows three at most");
    cr_assert(!matches(g, "hi,   Ann!"), "{0,2} spaces");
    cr_assert(!matches(g, "hi, ann!"));
    cr_assert(!matches(g, "hey"));
    pl_gram_free(g);
    /* names with capitals and digits, an empty alternative first, {m}, {m,} */
    g = parse_ok("root ::= dataType x{2} y{1,}\ndataType ::= | \"int \"\nx ::= \"x\"\ny ::= [0-9]\n");
    cr_assert(matches(g, "xx1"));
    cr_assert(matches(g, "int xx123"));
    cr_assert(!matches(g, "xxx1"));
    cr_assert(!matches(g, "xx"));
    pl_gram_free(g);
}

Test(grammar, gbnf_errors_name_the_place) {
    expect_error("root ::= a\n", PL_ERR_INVALID_ARGUMENT, "line 1 column 10: rule a is used but not defined");
    expect_error("root ::= \"a\"\nb = \"x\"\n", PL_ERR_INVALID_ARGUMENT, "line 2 column 3: expecting ::=");
    expect_error("root ::= \"abc\n", PL_ERR_INVALID_ARGUMENT, "unterminated string");
    expect_error("root ::= \"\\q\"\n", PL_ERR_INVALID_ARGUMENT, "line 1 column 11: unknown escape");
    expect_error("rot ::= \"a\"\n", PL_ERR_INVALID_ARGUMENT, "no rule named root");
    expect_error("root ::= \"a\"\nroot ::= \"b\"\n", PL_ERR_INVALID_ARGUMENT, "defined twice");
    expect_error("root ::= ( \"a\" \n", PL_ERR_INVALID_ARGUMENT, "expecting )");
    expect_error("root ::= * \"a\"\n", PL_ERR_INVALID_ARGUMENT, "nothing before * to repeat");
    /* left recursion: direct, indirect, and through a rule that can match nothing */
    expect_error("root ::= root \"a\" | \"b\"\n", PL_ERR_INVALID_ARGUMENT, "left recursion: root -> root");
    expect_error("root ::= x\nx ::= y \"a\"\ny ::= x | \"b\"\n", PL_ERR_INVALID_ARGUMENT,
                 "left recursion: x -> y -> x");
    expect_error("root ::= e\ne ::= n e \"+\" | \"1\"\nn ::= \"-\"?\n", PL_ERR_INVALID_ARGUMENT,
                 "left recursion");
    expect_error("root ::= (\"\")*\n", PL_ERR_INVALID_ARGUMENT, "left recursion");
    /* limits */
    expect_error("root ::= \"a\"{10001}\n", PL_ERR_TOO_LONG, "repetition count above 10000");
    char deep[2048] = "root ::= ";
    for (int i = 0; i < 300; i++) strcat(deep, "(");
    strcat(deep, "\"a\"");
    for (int i = 0; i < 300; i++) strcat(deep, ")");
    strcat(deep, "\n");
    expect_error(deep, PL_ERR_TOO_LONG, "nested deeper than 256");
}

/* Found by fuzz_grammar (a timeout in parse): rules each made nullable only by the next one,
 * beside 1.5 million elements, took a pass over every element per link (2.9 s natively for
 * this grammar, minutes under the sanitizers); nullability is now found in one pass. The
 * chain also carries a left recursion only seen once all of it is known to match nothing. */
static char *nullable_chain(int links, int big, bool recursive) {
    char *s = malloc((size_t)links * 32 + (size_t)big * 16 + 128);
    cr_assert_not_null(s);
    size_t n = (size_t)sprintf(s, "root ::= a0 %s \"x\" | big\nbig ::= ", recursive ? "root" : "");
    for (int i = 0; i < big; i++) n += (size_t)sprintf(s + n, "\"a\"{10000} ");
    n += (size_t)sprintf(s + n, "\n");
    for (int i = 0; i < links; i++) n += (size_t)sprintf(s + n, "a%d ::= a%d\n", i, i + 1);
    sprintf(s + n, "a%d ::= \"\"\n", links);
    return s;
}

Test(grammar, a_long_chain_of_nullable_rules_parses_in_one_pass) {
    char *text = nullable_chain(3000, 150, false);
    pl_gram *g = parse_ok(text);
    cr_assert(matches(g, "x"));
    cr_assert(!matches(g, "xx"));
    pl_gram_free(g);
    free(text);
    text = nullable_chain(3000, 1, true);
    expect_error(text, PL_ERR_INVALID_ARGUMENT, "left recursion: root -> root");
    free(text);
}

/* Found by fuzz_grammar (a hang): the 620 rules {5,622} generates came before the next rule
 * name was looked up, and the name table grew by one doubling only, to 512 slots: full, its
 * probe never ended. */
Test(grammar, many_generated_rules_before_a_name) {
    pl_gram *g = parse_ok("root ::= \"o\"{5,622} r\nr ::= \"x\"\n");
    cr_assert(matches(g, "ooooox"));
    cr_assert(!matches(g, "oooox"));
    pl_gram_free(g);
}

Test(grammar, nested_repetitions_add_up) {
    /* (a{100}){100}: 10,000 a's from a few hundred elements, not 10,000 copies of 100 */
    pl_gram *g = parse_ok("root ::= ( \"a\"{100} ){100}\n");
    size_t n;
    pl_gram_elems(g, &n);
    cr_assert_lt(n, 2000u, "%zu elements", n);
    char *s = malloc(10001);
    memset(s, 'a', 10000);
    s[10000] = '\0';
    cr_assert(matches(g, s));
    s[9999] = '\0';
    cr_assert(!matches(g, s));
    free(s);
    pl_gram_free(g);
}

Test(grammar, utf8_split_across_tokens) {
    pl_gram *g = parse_ok("root ::= [\\u00e0-\\u00ff] [\\u4e00-\\u9fff] \"x\"\n");
    pl_gram_matcher m;
    cr_assert_eq(pl_gram_matcher_init(&m, g), PL_OK);
    /* \xc3\xa9 then \xe4\xb8\xad, fed in pieces that split both characters */
    cr_assert_eq(pl_gram_matcher_accept_bytes(&m, "\xc3", 1), PL_OK);
    cr_assert(pl_gram_matcher_can_continue(&m));
    cr_assert_neq(pl_gram_matcher_accept_bytes(&m, "\x41", 1), PL_OK, "a continuation byte is due");
    cr_assert_eq(pl_gram_matcher_accept_bytes(&m, "\xa9\xe4", 2), PL_OK);
    cr_assert_neq(pl_gram_matcher_accept_bytes(&m, "\x80", 1), PL_OK, "U+4E00.. starts \\xe4\\xb8");
    cr_assert_eq(pl_gram_matcher_accept_bytes(&m, "\xb8\xad", 2), PL_OK);
    cr_assert(!pl_gram_matcher_is_complete(&m));
    cr_assert_eq(pl_gram_matcher_accept_bytes(&m, "x", 1), PL_OK);
    cr_assert(pl_gram_matcher_is_complete(&m));
    cr_assert(!pl_gram_matcher_can_continue(&m));
    pl_gram_matcher_deinit(&m);
    /* a lead byte no character of the class can start with */
    cr_assert_eq(pl_gram_matcher_init(&m, g), PL_OK);
    cr_assert_neq(pl_gram_matcher_accept_bytes(&m, "\xe4", 1), PL_OK);
    pl_gram_matcher_deinit(&m);
    pl_gram_free(g);
}

static void schema_error(const char *schema, pl_status code, const char *needle) {
    char *out = NULL;
    pl_status st = pl_gram_schema_to_gbnf(schema, strlen(schema), NULL, &out);
    cr_assert_eq(st, code, "%.200s -> %s (%s)", schema, pl_status_name(st), pl_last_error());
    cr_assert(strstr(pl_last_error(), needle), "'%s' not in '%s'", needle, pl_last_error());
    cr_assert_null(out);
}

static pl_gram *schema_gram(const char *schema) {
    char *text = NULL;
    cr_assert_eq(pl_gram_schema_to_gbnf(schema, strlen(schema), NULL, &text), PL_OK, "%s",
                 pl_last_error());
    pl_gram *g = parse_ok(text);
    pl_free(text);
    return g;
}

Test(grammar, schema_conversion) {
    pl_gram *g = schema_gram(
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":-12,"
        "\"maximum\":305},\"b\":{\"type\":\"string\",\"maxLength\":3},\"c\":{\"enum\":[1,\"x\",null]}},"
        "\"required\":[\"a\"]}");
    cr_assert(matches(g, "{\"a\": 305}"));
    cr_assert(matches(g, "{\"a\":-12,\"b\":\"abc\",\"c\":null}"));
    cr_assert(matches(g, "{ \"a\" : 0 , \"c\" : \"x\" }"));
    cr_assert(!matches(g, "{\"a\": 306}"));
    cr_assert(!matches(g, "{\"a\": -13}"));
    cr_assert(!matches(g, "{\"a\": 012}"));
    cr_assert(!matches(g, "{\"a\":1,\"b\":\"abcd\"}"));
    cr_assert(!matches(g, "{\"b\":\"a\"}"), "a is required");
    cr_assert(!matches(g, "{\"a\":1,\"z\":1}"), "no additional properties are generated");
    cr_assert(!matches(g, "{\"a\":1}                  "), "whitespace is bounded");
    pl_gram_free(g);
    /* recursion through $ref, and the empty alternative of anyOf */
    g = schema_gram("{\"$defs\":{\"t\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/t\"}}},"
                    "\"$ref\":\"#/$defs/t\"}");
    cr_assert(matches(g, "[[],[[[]]]]"));
    cr_assert(!matches(g, "[[]"));
    pl_gram_free(g);
    /* numbers with bounds: fractions only where they stay inside */
    g = schema_gram("{\"type\":\"number\",\"minimum\":-1,\"maximum\":2}");
    cr_assert(matches(g, "1.75"));
    cr_assert(matches(g, "-0.5"));
    cr_assert(matches(g, "2"));
    cr_assert(!matches(g, "2.5"));
    cr_assert(!matches(g, "-1.5"));
    pl_gram_free(g);
}

Test(grammar, schema_errors_name_the_pointer) {
    schema_error("{\"type\":\"object\",\"properties\":{\"a\":{\"not\":{}}}}", PL_ERR_INVALID_ARGUMENT,
                 "json_schema at /properties/a/not: unsupported keyword \"not\"");
    schema_error("{\"properties\":{\"x/y\":{\"type\":\"strin\"}}}", PL_ERR_INVALID_ARGUMENT,
                 "at /properties/x~1y/type: unknown type");
    schema_error("{\"type\":\"string\",\"maxLength\":1000000}", PL_ERR_TOO_LONG, "at /maxLength");
    schema_error("{\"$ref\":\"https://example.com/s.json\"}", PL_ERR_INVALID_ARGUMENT,
                 "only references within the schema");
    schema_error("{\"$ref\":\"#/$defs/missing\"}", PL_ERR_INVALID_ARGUMENT, "points at nothing");
    schema_error("{\"type\":\"string\",\"format\":\"ipv6\"}", PL_ERR_INVALID_ARGUMENT,
                 "at /format: format \"ipv6\" is not supported");
    schema_error("{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", PL_ERR_INVALID_ARGUMENT,
                 "at /pattern: regex at offset 5: backreferences");
    schema_error("{\"type\":", PL_ERR_INVALID_ARGUMENT, "not JSON");
    /* deep nesting and a huge enum: refused with the place, quickly */
    size_t cap = 64 * 40 + 64;
    char *deep = malloc(cap);
    deep[0] = '\0';
    for (int i = 0; i < 70; i++) strcat(deep, "{\"items\":");
    strcat(deep, "{}");
    for (int i = 0; i < 70; i++) strcat(deep, "}");
    schema_error(deep, PL_ERR_TOO_LONG, "nested deeper than 64");
    free(deep);
    size_t n = 100000;
    char *big = malloc(n * 8 + 32);
    size_t at = (size_t)sprintf(big, "{\"enum\":[");
    for (size_t i = 0; i < n; i++) at += (size_t)sprintf(big + at, "%s%zu", i ? "," : "", i);
    strcpy(big + at, "]}");
    schema_error(big, PL_ERR_TOO_LONG, "at /enum: 100000 members");
    free(big);
}

Test(grammar, regex_and_choice) {
    char *text = NULL;
    cr_assert_eq(pl_gram_regex_to_gbnf("^[a-c]+\\d{2}(x|yz)?$", 20, NULL, &text), PL_OK, "%s",
                 pl_last_error());
    pl_gram *g = parse_ok(text);
    pl_free(text);
    cr_assert(matches(g, "ab12"));
    cr_assert(matches(g, "c00yz"));
    cr_assert(!matches(g, "ab1"));
    cr_assert(!matches(g, "d12"));
    pl_gram_free(g);
    const char *bad[][2] = {{"a(?=b)", "offset 2: lookaround"}, {"\\bx", "word boundaries"},
                            {"a^b", "offset 1: ^ is only supported at the start"},
                            {"(a", "expecting )"}, {"a{3,2}", "below the minimum"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pl_status st = pl_gram_regex_to_gbnf(bad[i][0], strlen(bad[i][0]), NULL, &text);
        cr_assert_neq(st, PL_OK, "%s", bad[i][0]);
        cr_assert(strstr(pl_last_error(), bad[i][1]), "%s: %s", bad[i][0], pl_last_error());
    }
    const char *choices[] = {"yes", "no, thanks", "\"quoted\""};
    cr_assert_eq(pl_gram_choice_to_gbnf(choices, 3, &text), PL_OK);
    g = parse_ok(text);
    pl_free(text);
    cr_assert(matches(g, "no, thanks"));
    cr_assert(matches(g, "\"quoted\""));
    cr_assert(!matches(g, "no"));
    pl_gram_free(g);
}

/* ---- masks against trying every token ---------------------------------------------------- */

static void masks_equal_brute_force(const char *tok_file, const char *grammar, int steps,
                                    unsigned seed) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", pl_test_models_dir(), tok_file);
    pl_tokenizer *t;
    cr_assert_eq(pl_tok_load(path, &t), PL_OK, "%s", pl_last_error());
    pl_gram_vocab *v;
    cr_assert_eq(pl_gram_vocab_create(t, &v), PL_OK, "%s", pl_last_error());
    pl_gram *g = parse_ok(grammar);
    int V = pl_gram_vocab_size(v);
    size_t words = ((size_t)V + 63) / 64;
    uint64_t *bits = calloc(words, sizeof *bits), *again = calloc(words, sizeof *again);
    pl_gram_matcher m;
    cr_assert_eq(pl_gram_matcher_init(&m, g), PL_OK);
    srand(seed);
    for (int step = 0; step < steps && pl_gram_matcher_can_continue(&m); step++) {
        memset(bits, 0, words * sizeof *bits);
        cr_assert_eq(pl_gram_mask(&m, v, NULL, 0, bits), PL_OK, "%s", pl_last_error());
        int32_t *allowed = malloc((size_t)V * sizeof *allowed);
        int n_allowed = 0;
        for (int32_t id = 0; id < V; id++) {
            pl_gram_matcher c;
            cr_assert_eq(pl_gram_matcher_copy(&c, &m), PL_OK);
            bool ok = pl_gram_matcher_accept_token(&c, v, id) == PL_OK;
            pl_gram_matcher_deinit(&c);
            bool bit = (bits[id >> 6] >> (id & 63)) & 1;
            cr_assert_eq(bit, ok, "%s step %d token %d: mask %d, trying it %d", tok_file, step,
                         (int)id, bit, ok);
            if (ok) allowed[n_allowed++] = id;
        }
        /* the same state again: from the cache, the same mask */
        memset(again, 0, words * sizeof *again);
        pl_gram_cache_stats before, after;
        pl_gram_cache_stats_get(g, &before);
        cr_assert_eq(pl_gram_mask(&m, v, NULL, 0, again), PL_OK);
        pl_gram_cache_stats_get(g, &after);
        cr_assert_eq(after.hits, before.hits + 1);
        cr_assert_eq(memcmp(bits, again, words * sizeof *bits), 0);
        if (n_allowed == 0) {
            free(allowed);
            break;
        }
        int32_t pick = allowed[rand() % n_allowed];
        free(allowed);
        cr_assert_eq(pl_gram_matcher_accept_token(&m, v, pick), PL_OK);
    }
    pl_gram_matcher_deinit(&m);
    free(bits);
    free(again);
    pl_gram_free(g);
    pl_gram_vocab_free(v);
    pl_tok_free(t);
}

static const char *k_json_grammar =
    "root ::= \"{\" ws ( pair ( \",\" ws pair )* )? \"}\"\n"
    "pair ::= str ws \":\" ws val ws\n"
    "val ::= str | [0-9]{1,4} | \"[\" ws ( val ( \",\" ws val )* )? \"]\" | root\n"
    "str ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1F] | \"\\\\\" [nt\\\"] ){0,6} \"\\\"\"\n"
    "ws ::= [ \\n]{0,3}\n";

Test(grammar, masks_equal_trying_each_token_spm) {
    if (!pl_test_models_dir()) cr_skip_test("PAGELLM_TEST_MODELS unset");
    masks_equal_brute_force("tokenizer.model", k_json_grammar, 12, 1);
    masks_equal_brute_force("tok512.model", k_json_grammar, 20, 2);
    /* `!<[id]>` beside text that the same token also matches: the token stays allowed
     * (found by fuzz_grammar: the reference used to clear the text's bit) */
    for (int id = 260; id < 512; id += 37) {
        char g[128];
        snprintf(g, sizeof g, "root ::= ( [a-z ] | !<[%d]> ){1,3}\n", id);
        masks_equal_brute_force("tok512.model", g, 2, (unsigned)id);
    }
}

Test(grammar, masks_equal_trying_each_token_bpe) {
    if (!pl_test_models_dir()) cr_skip_test("PAGELLM_TEST_MODELS unset");
    masks_equal_brute_force("qwen3", k_json_grammar, 4, 3);
    masks_equal_brute_force("llama3", "root ::= [\\u4e00-\\u9fff\\u00e9 ]{1,3} \"!\"\n", 3, 4);
}

/* ---- the run path and the caches against the plain walk ---------------------------------- */

/* Masks along a seeded random walk through grammar over v (tokens drawn uniformly from each
 * mask): pass 0 with the vocabulary's class tables as they are (cold at the first grammar) and
 * the grammar's cache empty, checked against pl_gram_mask_plain at every step and against
 * trying every token every brute_every steps (0: never); pass 1 with a new grammar of the same
 * text (tables warm, cache cold) and pass 2 with that grammar again (cache warm), which must
 * give the same masks. Returns how many misses the run path answered in pass 0. */
static uint64_t runs_equal_plain(pl_gram_vocab *v, const char *grammar, int steps, unsigned seed,
                                 int brute_every) {
    int V = pl_gram_vocab_size(v);
    size_t words = ((size_t)V + 63) / 64;
    uint64_t *stored = calloc((size_t)steps * words, sizeof *stored);
    uint64_t *bits = calloc(words, sizeof *bits), *plain = calloc(words, sizeof *plain);
    int32_t *allowed = malloc((size_t)V * sizeof *allowed);
    pl_gram *g0 = parse_ok(grammar), *g1 = parse_ok(grammar);
    uint64_t run_misses = 0, hits_before = 0;
    int steps_done = -1;
    for (int pass = 0; pass < 3; pass++) {
        pl_gram *g = pass == 0 ? g0 : g1;
        pl_gram_cache_stats cs;
        pl_gram_cache_stats_get(g, &cs);
        hits_before = cs.hits;
        pl_gram_matcher m;
        cr_assert_eq(pl_gram_matcher_init(&m, g), PL_OK);
        uint64_t rng = seed * 0x9E3779B97F4A7C15ull + 1;
        int step = 0;
        for (; step < steps && pl_gram_matcher_can_continue(&m); step++) {
            memset(bits, 0, words * sizeof *bits);
            cr_assert_eq(pl_gram_mask(&m, v, NULL, 0, bits), PL_OK, "%s", pl_last_error());
            uint64_t *want = stored + (size_t)step * words;
            if (pass == 0) {
                memset(plain, 0, words * sizeof *plain);
                cr_assert_eq(pl_gram_mask_plain(&m, v, NULL, 0, plain), PL_OK);
                for (int32_t id = 0; id < V; id++)
                    cr_assert_eq((bits[id >> 6] >> (id & 63)) & 1, (plain[id >> 6] >> (id & 63)) & 1,
                                 "step %d token %d: mask %d, plain walk %d", step, (int)id,
                                 (int)((bits[id >> 6] >> (id & 63)) & 1),
                                 (int)((plain[id >> 6] >> (id & 63)) & 1));
                for (int32_t id = 0; brute_every && step % brute_every == 0 && id < V; id++) {
                    pl_gram_matcher c;
                    cr_assert_eq(pl_gram_matcher_copy(&c, &m), PL_OK);
                    bool ok = pl_gram_matcher_accept_token(&c, v, id) == PL_OK;
                    pl_gram_matcher_deinit(&c);
                    cr_assert_eq((bool)((bits[id >> 6] >> (id & 63)) & 1), ok,
                                 "step %d token %d: mask against trying it", step, (int)id);
                }
                memcpy(want, bits, words * sizeof *bits);
            } else {
                cr_assert_eq(memcmp(want, bits, words * sizeof *bits), 0, "pass %d step %d", pass,
                             step);
            }
            int n = 0;
            for (size_t w = 0; w < words; w++)
                for (uint64_t b = bits[w]; b; b &= b - 1)
                    allowed[n++] = (int32_t)(w * 64 + (size_t)__builtin_ctzll(b));
            if (n == 0) break;
            rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
            cr_assert_eq(pl_gram_matcher_accept_token(&m, v, allowed[rng % (uint64_t)n]), PL_OK);
        }
        if (pass == 0) steps_done = step;
        cr_assert_eq(step, steps_done, "pass %d took another way", pass);
        pl_gram_matcher_deinit(&m);
        pl_gram_cache_stats_get(g, &cs);
        if (pass == 0) run_misses = cs.runs;
        if (pass == 2)
            cr_assert_eq(cs.hits - hits_before, (uint64_t)steps_done, "pass 2 is all cache hits");
    }
    pl_gram_free(g0);
    pl_gram_free(g1);
    free(stored);
    free(bits);
    free(plain);
    free(allowed);
    return run_misses;
}

/* JSON Schema's strings, an email, numbers, an enum, nested objects and an array. */
static const char *k_order_schema =
    "{\"type\":\"object\",\"properties\":{"
    "\"note\":{\"type\":\"string\",\"maxLength\":10},"
    "\"user\":{\"type\":\"object\",\"properties\":{\"email\":{\"type\":\"string\",\"format\":\"email\"},"
    "\"age\":{\"type\":\"integer\"}},\"required\":[\"email\",\"age\"]},"
    "\"items\":{\"type\":\"array\",\"maxItems\":2,\"items\":{\"type\":\"object\",\"properties\":"
    "{\"sku\":{\"type\":\"string\"},\"price\":{\"type\":\"number\"}},\"required\":[\"sku\"]}},"
    "\"status\":{\"enum\":[\"new\",\"paid\"]}},\"required\":[\"note\",\"user\",\"items\",\"status\"]}";

/* Runs of a negated class with multi-byte characters, counted and unbounded runs, classes that
 * share a run ([a-z0-9-] around [a-z0-9]), non-ASCII classes, and a tail long enough for runs
 * beyond the tables' whole bitmaps. */
static const char *k_runs_grammar =
    "root ::= \"\\\"\" [^\"\\\\\\x00-\\x1F]{0,5} \"\\\"\" \" \" [a-zA-Z0-9_.+-]{1,4} \"@\" "
    "[a-z0-9] ([a-z0-9-]{0,3} [a-z0-9])? ( \".\" [a-z]{2,3} ){1,2} \" \" "
    "[\\u00e0-\\u00ff\\u4e00-\\u9fff ]{0,3} [0-9]{1,4} \"!\" [^\\n]*\n";

Test(grammar, run_path_masks_equal_the_plain_walk) {
    if (!pl_test_models_dir()) cr_skip_test("PAGELLM_TEST_MODELS unset");
    char *schema_gbnf;
    cr_assert_eq(pl_gram_schema_to_gbnf(k_order_schema, strlen(k_order_schema), NULL, &schema_gbnf),
                 PL_OK, "%s", pl_last_error());
    static const char *const toks[] = {"llama3", "qwen3", "tokenizer.model"};
    for (size_t k = 0; k < sizeof toks / sizeof toks[0]; k++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", pl_test_models_dir(), toks[k]);
        pl_tokenizer *t;
        cr_assert_eq(pl_tok_load(path, &t), PL_OK, "%s", pl_last_error());
        pl_gram_vocab *v;
        cr_assert_eq(pl_gram_vocab_create(t, &v), PL_OK, "%s", pl_last_error());
        int brute = k == 0 ? 16 : 0; /* trying every token: on one tokenizer, now and then */
        uint64_t runs = runs_equal_plain(v, schema_gbnf, 48, 11 + (unsigned)k, brute);
        runs += runs_equal_plain(v, k_runs_grammar, 40, 7 + (unsigned)k, brute);
        runs += runs_equal_plain(v, k_runs_grammar, 40, 99 + (unsigned)k, 0);
        cr_assert_gt(runs, 10, "%s: the run path answered %llu misses", toks[k],
                     (unsigned long long)runs);
        pl_gram_vocab_free(v);
        pl_tok_free(t);
    }
    pl_free(schema_gbnf);
}

/* ---- through the engine ---------------------------------------------------------------- */

static pl_engine *engine_tok512(void) {
    char tok[1024];
    snprintf(tok, sizeof tok, "%s/tok512.model", pl_test_models_dir());
    pl_engine_config c;
    pl_engine_config_default(&c);
    c.model_path = "dummy:tiny";
    c.tokenizer_path = tok;
    c.n_threads = 1;
    pl_engine *e;
    cr_assert_eq(pl_engine_create(&c, &e), PL_OK, "%s", pl_last_error());
    return e;
}

Test(grammar, engine_requests) {
    if (!pl_test_models_dir()) cr_skip_test("PAGELLM_TEST_MODELS unset");
    pl_engine *e = engine_tok512();
    pl_sampling_params p;
    pl_sampling_params_default(&p);
    p.max_tokens = 200;
    p.seed = 42;
    p.has_seed = true;
    p.n = 3;
    p.regex = "(ab|cd){1,3}!";
    /* alone */
    pl_request_id id;
    cr_assert_eq(pl_engine_submit_request(e, "Once upon", &p, &id), PL_OK, "%s", pl_last_error());
    pl_completion *alone;
    size_t n_alone;
    cr_assert_eq(pl_engine_run(e, &alone, &n_alone), PL_OK);
    cr_assert_eq(n_alone, 3u);
    /* in a batch with other requests: the seeded samples draw the same tokens */
    pl_sampling_params q;
    pl_sampling_params_default(&q);
    q.max_tokens = 30;
    for (int i = 0; i < 3; i++) cr_assert_eq(pl_engine_submit_request(e, "A cat", &q, NULL), PL_OK);
    cr_assert_eq(pl_engine_submit_request(e, "Once upon", &p, &id), PL_OK);
    pl_completion *batch;
    size_t n_batch;
    cr_assert_eq(pl_engine_run(e, &batch, &n_batch), PL_OK);
    size_t k = 0;
    for (size_t i = 0; i < n_batch; i++) {
        if (batch[i].id != id) continue;
        const pl_completion *a = &alone[batch[i].index];
        cr_assert_eq(batch[i].finish_reason, PL_FINISH_STOP);
        cr_assert_str_eq(batch[i].text, a->text);
        cr_assert_eq(batch[i].n_output_ids, a->n_output_ids);
        k++;
    }
    cr_assert_eq(k, 3u);
    for (size_t i = 0; i < n_alone; i++) {
        const char *t = alone[i].text;
        size_t len = strlen(t);
        cr_assert(len >= 3 && t[len - 1] == '!', "'%s'", t);
        for (size_t j = 0; j + 1 < len; j += 2)
            cr_assert(!strncmp(t + j, "ab", 2) || !strncmp(t + j, "cd", 2), "'%s'", t);
    }
    pl_completions_free(alone, n_alone);
    pl_completions_free(batch, n_batch);

    /* refusals at submit, with the place; nothing queued */
    pl_sampling_params b;
    pl_sampling_params_default(&b);
    b.json_schema = "{\"type\":\"object\",\"if\":{}}";
    cr_assert_eq(pl_engine_submit_request(e, "x", &b, NULL), PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "sampling.json_schema: json_schema at /if"), "%s", pl_last_error());
    b.json_schema = NULL;
    b.grammar = "root ::= \"a\" b\n";
    cr_assert_eq(pl_engine_submit_request(e, "x", &b, NULL), PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "sampling.grammar: grammar line 1 column 14"), "%s", pl_last_error());
    b.regex = "a+";
    cr_assert_eq(pl_engine_submit_request(e, "x", &b, NULL), PL_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(pl_last_error(), "exclude each other"), "%s", pl_last_error());
    cr_assert(!pl_engine_has_pending_work(e));

    /* compile once: the handle and a request with the same text share the grammar */
    pl_sampling_params c;
    pl_sampling_params_default(&c);
    const char *ch[] = {"red", "green"};
    c.choice = ch;
    c.n_choice = 2;
    pl_grammar *g;
    cr_assert_eq(pl_grammar_compile(e, &c, &g), PL_OK, "%s", pl_last_error());
    cr_assert_eq(pl_engine_submit_request(e, "x", &c, NULL), PL_OK);
    pl_grammar_free(g);
    pl_completion *out;
    size_t n_out;
    cr_assert_eq(pl_engine_run(e, &out, &n_out), PL_OK);
    cr_assert_eq(n_out, 1u);
    cr_assert(!strcmp(out[0].text, "red") || !strcmp(out[0].text, "green"), "%s", out[0].text);
    cr_assert_eq(out[0].finish_reason, PL_FINISH_STOP);
    pl_completions_free(out, n_out);
    pl_engine_destroy(e);
}

Test(grammar, schema_to_grammar_with_prefix_embeds) {
    char *a = NULL, *b = NULL;
    cr_assert_eq(pl_json_schema_to_grammar("{\"type\":\"object\",\"properties\":{\"city\":"
                                           "{\"type\":\"string\",\"maxLength\":8}},"
                                           "\"required\":[\"city\"]}", "weather-", &a), PL_OK);
    cr_assert_eq(pl_json_schema_to_grammar("{\"type\":\"integer\"}", "count-", &b), PL_OK);
    cr_assert(strstr(a, "weather-root ::="));
    cr_assert_null(strstr(a, "\nroot ::="));
    /* a tool call choosing between two functions, as a server would write it */
    size_t cap = strlen(a) + strlen(b) + 512;
    char *text = malloc(cap);
    snprintf(text, cap,
             "root ::= \"<tool_call>{\\\"name\\\": \" ( \"\\\"weather\\\", \\\"arguments\\\": \" "
             "weather-root | \"\\\"count\\\", \\\"arguments\\\": \" count-root ) \"}</tool_call>\"\n%s%s",
             a, b);
    pl_gram *g = parse_ok(text);
    cr_assert(matches(g, "<tool_call>{\"name\": \"weather\", \"arguments\": {\"city\": \"Oslo\"}}</tool_call>"));
    cr_assert(matches(g, "<tool_call>{\"name\": \"count\", \"arguments\": -17}</tool_call>"));
    cr_assert(!matches(g, "<tool_call>{\"name\": \"count\", \"arguments\": {}}</tool_call>"));
    pl_gram_free(g);
    free(text);
    pl_free_text(a);
    pl_free_text(b);
    char *x = NULL;
    cr_assert_eq(pl_json_schema_to_grammar("{}", "bad_prefix", &x), PL_ERR_INVALID_ARGUMENT);
}
