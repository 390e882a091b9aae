"""aitop's NVML readings beside nvidia-smi's, read at the same moment.

The readings come from aitop's own :class:`~aitop.probes.gpu.GpuProbe` (not a
copy of its calls), sampled just before and just after ``nvidia-smi`` runs; a
value that moves meanwhile is judged against the range of the two readings
(:func:`~aitop.engine.selftest.model.in_bracket`). Tolerances say what "the
same" means for each field: counters averaged over slightly different windows
(utilisation, power, clocks) get room, static facts (limits, maxima,
thresholds, total memory) must match.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from aitop.engine.selftest.model import FAIL, PASS, SKIP, Check, compare_numbers
from aitop.probes.gpu import decode_clock_event_reasons
from aitop.probes.samples import GpuDevice

MIB = 1024 * 1024
GROUP = "nvml"


@dataclass(frozen=True)
class SmiReference:
    """What nvidia-smi said about one GPU (see :mod:`aitop.engine.selftest.smi`)."""

    values: Mapping[str, float | int | str | None]
    slowdown_c: float | None = None
    #: How nvidia-smi's slowdown temperature was read (absolute, or from T.Limit).
    slowdown_source: str = ""
    #: PID → used MiB from ``--query-compute-apps`` (``None``: not asked or refused).
    apps: Mapping[int, float | None] | None = None


@dataclass(frozen=True)
class FieldSpec:
    """One numeric field: how aitop's sample gives it and how far it may differ."""

    key: str
    title: str
    unit: str
    aitop: Callable[[GpuDevice], float | None]
    abs_tol: float = 0.0
    rel_tol: float = 0.0
    #: Absolute tolerance that depends on the GPU (memory: a share of its total).
    abs_tol_of: Callable[[Mapping[str, float | int | str | None]], float] | None = None


def _mib(value: int | None) -> float | None:
    return None if value is None else value / MIB


def _mem_tol(values: Mapping[str, float | int | str | None]) -> float:
    total = values.get("mem_total_mib")
    return max(256.0, 0.01 * float(total)) if isinstance(total, int | float) else 256.0


FIELDS: tuple[FieldSpec, ...] = (
    FieldSpec("util_percent", "GPU utilisation", "%", lambda d: d.util_percent, abs_tol=10),
    FieldSpec("mem_util_percent", "memory controller utilisation", "%",
              lambda d: d.mem_util_percent, abs_tol=10),
    FieldSpec("mem_used_mib", "memory used", " MiB", lambda d: _mib(d.mem_used_bytes),
              abs_tol_of=_mem_tol),
    FieldSpec("mem_total_mib", "memory total", " MiB", lambda d: _mib(d.mem_total_bytes),
              abs_tol=1),
    FieldSpec("temperature_c", "temperature", " °C", lambda d: d.temperature_c, abs_tol=3),
    FieldSpec("power_w", "power draw", " W", lambda d: d.power_w, abs_tol=30, rel_tol=0.10),
    FieldSpec("power_limit_w", "enforced power limit", " W", lambda d: d.power_limit_w,
              abs_tol=1),
    FieldSpec("sm_clock_mhz", "SM clock", " MHz", lambda d: d.sm_clock_mhz, abs_tol=60,
              rel_tol=0.05),
    FieldSpec("sm_clock_max_mhz", "SM clock maximum", " MHz", lambda d: d.sm_clock_max_mhz,
              abs_tol=1),
)


def _number(value: float | int | str | None) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _unsupported_note(devices: Sequence[GpuDevice]) -> str:
    refused = sorted({label for d in devices for label in d.unsupported})
    return f"aitop read nothing (fields it marked unsupported: {', '.join(refused) or 'none'})"


def compare_fields(
    before: GpuDevice, after: GpuDevice, ref: SmiReference
) -> list[Check]:
    """Every numeric field, the slowdown threshold, reasons, identity and PIDs' memory."""
    devices = (before, after)
    checks = [_identity(after, ref)]
    for spec in FIELDS:
        abs_tol = spec.abs_tol_of(ref.values) if spec.abs_tol_of else spec.abs_tol
        checks.append(compare_numbers(
            f"nvml.{spec.key}", GROUP, f"{spec.title} ({spec.unit.strip()})",
            expected=_number(ref.values.get(spec.key)),
            seen=[spec.aitop(d) for d in devices],
            abs_tol=abs_tol, rel_tol=spec.rel_tol, unit=spec.unit,
            missing_expected="nvidia-smi prints no value ([N/A] or not supported)",
            missing_seen=_unsupported_note(devices),
        ))
    slowdown = compare_numbers(
        "nvml.temperature_slowdown_c", GROUP, "slowdown temperature threshold (°C)",
        expected=ref.slowdown_c, seen=[after.temperature_slowdown_c], abs_tol=1.5, unit=" °C",
        missing_expected=ref.slowdown_source or "nvidia-smi -q shows no slowdown temperature",
        missing_seen=_unsupported_note(devices),
    )
    if ref.slowdown_source and not slowdown.detail:
        slowdown = replace(slowdown, detail=f"nvidia-smi: {ref.slowdown_source}")
    checks.append(slowdown)
    checks.append(compare_reasons(before, after, ref.values.get("clock_event_reasons")))
    return checks


