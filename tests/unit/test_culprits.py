"""The checklist's chain: symptom -> culprit -> action, with predictions for this machine.

Synthetic sessions of real sample dataclasses (tests/synthetic.py) through the
real ``compute_metrics`` and ``Diagnoser``: which finding leads, in whose words,
and what its first action is predicted to buy given the cores that are free.
"""

from __future__ import annotations

import pytest
from aitop.knowledge.base.rules import GainSpec
from aitop.knowledge.judging.diagnosis import Facts, estimate_gain
from aitop.knowledge.metrics.capacity import loading_capacity_factor, suggested_workers
from aitop.knowledge.reading.loader import load_knowledge_base
from support.synthetic import diagnose_job, mix

RULESET = load_knowledge_base().rules
#: 16 cores at 40 % busy, main process 100 %, four workers 95/90/85/80 %:
#: allowed 16 - 4.5 = 11.5, idle 16 x 0.6 = 9.6 -> 9.6 free cores.
DATA_BOUND = dict(gpu_util=30.0, workers=4, worker_cpu=95.0, phases=mix(data_wait=0.5))


def test_cpu_bound_workers_with_free_cores_lead_with_more_workers() -> None:
    d = diagnose_job(RULESET, **DATA_BOUND)
    assert d.top is not None and d.top.id == "workers_cpu_bound"
    assert d.top.actions[0].startswith("Raise num_workers from 4 to ")
    assert d.metrics["free_cores"] == pytest.approx(9.6)
    # 3.5 cores of workers (0.875 each): 9.6 free cores would fit 10 more, but a
    # step at most doubles them ("step by step"): 8 workers.
    assert d.metrics["suggested_workers"] == 8
    gain = d.top.gain
    assert gain.method == "predicted"
    # Capacity x min((3.5 + 9.6) / 3.5, 8 / 4) = 2.0 (x2.2 with the allowance),
    # capped by the ceiling of the share read 3 points too low: 1 / 0.47.
    assert gain.high == pytest.approx(1 / 0.47)
    assert gain.ceiling == pytest.approx(2.0)
    # The low end, under the ceiling of the share read 3 points too high.
    assert gain.low == pytest.approx(min(1 + (2.0 - 1) * 0.7, 1 / 0.53))


def test_saturated_cores_say_more_workers_cannot_help() -> None:
    d = diagnose_job(RULESET, **{**DATA_BOUND, "host_cpu": 99.0})
    assert d.top is not None and d.top.id == "host_cpu_saturated"
    assert d.category == "data_loading"
    assert all("Raise num_workers" not in a for a in d.top.actions)
    assert d.top.actions[-1].startswith("Do not raise num_workers")
    ids = [f.id for f in d.findings]
    assert "workers_cpu_bound" not in ids and "data_wait_dominant" not in ids


def test_storage_leads_when_workers_wait_on_reads() -> None:
    d = diagnose_job(RULESET, gpu_util=30.0, workers=4, worker_cpu=20.0, iowait=25.0,
                     disk_busy=90.0, phases=mix(data_wait=0.5))
    assert d.top is not None and d.top.category == "io"
    assert d.top.id in ("workers_wait_on_reads", "storage_bound_reads", "disk_saturated_reads")
    assert "NVMe" in d.top.actions[0]
    assert any("more DataLoader workers" in a for a in d.top.actions[1:])
    assert "data_wait_dominant" not in [f.id for f in d.findings]


def test_producer_thread_is_named_with_its_hottest_frame() -> None:
    d = diagnose_job(RULESET, workers=0, data_source="thread queue", producer_busy=0.97,
                     busy_threads=2, main_cpu=120.0, phases=mix(data_wait=0.9), gpu=False)
    assert d.top is not None and d.top.id == "producer_bound"
    assert "thread 'producer'" in d.top.title
    assert "produce (/job/train.py:12)" in d.top.why
    # Judged by its CPU (2 busy threads share 120 %: 60 % each), not by py-spy's
    # samples, which count a thread asleep in time.sleep as working.
    assert "works 60% of the time" in d.top.why
    assert "python_overhead" not in [f.id for f in d.findings]


