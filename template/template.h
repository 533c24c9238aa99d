/*
 * template/template.h - chat templates: a sandboxed interpreter for the subset of Jinja that
 * Hugging Face chat templates use.
 *
 * A model's tokenizer_config.json carries a Jinja template (`chat_template`) that turns a list
 * of messages into the prompt text. This module parses such a template once and renders it
 * with variables given as a jansson object. It knows no model and no tokenizer.
 *
 * The reference is @huggingface/jinja 0.5.11, the interpreter transformers.js uses (pinned in
 * tests/oracle/package.json): output is byte-identical to its Template(src).render(vars),
 * including where it differs from Python's Jinja (see "Semantics" below). Templates of the
 * Llama 3/3.1/3.2, Qwen2.5/Qwen3, Mistral Instruct v0.3 and TinyLlama/Zephyr families are
 * checked against it byte for byte (tests/template).
 *
 * Safety. A template is data from a downloaded file and may be hostile:
 * - A construct outside the supported subset fails pl_tmpl_parse with PL_ERR_UNSUPPORTED naming
 *   the construct and its line, so an unsupported template is refused when it is loaded rather
 *   than rendering wrong text later. Syntax errors are PL_ERR_FORMAT with line:column.
 * - Rendering runs under limits (pl_tmpl_limits): a step budget (no endless loop), a nesting
 *   depth (macros, recursion; the C stack is bounded), an output and string size cap, a memory
 *   cap and a cap on range() and list sizes. Parsing bounds the nesting of the source too.
 *   Past a limit the render fails with PL_ERR_TOO_LONG naming the limit.
 * - There is no I/O of any kind (no include, import or extends) and no attribute access beyond
 *   the keys of data objects and the listed methods.
 *
 * Supported constructs
 * - Statements: {{ expr }}, {# comments #}, if/elif/else, for (with else, a loop filter
 *   `for x in xs if cond`, tuple unpacking `for k, v in d.items()`, iterating an object's keys),
 *   break, continue, set (`set x = ...`, `set a, b = ...`, `set ns.attr = ...`, block set
 *   `{% set x %}...{% endset %}`), macro (parameters with defaults, called with positional and
 *   keyword arguments), call blocks with caller() (and caller parameters), filter blocks.
 * - Whitespace control: {%- -%} {{- -}} {#- -#}, and the environment of the chat templates
 *   (trim_blocks and lstrip_blocks as @huggingface/jinja applies them, a single trailing newline
 *   of the source dropped, transformers' {% generation %} tags removed).
 * - Expressions: strings ('..' or "..", escapes \n \t \r \b \f \v \' \" \\ \xHH \uHHHH,
 *   adjacent literals joined), integers, floats, lists, dicts, tuples; true/false/none (also
 *   True/False/None); + - * / // % ** ~, unary - +; == != < > <= >=; and, or, not; in, not in;
 *   `is [not] test`; `a if c else b` and `a if c`; attribute and subscript access; slices
 *   [start:stop:step] with negative indices and steps; calls with positional, keyword, *args
 *   and **kwargs arguments.
 * - Filters: abs, bool, capitalize, count, d, default (value, boolean), dictsort, first, float,
 *   get, indent (width, first, blank), int, items, join (separator), keys, last, length, list,
 *   lower, map (attribute=, default=), reject, rejectattr, replace, reverse, safe, select,
 *   selectattr, sort (reverse, case_sensitive, attribute), string, title, tojson (indent,
 *   ensure_ascii, separators), trim, unique, upper, values.
 * - Tests: boolean, callable, defined, eq, equalto, even, false, float, integer, iterable,
 *   lower, mapping, none, number, odd, sequence, string, true, undefined, upper.
 * - Methods: strings: startswith, endswith (a string or a tuple of strings), split (sep,
 *   maxsplit), strip, lstrip, rstrip, replace (old, new, count), upper, lower, title,
 *   capitalize, and .length; objects: get (key, default), items, keys, values, dictsort.
 * - Globals: range (1-3 arguments), namespace (an object or pairs, and keyword arguments),
 *   raise_exception(msg), strftime_now(format) (%Y %m %d %b %B %H %M %%, local time).
 * - The loop object: index, index0, revindex, revindex0, first, last, length, previtem,
 *   nextitem, and cycle(...).
 *
 * Refused at parse time (PL_ERR_UNSUPPORTED): the statements include, import, from, extends,
 * block, raw, with, do, autoescape, trans; any filter, test, method or global function not
 * listed above (for example round, batch, format, wordcount, list.append, dict.update,
 * str.format, lipsum, cycler); tests with arguments (`is divisibleby(3)`); macros that read
 * varargs or kwargs. Refused while rendering (PL_ERR_UNSUPPORTED): changing the case of a
 * letter outside ASCII (upper, lower, capitalize, case-insensitive sorting), printing a
 * function, tojson(sort_keys=true).
 *
 * Semantics (those of @huggingface/jinja, where it differs from Python's Jinja): none and
 * undefined print as nothing; booleans print as true/false; integers and floats are doubles,
 * floats that are whole print with ".0" (1.0) but tojson and `~` print them as JavaScript does
 * (1); `==` is JavaScript's loose equality (objects and lists compare by identity, 1 == "1");
 * `%` keeps the sign of the dividend; |int floors; strip/lstrip/rstrip ignore their argument and
 * strip white space; title only upper-cases ASCII letters after a non-word character; a string's
 * length counts UTF-16 code units; none/undefined operands make arithmetic fail; tojson writes
 * Python json.dumps separators (", " and ": ", or "," with an indent); variables set inside a
 * for loop stay inside it (namespace() objects carry values out); macros see the variables of
 * their caller. Where the oracle itself fails (an unknown filter on a type, a bad argument)
 * rendering fails with PL_ERR_INVALID_ARGUMENT and a message naming the line.
 * Deliberate differences, all where the oracle fails or misbehaves: the filters d, count,
 * select, reject, the float test, loop.cycle and the argument-less `default` are Jinja's
 * (the oracle has none of them); `[]|first` is undefined (the oracle throws when printing it);
 * a lone UTF-16 surrogate (from a "\uD800" escape or from indexing into an emoji) becomes
 * U+FFFD at once rather than at output. Known difference: `a ** b` is the C library's pow,
 * correctly rounded, where V8's is not, so a power that is not exactly representable (2 ** 0.5,
 * 10 ** -5, 7 ** 22) may differ from the oracle in its last digits; exact results (integer
 * powers that fit in a double, such as 10 ** 9) agree.
 *
 * Thread safety: a parsed template is immutable; any number of threads may render it at once.
 */
