"""The real ``aitop`` CLI, plus a record of every diagnosis it made.

Usage: ``python -m benchmarks.hooked_cli --history FILE -- <aitop arguments>``

Why: the headless report's ``timeline`` lists changes of bottleneck *category*
only. A healthy job's correct answer, ``none``, is also the category of the
placeholder "Collecting: no stack samples yet" shown before any sample exists,
so the timeline cannot say when aitop actually concluded "no bottleneck". This
runs exactly what ``aitop.tui.entry.main`` (what the ``aitop`` console script runs) and,
when the report is built at the end, also writes the whole diagnosis history
(time, category, summary, how many stack samples it rested on) as JSON. Nothing
runs during sampling, so the CPU figures of this process are aitop's.
"""

from __future__ import annotations

import inspect
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

import aitop.engine.cli as cli
import aitop.engine.headless.source_report as source_report
from aitop.tui.entry import run_ui


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    history_path = None
    if args[:1] == ["--history"]:
        history_path, args = args[1], args[2:]
    if args[:1] == ["--"]:
        args = args[1:]
    real_build_report = source_report.build_report

    signature = inspect.signature(real_build_report)

    def build_report(*args: Any, **kwargs: Any) -> Any:
        if history_path is not None:
            bound = signature.bind(*args, **kwargs)
            history = bound.arguments.get("history") or []
            attached_at = bound.arguments.get("attached_at")
            records = [
                {
                    "t": d.t,
                    "after_s": d.t - attached_at if attached_at else None,
                    "category": d.category,
                    "summary": d.summary,
                    "phase_samples": (d.metrics or {}).get("phase_samples"),
                }
                for d in history
            ]
            tmp = history_path + ".tmp"
            with open(tmp, "w") as fh:
                json.dump({"attached_at": attached_at, "history": records}, fh)
            os.replace(tmp, history_path)
        return real_build_report(*args, **kwargs)

    source_report.build_report = build_report  # report_of looks it up at call time
    return cli.main(args, run_ui=run_ui)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
