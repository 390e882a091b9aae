"""Current values for the documents' key-metrics table, judged against its targets.

The knowledge screen highlights these in the table and the Markdown report
prints them, so both say the same thing. Ids are those of ``metrics:`` in
``knowledge/data/documents.yaml``. Pure functions, no Textual.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from aitop.engine.live.series import latest, recent
from aitop.engine.reports import humanize as fmt
from aitop.knowledge.judging import verdicts
from aitop.knowledge.judging.verdicts import Targets
from aitop.knowledge.metrics.gpu import gpu_util_over
from aitop.knowledge.reading.loader import KnowledgeBase
from aitop.probes.session import Session
from aitop.probes.steps import step_rates


class Judged(Protocol):
    """What a key metric reads of a verdict: its metrics (a Diagnosis, or the typed
    report, whose rounded metrics the Markdown report reads)."""

    @property
    def metrics(self) -> Mapping[str, float | None]: ...


@dataclass(frozen=True)
class Reading:
    """A metric's current value as shown, and its status against the target."""

    display: str
    status: str = "unknown"


#: The metric whose target each key metric's reading is judged against (its
#: ``verdicts`` function's).
JUDGED_AS: dict[str, str] = {
    "gpu_utilization": "gpu_util",
    "gpu_memory_usage": "gpu_mem_used",
    "data_loading_time": "phase_data_wait",
    "gpu_temperature": "gpu_temp_margin",
}


def target_text(metric_id: str, documents_text: str, targets: Targets) -> str:
    """The target a key metric is judged against, in words: the documents' own,
    or the one a ``--rules`` file put in its place."""
    target = targets.get(JUDGED_AS.get(metric_id, ""))
    return target.text if target is not None else documents_text


def key_metric_rows(knowledge: KnowledgeBase) -> tuple[tuple[str, str, str], ...]:
    """``(id, metric, target)`` of the documents' key-metrics table, the target as
    the knowledge base judges it (a user's ``--rules`` target in place of the documents')."""
    targets = knowledge.facts.targets
    return tuple((m.id, m.metric, target_text(m.id, m.target, targets))
                 for m in knowledge.documents.metrics)


def _metric(d: Judged | None, key: str) -> float | None:
    if d is None:
        return None
    v = d.metrics.get(key)
    return None if v is None else float(v)


def gpu_utilization(s: Session, d: Judged | None, now: float, w: float,
                    targets: Targets) -> Reading:
    # Before the first diagnosis, the same definition over the same window.
    util = _metric(d, "gpu_util_mean")
    if util is None:
        util = gpu_util_over(recent(s.gpu, now, w))
    if util is None:
        return Reading("no GPU" if _no_gpu(s, now) else "—")
    return Reading(f"{util:.0f}% mean", verdicts.gpu_util(util, targets))


def gpu_memory_usage(s: Session, d: Judged | None, now: float, w: float,
                     targets: Targets) -> Reading:
    used = _metric(d, "gpu_mem_used_mean")
    if used is None:
        g = latest(s.gpu, now)
        devs = [x for x in (g.devices if g is not None and g.available else ())
                if x.mem_used_bytes is not None and x.mem_total_bytes]
        if devs:
            used = max((x.mem_used_bytes or 0) / (x.mem_total_bytes or 1) * 100 for x in devs)
    if used is None:
        return Reading("no GPU" if _no_gpu(s, now) else "—")
    return Reading(f"{used:.0f}% of capacity", verdicts.gpu_memory(used / 100, targets))


def data_loading_time(s: Session, d: Judged | None, now: float, w: float,
                      targets: Targets) -> Reading:
    frac = _metric(d, "phase_data_wait")
    if frac is None:
        fr = s.phase_fractions(now, w)
        frac = fr.get("data_wait") if fr else None
    if frac is None:
        return Reading("— (no stack samples)")
    return Reading(f"{frac * 100:.1f}% of step time", verdicts.data_wait(frac, targets))


def training_step_time(s: Session, d: Judged | None, now: float, w: float,
                       targets: Targets) -> Reading:
    readings = s.step_readings(now - max(w, 10.0), now).readings
    rates = [r for _, r in step_rates(readings) if r > 0]
    step = _metric(d, "step_time")
    if step is None and rates:
        step = 1.0 / statistics.fmean(rates)
    if step is None:
        return Reading("— (no step counter)")
    if len(rates) < 3:
        return Reading(f"{step:.3g} s/step")
    times = [1.0 / r for r in rates]
    half = len(times) // 2
    before, after = statistics.fmean(times[:half]), statistics.fmean(times[half:])
    spread = statistics.pstdev(times) / statistics.fmean(times)
    if after > before * 1.15:
        return Reading(f"{step:.3g} s/step, rising", "outside")
    if spread > 0.25:
        return Reading(f"{step:.3g} s/step, erratic (±{spread * 100:.0f}%)", "near")
    return Reading(f"{step:.3g} s/step, steady", "within")


def gpu_temperature(s: Session, d: Judged | None, now: float, w: float,
                    targets: Targets) -> Reading:
    g = latest(s.gpu, now)
    devs = [x for x in (g.devices if g is not None and g.available else ())
            if x.temperature_c is not None]
    if not devs:
        return Reading("no GPU" if _no_gpu(s, now) else "—")
    hot = max(devs, key=lambda x: x.temperature_c or 0.0)
    limit = f" (slowdown {hot.temperature_slowdown_c:.0f}°C)" if hot.temperature_slowdown_c else ""
    return Reading(f"{hot.temperature_c:.0f}°C{limit}",
                   verdicts.gpu_temperature(hot.temperature_c, hot.temperature_slowdown_c,
                                            targets))


def interconnect_bandwidth(s: Session, d: Judged | None, now: float, w: float,
                           targets: Targets) -> Reading:
    g = latest(s.gpu, now)
    devs = g.devices if g is not None and g.available else ()
    rx = [x.pcie_rx_bps for x in devs if x.pcie_rx_bps is not None]
    tx = [x.pcie_tx_bps for x in devs if x.pcie_tx_bps is not None]
    if not rx and not tx:
        return Reading("no GPU" if _no_gpu(s, now) else "—")
    # NVML does not report the rated bandwidth, so this cannot be judged.
    return Reading(f"PCIe rx {fmt.human_rate(sum(rx) if rx else None)} · "
                   f"tx {fmt.human_rate(sum(tx) if tx else None)}")


def _no_gpu(s: Session, now: float) -> bool:
    g = latest(s.gpu, now)
    return g is not None and not g.available


READERS: dict[str, Callable[[Session, Judged | None, float, float, Targets], Reading]] = {
    "gpu_utilization": gpu_utilization,
    "gpu_memory_usage": gpu_memory_usage,
    "data_loading_time": data_loading_time,
    "training_step_time": training_step_time,
    "gpu_temperature": gpu_temperature,
    "interconnect_bandwidth": interconnect_bandwidth,
}


def read_key_metric(metric_id: str, session: Session, diagnosis: Judged | None,
                    now: float, window_s: float, targets: Targets) -> Reading:
    """The current reading of one key metric, judged against ``targets`` (the run's
    knowledge base's); unknown ids read as a dash."""
    reader = READERS.get(metric_id)
    if reader is None:
        return Reading("—")
    return reader(session, diagnosis, now, window_s, targets)
