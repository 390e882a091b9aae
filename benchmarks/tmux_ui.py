"""The UI as a user meets it: first frame and key latency in a real terminal (tmux).

``aitop --pid N`` (the real console script) runs in a detached tmux session of
200x50, as in the other TUI sections. First frame: the ``aitop`` process's
start (the wrapper stamps it) until the header (``PID N``) is on the pane
(``tmux capture-pane``, polled every 20 ms), aitop's bytecode compiled first as
``pip install`` does (``machine.compile_bytecode``). Keys, in the last run once
a diagnosis is on screen: each key is sent with ``tmux send-keys`` (into the
pane directly: tmux's own ``escape-time``, which a terminal's Escape waits for,
does not apply) and timed until the pane shows what the key does (a detail
screen replaced the main one, the main one back, PAUSED/LIVE in the header, the
refresh named there): keyboard to pixels, the terminal's rendering included, at
a resolution of one ``capture-pane`` (a few ms). These are wall-clock figures:
they need a quiet machine (the section records the load average beside them).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .aitop_proc import TuiRun
from .stats import Summary

Log = Callable[[str], None]

#: The main screen's mark: its advisor panel's title.
MAIN = "─ Advisor "
#: (tmux key, what the pane shows once it is answered). A round ends where it
#: began: the main screen, live, at the default refresh (2 s).
KEYS: tuple[tuple[str, str], ...] = (
    ("g", "detail"), ("Escape", "main"),
    ("f", "detail"), ("Escape", "main"),
    ("w", "detail"), ("Escape", "main"),
    ("i", "detail"), ("Escape", "main"),
    ("k", "detail"), ("Escape", "main"),
    ("?", "detail"), ("Escape", "main"),
    ("p", "PAUSED"), ("p", "LIVE"),
    ("+", "refresh 1s"), ("-", "refresh 2s"),
)
TIMEOUT_S = 3.0
POLL_S = 0.003


def _answered(expect: str) -> Callable[[str], bool]:
    if expect == "detail":
        return lambda screen: bool(screen.strip()) and MAIN not in screen
    if expect == "main":
        return lambda screen: MAIN in screen
    return lambda screen: expect in screen.splitlines()[0] if screen else False


def _key(run: TuiRun, key: str, expect: str) -> float | None:
    """Seconds from sending ``key`` until the pane shows its answer (None: timed out)."""
    done = _answered(expect)
    literal = ["-l"] if len(key) == 1 else []
    started = time.perf_counter()
    subprocess.run(["tmux", "-L", run.socket, "send-keys", "-t", run.name, *literal, key],
                   capture_output=True, timeout=10, check=True)
    while time.perf_counter() - started < TIMEOUT_S:
        if done(run.screen()):
            return time.perf_counter() - started
        time.sleep(POLL_S)
    return None


def _wait_for_diagnosis(run: TuiRun, timeout_s: float) -> bool:
    """Until the advisor says more than that it is collecting (a first verdict)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        screen = run.screen()
        if MAIN in screen and "findings" in screen and "Collecting" not in screen:
            return True
        time.sleep(0.5)
    return False


def run_tmux_ui(job_pid: int, runs: int, key_rounds: int, workdir: Path,
                log: Log) -> dict[str, Any]:
    """``runs`` launches for the first frame; keys in the last one."""
    from .machine import load_average

    firsts: list[float] = []
    data: list[float] = []
    keys: dict[str, list[float]] = {}
    timeouts = 0
    loads = [load_average()[0]]
    for i in range(runs):
        # A tmux server of its own per run: the last one may still be going away.
        run = TuiRun(workdir, f"tmux-ui-{i}", socket=f"aitop-ui-{os.getpid()}-{i}")
        run.start(job_pid)
        try:
            first = run.wait_first_frame(deadline=time.time() + 30.0)
            shown = run.wait_first_data(deadline=time.time() + 30.0)
            if first is not None:
                firsts.append(first)
            if shown is not None:
                data.append(shown)
            if i == runs - 1 and key_rounds:
                if not _wait_for_diagnosis(run, 30.0):
                    log("  tmux_ui: no diagnosis on screen within 30 s; keys measured anyway")
                time.sleep(2.0)
                for _ in range(key_rounds):
                    for key, expect in KEYS:
                        took = _key(run, key, expect)
                        if took is None:
                            timeouts += 1
                            log(f"  tmux_ui: {key} not answered within {TIMEOUT_S:g} s")
                        else:
                            keys.setdefault(key, []).append(took)
                        time.sleep(0.3)
        finally:
            run.quit()
        loads.append(load_average()[0])
    every = [v for values in keys.values() for v in values]
    others = [v for key, values in keys.items() if key != "Escape" for v in values]

    def summary(values: list[float]) -> dict[str, float] | None:
        s = Summary.of(values)
        return s.to_json() if s else None

    return {
        "first_frame_s": summary(firsts), "first_data_s": summary(data),
        "key_latency_s": summary(every), "key_latency_but_escape_s": summary(others),
        "per_key": {key: summary(values) for key, values in keys.items()},
        "key_timeouts": timeouts, "load_average": loads,
    }
