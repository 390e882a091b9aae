"""The training thread's step phases: their shares, compilation, and accelerator use."""

from __future__ import annotations

from aitop.probes.samples import StackWindow
from aitop.probes.session import PHASES, Session

from .units import Values, flag

#: Window for rare events (checkpoint saves): one save every few minutes should
#: not look like a 10 % stall just because it fell inside a 20 s window.
LONG_WINDOW_S = 300.0
#: How far back a job must have trained for its forward-only passes to be
#: evaluation, not inference.
INFERENCE_LOOKBACK_S = 60.0


def read_stacks(session: Session, now: float, window_s: float) -> list[StackWindow]:
    """The window's stack windows that py-spy read (a failed dump has no phases)."""
    return [w for w in session.stacks.window(now - window_s, now) if w.error is None]


def forward_only(session: Session, now: float, window_s: float) -> float | None:
    """1 when the thread runs forward passes but, for a while, no backward or optimizer.

    Looked at over ``INFERENCE_LOOKBACK_S`` (or the window, if longer): a
    training job's evaluation pass may fill a window, its training does not
    stop for a minute.
    """
    counts, total = session.phase_counts(now, max(window_s, INFERENCE_LOOKBACK_S))
    if not total:
        return None
    forward = counts.get("forward", 0) + counts.get("eval", 0)
    trained = counts.get("backward", 0) + counts.get("optimizer", 0)
    return flag(forward > 0 and trained == 0)


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
    long_fractions = session.phase_fractions(now, max(LONG_WINDOW_S, window_s))
    values["phase_checkpoint_long"] = long_fractions["checkpoint"] if long_fractions else None
    values["phase_eval_long"] = long_fractions["eval"] if long_fractions else None
    if has_gpu:
        values["accel_util"] = gpu_util_mean
    else:
        values["accel_util"] = None if compute is None else 100.0 * compute
    return values


def compile_metrics(session: Session, now: float, window_s: float) -> Values:
    """Recompilation apart from the first compilation draining out of the window.

    The first compilation (``Session.compile_warmup``: the first run of stack
    windows mostly compiling, and its tail) is the warm-up; shares read while
    its windows are in the window describe it, not the steps:
    ``compile_warmup_share`` is how much of the window they fill. Compilation
    in any other window is recompilation: ``phase_compile_steady``. The newest
    window's compile share is ``phase_compile_last`` (compiling now).
    """
    windows = read_stacks(session, now, window_s)
    warmup = session.compile_warmup

    def in_warmup(w: StackWindow) -> bool:
        return warmup is not None and w.t_start >= warmup.start and (
            warmup.end is None or w.t_end <= warmup.end)

    counted = [w for w in windows if w.total_samples > 0]
    newest = counted[-1] if counted else None
    total = sum(w.total_samples for w in counted)
    steady = [w for w in counted if not in_warmup(w)]
    steady_total = sum(w.total_samples for w in steady)
    return {
        "phase_compile_last": (None if newest is None
                               else newest.phase_counts.get("compile", 0) / newest.total_samples),
        "compile_warmup_share": (sum(w.total_samples for w in counted if in_warmup(w)) / total
                                 if total else None),
        "phase_compile_steady": (sum(w.phase_counts.get("compile", 0) for w in steady)
                                 / steady_total if steady_total else None),
    }
