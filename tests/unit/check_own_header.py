#!/usr/bin/env python3
"""Fails when a source file defines a non-static function or variable its own header does not
declare.

A service that lives inside the file that uses it is how files come to call each other in
loops: the helper gets a declaration in some other header (or none) and its users reach back
into a file that calls them. Requiring every external definition to be declared by the file's
own header keeps each file's surface where its users look for it.

"Its own header", for MODULE/dir/STEM.c (or .cc):
  1. MODULE/dir/STEM.h, when it exists: then only that header (a file with its own header
     publishes nothing elsewhere);
  2. otherwise the header named by a prefix of the stem cut at an underscore (hf_bpe.c ->
     hf.h, spm_detok.c -> spm.h, kv_pool.c -> kv.h if there were one), and the module's
     shared headers: its interface MODULE/MODULE.h and its internal header
     (MODULE/*_internal.h, or the one named in INTERNAL below);
  3. include/pagellm.h for the modules that implement the public API (PUBLIC_API below),
     under either rule: the API is declared there and nowhere else.
A name declared by a header the file's own header includes does not count: the declaration
must be in the own header itself. main() is exempt (an executable's entry). .cu files are
checked by kernels/ conventions of their own (launchers declared in cuda_backend.h) and are
not parsed here.
"""
import os
import re
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
MODULES = ["util", "gguf", "tokenizer", "template", "reply", "kvcache", "scheduler", "model", "kernels",
           "engine", "cli", "bench", "server", "tools"]
# a module's internal header, where its name does not end in _internal.h
INTERNAL = {
    "server": ["server/srv.h"],
    "template": ["template/tmpl_internal.h"],
    "gguf": ["gguf/gguf.h"],
    "bench": ["bench/bench_internal.h", "bench/serve.h"],  # serve.h: `bench serve`'s client
    "tools": ["tools/commands.h"],
    "kernels": ["kernels/backend.h"],
}
PUBLIC_API = {"engine", "util", "tokenizer", "template", "reply"}

MACRO_LINE = re.compile(r"^[A-Z][A-Z0-9_]*\(.*\)\s*$")
# macros that expand to "static ..."
STATIC_MACROS = re.compile(r"\bPL_INLINE\b")
KEYWORDS = {"if", "while", "for", "switch", "return", "sizeof", "defined"}


def strip(src):
    """Comments, string and character literals and preprocessor lines removed."""
    src = re.sub(r"\\\n", " ", src)
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(" " if "\n" not in src[i:j] else "\n" * src[i:j].count("\n"))
            i = j
        elif src.startswith("//", i):
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            out.append('""' if c == '"' else "0")
            i = j + 1
        else:
            out.append(c)
            i += 1
    lines = "".join(out).split("\n")
    # preprocessor lines, and macro invocations on a line of their own (a macro that defines
    # functions, such as kernels/cpu's per-ISA wrappers: what it expands to is not checked)
    return "\n".join("" if ln.lstrip().startswith("#") or MACRO_LINE.match(ln) else ln
                     for ln in lines)


def top_level(text):
    """Yields (declarator text, terminator) for each statement at brace depth 0; the bodies of
    extern "C" blocks count as depth 0."""
    depth, buf, transparent = 0, [], []
    i = 0
    while i < len(text):
        c = text[i]
        if c == "{":
            head = "".join(buf).strip()
            if depth == 0 and re.fullmatch(r'extern\s*""', head):
                transparent.append(depth)
                buf = []
                i += 1
                continue
            if depth == 0 or (transparent and depth == transparent[-1]):
                yield head, "{"
                buf = []
            depth += 1
        elif c == "}":
            if transparent and depth == transparent[-1]:
                transparent.pop()
                buf = []
            else:
                depth -= 1
                if depth == 0:
                    buf = []  # after a body: "}" of a function or "};" of an initializer
        elif c == ";" and depth == 0:
            yield "".join(buf).strip(), ";"
            buf = []
        elif depth == 0:
            buf.append(c)
        i += 1


