#!/usr/bin/env python3
"""Fails when a source file includes a project header its module must not use, or defines a
function or variable its own header does not declare (check_own_header.py, run from here).

The table is the module boundary of docs/architecture.md: what each folder may include.
Only quoted includes of project folders are checked; system headers are free.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_own_header  # noqa: E402

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
MODULES = ["util", "gguf", "tokenizer", "grammar", "template", "reply", "kvcache", "scheduler", "model", "kernels", "dist", "kvevents",
           "engine", "cli", "tools", "bench", "server", "tests"]
ALLOWED = {
    "util": {"util"},
    "gguf": {"util", "gguf"},
    "tokenizer": {"util", "gguf", "tokenizer"},
    "grammar": {"util", "tokenizer", "grammar"},
    "template": {"util", "template"},
    "reply": {"util", "grammar", "reply"},
    "kvcache": {"util", "kvcache"},
    "scheduler": {"util", "kvcache", "scheduler"},
    "model": {"util", "gguf", "model"},
    "kernels": {"util", "kernels"},
    "dist": {"util", "dist"},
    "kvevents": {"util", "kvevents"},
    "engine": {"util", "gguf", "tokenizer", "grammar", "template", "kvcache", "scheduler", "model",
               "kernels", "dist", "kvevents", "engine"},
    # the command line sees only pagellm.h: cli/ (flags, prompts file) <- bench/, server/ <- tools/
    "cli": {"cli"},
    "bench": {"bench", "cli"},
    "server": {"server", "cli"},
    "tools": {"tools", "bench", "cli", "server"},
    "tests": set(MODULES),
}
# engine reaches kernels only through the backend table.
ENGINE_KERNEL_HEADERS = {"kernels/backend.h"}
# bench/kernels and bench/internal are micro-benchmarks of one module: internals allowed.
BENCH_INTERNAL = ("bench/kernels/", "bench/internal/")
INC = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def module_of(rel):
    return rel.split("/", 1)[0]


def main():
    bad = []
    checked = 0
    for mod in MODULES:
        for dirpath, _, files in os.walk(os.path.join(ROOT, mod)):
            for f in files:
                if not f.endswith((".c", ".h", ".cc", ".cpp", ".cu", ".cuh")):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, ROOT).replace(os.sep, "/")
                checked += 1
                with open(path, encoding="utf-8", errors="replace") as fh:
                    for n, line in enumerate(fh, 1):
                        m = INC.match(line)
                        if not m:
                            continue
                        target = m.group(1)
                        tmod = module_of(target)
                        if tmod not in MODULES:
                            continue  # pagellm.h, same-folder headers
                        if rel.startswith(BENCH_INTERNAL):
                            continue
                        ok = tmod in ALLOWED[mod]
                        if mod == "engine" and tmod == "kernels" and target not in ENGINE_KERNEL_HEADERS:
                            ok = False
                        if not ok:
                            bad.append(f"{rel}:{n}: includes \"{target}\" but {mod}/ may use only "
                                       f"{sorted(ALLOWED[mod]) or 'pagellm.h'}")
    for b in bad:
        print(b)
    print(f"checked {checked} files, {len(bad)} layering violations")
    own = check_own_header.main()
    return 1 if bad or own else 0


if __name__ == "__main__":
    sys.exit(main())
