"""``aitop selftest --gpu``: check aitop against this machine's GPU; reports under --out."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, TextIO

from aitop.engine.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE


def add_parser(sub: Any) -> None:
    """Register ``aitop selftest`` on the CLI's subparsers."""
    parser = sub.add_parser("selftest", help="check aitop against this machine's GPU "
                            "(nvidia-smi, real CUDA jobs); reports under --out")
    parser.add_argument("--gpu", action="store_true",
                        help="run the GPU self-test (without a GPU: the checks that need none)")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="directory for selftest.json/.md (default: a new "
                        "./aitop-selftest-DATE-TIME)")
    parser.add_argument("--quick", action="store_true",
                        help="shorter attach windows (about 2 minutes instead of 3)")




def run(args: argparse.Namespace, err: TextIO | None = None) -> int:
    """The ``aitop selftest`` command: exit 0 when nothing failed, 1 otherwise."""
    # Imported here, not with the command line (see ``replay.run``).
    from aitop.engine.selftest.model import summarise
    from aitop.engine.selftest.run import Plan, Selftest, new_out_dir
    from aitop.engine.selftest.write import write_reports

    err = err if err is not None else sys.stderr
    if not args.gpu:
        print("aitop: selftest needs --gpu (the GPU self-test is the only one so far)",
              file=err)
        return EXIT_USAGE
    out_dir = args.out if args.out is not None else new_out_dir()
    try:
        (out_dir / "raw").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"aitop: cannot create the report directory {out_dir}: {exc.strerror or exc}",
              file=err)
        return EXIT_USAGE
    test = Selftest(out_dir, Plan.make(args.quick), err)
    result = test.run()
    _json_path, md_path = write_reports(result, out_dir)
    counts = summarise(result.checks)
    tally = f"{counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped"
    if result.mode == "cpu":
        print(f"aitop selftest: no NVIDIA GPU here ({result.no_gpu_reason}); ran the checks "
              f"that need none ({tally}); report: {md_path}")
    else:
        print(f"aitop selftest: {'PASS' if result.ok else 'FAIL'} on "
              f"{result.machine.get('GPU', 'the GPU')} in {result.duration_s:.0f} s "
              f"({tally}); report: {md_path}")
    return EXIT_OK if result.ok else EXIT_FAILED
