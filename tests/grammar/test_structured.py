#!/usr/bin/env python3
"""Constrained outputs end to end: `pagellm generate` with --json-schema / --grammar /
--regex / --choice (flags and prompts-file lines) on random-weight models with the real
tokenizers of ../shared/models (Llama 2 SentencePiece, Llama 3 and Qwen3 byte-level BPE), and
every output checked by an independent checker: JSON.parse + ajv (tests/oracle, npm) for
schemas, a JavaScript RegExp for regexes, Python's own comparison for choices, and Lark's
Earley parser (Debian python3-lark) for GBNF grammars. Random weights pick arbitrary allowed
tokens, so termination rests on the grammar: every schema here bounds its output, and each
sample must finish with "stop". Cases also run with n > 1, a tiny KV pool (preemption and
recompute) and a small token budget (chunked prefill).

usage: test_structured.py PAGELLM CASE. Exit 77 (skip) without PAGELLM_TEST_MODELS, node or
the npm packages."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ORACLE = os.path.join(HERE, "..", "oracle")

SCHEMAS = [
    {"type": "object",
     "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 12},
                    "age": {"type": "integer", "minimum": 0, "maximum": 150},
                    "email": {"type": "string", "format": "email"},
                    "tags": {"type": "array", "items": {"enum": ["red", "green", 7, None]},
                             "minItems": 1, "maxItems": 3},
                    "score": {"type": "number", "minimum": -5, "maximum": 5},
                    "ok": {"type": "boolean"}},
     "required": ["name", "age", "tags"], "additionalProperties": False},
    {"$defs": {"node": {"type": "object",
                        "properties": {"v": {"type": "integer", "exclusiveMinimum": -3,
                                             "maximum": 999},
                                       "kids": {"type": "array",
                                                "items": {"$ref": "#/$defs/node"},
                                                "maxItems": 2}},
                        "required": ["v"], "additionalProperties": False}},
     "anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]},
    {"type": "array", "prefixItems": [{"type": "string", "format": "date"},
                                      {"type": "string", "format": "uuid"},
                                      {"type": "string", "pattern": "^[a-z]{2,4}-\\d{3}$"}],
     "items": False, "minItems": 3},
    {"type": "object", "properties": {"k": {"const": "v"}},
     "additionalProperties": {"type": "string", "maxLength": 4}, "required": ["k"],
     "maxProperties": None} if False else
    {"type": "object", "properties": {"k": {"const": "v"}, "when": {"type": "string",
                                                                   "format": "date-time"},
                                      "ip": {"type": "string", "format": "ipv4"}},
     "required": ["k", "when", "ip"]},
    {"oneOf": [{"type": "string", "maxLength": 6}, {"type": "integer", "maximum": -1}]},
]

GRAMMAR = r'''# sums of small numbers, a line each, ending with "="
root ::= line{1,3} "="
line ::= term ( [-+*] term ){0,3} "\n"
term ::= [0-9]{1,3} | "(" term ")"
'''
REGEX = r"[A-Z][a-z]{1,6}( [a-z]{1,6}){0,3}\.|\d{1,4}-\d{2}"
CHOICES = ["positive", "negative", "neutral, or mixed", "ünïcødé ✓"]


def skip(why):
    print(f"SKIP: {why}")
    sys.exit(77)


def oracle_ready():
    if not shutil.which("node"):
        return "node is not installed"
    if os.path.isdir(os.path.join(ORACLE, "node_modules", "ajv-formats")):
        return None
    if not shutil.which("npm"):
        return "npm is not installed"
    p = subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=ORACLE,
                       capture_output=True, text=True)
    if p.returncode != 0 or not os.path.isdir(os.path.join(ORACLE, "node_modules", "ajv")):
        return f"npm ci in tests/oracle failed:\n{p.stderr[-2000:]}"
    return None


def run(pagellm, args, lines):
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for l in lines:
            f.write(json.dumps(l) + "\n")
        path = f.name
    try:
        p = subprocess.run([pagellm, "generate", "--prompts", path, "--json"] + args,
                           capture_output=True, text=True, timeout=600)
    finally:
        os.unlink(path)
    if p.returncode != 0:
        raise SystemExit(f"pagellm failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return [json.loads(l) for l in p.stdout.splitlines() if l.strip()]


def check_with_node(cases):
    inp = "".join(json.dumps(c) + "\n" for c in cases)
    p = subprocess.run(["node", os.path.join(ORACLE, "validate_json.mjs")], input=inp,
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise SystemExit(f"validator failed:\n{p.stderr[-3000:]}")
    return p.stdout.splitlines()


def gbnf_to_lark(gbnf):
    """GBNF (the subset the test grammar uses) as a Lark grammar: the independent parser."""
    out = []
    for line in gbnf.splitlines():
        line = line.split("#")[0].rstrip()
        if not line:
            continue
        name, body = line.split("::=", 1)
        body = body.replace("{1,3}", "~1..3").replace("{0,3}", "~0..3")
        out.append(f"{name.strip()}: {body.strip()}")
    return "\n".join(out)


LARK_CHECK = r"""
import json, sys
import lark
g, texts = json.load(sys.stdin)
parser = lark.Lark(g, start="root", parser="earley", lexer="dynamic")
bad = []
for t in texts:
    try:
        parser.parse(t)
    except lark.exceptions.LarkError as e:
        bad.append([t, str(e)[:200]])
