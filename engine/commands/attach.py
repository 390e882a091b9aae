"""``aitop --pid P``: attach to a running job, in the UI, headless or serving metrics."""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from aitop.engine.commands.ui import DEFAULT_REFRESH_S, NO_UI, UiRunner
from aitop.engine.errors import EXIT_USAGE, CliError
from aitop.engine.headless.options import options_from, require_terminal, start_source
from aitop.engine.live.attach import job_notice
from aitop.knowledge.base.findings import SEVERITIES
from aitop.knowledge.evaluator import DEFAULT_WINDOW_S
from aitop.probes.collector import CollectorConfig


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from exc
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0: {text!r}")
    return value


def add_attach_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared by attaching to a PID and by the demo."""
    parser.add_argument("--headless", action="store_true",
                        help="no UI: sample for --duration seconds, then print a report")
    parser.add_argument("--duration", type=positive_float, default=20.0,
                        help="seconds to sample in --headless mode (default 20)")
    parser.add_argument("--json", action="store_true",
                        help="print the headless report as JSON (schema aitop.report/2)")
    parser.add_argument("--rules", type=Path, action="append", default=[], metavar="FILE",
                        help="extra rule/phase YAML file (repeatable)")
    parser.add_argument("--export", type=Path, metavar="FILE",
                        help="write a session snapshot (JSON + Markdown + SVG) here at exit")
    parser.add_argument("--export-on-exit", action="store_true",
                        help="TUI: also export on Ctrl-C/SIGTERM (needs --export)")
    parser.add_argument("--refresh", type=positive_float, default=DEFAULT_REFRESH_S,
                        help="TUI refresh interval in seconds (default %(default)g; "
                        "keys are answered at once whatever it is)")
    parser.add_argument("--window", type=positive_float, default=DEFAULT_WINDOW_S,
                        help=f"evaluation window in seconds (default {DEFAULT_WINDOW_S:g})")
    parser.add_argument("--stack-rate", type=int, default=CollectorConfig.stack_rate_hz,
                        help="py-spy samples per second (default %(default)s)")
    parser.add_argument("--serve", metavar="[ADDR:]PORT",
                        help="no UI: serve Prometheus metrics here until the job ends "
                        "(loopback unless ADDR is given); without --pid, for every PyTorch "
                        "job on this machine (the node agent)")
    parser.add_argument("--web-config", type=Path, metavar="FILE",
                        help="--serve with TLS, client certificates and/or basic auth, from "
                        "a web configuration file in the Prometheus exporter toolkit's "
                        "format (node_exporter's --web.config.file)")
    parser.add_argument("--budget", type=positive_float, metavar="PERCENT",
                        help="without --pid: keep aitop's own CPU within this percent of one "
                        "core, watching jobs less often when over it")
    parser.add_argument("--match", action="append", default=[], metavar="TEXT",
                        help="without --pid: only jobs whose launcher's command line "
                        "contains TEXT (repeatable: any of them)")
    parser.add_argument("--fail-on", choices=SEVERITIES, metavar="SEVERITY",
                        help="with --headless: exit 3 when a finding this severe or worse "
                        f"fires ({', '.join(SEVERITIES)})")
    parser.add_argument("--baseline", type=Path, metavar="FILE",
                        help="compare this run with an earlier one (snapshot or --json report)")


def check_pids(pids: Sequence[int] | None, own_pid: int) -> list[int]:
    """The ``--pid`` values given, each once, or one line saying what to give instead."""
    if not pids:
        raise CliError("give --pid PID of a training process, or try `aitop demo`", EXIT_USAGE)
    for pid in pids:
        if pid <= 0:
            raise CliError(f"not a PID: {pid}", EXIT_USAGE)
        if pid == own_pid:
            raise CliError("aitop cannot attach to itself", EXIT_USAGE)
    return list(dict.fromkeys(pids))


def run_attached(args: argparse.Namespace, pid: int, run_ui: UiRunner | None,
                 popen: subprocess.Popen[bytes] | None = None, also: Sequence[int] = ()) -> int:
    """Attach to ``pid`` (with ``also``, more PIDs of the same job) and run the UI,
    the headless report or the exporter on it."""
    if args.serve is None and (args.budget is not None or args.match):
        flag = "--budget" if args.budget is not None else "--match"
        raise CliError(f"{flag} is for every job of the machine: drop --pid (`aitop {flag} "
                       f"...`, or the node agent `aitop --serve PORT {flag} ...`)", EXIT_USAGE)
    if args.serve is None and args.web_config is not None:
        raise CliError("--web-config is for --serve: add --serve [ADDR:]PORT", EXIT_USAGE)
    if args.serve is not None:
        from aitop.engine.commands.serve import run_serve  # binds a port: only when asked

        return run_serve(args, pid, popen, also)
    if args.fail_on and not args.headless:
        raise CliError("--fail-on is a CI gate: add --headless (and --duration S)", EXIT_USAGE)
    if run_ui is None and not args.headless:
        raise CliError(NO_UI, EXIT_USAGE)
    if not args.headless:
        require_terminal()
    baseline = None
    if args.baseline is not None:
        # Imported when asked for: the UI's first frame waits for every import on
        # its way (docs/benchmarks.md, Where aitop's CPU goes).
        from aitop.engine.compare.diff import baseline_of

        baseline = baseline_of(args.baseline)
    options = options_from(args)
    source = start_source(pid, options, popen, also)
    notice = job_notice(source.session.job) if source.session.job else None
    if notice and args.headless:
        print(f"aitop: {notice}", file=sys.stderr)
    if args.headless or run_ui is None:
        from aitop.engine.headless.run import run_headless

        return run_headless(source, args.duration, args.json, args.export, args.fail_on,
                            baseline)
    try:
        return run_ui(
            source,
            refresh_s=args.refresh,
            export_path=args.export,
            export_on_exit=args.export_on_exit,
            baseline=baseline,
        )
    finally:
        source.close()
