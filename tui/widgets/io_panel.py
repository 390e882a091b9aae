"""I/O panel: what the target tree reads and writes, on which filesystems.

Network filesystems are flagged because the documents want training data on
local NVMe, and checkpoint writes are shown as they happen because a blocking
checkpoint is the classic "long epochs, short steps" symptom.
"""

from __future__ import annotations

from aitop.engine.live.series import is_checkpoint, latest, recent, tree_io, write_spans
from aitop.probes.samples import MountInfo, StorageSample
from rich.text import Text

from . import fmt
from .panel import Line, Panel, label, spark_line
from .view import View

HISTORY_S = 300.0


def dataset_mount(sample: StorageSample) -> MountInfo | None:
    """The mount holding most of the target's open files (its dataset, where it
    reads one: named for what it is, the most files, not guessed as a dataset)."""
    mounts = [m for m in sample.mounts if m.open_files > 0]
    return max(mounts, key=lambda m: m.open_files) if mounts else None


def mount_line(m: MountInfo, is_dataset: bool) -> Text:
    text = Text(f"{fmt.ellipsize(m.mountpoint, 14):<14} ")
    text.append(f"{m.fstype:<6}", style=fmt.STATUS_STYLE["outside"] if m.is_network else "")
    text.append(f" r {fmt.human_rate(m.read_bps):>9} w {fmt.human_rate(m.write_bps):>9}")
    if m.busy_percent is not None:
        text.append(f" {m.busy_percent:.0f}% busy", style="dim")
    if m.is_network:
        text.append("  ✗ network", style=fmt.STATUS_STYLE["outside"])
    if is_dataset:
        text.append("  most files", style="bold")
    return text


class IoPanel(Panel):
    """Target tree read/write rates, mounts, checkpoint writes."""

    TITLE = "I/O"
    DETAIL = "io"
    FIT_CONTENT = True

    def lines(self, view: View, width: int) -> list[Line]:
        out: list[Line] = []
        trees = recent(view.session.processes, view.now, HISTORY_S)
        if trees:
            read, write = tree_io(trees[-1])
            head = label("read") + Text(f"{fmt.human_rate(read):<11}")
            out.append(Line(spark_line(
                head, [v for v in (tree_io(t)[0] for t in trees) if v is not None], width,
            ), 0))
            head = label("write") + Text(f"{fmt.human_rate(write):<11}")
            out.append(Line(spark_line(
                head, [v for v in (tree_io(t)[1] for t in trees) if v is not None], width,
            ), 1))
        sample = latest(view.session.storage, view.now)
        if sample is None:
            status = view.session.probe_text("storage", "waiting…")
            out.append(Line(Text(f"storage: {status}", style="dim"), 2))
            return out
        if sample.error:
            out.append(Line(Text(f"storage: {sample.error}", style="dim"), 2))
        ds = dataset_mount(sample)
        if ds is not None:
            text = label("files")
            text.append(f"{ds.mountpoint} ({ds.fstype}", style="")
            if ds.is_network:
                text.append(", network filesystem", style=fmt.STATUS_STYLE["outside"])
            text.append(f", {ds.open_files} files open)")
            out.append(Line(text, 1))
        for m in sample.mounts:
            out.append(Line(mount_line(m, m is ds), 4))
        out.append(Line(self._checkpoint_line(view, sample), 2))
        return out

    def _checkpoint_line(self, view: View, sample: StorageSample) -> Text:
        """A checkpoint being written now (near: it may stall the loop), else the last one."""
        text = label("ckpt")
        # The last ten minutes: enough for "the last checkpoint", bounded per refresh.
        spans = [s for s in write_spans(recent(view.session.storage, view.now, 600.0))
                 if is_checkpoint(s.path)]
        current = [s for s in spans if s.path in sample.writing]
        if current:
            since = min(s.first for s in current)
            names = ", ".join(s.path for s in current)
            text.append(f"writing {names} ({fmt.duration(view.now - since)})",
                        style=fmt.STATUS_STYLE["near"])
        elif spans:
            last = spans[-1]
            text.append(f"last {last.path} at {fmt.clock(last.first)} "
                        f"({fmt.duration(last.last - last.first)}), "
                        f"{fmt.duration(view.now - last.last)} ago", style="dim")
        else:
            text.append("no checkpoint writes seen", style="dim")
        others = [p for p in sample.writing if not is_checkpoint(p)]
        if others:
            text.append(f"  · also writing {len(others)} other file(s)", style="dim")
        return text
