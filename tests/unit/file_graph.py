#!/usr/bin/env python3
"""The call graph between the library's source files, and the loops in it.

usage: file_graph.py BUILD_DIR [--dot] [--edges]

A file calls another when its object file uses a symbol the other's defines (nm on the
objects compile_commands.json lists; static functions and inline helpers do not show, which
is right: they are the file's own). A loop is a strongly connected set of two or more files.
Two loops are deliberate and allowed (ALLOWED): an interpreter's own recursion (the template
evaluator and the filters, whose arguments are expressions it evaluates) and the server's
hand-off of dead requests between req.c and the watcher; each is explained in a comment at
the top of its files. Any other loop fails (exit 1), so a service that
moves back into one of its users is caught.

--edges prints every edge "a.c -> b.c: symbol, ..."; --dot prints the graph for graphviz.
Only what the build compiled is seen: the .cu files only in a build with CUDA.
Header includes are checked for loops too (a header that includes itself through others).
"""
import json
import os
import re
import subprocess
import sys
from collections import defaultdict

# Each allowed loop: the exact set of files it may contain (a loop that grows fails too).
ALLOWED = [
    {"template/eval.c", "template/filters.c"},
    {"server/req.c", "server/watch.c"},
]
LIBRARY = ("util/", "gguf/", "tokenizer/", "template/", "reply/", "kvcache/", "scheduler/", "model/",
           "kernels/", "engine/", "cli/", "bench/", "server/", "tools/")
INC = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def objects(build):
    with open(os.path.join(build, "compile_commands.json")) as fh:
        cmds = json.load(fh)
    out = {}
    for c in cmds:
        src = os.path.normpath(os.path.join(c["directory"], c["file"]))
        out[os.path.normpath(os.path.join(c["directory"], c["output"]))] = src
    return out


def symbols(obj):
    res = subprocess.run(["nm", "-P", obj], capture_output=True, text=True, check=True)
    defined, used = set(), set()
    for line in res.stdout.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        name, kind = parts[0], parts[1]
        if kind == "U":
            used.add(name)
        elif kind.isupper() and kind not in "UVW":
            defined.add(name)
    return defined, used


def sccs(nodes, edges):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        work = [(v, iter(sorted(edges[v])))]
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        while work:
            node, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges[w]))))
                    advanced = True
                    break
                if w in on:
                    low[node] = min(low[node], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.add(w)
                    if w == node:
                        break
                out.append(comp)

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    build = args[0] if args else "build"
    objs = objects(build)
    root = os.path.commonpath([s for s in objs.values()])
    while not os.path.exists(os.path.join(root, "meson.build")) or \
            os.path.exists(os.path.join(os.path.dirname(root), "meson.build")):
        root = os.path.dirname(root)
    rel = {o: os.path.relpath(s, root) for o, s in objs.items()}
    lib = {o: r for o, r in rel.items() if r.startswith(LIBRARY) and "/internal/" not in r
           and os.path.exists(o)}
    definer = {}
    uses = {}
    for o, r in lib.items():
        d, u = symbols(o)
        uses[r] = u
        for name in d:
            definer.setdefault(name, r)
    edges = defaultdict(set)
    why = defaultdict(set)
    for r, u in uses.items():
        for name in u:
            t = definer.get(name)
            if t and t != r:
                edges[r].add(t)
                why[(r, t)].add(name)
    nodes = set(uses)
    if "--edges" in sys.argv:
        for (a, b), names in sorted(why.items()):
            print(f"{a} -> {b}: {', '.join(sorted(names))}")
    if "--dot" in sys.argv:
        print("digraph files {")
        for (a, b) in sorted(why):
            print(f'  "{a}" -> "{b}";')
        print("}")
    bad = 0
    loops = [c for c in sccs(nodes, edges) if len(c) > 1]
    for c in loops:
        ok = any(c <= a for a in ALLOWED)
        inner = sorted(f"{a} -> {b} ({', '.join(sorted(why[(a, b)]))})"
                       for a in c for b in edges[a] if b in c)
        print(f"{'allowed' if ok else 'LOOP'}: {' '.join(sorted(c))}")
        for e in inner:
            print(f"    {e}")
        bad += not ok
    # header include loops (source text)
    hedges = defaultdict(set)
    for d, _, files in (w for top in LIBRARY + ("include/",)
                        for w in os.walk(os.path.join(root, top))):
        for f in files:
            if not f.endswith((".h", ".cuh")):
                continue
            p = os.path.relpath(os.path.join(d, f), root)
            with open(os.path.join(root, p), encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    m = INC.match(line)
                    if m:
                        t = m.group(1)
                        t = t if os.path.exists(os.path.join(root, t)) else \
                            os.path.normpath(os.path.join(os.path.dirname(p), t))
                        hedges[p].add(t)
    for c in sccs(set(hedges), hedges):
        if len(c) > 1:
            print(f"LOOP (includes): {' '.join(sorted(c))}")
            bad += 1
    print(f"{len(nodes)} files, {sum(len(v) for v in edges.values())} call edges, "
          f"{len(loops)} loops ({bad} not allowed)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
