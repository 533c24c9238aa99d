/*
 * reply/parser.c - a chat reply's text into reasoning, content and tool calls, as it streams
 * (pl_reply_parser_*) or whole (pl_reply_parse, which runs the same reader over the whole
 * text).
 *
 * The reader keeps the text it has not decided about yet (`in`) and walks a few states:
 *
 *   START      the reply's first bytes: does the reasoning open ("<think>")?
 *   REASONING  until "</think>"
 *   CONTENT    until the syntax's tool-call marker ("<tool_call>", "[TOOL_CALLS]"), or at the
 *              start of the reply a call written without one (Llama 3's bare JSON, Mistral's
 *              array from a vocabulary that drops its control tokens)
 *   CALL       one call object {"name", "arguments" | "parameters"} at the front of `in`,
 *              read again (reply/scan.c) each time more text comes until it ends
 *   TAIL       what follows a call: "</tool_call>", ";" before Llama 3's next call, "," or
 *              "]" in Mistral's array
 *   MNAME/MARGS  Mistral's newer [TOOL_CALLS]name[ARGS]{...}
 *
 * Text that might be the start of a marker is held back until the next bytes decide it; a
 * part's trailing whitespace is held too, and dropped when the part ends at a marker (the
 * whitespace between parts is not content). Streaming, a call is announced (id and name) as
 * soon as its name is complete and its arguments are sent as they arrive; whole, a call counts
 * only once it ended and its arguments parse, else its text stays in the content.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pagellm.h"
#include "reply/reply_internal.h"
#include "reply/scan.h"
#include "util/alloc.h"
#include "util/buf.h"
#include "util/status.h"

typedef enum { FMT_NONE, FMT_HERMES, FMT_LLAMA3, FMT_MISTRAL } fmt_kind;
typedef enum { RSN_NONE, RSN_QWEN3, RSN_R1 } rsn_kind;
typedef enum { S_START, S_REASONING, S_CONTENT, S_CALL, S_TAIL, S_MNAME, S_MARGS } state;

static const char *const TOOL_PARSERS[] = {"hermes", "llama3_json", "mistral"};
static const char *const REASONING_PARSERS[] = {"qwen3", "deepseek_r1"};

#define THINK_OPEN "<think>"
#define THINK_CLOSE "</think>"
#define HERMES_OPEN "<tool_call>"
#define HERMES_CLOSE "</tool_call>"
#define MISTRAL_MARK "[TOOL_CALLS]"
#define MISTRAL_ARGS "[ARGS]"
#define PYTHON_TAG "<|python_tag|>"

typedef struct call_info {
    char id[40];
    char *name;
} call_info;

struct pl_reply_parser {
    fmt_kind fmt;
    rsn_kind rsn;
    bool open_reasoning;  /* the reply starts inside the reasoning */
    bool whole;           /* pl_reply_parse: a call counts only once it parsed */
    uint64_t seed;
    bool ended;
    pl_buf in;            /* text not decided yet */
    state st;
    /* the part being written and its held-back trailing whitespace */
    pl_buf ws;
    pl_reply_part ws_part;
    bool skip_lead;       /* drop the part's leading whitespace */
    bool start_checked;   /* the start of the content was looked at for a bare call */
    bool content_seen;    /* content came out */
    /* the call being read */
    const char *marker;   /* the text that opened it ("" when none), content if it fails */
    bool in_array;        /* Mistral's [ ... ] */
    bool announced;       /* streaming: id and name sent */
    size_t args_sent;     /* streaming: bytes of the arguments sent */
    char *mname;          /* Mistral's name[ARGS]: the name */
    call_info *calls;     /* (n_calls) announced calls */
    size_t n_calls, cap_calls;
    /* this feed's output: deltas whose text is an offset into out until the feed ends */
    pl_buf out;
    pl_reply_delta *deltas;
    size_t n_deltas, cap_deltas;
};

/* ---- names ------------------------------------------------------------------------------- */

static int find_name(const char *name, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (!strcmp(name, names[i])) return i;
    return -1;
}

static pl_status unknown(const char *what, const char *name, const char *const *names, int n) {
    char list[128] = "";
    for (int i = 0; i < n; i++) {
        strncat(list, i ? ", " : "", sizeof list - strlen(list) - 1);
        strncat(list, names[i], sizeof list - strlen(list) - 1);
    }
    return pl_fail(PL_ERR_NOT_FOUND, "%s \"%.64s\": unknown (known: %s)", what, name, list);
}

