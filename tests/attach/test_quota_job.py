"""The container is the machine: a job sized to the host, run under a 1-CPU quota.

The ``quota`` demo job starts a torch thread and a decoding DataLoader worker
per CPU of the machine (``os.cpu_count()``), as scripts do; the test runs it in
a real CPU cgroup allowing 1 CPU (v1 ``cpu.cfs_quota_us`` here, ``cpu.max``
where only v2 exists), as a container's limit would. The quota stops all of it
for most of each period while the machine's other core idles: aitop must lead
with the quota (not "the loop waits for data: more workers"), read the share of
periods throttled from the group's own counters, and predict for a named quota.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cgroups import cpu_cgroup
from support.jobs import headless_report, start_job, stop_job, truth_between

from benchmarks.predictions import apply_lead

# Alone: the job must get its quota's worth of a core for the quota to throttle
# it; on a box whose cores other jobs hold it waits in the run queue instead.
pytestmark = [pytest.mark.attach, pytest.mark.alone]

#: Seconds aitop watches: the rule holds 5 s once the window has its samples.
WATCH_S = 16.0


def test_a_job_its_quota_throttles_is_told_so_first(tmp_path: Path) -> None:
    truth = tmp_path / "quota.jsonl"
    with cpu_cgroup(1.0) as group:
        job = start_job("quota", truth, cgroup=group.directory)
        try:
            report = headless_report(job.pid, WATCH_S)
        finally:
            stop_job(job)
    m = report["metrics"]
    ids = [f["id"] for f in report["findings"]]
    lead = report["findings"][0]
    own = truth_between(truth, *report["phase_span"])
    print(f"lead {lead['id']}: {lead['title']} / {lead['gain_explanation']} / findings {ids} / "
          f"throttled {m['cpu_throttled_share']:.2f} of periods, {m['cpu_throttled_per_s']:.2f} "
          f"s/s, demand {m['cpu_demand']:.2f}, used {m['proc_cpu_mean']:.0f}% / truth {own}")
    # Read from the group the test made, for the job's every process.
    assert (m["has_cpu_quota"], m["cpu_quota"], m["cpu_count"]) == (1.0, 1.0, 1.0)
    assert m["proc_cpu_mean"] <= 100 * 1.05, "the quota caps what the job runs"
    assert m["cpu_throttled_share"] > 0.5
    assert lead["id"] == "cpu_quota_throttles", f"{lead['title']}; all {ids}"
    assert lead["title"].startswith("The job's CPU quota (1.0 CPUs) throttles it in ")
    assert group.name in lead["why"]
    assert report["bottleneck"]["lead_finding"] == "cpu_quota_throttles"
    # The loop does wait for data, by its own timers: a symptom the quota explains.
    assert own["data_wait"] >= 0.3, own
    assert not any(f["id"] in ("data_wait_dominant", "workers_cpu_bound", "host_cpu_saturated")
                   for f in report["findings"]), ids
    # Its figure names the quota it assumes; the predictions benchmark applies it.
    assert lead["gain_method"] == "predicted"
    assert lead["gain_explanation"].startswith("with a quota of 2 CPUs the job would run")
    assert lead["actions"][0].startswith("Raise the job's CPU limit to 2 CPUs")
    assert lead["actions"][1].startswith(
        "Size the job to its quota, not to the machine: torch.set_num_threads(1)")
    applied = apply_lead("quota", report)
    assert applied is not None and applied.cpu_quota == 2.0 and applied.args == ()
