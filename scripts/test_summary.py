#!/usr/bin/env python3
"""Sums test cases over meson test logs: prints what was skipped and why, then
'N passed, N failed, N skipped'.

Criterion binaries print a 'Synthesis: Tested: T | Passing: P | Failing: F | Crashing: C' line;
each case counts. A skipped case is not in it: with CRITERION_VERBOSITY_LEVEL=1 (set by
scripts/test.sh) Criterion prints '[SKIP] suite::case: reason' for it, and the pytest suites
print the same line; each counts as skipped. Other tests (scripts, exit-77 skips) count once
by meson's result, their reason read from their output (a line saying SKIP, or 'exit 77').
A script that passed but left cases out says so on a '# skip: reason' line: listed, not
counted.
Usage: test_summary.py BUILD_DIR [BUILD_DIR...]; exits 1 if any failure was counted.
"""
import json
import re
import sys

SYN = re.compile(r"Synthesis: Tested: (\d+) \| Passing: (\d+) \| Failing: (\d+)")
CASE_SKIP = re.compile(r"^\[SKIP\] (\S+): (.*)$", re.M)
PARTLY = re.compile(r"^# skip:? (.*)$", re.M | re.I)
SAYS_SKIP = re.compile(r"^.*\bSKIP(?:PED)?\b:?\s*(.*)$", re.M | re.I)


def skip_reason(out):
    """The reason an exit-77 test gave: its last line that says SKIP."""
    found = [m.group(1).strip() or m.group(0).strip() for m in SAYS_SKIP.finditer(out)]
    return found[-1] if found else "exit 77 (no reason printed)"


def count(build_dir, notes):
    passed = failed = skipped = 0
    try:
        lines = open(f"{build_dir}/meson-logs/testlog.json", encoding="utf-8").readlines()
    except OSError:
        notes.append(f"failed: {build_dir}: no meson-logs/testlog.json")
        return 0, 1, 0
    for line in lines:
        t = json.loads(line)
        name = t.get("name", "?")
        out = (t.get("stdout") or "") + (t.get("stderr") or "")
        syn = SYN.findall(out)
        result = t.get("result")
        if result == "SKIP":
            skipped += 1
            notes.append(f"skipped: {name}: {skip_reason(out)}")
            continue
        for case, why in CASE_SKIP.findall(out):
            skipped += 1
            notes.append(f"skipped: {name}: {case}: {why}")
        if result in ("OK", "EXPECTEDFAIL"):
            for why in PARTLY.findall(out):
                notes.append(f"partly:  {name}: {why}")
        if syn:
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
    notes = []
    for d in dirs:
        dp, df, ds = count(d, notes)
        p, f, s = p + dp, f + df, s + ds
    if notes:
        print("what did not run, and why:")
        for n in notes:
            print("  " + n)
    print(f"{p} passed, {f} failed, {s} skipped")
    return 1 if f else 0


if __name__ == "__main__":
    sys.exit(main())
