"""The codebase stays lint-clean, typed across its rooms, and layered.

The rooms (``probes`` -> ``knowledge`` -> ``engine`` -> ``tui``) and the direction
their imports take are import-linter contracts in ``pyproject.toml``; these tests
run them, and check what the headless and export paths really load.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def run(*command: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300)


def test_ruff_is_clean() -> None:
    result = run(str(BIN / "ruff"), "check", "--output-format", "concise", ".")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean() -> None:
    result = run(sys.executable, "-m", "mypy")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_sees_across_rooms(tmp_path: Path) -> None:
    """A wrong call from one room into another is a type error, not ``Any``.

    Before the rooms were visible to mypy every ``from aitop.x import y`` typed
    as ``Any`` and this file passed. It is checked with the project's own
    configuration (the ``.typecheck`` tree of the real folders).
    """
    bad = tmp_path / "cross_room_misuse.py"
    bad.write_text(textwrap.dedent("""\
        from aitop.engine.live.attach import AttachOptions
        from aitop.knowledge.base.findings import Diagnosis
        from aitop.probes.session import Session

        def misuse(session: Session, diagnosis: Diagnosis) -> None:
            session.add_sample(1)
            label: int = diagnosis.summary
            AttachOptions(window_s="twenty")
        """))
    result = run(sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                 str(bad))
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    assert '"Session" has no attribute "add_sample"' in out, out
    assert 'expression has type "str", variable has type "int"' in out, out
    assert '"window_s" to "AttachOptions" has incompatible type "str"' in out, out


def test_import_contracts_are_kept() -> None:
    result = run(str(BIN / "lint-imports"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BROKEN" not in result.stdout
    # Every contract ran, the layers among them.
    assert "tui -> engine -> knowledge -> probes" in result.stdout
    assert "Inside engine: cli -> commands -> (headless | fleet)" in result.stdout


ROOMS = ("aitop.probes", "aitop.knowledge", "aitop.engine", "aitop.tui", "aitop.demo")


def import_cycles(*roots: str) -> list[list[str]]:
    """Every set of modules that import each other in a circle (Tarjan's SCCs).

    grimp reads every import statement, those inside functions too: a circle
    kept alive by a late import is still a circle.
    """
    import grimp

    graph = grimp.build_graph(*roots)
    edges = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return cycles


def test_no_import_cycle_in_the_product() -> None:
    assert import_cycles(*ROOMS) == []


def test_an_import_cycle_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cycle finder itself: a late import closing a circle counts."""
    pkg = tmp_path / "circle"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from circle import b\n")
    (pkg / "b.py").write_text("def late():\n    from circle import a\n")
    (pkg / "c.py").write_text("from circle import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles("circle") == [["circle.a", "circle.b"]]


LOADED = (
    "import sys\n"
    "{code}\n"
    "bad = sorted({{m.split('.')[0] for m in sys.modules}} & {{'textual', 'rich', 'torch'}})\n"
    "print(','.join(bad))\n"
)


@pytest.mark.parametrize(
    "code",
    [
        # The modules the headless command runs through.
        "import aitop.tui.entry, aitop.engine.cli, aitop.engine.headless.run",
        # The --export path: snapshot -> Markdown report -> key metrics and verdicts.
        "import aitop.engine.headless.export, aitop.engine.reports.key_metrics\n"
        "import aitop.knowledge.judging.verdicts, aitop.knowledge.evaluator\n"
        "import aitop.probes.collector",
    ],
    ids=["headless", "export"],
)
def test_headless_and_export_paths_load_no_ui(code: str) -> None:
    """What these paths import, checked in a fresh interpreter."""
    result = run(sys.executable, "-c", LOADED.format(code=code))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "", f"loaded: {result.stdout}"


def test_headless_export_run_loads_no_ui(tmp_path: Path) -> None:
    """A whole headless run with ``--export`` of a recording, end to end."""
    from aitop.engine.headless.export import write_snapshot
    from support.tui_session import replay_source

    recording = tmp_path / "rec.json"
    write_snapshot(recording, replay_source())
    code = (
        "import sys\n"
        "from aitop.tui.entry import main\n"
        f"rc = main(['replay', '--headless', '--json', {str(recording)!r}])\n"
        "bad = sorted({m.split('.')[0] for m in sys.modules} & {'textual', 'rich', 'torch'})\n"
        "print('LOADED=' + ','.join(bad), file=sys.stderr)\n"
        "raise SystemExit(rc)\n"
    )
    result = run(sys.executable, "-c", code)
    assert result.returncode == 0, result.stderr
    assert "LOADED=\n" in result.stderr, result.stderr
    assert '"schema": "aitop.report/2"' in result.stdout


def setup_arguments(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What setup.py hands setuptools, captured instead of built."""
    import runpy

    import setuptools

    captured: dict[str, Any] = {}
    monkeypatch.setattr(setuptools, "setup", lambda **kwargs: captured.update(kwargs))
    monkeypatch.chdir(ROOT)
    runpy.run_path(str(ROOT / "setup.py"))
    return captured


def test_every_package_of_the_rooms_is_in_the_wheel(monkeypatch: pytest.MonkeyPatch) -> None:
    """setup.py finds the packages in the tree: every folder holding an __init__.py
    under a room is a package of the wheel (a folder missing there is missing from
    the wheel, and an installed aitop fails where it imports it), and the rooms are
    the import contracts' root packages."""
    setup = setup_arguments(monkeypatch)
    found = set()
    for name, folder in setup["package_dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((name, *rel)))
    listed = set(setup["packages"])
    assert found == listed, f"missing from the wheel: {sorted(found - listed)}; " \
                            f"listed without a folder: {sorted(listed - found)}"
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert set(contracts["root_packages"]) == set(setup["package_dir"])
