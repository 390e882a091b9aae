"""Targets 1, 3 and 4: overhead on the job, accuracy, and speed of diagnosis.

Design, for a shared and noisy 2-core machine:

* ONE long-running demo job per scenario; aitop is attached to it and detached
  from it again and again, so every comparison is within one process.
* Periods alternate "off" (no aitop) and "on" (aitop attached, in steady state),
  in ABBA order (off-on, on-off, off-on, ...) so that a slow drift of the
  machine's load affects both conditions alike. Each pair gives one ratio
  steps/s(on) / steps/s(off); the figure is the median ratio over the pairs.
* steps/s comes from the job's own counter (its truth file), interpolated at the
  exact period boundaries.
* Because a ±10 % swing between two 10-s periods is ordinary here, each "on"
  period also measures the bound that noise cannot blur: aitop's CPU seconds
  (aitop + py-spy, from /proc, reaped children included) divided by the job's
  CPU seconds (job + DataLoader workers) over the same period. aitop can only
  slow the job by taking CPU from it (py-spy runs ``--nonblocking``: it never
  stops the job), so on a saturated machine the slowdown is at most about this.

Headless "on" periods are full ``aitop --headless --json`` runs; their reports also
give the accuracy figures (target 3: phases and steps/s against the job's own
timers over exactly the report's ``phase_span``) and the time to the first correct
diagnosis (target 4). TUI "on" periods run the real UI in tmux and also give the
time to the first drawn frame.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .aitop_proc import AitopRun, HeadlessRun, TuiRun
from .jobs import EXPECTED, DemoJob
from .stats import Summary

Log = Callable[[str], None]

#: ``aitop --headless`` samples this long unless told otherwise (tui/cli.py).
DEFAULT_HEADLESS_DURATION_S = 20.0


@dataclass(frozen=True)
class OverheadConfig:
    """How long each period is and how many pairs are run."""

    pairs: int
    period_s: float
    #: From launching aitop to the start of its measured period: startup,
    #: attach and the first py-spy window are over by then.
    settle_s: float = 4.0
    #: Job warm-up before the first period (first epoch, worker start).
    warmup_s: float = 5.0
    #: Pause after each period (aitop's exit, the job's truth catching up).
    gap_s: float = 1.0

    @property
    def headless_duration_s(self) -> float:
        """``--duration`` of each headless run: the CLI's default (20 s), or longer
        if the measured period needs it. Accuracy and time-to-diagnosis are judged
        on these runs, so they must be what a user gets by default."""
        return max(DEFAULT_HEADLESS_DURATION_S, self.settle_s + self.period_s + 2.0)


def _period_off(job: DemoJob, cfg: OverheadConfig) -> dict[str, Any]:
    t0, cpu0 = time.time(), job.cpu_seconds()
    time.sleep(cfg.period_s)
    t1, cpu1 = time.time(), job.cpu_seconds()
    return {"t0": t0, "t1": t1, "job_cpu_s": cpu1 - cpu0}


def _period_on(job: DemoJob, run: AitopRun, cfg: OverheadConfig) -> dict[str, Any]:
    """Measure [launch + settle, + period] while ``run`` is attached."""
    start = run.launched_at + cfg.settle_s
    if isinstance(run, TuiRun):
        run.wait_first_frame(deadline=start)  # polling stops before the period starts
    time.sleep(max(0.0, start - time.time()))
    t0, cpu0, a0 = time.time(), job.cpu_seconds(), run.cpu_seconds()
    time.sleep(cfg.period_s)
    t1, cpu1, a1 = time.time(), job.cpu_seconds(), run.cpu_seconds()
    aitop_cpu = a1 - a0 if a0 is not None and a1 is not None else None
    return {"t0": t0, "t1": t1, "job_cpu_s": cpu1 - cpu0, "aitop_cpu_s": aitop_cpu}


def accuracy(report: dict[str, Any], job: DemoJob) -> dict[str, Any]:
    """aitop's phases and steps/s against the job's own timers over the report's span."""
    span = report.get("phase_span")
    phases = report.get("phases")
    if not span or not phases:
        return {"error": "report has no phases/phase_span"}
    truth = job.between(span[0], span[1])
    sps = report.get("steps_per_s")
    out: dict[str, Any] = {"span_s": span[1] - span[0], "truth": truth, "phases": phases,
                           "steps_per_s": sps}
    for phase in ("data_wait", "checkpoint"):
        out[f"{phase}_err_pp"] = 100.0 * abs(phases[phase] - truth[phase])
    # steps/s rests on the step-counter readings, whose span the report gives as
    # ``steps_span`` (newer reports); older reports only have the phase span.
    steps_span = report.get("steps_span") or span
    true_rate = job.between(steps_span[0], steps_span[1])["steps_per_s"]
    out["steps_span"] = "steps_span" if report.get("steps_span") else "phase_span"
    out["true_steps_per_s"] = true_rate
    out["steps_rel_err"] = (abs(sps / true_rate - 1.0)
                            if sps is not None and true_rate > 0 else None)
    return out


