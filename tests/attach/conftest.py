"""The attach layer: tests that start real processes and attach aitop's probes to them."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from support.jobs import WATCH_S, WATCH_S_OF, Watched, WatchedRun, watched


@pytest.fixture(scope="session")
def watched_run(tmp_path_factory: pytest.TempPathFactory) -> WatchedRun:
    """A demo job's watched run, made once per (scenario, extra args) for the session.

    The scenario test, the prediction test and the diff tests only read these
    runs: one attach serves them all, whichever of them runs first.
    """
    runs: dict[tuple[str, tuple[str, ...]], Watched] = {}

    def run(scenario: str, extra_args: Sequence[str] = ()) -> Watched:
        key = (scenario, tuple(extra_args))
        if key not in runs:
            runs[key] = watched(scenario, tmp_path_factory.mktemp(scenario), extra_args,
                                WATCH_S_OF.get(scenario, WATCH_S))
        return runs[key]

    return run