def test_loading_in_the_training_thread_suggests_workers_on_free_cores() -> None:
    d = diagnose_job(RULESET, workers=0, data_source="own code", gpu=False, cpu_count=2,
                     busy_threads=1, main_cpu=100.0, host_cpu=50.0, phases=mix(data_wait=0.6))
    assert d.top is not None and d.top.id == "loading_in_training_process"
    # 1 free core plus the 60 % of the training thread that loading took: 1.6
    # cores, two workers' worth.
    assert d.top.actions[0].startswith("Load in 2 worker process(es)")
    assert "own code" in d.top.why
    # The loaders get 1.6 / 0.6 = 2.7x the capacity; the ceiling of the share read 3
    # points too low binds the high end (1 / 0.37). The low end is what the job's
    # 1 + 1 free cores allow its whole steps (x2, x1.7 at its efficiency), held
    # within x1.5 of the high end.
    assert d.top.gain.method == "predicted"
    assert d.top.gain.high == pytest.approx(1 / 0.37)
    assert d.top.gain.low == pytest.approx(max(1 + (2 - 1) * 0.7, 1 / 0.37 / 1.5 * 1.001))


def test_loading_moved_to_workers_gets_at_most_a_core_per_worker() -> None:
    """An unseen plain loop (num_workers=0, one torch thread, 96 % loading, 0.9 core
    free on 2 cores) measured x1.05 with one worker and x1.76 with two."""
    d = diagnose_job(RULESET, workers=0, gpu=False, cpu_count=2, busy_threads=1,
                     main_cpu=100.0, host_cpu=55.0, phases=mix(data_wait=0.96))
    assert d.top is not None and d.top.id == "loading_in_training_process"
    assert d.metrics["suggested_workers"] == 2.0
    assert d.top.gain.low is not None and d.top.gain.high is not None
    assert d.top.gain.low <= 1.76 <= d.top.gain.high
    assert d.top.gain.high / d.top.gain.low <= 1.5


def test_framework_words_for_hf_trainer_and_lightning() -> None:
    hf = diagnose_job(RULESET, **DATA_BOUND, techniques=("hf_trainer",))
    assert hf.top is not None
    assert hf.top.actions[0].startswith("Raise TrainingArguments(dataloader_num_workers=8)")
    assert all("DataLoader(" not in a for a in hf.top.actions)
    pl = diagnose_job(RULESET, **DATA_BOUND, techniques=("lightning",))
    assert pl.top is not None and "LightningDataModule" in pl.top.actions[0]


def test_amp_advice_only_for_jobs_without_amp() -> None:
    # Its script was read and asks for no mixed precision; none in its stacks.
    without = diagnose_job(RULESET, gpu_util=97.0, techniques=(), amp_in_source=False)
    assert without.top is not None and without.top.id == "gpu_compute_bound"
    assert without.top.actions[0].startswith("Enable automatic mixed precision")
    assert without.hardware_well_used is True
    with_amp = diagnose_job(RULESET, gpu_util=97.0, techniques=("mixed_precision",))
    assert with_amp.top is not None and with_amp.top.id == "gpu_compute_bound_amp"
    assert all("mixed precision" not in a.lower() for a in with_amp.top.actions)
    assert with_amp.top.gain.speedup is None
    # autocast in its source, never caught in a stack sample: it uses AMP.
    in_source = diagnose_job(RULESET, gpu_util=97.0, techniques=(), amp_in_source=True)
    assert in_source.top is not None and in_source.top.id == "gpu_compute_bound_amp"
    # Nothing could be read: the advice says it may already be in use.
    unknown = diagnose_job(RULESET, gpu_util=97.0, techniques=())
    assert unknown.top is not None and unknown.top.actions[0].startswith(
        "If the job does not already use it: enable automatic mixed precision")


