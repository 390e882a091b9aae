"""The node view (``aitop`` alone): what watching 1, 2 and 4 jobs costs, and its keys.

For N = 1, 2 and 4 of the agent benchmark's light jobs (``jobs.LIGHT_JOB``: a
loop that leaves most of a core idle, so the jobs do not crowd aitop off the 2
cores), ``aitop --match MARKER`` (the node view; ``--match`` keeps it to these
jobs) runs in tmux at 200x50 under the benchmarks' wrapper. Once its header says
all N are watched and ``warmup_s`` has passed, the CPU of its whole process tree
(py-spy included) is read over ``duration_s``: the figure to set beside the
agent's (``benchmarks/agent.py``), which watches the same jobs without a
screen. With 4 jobs, Enter (the first job's full view, ``Advisor`` on the pane)
and Escape (the node again) are timed from the key to the pane, ``keys`` times.
Rounds interleave N so that drifting load hits each alike.

    python -m benchmarks.node_view --rounds 2 --out docs/node-view.md
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .agent import JOB_COUNTS, _stop
from .aitop_proc import AITOP_BIN, TmuxRun
from .jobs import LIGHT_JOB

#: Seconds allowed for every job to be watched, and for a key's answer.
WATCHED_WITHIN_S = 120.0
KEY_WITHIN_S = 10.0


@dataclass
class NodeRun(TmuxRun):
    """``aitop --match MARKER`` (the node view) in tmux, under the wrapper."""

    def start(self, marker: str) -> NodeRun:
        self._launch([AITOP_BIN, "--match", marker])
        return self

    def wait_for(self, seen: str, gone: str | None, within_s: float) -> float | None:
        """Seconds until ``seen`` is on the pane (and ``gone`` is not), or None."""
        start = time.time()
        while time.time() - start < within_s:
            text = self.screen()
            if seen in text and (gone is None or gone not in text):
                return time.time() - start
            time.sleep(0.01)
        return None

    def key(self, key: str, seen: str, gone: str | None) -> float | None:
        self._tmux("send-keys", "-t", self.name, key)
        return self.wait_for(seen, gone, KEY_WITHIN_S)


@dataclass(frozen=True)
class Round:
    """One round: N jobs, the node view's CPU, when all were watched, its keys."""

    jobs: int
    cpu_percent: float | None
    watched_after_s: float | None
    enter_s: tuple[float | None, ...] = ()
    escape_s: tuple[float | None, ...] = ()


def watched_line(jobs: int) -> str:
    """The node view's header once every job is watched ("2 PyTorch jobs · 2 watched")."""
    return f"{jobs} PyTorch job{'s' if jobs != 1 else ''} · {jobs} watched"


def one_round(jobs: int, warmup_s: float, duration_s: float, keys: int,
              workdir: Path, tag: str) -> Round:
    """N jobs under one node view: its CPU over ``duration_s``; with keys, their latency."""
    marker = f"aitop-node-bench-{time.time_ns()}"
    started = [subprocess.Popen([sys.executable, "-c", LIGHT_JOB, marker],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
               for _ in range(jobs)]
    view = NodeRun(workdir, f"node-{tag}", socket=f"aitop-node-{os.getpid()}-{tag}")
    try:
        view.start(marker)
        watched_after = view.wait_for(watched_line(jobs), None, WATCHED_WITHIN_S)
        time.sleep(warmup_s)
        cpu0, t0 = view.cpu_seconds(), time.time()
        time.sleep(duration_s)
        cpu1, t1 = view.cpu_seconds(), time.time()
        cpu = (None if cpu0 is None or cpu1 is None
               else 100.0 * (cpu1 - cpu0) / (t1 - t0))
        enter: list[float | None] = []
        escape: list[float | None] = []
        for _ in range(keys):
            enter.append(view.key("Enter", "Advisor", None))
            escape.append(view.key("Escape", watched_line(jobs), "Advisor"))
        return Round(jobs, cpu, watched_after, tuple(enter), tuple(escape))
    finally:
        view.kill()
        for proc in started:
            _stop(proc, group=True)


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s" if values else "—"


def render(rounds: list[Round], warmup_s: float, duration_s: float) -> str:
    """The results as Markdown, with how they were made."""
    enter = [v for r in rounds for v in r.enter_s if v is not None]
    escape = [v for r in rounds for v in r.escape_s if v is not None]
    missed = sum(v is None for r in rounds for v in (*r.enter_s, *r.escape_s))
    lines = [
        "# The node view's cost per job count",
        "",
        "`python -m benchmarks.node_view` (benchmarks/node_view.py says how): `aitop "
        "--match MARKER`, the node view, in tmux at 200x50 beside N light jobs; the CPU "
        "of its whole process tree, py-spy included, once all N are watched. The agent's "
        "cost on the same jobs is in docs/benchmarks.md (\"The node agent's cost per job "
        "count\").",
        "",
        f"*Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, warm-up "
        f"{warmup_s:g} s, CPU over {duration_s:g} s; load average at the end "
        f"{os.getloadavg()[0]:.1f}.*",
        "",
        "| jobs | round | node view CPU (% of a core) | all watched after |",
        "|---|---|---|---|",
    ]
    for i, r in enumerate(rounds):
        cpu = "—" if r.cpu_percent is None else f"{r.cpu_percent:.2f} %"
        after = "—" if r.watched_after_s is None else f"{r.watched_after_s:.1f} s"
        lines.append(f"| {r.jobs} | {i // len(JOB_COUNTS) + 1} | {cpu} | {after} |")
    lines += ["", f"With {max(JOB_COUNTS)} jobs: Enter → the job's full view on the pane "
              f"{_median(enter)} (median, n={len(enter)}"
              + (f", max {max(enter):.2f} s" if enter else "") + "); Escape → the node "
              f"again {_median(escape)} (n={len(escape)}); keys unanswered within "
              f"{KEY_WITHIN_S:g} s: {missed}.", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--warmup", type=float, default=20.0)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--keys", type=int, default=3, help="Enter/Escape pairs with 4 jobs")
    parser.add_argument("--out", type=Path, default=Path("docs/node-view.md"))
    args = parser.parse_args()
    workdir = Path("/tmp") / f"aitop-node-bench-{os.getpid()}"
    rounds = []
    for i in range(args.rounds):
        for n in JOB_COUNTS:
            print(f"node view: round {i + 1}/{args.rounds}, {n} job(s)", flush=True)
            rounds.append(one_round(n, args.warmup, args.duration,
                                    args.keys if n == max(JOB_COUNTS) else 0, workdir,
                                    f"{i}-{n}"))
            print(f"  {rounds[-1]}", flush=True)
    args.out.write_text(render(rounds, args.warmup, args.duration))
    print(f"written: {args.out}")


if __name__ == "__main__":
    main()
