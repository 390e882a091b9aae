"""``deploy/systemd/aitop-agent.service``, checked by systemd's own tools, offline.

* ``systemd-analyze verify`` loads the unit as systemd would and must say
  nothing: it exits 0 even for an unknown key or a bad value, so any line it
  prints is a failure. It also requires ``ExecStart``'s program to exist, so the
  unit is verified with that one path pointed at this checkout's ``aitop``.
* ``systemd-analyze security --offline=true`` scores its sandbox; the score must
  stay at "OK" or better, and the unit holds exactly the two capabilities the
  README's security notes name.

This machine runs no systemd as PID 1: the unit is checked, not started.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UNIT = ROOT / "deploy" / "systemd" / "aitop-agent.service"
#: ``systemd-analyze security``'s scale runs 0 (sealed) to 10; up to 4.9 reads "OK".
MAX_EXPOSURE = 4.9
INSTALL = "install Debian's systemd package (apt-get install systemd), as .ci/run does"


def analyze(*args: str) -> subprocess.CompletedProcess[str]:
    path = shutil.which("systemd-analyze")
    if path is None:
        pytest.fail(f"systemd-analyze is not installed: {INSTALL}")
    return subprocess.run([path, *args], capture_output=True, text=True, timeout=60)


def settings(text: str) -> dict[str, list[str]]:
    """Each ``Key=value`` of the unit, in order (keys may repeat)."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.lstrip().startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def test_systemd_loads_the_unit_without_a_word(tmp_path: Path) -> None:
    text = UNIT.read_text()
    [exec_start] = settings(text)["ExecStart"]
    program, _, arguments = exec_start.partition(" ")
    assert (program, arguments) == ("/opt/aitop/bin/aitop", "--serve 0.0.0.0:9400")
    here = Path(sys.executable).parent / "aitop"
    assert here.exists(), here
    local = tmp_path / UNIT.name
    local.write_text(text.replace(f"ExecStart={program} ", f"ExecStart={here} "))
    verified = analyze("verify", str(local))
    assert verified.returncode == 0 and not (verified.stdout + verified.stderr).strip(), (
        verified.stdout + verified.stderr)
    # The check has teeth: a misspelt key is reported (with exit 0).
    typo = tmp_path / "typo" / UNIT.name
    typo.parent.mkdir()
    typo.write_text(local.read_text().replace("ProtectSystem=", "ProtectSystm="))
    assert "Unknown key" in analyze("verify", str(typo)).stderr


def test_the_sandbox_is_scored_ok_and_keeps_two_capabilities() -> None:
    values = settings(UNIT.read_text())
    assert values["CapabilityBoundingSet"] == ["CAP_SYS_PTRACE CAP_DAC_READ_SEARCH"]
    assert values["ProtectSystem"] == ["strict"] and values["NoNewPrivileges"] == ["yes"]
    # Two settings that look like hardening and would blind it: noroot strips root's
    # capabilities on exec; ProtectClock's implied device allow-list shuts NVML out.
    assert "SecureBits" not in values and "ProtectClock" not in values
    assert "DeviceAllow" not in values and values["PrivateDevices"] == ["no"]
    scored = analyze("security", "--offline=true", str(UNIT))
    found = re.search(r"Overall exposure level for \S+: ([\d.]+) (\w+)", scored.stdout)
    assert found is not None, scored.stdout[-2000:] + scored.stderr
    exposure = float(found[1])
    version = analyze("--version").stdout.splitlines()[0]
    print(f"{version}: exposure {exposure} {found[2]}")
    assert exposure <= MAX_EXPOSURE, scored.stdout
