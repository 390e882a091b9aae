"""GPU detail: every metric over the session, throttle reasons with durations, processes."""

from __future__ import annotations

from collections.abc import Callable

from aitop.engine.live.series import gpu_values, latest, reason_durations, upto
from aitop.knowledge.judging import verdicts
from aitop.knowledge.judging.verdicts import Targets
from aitop.probes.samples import GpuDevice, GpuSample
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from ..widgets import fmt
from ..widgets.chart import MetricChart
from ..widgets.sortable import Cell, SortableTable, num_cell
from ..widgets.view import View
from .base import DetailScreen

Getter = Callable[[GpuDevice], float | None]

#: How a device's last value is judged, against the run's targets.
Judge = Callable[[GpuDevice, Targets], str]


def _unjudged(d: GpuDevice, targets: Targets) -> str:
    return "unknown"


#: (key, title, getter, how to print a value, how to judge the last value)
METRICS: list[tuple[str, str, Getter, Callable[[float], str], Judge]] = [
    ("util", "Utilisation", lambda d: d.util_percent, lambda v: f"{v:.0f}%",
     lambda d, targets: verdicts.gpu_util(d.util_percent, targets)),
    ("mem", "Memory used", lambda d: d.mem_used_bytes, fmt.human_bytes,
     lambda d, targets: verdicts.gpu_memory(
         d.mem_used_bytes / d.mem_total_bytes
         if d.mem_used_bytes is not None and d.mem_total_bytes else None, targets)),
    ("memutil", "Memory bandwidth busy", lambda d: d.mem_util_percent, lambda v: f"{v:.0f}%",
     _unjudged),
    ("temp", "Temperature", lambda d: d.temperature_c, lambda v: f"{v:.0f}°C",
     lambda d, targets: verdicts.gpu_temperature(d.temperature_c, d.temperature_slowdown_c,
                                                 targets)),
    ("power", "Power", lambda d: d.power_w, lambda v: f"{v:.0f}W", _unjudged),
    ("clock", "SM clock", lambda d: d.sm_clock_mhz, lambda v: f"{v:.0f}MHz", _unjudged),
    ("pcie_tx", "PCIe TX", lambda d: d.pcie_tx_bps, fmt.human_rate, _unjudged),
    ("pcie_rx", "PCIe RX", lambda d: d.pcie_rx_bps, fmt.human_rate, _unjudged),
    ("target_sm", "Target's SM share", lambda d: d.target_sm_percent, lambda v: f"{v:.0f}%",
     _unjudged),
    ("target_mem", "Target's memory", lambda d: d.target_mem_bytes, fmt.human_bytes,
     _unjudged),
]


#: Charts drawn on a 0-100 % scale; the others scale to the device's limit or peak.
PERCENT = frozenset({"util", "memutil", "target_sm"})


def chart_top(key: str, d: GpuDevice) -> float | None:
    """The top of a chart's scale: the device's own limit where it has one."""
    return {
        "mem": d.mem_total_bytes,
        "target_mem": d.mem_total_bytes,
        "power": d.power_limit_w,
        "clock": d.sm_clock_max_mhz,
        "temp": d.temperature_slowdown_c,
    }.get(key)


def limits(d: GpuDevice) -> str:
    """The device's limits, which the charts are read against."""
    parts = []
    if d.mem_total_bytes:
        parts.append(f"{fmt.human_bytes(d.mem_total_bytes)} memory")
    if d.temperature_slowdown_c:
        parts.append(f"slowdown at {d.temperature_slowdown_c:.0f}°C")
    if d.power_limit_w:
        parts.append(f"power limit {d.power_limit_w:.0f}W")
    if d.sm_clock_max_mhz:
        parts.append(f"max SM clock {d.sm_clock_max_mhz:.0f}MHz")
    return " · ".join(parts)


