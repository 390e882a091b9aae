"""aitop installed by its name: a wheel built from the files a fresh clone has,
installed into a fresh virtual environment and with pipx, runs ``aitop``.

The distribution is ``torch-aitop`` (PyPI's ``aitop`` is another project); the
command and the import package stay ``aitop``. The wheel's own dependencies come
from the package index, as they would for a user.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from support.processes import sleeping

ROOT = Path(__file__).resolve().parents[2]


def run(command: list[str], *, timeout: float = 300, **kwargs: object) -> str:
    """The command's stdout; its whole output in the failure if it fails."""
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                            stdin=subprocess.DEVNULL, **kwargs)  # type: ignore[call-overload]
    assert result.returncode == 0, f"{command[:4]} exited {result.returncode}:\n" + (
        result.stdout[-3000:] + result.stderr[-3000:])
    return str(result.stdout)


def clone_files(dest: Path) -> Path:
    """The tracked files as they are now (what a fresh clone of this tree would hold)."""
    listed = run(["git", "ls-files", "-z"], cwd=ROOT).split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():  # a tracked file deleted in the work tree is not in the clone
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return dest


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not (ROOT / ".git").exists():
        pytest.fail("the wheel test builds from the tracked files: run it in a git clone")
    work = tmp_path_factory.mktemp("wheel")
    source = clone_files(work / "src")
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(work / "dist"), str(source)])
    wheels = list((work / "dist").glob("*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_the_wheel_is_named_torch_aitop_and_carries_the_knowledge_base(wheel: Path) -> None:
    assert wheel.name.startswith("torch_aitop-") and wheel.name.endswith("-py3-none-any.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "aitop/knowledge/data/rules.yaml" in names
    assert "aitop/engine/reports/aitop.report-2.schema.json" in names
    assert any(n.startswith("aitop/tui/") and n.endswith(".tcss") for n in names)
    # The product only: no tests, benchmarks or demo data of the checkout.
    assert not [n for n in names if n.startswith(("tests/", "benchmarks/", "aitop/tests"))]
    entry = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "aitop = aitop.tui.entry:main" in zipfile.ZipFile(wheel).read(entry).decode()


def check_installed(aitop: Path) -> None:
    """``aitop --version`` names the distribution, and a short headless run reports."""
    version = run([str(aitop), "--version"]).strip()
    assert version.startswith("aitop ") and version.endswith("(torch-aitop)"), version
    assert "not installed" not in version
    with sleeping(60) as target:
        out = run([str(aitop), "--pid", str(target.pid), "--headless", "--json",
                   "--duration", "3"], timeout=120, cwd=ROOT)
    report = json.loads(out)
    assert report["schema"] == "aitop.report/2"
    assert report["target"]["pid"] == target.pid
    assert report["aitop_version"] == version.split()[1]
    # py-spy came with the wheel's dependencies and attached.
    assert not report["probes"].get("stacks", "").startswith("unavailable"), report["probes"]


def test_the_wheel_installs_into_a_fresh_venv_and_runs(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    run([str(venv / "bin" / "pip"), "install", "-q", str(wheel)])
    check_installed(venv / "bin" / "aitop")


def test_pipx_installs_the_wheel_and_runs(wheel: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PIPX_HOME": str(tmp_path / "pipx"),
           "PIPX_BIN_DIR": str(tmp_path / "bin"), "PIPX_MAN_DIR": str(tmp_path / "man")}
    run([sys.executable, "-m", "pipx", "install", str(wheel)], env=env)
    check_installed(tmp_path / "bin" / "aitop")
