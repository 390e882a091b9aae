"""The ``aitop`` command: attach (TUI or headless), demo, replay, metrics.

Every expected failure (bad PID, no permission, no py-spy, a rule file that does
not parse) ends with one line on stderr that says what to do, and a non-zero
exit status; never a Python traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Protocol

from aitop.demo import SCENARIOS
from aitop.knowledge.evaluator import DEFAULT_WINDOW_S
from aitop.knowledge.model import SEVERITIES, Diagnosis
from aitop.knowledge.yamlio import KnowledgeError
from aitop.probes.collector import CollectorConfig

from .job import job_verdict_json, judge, rank_rows, ranks_json
from .live import AttachError, AttachOptions, LiveSource, attach, job_notice, self_rss_bytes
from .report import RunFacts, build_report, render_text
from .runs import Run
from .selftest import add_selftest_parser, run_selftest
from .snapshot import SnapshotError, check_export_path, load_snapshot, write_snapshot
from .source import DataSource

EXIT_USAGE = 2
EXIT_FAILED = 1
#: Signals that stop aitop the way Ctrl-C does (a closed terminal, `kill`).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
#: The UI's default refresh: glances' and btop's default too. At 1 s, painting
#: cost the UI ~0.5 % of a core more (docs/benchmarks.md); keys never wait for it.
DEFAULT_REFRESH_S = 2.0
NO_UI = "the terminal UI is not installed here: add --headless (or run the `aitop` command)"


class UiRunner(Protocol):
    """Opens the full-screen UI on a source until the user quits; the exit code."""

    def __call__(
        self, source: DataSource, *, refresh_s: float, export_path: Path | None,
        export_on_exit: bool, baseline: Run | None = None,
    ) -> int: ...


class CliError(Exception):
    """An expected failure: printed as one line, exit status ``code``."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from exc
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0: {text!r}")
    return value


