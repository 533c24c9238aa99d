#!/usr/bin/env bash
# Builds and runs the whole test suite: scripts/test.sh [BUILD_DIR [meson options...]].
# Ends with one line "N passed, N failed, N skipped" counted over every test case executed
# (Criterion cases, not binaries) and exits non-zero if anything failed.
# Tests that need the shared models read PAGELLM_TEST_MODELS and report SKIP without it.
set -uo pipefail
cd "$(dirname "$0")/.."
dir="${1:-build}"
scripts/build.sh "$@" || { echo "build failed"; echo "0 passed, 1 failed"; exit 1; }
meson test -C "$dir" --print-errorlogs --num-processes 2
rc=$?
python3 scripts/test_summary.py "$dir"
exit $rc
