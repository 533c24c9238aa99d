/*
 * reply/scan.c - JSON read from text that may still be arriving.
 *
 * A reply streams in token by token, so a tool call is read many times as it grows: each read
 * starts at the call's first byte and says how far it got (MORE) or where it ended (DONE).
 * Only the structure is checked here (strings, escapes, nesting, literals); the arguments of
 * a finished call are parsed again by jansson before they count as valid.
 */
#include "reply/scan.h"

#include <string.h>

#define MAX_DEPTH 512

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

void pl_scan_ws(const char *s, size_t len, size_t *pos) {
    while (*pos < len && is_ws(s[*pos])) (*pos)++;
}

static int hex(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* A string from the quote at *pos. */
static pl_scan_status string(const char *s, size_t len, size_t *pos) {
    size_t p = *pos + 1;
    while (p < len) {
        unsigned char c = (unsigned char)s[p];
        if (c == '"') {
            *pos = p + 1;
            return PL_SCAN_DONE;
        }
        if (c < 0x20) {
            *pos = p;
            return PL_SCAN_BAD;
        }
        if (c != '\\') {
            p++;
            continue;
        }
        if (p + 1 >= len) break;
        char e = s[p + 1];
        if (e == 'u') {
            for (size_t k = 2; k < 6; k++) {
                if (p + k >= len) {
                    *pos = len;
                    return PL_SCAN_MORE;
                }
                if (!hex(s[p + k])) {
                    *pos = p + k;
                    return PL_SCAN_BAD;
                }
            }
            p += 6;
        } else if (strchr("\"\\/bfnrt", e) && e) {
            p += 2;
        } else {
            *pos = p + 1;
            return PL_SCAN_BAD;
        }
    }
    *pos = len;
    return PL_SCAN_MORE;
}

/* A number or literal: its bytes must be those JSON allows; its end is where they stop (the
 * text's end: MORE). The exact grammar of numbers is left to jansson. */
static pl_scan_status scalar(const char *s, size_t len, size_t *pos) {
    size_t p = *pos;
    char c = s[p];
    if (c == 't' || c == 'f' || c == 'n') {
        const char *word = c == 't' ? "true" : c == 'f' ? "false" : "null";
        size_t n = strlen(word);
        for (size_t k = 0; k < n; k++) {
            if (p + k >= len) {
                *pos = len;
                return PL_SCAN_MORE;
            }
            if (s[p + k] != word[k]) {
                *pos = p + k;
                return PL_SCAN_BAD;
            }
        }
        *pos = p + n;
        return PL_SCAN_DONE;
    }
    if (c != '-' && (c < '0' || c > '9')) return PL_SCAN_BAD;
    while (p < len && (strchr("+-.eE", s[p]) || (s[p] >= '0' && s[p] <= '9')) && s[p]) p++;
    *pos = p;
    return p == len ? PL_SCAN_MORE : PL_SCAN_DONE;
}

pl_scan_status pl_scan_value(const char *s, size_t len, size_t *pos) {
    /* containers open so far: '{' or '['; after_key: an object expects ':' then a value */
    char stack[MAX_DEPTH];
    int depth = 0;
    size_t p = *pos;
    enum { VALUE, AFTER_VALUE, KEY_OR_END, KEY, COLON, VALUE_OR_END } want = VALUE;
    for (;;) {
        pl_scan_ws(s, len, &p);
        if (p >= len) {
            *pos = len;
            return PL_SCAN_MORE;
        }
        char c = s[p];
        switch (want) {
        case VALUE_OR_END:
            if (c == ']') goto close;
            /* fall through */
        case VALUE:
            if (c == '{' || c == '[') {
                if (depth == MAX_DEPTH) {
                    *pos = p;
                    return PL_SCAN_BAD;
                }
                stack[depth++] = c;
                p++;
                want = c == '{' ? KEY_OR_END : VALUE_OR_END;
                continue;
            } else {
                pl_scan_status st = c == '"' ? string(s, len, &p) : scalar(s, len, &p);
                if (st != PL_SCAN_DONE) {
                    *pos = p;
                    return st;
                }
            }
            break;
        case KEY_OR_END:
            if (c == '}') goto close;
            /* fall through */
        case KEY: {
            if (c != '"') {
                *pos = p;
                return PL_SCAN_BAD;
            }
            pl_scan_status st = string(s, len, &p);
            if (st != PL_SCAN_DONE) {
                *pos = p;
                return st;
            }
            want = COLON;
            continue;
        }
        case COLON:
            if (c != ':') {
                *pos = p;
                return PL_SCAN_BAD;
            }
            p++;
            want = VALUE;
            continue;
        case AFTER_VALUE:
            if (c == ',') {
                p++;
                want = stack[depth - 1] == '{' ? KEY : VALUE;
                continue;
            }
            if (c == (stack[depth - 1] == '{' ? '}' : ']')) goto close;
            *pos = p;
            return PL_SCAN_BAD;
        }
        /* a value ended */
        if (depth == 0) {
            *pos = p;
            return PL_SCAN_DONE;
        }
        want = AFTER_VALUE;
        continue;
    close:
        if ((c == '}') != (stack[depth - 1] == '{')) {
            *pos = p;
            return PL_SCAN_BAD;
        }
        depth--;
        p++;
        if (depth == 0) {
            *pos = p;
            return PL_SCAN_DONE;
        }
        want = AFTER_VALUE;
    }
}

static bool key_is(const char *s, size_t at, size_t end, const char *name) {
    size_t n = strlen(name);
    return end - at == n + 2 && !memcmp(s + at + 1, name, n);
}

void pl_scan_call_object(const char *s, size_t len, pl_scan_call *out) {
    memset(out, 0, sizeof *out);
    size_t p = 0;
    pl_scan_ws(s, len, &p);
    if (p >= len) {
        out->status = PL_SCAN_MORE;
        return;
    }
    if (s[p] != '{') {
        out->status = PL_SCAN_BAD;
        return;
    }
    p++;
    bool first = true;
    pl_scan_status st;
    for (;;) {
        pl_scan_ws(s, len, &p);
        if (p >= len) goto more;
        if (s[p] == '}' && first) {
            out->status = PL_SCAN_DONE;
            out->end = p + 1;
            return;
        }
        size_t key_at = p;
        st = s[p] == '"' ? string(s, len, &p) : PL_SCAN_BAD;
        if (st != PL_SCAN_DONE) goto status;
        size_t key_end = p;
        pl_scan_ws(s, len, &p);
        if (p >= len) goto more;
        if (s[p] != ':') goto bad;
        p++;
        pl_scan_ws(s, len, &p);
        if (p >= len) goto more;
        bool is_name = key_is(s, key_at, key_end, "name");
        bool is_args = !out->has_args && (key_is(s, key_at, key_end, "arguments") ||
                                          key_is(s, key_at, key_end, "parameters"));
        size_t v_at = p;
        if (is_name && s[p] != '"') goto bad;
        if (is_args) {
            out->has_args = true;
            out->args_at = v_at;
            out->args_first = s[p];
        }
        st = pl_scan_value(s, len, &p);
        if (is_args) out->args_end = p; /* BAD: the offending byte; the ones before are sound */
        if (st != PL_SCAN_DONE) goto status;
        if (is_args) out->args_done = true;
        if (is_name) {
            out->has_name = true;
            out->name_at = v_at;
            out->name_end = p;
        }
        first = false;
        pl_scan_ws(s, len, &p);
        if (p >= len) goto more;
        if (s[p] == ',') {
            p++;
            continue;
        }
        if (s[p] != '}') goto bad;
        out->status = PL_SCAN_DONE;
        out->end = p + 1;
        return;
    }
status: /* a key or value did not end: MORE or BAD, as it said */
    out->status = st;
    return;
more:
    out->status = PL_SCAN_MORE;
    return;
bad:
    out->status = PL_SCAN_BAD;
}

size_t pl_scan_partial_suffix(const char *s, size_t len, const char *word) {
    size_t n = strlen(word);
    for (size_t k = n - 1 < len ? n - 1 : len; k > 0; k--)
        if (!memcmp(s + len - k, word, k)) return k;
    return 0;
}
