"""A real Prometheus server and promtool for the exporter and alert-rule tests.

Debian's ``prometheus`` package has both (the README's test command installs it
where ``prometheus``/``promtool`` are missing). Without them the tests fail and
say what to install: they are never skipped.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.processes import free_port

INSTALL = "install Debian's prometheus package (apt-get install prometheus), as the README's " \
          "test command does"


def tool(name: str) -> str:
    """The path of ``prometheus`` or ``promtool``; fails the test loudly if missing."""
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: {INSTALL}")
    return path


def http_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


class PrometheusServer:
    """``prometheus`` on a loopback port, scraping ``targets`` every second."""

    def __init__(self, workdir: Path, targets: list[str], rule_files: Sequence[Path] = (),
                 scrape: Mapping[str, Any] | None = None) -> None:
        """``scrape``: more of the scrape job's settings (``scheme``, ``tls_config``,
        ``basic_auth``, ...)."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        job = {"job_name": "aitop", "static_configs": [{"targets": targets}], **(scrape or {})}
        config = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                       "evaluation_interval": "1s"},
            "rule_files": [str(p) for p in rule_files],
            "scrape_configs": [job],
        }
        config_path = workdir / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(config))
        self.log = workdir / "prometheus.log"
        self.process = subprocess.Popen(
            [tool("prometheus"), f"--config.file={config_path}",
             f"--storage.tsdb.path={workdir / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log.open("wb"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"prometheus exited: {self.log.read_text()[-2000:]}")
            with contextlib.suppress(OSError), \
                    urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:
                if r.status == 200:
                    return
            time.sleep(0.2)
        self.stop()
        pytest.fail(f"prometheus did not get ready in 30 s: {self.log.read_text()[-2000:]}")

    def api(self, path: str, **params: object) -> Any:
        query = urllib.parse.urlencode({k: str(v) for k, v in params.items()})
        body = http_json(f"{self.url}/api/v1/{path}?{query}")
        assert body["status"] == "success", body
        return body["data"]

    def query(self, promql: str, at: float | None = None) -> list[dict[str, Any]]:
        params: dict[str, object] = {"query": promql}
        if at is not None:
            params["time"] = at
        return list(self.api("query", **params)["result"])

    def alerts(self) -> list[dict[str, Any]]:
        return list(self.api("alerts")["alerts"])

    def wait_for(self, promql: str, timeout: float = 60.0) -> list[dict[str, Any]]:
        """The query's result once it is non-empty (fails after ``timeout``)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            result = self.query(promql)
            if result:
                return result
            time.sleep(0.5)
        pytest.fail(f"no result for {promql} within {timeout:.0f} s; "
                    f"targets: {self.api('targets')}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


#: Put on PYTHONPATH with ``AITOP_TEST_FAKE_NVML=SCENARIO``: aitop's GPU probe reads
#: that fake NVML scenario (``support/fake_gpu_site/sitecustomize.py``).
FAKE_GPU_SITE = Path(__file__).parent / "fake_gpu_site"


def start_serve(pid: int | None, *extra: str, serve: str = "127.0.0.1:0",
                timeout: float = 60.0, user: str | None = None,
                fake_gpu: str | None = None, said: list[str] | None = None,
                capabilities: Sequence[str] | None = None,
                ) -> tuple[subprocess.Popen[str], str]:
    """``aitop --pid PID --serve 127.0.0.1:0`` (``pid=None``: the node agent, ``user``:
    run as that user, ``fake_gpu``: with that fake NVML scenario as its GPU,
    ``capabilities``: root holding only these, e.g. ``SYS_PTRACE``): the process
    and its host:port.

    Waits for the line that says where it serves (the port is the kernel's pick);
    ``said`` gets the lines aitop wrote up to it, that one included.
    """
    target = ["--pid", str(pid)] if pid is not None else []
    command = [sys.executable, "-m", "aitop.tui", *target, "--serve", serve, *extra]
    if user is not None:
        command = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups",
                   *command]
    if capabilities is not None:
        kept = ",".join(["-all", *(f"+{c.lower()}" for c in capabilities)])
        command = ["setpriv", f"--bounding-set={kept}", "--inh-caps=-all", *command]
    env = None
    if fake_gpu is not None:
        path = os.pathsep.join((str(FAKE_GPU_SITE), str(FAKE_GPU_SITE.parent.parent)))
        env = {**os.environ, "PYTHONPATH": path, "AITOP_TEST_FAKE_NVML": fake_gpu}
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
        text=True, env=env,
    )
    assert process.stderr is not None
    # Lines are read until the one that says where it serves; a process silent for
    # ``timeout`` is killed, which ends the read. (Waiting in select() on the pipe
    # would miss a line the text buffer already holds: two lines written at once.)
    watchdog = threading.Timer(timeout, process.kill)
    watchdog.start()
    seen = ""
    try:
        for line in iter(process.stderr.readline, ""):
            seen += line
            if "serving Prometheus metrics" in line:
                if said is not None:
                    said += seen.splitlines()
                address = line.split("://", 1)[1].split("/metrics", 1)[0]
                return process, address
    finally:
        watchdog.cancel()
    stop_process(process)
    pytest.fail(f"aitop --serve did not start within {timeout:.0f} s: {seen}")


def stop_process(process: subprocess.Popen[str]) -> int:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return int(process.returncode)
