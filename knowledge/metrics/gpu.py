"""The GPUs the job uses: per-sample readings, device-level facts and memory runway."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from aitop.probes.samples import GpuDevice, GpuSample
from aitop.probes.session import Session

from .growth import GROWTH_LOOKBACK_S, memory_growth
from .units import Values, mb, mean

#: hw_slowdown alone is not counted: the driver raises it for power brakes too.
THERMAL_REASONS = frozenset({"sw_thermal_slowdown", "hw_thermal_slowdown"})
POWER_REASONS = frozenset({"sw_power_cap", "hw_power_brake_slowdown"})

#: The documents' key-metric bound ("GPU temperature: below 83 degrees C"), used
#: where the driver does not report the GPU's own slowdown temperature (which the
#: documents' entry prefers). A test holds it equal to ``documents.yaml``.
FALLBACK_TEMPERATURE_LIMIT_C = 83.0


def target_devices(sample: GpuSample) -> list[GpuDevice]:
    """GPUs the target uses (by its processes), else all healthy ones."""
    healthy = [d for d in sample.devices if not d.lost]
    used = [d for d in healthy if any(p.in_target for p in d.processes)]
    return used or healthy


def over_target_devices(
    fn: Callable[[GpuDevice], float | None],
) -> Callable[[GpuSample], float | None]:
    """A device reading as a sample's: its mean over the GPUs the target uses."""

    def value(sample: GpuSample) -> float | None:
        if not sample.available:
            return None
        return mean([v for d in target_devices(sample) if (v := fn(d)) is not None])

    return value


#: GPU utilisation, the one definition every reader uses (the rules' ``gpu_util_*``,
#: the key-metrics table, the Ranks panel): NVML's share of time a kernel was
#: running, the mean over the GPUs the target uses (all healthy GPUs when it
#: holds none). A device's own reading is ``GpuDevice.util_percent``.
gpu_util: Callable[[GpuSample], float | None] = over_target_devices(lambda d: d.util_percent)


def gpu_util_over(samples: Iterable[GpuSample]) -> float | None:
    """``gpu_util`` over a span: the mean of each sample's (``gpu_util_mean``'s rule)."""
    return mean([v for s in samples if (v := gpu_util(s)) is not None])


def temperature_margin(temp_c: float | None, slowdown_c: float | None) -> float | None:
    """Degrees below the GPU's slowdown threshold (the documents' 83 °C if unknown)."""
    if temp_c is None:
        return None
    limit = slowdown_c if slowdown_c is not None else FALLBACK_TEMPERATURE_LIMIT_C
    return limit - temp_c


def device_temperature_margin(d: GpuDevice) -> float | None:
    return temperature_margin(d.temperature_c, d.temperature_slowdown_c)


def gpu_metrics(session: Session, now: float, window_s: float) -> Values:
    """Device-level GPU facts beyond the per-sample series; ``has_gpu`` is 1 when a
    GPU is seen, 0 when NVML sees none, None before any GPU sample."""
    gpus = session.gpu.window(now - window_s, now)
    last_gpu = gpus[-1] if gpus else None
    has_gpu = last_gpu is not None and last_gpu.available and bool(last_gpu.devices)
    values: Values = {
        "has_gpu": None if last_gpu is None else float(has_gpu),
        "gpu_count": None if last_gpu is None else float(len(last_gpu.devices)),
    }
    if not has_gpu or last_gpu is None:
        return values | dict.fromkeys(
            ("gpu_throttle_thermal", "gpu_throttle_power", "gpu_target_devices",
             "gpu_util_spread", "gpu_mem_growth", "gpu_mem_free_mb", "gpu_minutes_left"))

    def share(reasons: frozenset[str]) -> float:
        hits = sum(
            any(set(d.clock_event_reasons) & reasons for d in target_devices(g)) for g in gpus
        )
        return hits / len(gpus)

    used = [d for d in last_gpu.devices if any(p.in_target for p in d.processes)]
    utils = [d.util_percent for d in used if d.util_percent is not None]
    return values | {
        "gpu_throttle_thermal": share(THERMAL_REASONS),
        "gpu_throttle_power": share(POWER_REASONS),
        "gpu_target_devices": float(len(used)),
        "gpu_util_spread": max(utils) - min(utils) if len(utils) >= 2 else None,
    } | gpu_memory_runway(session, now, window_s, used)


def gpu_memory_runway(session: Session, now: float, window_s: float,
                      used: list[GpuDevice]) -> Values:
    """The job's GPU memory growth (its processes' own, per NVML), the memory left
    on the fullest device it uses, and how long that lasts at the growth."""

    def target_mb(sample: GpuSample) -> float | None:
        known = [d.target_mem_bytes for d in sample.devices if d.target_mem_bytes is not None]
        return mb(sum(known)) if known else None

    growth = memory_growth(session.series(session.gpu, target_mb, now,
                                          max(window_s, GROWTH_LOOKBACK_S)))
    free = [d.mem_total_bytes - d.mem_used_bytes for d in used
            if d.mem_total_bytes is not None and d.mem_used_bytes is not None]
    headroom = max(0.0, mb(min(free)) or 0.0) if free else None
    return {
        "gpu_mem_growth": growth,
        "gpu_mem_free_mb": headroom,
        "gpu_minutes_left": headroom / growth if headroom is not None and growth else None,
    }
