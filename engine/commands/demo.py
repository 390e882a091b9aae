"""``aitop demo``: start a bundled training job, attach to it, stop it afterwards."""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from aitop.demo import BEFORE_FIRST_STEP, SCENARIOS
from aitop.engine.commands.attach import add_attach_arguments, run_attached
from aitop.engine.commands.ui import UiRunner
from aitop.engine.errors import CliError
from aitop.probes.own_version import DISTRIBUTION

#: How long the job may take to import torch and reach its first steps.
READY_TIMEOUT_S = 120.0


def add_parser(sub: Any) -> None:
    """The ``demo`` subcommand's arguments (``sub`` is the CLI's subparsers)."""
    demo = sub.add_parser("demo", help="start a bundled training job and attach to it")
    demo.add_argument("--scenario", choices=SCENARIOS, default="data",
                      help="which bottleneck the demo job has (default data)")
    add_attach_arguments(demo)


def run(args: argparse.Namespace, run_ui: UiRunner | None) -> int:
    """Start the bundled workload as a child, attach, and stop it afterwards."""
    if importlib.util.find_spec("torch") is None:
        raise CliError(f"the demo needs PyTorch beside aitop: pip install '{DISTRIBUTION}[demo]' "
                       f"(installed with pipx: pipx inject {DISTRIBUTION} torch==2.13.0)")
    # The job's output goes to a log file so it cannot scribble over the UI.
    log = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed in the finally below
        prefix="aitop-demo-", suffix=".log", delete=False
    )
    ready = Path(log.name).with_suffix(".ready")
    keep_log = False  # kept only when the job failed and the error points at it
    command = [sys.executable, "-m", "aitop.demo.workload", "--scenario", args.scenario,
               "--ready-file", str(ready)]
    child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL)
    when = "now" if args.scenario in BEFORE_FIRST_STEP else "once it trains"
    if not args.headless or not args.json:
        print(f"aitop demo: started the '{args.scenario}' training job as PID {child.pid} "
              f"(log: {log.name}); attaching {when}...", file=sys.stderr)
    try:
        # Attach once the job is past importing torch and its first steps, so
        # the first window shows training rather than start-up; at once to the
        # jobs whose point is what comes before their first step.
        deadline = time.time() + READY_TIMEOUT_S
        while (args.scenario not in BEFORE_FIRST_STEP and not ready.exists()
               and child.poll() is None and time.time() < deadline):
            time.sleep(0.2)
        if child.poll() is not None:
            keep_log = True
            raise CliError(f"the demo job exited with status {child.returncode}; "
                           f"see {log.name}")
        return run_attached(args, child.pid, run_ui, popen=child)
    finally:
        if child.poll() is None:
            child.terminate()  # the job removes its checkpoints on SIGTERM
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
        log.close()
        ready.unlink(missing_ok=True)
        if not keep_log:
            Path(log.name).unlink(missing_ok=True)
