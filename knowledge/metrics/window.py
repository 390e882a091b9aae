"""Computing the catalogue's metrics from a session's samples, one window at a time.

Every name in ``catalogue.CATALOGUE`` gets a value here for the window ending at
``now``. A metric that cannot be known (no GPU, no step counter) is ``None``, and
a rule that needs it waits instead of guessing.

Each family of metrics lives in a module of its own and returns its values;
this module decides the window, calls them in order and hands each the values
of the families it reads.
"""

from __future__ import annotations

from collections.abc import Sequence

from aitop.probes.session import Session

from .anatomy import anatomy_metrics
from .gpu import gpu_metrics
from .loading import loading_metrics
from .memory import memory_metrics
from .private_memory import ProcessMemory, private_memory_metrics, process_memory, shm_metrics
from .processes import process_metrics
from .progress import progress_metrics, step_rate_metrics
from .quota import limit_metrics, throttling_metrics
from .series import series_metrics
from .stall import stall_metrics
from .step_phases import phase_metrics
from .storage import storage_metrics
from .straggler import comm_metrics
from .techniques import technique_metrics
from .units import Values
from .worker_restarts import worker_restart_metrics

#: Seconds of steps after the first compilation that are judged on their own.
JUDGE_AFTER_WARMUP_S = 10.0


def compute_metrics(
    session: Session, now: float, window_s: float, helper_threads: tuple[str, ...],
    memory: Sequence[ProcessMemory] | None = None,
) -> Values:
    """All catalogue metrics over the window ending at ``now``.

    ``helper_threads``: the run's knowledge base's helper-thread prefixes
    (``KnowledgeBase.phases.helper_threads``). ``memory``: the processes' memory
    at ``now`` (``process_memory``), where the caller has read it for the words
    too; read here otherwise.
    """
    window_s = judged_window(session, now, window_s)
    metrics: Values = {"window_s": window_s}
    metrics |= series_metrics(session, now, window_s, helper_threads)
    metrics |= gpu_metrics(session, now, window_s)
    metrics |= phase_metrics(session, now, window_s, has_gpu=metrics["has_gpu"] == 1.0,
                             gpu_util_mean=metrics["gpu_util_mean"])
    metrics |= step_rate_metrics(session, now, window_s)
    metrics |= anatomy_metrics(session, now, window_s, metrics)
    metrics |= limit_metrics(session, now, window_s)
    metrics |= process_metrics(session, now, window_s, metrics["main_busy_threads_mean"],
                               metrics)
    metrics |= throttling_metrics(session, now, window_s, metrics)
    metrics |= memory_metrics(session, now, window_s)
    if memory is None:
        memory = process_memory(session, now)
    metrics |= private_memory_metrics(memory, metrics["mem_free_mb"])
    metrics |= shm_metrics(session, now, window_s)
    metrics |= storage_metrics(session, now, window_s)
    metrics |= technique_metrics(session, now, window_s)
    metrics |= loading_metrics(session, now, window_s, metrics)
    metrics |= worker_restart_metrics(session, now, window_s)
    metrics |= comm_metrics(metrics)
    metrics |= stall_metrics(session, now)
    metrics |= progress_metrics(session, now)
    return metrics


def judged_window(session: Session, now: float, window_s: float) -> float:
    """The window, started after the first compilation once the steps fill
    ``JUDGE_AFTER_WARMUP_S`` after it: they are judged on their own, not once the
    compilation has left a whole window, which would keep a job that trains
    "warming up" for most of a window after compiling ended."""
    warmup = session.compile_warmup
    if warmup is None or warmup.end is None:
        return window_s
    since = now - warmup.end
    return since if JUDGE_AFTER_WARMUP_S <= since < window_s else window_s
