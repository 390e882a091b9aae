"""Where aitop's CPU goes, measured inside aitop: CPU seconds per probe, not wall time.

Installed into a real aitop process (``benchmarks/ledger_cli.py``) before it
attaches, the ledger keeps three kinds of account, all cumulative:

* **threads**: each probe runs on a thread of its own (``aitop-<probe>``), so a
  thread's CPU clock (``pthread_getcpuclockid`` while it lives, its last
  ``time.thread_time()`` when it ends) is that probe's cost in this process;
* **spots**: named functions (the neighbour scan, cgroup and schedstat reads, the
  evaluation's metrics, words and rules) are wrapped to charge their own CPU
  (``time.thread_time`` around the call, nested spots subtracted) to the spot;
  the thread they ran on is charged the rest;
* **children**: every subprocess (py-spy's ``record`` windows, its ``dump
  --locals`` step-counter reads, the attach preflight's dump) is charged its CPU
  from ``os.wait4``'s rusage when it is reaped, and its live ``/proc/PID/stat``
  time while it runs, by what it is (``py-spy record``, ``py-spy dump --locals``).

A snapshot (every few seconds, and at exit) holds all three and the process's
own ``getrusage`` totals (self and reaped children), so that what no account
covers shows as the difference. CPU seconds, unlike wall time, hardly depend on
what else runs on the machine.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import os
import re
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

#: Spots: (module, attribute path, label). A module's public functions are all
#: wrapped where the attribute is ``*``. Each is patched wherever it was imported
#: by name, so callers that bound it at import time are charged too.
SPOTS: tuple[tuple[str, str, str], ...] = (
    ("aitop.probes.neighbours", "NeighbourScanner.others", "neighbour scan"),
    ("aitop.probes.kernel.cgroups", "*", "cgroup reads"),
    ("aitop.probes.kernel.procfs", "read_runqueue_wait_ns", "schedstat reads"),
    ("aitop.knowledge.metrics.private_memory", "process_memory", "evaluation: processes' memory"),
    ("aitop.knowledge.evaluator", "compute_metrics", "evaluation: metrics"),
    ("aitop.knowledge.evaluator", "compute_words", "evaluation: words"),
    ("aitop.knowledge.judging.diagnosis", "Diagnoser.diagnose", "evaluation: rules + diagnosis"),
)

_NUMBERED = re.compile(r"-\d+")


def thread_label(name: str) -> str:
    """A thread's name without Python's running number (``Thread-3 (f)`` → ``Thread (f)``)."""
    return _NUMBERED.sub("", name)


def _child_kind(args: Any) -> str:
    argv = [str(a) for a in args] if isinstance(args, (list, tuple)) else [str(args)]
    program = os.path.basename(argv[0]) if argv else "?"
    if program == "py-spy" and len(argv) > 1:
        return f"py-spy {argv[1]}" + (" --locals" if "--locals" in argv else "")
    return program


def _proc_cpu_s(pid: int) -> float | None:
    """A live child's own CPU seconds so far (None once gone)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = text[text.rfind(")") + 2:].split()
    try:
        return (int(rest[11]) + int(rest[12])) / CLOCK_TICKS
    except (IndexError, ValueError):
        return None


