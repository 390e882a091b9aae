"""A /proc and /sys/fs/cgroup tree laid out as the kernel lays them out, on disk.

The readers of ``aitop.probes.kernel`` take ``proc_root`` and ``cgroup_root``;
pointed here they read real files in the kernel's formats. Both cgroup layouts
are built as a machine mounts them:

* v1: one hierarchy a controller (or a few together), ``cgroup/<name>/<group>/``,
  with ``/proc/PID/cgroup`` lines such as ``4:cpu,cpuacct:/kubepods/pod7``;
* v2: one unified hierarchy at ``cgroup/`` itself (its root holds
  ``cgroup.controllers``), ``0::/group``; a hybrid machine has its v1
  hierarchies beside an empty v2 one at ``cgroup/unified/``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

#: What the kernel writes for "no limit": v1's memory limit (the largest
#: page-aligned 64-bit value), v1's CPU quota, v2's everything.
V1_NO_MEMORY_LIMIT = "9223372036854771712"
V1_NO_QUOTA = "-1"
V2_NO_LIMIT = "max"


def _write(directory: Path, files: Mapping[str, str | bytes]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return directory


class KernelTree:
    """A fake ``/proc`` (``.proc``) and ``/sys/fs/cgroup`` (``.cgroup``) under ``base``."""

    def __init__(self, base: Path) -> None:
        self.proc = base / "proc"
        self.cgroup = base / "sys" / "fs" / "cgroup"
        self.proc.mkdir(parents=True, exist_ok=True)
        self.cgroup.mkdir(parents=True, exist_ok=True)

    @property
    def roots(self) -> tuple[str, str]:
        """``(proc_root, cgroup_root)``, as the readers take them."""
        return str(self.proc), str(self.cgroup)

    def process(self, pid: int | str, *, cgroup: str | None = None,
                environ: Mapping[str, str] | None = None,
                cmdline: tuple[str, ...] | None = None,
                files: Mapping[str, str | bytes] | None = None) -> Path:
        """``/proc/PID`` with the files given (``cgroup`` is the file's text)."""
        content: dict[str, str | bytes] = dict(files or {})
        if cgroup is not None:
            content["cgroup"] = cgroup
        if environ is not None:
            content["environ"] = b"".join(f"{k}={v}\0".encode() for k, v in environ.items())
        if cmdline is not None:
            content["cmdline"] = b"".join(f"{a}\0".encode() for a in cmdline)
        return _write(self.proc / str(pid), content)

    def v1(self, hierarchy: str, group: str, files: Mapping[str, str]) -> Path:
        """A v1 group's files, in the hierarchy mounted at ``cgroup/<hierarchy>``
        (``cpu``, ``memory``, or ``cpu,cpuacct`` where they share one)."""
        return _write(self.cgroup / hierarchy / group.lstrip("/"), files)

    def v2(self, group: str, files: Mapping[str, str], *, hybrid: bool = False,
           controllers: str = "cpuset cpu io memory pids") -> Path:
        """A v2 group's files: at ``cgroup/`` on a v2-only machine (whose root lists
        its ``controllers``), at ``cgroup/unified/`` on a hybrid one."""
        if hybrid:
            base = self.cgroup / "unified"
        else:
            base = self.cgroup
            if not (base / "cgroup.controllers").exists():
                _write(base, {"cgroup.controllers": controllers + "\n"})
        return _write(base / group.lstrip("/"), files)
