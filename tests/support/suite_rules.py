"""The suite's rules as a pytest plugin: every test runs in CI, a failed test shows
its jobs' output, and no test leaves a process behind.

Loaded by the root ``conftest.py``; a test of these rules runs pytest with
``-p support.suite_rules`` on a file that breaks them.
"""


from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import psutil
import pytest

from support.processes import (
    become_subreaper,
    describe,
    leftover_descendants,
    log_tail,
    take_logs,
)


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def pytest_sessionstart(session: pytest.Session) -> None:
    # Orphans (a rank whose launcher died) are adopted by this process, so the
    # check at the end of the session finds them instead of losing them to init.
    become_subreaper()


def pytest_runtest_setup(item: pytest.Item) -> None:
    """An ``alone`` test never runs beside another: not under pytest-xdist's ``-n``.

    Its verdict reads the box's free cores; a neighbouring test would take them
    and turn a right verdict wrong (or a wrong one right).
    """
    if item.get_closest_marker("alone") and os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.fail("an `alone` test runs by itself: `pytest -m alone`, without -n",
                    pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A skip fails the run in CI; a failed test's report shows its jobs' logs.

    On a developer's machine a test whose tool is missing skips with its reason;
    CI (``CI=true``, as root, with tmux installed by the test command) must prove
    that nothing was left out.
    """
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.skipped and in_ci():
        report.outcome = "failed"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.longrepr = f"skipped in CI, where every test must run: {reason}"
    if report.failed:
        for path in take_logs():
            report.sections.append((f"job output: {path}", log_tail(path)))
    elif report.when == "teardown":
        take_logs()  # passed: the logs stay on disk, unshown


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run if any process a test started outlived the tests."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    left = leftover_descendants()
    if not left:
        return
    lines = "\n".join(f"  {describe(p)}" for p in left)
    for p in left:
        with contextlib.suppress(psutil.Error):
            p.kill()
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    message = f"{len(left)} process(es) outlived the tests (now killed):\n{lines}"
    if reporter is not None:
        reporter.write_line(message, red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