def _identity(device: GpuDevice, ref: SmiReference) -> Check:
    """Both tools describe the same GPU (else every other comparison is meaningless)."""
    expected = ref.values.get("uuid")
    ok = expected is not None and expected == device.uuid
    return Check("nvml.identity", GROUP, "same GPU (UUID)", PASS if ok else FAIL,
                 expected=expected, seen=device.uuid,
                 detail="" if ok else "aitop's device and nvidia-smi's row differ")


def compare_reasons(
    before: GpuDevice, after: GpuDevice, smi_mask: float | int | str | None
) -> Check:
    """Clock-event reasons: what aitop saw at both readings nvidia-smi must show,
    and what nvidia-smi shows aitop must have seen at one of them.

    The mask is decoded with aitop's own decoder, so a wrong bit table shows up
    as a set that does not match.
    """
    title = "clock-event reasons"
    if not isinstance(smi_mask, int):
        return Check("nvml.clock_event_reasons", GROUP, title, SKIP,
                     seen=[list(before.clock_event_reasons), list(after.clock_event_reasons)],
                     detail="nvidia-smi prints no clock-event reasons here")
    if "clock_event_reasons" in after.unsupported:
        return Check("nvml.clock_event_reasons", GROUP, title, FAIL,
                     expected=list(decode_clock_event_reasons(smi_mask)), seen=None,
                     detail="aitop marked clock-event reasons unsupported")
    smi = set(decode_clock_event_reasons(smi_mask))
    steady = set(before.clock_event_reasons) & set(after.clock_event_reasons)
    seen_any = set(before.clock_event_reasons) | set(after.clock_event_reasons)
    ok = steady <= smi <= seen_any
    missing, extra = sorted(smi - seen_any), sorted(steady - smi)
    detail = "" if ok else "; ".join(
        part for part in (
            f"nvidia-smi shows {missing} that aitop never saw" if missing else "",
            f"aitop saw {extra} at both readings, nvidia-smi not" if extra else "",
        ) if part
    )
    return Check("nvml.clock_event_reasons", GROUP, title, PASS if ok else FAIL,
                 expected=sorted(smi),
                 seen=[sorted(before.clock_event_reasons), sorted(after.clock_event_reasons)],
                 tolerance="steady reasons in both; nvidia-smi's among aitop's two readings",
                 detail=detail)


def compare_process_memory(
    before: GpuDevice, after: GpuDevice, pid: int, apps: Mapping[int, float | None] | None
) -> Check:
    """The job's own GPU memory, as aitop attributes it and as nvidia-smi lists it."""

    def aitop_mib(device: GpuDevice) -> float | None:
        used = [p.used_memory_bytes for p in device.processes if p.pid == pid]
        known = [u for u in used if u is not None]
        return sum(known) / MIB if known else None

    seen = [aitop_mib(before), aitop_mib(after)]
    expected = apps.get(pid) if apps is not None else None
    if expected is None and all(v is None for v in seen):
        return Check("nvml.process_memory", GROUP, f"GPU memory of PID {pid} (MiB)", SKIP,
                     seen=seen, detail=f"neither aitop nor nvidia-smi lists PID {pid} "
                     "(a PID namespace hides it from both?)")
    return compare_numbers(
        "nvml.process_memory", GROUP, f"GPU memory of PID {pid} (MiB)",
        expected=expected, seen=seen, abs_tol=128, rel_tol=0.02, unit=" MiB",
        missing_expected=f"nvidia-smi --query-compute-apps does not list PID {pid}",
        missing_seen=f"aitop's probe has no memory for PID {pid}",
    )


def nvml_absent_check(available: bool, reason: str | None, error: str | None) -> Check:
    """Without a driver, the probe must say so in a reason, never raise."""
    if error is not None:
        return Check("nvml.absent", GROUP, "NVML probe without a GPU", FAIL,
                     expected="unavailable with a reason", seen=error,
                     detail="the probe raised instead of reporting unavailable")
    ok = not available and bool(reason)
    return Check("nvml.absent", GROUP, "NVML probe without a GPU", PASS if ok else FAIL,
                 expected="unavailable with a reason",
                 seen=f"unavailable: {reason}" if not available else "available",
                 detail="" if ok else "no reason given")
