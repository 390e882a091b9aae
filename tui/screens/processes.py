"""Process detail: every process and thread of the target tree, sortable.

Threads matter: a ``pt_data_pin`` thread shows that pin_memory is on, and one
thread at 100 % in the main process is the GIL-bound training loop.
"""

from __future__ import annotations

import shlex
from typing import ClassVar

from aitop.engine.live.series import latest
from aitop.knowledge.judging import verdicts
from aitop.knowledge.judging.verdicts import Targets
from aitop.probes.samples import ProcessTreeSample
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Static

from ..widgets import fmt
from ..widgets.sortable import Cell, SortableTable, num_cell
from ..widgets.view import View
from .base import DetailScreen

COLUMNS: tuple[tuple[str, str, int], ...] = (
    ("kind", "Kind", 7),
    ("pid", "PID/TID", 8),
    ("parent", "Parent", 8),
    ("role", "Role", 7),
    ("name", "Name", 18),
    ("state", "State", 9),
    ("cpu", "CPU %", 7),
    ("rss", "RSS", 8),
    ("threads", "Thr", 4),
    ("read", "Read/s", 9),
    ("write", "Write/s", 9),
    ("cmd", "Command", 40),
)


def rows_of(tree: ProcessTreeSample, with_threads: bool,
            targets: Targets) -> list[tuple[str, list[Cell]]]:
    """One row per process, then (optionally) one per thread."""
    rows: list[tuple[str, list[Cell]]] = []
    for p in tree.processes:
        # Only a process outside its target is coloured: the table is for finding
        # the one that fills its core, not for grading every row.
        cpu = verdicts.process_cpu(p.cpu_percent, targets)
        cpu_style = fmt.STATUS_STYLE[cpu] if cpu == "outside" else ""
        rows.append((f"p{p.pid}", [
            Cell("process", "process"),
            num_cell(p.pid, str(p.pid)),
            num_cell(p.ppid, str(p.ppid) if p.ppid is not None else "—"),
            Cell(p.role, p.role, "bold" if p.role == "main" else ""),
            Cell(p.name),
            Cell(p.status or "—"),
            num_cell(p.cpu_percent, fmt.pct(p.cpu_percent, digits=1), cpu_style),
            num_cell(p.rss_bytes, fmt.human_bytes(p.rss_bytes)),
            num_cell(p.num_threads, str(p.num_threads) if p.num_threads is not None else "—"),
            num_cell(p.read_bps, fmt.human_rate(p.read_bps)),
            num_cell(p.write_bps, fmt.human_rate(p.write_bps)),
            Cell(shlex.join(p.cmdline) if p.cmdline else "", style="dim"),
        ]))
        if not with_threads:
            continue
        for t in p.threads:
            rows.append((f"t{p.pid}:{t.tid}", [
                Cell("thread", "thread", "dim"),
                num_cell(t.tid, str(t.tid)),
                num_cell(p.pid, str(p.pid)),
                Cell(p.role, p.role, "dim"),
                Cell(t.name, style="bold" if t.name == "pt_data_pin" else ""),
                Cell(""),
                num_cell(t.cpu_percent, fmt.pct(t.cpu_percent, digits=1)),
                Cell(""), Cell(""), Cell(""), Cell(""), Cell(""),
            ]))
    return rows


class ProcessScreen(DetailScreen):
    """The target tree as a sortable table."""

    TITLE = "Processes"

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("c", "sort('cpu')", "Sort CPU"),
        Binding("m", "sort('rss')", "Sort RSS"),
        Binding("n", "sort('name')", "Sort name"),
        Binding("d", "sort('pid')", "Sort PID"),
        Binding("t", "toggle_threads", "Threads"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.with_threads = True

    def compose_body(self) -> ComposeResult:
        yield Static(id="proc-summary", classes="section")
        table = SortableTable(id="procs", default_sort="cpu")
        for key, title, width in COLUMNS:
            table.add_column(title, key=key, width=width)
        yield table

    def on_mount(self) -> None:
        self.query_one(SortableTable).focus()
        super().on_mount()

    def action_sort(self, column: str) -> None:
        self.query_one(SortableTable).sort_by(column)

    def action_toggle_threads(self) -> None:
        self.with_threads = not self.with_threads
        view = self.current_view()
        if view is not None:
            self.update_view(view)

    def update_view(self, view: View) -> None:
        super().update_view(view)
        tree = latest(view.session.processes, view.now)
        summary = self.query_one("#proc-summary", Static)
        table = self.query_one(SortableTable)
        if tree is None:
            summary.update(Text("No process samples yet.", style="dim"))
            table.set_rows([])
            return
        n_threads = sum(len(p.threads) for p in tree.processes)
        text = Text(f"{len(tree.processes)} processes, {n_threads} threads at "
                    f"{fmt.clock(tree.t)}", style="dim")
        if tree.pin_memory_thread is not None:
            text.append(" · pin-memory thread: ", style="dim")
            text.append("yes" if tree.pin_memory_thread else "no",
                        style=fmt.STATUS_STYLE["within" if tree.pin_memory_thread else "near"])
        if not tree.alive:
            text.append(" · target exited", style=fmt.STATUS_STYLE["outside"])
        if tree.error:
            text.append(f" · {tree.error}", style=fmt.STATUS_STYLE["near"])
        text.append(f"   sorted by {table.sort_column} "
                    f"({'descending' if table.sort_reverse else 'ascending'})", style="dim")
        summary.update(text)
        table.set_rows(rows_of(tree, self.with_threads, view.targets))
