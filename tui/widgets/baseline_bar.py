"""One line under the panels: this run against a baseline (``--baseline FILE``).

Mounted only when a baseline is given. The comparison itself (intervals,
significance, findings resolved / still firing / new) is the engine's
(``aitop.engine.compare.diff``); this widget only builds the live run from the frame
on screen, once a second, and shows the engine's one-line summary.
"""

from __future__ import annotations

from aitop.engine.compare.diff import compare, summary_line
from aitop.engine.compare.runs import Run, run_of_session
from textual.widgets import Static

from .view import View

#: Seconds between comparisons: the step counter is read every few seconds anyway.
UPDATE_EVERY_S = 1.0


class BaselineBar(Static):
    """``vs baseline: steps/s 7.10 [6.9-7.3] -> 12.30 (+73%, improved) · ...``"""

    DEFAULT_CSS = """
    BaselineBar {
        height: auto;
        max-height: 2;
        padding: 0 1;
        background: $boost;
    }
    """

    def __init__(self, baseline: Run, *, id: str | None = None) -> None:
        super().__init__(f"vs baseline {baseline.label}: waiting for this run's first samples",
                         id=id, markup=False)
        self.baseline = baseline

    def on_mount(self) -> None:
        self.set_interval(UPDATE_EVERY_S, self.refresh_comparison)

    def refresh_comparison(self) -> None:
        view = getattr(self.app, "view", None)
        if isinstance(view, View):
            self.update(self.line(view))

    def line(self, view: View) -> str:
        """The summary for one frame (no next steps: they are for ``aitop diff``)."""
        run = run_of_session(view.session, view.diagnosis, "this run", "live")
        return summary_line(compare(self.baseline, run, knowledge=None))
