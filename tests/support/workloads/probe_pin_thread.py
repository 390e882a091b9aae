"""A process with a thread named exactly as torch names the pin-memory thread.

A CPU-only machine never starts torch's real pin-memory thread (``pin_memory=True``
is dropped with a warning when no accelerator exists), so this names a thread the
way ``torch.utils.data._utils.pin_memory._pin_memory_loop`` does:
``torch.multiprocessing._set_thread_name("pt_data_pin")`` is a thin wrapper over
``pthread_setname_np`` on the calling thread, i.e. ``prctl(PR_SET_NAME)``, which
is called here directly so the test need not pay for importing torch. The kernel
sees the very same thing: the thread's ``comm`` becomes ``pt_data_pin``.
Prints ``READY`` once the thread has its name.
"""

from __future__ import annotations

import ctypes
import threading
import time

PR_SET_NAME = 15
named = threading.Event()


def pin_loop() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NAME, b"pt_data_pin", 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NAME) failed")
    named.set()
    while True:
        time.sleep(1)


threading.Thread(target=pin_loop, daemon=True).start()
named.wait(10)
print("READY", flush=True)
while True:
    time.sleep(1)
