#!/usr/bin/env python3
"""Sums test cases over meson test logs: prints 'N passed, N failed, N skipped'.

Criterion binaries print a 'Synthesis: Tested: T | Passing: P | Failing: F | Crashing: C' line;
each case counts. Other tests (scripts, exit-77 skips) count once by meson's result.
Usage: test_summary.py BUILD_DIR [BUILD_DIR...]; exits 1 if any failure was counted.
"""
import json
import re
import sys

SYN = re.compile(r"Synthesis: Tested: (\d+) \| Passing: (\d+) \| Failing: (\d+)")


def count(build_dir):
    passed = failed = skipped = 0
    try:
        lines = open(f"{build_dir}/meson-logs/testlog.json", encoding="utf-8").readlines()
    except OSError:
        return 0, 1, 0
    for line in lines:
        t = json.loads(line)
        out = (t.get("stdout") or "") + (t.get("stderr") or "")
        syn = SYN.findall(out)
        result = t.get("result")
        if result == "SKIP":
            skipped += 1
        elif syn:
            p = sum(int(s[1]) for s in syn)
            f = sum(int(s[2]) for s in syn)
            passed += p
            failed += f
            if result not in ("OK", "EXPECTEDFAIL") and f == 0:
                failed += 1  # the binary failed outside its cases (crash in main, timeout)
        elif result in ("OK", "EXPECTEDFAIL"):
            passed += 1
        else:
            failed += 1
    return passed, failed, skipped


def main():
    dirs = sys.argv[1:] or ["build"]
    p = f = s = 0
    for d in dirs:
        dp, df, ds = count(d)
        p, f, s = p + dp, f + df, s + ds
    print(f"{p} passed, {f} failed, {s} skipped")
    return 1 if f else 0


if __name__ == "__main__":
    sys.exit(main())