def attach_arguments(parser: argparse.ArgumentParser) -> None:
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
                        "(loopback unless ADDR is given)")
    parser.add_argument("--fail-on", choices=SEVERITIES, metavar="SEVERITY",
                        help="with --headless: exit 3 when a finding this severe or worse "
                        f"fires ({', '.join(SEVERITIES)})")
    parser.add_argument("--baseline", type=Path, metavar="FILE",
                        help="compare this run with an earlier one (snapshot or --json report)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="aitop",
        description="Attach to a running PyTorch training process and explain, live, "
        "why it is slow.",
        epilog="examples:  aitop --pid 1234   |   aitop demo   |   aitop replay run.json",
    )
    parser.add_argument("--pid", type=int, help="PID of the training process to attach to")
    attach_arguments(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = sub.add_parser("demo", help="start a bundled training job and attach to it")
    demo.add_argument("--scenario", choices=SCENARIOS, default="data",
                      help="which bottleneck the demo job has (default data)")
    attach_arguments(demo)

    replay = sub.add_parser("replay", help="open a session snapshot in the UI")
    replay.add_argument("file", type=Path, help="a snapshot written by aitop (JSON)")
    replay.add_argument("--headless", action="store_true",
                        help="print the recorded report instead of opening the UI")
    replay.add_argument("--json", action="store_true", help="with --headless: as JSON")

    sub.add_parser("metrics", help="list the metric names rules may use")
    from . import diff, prom_rules  # they build on this module's CliError

    prom_rules.add_parser(sub)
    diff.add_parser(sub)
    add_selftest_parser(sub)
    return parser


# ------------------------------------------------------------------ helpers


def options_from(args: argparse.Namespace) -> AttachOptions:
    for path in args.rules:
        if not path.is_file():
            raise CliError(f"rule file not found: {path} (pass a YAML file with --rules)",
                           EXIT_USAGE)
    if args.export_on_exit and not args.export:
        raise CliError("--export-on-exit needs --export FILE", EXIT_USAGE)
    if args.export is not None:
        try:
            check_export_path(args.export)  # now, not after a long session
        except SnapshotError as exc:
            raise CliError(str(exc), EXIT_USAGE) from exc
    base = CollectorConfig.headless() if args.headless else CollectorConfig()
    return AttachOptions(
        rule_files=tuple(args.rules),
        window_s=args.window,
        collector=dataclasses.replace(base, stack_rate_hz=max(1, min(args.stack_rate, 200))),
    )


def require_terminal() -> None:
    """The full-screen UI needs a terminal that can address the screen.

    With ``TERM=dumb`` (Emacs shells, some CI logs) or output to a pipe, the
    escape codes would only garble what is written: say how to get a report.
    """
    term = os.environ.get("TERM", "")
    if term in ("", "dumb"):
        raise CliError(f"TERM={term or '(unset)'} cannot show the full-screen UI: add "
                       "--headless for a report (or run in a real terminal)", EXIT_USAGE)
    if not sys.stdout.isatty():
        raise CliError("output is not a terminal: add --headless for a report "
                       "(--json for JSON)", EXIT_USAGE)


def start_source(
    pid: int, options: AttachOptions, popen: subprocess.Popen[bytes] | None = None
) -> LiveSource:
    try:
        return attach(pid, options, popen=popen)
    except AttachError as exc:
        raise CliError(str(exc)) from exc
    except KnowledgeError as exc:
        raise CliError(f"bad rule file: {exc}", EXIT_USAGE) from exc


def run_headless(
    source: LiveSource, duration_s: float, as_json: bool, export: Path | None,
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
            stop.wait(min(0.25, max(0.0, deadline - time.time())))
        interrupted = stop.is_set()
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
    diagnosis: Diagnosis | None = source.evaluator.evaluate(now)
    history = source.history()
    judgement = judge(source, now, diagnosis)
    report = build_report(
        source.session,
        diagnosis,
        history,
        RunFacts(elapsed, cpu, self_rss_bytes(), source.warnings, interrupted),
        attached_at,
        ranks=ranks_json(rank_rows(source, now, diagnosis, judgement)),
        job_verdict=job_verdict_json(judgement),
    )
    print(json.dumps(report, indent=2) if as_json else render_text(report))
    if export is not None:
        export_snapshot(source, export)
    from . import diff, gates

    if baseline is not None:
        print(diff.baseline_report(baseline, report), file=sys.stderr)
    return gates.findings_gate(report, fail_on) if fail_on else 0


def export_snapshot(source: DataSource, path: Path) -> None:
    try:
        written = write_snapshot(path, source)
    except (OSError, SnapshotError) as exc:
        raise CliError(f"could not write the snapshot to {path}: {exc}") from exc
    print("exported: " + ", ".join(str(p) for p in written), file=sys.stderr)


def run_attached(args: argparse.Namespace, pid: int, run_ui: UiRunner | None,
                 popen: subprocess.Popen[bytes] | None = None) -> int:
    if args.serve is not None:
        from .serve import run_serve

        return run_serve(args, pid, popen)
    if args.fail_on and not args.headless:
        raise CliError("--fail-on is a CI gate: add --headless (and --duration S)", EXIT_USAGE)
    if run_ui is None and not args.headless:
        raise CliError(NO_UI, EXIT_USAGE)
    if not args.headless:
        require_terminal()
    from .diff import baseline_of

    baseline = baseline_of(args.baseline)
    options = options_from(args)
    source = start_source(pid, options, popen)
    notice = job_notice(source.session.job) if source.session.job else None
    if notice and args.headless:
        print(f"aitop: {notice}", file=sys.stderr)
    if args.headless or run_ui is None:
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


def run_demo(args: argparse.Namespace, run_ui: UiRunner | None) -> int:
    """Start the bundled workload as a child, attach, and stop it afterwards."""
    if importlib.util.find_spec("torch") is None:
        raise CliError("the demo needs PyTorch: pip install 'aitop[demo]' (or torch==2.13.0)")
    # The job's output goes to a log file so it cannot scribble over the UI.
    log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed in the finally below
        prefix="aitop-demo-", suffix=".log", delete=False
    )
    ready = Path(log.name).with_suffix(".ready")
    keep_log = False  # kept only when the job failed and the error points at it
    command = [sys.executable, "-m", "aitop.demo.workload", "--scenario", args.scenario,
               "--ready-file", str(ready)]
    child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL)
    if not args.headless or not args.json:
        print(f"aitop demo: started the '{args.scenario}' training job as PID {child.pid} "
              f"(log: {log.name}); attaching once it trains...", file=sys.stderr)
    try:
        # Attach once the job is past importing torch and its first steps, so
        # the first window shows training rather than start-up.
        deadline = time.time() + 120
        while not ready.exists() and child.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        if child.poll() is not None:
            keep_log = True
            raise CliError(f"the demo job exited with status {child.returncode}; "
                           f"see {log.name}")
        return run_attached(args, child.pid, run_ui, popen=child)
    finally:
        if child.poll() is None:
            child.terminate()  # the job removes its checkpoints on SIGTERM
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
        log.close()
        ready.unlink(missing_ok=True)
        if not keep_log:
            Path(log.name).unlink(missing_ok=True)


