"""What a self-test check is, and the comparisons every check is built from.

``aitop selftest --gpu`` proves aitop's GPU paths against references it does not
control: ``nvidia-smi`` read at the same moment, and training jobs that time
themselves. Each comparison becomes one :class:`Check` with the reference
(``expected``), aitop's reading (``seen``), the tolerance it was judged with and
a verdict, so a failed run says exactly which number was off and by how much.
Pure data and arithmetic: no NVML, no subprocesses.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

PASS = "pass"
FAIL = "fail"
#: Could not be checked here (no GPU, not supported by this GPU, ...); says why.
SKIP = "skip"
#: Shown for context (a reference value, a GPM reading); never fails the run.
INFO = "info"
STATUSES = (PASS, FAIL, SKIP, INFO)


@dataclass(frozen=True)
class Check:
    """One expected-vs-seen comparison and its verdict.

    ``expected`` and ``seen`` are JSON values (numbers in the unit the title
    names, strings, lists); ``tolerance`` says in words how far apart they may
    be; ``detail`` says why a check failed or was skipped.
    """

    id: str
    group: str
    title: str
    status: str
    expected: Any = None
    seen: Any = None
    tolerance: str | None = None
    detail: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown check status {self.status!r}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def verdict(ok: bool) -> str:
    return PASS if ok else FAIL


def finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite number, else ``None``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def rounded(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def allowed_gap(reference: float, abs_tol: float, rel_tol: float) -> float:
    """The larger of an absolute tolerance and one relative to the reference."""
    return max(abs_tol, rel_tol * abs(reference))


def tolerance_text(abs_tol: float, rel_tol: float, unit: str) -> str:
    parts = []
    if abs_tol:
        parts.append(f"±{abs_tol:g}{unit}")
    if rel_tol:
        parts.append(f"±{rel_tol:.0%}")
    return " or ".join(parts) + (" (larger)" if len(parts) > 1 else "") if parts else "exact"


def in_bracket(reference: float, readings: Sequence[float], gap: float) -> bool:
    """Whether ``reference`` lies within ``gap`` of the range spanned by ``readings``.

    aitop's probe is read just before and just after the reference tool runs:
    a value that moves meanwhile (utilisation, power) may sit anywhere between
    the two readings, so the reference is compared with that range, widened by
    the tolerance, rather than with either reading alone.
    """
    return min(readings) - gap <= reference <= max(readings) + gap


def compare_numbers(
    check_id: str,
    group: str,
    title: str,
    *,
    expected: float | None,
    seen: Sequence[float | None],
    abs_tol: float = 0.0,
    rel_tol: float = 0.0,
    unit: str = "",
    missing_expected: str = "the reference has no value here",
    missing_seen: str = "aitop read nothing",
) -> Check:
    """Compare a reference number with aitop's reading(s) (see :func:`in_bracket`).

    Neither side readable: ``skip``. Only the reference readable: ``fail`` (aitop
    is blank where it should not be). Only aitop readable: ``skip`` (nothing to
    compare with; aitop's value is kept in ``seen``).
    """
    readings = [v for v in seen if v is not None]
    shown: Any = [rounded(v) for v in seen] if len(seen) > 1 else rounded(seen[0])
    tolerance = tolerance_text(abs_tol, rel_tol, unit)
    base = dict(id=check_id, group=group, title=title, tolerance=tolerance)
    if expected is None and not readings:
        return Check(**base, status=SKIP, expected=None, seen=shown,
                     detail=f"neither side reads it: {missing_expected}; {missing_seen}")
    if expected is None:
        return Check(**base, status=SKIP, expected=None, seen=shown, detail=missing_expected)
    if not readings:
        return Check(**base, status=FAIL, expected=rounded(expected), seen=shown,
                     detail=missing_seen)
    gap = allowed_gap(expected, abs_tol, rel_tol)
    ok = in_bracket(expected, readings, gap)
    detail = "" if ok else (
        f"off by {min(abs(expected - v) for v in readings):.3g}{unit}, "
        f"allowed {gap:.3g}{unit}"
    )
    return Check(**base, status=verdict(ok), expected=rounded(expected), seen=shown,
                 detail=detail)


def summarise(checks: Sequence[Check]) -> dict[str, int]:
    """How many checks ended in each status."""
    return {status: sum(1 for c in checks if c.status == status) for status in STATUSES}
