"""``python -m benchmarks.run [--quick] [--only NAME]``: measure aitop against its targets.

Prints the results table and rewrites docs/benchmarks.md (results, machine, and
how each figure was obtained). Sections:

* ``overhead``: targets 1 (headless), 3 and 4 — alternating periods with and
  without ``aitop --headless`` on one long job per scenario;
* ``tui_overhead``: target 1 with the TUI in tmux, and the first frame a user sees;
* ``session``: target 2 — CPU and memory of headless and TUI aitop over a session;
* ``tui``: targets 4 and 5 — first frame and key latency with Textual's Pilot;
* ``pyspy``: what one py-spy call costs (the unit costs behind aitop's cadences);
* ``smaps``: what one ``smaps_rollup`` read costs (the private-memory cadence);
* ``ranks``: aitop's CPU watching 1, 2 and 4 ranks of a torchrun job, with the
  communication error and the straggler verdict on each multi-rank round;
* ``agent``: the node agent's CPU watching 1, 2 and 4 jobs, the time from a job's
  start to its first series, and where ``--budget`` settles;
* ``probe_cost``: aitop's own CPU charged probe by probe (py-spy's children by
  kind), headless and with the UI side by side on one job;
* ``tmux_ui``: the first frame and every key's latency in a real terminal (wall
  clock: run it on a quiet machine).

The full run takes ~30 minutes; ``--quick`` (~4-5 minutes) runs every section
once, briefly, as a smoke test.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .agent import run_agent
from .docs_md import section_data, write_markdown
from .jobs import REPO, SCENARIOS, DemoJob
from .machine import load_average, machine_info
from .overhead import OverheadConfig, run_scenario
from .probe_cost import ProbeCostConfig, run_probe_cost
from .pyspy_cost import run_pyspy_cost
from .ranks import run_ranks
from .results import all_rows, load_previous, text_table
from .session import run_session
from .smaps_cost import run_smaps_cost
from .tmux_ui import run_tmux_ui
from .tui_latency import run_tui_latency

SECTIONS: tuple[str, ...] = ("pyspy", "smaps", "overhead", "tui_overhead", "session", "tui",
                             "ranks", "agent", "probe_cost", "tmux_ui")
DEFAULT_OUT = REPO / "docs" / "benchmarks.md"


@dataclass(frozen=True)
class Plan:
    """How much of each section a run does."""

    overhead: OverheadConfig
    overhead_scenarios: tuple[str, ...]
    tui_overhead: OverheadConfig
    tui_scenarios: tuple[str, ...]
    session_s: float
    key_rounds: int
    first_frame_runs: int
    pyspy_reps: int
    smaps_reps: int = 200
    ranks_rounds: int = 3
    agent_rounds: int = 3
    agent_warmup_s: float = 20.0
    agent_duration_s: float = 60.0
    #: The --budget round's length (0: none); the budget is judged each minute.
    agent_budget_s: float = 180.0
    #: Long enough that start-up (short first windows, warm-up reads) is not all
    #: of it: a job is watched for minutes.
    ranks_duration_s: float = 60.0
    probe_cost: ProbeCostConfig = field(default_factory=ProbeCostConfig)
    #: Launches for the first frame in tmux, and rounds of keys in the last one.
    tmux_runs: int = 5
    tmux_key_rounds: int = 3


FULL = Plan(
    overhead=OverheadConfig(pairs=5, period_s=10.0),
    overhead_scenarios=SCENARIOS,
    tui_overhead=OverheadConfig(pairs=5, period_s=10.0),
    # The default demo scenario, and the one that keeps both cores busy.
    tui_scenarios=("data", "healthy"),
    session_s=600.0,
    key_rounds=4,
    first_frame_runs=5,
    pyspy_reps=6,
)
QUICK = Plan(
    overhead=OverheadConfig(pairs=1, period_s=6.0, warmup_s=3.0),
    overhead_scenarios=SCENARIOS,
    tui_overhead=OverheadConfig(pairs=1, period_s=6.0, warmup_s=3.0),
    tui_scenarios=("data",),
    session_s=60.0,
    key_rounds=1,
    first_frame_runs=2,
    pyspy_reps=2,
    smaps_reps=30,
    ranks_rounds=1,
    ranks_duration_s=15.0,
    agent_rounds=1,
    agent_warmup_s=5.0,
    agent_duration_s=15.0,
    agent_budget_s=0.0,
    probe_cost=ProbeCostConfig(rounds=1, duration_s=45.0, warm_s=15.0),
    tmux_runs=2,
    tmux_key_rounds=1,
)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def _overhead_config(cfg: OverheadConfig) -> dict[str, Any]:
    return asdict(cfg) | {"duration_s": cfg.headless_duration_s}


def run_section(name: str, plan: Plan, workdir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(config, data) of one section."""
    if name in ("overhead", "tui_overhead"):
        headless = name == "overhead"
        cfg = plan.overhead if headless else plan.tui_overhead
        scenarios = plan.overhead_scenarios if headless else plan.tui_scenarios
        data: dict[str, Any] = {"scenarios": {}}
        for scenario in scenarios:
            log(f"{name}: {scenario}, {cfg.pairs} pair(s) of {cfg.period_s:g}-s periods")
            data["scenarios"][scenario] = run_scenario(
                scenario, "headless" if headless else "tui", cfg, workdir / name, log
            )
        return _overhead_config(cfg) | {"scenarios": list(scenarios)}, data
    if name == "session":
        log(f"session: {plan.session_s:.0f} s, headless and TUI side by side")
        return {"session_s": plan.session_s}, run_session(plan.session_s, workdir / name, log)
    if name == "ranks":
        log(f"ranks: 1, 2, 4 ranks, {plan.ranks_rounds} round(s)")
        return ({"rounds": plan.ranks_rounds, "duration_s": plan.ranks_duration_s},
                run_ranks(plan.ranks_rounds, plan.ranks_duration_s, workdir / name, log))
    if name == "agent":
        log(f"agent: 1, 2, 4 jobs, {plan.agent_rounds} round(s)")
        return ({"rounds": plan.agent_rounds, "warmup_s": plan.agent_warmup_s,
                 "duration_s": plan.agent_duration_s, "budget_s": plan.agent_budget_s},
                run_agent(plan.agent_rounds, plan.agent_warmup_s, plan.agent_duration_s,
                          plan.agent_budget_s, workdir / name, log))
    if name == "smaps":
        log(f"smaps: {plan.smaps_reps} reads a size")
        return {"reps": plan.smaps_reps}, run_smaps_cost(plan.smaps_reps, workdir / name, log)
    if name == "probe_cost":
        cfg = plan.probe_cost
        log(f"probe_cost: {cfg.rounds} round(s) of {cfg.duration_s:g} s, headless and UI")
        return asdict(cfg), run_probe_cost(cfg, workdir / name, log)
    if name == "tmux_ui":
        log(f"tmux_ui: {plan.tmux_runs} launch(es), {plan.tmux_key_rounds} round(s) of keys "
            f"(load average now {load_average()[0]:.1f}: wall clock wants a quiet box)")
        with DemoJob("compute", workdir / name, duration_s=600.0) as job:
            time.sleep(3.0)
            data = run_tmux_ui(job.pid, plan.tmux_runs, plan.tmux_key_rounds, workdir / name, log)
        return {"runs": plan.tmux_runs, "key_rounds": plan.tmux_key_rounds}, data
    if name == "pyspy":
        log(f"pyspy: unit costs, {plan.pyspy_reps} round(s)")
        return {"reps": plan.pyspy_reps}, run_pyspy_cost(plan.pyspy_reps, workdir / name, log)
    log(f"tui: Pilot, {plan.first_frame_runs} app start(s), {plan.key_rounds} round(s) of keys")
    return ({"key_rounds": plan.key_rounds, "first_frame_runs": plan.first_frame_runs},
            run_tui_latency(plan.key_rounds, plan.first_frame_runs, workdir / name, log))


