"""GPU panel: per device utilisation, memory, temperature, power, clocks, throttling.

Values are judged against the documents' key-metric targets (utilisation
during training, memory in use, temperature below the device's own slowdown
threshold or the documents' figure), through ``verdicts``. Without a GPU the
panel shrinks to one line saying why, and the other panels take the room.
"""

from __future__ import annotations

from aitop.engine.live.series import gpu_values, latest, recent
from aitop.knowledge.judging import verdicts
from aitop.knowledge.judging.verdicts import Targets
from aitop.probes.samples import GpuDevice, GpuSample
from rich.text import Text
from textual.widget import Widget

from . import cuts, fmt
from .panel import Line, Panel, label, spark_line
from .view import View

#: Sparkline span: enough history for the widest panel.
HISTORY_S = 300.0

def value(text: str, status: str, width: int = 18) -> Text:
    """A value in its status colour, padded so sparklines line up."""
    sym = fmt.STATUS_SYMBOL[status] if status != "unknown" else " "
    return Text(f"{text:<{width - 2}}{sym} ", style=fmt.STATUS_STYLE[status])


def neutral(text: str, width: int = 18) -> Text:
    return Text(f"{text:<{width}}")


def device_lines(d: GpuDevice, history: list[GpuSample], width: int,
                 targets: Targets) -> list[Line]:
    """All the lines for one GPU, most important first in priority."""
    out: list[Line] = []
    idx = d.index
    name = d.name or "GPU"
    head = Text(f"{idx} ", style="bold")
    head.append(name.replace("NVIDIA ", ""), style="bold")
    if d.lost:
        head.append("  lost (fell off the bus or reset)", style=fmt.STATUS_STYLE["outside"])
        return [Line(head, 0)]
    tmem, tsm = d.target_mem_bytes, d.target_sm_percent
    if tmem is not None or tsm is not None:
        head.append(f"   target: {fmt.human_bytes(tmem)} mem · {fmt.pct(tsm)} SM", style="dim")
    out.append(Line(head, 2))

    util = d.util_percent
    out.append(Line(spark_line(
        label("util", 9) + value(fmt.pct(util), verdicts.gpu_util(util, targets)),
        gpu_values(history, idx, lambda x: x.util_percent), width, lo=0, hi=100,
    ), 0))

    frac = (d.mem_used_bytes / d.mem_total_bytes
            if d.mem_used_bytes is not None and d.mem_total_bytes else None)
    total = fmt.human_bytes(d.mem_total_bytes, precision=0)
    mem_text = (f"{fmt.human_bytes(d.mem_used_bytes)}/{total}"
                f" {fmt.pct(None if frac is None else frac * 100)}")
    out.append(Line(spark_line(
        label("mem", 9) + value(mem_text, verdicts.gpu_memory(frac, targets)),
        gpu_values(history, idx, lambda x: x.mem_used_bytes), width, lo=0,
        hi=float(d.mem_total_bytes) if d.mem_total_bytes else None,
    ), 1))

    temp_text = f"{fmt.num(d.temperature_c, '.0f', '°C')}"
    if d.temperature_slowdown_c:
        temp_text += f" /{d.temperature_slowdown_c:.0f}"
    out.append(Line(spark_line(
        label("temp", 9)
        + value(temp_text, verdicts.gpu_temperature(d.temperature_c, d.temperature_slowdown_c,
                                                    targets)),
        gpu_values(history, idx, lambda x: x.temperature_c), width, lo=None,
    ), 3))

    power_text = f"{fmt.num(d.power_w, '.0f')}/{fmt.num(d.power_limit_w, '.0f', 'W')}"
    capped = "sw_power_cap" in d.clock_event_reasons
    out.append(Line(spark_line(
        label("power", 9) + (value(power_text, "near") if capped else neutral(power_text)),
        gpu_values(history, idx, lambda x: x.power_w), width, lo=0, hi=d.power_limit_w,
    ), 4))

    clock_text = f"{fmt.num(d.sm_clock_mhz, '.0f')}/{fmt.num(d.sm_clock_max_mhz, '.0f', 'MHz')}"
    slow = (d.sm_clock_mhz is not None and d.sm_clock_max_mhz
            and d.sm_clock_mhz < cuts.SLOW_CLOCK_SHARE * d.sm_clock_max_mhz
            and any(r != "gpu_idle" for r in d.clock_event_reasons))
    out.append(Line(spark_line(
        label("SM clk", 9) + (value(clock_text, "near") if slow else neutral(clock_text)),
        gpu_values(history, idx, lambda x: x.sm_clock_mhz), width, lo=0, hi=d.sm_clock_max_mhz,
    ), 5))

    pcie = Text()
    pcie.append_text(label("PCIe", 9))
    pcie.append(f"tx {fmt.human_rate(d.pcie_tx_bps)}  rx {fmt.human_rate(d.pcie_rx_bps)}")
    out.append(Line(pcie, 6))

    reasons = d.clock_event_reasons
    throttle = label("throttle", 9)
    if reasons:
        throttle.append(", ".join(fmt.words(r) for r in reasons),
                        style=fmt.STATUS_STYLE[verdicts.clock_reasons(reasons)])
    else:
        throttle.append("none", style=fmt.STATUS_STYLE["within"])
    out.append(Line(throttle, 2))
    if d.unsupported:
        out.append(Line(Text(f"not supported by the driver: {', '.join(d.unsupported)}",
                             style="dim"), 8))
    return out