#ifndef PL_TEMPLATE_H
#define PL_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "pagellm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct pl_tmpl pl_tmpl;

/* What one render may use. A limit that is hit fails the render with PL_ERR_TOO_LONG. A field
 * left at 0 takes its default. */
typedef struct pl_tmpl_limits {
    uint64_t max_steps;      /* work budget: nodes evaluated, loop iterations, bytes scanned / 16
                                (default 20,000,000: well under a second) */
    size_t max_output_bytes; /* the rendered text, and any one string made (default 16 MiB) */
    size_t max_memory_bytes; /* everything the render allocates (default 256 MiB) */
    int max_depth;           /* nested evaluation: expressions, blocks, calls (default 400) */
    int max_calls;           /* nested macro/caller calls (default 64) */
    size_t max_items;        /* elements of one range() or list (default 1,000,000) */
} pl_tmpl_limits;

void pl_tmpl_limits_default(pl_tmpl_limits *out);

/* The largest template source accepted (PL_ERR_TOO_LONG beyond). */
#define PL_TMPL_MAX_SOURCE ((size_t)4 << 20)
/* How deeply blocks and expressions may nest in the source (PL_ERR_TOO_LONG beyond). */
#define PL_TMPL_MAX_NESTING 100

/* Parses src[0..len) (UTF-8; NUL bytes allowed as text). On success *out is a template to
 * free with pl_tmpl_free. Errors, each with a message naming the line (and column):
 * PL_ERR_FORMAT (a syntax error, invalid UTF-8), PL_ERR_UNSUPPORTED (a construct outside the
 * subset above, named), PL_ERR_TOO_LONG (source too big or nested too deeply),
 * PL_ERR_INVALID_ARGUMENT (NULL arguments), PL_ERR_OUT_OF_MEMORY. On failure *out is untouched
 * and nothing is left to free. */
