"""Costs the step pays again and again, each on a demo job written for it and
checked against the job's own record, beside its fixed variant:

* ``recompile``: torch.compile(dynamic=False) meeting a new sequence length
  every 30 steps: recompilation after the first steps, never a warm-up;
  ``recompile_dynamic`` compiles with dynamic=True.
* ``epoch_workers``: DataLoader workers started again each short epoch, each
  spending a second in ``worker_init_fn``; ``epoch_workers_persistent`` keeps
  them (``persistent_workers=True``).
* ``serving_preprocess``: a batching server that encodes every request in
  Python on its serving thread; ``serving_preprocess_pool`` encodes in two
  worker processes a batch ahead.

The first two pairs are watched side by side (each job about a core); the
server is watched before its fixed variant, since moving its encoding to other
processes pays only on a core its fixed variant would take. A ceiling aitop
shows must hold for the fix the job's own count measures.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from support.jobs import read_truth, watch
from support.speedups import SLACK

pytestmark = pytest.mark.attach


def truth_shares(truth: Path, t0: float, t1: float) -> dict[str, float]:
    """Every timer of the job's record as a share of [t0, t1], and its steps/s."""
    records = read_truth(truth)
    a = min(records, key=lambda r: abs(r["t"] - t0))
    b = min(records, key=lambda r: abs(r["t"] - t1))
    elapsed = b["elapsed"] - a["elapsed"]
    assert elapsed > 1.0, f"the job's record covers only {elapsed:.2f} s"
    out = {k: (b[k] - a[k]) / elapsed for k in b if k not in ("t", "steps", "elapsed")}
    out["steps_per_s"] = (b["steps"] - a["steps"]) / elapsed
    return out


