"""The node agent: every PyTorch job on this machine, watched from when it appears.

``aitop --serve PORT`` without ``--pid``. Every few seconds it scans ``/proc``
(``probes.discovery``): a new job root is attached on a thread of its own (an
attach takes a second or two of py-spy preflight, and must not hold up the
others), a root that is gone is closed and its series leave the next frame set,
so Prometheus never scrapes a stale job. Each watched job's series carry its
identity (``probes.job_identity``); what the agent found but cannot watch is
listed in ``aitop_job_info`` with the reason.

Cost: N jobs are each watched ``cadence.fleet_pace(N)`` times slower than one
(``FLEET_COST`` in ``probes.cadence``), and with ``--budget`` the agent measures
its own CPU each minute and slows every job further while it is over (and
speeds up again once well under), saying so once per change.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from aitop.engine.live.attach import AttachError, AttachOptions, LiveJob, attach
from aitop.engine.live.rank import self_cpu_seconds
from aitop.engine.prometheus.exporter import Frame, Publisher, WatchInfo
from aitop.knowledge.reading.yamlio import KnowledgeError
from aitop.probes import cadence
from aitop.probes.discovery import Discovery, Found, JobGroup, is_launcher, job_groups
from aitop.probes.job_identity import Identity, identify
from aitop.probes.ranks import find_job
from aitop.probes.redact import redact_argv

#: How often /proc is scanned for jobs that started or ended.
SCAN_EVERY_S = 2.0
#: The span over which the agent's own CPU is compared with ``--budget``.
BUDGET_SPAN_S = 60.0
#: Each step of shedding (or of getting the cadence back) changes the pace by this.
BUDGET_STEP = 1.5
#: Below this share of the budget, the agent gives cadence back.
BUDGET_RELAX_BELOW = 0.6
#: The slowest the budget may make a job's watch (on top of the fleet pace).
MAX_BUDGET_PACE = 8.0


def _say(line: str) -> None:
    print(f"aitop: {line}", file=sys.stderr, flush=True)


@dataclass
class Watch:
    """One job root and what the agent made of it."""

    group: JobGroup
    identity: Identity
    #: "waiting" (a launcher before its ranks), "attaching", "watched" or "not_watched".
    status: str = "attaching"
    reason: str = ""
    job: LiveJob | None = None
    publisher: Publisher | None = None
    #: The job's other ranks on this machine, by PID: each exports its own series.
    peer_publishers: dict[int, Publisher] = field(default_factory=dict)
    found_at: float = field(default_factory=time.time)
    #: When its first frame was published (the time to a job's first series).
    first_frame_at: float | None = None

    @property
    def root(self) -> Found:
        return self.group.root

    def info(self) -> WatchInfo:
        return WatchInfo(self.identity.labels(), self.root.pid, self.root.command,
                         self.status, self.reason)


class NodeAgent:
    """Finds, attaches, publishes and drops jobs; one ``poll`` per scan."""

    def __init__(
        self,
        options: AttachOptions,
        *,
        discovery: Discovery | None = None,
        budget_percent: float | None = None,
        match: tuple[str, ...] = (),
        say: Callable[[str], None] = _say,
        cpu_seconds: Callable[[], float] = self_cpu_seconds,
        attach_job: Callable[[int, AttachOptions], LiveJob] = attach,
    ) -> None:
        self.options = options
        self.discovery = discovery or Discovery()
        self.budget_percent = budget_percent
        #: Only jobs whose launcher's command line contains one of these (none: every job).
        self.match = match
        self._say = say
        self._cpu = cpu_seconds
        self._attach = attach_job
        self._lock = threading.Lock()
        self.watches: dict[tuple[int, int], Watch] = {}
        self._cpu_marks: deque[tuple[float, float]] = deque()
        self.budget_pace = 1.0
        self.budget_ratio: float | None = None
        self._closed = False

    # ------------------------------------------------------------ scanning

    def poll(self, now: float) -> None:
        """Scan once: attach what is new, drop what has ended, keep the pace."""
        found = job_groups(self.discovery.scan(), self.discovery.proc_root)
        groups = {g.root.key: g for g in found if self._wanted(g)}
        with self._lock:
            ended = [w for key, w in self.watches.items() if key not in groups]
            for gone in ended:
                del self.watches[gone.root.key]
            for key, group in groups.items():
                known = self.watches.get(key)
                if known is None:
                    self.watches[key] = self._found(group, now)
                else:
                    known.group = group
                    if known.status == "waiting":
                        self._attach_when_ready(known)
        for watch in ended:
            self._drop(watch)
        self._keep_budget(now)
        self._apply_pace()

    def _wanted(self, group: JobGroup) -> bool:
        if not self.match:
            return True
        command = " ".join(group.root.command)
        return any(text in command for text in self.match)

    def _found(self, group: JobGroup, now: float) -> Watch:
        root = group.root
        identity = self._unique(identify(root.pid), root.pid)
        watch = Watch(group, identity, found_at=now)
        if root.unwatchable is not None:
            watch.status, watch.reason = "not_watched", root.unwatchable
            self._say(f"found PID {root.pid} ({_short(root.command)}), not watching it: "
                      f"{root.unwatchable}")
            return watch
        self._attach_when_ready(watch)
        return watch

    def _attach_when_ready(self, watch: Watch) -> None:
        """Attach on a thread of its own; a launcher whose ranks have not started yet
        (a rendezvous waiting for the other nodes) is looked at again next scan."""
        root = watch.root
        if is_launcher(root.command) and not find_job(root.pid).ranks:
            watch.status, watch.reason = "waiting", "a launcher whose ranks have not started"
            return
        watch.status, watch.reason = "attaching", ""
        threading.Thread(target=self._attach_one, args=(watch,), name="aitop-agent-attach",
                         daemon=True).start()

    def _unique(self, identity: Identity, root_pid: int, mine: Watch | None = None) -> Identity:
        """Two jobs of one node with the same id (the same command twice): the later
        one's id gets its root's PID. Called with the lock held."""
        taken = {w.identity.job_id for w in self.watches.values() if w is not mine}
        if identity.job_id not in taken:
            return identity
        return replace(identity, job_id=f"{identity.job_id}-{root_pid}")

    def _attach_one(self, watch: Watch) -> None:
        root = watch.root
        try:
            job = self._attach(root.pid, self.options)
        except (AttachError, KnowledgeError) as exc:
            with self._lock:
                watch.status, watch.reason = "not_watched", str(exc)
            self._say(f"cannot watch PID {root.pid}: {exc}")
            return
        lead = job.session.target_pid
        launcher = root.pid if root.pid != lead else None
        identity = identify(lead, launcher)
        with self._lock:
            if self._closed or self.watches.get(root.key) is not watch:
                dropped = True  # it ended (or the agent stopped) while attaching
            else:
                dropped = False
                identity = self._unique(identity, root.pid, watch)
                watch.identity = identity
                watch.job = job
                watch.publisher = Publisher(job, job.rules, job.started_at, identity.labels())
                watch.status = "watched"
        if dropped:
            job.close()
            return
        self._apply_pace()
        self._say(f"watching PID {root.pid} ({_short(root.command)}) as job_id="
                  f"{identity.job_id}" + (f", rank {identity.rank}" if identity.rank else ""))

    def _drop(self, watch: Watch) -> None:
        if watch.job is not None:
            job = watch.job
            threading.Thread(target=job.close, name="aitop-agent-close", daemon=True).start()
        self._say(f"PID {watch.root.pid} ended; its series are gone")

    # ------------------------------------------------------------ publishing

    def frames(self, now: float) -> tuple[list[Frame], list[WatchInfo]]:
        """Every watched job's frame as of ``now``, and what the agent found."""
        with self._lock:
            watches = list(self.watches.values())
        frames: list[Frame] = []
        for watch in watches:
            if watch.publisher is not None:
                frames.append(watch.publisher.frame(now))
                frames += [p.frame(now) for p in self._peer_publishers(watch)]
                if watch.first_frame_at is None:
                    watch.first_frame_at = now
        return frames, [w.info() for w in watches]

    def _peer_publishers(self, watch: Watch) -> list[Publisher]:
        """A publisher for each of the job's other ranks here, under the job's id and the
        rank's own placement: the series a job-wide verdict across nodes is computed
        from (``aitop rules --format prometheus``'s recording rules)."""
        job = watch.job
        assert job is not None and watch.publisher is not None
        current: dict[int, Publisher] = {}
        for peer in job.peers:
            source = peer.source
            if source is None:
                continue
            publisher = watch.peer_publishers.get(peer.pid)
            if publisher is None:
                placement = identify(peer.pid, watch.root.pid)
                identity = replace(placement, job_id=watch.identity.job_id)
                publisher = Publisher(source, job.rules, job.started_at, identity.labels())
            current[peer.pid] = publisher
        watch.peer_publishers = current
        return list(current.values())

    def gauges(self) -> dict[str, float]:
        """The agent's own state, as ``aitop_agent_*`` gauges."""
        values = {"jobs": float(self.watched()), "pace": self.pace()}
        if self.budget_ratio is not None:
            values["budget_ratio"] = self.budget_ratio
        return values

    def watched(self) -> int:
        with self._lock:
            return sum(w.job is not None for w in self.watches.values())

    # ------------------------------------------------------------ cost

    def pace(self) -> float:
        return cadence.fleet_pace(self.watched()) * self.budget_pace

    def _apply_pace(self) -> None:
        pace = self.pace()
        with self._lock:
            jobs = [w.job for w in self.watches.values() if w.job is not None]
        for job in jobs:
            if job.pace != pace:
                job.set_pace(pace)

    def _keep_budget(self, now: float) -> None:
        """Measure the agent's CPU over the last minute; shed or give back cadence."""
        if self.budget_percent is None:
            return
        marks = self._cpu_marks
        marks.append((now, self._cpu()))
        while len(marks) > 2 and now - marks[1][0] >= BUDGET_SPAN_S:
            marks.popleft()
        (t0, c0), (t1, c1) = marks[0], marks[-1]
        if t1 - t0 < BUDGET_SPAN_S / 2:
            return  # too short a span to judge
        used = 100.0 * (c1 - c0) / (t1 - t0)
        self.budget_ratio = used / self.budget_percent
        before = self.budget_pace
        if self.budget_ratio > 1.0 and before < MAX_BUDGET_PACE:
            self.budget_pace = min(MAX_BUDGET_PACE, before * BUDGET_STEP)
        elif self.budget_ratio < BUDGET_RELAX_BELOW and before > 1.0:
            self.budget_pace = max(1.0, before / BUDGET_STEP)
        if self.budget_pace != before:
            self._cpu_marks = deque([(now, c1)])  # judge the new pace on its own
            verb = "over" if self.budget_pace > before else "well under"
            self._say(f"{verb} --budget {self.budget_percent:g}% of a core ({used:.0f}% over "
                      f"the last {t1 - t0:.0f} s): each job is now watched "
                      f"{self.pace():.2g}x slower than its own cadence")

    # ------------------------------------------------------------ end

    def close(self) -> None:
        with self._lock:
            self._closed = True
            jobs = [w.job for w in self.watches.values() if w.job is not None]
            self.watches.clear()
        closing = [threading.Thread(target=j.close, daemon=True) for j in jobs]
        for thread in closing:
            thread.start()
        for thread in closing:
            thread.join(timeout=10.0)


def _short(command: tuple[str, ...], limit: int = 60) -> str:
    text = " ".join(redact_argv(command))
    return text if len(text) <= limit else text[: limit - 1] + "…"
