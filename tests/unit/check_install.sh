#!/usr/bin/env bash
# Installs the build as a Debian packager does (meson install --destdir into a staging root)
# and uses the result from there, through pkg-config with the staging root as its sysroot:
# - pkg-config --cflags gives the include directory and nothing else (pagellm.h includes only
#   libc headers: no dependency's include directory belongs there);
# - a program built with `pkg-config --cflags --libs pagellm` runs on the shared library;
# - the same program linked with `pkg-config --cflags --libs pagellm-static` (the README's
#   command) runs, without libpagellm.so and without any CUDA library;
# - the installed pagellm runs, and its man page is installed;
# - the installed Python package imports and generates, loading the installed library through
#   the path meson install recorded (no PAGELLM_LIBRARY), and `pip install ./python` in a fresh
#   virtual environment, with no package index and no flags (the README's command), gives a
#   package that finds the installed library through the loader path and leaves no build
#   folder in the source.
# Usage: check_install.sh BUILD_DIR SOURCE_DIR PYTHON
set -euo pipefail
build="$1"
src="$2"
py="$3"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
root="$tmp/root"
meson install -C "$build" --no-rebuild --quiet --destdir "$root" >/dev/null
pc="$(dirname "$(find "$root" -name pagellm.pc | head -n 1)")"
[ -n "$pc" ] || { echo "pagellm.pc was not installed"; exit 1; }
export PKG_CONFIG_PATH="$pc"
export PKG_CONFIG_SYSROOT_DIR="$root"
incdir="$(dirname "$(find "$root" -name pagellm.h | head -n 1)")"
libdir="$(dirname "$(find "$root" -name 'libpagellm.so' | head -n 1)")"
[ -f "$libdir/libpagellm.a" ] || { echo "libpagellm.a was not installed beside libpagellm.so"; exit 1; }

cflags="$(pkg-config --cflags pagellm)"
[ "$(echo $cflags)" = "-I$incdir" ] ||
  { echo "pkg-config --cflags pagellm gives '$cflags', expected '-I$incdir' alone"; exit 1; }
static_libs="$(pkg-config --libs pagellm-static)"
case "$static_libs" in
*cublas* | *cudart* | *cuda*) echo "static link flags name CUDA: $static_libs"; exit 1 ;;
esac

# a sanitizer build's library needs the program built with the same runtime
san=""
case "$(ldd "$libdir/libpagellm.so")" in *libasan*) san="-fsanitize=address,undefined" ;; esac

# shared
cc -std=c11 -Wall -Werror $san "$src/tests/unit/install_example.c" -o "$tmp/example" \
  $(pkg-config --cflags --libs pagellm)
LD_LIBRARY_PATH="$libdir" "$tmp/example"
# the program must have used the shared library, not a static copy
# (no `ldd | grep -q`: with pipefail, grep closing the pipe early fails the check)
case "$(LD_LIBRARY_PATH="$libdir" ldd "$tmp/example")" in
*libpagellm.so*) ;;
*) echo "not linked to libpagellm.so"; exit 1 ;;
esac

# static: exactly as the README says
cc -std=c11 -Wall -Werror $san "$src/tests/unit/install_example.c" -o "$tmp/example_static" \
  $(pkg-config --cflags --libs pagellm-static)
"$tmp/example_static"
case "$(ldd "$tmp/example_static")" in
*libpagellm.so*) echo "the static program loads libpagellm.so"; exit 1 ;;
*libcublas* | *libcudart*) echo "the static program loads CUDA libraries"; exit 1 ;;
esac

# the command and its man page
exe="$(find "$root" -path '*/bin/pagellm' | head -n 1)"
[ -n "$exe" ] || { echo "the pagellm command was not installed"; exit 1; }
"$exe" --version | grep -q '^pagellm ' || { echo "the installed pagellm does not run"; exit 1; }
man1="$(find "$root" -path '*/man1/pagellm.1' | head -n 1)"
[ -n "$man1" ] || { echo "the man page pagellm.1 was not installed"; exit 1; }
grep -q '^\.TH PAGELLM 1' "$man1" || { echo "$man1 is not a man page"; exit 1; }

