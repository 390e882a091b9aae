"""Target ranges and the one rule that judges a value against them.

Every verdict aitop shows (a finding's evidence, a panel's colour, a row of the
key-metrics table) is ``target_status(value, target)`` with a target from the knowledge
base, so one screen can never call the same value "near" in one place and
"outside" in another.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .findings import Status


@dataclass(frozen=True)
class Target:
    """A metric's target range and where it comes from."""

    low: float | None
    high: float | None
    text: str
    source: str = ""


def target_for(metric: str, targets: Mapping[str, Target]) -> Target | None:
    """Exact name first, then the series name without its aggregate suffix."""
    if metric in targets:
        return targets[metric]
    base = metric.rsplit("_", 1)[0]
    return targets.get(base)


def target_status(value: float | None, target: Target | None) -> Status:
    """within / near / outside the target (near: within 10 % of the range's edge)."""
    if value is None:
        return "unknown"
    if target is None:
        return "unknown"
    low, high = target.low, target.high
    if (low is None or value >= low) and (high is None or value <= high):
        return "within"
    edge = high if high is not None and value > high else low
    assert edge is not None
    slack = 0.1 * (abs(high - low) if low is not None and high is not None else abs(edge) or 1.0)
    return "near" if abs(value - edge) <= slack else "outside"
