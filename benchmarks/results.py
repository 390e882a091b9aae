"""The results table (printed) and docs/benchmarks.md (written), from measured data only.

Every number printed comes from the results of a run; nothing is typed in. The
raw results are embedded at the end of the Markdown file, so a later
``--only NAME`` run can refresh one section and keep the others (each section
states its own date, mode and commit).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .jobs import SCENARIOS
from .stats import Summary, fmt_iqr, fmt_summary

DATA_MARKER = "benchmarks-data"
DATA_RE = re.compile(r"<!-- benchmarks-data\n(.*?)\n-->", re.S)


@dataclass(frozen=True)
class Row:
    """One line of the results table: a measured figure against its target."""

    target: str
    what: str
    figure: str
    iqr: str
    goal: str
    verdict: str


def _s(data: dict[str, Any] | None) -> Summary | None:
    return Summary.from_json(data) if data else None


def _verdict(value: float | None, ok: Callable[[float], bool]) -> str:
    if value is None:
        return "not measured"
    return "met" if ok(value) else "MISSED"


def _row(target: str, what: str, s: Summary | None, goal: str, ok: Callable[[float], bool],
         fmt: str = ".3f", unit: str = "", scale: float = 1.0, on: str = "median") -> Row:
    scaled = None
    if s is not None:
        scaled = Summary(s.n, s.median * scale, s.q1 * scale, s.q3 * scale,
                         s.minimum * scale, s.maximum * scale, s.p95 * scale)
    value = getattr(scaled, on) if scaled is not None else None
    return Row(target, what, fmt_summary(scaled, fmt, unit), fmt_iqr(scaled, fmt), goal,
               _verdict(value, ok))


def _one(target: str, what: str, value: float | None, goal: str,
         ok: Callable[[float], bool], fmt: str = ".2f", unit: str = "") -> Row:
    figure = "not measured" if value is None else f"{value:{fmt}}{unit}"
    return Row(target, what, figure, "—", goal, _verdict(value, ok))


def overhead_rows(section: dict[str, Any], mode: str) -> list[Row]:
    rows: list[Row] = []
    for scenario in SCENARIOS:
        r = section.get("scenarios", {}).get(scenario)
        if not r:
            continue
        rows.append(_row("1", f"steps/s with/without aitop ({mode}), {scenario}",
                         _s(r["ratio"]), "≥ 0.99", lambda v: v >= 0.99))
        rows.append(_row("1", f"bound: aitop CPU / job CPU ({mode}), {scenario}",
                         _s(r["aitop_over_job_cpu"]), "≤ 0.010", lambda v: v <= 0.01,
                         fmt=".4f"))
    return rows


def accuracy_rows(section: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    scenarios = section.get("scenarios", {})
    for scenario in SCENARIOS:
        r = scenarios.get(scenario)
        if not r:
            continue
        rows.append(_row("3", f"data-wait error (abs.), {scenario}", _s(r["data_wait_err_pp"]),
                         "≤ 3 pp", lambda v: v <= 3.0, fmt=".2f", unit=" pp"))
        if scenario == "checkpoint":
            rows.append(_row("3", "checkpoint-phase error (abs.), checkpoint",
                             _s(r["checkpoint_err_pp"]), "≤ 3 pp", lambda v: v <= 3.0,
                             fmt=".2f", unit=" pp"))
        row = _row("3", f"steps/s error (abs., relative), {scenario}", _s(r["steps_rel_err"]),
                   "≤ 10 %", lambda v: v <= 10.0, fmt=".1f", unit=" %", scale=100.0)
        if r.get("steps_unknown"):
            row = Row(row.target, row.what, row.figure + f"; steps/s null in "
                      f"{r['steps_unknown']} of {len(r['pairs'])} report(s)", row.iqr,
                      row.goal, "MISSED")
        rows.append(row)
    for scenario in SCENARIOS:
        r = scenarios.get(scenario)
        if not r:
            continue
        row = _row("4", f"attach → correct category, {scenario}",
                   _s(r["diagnosis_after_attach_s"]), "≤ 10 s", lambda v: v <= 10.0,
                   fmt=".1f", unit=" s")
        if r.get("diagnosis_missed"):
            row = Row(row.target, row.what, row.figure + f", {r['diagnosis_missed']} run(s) "
                      "never correct", row.iqr, row.goal, "MISSED")
        rows.append(row)
    return rows


def _tui_refresh(section: dict[str, Any]) -> float:
    """The UI's refresh in a session run (1 s in runs that did not record it)."""
    return float(section.get("tui", {}).get("refresh_s", 1.0))


