#!/usr/bin/env bash
# Installs the build into a temporary DESTDIR and builds a user program against it with
# pkg-config, then runs it: header, shared library exports and pagellm.pc must agree.
# Usage: check_install.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build="$1"
src="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
DESTDIR="$tmp/root" meson install -C "$build" --no-rebuild --quiet >/dev/null
pc="$(dirname "$(find "$tmp/root" -name pagellm.pc | head -n 1)")"
[ -n "$pc" ] || { echo "pagellm.pc was not installed"; exit 1; }
export PKG_CONFIG_PATH="$pc"
export PKG_CONFIG_SYSROOT_DIR="$tmp/root"
flags="$(pkg-config --cflags --libs pagellm)"
libdir="$(dirname "$(find "$tmp/root" -name 'libpagellm.so' | head -n 1)")"
# a sanitizer build's library needs the program built with the same runtime
san=""
case "$(ldd "$libdir/libpagellm.so")" in *libasan*) san="-fsanitize=address,undefined" ;; esac
cc -std=c11 -Wall -Werror $san "$src/tests/unit/install_example.c" -o "$tmp/example" $flags
LD_LIBRARY_PATH="$libdir" "$tmp/example"
# the program must have used the shared library, not a static copy
# (no `ldd | grep -q`: with pipefail, grep closing the pipe early fails the check)
case "$(LD_LIBRARY_PATH="$libdir" ldd "$tmp/example")" in
*libpagellm.so*) ;;
*) echo "not linked to libpagellm.so"; exit 1 ;;
esac
echo "install check passed"
