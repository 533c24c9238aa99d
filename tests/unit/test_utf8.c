/*
 * tests/unit/test_utf8.c - util/utf8, the one UTF-8 module: where each rule of RFC 3629 cuts,
 * and the lenient decode its callers (JavaScript-style template strings) rely on.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "util/utf8.h"

#define U(s) ((const unsigned char *)(s))

Test(utf8, step_accepts_exactly_rfc_3629) {
    cr_assert_eq(pl_utf8_step(U("a"), 1), 1);
    cr_assert_eq(pl_utf8_step(U("\xC2\xA9"), 2), 2);
    cr_assert_eq(pl_utf8_step(U("\xE2\x82\xAC"), 3), 3);
    cr_assert_eq(pl_utf8_step(U("\xF0\x9F\x98\x80"), 4), 4);
    cr_assert_eq(pl_utf8_step(U("\xC1\xBF"), 2), -1);          /* overlong 2-byte */
    cr_assert_eq(pl_utf8_step(U("\xE0\x9F\xBF"), 3), -1);      /* overlong 3-byte */
    cr_assert_eq(pl_utf8_step(U("\xF0\x8F\xBF\xBF"), 4), -1);  /* overlong 4-byte */
    cr_assert_eq(pl_utf8_step(U("\xED\xA0\x80"), 3), -1);      /* a surrogate */
    cr_assert_eq(pl_utf8_step(U("\xF4\x90\x80\x80"), 4), -1);  /* past U+10FFFF */
    cr_assert_eq(pl_utf8_step(U("\x80"), 1), -1);              /* a lone continuation */
    cr_assert_eq(pl_utf8_step(U("\xE2\x82"), 2), 0);           /* cut by the end */
    cr_assert_eq(pl_utf8_step(U("\xE2\x82"), SIZE_MAX), -1);   /* the NUL ends it */
}

Test(utf8, subpart_is_the_maximal_valid_prefix) {
    cr_assert_eq(pl_utf8_subpart(U("\xE2\x82x"), 3), 2);
    cr_assert_eq(pl_utf8_subpart(U("\xE2\x82"), 2), 2);
    cr_assert_eq(pl_utf8_subpart(U("\xED\xA0\x80"), 3), 1);
    cr_assert_eq(pl_utf8_subpart(U("\xFF"), 1), 0);
    cr_assert_eq(pl_utf8_subpart(U("\xF0\x9F\x98\x80"), 4), 4);
}

Test(utf8, validate_names_the_first_bad_byte) {
    cr_assert_eq(pl_utf8_validate("ab\xC2\xA9", 4), 4);
    cr_assert_eq(pl_utf8_validate("a\0b", 3), 3);
    cr_assert_eq(pl_utf8_validate("ab\xE2\x82", 4), 2);
    cr_assert_eq(pl_utf8_validate("abc\xED\xA0\x80z", 7), 3);
}

Test(utf8, decode_and_encode_round_trip) {
    const uint32_t cps[] = {0x41, 0xA9, 0x7FF, 0x800, 0x20AC, 0xFFFF, 0x10000, 0x1F600, 0x10FFFF};
    for (size_t i = 0; i < sizeof cps / sizeof cps[0]; i++) {
        char b[4];
        int n = pl_utf8_encode(cps[i], b);
        cr_assert_eq(pl_utf8_step(U(b), (size_t)n), n);
        cr_assert_eq(pl_utf8_lead_len((unsigned char)b[0]), n);
        uint32_t cp;
        cr_assert_eq(pl_utf8_decode(b, (size_t)n, &cp), n);
        cr_assert_eq(cp, cps[i]);
    }
}

Test(utf8, decode_is_lenient_at_the_end) {
    uint32_t cp = 1;
    cr_assert_eq(pl_utf8_decode("", 0, &cp), 0);
    cr_assert_eq(cp, 0);
    cr_assert_eq(pl_utf8_decode("\xE2\x82", 2, &cp), 1); /* the lead byte alone */
    cr_assert_eq(cp, 0xE2);
    cr_assert_eq(pl_utf8_decode("\xF0\x9F\x98", 3, &cp), 3); /* read as a 3-byte sequence */
    cr_assert_eq(pl_utf8_decode("\x80\x80", 2, &cp), 2);
    cr_assert(pl_utf8_is_cont(0x80) && pl_utf8_is_cont(0xBF) && !pl_utf8_is_cont(0xC2));
}
