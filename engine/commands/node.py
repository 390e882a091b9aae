"""``aitop`` without ``--pid``: every PyTorch job on this machine, in the UI or headless.

The fleet (``engine.fleet.model``) finds, attaches, paces and drops the jobs
on a thread of its own; the node view draws it (Enter opens a job's full view,
exactly ``aitop --pid``'s), and ``--headless`` watches for ``--duration``
seconds and prints one node report (``aitop.node-report/1``: each job's own
``aitop.report/2``). ``--export FILE`` writes the node recording at the end.
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import threading
import time
from pathlib import Path
from types import FrameType

from aitop.engine.commands.rule_files import knowledge_of
from aitop.engine.commands.ui import NO_UI, UiRunner
from aitop.engine.errors import EXIT_OK, EXIT_USAGE, STOP_SIGNALS, CliError
from aitop.engine.fleet.model import Fleet, say_on_stderr
from aitop.engine.headless.node_export import export_node
from aitop.engine.headless.node_report import node_report, render_node_text
from aitop.engine.headless.options import options_from, require_terminal
from aitop.engine.live.rank import self_cpu_seconds, self_rss_bytes
from aitop.engine.live.source import Conclusion, DataSource
from aitop.engine.reports.schema import report_json

#: Jobs that ended while the node view watched, kept (closed) for its recording.
KEEP_ENDED = 32


def run_node(args: argparse.Namespace, run_ui: UiRunner | None) -> int:
    """Watch every PyTorch job of this machine: the node view, or a node report."""
    for flag, given in (("--fail-on", args.fail_on), ("--baseline", args.baseline)):
        if given:
            raise CliError(f"{flag} judges one job: give --pid PID (the node report lists "
                           "every job's findings)", EXIT_USAGE)
    if not args.headless:
        if run_ui is None:
            raise CliError(NO_UI, EXIT_USAGE)
        require_terminal()
    # --rules and --export are checked before anything runs; one knowledge base judges
    # every job.
    options = dataclasses.replace(options_from(args), knowledge=knowledge_of(args.rules))
    fleet = Fleet(options, budget_percent=args.budget, match=tuple(args.match),
                  say=say_on_stderr if args.headless else _quiet, keep_ended=KEEP_ENDED)
    if args.headless or run_ui is None:
        return run_node_headless(fleet, args.duration, args.json, args.export)
    fleet.start()
    try:
        return run_ui(fleet, refresh_s=args.refresh, export_path=args.export,
                      export_on_exit=args.export_on_exit)
    finally:
        fleet.close()


def run_node_headless(fleet: Fleet, duration_s: float, as_json: bool,
                      export: Path | None) -> int:
    """Watch the node for ``duration_s`` (jobs come and go meanwhile), then report."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    handled = (*STOP_SIGNALS, signal.SIGINT)
    previous = {sig: signal.signal(sig, on_signal) for sig in handled}
    started, cpu_at_start = time.time(), self_cpu_seconds()
    fleet.start()
    try:
        stop.wait(duration_s)
    except KeyboardInterrupt:
        stop.set()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    elapsed = max(time.time() - started, 1e-6)
    cpu = 100.0 * (self_cpu_seconds() - cpu_at_start) / elapsed
    fleet.close()  # py-spy flushes each job's last, partial window on the way out
    report = node_report(fleet, time.time(), conclude=_last_look, duration_s=elapsed,
                         aitop_cpu_percent=cpu, aitop_rss_bytes=self_rss_bytes(),
                         interrupted=stop.is_set())
    print(report_json(report) if as_json else render_node_text(report))
    if export is not None:
        export_node(fleet, export)
    return EXIT_OK


def _last_look(source: DataSource, now: float) -> Conclusion:
    """A job's last look at ``now`` (its last live verdict once it exited)."""
    return source.conclude(now)


def _quiet(line: str) -> None:
    """The node view shows what the fleet found; nothing may write over the screen."""
