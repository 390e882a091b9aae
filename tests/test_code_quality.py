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

import pytest

ROOT = Path(__file__).resolve().parents[1]
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
        from aitop.engine.live import AttachOptions
        from aitop.knowledge.model import Diagnosis
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
        "import aitop.tui.entry, aitop.engine.cli, aitop.engine.live, aitop.engine.report",
        # The --export path: snapshot -> Markdown report -> key metrics and verdicts.
        "import aitop.engine.snapshot, aitop.engine.report_md, aitop.engine.key_metrics\n"
        "import aitop.knowledge.verdicts, aitop.knowledge.evaluator, aitop.probes.collector",
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
    from aitop.engine.snapshot import write_snapshot
    from fixtures.tui_session import replay_source

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
