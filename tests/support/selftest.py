"""A fake ``nvidia-smi`` on PATH that answers from a recording of the real one.

The recordings (``selftest_data/smi-*``) are in nvidia-smi's formats, old and new
driver field names among them; the self-test's comparison of NVML with
nvidia-smi is tested against them on machines without a GPU.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from aitop.engine.selftest.model import Check
from aitop.engine.selftest.smi import SmiRun

FIXTURES = Path(__file__).resolve().parent / "selftest_data"

#: The fake nvidia-smi: prints the recorded answer to each kind of query, and
#: refuses field names listed in ``refused-fields.txt`` as a driver that does
#: not know them does.
FAKE_SMI = """\
import sys
from pathlib import Path
FIX = Path({fixtures!r})
args = sys.argv[1:]
refused = FIX / "refused-fields.txt"
if args[0].startswith("--query-gpu="):
    for name in args[0].split("=", 1)[1].split(","):
        if refused.exists() and name in refused.read_text().split():
            print(f'Field "{{name}}" is not a valid field to query.')
            sys.exit(2)
    answer = "query-gpu.csv"
elif args[0].startswith("--query-compute-apps="):
    answer = "compute-apps.csv"
elif args[:3] == ["-q", "-d", "TEMPERATURE"]:
    answer = "temperature.txt"
elif args[0] == "dmon":
    answer = "dmon.txt"
else:
    sys.exit(9)
sys.stdout.write((FIX / answer).read_text())
"""


def fake_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recording: str) -> SmiRun:
    """Put a fake nvidia-smi answering from ``support/selftest_data/<recording>`` on PATH."""
    fixtures = tmp_path / recording
    shutil.copytree(FIXTURES / recording, fixtures)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    script = bindir / "nvidia-smi"
    script.write_text(f"#!{sys.executable}\n" + FAKE_SMI.format(fixtures=str(fixtures)))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    smi = SmiRun.find()
    assert smi is not None and smi.binary == str(script)
    return smi


def by_id(checks: list[Check]) -> dict[str, Check]:
    ids = [c.id for c in checks]
    assert len(ids) == len(set(ids)), f"duplicate check ids: {ids}"
    return {c.id: c for c in checks}
