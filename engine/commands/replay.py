"""``aitop replay FILE``: a recorded session in the UI, or its report.

A job's snapshot (``aitop --pid P --export``) opens that job's view; a node
recording (``aitop --export`` without ``--pid``) the node view, each job's full
view a key away.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aitop.engine.commands.rule_files import add_rules_argument, knowledge_of
from aitop.engine.commands.ui import NO_UI, UiRunner
from aitop.engine.errors import EXIT_OK, EXIT_USAGE, CliError

if TYPE_CHECKING:
    from aitop.engine.live.node import NodeSource
    from aitop.engine.live.source import DataSource

#: A replay steps through recorded samples, not a live clock: one frame a second.
REPLAY_REFRESH_S = 1.0


def add_parser(sub: Any) -> None:
    """The ``replay`` subcommand's arguments (``sub`` is the CLI's subparsers)."""
    replay = sub.add_parser("replay", help="open a session snapshot in the UI")
    replay.add_argument("file", type=Path, help="a snapshot written by aitop (JSON)")
    replay.add_argument("--headless", action="store_true",
                        help="print the recorded report instead of opening the UI")
    replay.add_argument("--json", action="store_true", help="with --headless: as JSON")
    add_rules_argument(replay)


def run(args: argparse.Namespace, run_ui: UiRunner | None) -> int:
    # Imported here, not with the command line: every command's imports would
    # otherwise delay every other's start (docs/benchmarks.md, Where aitop's CPU goes).
    from aitop.engine.headless.node_report import node_report, render_node_text
    from aitop.engine.headless.source_report import recorded_report
    from aitop.engine.live.node import NodeReplay
    from aitop.engine.records.node import load_recording
    from aitop.engine.records.snapshot import SnapshotError
    from aitop.engine.reports.schema import report_json
    from aitop.engine.reports.text import render_text

    knowledge = knowledge_of(args.rules)
    try:
        source = load_recording(args.file, knowledge)
    except SnapshotError as exc:
        raise CliError(str(exc)) from exc
    except OSError as exc:
        raise CliError(f"cannot read {args.file}: {exc.strerror}") from exc
    if isinstance(source, NodeReplay):
        if not args.headless:
            return _open(source, run_ui)
        span = source.timeline()
        node = (node_report(source, span.end, duration_s=span.end - span.start)
                if span is not None else node_report(source, source.written_at or 0.0))
        print(report_json(node) if args.json else render_node_text(node))
        return EXIT_OK
    if args.headless:
        report = recorded_report(source)
        print(report_json(report) if args.json else render_text(report))
        return EXIT_OK
    return _open(source, run_ui)


def _open(source: DataSource | NodeSource, run_ui: UiRunner | None) -> int:
    from aitop.engine.headless.options import require_terminal

    if run_ui is None:
        raise CliError(NO_UI, EXIT_USAGE)
    require_terminal()
    return run_ui(source, refresh_s=REPLAY_REFRESH_S, export_path=None, export_on_exit=False)
