"""What aitop should say about each GPU job, and the checks of what it did say.

Pure functions of aitop's ``--json`` report (a dict) and the job's own ground
truth (:mod:`aitop.engine.selftest.truth`): no processes, no GPU, so they are
unit-tested on recorded reports. The report is read by key, never through
aitop's own classes, and both ``aitop.report/1`` and ``aitop.report/2`` are
accepted: the self-test checks the public interface users script against.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aitop.engine.selftest.model import FAIL, INFO, PASS, SKIP, Check, finite, rounded, verdict
from aitop.engine.selftest.truth import Record, TruthWindow, truth_between

KNOWN_SCHEMAS = ("aitop.report/1", "aitop.report/2")
#: Phase tolerance: this many points, or 2.6 standard errors of the sample count.
PHASE_ABS_TOL = 0.10
PHASE_SE_FACTOR = 2.6
#: steps/s may differ this much (relative) from the job's own count.
STEPS_REL_TOL = 0.15
#: NVML utilisation vs the GPU's busy share from CUDA events, in points.
UTIL_VS_EVENTS_TOL = 15.0
#: NVML memory used vs the job's own cudaMemGetInfo, in points.
MEM_TOL = 2.0
#: Steps/s the GPU-bound job may lose while aitop is attached.
MAX_OVERHEAD = 0.05


@dataclass(frozen=True)
class JobSpec:
    """One GPU job and what aitop should report about it."""

    name: str
    title: str
    #: Categories that are right for this job (``None``: any except ``not_categories``).
    categories: tuple[str, ...] | None
    not_categories: tuple[str, ...] = ()
    util_min: float | None = None
    util_max: float | None = None
    #: Attach aitop with py-spy (the pcie job is read through NVML only).
    attach: bool = True
    #: Judge NVML utilisation against the CUDA-event busy share. Events span a
    #: step from its first kernel to its last, gaps included: right for jobs
    #: whose kernels run back to back, an overestimate for a launch-bound one.
    judge_busy: bool = True


SPECS: dict[str, JobSpec] = {
    "matmul": JobSpec("matmul", "GPU-bound job (large bf16 matmuls)", ("compute",),
                      util_min=85),
    "data": JobSpec("data", "data-starved job (slow DataLoader)", ("data_loading",),
                    util_max=50),
    "item": JobSpec("item", "`.item()` every step on a busy GPU", None,
                    not_categories=("host", "collecting", "unknown"), util_min=70),
    "memory": JobSpec("memory", "job near the GPU memory limit", ("memory",),
                      judge_busy=False),
    "pcie": JobSpec("pcie", "host-to-GPU copies (PCIe counters)", None, attach=False),
}


def _get(mapping: Any, *keys: str) -> Any:
    """``mapping[k1][k2]...`` or ``None`` when any level is missing."""
    for key in keys:
        if not isinstance(mapping, Mapping):
            return None
        mapping = mapping.get(key)
    return mapping


def _span(report: Mapping[str, Any], key: str) -> tuple[float, float] | None:
    span = report.get(key)
    if isinstance(span, list) and len(span) == 2 and all(finite(v) is not None for v in span):
        return float(span[0]), float(span[1])
    return None


def metrics_window(report: Mapping[str, Any]) -> tuple[float, float] | None:
    """The span the report's window metrics (``gpu_util_mean``...) were taken over."""
    end = finite(report.get("evaluated_at"))
    start = finite(report.get("attached_at"))
    window = finite(report.get("window_s"))
    if end is None or start is None:
        return None
    return (max(start, end - window) if window else start), end


def judge_job(
    spec: JobSpec, report: Mapping[str, Any], records: Sequence[Record], pid: int | None = None
) -> list[Check]:
    """Every check of one attached job's report against the job's truth."""
    group = f"job:{spec.name}"
    checks = [_schema(report, group)]
    if pid is not None:
        seen_pid = _get(report, "target", "pid")
        checks.append(Check(f"{spec.name}.target", group, "report is about the job's PID",
                            verdict(seen_pid == pid), expected=pid, seen=seen_pid))
    checks.append(_probe_state(report, group, spec.name, "stacks",
                               "py-spy attached and sampled the job"))
    checks.append(_probe_state(report, group, spec.name, "gpu", "NVML probe read the GPU"))
    checks.append(_category(spec, report, group))
    checks.append(_util_range(spec, report, group))
    checks.append(_util_vs_events(spec, report, records, group))
    checks += _phases(spec, report, records, group)
    checks.append(_steps(spec, report, records, group))
    if spec.name == "memory":
        checks.append(_memory(spec, report, records, group))
    return checks


