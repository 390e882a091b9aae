"""Workers started again every epoch, and a server bound by its own preprocessing:
their metrics, findings and ceilings on synthetic sessions of real samples."""

from __future__ import annotations

import pytest
from aitop.knowledge.base.rules import GainSpec
from aitop.knowledge.judging.diagnosis import Facts, estimate_gain
from support.knowledge import PACKAGED
from support.synthetic import diagnose_job, make_session, metrics_at, mix

RULESET = PACKAGED.rules
CPU_RAN = dict(gpu=False, main_cpu_wait=0.0, busy_threads=1)


def test_worker_restarts_are_new_pids_replacing_stopped_ones() -> None:
    # New workers every 4 ticks: restarts at ticks 24, 28, 32, 36, 40 in (20, 40].
    m = metrics_at(make_session(40, worker_epoch_s=4), 40)
    assert m["worker_restarts"] == 5 and m["worker_restart_every_s"] == pytest.approx(4.0)
    # The same workers all along: no restart; the first workers seen are none.
    steady = metrics_at(make_session(40), 40)
    assert steady["worker_restarts"] == 0 and steady["worker_restart_every_s"] is None


def test_workers_restarted_every_epoch_lead_with_persistent_workers() -> None:
    """Busy workers (their start-up burns CPU) and no core free: without the
    restarts this job reads as CPU-bound loading; the restarts explain it."""
    knobs = dict(worker_epoch_s=3, phases=mix(data_wait=0.85), cpu_count=2, host_cpu=100.0,
                 worker_cpu=95.0, main_cpu=30.0, workers=2, **CPU_RAN)
    d = diagnose_job(RULESET, **knobs)
    lead = d.findings[0]
    assert lead.id == "workers_restart_each_epoch", [f.id for f in d.findings]
    assert lead.title.startswith("DataLoader workers are started again every epoch (")
    assert lead.actions[0].startswith("Keep the workers alive between epochs: "
                                      "DataLoader(..., persistent_workers=True)")
    ids = {f.id for f in d.findings}
    assert not ids & {"data_wait_dominant", "host_cpu_saturated", "workers_cpu_bound"}, ids
    # A ceiling above plain Amdahl's x6.7: the share read with its sampling error.
    assert lead.gain.method == "amdahl" and lead.gain.speedup is not None
    assert lead.gain.speedup > 1 / (1 - 0.85)
    # The same job keeping its workers is told what it was told before.
    kept = diagnose_job(RULESET, **{**knobs, "worker_epoch_s": 0})
    assert "workers_restart_each_epoch" not in {f.id for f in kept.findings}


SERVING = dict(phases=mix(other=0.9, forward=0.08, data_wait=0.02, backward=0.0, optimizer=0.0),
               other_frame=("encode", "/srv/serve.py:60", "/srv/serve.py:131"),
               thread_cpu=(100.0,), cpu_count=4, host_cpu=30.0, main_cpu=100.0, **CPU_RAN)


def test_a_server_building_its_inputs_is_told_to_build_them_off_the_serving_thread() -> None:
    d = diagnose_job(RULESET, **SERVING)
    lead = d.findings[0]
    assert lead.id == "serving_bound_by_preprocessing", [f.id for f in d.findings]
    assert lead.title == ("The server spends 90% of its time building its inputs in encode "
                          "(serve.py:60), called from serve.py:131, 8% in the model: prepare "
                          "them off the serving thread")
    assert "worker processes a batch ahead" in lead.actions[0]
    assert "python_overhead" not in {f.id for f in d.findings}, "explained, not a rival"
    # Free cores: the ceiling is the cores the work can spread over, below x10.
    assert lead.gain.method == "amdahl" and lead.gain.speedup is not None
    assert 1.0 < lead.gain.speedup < 10.0


def test_the_offload_ceiling_is_the_lower_of_amdahl_and_the_cores() -> None:
    spec = GainSpec("offload", metric="phase_other")
    facts = Facts()
    two_cores = estimate_gain(spec, {"phase_other": 0.9, "proc_cpu_mean": 100.0,
                                     "free_cores": 1.0}, facts)
    assert two_cores.speedup == pytest.approx(2.0) and two_cores.method == "amdahl"
    many = estimate_gain(spec, {"phase_other": 0.5, "proc_cpu_mean": 100.0,
                                "free_cores": 6.0}, facts)
    assert many.speedup == pytest.approx(2.0), "Amdahl's 1 / (1 - 0.5)"
    none_free = estimate_gain(spec, {"phase_other": 0.9, "proc_cpu_mean": 100.0,
                                     "free_cores": 0.0}, facts)
    assert none_free.speedup == 1.0 and "no core is free" in none_free.explanation
    unknown = estimate_gain(spec, {"phase_other": 0.9, "proc_cpu_mean": None,
                                   "free_cores": 1.0}, facts)
    assert unknown.speedup is None
