"""I/O detail: rates over the session, mounts, checkpoint writes, per-process I/O."""

from __future__ import annotations

from aitop.engine.live.series import is_checkpoint, latest, tree_io, upto, write_spans
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from ..widgets import fmt
from ..widgets.chart import MetricChart
from ..widgets.io_panel import dataset_mount
from ..widgets.sortable import Cell, SortableTable, num_cell
from ..widgets.view import View
from .base import DetailScreen


class IoScreen(DetailScreen):
    """Where the target reads and writes, and how fast."""

    TITLE = "I/O detail"

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="body"):
            yield Static(id="io-summary", classes="section")
            yield MetricChart("Target tree read", fmt.human_rate, id="io-read")
            yield MetricChart("Target tree write", fmt.human_rate, id="io-write")
            yield Static(Text("Filesystems behind the target's open files", style="bold"),
                         classes="heading")
            mounts = SortableTable(id="io-mounts", default_sort="files")
            for key, title, width in (("mount", "Mount", 18), ("device", "Device", 24),
                                      ("fstype", "Type", 7), ("network", "Network", 8),
                                      ("sched", "Sched", 11), ("read", "Read/s", 9),
                                      ("write", "Write/s", 9), ("busy", "Busy", 6),
                                      ("files", "Files", 6)):
                mounts.add_column(title, key=key, width=width)
            yield mounts
            yield Static(Text("Files written, as seen (checkpoints and others)", style="bold"),
                         classes="heading")
            writes = SortableTable(id="io-writes", default_sort="first", reverse=False)
            for key, title, width in (("first", "Started", 9), ("length", "Seen for", 9),
                                      ("path", "File", 60)):
                writes.add_column(title, key=key, width=width)
            yield writes
            yield Static(Text("Per process", style="bold"), classes="heading")
            procs = SortableTable(id="io-procs", default_sort="read")
            for key, title, width in (("pid", "PID", 8), ("role", "Role", 7),
                                      ("name", "Name", 18), ("read", "Read/s", 10),
                                      ("write", "Write/s", 10)):
                procs.add_column(title, key=key, width=width)
            yield procs

    def update_view(self, view: View) -> None:
        super().update_view(view)
        trees = upto(view.session.processes, view.now)
        reads = [v for v in (tree_io(t)[0] for t in trees) if v is not None]
        writes = [v for v in (tree_io(t)[1] for t in trees) if v is not None]
        self.query_one("#io-read", MetricChart).update_series(reads)
        self.query_one("#io-write", MetricChart).update_series(writes)
        storage = upto(view.session.storage, view.now)
        sample = storage[-1] if storage else None
        summary = Text()
        if sample is None:
            summary.append("No storage samples yet.", style="dim")
        else:
            ds = dataset_mount(sample)
            if ds is not None:
                summary.append(f"Dataset files: {ds.mountpoint} ({ds.fstype})")
                if ds.is_network:
                    summary.append(" ✗ network filesystem: the documents want local NVMe",
                                   style=fmt.STATUS_STYLE["outside"])
            if sample.error:
                summary.append(f"  {sample.error}", style="dim")
        self.query_one("#io-summary", Static).update(summary)
        mount_rows = []
        for m in sample.mounts if sample is not None else ():
            net = fmt.STATUS_STYLE["outside"] if m.is_network else ""
            mount_rows.append((m.mountpoint, [
                Cell(m.mountpoint), Cell(m.device, style="dim"), Cell(m.fstype, style=net),
                Cell("✗ yes" if m.is_network else "no", 1.0 if m.is_network else 0.0, net),
                Cell(m.scheduler or "—"),
                num_cell(m.read_bps, fmt.human_rate(m.read_bps)),
                num_cell(m.write_bps, fmt.human_rate(m.write_bps)),
                num_cell(m.busy_percent, fmt.pct(m.busy_percent)),
                num_cell(m.open_files, str(m.open_files)),
            ]))
        self.query_one("#io-mounts", SortableTable).set_rows(mount_rows)
        write_rows = []
        for span in write_spans(storage):
            active = sample is not None and span.path in sample.writing
            write_rows.append((f"{span.path}@{span.first}", [
                num_cell(span.first, fmt.clock(span.first)),
                num_cell(span.last - span.first,
                         fmt.duration(span.last - span.first) + (" …" if active else "")),
                Cell(span.path + ("" if is_checkpoint(span.path) else "  (not a checkpoint)"),
                     span.path,
                     fmt.STATUS_STYLE["near"] if active and is_checkpoint(span.path) else ""),
            ]))
        self.query_one("#io-writes", SortableTable).set_rows(write_rows)
        tree = latest(view.session.processes, view.now)
        proc_rows = []
        for p in tree.processes if tree is not None else ():
            proc_rows.append((str(p.pid), [
                num_cell(p.pid, str(p.pid)), Cell(p.role), Cell(p.name),
                num_cell(p.read_bps, fmt.human_rate(p.read_bps)),
                num_cell(p.write_bps, fmt.human_rate(p.write_bps)),
            ]))
        self.query_one("#io-procs", SortableTable).set_rows(proc_rows)