int pl_reply_tool_syntax(const char *name) {
    int i = find_name(name, TOOL_PARSERS, 3);
    if (i < 0) unknown("tool-call parser", name, TOOL_PARSERS, 3);
    return i;
}

int pl_reply_reasoning_syntax(const char *name) {
    int i = find_name(name, REASONING_PARSERS, 2);
    if (i < 0) unknown("reasoning parser", name, REASONING_PARSERS, 2);
    return i;
}

const char *pl_reply_tool_parser_for(const char *t) {
    if (!t) return NULL;
    if (strstr(t, MISTRAL_MARK)) return "mistral";
    if (strstr(t, HERMES_OPEN)) return "hermes";
    if (strstr(t, PYTHON_TAG) || (strstr(t, "\"parameters\"") && strstr(t, "ipython")))
        return "llama3_json";
    return NULL;
}

bool pl_reply_prompt_opens(const char *prompt) {
    if (!prompt) return false;
    const char *open = NULL;
    for (const char *s = strstr(prompt, THINK_OPEN); s; s = strstr(s + 1, THINK_OPEN)) open = s;
    return open && !strstr(open, THINK_CLOSE);
}

/* ---- output -------------------------------------------------------------------------------- */

static pl_status oom(void) { return pl_fail(PL_ERR_OUT_OF_MEMORY, "reply parser"); }

