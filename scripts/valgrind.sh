#!/usr/bin/env bash
# valgrind memcheck of the end-to-end tests: scripts/valgrind.sh [BUILD_DIR [TEST...]]
#   BUILD_DIR  default build-valgrind (configured -Db_sanitize=none, no CUDA)
#   TEST       meson test names (default: every Criterion test of suite e2e)
# Runs each test binary under `valgrind --leak-check=full --error-exitcode=1
# --trace-children=yes`. Criterion forks a child per test and the child's valgrind status is
# not propagated, so the verdict comes from valgrind's own summaries in the test logs: every
# process must report "ERROR SUMMARY: 0 errors" and no "definitely lost" bytes.
# Ends with "N passed, N failed" (one per test binary).
set -uo pipefail
cd "$(dirname "$0")/.."
dir="${1:-build-valgrind}"
shift || true
if [ ! -f "$dir/build.ninja" ]; then
  meson setup "$dir" -Dcuda=disabled -Db_sanitize=none -Dbuildtype=debugoptimized \
    >"$dir.setup.log" 2>&1 ||
    { cat "$dir.setup.log"; echo "valgrind: meson setup failed"; echo "0 passed, 1 failed"; exit 1; }
  rm -f "$dir.setup.log"
fi
ninja -C "$dir" -j2 >/dev/null || { ninja -C "$dir" -j1 | tail -30; echo "0 passed, 1 failed"; exit 1; }
tests=("$@")
if [ ${#tests[@]} -eq 0 ]; then
  # the e2e suite's Criterion binaries (not the Python command-line test)
  mapfile -t tests < <(meson introspect "$dir" --tests | python3 -c '
import json, sys
for t in json.load(sys.stdin):
    if any(s.split(":")[-1] == "e2e" for s in t["suite"]) and t["name"] not in (
            "cli_refusals", "bench_soak_small"):
        print(t["name"])')
fi
logdir="$(realpath -m "$dir/valgrind-logs")"
rm -rf "$logdir"
mkdir -p "$logdir"
# one BLAS thread: OpenBLAS's thread pool only slows valgrind down
export OPENBLAS_NUM_THREADS=1
pass=0 fail=0
for t in "${tests[@]}"; do
  start=$(date +%s)
  meson test -C "$dir" --no-rebuild --timeout-multiplier 20 \
    --wrapper "valgrind --leak-check=full --error-exitcode=1 --trace-children=yes --num-callers=30 --log-file=$logdir/$t.%p.log" \
    "$t" >"$logdir/$t.meson.txt" 2>&1
  mrc=$?
  secs=$(( $(date +%s) - start ))
  procs=$(grep -l "ERROR SUMMARY" "$logdir/$t".*.log 2>/dev/null | wc -l)
  bad_err=$(grep -h "ERROR SUMMARY" "$logdir/$t".*.log 2>/dev/null | grep -vc "ERROR SUMMARY: 0 errors")
  bad_leak=$(grep -h "definitely lost:" "$logdir/$t".*.log 2>/dev/null | grep -vc "definitely lost: 0 bytes")
  lost=$(grep -h "definitely lost:" "$logdir/$t".*.log 2>/dev/null | awk '{gsub(",","",$4); s+=$4} END {print s+0}')
  if [ "$procs" -gt 0 ] && [ "$bad_err" -eq 0 ] && [ "$bad_leak" -eq 0 ] && [ $mrc -eq 0 ]; then
    pass=$((pass + 1))
    echo "PASS $t: $procs processes, 0 errors, 0 bytes definitely lost (${secs} s)"
  else
    fail=$((fail + 1))
    echo "FAIL $t: $procs processes, $bad_err with errors, $bad_leak leaking ($lost bytes definitely lost), meson exit $mrc (${secs} s); logs in $logdir/"
    grep -h -A12 -E "Invalid|uninitialised|definitely lost in" "$logdir/$t".*.log 2>/dev/null | head -40
  fi
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
