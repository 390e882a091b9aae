"""``python -m benchmarks.variants BASE VARIANT...``: a job's rate against its variants'.

Each demo job runs under the CPU quota its Config names (in a cgroup made for
it, as a container would run it; none for 0), one job at a time, rounds
interleaved (base, variants, base, variants...) so that a drift of the
machine's load falls on all of them; each rate is the job's own steps/s over
``--measure`` seconds after ``--warmup``, aitop not attached. The ratios to the
base's rate of the same round are printed, then their medians, as JSON lines.

    python -m benchmarks.variants quota quota_raised quota_sized --runs 2
    python -m benchmarks.variants fit_loop fit_loop_fixed --runs 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from .jobs import start_job, stop_job, truth_between
from .predictions import job_quota, quota_group


def job_rate(scenario: str, workdir: Path, warmup_s: float, measure_s: float,
             extra_args: Sequence[str] = ()) -> float:
    """Steps/s of a fresh run of ``scenario`` by its own count, under its quota."""
    truth = workdir / f"{scenario}.jsonl"
    truth.unlink(missing_ok=True)
    with quota_group(job_quota(scenario)) as group:
        job = start_job(scenario, truth, duration_s=warmup_s + measure_s + 30.0,
                        extra_args=extra_args,
                        cgroup=None if group is None else group.directory)
        try:
            start = time.time() + warmup_s
            time.sleep(warmup_s + measure_s + 0.6)
            return float(truth_between(truth, start, start + measure_s)["steps_per_s"])
        finally:
            stop_job(job)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("scenarios", nargs="+", help="the base job, then its variants")
    parser.add_argument("--runs", type=int, default=2, help="rounds (default 2)")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds before counting")
    parser.add_argument("--measure", type=float, default=15.0, help="seconds counted")
    args = parser.parse_args(argv)
    base, *variants = args.scenarios
    ratios: dict[str, list[float]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory(prefix="aitop-variants-") as tmp:
        for run in range(args.runs):
            rates = {name: job_rate(name, Path(tmp), args.warmup, args.measure)
                     for name in (base, *variants)}
            for v in variants:
                ratios[v].append(rates[v] / rates[base])
            print(json.dumps({"round": run + 1, "load1": os.getloadavg()[0], "steps_per_s": rates,
                              "ratio_to_base": {v: ratios[v][-1] for v in variants}}),
                  flush=True)
    print(json.dumps({"median_ratio_to_base": {v: statistics.median(r)
                                               for v, r in ratios.items()}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
