"""Where aitop's own CPU goes, probe by probe, headless and with the UI.

One demo job (``compute`` by default: all in memory, the model's arithmetic,
a loop counter to read); per round, two aitops attached to it side by side for
``duration_s``: ``aitop --pid N --headless --json --duration D`` and the UI
(``aitop --pid N``, default refresh) in tmux, each under
:mod:`benchmarks.ledger_cli`, which charges every CPU second to the probe that
spent it (:mod:`benchmarks.cpu_ledger`). The GPU probe reads the test suite's
fake NVML (the box has no GPU), so its per-tick work is counted too.

Per round and aitop, the steady state is the span from ``warm_s`` after attach
to the last snapshot before the end; each account's CPU seconds over it are
given per minute and as % of one core. The rounds' medians are reported. The
wall-clock figures (first frame, keys in tmux) are :mod:`benchmarks.tmux_ui`'s.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .aitop_proc import PYTHON, TmuxRun, _env
from .jobs import REPO, DemoJob
from .stats import Summary

Log = Callable[[str], None]

#: The accounts' names in the report: threads (``aitop-<probe>``), spots, children.
NAMES: dict[str, str] = {
    "child:py-spy record": "py-spy record windows (children)",
    "thread:aitop-stacks": "stack windows: parsing and phases",
    "child:py-spy dump --locals": "py-spy dump --locals: step counter (children)",
    "thread:aitop-steps": "step counter: reading the dump",
    "child:py-spy dump": "py-spy dump: attach preflight (children)",
    "spot:neighbour scan": "neighbour scan (every process)",
    "thread:aitop-host": "host: CPU, memory, load",
    "spot:cgroup reads": "cgroup reads",
    "spot:schedstat reads": "schedstat reads",
    "thread:aitop-process": "process tree",
    "thread:aitop-log": "job log",
    "thread:aitop-storage": "storage",
    "thread:aitop-environment": "environment",
    "child:exe": "environment: `python --version` (child)",
    "thread:aitop-gpu": "GPU (fake NVML)",
    "spot:evaluation: metrics": "evaluation: metrics",
    "spot:evaluation: words": "evaluation: words",
    "spot:evaluation: rules + diagnosis": "evaluation: rules + diagnosis",
    "thread:aitop-diagnosis": "evaluation: the rest (history, publishing)",
    "thread:MainThread": "main thread (headless: waits; UI: Textual's event loop)",
}
#: The ledger's own snapshot thread: measurement, not aitop.
LEDGER = "thread:ledger"


@dataclass(frozen=True)
class ProbeCostConfig:
    rounds: int = 3
    duration_s: float = 180.0
    warm_s: float = 60.0
    scenario: str = "compute"
    fake_gpu: str = "healthy"


def _delta(a: dict[str, Any], b: dict[str, Any]) -> dict[str, float]:
    """CPU seconds per account between two snapshots (spots subtracted from their thread)."""
    out: dict[str, float] = {}
    spent_in_spots: dict[str, float] = {}
    for key, value in b["spots"].items():
        thread, spot = key.split("\t", 1)
        d = value - a["spots"].get(key, 0.0)
        out[f"spot:{spot}"] = out.get(f"spot:{spot}", 0.0) + d
        spent_in_spots[thread] = spent_in_spots.get(thread, 0.0) + d
    for thread, value in b["threads"].items():
        d = value - a["threads"].get(thread, 0.0) - spent_in_spots.get(thread, 0.0)
        out[f"thread:{thread}"] = out.get(f"thread:{thread}", 0.0) + d
    for kind, value in b["children"].items():
        out[f"child:{kind}"] = value - a["children"].get(kind, 0.0)
    # Whatever the threads' clocks miss (none should): the process's own total.
    threads = sum(v - a["threads"].get(k, 0.0) for k, v in b["threads"].items())
    out["unaccounted"] = (b["self_s"] - a["self_s"]) - threads
    return out


def analyse_ledger(ledger: dict[str, Any], warm_s: float) -> dict[str, Any]:
    """One aitop's steady state: % of one core per account, and its totals."""
    snaps = ledger["snapshots"]
    attached = ledger["marks"].get("attached", 0.0)
    ended = ledger["marks"].get("ended", snaps[-1]["t"])
    periodic = [s for s in snaps[:-1] if s["t"] < ended - 0.5]
    start = next((s for s in periodic if s["t"] >= attached + warm_s), None)
    if start is None or periodic[-1]["t"] - start["t"] < 10.0:
        raise RuntimeError(f"no steady state after {warm_s:g} s in a run of {ended:.0f} s")
    end = periodic[-1]
    span = end["t"] - start["t"]
    delta = _delta(start, end)
    percent = {k: 100.0 * v / span for k, v in delta.items()}
    total = sum(v for k, v in percent.items() if k != LEDGER)
    final = snaps[-1]
    whole = final["self_s"] + sum(final["children"].values())
    return {
        "window_s": [start["t"] - attached, end["t"] - attached],
        "percent": percent,
        "total_percent": total,
        "pyspy_percent": sum(v for k, v in percent.items() if k.startswith("child:py-spy")),
        "whole_run_percent": 100.0 * whole / max(final["t"], 1e-6),
        "startup_s": attached,
    }