def run_replay(args: argparse.Namespace, run_ui: UiRunner | None) -> int:
    try:
        source = load_snapshot(args.file)
    except SnapshotError as exc:
        raise CliError(str(exc)) from exc
    except OSError as exc:
        raise CliError(f"cannot read {args.file}: {exc.strerror}") from exc
    if args.headless:
        history = source.history()
        diagnosis = history[-1] if history else None
        started = source.session.started_at or (diagnosis.t if diagnosis else time.time())
        latest = source.session.latest_time() or started
        judgement = judge(source, latest, diagnosis)
        report = build_report(source.session, diagnosis, history,
                              RunFacts(latest - started, None, None), started,
                              ranks=ranks_json(rank_rows(source, latest, diagnosis, judgement)),
                              job_verdict=job_verdict_json(judgement))
        print(json.dumps(report, indent=2) if args.json else render_text(report))
        return 0
    if run_ui is None:
        raise CliError(NO_UI, EXIT_USAGE)
    require_terminal()
    return run_ui(source, refresh_s=1.0, export_path=None, export_on_exit=False)


def list_metrics() -> int:
    from aitop.knowledge.metrics import CATALOGUE

    for name, spec in CATALOGUE.items():
        unit = f" [{spec.unit}]" if spec.unit else ""
        print(f"{name}{unit}: {spec.description}")
    return 0


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None, run_ui: UiRunner | None = None) -> int:
    """The ``aitop`` command. ``run_ui`` opens the terminal UI on a source; the
    console script passes the Textual one (``aitop.tui.entry``), and without one
    only the headless commands work, so the engine never imports the UI."""
    parser = build_parser()
    args = parser.parse_args(argv)
    # SIGTERM/SIGHUP end aitop like Ctrl-C, so every `finally` runs (children
    # stopped, temporary files removed) wherever they arrive; the headless run
    # and the UI install their own handlers that also write the report.
    for sig in STOP_SIGNALS:
        signal.signal(sig, _interrupt)
    try:
        if args.command == "demo":
            return run_demo(args, run_ui)
        if args.command == "replay":
            return run_replay(args, run_ui)
        if args.command == "metrics":
            return list_metrics()
        if args.command == "rules":
            from .prom_rules import run_rules

            return run_rules(args)
        if args.command == "diff":
            from .diff import run_diff

            return run_diff(args)
        if args.command == "selftest":
            return run_selftest(args)
        if args.pid is None:
            parser.print_usage(sys.stderr)
            raise CliError("give --pid PID of a training process, or try `aitop demo`",
                           EXIT_USAGE)
        if args.pid <= 0:
            raise CliError(f"not a PID: {args.pid}", EXIT_USAGE)
        if args.pid == os.getpid():
            raise CliError("aitop cannot attach to itself", EXIT_USAGE)
        return run_attached(args, args.pid, run_ui)
    except CliError as exc:
        print(f"aitop: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130
