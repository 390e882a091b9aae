"""Which readings steps/s comes from, and why the other sources did not serve.

Four sources count steps without instrumenting the job, in this order:

1. **The loop's counter** (``probes.steps``): exact when it counts steps, and
   nothing in the frame says it does: a loop's ``i`` may step by the sequence
   length (``range(0, n, bptt)``). Where the job also prints its step, or the
   stacks count its cycles, a counter that runs faster than that count is set
   aside, and the reason is kept. A counter slower than the printed count is
   kept: the log's integer may count micro-batches or samples where the loop
   counts optimizer steps.
2. **The job's log** (``probes.job_log``): the step it prints, stamped with the
   write, read from its file or from the file its pipe's reader writes.
3. **The DataLoader workers' batch index**: it counts batches fetched, runs
   ahead by the prefetch depth and restarts each epoch. It is never shown where
   the workers of more than one loader counted (a training and an evaluation
   loader: each worker says which dataset it loads); otherwise only where it
   agrees with the log or the stacks, or, with neither, where the job spends
   little time evaluating (an evaluation loader's workers fetch while the
   training loader's sit on full queues) and its own readings hold together:
   each tick reads it twice a moment apart, and if the index moves much faster
   between those than from one tick to the next, the epochs turn over between
   ticks (the count is seen modulo the epoch's length) and the differencing
   cannot be trusted.
4. **Step cycles** (``probes.step_cycles``): counted from the order of stack
   samples, only where 10 Hz sampling resolves every cycle (slow steps).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .job_log import LOG_SOURCE
from .samples import StepCounterSample
from .step_cycles import CYCLES_SOURCE
from .step_rate import counter_increments, epochs_pass_unseen, steps_per_second
from .steps import WORKER_COUNTER

#: The sources in the order they are preferred, and how a report names them.
LOOP, WORKERS = "loop", "workers"
SOURCES = (LOOP, LOG_SOURCE, WORKERS, CYCLES_SOURCE)
LABELS: Mapping[str, str] = {
    LOOP: "loop counter",
    LOG_SOURCE: "job log",
    WORKERS: "DataLoader workers' batch index",
    CYCLES_SOURCE: "step cycles in the stacks",
}

#: A counter this many times faster than the job's printed count is not a step
#: count; against the cycles, whose count sampling can miss a few of, this many.
COUNTER_TOO_FAST = 1.3
COUNTER_TOO_FAST_VS_CYCLES = 1.5
#: Two sources agree when their rates are within this factor of each other.
AGREE = 1.25
#: The workers' index moving this many times faster between paired readings
#: than across ticks: its epochs turn over between ticks.
TURNOVER = 1.6
#: Paired readings needed to judge the workers' index by itself.
MIN_PAIRS = 2
#: The share of the training thread's samples in evaluation from which the
#: workers' index, with no log or cycles to agree with, is no step count: an
#: evaluation pass's own loader keeps its workers fetching while the training
#: loader's sit on full queues, so the index read is mostly the evaluation's.
EVALUATING_SHARE = 0.05


@dataclass(frozen=True, slots=True)
class StepReadings:
    """The readings behind steps/s, their source, and what the other sources said."""

    readings: list[StepCounterSample]
    #: Why the loop's counter was set aside, if it was.
    rejected: str | None = None
    #: The source of ``readings`` (``SOURCES``), None when none gave a rate.
    source: str | None = None
    #: ``"<source>: <why it did not serve>"`` for each source not used.
    tried: tuple[str, ...] = ()


def source_of(reading: StepCounterSample) -> str:
    """A reading's source (the workers' index of older recordings included)."""
    if reading.source == LOOP and reading.name == WORKER_COUNTER:
        return WORKERS
    return reading.source


def split_sources(
    readings: Sequence[StepCounterSample],
) -> dict[str, list[StepCounterSample]]:
    """Each source's readings, in order."""
    out: dict[str, list[StepCounterSample]] = {s: [] for s in SOURCES}
    for r in readings:
        out.setdefault(source_of(r), []).append(r)
    return out


def _name(readings: Sequence[StepCounterSample], default: str) -> str:
    return next((r.name for r in reversed(readings) if r.name), default)


def _agree(a: float, b: float) -> bool:
    return 1 / AGREE <= a / b <= AGREE


def _reference(rates: Mapping[str, float | None]) -> tuple[str, float] | None:
    """The log's rate, else the cycles': what a counter is checked against."""
    for source in (LOG_SOURCE, CYCLES_SOURCE):
        rate = rates.get(source)
        if rate is not None:
            return source, rate
    return None


def _counter_too_fast(loop: Sequence[StepCounterSample], counted: float,
                      by: Mapping[str, Sequence[StepCounterSample]],
                      rates: Mapping[str, float | None]) -> str | None:
    ref = _reference(rates)
    if ref is None:
        return None
    source, rate = ref
    if counted <= (COUNTER_TOO_FAST if source == LOG_SOURCE else COUNTER_TOO_FAST_VS_CYCLES) * rate:
        return None
    name = _name(loop, "the counter")
    what = (f"`{_name(by[source], 'the step')}` the job prints" if source == LOG_SOURCE
            else "the step cycles the stacks count")
    return (f"`{name}` advanced {counted:.3g}/s, {counted / rate:.2g}x the {rate:.3g}/s "
            f"of {what}: not a step count")


