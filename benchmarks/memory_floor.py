"""``python -m benchmarks.memory_floor``: the memory-floor rule on real sawtooth records.

The ``sawtooth`` demo job (two DataLoader workers re-created every ~2.6-s epoch,
each caching what it decodes: its memory rises through each epoch and falls
back to a floor that holds) writes every process's RSS each second
(``demo/truth.py``). Runs of it, alone and beside busy loops, are read here as
aitop's process probe reads the job: every 2, 2.5 and 3 s (its headless
cadence and what a loaded box stretches it to), from two phases. Watches of 25
and 60 s start at every reading and are judged every 2 s by the product's own
``host_memory_growth`` (``knowledge.metrics.memory``) on a session holding the
readings as the process probe's tree samples.

Two columns per watch length: evaluations that read growth on the level floor
(any growth shows a runway), and watches that read a leak added to the same
readings (``leak`` MB/min, a straight rise from the watch's start) at 60 MB/min
or more within 60 s, with the median time to the first such evaluation. The
figures in docs/diagnosis.md (``host_memory_grows``) come from this.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aitop.demo.truth import memory_truth_path, read_memory_truth
from aitop.knowledge.metrics.growth import FloorGrowth
from aitop.knowledge.metrics.memory import host_memory_growth
from aitop.probes.samples import ProcessInfo, ProcessTreeSample
from aitop.probes.session import Session

from .jobs import start_job, stop_job

#: Reading cadences (s) and phases (s after the record's first reading).
CADENCES: tuple[float, ...] = (2.0, 2.5, 3.0)
PHASES: tuple[float, ...] = (0.0, 1.0)
#: Watch lengths (s), and how often a watch is judged.
WATCHES: tuple[float, ...] = (25.0, 60.0)
EVALUATE_EVERY_S = 2.0
#: The first evaluation comes this long after the watch's start.
FIRST_EVALUATION_S = 10.0
#: Leaks added for the detection columns (MB per minute), and the rate a leak
#: must be read at (``host_memory_grows``' threshold).
LEAKS_MB_MIN: tuple[float, ...] = (60.0, 120.0, 300.0)
FIRES_AT_MB_MIN = 60.0
#: The watch the leaks are looked for in.
LEAK_WATCH_S = 60.0


def readings_of(truth: Path) -> list[ProcessTreeSample]:
    """Every 1-s record of the job's memory, as the process probe's tree samples
    (each process started when the record first shows it)."""
    out: list[ProcessTreeSample] = []
    born: dict[int, float] = {}
    for record in read_memory_truth(truth):
        processes = record.get("processes")
        if not isinstance(processes, list):
            continue
        t = float(record["t"])  # type: ignore[arg-type]
        tree = tuple(
            ProcessInfo(pid=p["pid"], ppid=None, role=p["role"], name="", cmdline=(),
                        status=None, cpu_percent=None, rss_bytes=p["rss"], num_threads=None,
                        read_bps=None, write_bps=None, started=born.setdefault(p["pid"], t))
            for p in processes)
        main = next(p.pid for p in tree if p.role == "main")
        out.append(ProcessTreeSample(t, main, True, tree))
    return out


#: Each wait between readings is ``cadence`` times a draw from ``1 ± JITTER``
#: (``--jitter``; 0: on the beat, as the process probe reads).
JITTER = 0.0


def read_every(records: Sequence[ProcessTreeSample], cadence: float,
               phase: float) -> list[ProcessTreeSample]:
    """The record as read every ``cadence`` s from ``phase`` (off the beat by
    ``JITTER``, drawn the same way for the same record, cadence and phase): the
    newest record at each reading's moment."""
    draws = random.Random(f"{records[0].t}/{cadence}/{phase}")
    out: list[ProcessTreeSample] = []
    t, i = records[0].t + phase, 0
    while t <= records[-1].t:
        while i + 1 < len(records) and records[i + 1].t <= t:
            i += 1
        if not out or out[-1] is not records[i]:
            out.append(records[i])
        t += cadence * (1.0 + draws.uniform(-JITTER, JITTER))
    return out


def with_leak(tree: ProcessTreeSample, leaked_mb: float) -> ProcessTreeSample:
    """``tree`` with ``leaked_mb`` more in its training process."""
    if not leaked_mb:
        return tree
    return dataclasses.replace(tree, processes=tuple(
        dataclasses.replace(p, rss_bytes=(p.rss_bytes or 0) + int(leaked_mb * 1e6))
        if p.role == "main" else p for p in tree.processes))


