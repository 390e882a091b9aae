"""The run's knowledge base, loaded once where a command starts, with its ``--rules``.

Every reader of a run (the verdict, the panels' colours, the key-metrics table,
a replay's straggler flag, ``aitop diff``'s advice) judges with the one
:class:`KnowledgeBase` a command loads here (an attachment loads it in
``engine.live.attach`` from the same files) and hands on; nothing below the
commands loads one of its own.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from aitop.engine.errors import EXIT_USAGE, CliError
from aitop.knowledge.reading.loader import KnowledgeBase, load_knowledge_base
from aitop.knowledge.reading.yamlio import KnowledgeError


def add_rules_argument(parser: argparse.ArgumentParser) -> None:
    """``--rules FILE`` (repeatable), as attaching takes it."""
    parser.add_argument("--rules", type=Path, action="append", default=[], metavar="FILE",
                        help="extra rule/phase YAML file (repeatable), as with --pid")


def knowledge_of(rule_files: Sequence[Path]) -> KnowledgeBase:
    """The packaged knowledge base with ``rule_files``; a missing or bad file is one
    ``CliError`` line (exit 2) listing every problem."""
    for path in rule_files:
        if not path.is_file():
            raise CliError(f"rule file not found: {path} (pass a YAML file with --rules)",
                           EXIT_USAGE)
    try:
        return load_knowledge_base(rule_files)
    except KnowledgeError as exc:
        raise CliError(f"bad rule file: {exc}", EXIT_USAGE) from exc
