"""What ``aitop --pid`` imports before its first frame, and the names said twice for it.

The first frame waits for every module imported on its way (docs/benchmarks.md,
Where aitop's CPU goes): the other commands, the exports' renderers and the
detail screens load when they are used. A fresh interpreter imports what the UI
and the attach need, and none of those may come with them.
"""

from __future__ import annotations

import json
import subprocess
import sys

#: Loaded only by what uses them: never on the way to the first frame.
NOT_AT_START = (
    "jinja2",  # the HTML report, written by an export
    "pygments",  # the finding screen's source lines
    "importlib.metadata",  # aitop's own version, read on the environment probe's thread
    "aitop.engine.selftest",
    "aitop.engine.prometheus",
    "aitop.engine.fleet.model",
    "aitop.engine.headless.html_report",
    "aitop.engine.headless.run",
    "aitop.engine.reports.markdown",
    "aitop.engine.compare.diff",
    "aitop.tui.screens.help",
    "aitop.tui.screens.finding",
    "aitop.tui.screens.knowledge",
    "aitop.tui.widgets.baseline_bar",
)


def test_the_first_frames_imports_leave_out_what_it_does_not_draw() -> None:
    code = ("import json, sys; import aitop.tui.entry, aitop.tui.app, aitop.engine.live.attach, "
            "aitop.engine.commands.attach; print(json.dumps(sorted(sys.modules)))")
    loaded = set(json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True,
                                           text=True, check=True, timeout=60).stdout))
    early = [name for name in NOT_AT_START
             if name in loaded or any(m.startswith(name + ".") for m in loaded)]
    assert not early, f"imported on the way to the first frame: {early}"


def test_the_detail_screens_load_when_prefetched() -> None:
    from aitop.tui import screens

    screens.prefetch()
    for name in screens.DETAIL_SCREENS:
        found = screens.screen_class(name)
        assert found is not None and found.__name__.endswith("Screen"), name


def test_names_the_command_line_says_without_importing_them_match_their_source() -> None:
    from aitop.engine.commands import diff, rules
    from aitop.engine.compare.diff import SCHEMA
    from aitop.engine.prometheus.alerts import FORMATS

    assert diff.SCHEMA == SCHEMA
    assert rules.FORMATS == FORMATS
