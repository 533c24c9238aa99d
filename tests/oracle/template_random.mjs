// Seeded random templates and conversations for the differential fixtures
// (gen_template_fixtures.mjs): expressions over a fixed set of variables, whitespace-control
// soups (the lexer's trim/lstrip rules), numeric and statement programs (number printing,
// loops with break/continue, macros, call and filter blocks, scoping), and random
// conversations for each chat template. `**` is left out: the oracle's powers are V8's, not
// correctly rounded (template.h), and non-ASCII text never meets a case change (refused).
let state = 1;
function seed(s) { state = s; }
function rnd() { state = (state * 1103515245 + 12345) & 0x7fffffff; return state / 0x7fffffff; }
function pick(a) { return a[Math.floor(rnd() * a.length)]; }

// ---- expressions ----
export const exprVars = {
  s: "Hello, World a,b", n: 5, f: 2.5, l: [3, "b", 1.5, null, true],
  d: { role: "user", b: 2, "1": "one" }, e: [], z: 0,
  m: [{ role: "user", content: " hi " }, { role: "assistant", content: "yo", tool_calls: [{ function: { name: "f", arguments: { a: 1 } } }] }],
};
const atoms = ["0", "1", "-3", "7", "10", "2.5", "1.0", "-0.5", "123456789012", "''", "'a'", "'Abc'", "' x '",
  "'\u00e9'", "'\ud83d\ude00'", "'1'", "' 12 '", "'a,b,,c'", "'<think>x</think>y'", "true", "false", "none", "True",
  "s", "n", "f", "l", "d", "e", "u", "m", "m[0]", "m[-1]", "z", "[1, 'a']", "{'k': 1}", "(1, 2)", "[]", "{}", "ns", "ns.a"];
const binops = ["+", "-", "*", "/", "//", "%", "~", "==", "!=", "<", ">", "<=", ">=", "and", "or", "in", "not in"];
const filters = ["trim", "tojson", "length", "join", "first", "last", "list", "string", "int", "float", "abs", "reverse",
  "sort", "unique", "items", "safe", "indent", "default('D')", "default('D', true)", "join(', ')", "tojson(indent=2)",
  "tojson(ensure_ascii=true)", "selectattr('role', 'equalto', 'user')", "rejectattr('role')", "map(attribute='role')",
  "sort(reverse=true)", "sort(attribute='role')", "int(5)", "float(1.5)", "replace('a', 'b')", "indent(2, true)",
  "dictsort", "bool", "keys", "values"];
const tests = ["defined", "undefined", "none", "string", "number", "integer", "mapping", "iterable", "sequence",
  "boolean", "true", "false", "odd", "even", "callable"];
const methods = [".strip()", ".lstrip()", ".rstrip('x')", ".title()", ".startswith('a')", ".endswith(('c', 'x'))",
  ".split()", ".split(',')", ".split(',', 1)", ".replace('a', 'Z')", ".get('role')", ".get('zz', 3)", ".items()",
  ".keys()", ".values()", ".length"];
