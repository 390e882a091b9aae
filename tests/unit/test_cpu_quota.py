"""The container is the machine: a job judged against what its cgroups let it use.

Synthetic sessions whose process-tree samples carry the job's CPU cgroup (its
quota, cpuset and throttling counters), through the real ``compute_metrics``
and ``Diagnoser``: the cores it may use, the quota finding leading the symptoms
it explains, and its prediction naming the quota it assumes.
"""

from __future__ import annotations

import pytest
from aitop.knowledge.base.rules import GainSpec
from aitop.knowledge.judging.diagnosis import Facts, estimate_gain
from aitop.knowledge.metrics.quota import quota_target
from aitop.knowledge.reading.loader import load_knowledge_base
from support.synthetic import JOB_GROUP, diagnose_job, make_session, metrics_at, mix

RULESET = load_knowledge_base().rules

#: A CPU job sized to a 2-core machine (2 torch threads, 2 decoding workers) in
#: a 1-CPU quota: 0.99 core used (0.69 of it the workers'), the machine 45 %
#: idle, throttled in 98 % of periods with a core's worth of runnable time held
#: back each second, the loop waiting for data 90 % of the time.
THROTTLED = dict(gpu=False, cpu_count=2, cpu_quota=1.0, throttled_share=0.98,
                 throttled_cores=1.0, main_cpu=30.0, busy_threads=2, workers=2,
                 worker_cpu=37.0, host_cpu=55.0, phases=mix(data_wait=0.9))


def test_the_cores_the_job_may_use_are_its_quotas_not_the_machines() -> None:
    metrics = metrics_at(make_session(30, **THROTTLED), 30)
    assert (metrics["has_cpu_quota"], metrics["cpu_quota"]) == (1.0, 1.0)
    assert metrics["cpu_quota_period_ms"] == 50.0
    assert metrics["cpuset_cpus"] == 2.0
    assert metrics["cpu_count"] == 1.0
    # 0.9 core of the machine is idle, none of it the job's.
    assert metrics["free_cores"] == pytest.approx(0.01)
    assert metrics["free_cores_without_others"] == pytest.approx(0.01)
    assert metrics["cpu_throttled_share"] == pytest.approx(0.98, abs=0.005)
    assert metrics["cpu_throttled_per_s"] == pytest.approx(1.0)
    # Its 0.99 core and the core's worth held back, on a 2-CPU cpuset.
    assert metrics["cpu_demand"] == pytest.approx(1.99)
    assert metrics["quota_target"] == 2.0
    assert (metrics["quota_threads"], metrics["quota_workers"]) == (1.0, 1.0)


def test_without_a_quota_nothing_is_throttled_and_every_cpu_counts() -> None:
    metrics = metrics_at(make_session(30, **{**THROTTLED, "cpu_quota": None}), 30)
    assert metrics["has_cpu_quota"] == 0.0
    assert metrics["cpu_quota"] is None and metrics["cpu_throttled_share"] is None
    assert metrics["cpu_count"] == 2.0
    assert metrics["free_cores"] == pytest.approx(0.9)


def test_others_in_the_jobs_group_spend_its_quota() -> None:
    """A container's other programs run on the same quota as the job."""
    metrics = metrics_at(make_session(30, **{**THROTTLED, "cpu_quota": 4.0, "cpu_count": 8,
                                             "group_others": 1.5, "host_cpu": 30.0}), 30)
    assert metrics["cpu_group_cpu"] == pytest.approx(2.49)
    assert metrics["cpu_group_others"] == pytest.approx(1.5)
    # 4 allowed - 0.99 used - 1.5 the others' = 1.51, though the machine has 5.6 idle.
    assert metrics["free_cores"] == pytest.approx(1.51)
    # The job's part of the time held back: 0.99 of the group's 2.49.
    assert metrics["cpu_demand"] == pytest.approx(0.99 + 0.99 / 2.49)


def test_a_throttled_job_leads_with_its_quota_not_its_data_wait() -> None:
    d = diagnose_job(RULESET, **THROTTLED)
    assert d.top is not None and d.top.id == "cpu_quota_throttles", [f.id for f in d.findings]
    assert d.top.title == ("The job's CPU quota (1.0 CPUs) throttles it in 98% of its periods: "
                           "its threads would use 2.0 cores")
    assert JOB_GROUP in d.top.why
    ids = [f.id for f in d.findings]
    assert "data_wait_dominant" not in ids and "host_cpu_saturated" not in ids
    # The symptoms it explains are carried as its evidence.
    assert any(s.startswith("The loop waits for data") for s in d.top.explains)
    assert d.top.actions[0].startswith("Raise the job's CPU limit to 2 CPUs")
    assert d.top.actions[1].startswith("Size the job to its quota, not to the machine: "
                                       "torch.set_num_threads(1) and at most 1 DataLoader")
    assert "set_num_threads(max(1, int(cpus)))" in (d.top.snippet or "")
    gain = d.top.gain
    assert gain.method == "predicted"
    assert gain.explanation.startswith("with a quota of 2 CPUs the job would run 2.0 core(s) "
                                       "instead of 1.0")
    assert "its DataLoader workers set its pace" in gain.explanation
    # 1.99 cores wanted over 0.99 used: x2.0 the CPU.
    assert (gain.low, gain.high) == pytest.approx((1.71, 2.31), abs=0.01)


def test_where_compute_threads_set_the_pace_more_quota_has_no_figure() -> None:
    """How a step spreads over threads, and what a thread stopped mid-step costs the
    others, no counter shows: the quota it needs is said, no speed-up."""
    d = diagnose_job(RULESET, **{**THROTTLED, "main_cpu": 90.0, "worker_cpu": 7.0,
                                  "phases": mix(data_wait=0.2)})
    assert d.top is not None and d.top.id == "cpu_quota_throttles"
    assert d.top.gain.speedup is None and d.top.gain.method == "none"
    assert d.top.gain.explanation.startswith("with a quota of 2 CPUs the job would run")
    assert d.top.gain.explanation.endswith("no counter shows: no figure")


def test_a_quota_that_reaches_every_cpu_has_no_more_to_give() -> None:
    """Throttled in bursts on a quota as wide as its cpuset: size the job, no figure."""
    metrics = metrics_at(make_session(30, **{**THROTTLED, "cpu_quota": 2.0}), 30)
    assert metrics["quota_target"] is None
    gain = estimate_gain(GainSpec("quota"), metrics, Facts())
    assert gain.speedup is None and "size its threads and workers" in gain.explanation


def test_the_quota_target_is_whole_cpus_up_to_the_cpuset() -> None:
    assert quota_target(1.0, 1.95, 2.0) == 2.0
    assert quota_target(1.0, 2.05, 8.0) == 2.0  # within the demand's rounding
    assert quota_target(1.0, 2.5, 8.0) == 3.0
    assert quota_target(1.0, 6.0, 4.0) == 4.0
    assert quota_target(2.0, 2.05, 8.0) is None  # what it has is what it wants


def test_a_job_its_quota_hardly_stops_is_not_told_about_it() -> None:
    d = diagnose_job(RULESET, **{**THROTTLED, "throttled_share": 0.1, "throttled_cores": 0.05})
    assert "cpu_quota_throttles" not in [f.id for f in d.findings]