def test_threads_thrashing_on_a_shared_core_are_told_to_match_the_cores() -> None:
    d = diagnose_job(RULESET, gpu=False, cpu_count=2, busy_threads=2, main_cpu=100.0,
                     host_cpu=99.0, workers=0, phases=mix(data_wait=0.02, other=0.1))
    assert d.top is not None and d.top.id == "cpu_threads_oversubscribed"
    assert d.top.actions[0].startswith("torch.set_num_threads(1)")
    assert d.hardware_well_used is False


def test_a_ddp_ranks_communication_thread_is_not_a_compute_thread() -> None:
    """A gloo rank with torch.set_num_threads(1): its second busy thread is gloo's."""
    d = diagnose_job(RULESET, gpu=False, cpu_count=2, busy_threads=2, main_cpu=63.0,
                     host_cpu=99.0, workers=0, phases=mix(data_wait=0.0, other=0.02),
                     busy_thread_names=("python", "gloo_tcp_loop"))
    assert d.metrics["main_busy_threads_mean"] == 1.0
    assert "cpu_threads_oversubscribed" not in [f.id for f in d.findings]


def test_cpu_thread_advice_is_not_given_to_a_multi_rank_job() -> None:
    """Two gloo ranks on two cores: the idle core is the other rank's, not free."""
    knobs: dict[str, object] = dict(gpu=False, cpu_count=8, busy_threads=1, main_cpu=100.0,
                                    host_cpu=12.5, workers=0, phases=mix(data_wait=0.02,
                                                                          other=0.18))
    alone = diagnose_job(RULESET, **knobs)
    assert alone.top is not None and alone.top.id == "cpu_compute_underthreaded"
    ranked = diagnose_job(RULESET, local_ranks=2, **knobs)
    assert ranked.metrics["local_ranks"] == 2.0
    assert "cpu_compute_underthreaded" not in [f.id for f in ranked.findings]
    # Nor "other work holds the cores" when that work is the job's other rank.
    held = dict(knobs, cpu_count=2, main_cpu=74.0, host_cpu=99.0)
    alone = diagnose_job(RULESET, **held)
    assert alone.top is not None and alone.top.id == "cpu_compute_contended"
    ranked = diagnose_job(RULESET, local_ranks=2, **held)
    assert "cpu_compute_contended" not in [f.id for f in ranked.findings]


def test_time_outside_the_phases_names_where_it_goes() -> None:
    """An unseen job spent 66 % of its loop in a synchronous metrics call."""
    # The call computes: the training thread is on the CPU most of the time.
    busy: dict[str, object] = {"thread_cpu": (90.0,), "busy_threads": 1}
    d = diagnose_job(RULESET, gpu=False, workers=0, phases=mix(other=0.66), **busy,
                     other_frame=("log_metrics", "logslow.py:9", "logslow.py:17"))
    finding = next(f for f in d.findings if f.id == "python_overhead")
    assert finding.title.startswith(
        "66% of the loop is spent in log_metrics (logslow.py:9), called from logslow.py:17")
    unnamed = diagnose_job(RULESET, gpu=False, workers=0, phases=mix(other=0.66), **busy)
    finding = next(f for f in unnamed.findings if f.id == "python_overhead")
    assert "spent in code outside the recognised phases" in finding.title


def test_a_small_data_wait_never_leads_over_dominant_compute() -> None:
    d = diagnose_job(RULESET, gpu=False, cpu_count=2, busy_threads=2, main_cpu=190.0,
                     host_cpu=99.0, workers=2, phases=mix(data_wait=0.07, other=0.0))
    assert d.category == "compute"
    assert "data_wait_elevated" in [f.id for f in d.findings]


