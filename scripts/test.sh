#!/usr/bin/env bash
# Builds and runs the whole test suite: scripts/test.sh [BUILD_DIR [meson options...]].
# Ends with what was skipped and why, then one line "N passed, N failed, N skipped" counted
# over every test case executed (Criterion cases, not binaries), and exits non-zero if
# anything failed.
# Tests that need the shared models read PAGELLM_TEST_MODELS and report SKIP without it; it
# defaults to ../shared/models when that exists (set it empty to run without the models).
# scripts/test.sh --env prints the environment the tests would run with, and stops.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PAGELLM_TEST_MODELS+set}" ] && [ -d ../shared/models ]; then
  PAGELLM_TEST_MODELS="$(cd ../shared/models && pwd)"
fi
export PAGELLM_TEST_MODELS="${PAGELLM_TEST_MODELS:-}"
[ -n "$PAGELLM_TEST_MODELS" ] || unset PAGELLM_TEST_MODELS
# Criterion prints "[SKIP] case: reason" at this level, which the summary lists
export CRITERION_VERBOSITY_LEVEL="${CRITERION_VERBOSITY_LEVEL:-1}"
if [ "${1:-}" = "--env" ]; then
  echo "PAGELLM_TEST_MODELS=${PAGELLM_TEST_MODELS:-}"
  echo "CRITERION_VERBOSITY_LEVEL=$CRITERION_VERBOSITY_LEVEL"
  exit 0
fi
echo "PAGELLM_TEST_MODELS=${PAGELLM_TEST_MODELS:-(unset: the tests that need the models skip)}"
dir="${1:-build}"
scripts/build.sh "$@" || { echo "build failed"; echo "0 passed, 1 failed"; exit 1; }
meson test -C "$dir" --print-errorlogs --num-processes 2
rc=$?
python3 scripts/test_summary.py "$dir"
exit $rc
