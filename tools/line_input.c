/*
 * tools/line_input.c - reading chat messages: libedit on a terminal, getline on a pipe, the
 * same rules for continued lines on both (tools/line_input.h).
 *
 * On a terminal libedit installs its signal handlers while it reads (EL_SIGNAL): a Ctrl-C
 * restores the terminal and reaches chat.c's handler, and el_gets returns with EINTR, which
 * is reported as LINE_INTERRUPTED.
 */
#include "line_input.h"

#include <errno.h>
#include <histedit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct line_input {
    bool interactive, multiline;
    EditLine *el;      /* interactive only */
    History *hist;
    HistEvent ev;
    bool continued;    /* the prompt of a continued line */
    char *line;        /* getline's buffer (pipe) */
    size_t line_cap;
    char *msg;         /* the message being built */
    size_t len, cap;
};

static char *prompt(EditLine *el) {
    line_input *in = NULL;
    el_get(el, EL_CLIENTDATA, &in);
    return in && in->continued ? "... " : "> ";
}

line_input *line_input_open(const char *program, bool interactive, bool multiline) {
    line_input *in = calloc(1, sizeof *in);
    if (!in) return NULL;
    in->interactive = interactive;
    in->multiline = multiline;
    if (!interactive) return in;
    in->el = el_init(program, stdin, stdout, stderr);
    in->hist = history_init();
    if (!in->el || !in->hist) {
        line_input_close(in);
        return NULL;
    }
    history(in->hist, &in->ev, H_SETSIZE, 1000);
    history(in->hist, &in->ev, H_SETUNIQUE, 1);
    el_set(in->el, EL_CLIENTDATA, in);
    el_set(in->el, EL_PROMPT, prompt);
    el_set(in->el, EL_EDITOR, "emacs");
    el_set(in->el, EL_SIGNAL, 1);
    el_set(in->el, EL_HIST, history, in->hist);
    el_source(in->el, NULL); /* ~/.editrc, as every libedit program */
    return in;
}

void line_input_close(line_input *in) {
    if (!in) return;
    if (in->el) el_end(in->el);
    if (in->hist) history_end(in->hist);
    free(in->line);
    free(in->msg);
    free(in);
}

void line_input_remember(line_input *in, const char *message) {
    if (in->hist && message[0]) history(in->hist, &in->ev, H_ENTER, message);
}

/* One line into in->line..: its text without the newline; -1 end of input, -2 interrupted,
 * -3 error. */
static long long read_line(line_input *in, const char **text) {
    if (in->interactive) {
        int count = 0;
        errno = 0;
        const char *s = el_gets(in->el, &count);
        if (!s || count <= 0) {
            if (count < 0 && errno == EINTR) return -2;
            return count < 0 ? -3 : -1;
        }
        size_t n = (size_t)count;
        while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r')) n--;
        *text = s;
        return (long long)n;
    }
    errno = 0;
    ssize_t n = getline(&in->line, &in->line_cap, stdin);
    if (n < 0) {
        if (errno == EINTR) {
            clearerr(stdin);
            return -2;
        }
        return ferror(stdin) ? -3 : -1;
    }
    while (n > 0 && (in->line[n - 1] == '\n' || in->line[n - 1] == '\r')) n--;
    *text = in->line;
    return n;
}

static bool append(line_input *in, const char *s, size_t n) {
    if (in->len + n + 1 > in->cap) {
        size_t cap = (in->len + n + 1) * 2;
        char *g = realloc(in->msg, cap);
        if (!g) return false;
        in->msg = g, in->cap = cap;
    }
    memcpy(in->msg + in->len, s, n);
    in->len += n;
    in->msg[in->len] = '\0';
    return true;
}

static bool blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t') return false;
    return true;
}

line_result line_input_read(line_input *in, const char **out, size_t *out_len) {
    for (;;) {
        in->len = 0;
        in->continued = false;
        if (!append(in, "", 0)) return LINE_ERROR;
        bool more = true;
        while (more) {
            const char *text = NULL;
            long long n = read_line(in, &text);
            if (n == -2) return LINE_INTERRUPTED;
            if (n == -3) return LINE_ERROR;
            if (n == -1) { /* the end of input ends a message being continued */
                if (in->len == 0) return LINE_END;
                break;
            }
            size_t k = (size_t)n;
            bool backslash = k > 0 && text[k - 1] == '\\';
            if (in->multiline && !backslash && k == 0) break; /* the empty line ends it */
            if (in->continued && !append(in, "\n", 1)) return LINE_ERROR;
            if (!append(in, text, backslash ? k - 1 : k)) return LINE_ERROR;
            more = backslash || in->multiline;
            in->continued = true;
        }
        if (blank(in->msg, in->len)) continue;
        *out = in->msg;
        *out_len = in->len;
        return LINE_MESSAGE;
    }
}
