"""A process's cgroup: its limits and counters, cgroup v1, v2 or the hybrid of both.

``/proc/PID/cgroup`` names the process's group in each hierarchy: ``0::/path``
for the unified (v2) one, ``N:cpu,cpuacct:/path`` for each v1 one. Each
controller is read from the hierarchy that has it: its v1 hierarchy when a line
names it, else the unified one. A hybrid machine (systemd's default for years,
common on cluster nodes) mounts its v1 controllers under ``/sys/fs/cgroup/NAME``
and an empty v2 hierarchy at ``/sys/fs/cgroup/unified``; a v2-only machine
mounts the unified hierarchy at ``/sys/fs/cgroup`` itself.

What each version calls the same thing, and in which unit, is learnt here:

==========================  ===================================  =========================
field                       v2                                   v1
==========================  ===================================  =========================
CPU quota, period           ``cpu.max`` ("max" = none), us       ``cpu.cfs_quota_us`` (-1 =
                                                                 none), ``cpu.cfs_period_us``
throttling                  ``cpu.stat`` ``nr_periods``,         ``cpu.stat`` ``nr_periods``,
                            ``nr_throttled``, ``throttled_usec`` ``nr_throttled``,
                                                                 ``throttled_time`` (ns)
CPU used                    ``cpu.stat`` ``usage_usec``          ``cpuacct.usage`` (ns)
CPUs allowed                ``cpuset.cpus.effective``            ``cpuset.effective_cpus``,
                                                                 ``cpuset.cpus``
memory limit, use           ``memory.max``, ``memory.current``   ``memory.limit_in_bytes``,
                                                                 ``memory.usage_in_bytes``
OOM kills                   ``memory.events`` ``oom_kill``       ``memory.oom_control``
                                                                 ``oom_kill``
processes                   ``pids.current``, ``pids.max``       the same names
==========================  ===================================  =========================

Limits are hierarchical in both versions: a group gets the tightest of its own
and its ancestors', so quotas and memory limits are read up to the root.

Memory: the kernel's OOM killer kills a job whose group reaches its limit,
whatever RAM the machine still has free, so a leak's runway is the headroom
under the tightest limit on the group's path. Usage counts the page cache,
which the kernel reclaims before it kills anything: what is used is the working
set, usage less the inactive file pages of ``memory.stat``, as the kubelet counts
it for its evictions.

Paths are read as ``/proc/PID/cgroup`` gives them, relative to the reader's
cgroup namespace, and looked up under the cgroup mount: right when the mount's
root is the namespace's root (the host, a container with its own cgroup
namespace). A path that climbs out of the namespace (``/../..``: the job's
group is not under the reader's, as a node agent's pod sees other pods' groups)
is followed only where the mount shows the whole tree (the node's, mounted
read-only into the pod and named by ``AITOP_CGROUP_ROOT``): the reader finds
its own group there by its PID and climbs from it. Under a mount of the
reader's namespace alone the climb would land on the reader's own root and read
its limits, so there it is not followed and the fields stay blank.

Missing files blank their fields, never raise.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import PurePosixPath

from .procfs import PROC, Pid, read_file, read_text

CGROUP = "/sys/fs/cgroup"
#: Where the node's cgroup tree is mounted when it is not /sys/fs/cgroup: a pod's
#: own /sys/fs/cgroup shows only its own group.
CGROUP_ROOT_ENV = "AITOP_CGROUP_ROOT"
#: The most directories searched for the reader's own group (a node's tree has a
#: few hundred to a few thousand).
MAX_GROUPS_SEARCHED = 20_000


def cgroup_root() -> str:
    """The cgroup mount to read: ``AITOP_CGROUP_ROOT`` where set, else /sys/fs/cgroup."""
    return os.environ.get(CGROUP_ROOT_ENV, "").strip() or CGROUP

#: v1 reports "no limit" as the largest page-aligned signed 64-bit value;
#: anything above this many bytes (1 EiB) is no limit.
UNLIMITED_BYTES = 1 << 60


@dataclass(frozen=True, slots=True)
class CgroupLine:
    """One line of ``/proc/PID/cgroup``: a hierarchy and the process's group in it."""

    hierarchy: str
    #: The v1 controllers of the hierarchy (``name=systemd`` for a named one);
    #: empty for the unified (v2) hierarchy.
    controllers: tuple[str, ...]
    path: str

    @property
    def unified(self) -> bool:
        return self.hierarchy == "0" and not self.controllers

    @property
    def outside_namespace(self) -> bool:
        """The group is not under the reader's cgroup namespace (``/../..``)."""
        return ".." in PurePosixPath(self.path).parts


