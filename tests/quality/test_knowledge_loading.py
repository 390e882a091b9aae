"""The knowledge base is loaded where a run starts, and handed on from there.

A ``load_knowledge_base()`` inside a reader (a verdict, a panel, a report, a
replay's straggler flag) reads the packaged files only, so a user's ``--rules``
would reach the verdict and not that reader. In the product rooms the loader
is called only by the commands (``engine/commands/``) and by the attachment
(``engine/live/attach.py``), always with the run's rule files.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROOMS = ("probes", "knowledge", "engine", "tui", "demo")
LOADER = "load_knowledge_base"
#: Where a run starts: the only modules that may call the loader.
ENTRY_POINTS = ("engine/commands/", "engine/live/attach.py")
#: The loader's own module defines it.
DEFINED_IN = "knowledge/reading/loader.py"


def loader_uses(root: Path, rooms: tuple[str, ...] = ROOMS) -> list[str]:
    """``file:line: what`` for each call or import of the loader that breaks the rule."""
    found: list[str] = []
    for room in rooms:
        for path in sorted((root / room).rglob("*.py")):
            name = path.relative_to(root).as_posix()
            if name == DEFINED_IN:
                continue
            entry = name.startswith(ENTRY_POINTS)
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), name)):
                if isinstance(node, ast.ImportFrom) and not entry and any(
                        alias.name == LOADER for alias in node.names):
                    found.append(f"{name}:{node.lineno}: imports {LOADER}")
                elif isinstance(node, ast.Call) and _names_loader(node.func):
                    if not entry:
                        found.append(f"{name}:{node.lineno}: calls {LOADER}")
                    elif not node.args and not node.keywords:
                        found.append(f"{name}:{node.lineno}: calls {LOADER}() without "
                                     "the run's rule files")
    return found


def _names_loader(func: ast.expr) -> bool:
    return (isinstance(func, ast.Name) and func.id == LOADER) or (
        isinstance(func, ast.Attribute) and func.attr == LOADER)


def test_only_the_entry_points_load_the_knowledge_base() -> None:
    assert loader_uses(ROOT) == []


def test_a_reader_loading_its_own_is_found(tmp_path: Path) -> None:
    """The check itself: a reader's call, an import under another name, a call
    through the module, and an entry point's call without the rule files."""
    (tmp_path / "tui").mkdir()
    (tmp_path / "tui" / "panel.py").write_text(
        "from aitop.knowledge.reading.loader import load_knowledge_base as kb\n"
        "from aitop.knowledge.reading import loader\n"
        "def colour():\n"
        "    return loader.load_knowledge_base().facts.targets\n")
    commands = tmp_path / "engine" / "commands"
    commands.mkdir(parents=True)
    (commands / "replay.py").write_text(
        "from aitop.knowledge.reading.loader import load_knowledge_base\n"
        "def run(args):\n"
        "    good = load_knowledge_base(args.rules)\n"
        "    return load_knowledge_base()\n")
    assert loader_uses(tmp_path, ("tui", "engine")) == [
        "tui/panel.py:1: imports load_knowledge_base",
        "tui/panel.py:4: calls load_knowledge_base",
        "engine/commands/replay.py:4: calls load_knowledge_base() without the run's "
        "rule files",
    ]
