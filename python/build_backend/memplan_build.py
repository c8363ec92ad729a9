"""A small PEP 517 backend for the memplan Python package (pyproject.toml's backend-path).

It needs nothing from PyPI: CMake builds the pybind11 module and the memplan binary with the
Debian packages tools/deps.sh installs, and the wheel is written with the standard library, so
``pip install --no-build-isolation .`` works offline. The build folder is build-python/ (or
$MEMPLAN_PY_BUILD_DIR) and is kept, so a second install only relinks what changed.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAME = "memplan"


def _version() -> str:
    m = re.search(r"project\(memplan VERSION ([0-9.]+)", (ROOT / "CMakeLists.txt").read_text())
    return m.group(1) if m else "0.0.0"


def _metadata() -> str:
    return (
        "Metadata-Version: 2.1\n"
        f"Name: {NAME}\n"
        f"Version: {_version()}\n"
        "Summary: Will this training config fit on my GPU? GPU memory of LLM training steps, in process\n"
        "License: MIT\n"
        "Requires-Python: >=3.8\n"
        "Provides-Extra: transformers\n"
        "Provides-Extra: lightning\n"
    )


def _tag() -> str:
    impl = f"cp{sys.version_info.major}{sys.version_info.minor}"
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{impl}-{impl}-{platform}"


def _build_dir() -> Path:
    return Path(os.environ.get("MEMPLAN_PY_BUILD_DIR", ROOT / "build-python"))


def _cmake_build() -> Path:
    build = _build_dir()
    configure = ["cmake", "-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_TESTING=OFF",
                 f"-DPython3_EXECUTABLE={sys.executable}", "-DMEMPLAN_PYTHON=ON"]
    subprocess.run(configure, check=True, stdout=sys.stderr)
    jobs = str(os.cpu_count() or 2)
    subprocess.run(["cmake", "--build", str(build), "-j", jobs, "--target", "_memplan", "memplan"], check=True,
                   stdout=sys.stderr)
    return build


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    build = _cmake_build()
    package = build / "python" / NAME
    modules = list(package.glob("_memplan*.so"))
    if not modules:
        raise RuntimeError(f"the build made no module under {package}: is pybind11-dev installed?")
    files: dict[str, bytes] = {}
    for path in sorted(package.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts:
            files[f"{NAME}/{path.relative_to(package).as_posix()}"] = path.read_bytes()
    version = _version()
    data = f"{NAME}-{version}.data"
    files[f"{data}/scripts/memplan"] = (build / "src" / "memplan").read_bytes()
    info = f"{NAME}-{version}.dist-info"
    files[f"{info}/METADATA"] = _metadata().encode()
    files[f"{info}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: memplan_build\nRoot-Is-Purelib: false\n"
                              f"Tag: {_tag()}\n").encode()
    files[f"{info}/LICENSE"] = (ROOT / "LICENSE").read_bytes()
    record = [_record_line(name, data_) for name, data_ in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel_name = f"{NAME}-{version}-{_tag()}.whl"
    with zipfile.ZipFile(Path(wheel_directory) / wheel_name, "w", zipfile.ZIP_DEFLATED) as z:
        for name, content in files.items():
            zi = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            executable = name.endswith(".so") or name.endswith("/scripts/memplan")
            zi.external_attr = (0o755 if executable else 0o644) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, content)
    return wheel_name


def build_sdist(sdist_directory, config_settings=None):
    """The tracked source tree (git ls-files), or the tree without build folders outside git."""
    version = _version()
    base = f"{NAME}-{version}"
    try:
        listed = subprocess.run(["git", "ls-files"], cwd=ROOT, check=True, capture_output=True, text=True).stdout
        paths = [p for p in listed.splitlines() if p]
    except (OSError, subprocess.CalledProcessError):
        paths = [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*")
                 if p.is_file() and not p.relative_to(ROOT).parts[0].startswith(("build", ".git"))]
    name = f"{base}.tar.gz"
    with tarfile.open(Path(sdist_directory) / name, "w:gz") as tar:
        for p in paths:
            tar.add(ROOT / p, arcname=f"{base}/{p}", recursive=False)
        pkg = (f"{_metadata()}").encode()
        info = tarfile.TarInfo(f"{base}/PKG-INFO")
        info.size = len(pkg)
        import io
        tar.addfile(info, io.BytesIO(pkg))
    return name