def loaders_in_turn(readings: Sequence[StepCounterSample]) -> list[str] | None:
    """The datasets the workers' readings came from, where workers of more than
    one DataLoader counted: several fetching at once, or one loader's seen again
    after another's (a training loader, then an evaluation loader, then the
    training loader's next epoch). None where one loader, or one after another
    and never back (a new dataset each epoch), gave them all."""
    order: list[str] = []
    for reading in readings:
        if reading.loader is None:
            continue
        names = reading.loader.split(", ")
        if len(names) > 1:
            return sorted({*order, *names})
        if order and order[-1] != names[0] and names[0] in order:
            return sorted(set(order))
        if not order or order[-1] != names[0]:
            order.append(names[0])
    return None


def workers_problem(readings: Sequence[StepCounterSample], rate: float,
                    rates: Mapping[str, float | None], evaluating: float = 0.0) -> str | None:
    """Why the workers' index is not shown, or None where it holds; ``evaluating``:
    the share of the training thread's samples in evaluation meanwhile."""
    if loaders := loaders_in_turn(readings):
        return (f"its workers load {len(loaders)} datasets in turn ({', '.join(loaders)}): "
                "the index counts each loader's batches (training and evaluation alike), "
                "not the steps")
    ref = _reference(rates)
    if ref is not None:
        source, other = ref
        if _agree(rate, other):
            return None
        return f"read {rate:.3g}/s where the {LABELS[source]} give {other:.3g}/s"
    if evaluating >= EVALUATING_SHARE:
        return (f"the job evaluates {evaluating:.0%} of the time, and an evaluation loader's "
                "workers fetch while the training loader's wait on full queues: the index "
                "read is the evaluation's as much as the steps'")
    intervals = counter_increments(readings)
    paired = [(p, c, n) for p, c, n in intervals if c.paired]
    across = [(p, c, n) for p, c, n in intervals if not c.paired]
    if len(paired) < MIN_PAIRS or not across:
        return (f"{len(paired)} paired reading(s), {len(across)} across ticks: too few to tell "
                "whether epochs turn over between readings")
    near = sum(n for *_, n in paired) / sum(c.t - p.t for p, c, _ in paired)
    far = sum(n for *_, n in across) / sum(c.t - p.t for p, c, _ in across)
    if near > TURNOVER * max(far, 1e-9):
        epoch = max(r.value or 0 for r in readings) + 1
        return (f"moves {near:.3g}/s between readings a moment apart but {far:.3g}/s from one "
                f"reading to the next: its epochs (about {epoch} batches) turn over between "
                "readings, and the count seen is the steps modulo the epoch")
    return None


def choose_step_readings(readings: Sequence[StepCounterSample],
                         evaluating: float = 0.0) -> StepReadings:
    """The best source's readings, and why each other source did not serve;
    ``evaluating``: the share of the training thread's samples in evaluation
    over the readings' time (``workers_problem``)."""
    by = split_sources(readings)
    rates: dict[str, float | None] = {s: steps_per_second(by[s]) for s in SOURCES}
    why: dict[str, str] = {}
    rejected = None
    counted = rates[LOOP]
    if counted is not None and (unseen := epochs_pass_unseen(by[LOOP])):
        why[LOOP], rates[LOOP], counted = f"set aside: {unseen}", None, None
    if counted is not None and (rejected := _counter_too_fast(by[LOOP], counted, by, rates)):
        why[LOOP], rates[LOOP] = f"set aside: {rejected}", None
    workers = rates[WORKERS]
    if workers is not None and (problem := workers_problem(by[WORKERS], workers, rates,
                                                            evaluating)):
        why[WORKERS], rates[WORKERS] = f"set aside: {problem}", None
    chosen = next((s for s in SOURCES if rates[s] is not None), None)
    tried = tuple(
        f"{LABELS[s]}: {why.get(s) or _why_not(by[s], rates[s], chosen)}"
        for s in SOURCES if s != chosen and (chosen is None or by[s] or s in why))
    return StepReadings(by[chosen] if chosen else [], rejected, chosen, tried)


def _why_not(readings: Sequence[StepCounterSample], rate: float | None,
             chosen: str | None) -> str:
    """What a source that was not used said: its rate, its newest error, or too little."""
    if rate is not None and chosen is not None:
        return f"{rate:.3g}/s, not used: the {LABELS[chosen]} comes first"
    newest = readings[-1] if readings else None
    if newest is None:
        return "not read"
    if newest.value is None:
        return newest.error or "not read"
    values = sum(r.value is not None for r in readings)
    return f"{values} reading(s) of `{newest.name}`, not yet a rate (needs 2 s and 2 steps)"
