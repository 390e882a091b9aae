"""Secrets in the target's environment and command line never leave aitop."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.jobs import run_aitop

pytestmark = pytest.mark.attach

SECRETS = ("hf_Zq9SECRETvalue1234", "s3cr3t-cli-token", "db-pa55word")


def test_secrets_are_redacted_in_report_and_exports(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "HF_TOKEN": SECRETS[0],
        "DATABASE_PASSWORD": SECRETS[2],
        "NCCL_SOCKET_IFNAME": "eth0",
    }
    target = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", f"--token={SECRETS[1]}"],
        env=env,
    )
    export = tmp_path / "run.json"
    try:
        time.sleep(0.5)
        result = run_aitop(
            "--pid", str(target.pid), "--headless", "--json", "--duration", "3",
            "--export", str(export),
        )
    finally:
        target.kill()
        target.wait()
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    outputs = {
        "report": result.stdout + result.stderr,
        "snapshot": export.read_text(),
        "markdown": export.with_suffix(".md").read_text(),
    }
    for name, text in outputs.items():
        for secret in SECRETS:
            assert secret not in text, f"{secret!r} leaked into the {name}"
    assert report["environment"]["env"]["NCCL_SOCKET_IFNAME"] == "eth0"
    assert any("--token=" in arg for arg in report["target"]["cmdline"])
