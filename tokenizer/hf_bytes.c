/*
 * tokenizer/hf_bytes.c - the byte-level alphabet (GPT-2's bytes_to_unicode) and lossy UTF-8.
 *
 * Byte-level BPE spells every byte as one printable character: the bytes '!'..'~',
 * 0xA1..0xAC and 0xAE..0xFF stand for themselves; the 68 others (controls, space, DEL,
 * 0x80..0xA0, soft hyphen) take U+0100, U+0101, ... in byte order. So space is "Ġ" (U+0120)
 * and newline "Ċ" (U+010A).
 */
#include "tokenizer/hf.h"
#include "util/utf8.h"

static bool stands_for_itself(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

int pl_hf_char_of_byte(uint8_t b, char *out) {
    uint32_t cp = b;
    if (!stands_for_itself(b)) {
        uint32_t n = 0;
        for (unsigned x = 0; x < b; x++) n += !stands_for_itself(x);
        cp = 0x100 + n;
    }
    return pl_utf8_encode(cp, out);
}

int pl_hf_byte_of_char(uint32_t cp) {
    if (cp < 0x100) return stands_for_itself(cp) ? (int)cp : -1;
    if (cp >= 0x100 + 68) return -1;
    uint32_t n = cp - 0x100;
    for (unsigned x = 0; x < 256; x++)
        if (!stands_for_itself(x) && n-- == 0) return (int)x;
    return -1;
}

pl_status pl_hf_lossy_append(pl_tok_buf *out, const unsigned char *b, size_t n) {
    /* At most 3 output bytes per input byte (U+FFFD for a lone byte). */
    PL_TRY(pl_tok_buf_reserve(out, 3 * n + 1));
    char *o = out->p + out->n;
    for (size_t i = 0; i < n;) {
        if (b[i] < 0x80) {
            *o++ = (char)b[i++];
            continue;
        }
        int k = pl_utf8_subpart(b + i, n - i);
        int need = pl_utf8_lead_len(b[i]);
        if (k > 0 && k == need) {
            for (int j = 0; j < k; j++) *o++ = (char)b[i + j];
            i += (size_t)k;
        } else {
            /* an invalid lead byte, a sequence cut by a bad byte, or cut by the end */
            for (int j = 0; j < 3; j++) *o++ = PL_TOK_REPLACEMENT[j];
            i += k > 0 ? (size_t)k : 1;
        }
    }
    out->n = (size_t)(o - out->p);
    return PL_OK;
}
