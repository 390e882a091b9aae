"""The ``aitop`` console script: the engine's command line with this UI plugged in.

The command line itself is the engine's (:mod:`aitop.engine.cli`); it opens the
terminal UI through the runner passed here. Textual is imported only when the
UI really opens, so ``--headless`` runs and exports never load it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

from aitop.engine import cli
from aitop.engine.runs import Run
from aitop.engine.source import DataSource


class TextualUi:
    """The engine's UI runner: the Textual app."""

    def prepare(self) -> None:
        """Import the app on a thread while the engine attaches.

        Attaching spends most of its time waiting (py-spy's first dump, the
        rule files); Textual and the app take ~0.3 s to import. Done side by
        side, the first frame comes that much sooner.
        """
        threading.Thread(target=_import_app, name="aitop-ui-import", daemon=True).start()

    def __call__(
        self, source: DataSource, *, refresh_s: float, export_path: Path | None,
        export_on_exit: bool, baseline: Run | None = None,
    ) -> int:
        """Run the Textual app on ``source`` until the user quits."""
        from .app import run_app

        return run_app(source, refresh_s=refresh_s, export_path=export_path,
                       export_on_exit=export_on_exit, baseline=baseline)


def _import_app() -> None:
    from . import app  # noqa: F401


run_ui = TextualUi()


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main(argv, run_ui=run_ui)
