"""A parent whose (fake) DataLoader worker died and was never reaped.

Forks a child that names itself ``pt_data_worker`` (as torch's worker loop does,
via ``prctl(PR_SET_NAME)``) and exits at once; the parent never calls ``wait``,
so the child stays a zombie. Prints ``READY`` once the kernel shows it as such.
"""

from __future__ import annotations

import ctypes
import os
import time

PR_SET_NAME = 15

child = os.fork()
if child == 0:
    ctypes.CDLL(None).prctl(PR_SET_NAME, b"pt_data_worker", 0, 0, 0)
    os._exit(0)
deadline = time.monotonic() + 10
while time.monotonic() < deadline:
    with open(f"/proc/{child}/stat") as fh:
        if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
            break
    time.sleep(0.01)
print("READY", flush=True)
while True:
    time.sleep(1)