const members = [".role", ".content", "[0]", "[-1]", "[1:]", "[::-1]", "[:2]", "[1]", "['role']", ".k", "[5]", "[-2:]"];
function expr(depth) {
  if (depth <= 0) return pick(atoms);
  const r = rnd();
  if (r < 0.25) return `${expr(depth - 1)} ${pick(binops)} ${expr(depth - 1)}`;
  if (r < 0.4) return `(${expr(depth - 1)})|${pick(filters)}`;
  if (r < 0.5) return `(${expr(depth - 1)}) is ${rnd() < 0.3 ? "not " : ""}${pick(tests)}`;
  if (r < 0.6) return `(${expr(depth - 1)})${pick(methods)}`;
  if (r < 0.7) return `(${expr(depth - 1)})${pick(members)}`;
  if (r < 0.75) return `not ${expr(depth - 1)}`;
  if (r < 0.8) return `-(${expr(depth - 1)})`;
  if (r < 0.85) return `${expr(depth - 1)} if ${expr(depth - 1)} else ${expr(depth - 1)}`;
  if (r < 0.9) return `[${expr(depth - 1)}, ${expr(depth - 1)}]`;
  return pick(atoms);
}
function exprStmt(depth) {
  const r = rnd();
  if (r < 0.5 || depth <= 0) return `{{ ${expr(rnd() < 0.5 ? 1 : 2)} }}|`;
  if (r < 0.65) return `{% for x in ${pick(["l", "m", "d", "e", "range(3)", "[3,1,2]", "s.split()", "d.items()"])} ${rnd() < 0.3 ? "if " + expr(1) + " " : ""}%}${exprStmt(depth - 1)}{{ x }}{{ loop.index0 }}{{ loop.last }}{% if ${expr(1)} %}{% ${pick(["break", "continue"])} %}{% endif %}{% else %}E{% endfor %}`;
  if (r < 0.8) return `{% if ${expr(2)} %}${exprStmt(depth - 1)}{% elif ${expr(1)} %}B{% else %}${exprStmt(depth - 1)}{% endif %}`;
  if (r < 0.9) return `{% set v = ${expr(2)} %}{{ v }}|{% set ns.a = ${expr(1)} %}{{ ns.a }}|`;
  return `{% macro mm(p, q=${expr(1)}) %}[{{ p }}{{ q }}]{% endmacro %}{{ mm(${expr(1)}) }}{{ mm(1, q=${expr(1)}) }}`;
}
export function expressions(s, n) {
  seed(s);
  return Array.from({ length: n }, () => "{% set ns = namespace(a=1) %}" + exprStmt(1));
}

// ---- whitespace control ----
export const spaceVars = { x: "X", y: "  Y  " };
const ws = ["", " ", "  ", "\n", "\n\n", "\t", " \n ", "\r\n", "\u00a0", "\u2028", "\n  ", "x", "a b", "{", "}", "%", "#", "-", "\u3000"];
function w() { let s = ""; const k = Math.floor(rnd() * 4); for (let i = 0; i < k; i++) s += pick(ws); return s; }
function dash() { return rnd() < 0.35 ? "-" : ""; }
function tag() {
  const r = rnd();
  if (r < 0.25) return `{{${dash()}${pick([" x ", " 'a\\n' ", " y|trim ", "x", " ' %}\n' ", " {'a': {'b': 1}}['a'] ", " '}}' "])}${dash()}}}`;
  if (r < 0.4) return `{#${dash()}${pick([" c ", "", "-", " # ", " } "])}${dash()}#}`;
  if (r < 0.6) return `{%${dash()} if ${pick(["x", "not x", "y"])} ${dash()}%}${w()}${body(1)}${w()}{%${dash()} else ${dash()}%}${w()}B${w()}{%${dash()} endif ${dash()}%}`;
  if (r < 0.75) return `{%${dash()} for i in [1, 2] ${dash()}%}${w()}{{${dash()} i ${dash()}}}${w()}{%${dash()} endfor ${dash()}%}`;
  if (r < 0.85) return `{%${dash()} set z = ${pick(["1", "'q'", "x"])} ${dash()}%}`;
  if (r < 0.92) return `{%${dash()} generation ${dash()}%}`;
  return `{%${dash()} set b ${dash()}%}${w()}q${w()}{%${dash()} endset ${dash()}%}{{ b }}`;
}
function body(d) { let s = ""; const k = 1 + Math.floor(rnd() * 3); for (let i = 0; i < k; i++) s += w() + (d > 0 ? tag() : "T") + w(); return s; }
export function whitespace(s, n) {
  seed(s);
  return Array.from({ length: n }, () => body(2) + (rnd() < 0.3 ? "\n" : ""));
}

