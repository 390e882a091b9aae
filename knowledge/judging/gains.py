"""What applying a finding's first action would buy *on this machine*.

Three kinds of figure, never mixed up (``Gain.method``):

* ``predicted``: a range for the step-rate speed-up of the first action, from
  the measured phases *and the resources that action needs*: more DataLoader
  workers cannot use cores that are busy, halving validation removes half of
  its share. These are the figures the fixed demo variants check, in and out
  of the jobs they were fitted on (benchmarks/predictions.py).
* ``amdahl``: a ceiling, 1 / (1 - p), what removing the phase entirely would
  give, or 1 / ((1 - p) + p / f) for a computation run f times wider, whose
  scaling depends on the size of its operations, which no outside signal shows
  (docs/predictions-check.md). Shown as "at most", never as a promise.
* ``document``: the figure the source documents claim for a technique.

Where no honest figure exists the gain says so (``speedup`` is ``None``).

Symbols below: p the phase's share of wall time, w the CPU the workers use now
(in cores), F the cores still free for the job, N the workers now, M the
workers suggested.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from ..base.catalogue import CATALOGUE
from ..base.facts import Facts
from ..base.findings import Gain
from ..base.rules import GainSpec
from ..metrics.capacity import cpu_budget_factor, loading_capacity_factor

Metrics = Mapping[str, "float | None"]

#: Scaling efficiency of extra loading capacity that lands on shared cores: the
#: new workers and the training thread contend for caches and memory
#: bandwidth; measured on the fixed demo variants (docs/predictions.md).
LOW_EFFICIENCY = 0.7
#: The high end allows this much more capacity than the window's mean shows
#: free: aitop's own CPU (it is not there once the change is made) and idle
#: moments the mean hides. On a quiet 2-core box 1 -> 2 CPU-bound workers gave
#: 1.95x for a free-core estimate of 1.9x.
HIGH_ALLOWANCE = 1.1
#: The widest a predicted range may be, high over low.
MAX_WIDTH = 1.5
#: A CPU budget this tight means no core is free: the neighbours fill the host,
#: and a job that waits gets its fair share of their cores, not a bound.
MIN_BUDGET = 1.05
#: How much of the CPU a raised quota gives a throttled job it may turn into
#: more than its share of speed: the waits on threads the quota stopped
#: mid-step go with it (docs/predictions-check.md, the quota job).
QUOTA_HIGH = 1.15
#: How far a phase share may be from the job's own timer: the bound aitop's phase
#: shares are held to (docs/benchmarks.md, accuracy). A predicted range's low end
#: assumes the share was read this much too high ("fewer": at least this much
#: either way, more where the stack windows' spread says so).
PHASE_ERROR = 0.03


def figure(factor: float) -> str:
    """A speed-up factor to two significant figures: ``1.5``, ``0.86``, ``21``, ``100``.

    Reruns of one job move its figures in the second digit (an Amdahl ceiling
    read 29 to 52 across reruns), so a third digit would claim a precision no
    measurement has.
    """
    if not math.isfinite(factor) or factor <= 0:
        return f"{factor:g}"
    decimals = 1 - math.floor(math.log10(factor))
    rounded = round(factor, decimals)
    if rounded >= 10 ** (2 - decimals):  # 9.96 rounds up into the next decade
        decimals -= 1
        rounded = round(factor, decimals)
    return f"{rounded:.{max(decimals, 0)}f}"


def figure_range(low: float, high: float) -> str:
    """``1.5–1.8``, or one figure where both ends read the same."""
    a, b = figure(low), figure(high)
    return a if a == b else f"{a}–{b}"


def _phase(metrics: Metrics, name: str | None) -> float | None:
    p = metrics.get(name or "")
    return None if p is None else min(max(p, 0.0), 0.99)


def _ceiling(p: float) -> float:
    return 1.0 / (1.0 - p)


def _range(ceilings: tuple[float, float], factor: float) -> tuple[float, float]:
    """A speed-up range for loading capacity x``factor`` under an Amdahl ceiling: the
    low end under the ceiling of the share read ``PHASE_ERROR`` too high, the high
    end under that of the share read as much too low (``_shares``)."""
    high = min(ceilings[1], factor * HIGH_ALLOWANCE)
    low = min(ceilings[0], 1.0 + (factor - 1.0) * LOW_EFFICIENCY)
    return low, max(low, high)


def _shares(p: float, error: float = PHASE_ERROR) -> tuple[float, float]:
    """The lowest and highest a share read as ``p`` may be."""
    return max(p - error, 0.0), min(p + error, 0.99)


def _within_max_width(low: float, high: float) -> float:
    """``low``, raised where the range would be wider than ``MAX_WIDTH``, with room
    for the reports' rounding to three decimals."""
    return max(low, high / MAX_WIDTH * 1.001)


