"""``aitop rules --format prometheus``: the knowledge base as Prometheus alerting rules
(``--format prometheus-operator``: the same groups as a ``PrometheusRule`` object)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from aitop.engine.commands.rule_files import knowledge_of
from aitop.engine.errors import EXIT_OK, CliError

#: ``aitop.engine.prometheus.alerts.FORMATS``, offered without importing the
#: translation with the command line (a test holds them equal).
FORMATS: tuple[str, ...] = ("prometheus", "prometheus-operator")


def add_parser(sub: Any) -> None:
    """The ``rules`` subcommand's arguments (``sub`` is the CLI's subparsers)."""
    parser = sub.add_parser(
        "rules", help="write the knowledge base's rules in another format (Prometheus alerts)"
    )
    parser.add_argument("--format", choices=FORMATS, default="prometheus",
                        help="output format (default prometheus: an alerting-rules file; "
                             "prometheus-operator: the same groups as a PrometheusRule "
                             "object, monitoring.coreos.com/v1)")
    parser.add_argument("--rules", type=Path, action="append", default=[], metavar="FILE",
                        help="extra rule file to include (repeatable), as with --pid")
    parser.add_argument("-o", "--output", type=Path, metavar="FILE",
                        help="write here instead of standard output")


def run(args: argparse.Namespace) -> int:
    """``aitop rules --format prometheus|prometheus-operator [--rules FILE] [-o FILE]``."""
    # Imported here, not with the command line (see ``replay.run``).
    from aitop.engine.files import FileError, write_atomic
    from aitop.engine.prometheus.alerts import render, translate

    ruleset = knowledge_of(args.rules).rules
    alerts, skipped = translate(ruleset)
    for s in skipped:
        print(f"aitop: rule {s.rule} ({s.where}) not translated: {s.reason}", file=sys.stderr)
    text = render(ruleset, alerts, skipped, args.format)
    if args.output is None:
        sys.stdout.write(text)
    else:
        try:
            write_atomic(args.output, text.encode("utf-8"))
        except FileError as exc:
            raise CliError(str(exc)) from exc
        print(f"aitop: wrote {len(alerts)} alerting rules to {args.output}"
              + (f" ({len(skipped)} not translated, listed in the file)" if skipped else ""),
              file=sys.stderr)
    return EXIT_OK