class Ledger:
    """The accounts of one process (module docstring); one per process."""

    def __init__(self) -> None:
        self.t0 = time.time()
        self._lock = threading.Lock()
        #: thread label -> CPU seconds of the threads of that label that ended.
        self._ended: dict[str, float] = {}
        #: (thread label, spot label) -> exclusive CPU seconds.
        self._spots: dict[tuple[str, str], float] = {}
        #: child kind -> CPU seconds of reaped children.
        self._reaped: dict[str, float] = {}
        #: pid -> kind, of children started and not reaped yet.
        self._live: dict[int, str] = {}
        self._kinds: dict[int, str] = {}
        self._local = threading.local()
        self.snapshots: list[dict[str, Any]] = []
        self.marks: dict[str, float] = {}

    # ---------------------------------------------------------------- spots

    def spot(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` charging its own CPU (nested spots excluded) to ``label``."""
        ledger = self

        @functools.wraps(fn)
        def charged(*args: Any, **kwargs: Any) -> Any:
            stack: list[float] = ledger._stack()
            start = time.thread_time()
            stack.append(0.0)
            try:
                return fn(*args, **kwargs)
            finally:
                spent = time.thread_time() - start
                inner = stack.pop()
                if stack:
                    stack[-1] += spent
                key = (thread_label(threading.current_thread().name), label)
                with ledger._lock:
                    ledger._spots[key] = ledger._spots.get(key, 0.0) + spent - inner

        charged.__wrapped_by_ledger__ = True  # type: ignore[attr-defined]
        return charged

    def _stack(self) -> list[float]:
        stack: list[float] | None = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        return stack

    def install_spots(self, spots: tuple[tuple[str, str, str], ...] = SPOTS) -> list[str]:
        """Wrap every spot where it is reachable; the spots installed."""
        installed = []
        for module_name, path, label in spots:
            module = __import__(module_name, fromlist=["_"])
            if path == "*":
                names = [n for n, f in vars(module).items()
                         if inspect.isfunction(f) and not n.startswith("_")
                         and f.__module__ == module_name]
            else:
                names = [path]
            for name in names:
                if self._patch(module, name, label):
                    installed.append(f"{module_name}.{name}")
        return installed

    def _patch(self, module: ModuleType, path: str, label: str) -> bool:
        owner: Any = module
        *parents, attr = path.split(".")
        for part in parents:
            owner = getattr(owner, part)
        original = getattr(owner, attr, None)
        if original is None or getattr(original, "__wrapped_by_ledger__", False):
            return False
        charged = self.spot(label, original)
        setattr(owner, attr, charged)
        if not parents:  # a module function: rebind it wherever imported by name
            for other in list(sys.modules.values()):
                if other is None or not getattr(other, "__name__", "").startswith("aitop"):
                    continue
                for key, value in list(vars(other).items()):
                    if value is original:
                        setattr(other, key, charged)
        return True

    # ---------------------------------------------------------------- threads

    def install_threads(self) -> None:
        """Charge each thread's CPU to its label when it ends (``Thread._delete``
        runs on the ending thread itself)."""
        ledger = self
        original = threading.Thread._delete  # type: ignore[attr-defined]

        def _delete(thread: threading.Thread) -> None:
            spent = time.thread_time()
            with ledger._lock:
                label = thread_label(thread.name)
                ledger._ended[label] = ledger._ended.get(label, 0.0) + spent
                # Marked on the thread itself: a later thread may get its ident.
                thread._ledger_ended = True  # type: ignore[attr-defined]
            original(thread)

        threading.Thread._delete = _delete  # type: ignore[attr-defined]

    def _threads_now(self) -> dict[str, float]:
        with self._lock:
            out = dict(self._ended)
            threads = [t for t in threading.enumerate()
                       if not getattr(t, "_ledger_ended", False)]
        for thread in threads:
            ident = thread.ident
            if ident is None:
                continue
            with contextlib.suppress(OSError, OverflowError):
                spent = time.clock_gettime(time.pthread_getcpuclockid(ident))
                label = thread_label(thread.name)
                out[label] = out.get(label, 0.0) + spent
        return out

    # ---------------------------------------------------------------- children

    def install_children(self) -> None:
        """Charge each subprocess by what it is: rusage from ``os.wait4`` on reaping
        (every way ``subprocess`` reaps: ``wait``, ``communicate``, ``poll``)."""
        ledger = self
        real_init = subprocess.Popen.__init__

        def __init__(popen: subprocess.Popen[Any], args: Any, *a: Any, **kw: Any) -> None:
            real_init(popen, args, *a, **kw)
            with ledger._lock:
                kind = _child_kind(args)
                ledger._live[popen.pid] = ledger._kinds[popen.pid] = kind

        def waitpid(pid: int, options: int) -> tuple[int, int]:
            got, status, usage = os.wait4(pid, options)
            if got:
                with ledger._lock:
                    kind = ledger._kinds.get(got, "other")
                    ledger._live.pop(got, None)
                    ledger._reaped[kind] = (ledger._reaped.get(kind, 0.0)
                                            + usage.ru_utime + usage.ru_stime)
            return got, status

        subprocess.Popen.__init__ = __init__  # type: ignore[method-assign]
        os.waitpid = waitpid  # ``Popen._try_wait`` looks it up on ``os``
        poll = subprocess.Popen._internal_poll  # type: ignore[attr-defined]
        defaults = list(poll.__defaults__)
        defaults[1] = waitpid  # ``_waitpid=os.waitpid``, bound when subprocess loaded
        poll.__defaults__ = tuple(defaults)

    def _children_now(self) -> dict[str, float]:
        with self._lock:
            out = dict(self._reaped)
            live = dict(self._live)
        for pid, kind in live.items():
            spent = _proc_cpu_s(pid)
            if spent is not None:
                out[kind] = out.get(kind, 0.0) + spent
        return out

    # ---------------------------------------------------------------- snapshots

    def mark(self, name: str) -> None:
        """Note when something happened (``attached``), seconds since the ledger began."""
        self.marks.setdefault(name, time.time() - self.t0)

    def snapshot(self) -> dict[str, Any]:
        me = resource.getrusage(resource.RUSAGE_SELF)
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        with self._lock:
            spots = {f"{thread}\t{spot}": v for (thread, spot), v in self._spots.items()}
        snap = {
            "t": time.time() - self.t0,
            "self_s": me.ru_utime + me.ru_stime,
            "reaped_s": kids.ru_utime + kids.ru_stime,
            "threads": self._threads_now(),
            "spots": spots,
            "children": self._children_now(),
        }
        self.snapshots.append(snap)
        return snap

    def every(self, period_s: float) -> threading.Event:
        """Snapshot every ``period_s`` on a thread of its own (charged to ``ledger``)."""
        halt = threading.Event()

        def loop() -> None:
            while not halt.wait(period_s):
                self.snapshot()

        threading.Thread(target=loop, name="ledger", daemon=True).start()
        return halt

    def write(self, path: Path, **extra: Any) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"marks": self.marks, "snapshots": self.snapshots, **extra}))
        tmp.replace(path)


@contextlib.contextmanager
def installed(period_s: float) -> Iterator[Ledger]:
    """A ledger with threads and children charged, snapshotting every ``period_s``;
    the caller installs the spots once aitop's modules are imported."""
    ledger = Ledger()
    ledger.install_threads()
    ledger.install_children()
    halt = ledger.every(period_s)
    try:
        yield ledger
    finally:
        halt.set()
        ledger.snapshot()
