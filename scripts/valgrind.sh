#!/usr/bin/env bash
# valgrind memcheck of the end-to-end tests: scripts/valgrind.sh [BUILD_DIR [TEST...]]
#   BUILD_DIR  default build-valgrind (configured -Db_sanitize=none, no CUDA)
#   TEST       meson test names (default: every Criterion test of suite e2e)
# Runs each test binary under `valgrind --leak-check=full --error-exitcode=1
# --trace-children=yes`. Criterion forks a child per test and the child's valgrind status is
# not propagated, so the verdict comes from valgrind's own summaries in the test logs: every
# process must report "ERROR SUMMARY: 0 errors" and no "definitely lost" bytes. A test child
# killed by its Criterion .timeout (SIGPROF; valgrind is ~30x slower) is listed apart. Takes
# tens of minutes for the whole e2e suite on 2 cores: not for CI.
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
# one BLAS thread: OpenBLAS's thread pool only slows valgrind down; shorter soaks (their full
# size would outlast the tests' Criterion timeouts under valgrind)
export OPENBLAS_NUM_THREADS=1
export PL_SOAK_REQUESTS="${PL_SOAK_REQUESTS:-300}"
export PL_SOAK_STORIES_REQUESTS="${PL_SOAK_STORIES_REQUESTS:-80}"
pass=0 fail=0
for t in "${tests[@]}"; do
  start=$(date +%s)
  meson test -C "$dir" --no-rebuild --timeout-multiplier 20 \
    --wrapper "valgrind --leak-check=full --error-exitcode=1 --trace-children=yes --num-callers=30 --log-file=$logdir/$t.%p.log" \
    "$t" >"$logdir/$t.meson.txt" 2>&1
  mrc=$?
  secs=$(( $(date +%s) - start ))
  # a process killed by SIGPROF hit its Criterion .timeout (valgrind runs ~30x slower): its
  # live engine shows as "possibly lost" and it proved nothing, so it is reported apart
  timed_out=$(grep -l "signal 27 (SIGPROF)" "$logdir/$t".*.log 2>/dev/null)
  n_to=$(printf '%s' "$timed_out" | grep -c . || true)
  done_logs=$(grep -L "signal 27 (SIGPROF)" "$logdir/$t".*.log 2>/dev/null)
  procs=0 bad_err=0 bad_leak=0
  if [ -n "$done_logs" ]; then
    procs=$(grep -l "ERROR SUMMARY" $done_logs | wc -l)
    bad_err=$(grep -h "ERROR SUMMARY" $done_logs | grep -vc "ERROR SUMMARY: 0 errors")
    bad_leak=$(grep -h "definitely lost:" $done_logs | grep -vc "definitely lost: 0 bytes")
  fi
  note=""
  [ "$n_to" -gt 0 ] && note=", $n_to test processes killed by their Criterion timeout (not checked)"
  # meson's own verdict fails on those timeouts too; memcheck's verdict is the logs'
  if [ "$procs" -gt 0 ] && [ "$bad_err" -eq 0 ] && [ "$bad_leak" -eq 0 ] &&
     { [ $mrc -eq 0 ] || [ "$n_to" -gt 0 ]; }; then
    pass=$((pass + 1))
    echo "PASS $t: $procs processes, 0 errors, 0 bytes definitely lost${note} (${secs} s)"
  else
    fail=$((fail + 1))
    echo "FAIL $t: $procs processes, $bad_err with errors, $bad_leak leaking, meson exit $mrc${note} (${secs} s); logs in $logdir/"
    [ -n "$done_logs" ] && grep -h -A12 -E "Invalid|uninitialised|definitely lost in" $done_logs | head -40
  fi
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
