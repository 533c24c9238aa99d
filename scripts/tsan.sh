#!/usr/bin/env bash
# ThreadSanitizer check of the thread-safe intake: scripts/tsan.sh [BUILD_DIR]
# Builds the tree with -Db_sanitize=thread (no CUDA) and runs tests/threads/tsan_threads:
# several threads submit and abort while the main thread steps, on the ref and cpu backends;
# then tests/threads/tsan_tp: the same over an engine split over two threads, and the
# threads communicator.
# The harness runs without Criterion, whose runner cannot start under TSan. Any race report
# fails the run (halt_on_error). Ends with "N passed, N failed"; about 40 s on 2 cores from a
# clean build directory.
set -uo pipefail
cd "$(dirname "$0")/.."
dir="${1:-build-tsan}"
if [ ! -d "$dir" ]; then
  meson setup "$dir" -Dcuda=disabled -Db_sanitize=thread -Db_lundef=false \
    -Dbuildtype=debugoptimized >"$dir.setup.log" 2>&1 ||
    { cat "$dir.setup.log"; echo "tsan: meson setup failed"; echo "0 passed, 1 failed"; exit 1; }
  rm -f "$dir.setup.log"
fi
ninja -C "$dir" -j2 tests/threads/tsan_threads tests/threads/tsan_tp >/dev/null ||
  { ninja -C "$dir" -j1 tests/threads/tsan_threads tests/threads/tsan_tp; echo "0 passed, 1 failed"; exit 1; }
# OpenBLAS is not instrumented: one BLAS thread keeps its internals out of the picture.
export OPENBLAS_NUM_THREADS=1
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
# tsan_tp: tensor parallelism's threads (communicator, keep-alive, the group of ranks)
pass=0 fail=0
for t in tsan_threads tsan_tp; do
  if "$dir/tests/threads/$t" 2; then pass=$((pass + 1)); else
    echo "tsan: $t FAILED (race report or check failure above)"; fail=$((fail + 1)); fi
done
[ $fail -eq 0 ] && echo "tsan: clean"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
