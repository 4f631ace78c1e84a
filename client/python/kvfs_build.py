# SPDX-License-Identifier: MIT
"""
The kvfs package's build backend (PEP 517), standard library only.

pip builds a package in an isolated environment into which it first
installs the backend the package names; setuptools' backend would be
fetched from the network there, so `pip install ./client/python` would fail
on a machine without one. kvfs is pure Python, so its wheel is a zip of the
package plus its metadata (PEP 427, core metadata 2.1 from pyproject.toml's
[project] table), which this module writes with nothing to install:

    build_wheel      kvfs-VERSION-py3-none-any.whl
    build_sdist      kvfs-VERSION.tar.gz (pyproject.toml, this file, README, kvfs/)
    build_editable   a wheel holding one .pth line that points at this folder (PEP 660)
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = "kvfs"
TAG = "py3-none-any"


def _project():
    """pyproject.toml's [project] table: name, version, description, requires-python."""
    with open(os.path.join(HERE, "pyproject.toml"), "rb") as f:
        text = f.read().decode()
    try:
        import tomllib
        return tomllib.loads(text)["project"]
    except ImportError:  # Python < 3.11: the plain `key = "value"` lines of [project]
        table = re.search(r"^\[project\]\n(.*?)(?=^\[|\Z)", text, re.M | re.S).group(1)
        return dict(re.findall(r'^([\w-]+)\s*=\s*"([^"]*)"', table, re.M))


def _metadata(p):
    lines = ["Metadata-Version: 2.1", "Name: " + p["name"], "Version: " + p["version"]]
    if p.get("description"):
        lines.append("Summary: " + p["description"])
    if p.get("requires-python"):
        lines.append("Requires-Python: " + p["requires-python"])
    lines.append("License: MIT")
    return "\n".join(lines) + "\n"


def _files():
    """(archive name, path) of every module of the package, sorted."""
    out = []
    for root, dirs, names in os.walk(os.path.join(HERE, PACKAGE)):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for n in sorted(names):
            if n.endswith(".py"):
                path = os.path.join(root, n)
                out.append((os.path.relpath(path, HERE), path))
    return out


def _wheel(directory, entries):
    """Writes a wheel of entries (name, bytes) plus its dist-info; returns its file name."""
    p = _project()
    dist = "%s-%s" % (p["name"], p["version"])
    info = dist + ".dist-info/"
    entries = list(entries) + [
        (info + "METADATA", _metadata(p).encode()),
        (info + "WHEEL", ("Wheel-Version: 1.0\nGenerator: kvfs_build\nRoot-Is-Purelib: true\n"
                          "Tag: %s\n" % TAG).encode()),
    ]
    record = []
    for name, data in entries:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (name, digest, len(data)))
    record.append(info + "RECORD,,")
    entries.append((info + "RECORD", ("\n".join(record) + "\n").encode()))
    filename = "%s-%s.whl" % (dist, TAG)
    with zipfile.ZipFile(os.path.join(directory, filename), "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries:
            z.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
    return filename


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, [(name, _read(path)) for name, path in _files()])


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, [("__editable__.kvfs.pth", (HERE + "\n").encode())])


def build_sdist(sdist_directory, config_settings=None):
    p = _project()
    base = "%s-%s" % (p["name"], p["version"])
    filename = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz") as t:
        members = [("pyproject.toml", os.path.join(HERE, "pyproject.toml")),
                   ("kvfs_build.py", os.path.join(HERE, "kvfs_build.py")),
                   ("README.md", os.path.join(HERE, "README.md"))] + _files()
        for name, path in members:
            data = _read(path)
            info = tarfile.TarInfo("%s/%s" % (base, name))
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
        meta = _metadata(p).encode()
        info = tarfile.TarInfo(base + "/PKG-INFO")
        info.size = len(meta)
        t.addfile(info, io.BytesIO(meta))
    return filename
