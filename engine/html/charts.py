"""What the HTML report charts: the session's samples as time series.

Pure functions of a session, no drawing (:mod:`aitop.engine.html.svg` draws).
Times are seconds since ``start`` (the attach), as every other report states
them, so a finding's "fired after 12 s" sits at 12 on every chart's axis.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aitop.engine.live.series import tree_cpu
from aitop.probes.session import PHASES, Session

#: Phases drawn in this order, bottom to top (the session's own order).
PHASE_ORDER: tuple[str, ...] = PHASES


@dataclass(frozen=True, slots=True)
class Line:
    """One series on a chart: ``(seconds since start, value)`` in time order."""

    label: str
    points: tuple[tuple[float, float], ...]


@dataclass(frozen=True, slots=True)
class Chart:
    """A chart's title, unit and lines; ``stacked`` lines are shares that add up to 1."""

    key: str
    title: str
    unit: str
    lines: tuple[Line, ...]
    stacked: bool = False

    @property
    def points(self) -> int:
        return sum(len(line.points) for line in self.lines)


def phase_chart(session: Session, start: float) -> Chart | None:
    """Each stack window's phase shares, stacked: what the training thread did when."""
    windows = [w for w in session.stacks.items() if w.total_samples > 0]
    if not windows:
        return None
    shares: dict[str, list[tuple[float, float]]] = {p: [] for p in PHASE_ORDER}
    for w in windows:
        for phase in PHASE_ORDER:
            share = w.phase_counts.get(phase, 0) / w.total_samples
            shares[phase].append((w.t_end - start, share))
    lines = tuple(Line(p, tuple(pts)) for p, pts in shares.items()
                  if any(v > 0 for _, v in pts))
    return Chart("phases", "Phases of the training thread", "share", lines, stacked=True)


def steps_chart(step_windows: Sequence[tuple[float, float, float]], start: float) -> Chart | None:
    """Steps/s in each window between two readings of the loop's counter."""
    points = tuple(((t0 + t1) / 2 - start, n / (t1 - t0))
                   for t0, t1, n in step_windows if t1 > t0)
    if not points:
        return None
    return Chart("steps", "Steps per second", "steps/s", (Line("steps/s", points),))


def cpu_chart(session: Session, start: float) -> Chart | None:
    """Cores the job's process tree keeps busy (100 % of one core = 1)."""
    points = []
    for sample in session.processes.items():
        cpu = tree_cpu(sample)
        if cpu is not None:
            points.append((sample.t - start, cpu / 100.0))
    if not points:
        return None
    return Chart("cpu", "CPU of the job's processes", "cores", (Line("cores busy", tuple(points)),))


def memory_chart(session: Session, start: float) -> Chart | None:
    """Resident memory of the job's process tree, in MB."""
    points = []
    for sample in session.processes.items():
        rss = [p.rss_bytes for p in sample.processes if p.rss_bytes is not None]
        if rss:
            points.append((sample.t - start, sum(rss) / 1e6))
    if not points:
        return None
    return Chart("memory", "Host memory of the job (RSS)", "MB", (Line("RSS", tuple(points)),))


def gpu_charts(session: Session, start: float) -> list[Chart]:
    """Utilisation and memory of each GPU NVML reported, when it reported any."""
    util: dict[str, list[tuple[float, float]]] = {}
    memory: dict[str, list[tuple[float, float]]] = {}
    for sample in session.gpu.items():
        if not sample.available:
            continue
        for dev in sample.devices:
            name = f"GPU {dev.index}"
            if dev.util_percent is not None:
                util.setdefault(name, []).append((sample.t - start, dev.util_percent))
            if dev.mem_used_bytes is not None:
                memory.setdefault(name, []).append((sample.t - start, dev.mem_used_bytes / 1e6))
    charts = []
    if util:
        charts.append(Chart("gpu_util", "GPU utilisation", "%",
                            tuple(Line(k, tuple(v)) for k, v in util.items())))
    if memory:
        charts.append(Chart("gpu_memory", "GPU memory used", "MB",
                            tuple(Line(k, tuple(v)) for k, v in memory.items())))
    return charts


def charts_of(
    session: Session, start: float, step_windows: Sequence[tuple[float, float, float]]
) -> list[Chart]:
    """Every chart the session has data for, in the report's order."""
    charts = [phase_chart(session, start), steps_chart(step_windows, start),
              cpu_chart(session, start), memory_chart(session, start)]
    return [c for c in charts if c is not None] + gpu_charts(session, start)
