"""``aitop report FILE``: a recorded session's report, as text, JSON or an HTML page."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from aitop.engine.commands.rule_files import add_rules_argument, knowledge_of
from aitop.engine.errors import EXIT_OK, EXIT_USAGE, CliError


def add_parser(sub: Any) -> None:
    """The ``report`` subcommand's arguments (``sub`` is the CLI's subparsers)."""
    parser = sub.add_parser(
        "report", help="a snapshot's report: text, --json, or a self-contained --html page"
    )
    parser.add_argument("file", type=Path, help="a snapshot written by aitop (JSON)")
    formats = parser.add_mutually_exclusive_group()
    formats.add_argument("--json", action="store_true", help="print the report as JSON")
    formats.add_argument("--html", action="store_true",
                         help="write an HTML page that opens offline (charts, findings, ranks)")
    parser.add_argument("-o", "--output", type=Path, metavar="PATH",
                        help="with --html: where to write it (default: FILE with .html)")
    parser.add_argument("--baseline", type=Path, metavar="RUN",
                        help="compare with an earlier run (snapshot or --json report)")
    add_rules_argument(parser)


def run(args: argparse.Namespace) -> int:
    # Imported here, not with the command line (see ``replay.run``).
    from aitop.engine.compare.diff import baseline_of, baseline_report
    from aitop.engine.files import FileError, write_atomic
    from aitop.engine.headless.html_report import html_of
    from aitop.engine.headless.source_report import recorded_report
    from aitop.engine.records.snapshot import SnapshotError, companion_paths, load_snapshot
    from aitop.engine.reports.schema import report_json
    from aitop.engine.reports.text import render_text

    if args.output is not None and not args.html:
        raise CliError("--output is for --html; add --html or leave --output out", EXIT_USAGE)
    knowledge = knowledge_of(args.rules)
    baseline = baseline_of(args.baseline)
    try:
        source = load_snapshot(args.file, knowledge)
    except SnapshotError as exc:
        raise CliError(str(exc)) from exc
    except OSError as exc:
        raise CliError(f"cannot read {args.file}: {exc.strerror}") from exc
    report = recorded_report(source)
    if not args.html:
        print(report_json(report) if args.json else render_text(report))
        if baseline is not None:
            print(baseline_report(baseline, report, knowledge))
        return EXIT_OK
    output = args.output or companion_paths(args.file)[2]
    if output.resolve() == args.file.resolve():
        raise CliError(f"--output {output} is the snapshot itself; give another path",
                       EXIT_USAGE)
    try:
        write_atomic(output, html_of(report, source, baseline).encode("utf-8"))
    except FileError as exc:
        raise CliError(f"{exc}; the snapshot {args.file} is untouched") from exc
    print(f"wrote {output}")
    return EXIT_OK