def diagnosis_time(run: HeadlessRun, expected: str) -> dict[str, Any]:
    """When aitop first named the expected category from real samples.

    A diagnosis counts only if it rests on stack samples: the ``none`` shown while
    "Collecting: no stack samples yet" is a placeholder, not an answer.
    """
    history = run.history.get("history", [])
    attached_at = run.history.get("attached_at") or run.report.get("attached_at")
    first = None
    flips = 0
    for record in history:
        real = (record.get("phase_samples") or 0) > 0
        if first is None and real and record["category"] == expected:
            first = record
        elif first is not None and record["category"] != expected:
            flips += 1
    timeline = run.report.get("timeline", [])
    from_timeline = next((e["after_s"] for e in timeline if e["category"] == expected), None)
    return {
        "after_attach_s": first["after_s"] if first else None,
        "after_launch_s": (first["t"] - run.launched_at) if first else None,
        "attach_after_launch_s": (attached_at - run.launched_at) if attached_at else None,
        "timeline_after_s": from_timeline,
        "wrong_evaluations_after_first_correct": flips,
        "evaluations": len(history),
        "final_category": run.report.get("bottleneck", {}).get("category"),
        "timeline": timeline,
    }


def run_scenario(
    scenario: str, mode: str, cfg: OverheadConfig, workdir: Path, log: Log
) -> dict[str, Any]:
    """All pairs for one scenario in one mode (``headless`` or ``tui``)."""
    pairs: list[dict[str, Any]] = []
    with DemoJob(scenario, workdir, duration_s=3600.0) as job:
        time.sleep(cfg.warmup_s)
        for i in range(cfg.pairs):
            order = ("off", "on") if i % 2 == 0 else ("on", "off")
            pair: dict[str, Any] = {"order": "-".join(order)}
            for condition in order:
                if condition == "off":
                    pair["off"] = _period_off(job, cfg)
                    time.sleep(cfg.gap_s)
                    continue
                name = f"{mode}-{scenario}-{i}"
                run: AitopRun
                if mode == "headless":
                    run = HeadlessRun(workdir, name).start(job.pid, cfg.headless_duration_s)
                else:
                    run = TuiRun(workdir, name).start(job.pid)
                try:
                    pair["on"] = _period_on(job, run, cfg)
                finally:
                    if isinstance(run, HeadlessRun):
                        run.wait()
                    else:
                        assert isinstance(run, TuiRun)
                        run.quit()
                        pair["first_frame_s"] = run.first_frame_s
                pair["whole_run_cpu_percent"] = run.whole_run_cpu_percent
                pair["orphans_reaped"] = run.wrap_result.get("orphans_reaped")
                if isinstance(run, HeadlessRun):
                    pair["report_cpu_percent"] = run.report["aitop"]["cpu_percent_of_one_core"]
                    pair["accuracy"] = accuracy(run.report, job)
                    pair["diagnosis"] = diagnosis_time(run, EXPECTED[scenario])
                time.sleep(cfg.gap_s)
            for condition in ("off", "on"):
                period = pair[condition]
                period["steps_per_s"] = job.between(period["t0"], period["t1"])["steps_per_s"]
            on, off = pair["on"], pair["off"]
            pair["ratio"] = on["steps_per_s"] / off["steps_per_s"]
            if on["aitop_cpu_s"] is not None:
                pair["aitop_over_job_cpu"] = on["aitop_cpu_s"] / on["job_cpu_s"]
                pair["aitop_cpu_percent"] = 100.0 * on["aitop_cpu_s"] / (on["t1"] - on["t0"])
            pairs.append(pair)
            log(_pair_line(scenario, mode, i, pair))
    return summarize(scenario, mode, pairs)


