"""The job's own files, read through /proc/PID/root: does it use mixed precision?"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from aitop.probes.job_source import mixed_precision_in_source
from support.processes import stop_tree, wait_until

pytestmark = pytest.mark.attach

SCRIPTS = {
    "plain": "import time\nx = 1\ntime.sleep(60)\n",
    "autocast": ("import time\nimport contextlib\n"
                 "ctx = contextlib.nullcontext  # torch.autocast(device_type='cuda', "
                 "dtype=torch.bfloat16)\ntime.sleep(60)\n"),
}


def running(tmp_path: Path, script: str, *args: str) -> subprocess.Popen[bytes]:
    path = tmp_path / f"{script}.py"
    path.write_text(SCRIPTS[script])
    # A relative path, as people start scripts: read from the job's own cwd.
    proc = subprocess.Popen([sys.executable, path.name, *args], cwd=tmp_path,
                            stdin=subprocess.DEVNULL)
    assert wait_until(lambda: Path(f"/proc/{proc.pid}/cmdline").read_bytes().count(b"\0") >= 2,
                      timeout=10)
    return proc


@pytest.mark.parametrize(("script", "args", "expected"), [
    ("plain", (), False),
    ("autocast", (), True),
    # A Hugging Face style flag, or a config file that asks for it.
    ("plain", ("--bf16",), True),
    ("plain", ("--config", "train.yaml"), True),
])
def test_mixed_precision_is_read_from_the_jobs_script_config_and_flags(
    tmp_path: Path, script: str, args: tuple[str, ...], expected: bool,
) -> None:
    (tmp_path / "train.yaml").write_text("trainer:\n  precision: bf16-mixed\n")
    proc = running(tmp_path, script, *args)
    try:
        cmdline = tuple(a.decode() for a in
                        Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0") if a)
        assert mixed_precision_in_source(proc.pid, cmdline) is expected
    finally:
        stop_tree(proc, timeout=5)


def test_a_job_without_a_script_on_its_command_line_is_unknown() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            stdin=subprocess.DEVNULL)
    try:
        cmdline = (sys.executable, "-c", "import time; time.sleep(60)")
        assert mixed_precision_in_source(proc.pid, cmdline) is None
    finally:
        stop_tree(proc, timeout=5)


def test_a_fifo_named_on_the_command_line_is_not_waited_on(tmp_path: Path) -> None:
    """``--config cfg.yaml`` that is a named pipe nobody writes: skipped, never read."""
    import os

    os.mkfifo(tmp_path / "cfg.yaml")
    proc = running(tmp_path, "plain", "--config", "cfg.yaml")
    try:
        cmdline = (sys.executable, "plain.py", "--config", "cfg.yaml")
        # The script is read (no mixed precision in it); the pipe is passed over.
        assert mixed_precision_in_source(proc.pid, cmdline) is False
    finally:
        stop_tree(proc, timeout=5)
