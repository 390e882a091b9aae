"""What the figures were measured on, and what code they describe.

The machine is recorded (cores, CPU model, RAM, load) because every figure here
depends on it, and the git commit (plus whether the engine's working tree had
uncommitted changes) because aitop's cadences are being tuned from these very
numbers.
"""

from __future__ import annotations

import compileall
import os
import platform
import subprocess
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from .jobs import REPO


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _ram_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024 / 1024
    except (OSError, ValueError):
        pass
    return None


def _version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _nproc() -> str:
    try:
        return subprocess.run(["nproc"], capture_output=True, text=True,
                              timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return str(os.cpu_count())


#: The folders the ``aitop`` package maps to (pyproject's ``package-dir``).
PACKAGE_DIRS = ("engine", "probes", "knowledge", "tui", "demo")


def compile_bytecode() -> bool:
    """Write aitop's bytecode, as ``pip install`` does for the wheel it installs.

    An editable checkout has none, and with ``PYTHONDONTWRITEBYTECODE`` set (as on
    CI boxes and in containers) every start compiles each module again, which a
    user's install does not pay (docs/benchmarks.md, First frame and keys in a
    real terminal). Start-up figures are the installed program's.
    """
    return all([compileall.compile_dir(str(REPO / folder), quiet=1) for folder in PACKAGE_DIRS])


def load_average() -> tuple[float, float, float]:
    return os.getloadavg()


def machine_info() -> dict[str, Any]:
    dirty = [line[3:] for line in _git("status", "--porcelain").splitlines()
             if line[3:].startswith(("probes/", "knowledge/", "tui/"))]
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "nproc": _nproc(),
        "cpu_model": _cpu_model(),
        "ram_gib": _ram_gib(),
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "torch": _version("torch"),
        "textual": _version("textual"),
        "py_spy": _version("py-spy"),
        "git_commit": _git("rev-parse", "--short", "HEAD"),
        "engine_uncommitted": dirty,
        "load_average_start": load_average(),
        "bytecode": "compiled, as pip install does" if compile_bytecode() else "not compiled",
    }