def _pair_line(scenario: str, mode: str, i: int, pair: dict[str, Any]) -> str:
    on, off = pair["on"], pair["off"]
    text = (f"  {mode} {scenario} pair {i + 1} ({pair['order']}): steps/s off "
            f"{off['steps_per_s']:.2f} on {on['steps_per_s']:.2f} ratio {pair['ratio']:.3f}; "
            f"aitop/job CPU {pair.get('aitop_over_job_cpu', float('nan')):.4f}")
    if "accuracy" in pair and "error" not in pair["accuracy"]:
        acc = pair["accuracy"]
        text += (f"; data_wait err {acc['data_wait_err_pp']:.1f} pp, ckpt err "
                 f"{acc['checkpoint_err_pp']:.1f} pp, steps/s err "
                 f"{(acc['steps_rel_err'] or float('nan')) * 100:.1f} %")
    if "diagnosis" in pair:
        text += f"; correct after {pair['diagnosis']['after_attach_s']} s"
    if pair.get("first_frame_s") is not None:
        text += f"; first frame {pair['first_frame_s']:.2f} s"
    return text


def _summ(values: list[Any]) -> dict[str, Any] | None:
    s = Summary.of(values)
    return s.to_json() if s else None


def summarize(scenario: str, mode: str, pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians and spreads over the pairs (raw pairs are kept for the record)."""
    def col(*path: str) -> list[Any]:
        out = []
        for p in pairs:
            value: Any = p
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            out.append(value)
        return out

    result: dict[str, Any] = {
        "scenario": scenario,
        "mode": mode,
        "ratio": _summ(col("ratio")),
        "aitop_over_job_cpu": _summ(col("aitop_over_job_cpu")),
        "aitop_cpu_percent": _summ(col("aitop_cpu_percent")),
        "whole_run_cpu_percent": _summ(col("whole_run_cpu_percent")),
        "steps_per_s_off": _summ(col("off", "steps_per_s")),
        "steps_per_s_on": _summ(col("on", "steps_per_s")),
        "job_cpu_percent_off": _summ([100 * p["off"]["job_cpu_s"] /
                                      (p["off"]["t1"] - p["off"]["t0"]) for p in pairs]),
        "pairs": pairs,
    }
    if mode == "headless":
        result.update({
            "report_cpu_percent": _summ(col("report_cpu_percent")),
            "data_wait_err_pp": _summ(col("accuracy", "data_wait_err_pp")),
            "checkpoint_err_pp": _summ(col("accuracy", "checkpoint_err_pp")),
            "steps_rel_err": _summ(col("accuracy", "steps_rel_err")),
            # A report whose steps/s is null ("unknown") has no estimate to compare.
            "steps_unknown": sum(1 for p in pairs
                                 if p.get("accuracy", {}).get("steps_per_s") is None),
            "diagnosis_after_attach_s": _summ(col("diagnosis", "after_attach_s")),
            "diagnosis_after_launch_s": _summ(col("diagnosis", "after_launch_s")),
            "diagnosis_missed": sum(1 for v in col("diagnosis", "after_attach_s") if v is None),
            "diagnosis_flips": sum(col("diagnosis", "wrong_evaluations_after_first_correct")),
        })
    else:
        result["first_frame_s"] = _summ(col("first_frame_s"))
    return result
