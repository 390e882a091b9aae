"""Activation checkpointing's second forward pass is backward's cost, and is named.

The demo's ``recompute`` job is compute's loop with every hidden layer run
through ``torch.utils.checkpoint`` (non-reentrant), the fused update and a torch
thread per core, on a machine with far more memory free than checkpointing
saves. Its forward runs again inside backward, beneath the autograd engine's
unpack hook: aitop must count it in backward, as the job's own timer around
``loss.backward()`` does (an unseen job had read forward 35-46 % against its own
22.5 %), and say that checkpointing costs that share here for memory the job
does not need. ``recompute_fixed`` (no checkpointing) must not be told so.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.jobs import truth_between, watched
from support.sampling import share_tolerance

pytestmark = pytest.mark.attach


def test_the_recomputed_forward_is_backward_and_its_share_is_named(tmp_path: Path) -> None:
    run = watched("recompute", tmp_path)
    report = run.report
    own = truth_between(run.truth, *report["phase_span"])
    phases, metrics = report["phases"], report["metrics"]
    ids = [f["id"] for f in report["findings"]]
    print(f"findings {ids}; phases {phases}; recompute {metrics['phase_recompute']}; "
          f"own {own}")
    samples = metrics["phase_samples"]
    for phase in ("forward", "backward"):
        allowed = share_tolerance(own[phase], samples, 0.08)
        assert abs(phases[phase] - own[phase]) <= allowed, (phase, phases, own)
    # The second forward pass is part of backward's time, and a share of its own.
    assert 0.1 <= metrics["phase_recompute"] <= phases["backward"]
    finding = next((f for f in report["findings"] if f["id"] == "activation_recompute"), None)
    assert finding is not None, ids
    assert finding["actions"][0].startswith("Checkpoint fewer blocks, or none")
    assert finding["gain_method"] == "predicted", finding["gain_explanation"]
    low, high = finding["est_speedup_range"]
    assert 1.0 < low < high <= 1.5 * low


def test_a_job_without_checkpointing_is_not_told_to_checkpoint_less(tmp_path: Path) -> None:
    report = watched("recompute_fixed", tmp_path).report
    assert report["metrics"]["phase_recompute"] == 0
    assert "activation_recompute" not in [f["id"] for f in report["findings"]]
