"""Reading the GPU jobs' own ground truth over the span aitop measured.

Each job (``aitop.demo.gpu_jobs``) appends cumulative counters every 0.5 s;
the difference of two interpolated records is what the job measured between
two instants, so it can be compared with aitop's report over exactly the span
of aitop's stack samples (``phase_span``) or step-counter readings
(``steps_span``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Phases the jobs time on the host, by their aitop names (``other`` is the rest).
HOST_PHASES = ("data_wait", "forward", "backward", "optimizer", "sync")
#: Shortest span worth comparing: shorter ones are mostly interpolation.
MIN_SPAN_S = 1.0

Record = dict[str, Any]


def read_truth(path: Path) -> list[Record]:
    """The job's records, oldest first; a half-written last line is skipped."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    records = []
    for line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and isinstance(record.get("t"), int | float):
            records.append(record)
    return records


def job_info(records: Sequence[Record]) -> dict[str, Any]:
    """The facts the job recorded once (its PID, PyTorch, the GPU it used)."""
    for record in records:
        info = record.get("info")
        if isinstance(info, dict):
            return info
    return {}


def _numeric(record: Record) -> dict[str, float]:
    return {k: float(v) for k, v in record.items()
            if isinstance(v, int | float) and not isinstance(v, bool)}


def at(records: Sequence[Record], t: float) -> dict[str, float]:
    """Counters at time ``t``, interpolated; clamped to the first and last record."""
    if t <= records[0]["t"]:
        return _numeric(records[0])
    if t >= records[-1]["t"]:
        return _numeric(records[-1])
    after = next(i for i, r in enumerate(records) if r["t"] >= t)
    a, b = _numeric(records[after - 1]), _numeric(records[after])
    if b["t"] == a["t"]:
        return a
    w = (t - a["t"]) / (b["t"] - a["t"])
    return {k: a[k] + w * (b[k] - a[k]) for k in a if k in b}


@dataclass(frozen=True)
class TruthWindow:
    """What the job measured between two instants (fractions of wall time)."""

    t0: float
    t1: float
    elapsed_s: float
    #: Host phases (aitop's names) as fractions of the span, ``other`` the rest.
    phases: dict[str, float]
    #: Share of the span the GPU spent between a step's first and last event.
    device_busy: float | None
    steps_per_s: float
    h2d_bytes_per_s: float | None
    #: Device memory in use at the end of the span, as a fraction of the total.
    mem_used_frac: float | None


def truth_between(records: Sequence[Record], t0: float, t1: float) -> TruthWindow | None:
    """The job's own account of ``[t0, t1]``, or ``None`` when it covers under a second."""
    if not records:
        return None
    a, b = at(records, t0), at(records, t1)
    elapsed = b.get("elapsed", 0.0) - a.get("elapsed", 0.0)
    if elapsed < MIN_SPAN_S:
        return None

    def share(key: str) -> float:
        return max(0.0, (b.get(key, 0.0) - a.get(key, 0.0)) / elapsed)

    phases = {p: share(f"host_{p}") for p in HOST_PHASES}
    phases["other"] = max(0.0, 1.0 - sum(phases.values()))
    h2d = share("h2d_bytes") if "h2d_bytes" in b else None
    return TruthWindow(
        t0=max(t0, records[0]["t"]),
        t1=min(t1, records[-1]["t"]),
        elapsed_s=elapsed,
        phases=phases,
        device_busy=share("dev_busy") if "dev_busy" in b else None,
        steps_per_s=share("steps"),
        h2d_bytes_per_s=h2d,
        mem_used_frac=b.get("mem_used_frac"),
    )
