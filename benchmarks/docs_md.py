"""docs/benchmarks.md: the command, the results against targets, and how each was measured."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .jobs import SCENARIOS
from .results import DATA_MARKER, all_rows, md_table
from .stats import Summary, fmt_summary
from .tui_latency import IDLE_S

HEADER = """# Benchmarks

```bash
python -m benchmarks.run            # full run (~30 min): writes this file
python -m benchmarks.run --quick    # ~4-5 min smoke run: one pair, a 1-min session
python -m benchmarks.run --only overhead   # one section (repeatable):
                                           #   pyspy | smaps | overhead | tui_overhead |
                                           #   session | tui | ranks | agent | probe_cost |
                                           #   tmux_ui
```

Run from the repository root with the virtual environment active (`tmux` and
`py-spy` must be installed; the demo jobs need torch; `pip install -e '.[bench]'`
adds glances, which the session section measures beside aitop's UI). The command prints the table
below and rewrites this file; everything in it is measured by that run (the raw
results are embedded at the end of this file). A `--only` run refreshes its
section and keeps the others, each stamped with its own date, mode and commit.

**How to read it.** Each figure is the median over several runs, followed by
`[min–max]` and the number of runs `n`; the IQR column is the interquartile
range. The machine is shared with other people's test runs while we measure, so
nothing is compared with an earlier run: every comparison (aitop attached vs
not) is a ratio measured within one run, in alternating periods on one
long-running job. A ratio of two 10-s periods swings by ±10 % here on its own;
the line beside it, *aitop CPU / job CPU* over the same "on" period, is the bound
that noise cannot blur (aitop can slow the job only by taking CPU from it: py-spy
runs `--nonblocking` and never stops the job).
"""

METHODS = {
    "agent": """### The node agent's cost per job count (issue 21)

For N = 1, 2 and 4 small single-process PyTorch jobs (`benchmarks/agent.py`'s
`LIGHT_JOB`: a 2-layer MLP trained in a loop that sleeps 30 ms a step, so the jobs
leave the cores mostly free), one node agent (`aitop --serve 127.0.0.1:0 --match
MARKER`, no `--pid`) is scraped. Once it watches all N and {warmup_s:g} s have passed,
its own CPU (`aitop_self_cpu_seconds`, py-spy runs included) is read over
{duration_s:g} s; {rounds} round(s), the job counts interleaved within each round. The
time to a first series is from each job's start to the first scrape showing its
`aitop_target_info`. A last run ({budget_s:g} s) gives 4 jobs a `--budget` of 60 % of
their measured median cost and reads the agent's CPU over its last minute and the
pace it settled at (the budget is judged on each minute).
""",
    "ranks": """### Every rank of a job (issue 9)

For N = 1, 2 and 4 ranks of the DDP demo (`torchrun --nproc_per_node=N -m
aitop.demo.ddp --truth DIR`, gloo on CPU; with N > 1 rank N-1 builds its batches
in its training thread at 12 ms of CPU each, the straggler), aitop is pointed at
the launcher: `aitop --pid LAUNCHER --headless --json --duration {duration_s:g}`,
{rounds} round(s), the rank counts interleaved within each round. aitop's CPU is
the report's own figure (py-spy included); N = 1 (one rank, no peers) is the
single-process figure. The communication error is the worst rank's |aitop's
comm share − the rank's own timer| (time inside forward/backward/optimizer off
the CPU and not queued for one); "straggler named right" counts runs whose
verdict names rank N-1. On 2 cores, 4 ranks oversubscribe the machine: aitop's
peers sample at 2/N of the lead rank's rate (`peer_config`).
""",
    "pyspy": """### What one py-spy call costs (the basis of aitop's cadences)

py-spy dominates aitop's own CPU, so its unit costs are measured, with exactly
aitop's flags (`probes/pyspy.py`), alternated round-robin on one `data` job:
each call is charged the CPU of the reaped py-spy process
(`getrusage(RUSAGE_CHILDREN)` before/after). `record` runs {record_s} s at 1 Hz
(almost only launching and attaching) and at 50 Hz; the per-sample cost is the
difference divided by the difference in samples (a sample is one thread's stack
at one tick; the demo job shows ~2 threads). The model line multiplies these by
aitop's default cadences (`CollectorConfig`, and `CollectorConfig.headless()` when
it exists): launch / window + rate × threads × per-sample, plus one
`dump --locals` per step-counter read.
""",
    "smaps": """### What one smaps_rollup read costs (the basis of the private-memory cadence)

