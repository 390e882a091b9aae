"""The demo jobs are built as designed: settings, fixed variants, data on disk.

aitop's diagnosis tests are only as good as their jobs. That each new job has
the shape it was designed to have, by its own timers, is checked on the runs
aitop watches (tests/test_e2e_culprits.py). Here: the fixed variants must change
exactly one setting of their base scenario, so that a benchmark comparing
predicted and measured speed-ups measures the fix and nothing else; the storage
job's data is on a real disk and gone after SIGTERM; the generator loop keeps no
counter.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import signal
import subprocess
import sys
import typing
from pathlib import Path

import pytest
from aitop.demo import FIXED_VARIANTS, SCENARIOS
from aitop.demo.config import CONFIGS, USABLE_CORES, Config, with_overrides
from aitop.demo.diskdata import MEMORY_FILE_SYSTEMS, file_system_type, real_disk_parent
from support.jobs import start_job, stop_job

#: Base scenario -> the one Config field its fixed variant changes.
FIXED_SETTING = {"data": "num_workers", "checkpoint": "checkpoint_every", "compute": "threads",
                 "recompile": "dynamic_shapes", "epoch_workers": "persistent_workers",
                 "serving_preprocess": "preprocess_workers",
                 "optimizer_loop": "optimizer_impl", "optimizer_loop_sgd": "optimizer_impl",
                 "quota": "cpu_quota", "fit_loop": "num_workers",
                 "recompute": "checkpoint_activations"}
#: The fixed value of each setting; the first three can be given on the command line.
FIXED_VALUE = {"recompile": True, "epoch_workers": True, "serving_preprocess": 2,
               "recompute": False}


def test_storage_data_is_on_a_real_disk_and_removed_on_sigterm(tmp_path: Path) -> None:
    """The data file is made beside the checkpoints, or where a block device is
    when they are in memory, and SIGTERM (as ``aitop demo`` sends it) leaves
    nothing behind."""
    where = real_disk_parent(tmp_path)
    assert file_system_type(where) not in MEMORY_FILE_SYSTEMS
    before = set(where.glob("aitop-demo-data-*"))
    job = start_job("storage", tmp_path / "storage.jsonl", duration_s=60.0)
    try:
        made = set(where.glob("aitop-demo-data-*")) - before
        assert len(made) == 1, made
        data = next(iter(made)) / "samples.bin"
        assert data.stat().st_size >= 64 << 20
        job.send_signal(signal.SIGTERM)
        assert job.wait(timeout=20) == 130
    finally:
        stop_job(job)
    assert not set(where.glob("aitop-demo-data-*")) - before


def test_generator_loop_keeps_no_step_counter() -> None:
    """aitop reads steps/s from an integer counter in the loop's frame; this job
    must leave it none to find (no step, i, idx, ... and no int at all)."""
    from aitop.demo import workload

    names: set[str] = set()
    for function in (workload.train_streaming, workload.batches):
        tree = ast.parse(inspect.getsource(function).strip())
        names |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        names |= {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}
    assert not names & {"step", "steps", "i", "idx", "it", "iteration", "batch_idx", "epoch"}
    # Nor a whole-number argument, which py-spy would show as an int.
    hints = typing.get_type_hints(workload.train_streaming)
    hints.pop("return")
    assert int not in hints.values() and "duration_s" not in hints, hints


def test_scenarios_and_configs_agree() -> None:
    assert SCENARIOS[:4] == ("data", "compute", "checkpoint", "healthy")
    assert set(SCENARIOS) == set(CONFIGS)
    for base, fixed in FIXED_VARIANTS.items():
        assert base in SCENARIOS and fixed in SCENARIOS


def test_cpu_saturated_has_a_worker_per_core() -> None:
    cfg = CONFIGS["cpu_saturated"]
    assert cfg.num_workers == USABLE_CORES
    assert cfg.threads >= 1 and cfg.decode_clock == "cpu"  # the main process trains too


@pytest.mark.parametrize("base", list(FIXED_VARIANTS))
def test_fixed_variant_changes_only_its_setting(base: str) -> None:
    before, after = CONFIGS[base], CONFIGS[FIXED_VARIANTS[base]]
    changed = {f.name for f in dataclasses.fields(Config)
               if getattr(before, f.name) != getattr(after, f.name)}
    assert changed == {FIXED_SETTING[base]}
    if base in FIXED_VALUE:  # a setting of the job's own loop, not a command-line override
        assert getattr(after, FIXED_SETTING[base]) == FIXED_VALUE[base]
        return
    expected = {"data": 2, "checkpoint": 4 * before.checkpoint_every, "compute": USABLE_CORES,
                "optimizer_loop": "fused", "optimizer_loop_sgd": "fused",
                "quota": 2.0, "fit_loop": 2}
    assert getattr(after, FIXED_SETTING[base]) == expected[base]
    if FIXED_SETTING[base] == "cpu_quota":
        return  # a job does not give itself a quota: whoever starts it makes the group
    # The same fix, given on the command line, is the same job.
    assert with_overrides(before, **{FIXED_SETTING[base]: expected[base]}) == after


def test_the_quota_job_is_sized_to_the_machine_and_its_variant_to_the_quota() -> None:
    cfg, sized = CONFIGS["quota"], CONFIGS["quota_sized"]
    assert (cfg.threads, cfg.num_workers, cfg.cpu_quota) == (USABLE_CORES, USABLE_CORES, 1.0)
    assert (sized.threads, sized.num_workers, sized.cpu_quota) == (1, 1, 1.0)


def test_overrides_keep_what_is_not_given() -> None:
    cfg = CONFIGS["data"]
    assert with_overrides(cfg) == cfg
    assert with_overrides(cfg, threads=0) == dataclasses.replace(cfg, threads=0)
    with pytest.raises(ValueError, match="--num-workers"):
        with_overrides(cfg, num_workers=-1)


def test_help_documents_the_overrides() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "aitop.demo.workload", "--help"],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr
    for option in ("--num-workers", "--checkpoint-every", "--threads", "cpu_saturated",
                   "data_fixed"):
        assert option in result.stdout