def _schema(report: Mapping[str, Any], group: str) -> Check:
    schema = report.get("schema")
    known = schema in KNOWN_SCHEMAS
    return Check(f"{group.split(':')[-1]}.schema", group, "report schema", PASS if known else INFO,
                 expected=list(KNOWN_SCHEMAS), seen=schema,
                 detail="" if known else "unknown schema: fields read by key anyway")


def _probe_state(
    report: Mapping[str, Any], group: str, job: str, probe: str, title: str
) -> Check:
    state = _get(report, "probe_states", probe, "state")
    detail = _get(report, "probe_states", probe, "detail") or ""
    return Check(f"{job}.{probe}_probe", group, title, verdict(state == "ok"),
                 expected="ok", seen=state, detail="" if state == "ok" else str(detail))


def _category(spec: JobSpec, report: Mapping[str, Any], group: str) -> Check:
    seen = _get(report, "bottleneck", "category")
    if spec.categories is not None:
        ok, expected = seen in spec.categories, " or ".join(spec.categories)
    else:
        ok, expected = seen not in spec.not_categories, f"not {' or '.join(spec.not_categories)}"
    summary = _get(report, "bottleneck", "summary")
    return Check(f"{spec.name}.category", group, "bottleneck category", verdict(ok),
                 expected=expected, seen=seen, detail="" if ok else f"aitop said: {summary}")


def _util_range(spec: JobSpec, report: Mapping[str, Any], group: str) -> Check:
    util = finite(_get(report, "metrics", "gpu_util_mean"))
    bounds = []
    if spec.util_min is not None:
        bounds.append(f">= {spec.util_min:g}")
    if spec.util_max is not None:
        bounds.append(f"<= {spec.util_max:g}")
    title = "GPU utilisation over the window (%)"
    if not bounds:
        return Check(f"{spec.name}.gpu_util", group, title, INFO, seen=rounded(util, 1))
    if util is None:
        return Check(f"{spec.name}.gpu_util", group, title, FAIL, expected=" and ".join(bounds),
                     detail="the report has no gpu_util_mean")
    ok = (spec.util_min is None or util >= spec.util_min) and (
        spec.util_max is None or util <= spec.util_max)
    return Check(f"{spec.name}.gpu_util", group, title, verdict(ok),
                 expected=" and ".join(bounds), seen=rounded(util, 1),
                 detail="" if ok else "the job did not load the GPU as designed, "
                 "or NVML reads utilisation wrong (see util_vs_events)")


def _util_vs_events(
    spec: JobSpec, report: Mapping[str, Any], records: Sequence[Record], group: str
) -> Check:
    """NVML's utilisation against the GPU's busy share measured with CUDA events."""
    title = "NVML utilisation vs the job's CUDA-event busy share (%)"
    window = metrics_window(report)
    truth = truth_between(records, *window) if window else None
    util = finite(_get(report, "metrics", "gpu_util_mean"))
    if truth is None or truth.device_busy is None:
        return Check(f"{spec.name}.util_vs_events", group, title, SKIP, seen=rounded(util, 1),
                     detail="no ground truth over the report's window")
    expected = min(100.0, 100.0 * truth.device_busy)
    if not spec.judge_busy:
        return Check(f"{spec.name}.util_vs_events", group, title, INFO,
                     expected=rounded(expected, 1), seen=rounded(util, 1),
                     detail="a launch-bound job: the events' span includes idle gaps")
    if util is None:
        return Check(f"{spec.name}.util_vs_events", group, title, FAIL,
                     expected=rounded(expected, 1), detail="the report has no gpu_util_mean")
    ok = abs(util - expected) <= UTIL_VS_EVENTS_TOL
    return Check(f"{spec.name}.util_vs_events", group, title, verdict(ok),
                 expected=rounded(expected, 1), seen=rounded(util, 1),
                 tolerance=f"±{UTIL_VS_EVENTS_TOL:g} points",
                 detail="" if ok else f"off by {abs(util - expected):.1f} points")


def phase_tolerance(fraction: float, samples: float | None) -> float:
    """``PHASE_ABS_TOL`` or ``PHASE_SE_FACTOR`` binomial standard errors, whichever is larger."""
    if not samples:
        return PHASE_ABS_TOL
    se = math.sqrt(max(fraction * (1.0 - fraction), 0.0) / samples)
    return max(PHASE_ABS_TOL, PHASE_SE_FACTOR * se)


