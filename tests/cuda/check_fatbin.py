#!/usr/bin/env python3
"""The CUDA backend carries machine code for every gpu_archs entry and the PTX of the newest,
so a GPU newer than all of them (sm_100 for a build of 80,90) JIT-compiles the kernels instead
of failing with "no kernel image is available". With cuobjdump (the CUDA toolkit's), the
shared library's fatbin is listed; without it, every .cu compile command in the build's
compile_commands.json must ask nvcc for both.

usage: check_fatbin.py BUILD_DIR ARCH[,ARCH...]"""
import json
import os
import shutil
import subprocess
import sys


def main():
    build, archs = sys.argv[1], [a for a in sys.argv[2].split(",") if a]
    newest = max(archs, key=int)
    lib = os.path.join(build, "libpagellm.so")
    tool = shutil.which("cuobjdump") or (
        "/usr/local/cuda/bin/cuobjdump" if os.path.exists("/usr/local/cuda/bin/cuobjdump") else None)
    if tool:
        elf = subprocess.run([tool, "--list-elf", lib], capture_output=True, text=True).stdout
        ptx = subprocess.run([tool, "--list-ptx", lib], capture_output=True, text=True).stdout
        missing = [a for a in archs if f"sm_{a}" not in elf]
        if missing or f"sm_{newest}" not in ptx:
            print(f"{lib}: machine code for {missing or 'every arch'}; PTX list:\n{ptx}")
            return 1
        print(f"{lib}: sm_{', sm_'.join(archs)} and PTX for compute_{newest} ({tool})")
        return 0
    with open(os.path.join(build, "compile_commands.json")) as f:
        cmds = [c for c in json.load(f) if c["file"].endswith(".cu")]
    if not cmds:
        print("no .cu compile commands: not a CUDA build")
        return 77
    bad = []
    for c in cmds:
        cmd = c.get("command") or " ".join(c.get("arguments", []))
        want = [f"arch=compute_{a},code=sm_{a}" for a in archs]
        want.append(f"arch=compute_{newest},code=compute_{newest}")
        if any(w not in cmd for w in want):
            bad.append(c["file"])
    if bad:
        print("compiled without every -gencode (machine code per arch + newest PTX):", bad)
        return 1
    print(f"{len(cmds)} .cu files: sm_{', sm_'.join(archs)} and PTX for compute_{newest} "
          "(compile commands; no cuobjdump here)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
