"""The headless run: sample for a while (or until the job ends), then report."""

from __future__ import annotations

import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType

from aitop.engine.compare import gates
from aitop.engine.compare.diff import baseline_report
from aitop.engine.compare.runs import Run
from aitop.engine.errors import EXIT_OK, STOP_SIGNALS
from aitop.engine.headless.export import export_snapshot
from aitop.engine.headless.source_report import report_of
from aitop.engine.live.job import LiveJob
from aitop.engine.live.rank import self_rss_bytes
from aitop.engine.reports.build import RunFacts
from aitop.engine.reports.schema import report_json
from aitop.engine.reports.text import render_text

#: How often the run looks whether the target exited: the process tree notices an
#: exit once per its interval (2 s headless), so looking more often buys nothing
#: and wakes the main thread for nothing (docs/benchmarks.md, Where aitop's CPU goes).
EXIT_POLL_S = 1.0


def run_headless(
    source: LiveJob, duration_s: float, as_json: bool, export: Path | None,
    fail_on: str | None = None, baseline: Run | None = None,
) -> int:
    """Sample for ``duration_s`` (or until the target exits), then report."""
    interrupted = False
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    # Ctrl-C too: a KeyboardInterrupt raised wherever the main thread happens to
    # be (inside Event.wait's lock) once left a run hanging instead of reporting.
    handled = (*STOP_SIGNALS, signal.SIGINT)
    previous = {sig: signal.signal(sig, on_signal) for sig in handled}
    attached_at = source.started_at
    try:
        deadline = time.time() + duration_s
        while time.time() < deadline and not stop.is_set():
            if source.session.target_exited_at is not None and not source.awaiting_restart():
                # Let the last stack window and one evaluation land, then stop.
                stop.wait(1.5)
                break
            stop.wait(min(EXIT_POLL_S, max(0.0, deadline - time.time())))
        interrupted = stop.is_set()
        if not interrupted and source.session.target_exited_at is None:
            source.read_steps_now()  # the rate spans the whole watch
    except KeyboardInterrupt:
        interrupted = True
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    elapsed = time.time() - attached_at
    cpu = source.cpu_percent()
    source.close()  # py-spy flushes its last, partial window on the way out
    # One last look with that window; once the target has exited, the evaluator
    # answers with its last verdict made on live samples instead.
    now = time.time()
    conclusion = source.conclude(now)
    facts = RunFacts(elapsed, cpu, self_rss_bytes(), source.warnings, interrupted)
    report = report_of(source, now, conclusion, facts, attached_at)
    print(report_json(report) if as_json else render_text(report))
    if export is not None:
        export_snapshot(source, export, report, baseline)
    if baseline is not None:
        print(baseline_report(baseline, report, source.knowledge), file=sys.stderr)
    return gates.findings_gate(report, fail_on) if fail_on else EXIT_OK