/* Appends a delta (merged into the one before when it continues it). */
static pl_status emit(pl_reply_parser *p, pl_reply_part part, const char *s, size_t n, int tool,
                      const char *id, const char *name) {
    if (n == 0 && !id) return PL_OK;
    pl_reply_delta *last = p->n_deltas ? &p->deltas[p->n_deltas - 1] : NULL;
    size_t at = p->out.n;
    if (n && pl_buf_put(&p->out, s, n, "reply parser") != PL_OK) return oom();
    if (last && !id && last->part == part && (part != PL_REPLY_TOOL_CALL || last->tool_index == tool)) {
        last->len += n;
        return PL_OK;
    }
    if (p->n_deltas == p->cap_deltas) {
        size_t cap = p->cap_deltas ? 2 * p->cap_deltas : 8;
        pl_reply_delta *g = pl_reallocarray(p->deltas, cap, sizeof *g);
        if (!g) return oom();
        p->deltas = g;
        p->cap_deltas = cap;
    }
    p->deltas[p->n_deltas++] = (pl_reply_delta){.part = part, .text = (const char *)(uintptr_t)at,
                                                .len = n, .tool_index = tool, .tool_id = id,
                                                .tool_name = name};
    return PL_OK;
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* The first occurrence of word in s[0..n), or NULL. */
static const char *find(const char *s, size_t n, const char *word) {
    size_t w = strlen(word);
    for (size_t i = 0; i + w <= n; i++)
        if (s[i] == word[0] && !memcmp(s + i, word, w)) return s + i;
    return NULL;
}

/* Content or reasoning text: leading whitespace dropped at a part's start when skip_lead,
 * trailing whitespace held until more text of the part follows. */
static pl_status put_text(pl_reply_parser *p, pl_reply_part part, const char *s, size_t n) {
    if (p->ws_part != part) { /* a new part: what the old one held is dropped */
        p->ws.n = 0;
        p->ws_part = part;
    }
    if (p->skip_lead) {
        while (n && is_ws(*s)) s++, n--;
        if (n == 0) return PL_OK;
        p->skip_lead = false;
    }
    size_t body = n;
    while (body && is_ws(s[body - 1])) body--;
    if (body) {
        PL_TRY(emit(p, part, p->ws.p, p->ws.n, -1, NULL, NULL));
        p->ws.n = 0;
        PL_TRY(emit(p, part, s, body, -1, NULL, NULL));
        if (part == PL_REPLY_CONTENT) p->content_seen = true;
    }
    if (n > body && pl_buf_put(&p->ws, s + body, n - body, "reply parser") != PL_OK) return oom();
    return PL_OK;
}

/* The held whitespace comes out (keep) or is dropped; the next text starts a part. */
static pl_status end_part(pl_reply_parser *p, bool keep) {
    if (keep && p->ws.n) PL_TRY(emit(p, p->ws_part, p->ws.p, p->ws.n, -1, NULL, NULL));
    p->ws.n = 0;
    return PL_OK;
}

static void consume(pl_reply_parser *p, size_t n) {
    memmove(p->in.p, p->in.p + n, p->in.n - n);
    p->in.n -= n;
}

/* ---- calls ---------------------------------------------------------------------------------- */

static const char B62[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static void make_id(const pl_reply_parser *p, size_t index, char *out) {
    uint64_t h = mix(p->seed ^ mix(index + 1));
    size_t n = p->fmt == FMT_MISTRAL ? 9 : 24, k = 0;
    if (p->fmt != FMT_MISTRAL) k = (size_t)sprintf(out, "call_");
    for (size_t i = 0; i < n; i++) {
        if (i % 10 == 0) h = mix(h + i);
        out[k++] = B62[h % 62];
        h /= 62;
    }
    out[k] = '\0';
}

/* Starts call n_calls: its id and name (name[0..n), copied) go out with the first delta. */
static pl_status announce(pl_reply_parser *p, const char *name, size_t n) {
    if (p->n_calls == p->cap_calls) {
        size_t cap = p->cap_calls ? 2 * p->cap_calls : 4;
        call_info *g = pl_reallocarray(p->calls, cap, sizeof *g);
        if (!g) return oom();
        p->calls = g;
        p->cap_calls = cap;
    }
    call_info *c = &p->calls[p->n_calls];
    c->name = pl_malloc(n + 1);
    if (!c->name) return oom();
    memcpy(c->name, name, n);
    c->name[n] = '\0';
    make_id(p, p->n_calls, c->id);
    p->n_calls++;
    p->announced = true;
    p->args_sent = 0;
    PL_TRY(end_part(p, false)); /* whitespace before a call is not content */
    return emit(p, PL_REPLY_TOOL_CALL, "", 0, (int)p->n_calls - 1, c->id, c->name);
}

static pl_status args_piece(pl_reply_parser *p, const char *s, size_t n) {
    return emit(p, PL_REPLY_TOOL_CALL, s, n, (int)p->n_calls - 1, NULL, NULL);
}

/* The JSON string s[0..n) (quotes included) decoded; NULL when it is not one. pl_free. */
static char *json_string_text(const char *s, size_t n, size_t *out_len) {
    json_t *v = json_loadb(s, n, JSON_DECODE_ANY, NULL);
    char *out = NULL;
    if (json_is_string(v) && (out = pl_malloc(json_string_length(v) + 1))) {
        memcpy(out, json_string_value(v), json_string_length(v) + 1);
        *out_len = json_string_length(v);
    }
    json_decref(v);
    return out;
}

/* The arguments as they are sent once complete: an object's text as written; a string that
 * holds JSON (some models write the arguments as text) its content. NULL: not valid. */
static char *final_args(const char *s, size_t n, size_t *out_len) {
    json_t *v = json_loadb(s, n, JSON_DECODE_ANY, NULL);
    char *out = NULL;
    if (json_is_object(v)) {
        out = pl_malloc(n + 1);
        if (out) {
            memcpy(out, s, n);
            out[n] = '\0';
            *out_len = n;
        }
    } else if (json_is_string(v)) {
        json_t *inner = json_loads(json_string_value(v), 0, NULL);
        if (json_is_object(inner)) out = json_string_text(s, n, out_len);
        json_decref(inner);
    }
    json_decref(v);
    return out;
}

/* The call failed to parse before it was announced: its marker (and, whole, its text) is
 * content after all, read on from the front of `in`. */
static pl_status call_failed(pl_reply_parser *p) {
    p->st = S_CONTENT;
    p->start_checked = true;
    p->in_array = false;
    if (p->marker[0]) PL_TRY(put_text(p, PL_REPLY_CONTENT, p->marker, strlen(p->marker)));
    p->marker = "";
    return PL_OK;
}

/* A call ended (announced and streamed, or whole and valid): what follows it comes next. */
static void call_ended(pl_reply_parser *p, size_t consumed) {
    consume(p, consumed);
    p->announced = false;
    p->st = S_TAIL;
}

/* CALL: the object at the front of `in`. Returns whether it made progress. */
static pl_status read_call(pl_reply_parser *p, bool end, bool *progress) {
    pl_scan_call c;
    pl_scan_call_object(p->in.p, p->in.n, &c);
    *progress = false;
    if (!p->whole) {
        if (c.has_name && !p->announced) {
            size_t n;
            char *name = json_string_text(p->in.p + c.name_at, c.name_end - c.name_at, &n);
            if (!name || n == 0) {
                pl_free(name);
                return call_failed(p), *progress = true, PL_OK;
            }
            pl_status s = announce(p, name, n);
            pl_free(name);
            PL_TRY(s);
            *progress = true;
        }
        if (p->announced && c.has_args && c.args_first == '{' && c.args_end > c.args_at + p->args_sent) {
            PL_TRY(args_piece(p, p->in.p + c.args_at + p->args_sent,
                              c.args_end - c.args_at - p->args_sent));
            p->args_sent = c.args_end - c.args_at;
            *progress = true;
        }
    }
    if (c.status == PL_SCAN_MORE && !end) return PL_OK;
    *progress = true;
    if (c.status == PL_SCAN_DONE && c.has_name) {
        size_t n = 0;
        char *args = NULL;
        if (!c.has_args) args = pl_strdup("{}"), n = 2;
        else args = final_args(p->in.p + c.args_at, c.args_end - c.args_at, &n);
        if (!p->whole) { /* announced: what was not streamed yet goes now */
            if (args && c.has_args && c.args_first != '{') PL_TRY(args_piece(p, args, n));
            else if (!c.has_args || (!args && p->args_sent == 0)) PL_TRY(args_piece(p, "{}", 2));
            pl_free(args);
            call_ended(p, c.end);
            return PL_OK;
        }
        size_t nn;
        char *name = args ? json_string_text(p->in.p + c.name_at, c.name_end - c.name_at, &nn)
                          : NULL;
        pl_status s = PL_OK;
        if (name && nn > 0) {
            s = announce(p, name, nn);
            if (s == PL_OK) s = args_piece(p, args, n);
            if (s == PL_OK) call_ended(p, c.end);
        }
        bool ok = name && nn > 0;
        pl_free(name);
        pl_free(args);
        PL_TRY(s);
        if (ok) return PL_OK;
        return call_failed(p);
    }
    /* not a call, broken, or cut short */
    if (p->announced) { /* streaming: what was sent stays; the call ends here */
        if (c.status == PL_SCAN_MORE && p->args_sent == 0) PL_TRY(args_piece(p, "{}", 2));
        size_t upto = c.has_args ? c.args_at + p->args_sent : c.name_end;
        if (c.status == PL_SCAN_MORE) upto = p->in.n;
        consume(p, upto);
        p->announced = false;
        p->st = S_CONTENT;
        p->skip_lead = true;
        return PL_OK;
    }
    return call_failed(p);
}

/* MARGS: Mistral's name[ARGS]{...}: the arguments object at the front of `in`. */
static pl_status read_margs(pl_reply_parser *p, bool end, bool *progress) {
    size_t at = 0, pos;
    pl_scan_ws(p->in.p, p->in.n, &at);
    pos = at;
    pl_scan_status st = at < p->in.n && p->in.p[at] == '{' ? pl_scan_value(p->in.p, p->in.n, &pos)
                        : at < p->in.n                      ? PL_SCAN_BAD
                                                            : PL_SCAN_MORE;
    *progress = false;
    if (!p->whole && p->announced && st != PL_SCAN_BAD && pos > at + p->args_sent) {
        PL_TRY(args_piece(p, p->in.p + at + p->args_sent, pos - at - p->args_sent));
        p->args_sent = pos - at;
        *progress = true;
    }
    if (st == PL_SCAN_MORE && !end) return PL_OK;
    *progress = true;
    if (st == PL_SCAN_DONE) {
        size_t n;
        char *args = final_args(p->in.p + at, pos - at, &n);
        pl_status s = PL_OK;
        if (p->whole && args) {
            s = announce(p, p->mname, strlen(p->mname));
            if (s == PL_OK) s = args_piece(p, args, n);
        }
        bool ok = args || !p->whole;
        pl_free(args);
        pl_free(p->mname);
        p->mname = NULL;
        PL_TRY(s);
        if (ok) {
            consume(p, pos);
            p->announced = false;
            p->st = S_CONTENT;
            p->skip_lead = true;
            return PL_OK;
        }
        return call_failed(p);
    }
    pl_free(p->mname);
    p->mname = NULL;
    if (p->announced) {
        if (p->args_sent == 0) PL_TRY(args_piece(p, "{}", 2));
        consume(p, st == PL_SCAN_MORE ? p->in.n : at + p->args_sent);
        p->announced = false;
        p->st = S_CONTENT;
        p->skip_lead = true;
        return PL_OK;
    }
    return call_failed(p);
}

/* MNAME: the name before [ARGS]. */
static pl_status read_mname(pl_reply_parser *p, bool end, bool *progress) {
    const char *s = p->in.p;
    size_t n = p->in.n;
    const char *a = find(s, n, MISTRAL_ARGS);
    size_t limit = a ? (size_t)(a - s) : n - pl_scan_partial_suffix(s, n, MISTRAL_ARGS);
    bool bad = limit > 256;
    for (size_t i = 0; i < limit && !bad; i++)
        bad = !(s[i] == '_' || s[i] == '-' || s[i] == '.' || (s[i] >= '0' && s[i] <= '9') ||
                (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z'));
    *progress = false;
    if (!a && !bad && !end) return PL_OK;
    *progress = true;
    if (bad || !a || limit == 0) return call_failed(p);
    if (p->whole) {
        p->mname = pl_malloc(limit + 1);
        if (!p->mname) return oom();
        memcpy(p->mname, s, limit);
        p->mname[limit] = '\0';
    } else {
        PL_TRY(announce(p, s, limit));
    }
    consume(p, limit + strlen(MISTRAL_ARGS));
    p->st = S_MARGS;
    return PL_OK;
}

/* Starts reading a call after its marker (already consumed). The whitespace before the marker
 * stays held: dropped when the call is announced, content again when it fails. */
static pl_status begin_call(pl_reply_parser *p, const char *marker, state st) {
    p->marker = marker;
    p->st = st;
    p->announced = false;
    return PL_OK;
}

/* ---- the states ----------------------------------------------------------------------------- */

/* Text up to a marker: the bytes before it are `part`; returns where the marker starts (n when
 * it is not there), having put out what cannot be the marker's beginning. */
static pl_status until_marker(pl_reply_parser *p, pl_reply_part part, const char *marker,
                              bool end, bool *found) {
    const char *s = p->in.p;
    size_t n = p->in.n, ml = strlen(marker);
    const char *at = find(s, n, marker);
    *found = at != NULL;
    size_t upto = at ? (size_t)(at - s) : end ? n : n - pl_scan_partial_suffix(s, n, marker);
    PL_TRY(put_text(p, part, s, upto));
    consume(p, upto + (at ? ml : 0));
    return PL_OK;
}

/* CONTENT at the very start of the reply (only whitespace before): a bare call? *decided:
 * false when more text must come first. */
static pl_status content_start(pl_reply_parser *p, bool end, bool *decided) {
    const char *s = p->in.p;
    size_t n = p->in.n, at = 0;
    pl_scan_ws(s, n, &at);
    *decided = true;
    if (at == n) { /* only whitespace so far */
        *decided = end;
        if (end) p->start_checked = true;
        return PL_OK;
    }
    if (p->fmt == FMT_LLAMA3) {
        size_t tl = strlen(PYTHON_TAG), k = n - at < tl ? n - at : tl;
        if (!memcmp(s + at, PYTHON_TAG, k)) {
            if (k < tl && !end) return *decided = false, PL_OK;
            if (k == tl) {
                consume(p, at + tl);
                p->start_checked = true;
                return begin_call(p, PYTHON_TAG, S_CALL);
            }
        }
        if (s[at] == '{') {
            pl_scan_call c;
            pl_scan_call_object(s + at, n - at, &c);
            if (c.has_name) {
                consume(p, at);
                p->start_checked = true;
                return begin_call(p, "", S_CALL);
            }
            if (c.status == PL_SCAN_MORE && !end) return *decided = false, PL_OK;
        }
    } else if (p->fmt == FMT_MISTRAL && s[at] == '[') {
        size_t b = at + 1;
        pl_scan_ws(s, n, &b);
        if (b == n && !end) return *decided = false, PL_OK;
        if (b < n && s[b] == '{') {
            consume(p, b);
            p->start_checked = true;
            p->in_array = true;
            return begin_call(p, "[", S_CALL);
        }
    }
    p->start_checked = true;
    return PL_OK;
}

static pl_status read_content(pl_reply_parser *p, bool end, bool *progress) {
    *progress = true;
    if (!p->start_checked && !p->content_seen &&
        (p->fmt == FMT_LLAMA3 || p->fmt == FMT_MISTRAL)) {
        bool decided;
        PL_TRY(content_start(p, end, &decided));
        if (!decided) return *progress = false, PL_OK;
        if (p->st != S_CONTENT) return PL_OK;
    }
    p->start_checked = true;
    bool found = false;
    size_t before = p->in.n;
    if (p->fmt == FMT_HERMES) {
        PL_TRY(until_marker(p, PL_REPLY_CONTENT, HERMES_OPEN, end, &found));
        if (found) return begin_call(p, HERMES_OPEN, S_CALL);
    } else if (p->fmt == FMT_MISTRAL) {
        /* the marker stays in front until what follows it says which form the calls take */
        size_t ml = strlen(MISTRAL_MARK);
        const char *m = find(p->in.p, p->in.n, MISTRAL_MARK);
        if (!m) {
            PL_TRY(until_marker(p, PL_REPLY_CONTENT, MISTRAL_MARK, end, &found));
        } else {
            size_t k = (size_t)(m - p->in.p), at = ml;
            PL_TRY(put_text(p, PL_REPLY_CONTENT, p->in.p, k));
            consume(p, k);
            pl_scan_ws(p->in.p, p->in.n, &at);
            if (at == p->in.n && !end) return *progress = k > 0, PL_OK;
            if (at < p->in.n && p->in.p[at] == '[') {
                consume(p, at + 1);
                p->in_array = true;
                return begin_call(p, MISTRAL_MARK, S_CALL);
            }
            consume(p, at);
            return begin_call(p, MISTRAL_MARK, S_MNAME);
        }
    } else {
        PL_TRY(put_text(p, PL_REPLY_CONTENT, p->in.p, p->in.n));
        consume(p, p->in.n);
    }
    *progress = p->in.n != before;
    return PL_OK;
}

static pl_status read_tail(pl_reply_parser *p, bool end, bool *progress) {
    size_t at = 0;
    pl_scan_ws(p->in.p, p->in.n, &at);
    *progress = true;
    if (at == p->in.n && !end) return *progress = false, PL_OK;
    const char *s = p->in.p + at;
    size_t n = p->in.n - at;
    p->st = S_CONTENT;
    p->skip_lead = true;
    p->marker = "";
    if (p->fmt == FMT_HERMES) {
        size_t cl = strlen(HERMES_CLOSE), k = n < cl ? n : cl;
        if (k && !memcmp(s, HERMES_CLOSE, k)) {
            if (k < cl && !end) return p->st = S_TAIL, *progress = false, PL_OK;
            if (k == cl) consume(p, at + cl);
        }
    } else if (p->fmt == FMT_LLAMA3 && n && s[0] == ';') {
        consume(p, at + 1);
        p->st = S_CALL;
    } else if (p->fmt == FMT_MISTRAL && p->in_array && n) {
        if (s[0] == ',') {
            consume(p, at + 1);
            p->st = S_CALL;
        } else if (s[0] == ']') {
            consume(p, at + 1);
            p->in_array = false;
        }
    }
    if (p->st == S_CONTENT) p->in_array = false;
    return PL_OK;
}

static pl_status read_start(pl_reply_parser *p, bool end, bool *progress) {
    size_t at = 0, tl = strlen(THINK_OPEN);
    pl_scan_ws(p->in.p, p->in.n, &at);
    size_t k = p->in.n - at < tl ? p->in.n - at : tl;
    *progress = true;
    if (!memcmp(p->in.p + at, THINK_OPEN, k) && (k < tl || at == p->in.n) && !end)
        return *progress = false, PL_OK; /* "<think>" may be coming */
    if (k == tl && !memcmp(p->in.p + at, THINK_OPEN, tl)) {
        consume(p, at + tl);
        p->st = S_REASONING;
    } else if (p->open_reasoning) {
        p->st = S_REASONING;
    } else {
        p->st = S_CONTENT;
        return PL_OK;
    }
    p->skip_lead = true;
    return PL_OK;
}

static pl_status read_reasoning(pl_reply_parser *p, bool end, bool *progress) {
    bool found;
    size_t before = p->in.n;
    PL_TRY(until_marker(p, PL_REPLY_REASONING, THINK_CLOSE, end, &found));
    *progress = found || p->in.n != before;
    if (found) {
        PL_TRY(end_part(p, false));
        p->st = S_CONTENT;
        p->skip_lead = true;
    }
    return PL_OK;
}

/* Reads as far as the text decides. */
static pl_status run(pl_reply_parser *p, bool end) {
    for (;;) {
        bool progress = false;
        switch (p->st) {
        case S_START: PL_TRY(read_start(p, end, &progress)); break;
        case S_REASONING: PL_TRY(read_reasoning(p, end, &progress)); break;
        case S_CONTENT: PL_TRY(read_content(p, end, &progress)); break;
        case S_CALL: PL_TRY(read_call(p, end, &progress)); break;
        case S_TAIL: PL_TRY(read_tail(p, end, &progress)); break;
        case S_MNAME: PL_TRY(read_mname(p, end, &progress)); break;
        case S_MARGS: PL_TRY(read_margs(p, end, &progress)); break;
        }
        if (!progress) break;
        if (end && p->in.n == 0 && (p->st == S_CONTENT || p->st == S_REASONING || p->st == S_TAIL))
            break;
    }
    if (end) {
        /* a plain answer keeps its text exactly; after calls, trailing whitespace is not
         * content */
        PL_TRY(end_part(p, p->ws_part == PL_REPLY_CONTENT && p->n_calls == 0));
    }
    return PL_OK;
}

/* ---- the public calls ------------------------------------------------------------------------ */

static pl_status create(const pl_reply_options *opt, bool whole, pl_reply_parser **out) {
    if (!opt || !out) return pl_fail(PL_ERR_INVALID_ARGUMENT, "reply parser: NULL argument");
    if (opt->struct_size != sizeof(pl_reply_options))
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "reply options: struct_size %zu is not %zu "
                       "(use pl_reply_options_default)", opt->struct_size,
                       sizeof(pl_reply_options));
    int tool = -1, rsn = -1;
    if (opt->tool_parser && (tool = pl_reply_tool_syntax(opt->tool_parser)) < 0)
        return PL_ERR_NOT_FOUND;
    if (opt->reasoning_parser && (rsn = pl_reply_reasoning_syntax(opt->reasoning_parser)) < 0)
        return PL_ERR_NOT_FOUND;
    pl_reply_parser *p = pl_calloc(1, sizeof *p);
    if (!p) return oom();
    p->fmt = tool < 0 ? FMT_NONE : (fmt_kind)(FMT_HERMES + tool);
    p->rsn = rsn < 0 ? RSN_NONE : (rsn_kind)(RSN_QWEN3 + rsn);
    p->open_reasoning = p->rsn == RSN_R1 || (p->rsn != RSN_NONE && pl_reply_prompt_opens(opt->prompt));
    p->whole = whole;
    p->seed = opt->id_seed;
    p->st = p->rsn == RSN_NONE ? S_CONTENT : S_START;
    p->marker = "";
    p->ws_part = PL_REPLY_CONTENT;
    /* in.p is never NULL, so the readers' "in.p + at" is defined on an empty reply too */
    if (pl_buf_reserve(&p->in, 64, "reply") != PL_OK) {
        pl_free(p);
        return oom();
    }
    *out = p;
    return PL_OK;
}

pl_status pl_reply_parser_create(const pl_reply_options *opt, pl_reply_parser **out) {
    return create(opt, false, out);
}

void pl_reply_parser_free(pl_reply_parser *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n_calls; i++) pl_free(p->calls[i].name);
    pl_free(p->calls);
    pl_free(p->mname);
    pl_buf_free(&p->in);
    pl_buf_free(&p->ws);
    pl_buf_free(&p->out);
    pl_free(p->deltas);
    pl_free(p);
}

pl_status pl_reply_parser_feed(pl_reply_parser *p, const char *text, size_t len, bool end,
                               const pl_reply_delta **out_deltas, size_t *out_n) {
    if (!p || (!text && len) || !out_deltas || !out_n)
        return pl_fail(PL_ERR_INVALID_ARGUMENT, "reply parser feed: NULL argument");
    if (p->ended) return pl_fail(PL_ERR_INVALID_ARGUMENT, "reply parser: fed after its end");
    p->n_deltas = 0;
    p->out.n = 0;
    if (len && pl_buf_put(&p->in, text, len, "reply parser") != PL_OK) return oom();
    p->ended = end;
    PL_TRY(run(p, end));
    for (size_t i = 0; i < p->n_deltas; i++)
        p->deltas[i].text = p->out.p ? p->out.p + (uintptr_t)p->deltas[i].text : "";
    *out_deltas = p->deltas;
    *out_n = p->n_deltas;
    return PL_OK;
}

size_t pl_reply_parser_tool_calls(const pl_reply_parser *p) { return p ? p->n_calls : 0; }

/* ---- whole replies ---------------------------------------------------------------------------- */

void pl_reply_free(pl_reply *r) {
    if (!r) return;
    for (size_t i = 0; i < r->n_tool_calls; i++) {
        pl_free(r->tool_calls[i].id);
        pl_free(r->tool_calls[i].name);
        pl_free(r->tool_calls[i].arguments);
    }
    pl_free(r->tool_calls);
    pl_free(r->content);
    pl_free(r->reasoning_content);
    pl_free(r);
}

static char *take(pl_buf *b) {
    if (b->n == 0) return NULL;
    if (pl_buf_put(b, "", 1, "reply") != PL_OK) return NULL;
    char *s = b->p;
    *b = (pl_buf){0};
    return s;
}

pl_status pl_reply_parse(const char *text, size_t len, const pl_reply_options *opt,
                         pl_reply **out) {
    if ((!text && len) || !out) return pl_fail(PL_ERR_INVALID_ARGUMENT, "reply parse: NULL argument");
    pl_reply_parser *p = NULL;
    PL_TRY(create(opt, true, &p));
    const pl_reply_delta *d;
    size_t n;
    pl_status s = pl_reply_parser_feed(p, text ? text : "", len, true, &d, &n);
    pl_reply *r = s == PL_OK ? pl_calloc(1, sizeof *r) : NULL;
    if (s == PL_OK && !r) s = oom();
    pl_buf content = {0}, reasoning = {0}, *args = NULL;
    if (s == PL_OK && p->n_calls) {
        r->tool_calls = pl_calloc(p->n_calls, sizeof *r->tool_calls);
        args = pl_calloc(p->n_calls, sizeof *args);
        if (!r->tool_calls || !args) s = oom();
        else r->n_tool_calls = p->n_calls;
    }
    for (size_t i = 0; s == PL_OK && i < n; i++) {
        pl_buf *b = d[i].part == PL_REPLY_CONTENT     ? &content
                    : d[i].part == PL_REPLY_REASONING ? &reasoning
                                                      : &args[d[i].tool_index];
        s = pl_buf_put(b, d[i].text, d[i].len, "reply");
    }
    for (size_t i = 0; s == PL_OK && i < r->n_tool_calls; i++) {
        pl_tool_call *c = &r->tool_calls[i];
        c->id = pl_strdup(p->calls[i].id);
        c->name = pl_strdup(p->calls[i].name);
        c->arguments = take(&args[i]);
        if (!c->id || !c->name || !c->arguments) s = oom();
    }
    if (s == PL_OK) {
        r->content = take(&content);
        r->reasoning_content = take(&reasoning);
        /* a reply with no calls always has content, if only "" */
        if (!r->content && !r->n_tool_calls && !(r->content = pl_strdup(""))) s = oom();
    }
    for (size_t i = 0; args && i < p->n_calls; i++) pl_buf_free(&args[i]);
    pl_free(args);
    pl_buf_free(&content);
    pl_buf_free(&reasoning);
    pl_reply_parser_free(p);
    if (s != PL_OK) {
        pl_reply_free(r);
        return s == PL_ERR_OUT_OF_MEMORY ? oom() : s;
    }
    *out = r;
    return PL_OK;
}
