"""Every read of /proc and /sys/fs/cgroup goes through one door: ``probes/kernel/``.

A path there is written nowhere else in the product rooms: no string or
f-string starting with ``/proc`` or ``/sys/fs/cgroup`` (documentation aside), and
no path built under a ``proc_root``/``cgroup_root`` (``f"{proc_root}/{pid}"``,
``os.path.join(self._proc_root, ...)``, ``Path(proc_root) / ...``). Modules pass
a root on to the door, and the door alone opens, lists or follows what is under
it. The checker is proved to fail on snippets that break the rule.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROOMS = ("probes", "knowledge", "engine", "tui")
#: The door, relative to a checkout's root.
DOOR = Path("probes") / "kernel"
KERNEL_PATHS = ("/proc", "/sys/fs/cgroup")
#: What a variable holding a kernel tree's root is called.
ROOT_WORDS = ("proc_root", "cgroup_root")


def _kernel_path(text: str) -> bool:
    return any(text == p or text.startswith(p + "/") for p in KERNEL_PATHS)


def _names_a_root(node: ast.AST) -> bool:
    """``proc_root``, ``self._proc_root``, ``Path(proc_root)``, ``str(cgroup_root)``."""
    if isinstance(node, ast.Name):
        return any(word in node.id for word in ROOT_WORDS)
    if isinstance(node, ast.Attribute):
        return any(word in node.attr for word in ROOT_WORDS)
    if isinstance(node, ast.Call) and node.args:
        return _names_a_root(node.args[0])
    return False


def _documentation(tree: ast.AST) -> set[int]:
    """Ids of the strings that are documentation: statements that are only a string."""
    return {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}


def offences(source: str, filename: str = "<snippet>") -> list[str]:
    """``file:line: what`` for each kernel path written or built outside the door."""
    tree = ast.parse(source, filename)
    docs = _documentation(tree)
    found: list[str] = []
    for node in ast.walk(tree):
        what = None
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in docs and _kernel_path(node.value)):
            what = f"kernel path {node.value!r}"
        elif (isinstance(node, ast.JoinedStr) and node.values
              and isinstance(node.values[0], ast.FormattedValue)
              and _names_a_root(node.values[0].value)):
            what = "f-string path under a kernel root"
        elif (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)
              and _names_a_root(node.left)):
            what = "Path under a kernel root"
        elif (isinstance(node, ast.Call) and node.args and _names_a_root(node.args[0])
              and ast.unparse(node.func) in ("os.path.join", "open", "os.open", "os.listdir",
                                             "os.scandir", "os.readlink", "os.stat",
                                             "glob.glob")):
            what = f"{ast.unparse(node.func)} under a kernel root"
        if what is not None:
            found.append(f"{filename}:{getattr(node, 'lineno', '?')}: {what}")
    return found


def offences_in(checkout: Path) -> list[str]:
    """Every offence in the product rooms of a checkout, the door left out."""
    found: list[str] = []
    for room in ROOMS:
        for path in sorted((checkout / room).rglob("*.py")):
            relative = path.relative_to(checkout)
            if DOOR in relative.parents:
                continue
            found.extend(offences(path.read_text(encoding="utf-8"), str(relative)))
    return found


def test_only_the_door_reads_proc_and_cgroups() -> None:
    assert offences_in(ROOT) == []


OFFENDING = [
    'open("/proc/self/statm")',
    'Path(f"/proc/{pid}/environ").read_text()',
    'os.scandir("/sys/fs/cgroup/cpu")',
    'base = f"/proc/{pid}"\nos.listdir(f"{base}/fd")',
    'os.listdir(f"{proc_root}/{pid}/fd")',
    'os.readlink(os.path.join(self._proc_root, str(pid), "exe"))',
    '(Path(proc_root) / str(pid) / "comm").read_text()',
    'read_text(f"{cgroup_root}/cpu/cpu.max")',
    'def probe(proc_root: str = "/proc") -> None: ...',
]


@pytest.mark.parametrize("snippet", OFFENDING)
def test_the_check_fails_on_a_kernel_path_outside_the_door(snippet: str) -> None:
    assert offences(snippet), snippet


def test_documentation_and_the_doors_own_calls_pass() -> None:
    clean = textwrap.dedent('''\
        """Reads /proc/PID/environ and /sys/fs/cgroup through the door."""
        from aitop.probes.kernel.procfs import PROC, read_environ

        def rank(pid: int, proc_root: str = PROC) -> str | None:
            """The rank in ``/proc/PID/environ``."""
            return (read_environ(pid, proc_root) or {}).get("RANK")

        label = "target: waiting for /proc"
        ''')
    assert offences(clean) == []


def test_an_offending_module_is_found_in_a_room_and_allowed_in_the_door(
        tmp_path: Path) -> None:
    for folder in ("probes/kernel", "probes", "tui"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
    reader = 'def rss():\n    with open("/proc/self/statm") as fh:\n        return fh.read()\n'
    (tmp_path / "probes" / "kernel" / "statm.py").write_text(reader)
    assert offences_in(tmp_path) == []
    (tmp_path / "tui" / "memory.py").write_text(reader)
    assert offences_in(tmp_path) == ["tui/memory.py:2: kernel path '/proc/self/statm'"]
