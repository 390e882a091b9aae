"""The suite's own rules hold: a leftover process fails the run, a failed test shows
its job's output, a skip fails in CI. Each is checked by running pytest on a file
that breaks the rule."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def pytest_on(tmp_path: Path, code: str, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_case.py").write_text(textwrap.dedent(code))
    # Not CI's rules, nor an xdist worker's (whose end-of-session check the
    # controller makes): the inner run is a session of its own.
    environ = {k: v for k, v in os.environ.items()
               if k != "CI" and not k.startswith("PYTEST_XDIST")}
    environ.update(PYTHONPATH=str(TESTS), **env)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
         "support.suite_rules", "--rootdir", str(tmp_path), "-c", os.devnull,
         str(tmp_path / "test_case.py")],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=environ,
        stdin=subprocess.DEVNULL,
    )


def test_an_orphaned_grandchild_fails_the_run(tmp_path: Path) -> None:
    """A child that starts a sleeper and exits: the sleeper is an orphan, still caught."""
    result = pytest_on(tmp_path, """\
        import subprocess, sys

        def test_leaks():
            code = "import subprocess; subprocess.Popen(['sleep', '300'])"
            subprocess.run([sys.executable, "-c", code], check=True)
        """)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 passed" in result.stdout
    assert "outlived the tests" in result.stdout and "sleep 300" in result.stdout, result.stdout


def test_a_clean_run_passes(tmp_path: Path) -> None:
    result = pytest_on(tmp_path, """\
        import subprocess

        def test_waits():
            subprocess.run(["true"], check=True)
        """)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "outlived" not in result.stdout


def test_a_failed_test_shows_its_jobs_log(tmp_path: Path) -> None:
    result = pytest_on(tmp_path, """\
        import sys
        from support.processes import started

        def test_fails():
            with started([sys.executable, "-c", "print('the job said why')"]) as job:
                job.wait()
            assert False
        """)
    assert result.returncode == 1
    assert "job output:" in result.stdout and "the job said why" in result.stdout, result.stdout


def test_a_skip_fails_in_ci(tmp_path: Path) -> None:
    code = """\
        import pytest

        def test_skips():
            pytest.skip("no tmux here")
        """
    assert pytest_on(tmp_path, code).returncode == 0
    result = pytest_on(tmp_path, code, CI="true")
    assert result.returncode == 1
    assert "skipped in CI, where every test must run: Skipped: no tmux here" in result.stdout


def test_an_alone_test_under_xdist_fails_and_says_how_to_run_it(tmp_path: Path) -> None:
    """As an xdist worker would run it (``PYTEST_XDIST_WORKER`` set): it fails."""
    code = """\
        import pytest

        @pytest.mark.alone
        def test_judges_free_cores():
            pass
        """
    beside = pytest_on(tmp_path, code, PYTEST_XDIST_WORKER="gw0")
    assert beside.returncode == 1, beside.stdout + beside.stderr
    assert "pytest -m alone`, without -n" in beside.stdout, beside.stdout
    assert pytest_on(tmp_path, code).returncode == 0