def _phases(
    spec: JobSpec, report: Mapping[str, Any], records: Sequence[Record], group: str
) -> list[Check]:
    """aitop's phase shares against the job's own timers over aitop's stack-sample span."""
    phases = report.get("phases")
    span = _span(report, "phase_span")
    truth = truth_between(records, *span) if span else None
    if not isinstance(phases, Mapping) or truth is None:
        why = "the report has no phases (stacks were off)" if not isinstance(phases, Mapping) \
            else "no ground truth over the report's phase_span"
        return [Check(f"{spec.name}.phases", group, "phases vs the job's timers", FAIL,
                      detail=why)]
    samples = finite(_get(report, "metrics", "phase_samples"))
    expected = dict(truth.phases)
    expected["compute"] = expected["forward"] + expected["backward"] + expected["optimizer"]
    seen = {k: finite(v) for k, v in phases.items()}
    parts = [seen.get(k) for k in ("forward", "backward", "optimizer")]
    seen["compute"] = sum(p for p in parts if p is not None) if any(
        p is not None for p in parts) else None
    checks = []
    for name, want in expected.items():
        got = seen.get(name)
        tol = phase_tolerance(want, samples)
        title = f"phase {name} (share of the loop)"
        if got is None:
            checks.append(Check(f"{spec.name}.phase.{name}", group, title, FAIL,
                                expected=round(want, 3), detail=f"no phase {name!r} in the report"))
            continue
        ok = abs(got - want) <= tol
        checks.append(Check(f"{spec.name}.phase.{name}", group, title, verdict(ok),
                            expected=round(want, 3), seen=round(got, 3),
                            tolerance=f"±{tol:.3f}",
                            detail="" if ok else _phase_miss(name, got, want, seen)))
    if spec.name == "item":
        checks.append(_sync_not_other(spec, seen, expected, samples, group))
    return checks


def _phase_miss(name: str, got: float, want: float, seen: Mapping[str, float | None]) -> str:
    others = sorted(((v, k) for k, v in seen.items() if v and k not in (name, "compute")),
                    reverse=True)
    top = ", ".join(f"{k} {v:.0%}" for v, k in others[:2])
    return f"aitop {got:.0%} vs the job's {want:.0%}; aitop's largest: {top}"


def _sync_not_other(
    spec: JobSpec, seen: Mapping[str, float | None], expected: Mapping[str, float],
    samples: float | None, group: str,
) -> Check:
    """The headline of the .item() job: the wait reads as device time, not Python."""
    sync, other = seen.get("sync") or 0.0, seen.get("other") or 0.0
    want = expected["sync"]
    ok = sync >= want - phase_tolerance(want, samples) and sync > other
    return Check(f"{spec.name}.sync_not_other", group,
                 ".item() wait read as device time (sync), not Python overhead (other)",
                 verdict(ok), expected=f"sync ≈ {want:.0%} and above other",
                 seen={"sync": round(sync, 3), "other": round(other, 3)},
                 detail="" if ok else "the wait inside .item() is not read as sync")


def _steps(
    spec: JobSpec, report: Mapping[str, Any], records: Sequence[Record], group: str
) -> Check:
    title = "steps/s vs the job's own count"
    seen = finite(report.get("steps_per_s"))
    span = _span(report, "steps_span") or _span(report, "phase_span")
    truth = truth_between(records, *span) if span else None
    if truth is None:
        return Check(f"{spec.name}.steps_per_s", group, title, SKIP, seen=seen,
                     detail="no ground truth over the report's steps_span")
    if seen is None:
        return Check(f"{spec.name}.steps_per_s", group, title, FAIL,
                     expected=round(truth.steps_per_s, 2),
                     detail="aitop found no step counter (the loop's `step` local)")
    gap = STEPS_REL_TOL * truth.steps_per_s
    ok = abs(seen - truth.steps_per_s) <= gap
    return Check(f"{spec.name}.steps_per_s", group, title, verdict(ok),
                 expected=round(truth.steps_per_s, 2), seen=round(seen, 2),
                 tolerance=f"±{STEPS_REL_TOL:.0%}")


def _memory(
    spec: JobSpec, report: Mapping[str, Any], records: Sequence[Record], group: str
) -> Check:
    title = "GPU memory used (% of total) vs the job's cudaMemGetInfo"
    window = metrics_window(report)
    truth = truth_between(records, *window) if window else None
    seen = finite(_get(report, "metrics", "gpu_mem_used_mean"))
    if truth is None or truth.mem_used_frac is None:
        return Check(f"{spec.name}.mem_used", group, title, SKIP, seen=seen,
                     detail="no ground truth over the report's window")
    expected = 100.0 * truth.mem_used_frac
    if seen is None:
        return Check(f"{spec.name}.mem_used", group, title, FAIL, expected=round(expected, 2),
                     detail="the report has no gpu_mem_used_mean")
    ok = abs(seen - expected) <= MEM_TOL
    return Check(f"{spec.name}.mem_used", group, title, verdict(ok),
                 expected=round(expected, 2), seen=round(seen, 2),
                 tolerance=f"±{MEM_TOL:g} points")