def drop_attributes(d):
    while True:
        m = re.search(r"__attribute__\s*\(", d)
        if not m:
            return d
        depth, j = 0, m.end() - 1
        while j < len(d):
            depth += {"(": 1, ")": -1}.get(d[j], 0)
            j += 1
            if depth == 0:
                break
        d = d[:m.start()] + " " + d[j:]


def name_before_paren(decl):
    """The function name of a declarator such as 'const char *pl_x(int a)'."""
    depth = 0
    for m in re.finditer(r"[()]", decl):
        if m.group() == "(":
            if depth == 0:
                head = decl[:m.start()].rstrip()
                w = re.search(r"([A-Za-z_]\w*)\s*$", head)
                if w and w.group(1) not in KEYWORDS and not head.rstrip().endswith(("(", "*)")):
                    return w.group(1)
            depth += 1
        else:
            depth -= 1
    return None


def definitions(path):
    """(name, kind) of each non-static function and variable the file defines."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        text = strip(fh.read())
    for decl, term in top_level(text):
        d = re.sub(r"\s+", " ", decl)
        d = STATIC_MACROS.sub("static", drop_attributes(d)).strip()
        d = re.sub(r'^extern ""\s*', "", d)  # C++: extern "C" int f(...) { ... }
        if not d or re.match(r"(static|typedef|extern|struct|union|enum)\b", d) and \
                not re.match(r"(struct|union|enum) \w+ [*\w]", d):
            continue
        if re.search(r"\bstatic\b", d.split("(")[0]):
            continue
        if term == "{" and "(" in d and "=" not in d.split("(")[0]:
            name = name_before_paren(d)
            if name:
                yield name, "function"
        elif "(" not in d.split("=")[0] and not re.match(r"(struct|union|enum) \w+$", d):
            lhs = d.split("=")[0].strip()
            w = re.search(r"([A-Za-z_]\w*)\s*(\[[^\]]*\]\s*)*$", lhs)
            if w and " " in lhs:
                yield w.group(1), "variable"


def declared(header):
    with open(header, encoding="utf-8", errors="replace") as fh:
        text = strip(fh.read())
    return set(re.findall(r"[A-Za-z_]\w*", text))


def own_headers(rel):
    mod = rel.split("/", 1)[0]
    d, f = os.path.split(rel)
    stem = os.path.splitext(f)[0]
    same = f"{d}/{stem}.h"
    out = []
    if os.path.exists(os.path.join(ROOT, same)):
        out.append(same)
    else:
        sub = os.path.basename(d)
        if d != mod and os.path.exists(os.path.join(ROOT, f"{d}/{sub}.h")):
            out.append(f"{d}/{sub}.h")  # a module's sub-folder: kernels/cpu/cpu.h
        parts = stem.split("_")
        for k in range(len(parts) - 1, 0, -1):
            h = f"{d}/{'_'.join(parts[:k])}.h"
            if os.path.exists(os.path.join(ROOT, h)):
                out.append(h)
        shared = [f"{mod}/{mod}.h"] + INTERNAL.get(mod, [])
        for hd in sorted(os.listdir(os.path.join(ROOT, mod))):
            if hd.endswith("_internal.h"):
                shared.append(f"{mod}/{hd}")
        out += [h for h in shared if os.path.exists(os.path.join(ROOT, h)) and h not in out]
    if mod in PUBLIC_API:
        out.append("include/pagellm.h")
    return out


def main():
    bad, checked = [], 0
    cache = {}
    for mod in MODULES:
        for dirpath, _, files in os.walk(os.path.join(ROOT, mod)):
            for f in sorted(files):
                if not f.endswith((".c", ".cc")):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, ROOT).replace(os.sep, "/")
                checked += 1
                heads = own_headers(rel)
                names = set()
                for h in heads:
                    if h not in cache:
                        cache[h] = declared(os.path.join(ROOT, h))
                    names |= cache[h]
                for name, kind in definitions(path):
                    if name == "main" or name in names:
                        continue
                    bad.append(f"{rel}: defines the {kind} {name}, which its own header "
                               f"({', '.join(heads) or 'none: add ' + rel[:-2] + '.h'}) does not "
                               f"declare: make it static or declare it there")
    for b in bad:
        print(b)
    print(f"checked {checked} files, {len(bad)} definitions outside their own header")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