// ---- numbers and statements ----
export const programVars = { n: 7, f: 2.5, big: 1e300, tiny: 5e-324 };
function num() {
  const r = rnd();
  if (r < 0.3) return String(Math.floor(rnd() * 2000) - 1000);
  if (r < 0.6) return (rnd() * 1000 - 500).toFixed(Math.floor(rnd() * 6) + 1);
  if (r < 0.8) return pick(["0.1", "0.2", "3", "7", "1", "1000000", "99999999999999999999", "0.000001", "1.5", "2", "10", "0.3"]);
  return pick(["n", "f", "big", "tiny"]);
}
function nexpr(d) {
  if (d <= 0) return num();
  return `(${nexpr(d - 1)} ${pick(["+", "-", "*", "/", "//", "%"])} ${nexpr(d - 1)})`;
}
function program(d) {
  const r = rnd();
  if (r < 0.3 || d <= 0) return `{{ ${nexpr(2)} }}|{{ (${nexpr(1)})|tojson }}|{{ ${nexpr(1)} ~ '' }}|{{ (${nexpr(1)})|string }}|{{ (${nexpr(1)})|int }}|{{ (${nexpr(1)})|abs }}|`;
  if (r < 0.45) return `{% for i in range(${pick(["3", "0", "5, 0, -2", "1, 4"])}) %}{% if i == ${pick(["0", "1", "2"])} %}{% ${pick(["break", "continue"])} %}{% endif %}[{{ loop.index }}{{ loop.previtem }}{{ loop.nextitem }}{{ i }}]${program(d - 1)}{% endfor %}`;
  if (r < 0.6) return `{% macro m(a, b=${num()}) %}<{{ a ~ b }}{% for q in [1, 2] %}{% if a == 1 %}{% break %}{% endif %}{{ q }}{% endfor %}>{% endmacro %}{{ m(${pick(["1", "2", "'s'"])}) }}{% for k in [1, 2, 3] %}{{ m(k) }}{% endfor %}`;
  if (r < 0.7) return `{% set ns.c = ns.c + 1 %}{% set loc = ns.c %}{% for i in [1] %}{% set loc = 99 %}{% set ns.c = ns.c * 2 %}{% endfor %}{{ loc }}{{ ns.c }}`;
  if (r < 0.8) return `{% macro w(t) %}({{ caller(t) }}){% endmacro %}{% call(v) w(${num()}) %}{{ v * 2 }}${program(d - 1)}{% endcall %}`;
  if (r < 0.9) return `{% filter ${pick(["upper", "trim", "length", "title", "indent(2)", "replace('1', 'one')"])} %} a1 {{ ${nexpr(1)} }} {% endfilter %}`;
  return `{% set blk %}{{ ${nexpr(1)} }}{% endset %}{{ blk|length }}{{ blk }}`;
}
export function programs(s, n) {
  seed(s);
  return Array.from({ length: n }, () => "{% set ns = namespace(c=0) %}" + program(2) + program(1));
}

// ---- conversations ----
const pieces = ["hello", " ", "\n", "\t", "  ", "<think>", "</think>", "\n\n", "\u00e9", "\u65e5\u672c", "\ud83d\ude00",
  "{{ x }}", "<tool_response>", "</tool_response>", "\u00a0", "\r\n", "[INST]", "\"q\"", "\\", "a,b"];
function text() { let s = ""; const k = Math.floor(rnd() * 6); for (let i = 0; i < k; i++) s += pick(pieces); return s; }
function message() {
  const r = rnd();
  if (r < 0.35) return { role: "user", content: text() };
  if (r < 0.6) return { role: "assistant", content: text() };
  if (r < 0.7) return { role: "system", content: text() };
  if (r < 0.8) return { role: "assistant", content: rnd() < 0.8 ? text() : null, tool_calls: [{ id: pick(["abcDEF123", "x"]), type: "function", function: { name: pick(["f", "get_weather"]), arguments: rnd() < 0.5 ? { a: text(), n: Math.floor(rnd() * 10) } : "{\"a\": 1}" } }] };
  if (r < 0.9) return { role: "tool", tool_call_id: "abcDEF123", content: rnd() < 0.8 ? text() : { k: text() } };
  return { role: pick(["ipython", "narrator"]), content: text() };
}
const randomTools = [{ type: "function", function: { name: "get_weather", description: "W \u00e9", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];
export function conversations(s, n) {
  seed(s);
  return Array.from({ length: n }, (_, i) => {
    const messages = Array.from({ length: Math.floor(rnd() * 6) }, message);
    const c = { name: `random_${i}`, messages, add_generation_prompt: rnd() < 0.5, extra: { date_string: "26 Jul 2024" } };
    if (rnd() < 0.4) c.tools = randomTools;
    if (rnd() < 0.2) c.extra.enable_thinking = rnd() < 0.5;
    return c;
  });
}
