"""GPU utilisation has one definition: the rules, the key-metrics table and the Ranks panel agree.

Unit-level, on the fixture session (two GPUs, the target on GPU 0 only).
"""

from __future__ import annotations

import dataclasses

from aitop.engine.reports.key_metrics import gpu_utilization
from aitop.knowledge.metrics.gpu import gpu_util, gpu_util_over
from aitop.knowledge.metrics.window import compute_metrics
from aitop.probes.samples import GpuSample
from support.knowledge import HELPER_THREADS, PACKAGED
from support.tui_session import NOW, build_session, gpu

WINDOW_S = 20.0


def test_utilisation_is_the_mean_of_the_targets_gpus_else_of_every_healthy_one() -> None:
    sample = gpu(10, count=2)  # GPU 0 the target's, GPU 1 busy with someone else's work
    own = sample.devices[0].util_percent
    assert own is not None and gpu_util(sample) == own
    nobody = dataclasses.replace(sample, devices=tuple(
        dataclasses.replace(d, processes=()) for d in sample.devices))
    assert gpu_util(nobody) == (own + 95.0) / 2
    lost = dataclasses.replace(nobody, devices=(
        nobody.devices[0], dataclasses.replace(nobody.devices[1], lost=True)))
    assert gpu_util(lost) == own
    assert gpu_util(GpuSample(t=0.0, available=False)) is None


def test_the_key_metric_reads_what_the_rules_read_before_and_after_a_diagnosis() -> None:
    session = build_session(gpus=2)
    rules = compute_metrics(session, NOW, WINDOW_S, HELPER_THREADS)["gpu_util_mean"]
    assert rules is not None
    assert rules == gpu_util_over(session.gpu.window(NOW - WINDOW_S, NOW))
    # Without a diagnosis yet, the key-metrics table computes the same number.
    reading = gpu_utilization(session, None, NOW, WINDOW_S, PACKAGED.facts.targets)
    assert reading.display == f"{rules:.0f}% mean"