def parse_cgroup(text: str) -> tuple[CgroupLine, ...]:
    """``/proc/PID/cgroup`` text -> its lines; malformed lines are skipped."""
    lines: list[CgroupLine] = []
    for line in text.splitlines():
        hierarchy, sep, rest = line.partition(":")
        controllers, sep2, path = rest.partition(":")
        if sep and sep2:
            lines.append(CgroupLine(hierarchy, tuple(c for c in controllers.split(",") if c),
                                    path.strip() or "/"))
    return tuple(lines)


def read_cgroup_lines(pid: Pid, proc_root: str = PROC) -> tuple[CgroupLine, ...]:
    """The process's groups (empty when it is gone or its file unreadable)."""
    return parse_cgroup(read_file(pid, "cgroup", proc_root=proc_root) or "")


@dataclass(frozen=True, slots=True)
class MemoryLimit:
    """The tightest cgroup memory limit on a process's path, and that group's use."""

    limit_bytes: int
    #: The group's working set: usage less the page cache it may reclaim.
    used_bytes: int
    #: The group that sets the limit, as /proc/PID/cgroup names it.
    cgroup: str


@dataclass(frozen=True, slots=True)
class Cgroup:
    """A process's cgroup limits and counters; ``None`` where unread or unlimited.

    ``controllers`` says which were found, each with the version it was read
    from: a blank limit of a found controller is no limit, of a missing one unknown.
    """

    #: (controller, version) for each controller whose group was found.
    controllers: tuple[tuple[str, int], ...] = ()
    #: The group's own CPU quota and period, microseconds (no quota: ``None``).
    cpu_quota_us: int | None = None
    cpu_period_us: int | None = None
    #: CPUs the tightest quota over the group and its ancestors allows (1.5: a
    #: core and a half), and the group that sets it.
    cpu_limit: float | None = None
    cpu_limit_group: str | None = None
    #: The CPUs the group may run on (its effective cpuset).
    cpuset: tuple[int, ...] | None = None
    #: Periods with runnable tasks, those the quota throttled, and the time
    #: throttled (microseconds, whatever the version's own unit).
    nr_periods: int | None = None
    nr_throttled: int | None = None
    throttled_us: int | None = None
    #: CPU time the group used, microseconds.
    cpu_usage_us: int | None = None
    memory: MemoryLimit | None = None
    #: Processes the OOM killer has killed in the group.
    oom_kills: int | None = None
    pids_current: int | None = None
    pids_max: int | None = None

    @property
    def cpuset_count(self) -> int | None:
        return None if self.cpuset is None else len(self.cpuset)

    def version(self, controller: str) -> int | None:
        """The cgroup version ``controller`` was read from, ``None`` when not found."""
        return next((v for name, v in self.controllers if name == controller), None)


@dataclass(frozen=True, slots=True)
class CpuCgroup:
    """What a process's CPU cgroup allows it and what it did with it, at one moment.

    The counters are those of the group whose quota binds (the tightest on the
    process's path: a pod's limit over its container's, a container's over the
    job's own group), where the kernel throttles; of the process's own group
    when no quota applies. ``None`` where unread or unlimited.
    """

    #: The process's own group in the cpu hierarchy, as /proc/PID/cgroup names it.
    group: str
    version: int
    #: CPUs the tightest quota on the path allows (1.5: a core and a half), the
    #: group that sets it and that group's period (microseconds).
    quota_cpus: float | None = None
    limit_group: str | None = None
    period_us: int | None = None
    #: How many CPUs the group may run on (its effective cpuset).
    cpuset_count: int | None = None
    #: Periods with runnable tasks, those the quota throttled, and the run-queue
    #: time it held back, summed over the CPUs (microseconds).
    nr_periods: int | None = None
    nr_throttled: int | None = None
    throttled_us: int | None = None
    #: CPU time of every process in the counted group (microseconds): known only
    #: where that same group keeps it (v2, or v1 with cpuacct mounted with cpu).
    usage_us: int | None = None

    @property
    def counted_group(self) -> str:
        """The group the counters are of: the one whose quota binds, else its own."""
        return self.limit_group or self.group


# ------------------------------------------------------------------ reading


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


def _keyed(text: str | None) -> dict[str, int]:
    """``key value`` lines (``cpu.stat``, ``memory.stat``, ``memory.events``) -> ints."""
    out: dict[str, int] = {}
    for line in (text or "").splitlines():
        key, _, value = line.partition(" ")
        number = _int(value)
        if number is not None:
            out[key] = number
    return out


