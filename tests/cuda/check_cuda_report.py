#!/usr/bin/env python3
"""scripts/cuda_report.py on made-up ptxas logs: a clean log passes; a spill, a stack frame
alone (local memory without a spill: an array indexed at run time) and a missing architecture
each fail, naming the kernel or the architecture.

usage: check_cuda_report.py SOURCE_ROOT"""
import os
import subprocess
import sys
import tempfile


def entry(name, arch, frame=0, stores=0, loads=0, regs=32):
    return (f"ptxas info    : Compiling entry function '{name}' for 'sm_{arch}'\n"
            f"ptxas info    : Function properties for {name}\n"
            f"    {frame} bytes stack frame, {stores} bytes spill stores, {loads} bytes spill loads\n"
            f"ptxas info    : Used {regs} registers, used 0 barriers\n")


def run(script, text, archs="80,90"):
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
        f.write(text)
        path = f.name
    try:
        p = subprocess.run([sys.executable, script, path, "--archs", archs],
                           capture_output=True, text=True)
    finally:
        os.unlink(path)
    return p.returncode, p.stdout


def main():
    script = os.path.join(sys.argv[1], "scripts", "cuda_report.py")
    clean = entry("_Z1av", 80) + entry("_Z1av", 90) + entry("_Z1bv", 90, regs=64)
    failures = []

    def expect(what, text, rc_want, needle=None, archs="80,90"):
        rc, out = run(script, text, archs)
        if rc != rc_want or (needle and needle not in out):
            failures.append(f"{what}: exit {rc} (want {rc_want}), output:\n{out}")

    expect("clean", clean, 0, "0 with spills, 0 more with a stack frame")
    expect("spill", clean + entry("_Z5spillv", 90, frame=16, stores=12, loads=8), 1,
           "spill() spills 12 bytes stored")
    expect("stack frame", clean + entry("_Z5framev", 80, frame=16), 1,
           "frame() has a 16-byte stack frame")
    expect("missing arch", clean, 1, "no kernel compiled for sm_100", archs="80,90,100")
    expect("no ptxas output", "nothing here\n", 0)
    for f in failures:
        print(f)
    print(f"{5 - len(failures)} of 5 cases as expected")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
