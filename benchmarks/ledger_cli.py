"""The real ``aitop`` command line with its CPU charged probe by probe.

Usage: ``python -m benchmarks.ledger_cli --out FILE [--every S] [--fake-gpu SCENARIO]
-- <aitop arguments>``

Runs exactly what the ``aitop`` console script runs (``aitop.tui.entry.main``),
with :mod:`benchmarks.cpu_ledger` installed first, and writes the ledger's
snapshots to FILE when aitop exits (the UI quit with ``q``, a headless run at
the end of its ``--duration``). ``--fake-gpu``: the GPU probe reads that scenario
of the test suite's fake NVML (``tests/support/fake_nvml.py``, the project's only
fake), so that its per-tick work is counted on a machine without a GPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .cpu_ledger import installed
from .jobs import REPO


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ledger_cli")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--every", type=float, default=5.0, help="seconds between snapshots")
    parser.add_argument("--fake-gpu", metavar="SCENARIO")
    parser.add_argument("aitop", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    aitop_args = args.aitop[1:] if args.aitop[:1] == ["--"] else args.aitop
    with installed(args.every) as ledger:
        import aitop.engine.cli as cli
        from aitop.engine.live.job import LiveJob
        from aitop.tui.entry import run_ui

        if args.fake_gpu:
            sys.path.insert(0, str(REPO / "tests"))
            import aitop.probes.gpu as gpu
            from support.fake_nvml import make_fake

            gpu.pynvml = make_fake(args.fake_gpu)  # type: ignore[assignment]
        spots = ledger.install_spots()
        real_start = LiveJob.start

        def start(job: LiveJob) -> LiveJob:
            ledger.mark("attached")
            return real_start(job)

        LiveJob.start = start  # type: ignore[method-assign]
        code = 1
        try:
            code = cli.main(aitop_args, run_ui=run_ui)
        finally:
            ledger.mark("ended")
            ledger.snapshot()
            ledger.write(args.out, spots=spots, returncode=code, argv=aitop_args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
