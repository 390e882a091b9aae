"""``aitop selftest`` as a command: the CPU path, usage errors, the GPU jobs'
command line, and a fake GPU with py-spy on a real process."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from aitop.engine import cli
from aitop.engine.selftest.model import FAIL, PASS, SKIP
from aitop.engine.selftest.run import Plan, Selftest
from support.fake_nvml import make_fake
from support.selftest import by_id, fake_smi

ROOT = Path(__file__).resolve().parents[2]

# ------------------------------------------------------------------ helpers

def test_cpu_path_says_so_in_one_line_exits_0_and_writes_both_reports(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-m", "aitop.tui", "selftest", "--gpu", "--out", str(out)],
        capture_output=True, text=True, timeout=240, cwd=tmp_path, stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout
    assert lines[0].startswith("aitop selftest: no NVIDIA GPU here (")
    assert str(out / "selftest.md") in lines[0]
    assert "Traceback" not in result.stderr
    report = json.loads((out / "selftest.json").read_text())
    assert report["schema"] == "aitop.selftest/1"
    assert report["mode"] == "cpu" and report["ok"] is True
    assert report["no_gpu_reason"]
    checks = {c["id"]: c for c in report["checks"]}
    for ran in ("nvml.absent", "pyspy.attach", "jobs.help", "jobs.no_cuda",
                "cli.headless_no_gpu"):
        assert checks[ran]["status"] == PASS, checks[ran]
    for skipped in ("nvml.compare", "gpm.available", "matmul.run", "data.run", "item.run",
                    "memory.run", "matmul.overhead", "pcie.rx"):
        assert checks[skipped]["status"] == SKIP
        assert checks[skipped]["detail"].startswith("no NVIDIA GPU: ")
    assert report["summary"]["fail"] == 0
    markdown = (out / "selftest.md").read_text()
    assert markdown.startswith("# aitop selftest --gpu\n\n**PASS**")
    assert "| Python |" in markdown and "## Job `item`" in markdown
    assert (out / "raw" / "aitop-no-gpu.report.json").is_file()


def test_selftest_without_gpu_flag_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["selftest"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["aitop: selftest needs --gpu (the GPU self-test is the only one so far)"]


def test_unwritable_out_dir_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert cli.main(["selftest", "--gpu", "--out", str(blocker / "sub")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("aitop: cannot create the report directory")


def test_gpu_jobs_help_and_no_cuda_exit() -> None:
    helped = subprocess.run([sys.executable, "-m", "aitop.demo.gpu_jobs", "--help"],
                            capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and "--job {matmul,data,item,memory,pcie}" in helped.stdout
    ran = subprocess.run([sys.executable, "-m", "aitop.demo.gpu_jobs", "--job", "data",
                          "--duration", "1"], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 3
    assert ran.stderr.count("\n") == 1 and ran.stderr.startswith("gpu_jobs: CUDA is not available")
    info = subprocess.run([sys.executable, "-m", "aitop.demo.gpu_jobs", "--info"],
                          capture_output=True, text=True, timeout=120)
    facts = json.loads(info.stdout)
    assert facts["cuda_available"] is False and facts["devices"] == []


def test_gpu_path_on_the_fake_nvml_without_cuda_compares_the_idle_gpu_and_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A GPU but a PyTorch without CUDA: NVML is still checked against nvidia-smi
    (idle), the jobs cannot run, and that is a failure, not a skip."""
    fake_smi(tmp_path, monkeypatch, "smi-healthy")
    (tmp_path / "out" / "raw").mkdir(parents=True)
    progress = io.StringIO()
    test = Selftest(tmp_path / "out", Plan.make(True), progress, nvml=make_fake("healthy"))
    result = test.run()
    assert result.mode == "gpu" and result.no_gpu_reason is None and not result.ok
    assert result.machine["GPU"] == "NVIDIA H100 80GB HBM3"
    assert result.machine["NVIDIA driver"] == "570.86.15"
    assert result.machine["CUDA available to torch"] is False
    checks = by_id(result.checks)
    assert checks["jobs.cuda"].status == FAIL
    assert checks["pyspy.attach"].status == PASS
    nvml = {i: c.status for i, c in checks.items() if i.startswith("nvml.")}
    assert set(nvml.values()) == {PASS}, nvml
    assert "nvml.driver_version" in nvml and "nvml.util_percent" in nvml
    assert "nvml.process_memory" not in nvml  # no job, no PID to look for
    assert "py-spy on a plain Python process" in progress.getvalue()
    assert (tmp_path / "out" / "raw" / "nvidia-smi-query-gpu.txt").read_text().startswith("0, ")
