"""The node agent: what watching 1, 2 and 4 jobs costs, and how soon a job is seen.

For N = 1, 2 and 4 small single-process PyTorch jobs (a training loop that
leaves most of a core idle, so that the jobs do not crowd aitop off the 2 cores),
one ``aitop --serve`` without ``--pid`` (``--match`` keeps it to these jobs) is
scraped: once it watches all N and ``warmup_s`` has passed, its own CPU
(``aitop_self_cpu_seconds``: py-spy runs included) is read over ``duration_s``.
Rounds interleave N so that drifting load hits each alike; the ratios are of
medians within the run. Each job's time from its start to its first
``aitop_up`` series is recorded too. A last round runs 4 jobs under a
``--budget`` below their measured cost and records where the pace settles and
what the agent's CPU becomes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from .jobs import LIGHT_JOB
from .stats import Summary

JOB_COUNTS = (1, 2, 4)

def _metrics(address: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {f.name: [(s.labels, s.value) for s in f.samples]
            for f in text_string_to_metric_families(text)}


def _start_agent(marker: str, extra: tuple[str, ...]) -> tuple[subprocess.Popen[str], str]:
    agent = subprocess.Popen(
        [sys.executable, "-m", "aitop.tui", "--serve", "127.0.0.1:0", "--match", marker,
         *extra], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True)
    assert agent.stderr is not None
    for line in agent.stderr:
        if "serving Prometheus metrics" in line:
            return agent, line.split("http://", 1)[1].split("/metrics", 1)[0]
    raise RuntimeError("the agent did not start")


def _stop(process: subprocess.Popen[Any], *, group: bool = False) -> None:
    if process.poll() is None:
        if group:
            os.killpg(process.pid, signal.SIGTERM)
        else:
            process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def one_round(jobs: int, warmup_s: float, duration_s: float, workdir: Path,
              budget: float | None = None) -> dict[str, Any]:
    """N jobs under one agent: its CPU over ``duration_s``, each job's time to a series."""
    marker = f"aitop-agent-bench-{time.time_ns()}"
    extra = ("--budget", f"{budget:g}") if budget is not None else ()
    agent, address = _start_agent(marker, extra)
    started: list[tuple[subprocess.Popen[bytes], float]] = []
    try:
        for _ in range(jobs):
            proc = subprocess.Popen([sys.executable, "-c", LIGHT_JOB, marker],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, start_new_session=True)
            started.append((proc, time.time()))
        first_series: dict[int, float] = {}
        deadline = time.time() + 120
        while len(first_series) < jobs and time.time() < deadline:
            seen = {int(labels["pid"]) for labels, _ in
                    _metrics(address).get("aitop_target_info", [])}
            for proc, t0 in started:
                if proc.pid in seen and proc.pid not in first_series:
                    first_series[proc.pid] = time.time() - t0
            time.sleep(0.25)
        time.sleep(warmup_s)
        cpu0, t0 = _metrics(address)["aitop_self_cpu_seconds"][0][1], time.time()
        time.sleep(duration_s)
        after = _metrics(address)
        cpu1, t1 = after["aitop_self_cpu_seconds"][0][1], time.time()
        pace = after.get("aitop_agent_pace", [({}, 1.0)])[0][1]
        return {"cpu": 100.0 * (cpu1 - cpu0) / (t1 - t0), "pace": pace,
                "watched": after.get("aitop_agent_jobs", [({}, 0.0)])[0][1],
                "first_series_s": sorted(first_series.values())}
    finally:
        for proc, _t in started:
            _stop(proc, group=True)
        _stop(agent)


def run_agent(rounds: int, warmup_s: float, duration_s: float, budget_s: float,
              workdir: Path, log: Callable[[str], None]) -> dict[str, Any]:
    workdir.mkdir(parents=True, exist_ok=True)
    runs: dict[int, list[dict[str, Any]]] = {n: [] for n in JOB_COUNTS}
    for i in range(rounds):
        for n in JOB_COUNTS:
            log(f"agent: round {i + 1}/{rounds}, {n} job(s), {duration_s:.0f} s")
            runs[n].append(one_round(n, warmup_s, duration_s, workdir))
    data: dict[str, Any] = {"runs": {str(n): r for n, r in runs.items()}}
    for n, rs in runs.items():
        cpu = Summary.of(r["cpu"] for r in rs)
        data[f"cpu_{n}"] = cpu.to_json() if cpu else None
    single = Summary.of(r["cpu"] for r in runs[1])
    for n in JOB_COUNTS[1:]:
        many = Summary.of(r["cpu"] for r in runs[n])
        data[f"ratio_{n}"] = (many.median / single.median
                              if many and single and single.median else None)
    firsts = Summary.of(s for rs in runs.values() for r in rs for s in r["first_series_s"])
    data["first_series_s"] = firsts.to_json() if firsts else None
    four = Summary.of(r["cpu"] for r in runs[4])
    if four is not None and budget_s > 0:
        budget = round(0.6 * four.median, 1)
        log(f"agent: 4 jobs under --budget {budget:g} (60 % of their cost), {budget_s:.0f} s")
        data["budget"] = {"percent": budget,
                          **one_round(4, budget_s - 60.0, 60.0, workdir, budget=budget)}
    return data