def judge(readings: Sequence[ProcessTreeSample], leak_mb_min: float) -> FloorGrowth:
    """``host_memory_growth`` at the newest reading, of a session holding the
    readings with a leak of ``leak_mb_min`` from the first one on."""
    start = readings[0].t
    session = Session(readings[0].target_pid)
    for tree in readings:
        session.processes.append(with_leak(tree, leak_mb_min / 60.0 * (tree.t - start)))
    return host_memory_growth(session, readings[-1].t)


@dataclass
class Tally:
    """Evaluations that read growth, and watches that read a leak and when."""

    evaluations: int = 0
    grew: int = 0
    watches: int = 0
    fired_after_s: list[float] = field(default_factory=list)


def replay(records: Sequence[Sequence[ProcessTreeSample]], watch_s: float,
           leak_mb_min: float) -> Tally:
    """Every watch of ``watch_s`` over every reading of every record."""
    tally = Tally()
    for record in records:
        for cadence in CADENCES:
            for phase in PHASES:
                readings = read_every(record, cadence, phase)
                for first in readings:
                    if first.t + watch_s > readings[-1].t:
                        break
                    tally.watches += 1
                    fired: float | None = None
                    after = FIRST_EVALUATION_S
                    while after <= watch_s:
                        seen = [r for r in readings if first.t <= r.t <= first.t + after]
                        rate = judge(seen, leak_mb_min).rate
                        tally.evaluations += 1
                        if rate is not None and rate > 0:
                            tally.grew += 1
                            if fired is None and rate >= FIRES_AT_MB_MIN:
                                fired = after
                        after += EVALUATE_EVERY_S
                    if fired is not None:
                        tally.fired_after_s.append(fired)
    return tally


def record_runs(out: Path, busy_loops: Sequence[int], seconds: float) -> list[Path]:
    """One ``sawtooth`` run per entry of ``busy_loops`` (that many busy Python
    loops beside it), each recording its memory for ``seconds``."""
    truths: list[Path] = []
    for n, busy in enumerate(busy_loops):
        truth = out / f"sawtooth-{n}-busy{busy}.jsonl"
        loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                 for _ in range(busy)]
        job = start_job("sawtooth", truth, duration_s=seconds + 30)
        try:
            time.sleep(seconds)
        finally:
            stop_job(job)
            for loop in loops:
                loop.kill()
                loop.wait()
        truths.append(truth)
        print(f"recorded {truth.name}", flush=True)
    return truths


def table(truths: Sequence[Path]) -> str:
    """The replay's table, in Markdown."""
    records = [readings_of(t) for t in truths]
    lines = [f"{len(truths)} record(s): {', '.join(t.name for t in truths)}", "",
             "| replay | evaluations reading growth, level floor | " + " | ".join(
                 f"leak {leak:.0f} MB/min: read within {LEAK_WATCH_S:.0f} s (median s)"
                 for leak in LEAKS_MB_MIN) + " |",
             "|---|---|" + "---|" * len(LEAKS_MB_MIN)]
    for watch in WATCHES:
        level = replay(records, watch, 0.0)
        cells = [f"{level.grew:,} / {level.evaluations:,}"]
        for leak in LEAKS_MB_MIN:
            if watch != LEAK_WATCH_S:
                cells.append("")
                continue
            found = replay(records, watch, leak)
            times = found.fired_after_s
            median = f" ({statistics.median(times):.0f})" if times else ""
            cells.append(f"{len(times):,} / {found.watches:,}{median}")
        lines.append(f"| {watch:.0f}-s watches | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=Path, nargs="*",
                        help="replay these truth files (their .memory.jsonl beside them) "
                             "instead of recording new runs")
    parser.add_argument("--busy", type=int, nargs="*", default=[0, 2, 2, 3, 3, 4],
                        help="busy loops beside each run (one run per entry)")
    parser.add_argument("--seconds", type=float, default=150.0, help="each run's length")
    parser.add_argument("--jitter", type=float, default=0.0,
                        help="read off the beat: each wait 1 ± this times the cadence")
    args = parser.parse_args(argv)
    global JITTER
    JITTER = args.jitter
    if args.records:
        truths = list(args.records)
        missing = [t for t in truths if not memory_truth_path(t).exists()]
        if missing:
            parser.error(f"no memory record beside {missing[0]}: give the job's --truth file")
        print(table(truths))
        return 0
    with tempfile.TemporaryDirectory(prefix="aitop-memory-floor-") as tmp:
        print(table(record_runs(Path(tmp), args.busy, args.seconds)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
