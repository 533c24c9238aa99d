#!/bin/sh
# bench/peer/build_llama_cpp.sh - builds the llama.cpp peer at the pinned commit OUTSIDE this
# repository (it is never committed here): llama-bench, llama-batched-bench, llama-quantize
# and llama-perplexity, CPU only, native ISA, Release. About 15 minutes on 2 cores.
#
# The pinned commit is the newest tree of github.com/unslothai/llama.cpp (a fork that follows
# ggml-org's, August 2026). Only the top-level entries the build needs are checked out: not
# models/, docs/ or media/, whose largest files a mirror may lack.
#
# One line of ggml is patched: GCC 12 drops the stores that build ggml's AMX tile
# configuration (ggml_tile_config_init: a local struct handed to _tile_loadconfig, whose
# builtin GCC does not see reading it), so on a CPU with AMX-INT8 its first tile instruction
# raises SIGILL (llama-perplexity and llama-batched-bench on Q8_0/Q4_0 files). A compiler
# barrier before the load keeps the stores; nothing else changes.
#
# usage: bench/peer/build_llama_cpp.sh [SOURCE]
#   SOURCE             a git URL or a local clone to clone from
#                      (default https://github.com/unslothai/llama.cpp)
#   PAGELLM_PEER_DIR   where the clone and its build go (default: ../pagellm-peer/llama.cpp
#                      beside this repository); must be outside it
#   LLAMA_CPP_COMMIT   the commit (default: the pinned one below, the one the figures in
#                      docs/benchmarks.md were measured with)
#   JOBS               parallel compile jobs (default: the online CPUs)
# The binaries end up in $PAGELLM_PEER_DIR/build/bin; bench/peer/run.py reads them from there.
set -eu
COMMIT=${LLAMA_CPP_COMMIT:-d32676d77426540327835040d5d3279728f0b4c8}
SRC=${1:-https://github.com/unslothai/llama.cpp}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DIR=${PAGELLM_PEER_DIR:-$REPO/../pagellm-peer/llama.cpp}
JOBS=${JOBS:-$(getconf _NPROCESSORS_ONLN)}

mkdir -p "$(dirname "$DIR")"
ABS=$(cd "$(dirname "$DIR")" && pwd)/$(basename "$DIR")
case "$ABS/" in
"$REPO"/*) echo "build_llama_cpp.sh: $ABS is inside the repository; set PAGELLM_PEER_DIR" >&2
           exit 2 ;;
esac
if [ ! -d "$ABS/.git" ]; then
    git clone --no-checkout "$SRC" "$ABS"
fi
git -C "$ABS" fetch --quiet origin "$COMMIT" 2>/dev/null || true
git -C "$ABS" ls-tree --name-only "$COMMIT" | grep -v -x -e models -e docs -e media |
    xargs git -C "$ABS" checkout --quiet "$COMMIT" --
MMQ=$ABS/ggml/src/ggml-cpu/amx/mmq.cpp
if [ -f "$MMQ" ] && ! grep -q 'GCC 12 drops' "$MMQ"; then
    sed -i 's|^    _tile_loadconfig(&tc);|    __asm__ volatile("" : : "m"(tc) : "memory"); /* GCC 12 drops the stores above */\n    _tile_loadconfig(\&tc);|' "$MMQ"
fi
cmake -S "$ABS" -B "$ABS/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
cmake --build "$ABS/build" -j "$JOBS" \
    --target llama-bench llama-batched-bench llama-quantize llama-perplexity
echo "llama.cpp $COMMIT built in $ABS/build/bin"
