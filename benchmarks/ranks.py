"""Every rank of a job: what watching N ranks costs, and how right it is.

For N = 1, 2 and 4 ranks of the DDP demo (``torchrun --nproc_per_node=N``, gloo
on CPU, rank N-1 slowed by its own data loading when N > 1), aitop is pointed at
the launcher headless for ``duration_s`` and its own CPU (py-spy included, the
report's figure) is taken; N = 1 is the single-process figure the others are
compared with, in the same run. Each multi-rank round also records each rank's
communication share against the rank's own timers, whether the straggler named
is the slowed rank, and when the verdict first appeared.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .stats import Summary

RANK_COUNTS = (1, 2, 4)
#: Slow rank's extra CPU per batch (ms): it then waits least, the others most.
SLOW_MS = 12.0


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _truth_comm(path: Path, start: float, end: float) -> float | None:
    try:
        records = [json.loads(line) for line in path.read_text().splitlines()]
    except OSError:
        return None
    inside = [r for r in records if start <= r["t"] <= end]
    if len(inside) < 2:
        return None
    a, b = inside[0], inside[-1]
    return float((b["comm"] - a["comm"]) / (b["t"] - a["t"]))


def one_round(ranks: int, duration_s: float, workdir: Path) -> dict[str, Any]:
    """One job of ``ranks`` ranks watched through its launcher."""
    truth = workdir / f"truth-{ranks}-{time.time_ns()}"
    command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={ranks}",
               f"--master_port={_port()}", "-m", "aitop.demo.ddp", "--duration",
               str(duration_s + 60), "--truth", str(truth)]
    if ranks > 1:
        command += ["--slow-rank", str(ranks - 1), "--slow-ms", str(SLOW_MS)]
    job = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        time.sleep(8.0)  # imports and init_process_group
        result = subprocess.run(
            [sys.executable, "-m", "aitop.tui", "--pid", str(job.pid), "--headless", "--json",
             "--duration", str(duration_s)],
            capture_output=True, text=True, timeout=duration_s + 120, check=False)
    finally:
        os.killpg(job.pid, signal.SIGTERM)
        try:
            job.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    report = json.loads(result.stdout)
    out: dict[str, Any] = {"cpu": report["aitop"]["cpu_percent_of_one_core"]}
    if ranks == 1:
        return out
    start, end = report["attached_at"] + 3.0, report["evaluated_at"]
    errors = []
    for index, rank in enumerate(report["ranks"]):
        seen = _truth_comm(truth / f"rank{index}.jsonl", start, end)
        if seen is not None and rank["comm_share"] is not None:
            errors.append(abs(rank["comm_share"] - seen))
    verdict = report.get("job_verdict") or {}
    slow_pid = report["ranks"][-1]["pid"] if report["ranks"] else None
    fired = [e["after_s"] for e in report["timeline"] if e["category"] == "communication"]
    out.update({
        "ranks_found": len(report["ranks"]),
        "comm_error_max": max(errors) if errors else None,
        "straggler_right": verdict.get("straggler_pid") == slow_pid,
        "straggler_score": verdict.get("straggler_score"),
        "comm_shares": [r["comm_share"] for r in report["ranks"]],
        "verdict_s": fired[0] if fired else None,
    })
    return out


def run_ranks(rounds: int, duration_s: float, workdir: Path,
              log: Callable[[str], None]) -> dict[str, Any]:
    """Rounds of N = 1, 2, 4 interleaved (so drifting load hits each alike)."""
    workdir.mkdir(parents=True, exist_ok=True)
    runs: dict[int, list[dict[str, Any]]] = {n: [] for n in RANK_COUNTS}
    for i in range(rounds):
        for n in RANK_COUNTS:
            log(f"ranks: round {i + 1}/{rounds}, {n} rank(s), {duration_s:.0f} s")
            runs[n].append(one_round(n, duration_s, workdir))
    data: dict[str, Any] = {"runs": {str(n): r for n, r in runs.items()}}
    for n, rs in runs.items():
        cpu = Summary.of(r["cpu"] for r in rs)
        data[f"cpu_{n}"] = cpu.to_json() if cpu else None
    single = Summary.of(r["cpu"] for r in runs[1])
    for n in RANK_COUNTS[1:]:
        many = Summary.of(r["cpu"] for r in runs[n])
        data[f"ratio_{n}"] = (many.median / single.median
                              if many and single and single.median else None)
    return data
