#!/usr/bin/env bash
# Installs the build as a Debian packager does (meson install --destdir into a staging root)
# and uses the result from there, through pkg-config with the staging root as its sysroot:
# - pkg-config --cflags gives the include directory and nothing else (pagellm.h includes only
#   libc headers: no dependency's include directory belongs there);
# - a program built with `pkg-config --cflags --libs pagellm` runs on the shared library;
# - the same program linked against the static archive with `pkg-config --static --libs`
#   runs, without libpagellm.so and without any CUDA library;
# - the installed pagellm runs, and its man page is installed.
# Usage: check_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build="$1"
src="$2"
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
static_libs="$(pkg-config --static --libs pagellm)"
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

# static: the archive in place of -lpagellm, the private flags for what it needs
cc -std=c11 -Wall -Werror $san "$src/tests/unit/install_example.c" -o "$tmp/example_static" \
  $cflags ${static_libs/-lpagellm/-l:libpagellm.a}
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
echo "install check passed"
