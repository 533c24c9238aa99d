/*
 * reply/scan.h - JSON read from text that may still be arriving: where a value ends, and a
 * tool call's name and arguments inside an object whose end may not have come yet.
 */
#ifndef PL_REPLY_SCAN_H
#define PL_REPLY_SCAN_H

#include <stdbool.h>
#include <stddef.h>

typedef enum pl_scan_status {
    PL_SCAN_DONE,     /* complete */
    PL_SCAN_MORE,     /* valid so far; the text ends before the value does */
    PL_SCAN_BAD,      /* not JSON */
} pl_scan_status;

/* Skips JSON whitespace from *pos. */
void pl_scan_ws(const char *s, size_t len, size_t *pos);

/* The JSON value starting at *pos (whitespace before it skipped): DONE with *pos just after
 * it; MORE when s ends inside it (a number or literal at the very end counts as MORE: more
 * digits may come); BAD otherwise (*pos then at the offending byte). Nesting deeper than 512
 * is BAD. */
pl_scan_status pl_scan_value(const char *s, size_t len, size_t *pos);

/* A tool call as an object {"name": "...", "arguments" | "parameters": VALUE, ...} from s[0]
 * (whitespace skipped first). */
typedef struct pl_scan_call {
    pl_scan_status status;  /* of the whole object */
    bool has_name;          /* the name string is complete: s[name_at, name_end) is its JSON
                               text, quotes included */
    size_t name_at, name_end;
    bool has_args;          /* the arguments value has begun at args_at */
    size_t args_at, args_end; /* its text so far (the whole value once args_done) */
    bool args_done;
    char args_first;        /* its first byte: '{', '"', ... */
    size_t end;             /* DONE: just after the closing brace */
} pl_scan_call;

/* Scans the call object in s[0..len). BAD also when "name" is not a string or the object is
 * not an object. An object without "name" is DONE with has_name false (not a call). */
void pl_scan_call_object(const char *s, size_t len, pl_scan_call *out);

/* The length of the longest suffix of s[0..len) that is a proper prefix of word: the bytes a
 * streaming reader must hold back because word may be starting there. */
size_t pl_scan_partial_suffix(const char *s, size_t len, const char *word);

#endif