def _predicted(low: float, high: float, ceiling: float | None, text: str) -> Gain:
    mid = math.sqrt(low * high)
    return Gain(speedup=mid, low=low, high=high, method="predicted", explanation=text,
                ceiling=ceiling)


def _workers(spec: GainSpec, metrics: Metrics) -> Gain:
    p = _phase(metrics, spec.metric or "phase_data_wait")
    capacity = loading_capacity_factor(metrics)
    if p is None or capacity is None:
        return Gain(None, method="predicted",
                    explanation="no prediction yet: workers' CPU or free cores unknown")
    ceiling = _ceiling(p)
    factor, why = capacity
    if factor <= 1.0 + 1e-6:
        return Gain(1.0, 1.0, 1.0, method="predicted", ceiling=ceiling,
                    explanation=f"{why}: no core is free, so more workers add nothing")
    p_low, p_high = _shares(p)
    ceilings = (_ceiling(p_low), _ceiling(p_high))
    low, high = _range(ceilings, factor)
    budget, used = cpu_budget_factor(metrics) or (None, "")
    if budget is not None and MIN_BUDGET <= budget < factor:
        # The step's compute runs as often as the batches come: the free cores feed
        # both, and the low end is what they allow if each step needs its CPU as now.
        low = min(low, _range(ceilings, budget)[0])
        why += (f"; {used}, so whole steps can come at most {budget:.2f}x as often where "
                "each needs the CPU it needs now")
    low = _within_max_width(low, high)
    return _predicted(low, high, ceiling, (
        f"data wait is {p:.0%} of the time, read to within {PHASE_ERROR:.0%} (ceiling "
        f"x{figure(ceiling)} if it vanished); "
        f"{why}: predicted x{figure_range(low, high)}"))


def _worker_core(spec: GainSpec, metrics: Metrics) -> Gain:
    """Loading moved to one worker, given a core by one compute thread fewer: a ceiling.

    The training thread loads a share p of the time, and its compute threads
    (T of them) hold every core while the step computes, so a worker would only
    compete with them, and one added alone gains next to nothing. With T - 1
    compute threads, the worker loads on the freed core while the step computes:
    the step takes the longer of the two, the loading (p, as now) and the
    compute (1 - p, slower by up to T / (T - 1) where it scaled perfectly over
    its threads, not slower where it did not scale at all). How well a step's
    compute spreads over threads cannot be seen from outside (torch's idle
    threads spin on their cores), so the upper end is the bound and the lower
    end, the range's ``low``, is what perfect scaling makes of it: below x1
    where compute outweighs loading, the change slows such a job. Jobs of this
    shape measured x0.75 to x1.49 (docs/predictions-check.md). Nothing is fitted.
    """
    p = _phase(metrics, spec.metric or "phase_data_wait")
    threads = metrics.get("compute_threads")
    if p is None or threads is None or threads < 1.5:
        return Gain(None, method="predicted",
                    explanation="no prediction yet: the compute threads are not known")
    t = round(threads)
    slower = t / (t - 1)
    low = 1.0 / max(p, (1.0 - p) * slower)
    high = 1.0 / max(p, 1.0 - p)
    how = (f"loading is {p:.0%} of the time and moves to a worker on the core one of the "
           f"{t} compute threads leaves; the step then takes the longer of loading ({p:.0%}) "
           f"and compute ({1 - p:.0%}, up to {slower:.2g}x slower on {t - 1} thread(s))")
    if p >= (1.0 - p) * slower:
        bound = (f"loading is the longer either way: at most x{figure(high)}, less what "
                 "handing each batch over from the worker costs")
    else:
        bound = (f"from x{figure(low)} where the compute scaled perfectly over its threads "
                 f"to at most x{figure(high)} where it did not scale at all, which aitop "
                 "cannot see")
    return Gain(speedup=high, low=low, high=high, method="amdahl", ceiling=high,
                explanation=f"{how}: {bound}; a ceiling, not a prediction")