def _groups(path: str) -> list[str]:
    """``path`` and its ancestors, nearest first, the root last."""
    p = PurePosixPath(path.strip() or "/")
    return [str(p), *(str(a) for a in p.parents)]


def _directory(base: str, group: str) -> str:
    return f"{base}{'' if group == '/' else group}"


def parse_cpu_list(text: str | None) -> tuple[int, ...] | None:
    """A kernel CPU list (``0-3,8,10-11``) -> the CPUs; ``None`` when malformed."""
    if text is None:
        return None
    cpus: set[int] = set()
    try:
        for part in text.strip().split(","):
            if not part:
                continue
            low, _, high = part.partition("-")
            cpus.update(range(int(low), int(high or low) + 1))
    except ValueError:
        return None
    return tuple(sorted(cpus))


@dataclass(frozen=True, slots=True)
class _Place:
    """Where a controller's files are: the hierarchy's mount, the group, the version."""

    base: str
    group: str
    version: int

    @property
    def directory(self) -> str:
        return _directory(self.base, self.group)

    def read(self, name: str, group: str | None = None) -> str | None:
        return read_text(f"{_directory(self.base, self.group if group is None else group)}"
                         f"/{name}")


class _Hierarchies:
    """The process's hierarchies, and where each controller is found among them.

    ``reader``: the PID whose ``/proc/PID/cgroup`` says where the reader itself
    sits (its own, unless a test says otherwise), for paths outside its namespace.
    """

    def __init__(self, lines: tuple[CgroupLine, ...], cgroup_root: str,
                 proc_root: str = PROC, reader: int | None = None) -> None:
        self.lines = lines
        self.root = cgroup_root
        self.proc_root = proc_root
        self.reader = os.getpid() if reader is None else reader

    def unified_base(self) -> str:
        """The v2 mount: the root on a v2-only machine, ``unified/`` on a hybrid one."""
        hybrid = f"{self.root}/unified"
        if not os.path.exists(f"{self.root}/cgroup.controllers") and os.path.isdir(hybrid):
            return hybrid
        return self.root

    def place(self, controller: str) -> _Place | None:
        """A controller's group: in its v1 hierarchy when a line names it, else in the
        unified one (where the controller is off in the group itself its files are
        missing there: no limit of its own, though an ancestor's may still apply)."""
        v1 = next((line for line in self.lines if controller in line.controllers), None)
        if v1 is not None:
            for name in (controller, ",".join(v1.controllers)):
                base = f"{self.root}/{name}"
                group = self._group(v1, base)
                if group is not None and os.path.isdir(_directory(base, group)):
                    return _Place(base, group, 1)
            return None
        return self.unified(controller)

    def unified(self, controller: str | None = None) -> _Place | None:
        """The process's v2 group; with ``controller``, only in a hierarchy that has it
        (the root's ``cgroup.controllers``: empty on a hybrid node's ``unified``)."""
        line = next((line for line in self.lines if line.unified), None)
        base = self.unified_base()
        group = None if line is None else self._group(line, base)
        if group is None:
            return None
        place = _Place(base, group, 2)
        if controller is not None and controller not in (
                place.read("cgroup.controllers", "/") or "").split():
            return None
        return place if os.path.isdir(place.directory) else None

    def _group(self, line: CgroupLine, base: str) -> str | None:
        """``line``'s group as a path from the root of the mount ``base``."""
        if not line.outside_namespace:
            return line.path
        own = next((o for o in read_cgroup_lines(self.reader, self.proc_root)
                    if o.hierarchy == line.hierarchy), None)
        return None if own is None else _from_outside(line.path, base, own.path, self.reader)


@functools.lru_cache(maxsize=16)
def _group_of(base: str, pid: int) -> str | None:
    """The group under the mount ``base`` whose ``cgroup.procs`` lists ``pid``, as a
    path from the mount's root; None if not found (or not readable). A process does
    not change groups while aitop watches, so the search is done once."""
    for seen, (directory, _dirs, files) in enumerate(os.walk(base)):
        if seen >= MAX_GROUPS_SEARCHED:
            break
        if "cgroup.procs" in files and str(pid) in (
                read_text(f"{directory}/cgroup.procs") or "").split():
            relative = os.path.relpath(directory, base)
            return "/" if relative == "." else f"/{relative}"
    return None