def compact_line(d: GpuDevice, targets: Targets) -> Text:
    """One GPU in one line, for when several share a small panel."""
    text = Text(f"{d.index} ", style="bold")
    text.append(f"{(d.name or 'GPU').replace('NVIDIA ', '')[:14]:<14} ")
    if d.lost:
        text.append("lost", style=fmt.STATUS_STYLE["outside"])
        return text
    status = verdicts.gpu_util(d.util_percent, targets)
    text.append(f"util {fmt.pct(d.util_percent):>4}", style=fmt.STATUS_STYLE[status])
    frac = (d.mem_used_bytes / d.mem_total_bytes
            if d.mem_used_bytes is not None and d.mem_total_bytes else None)
    status = verdicts.gpu_memory(frac, targets)
    text.append(f"  mem {fmt.pct(None if frac is None else frac * 100):>4}",
                style=fmt.STATUS_STYLE[status])
    status = verdicts.gpu_temperature(d.temperature_c, d.temperature_slowdown_c, targets)
    text.append(f"  {fmt.num(d.temperature_c, '.0f', '°C')}", style=fmt.STATUS_STYLE[status])
    reasons = tuple(r for r in d.clock_event_reasons if r != "gpu_idle")
    if reasons:
        text.append("  " + ", ".join(fmt.words(r) for r in reasons),
                    style=fmt.STATUS_STYLE[verdicts.clock_reasons(reasons)])
    return text


class GpuPanel(Panel):
    """One block of lines per GPU (one line per GPU when several do not fit)."""

    TITLE = "GPU"
    DETAIL = "gpu"
    FIT_CONTENT = True

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._compact: list[Line] | None = None

    #: Share of the column the panel may take (keep in step with app.tcss max-height).
    MAX_SHARE = 0.5

    def wanted_height(self, lines: list[Line]) -> int:
        # Several GPUs that do not fit in full: ask only for their one-line form.
        parent = self.parent
        room = int(parent.size.height * self.MAX_SHARE) if isinstance(parent, Widget) else 0
        full = len(lines) + self.gutter.height
        if self._compact is not None and full > room:
            return len(self._compact) + self.gutter.height
        return full

    def fit_lines(self, lines: list[Line], height: int) -> list[Line]:
        if self._compact is not None and height < len(lines):
            return super().fit_lines(self._compact, height)
        return super().fit_lines(lines, height)

    def update_view(self, view: View) -> None:
        sample = latest(view.session.gpu, view.now)
        unavailable = sample is not None and not sample.available
        self.set_class(unavailable, "-unavailable")
        self.FIT_CONTENT = not unavailable
        super().update_view(view)

    def subtitle(self, view: View) -> str:
        sample = latest(view.session.gpu, view.now)
        if sample is not None and sample.driver_version:
            return f"driver {sample.driver_version}"
        return ""

    def lines(self, view: View, width: int) -> list[Line]:
        sample = latest(view.session.gpu, view.now)
        self._compact = None
        if sample is None:
            status = view.session.probe_text("gpu", "waiting for NVML…")
            return [Line(Text(f"GPU: {status}", style="dim"), 0)]
        if not sample.available:
            text = Text("GPU ", style="bold")
            text.append(f"none: {sample.reason or 'NVML unavailable'}", style="dim")
            text.append("  (compute means the CPU)", style="dim")
            return [Line(text, 0)]
        history = recent(view.session.gpu, view.now, HISTORY_S)
        self._compact = ([Line(compact_line(d, view.targets), 0) for d in sample.devices]
                         if len(sample.devices) > 1 else None)
        out: list[Line] = []
        for n, d in enumerate(sample.devices):
            lines = device_lines(d, history, width, view.targets)
            # With several GPUs, later devices yield to the first one's detail.
            out += [Line(line.text, line.priority + 3 * n) for line in lines]
        if not sample.devices:
            out.append(Line(Text("NVML sees no devices", style="dim"), 0))
        return out