def test_no_prefetch_advice_without_workers() -> None:
    """prefetch_factor needs num_workers > 0: DataLoader and TrainingArguments refuse it."""
    d = diagnose_job(RULESET, gpu=False, workers=0, techniques=("hf_trainer",),
                     phases=mix(data_wait=0.08))
    finding = next(f for f in d.findings if f.id == "data_wait_elevated")
    assert all("prefetch_factor" not in a for a in finding.actions), finding.actions
    assert finding.actions[0].startswith("Load in a worker process: TrainingArguments(")


def test_a_saturated_cpu_job_is_compute_not_no_bottleneck() -> None:
    d = diagnose_job(RULESET, gpu=False, cpu_count=2, busy_threads=2, main_cpu=190.0,
                     host_cpu=99.0, workers=0, phases=mix(data_wait=0.02, other=0.1))
    assert d.category == "compute"
    assert d.top is not None and d.top.id == "cpu_compute_bound"
    assert d.hardware_well_used is True
    assert "well used" in d.hardware


def test_host_sync_on_a_busy_gpu_is_device_time_on_an_idle_one_a_culprit() -> None:
    busy = diagnose_job(RULESET, gpu_util=96.0, phases=mix(sync=0.4, other=0.05))
    assert busy.category == "compute"
    idle = diagnose_job(RULESET, gpu_util=40.0, phases=mix(sync=0.4, other=0.05))
    assert idle.category == "sync"
    assert idle.top is not None and ".item()" in idle.top.title


def test_evaluation_share_is_its_own_finding() -> None:
    d = diagnose_job(RULESET, gpu=False, workers=2, phases=mix(eval=0.6))
    assert d.top is not None and d.top.id == "evaluation_dominates"
    assert d.category == "evaluation"
    assert d.top.actions[0] == "Validate half as often"
    # Half as often leaves 30 % of the time: 1 / (0.4 + 0.3) = 1.43; the high end
    # takes the share read 3 points too low (PHASE_ERROR): 1 / (0.37 + 0.315).
    assert d.top.gain.high == pytest.approx(1 / (0.37 + 0.315))


def test_an_evaluation_share_read_loosely_widens_its_range_both_ways() -> None:
    """Evaluation in blocks of a second every two: the stack windows' spread says the
    pooled share may be 0.10 off, and the range takes it at both ends. CI read a
    job's 0.64 as 0.55 once; halving its evaluations then measured x1.60, past the
    x1.38 that share gave exactly (and the test's slack, x1.15, on top)."""
    spec = GainSpec("fewer", metric="phase_eval_long", times=2)
    tight = estimate_gain(spec, {"phase_eval_long": 0.55}, Facts())
    loose = estimate_gain(spec, {"phase_eval_long": 0.55, "phase_eval_long_error": 0.10},
                          Facts())
    assert tight.high == pytest.approx(1 / (0.42 + 0.29))
    assert loose.high == pytest.approx(1 / (0.35 + 0.325))
    assert loose.low == pytest.approx(1 / (0.55 + 1.2 * 0.45 / 2))
    assert loose.low < tight.low < tight.high < loose.high
    assert loose.high * 1.15 > 1.60
    assert "read to within 10%" in loose.explanation


def test_worker_suggestions_follow_the_free_cores() -> None:
    base = {"num_workers": 2.0, "workers_cpu_mean": 180.0, "phase_data_wait": 0.6}
    assert suggested_workers({**base, "free_cores": 0.2}) == 3.0  # at least one more
    assert suggested_workers({**base, "free_cores": 2.7}) == 4.0  # 3 more fit; doubling caps
    factor, _why = loading_capacity_factor({**base, "free_cores": 0.9}) or (0.0, "")
    assert factor == pytest.approx((1.8 + 0.9) / 1.8)
    gain = estimate_gain(GainSpec("workers"), {**base, "free_cores": 0.0}, Facts())
    assert gain.speedup == 1.0 and "no core is free" in gain.explanation