def _offload(spec: GainSpec, metrics: Metrics) -> Gain:
    """Work moved off the thread that sets the pace, onto other processes: a ceiling.

    The thread keeps the rest of its time, 1 - p (the moved work runs beside
    it): at most 1 / (1 - p). And the work still needs a CPU: the job's
    processes use U cores now and F more are free, so all of its CPU work runs
    at most (U + F) / U times as fast, whatever runs where. The lower of the
    two; with no core free, nothing. What each hand-over costs is paid only
    after the change, so the bound says it is not counted: a demo server's
    batches of 32 requests handed to two processes ran at x0.96, of 256 at
    x1.32 (docs/predictions-overheads.md).
    """
    p = _phase(metrics, spec.metric)
    cpu = metrics.get("proc_cpu_mean")
    free = metrics.get("free_cores")
    if p is None or cpu is None or free is None or cpu <= 0:
        return Gain(None, method="amdahl", explanation=(
            "no ceiling yet: the share, the job's CPU or the free cores unknown"))
    used = cpu / 100.0
    name = ("the thread's own code" if spec.metric == "phase_other"
            else (spec.metric or "").removeprefix("phase_").replace("_", " "))
    if free <= 0.05:
        return Gain(1.0, 1.0, 1.0, method="predicted", explanation=(
            f"{name} is {p:.0%} of the time, but no core is free to run it beside the "
            "thread: moving it elsewhere adds nothing here"))
    cores = (used + free) / used
    high = min(_ceiling(p), cores)
    return Gain(speedup=high, low=high, high=high, method="amdahl", ceiling=high, explanation=(
        f"{name} is {p:.0%} of the time (x{figure(_ceiling(p))} if it left the thread "
        f"entirely), and the job's work can spread over {used:.1f} + {free:.1f} free "
        f"core(s) (x{figure(cores)}): at most x{figure(high)}; a ceiling, not a prediction. "
        "Handing the work over costs the thread pickling both ways, which it does not "
        "pay yet and aitop cannot see: where each hand-over carries little work, that "
        "cost can take the whole gain"))


def _quota(metrics: Metrics) -> Gain:
    """The job's CPU quota raised to ``quota_target``: a range for that quota, where
    the pace is its loaders'; no figure where its compute threads set it.

    Given Q CPUs a throttled job runs min(Q less what others of its group take,
    its demand) instead of what it runs now: x R the CPU. Its DataLoader workers
    are processes of one thread each, so where they set the pace (the loop waits
    for data more than it computes, and they take more CPU than the training
    process) batches come about R times faster. The range allows for the new CPU
    lost to contention (``LOW_EFFICIENCY``) and for more than R (``QUOTA_HIGH``):
    a throttled job does less per CPU second than a free one, since threads the
    quota stops mid-step hold a lock, the GIL or an OpenMP barrier the others
    wait on. Where the training process's compute threads set the pace, the
    speed-up is how its operations spread over threads and what those waits
    cost, which no counter shows: no figure, only the quota it would need.
    """
    quota, target = metrics.get("cpu_quota"), metrics.get("quota_target")
    demand, used_pct = metrics.get("cpu_demand"), metrics.get("proc_cpu_mean")
    if quota is None or demand is None or used_pct is None or not used_pct:
        return Gain(None, method="predicted",
                    explanation="no prediction yet: the quota or the job's CPU is not known")
    if target is None:
        return Gain(None, method="none", explanation=(
            f"the quota ({quota:.1f} CPUs) already reaches every CPU the job may run on, "
            "or what it would use: more quota buys nothing; size its threads and workers "
            "to the quota"))
    used = used_pct / 100.0
    others = metrics.get("cpu_group_others") or 0.0
    runs = max(used, min(target - others, demand))
    ratio = runs / used
    how = (f"with a quota of {target:.0f} CPUs the job would run {runs:.1f} core(s) instead "
           f"of {used:.1f} (what it wants: its CPU plus the time the quota held it back"
           + (f", less {others:.1f} core(s) other processes of its group take" if others
              else "") + f"), x{figure(ratio)} the CPU")
    if not _loaders_set_the_pace(metrics):
        return Gain(None, method="none", explanation=(
            f"{how}; its compute threads set its pace, and how its operations spread over "
            "threads, and what threads the quota stops mid-step cost the others (OpenMP "
            "barriers, the GIL), no counter shows: no figure"))
    low = 1.0 + (ratio - 1.0) * LOW_EFFICIENCY
    high = max(low, ratio * QUOTA_HIGH)
    return Gain(speedup=math.sqrt(low * high), low=low, high=high, method="predicted",
                explanation=(f"{how}; its DataLoader workers set its pace (one thread a "
                             f"process): predicted x{figure_range(low, high)}"))


def _loaders_set_the_pace(metrics: Metrics) -> bool:
    """The loop waits for data more than it computes, and the workers run more CPU
    than the training process."""
    wait, compute = metrics.get("phase_data_wait"), metrics.get("phase_compute")
    workers, main = metrics.get("workers_cpu_mean"), metrics.get("main_cpu_mean")
    if wait is None or compute is None or workers is None or main is None:
        return False
    return wait >= compute and workers >= main


def _fewer(spec: GainSpec, metrics: Metrics) -> Gain:
    """Doing a phase ``times`` times less often (checkpoints, validation).

    The share p may have been read off by ``PHASE_ERROR``, or by more where the
    phase comes in blocks that the stack windows cut (``<metric>_error``: the
    windows' spread, or one block's share of the look if more): the low end
    takes p that much lower, each pass a little longer when done less often
    (more to write or check); the high end takes p that much higher, with the
    rest of the step up to the rule's ``rest_speedup`` faster without it.
    """
    p = _phase(metrics, spec.metric)
    if p is None or spec.times <= 1:
        return Gain(None, method="predicted", explanation=f"{spec.metric} is not known yet")
    name = (spec.metric or "").removeprefix("phase_").removesuffix("_long").replace("_", " ")
    error = max(PHASE_ERROR, metrics.get(f"{spec.metric}_error") or 0.0)
    p_low, p_high = _shares(p, error)
    low = 1.0 / ((1.0 - p_low) + 1.2 * p_low / spec.times)
    rest = spec.rest_speedup
    # The ceiling (the phase gone) is a bound: of the share it may have.
    ceiling = _ceiling(p_high)
    high = min(ceiling, 1.0 / ((1.0 - p_high) / rest + p_high / spec.times))
    low = _within_max_width(low, high)
    return _predicted(low, high, ceiling, (
        f"{name} takes {p:.0%} of the time (read to within {error:.0%}); doing it "
        f"{spec.times:g}x less often leaves {p / spec.times:.0%}: predicted "
        f"x{figure_range(low, high)} (1 / ((1 - p) + p / {spec.times:g}) for p "
        f"{p_low:.2f}-{p_high:.2f}"
        + (f", the high end with the rest of the step up to {rest:g}x faster)"
           if rest > 1.0 else ")")))


def _shrink(spec: GainSpec, metrics: Metrics) -> Gain:
    """A phase cut by a faster implementation of the same work (a fused optimizer update).

    The phase's share p falls by a fraction r of itself, ``removable`` (low..high)
    as measured on a fitting job (docs/predictions.md). p may have been read
    ``PHASE_ERROR`` off either way: the low end takes it that much lower, the
    high end that much higher, so that at r = 1 the high end is the ceiling of
    the phase gone entirely, of the share it may have (a fused update removes
    about all of a for-loop's time, and its job measured at the top of a range
    that took p as read: docs/predictions-check.md).
    """
    p = _phase(metrics, spec.metric)
    if p is None:
        return Gain(None, method="predicted", explanation=f"{spec.metric} is not known yet")
    lo_r, hi_r = spec.removable
    p_low, p_high = _shares(p)
    high = 1.0 / (1.0 - p_high * hi_r)
    # A large phase widens the range: it is held to MAX_WIDTH as every predicted one.
    low = _within_max_width(1.0 / (1.0 - p_low * lo_r), high)
    name = (spec.metric or "").removeprefix("phase_").replace("_", " ")
    return _predicted(low, high, _ceiling(p_high), (
        f"the {name} is {p:.0%} of the time (read to within {PHASE_ERROR:.0%}); doing the "
        f"same work in one kernel removes {lo_r:.0%}-{hi_r:.0%} of it: predicted "
        f"x{figure_range(low, high)} (1 / (1 - p x r) for p {p_low:.2f}-{p_high:.2f})"))


def _no_sync(metrics: Metrics) -> Gain:
    """All but the last backward pass of each optimizer step inside ``no_sync()``: a ceiling.

    With N backward passes per step, each all-reducing, the rank waits a share
    c of its time in N all-reduces; inside ``no_sync()`` N - 1 of them go, the
    low end. What goes is more than that wait: on CPU ranks the exchange's own
    work takes cores the step computes on (it shows only as backward running
    longer than forward, ``comm_bound``), and the one all-reduce left costs
    less than before, with the ranks no longer contending for cores every
    pass (two micro-batches a step measured x1.83 where half the wait would
    give x1.14). The bound is all the exchange may cost. On GPU ranks NCCL
    all-reduces on its own stream, overlapped with backward, and the host does
    not see what each costs: no figure.
    """
    if metrics.get("has_gpu") == 1.0:
        return Gain(None, method="amdahl", explanation=(
            "on GPU ranks NCCL all-reduces on its own stream while backward runs, so what each "
            "backward pass's all-reduce costs is not visible from the host; no_sync removes "
            "(N - 1)/N of the gradient traffic"))
    n, c = metrics.get("backward_per_step"), metrics.get("comm_share")
    bound = metrics.get("comm_bound")
    if n is None or c is None or bound is None or n < 2:
        return Gain(None, method="amdahl",
                    explanation="backward passes per step or the communication share not known yet")
    bound = min(max(bound, c), 0.99)
    low = 1.0 / (1.0 - min(c, 0.99) * (n - 1.0) / n)
    high = 1.0 / (1.0 - bound)
    return Gain(speedup=high, low=low, high=high, method="amdahl", ceiling=high, explanation=(
        f"the rank waits {c:.0%} of its time in the all-reduces of {n:.0f} backward passes per "
        f"optimizer step; inside no_sync() only the last one all-reduces: {n - 1:.0f}/{n:.0f} "
        f"of that wait gives x{figure(low)}, and all the exchange may cost ({bound:.0%}: the "
        f"wait and the CPU it takes from the step, backward's time beyond forward's) bounds "
        f"it at x{figure(high)}; the one all-reduce left also costs less, with the ranks no "
        "longer contending for cores every pass: a ceiling, not a prediction"))


def _parallel(spec: GainSpec, metrics: Metrics) -> Gain:
    p = _phase(metrics, spec.metric)
    factor = metrics.get(spec.factor or "")
    if p is None or factor is None:
        return Gain(None, method="predicted", explanation="compute share or CPU headroom unknown")
    threads = metrics.get("main_busy_threads_mean")
    free = metrics.get("free_cores")
    if threads and free is not None:
        # Wider only onto cores that are free now (workers and neighbours keep theirs).
        factor = min(factor, (max(threads, 1.0) + free) / max(threads, 1.0))
    if factor <= 1.0 + 1e-6:
        return Gain(1.0, 1.0, 1.0, method="predicted",
                    explanation="no idle core to widen the computation onto")
    # A ceiling only: how close a computation comes to it depends on the size of
    # its operations (one -> two threads gave x1.6-1.9 on a 1024-wide MLP, x1.2-1.3
    # on a 384-wide one: docs/predictions.md, docs/predictions-check.md).
    high = 1.0 / ((1.0 - p) + p / factor)
    return Gain(speedup=high, low=high, high=high, method="amdahl", ceiling=high, explanation=(
        f"compute is {p:.0%} of the step; run {factor:.1f}x wider it speeds up at most "
        f"x{figure(high)} (Amdahl: 1 / ((1 - {p:.2f}) + {p:.2f} / {factor:.1f})); how close it "
        "comes depends on the size of its operations, which aitop cannot see (small matrix "
        "products spread worse over threads): a ceiling, not a prediction"))


#: The one-sided confidence of a counted share's bound (z of 95 %).
BOUND_Z = 1.645


def fewest_expected(seen: float) -> float:
    """The fewest samples per window that could have given ``seen`` samples outside a
    phase, at 95 % one-sided (Poisson, Wilson-Hilferty's form; 0 for none seen)."""
    if seen <= 0:
        return 0.0
    return seen * max(1.0 - 1.0 / (9.0 * seen) - BOUND_Z / (3.0 * math.sqrt(seen)), 0.0) ** 3


def _also_removed(spec: GainSpec, metrics: Metrics) -> dict[str, float]:
    """Each share of wall time the action removes beside the phase (``also_removes``,
    read in % of a core of the training process), by metric; a metric not known
    yet is left out."""
    shares = {}
    for name in spec.also_removes:
        value = metrics.get(name)
        if value is not None:
            shares[name] = min(max(value / 100.0, 0.0), 1.0)
    return shares


def _amdahl_counted(spec: GainSpec, p: float, samples: float,
                    also: dict[str, float] | None = None) -> Gain:
    """Amdahl's ceiling with the share's own sampling error: a bound that holds.

    When a phase fills nearly all the time, 1 / (1 - p) rests on the few samples
    outside it: 3 of 300 read as p = 0.99 and x100, while the time outside it
    may well be a third of that (x300). The ceiling therefore takes p as high as
    the count allows: the fewest samples outside the phase that could have given
    the count seen (95 %, one-sided). With none seen, removing all of it has no
    finite ceiling, and none is shown. ``also``: the shares of wall time the
    action removes outside the phase (``GainSpec.also_removes``), added whole.
    """
    name = (spec.metric or "").removeprefix("phase_").removesuffix("_steady").replace("_", " ")
    removable = spec.removable[1]
    outside = round((1.0 - p) * samples)
    p_high = 1.0 - fewest_expected(outside) / samples
    also = also or {}
    besides_share = sum(also.values())
    removed_share = p_high * removable + besides_share
    if removed_share >= 1.0:
        besides_too = (
            f", and the action also removes {besides_share:.1%} of the time besides it"
            if also else "")
        return Gain(None, method="amdahl", explanation=(
            f"{name} is {p:.0%} of the time: {outside:.0f} of {samples:.0f} stack samples "
            f"fell outside it{besides_too}, too few to bound what removing it gives (the "
            "work between its runs is too short to measure): no ceiling"))
    high = 1.0 / (1.0 - removed_share)
    removed = "removing it" if removable == 1.0 else f"removing {removable:.0%} of it"
    besides = [f"{share:.1%} of the time ({CATALOGUE[metric].description})"
               for metric, share in also.items() if share > 0 and metric in CATALOGUE]
    if besides:
        removed += f" and, besides it, {' and '.join(besides)}"
    return Gain(
        speedup=high, low=high, high=high, method="amdahl", ceiling=high, explanation=(
            f"{name} is {p:.0%} of the time ({outside:.0f} of {samples:.0f} stack samples "
            f"outside it): {removed} bounds the speed-up at x{figure(high)} (Amdahl, with "
            f"the share as high as the samples allow at 95 %: {p_high:.3f}); a ceiling, not "
            "a prediction"))


