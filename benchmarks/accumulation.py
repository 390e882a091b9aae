"""``python -m benchmarks.accumulation``: does accumulating inside no_sync() gain what aitop says?

A torchrun job (2 ranks, gloo, CPU: ``demo/ddp.py``) accumulates N micro-batches
per optimizer step, every backward all-reducing the gradients. aitop watches it
headless through its launcher; the same job is then run with ``--no-sync`` (the
first N-1 micro-batches inside ``model.no_sync()``), aitop attached again, and
both rates come from rank 0's own step counter. Beside them: the communication
share aitop read, the rank's own wait (its training thread off the CPU inside
the step) and the all-reduce's own time, measured on the side before training
(``--truth``). Measure one job at a time on a quiet machine: other work changes
every figure.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .jobs import REPO

#: The accumulating job (tests/attach/test_accumulation.py watches the same shape).
SHAPE = ("--accumulate", "2", "--tokens", "384", "--trunk", "24", "--batch", "8",
         "--vocab", "262144", "--optimizer", "sgd-momentum")
#: Seconds aitop watches each run; seconds of warm-up before it attaches.
WATCH_S = 25
WARMUP_S = 8.0


@dataclass(frozen=True)
class Round:
    """One job and its fix: aitop's reading and prediction, and the rates measured."""

    lead: str | None
    predicted: tuple[float | None, float | None]
    passes: float | None
    comm_read: float | None
    #: All the exchange may cost the rank, as aitop reads it: the ceiling's basis.
    comm_bound: float | None
    comm_own: float
    allreduce_own: float
    base_rate: float
    fixed_rate: float
    fixed_lead: str | None

    @property
    def measured(self) -> float:
        return self.fixed_rate / self.base_rate


def rank0_between(truth: Path, start: float, end: float) -> dict[str, float]:
    """Rank 0's own steps/s and shares between ``start`` and ``end``."""
    records = [json.loads(line) for line in (truth / "rank0.jsonl").read_text().splitlines()]
    inside = [r for r in records if start <= r["t"] <= end]
    a, b = inside[0], inside[-1]
    elapsed = b["t"] - a["t"]
    return {"steps_per_s": (b["steps"] - a["steps"]) / elapsed,
            **{k: (b[k] - a[k]) / elapsed for k in ("comm", "allreduce")}}


def watched(extra: Sequence[str], workdir: Path, name: str) -> tuple[dict[str, Any], Path]:
    """aitop's report of a run of the job, and the run's truth directory."""
    truth = workdir / name
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
               f"--master_port={port}", "-m", "aitop.demo.ddp", "--duration", "300",
               "--truth", str(truth), *SHAPE, *extra]
    launcher = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                stdin=subprocess.DEVNULL, cwd=REPO)
    try:
        time.sleep(WARMUP_S)
        result = subprocess.run(
            [sys.executable, "-m", "aitop.tui", "--pid", str(launcher.pid), "--headless",
             "--json", "--duration", str(WATCH_S)],
            capture_output=True, text=True, timeout=WATCH_S + 120, stdin=subprocess.DEVNULL)
    finally:
        launcher.terminate()
        launcher.wait(timeout=60)
    if result.returncode not in (0, 3):
        raise RuntimeError(f"aitop failed ({result.returncode}): {result.stderr[-500:]}")
    return json.loads(result.stdout), truth


def run_round(workdir: Path, index: int) -> Round:
    report, truth = watched((), workdir, f"every-pass-{index}")
    span = (report["attached_at"] + 3.0, report["evaluated_at"])
    own = rank0_between(truth, *span)
    lead = report["findings"][0] if report["findings"] else None
    fixed_report, fixed_truth = watched(("--no-sync",), workdir, f"no-sync-{index}")
    fixed = rank0_between(fixed_truth, fixed_report["attached_at"] + 3.0,
                          fixed_report["evaluated_at"])
    metrics = report["metrics"]
    return Round(
        lead=lead["id"] if lead else None,
        predicted=((lead["est_speedup_range"][0], lead["est_speedup_range"][1]) if lead
                   else (None, None)),
        passes=metrics.get("backward_per_step"),
        comm_read=metrics.get("comm_share"), comm_bound=metrics.get("comm_bound"),
        comm_own=own["comm"], allreduce_own=own["allreduce"],
        base_rate=own["steps_per_s"], fixed_rate=fixed["steps_per_s"],
        fixed_lead=fixed_report["findings"][0]["id"] if fixed_report["findings"] else None)


def _f(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def markdown(rounds: Sequence[Round]) -> str:
    lines = [
        "# Accumulating inside no_sync(): predicted against measured",
        "",
        "Written by `python -m benchmarks.accumulation`: `demo/ddp.py "
        + " ".join(SHAPE) + "` under torchrun (2 ranks, gloo), watched by aitop for "
        f"{WATCH_S} s, then the same job with `--no-sync`; rates from rank 0's own counter.",
        "",
        "| round | lead | passes/step read | comm read | own wait | all-reduce (side) "
        "| comm bound (its ceiling) | aitop's range | measured | fixed job's lead |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(rounds):
        low, high = r.predicted
        ceiling = None if r.comm_bound is None else 1.0 / (1.0 - min(r.comm_bound, 0.99))
        lines.append(f"| {i + 1} | {r.lead} | {_f(r.passes)} | {_f(r.comm_read)} | "
                     f"{r.comm_own:.2f} | {r.allreduce_own:.2f} | {_f(r.comm_bound)} "
                     f"(×{_f(ceiling)}) | ×{_f(low)}–×{_f(high)} | ×{r.measured:.2f} | "
                     f"{r.fixed_lead} |")
    if rounds:
        lines += ["", f"Median measured ×{statistics.median(r.measured for r in rounds):.2f}."]
    lines += ["", "```json", json.dumps([{**asdict(r), "measured": r.measured} for r in rounds],
                                        indent=1), "```", ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="rounds (default 3)")
    parser.add_argument("--out", type=Path, help="write the table here (Markdown)")
    args = parser.parse_args(argv)
    rounds = []
    with tempfile.TemporaryDirectory(prefix="aitop-accumulation-") as tmp:
        for index in range(args.runs):
            r = run_round(Path(tmp), index)
            rounds.append(r)
            print(f"round {index + 1}: lead {r.lead}, passes {r.passes}, comm read "
                  f"{_f(r.comm_read)} (own wait {r.comm_own:.2f}, all-reduce "
                  f"{r.allreduce_own:.2f}), bound {_f(r.comm_bound)}; range {r.predicted}, "
                  f"measured {r.measured:.2f}", flush=True)
    text = markdown(rounds)
    if args.out:
        args.out.write_text(text)
        print(f"wrote {args.out}")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
