"""Gradient accumulation under DDP, read from the order of the stack samples.

Real torchrun jobs (2 ranks, gloo, CPU) that step the optimizer once every 2
micro-batches, each micro-batch's backward all-reducing the gradients, or (the
fix) the first inside ``model.no_sync()``. aitop, pointed at the launcher,
must count the backward passes per step the job counts, read the rank's wait
as its own timers do, and lead with accumulating inside no_sync() where every
pass all-reduces, and only there.

The model is sized for the 10-Hz sampling: a token-wise trunk makes each
forward pass longer than a sampling interval (the separator between two
backward passes must be seen), and a 262144-word embedding (67 M parameters,
its gradient the last backward makes) an all-reduce that follows each
backward pass and lasts about as long.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aitop.probes.ranks import find_job
from support.jobs import run_aitop
from support.processes import free_port, started

pytestmark = [pytest.mark.attach, pytest.mark.alone]

ACCUMULATE = 2
SHAPE = ("--accumulate", str(ACCUMULATE), "--tokens", "384", "--trunk", "24", "--batch", "8",
         "--vocab", "262144", "--optimizer", "sgd-momentum")
#: Seconds aitop watches: the first stack windows are short (3 s, then 6 s), a
#: step of two micro-batches takes 2-3 s on a quiet 2-core box, the passes are
#: counted over 4 whole steps, and the finding holds 5 s before it is said.
WATCH_S = 40
#: aitop's communication share against the rank's own timer (tests/attach/test_ranks.py).
COMM_TOLERANCE = 0.05


@dataclass(frozen=True)
class Run:
    report: dict[str, Any]
    truth: Path


def watched(workdir: Path, name: str, extra: Sequence[str]) -> Run:
    truth = workdir / name
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
               f"--master_port={free_port()}", "-m", "aitop.demo.ddp", "--duration", "120",
               "--truth", str(truth), *SHAPE, *extra]
    with started(command) as launcher:
        deadline = time.monotonic() + 90
        while len(find_job(launcher.pid).ranks) < 2 and time.monotonic() < deadline:
            time.sleep(0.3)
        # Past start-up: imports, init_process_group, the all-reduce timed on the side.
        while not (truth / "rank0.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.3)
        result = run_aitop("--pid", str(launcher.pid), "--headless", "--json",
                           "--duration", str(WATCH_S), timeout=180)
    assert result.returncode in (0, 3), result.stderr
    return Run(json.loads(result.stdout), truth)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("accumulation")


@pytest.fixture(scope="module")
def every_pass(workdir: Path) -> Run:
    return watched(workdir, "every-pass", ())


@pytest.fixture(scope="module")
def inside_no_sync(workdir: Path) -> Run:
    return watched(workdir, "no-sync", ("--no-sync",))


def own_timers(run: Run, rank: int) -> dict[str, float]:
    """The rank's own shares and counts between aitop's first stack window and its end."""
    records = [json.loads(line) for line in (run.truth / f"rank{rank}.jsonl").read_text()
               .splitlines()]
    start, end = run.report["attached_at"] + 3.0, run.report["evaluated_at"]
    inside = [r for r in records if start <= r["t"] <= end]
    assert len(inside) >= 2, f"too few truth records for rank {rank}"
    a, b = inside[0], inside[-1]
    elapsed = b["t"] - a["t"]
    out = {k: (b[k] - a[k]) / elapsed for k in ("data_wait", "compute", "comm", "allreduce")}
    # Over the whole run: a span cut mid-step holds a pass more or fewer.
    out["passes_per_step"] = records[-1]["backward_passes"] / max(records[-1]["steps"], 1)
    return out


def test_accumulation_that_all_reduces_every_pass_is_told_to_use_no_sync(
        every_pass: Run) -> None:
    report = every_pass.report
    metrics = report["metrics"]
    truth = own_timers(every_pass, 0)
    ids = [f["id"] for f in report["findings"]]
    print(f"findings {ids}; passes {metrics['backward_per_step']} (truth "
          f"{truth['passes_per_step']:.2f}), ratio {metrics['last_backward_ratio']}; comm "
          f"{metrics['comm_share']} (wait {truth['comm']:.3f}, all-reduce timed on the side "
          f"{truth['allreduce']:.3f}); phases {report['phases']}; pending {report['pending']}")
    assert truth["passes_per_step"] == pytest.approx(ACCUMULATE, abs=0.2)
    # The wait inside backward is read as the rank's own clock reads it.
    for rank in report["ranks"]:
        own = own_timers(every_pass, int(rank["label"].split()[-1]))
        assert abs(rank["comm_share"] - own["comm"]) <= COMM_TOLERANCE, (rank, own)
    lead = report["findings"][0]
    if lead["id"] != "accumulation_without_no_sync":
        # A miss, never a wrong count behind a finding: the passes were counted
        # otherwise than the job's two (one CI run read 1: the second pass's
        # forward between the two backward runs unseen; docs/diagnosis.md), or
        # counted right only as the watch ended, the finding then still held
        # back by its for: (one CI run: 2 passes, x1.24, 27 % waiting, the
        # wait led); and the wait is said as what it is, with no accumulation figure.
        # Or the last pass read 1.5x the others or more, where rules.yaml's
        # every_backward_syncs cannot tell this job from one inside no_sync():
        # on a CPU rank the last pass also adds into the gradients the first
        # left (a 67 M-parameter embedding's), so it runs longer even where
        # every pass all-reduces (CI runs read 0.73-1.59; docs/diagnosis.md).
        late = any(p.startswith(f"Each optimizer step accumulates {ACCUMULATE} backward")
                   for p in report["pending"])
        ratio = metrics["last_backward_ratio"]
        assert (late or metrics["backward_per_step"] != ACCUMULATE
                or ratio is None or ratio >= 1.5), report["pending"]
        assert lead["id"] in ("ranks_wait_for_each_other", "communication_dominates"), ids
        return
    # The count the finding was said with is in its title (its metrics may have
    # gone unread in the last window while it is kept by its keep_firing_for).
    assert metrics["backward_per_step"] in (None, ACCUMULATE)
    assert lead["title"].startswith(f"Each optimizer step accumulates {ACCUMULATE} backward "
                                    "passes and every one all-reduces the gradients")
    assert "model.no_sync()" in lead["actions"][0]
    # A ceiling over all the exchange may cost, above what the wait alone would give.
    assert lead["gain_method"] == "amdahl"
    low, high = lead["est_speedup_range"]
    assert 1.0 < low < high == lead["gain_ceiling"]
    # The waits it causes are its symptoms, not rivals.
    assert not {"ranks_wait_for_each_other", "communication_dominates"} & set(ids)


def test_accumulation_inside_no_sync_is_not_told_to_use_it(inside_no_sync: Run) -> None:
    report = inside_no_sync.report
    metrics = report["metrics"]
    truth = own_timers(inside_no_sync, 0)
    ids = [f["id"] for f in report["findings"]]
    print(f"findings {ids}; passes {metrics['backward_per_step']} (truth "
          f"{truth['passes_per_step']:.2f}), ratio {metrics['last_backward_ratio']}; comm "
          f"{metrics['comm_share']} (wait {truth['comm']:.3f})")
    assert "accumulation_without_no_sync" not in ids
    # Where the passes were counted and the rank waits a fifth of its time, the
    # last pass alone waits for the all-reduce: 1.5x the others at least (the
    # arithmetic in rules.yaml's every_backward_syncs). With less waiting the
    # passes differ less (one CI run: 1.45 at a 12 % wait), and the rule's
    # rank_waits keeps the finding silent.
    if metrics["backward_per_step"] is not None:
        assert metrics["backward_per_step"] == ACCUMULATE
        if metrics["comm_share"] >= 0.2:
            assert metrics["last_backward_ratio"] >= 1.5