The kernel sums `/proc/PID/smaps_rollup` by walking the process's page tables,
so a read's cost grows with the process's resident memory. Measured
({reps} reads each) on a process holding 0.5 and 2 GB of touched anonymous
memory, and on a forked child of it that shares every page (as a DataLoader
worker shares its parent's), each read charged the reading thread's CPU time
(`time.thread_time`: the walk is the reader's system time); `status` (what RSS
costs) beside it (`benchmarks/smaps_cost.py`). The model line applies aitop's
rule (`probes/private_memory.py`: a process is read again after
cost × processes / `smaps_cpu_share`, never sooner than `smaps_interval_s` for a
DataLoader worker and `smaps_others_interval_s` for any other process, all from
`probes/cadence.py`) to a 2-GB training process with two forked workers.
""",
    "overhead": """### Overhead, accuracy and speed of diagnosis — headless (targets 1, 3, 4)

* One demo job per scenario (`python -m aitop.demo.workload --scenario S
  --truth FILE`), started once; aitop is attached and detached many times.
* Pairs of periods in ABBA order (off-on, on-off, …). "off": nothing attached for
  {period_s:g} s. "on": `aitop --pid N --headless --json --duration {duration_s:g}`
  is launched, and the period [launch + {settle_s:g} s, + {period_s:g} s] is measured,
  so interpreter start-up and attach are over.
* steps/s: from the job's own step counter (truth file, interpolated at the
  period's boundaries). Ratio = steps/s(on) / steps/s(off), per pair.
* aitop CPU: /proc utime+stime of aitop and all its descendants, plus the
  cutime+cstime of those it reaped (py-spy runs), at the period's boundaries; job
  CPU: the same for the job and its DataLoader workers.
* Accuracy: each headless report's `phases` against the job's own timers over
  exactly the report's `phase_span`, and its `steps_per_s` against the job's own
  step count over exactly its `steps_span` (the counter readings behind it; the
  phase span in reports without it), with `benchmarks/jobs.py`'s `truth_between`; errors in
  percentage points (phases) and % (steps/s).
* Speed of diagnosis: seconds from attach (the report's `attached_at`) to the first
  evaluation whose category is the expected one (data→data_loading,
  compute→compute, checkpoint→io, healthy→none) *and* rests on stack samples —
  the `none` shown while "Collecting: no stack samples yet" does not count. The
  report's `timeline` cannot tell those two `none`s apart, so the CLI is run
  through `benchmarks/hooked_cli.py`, which runs `aitop.tui.entry.main` unchanged and
  writes the full diagnosis history when the report is built.
* The whole-run CPU (startup included) is the wrapper's `getrusage(RUSAGE_CHILDREN)`
  after aitop exited (`benchmarks/wrap.py`: a child subreaper, so even a py-spy
  that aitop left behind would be counted).
""",
    "tui_overhead": """### Overhead — TUI (target 1) and first frame in a real terminal (target 4)

As above, but the "on" period runs the real UI: `aitop --pid N` at its default
refresh (1 s until 2026-12-01, 2 s since: see the section's date) in a detached
tmux session of 200x50 (`tmux new-session -d -x 200 -y 50`),
quit with the `q` key afterwards. First frame: from the start of the `aitop`
process (stamped by the wrapper that starts it; since 2026-12-05, before that from
launching the tmux session, which added the tmux server's and the wrapper's own
start) to `PID N` (the UI's header) appearing in `tmux capture-pane`, polled
every 20 ms — what a user sees: interpreter start, imports, attach and the first
paint. aitop's bytecode is compiled first, as `pip install` does (the machine
line's `bytecode`). Polling stops before the measured period starts.
""",
    "session": """### aitop's own cost over a session (target 2)

One `data` demo job with two aitops attached for {session_s:.0f} s: the headless CLI
(`--duration {session_s:.0f}`) and the TUI (default refresh, 2 s) in tmux. Every second,
each aitop's cumulative CPU (itself + live and reaped children: py-spy included)
and RSS are read from /proc. Reported: the first 60 s (start-up included), the
steady state ({steady}), and the whole session from `getrusage` after exit. RSS is
aitop's own process (py-spy's is listed separately as "tree peak"); growth is
the end minus the value at 60 s (the value at 10 s is shown too).

Beside them, in the same session and measured the same way (tmux at the same
size, the same wrapper, CPU of the whole process tree), at the UI's default
refresh: `glances --time 2` (glances' own default; installed by `pip install -e
'.[bench]'`; skipped with a note when absent) and `benchmarks/bare_textual.py`,
a bare Textual app repainting six bordered panels of text every 2 s: the floor
any Textual UI at this refresh pays here. First data: launch until the process
panel shows the job's row (`main N`), drawn from the first process-tree sample.
Where the UI's CPU and memory go, and what was changed: docs/ui-cost.md.
""",
    "probe_cost": """### Where aitop's CPU goes, probe by probe

`python -m benchmarks.run --only probe_cost`. One `{scenario}` demo job; per round,
two aitops attached to it side by side for {duration_s:g} s: `aitop --pid N --headless
--json --duration {duration_s:g}` and the UI (`aitop --pid N`, refresh 2 s) in tmux at
200x50, each run through `benchmarks/ledger_cli.py`, which runs `aitop.tui.entry.main`
unchanged with `benchmarks/cpu_ledger.py` installed first. The ledger charges CPU
seconds, not wall time, which other work on the machine hardly changes: each
probe's thread (`aitop-<probe>`) by its own CPU clock
(`pthread_getcpuclockid`, its last `time.thread_time()` when it ends); the named hot
spots (the neighbour scan, cgroup and schedstat reads, the evaluation's metrics,
words and rules) by `time.thread_time()` around each call, nested spots and the
spot's own CPU taken off its thread; every child by what it is (`py-spy record`,
`py-spy dump --locals`, the preflight's `py-spy dump`) from `os.wait4`'s rusage
when reaped, and from `/proc/PID/stat` while it runs. The GPU probe reads the test
suite's fake NVML (`--fake-gpu {fake_gpu}`; this machine has no GPU), so its
per-tick work is counted. A snapshot every 5 s; the steady state runs from
{warm_s:g} s after attach to the last snapshot before the end (the first
verdict's faster cadences are over); "whole run" is everything from the process's
start, imports and attach included, over its whole life. Medians over {rounds}
round(s), % of one core (60 × that is CPU seconds per minute). "unaccounted" is the
process's `getrusage` minus its threads' clocks (none should be).
""",
    "tmux_ui": """### First frame and keys in a real terminal (targets 4, 5; wall clock)

`python -m benchmarks.run --only tmux_ui`, on a quiet machine (`uptime` under 2: the
figures are wall clock, and the load average at start and after each run is listed).
`aitop --pid N` (the console script) on a `compute` demo job, in a detached tmux
session of 200x50, launched {runs} times. First frame: the `aitop` process's
start → `PID N` (the header) in `tmux capture-pane`, polled every 20 ms; first
data: → the process panel's `main N` row. aitop's bytecode is compiled first, as
`pip install` does for the wheel (an editable checkout under
`PYTHONDONTWRITEBYTECODE` compiles every module at each start: before
2026-12-05 these figures included that, and the tmux server's and the wrapper's
own start; the bytecode alone, in an A/B of 5 alternating in-process starts on
a quiet box on 2026-12-05: 0.64 s from source against 0.57 s from bytecode to
the first refresh, medians; where those 0.48 s go, 4 starts: importing the
command line and the engine 0.17 s, the UI and Textual 0.15 s, attaching (the
knowledge base read, the probes started) 0.08 s, Textual's start to its first
refresh 0.07 s). Keys, in the last run once a verdict is on screen, {key_rounds}
round(s) of g, f, w, i, k and ? (each followed by Escape), p twice, + and −: each
sent with `tmux send-keys` (into the pane: tmux's own `escape-time` does not apply)
and timed until the pane shows its answer (a detail screen instead of the main
one, the main one back, PAUSED/LIVE, the refresh in the header), polled every
few ms: keyboard to what the terminal shows, repaint included. The tail is
Python's full garbage collections: Textual's rendering leaves cyclic garbage, a
full pass comes every 8-10 s and walked the ~80,000 objects start-up left, 68-94
ms with the UI's thread stopped (logged with `gc.callbacks` on 2026-12-05). The
UI freezes those after its first frame (`tui/heap.py`): full passes then took
20-50 ms, and in an A/B of three alternated runs each on 2026-12-05 (nothing
else running, load average about 1) the keys' p95 went from 145, 123 and 128 ms
to 92, 96 and 75 ms (medians 45, 45, 44 → 46, 43, 42 ms).
""",
    "tui": """### First frame and key latency with Textual's Pilot (targets 4, 5)

In-process: a real `LiveSource` (`aitop.engine.live.attach.attach`) on a `data` demo job,
and the real `AitopApp` under `App.run_test(size=(200, 50))`, so the probe threads
(py-spy windows, step dumps, the evaluator) share the interpreter with the event
loop exactly as in `aitop --pid`. First frame: from entering `run_test` to the
app's `first_frame_at` (after the first refresh following mount). Keys, once a
stack window and a diagnosis exist: each key is injected as a terminal's input
thread does (`driver.send_message(events.Key(...))`) and timed until the expected
change (focus moved, detail screen on top, display paused, refresh rate changed,
export written and notified) *and* the next refresh after it completed, at the
default refresh (2 s). Keys: Tab, Enter (the focused panel's detail), Escape,
Shift-Tab, g, f, w, i, k, ? (each followed by Escape), s (export), p twice, +
and −, separated by random 0.1–0.5 s gaps. The event-loop thread's CPU
time over the same interval (`time.thread_time`) is shown beside: it is the UI's
own work per key, which the machine's load cannot inflate. `pilot.press()` is
timed as well, but it also waits for the process to go idle, so it overstates.
""",
}


def _f(value: float | None, fmt: str = ".2f", unit: str = "") -> str:
    return "—" if value is None else f"{value:{fmt}}{unit}"


def _sj(data: dict[str, Any] | None, fmt: str = ".3f", unit: str = "", scale: float = 1.0
        ) -> str:
    if not data:
        return "—"
    s = Summary.from_json(data)
    s = Summary(s.n, s.median * scale, s.q1 * scale, s.q3 * scale, s.minimum * scale,
                s.maximum * scale, s.p95 * scale)
    return fmt_summary(s, fmt, unit)


def _stamp(section: dict[str, Any]) -> str:
    m = section.get("machine", {})
    dirty = " + uncommitted engine changes" if m.get("engine_uncommitted") else ""
    load = m.get("load_average_start")
    load_text = f"; load average at start {load[0]:.1f}" if load else ""
    return (f"*Measured {section.get('date', '?')}, {section.get('mode', '?')} run, "
            f"{section.get('duration_s', 0) / 60:.1f} min, commit "
            f"{m.get('git_commit', '?')}{dirty}{load_text}.*")


def overhead_detail(section: dict[str, Any], headless: bool) -> str:
    out = []
    head = ("| scenario | steps/s off | steps/s on | ratio on/off | aitop CPU / job CPU | "
            "aitop CPU in period | whole run incl. startup | job CPU (off) |")
    out += [head, "|---" * 8 + "|"]
    for scenario in SCENARIOS:
        r = section.get("scenarios", {}).get(scenario)
        if not r:
            continue
        out.append(
            f"| {scenario} | {_sj(r['steps_per_s_off'], '.2f')} | {_sj(r['steps_per_s_on'], '.2f')}"
            f" | {_sj(r['ratio'])} | {_sj(r['aitop_over_job_cpu'], '.4f')} | "
            f"{_sj(r['aitop_cpu_percent'], '.2f', ' %')} | "
            f"{_sj(r['whole_run_cpu_percent'], '.2f', ' %')} | "
            f"{_sj(r['job_cpu_percent_off'], '.0f', ' %')} |")
    if headless:
        out += ["", "| scenario | data-wait error | checkpoint error | steps/s error | "
                "attach → correct | launch → correct | wrong evaluations after correct | "
                "report's own CPU % |", "|---" * 8 + "|"]
        for scenario in SCENARIOS:
            r = section.get("scenarios", {}).get(scenario)
            if not r:
                continue
            out.append(
                f"| {scenario} | {_sj(r['data_wait_err_pp'], '.2f', ' pp')} | "
                f"{_sj(r['checkpoint_err_pp'], '.2f', ' pp')} | "
                f"{_sj(r['steps_rel_err'], '.1f', ' %', 100.0)}"
                f"{', null in ' + str(r['steps_unknown']) if r.get('steps_unknown') else ''} | "
                f"{_sj(r['diagnosis_after_attach_s'], '.1f', ' s')} | "
                f"{_sj(r['diagnosis_after_launch_s'], '.1f', ' s')} | {r['diagnosis_flips']} | "
                f"{_sj(r['report_cpu_percent'], '.2f', ' %')} |")
    else:
        out += ["", "| scenario | first frame (launch → header in tmux) |", "|---|---|"]
        for scenario in SCENARIOS:
            r = section.get("scenarios", {}).get(scenario)
            if r:
                out.append(f"| {scenario} | {_sj(r.get('first_frame_s'), '.2f', ' s')} |")
    out += ["", "<details><summary>Every pair</summary>", ""]
    cols = "| scenario | order | steps/s off | steps/s on | ratio | aitop/job CPU |"
    if headless:
        cols += (" data wait aitop / job | checkpoint aitop / job | steps/s aitop / job |"
                 " correct after |")
    out += [cols, "|" + "---|" * (cols.count("|") - 1)]
    for scenario in SCENARIOS:
        r = section.get("scenarios", {}).get(scenario)
        if not r:
            continue
        for p in r["pairs"]:
            line = (f"| {scenario} | {p['order']} | {p['off']['steps_per_s']:.2f} | "
                    f"{p['on']['steps_per_s']:.2f} | {p['ratio']:.3f} | "
                    f"{_f(p.get('aitop_over_job_cpu'), '.4f')} |")
            if headless:
                acc = p.get("accuracy", {})
                truth = acc.get("truth", {})
                phases = acc.get("phases") or {}
                line += (f" {_f(phases.get('data_wait'), '.3f')} / "
                         f"{_f(truth.get('data_wait'), '.3f')} | "
                         f"{_f(phases.get('checkpoint'), '.3f')} / "
                         f"{_f(truth.get('checkpoint'), '.3f')} | "
                         f"{_f(acc.get('steps_per_s'), '.2f')} / "
                         f"{_f(acc.get('true_steps_per_s', truth.get('steps_per_s')), '.2f')} | "
                         f"{_f(p.get('diagnosis', {}).get('after_attach_s'), '.1f', ' s')} |")
            out.append(line)
    out += ["", "</details>"]
    return "\n".join(out)


def session_detail(section: dict[str, Any]) -> str:
    modes = [m for m in ("headless", "tui", "glances", "bare_textual") if section.get(m)]
    names = {"headless": "headless", "tui": "TUI", "glances": "glances",
             "bare_textual": "bare Textual"}
    out = ["| | " + " | ".join(names[m] for m in modes) + " |",
           "|---|" + "---|" * len(modes)]

    def row(label: str, key: str, fmt: str = ".2f", unit: str = "") -> None:
        cells = " | ".join(_f(section[m].get(key), fmt, unit) for m in modes)
        out.append(f"| {label} | {cells} |")

    cells = " | ".join(_sj(section[m].get("steady_cpu_percent"), ".2f", " %") for m in modes)
    out.append(f"| CPU, steady state, median [min–max] | {cells} |")
    row("CPU, first 60 s incl. startup", "first_60s_cpu_percent", unit=" %")
    row("CPU, whole session (getrusage)", "whole_run_cpu_percent", unit=" %")
    row("CPU, the report's own figure (since attach)", "report_cpu_percent", unit=" %")
    row("RSS at 10 s", "rss_mb_at_10s", ".1f", " MB")
    row("RSS at 60 s", "rss_mb_at_60s", ".1f", " MB")
    row("RSS at the end", "rss_mb_end", ".1f", " MB")
    row("RSS peak", "rss_mb_peak", ".1f", " MB")
    row("RSS peak, aitop + py-spy", "tree_rss_mb_peak", ".1f", " MB")
    row("RSS growth, 60 s → end", "rss_growth_mb_from_60s", ".2f", " MB")
    row("RSS growth, 10 s → end", "rss_growth_mb_from_10s", ".2f", " MB")
    row("orphaned children reaped by the wrapper", "orphans_reaped", ".0f")
    first = _f(section.get("tui", {}).get("first_frame_s"), ".2f", " s")
    out.append(f"| TUI first frame (launch → header) | {first} |" + " |" * (len(modes) - 1))
    data = _f(section.get("tui", {}).get("first_data_s"), ".2f", " s")
    out.append(f"| TUI first data (launch → `main N` row) | {data} |" + " |" * (len(modes) - 1))
    for mode in modes:
        series = section.get(mode, {}).get("rss_series_mb")
        if series:
            out += ["", f"RSS of the {mode} aitop over the session (s, MB): "
                    + ", ".join(f"{a}: {b}" for a, b in series)]
        windows = section.get(mode, {}).get("steady_windows")
        if windows:
            out += ["", f"CPU % per steady-state window, {mode}: "
                    + ", ".join(f"{w:.2f}" for w in windows)]
    return "\n".join(out)


def tui_detail(section: dict[str, Any]) -> str:
    def ms(key: str) -> str:
        return _sj(section.get(key), ".0f", " ms", 1000)

    p95 = (section.get("key_latency_s") or {}).get("p95")
    out = [f"* attach (`aitop.engine.live.attach.attach`, in-process): "
           f"{_f(section.get('attach_s'), '.2f', ' s')}",
           "* first frame per app start: "
           + ", ".join(f"{v:.3f} s" for v in section.get("first_frame_runs", [])),
           f"* key presses: {section.get('key_presses')}, timeouts (> 2 s): "
           f"{section.get('key_timeouts')}; stack probe during the test: "
           f"`{section.get('stacks_status')}`",
           f"* key → change (before the repaint): {ms('key_changed_s')}",
           f"* key → change + repaint: {ms('key_latency_s')}, "
           f"p95 {_f(p95 * 1000 if p95 is not None else None, '.0f', ' ms')}",
           f"* UI-thread CPU per key: {ms('key_ui_cpu_s')}; the same thread with no key "
           f"pressed (ticks, redraws): {_f(section.get('idle_ui_cpu_percent'), '.1f', ' %')} "
           f"of one core over {IDLE_S:g} s",
           f"* `pilot.press()` until the change: {ms('pilot_press_s')}",
           "", "| key | key → change + repaint |", "|---|---|"]
    for key, data in (section.get("per_key") or {}).items():
        out.append(f"| {key} | {_sj(data, '.0f', ' ms', 1000)} |")
    return "\n".join(out)


def probe_cost_detail(section: dict[str, Any]) -> str:
    """Each account's share of a core, headless beside the UI, busiest first."""
    from .probe_cost import LEDGER, NAMES

    head, ui = section.get("headless", {}), section.get("ui", {})
    accounts = {**head.get("accounts", {}), **ui.get("accounts", {})}

    def median(mode: dict[str, Any], key: str) -> float:
        return float((mode.get("accounts", {}).get(key) or {}).get("median", 0.0))

    order = sorted(accounts, key=lambda k: -(median(head, k) + median(ui, k)))
    out = ["| account | headless, % of a core | UI, % of a core |", "|---|---|---|"]
    for key in order:
        name = NAMES.get(key, key.split(":", 1)[-1])
        if key == LEDGER:
            name += " (the measurement; left out of the totals)"
        out.append(f"| {name} | {_sj(head.get('accounts', {}).get(key), '.3f', ' %')} | "
                   f"{_sj(ui.get('accounts', {}).get(key), '.3f', ' %')} |")
    for key, label in (("total_percent", "**total, steady state**"),
                       ("pyspy_percent", "of which py-spy (children)"),
                       ("whole_run_percent", "whole run, start-up included"),
                       ("startup_s", "launch → attached (s)")):
        unit = " s" if key == "startup_s" else " %"
        out.append(f"| {label} | {_sj(head.get(key), '.2f', unit)} | "
                   f"{_sj(ui.get(key), '.2f', unit)} |")
    window = head.get("window_s")
    if window:
        out += ["", f"Steady state: {window[0]:.0f}–{window[1]:.0f} s after attach. Past its "
                "first 30 s, headless evaluates every 3 s and the UI every 2 s "
                "(`probes/cadence.py`, `evaluate_every_s`): the evaluation rows differ by that "
                "too."]
    return "\n".join(out)


def tmux_ui_detail(section: dict[str, Any]) -> str:
    """First frame, first data and every key's latency in tmux."""
    def ms(data: dict[str, Any] | None) -> str:
        return _sj(data, ".0f", " ms", 1000)

    p95 = (section.get("key_latency_s") or {}).get("p95")
    out = [f"* load average during the runs: {_load(section.get('load_average'))}",
           "* first frame (aitop start → header): "
           f"{_sj(section.get('first_frame_s'), '.2f', ' s')}",
           "* first data (aitop start → `main N` row): "
           f"{_sj(section.get('first_data_s'), '.2f', ' s')}",
           f"* key → answer on the pane: {ms(section.get('key_latency_s'))}, p95 "
           f"{_f(p95 * 1000 if p95 is not None else None, '.0f', ' ms')}; every key but "
           f"Escape: {ms(section.get('key_latency_but_escape_s'))}; timeouts "
           f"(> 3 s): {section.get('key_timeouts')}",
           "", "| key | key → answer on the pane |", "|---|---|"]
    for key, data in (section.get("per_key") or {}).items():
        out.append(f"| {key} | {ms(data)} |")
    return "\n".join(out)


def _load(values: list[float] | tuple[float, ...] | None) -> str:
    return "—" if not values else ", ".join(f"{v:.1f}" for v in values)


def pyspy_detail(section: dict[str, Any]) -> str:
    costs = section.get("costs", {})
    out = ["| py-spy call (aitop's flags) | CPU per call |", "|---|---|"]
    labels = {"dump": "`dump --json`", "dump_locals": "`dump --json --locals` (step counter)",
              "record_1hz": f"`record` {section.get('record_s')} s at 1 Hz",
              "record_50hz": f"`record` {section.get('record_s')} s at 50 Hz"}
    for key, label in labels.items():
        out.append(f"| {label} | {_sj(costs.get(key), '.1f', ' ms', 1000)} |")
    launch = _f(_ms(section.get("launch_s")), ".1f", " ms")
    out += ["", f"* launch + attach of one `record`: {launch}; "
            f"per sample: {_f(_ms(section.get('per_sample_s')), '.2f', ' ms')} "
            f"(samples per 5-s window: {_sj(section.get('samples_1hz'), '.0f')} at 1 Hz, "
            f"{_sj(section.get('samples_50hz'), '.0f')} at 50 Hz)"]
    for name, m in (section.get("model") or {}).items():
        out.append(f"* model, {name} cadences ({m['rate_hz']} Hz, {m['window_s']} s windows, "
                   f"counter every {m['steps_interval_s']:g} s): record "
                   f"{m['record_percent']:.2f} % + step counter {m['steps_percent']:.2f} % = "
                   f"**{m['total_percent']:.2f} %** of one core for py-spy alone")
    return "\n".join(out)


def smaps_detail(section: dict[str, Any]) -> str:
    """Each size's cost per read, and the cadence aitop's rule gives a 2-GB job."""
    out = ["| process | `status` | `smaps_rollup` | `smaps_rollup` of a forked child |",
           "|---|---|---|---|"]
    for gb, costs in (section.get("costs") or {}).items():
        out.append(f"| {gb} GB resident | {_sj(costs.get('status'), '.3f', ' ms', 1000)} "
                   f"| {_sj(costs.get('smaps_rollup'), '.1f', ' ms', 1000)} "
                   f"| {_sj(costs.get('smaps_rollup_fork'), '.1f', ' ms', 1000)} |")
    out.append("")
    for name, m in (section.get("model") or {}).items():
        main = m.get("main_spacing_s", m["spacing_s"])
        out.append(f"* model, {name} cadences: two workers of a 2-GB training process read "
                   f"every {m['spacing_s']:.1f} s, the training process every {main:.1f} s: "
                   f"**{m['percent']:.2f} %** of one core")
    return "\n".join(out)


def ranks_detail(section: dict[str, Any]) -> str:
    """Each multi-rank round: ranks found, CPU, worst comm error, straggler, verdict time."""
    lines = ["| ranks | round | ranks found | aitop CPU | worst comm error | straggler right "
             "| verdict after |", "|---|---|---|---|---|---|---|"]
    for n, runs in sorted(section.get("runs", {}).items()):
        for i, r in enumerate(runs, 1):
            err = r.get("comm_error_max")
            lines.append(
                f"| {n} | {i} | {r.get('ranks_found', 1)} | {_f(r.get('cpu'), '.2f', ' %')} "
                f"| {'—' if err is None else f'{err * 100:.1f} pp'} "
                f"| {r.get('straggler_right', '—')} | {_f(r.get('verdict_s'), '.1f', ' s')} |")
    return "\n".join(lines)


def agent_detail(section: dict[str, Any]) -> str:
    """Each round: jobs watched, the agent's CPU, its pace, each job's time to a series."""
    lines = ["| jobs | round | watched | agent CPU | pace | seconds to first series |",
             "|---|---|---|---|---|---|"]
    for n, runs in sorted(section.get("runs", {}).items()):
        for i, r in enumerate(runs, 1):
            firsts = ", ".join(f"{s:.1f}" for s in r.get("first_series_s", []))
            lines.append(f"| {n} | {i} | {r.get('watched', 0):.0f} "
                         f"| {_f(r.get('cpu'), '.2f', ' %')} | {_f(r.get('pace'), '.2f', '')} "
                         f"| {firsts} |")
    budget = section.get("budget")
    if budget:
        lines += ["", f"* 4 jobs under `--budget {budget['percent']:g}`: the agent used "
                  f"**{budget['cpu']:.2f} %** of a core over the last minute at pace "
                  f"{budget['pace']:.2f} (without a budget 4 jobs run at pace 2)"]
    return "\n".join(lines)


def _ms(value: float | None) -> float | None:
    return None if value is None else 1000.0 * value


def machine_md(m: dict[str, Any]) -> str:
    return "\n".join([
        f"* date: {m.get('date')}",
        f"* `nproc`: {m.get('nproc')}; CPU: {m.get('cpu_model')}; RAM: "
        f"{_f(m.get('ram_gib'), '.1f', ' GiB')}; kernel {m.get('kernel')}",
        f"* Python {m.get('python')}, torch {m.get('torch')}, textual {m.get('textual')}, "
        f"py-spy {m.get('py_spy')}",
        f"* aitop commit {m.get('git_commit')}"
        + (f", with uncommitted changes in: {', '.join(m['engine_uncommitted'])}"
           if m.get("engine_uncommitted") else ", clean engine tree"),
        f"* load average (1, 5, 15 min) at start / end: {_load(m.get('load_average_start'))} / "
        f"{_load(m.get('load_average_end'))} (other people's test runs share the machine)",
    ])


def section_data(sections: dict[str, Any]) -> dict[str, Any]:
    """Each section's measured data (sections that failed have none)."""
    return {k: v["data"] for k, v in sections.items() if v.get("data")}


class _Unknown:
    """A field a failed section never recorded: "?" whatever its format."""

    def __format__(self, spec: str) -> str:
        return "?"


class _Blanks(dict[str, Any]):
    """Format fields, "?" for those a failed section never recorded."""

    def __missing__(self, key: str) -> _Unknown:
        return _Unknown()


def write_markdown(path: Path, sections: dict[str, Any], machine: dict[str, Any]) -> None:
    parts = [HEADER, "## Results against the targets", "", machine_md(machine), "",
             md_table(all_rows(section_data(sections))), "",
             "Verdicts judge the median, except key latency (its p95). "
             "\"not measured\" means that part did not run or failed; see its section.", "",
             "## How each figure was obtained, and the details", ""]
    for name in ("pyspy", "smaps", "overhead", "tui_overhead", "session", "tui", "ranks",
                 "agent", "probe_cost", "tmux_ui"):
        section = sections.get(name)
        if not section:
            continue
        cfg = section.get("config", {})
        steady = section.get("data", {}).get("headless", {}).get("steady_window", "")
        fields = {"record_s": section.get("data", {}).get("record_s", "?")} | cfg
        # A failed section has no config: its blanks read "?".
        method = METHODS[name].format_map(
            _Blanks(fields | {"steady": steady or "after start-up"}))
        parts += [method, _stamp(section), ""]
        if section.get("error"):
            parts += [f"**This section failed:** `{section['error']}`", ""]
            continue
        data = section.get("data", {})
        if name == "overhead":
            parts.append(overhead_detail(data, headless=True))
        elif name == "tui_overhead":
            parts.append(overhead_detail(data, headless=False))
        elif name == "session":
            parts.append(session_detail(data))
        elif name == "pyspy":
            parts.append(pyspy_detail(data))
        elif name == "smaps":
            parts.append(smaps_detail(data))
        elif name == "ranks":
            parts.append(ranks_detail(data))
        elif name == "agent":
            parts.append(agent_detail(data))
        elif name == "probe_cost":
            parts.append(probe_cost_detail(data))
        elif name == "tmux_ui":
            parts.append(tmux_ui_detail(data))
        else:
            parts.append(tui_detail(data))
        parts.append("")
    payload = json.dumps({"machine": machine, "sections": sections}, separators=(",", ":"))
    parts += [f"<!-- {DATA_MARKER}", payload, "-->", ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text("\n".join(parts))
    tmp.replace(path)
