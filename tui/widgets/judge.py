"""What a value means: within, near or outside its target.

One place for every threshold the UI colours by, each after the documents'
key-metrics table where it gives one (GPU utilisation 80-95 % during training,
memory 70-90 % of capacity, data loading under 5 % of step time, temperature
below 83 °C) and a stated rule of thumb where it does not. No Textual, so the
Markdown report judges exactly as the screen does.
"""

from __future__ import annotations

import math


def judge(value: float | None, within: tuple[float, float], near: tuple[float, float]) -> str:
    """Classify a value: inside ``within`` is within, inside ``near`` is near, else outside."""
    if value is None or math.isnan(value):
        return "unknown"
    if within[0] <= value <= within[1]:
        return "within"
    if near[0] <= value <= near[1]:
        return "near"
    return "outside"


#: Throttle reasons that mean the hardware is protecting itself (act on these).
HARD_REASONS = {"hw_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown",
                "hw_power_brake_slowdown"}


def util_status(util: float | None) -> str:
    """Utilisation against the documents' 80-95 % training target."""
    return judge(util, (80, 95), (70, 100))


def mem_status(frac: float | None) -> str:
    """Memory use against 70-90 % of capacity (headroom for batch size)."""
    return judge(None if frac is None else frac * 100, (70, 90), (50, 95))


def temp_status(temp: float | None, slowdown: float | None) -> str:
    """Below 83 °C (documents) and clear of the device's own slowdown threshold."""
    if temp is None:
        return "unknown"
    limit = min(83.0, slowdown) if slowdown else 83.0
    if slowdown and temp >= slowdown:
        return "outside"
    if temp >= limit:
        return "near" if not slowdown or temp < slowdown - 2 else "outside"
    return "within" if temp < limit - 5 else "near"


def reasons_status(reasons: tuple[str, ...]) -> str:
    """Thermal or hardware slowdown is outside; a power cap is near; idle is neutral."""
    if any(r in HARD_REASONS for r in reasons):
        return "outside"
    if "sw_power_cap" in reasons:
        return "near"
    return "within" if not reasons or reasons == ("gpu_idle",) else "near"


def cpu_status(percent: float | None) -> str:
    """A process at a full core cannot go faster: near at 90 %, outside at 98 %."""
    return judge(percent, (0, 90), (0, 98))


def ram_status(frac: float | None) -> str:
    """System RAM: the documents' 'high system memory usage' symptom."""
    return judge(None if frac is None else frac * 100, (0, 80), (0, 90))


def iowait_status(percent: float | None) -> str:
    """CPU wait states: a few percent is normal, over 10 % means storage stalls."""
    return judge(percent, (0, 5), (0, 10))


def data_wait_status(frac: float | None) -> str:
    """Documents: data loading time should be less than 5 % of total step time."""
    return judge(None if frac is None else frac * 100, (0, 5), (0, 10))


def probe_state(status: str) -> str:
    """Judge a probe's free-text status: unavailable/error is outside, waiting is near."""
    low = status.lower()
    if low.startswith(("unavailable", "error", "failed", "stopped", "denied")) or "error" in low:
        return "outside"
    if low.startswith(("waiting", "starting", "retrying", "degraded")):
        return "near"
    return "within"
