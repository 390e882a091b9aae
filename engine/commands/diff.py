"""``aitop diff BEFORE AFTER``: what changed between two runs, and a regression gate."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aitop.engine.commands.rule_files import add_rules_argument, knowledge_of
from aitop.engine.errors import EXIT_GATE, EXIT_OK, CliError

if TYPE_CHECKING:
    from aitop.engine.compare.runs import Run

#: ``aitop.engine.compare.diff.SCHEMA``, named in the help without importing the
#: comparison with the command line (a test holds them equal).
SCHEMA = "aitop.diff/1"


def percent(text: str) -> float:
    try:
        value = float(text.rstrip("%"))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a percentage: {text!r}") from exc
    if not 0 <= value < 100:
        raise argparse.ArgumentTypeError(f"must be a percentage from 0 to 100: {text!r}")
    return value


def add_parser(sub: Any) -> None:
    """The ``diff`` subcommand's arguments (``sub`` is the CLI's subparsers)."""
    parser = sub.add_parser(
        "diff", help="compare two runs (snapshots or --json reports): what changed"
    )
    parser.add_argument("before", type=Path, help="the earlier run (snapshot or --json report)")
    parser.add_argument("after", type=Path, help="the later run")
    parser.add_argument("--json", action="store_true", help=f"print JSON (schema {SCHEMA})")
    parser.add_argument("--fail-on-regression", type=percent, metavar="PCT",
                        help=f"exit {EXIT_GATE} when steps/s dropped by more than PCT %%")
    add_rules_argument(parser)


def read_runs(paths: Sequence[Path]) -> list[Run]:
    from aitop.engine.compare.runs import RunError, read_run

    out = []
    for path in paths:
        try:
            out.append(read_run(path))
        except RunError as exc:
            raise CliError(str(exc)) from exc
    return out


def run(args: argparse.Namespace) -> int:
    """``aitop diff BEFORE AFTER [--json] [--fail-on-regression PCT] [--rules FILE]``:
    the advice (what to try next) follows the knowledge base with its ``--rules``."""
    # Imported here, not with the command line (see ``replay.run``).
    from aitop.engine.compare.diff import compare, render_text, to_json
    from aitop.engine.compare.gates import regression_gate

    knowledge = knowledge_of(args.rules)
    before, after = read_runs([args.before, args.after])
    comparison = compare(before, after, knowledge=knowledge)
    text = json.dumps(to_json(comparison), indent=2) if args.json else render_text(comparison)
    print(text)
    if args.fail_on_regression is not None:
        return regression_gate(comparison, args.fail_on_regression)
    return EXIT_OK
