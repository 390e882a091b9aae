"""aitop installed by its name: a wheel built from the files a fresh clone has,
installed into a fresh virtual environment and with pipx, runs every command a
user runs, and none of them prints a Python traceback.

The distribution is ``torch-aitop`` (PyPI's ``aitop`` is another project); the
command and the import package stay ``aitop``. The wheel's own dependencies come
from the package index, as they would for a user. The fresh venv is installed with
the ``demo`` extra (PyTorch), the pipx one exactly as the README says (without), so
the demo is run once and its missing-PyTorch line once.

The wheel is built once for the module, each install made once and shared by the
tests (module-scoped fixtures); the commands run for seconds. The job attached to
is a small real PyTorch training loop.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock
from prometheus_client.parser import text_string_to_metric_families
from support.processes import started, wait_until
from support.prometheus import tool

from benchmarks.jobs import LIGHT_JOB

ROOT = Path(__file__).resolve().parents[2]
#: The product's rooms: each top-level folder is installed as ``aitop.<room>``.
ROOMS = ("probes", "knowledge", "engine", "tui", "demo")
TRACEBACK = "Traceback (most recent call last)"
#: The line ``aitop --serve`` prints once it listens, with the address it bound.
SERVING = re.compile(r"serving Prometheus metrics .* at (http://\S+/metrics)")


def run(command: list[str], *, timeout: float = 300, **kwargs: object) -> str:
    """The command's stdout; its whole output in the failure if it fails."""
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                            stdin=subprocess.DEVNULL, **kwargs)  # type: ignore[call-overload]
    assert result.returncode == 0, f"{command[:4]} exited {result.returncode}:\n" + (
        result.stdout[-3000:] + result.stderr[-3000:])
    return str(result.stdout)


def assert_no_traceback(output: str, what: str) -> None:
    assert TRACEBACK not in output, f"{what} printed a traceback:\n{output[-3000:]}"


@dataclass(frozen=True)
class Installed:
    """An installed ``aitop`` command, and where its commands write their files."""

    how: str
    command: Path
    work: Path

    def run(self, *args: str, code: int = 0,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """``aitop ARGS`` in the work folder: exit ``code``, no traceback in its output."""
        result = subprocess.run([str(self.command), *args], capture_output=True, text=True,
                                timeout=timeout, cwd=self.work, stdin=subprocess.DEVNULL)
        what = f"{self.how}: aitop {' '.join(args)}"
        assert_no_traceback(result.stdout + result.stderr, what)
        assert result.returncode == code, (
            f"{what} exited {result.returncode}, not {code}:\n"
            + result.stdout[-3000:] + result.stderr[-3000:])
        return result

    @contextmanager
    def serving(self, *args: str, timeout: float = 60) -> Iterator[str]:
        """``aitop ARGS`` (a ``--serve`` run) for the block: its /metrics URL.

        Stopped with SIGTERM afterwards, as a service manager stops it: it must exit 0,
        and nothing it printed may be a traceback.
        """
        log = self.work / f"serve-{time.monotonic_ns()}.log"
        with log.open("w") as sink:
            process = subprocess.Popen([str(self.command), *args], stdout=sink,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       cwd=self.work)
        what = f"{self.how}: aitop {' '.join(args)}"
        try:
            found = wait_until(lambda: SERVING.search(log.read_text())
                               or process.poll() is not None, timeout)
            served = SERVING.search(log.read_text())
            assert found and served, f"{what} is not serving:\n{log.read_text()[-3000:]}"
            yield served.group(1)
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        output = log.read_text()
        assert_no_traceback(output, what)
        assert process.returncode == 0, f"{what} exited {process.returncode}:\n{output[-3000:]}"


Samples = dict[str, list[dict[str, str]]]


def scrape(url: str) -> Samples:
    """Each metric family's samples: their labels, with the value under ``"value"``."""
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return {family.name: [{**s.labels, "value": str(s.value)} for s in family.samples]
            for family in text_string_to_metric_families(text)}


def scrape_until_watched(url: str, pid: int, timeout: float = 60) -> Samples:
    """The first scrape in which ``pid`` is the target and aitop is up on it."""
    last: Samples = {}

    def watched() -> bool:
        last.clear()
        last.update(scrape(url))
        return (any(s["pid"] == str(pid) for s in last.get("aitop_target_info", []))
                and any(s["value"] == "1.0" for s in last.get("aitop_up", [])))

    assert wait_until(watched, timeout, every=0.5), f"{url}: PID {pid} not up: {last}"
    return last


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


def built_once(factory: pytest.TempPathFactory, name: str,
               build: Callable[[Path], Path]) -> Path:
    """``build(folder)``'s result, made once for the whole run: under xdist each worker
    has its own module fixtures, and a wheel, a venv and a pipx install cost minutes,
    so workers share them through the run's common temporary folder and a file lock."""
    # Under xdist a worker's base folder sits in the run's own (popen-gwN in pytest-N);
    # alone, the base folder is the run's.
    base = factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder, done = shared / name, shared / f"{name}.done"
    with FileLock(str(shared / f"{name}.lock")):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            done.write_text(str(build(folder)))
    return Path(done.read_text())


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not (ROOT / ".git").exists():
        pytest.fail("the wheel test builds from the tracked files: run it in a git clone")
    return built_once(tmp_path_factory, "clone", clone_files)


@pytest.fixture(scope="module")
def wheel(clone: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    def build(dist: Path) -> Path:
        run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
             "-w", str(dist), str(clone)])
        wheels = list(dist.glob("*.whl"))
        assert len(wheels) == 1, wheels
        return wheels[0]

    return built_once(tmp_path_factory, "dist", build)


