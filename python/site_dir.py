#!/usr/bin/env python3
"""Where meson install puts the Python package, and the library relative to it.

Prints two lines: the site directory for PREFIX (absolute), and the path of the installed
libpagellm from the package folder (relative, so the package finds the library also when
the install is staged with --destdir or moved with its prefix).

The site directory is the one of this Python's search path that lies under PREFIX (on
Debian, /usr/local/lib/python3.X/dist-packages for /usr/local and /usr/lib/python3/
dist-packages for /usr: Meson's own choice for /usr/local, lib/python3/dist-packages, is not
on Debian's path); for any other prefix, PREFIX/lib/python3.X/site-packages, which is what
PYTHONPATH then names.

Usage: site_dir.py PREFIX LIBDIR SONAME [PURELIBDIR]   (LIBDIR may be relative to PREFIX;
PURELIBDIR, from -Dpython.purelibdir, wins when given)
"""
import os
import site
import sys
import sysconfig


def site_dir(prefix: str) -> str:
    for d in site.getsitepackages():
        rel = os.path.relpath(d, prefix)
        if not rel.startswith("..") and rel.split(os.sep)[0] == "lib":
            return d
    return sysconfig.get_path("purelib", "posix_prefix", vars={"base": prefix,
                                                               "platbase": prefix})


def main():
    prefix, libdir, soname = sys.argv[1:4]
    purelib = sys.argv[4] if len(sys.argv) > 4 and sys.argv[4] else ""
    d = os.path.join(prefix, purelib) if purelib else site_dir(prefix)
    lib = os.path.join(prefix, libdir, soname)
    print(d)
    print(os.path.relpath(lib, os.path.join(d, "pagellm")))


if __name__ == "__main__":
    main()