pl_status pl_tmpl_parse(const char *src, size_t len, pl_tmpl **out);
void pl_tmpl_free(pl_tmpl *t); /* NULL is a no-op */

/* Renders t with the members of the object `vars` as variables (for chat templates: messages,
 * add_generation_prompt, bos_token, eos_token, tools and any extra such as enable_thinking or
 * date_string). vars may be NULL (no variables). JSON numbers become integers when whole (as
 * JSON.parse makes them), object keys keep their order except that keys that are array
 * indices ("0", "1", ...) come first in numeric order, as JavaScript objects order them.
 * *out_text is NUL-terminated, allocated with pl_malloc and owned by the caller (pl_free);
 * *out_len (when out_len is not NULL) is its length; the text may contain NUL bytes only if
 * the template or the variables do.
 * Errors: PL_ERR_INVALID_ARGUMENT (the template called raise_exception: the message is the
 * template's; or an operation the oracle also refuses, such as a filter on the wrong type;
 * or vars not an object, or a variable named like a global: namespace, range, true, ...),
 * PL_ERR_UNSUPPORTED (see above), PL_ERR_TOO_LONG (a limit), PL_ERR_OUT_OF_MEMORY. Messages
 * name the template line. On failure the outputs are untouched. */
pl_status pl_tmpl_render(const pl_tmpl *t, const json_t *vars, char **out_text, size_t *out_len);
/* The same under explicit limits (NULL: the defaults; see pl_tmpl_limits). */
pl_status pl_tmpl_render_limited(const pl_tmpl *t, const json_t *vars, const pl_tmpl_limits *limits,
                                 char **out_text, size_t *out_len);

/* ---- chat helpers -------------------------------------------------------------------------
 * What transformers.js' apply_chat_template does around the interpreter. */

/* The template text of a parsed tokenizer_config.json: `chat_template` when it is a string;
 * when it is a list of {"name", "template"}: the one called `name` if name is not NULL, else
 * "tool_use" when has_tools and there is one, else "default". *out_src points into
 * tokenizer_config (valid while it lives). PL_ERR_NOT_FOUND (no chat_template, or no template
 * of that name), PL_ERR_FORMAT (chat_template of the wrong shape). Note: Llama 3's
 * tokenizer_config.json holds an integer beyond 64 bits (model_max_length); load it with
 * jansson's JSON_DECODE_INT_AS_REAL, as JSON.parse reads numbers. */
pl_status pl_tmpl_config_source(const json_t *tokenizer_config, const char *name, bool has_tools,
                                const char **out_src, size_t *out_len);

/* Builds the variables for a chat: messages, add_generation_prompt, tools (when not NULL),
 * then the special tokens of tokenizer_config (bos_token, eos_token, unk_token, sep_token,
 * pad_token, cls_token, mask_token, each when it is a non-empty string or an object with a
 * non-empty "content"; tokenizer_config may be NULL), then the members of `extra` (an object
 * or NULL; they override). messages must be an array. *out_vars is a new reference
 * (json_decref). PL_ERR_INVALID_ARGUMENT (a wrong type, named), PL_ERR_OUT_OF_MEMORY. */
pl_status pl_tmpl_chat_vars(const json_t *tokenizer_config, const json_t *messages,
                            const json_t *tools, bool add_generation_prompt, const json_t *extra,
                            json_t **out_vars);

/* Renders a chat given as JSON text: messages_json (an array of messages), tools_json (an
 * array of tool definitions, or NULL), extra_json (an object of extra variables, or NULL).
 * Invalid JSON is PL_ERR_INVALID_ARGUMENT naming the argument, line and column; otherwise as
 * pl_tmpl_chat_vars then pl_tmpl_render. */
pl_status pl_tmpl_render_chat(const pl_tmpl *t, const json_t *tokenizer_config,
                              const char *messages_json, const char *tools_json,
                              bool add_generation_prompt, const char *extra_json, char **out_text,
                              size_t *out_len);

#ifdef __cplusplus
}
#endif
#endif
