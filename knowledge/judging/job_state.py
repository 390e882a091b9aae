"""What a job is doing, as one word a list of jobs can show (the node view, the node report).

Not judged yet (``collecting``), one of the job states its rules name
(``warming_up``, ``stalled``), or, in its steady state, whether it trains,
evaluates or serves.
"""

from __future__ import annotations

from ..base.findings import COLLECTING, STALLED, UNKNOWN, WARMING_UP, Diagnosis, JobState
from ..metrics.step_phases import INFERENCE_LOOKBACK_S


def job_state(diagnosis: Diagnosis | None) -> JobState:
    """What the job is doing by ``diagnosis``: its job state when a rule names one,
    ``collecting`` before anything is judged, else what its training thread does.

    Serving is the ``serving`` condition's metric (``forward_only``: forward passes
    and no backward or optimizer step) once aitop has watched the whole span it
    looks over: a training loop's backward can go unsampled for its first seconds.
    Evaluating: an evaluation pass holds the largest share of the window (its own
    phase, so no cut to choose).
    """
    if diagnosis is None or diagnosis.category in (COLLECTING, UNKNOWN):
        return "collecting"
    if diagnosis.category == WARMING_UP:
        return "warming_up"
    if diagnosis.category == STALLED:
        return "stalled"
    metrics = diagnosis.metrics
    watched = metrics.get("watched_s")
    if metrics.get("forward_only") == 1 and watched is not None \
            and watched >= INFERENCE_LOOKBACK_S:
        return "serving"
    phases = diagnosis.phases or {}
    if phases.get("eval", 0.0) > 0 and max(phases, key=phases.__getitem__) == "eval":
        return "evaluating"
    return "training"
