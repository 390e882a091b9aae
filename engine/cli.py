"""The ``aitop`` command line: the parser and the dispatch, nothing else.

Each command lives in :mod:`aitop.engine.commands`; this module only builds the
parser from their ``add_parser`` functions and calls the one asked for. Every
expected failure (bad PID, no permission, no py-spy, a rule file that does not
parse) ends with one line on stderr that says what to do, and a non-zero exit
status; never a Python traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Sequence
from types import FrameType

from aitop.engine.commands import demo, diff, metrics, replay, report, rules, selftest
from aitop.engine.commands.attach import add_attach_arguments, check_pids, run_attached
from aitop.engine.commands.ui import UiRunner
from aitop.engine.errors import EXIT_FAILED, EXIT_INTERRUPTED, STOP_SIGNALS, CliError
from aitop.probes.own_version import DISTRIBUTION, aitop_version


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="aitop",
        description="Attach to a running PyTorch training process and explain, live, "
        "why it is slow.",
        epilog="examples:  aitop (every PyTorch job here)   |   aitop --pid 1234   |   "
        "aitop demo   |   aitop replay run.json",
    )
    parser.add_argument("--version", action=_VersionAction)
    parser.add_argument("--pid", type=int, action="append",
                        help="PID of the training process to attach to (its launcher or any "
                        "rank); repeat it for the launchers of one job's nodes on this "
                        "machine. Without it: every PyTorch job on this machine")
    add_attach_arguments(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in (demo, replay, report, metrics, rules, diff, selftest):
        command.add_parser(sub)
    return parser


class _VersionAction(argparse.Action):
    """``--version``: the line is looked up when asked for (it reads the installed
    metadata), not each time the parser is built."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0,
                         help=help or "show program's version number and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        print(_version_line())
        parser.exit()


def _version_line() -> str:
    """``aitop 0.1.0 (torch-aitop)``: the distribution named, since PyPI's ``aitop`` is another."""
    return f"aitop {aitop_version() or '(not installed)'} ({DISTRIBUTION})"


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def dispatch(args: argparse.Namespace, run_ui: UiRunner | None) -> int:
    """Run the command ``args`` names; a ``CliError`` propagates to ``main``."""
    if args.command == "demo":
        return demo.run(args, run_ui)
    if args.command == "replay":
        return replay.run(args, run_ui)
    if args.command == "report":
        return report.run(args)
    if args.command == "metrics":
        return metrics.run()
    if args.command == "rules":
        return rules.run(args)
    if args.command == "diff":
        return diff.run(args)
    if args.command == "selftest":
        return selftest.run(args)
    if args.pid is None and args.serve is not None:
        from aitop.engine.commands.serve import run_agent  # binds a port: only when asked

        return run_agent(args)
    if args.pid is None:
        from aitop.engine.commands.node import run_node  # the node view: only when asked

        return run_node(args, run_ui)
    pid, *also = check_pids(args.pid, os.getpid())
    return run_attached(args, pid, run_ui, also=tuple(also))


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
        return dispatch(args, run_ui)
    except CliError as exc:
        print(f"aitop: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return _output_closed()


def _output_closed() -> int:
    """The reader of aitop's output left (``aitop diff A B | head``): stop quietly.

    Python's own SIGPIPE handling is kept (a scraper that hangs up must not kill
    ``--serve``), so the closed pipe arrives here as an exception; stdout then goes
    to /dev/null so that the flush at exit does not raise it again.
    """
    with contextlib.suppress(OSError, ValueError):  # a stdout without a descriptor
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return EXIT_FAILED
