#!/usr/bin/env python3
"""Summarises nvcc's -Xptxas=-v output from a build log: kernels per GPU architecture, the
highest register count, and every kernel that spills or has a stack frame (local memory: an
array indexed at run time, a spill, a call that was not inlined). Exits 1 on either, or when
an architecture in --archs has no kernel, so a build that silently lost sm_80 or sm_90 fails
CI. docs/kernels.md promises every kernel 0 bytes of stack frame.

usage: cuda_report.py BUILD_LOG [--archs 80,90]
Prints nothing and exits 0 when the log holds no ptxas output (no nvcc, or nothing rebuilt)."""
import re
import subprocess
import sys

ENTRY = re.compile(r"ptxas info\s*: Compiling entry function '([^']+)' for 'sm_(\d+)'")
SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
REGS = re.compile(r"ptxas info\s*: Used (\d+) registers")


def demangle(names):
    try:
        out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True,
                             text=True, check=True).stdout.splitlines()
        return out if len(out) == len(names) else names
    except (OSError, subprocess.CalledProcessError):
        return names


def main():
    args = sys.argv[1:]
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    archs = ["80", "90"]
    if "--archs" in args:
        i = args.index("--archs")
        archs = args[i + 1].split(",")
        del args[i:i + 2]
    kernels = {}  # (name, arch) -> [regs, spill stores, spill loads, stack]
    current = None
    with open(args[0], errors="replace") as f:
        for line in f:
            m = ENTRY.search(line)
            if m:
                current = (m.group(1), m.group(2))
                kernels.setdefault(current, [0, 0, 0, 0])
                continue
            if current is None:
                continue
            m = SPILL.search(line)
            if m:
                k = kernels[current]
                k[3], k[1], k[2] = int(m.group(1)), int(m.group(2)), int(m.group(3))
            m = REGS.search(line)
            if m:
                kernels[current][0] = int(m.group(1))
                current = None  # "Used N registers" closes an entry's report
    if not kernels:
        return 0
    rc = 0
    for arch in archs:
        mine = {n: v for (n, a), v in kernels.items() if a == arch}
        if not mine:
            print(f"cuda: no kernel compiled for sm_{arch}")
            rc = 1
            continue
        names = sorted(mine)
        spilling = [n for n in names if mine[n][1] or mine[n][2]]
        framed = [n for n in names if mine[n][3] and n not in spilling]
        top = max(names, key=lambda n: mine[n][0])
        print(f"cuda: sm_{arch}: {len(names)} kernels compiled, "
              f"{len(spilling)} with spills, {len(framed)} more with a stack frame, "
              f"at most {mine[top][0]} registers ({demangle([top])[0]})")
        for n, d in zip(spilling, demangle(spilling)):
            print(f"cuda: sm_{arch}: {d} spills {mine[n][1]} bytes stored, "
                  f"{mine[n][2]} bytes loaded")
            rc = 1
        for n, d in zip(framed, demangle(framed)):
            print(f"cuda: sm_{arch}: {d} has a {mine[n][3]}-byte stack frame (local memory)")
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
