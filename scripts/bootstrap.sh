#!/usr/bin/env bash
# Installs missing Debian packages and builds pagellm into ./build.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh build
