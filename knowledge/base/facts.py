"""The documents' facts a diagnosis needs, derived from the knowledge base.

``documents.yaml`` records claims as the documents state them ("throughput +30-50 %",
"latency -20-50 %", "training time +20-30 %"); a diagnosis needs them as step
speed-ups. This module does that conversion once, and names the key-metric
targets by the metric names that rules use.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .documents import Effect, KnowledgeDocuments, MetricTarget, Technique
from .findings import Citation
from .targets import Target


@dataclass(frozen=True)
class TechniqueClaim:
    """What the documents claim a technique does to step speed."""

    name: str
    speedup_low: float | None
    speedup_high: float | None
    text: str
    source: Citation
    #: Where the figure was measured, when not on a training step: "inference
    #: latency, transformer-based models" (a latency is a serving figure).
    context: str | None = None
    #: Whether the figure is for inference only (it is shown for serving jobs).
    inference_only: bool = False


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
    measured = next(
        ((e, r) for e in technique.effects if (r := _speedup_range(e)) is not None), None
    )
    speed = measured[1] if measured else None
    effect = measured[0] if measured else None
    inference = effect is not None and effect.quantity == "latency"
    context = ", ".join(part for part in (
        "inference latency" if inference else None,
        effect.condition if effect is not None else None) if part) or None
    text = "; ".join(_describe(e) for e in technique.effects) or "no figure in the documents"
    src = technique.source
    return TechniqueClaim(
        name=technique.name,
        speedup_low=speed[0] if speed else None,
        speedup_high=speed[1] if speed else None,
        text=text,
        source=Citation(titles.get(src.document, src.document), src.section, src.quote),
        context=context,
        inference_only=inference,
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


def facts_from(
    docs: KnowledgeDocuments, own_targets: Mapping[str, Target] | None = None
) -> Facts:
    """The facts a diagnosis needs; ``own_targets`` (rule files' ``targets:``) are
    aitop's where the documents give no number, and the documents' win over them."""
    titles = {d.id: d.title for d in docs.documents}
    targets: dict[str, Target] = dict(own_targets or {})
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