def preflight() -> list[str]:
    """What is missing for the benchmarks to run at all."""
    problems = []
    if shutil.which("tmux") is None:
        problems.append("tmux is not installed (the TUI runs in a detached tmux session)")
    if not Path(sys.executable).with_name("py-spy").exists() and shutil.which("py-spy") is None:
        problems.append("py-spy is not installed")
    try:
        import torch  # noqa: F401
    except ImportError:
        problems.append("torch is not installed (pip install -e '.[demo]')")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="~4-5 minute smoke run")
    parser.add_argument("--only", action="append", choices=SECTIONS, metavar="NAME",
                        help=f"run only this section (repeatable): {', '.join(SECTIONS)}")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT,
                        help="Markdown file to write (default docs/benchmarks.md)")
    parser.add_argument("--keep", action="store_true",
                        help="keep the work directory (reports, truth files, logs)")
    args = parser.parse_args(argv)
    problems = preflight()
    if problems:
        for problem in problems:
            print(f"benchmarks: {problem}", file=sys.stderr)
        return 2
    plan = QUICK if args.quick else FULL
    mode = "quick" if args.quick else "full"
    selected = [s for s in SECTIONS if not args.only or s in args.only]
    machine = machine_info()
    previous = load_previous(args.out)
    sections: dict[str, Any] = dict(previous.get("sections", {}))
    workdir = Path(tempfile.mkdtemp(prefix="aitop-bench-"))
    log(f"{mode} run of {', '.join(selected)}; work directory {workdir}")
    ran: dict[str, Any] = {}
    started = time.time()
    try:
        for name in selected:
            t0 = time.time()
            # Others may commit engine changes while a long run goes on: each
            # section records the commit and working tree it actually measured.
            section: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                                       "mode": mode, "machine": machine_info()}
            try:
                config, data = run_section(name, plan, workdir)
                section.update(config=config, data=data)
            except Exception as exc:
                traceback.print_exc()
                section.update(config={}, error=f"{type(exc).__name__}: {exc}")
                log(f"{name} FAILED: {exc}")
            section["duration_s"] = time.time() - t0
            sections[name] = ran[name] = section
            machine["load_average_end"] = load_average()
            write_markdown(args.out, sections, machine)
            log(f"{name} done in {section['duration_s'] / 60:.1f} min; wrote {args.out}")
    finally:
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print()
    print(f"aitop benchmarks ({mode}, {(time.time() - started) / 60:.1f} min, "
          f"{machine['nproc']} cores, load {machine['load_average_start'][0]:.1f} → "
          f"{machine['load_average_end'][0]:.1f}):")
    print(text_table(all_rows(section_data(ran))))
    print(f"\nwritten: {args.out}")
    return 1 if any("error" in s for s in ran.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