@pytest.fixture(scope="module")
def venv_aitop(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``pip install 'torch_aitop-*.whl[demo]'`` into a fresh venv: its ``aitop``."""
    def build(venv: Path) -> Path:
        run([sys.executable, "-m", "venv", str(venv)])
        run([str(venv / "bin" / "pip"), "install", "-q", f"{wheel}[demo]"])
        return venv / "bin" / "aitop"

    return built_once(tmp_path_factory, "venv", build)


@pytest.fixture(scope="module")
def pipx_aitop(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``pipx install torch_aitop-*.whl`` (the README's command): its ``aitop``."""
    def build(home: Path) -> Path:
        env = {**os.environ, "PIPX_HOME": str(home / "home"), "PIPX_BIN_DIR": str(home / "bin"),
               "PIPX_MAN_DIR": str(home / "man")}
        run([sys.executable, "-m", "pipx", "install", str(wheel)], env=env)
        return home / "bin" / "aitop"

    return built_once(tmp_path_factory, "pipx", build)


@pytest.fixture(scope="module", params=["venv", "pipx"])
def aitop(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    command = request.getfixturevalue(f"{request.param}_aitop")
    return Installed(request.param, command, tmp_path_factory.mktemp(f"work-{request.param}"))


@pytest.fixture(scope="module")
def training(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, str]]:
    """A small PyTorch training loop (this suite's Python), once torch is loaded: its
    PID and the marker on its command line (for the node agent's ``--match``)."""
    marker = str(tmp_path_factory.mktemp("training"))
    with started([sys.executable, "-c", LIGHT_JOB, marker]) as job:
        maps = Path(f"/proc/{job.pid}/maps")
        assert wait_until(lambda: job.poll() is not None or "libtorch" in maps.read_text(),
                          90), "the training loop did not import torch within 90 s"
        assert job.poll() is None, f"the training loop exited with {job.returncode}"
        yield job.pid, marker


@dataclass(frozen=True)
class Recorded:
    """Two short headless runs on the training loop: a snapshot and a ``--json`` report."""

    report: dict[str, Any]
    snapshot: Path
    second_report: Path


@pytest.fixture(scope="module")
def recorded(aitop: Installed, training: tuple[int, str]) -> Recorded:
    pid = str(training[0])
    first = aitop.run("--pid", pid, "--headless", "--json", "--duration", "3",
                      "--export", "first.json")
    second = aitop.run("--pid", pid, "--headless", "--json", "--duration", "2")
    (aitop.work / "second.report.json").write_text(second.stdout)
    return Recorded(json.loads(first.stdout), aitop.work / "first.json",
                    aitop.work / "second.report.json")


# ------------------------------------------------------------------ the wheel


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


def test_every_package_of_the_rooms_is_in_the_wheel(clone: Path, wheel: Path) -> None:
    """Each folder with an ``__init__.py`` under a room, with its modules, is installed
    as ``aitop/<room>/...``: a package the build leaves out fails at its first import."""
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {f"aitop/{module.relative_to(clone).as_posix()}"
                for room in ROOMS for package in (clone / room).rglob("__init__.py")
                for module in package.parent.glob("*.py")}
    assert "aitop/engine/fleet/agent.py" in expected
    assert sorted(expected - names) == []


# ------------------------------------------------------------------ the commands


def test_version_names_the_distribution_and_a_headless_run_reports(
    aitop: Installed, recorded: Recorded, training: tuple[int, str]
) -> None:
    version = aitop.run("--version").stdout.strip()
    assert version.startswith("aitop ") and version.endswith("(torch-aitop)"), version
    assert "not installed" not in version
    report = recorded.report
    assert report["schema"] == "aitop.report/2"
    assert report["target"]["pid"] == training[0]
    assert report["aitop_version"] == version.split()[1]
    # py-spy came with the wheel's dependencies and attached.
    assert not report["probes"].get("stacks", "").startswith("unavailable"), report["probes"]
    assert recorded.snapshot.is_file() and recorded.snapshot.with_suffix(".html").is_file()


def test_serving_one_job_answers_a_scrape(aitop: Installed, training: tuple[int, str]) -> None:
    pid = training[0]
    with aitop.serving("--pid", str(pid), "--serve", "127.0.0.1:0") as url:
        samples = scrape_until_watched(url, pid)
    version = aitop.run("--version").stdout.split()[1]
    assert [s["version"] for s in samples["aitop_build_info"]] == [version]


def test_the_node_agent_answers_a_scrape(aitop: Installed, training: tuple[int, str]) -> None:
    """``aitop --serve`` without ``--pid`` finds the training loop by itself (``--match``
    keeps it to this test's job: other jobs may run on the machine)."""
    pid, marker = training
    with aitop.serving("--serve", "127.0.0.1:0", "--match", marker) as url:
        samples = scrape_until_watched(url, pid, timeout=90)
    assert [s["status"] for s in samples["aitop_job_info"] if s["pid"] == str(pid)] == [
        "watched"], samples["aitop_job_info"]


def test_report_html_writes_the_page(aitop: Installed, recorded: Recorded) -> None:
    page = aitop.work / "page.html"
    result = aitop.run("report", str(recorded.snapshot), "--html", "-o", str(page))
    assert result.stdout.strip() == f"wrote {page}"
    text = page.read_text()
    assert text.startswith("<!DOCTYPE html>") and "<h1>aitop report</h1>" in text


def test_rules_are_a_prometheus_rules_file(aitop: Installed) -> None:
    rules = aitop.work / "aitop.rules.yml"
    rules.write_text(aitop.run("rules", "--format", "prometheus").stdout)
    run([tool("promtool"), "check", "rules", str(rules)])
    assert "alert: " in rules.read_text()


def test_diff_compares_two_recorded_runs(aitop: Installed, recorded: Recorded) -> None:
    result = aitop.run("diff", str(recorded.snapshot), str(recorded.second_report), "--json")
    diff = json.loads(result.stdout)
    assert diff["schema"] == "aitop.diff/1"
    assert (diff["before"]["kind"], diff["after"]["kind"]) == ("snapshot", "report")


def test_replay_headless_prints_the_recorded_report(aitop: Installed, recorded: Recorded) -> None:
    result = aitop.run("replay", str(recorded.snapshot), "--headless", "--json")
    replayed = json.loads(result.stdout)
    assert replayed["target"] == recorded.report["target"]
    # Without a terminal and without --headless: one line saying what to add.
    refused = aitop.run("replay", str(recorded.snapshot), code=2)
    assert refused.stderr.count("\n") == 1 and "--headless" in refused.stderr


def test_selftest_without_gpu_is_a_usage_line(aitop: Installed) -> None:
    usage = aitop.run("selftest", code=2)
    assert usage.stderr.splitlines() == [
        "aitop: selftest needs --gpu (the GPU self-test is the only one so far)"]


def test_selftest_gpu_says_in_one_line_what_it_did(pipx_aitop: Path, tmp_path: Path) -> None:
    """On a machine without a GPU, the checks that need none and one line saying so (run
    from the pipx install only, which has no PyTorch: the GPU jobs must say so too)."""
    out = tmp_path / "selftest"
    result = subprocess.run(
        [str(pipx_aitop), "selftest", "--gpu", "--quick", "--out", str(out)],
        capture_output=True, text=True, timeout=600, cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert_no_traceback(result.stdout + result.stderr, "pipx: aitop selftest --gpu")
    report = json.loads((out / "selftest.json").read_text())
    assert result.returncode == (0 if report["ok"] else 1), result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout
    if report["mode"] == "cpu":  # no GPU: the checks that need none, all passed
        assert lines[0].startswith("aitop selftest: no NVIDIA GPU here ("), lines
        assert report["ok"] and report["summary"]["fail"] == 0, report["summary"]


def test_the_demo_runs_headless_or_says_what_to_install(aitop: Installed) -> None:
    if aitop.how == "venv":  # installed with the demo extra: PyTorch is there
        result = aitop.run("demo", "--headless", "--json", "--duration", "3", timeout=240)
        report = json.loads(result.stdout)
        assert "aitop.demo.workload" in report["target"]["cmdline"]
        assert not report["probes"].get("stacks", "").startswith("unavailable")
    else:
        result = aitop.run("demo", "--headless", "--duration", "3", code=1)
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and "pip install 'torch-aitop[demo]'" in lines[0], lines
        assert "pipx inject torch-aitop torch==" in lines[0]
