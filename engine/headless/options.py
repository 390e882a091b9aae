"""From the command line to a started source: one place for the checks that come first.

Every check that can fail on the user's input (a missing rule file, an export
path that cannot be written, a terminal that cannot show the UI) runs before
aitop attaches, so a typo costs a second, not a session.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
from collections.abc import Sequence

from aitop.engine.errors import EXIT_USAGE, CliError
from aitop.engine.live.attach import (
    AttachError,
    AttachOptions,
    LiveJob,
    attach,
    await_launcher_ranks,
    through_wrapper,
)
from aitop.engine.records.snapshot import SnapshotError, check_export_path
from aitop.knowledge.reading.yamlio import KnowledgeError
from aitop.probes import cadence
from aitop.probes.collector import CollectorConfig


def options_from(args: argparse.Namespace) -> AttachOptions:
    """The attach options of ``--rules``, ``--window``, ``--stack-rate``, ``--headless``."""
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
    profile = cadence.HEADLESS if args.headless else cadence.UI
    return AttachOptions(
        rule_files=tuple(args.rules),
        window_s=args.window,
        collector=dataclasses.replace(base, stack_rate_hz=max(1, min(args.stack_rate, 200))),
        evaluate_every_s=profile.evaluate_every_s,
        evaluate_warmup_s=profile.evaluate_warmup_s,
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
    pid: int, options: AttachOptions, popen: subprocess.Popen[bytes] | None = None,
    also: Sequence[int] = (),
) -> LiveJob:
    """Attach to ``pid`` (and the PIDs ``also`` named as the same job); an expected
    failure becomes one ``CliError`` line."""
    def notify(line: str) -> None:
        print(f"aitop: {line}", file=sys.stderr)

    try:
        pid, followed = through_wrapper(pid, options)
        job = await_launcher_ranks(pid, notify=notify)
        live = attach(pid, options, popen=popen, also=also, job=job)
    except AttachError as exc:
        raise CliError(str(exc)) from exc
    except KnowledgeError as exc:
        raise CliError(f"bad rule file: {exc}", EXIT_USAGE) from exc
    if followed:  # on stderr at once, and in the report and the UI with the job's notices
        notify(followed)
        live.warnings.append(followed)
    return live
