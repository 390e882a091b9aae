"""torch.compile's time: the first compilation apart, recompilation after it.

The first compilation (``Session.compile_warmup``, ``probes.warmup``) is the
warm-up; shares read while its windows are in the window describe it, not the
steps. Compilation in any other window is recompilation: a cost of the steps,
however much of a window it fills. What recompiles, and why, comes from
dynamo's own frames (``probes.compile_frames``: the frame it compiles, the
compile id that numbers its compilations, the guard that failed) and from
the job's log (dynamo's "hit config.recompile_limit" warning).
"""

from __future__ import annotations

from collections.abc import Sequence

from aitop.probes.compile_frames import RECOMPILE_EVENT, compile_number
from aitop.probes.samples import LogEvent, StackWindow, hot_frame_counts
from aitop.probes.session import Session

from .units import Values, flag

#: The job log's event for dynamo giving up on a frame (``probes.job_log``).
RECOMPILE_LIMIT_EVENT = "recompile_limit"
#: What a title says where no frame of dynamo's could be read.
UNKNOWN_FRAME = "the model"


def _read_windows(session: Session, now: float, window_s: float) -> list[StackWindow]:
    return [w for w in session.stacks.window(now - window_s, now)
            if w.error is None and w.total_samples > 0]


def _compiling_call(windows: Sequence[StackWindow]) -> str:
    """"the model called at train.py:42": the loop's line the hottest compiling
    samples pass through, or "the model" where none is known."""
    for (phase, _function, _location, caller), _n in hot_frame_counts(windows):
        if phase == "compile" and caller:
            return f"{UNKNOWN_FRAME} called at {caller.rsplit('/', 1)[-1]}"
    return UNKNOWN_FRAME


def compile_metrics(session: Session, now: float, window_s: float) -> Values:
    """The first compilation's share of the window and whether it goes on, and the
    compile share outside it (``phase_compile_steady``, with the samples it was
    counted over); the newest window's compile share (``phase_compile_last``).
    A compilation aitop attached in the middle of, never told apart once steps
    were proven (``CompileWarmup.certain``), is in neither share."""
    windows = _read_windows(session, now, window_s)
    warmup = session.compile_warmup

    def in_warmup(w: StackWindow) -> bool:
        return warmup is not None and w.t_start >= warmup.start and (
            warmup.end is None or w.t_end <= warmup.end)

    trained = session.trained_at is not None and session.trained_at <= now

    def in_first(w: StackWindow) -> bool:
        """In the first compilation, as far as aitop knows: one still uncertain once
        steps are proven was no warm-up to speak of (and no recompilation either)."""
        return in_warmup(w) and warmup is not None and (warmup.certain or not trained)

    newest = windows[-1] if windows else None
    total = sum(w.total_samples for w in windows)
    steady = [w for w in windows if not in_warmup(w)]
    steady_total = sum(w.total_samples for w in steady)
    going_on = (warmup is not None and warmup.start <= now and not trained
                and (warmup.end is None or warmup.end > now))
    return {
        "phase_compile_last": (None if newest is None
                               else newest.phase_counts.get("compile", 0) / newest.total_samples),
        "compile_warmup_share": (sum(w.total_samples for w in windows if in_first(w)) / total
                                 if total else None),
        "compile_first_going_on": flag(going_on),
        "steps_proven": flag(trained),
        "phase_compile_steady": (sum(w.phase_counts.get("compile", 0) for w in steady)
                                 / steady_total if steady_total else None),
        "compile_steady_samples": float(steady_total),
    } | recompile_metrics(session, now)


def _events(session: Session, now: float, kind: str) -> list[LogEvent]:
    return [e for e in session.events.window(float("-inf"), now) if e.kind == kind]


def recompile_metrics(session: Session, now: float) -> Values:
    """How many recompilations the job has made, and how often, from the compile ids
    its recompiling frames were seen with (since aitop attached).

    A recompilation's reason names the compiled version whose guard failed,
    ``f/n``: frame ``f``'s compilation number ``n`` (0 is its first), so the one
    under way is ``n + 1``, and the job has recompiled that frame ``n + 1``
    times since it started. Two sightings of a frame with different numbers
    give its rate; the job's is the sum over its frames.
    """
    seen: dict[int, list[tuple[float, int]]] = {}
    for event in _events(session, now, RECOMPILE_EVENT):
        numbered = compile_number(event.text)
        if numbered is not None:
            seen.setdefault(numbered[0], []).append((event.t, numbered[1] + 1))
    count = sum(max(n for _t, n in sightings) for sightings in seen.values()) if seen else None
    rate = 0.0
    for sightings in seen.values():
        (t0, n0), (t1, n1) = min(sightings), max(sightings)
        if t1 > t0 and n1 > n0:
            rate += (n1 - n0) / (t1 - t0)
    return {
        "recompiles_seen": None if count is None else float(count),
        "recompile_every_s": 1.0 / rate if rate > 0 else None,
        "recompile_limit_hit": flag(bool(_events(session, now, RECOMPILE_LIMIT_EVENT))),
    }


def compile_words(session: Session, now: float,
                  windows: Sequence[StackWindow] = ()) -> dict[str, str]:
    """What dynamo recompiles and why, in words (each a sentence, or "" where
    nothing says it): ``recompile_frame`` (the function dynamo's frames named,
    else the loop's line the compiling samples pass through, else "the model"),
    ``recompile_count`` (how many recompilations, how often), ``recompile_guard``
    (the guard that failed last) and ``recompile_limit`` (the function dynamo
    gave up on, as the job's log says). A backward pass's compilation runs
    outside dynamo's frames (AOTAutograd compiles it at its first call), so a
    dump taken then names nothing: the loop's line still says where."""
    recompiles = _events(session, now, RECOMPILE_EVENT)
    limits = _events(session, now, RECOMPILE_LIMIT_EVENT)
    words = {"recompile_frame": _compiling_call(windows), "recompile_count": "",
             "recompile_guard": "", "recompile_limit": ""}
    guard = ""
    if recompiles:
        newest = recompiles[-1]
        words["recompile_frame"] = newest.subject
        counts = recompile_metrics(session, now)
        seen, every = counts["recompiles_seen"], counts["recompile_every_s"]
        how = "".join((f": {seen:.0f} recompilations of it since the job started"
                       if seen is not None else "",
                       f", one every {every:.2g} s" if every is not None else ""))
        words["recompile_count"] = f"Dynamo was seen recompiling {newest.subject}{how}."
        guard = newest.text.split(": ", 1)[1] if compile_number(newest.text) else newest.text
    if limits:
        limit, _, reason = limits[-1].text.partition("; last reason: ")
        words["recompile_limit"] = (f"Dynamo hit {limit} on {limits[-1].subject}: past it, "
                                    "that function runs uncompiled.")
        if not guard and reason:
            guard = reason.split(": ", 1)[1] if compile_number(reason) else reason
    if guard:
        words["recompile_guard"] = f"The guard that failed last: {guard}."
    return words
