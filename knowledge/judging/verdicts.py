"""Verdicts for the values a screen shows, from the knowledge base's targets.

A panel colours a GPU at 75 % by asking here, and here asks the same targets and
the same :func:`~aitop.knowledge.base.targets.target_status` that a finding's evidence uses,
so a value reads the same in a panel, a finding and the Markdown report. Each
function takes the value in the unit the probes report it in (percent, a
fraction, degrees) and converts it to the metric's unit, and the targets of the
run's knowledge base (``KnowledgeBase.facts.targets``: a user's ``--rules`` moves
them for every reader alike).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..base.findings import Status
from ..base.targets import Target, target_for, target_status
from ..metrics.gpu import POWER_REASONS, THERMAL_REASONS, temperature_margin

#: A knowledge base's targets, by metric name.
Targets = Mapping[str, Target]


def target(metric: str, targets: Targets) -> Target | None:
    """The metric's target, for a screen that says it beside the verdict."""
    return target_for(metric, targets)


def verdict(metric: str, value: float | None, targets: Targets) -> Status:
    """``within`` / ``near`` / ``outside`` the metric's target, or ``unknown``."""
    return target_status(value, target_for(metric, targets))


def gpu_util(percent: float | None, targets: Targets) -> Status:
    """GPU utilisation against the documents' 80-95 % during training."""
    return verdict("gpu_util", percent, targets)


def gpu_memory(fraction: float | None, targets: Targets) -> Status:
    """Memory in use (a fraction of capacity) against the documents' 70-90 %."""
    return verdict("gpu_mem_used", None if fraction is None else fraction * 100, targets)


def gpu_temperature(temp_c: float | None, slowdown_c: float | None, targets: Targets) -> Status:
    """Below the GPU's own slowdown temperature (the documents' 83 °C if unknown)."""
    return verdict("gpu_temp_margin", temperature_margin(temp_c, slowdown_c), targets)


def clock_reasons(reasons: Iterable[str]) -> Status:
    """Thermal slowdown is outside, a power cap near, anything else within.

    The same reason sets as the ``gpu_throttle_thermal``/``gpu_throttle_power``
    metrics; ``hw_slowdown`` alone is neither (the driver raises it for power
    brakes too), so it is shown in words but not judged.
    """
    present = set(reasons)
    if present & THERMAL_REASONS:
        return "outside"
    if present & POWER_REASONS:
        return "near"
    return "within"


def data_wait(fraction: float | None, targets: Targets) -> Status:
    """The documents: data loading under 5 % of total step time."""
    return verdict("phase_data_wait", fraction, targets)


def process_cpu(percent: float | None, targets: Targets) -> Status:
    """One process's CPU (100 % = a core): one that fills its core cannot go faster."""
    return verdict("worker_cpu_max", percent, targets)


def host_ram(fraction: float | None, targets: Targets) -> Status:
    """System RAM in use: the documents' 'high system memory usage' symptom."""
    return verdict("host_ram_used", None if fraction is None else fraction * 100, targets)


def iowait(percent: float | None, targets: Targets) -> Status:
    """CPU time waiting on storage."""
    return verdict("host_iowait", percent, targets)
