"""The node agent: every PyTorch job on this machine, published to Prometheus.

``aitop --serve PORT`` without ``--pid``. The fleet (``engine.fleet.model``)
finds, attaches, paces and drops the jobs; the agent gives each watched job
(and each of its other ranks here) a ``Publisher``, whose frames carry the
job's identity (``probes.job_identity``), and lists what the fleet found but
cannot watch in ``aitop_job_info`` with the reason. A job that ends leaves the
next frame set, so Prometheus never scrapes a stale job.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from aitop.engine.fleet.model import SCAN_EVERY_S, Fleet, Watch
from aitop.engine.prometheus.exporter import Frame, Publisher, WatchInfo
from aitop.probes.job_identity import identify

__all__ = ["SCAN_EVERY_S", "NodeAgent", "Published"]


@dataclass
class Published:
    """The publishers of one watched job: its lead rank's and each other rank's here."""

    publisher: Publisher
    #: The job's other ranks on this machine, by PID: each exports its own series.
    peers: dict[int, Publisher] = field(default_factory=dict)
    #: When its first frame was published (the time to a job's first series).
    first_frame_at: float | None = None


class NodeAgent:
    """The fleet's jobs as frames for the exporter; one ``poll`` per scan."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        #: By the watch's key; only the serve loop's thread touches it.
        self.published: dict[str, Published] = {}

    def poll(self, now: float) -> None:
        self.fleet.poll(now)

    def frames(self, now: float) -> tuple[list[Frame], list[WatchInfo]]:
        """Every watched job's frame as of ``now``, and what the fleet found."""
        watches = self.fleet.watches()
        current: dict[str, Published] = {}
        frames: list[Frame] = []
        for watch in watches:
            if watch.job is None:
                continue
            published = self.published.get(watch.key) or _publish(watch)
            current[watch.key] = published
            frames.append(published.publisher.frame(now))
            frames += [p.frame(now) for p in _peer_publishers(watch, published)]
            if published.first_frame_at is None:
                published.first_frame_at = now
        self.published = current  # an ended job's publishers leave with it
        infos = [WatchInfo(w.identity.labels(), w.root.pid, w.root.command, w.status, w.reason)
                 for w in watches]
        return frames, infos

    def gauges(self) -> dict[str, float]:
        """The agent's own state, as ``aitop_agent_*`` gauges."""
        values = {"jobs": float(self.fleet.watched()), "pace": self.fleet.pace()}
        if self.fleet.budget_ratio is not None:
            values["budget_ratio"] = self.fleet.budget_ratio
        return values

    def close(self) -> None:
        self.fleet.close()


def _publish(watch: Watch) -> Published:
    job = watch.job
    assert job is not None
    return Published(Publisher(job, job.rules, job.started_at, watch.identity.labels()))


def _peer_publishers(watch: Watch, published: Published) -> list[Publisher]:
    """A publisher for each of the job's other ranks here, under the job's id and the
    rank's own placement: the series a job-wide verdict across nodes is computed
    from (``aitop rules --format prometheus``'s recording rules)."""
    job = watch.job
    assert job is not None
    current: dict[int, Publisher] = {}
    for peer in job.peers:
        source = peer.source
        if source is None:
            continue
        publisher = published.peers.get(peer.pid)
        if publisher is None:
            placement = identify(peer.pid, watch.root.pid)
            identity = replace(placement, job_id=watch.identity.job_id)
            publisher = Publisher(source, job.rules, job.started_at, identity.labels())
        current[peer.pid] = publisher
    published.peers = current
    return list(current.values())

