"""A PEP 517 build backend for the pagellm package that needs nothing but the standard
library, so that `pip install ./python` works in a fresh virtual environment with no package
index (pip's build isolation then installs nothing: pyproject.toml requires nothing).

The package is pure Python: a wheel is a zip of pagellm/*.py and its .dist-info (METADATA from
pyproject.toml's [project] table, WHEEL, RECORD). Nothing is written into the source folder
(no build/, no .egg-info)."""
import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # python/
TAG = "py3-none-any"


def _project():
    """pyproject.toml's [project] table: tomllib where Python has it (3.11+), else the
    simple 'key = "value"' lines the file uses."""
    path = os.path.join(HERE, "pyproject.toml")
    try:
        import tomllib
        with open(path, "rb") as f:
            return tomllib.load(f)["project"]
    except ImportError:
        pass
    out, section = {}, None
    with open(path, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"\s*\[([^\]]+)\]", line)
            if m:
                section = m.group(1).strip()
            elif section == "project":
                m = re.match(r'\s*([\w-]+)\s*=\s*"([^"]*)"', line)
                if m:
                    out[m.group(1)] = m.group(2)
    return out


def _metadata():
    p = _project()
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {p['version']}",
             f"Summary: {p.get('description', '')}"]
    if "requires-python" in p:
        lines.append(f"Requires-Python: {p['requires-python']}")
    lic = p.get("license")
    if isinstance(lic, dict) and "text" in lic:
        lines.append(f"License: {lic['text']}")
    for extra, reqs in (p.get("optional-dependencies") or {}).items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {r}; extra == "{extra}"' for r in reqs]
    readme = os.path.join(HERE, "README.md")
    text = "\n".join(lines) + "\n"
    if os.path.exists(readme):
        with open(readme, encoding="utf-8") as f:
            text += "Description-Content-Type: text/markdown\n\n" + f.read()
    return p["name"], p["version"], text


def _files():
    """The package's modules, relative to python/ (meson's _install.py.in stays out: only
    meson install fills it in)."""
    pkg = os.path.join(HERE, "pagellm")
    return sorted(os.path.join("pagellm", n) for n in os.listdir(pkg) if n.endswith(".py"))


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _wheel(wheel_directory, contents):
    """Writes a wheel of contents ({archive name: bytes}) and returns its file name."""
    name, version, metadata = _metadata()
    dist = f"{name}-{version}.dist-info"
    contents = dict(contents)
    contents[f"{dist}/METADATA"] = metadata.encode()
    contents[f"{dist}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: pagellm_build\n"
                                 f"Root-Is-Purelib: true\nTag: {TAG}\n").encode()
    contents[f"{dist}/top_level.txt"] = f"{name}\n".encode()
    record = [_record_line(n, d) for n, d in contents.items()] + [f"{dist}/RECORD,,"]
    contents[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    fname = f"{name}-{version}-{TAG}.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, fname), "w",
                         zipfile.ZIP_DEFLATED) as z:
        for n, d in contents.items():
            info = zipfile.ZipInfo(n, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, d)
    return fname


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    contents = {}
    for rel in _files():
        with open(os.path.join(HERE, rel), "rb") as f:
            contents[rel.replace(os.sep, "/")] = f.read()
    return _wheel(wheel_directory, contents)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    """A wheel holding a .pth file that puts python/ on sys.path: edits take effect at once."""
    return _wheel(wheel_directory, {"pagellm_editable.pth": (HERE + "\n").encode()})


def build_sdist(sdist_directory, config_settings=None):
    name, version, _ = _metadata()
    base = f"{name}-{version}"
    fname = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, fname), "w:gz") as t:
        for rel in ["pyproject.toml", "README.md", os.path.join("_build", "pagellm_build.py")] \
                + _files():
            t.add(os.path.join(HERE, rel), arcname=f"{base}/{rel}")
    return fname


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []
