"""``python -m benchmarks.epoch_counts``: steps/s of counts that start again each epoch.

A batch index (``for i, batch in enumerate(loader)``) wraps at every epoch's
end, and aitop reads it every few seconds. Simulated here: counts at 1-3,000
steps/s over epochs of 20-20,000 steps, read every 0.5-6 s (each interval
0.7-1.3x the usual, the pace varying by ``--pace-jitter`` per interval, each
reading stamped up to ``--stamp-jitter`` s late, as a py-spy dump on a busy box
returns late). Each is read as ``probes.step_sources`` reads a loop counter:
``steps_per_second``, set aside where ``epochs_pass_unseen`` says so.

Three studies, each with the product's checks and with the one this module
studies turned off (``before``):

* ``unseen``: counts whose reading intervals may hold a whole epoch (the widest
  interval's steps at least an epoch) against those whose intervals never do.
  Turned off: the rises' spread (``RISE_MAX_SPREAD``).
* ``beyond``: every count with one reading replaced by a value 1.2-2x its
  epoch (a misread), where its intervals never hold an epoch. Turned off: the
  readings above the epoch the drops size (``_beyond_the_epoch``).
* ``low``: counts that never start again (a server's requests served) with one
  or two readings, not the first, replaced by a value below them (an int read
  after it was freed and reused), and the same counts with epochs as in
  ``unseen``. Turned off: the misread lows (``_dips``).
* ``shift``: counts whose pace changes once inside the watch, 3-8x up or down
  (a neighbour's load that comes or goes), with epochs as in ``unseen`` or
  none; right is the steps over the readings' span. Turned off: the outlier
  rule's neighbourhood (``OUTLIER_NEIGHBOURS``: the whole watch's median).

For each: rates shown more than 10 % off, no rate, and rates within 10 %. The
figures in docs/step-rates.md ("Epochs shorter than the readings") come from
this.
"""

from __future__ import annotations

import argparse
import math
import random
from collections import Counter
from contextlib import AbstractContextManager
from dataclasses import dataclass
from unittest import mock

from aitop.probes import step_rate
from aitop.probes.samples import StepCounterSample

#: How each regime's rows are headed.
REGIMES = {"unseen": "may hold an epoch", "seen": "never do",
           "never": "no epoch (never restarts)"}
#: A rate within this share of the count's pace is right.
RIGHT_WITHIN = 0.10


@dataclass(frozen=True)
class Count:
    """One simulated count: its pace, its readings, whether an interval may hold an epoch."""

    pace: float
    readings: list[StepCounterSample]
    unseen: bool
    #: A count that never starts again (``low``, ``shift``).
    never: bool = False


#: An epoch no watch reaches: the count never starts again.
NEVER = 10**12


def simulate(rng: random.Random, pace_jitter: float, stamp_jitter: float,
             beyond: bool, low: bool = False, shift: bool = False) -> Count:
    """A count read as aitop reads it; with ``beyond``, one reading misread past its
    epoch; with ``low``, one or two misread below, half of them in counts that
    never start again; with ``shift``, its pace changed once, half of them in
    counts that never start again."""
    never = (low or shift) and rng.random() < 0.5
    while True:
        pace = 10 ** rng.uniform(0, 3.5)
        epoch = NEVER if never else rng.randint(20, 20_000)
        every = rng.uniform(0.5, 6.0)
        unseen = pace * every * 1.3 * (8 if shift else 1) >= epoch
        if not (beyond and unseen):
            break
    t, count, readings = 100.0, rng.uniform(0, epoch), []
    n = rng.randint(4, 25)
    shift_at = rng.randrange(1, n - 1) if shift else n
    # 3-8x, up or down (a negative factor divides the pace).
    factor = (10 ** rng.uniform(math.log10(3), math.log10(8)) * rng.choice((1, -1))
              if shift else 1.0)
    first = (t, count)
    for i in range(n):
        readings.append(StepCounterSample(t + rng.uniform(0, stamp_jitter), "batch_idx",
                                          int(count) % epoch))
        last = (t, count)
        gap = every * rng.uniform(0.7, 1.3)
        t += gap
        now = pace if i < shift_at else pace * factor if factor > 0 else pace / -factor
        count += now * gap * rng.uniform(1 - pace_jitter, 1 + pace_jitter)
    if shift:
        pace = (last[1] - first[1]) / (last[0] - first[0])
    if beyond:
        at = rng.randrange(len(readings))
        readings[at] = StepCounterSample(readings[at].t, "batch_idx",
                                         int(epoch * rng.uniform(1.2, 2.0)))
    if low:
        for at in rng.sample(range(1, len(readings)), rng.randint(1, 2)):
            value = readings[at].value or 0
            readings[at] = StepCounterSample(readings[at].t, "batch_idx",
                                             int(value * rng.uniform(0.0, 0.9)))
    return Count(pace, readings, unseen and not never, never)


def judged(count: Count) -> str:
    """``wrong``, ``none`` or ``right``: the rate aitop would show for the count."""
    rate = step_rate.steps_per_second(count.readings)
    if rate is None or step_rate.epochs_pass_unseen(count.readings) is not None:
        return "none"
    return "right" if abs(rate - count.pace) / count.pace <= RIGHT_WITHIN else "wrong"


#: What each study turns off: the product's name for the check, and what stands
#: in for it.
CHECKS: dict[str, tuple[str, object]] = {
    "unseen": ("RISE_MAX_SPREAD", float("inf")),
    "beyond": ("_beyond_the_epoch", lambda same: set()),
    "low": ("_dips", lambda same: set()),
    "shift": ("OUTLIER_NEIGHBOURS", 10**9),
}


def check_off(study: str) -> AbstractContextManager[object]:
    """The product's code with the check ``study`` is about turned off."""
    name, stand_in = CHECKS[study]
    return mock.patch.object(step_rate, name, stand_in)


def study(name: str, counts: int, seed: int, pace_jitter: float,
          stamp_jitter: float) -> dict[str, dict[str, Counter[str]]]:
    """Tallies by version (``before``, ``now``) and regime (``unseen``, ``seen``)."""
    out: dict[str, dict[str, Counter[str]]] = {}
    for version in ("before", "now"):
        rng = random.Random(seed)
        tally: dict[str, Counter[str]] = {"unseen": Counter(), "seen": Counter(),
                                          "never": Counter()}
        for _ in range(counts):
            count = simulate(rng, pace_jitter, stamp_jitter, beyond=name == "beyond",
                             low=name == "low", shift=name == "shift")
            if version == "before":
                with check_off(name):
                    verdict = judged(count)
            else:
                verdict = judged(count)
            regime = "never" if count.never else "unseen" if count.unseen else "seen"
            tally[regime][verdict] += 1
        out[version] = tally
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, default=30_000)
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args()
    print("| study | pace jitter | stamps late by | intervals | version | >10 % off | "
          "no rate | within 10 % |")
    print("|---|---|---|---|---|---|---|---|")
    for name in ("unseen", "beyond", "low", "shift"):
        for pace_jitter, stamp_jitter in ((0.05, 0.0), (0.15, 0.3)):
            result = study(name, args.counts, args.seed, pace_jitter, stamp_jitter)
            for regime in ("unseen", "seen", "never"):
                for version, tally in result.items():
                    t = tally[regime]
                    if not t:
                        continue
                    print(f"| {name} | ±{pace_jitter:.0%} | ≤{stamp_jitter:g} s | "
                          f"{REGIMES[regime]} | "
                          f"{version} | {t['wrong']:,} | {t['none']:,} | {t['right']:,} |")


if __name__ == "__main__":
    main()
