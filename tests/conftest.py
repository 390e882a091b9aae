"""Shared pytest configuration (keep minimal)."""

from __future__ import annotations

import asyncio
import inspect
import os
from collections.abc import Iterator

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run ``async def`` tests (Textual Pilot tests) in a fresh event loop.

    Saves a dependency on pytest-asyncio/anyio; a no-op for ordinary tests.
    """
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    names = pyfuncitem._fixtureinfo.argnames
    asyncio.run(pyfuncitem.obj(**{n: pyfuncitem.funcargs[n] for n in names}))
    return True


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """In CI every test runs: a skip (no tmux, not root) fails the run there.

    On a developer's machine a test whose tool is missing skips with its reason;
    CI (``CI=true``, as root, with tmux installed by the test command) must prove
    that nothing was left out.
    """
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.skipped and os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        report.outcome = "failed"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.longrepr = f"skipped in CI, where every test must run: {reason}"
