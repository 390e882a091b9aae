"""``python -m benchmarks.predictions``: do aitop's predicted gains come true?

For each demo job whose culprit has a mechanical fix, aitop is attached
headless to the job as it is; its lead finding's first action is then applied
exactly as it reads (the suggested ``num_workers``, checkpoints 4x less often,
torch's threads on every usable core) to a fresh run of the same job, and the
job's own step counter measures the speed-up. The predicted range and the
measured speed-up go side by side into the set's page of docs/ (predictions.md,
predictions-check.md with ``--check``, predictions-overheads.md with
``--overheads``; medians and every run); ``--only`` (part of a set) prints its
table unless given ``--out``, so that it never replaces a set's page. The CI
test (tests/attach/test_e2e_scenarios.py) runs one round of the same on
the runs the other end-to-end tests watch (the fixed job's rate over aitop's
span instead of after a warm-up).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .cgroups import LimitedCgroup, cpu_cgroup
from .jobs import REPO, start_job, stop_job, truth_between

#: Seconds aitop watches the job as it is.
ATTACH_S = 20.0
#: Seconds of the fixed job's own count, after its warm-up.
FIXED_MEASURE_S = 15.0
FIXED_WARMUP_S = 3.0


@dataclass(frozen=True)
class Applied:
    """How a lead finding's first action is applied to a fresh run of the job."""

    scenario: str
    args: tuple[str, ...]
    change: str
    #: The CPU quota (CPUs) the fixed run is started under; None: the job's own.
    cpu_quota: float | None = None


#: The jobs the calibration constants were fitted on (knowledge/judging/gains.py): the
#: base jobs of the fixed variants. Their rounds check the fit, not the model.
FITTING_SET = ("data", "checkpoint", "compute", "optimizer_loop", "recompute")
#: Jobs of other shapes, whose fixes are the same mechanical changes, never used
#: to fit a constant: an out-of-sample check (a generator-wrapped loader; saves
#: flushed, fsync'ed and renamed; slower decode; smaller matrix products; another
#: model and save interval; loading in the training thread beside torch's threads;
#: a for-loop optimizer of another kind over wider layers, smaller batches).
CHECK_SET = ("generator", "checkpoint_durable", "data_heavy", "compute_small",
             "checkpoint_deep", "inline_loading", "optimizer_loop_sgd", "quota",
             "fit_loop")
#: Costs a step pays again and again (``--overheads``), each fixed by its demo
#: variant (demo/__init__.py FIXED_VARIANTS): recompiling for every new sequence
#: length (compiled with dynamic=True), workers started every epoch (kept alive), a server
#: encoding its requests on its serving thread (in two worker processes). Their
#: figures are ceilings, fitted on nothing.
OVERHEADS_SET = ("recompile", "epoch_workers", "serving_preprocess")
#: The lead findings whose fix is the base job's fixed variant, and what it changes.
VARIANT_FIXES = {
    "compile_recurs": "torch.compile(model, dynamic=True)",
    "workers_restart_each_epoch": "persistent_workers=True",
    "serving_bound_by_preprocessing": "encode in 2 worker processes, a batch ahead",
    "activation_recompute": "no activation checkpointing",
}


def apply_lead(base: str, report: dict[str, Any]) -> Applied | None:
    """The fixed run for the report's lead finding, or None if it is not mechanical."""
    from aitop.demo import FIXED_VARIANTS
    from aitop.demo.config import CONFIGS, USABLE_CORES

    lead = report["findings"][0]["id"] if report["findings"] else None
    metrics = report["metrics"]
    if lead in ("workers_cpu_bound", "loading_in_training_process"):
        n = int(metrics["suggested_workers"])
        return Applied(base, ("--num-workers", str(n)), f"num_workers={n}")
    if lead == "checkpoint_stalls":
        every = 4 * CONFIGS[base].checkpoint_every
        return Applied(base, ("--checkpoint-every", str(every)), "checkpoint 4x less often")
    if lead == "loading_beside_compute_threads":
        threads = int(metrics["threads_beside_worker"])
        return Applied(base, ("--num-workers", "1", "--threads", str(threads)),
                       f"num_workers=1, torch threads={threads}")
    if lead == "cpu_compute_underthreaded":
        return Applied(base, ("--threads", str(USABLE_CORES)), "torch threads = usable cores")
    if lead in VARIANT_FIXES and base in FIXED_VARIANTS:
        return Applied(FIXED_VARIANTS[base], (), VARIANT_FIXES[lead])
    if lead == "optimizer_for_loop":
        impl = "fused" if metrics["optimizer_fusable"] == 1.0 else "foreach"
        return Applied(base, ("--optimizer-impl", impl), f"optimizer {impl}=True")
    if lead == "cpu_quota_throttles" and metrics.get("quota_target"):
        quota = float(metrics["quota_target"])
        return Applied(base, (), f"CPU quota {quota:g} CPUs", cpu_quota=quota)
    return None


