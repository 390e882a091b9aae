"""``aitop metrics``: the metric names a rule may use, with units and meanings."""

from __future__ import annotations

from typing import Any

from aitop.engine.errors import EXIT_OK


def add_parser(sub: Any) -> None:
    """The ``metrics`` subcommand (no arguments)."""
    sub.add_parser("metrics", help="list the metric names rules may use")


def run() -> int:
    from aitop.knowledge.base.catalogue import CATALOGUE

    for name, spec in CATALOGUE.items():
        unit = f" [{spec.unit}]" if spec.unit else ""
        print(f"{name}{unit}: {spec.description}")
    return EXIT_OK
