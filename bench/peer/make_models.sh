#!/bin/sh
# bench/peer/make_models.sh - the peer benchmark's GGUF files: random weights of the
# stories110M shape (dim 768, 12 layers, 12 heads, hidden 2048, vocab 32000) and the
# TinyLlama-1.1B shape (dim 2048, 22 layers, 32 heads, 4 KV heads, hidden 5632, vocab 32000).
# The generator is `pagellm quantize dummy:NAME` (the dummy presets stories110m and
# tinyllama-1.1b draw seeded random weights of exactly these shapes): F16 first, then Q8_0,
# Q4_0 and Q4_K_M from it by `pagellm quantize` (pl-TYPE.gguf), and by llama.cpp's
# llama-quantize (ll-TYPE.gguf), so each engine also runs the other's files.
#
# usage: bench/peer/make_models.sh [SHAPE ...]   (default: stories110m tinyllama-1.1b)
#   PAGELLM            the pagellm binary (default build/tools/pagellm)
#   PAGELLM_PEER_DIR   the llama.cpp build (bench/peer/build_llama_cpp.sh); without
#                      llama-quantize there the ll-* files are skipped
#   PEER_MODELS        output directory (default /tmp/pagellm-peer-models; never the repo)
#   TOKENIZER          the 32000-token vocabulary stored in the files (llama.cpp needs one):
#                      default $PAGELLM_TEST_MODELS/tokenizer.model (Llama 2's)
# Shape stories260k is the trained stories260K.bin of $PAGELLM_TEST_MODELS (with its tok512
# vocabulary): an F32 file (the KL-divergence base; random weights give near-uniform
# distributions, so accuracy is compared on this one) and the same types from it, by pagellm
# only: its hidden size 172 is not whole blocks of 32, which llama-quantize refuses for these
# types ("no tensor type fallback"), where `pagellm quantize` stores those tensors in F16 as
# llama.cpp does for its other fallbacks. llama.cpp runs the pl- files.
# Files that exist are kept. Disk: ~0.9 GB (stories110m) and ~5 GB (tinyllama) in all.
set -eu
REPO=$(cd "$(dirname "$0")/../.." && pwd)
PAGELLM=${PAGELLM:-$REPO/build/tools/pagellm}
PEER=${PAGELLM_PEER_DIR:-$REPO/../pagellm-peer/llama.cpp}
OUT=${PEER_MODELS:-/tmp/pagellm-peer-models}
TOKENIZER=${TOKENIZER:-${PAGELLM_TEST_MODELS:-$REPO/../shared/models}/tokenizer.model}
QUANTIZE=$PEER/build/bin/llama-quantize
[ $# -gt 0 ] || set -- stories110m tinyllama-1.1b

for shape in "$@"; do
    d=$OUT/$shape
    mkdir -p "$d"
    if [ "$shape" = stories260k ]; then
        MODELS=${PAGELLM_TEST_MODELS:-$REPO/../shared/models}
        src=$d/pl-f32.gguf
        [ -f "$src" ] || "$PAGELLM" quantize "$MODELS/stories260K.bin" "$src" f32 \
            --tokenizer "$MODELS/tok512.model"
    else
        src=$d/pl-f16.gguf
        [ -f "$src" ] ||
            "$PAGELLM" quantize "dummy:$shape" "$src" f16 --tokenizer "$TOKENIZER"
    fi
    for t in q8_0 q4_0 q4_k_m; do
        [ -f "$d/pl-$t.gguf" ] || "$PAGELLM" quantize "$src" "$d/pl-$t.gguf" "$t"
        if [ -x "$QUANTIZE" ] && [ ! -f "$d/ll-$t.gguf" ] && [ "$shape" != stories260k ]; then
            T=$(echo "$t" | tr a-z A-Z)
            "$QUANTIZE" "$src" "$d/ll-$t.gguf" "$T" 2 >"$d/ll-$t.log" 2>&1 ||
                { cat "$d/ll-$t.log" >&2; exit 1; }
        fi
    done
done
ls -l "$OUT"/*
