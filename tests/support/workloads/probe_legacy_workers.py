"""Worker processes the way an older torch (< 2.1) left them: unnamed.

Starts two plain ``multiprocessing`` children with the given start method, never
renamed to ``pt_data_worker``, so only the structural hints (spawn cmdline,
forkserver parent, fork child sharing the cmdline) can recognise them.
Usage: probe_legacy_workers.py {fork,spawn,forkserver}; prints ``READY``.
"""

from __future__ import annotations

import multiprocessing as mp
import sys
import time


def work() -> None:
    while True:
        time.sleep(0.5)


if __name__ == "__main__":
    ctx = mp.get_context(sys.argv[1])
    procs = [ctx.Process(target=work, daemon=True) for _ in range(2)]
    for p in procs:
        p.start()
    time.sleep(0.3)
    print("READY", flush=True)
    while True:
        time.sleep(1)
