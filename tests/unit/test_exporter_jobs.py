"""One scrape holding several jobs: each job's series under its identity, nothing stale."""

from __future__ import annotations

import dataclasses

import pytest
from aitop.engine.prometheus.exporter import AitopCollector, Frame, WatchInfo, _Families
from aitop.knowledge.base.findings import Diagnosis
from aitop.knowledge.reading.loader import load_knowledge_base
from aitop.probes.job_identity import Identity
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families
from support.synthetic import RANK0_CHECKPOINT

NOW = 1_800_000_000.0


def frame(pid: int, identity: Identity, steps: int) -> Frame:
    return Frame(published_at=NOW, attached_at=NOW - 30, target_pid=pid, target_alive=True,
                 diagnosis=None, gpu=None, environment=None,
                 stack_samples=(("data_wait", steps), ("forward", 2 * steps)),
                 steps_total=steps, identity=identity.labels())


def scrape(collector: AitopCollector) -> dict[str, list[tuple[dict[str, str], float]]]:
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {f.name: [(s.labels, s.value) for s in f.samples]
            for f in text_string_to_metric_families(text)}


def collector() -> AitopCollector:
    return AitopCollector(self_cpu_seconds=lambda: 1.5, self_rss_bytes=lambda: 10,
                          clock=lambda: NOW)


def test_each_jobs_series_carry_its_identity_and_an_ended_job_leaves_the_next_scrape() -> None:
    a = Identity("run-a", "node-1", rank="0", local_rank="0", node_rank="0")
    b = Identity("5d41402abc4b", "node-1")
    exporter = collector()
    infos = [WatchInfo(a.labels(), 10, ("torchrun", "train.py"), "watched"),
             WatchInfo(b.labels(), 20, ("python", "serve.py", "--token=hf_SECRETabc123456789"),
                       "watched"),
             WatchInfo(Identity("9f86d081884c", "node-1").labels(), 30, ("python", "x.py"),
                       "not_watched", "owned by another user (uid 1001)")]
    exporter.publish_jobs([frame(11, a, 5), frame(20, b, 7)], infos, {"jobs": 2.0})
    metrics = scrape(exporter)
    steps = {labels["job_id"]: value for labels, value in metrics["aitop_training_steps"]}
    assert steps == {"run-a": 5.0, "5d41402abc4b": 7.0}
    up = {labels["job_id"]: (labels["rank"], value) for labels, value in metrics["aitop_up"]}
    assert up == {"run-a": ("0", 1.0), "5d41402abc4b": ("", 1.0)}
    info = {labels["job_id"]: labels for labels, _ in metrics["aitop_job_info"]}
    assert info["9f86d081884c"]["status"] == "not_watched"
    assert "another user" in info["9f86d081884c"]["reason"]
    assert "hf_SECRET" not in info["5d41402abc4b"]["command"]
    assert metrics["aitop_agent_jobs"] == [({}, 2.0)]
    # aitop's own cost is the agent's, once, not per job.
    assert metrics["aitop_self_cpu_seconds"] == [({}, 1.5)]
    # Job a ended: the next scrape has no series of it at all.
    exporter.publish_jobs([frame(20, b, 9)], infos[1:], {"jobs": 1.0})
    after = scrape(exporter)
    ids = {labels.get("job_id") for samples in after.values() for labels, _ in samples}
    assert "run-a" not in ids and "5d41402abc4b" in ids


def test_a_node_with_no_jobs_serves_the_agent_and_no_job_series() -> None:
    exporter = collector()
    exporter.publish_jobs([], [], {"jobs": 0.0})
    metrics = scrape(exporter)
    assert "aitop_up" not in metrics and metrics["aitop_agent_jobs"] == [({}, 0.0)]


def test_one_family_cannot_mix_label_names() -> None:
    families = _Families()
    families.add(GaugeMetricFamily, "aitop_x", "x", (("job_id", "a"),), {"phase": "f"}, 1.0)
    with pytest.raises(ValueError, match="label names"):
        families.add(GaugeMetricFamily, "aitop_x", "x", (("job_id", "b"),), {"rule": "r"}, 1.0)


def test_a_findings_title_is_stable_while_it_fires() -> None:
    from aitop.engine.prometheus.exporter import stable_title

    title = "Data loading is the bottleneck: {phase_data_wait:.0%} of the step waits ({n} s)"
    assert stable_title(title) == "Data loading is the bottleneck: … of the step waits (… s)"
    assert stable_title("No figures") == "No figures"


def test_a_finding_kept_firing_after_its_condition_stopped_holding_says_so() -> None:
    rules = tuple(r for r in load_knowledge_base().rules.rules if r.id == "checkpoint_stalls")
    identity = Identity("run-a", "node-1").labels()
    series = []
    for last_held_at in (None, NOW - 5):
        finding = dataclasses.replace(RANK0_CHECKPOINT, last_held_at=last_held_at)
        diagnosis = Diagnosis(t=NOW, window_s=20.0, category="io", summary=finding.title,
                              compute_device="cpu", findings=(finding,))
        exporter = collector()
        exporter.publish(Frame(published_at=NOW, attached_at=NOW - 30, target_pid=7,
                               target_alive=True, diagnosis=diagnosis, gpu=None,
                               environment=None, rules=rules, identity=identity))
        series.append(scrape(exporter))
    holding, held = ([v for _labels, v in s["aitop_finding_condition_holding"]] for s in series)
    assert holding == [1.0] and held == [0.0]
    assert [v for _labels, v in series[1]["aitop_finding_firing"]] == [1.0]
