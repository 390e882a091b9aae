"""Targets 4 (first frame) and 5 (key latency), in-process with Textual's Pilot.

Why in-process: key latency must be measured where it happens, in the app's
event loop, while the live source's probe threads (py-spy windows, step dumps,
the 1 Hz evaluator) run in the same interpreter and compete for the GIL, exactly
as in ``aitop --pid``. The app runs under ``App.run_test`` (headless driver, a
fixed 200x50 screen) on a real :class:`LiveSource` attached to a real demo job.

Key latency: each key is injected the way a terminal's input thread does it
(``driver.send_message(events.Key(...))``), then we wait until the expected
change (a detail screen on top, the display paused, the refresh rate changed)
AND the next screen refresh after it has completed
(``screen.wait_for_refresh``). Keys are spaced by random 0.1-0.5 s gaps so they
land at every phase of the probes' cycles. ``pilot.press`` itself is timed too,
as a secondary figure: it also waits for the whole process to go idle
(``wait_for_idle``), which the probe threads delay, so it overstates latency.

First frame: from entering ``run_test`` to the app's own ``first_frame_at``
(set after the first refresh following mount), with the source already
attached. The user-visible figure (process start to header on screen, in tmux)
comes from the TUI overhead and session benchmarks.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .jobs import DemoJob
from .stats import Summary

Log = Callable[[str], None]

#: (key, character, what must be true afterwards): a round trip that ends on
#: the main screen, unpaused, at the default refresh (2 s), with the advisor
#: focused. Every key of the main screen and drill-down the issue names (Tab,
#: Enter, Escape, k, ?, s) and the other single-key screens.
KEYS: tuple[tuple[str, str | None, str], ...] = (
    ("tab", "\t", "focus:moved"),
    ("enter", "\r", "screen-not:MainScreen"),
    ("escape", "\x1b", "screen:MainScreen"),
    ("shift+tab", None, "focus:moved"),
    ("g", "g", "screen:GpuScreen"),
    ("escape", "\x1b", "screen:MainScreen"),
    ("f", "f", "screen:StacksScreen"),
    ("escape", "\x1b", "screen:MainScreen"),
    ("w", "w", "screen:ProcessScreen"),
    ("escape", "\x1b", "screen:MainScreen"),
    ("i", "i", "screen:IoScreen"),
    ("escape", "\x1b", "screen:MainScreen"),
    ("k", "k", "screen:KnowledgeScreen"),
    ("escape", "\x1b", "screen:MainScreen"),
    ("question_mark", "?", "screen:HelpScreen"),
    ("escape", "\x1b", "screen:MainScreen"),
    ("s", "s", "exports:more"),
    ("p", "p", "paused:True"),
    ("p", "p", "paused:False"),
    ("plus", "+", "refresh:1.0"),
    ("minus", "-", "refresh:2.0"),
)
TIMEOUT_S = 2.0
#: How often the change is looked for: fine enough for a 100 ms target, coarse
#: enough not to load the event loop being measured.
POLL_S = 0.004
#: Seconds of untouched UI over which the idle event-loop CPU rate is measured.
IDLE_S = 10.0


def _condition(app: Any, expect: str) -> Callable[[], bool]:
    """What must hold once the key is answered; taken before the key is sent."""
    kind, _, value = expect.partition(":")
    if kind == "screen":
        return lambda: type(app.screen).__name__ == value
    if kind == "screen-not":
        return lambda: type(app.screen).__name__ != value
    if kind == "focus":
        before = app.screen.focused
        return lambda: app.screen.focused is not before
    if kind == "exports":
        # The "Saved ..." notification: snapshot, report and screenshot written.
        count = len(app.exports)
        return lambda: len(app.exports) > count
    if kind == "paused":
        return lambda: bool(app.paused) == (value == "True")
    return lambda: abs(float(app.refresh_s) - float(value)) < 1e-9


async def _key_latency(app: Any, key: str, char: str | None, expect: str) -> dict[str, Any]:
    """Wall time from injection to the change, and to the refresh after it.

    ``cpu_s`` is the CPU time of the event-loop thread over the same interval:
    the UI's own work for the key, which the machine's load cannot inflate.
    """
    from textual import events

    done = _condition(app, expect)
    c0 = time.thread_time()
    t0 = time.perf_counter()
    app._driver.send_message(events.Key(key, char))
    while not done():
        if time.perf_counter() - t0 > TIMEOUT_S:
            return {"key": key, "s": None, "changed_s": None, "cpu_s": None}
        await asyncio.sleep(POLL_S)
    changed = time.perf_counter() - t0
    await app.screen.wait_for_refresh()
    return {"key": key, "s": time.perf_counter() - t0, "changed_s": changed,
            "cpu_s": time.thread_time() - c0}


async def _pilot_press(pilot: Any, app: Any, key: str, expect: str) -> float | None:
    done = _condition(app, expect)
    t0 = time.perf_counter()
    await pilot.press(key)
    while not done():
        if time.perf_counter() - t0 > TIMEOUT_S:
            return None
        await asyncio.sleep(POLL_S)
    return time.perf_counter() - t0


async def _measure(job_pid: int, rounds: int, first_frame_runs: int, workdir: Path,
                   log: Log) -> dict[str, Any]:
    from aitop.engine.commands.ui import DEFAULT_REFRESH_S
    from aitop.engine.live.attach import AttachOptions, attach
    from aitop.tui.app import AitopApp

    t = time.perf_counter()
    source = attach(job_pid, AttachOptions())
    attach_s = time.perf_counter() - t
    first_frames: list[float] = []
    idle_cpu: float | None = None
    stacks_status: str | None = None
    latencies: list[dict[str, Any]] = []
    pilot_latencies: list[float | None] = []
    rng = random.Random(1234)
    try:
        for i in range(first_frame_runs):
            app = AitopApp(source, refresh_s=DEFAULT_REFRESH_S,
                           export_path=workdir / "key-export.json")
            t0 = time.monotonic()
            async with app.run_test(size=(200, 50)) as pilot:
                while app.first_frame_at is None and time.monotonic() - t0 < 30:
                    await asyncio.sleep(0.001)
                if app.first_frame_at is not None:
                    first_frames.append(app.first_frame_at - t0)
                if i < first_frame_runs - 1:
                    continue
                # Keys only once the probes are really sampling: a stack window
                # has landed and a diagnosis rests on it.
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and (
                    source.session.stacks.last() is None or app.diagnosis is None
                ):
                    await asyncio.sleep(0.05)
                # The UI's own background cost: ticks and redraws, no keys.
                c0, t0 = time.thread_time(), time.perf_counter()
                await asyncio.sleep(IDLE_S)
                idle_cpu = (time.thread_time() - c0) / (time.perf_counter() - t0)
                for _ in range(rounds):
                    for key, char, expect in KEYS:
                        await asyncio.sleep(rng.uniform(0.1, 0.5))
                        latencies.append(await _key_latency(app, key, char, expect))
                for _ in range(rounds):
                    for key, _char, expect in KEYS[:2]:
                        await asyncio.sleep(rng.uniform(0.1, 0.5))
                        pilot_latencies.append(await _pilot_press(pilot, app, key, expect))
                status = source.session.probe_status.get("stacks")
                stacks_status = status.text if status is not None else None
    finally:
        source.close()
    values = [x["s"] for x in latencies]
    key_summary = Summary.of(values)
    log(f"  tui: attach {attach_s:.2f} s; first frame {[round(f, 3) for f in first_frames]} s; "
        f"{len(values)} key presses, median "
        f"{key_summary.median * 1000 if key_summary else float('nan'):.1f} ms")
    per_key: dict[str, Any] = {}
    for key, _c, _e in KEYS:
        s = Summary.of([x["s"] for x in latencies if x["key"] == key])
        per_key[key] = s.to_json() if s else None
    pilot_summary = Summary.of(pilot_latencies)
    changed = Summary.of([x["changed_s"] for x in latencies])
    cpu = Summary.of([x["cpu_s"] for x in latencies])
    ff = Summary.of(first_frames)
    return {
        "attach_s": attach_s,
        "first_frame_s": ff.to_json() if ff else None,
        "first_frame_runs": first_frames,
        "key_latency_s": key_summary.to_json() if key_summary else None,
        "key_changed_s": changed.to_json() if changed else None,
        "key_ui_cpu_s": cpu.to_json() if cpu else None,
        "presses": latencies,
        "key_timeouts": sum(1 for v in values if v is None),
        "key_presses": len(values),
        "per_key": per_key,
        "pilot_press_s": pilot_summary.to_json() if pilot_summary else None,
        "stacks_status": stacks_status,
        "idle_ui_cpu_percent": 100.0 * idle_cpu if idle_cpu is not None else None,
    }


def run_tui_latency(rounds: int, first_frame_runs: int, workdir: Path, log: Log) -> dict[str, Any]:
    """Attach to a data job and drive the real app with Pilot."""
    with DemoJob("data", workdir, duration_s=900.0) as job:
        time.sleep(3.0)
        return asyncio.run(_measure(job.pid, rounds, first_frame_runs, workdir, log))
