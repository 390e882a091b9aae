"""How a command hands a source to the full-screen UI without importing it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # names in annotations only: a command need not load them to start
    from aitop.engine.compare.runs import Run
    from aitop.engine.live.node import NodeSource
    from aitop.engine.live.source import DataSource

#: The UI's default refresh: glances' and btop's default too (its cost at 1 s:
#: docs/benchmarks.md, "The session"); keys never wait for it.
DEFAULT_REFRESH_S = 2.0
NO_UI = "the terminal UI is not installed here: add --headless (or run the `aitop` command)"


class UiRunner(Protocol):
    """Opens the full-screen UI on a source until the user quits; the exit code. A
    ``NodeSource`` opens the node view (every job of the machine), a ``DataSource``
    one job's view."""

    def __call__(
        self, source: DataSource | NodeSource, *, refresh_s: float, export_path: Path | None,
        export_on_exit: bool, baseline: Run | None = None,
    ) -> int: ...