def watch_pair(base: str, fixed: str, workdir: Path, seconds: float, settle_s: float = 0.0,
               ) -> tuple[dict[str, Any], dict[str, float], dict[str, float]]:
    """``base`` and ``fixed`` watched side by side: the base's report, and each
    job's own shares and rate over the base's stack span."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = [pool.submit(watch, name, workdir, seconds, settle_s) for name in (base, fixed)]
        (report, truth), (_fixed_report, fixed_truth) = (r.result() for r in runs)
    span = report["phase_span"]
    return report, truth_shares(truth, *span), truth_shares(fixed_truth, *span)


def watch_one_then_the_other(base: str, fixed: str, workdir: Path, seconds: float,
                             fixed_seconds: float,
                             ) -> tuple[dict[str, Any], dict[str, float], dict[str, float]]:
    """``base`` watched alone, then ``fixed`` alone: the base's report, and each
    job's own shares and rate over its own report's stack span."""
    report, truth = watch(base, workdir, seconds)
    fixed_report, fixed_truth = watch(fixed, workdir, fixed_seconds)
    return (report, truth_shares(truth, *report["phase_span"]),
            truth_shares(fixed_truth, *fixed_report["phase_span"]))


def steady_windows(windows: list[list[float]], samples: float) -> list[list[float]]:
    """The last of ``windows`` (``[start, end, samples]``) that hold ``samples`` samples
    between them: those a share read outside a warm-up was counted over."""
    held = 0.0
    for first in range(len(windows) - 1, -1, -1):
        held += windows[first][2]
        if held >= samples:
            assert held == samples, (windows, samples)
            return windows[first:]
    raise AssertionError(f"{samples} samples are more than the windows hold: {windows}")


def ceiling_holds(lead: dict[str, Any], base: dict[str, float],
                  fixed: dict[str, float], *, may_be_unbounded: bool = False) -> float:
    """The fix's measured speed-up, held to the lead's ceiling widened by ``SLACK``,
    as every predicted range is (``support.speedups``): one pair's ratio spreads
    10-20 % on this box, and more side by side, where each job's rate moves with
    what the other takes (a compiling job's compiler processes hold cores too).
    CI measured the recompile fix at x1.69 against a ceiling of x1.63, where its
    job's own compile share bounds it at x1.59 and, one job at a time, the same
    fix measured x1.82 and x1.58 against ceilings of x2.53 and x2.33
    (docs/predictions-overheads.md, ``python -m benchmarks.predictions
    --overheads``). That benchmark checks the bound itself.

    ``may_be_unbounded``: where what the fix removes may add up to the whole
    step as read (the wait as high as its samples allow, and the kernel's time
    beside it), no ceiling is the honest answer, and the lead must say so."""
    measured = fixed["steps_per_s"] / base["steps_per_s"]
    print(f"{lead['id']}: ceiling {lead['gain_ceiling']} ({lead['gain_explanation']}); "
          f"measured x{measured:.2f}")
    if may_be_unbounded and lead["gain_ceiling"] is None:
        assert lead["gain_method"] == "amdahl", lead
        assert "no ceiling" in lead["gain_explanation"], lead["gain_explanation"]
        return measured
    assert lead["gain_method"] == "amdahl" and lead["gain_ceiling"] is not None
    assert measured <= lead["gain_ceiling"] * SLACK, (measured, lead["gain_ceiling"])
    return measured


@pytest.mark.alone  # its phase shares and ceiling are timed against the job's own
def test_recompiling_after_the_first_steps_is_recompilation_not_a_warm_up(
        tmp_path: Path) -> None:
    # Attached 5 s into its recompiles; 24 s: compile_recurs holds 10 s once its
    # steps are proven (a few s, more on a loaded box).
    report, truth, fixed = watch_pair("recompile", "recompile_dynamic", tmp_path, 24,
                                      settle_s=5)
    truth_path = tmp_path / "recompile.jsonl"
    ids = [f["id"] for f in report["findings"]]
    states = [(e["after_s"], e["summary"]) for e in report["timeline"]]
    print(f"{report['bottleneck']['summary']}; findings {ids}; timeline {states}; "
          f"truth {truth}")
    # The job had taken its first steps before aitop attached. Found compiling,
    # it may read as compiling until its first steps are seen (a counter that
    # moves, backward passes, dynamo's frames: a few seconds), never after, and
    # never as a first compilation that has finished.
    for (_after, summary), (until, _next) in zip(states, [*states[1:], (None, "")], strict=True):
        if summary.startswith("Warming up"):
            assert summary.startswith("Warming up: torch.compile is compiling"), states
            assert until is not None and until <= 12, states
    lead = report["findings"][0]
    assert lead["id"] == "compile_recurs", ids
    m = report["metrics"]
    assert m["steps_proven"] == 1.0
    # Named by dynamo's own frames where a dump caught it compiling the forward
    # (how many, how often, the guard that failed); a dump inside a backward's
    # compilation names nothing, and the loop's line says where.
    if m["recompiles_seen"] is not None:
        assert lead["title"].startswith(
            "torch.compile keeps recompiling forward (compile_jobs.py:"), lead["title"]
        assert "recompilations of it since the job started" in lead["why"], lead["why"]
        assert "size mismatch at index 1" in lead["why"], lead["why"]
    else:
        assert lead["title"].startswith(
            "torch.compile keeps recompiling the model called at compile_jobs.py:"), lead["title"]
    # The compile share against the job's own timer over the windows it was read
    # in: those after the first compilation (a suffix of the report's windows).
    steady = steady_windows(report["phase_windows"], m["compile_steady_samples"])
    own = truth_shares(truth_path, steady[0][0], steady[-1][1])["compile"]
    print(f"compile share {m['phase_compile_steady']} over {len(steady)} of "
          f"{len(report['phase_windows'])} windows; own {own:.3f} there, "
          f"{truth['compile']:.3f} over all")
    assert abs(m["phase_compile_steady"] - own) <= 0.15, (m, own, truth)
    ceiling_holds(lead, truth, fixed)


@pytest.mark.alone  # its phase shares and ceiling are timed against the job's own
def test_workers_started_again_every_epoch_are_named_with_persistent_workers(
        tmp_path: Path) -> None:
    report, truth, fixed = watch_pair("epoch_workers", "epoch_workers_persistent", tmp_path,
                                      16)
    ids = [f["id"] for f in report["findings"]]
    print(f"{report['bottleneck']['summary']}; findings {ids}; truth {truth}")
    lead = report["findings"][0]
    assert lead["id"] == "workers_restart_each_epoch", ids
    assert "persistent_workers=True" in lead["actions"][0]
    m = report["metrics"]
    assert m["worker_restarts"] >= 2
    # Most of the loop's wait is each epoch's start, by the job's own timers.
    waited = truth["epoch_start"] + truth["data_wait"]
    assert abs(m["phase_data_wait"] - waited) <= 0.15, (m["phase_data_wait"], truth)
    assert truth["epoch_start"] >= 0.5 * waited
    # The wait (up to 93 % at its sampling bound, side by side) and the parent's
    # kernel time (forks and page copies, 6-7 %) may leave no time to bound by.
    ceiling_holds(lead, truth, fixed, may_be_unbounded=True)


# Alone: moving the encoding to worker processes pays only where a core is free.
@pytest.mark.alone
def test_a_server_bound_by_its_preprocessing_is_told_to_move_it_off_the_serving_thread(
        tmp_path: Path) -> None:
    # One after the other: the fixed variant's worker processes would take the
    # core the base job's finding rests on. A server is told from a job still
    # loading by SERVING_MIN_FORWARD_SAMPLES (8) forward samples with no backward
    # (knowledge/metrics/step_phases.py), and py-spy's non-blocking samples see
    # the model at a quarter to a half of its own share: with a model taking 8-10 %
    # of the thread (width 64) the eighth sample came after the 40-s watch in two
    # CI runs of three (runs 79, 80). Its model now takes about 20 % (width 256).
    report, truth, fixed = watch_one_then_the_other("serving_preprocess",
                                                    "serving_preprocess_pool", tmp_path,
                                                    40, 16)
    ids = [f["id"] for f in report["findings"]]
    print(f"{report['bottleneck']['summary']}; findings {ids}; truth {truth}")
    lead = report["findings"][0]
    assert lead["id"] == "serving_bound_by_preprocessing", ids
    assert "in encode (serve_jobs.py:" in lead["title"], lead["title"]
    assert "python_overhead" not in ids, "explained: the serving thread's own preprocessing"
    assert "worker processes" in lead["actions"][0]
    assert abs(report["metrics"]["phase_other"] - truth["preprocess"]) <= 0.15, truth
    ceiling_holds(lead, truth, fixed)