print(json.dumps(bad))
"""


def python_with_lark():
    """The Debian package installs Lark for the system interpreter, which may not be the one
    running this script (pyenv)."""
    for py in (sys.executable, "/usr/bin/python3"):
        if py and os.path.exists(py) and subprocess.run(
                [py, "-c", "import lark"], capture_output=True).returncode == 0:
            return py
    return None


def check_grammar(texts):
    py = python_with_lark()
    if not py:
        skip("python3-lark is not installed (the independent GBNF parser)")
    g = gbnf_to_lark(GRAMMAR).replace("[-+*]", '/[-+*]/').replace("[0-9]~1..3", "/[0-9]{1,3}/")
    p = subprocess.run([py, "-c", LARK_CHECK], input=json.dumps([g, texts]),
                       capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise SystemExit(f"the Lark check failed:\n{p.stderr[-3000:]}")
    return [tuple(x) for x in json.loads(p.stdout)]


def main():
    pagellm, case = sys.argv[1], sys.argv[2]
    models = os.environ.get("PAGELLM_TEST_MODELS")
    if not models:
        skip("PAGELLM_TEST_MODELS is unset (the tokenizers of ../shared/models)")
    why = oracle_ready()
    if why:
        skip(why)
    tok = {"llama2": os.path.join(models, "tokenizer.model"),
           "llama3": os.path.join(models, "llama3"),
           "qwen3": os.path.join(models, "qwen3")}
    base = ["-m", "dummy:tiny", "--weight-seed", "7", "--max-tokens", "480", "--temperature",
            "1", "--threads", "1"]
    extra = []
    if case.endswith("_pressure"):
        # a tiny KV pool (preemption, recompute) and a small token budget (chunked prefill)
        extra = ["--max-num-blocks", "24", "--block-size", "16", "--max-total-tokens", "32",
                 "--max-batch-size", "8", "--max-model-len", "384"]
        base[base.index("480")] = "300"
    name = case.split("_")[0]
    if name not in tok:
        raise SystemExit(f"unknown case {case}")
    args = base + ["--tokenizer", tok[name]] + extra
    prompt = "Tell me about it: "
    lines = []
    for i, s in enumerate(SCHEMAS):
        if case.endswith("_pressure") and i in (1,):
            continue
        lines.append({"prompt": prompt + str(i), "json_schema": s, "seed": 100 + i, "n": 3})
    lines.append({"prompt": prompt, "regex": REGEX, "seed": 5, "n": 2})
    lines.append({"prompt": prompt, "choice": CHOICES, "seed": 6, "n": 4})
    lines.append({"prompt": prompt, "grammar": GRAMMAR, "seed": 8, "n": 2})
    recs = run(pagellm, args, lines)
    by_line = {}
    for r in recs:
        by_line.setdefault(r["line"], []).append(r)
    to_check, meta, grammar_texts = [], [], []
    for ln, l in enumerate(lines, 1):
        rs = by_line.get(ln, [])
        if len(rs) != l["n"]:
            raise SystemExit(f"line {ln}: {len(rs)} completions, wanted {l['n']}")
        for r in rs:
            if r["finish_reason"] != "stop":
                raise SystemExit(f"line {ln} sample {r['sample']}: finish_reason "
                                 f"{r['finish_reason']} (text {r['text'][:300]!r})")
            t = r["text"]
            if "json_schema" in l:
                to_check.append({"kind": "json", "schema": l["json_schema"], "text": t})
                meta.append((ln, t))
            elif "regex" in l:
                to_check.append({"kind": "regex", "regex": l["regex"], "text": t})
                meta.append((ln, t))
            elif "choice" in l:
                if t not in l["choice"]:
                    raise SystemExit(f"line {ln}: {t!r} is not one of the choices")
            else:
                grammar_texts.append(t)
    if case.endswith("_pressure") and not any(r["preemptions"] > 0 for r in recs):
        raise SystemExit("the pressure case preempted nothing: the pool is too large")
    verdicts = check_with_node(to_check)
    bad = [(m, v) for m, v in zip(meta, verdicts) if v != "ok"]
    for (ln, t), v in bad:
        print(f"line {ln}: {v}\n  text: {t[:400]!r}")
    gbad = check_grammar(grammar_texts)
    for t, e in gbad:
        print(f"grammar: {e}\n  text: {t!r}")
    n = len(to_check) + len(grammar_texts)
    print(f"{n - len(bad) - len(gbad)} of {n} outputs valid ({case})")
    return 1 if bad or gbad or len(verdicts) != len(to_check) else 0


if __name__ == "__main__":
    sys.exit(main())