def _from_outside(path: str, base: str, own_path: str, own_pid: int) -> str | None:
    """``path`` (``/../../pod/ctr``, relative to the reader's namespace) as a path
    from the root of the mount ``base``, climbing from where the reader's own group
    sits there; None when the climb leaves the mount (it shows only the reader's
    namespace) or the reader is not found in it."""
    own = _group_of(base, own_pid)
    if own is None:
        return None
    own_parts = PurePosixPath(own).parts[1:]
    relative_parts = PurePosixPath(own_path).parts[1:]
    if tuple(own_parts[len(own_parts) - len(relative_parts):]) != relative_parts:
        return None
    root = list(own_parts[:len(own_parts) - len(relative_parts)])  # the namespace's root
    parts = PurePosixPath(path).parts[1:]
    ups = next((i for i, part in enumerate(parts) if part != ".."), len(parts))
    if ups > len(root) or ".." in parts[ups:]:
        return None
    return "/" + "/".join([*root[:len(root) - ups], *parts[ups:]])


def _quota(place: _Place, group: str | None = None) -> tuple[int | None, int | None]:
    """A group's (quota, period) in microseconds; quota ``None`` when unlimited."""
    if place.version == 2:
        fields = (place.read("cpu.max", group) or "").split()
        if len(fields) != 2:
            return None, None
        return (None if fields[0] == "max" else _int(fields[0])), _int(fields[1])
    quota = _int(place.read("cpu.cfs_quota_us", group))
    period = _int(place.read("cpu.cfs_period_us", group))
    return (None if quota is None or quota < 0 else quota), period


def _tightest_quota(place: _Place) -> tuple[float, str] | None:
    """CPUs the tightest quota on the group's path allows, and the group setting it."""
    best: tuple[float, str] | None = None
    for group in _groups(place.group):
        quota, period = _quota(place, group)
        if quota is None or not period:
            continue
        if best is None or quota / period < best[0]:
            best = (quota / period, group)
    return best


def _cpuset(place: _Place) -> tuple[int, ...] | None:
    """The group's effective CPUs: in v2 the nearest group that has the file (a group
    without the controller on runs where its parent does)."""
    if place.version == 1:
        return parse_cpu_list(place.read("cpuset.effective_cpus")
                              or place.read("cpuset.cpus"))
    for group in _groups(place.group):
        cpus = parse_cpu_list(place.read("cpuset.cpus.effective", group))
        if cpus is not None:
            return cpus
    return None


