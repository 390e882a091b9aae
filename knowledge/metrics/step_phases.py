"""The training thread's step phases: their shares, and accelerator use (compilation:
``compiling``)."""

from __future__ import annotations

import itertools
import math

from aitop.probes.samples import StackWindow
from aitop.probes.session import PHASES, Session

from .compiling import compile_metrics
from .units import Values

#: Window for rare events (checkpoint saves): one save every few minutes should
#: not look like a 10 % stall just because it fell inside a 20 s window.
LONG_WINDOW_S = 300.0
#: How far back a job must have trained for its forward-only passes to be
#: evaluation, not inference.
INFERENCE_LOOKBACK_S = 60.0
#: Forward-pass samples, with no backward or optimizer sample beside them, that
#: make a job a server. A training step's backward takes at least as long as
#: its forward (about twice its arithmetic), so each sample of a step's compute
#: is backward or optimizer at least half the time: a training loop shows this
#: many forward samples and none of the rest 1 time in 2^8 = 256 or less. A
#: data-starved loop computing 3 % of the time showed 1 forward sample and no
#: other in its first 11 s (CI, a producer-fed loop read as "Serving").
SERVING_MIN_FORWARD_SAMPLES = 8
#: Stack windows a share's spread needs before it stands for the share's error.
MIN_ERROR_WINDOWS = 3


def cluster_error(windows: list[StackWindow], phase: str) -> float | None:
    """Twice the cluster (ratio-estimator) standard error of ``phase``'s share
    sum(c_i) / sum(n_i) over K >= 3 stack windows, each window a cluster of
    samples (docs/predictions-check.md, "A share read in blocks"); None with fewer.

    A phase that comes in blocks (an evaluation of a second every two, a save)
    fills some windows and misses others, and where a window's edges cut its
    blocks moves the pooled share: the windows' spread measures that, where the
    sample count cannot (a block's samples are not independent).
    """
    read = [(w.phase_counts.get(phase, 0), w.total_samples) for w in windows
            if w.error is None and w.total_samples > 0]
    k = len(read)
    if k < MIN_ERROR_WINDOWS:
        return None
    total = sum(n for _c, n in read)
    share = sum(c for c, _n in read) / total
    variance = k / (k - 1) * sum((c - share * n) ** 2 for c, n in read) / total ** 2
    return 2.0 * math.sqrt(variance)


def block_error(windows: list[StackWindow], phase: str) -> float | None:
    """One of ``phase``'s blocks as a share of the look, on average: a look whose
    edges took in one block more or one fewer than the job's cadence gives
    reads the share off by about that much. The first window of a job that
    evaluates for one second in six holds one block in three seconds (a third)
    where the job spends a sixth.

    A block that runs on across the edge between two windows (the first ends in
    the phase, the next begins in it) is one block. None where a window that
    sampled the phase kept no sample order, or nothing was sampled.
    """
    read = [w for w in windows if w.error is None and w.total_samples > 0]
    total = sum(w.total_samples for w in read)
    if not total or any(w.phase_counts.get(phase, 0) and phase not in w.phase_blocks
                        for w in read):
        return None
    blocks = sum(w.phase_blocks.get(phase, 0) for w in read)
    blocks -= sum(1 for before, after in itertools.pairwise(read)
                  if before.ends[-1:] == (phase,) and after.ends[:1] == (phase,))
    if blocks <= 0:
        return 0.0
    return sum(w.phase_counts.get(phase, 0) for w in read) / blocks / total


def share_error(windows: list[StackWindow], phase: str) -> float:
    """How far ``phase``'s share pooled over ``windows`` may be from the job's own:
    the larger of the windows' spread (``cluster_error``, three windows or more)
    and one block's share of the look (``block_error``, where the samples kept
    their order); 0 where neither can be read yet.
    """
    return max(cluster_error(windows, phase) or 0.0, block_error(windows, phase) or 0.0)


def read_stacks(session: Session, now: float, window_s: float) -> list[StackWindow]:
    """The window's stack windows that py-spy read (a failed dump has no phases)."""
    return [w for w in session.stacks.window(now - window_s, now) if w.error is None]


def forward_only(session: Session, now: float, window_s: float) -> float | None:
    """1 when the thread runs forward passes but, for a while, no backward or optimizer;
    0 when it trains (or runs no pass at all); None while too few forward passes
    were sampled to tell (``SERVING_MIN_FORWARD_SAMPLES``).

    Looked at over ``INFERENCE_LOOKBACK_S`` (or the window, if longer): a
    training job's evaluation pass may fill a window, its training does not
    stop for a minute.
    """
    counts, total = session.phase_counts(now, max(window_s, INFERENCE_LOOKBACK_S))
    if not total:
        return None
    forward = counts.get("forward", 0) + counts.get("eval", 0)
    trained = counts.get("backward", 0) + counts.get("optimizer", 0)
    if trained or not forward:
        return 0.0
    return 1.0 if forward >= SERVING_MIN_FORWARD_SAMPLES else None


def phase_metrics(
    session: Session, now: float, window_s: float, has_gpu: bool, gpu_util_mean: float | None,
) -> Values:
    """The training thread's phase shares, and what stands for accelerator use:
    ``gpu_util_mean`` with a GPU, the compute phases' share without one."""
    fractions = session.phase_fractions(now, window_s)
    _counts, total = session.phase_counts(now, window_s)
    only_forward = forward_only(session, now, window_s)
    values: Values = {"forward_only": only_forward}
    if fractions and only_forward == 1.0:
        # No training for a minute: passes read as evaluation are its work.
        fractions = {**fractions, "forward": fractions["forward"] + fractions["eval"],
                     "eval": 0.0}
    for phase in PHASES:
        values[f"phase_{phase}"] = fractions[phase] if fractions else None
    compute = (
        fractions["forward"] + fractions["backward"] + fractions["optimizer"] if fractions else None
    )
    values["phase_compute"] = compute
    values["phase_device"] = (
        None if fractions is None or compute is None
        else compute + (fractions["sync"] if has_gpu else 0.0)
    )
    values["phase_samples"] = float(total)
    values |= compile_metrics(session, now, window_s)
    long_s = max(LONG_WINDOW_S, window_s)
    long_fractions = session.phase_fractions(now, long_s)
    long_windows = read_stacks(session, now, long_s)
    # Seconds since the newest window py-spy read ended (a failed dump changes no
    # share): RuleEngine confirms a hold over the shares with a newer one.
    values["stacks_age_s"] = max(0.0, now - long_windows[-1].t_end) if long_windows else None
    for phase in ("checkpoint", "eval"):
        values[f"phase_{phase}_long"] = long_fractions[phase] if long_fractions else None
        values[f"phase_{phase}_long_error"] = (
            share_error(long_windows, phase) if long_fractions else None)
    if has_gpu:
        values["accel_util"] = gpu_util_mean
    else:
        values["accel_util"] = None if compute is None else 100.0 * compute
    return values
