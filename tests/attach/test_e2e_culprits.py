"""End to end, every loop shape: real demo jobs, real py-spy, the real CLI.

Each job below has one known culprit and times its own phases (``--truth``):
aitop must name the culprit first (not the symptom), say its first action in
the culprit's words, measure the data wait the job measured, and know the
job's steps/s where a counter exists (a loop local or the DataLoader workers'
batch index). These attach with py-spy and are never skipped.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from support.jobs import WatchedRun, truth_between
from support.sampling import share_tolerance

pytestmark = [pytest.mark.attach, pytest.mark.alone]


@dataclass(frozen=True)
class Expect:
    category: str
    #: Acceptable lead findings (the culprit), with how their first action starts.
    lead: dict[str, str]
    #: Where steps/s must come from (None: the job has no counter aitop could read).
    counter: str | None
    #: (phase, lowest share, highest share) the job's own timers must show.
    shape: tuple[str, float, float]


EXPECT: dict[str, Expect] = {
    # Every core busy with workers' decoding and the training thread.
    "cpu_saturated": Expect("data_loading",
                            {"host_cpu_saturated": "Make per-sample work cheaper"}, "step",
                            ("data_wait", 0.30, 1.0)),
    # Workers reading scattered 4 KiB blocks with O_DIRECT: asleep on the disk.
    "storage": Expect("io", {
        "workers_wait_on_reads": "Move the data to local NVMe",
        "storage_bound_reads": "Move the data to local NVMe",
        "disk_saturated_reads": "Move the data to faster local NVMe",
    }, "step", ("data_wait", 0.30, 1.0)),
    # A hand-written producer thread feeding a queue.Queue; no DataLoader at all.
    "producer": Expect("data_loading",
                       {"producer_bound": "Produce batches in more processes"}, "step",
                       ("data_wait", 0.50, 1.0)),
    # Long evaluation passes under no_grad between training stretches.
    "validation": Expect("evaluation",
                         {"evaluation_dominates": "Validate half as often"}, "step",
                         ("eval", 0.35, 0.80)),
    # A generator around the DataLoader and a loop with no counter at all: the
    # culprit depends on whether a core is free on this 2-core box.
    "generator": Expect("data_loading", {
        "workers_cpu_bound": "Raise num_workers from 1 to",
        "host_cpu_saturated": "Make per-sample work cheaper",
    }, "worker batch index", ("data_wait", 0.15, 1.0)),
    # A Lightning-style loop with torch's default threads (they fill the cores
    # while the step computes) and one worker decoding in Python: a second
    # worker gets the cores the compute threads leave while the loop waits.
    "fit_loop": Expect("data_loading",
                       {"workers_cpu_bound": "Raise num_workers from 1 to 2"}, "batch_idx",
                       ("data_wait", 0.30, 1.0)),
    # The same loop whose worker waits for each sample (a remote read): more
    # workers, not queueing batches ahead nor cheaper samples.
    "fit_loop_waits": Expect("data_loading",
                             {"workers_wait_on_input": "Raise num_workers from 1 to 2"},
                             "batch_idx", ("data_wait", 0.30, 1.0)),
}


#: These jobs step at 13-30 steps/s, close to py-spy's 10 Hz, so their samples
#: beat with the step more than the main scenarios' (the generator job read 0.57
#: once for its own 0.44, 0.52 for 0.47 the next run): 8 points at least.
SHARE_FLOOR = 0.08


@pytest.mark.parametrize("scenario", list(EXPECT))
def test_culprit_leads_for_every_loop_shape(scenario: str, watched_run: WatchedRun) -> None:
    expect = EXPECT[scenario]
    run = watched_run(scenario)
    report, truth = run.report, run.truth
    b = report["bottleneck"]
    ids = [f["id"] for f in report["findings"]]
    t0, t1 = report["phase_span"]
    true = truth_between(truth, t0, t1)
    # The job has the shape it was designed to have, by its own timers: a
    # "producer-bound" job whose producer keeps up would test nothing.
    phase, low, high = expect.shape
    assert low <= true[phase] <= high, f"{scenario}: its own {phase} {true[phase]:.2f}: {true}"
    if scenario != "validation":
        assert true["eval"] == 0.0
    print(f"{scenario}: {b['category']} / {b['summary']} / {ids} / phases {report['phases']} / "
          f"truth {true} / steps {report['steps_per_s']} via {report['steps_source']} / "
          f"timeline {report['timeline']}")
    assert b["judged"] is True
    assert b["category"] == expect.category, f"{b['summary']}; findings {ids}"
    lead = report["findings"][0]
    assert b["lead_finding"] == lead["id"]
    assert lead["id"] in expect.lead, f"lead {lead['id']}: {lead['title']}; all {ids}"
    assert lead["actions"][0].startswith(expect.lead[lead["id"]]), lead["actions"]
    # The symptom is explained by the culprit, not listed as its rival.
    assert "data_wait_dominant" not in ids and "data_wait_elevated" not in ids
    samples = report["metrics"]["phase_samples"]
    phases = report["phases"]
    for phase in ("data_wait", "eval"):
        allowed = share_tolerance(true[phase], samples, SHARE_FLOOR)
        assert abs(phases[phase] - true[phase]) <= allowed, (
            f"{phase}: aitop {phases[phase]:.3f} vs the job's own {true[phase]:.3f}"
        )
    source = report["steps_source"]
    assert source is not None and source["counter"] == expect.counter, source
    s0, s1 = report["steps_span"]
    true_rate = truth_between(truth, s0, s1)["steps_per_s"]
    assert report["steps_per_s"] == pytest.approx(true_rate, rel=0.15), source["readings"]
