"""What one ``smaps_rollup`` read costs: the basis of the private-memory cadence.

The kernel sums ``/proc/PID/smaps_rollup`` by walking the process's page tables,
so a read costs CPU in proportion to the process's resident memory. It is
measured on a plain process holding ``GB`` of touched anonymous memory (0.5 and
2 GB), and on a forked child of the 2-GB one that shares all of it (a DataLoader
worker maps its parent's pages: its read walks as many), each read charged
the reading thread's own CPU time (``time.thread_time``: the kernel's walk is
system time of the reader), with ``status`` (what RSS costs) beside it. From the
2-GB figure and aitop's cadences (``probes.cadence``) the model line gives how
often aitop reads a 2-GB training process and two forked workers, and the share
of a core that takes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .stats import Summary

Log = Callable[[str], None]
SIZES_GB: tuple[float, ...] = (0.5, 2.0)

#: A process holding GB of touched anonymous memory, and a forked child sharing it.
HOLDER = """
import os, sys, time
held = bytearray(int(float(sys.argv[1]) * 2**30))
for i in range(0, len(held), 4096):
    held[i] = 1
child = os.fork()
if child == 0:
    time.sleep(3600)
    os._exit(0)
print(child, flush=True)
time.sleep(3600)
"""


def _read_cost(pid: int, name: str, reps: int) -> list[float]:
    costs = []
    for _ in range(reps):
        started = time.thread_time()
        with open(f"/proc/{pid}/{name}", "rb") as fh:
            fh.read()
        costs.append(time.thread_time() - started)
    return costs


def run_smaps_cost(reps: int, workdir: Path, log: Log) -> dict[str, Any]:
    from aitop.probes import cadence

    workdir.mkdir(parents=True, exist_ok=True)
    costs: dict[str, Any] = {}
    for gb in SIZES_GB:
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(gb)],
                                  stdout=subprocess.PIPE, text=True)
        child = None
        try:
            assert holder.stdout is not None
            child = int(holder.stdout.readline())
            reads = {"status": _read_cost(holder.pid, "status", reps),
                     "smaps_rollup": _read_cost(holder.pid, "smaps_rollup", reps),
                     "smaps_rollup_fork": _read_cost(child, "smaps_rollup", reps)}
        finally:
            if child is not None:
                with contextlib.suppress(OSError):
                    os.kill(child, signal.SIGKILL)
            holder.kill()
            holder.wait()
        costs[f"{gb:g}"] = {k: Summary.of(v).to_json() for k, v in reads.items()
                            if Summary.of(v) is not None}
        log(f"  smaps: {gb:g} GB: {1000 * statistics.median(reads['smaps_rollup']):.2f} ms "
            f"a read, forked child {1000 * statistics.median(reads['smaps_rollup_fork']):.2f} ms")
    big = costs[f"{SIZES_GB[-1]:g}"]
    model: dict[str, Any] = {}
    for name, profile in (("tui", cadence.UI), ("headless", cadence.HEADLESS)):
        processes = 3  # the training process and two forked workers, 2 GB each
        main, fork = big["smaps_rollup"]["median"], big["smaps_rollup_fork"]["median"]
        workers_every = max(profile.smaps_interval_s,
                            fork * processes / profile.smaps_cpu_share)
        main_every = max(profile.smaps_others_interval_s,
                         main * processes / profile.smaps_cpu_share)
        model[name] = {"spacing_s": workers_every, "main_spacing_s": main_every,
                       "percent": 100.0 * (2 * fork / workers_every + main / main_every)}
    return {"sizes_gb": list(SIZES_GB), "reps": reps, "costs": costs, "model": model}
