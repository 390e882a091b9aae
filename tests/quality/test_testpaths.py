"""Every folder of tests is collected: pyproject's ``testpaths`` is a hand-kept list,
and a folder left off it is never run by the README's test command (nor by CI),
however much its tools are installed for it."""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest itself depends on tomli before Python 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


def listed_paths(pyproject: Path) -> list[Path]:
    """The folders ``pytest`` collects when given none, as absolute paths."""
    options = tomllib.loads(pyproject.read_text())["tool"]["pytest"]["ini_options"]
    return [(pyproject.parent / entry).resolve() for entry in options["testpaths"]]


def uncollected(tests: Path, collected: list[Path]) -> list[str]:
    """Folders under ``tests`` holding ``test_*.py`` files that no entry contains."""
    folders = {path.parent.resolve() for path in tests.rglob("test_*.py")}
    return sorted(str(folder.relative_to(tests.parent)) for folder in folders
                  if not any(folder.is_relative_to(entry) for entry in collected))


def test_every_folder_with_tests_is_in_testpaths() -> None:
    collected = listed_paths(ROOT / "pyproject.toml")
    assert uncollected(ROOT / "tests", collected) == []
    assert [str(p) for p in collected if not p.is_dir()] == []


def test_a_folder_left_out_is_found(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\ntestpaths = ["tests/unit"]\n')
    for name in ("tests/unit/deep/test_a.py", "tests/new/test_b.py", "tests/support/jobs.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    assert uncollected(tmp_path / "tests", listed_paths(tmp_path / "pyproject.toml")) == [
        "tests/new"]


def shared_basenames(tests: Path) -> list[str]:
    """Test files whose names repeat in another folder: with no ``__init__.py``,
    pytest imports each by its basename and refuses the second one it meets."""
    names = [path.name for path in tests.rglob("test_*.py")]
    return sorted({name for name in names if names.count(name) > 1})


def test_every_test_file_has_a_name_of_its_own() -> None:
    assert shared_basenames(ROOT / "tests") == []


def test_a_repeated_name_is_found(tmp_path: Path) -> None:
    for name in ("unit/test_a.py", "attach/test_a.py", "attach/test_b.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    assert shared_basenames(tmp_path) == ["test_a.py"]
