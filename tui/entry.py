"""The ``aitop`` console script: the engine's command line with this UI plugged in.

The command line itself is the engine's (:mod:`aitop.engine.cli`); it opens the
terminal UI through the runner passed here. Textual is imported only when the
UI really opens, so ``--headless`` runs and exports never load it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from aitop.engine import cli
from aitop.engine.compare.runs import Run
from aitop.engine.live.node import NodeSource
from aitop.engine.live.source import DataSource


def run_ui(
    source: DataSource | NodeSource, *, refresh_s: float, export_path: Path | None,
    export_on_exit: bool, baseline: Run | None = None,
) -> int:
    """Run the Textual app on ``source`` (one job's, or the node view) until the user quits."""
    if isinstance(source, NodeSource):
        from .node_app import run_node_app

        return run_node_app(source, refresh_s=refresh_s, export_path=export_path,
                            export_on_exit=export_on_exit)
    from .app import run_app

    return run_app(source, refresh_s=refresh_s, export_path=export_path,
                   export_on_exit=export_on_exit, baseline=baseline)


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main(argv, run_ui=run_ui)