def session_rows(section: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    for mode, limit in (("headless", 1.0), ("tui", 2.0)):
        r = section.get(mode)
        if not r:
            continue
        label = f"TUI (refresh {_tui_refresh(section):g} s)" if mode == "tui" else "headless"
        goal = f"≤ {limit:g} %"

        def within(v: float, lim: float = limit) -> bool:
            return v <= lim

        steady = _s(r.get("steady_cpu_percent"))
        rows.append(_row("2", f"CPU, {label}, steady state ({r.get('steady_window', '')})",
                         steady, goal, within, fmt=".2f", unit=" %"))
        rows.append(_one("2", f"CPU, {label}, first 60 s incl. startup",
                         r.get("first_60s_cpu_percent"), goal, within, unit=" %"))
        rows.append(_one("2", f"CPU, {label}, whole {section['session_s']:.0f}-s session "
                         "(getrusage, nothing excluded)", r.get("whole_run_cpu_percent"), goal,
                         within, unit=" %"))
        rows.append(_one("2", f"RSS peak, {label}", r.get("rss_mb_peak"), "≤ 120 MB",
                         lambda v: v <= 120.0, fmt=".1f", unit=" MB"))
        # Over a long session, growth counts from 60 s (start-up is over); a short
        # (--quick) session has no such stretch, so it counts from 10 s.
        long = r.get("rss_growth_mb_from_60s") is not None
        rows.append(_one("2", f"RSS growth {'60' if long else '10'} s → end "
                         f"({section['session_s']:.0f}-s session), {label}",
                         r.get("rss_growth_mb_from_60s" if long else "rss_growth_mb_from_10s"),
                         "≤ 5 MB", lambda v: v <= 5.0, fmt=".2f", unit=" MB"))
    rows += comparison_rows(section)
    return rows


def comparison_rows(section: dict[str, Any]) -> list[Row]:
    """The TUI beside glances and a bare Textual app, measured in the same session."""
    rows: list[Row] = []
    refresh = _tui_refresh(section)
    for name, label in (("glances", f"glances --time {refresh:g}"),
                        ("bare_textual",
                         f"bare Textual app, six panels at {refresh:g} s (the floor)")):
        r = section.get(name)
        if r:
            rows.append(_row("2", f"CPU, {label}, steady state", _s(r.get("steady_cpu_percent")),
                             "—", lambda v: True, fmt=".2f", unit=" %"))
    tui, glances = section.get("tui", {}), section.get("glances", {})
    t = _s(tui.get("steady_cpu_percent"))
    g = _s(glances.get("steady_cpu_percent"))
    if t is not None and g is not None and g.median > 0:
        rows.append(_one("2", "CPU, TUI / glances (steady medians, same session)",
                         t.median / g.median, "≤ 0.5", lambda v: v <= 0.5, fmt=".2f", unit="×"))
    return rows


def tui_rows(section: dict[str, Any], tui_overhead: dict[str, Any] | None,
             session: dict[str, Any] | None) -> list[Row]:
    rows: list[Row] = []
    first_frames: list[float] = []
    if session and session.get("tui", {}).get("first_frame_s") is not None:
        first_frames.append(session["tui"]["first_frame_s"])
    if tui_overhead:
        for r in tui_overhead.get("scenarios", {}).values():
            first_frames += [p["first_frame_s"] for p in r["pairs"]
                             if p.get("first_frame_s") is not None]
    rows.append(_row("4", "first frame, tmux: launch → header on screen",
                     Summary.of(first_frames), "≤ 1.0 s", lambda v: v <= 1.0, fmt=".2f",
                     unit=" s"))
    first_data = (session or {}).get("tui", {}).get("first_data_s")
    if first_data is not None:
        rows.append(_one("4", "first data, tmux: launch → the process panel's row for the job",
                         first_data, "≤ 1.5 s", lambda v: v <= 1.5, unit=" s"))
    if section:
        rows.append(_row("4", "first frame, Pilot: run_test → first refresh",
                         _s(section.get("first_frame_s")), "≤ 1.5 s", lambda v: v <= 1.5,
                         fmt=".3f", unit=" s"))
        rows.append(_row("5", "key → screen changed and repainted (p95 judged)",
                         _s(section.get("key_latency_s")), "p95 ≤ 100 ms",
                         lambda v: v <= 100.0, fmt=".0f", unit=" ms", scale=1000.0, on="p95"))
        rows.append(_row("5", "UI-thread CPU per key (load-independent)",
                         _s(section.get("key_ui_cpu_s")), "≤ 100 ms",
                         lambda v: v <= 100.0, fmt=".0f", unit=" ms", scale=1000.0))
    return rows


def ranks_rows(section: dict[str, Any]) -> list[Row]:
    """Watching every rank (issue 9): its CPU against one process's, and how right it is."""
    rows = [_row("R", f"aitop CPU, {n} rank(s) of a torchrun job", _s(section.get(f"cpu_{n}")),
                 "—", lambda v: True, fmt=".2f", unit=" %") for n in (1, 2, 4)]
    for n in (2, 4):
        rows.append(_one("R", f"aitop CPU, {n} ranks / 1 rank (medians)",
                         section.get(f"ratio_{n}"), "≤ 2×", lambda v: v <= 2.0, unit="×"))
        runs = section.get("runs", {}).get(str(n), [])
        errors = Summary.of([r["comm_error_max"] for r in runs
                             if r.get("comm_error_max") is not None])
        rows.append(_row("R", f"communication share error, worst rank, {n} ranks",
                         _s(errors.to_json() if errors else None), "≤ 5 pp",
                         lambda v: v <= 5.0, fmt=".1f", unit=" pp", scale=100.0))
        right = sum(1 for r in runs if r.get("straggler_right"))
        rows.append(Row("R", f"straggler named right, {n} ranks", f"{right} of {len(runs)}",
                        "—", "every run", "met" if runs and right == len(runs) else "MISSED"))
    return rows


def agent_rows(section: dict[str, Any]) -> list[Row]:
    """The node agent (issue 21): its CPU per job count, and how soon a job is seen."""
    rows = [_row("A", f"node agent CPU, {n} job(s)", _s(section.get(f"cpu_{n}")), "—",
                 lambda v: True, fmt=".2f", unit=" %") for n in (1, 2, 4)]
    rows.append(_one("A", "node agent CPU, 2 jobs / 1 job (medians)", section.get("ratio_2"),
                     "—", lambda v: True, unit="×"))
    rows.append(_one("A", "node agent CPU, 4 jobs / 1 job (medians)", section.get("ratio_4"),
                     "≤ 2.5×", lambda v: v <= 2.5, unit="×"))
    rows.append(_row("A", "seconds from a job's start to its first series",
                     _s(section.get("first_series_s")), "—", lambda v: True, fmt=".1f",
                     unit=" s"))
    budget = section.get("budget")
    if budget:
        rows.append(_one("A", f"node agent CPU under --budget {budget['percent']:g} (4 jobs), "
                         "as a share of the budget", budget["cpu"] / budget["percent"],
                         "≤ 1.2×", lambda v: v <= 1.2, unit="×"))
    return rows


def probe_cost_rows(section: dict[str, Any]) -> list[Row]:
    """aitop's own CPU, py-spy included, from the per-probe ledger (both modes)."""
    rows: list[Row] = []
    for mode, label in (("headless", "headless `--pid`"), ("ui", "UI (refresh 2 s)")):
        r = section.get(mode)
        if not r:
            continue
        goal, ok = ("≤ 1 %", lambda v: v <= 1.0) if mode == "headless" else ("—", lambda v: True)
        rows.append(_row("2", f"CPU per the probe ledger, {label}, steady state "
                         "(py-spy included)", _s(r.get("total_percent")), goal, ok, fmt=".2f",
                         unit=" %"))
        rows.append(_row("2", f"CPU per the probe ledger, {label}, whole run incl. start-up",
                         _s(r.get("whole_run_percent")), goal, ok, fmt=".2f", unit=" %"))
    return rows


def tmux_ui_rows(section: dict[str, Any]) -> list[Row]:
    """What a user meets in a real terminal: the first frame and keys (wall clock)."""
    return [
        _row("4", "first frame, tmux: aitop start → header (quiet box)",
             _s(section.get("first_frame_s")), "≤ 0.6 s", lambda v: v <= 0.6, fmt=".2f",
             unit=" s"),
        _row("5", "key → answer on the pane, tmux (p95 judged)", _s(section.get("key_latency_s")),
             "p95 ≤ 100 ms", lambda v: v <= 100.0, fmt=".0f", unit=" ms", scale=1000.0,
             on="p95"),
    ]


def all_rows(sections: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    if "probe_cost" in sections:
        rows += probe_cost_rows(sections["probe_cost"])
    if "tmux_ui" in sections:
        rows += tmux_ui_rows(sections["tmux_ui"])
    if "agent" in sections:
        rows += agent_rows(sections["agent"])
    if "ranks" in sections:
        rows += ranks_rows(sections["ranks"])
    if "overhead" in sections:
        rows += overhead_rows(sections["overhead"], "headless")
    if "tui_overhead" in sections:
        rows += overhead_rows(sections["tui_overhead"], "TUI")
    if "session" in sections:
        rows += session_rows(sections["session"])
    if "overhead" in sections:
        rows += accuracy_rows(sections["overhead"])
    if "tui" in sections or "tui_overhead" in sections or "session" in sections:
        rows += tui_rows(sections.get("tui", {}), sections.get("tui_overhead"),
                         sections.get("session"))
    order = {"1": 0, "2": 1, "3": 2, "4": 3, "5": 4, "R": 5}
    return sorted(rows, key=lambda r: order.get(r.target, 9))


def text_table(rows: list[Row]) -> str:
    headers = ("#", "measured", "median [min–max] (n)", "IQR", "target", "verdict")
    body = [(r.target, r.what, r.figure, r.iqr, r.goal, r.verdict) for r in rows]
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h)
              for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(b, widths, strict=True)) for b in body]
    return "\n".join(lines)


def md_table(rows: list[Row]) -> str:
    out = ["| # | measured | median [min–max] (n) | IQR | target | verdict |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        verdict = f"**{r.verdict}**" if r.verdict == "MISSED" else r.verdict
        out.append(f"| {r.target} | {r.what} | {r.figure} | {r.iqr} | {r.goal} | {verdict} |")
    return "\n".join(out)


def load_previous(path: Path) -> dict[str, Any]:
    """Sections of an earlier run kept in the Markdown file (for ``--only``)."""
    try:
        match = DATA_RE.search(path.read_text())
    except OSError:
        return {}
    if not match:
        return {}
    try:
        data: dict[str, Any] = json.loads(match.group(1))
        return data
    except json.JSONDecodeError:
        return {}
