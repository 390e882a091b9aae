"""End to end: real demo jobs, real py-spy, the real CLI; compared with ground truth.

These attach with py-spy and must never be skipped: if attaching is impossible
here (no ptrace rights), they fail and say so.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.jobs import Watched, WatchedRun, truth_between, watched
from support.sampling import share_tolerance
from support.speedups import SLACK, RatePair, assert_comes_true

from benchmarks.predictions import apply_lead

pytestmark = [pytest.mark.attach, pytest.mark.alone]

EXPECTED = {
    "data": "data_loading",
    "compute": "compute",
    "checkpoint": "io",
    # A prefetching loader feeding a model that keeps every core busy: the CPU
    # is the accelerator here, saturated, so compute (and well used).
    "healthy": "compute",
}


def diagnosed(scenario: str, watched_run: WatchedRun) -> tuple[dict, Path]:
    """The headless report of a run of the scenario (shared by the session), its truth."""
    run: Watched = watched_run(scenario)
    return run.report, run.truth


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_scenario_diagnosis_matches_ground_truth(scenario: str, watched_run: WatchedRun) -> None:
    report, truth = diagnosed(scenario, watched_run)
    assert report["schema"] == "aitop.report/2"
    category = report["bottleneck"]["category"]
    t0, t1 = report["phase_span"]
    expected = truth_between(truth, t0, t1)
    allowed = {EXPECTED[scenario]}
    if scenario == "healthy" and expected["data_wait"] >= 0.05:
        # On a loaded 2-core box the prefetching job itself can wait over the
        # documents' 5 % target (its own timers say so): naming data loading is right.
        allowed.add("data_loading")
    assert category in allowed, (
        f"{scenario}: expected {EXPECTED[scenario]}, got {category}: "
        f"{report['bottleneck']['summary']}; phases {report['phases']}; "
        f"findings {[f['id'] for f in report['findings']]}"
    )
    phases = report["phases"]
    assert phases is not None and abs(sum(phases.values()) - 1.0) < 1e-6
    measured_wait, true_wait = phases["data_wait"], expected["data_wait"]
    print(f"{scenario}: data_wait aitop {measured_wait:.3f} truth {true_wait:.3f}; "
          f"checkpoint aitop {phases['checkpoint']:.3f} truth {expected['checkpoint']:.3f}; "
          f"steps/s aitop {report['steps_per_s']} truth {expected['steps_per_s']:.2f}; "
          f"timeline {report['timeline']}")
    samples = report["metrics"]["phase_samples"]
    assert abs(measured_wait - true_wait) <= share_tolerance(true_wait, samples), (
        f"data_wait {measured_wait:.3f} vs ground truth {true_wait:.3f} ({samples:.0f} samples)"
    )
    true_checkpoint = expected["checkpoint"]
    allowed = share_tolerance(true_checkpoint, samples)
    assert abs(phases["checkpoint"] - true_checkpoint) <= allowed, (
        f"checkpoint {phases['checkpoint']:.3f} vs ground truth {true_checkpoint:.3f} "
        f"({samples:.0f} samples)"
    )
    # The demo loops keep a `step` counter in a function frame: steps/s is known,
    # and matches the job's own count over the span of the counter readings.
    assert report["steps_per_s"] is not None
    s0, s1 = report["steps_span"]
    true_rate = truth_between(truth, s0, s1)["steps_per_s"]
    assert report["steps_per_s"] == pytest.approx(true_rate, rel=0.15)
    # The bottleneck names its evidence, and findings carry sources and gains.
    if category != "none":
        assert report["bottleneck"]["evidence"], "a named bottleneck must carry evidence"
        top = report["findings"][0]
        assert top["source"] and top["actions"] and top["gain_explanation"]
    if category == "data_loading":
        assert report["state"] == "High data loading latency"


#: The lead finding whose first action each job's figure is checked for, and the
#: figure's kind: a predicted range, or (more threads, whose scaling depends on
#: the sizes of the job's operations) Amdahl's ceiling.
LEADS = {
    "data": {"workers_cpu_bound"},
    "checkpoint": {"checkpoint_stalls"},
    # One compute thread, and AdamW's for-loop a quarter of its step: the fused
    # update's prediction outranks more threads' ceiling, and is checked here on
    # a job its constants were not fitted on.
    "compute": {"cpu_compute_underthreaded", "optimizer_for_loop"},
    # AdamW's per-tensor loop over 604 small tensors, fused=True applied.
    "optimizer_loop": {"optimizer_for_loop"},
}
#: Each lead's kind of figure.
KINDS = {"workers_cpu_bound": "predicted", "checkpoint_stalls": "predicted",
         "cpu_compute_underthreaded": "amdahl", "optimizer_for_loop": "predicted"}


@pytest.mark.parametrize("scenario", list(LEADS))
def test_the_lead_actions_predicted_gain_comes_true(
    scenario: str, watched_run: WatchedRun, tmp_path: Path
) -> None:
    """Apply the lead action as it reads to a fresh run; the job's own count decides
    whether the range (or, for a ceiling, the bound) held."""
    run = watched_run(scenario)
    report = run.report
    lead = report["findings"][0]
    assert lead["id"] in LEADS[scenario], f"{scenario}: lead {lead['id']}: {lead['title']}"
    kind = KINDS[lead["id"]]
    assert lead["gain_method"] == kind, lead["gain_explanation"]
    low, high = lead["est_speedup_range"]
    assert high / low <= 1.5, "a range wider than x1.5 predicts nothing"
    if kind == "amdahl":
        # A ceiling: the change must help (x1.05 at least, once the slack below is
        # taken off), and never go beyond the ceiling.
        assert low == high
        low = 1.05 * SLACK
    applied = apply_lead(scenario, report)
    assert applied is not None
    pairs = iter(range(2))

    def measure() -> RatePair:
        # The fixed job watched by aitop as the job was (the run aitop diff's test
        # compares too); a second pair runs the job and its fix back to back.
        if next(pairs) == 0:
            return rate_of(run), rate_of(watched_run(applied.scenario, applied.args))
        return (rate_of(watched(scenario, tmp_path)),
                rate_of(watched(applied.scenario, tmp_path, applied.args)))

    assert_comes_true(f"{scenario}: {applied.change}", low, high, measure)


def rate_of(run: Watched) -> float:
    """The job's own steps/s over the span of aitop's stack samples."""
    return truth_between(run.truth, *run.report["phase_span"])["steps_per_s"]
