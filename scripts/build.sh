#!/usr/bin/env bash
# Configures (once) and builds pagellm: scripts/build.sh [BUILD_DIR [meson options...]].
# Default BUILD_DIR is build. nvcc is looked up in PATH and /usr/local/cuda/bin.
# Compiler output goes to BUILD_DIR/build.log (the tail is shown when the build fails).
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-build}"
shift || true
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="$PATH:/usr/local/cuda/bin"
if [ ! -f "$dir/build.ninja" ]; then
  meson setup "$dir" "$@" >/dev/null
fi
# The log keeps nvcc's -Xptxas=-v report; cuda_report.py prints one line per GPU architecture
# and fails the build when a kernel spills or an architecture is missing.
ninja -C "$dir" >"$dir/build.log" || { tail -n 50 "$dir/build.log"; exit 1; }
archs="$(meson introspect "$dir" --buildoptions | python3 -c \
  'import json, sys; print(",".join(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "gpu_archs")))')"
python3 scripts/cuda_report.py "$dir/build.log" --archs "$archs"