def quota_group(cpus: float | None) -> contextlib.AbstractContextManager[LimitedCgroup | None]:
    """A cgroup whose CPU quota allows ``cpus`` CPUs to run a job in; none for 0 or None."""
    return cpu_cgroup(cpus) if cpus else contextlib.nullcontext()


def job_quota(scenario: str) -> float | None:
    """The CPU quota a demo job is meant to run under (its Config), None for none."""
    from aitop.demo.config import CONFIGS

    return CONFIGS[scenario].cpu_quota or None


@dataclass(frozen=True)
class Outcome:
    """One round: what aitop predicted for its lead action and what applying it did."""

    scenario: str
    lead: str | None
    change: str | None
    low: float | None
    high: float | None
    ceiling: float | None
    base_rate: float
    fixed_rate: float | None
    #: The figure's kind: "predicted" (a range) or "amdahl" (a ceiling only).
    method: str | None = None

    @property
    def measured(self) -> float | None:
        return self.fixed_rate / self.base_rate if self.fixed_rate and self.base_rate else None

    @property
    def inside(self) -> bool | None:
        """Within the predicted range; for a ceiling, above x1 and not beyond it."""
        if self.measured is None or self.low is None or self.high is None:
            return None
        if self.method == "amdahl":
            return 1.0 < self.measured <= self.high
        return self.low <= self.measured <= self.high


def headless_report(pid: int, duration_s: float) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-m", "aitop.tui", "--pid", str(pid), "--headless", "--json",
         "--duration", str(duration_s)],
        capture_output=True, text=True, timeout=duration_s + 90, stdin=subprocess.DEVNULL,
    )
    if result.returncode != 0:
        raise RuntimeError(f"aitop failed ({result.returncode}): {result.stderr[-500:]}")
    return json.loads(result.stdout)


def fixed_rate(applied: Applied, workdir: Path) -> float:
    """Steps/s of the fixed job by its own count, after a warm-up, aitop attached.

    aitop watches the fixed run too, as it watched the job as it was: a user
    checks a change with aitop still open, and its own CPU is then in both rates.
    """
    truth = workdir / f"{applied.scenario}-fixed.jsonl"
    truth.unlink(missing_ok=True)
    with quota_group(applied.cpu_quota or job_quota(applied.scenario)) as group:
        job = start_job(applied.scenario, truth, duration_s=120.0, extra_args=applied.args,
                        cgroup=None if group is None else group.directory)
        return _watched_rate(job, truth)


