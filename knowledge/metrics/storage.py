"""Storage: the disks behind the job's files, and whether a checkpoint is being written."""

from __future__ import annotations

from collections.abc import Callable

from aitop.probes.samples import MountInfo, StorageSample
from aitop.probes.session import Session

from .units import Values

#: Storage is sampled less often: it is looked at over at least this long.
STORAGE_LOOKBACK_S = 30.0


def busiest_mount(
    fn: Callable[[MountInfo], float | None],
) -> Callable[[StorageSample], float | None]:
    """A mount's reading as a sample's: the largest over the job's mounts."""

    def value(sample: StorageSample) -> float | None:
        vals = [v for m in sample.mounts if (v := fn(m)) is not None]
        return max(vals) if vals else None

    return value


def storage_metrics(session: Session, now: float, window_s: float) -> Values:
    """Where the job's files live and whether a checkpoint is being written."""
    storages = session.storage.window(now - max(window_s, STORAGE_LOOKBACK_S), now)
    storage = storages[-1] if storages else None
    if storage is None or not storage.mounts:
        return {"network_fs": None, "scheduler_ok": None, "checkpoint_writing": None}
    schedulers = [m.scheduler for m in storage.mounts if m.scheduler]
    return {
        "network_fs": float(any(m.is_network for m in storage.mounts)),
        "scheduler_ok": (float(all(s in ("none", "mq-deadline") for s in schedulers))
                         if schedulers else None),
        "checkpoint_writing": float(bool(storage.writing)),
    }