class GpuScreen(DetailScreen):
    """Charts per GPU over the session, throttling and GPU processes."""

    TITLE = "GPU detail"

    def __init__(self) -> None:
        super().__init__()
        view = self.current_view()
        sample = latest(view.session.gpu, view.now) if view is not None else None
        self.indices = [d.index for d in sample.devices] if sample and sample.available else []
        self.reason = sample.reason if sample is not None and not sample.available else None

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="body"):
            yield Static(id="gpu-summary", classes="section")
            for i in self.indices:
                yield Static(id=f"gpu{i}-title", classes="heading")
                for key, title, _get, show, _judge in METRICS:
                    yield MetricChart(title, show, hi=100.0 if key in PERCENT else None,
                                      id=f"gpu{i}-{key}")
                yield Static(Text("Throttle reasons over the session", style="bold"),
                             classes="heading")
                table = SortableTable(id=f"gpu{i}-reasons", default_sort="seconds")
                table.add_column("Reason", key="reason", width=28)
                table.add_column("Active for", key="seconds", width=12)
                table.add_column("Share", key="share", width=8)
                table.add_column("Now", key="now", width=5)
                yield table
            yield Static(Text("Processes on the GPUs", style="bold"), classes="heading")
            procs = SortableTable(id="gpu-procs", default_sort="mem")
            for key, title, width in (("gpu", "GPU", 4), ("pid", "PID", 8), ("name", "Name", 18),
                                      ("target", "Target", 7), ("mem", "Memory", 10),
                                      ("sm", "SM %", 6)):
                procs.add_column(title, key=key, width=width)
            yield procs

    def update_view(self, view: View) -> None:
        super().update_view(view)
        samples = upto(view.session.gpu, view.now)
        sample = samples[-1] if samples else None
        indices = [d.index for d in sample.devices] if sample and sample.available else []
        if indices != self.indices:
            # GPUs appeared (or went): rebuild the charts for the new set.
            self.indices = indices
            self.call_later(self._rebuild)
            return
        summary = self.query_one("#gpu-summary", Static)
        if sample is None:
            summary.update(Text("No GPU samples yet.", style="dim"))
            return
        if not sample.available:
            summary.update(Text(f"No GPU: {sample.reason or 'NVML unavailable'}. "
                                "The compute panels then describe the CPU.", style="dim"))
            return
        span = samples[-1].t - samples[0].t if len(samples) > 1 else 0.0
        summary.update(Text(f"{len(sample.devices)} GPU(s) · driver "
                            f"{sample.driver_version or '?'} · {len(samples)} samples over "
                            f"{fmt.duration(span)}", style="dim"))
        for d in sample.devices:
            if d.index not in self.indices:
                continue
            self._update_device(d, samples, view.targets)
        self._update_processes(sample)

    async def _rebuild(self) -> None:
        await self.recompose()
        view = self.current_view()
        if view is not None:
            self.update_view(view)

    def _update_device(self, d: GpuDevice, samples: list[GpuSample], targets: Targets) -> None:
        i = d.index
        title = Text(f"GPU {i} · {d.name or '?'}", style="bold")
        title.append(f"   {limits(d)}", style="dim")
        if d.lost:
            title.append("   lost", style=fmt.STATUS_STYLE["outside"])
        self.query_one(f"#gpu{i}-title", Static).update(title)
        for key, _title, get, _show, judge in METRICS:
            chart = self.query_one(f"#gpu{i}-{key}", MetricChart)
            series = gpu_values(samples, i, get)
            note = "not supported by this driver" if key in d.unsupported else ""
            top = chart_top(key, d)
            chart.update_series(series, judge(d, targets), note, hi=float(top) if top else None)
        durations = reason_durations(samples, i)
        total = samples[-1].t - samples[0].t if len(samples) > 1 else 0.0
        rows = []
        for reason, seconds in durations.items():
            active = reason in d.clock_event_reasons
            status = verdicts.clock_reasons((reason,))
            rows.append((reason, [
                Cell(fmt.words(reason), reason, fmt.STATUS_STYLE[status]),
                num_cell(seconds, fmt.duration(seconds)),
                num_cell(seconds / total if total else None,
                         fmt.pct(seconds / total * 100 if total else None)),
                Cell("yes" if active else "", 1.0 if active else 0.0,
                     fmt.STATUS_STYLE[status] if active else ""),
            ]))
        self.query_one(f"#gpu{i}-reasons", SortableTable).set_rows(rows)

    def _update_processes(self, sample: GpuSample) -> None:
        rows = []
        for d in sample.devices:
            for p in d.processes:
                rows.append((f"{d.index}:{p.pid}", [
                    num_cell(d.index, str(d.index)),
                    num_cell(p.pid, str(p.pid)),
                    Cell(p.name or "?"),
                    Cell("yes" if p.in_target else "", 1.0 if p.in_target else 0.0,
                         "bold" if p.in_target else "dim"),
                    num_cell(p.used_memory_bytes, fmt.human_bytes(p.used_memory_bytes)),
                    num_cell(p.sm_percent, fmt.pct(p.sm_percent)),
                ]))
        self.query_one("#gpu-procs", SortableTable).set_rows(rows)