def _watched_rate(job: subprocess.Popen[bytes], truth: Path) -> float:
    """The job's own steps/s after the warm-up, aitop watching it; the job stopped after."""
    watcher = subprocess.Popen(
        [sys.executable, "-m", "aitop.tui", "--pid", str(job.pid), "--headless", "--json",
         "--duration", str(FIXED_WARMUP_S + FIXED_MEASURE_S + 1.0)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
    )
    try:
        start = time.time() + FIXED_WARMUP_S
        time.sleep(FIXED_WARMUP_S + FIXED_MEASURE_S + 0.6)
        return float(truth_between(truth, start, start + FIXED_MEASURE_S)
                     ["steps_per_s"])
    finally:
        watcher.terminate()
        watcher.wait(timeout=30)
        stop_job(job)


def run_round(base: str, workdir: Path, attach_s: float = ATTACH_S) -> Outcome:
    """Diagnose the job as it is, apply the lead action, measure both by the job's count."""
    truth = workdir / f"{base}.jsonl"
    truth.unlink(missing_ok=True)
    with quota_group(job_quota(base)) as group:
        job = start_job(base, truth, duration_s=120.0,
                        cgroup=None if group is None else group.directory)
        try:
            report = headless_report(job.pid, attach_s)
        finally:
            stop_job(job)
    t0, t1 = report["phase_span"]
    base_rate = float(truth_between(truth, t0, t1)["steps_per_s"])
    lead = report["findings"][0] if report["findings"] else None
    applied = apply_lead(base, report)
    gain_low = gain_high = ceiling = None
    method = lead["gain_method"] if lead is not None else None
    if method in ("predicted", "amdahl") and lead["est_speedup_range"]:
        gain_low, gain_high = lead["est_speedup_range"]
        ceiling = lead.get("gain_ceiling")
    rate = fixed_rate(applied, workdir) if applied is not None else None
    return Outcome(base, lead["id"] if lead else None, applied.change if applied else None,
                   gain_low, gain_high, ceiling, base_rate, rate, method)


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "—" if value is None else format(value, spec)


def markdown(outcomes: Sequence[Outcome], runs: int) -> str:
    """docs/predictions.md: per scenario, predicted range vs measured speed-up."""
    lines = [
        "# Predicted gains against measured speed-ups",
        "",
        "Written by `python -m benchmarks.predictions`. For each demo job with a mechanical",
        "fix, aitop watched the job as it is for "
        f"{ATTACH_S:g} s; its lead finding's first action was then",
        "applied exactly as it reads to a fresh run of the same job, and both rates come",
        "from the job's own step counter, with aitop attached to both (the fixed run over "
        f"{FIXED_MEASURE_S:g} s after {FIXED_WARMUP_S:g} s of warm-up).",
        f"{runs} round(s) per job, one job at a time, on this machine "
        "(2 cores, no GPU).",
        "",
        "The calibration constants of `knowledge/judging/gains.py` were fitted on the jobs "
        f"{', '.join(FITTING_SET)} (the fitting set); "
        f"{', '.join(CHECK_SET)} were never used to fit one (the check set, "
        "`--check`). Set of each job below: "
        + ", ".join(f"{o.scenario} ({'fit' if o.scenario in FITTING_SET else 'check'})"
                    for o in dict((o.scenario, o) for o in outcomes).values()) + ".",
        "",
        "A ceiling (`amdahl`: more compute threads, whose scaling depends on the sizes "
        "of the job's operations) is shown as \"at most\" and holds when the change "
        "helps and stays under it.",
        "",
        "| job | lead finding | change applied | predicted (median ends) | measured "
        "(median) | inside | widest range (high / low, at most 1.5) "
        "| every round (measured in [low, high], or ≤ the ceiling) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    by_job: dict[str, list[Outcome]] = {}
    for o in outcomes:
        by_job.setdefault(o.scenario, []).append(o)
    for job, rounds in by_job.items():
        measured = [o.measured for o in rounds if o.measured is not None]
        lows = [o.low for o in rounds if o.low is not None]
        highs = [o.high for o in rounds if o.high is not None]
        inside = sum(1 for o in rounds if o.inside)
        widths = [o.high / o.low for o in rounds if o.low and o.high]
        every = "; ".join(
            f"{_fmt(o.measured)} ≤ {_fmt(o.high)}" if o.method == "amdahl"
            else f"{_fmt(o.measured)} in [{_fmt(o.low)}, {_fmt(o.high)}]" for o in rounds
        )
        figure = (
            f"at most ×{_fmt(statistics.median(highs) if highs else None)}"
            if rounds[0].method == "amdahl" else
            f"×{_fmt(statistics.median(lows) if lows else None)}–"
            f"×{_fmt(statistics.median(highs) if highs else None)}")
        lines.append(
            f"| {job} | {rounds[0].lead} | {rounds[0].change} | {figure} | "
            f"×{_fmt(statistics.median(measured) if measured else None)} | "
            f"{f'{inside}/{len(rounds)}' if measured else '—'} | "
            f"{_fmt(max(widths) if widths else None)} | {every} |"
        )
    lines += ["", "Raw rounds (JSON):", "", "```json",
              json.dumps([{**asdict(o), "measured": o.measured} for o in outcomes], indent=1),
              "```", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="rounds per job (default 3)")
    parser.add_argument("--only", action="append", help="a base job (repeatable)")
    parser.add_argument("--check", action="store_true",
                        help="the out-of-sample jobs (CHECK_SET) instead of the fitting set")
    parser.add_argument("--overheads", action="store_true",
                        help="the jobs of OVERHEADS_SET (recompiles, workers restarted "
                             "each epoch, a preprocessing-bound server)")
    parser.add_argument("--out", type=Path,
                        help="where the table goes (default: the set's own page in docs/, "
                             "or standard output for --only, a part of a set)")
    args = parser.parse_args(argv)
    jobs = args.only or list(OVERHEADS_SET if args.overheads
                             else CHECK_SET if args.check else FITTING_SET)
    out: Path | None = args.out
    if out is None and not args.only:
        out = REPO / "docs" / ("predictions-overheads.md" if args.overheads
                               else "predictions-check.md" if args.check
                               else "predictions.md")
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="aitop-predictions-") as tmp:
        for _ in range(args.runs):
            for base in jobs:
                outcome = run_round(base, Path(tmp))
                outcomes.append(outcome)
                print(f"{base}: lead {outcome.lead}, {outcome.change}: predicted "
                      f"{_fmt(outcome.low)}-{_fmt(outcome.high)}, measured "
                      f"{_fmt(outcome.measured)}", flush=True)
    table = markdown(outcomes, args.runs)
    if out is None:
        print(table)
    else:
        out.write_text(table)
        print(f"wrote {out}")
    return 0



if __name__ == "__main__":
    raise SystemExit(main())
