#!/usr/bin/env bash
# scripts/gpu_kit.sh - what a short GPU loan needs, packed here and run there (docs/gpu.md).
#
#   scripts/gpu_kit.sh pack DIR [--build BUILD] [--from-build BUILD] [--fast]
#       Builds a release with CUDA for sm_90 (+ embedded PTX for newer GPUs) in BUILD
#       (default build-gpukit, configured on first use), then writes DIR/kit.tar.xz and the
#       unpacker DIR/run.sh: the stripped pagellm, libpagellm.so, the native 'gpu' test
#       programs and gpu_membw, their shared-library closure except glibc, libstdc++,
#       libgcc and the CUDA libraries (the device has those), stories260K and its tokenizer,
#       the Python package and the kit's scripts (scripts/gpu_kit/). --from-build packs an
#       existing build as it is (no configure, no build; what it lacks is left out and said
#       so). --fast compresses less (the test suite's pack). DIR must stay under 40 MiB.
#       kit.tar.xz is two xz streams, one after the other (tar -xJi reads both): the library
#       closure, compressed once and kept in BUILD until the libraries change, then the rest
#       (binaries whose identical fatbins xz's 8 MiB window stores once), so a re-pack after a
#       code change takes seconds.
#   scripts/gpu_kit.sh run DIR OUT [--deadline S] [--cpu] [--small]
#       On the device: DIR is a packed kit (kit.tar.xz, unpacked to a temporary folder first)
#       or an unpacked one. Runs scripts/gpu_kit/run.py, which writes OUT/gpu_report.md,
#       OUT/gpu_report.json and OUT/gpu_logs.tar.gz as it goes. Default deadline 420 s.
#       --cpu: the same plumbing without a GPU (the test suite runs it); --small: tiny shapes.
set -euo pipefail

die() { echo "gpu_kit: $*" >&2; exit 2; }

# Shared libraries a kit program needs, as "soname path" lines, except what the device has:
# glibc's, libstdc++, libgcc, and CUDA's (runtime, cuBLAS, NCCL, driver: the toolkit's or
# PyTorch's wheels'; NCCL alone is 200 MiB).
closure() {
    ldd "$@" 2>/dev/null | awk '/=> \// {print $1, $3}' | sort -u | grep -Ev \
        '^(libc|libm|libpthread|libdl|librt|libresolv|libutil|libanl|ld-linux[^ ]*|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvJitLink|libnvrtc|libnvidia[^ ]*)\.so' \
        || true
}

