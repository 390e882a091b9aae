"""Secrets in a real child's environment and command line never leave the probes."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest
from aitop.probes.environment import EnvironmentProbe
from aitop.probes.kernel.procfs import parse_environ
from aitop.probes.process_tree import ProcessTreeProbe
from aitop.probes.redact import (
    REDACTED,
)
from support.workloads.probe_children import start, stop

# ------------------------------------------------------------------ names


@pytest.fixture()
def secret_child() -> Iterator[subprocess.Popen[bytes]]:
    env = dict(os.environ, API_KEY="s3cret-env-value", MY_PASSWORD="hunter2-value")
    code = "import time; print('READY', flush=True); time.sleep(60)"
    proc = start(["-c", code, "--token=s3cret", "--api-key", "s3cret-two"], env=env)
    yield proc
    stop(proc)


def test_real_child_secrets_never_leave_the_probes(
    secret_child: subprocess.Popen[bytes],
) -> None:
    pid = secret_child.pid
    # the secrets really are in /proc, so a missing redaction would show
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        assert b"s3cret" in fh.read()
    with open(f"/proc/{pid}/environ", "rb") as fh:
        raw_env = parse_environ(fh.read())
    assert raw_env["API_KEY"] == "s3cret-env-value"

    tree = ProcessTreeProbe(pid).sample()
    env = EnvironmentProbe(pid).sample()
    for sample in (tree, env):
        text = repr(sample)
        for secret in ("s3cret", "s3cret-two", "s3cret-env-value", "hunter2-value"):
            assert secret not in text
    assert env.env["API_KEY"] == REDACTED and env.env["MY_PASSWORD"] == REDACTED
    assert "--token=***" in env.cmdline
    assert tree.main is not None
    assert tree.main.cmdline[-2:] == ("--api-key", REDACTED)
