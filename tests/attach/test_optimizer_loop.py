"""A for-loop optimizer step read from its frames: real demo jobs, real py-spy, the CLI.

The jobs train hundreds of small layers with AdamW or SGD as torch builds them
on a CPU (the per-tensor for-loop update), or with ``fused=True``; each times
its own optimizer step (``--truth``). aitop must say which implementation runs,
lead with fusing it where the loop is the share (not with more threads, which
cannot widen the loop), measure the optimizer's share the job measured, and
never tell a fused job to fuse. The predicted gain against the fused run's
measured rate is tests/attach/test_e2e_scenarios.py's (``LEADS``).
"""

from __future__ import annotations

import pytest
from support.jobs import WatchedRun, truth_between
from support.sampling import share_tolerance

pytestmark = [pytest.mark.attach, pytest.mark.alone]


@pytest.mark.parametrize(("scenario", "frame"), [
    ("optimizer_loop", "_single_tensor_adam (torch/optim/adam.py)"),
    ("optimizer_loop_sgd", "_single_tensor_sgd (torch/optim/sgd.py)"),
])
def test_a_for_loop_optimizer_leads_with_its_fused_update(
        scenario: str, frame: str, watched_run: WatchedRun) -> None:
    report = watched_run(scenario).report
    metrics = report["metrics"]
    true = truth_between(watched_run(scenario).truth, *report["phase_span"])
    ids = [f["id"] for f in report["findings"]]
    print(f"{scenario}: {ids}; optimizer {metrics['phase_optimizer']:.3f} (loop "
          f"{metrics['phase_optimizer_loop']:.3f}) vs truth {true['optimizer']:.3f}")
    lead = report["findings"][0]
    assert lead["id"] == "optimizer_for_loop", (ids, lead["title"])
    assert f"({frame})" in lead["title"], lead["title"]
    assert lead["actions"][0].startswith("Create the optimizer with fused=True")
    assert lead["gain_method"] == "predicted"
    # The job's own timer around optimizer.step() and zero_grad() holds the loop.
    share = true["optimizer"]
    allowed = share_tolerance(share, metrics["phase_samples"])
    assert abs(metrics["phase_optimizer"] - share) <= allowed
    # The loop is part of the optimizer's time. Its share of the whole report is
    # not held to the rule's 0.15: the finding held it 5 s (and keeps firing 15 s),
    # and optimizer_loop_sgd's 0.22 reads anywhere from 0.16 to 0.27 over the
    # report's 200 samples.
    assert 0 < metrics["phase_optimizer_loop"] <= metrics["phase_optimizer"]
    assert metrics["uses_fused_optimizer"] == 0 and metrics["optimizer_fusable"] == 1
    # One thread on a machine with a core free: more threads is said too, below it,
    # its ceiling over the compute threads can widen (not the loop).
    if "cpu_compute_underthreaded" in ids:
        assert metrics["phase_parallel_compute"] == pytest.approx(
            metrics["phase_compute"] - metrics["phase_optimizer_loop"], abs=1e-3)


def test_a_fused_optimizer_is_never_told_to_fuse(watched_run: WatchedRun) -> None:
    report = watched_run("optimizer_loop_fixed").report
    metrics = report["metrics"]
    assert metrics["uses_fused_optimizer"] == 1
    assert metrics["phase_optimizer_loop"] == 0
    assert "optimizer_for_loop" not in [f["id"] for f in report["findings"]]
