"""The documents' facts a diagnosis needs, derived from the knowledge base.

``documents.yaml`` records claims as the documents state them ("throughput +30-50 %",
"latency -20-50 %", "training time +20-30 %"); a diagnosis needs them as step
speed-ups. This module does that conversion once, and names the key-metric
targets by the metric names that rules use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from .documents import Effect, KnowledgeDocuments, MetricTarget, Technique, load_documents
from .model import Citation
from .targets import Target


@dataclass(frozen=True)
class TechniqueClaim:
    """What the documents claim a technique does to step speed."""

    name: str
    speedup_low: float | None
    speedup_high: float | None
    text: str
    source: Citation


@dataclass(frozen=True)
class StateRow:
    name: str
    priorities: tuple[str, ...]


@dataclass(frozen=True)
class Facts:
    techniques: Mapping[str, TechniqueClaim] = field(default_factory=dict)
    states: Mapping[str, StateRow] = field(default_factory=dict)
    targets: Mapping[str, Target] = field(default_factory=dict)
    documents: Mapping[str, str] = field(default_factory=dict)  # id -> title



#: Which rule metrics each of the documents' key metrics governs, and the
#: factor from the document's unit to the metric's (percent -> fraction).
METRIC_NAMES: dict[str, tuple[tuple[str, float], ...]] = {
    "gpu_utilization": (("gpu_util", 1.0), ("accel_util", 1.0)),
    "gpu_memory_usage": (("gpu_mem_used", 1.0),),
    "data_loading_time": (("phase_data_wait", 0.01),),
}

#: Targets aitop adds where the documents give no number; labelled as such.
AITOP_TARGETS: dict[str, Target] = {
    "phase_checkpoint": Target(None, 0.05, "< 5 % of step time", "aitop default"),
    "phase_other": Target(None, 0.30, "< 30 % of step time", "aitop default"),
    "phase_sync": Target(None, 0.10, "< 10 % of step time", "aitop default"),
    "host_ram_used": Target(None, 90.0, "< 90 % of RAM", "aitop default"),
    "host_swap_used": Target(None, 10.0, "< 10 % of swap", "aitop default"),
    "host_iowait": Target(None, 10.0, "< 10 % of CPU time", "aitop default"),
    "host_cpu": Target(None, 90.0, "< 90 %", "aitop default"),
    "disk_busy": Target(None, 80.0, "< 80 % busy", "aitop default"),
    "worker_cpu_max": Target(None, 80.0, "< 80 % of a core", "aitop default"),
    "network_fs": Target(None, 0.0, "local disk (documents: local NVMe)", "diagnose"),
    "pin_memory": Target(1.0, None, "on (pin_memory=True)", "diagnose"),
    "num_workers": Target(1.0, None, "> 0 workers", "optimize"),
    "cpu_headroom": Target(None, 1.5, "compute uses the cores it has", "aitop default"),
}


def _speedup_range(effect: Effect) -> tuple[float, float] | None:
    """An effect on step speed as (low, high) speed-up factors, if it is one."""
    low = effect.low if effect.low is not None else effect.high
    high = effect.high if effect.high is not None else effect.low
    if low is None or high is None:
        return None
    if effect.quantity == "throughput" and effect.change == "+" and effect.unit == "percent":
        return 1 + low / 100, 1 + high / 100
    if effect.quantity in ("latency", "training_time", "time") and effect.unit == "percent":
        if effect.change == "-":
            return 1 / (1 - low / 100), 1 / (1 - high / 100)
        if effect.change == "+":  # a cost: the step gets slower
            return 1 / (1 + high / 100), 1 / (1 + low / 100)
    if effect.quantity in ("latency", "training_time") and effect.change == "/":
        return low, high
    if effect.quantity == "throughput" and effect.change == "*":
        return low, high
    return None


def _describe(effect: Effect) -> str:
    if effect.low is None and effect.high is None:
        return effect.quantity
    if effect.low is None:
        figure = f"{effect.high:g}"
    elif effect.high is None or effect.low == effect.high:
        figure = f"{effect.low:g}"
    else:
        figure = f"{effect.low:g}-{effect.high:g}"
    unit = "%" if effect.unit == "percent" else ("x" if effect.unit == "factor" else effect.unit)
    change = {"+": "+", "-": "-", "*": "x", "/": "/"}.get(effect.change, effect.change + " ")
    if unit == "x" and change in ("x", "/"):
        text = f"{effect.quantity} {change}{figure}"
    else:
        text = f"{effect.quantity} {change}{figure}{unit}"
    hedge = f" ({effect.hedge})" if effect.hedge else ""
    return text + hedge


def claim_for(technique: Technique, titles: dict[str, str]) -> TechniqueClaim:
    speed = next(
        (r for e in technique.effects if (r := _speedup_range(e)) is not None), None
    )
    text = "; ".join(_describe(e) for e in technique.effects) or "no figure in the documents"
    src = technique.source
    return TechniqueClaim(
        name=technique.name,
        speedup_low=speed[0] if speed else None,
        speedup_high=speed[1] if speed else None,
        text=text,
        source=Citation(titles.get(src.document, src.document), src.section, src.quote),
    )


def _targets_from(metric: MetricTarget) -> dict[str, Target]:
    out: dict[str, Target] = {}
    bounds = metric.bounds
    for name, scale in METRIC_NAMES.get(metric.id, ()):
        if bounds.kind != "range":
            continue
        low = bounds.low * scale if bounds.low is not None else None
        high = bounds.high * scale if bounds.high is not None else None
        out[name] = Target(low, high, metric.target, metric.source.document)
    if metric.id == "gpu_temperature":
        # The margin below the GPU's own slowdown threshold (83 °C if unknown).
        out["gpu_temp_margin"] = Target(0.0, None, metric.target, metric.source.document)
    return out


def facts_from(docs: KnowledgeDocuments) -> Facts:
    titles = {d.id: d.title for d in docs.documents}
    targets: dict[str, Target] = dict(AITOP_TARGETS)
    for metric in docs.metrics:
        targets.update(_targets_from(metric))
    return Facts(
        techniques={t.id: claim_for(t, titles) for t in docs.techniques},
        states={
            s.id: StateRow(s.state, tuple(p.text for p in s.priorities))
            for s in docs.priority_framework
        },
        targets=targets,
        documents=titles,
    )


@lru_cache(maxsize=1)
def load_facts() -> Facts:
    """Facts from the packaged knowledge base (cached: it never changes at runtime)."""
    return facts_from(load_documents())