def _amdahl(spec: GainSpec, metrics: Metrics) -> Gain:
    p = _phase(metrics, spec.metric)
    if p is None:
        return Gain(None, method="amdahl", explanation=f"{spec.metric} is not known yet")
    samples = metrics.get(spec.samples or "")
    if samples:
        exact = metrics.get(spec.metric or "")
        assert exact is not None
        return _amdahl_counted(spec, min(max(exact, 0.0), 1.0), samples,
                               _also_removed(spec, metrics))
    lo_r, hi_r = spec.removable
    low, high = 1 / (1 - p * lo_r), 1 / (1 - p * hi_r)
    removed = "removing it" if hi_r == 1.0 else f"removing {lo_r:.0%}-{hi_r:.0%} of it"
    name = (spec.metric or "").removeprefix("phase_").replace("_", " ")
    return Gain(
        speedup=high, low=low, high=high, method="amdahl", ceiling=high,
        explanation=(
            f"{name} is {p:.0%} of the step: {removed} bounds the speed-up at x{figure(high)} "
            f"(Amdahl: 1 / (1 - {p:.2f}{'' if hi_r == 1.0 else f' x {hi_r:.2f}'})); "
            "a ceiling, not a prediction"),
    )


def _document(spec: GainSpec, metrics: Metrics, facts: Facts) -> Gain:
    """The documents' figure, only where the context it was measured in holds.

    A latency reduction measured on transformer inference says nothing of a
    training step's time: for a job that trains, no figure is shown.
    """
    claim = facts.techniques.get(spec.technique or "")
    if claim is None or claim.speedup_low is None:
        text = claim.text if claim else f"technique '{spec.technique}'"
        return Gain(None, method="document", explanation=text)
    context = f" (for {claim.context})" if claim.context else ""
    if claim.inference_only and metrics.get("forward_only") != 1.0:
        return Gain(None, method="document", explanation=(
            f"the documents' figure for {claim.name}, {claim.text}, is for {claim.context}: "
            "not a training step's time, so none is shown"))
    mid = (claim.speedup_low + (claim.speedup_high or claim.speedup_low)) / 2
    return Gain(
        speedup=mid, low=claim.speedup_low, high=claim.speedup_high, method="document",
        explanation=f"the documents' figure for {claim.name}{context}: {claim.text}",
    )


def estimate_gain(spec: GainSpec, metrics: Metrics, facts: Facts) -> Gain:
    """The gain of a finding's first action, by its rule's method."""
    if spec.method == "workers":
        return _workers(spec, metrics)
    if spec.method == "worker_core":
        return _worker_core(spec, metrics)
    if spec.method == "offload" and spec.metric:
        return _offload(spec, metrics)
    if spec.method == "quota":
        return _quota(metrics)
    if spec.method == "fewer" and spec.metric:
        return _fewer(spec, metrics)
    if spec.method == "shrink" and spec.metric:
        return _shrink(spec, metrics)
    if spec.method == "no_sync":
        return _no_sync(metrics)
    if spec.method == "parallel" and spec.metric:
        return _parallel(spec, metrics)
    if spec.method == "amdahl" and spec.metric:
        return _amdahl(spec, metrics)
    if spec.method == "document" and spec.technique:
        return _document(spec, metrics, facts)
    return Gain(None, method="none", explanation=spec.note or "no honest estimate")
