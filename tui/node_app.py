"""The node view's application: every job of the machine, and any job's full view.

``aitop`` alone opens here. The app is ``AitopApp`` with the node's screen as
its default: Enter on a job points the app at that job's own ``DataSource``
and pushes the main screen, so a job's view is exactly what ``aitop --pid``
shows (ranks, detail screens and all); Escape pops it and the node is drawn
again. The fleet scans and attaches on threads of its own: each tick only
reads what it has published (``engine.fleet.rows.node_table``), so keys are
answered at once however many jobs it watches. In a node recording one time
cursor moves over the node and every job's view.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from aitop.engine.fleet.rows import NodeTable, node_table
from aitop.engine.headless.export import ExportFlow, ExportRequest
from aitop.engine.headless.node_export import NodeWriter
from aitop.engine.live.node import NodeSource, no_job_source
from aitop.engine.live.source import NOTHING
from textual.binding import Binding, BindingType
from textual.screen import Screen

from .app import SHUTDOWN_LIMIT_S, AitopApp
from .screens.main import MainScreen
from .screens.node import NodeScreen


class NodeApp(AitopApp):
    """The node view (live, or a node recording) and the job views it opens."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "back_to_node", "Node",
                tooltip="from a job's view back to every job of the machine"),
    ]

    def __init__(
        self,
        node: NodeSource,
        *,
        refresh_s: float = 1.0,
        export_path: Path | None = None,
        export_on_exit: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(no_job_source(node.knowledge), refresh_s=refresh_s, clock=clock)
        self.node = node
        #: The job whose view is open (its key), None on the node's screen.
        self.job_key: str | None = None
        #: The node as last drawn (kept while paused).
        self.node_table: NodeTable | None = None
        self.export_flow = ExportFlow(NodeWriter(node), path=export_path,
                                      on_exit=export_on_exit)
        span = node.timeline()
        if span is not None:
            self.replay_range = (span.start, span.end)
            self._step = span.step_s
            self.cursor = span.end

    @property
    def live(self) -> bool:
        return bool(self.node.live)

    def get_default_screen(self) -> Screen[None]:
        return NodeScreen()

    # ---------------------------------------------------------------- ticks

    def read_conclusion(self) -> None:
        if self.job_key is not None:
            super().read_conclusion()

    def evaluating_for(self) -> float | None:
        return super().evaluating_for() if self.job_key is not None else None

    def redraw(self) -> None:
        """A job's view when one is open, else the node's table."""
        if self.job_key is not None:
            super().redraw()
            return
        if not self.is_running or not self.screen_stack:
            return
        if not (self.paused and self.node_table is not None):
            self.node_table = node_table(self.node, self.current_now())
        screen = self.screen
        if isinstance(screen, NodeScreen) and screen.is_mounted:
            screen.update_node(self.node_table)

    # ---------------------------------------------------------- job views

    def on_node_screen_open_job(self, message: NodeScreen.OpenJob) -> None:
        self.open_job(message.key, message.pid)

    def open_job(self, key: str, rank_pid: int | None = None) -> None:
        """Show the job ``key``'s full view (at rank ``rank_pid`` when given)."""
        t = None if self.live else self.current_now()
        job = next((j for j in self.node.jobs(t) if j.key == key), None)
        if job is None:
            self.notify("That job has ended.", timeout=3)
            return
        if job.source is None:
            why = job.reason or ("attaching: its view opens in a moment" if job.status ==
                                 "attaching" else "its launcher has not started its ranks")
            self.notify(f"PID {job.pid} is not watched: {why}", timeout=6)
            return
        self.source = job.source
        self.job_key = key
        self.viewed_pid = None
        self.conclusion = NOTHING
        self.node.focus(key)
        self.read_conclusion()
        self.view = self.make_view()
        self.push_screen(MainScreen())
        if rank_pid is not None and rank_pid != job.source.session.target_pid:
            self.action_view_rank(rank_pid)
        self.refresh_bindings()

    def action_back_to_node(self) -> None:
        """Close the job's view and draw the node again."""
        self.job_key = None
        self.viewed_pid = None
        self.node.focus(None)
        self.pop_screen()
        self.refresh_bindings()
        self.redraw()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "back_to_node":
            return (self.job_key is not None and isinstance(self.screen, MainScreen)
                    and self.viewed_pid is None)
        if self.job_key is None and action in ("open_detail", "view_rank"):
            return False  # a job's detail screens need a job: Enter opens one
        return super().check_action(action, parameters)

    # -------------------------------------------------------------- export

    def _export_request(self, svg: str | None) -> ExportRequest:
        return ExportRequest(self.current_now(), None, svg)

    def stop_sampling(self) -> None:
        """Stop sampling every job now (see ``AitopApp._on_signal``)."""
        self.node.close()
        super().stop_sampling()


def run_node_app(
    node: NodeSource, *, refresh_s: float = 1.0, export_path: Path | None = None,
    export_on_exit: bool = False,
) -> int:
    """Run the node view until the user quits; the node is closed on the way out."""
    app = NodeApp(node, refresh_s=refresh_s, export_path=export_path,
                  export_on_exit=export_on_exit)
    app.exit_watchdog = True
    try:
        result = app.run()
    finally:
        app.shut_down.set()
        app.export_flow.finish(SHUTDOWN_LIMIT_S)
        node.close()
    for line in app.exit_messages:
        print(line)
    for line in app.exit_errors:
        print(line, file=sys.stderr)
    if result is not None:
        return int(result)
    return int(app.return_code or 0)