class LedgerTuiRun(TmuxRun):
    """The UI under the ledger, in tmux."""

    def start(self, target_pid: int, ledger_out: Path, fake_gpu: str) -> LedgerTuiRun:
        self._launch([PYTHON, "-m", "benchmarks.ledger_cli", "--out", str(ledger_out),
                      "--fake-gpu", fake_gpu, "--", "--pid", str(target_pid)])
        return self


def _wait_for(path: Path, timeout_s: float) -> None:
    deadline = time.time() + timeout_s
    while not path.exists() and time.time() < deadline:
        time.sleep(0.2)
    if not path.exists():
        raise RuntimeError(f"{path.name} was not written within {timeout_s:.0f} s")


def _round(job: DemoJob, cfg: ProbeCostConfig, workdir: Path, i: int) -> dict[str, Any]:
    """One round: headless and the UI side by side on ``job``, each one's ledger read."""
    headless_out, ui_out = workdir / f"headless-{i}.json", workdir / f"ui-{i}.json"
    for path in (headless_out, ui_out):
        path.unlink(missing_ok=True)
    command = [PYTHON, "-m", "benchmarks.ledger_cli", "--out", str(headless_out),
               "--fake-gpu", cfg.fake_gpu, "--", "--pid", str(job.pid), "--headless",
               "--json", "--duration", f"{cfg.duration_s:g}"]
    with (workdir / f"headless-{i}.report.json").open("wb") as stdout, \
            (workdir / f"headless-{i}.stderr").open("wb") as stderr:
        headless = subprocess.Popen(command, cwd=REPO, env=_env(), stdout=stdout,
                                    stderr=stderr, stdin=subprocess.DEVNULL)
    # A tmux server of its own per round: the last round's may still be going
    # away, and a new session sent to it then fails.
    ui = LedgerTuiRun(workdir, f"probe-cost-ui-{i}", socket=f"aitop-cost-{os.getpid()}-{i}"
                      ).start(job.pid, ui_out, cfg.fake_gpu)
    try:
        time.sleep(cfg.duration_s + 2.0)
        ui.quit()
        headless.wait(timeout=60.0)
        _wait_for(ui_out, 20.0)
        _wait_for(headless_out, 5.0)
    finally:
        if headless.poll() is None:
            headless.kill()
        ui.kill()
    return {mode: analyse_ledger(json.loads(path.read_text()), cfg.warm_s)
            for mode, path in (("headless", headless_out), ("ui", ui_out))}


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the rounds, per account and for the totals."""
    keys = sorted({k for r in runs for k in r["percent"]})
    out: dict[str, Any] = {"accounts": {}}
    for key in keys:
        s = Summary.of(r["percent"].get(key, 0.0) for r in runs)
        if s is not None:
            out["accounts"][key] = s.to_json()
    for total in ("total_percent", "pyspy_percent", "whole_run_percent", "startup_s"):
        s = Summary.of(r[total] for r in runs)
        out[total] = s.to_json() if s else None
    out["window_s"] = runs[0]["window_s"] if runs else None
    return out


def run_probe_cost(cfg: ProbeCostConfig, workdir: Path, log: Log) -> dict[str, Any]:
    """``cfg.rounds`` rounds of headless and UI side by side on one job."""
    workdir.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[dict[str, Any]]] = {"headless": [], "ui": []}
    with DemoJob(cfg.scenario, workdir,
                 duration_s=cfg.rounds * (cfg.duration_s + 60.0) + 300.0) as job:
        time.sleep(3.0)
        for i in range(cfg.rounds):
            log(f"  probe_cost: round {i + 1}/{cfg.rounds}, {cfg.duration_s:g} s on PID {job.pid}")
            result = _round(job, cfg, workdir, i)
            for mode, analysed in result.items():
                runs[mode].append(analysed)
                log(f"  probe_cost: {mode} {analysed['total_percent']:.2f} % of a core "
                    f"(py-spy {analysed['pyspy_percent']:.2f} %)")
    return {"runs": runs, "headless": summarise(runs["headless"]),
            "ui": summarise(runs["ui"])}
