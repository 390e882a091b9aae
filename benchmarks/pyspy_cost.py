"""What one py-spy call costs, measured on a running demo job: the basis of aitop's cadences.

py-spy dominates aitop's own CPU, and aitop's cadences (rate, window length,
how often the step counter is dumped) are chosen from these unit costs, so they
are measured here rather than quoted. Each variant is run with exactly the
flags aitop uses (``probes/pyspy.py``), alternated round-robin on one ``data``
job, and charged with the CPU the reaped py-spy process used
(``getrusage(RUSAGE_CHILDREN)`` before and after):

* ``dump``, and ``dump --locals`` (the step-counter read);
* ``record`` for 5 s at 1 Hz (almost only the cost of launching and attaching)
  and at 50 Hz; per-sample cost = the difference / the difference in samples.

From these and aitop's default cadences (``CollectorConfig``) the expected py-spy
share of one core is computed for the TUI and the headless configuration.
"""

from __future__ import annotations

import resource
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .jobs import DemoJob
from .stats import Summary

Log = Callable[[str], None]
RECORD_S = 5


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _samples(path: Path) -> int:
    """Stack samples in a raw py-spy output (the count ends each line)."""
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        head, _, count = line.rpartition(" ")
        if head and count.isdigit():
            total += int(count)
    return total


def run_pyspy_cost(reps: int, workdir: Path, log: Log) -> dict[str, Any]:
    from aitop.probes.collector import CollectorConfig
    from aitop.probes.pyspy import dump_args, pyspy_env, record_args, require_pyspy

    binary = require_pyspy()
    out = workdir / "window.txt"
    costs: dict[str, list[float]] = {"dump": [], "dump_locals": [], "record_1hz": [],
                                     "record_50hz": []}
    samples: dict[str, list[int]] = {"record_1hz": [], "record_50hz": []}
    with DemoJob("data", workdir, duration_s=900.0) as job:
        time.sleep(3.0)
        variants: dict[str, list[str]] = {
            "dump": dump_args(binary, job.pid, locals_=False),
            "dump_locals": dump_args(binary, job.pid, locals_=True),
            "record_1hz": record_args(binary, job.pid, rate=1, duration=RECORD_S, output=str(out)),
            "record_50hz": record_args(binary, job.pid, rate=50, duration=RECORD_S,
                                       output=str(out)),
        }
        for _ in range(reps):
            for name, args in variants.items():
                out.unlink(missing_ok=True)
                before = _children_cpu()
                result = subprocess.run(args, capture_output=True, env=pyspy_env(), timeout=60)
                spent = _children_cpu() - before
                if result.returncode != 0:
                    continue  # a transient failure (the target mid-update) is not a cost sample
                costs[name].append(spent)
                if name in samples:
                    samples[name].append(_samples(out))
    med = {k: Summary.of(v) for k, v in costs.items()}
    n1 = Summary.of(samples["record_1hz"])
    n50 = Summary.of(samples["record_50hz"])
    per_sample = launch = None
    if med["record_1hz"] and med["record_50hz"] and n1 and n50 and n50.median > n1.median:
        per_sample = (med["record_50hz"].median - med["record_1hz"].median) / (
            n50.median - n1.median)
        launch = med["record_1hz"].median - per_sample * n1.median
    model: dict[str, Any] = {}
    if per_sample is not None and launch is not None and med["dump_locals"]:
        locals_s = med["dump_locals"].median
        tui = CollectorConfig()
        headless = getattr(CollectorConfig, "headless", None)
        configs = {"tui": tui, "headless": headless() if callable(headless) else None}
        for name, cfg in configs.items():
            if cfg is None:
                continue
            # Samples are per thread seen; the demo job shows samples/tick ≈ threads.
            threads = n50.median / (50 * RECORD_S) if n50 else 1.0
            record = launch / cfg.stack_window_s + cfg.stack_rate_hz * threads * per_sample
            steps = locals_s / cfg.steps_interval_s
            model[name] = {
                "rate_hz": cfg.stack_rate_hz, "window_s": cfg.stack_window_s,
                "steps_interval_s": cfg.steps_interval_s,
                "record_percent": 100.0 * record, "steps_percent": 100.0 * steps,
                "total_percent": 100.0 * (record + steps),
            }
    log(f"  pyspy: dump {1000 * med['dump'].median if med['dump'] else float('nan'):.1f} ms, "
        f"launch {1000 * (launch or float('nan')):.1f} ms, per sample "
        f"{1000 * (per_sample or float('nan')):.2f} ms")
    return {
        "costs": {k: (v.to_json() if v else None) for k, v in med.items()},
        "samples_1hz": n1.to_json() if n1 else None,
        "samples_50hz": n50.to_json() if n50 else None,
        "record_s": RECORD_S,
        "per_sample_s": per_sample,
        "launch_s": launch,
        "model": model,
    }