is_elf() { [ "$(head -c 4 "$1" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ]; }

cmd_pack() {
    local dir="" build="build-gpukit" from="" level=6
    while [ $# -gt 0 ]; do
        case "$1" in
            --build) build="$2"; shift 2 ;;
            --from-build) from="$2"; shift 2 ;;
            --fast) level=0; shift ;;
            -*) die "pack: unknown flag $1" ;;
            *) [ -z "$dir" ] || die "pack: one DIR"; dir="$1"; shift ;;
        esac
    done
    [ -n "$dir" ] || die "usage: gpu_kit.sh pack DIR [--build BUILD] [--from-build BUILD] [--fast]"
    local root t0
    root="$(cd "$(dirname "$0")/.." && pwd)"
    t0=$(date +%s.%N)
    local targets=(tools/pagellm libpagellm.so.0.1.0 tests/cuda/test_cuda_gpu
                   tests/cuda/test_cuda_engine_gpu tests/cuda/test_cuda_engine_stories_gpu
                   tests/e2e/test_cuda_families_gpu tests/e2e/test_cuda_quant_gpu
                   bench/internal/cuda/gpu_membw)
    if [ -n "$from" ]; then
        build="$from"
        [ -f "$build/build.ninja" ] || die "pack: $build is not a build folder"
    else
        [ -x /usr/local/cuda/bin/nvcc ] && export PATH="$PATH:/usr/local/cuda/bin"
        command -v nvcc >/dev/null || die "pack: nvcc not found (the kit is a CUDA build)"
        if [ ! -f "$root/$build/build.ninja" ]; then
            (cd "$root" && meson setup "$build" -Dcuda=enabled -Dgpu_archs=90 \
                -Dbuildtype=release -Dtests=true >/dev/null)
        fi
        build="$root/$build"
        ninja -C "$build" -j "${PAGELLM_KIT_JOBS:-$(nproc)}" "${targets[@]}" \
            >"$build/gpu_kit.log" 2>&1 ||
            { tail -n 40 "$build/gpu_kit.log"; die "pack: the build failed"; }
        python3 "$root/scripts/cuda_report.py" "$build/gpu_kit.log" --archs 90
    fi
    build="$(cd "$build" && pwd)"
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    local stage="$dir/.stage" kit
    rm -rf "$stage"
    kit="$stage/kit"
    mkdir -p "$kit/bin" "$kit/lib" "$kit/tests" "$kit/python" "$kit/models" "$kit/scripts"
    local missing=() t
    for t in "${targets[@]}"; do
        [ -f "$build/$t" ] || { missing+=("$t"); continue; }
        case "$t" in
            tools/*|bench/*) cp "$build/$t" "$kit/bin/" ;;
            libpagellm*) cp "$build/$t" "$kit/lib/libpagellm.so.0" ;;
            tests/*) cp "$build/$t" "$kit/tests/" ;;
        esac
    done
    [ -f "$kit/bin/pagellm" ] && [ -f "$kit/lib/libpagellm.so.0" ] ||
        die "pack: $build has no pagellm or libpagellm.so"
    local f
    for f in "$kit"/bin/* "$kit"/lib/* "$kit"/tests/*; do
        is_elf "$f" && strip --strip-unneeded "$f" 2>/dev/null || true
    done
    # the library closure: copied under its soname, stripped
    local so path libs=0 sources=""
    while read -r so path; do
        [ -n "$so" ] || continue
        sources+="$so $(stat -L -c '%s %Y' "$path") $path"$'\n'
        cp -L "$path" "$kit/lib/$so"
        strip --strip-unneeded "$kit/lib/$so" 2>/dev/null || true
        libs=$((libs + 1))
    done < <(closure "$kit"/bin/* "$kit"/lib/libpagellm.so.0 "$kit"/tests/* |
             grep -v '^libpagellm\.so')
    mkdir -p "$kit/python/pagellm"
    cp "$root"/python/pagellm/*.py "$kit/python/pagellm/"
    local models="${PAGELLM_TEST_MODELS:-$root/../shared/models}"
    for f in stories260K.bin tok512.model; do
        [ -f "$models/$f" ] && cp "$models/$f" "$kit/models/" || missing+=("models/$f")
    done
    cp "$root"/scripts/gpu_kit/*.py "$kit/scripts/"
    cp "$root/scripts/gpu_kit.sh" "$kit/scripts/"
    local commit dirty=false
    commit="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    [ -z "$(git -C "$root" status --porcelain 2>/dev/null)" ] || dirty=true
    local archs
    archs="$(meson introspect "$build" --buildoptions 2>/dev/null | python3 -c \
        'import json,sys; print(",".join(next(o["value"] for o in json.load(sys.stdin) if o["name"] == "gpu_archs")))' \
        2>/dev/null || echo unknown)"
    python3 - "$kit/MANIFEST.json" "$commit" "$dirty" "$archs" "$build" "${missing[*]:-}" <<'EOF'
import json, os, sys, time
path, commit, dirty, archs, build, missing = sys.argv[1:7]
kit = os.path.dirname(path)
files = sorted(os.path.relpath(os.path.join(d, f), kit) for d, _, fs in os.walk(kit) for f in fs)
json.dump({"commit": commit, "dirty": dirty == "true", "gpu_archs": archs, "build": build,
           "packed": time.strftime("%Y-%m-%d %H:%M:%S"), "missing": missing.split(),
           "files": files}, open(path, "w"), indent=1)
EOF
    # the closure: compressed once per set of libraries (name, size, time of each source)
    local key cache="$build/gpu_kit_libs.$level.tar.xz"
    key="$(printf '%s' "$sources" | sort | sha256sum | cut -c1-16)"
    if [ ! -f "$cache" ] || [ "$(cat "$cache.key" 2>/dev/null)" != "$key" ]; then
        (cd "$stage" && ls kit/lib | grep -v '^libpagellm\.so' | sed 's|^|kit/lib/|' |
            tar -cf - -T - | xz -"$level" -T0 >"$cache.tmp")
        mv "$cache.tmp" "$cache"
        echo "$key" >"$cache.key"
    fi
    (cd "$stage" && tar -cf - kit/MANIFEST.json kit/bin kit/lib/libpagellm.so.0 kit/tests \
        kit/models kit/python kit/scripts | xz -"$level" -T1 >"$dir/kit.main.tmp")
    cat "$cache" "$dir/kit.main.tmp" >"$dir/kit.tar.xz.tmp"
    rm -f "$dir/kit.main.tmp" "$dir/kit.tar.gz"
    mv "$dir/kit.tar.xz.tmp" "$dir/kit.tar.xz"
    cat >"$dir/run.sh" <<'EOF'
#!/usr/bin/env bash
# The GPU kit's unpacker (written by scripts/gpu_kit.sh pack; docs/gpu.md):
#   bash KIT/run.sh OUT [--deadline S] [--cpu] [--small]     (or OUT=/path as the first word)
# unpacks kit.tar.xz beside it (two xz streams: tar -xJi, else Python's tarfile) into a fresh
# temporary folder and runs the kit there; the report goes to OUT (gpu_report.md,
# gpu_report.json, gpu_logs.tar.gz).
set -u
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-}"
[ -n "$out" ] || { echo "usage: bash $0 OUT [--deadline S] [--cpu] [--small]" >&2; exit 2; }
shift
out="${out#OUT=}"
work="$(mktemp -d "${TMPDIR:-/tmp}/pagellm-gpukit.XXXXXX")"
tar -xJif "$here/kit.tar.xz" -C "$work" 2>/dev/null ||
    python3 -c 'import sys, tarfile
with tarfile.open(sys.argv[1], "r:xz", ignore_zeros=True) as t: t.extractall(sys.argv[2])' \
        "$here/kit.tar.xz" "$work" || { echo "run.sh: cannot unpack $here/kit.tar.xz" >&2; exit 1; }
exec bash "$work/kit/scripts/gpu_kit.sh" run "$work/kit" "$out" "$@"
EOF
    chmod +x "$dir/run.sh"
    rm -rf "$stage"
    local bytes t1
    bytes=$(du -cb "$dir/kit.tar.xz" "$dir/run.sh" | tail -1 | cut -f1)
    t1=$(date +%s.%N)
    echo "gpu_kit: $dir: kit.tar.xz + run.sh, $((bytes / 1024)) KiB ($libs libraries;" \
        "commit $commit$([ "$dirty" = true ] && echo ' dirty'); gpu_archs $archs)" \
        "in $(python3 -c "print(f'{$t1 - $t0:.1f}')") s"
    [ ${#missing[@]} -eq 0 ] || echo "gpu_kit: not in the kit: ${missing[*]}"
    [ "$bytes" -le $((40 * 1024 * 1024)) ] || die "pack: $bytes bytes: over 40 MiB"
}

cmd_run() {
    [ $# -ge 2 ] || die "usage: gpu_kit.sh run DIR OUT [--deadline S] [--cpu] [--small]"
    local dir="$1" out="$2"
    shift 2
    local kit="$dir"
    if [ ! -f "$dir/MANIFEST.json" ]; then
        [ -f "$dir/kit.tar.xz" ] || die "run: $dir holds neither a kit nor kit.tar.xz"
        local work
        work="$(mktemp -d "${TMPDIR:-/tmp}/pagellm-gpukit.XXXXXX")"
        tar -xJif "$dir/kit.tar.xz" -C "$work"
        kit="$work/kit"
    fi
    mkdir -p "$out"
    exec python3 "$kit/scripts/run.py" --kit "$kit" --out "$out" "$@"
}

case "${1:-}" in
    pack) shift; cmd_pack "$@" ;;
    run) shift; cmd_run "$@" ;;
    *) die "usage: gpu_kit.sh pack DIR [...] | run DIR OUT [--deadline S] [--cpu] [--small]" ;;
esac
