/*
 * bench/internal/grammar/order_schema.h - the nested order schema both grammar benchmarks
 * constrain to (bench_grammar.c end to end, bench_mask.c the mask alone), so their figures
 * are of the same grammar.
 */
#ifndef PL_BENCH_ORDER_SCHEMA_H
#define PL_BENCH_ORDER_SCHEMA_H

static const char *const k_schema =
    "{\"type\":\"object\",\"properties\":{"
    "\"id\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":99999},"
    "\"user\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":16},"
    "\"email\":{\"type\":\"string\",\"format\":\"email\"},\"age\":{\"type\":\"integer\"}},"
    "\"required\":[\"name\",\"age\"]},"
    "\"items\":{\"type\":\"array\",\"maxItems\":4,\"items\":{\"type\":\"object\",\"properties\":"
    "{\"sku\":{\"type\":\"string\",\"maxLength\":8},\"qty\":{\"type\":\"integer\",\"minimum\":1,"
    "\"maximum\":99},\"price\":{\"type\":\"number\"}},\"required\":[\"sku\",\"qty\"]}},"
    "\"status\":{\"enum\":[\"new\",\"paid\",\"shipped\"]},\"note\":{\"type\":\"string\","
    "\"maxLength\":24}},\"required\":[\"id\",\"user\",\"items\",\"status\"]}";

#endif