def test_predicted_ranges_stay_within_one_and_a_half() -> None:
    """The width the issue allows between a prediction's ends (×1.5 at most)."""
    for free in (0.3, 0.9, 2.0, 8.0):
        for p in (0.2, 0.5, 0.9):
            metrics = {"num_workers": 1.0, "workers_cpu_mean": 95.0, "free_cores": free,
                       "phase_data_wait": p}
            gain = estimate_gain(GainSpec("workers"), metrics, Facts())
            assert gain.low is not None and gain.high is not None
            assert gain.high / gain.low <= 1.5, (free, p, gain)


#: A CPU job in the style of a Lightning loop on 2 cores: torch's default 2
#: threads (the training thread and one intra-op thread) computing 35 % of the
#: time, one DataLoader worker 90 % busy in Python, the loop waiting for data
#: 65 %: 0.55 core free on average, none while the step computes.
ONE_SLOW_WORKER = dict(gpu=False, cpu_count=2, host_cpu=72.5, main_cpu=55.0, busy_threads=2,
                       thread_cpu=(30.0, 25.0), workers=1, worker_cpu=90.0,
                       phases=mix(data_wait=0.65))


def test_a_worker_loads_beside_the_whole_step_not_only_while_it_computes() -> None:
    """The cores the compute threads hold while the step computes are theirs only
    then: while the loop waits for data a second worker gets them."""
    d = diagnose_job(RULESET, **ONE_SLOW_WORKER)
    assert d.metrics["free_cores_in_compute"] < 0.5 <= d.metrics["free_cores"]
    assert d.metrics["free_cores_for_loading"] == d.metrics["free_cores"]
    assert d.top is not None and d.top.id == "workers_cpu_bound", [f.id for f in d.findings]
    assert d.top.actions[0].startswith("Raise num_workers from 1 to 2")
    assert "host_cpu_saturated" not in [f.id for f in d.findings]
    # The worker's 0.9 core and 0.55 free: x1.61 the batches at most, under the
    # ceiling of a 65 % data wait. The job's processes use 1.45 cores, so whole
    # steps come at most x1.38 as often where each needs its CPU as now: the low
    # end (a Lightning job of this shape measured x1.14 and x1.09 in a CI run,
    # under a low end of x1.36 that left the step's compute out).
    assert d.top.gain.method == "predicted"
    assert (d.top.gain.low, d.top.gain.high) == pytest.approx((1.27, 1.77), abs=0.01)
    assert "whole steps can come at most 1.38x as often" in d.top.gain.explanation


def test_without_workers_only_the_cores_free_while_the_step_computes_count() -> None:
    """Loading moved out of the training thread leaves it computing all the time."""
    d = diagnose_job(RULESET, **{**ONE_SLOW_WORKER, "workers": 0, "main_cpu": 145.0,
                                  "thread_cpu": (90.0, 55.0)})
    assert d.metrics["free_cores_for_loading"] == d.metrics["free_cores_in_compute"]
    assert d.top is not None and d.top.id == "loading_beside_compute_threads"


def test_a_worker_asleep_on_its_input_is_told_to_add_workers_not_to_prefetch() -> None:
    """A worker that waits (a sleep, a socket) needs no free core to be doubled."""
    d = diagnose_job(RULESET, **{**ONE_SLOW_WORKER, "worker_cpu": 8.0, "worker_cpu_wait": 2.0,
                                  "host_cpu": 100.0, "read_mb_s": 0.0, "disk_read_mb": 0.0})
    assert d.metrics["free_cores"] == 0.0
    assert d.top is not None and d.top.id == "workers_wait_on_input", [f.id for f in d.findings]
    assert d.top.actions[0].startswith("Raise num_workers from 1 to 2")
    ids = [f.id for f in d.findings]
    assert "host_cpu_saturated" not in ids and "data_wait_dominant" not in ids
    # Twice the workers, each hardly using a core: x2 the batches, less contention.
    assert (d.top.gain.low, d.top.gain.high) == pytest.approx((1.7, 2.2))
