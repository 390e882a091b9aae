"""The node agent with exactly the capabilities deploy/ gives it, on another user's job.

The DaemonSet and the systemd unit run aitop as root holding only the
capabilities they name (read from the DaemonSet here, so the manifest and this
test cannot part). Such an agent must watch a job that runs as another user and
name it as the fleet joins it: ``job_id`` and ``rank`` come from the job's
``/proc/PID/environ``, which belongs to the job's user (mode 0400).
"""

from __future__ import annotations

import os
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from support.processes import start_logged, stop_tree, wait_until
from support.prometheus import start_serve, stop_process

from benchmarks.jobs import LIGHT_JOB

pytestmark = pytest.mark.attach

DAEMONSET = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "daemonset.yaml"
NOBODY = "65534"


def manifest_capabilities() -> list[str]:
    [container] = yaml.safe_load(DAEMONSET.read_text())["spec"]["template"]["spec"]["containers"]
    security = container["securityContext"]
    assert security["capabilities"]["drop"] == ["ALL"]
    return list(security["capabilities"]["add"])


def up_series(address: str) -> list[dict[str, str]]:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as response:
        text = response.read().decode()
    return [dict(s.labels) for f in text_string_to_metric_families(text) if f.name == "aitop_up"
            for s in f.samples if s.value == 1.0]


def test_the_manifests_capabilities_watch_another_users_job(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    capabilities = manifest_capabilities()
    env = {**os.environ, "TORCHELASTIC_RUN_ID": f"caps-{tmp_path.name}", "RANK": "3",
           "LOCAL_RANK": "1", "GROUP_RANK": "1"}
    job = start_logged(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                        sys.executable, "-c", LIGHT_JOB, str(tmp_path)], env=env)
    agent = None
    try:
        agent, address = start_serve(None, "--match", str(tmp_path), capabilities=capabilities)
        seen = wait_until(lambda: up_series(address), timeout=60)
        assert seen, f"not watched with {capabilities}"
        series = up_series(address)
        print(f"root with {capabilities} only, watching uid {NOBODY}'s job: {series}")
        # Named from its environment (without it: a digest of its command line).
        assert {s["job_id"] for s in series} == {env["TORCHELASTIC_RUN_ID"]}, series
        assert ("3", "1") in {(s["rank"], s["node_rank"]) for s in series}, series
    finally:
        stop_tree(job)
        code = stop_process(agent) if agent is not None else 0
    assert code == 0
