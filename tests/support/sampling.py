"""How far a phase share counted from stack samples may lie from the job's own timers.

A share estimated from n samples has a binomial standard error of
sqrt(p(1-p)/n); 2.6 of them fail about 1 % of honest runs of independent
samples. py-spy's samples are not independent: they come at a fixed 10 Hz
period that beats with the step's own period, and one save or one slow batch
spans many of them in a row. The bound is therefore widened by a quarter (a
variance half again as large) and never narrower than a floor of whole points.
Measured misses that set it: docs/diagnosis.md, "Phase shares against the
job's timers".
"""

from __future__ import annotations

import math

__all__ = ["share_tolerance"]

#: Standard errors a share may lie off before a test fails: ~1 % of honest runs.
STANDARD_ERRORS = 2.6
#: The widening for samples that beat with the step and come in runs.
DEPENDENCE = 1.25


def share_tolerance(share: float, samples: float, floor: float = 0.05) -> float:
    """``floor``, or 1.25 x 2.6 standard errors of ``share`` from ``samples``, if larger."""
    standard_error = math.sqrt(max(share * (1 - share), 0.0) / max(samples, 1.0))
    return max(floor, DEPENDENCE * STANDARD_ERRORS * standard_error)
