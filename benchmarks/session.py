"""Target 2: aitop's own cost over a long session: CPU (% of one core) and memory.

One demo job (the default ``data`` scenario, whose DataLoader worker makes the
process tree non-trivial) with TWO aitops attached for the whole session: the
headless CLI (``--duration`` = the session) and the TUI at its default refresh in
a tmux session. Running them side by side halves the wall time of this
benchmark; each one's CPU is counted on its own process tree, so they do not
add to each other's figures (they only compete for the cores, which changes
wall-clock latencies, not CPU seconds).

Every second the benchmark reads, from /proc, each aitop's cumulative CPU
(itself + live py-spy children + reaped ones) and RSS. From that series:

* the first 60 s, startup included (interpreter start, imports, attach);
* every following 60-s window (steady state), as median [min–max];
* the whole session from the wrapper's getrusage after exit (nothing excluded);
* RSS at 10 s and 60 s after launch, at the end, and the peak; growth = end
  minus the value at 60 s (and end minus 10 s, beside it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aitop.engine.commands.ui import DEFAULT_REFRESH_S

from .aitop_proc import (
    AitopRun,
    HeadlessRun,
    MonitorRun,
    TuiRun,
    bare_textual_command,
    glances_command,
)
from .jobs import DemoJob
from .stats import Summary

Log = Callable[[str], None]
SAMPLE_EVERY_S = 1.0


class Sampler(threading.Thread):
    """Reads one aitop's cumulative CPU and RSS every second until stopped."""

    def __init__(self, run: AitopRun) -> None:
        super().__init__(daemon=True, name=f"sampler-{run.name}")
        self.run_ = run
        self.points: list[dict[str, Any]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        next_due = time.time()
        while not self.halt.is_set():
            cpu = self.run_.cpu_seconds()
            rss, tree_rss = self.run_.rss()
            if cpu is not None:
                self.points.append({"t": time.time() - self.run_.launched_at, "cpu_s": cpu,
                                    "rss": rss, "tree_rss": tree_rss})
            next_due += SAMPLE_EVERY_S
            self.halt.wait(max(0.0, next_due - time.time()))


def _at(points: list[dict[str, Any]], t: float, key: str) -> float | None:
    """The sampled value at time t (nearest sample at or after it)."""
    for p in points:
        if p["t"] >= t and p[key] is not None:
            return float(p[key])
    return None


def analyse(points: list[dict[str, Any]], run: AitopRun, session_s: float) -> dict[str, Any]:
    """CPU windows and RSS figures from one sampler's series."""
    out: dict[str, Any] = {"whole_run_cpu_percent": run.whole_run_cpu_percent,
                           "samples": len(points)}
    if not points:
        return out
    end_t = points[-1]["t"]
    # A process starts with zero CPU: the first window is everything up to ~60 s.
    mark = next((p for p in points if p["t"] >= 60.0), None)
    out["first_60s_cpu_percent"] = 100.0 * mark["cpu_s"] / mark["t"] if mark else None
    windows = []
    start = 60.0
    while start + 60.0 <= end_t + 0.5:
        a, b = _at(points, start, "cpu_s"), _at(points, start + 60.0 - 0.5, "cpu_s")
        ta = next(p["t"] for p in points if p["t"] >= start)
        tb = next(p["t"] for p in points if p["t"] >= start + 60.0 - 0.5)
        if a is not None and b is not None and tb > ta:
            windows.append(100.0 * (b - a) / (tb - ta))
        start += 60.0
    if not windows:
        # A 1-minute session (--quick): one steady-state window after the start-up.
        a = _at(points, 15.0, "cpu_s")
        ta = next((p["t"] for p in points if p["t"] >= 15.0), None)
        b, tb = points[-1]["cpu_s"], points[-1]["t"]
        if a is not None and ta is not None and tb - ta >= 20.0:
            windows.append(100.0 * (b - a) / (tb - ta))
            out["steady_window"] = f"{ta:.0f}-{tb:.0f} s"
    else:
        out["steady_window"] = "60-s windows from 60 s on"
    summary = Summary.of(windows)
    out["steady_cpu_percent"] = summary.to_json() if summary else None
    out["steady_windows"] = windows
    rss_points = [p for p in points if p["rss"] is not None]
    if rss_points:
        mb = 1e6
        at10 = _at(points, 10.0, "rss")
        at60 = _at(points, 60.0, "rss") if end_t >= 60.0 else None
        end = rss_points[-1]["rss"]
        out.update({
            "rss_mb_at_10s": at10 / mb if at10 else None,
            "rss_mb_at_60s": at60 / mb if at60 else None,
            "rss_mb_end": end / mb,
            "rss_mb_peak": max(p["rss"] for p in rss_points) / mb,
            "tree_rss_mb_peak": max(p["tree_rss"] or 0 for p in rss_points) / mb,
            "rss_growth_mb_from_60s": (end - at60) / mb if at60 and end_t >= 120 else None,
            "rss_growth_mb_from_10s": (end - at10) / mb if at10 else None,
            "rss_series_mb": [(round(p["t"]), round(p["rss"] / mb, 2))
                              for p in rss_points[:: max(1, len(rss_points) // 60)]],
        })
    return out


def run_session(session_s: float, workdir: Path, log: Log) -> dict[str, Any]:
    """Headless and TUI aitop on one data job for ``session_s`` seconds, beside
    glances (if installed) and a bare Textual app at the same refresh."""
    with DemoJob("data", workdir, duration_s=session_s + 600.0) as job:
        time.sleep(3.0)
        headless = HeadlessRun(workdir, "session-headless").start(job.pid, session_s + 5.0)
        tui = TuiRun(workdir, "session-tui").start(job.pid)
        others: dict[str, MonitorRun] = {
            "bare_textual": MonitorRun(workdir, "session-bare", command=bare_textual_command())}
        glances = glances_command()
        if glances is not None:
            others["glances"] = MonitorRun(workdir, "session-glances", command=glances)
        else:
            log("  session: glances is not installed (pip install -e '.[bench]'): not compared")
        for other in others.values():
            other.start()
        samplers = [Sampler(headless), Sampler(tui),
                    *(Sampler(other) for other in others.values())]
        for s in samplers:
            s.start()
        first_frame = tui.wait_first_frame(deadline=time.time() + 30.0)
        first_data = tui.wait_first_data(deadline=time.time() + 30.0)
        log(f"  session: headless and TUI attached to PID {job.pid}; TUI first frame after "
            f"{first_frame if first_frame is None else round(first_frame, 2)} s, first data "
            f"after {first_data if first_data is None else round(first_data, 2)} s; "
            f"running {session_s:.0f} s")
        # A few seconds past the session, so the 60-s marks are sampled.
        end = tui.launched_at + session_s + 5.0
        while time.time() < end:
            time.sleep(min(30.0, max(0.0, end - time.time())))
            if time.time() < end:
                last = samplers[1].points[-1] if samplers[1].points else None
                if last:
                    log(f"  session: {last['t']:.0f} s, TUI CPU {last['cpu_s']:.2f} s, "
                        f"RSS {last['rss'] / 1e6:.1f} MB")
        for s in samplers:
            s.halt.set()
            s.join()
        tui.quit()
        for other in others.values():
            other.quit()
        headless.wait(timeout_s=60.0)
    compared = {name: analyse(samplers[2 + i].points, other, session_s)
                for i, (name, other) in enumerate(others.items())}
    return compared | {
        "session_s": session_s,
        "headless": analyse(samplers[0].points, headless, session_s)
        | {"report_cpu_percent": headless.report["aitop"]["cpu_percent_of_one_core"],
           "report_rss_mb": headless.report["aitop"]["rss_mb"],
           "orphans_reaped": headless.wrap_result.get("orphans_reaped")},
        "tui": analyse(samplers[1].points, tui, session_s)
        | {"first_frame_s": first_frame, "first_data_s": first_data,
           "refresh_s": DEFAULT_REFRESH_S,
           "orphans_reaped": tui.wrap_result.get("orphans_reaped")},
    }
