#!/usr/bin/env bash
# Configures (once) and builds pagellm: scripts/build.sh [BUILD_DIR [meson options...]].
# Default BUILD_DIR is build. nvcc is looked up in PATH and /usr/local/cuda/bin.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-build}"
shift || true
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="$PATH:/usr/local/cuda/bin"
if [ ! -f "$dir/build.ninja" ]; then
  meson setup "$dir" "$@" >/dev/null
fi
ninja -C "$dir" >/dev/null