# the Python package, as meson install put it beside the library
pyinit="$(find "$root" -path '*/pagellm/__init__.py' | head -n 1)"
[ -n "$pyinit" ] || { echo "the Python package was not installed"; exit 1; }
site="$(dirname "$(dirname "$pyinit")")"
unset PAGELLM_LIBRARY
export PYTHONDONTWRITEBYTECODE=1
if [ -n "$san" ]; then  # the interpreter is not instrumented: its runtime comes first
  export LD_PRELOAD="$(cc -print-file-name=libasan.so)" ASAN_OPTIONS=detect_leaks=0
fi
cat >"$tmp/use.py" <<'PY'
import os, sys
import pagellm
from pagellm import LLM, SamplingParams
lib = os.path.realpath(pagellm.library_path())
if not lib.startswith(os.path.realpath(sys.argv[1]) + os.sep):
    sys.exit(f"the package loaded {lib}, not the installed library in {sys.argv[1]}")
with LLM("dummy:tiny", max_num_blocks=16, threads=1) as llm:
    out = llm.generate([[1, 2, 3]], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))
if len(out[0].outputs[0].token_ids) != 4:
    sys.exit(f"generate gave {out}")
models = os.environ.get("PAGELLM_TEST_MODELS")
if models:  # the issue's check: the story equals the command line's
    llm = LLM(os.path.join(models, "stories260K.bin"),
              tokenizer=os.path.join(models, "tok512.model"))
    print(llm.generate(["Once upon a time"],
                       SamplingParams(temperature=0, max_tokens=40))[0].outputs[0].text)
PY
PYTHONPATH="$site" "$py" "$tmp/use.py" "$libdir" >"$tmp/story.txt" ||
  { echo "the installed Python package failed (PYTHONPATH=$site)"; exit 1; }
if [ -n "${PAGELLM_TEST_MODELS:-}" ]; then
  LD_LIBRARY_PATH="$libdir" "$exe" generate -m "$PAGELLM_TEST_MODELS/stories260K.bin" \
    --tokenizer "$PAGELLM_TEST_MODELS/tok512.model" --prompt "Once upon a time" \
    --temperature 0 --max-tokens 40 >"$tmp/cli.txt"
  [ "Once upon a time$(cat "$tmp/story.txt")" = "$(cat "$tmp/cli.txt")" ] ||
    { echo "Python: $(cat "$tmp/story.txt")"; echo "CLI: $(cat "$tmp/cli.txt")"; exit 1; }
fi

# pip install from a copy of the checkout into a fresh virtual environment, as the README says
# (no index: nothing may be downloaded), against the installed library found through the
# loader path. The venv's interpreter is the system's (python3-venv).
cp -r "$src/python" "$tmp/pysrc"
rm -rf "$tmp/pysrc/build" "$tmp/pysrc"/*.egg-info
"$py" -m venv "$tmp/venv" >"$tmp/venv.log" 2>&1 ||
  { cat "$tmp/venv.log"; echo "python3 -m venv failed (python3-venv)"; exit 1; }
(cd "$tmp" && "$tmp/venv/bin/pip" install --quiet --no-index "$tmp/pysrc") >"$tmp/pip.log" 2>&1 ||
  { cat "$tmp/pip.log"; echo "pip install ./python failed in a fresh venv"; exit 1; }
pipsite="$("$tmp/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
[ -e "$pipsite/pagellm/__init__.py" ] || { echo "pip did not install the package"; exit 1; }
[ ! -e "$pipsite/pagellm/_install.py" ] || { echo "pip installed meson's _install.py"; exit 1; }
for left in "$tmp/pysrc/build" "$tmp/pysrc/pagellm.egg-info"; do
  [ ! -e "$left" ] || { echo "pip install left $left in the source"; exit 1; }
done
LD_LIBRARY_PATH="$libdir" "$tmp/venv/bin/python" "$tmp/use.py" "$libdir" >/dev/null ||
  { echo "the pip-installed package failed"; exit 1; }
echo "install check passed"