def _memory(place: _Place) -> MemoryLimit | None:
    """The tightest memory limit on the group's path, by the headroom it leaves."""
    limit_file, usage_file, inactive_key = (
        ("memory.max", "memory.current", "inactive_file") if place.version == 2
        else ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"))
    best: MemoryLimit | None = None
    for group in _groups(place.group):
        text = place.read(limit_file, group)
        if text is None or text.strip() == "max":
            continue
        limit = _int(text)
        if limit is None or limit >= UNLIMITED_BYTES:
            continue
        usage = _int(place.read(usage_file, group))
        if usage is None:
            continue
        inactive = _keyed(place.read("memory.stat", group)).get(inactive_key, 0)
        used = max(0, usage - inactive)
        if best is None or limit - used < best.limit_bytes - best.used_bytes:
            best = MemoryLimit(limit, used, group)
    return best


def _usage_us(hierarchies: _Hierarchies) -> tuple[int | None, _Place | None]:
    """CPU time used, microseconds, and where it was read: v1's ``cpuacct.usage`` (ns)
    where a hierarchy has cpuacct, else v2's ``usage_usec`` (every v2 group keeps it,
    controller on or not)."""
    if any("cpuacct" in line.controllers for line in hierarchies.lines):
        place = hierarchies.place("cpuacct")
        return (None, None) if place is None else (
            _ns_to_us(_int(place.read("cpuacct.usage"))), place)
    place = hierarchies.unified()
    return (None, None) if place is None else (
        _keyed(place.read("cpu.stat")).get("usage_usec"), place)


def _ns_to_us(ns: int | None) -> int | None:
    return None if ns is None else ns // 1000


def memory_limit(pid: Pid, proc_root: str = PROC, cgroup_root: str | None = None,
                 reader: int | None = None) -> MemoryLimit | None:
    """The tightest cgroup memory limit over ``pid``, None when there is none (or
    the files cannot be read, or the group is outside what the mount shows):
    then RAM is the limit."""
    place = _hierarchies(pid, proc_root, cgroup_root, reader).place("memory")
    return None if place is None else _memory(place)


def cpu_limit(pid: Pid, proc_root: str = PROC, cgroup_root: str | None = None,
              reader: int | None = None) -> float | None:
    """CPUs the tightest quota over ``pid``'s group allows ("200000 100000" -> 2.0),
    None when no quota applies or none can be read."""
    place = _hierarchies(pid, proc_root, cgroup_root, reader).place("cpu")
    best = None if place is None else _tightest_quota(place)
    return None if best is None else best[0]


def _hierarchies(pid: Pid, proc_root: str, root: str | None,
                 reader: int | None) -> _Hierarchies:
    return _Hierarchies(read_cgroup_lines(pid, proc_root), root or cgroup_root(), proc_root,
                        reader)


def read_cgroup(pid: Pid, proc_root: str = PROC, cgroup_root: str | None = None,
                reader: int | None = None) -> Cgroup:
    """Every limit and counter of ``pid``'s cgroup that can be read (``cgroup_root``:
    the mount, ``AITOP_CGROUP_ROOT`` or /sys/fs/cgroup by default; ``reader``: the
    PID that stands for aitop in that mount, for paths outside its namespace)."""
    hierarchies = _hierarchies(pid, proc_root, cgroup_root, reader)
    cpu, cpuset = hierarchies.place("cpu"), hierarchies.place("cpuset")
    memory, pids = hierarchies.place("memory"), hierarchies.place("pids")
    usage, usage_place = _usage_us(hierarchies)
    quota, period = _quota(cpu) if cpu is not None else (None, None)
    tightest = _tightest_quota(cpu) if cpu is not None else None
    stat = _keyed(cpu.read("cpu.stat")) if cpu is not None else {}
    events = (_keyed(memory.read("memory.events" if memory.version == 2
                                 else "memory.oom_control")) if memory is not None else {})
    pids_max = (pids.read("pids.max") or "").strip() if pids is not None else ""
    # v2 has no cpuacct: its usage is the cpu controller's (core) accounting.
    cpuacct = usage_place if usage_place is not None and usage_place.version == 1 else None
    places = {"cpu": cpu, "cpuacct": cpuacct, "cpuset": cpuset, "memory": memory, "pids": pids}
    return Cgroup(
        controllers=tuple((name, p.version) for name, p in places.items() if p is not None),
        cpu_quota_us=quota,
        cpu_period_us=period,
        cpu_limit=None if tightest is None else tightest[0],
        cpu_limit_group=None if tightest is None else tightest[1],
        cpuset=_cpuset(cpuset) if cpuset is not None else None,
        nr_periods=stat.get("nr_periods"),
        nr_throttled=stat.get("nr_throttled"),
        throttled_us=(stat.get("throttled_usec") if cpu is not None and cpu.version == 2
                      else _ns_to_us(stat.get("throttled_time"))),
        cpu_usage_us=usage,
        memory=_memory(memory) if memory is not None else None,
        oom_kills=events.get("oom_kill"),
        pids_current=_int(pids.read("pids.current")) if pids is not None else None,
        pids_max=None if pids_max in ("", "max") else _int(pids_max),
    )


def read_cpu_cgroup(pid: Pid, proc_root: str = PROC, cgroup_root: str | None = None,
                    reader: int | None = None) -> CpuCgroup | None:
    """``pid``'s CPU cgroup: the binding quota and its group's throttling and usage
    counters; None where no cpu controller is found for it."""
    hierarchies = _hierarchies(pid, proc_root, cgroup_root, reader)
    cpu = hierarchies.place("cpu")
    if cpu is None:
        return None
    tightest = _tightest_quota(cpu)
    counted = cpu.group if tightest is None else tightest[1]
    _, period = _quota(cpu, counted)
    stat = _keyed(cpu.read("cpu.stat", counted))
    cpuset = hierarchies.place("cpuset")
    cpus = None if cpuset is None else _cpuset(cpuset)
    if cpu.version == 2:
        throttled, usage = stat.get("throttled_usec"), stat.get("usage_usec")
    else:
        throttled = _ns_to_us(stat.get("throttled_time"))
        # cpuacct mounted apart keeps its own groups, which need not hold the
        # same processes: only a hierarchy with both says the group's usage.
        together = any({"cpu", "cpuacct"} <= set(line.controllers)
                       for line in hierarchies.lines)
        usage = _ns_to_us(_int(cpu.read("cpuacct.usage", counted))) if together else None
    return CpuCgroup(
        group=cpu.group, version=cpu.version,
        quota_cpus=None if tightest is None else tightest[0],
        limit_group=None if tightest is None else tightest[1],
        period_us=None if tightest is None else period,
        cpuset_count=None if cpus is None else len(cpus),
        nr_periods=stat.get("nr_periods"), nr_throttled=stat.get("nr_throttled"),
        throttled_us=throttled, usage_us=usage)