def judge_overhead(
    records: Sequence[Record],
    without: Sequence[tuple[float, float]],
    attached: tuple[float, float],
    max_loss: float = MAX_OVERHEAD,
) -> Check:
    """Steps/s of one job while aitop was attached, against the spans without it.

    Spans without aitop before *and* after the attached one are averaged, so a
    GPU that warms up and clocks down over the run does not read as overhead.
    """
    group, title = "job:matmul", "steps/s lost while aitop is attached"
    rates = [w.steps_per_s for span in without
             if (w := truth_between(records, *span)) is not None and w.steps_per_s > 0]
    during = truth_between(records, *attached)
    if not rates or during is None:
        return Check("matmul.overhead", group, title, SKIP,
                     detail="the job's truth does not cover the spans with and without aitop")
    baseline = sum(rates) / len(rates)
    loss = 1.0 - during.steps_per_s / baseline
    ok = loss <= max_loss
    return Check("matmul.overhead", group, title, verdict(ok),
                 expected=f"<= {max_loss:.0%}",
                 seen={"without": round(baseline, 2), "with": round(during.steps_per_s, 2),
                       "loss": round(loss, 4)},
                 detail="" if ok else f"the job ran {loss:.1%} slower with aitop attached")


def judge_pcie(
    rx_bps: Sequence[float | None],
    tx_bps: Sequence[float | None],
    truth: TruthWindow | None,
    dmon_mb_s: tuple[float | None, float | None] = (None, None),
    unsupported: Sequence[str] = (),
) -> list[Check]:
    """aitop's PCIe rates while the job copies host→GPU at a rate it counts itself.

    The counters include packet headers and flow control, so RX may read above
    the payload (up to 1.6x), never far below it (0.8x); TX carries only the
    GPU's read requests and must stay well under RX. nvidia-smi dmon's figure is
    shown beside them, not judged (it samples a 20 ms window).
    """
    group = "pcie"
    rx = [v for v in rx_bps if v is not None]
    tx = [v for v in tx_bps if v is not None]
    checks: list[Check] = []
    if truth is None or truth.h2d_bytes_per_s is None or truth.h2d_bytes_per_s <= 0:
        return [Check("pcie.rx", group, "PCIe RX (host→GPU) vs bytes the job copied", SKIP,
                      detail="the pcie job's truth does not cover the sampled span")]
    payload = truth.h2d_bytes_per_s / 1e6
    if not rx and "pcie_rx_bps" in unsupported:
        checks.append(Check("pcie.rx", group, "PCIe RX (host→GPU, MB/s) vs bytes copied", SKIP,
                            expected=round(payload, 1),
                            detail="the driver does not give PCIe counters on this GPU"))
    elif not rx:
        checks.append(Check("pcie.rx", group, "PCIe RX (host→GPU, MB/s) vs bytes copied", FAIL,
                            expected=round(payload, 1),
                            detail="aitop's probe computed no PCIe RX rate"))
    else:
        mean_rx = sum(rx) / len(rx) / 1e6
        ok = 0.8 * payload <= mean_rx <= 1.6 * payload
        mean_tx = sum(tx) / len(tx) / 1e6 if tx else None
        swapped = not ok and mean_tx is not None and 0.8 * payload <= mean_tx <= 1.6 * payload
        checks.append(Check(
            "pcie.rx", group, "PCIe RX (host→GPU, MB/s) vs bytes copied", verdict(ok),
            expected=round(payload, 1), seen=round(mean_rx, 1), tolerance="0.8x to 1.6x",
            detail="" if ok else ("RX and TX look swapped" if swapped else
                                  f"{mean_rx / payload:.2f}x the payload"),
        ))
        if mean_tx is not None:
            tx_ok = mean_tx < 0.5 * mean_rx
            checks.append(Check("pcie.tx", group, "PCIe TX (GPU→host, MB/s) during host→GPU copies",
                                verdict(tx_ok), expected=f"< {0.5 * mean_rx:.1f}",
                                seen=round(mean_tx, 1),
                                detail="" if tx_ok else "TX should carry only read requests"))
    rx_dmon, tx_dmon = dmon_mb_s
    if rx_dmon is not None or tx_dmon is not None:
        checks.append(Check("pcie.dmon", group, "nvidia-smi dmon rx/tx (MB/s), for reference",
                            INFO, seen={"rx": rx_dmon, "tx": tx_dmon}))
    return checks
