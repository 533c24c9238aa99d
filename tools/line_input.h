/*
 * tools/line_input.h - the user's messages for `pagellm chat`, read from a terminal with line
 * editing and history (libedit: arrow keys move in the line and through earlier messages,
 * ~/.editrc is read) or from a pipe as plain lines.
 *
 * A message is one line; a line ending in a backslash goes on to the next one (the backslash
 * becomes a newline), and with multiline set every line goes on until an empty line (or the
 * end of input). Ctrl-C while typing drops what was typed (LINE_INTERRUPTED).
 */
#ifndef PL_TOOLS_LINE_INPUT_H
#define PL_TOOLS_LINE_INPUT_H

#include <stdbool.h>
#include <stddef.h>

typedef struct line_input line_input;

typedef enum line_result {
    LINE_MESSAGE = 0,     /* *out holds a message */
    LINE_END = 1,         /* end of input (Ctrl-D) */
    LINE_INTERRUPTED = 2, /* Ctrl-C: what was typed is dropped */
    LINE_ERROR = 3,       /* out of memory, or a read error (errno) */
} line_result;

/* interactive: stdin is a terminal (line editing, the "> " prompt on stdout); multiline: see
 * above. NULL when out of memory. */
line_input *line_input_open(const char *program, bool interactive, bool multiline);
void line_input_close(line_input *in);
/* The next message, without its last newline, in *out (owned by in: valid until the next
 * call) with its length (it may hold NUL bytes when read from a pipe). A message of only
 * blanks is skipped over. */
line_result line_input_read(line_input *in, const char **out, size_t *out_len);
/* Remembers a message sent, for the up arrow (a terminal only). */
void line_input_remember(line_input *in, const char *message);

#endif
