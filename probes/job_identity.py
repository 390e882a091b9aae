"""Who a process is in the fleet: its job's identity and the labels a fleet joins on.

Prometheus already sets a label named ``job`` (the scrape job), so the job's
identity goes in ``job_id``, chosen in this order:

1. ``TORCHELASTIC_RUN_ID`` (torchrun's ``--rdzv-id``; the same on every node), unless
   it is torchrun's default ``none``;
2. ``SLURM_JOB_ID`` (with ``SLURM_STEP_ID``, as ``12345.0``);
3. a digest of the launcher's command line: stable across restarts of aitop and
   the same on every node that runs the same command, but not unique between
   two identical commands on one node (the agent then adds the launcher's PID).

The placement labels are the launchers' own variables: ``rank`` (``RANK``, or
Slurm's ``SLURM_PROCID``), ``local_rank`` (``LOCAL_RANK``/``SLURM_LOCALID``),
``node_rank`` (torchrun's ``GROUP_RANK``/``SLURM_NODEID``). In a Kubernetes pod,
``pod``, ``namespace`` and ``container`` are spelled as dcgm-exporter's
Kubernetes mode spells them: the pod's name is its hostname (Kubernetes' default,
and ``HOSTNAME`` in the process's environment), the namespace is the service
account's file inside the container (or ``POD_NAMESPACE`` from the downward
API), and the container is ``CONTAINER_NAME`` when the pod spec sets it, else
the container ID from the cgroup path (all that ``/proc`` knows of it).
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
from dataclasses import dataclass

from .kernel.cgroups import read_cgroup_lines
from .kernel.process_files import in_root, read_bounded
from .kernel.procfs import PROC, read_cmdline, read_environ

#: The label names, in the order series carry them.
LABELS = ("job_id", "hostname", "rank", "local_rank", "node_rank", "pod", "namespace",
          "container")

_POD_UID = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
_CONTAINER_ID = re.compile(r"(?:docker-|cri-containerd-|crio-|containerd-)?([0-9a-f]{64})")
_SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
#: The ``hostname`` label's value where aitop's own hostname is not the node's: a
#: DaemonSet's pod is named after itself, so it sets this from ``spec.nodeName``
#: (as dcgm-exporter's manifests give it the node's name), and ``on(hostname)``
#: joins with dcgm-exporter's series hold.
NODE_NAME_ENV = "AITOP_NODE_NAME"


def node_name() -> str:
    """The node's name for the ``hostname`` label: ``AITOP_NODE_NAME``, else ours."""
    return os.environ.get(NODE_NAME_ENV, "").strip() or socket.gethostname()


@dataclass(frozen=True, slots=True)
class Identity:
    """A process's job identity and placement; empty strings for what is unknown."""

    job_id: str
    hostname: str
    rank: str = ""
    local_rank: str = ""
    node_rank: str = ""
    pod: str = ""
    namespace: str = ""
    container: str = ""

    def labels(self) -> tuple[tuple[str, str], ...]:
        """(name, value) for every label, in ``LABELS`` order (values may be empty)."""
        return tuple((name, str(getattr(self, name))) for name in LABELS)


_NODE_RANK_FLAGS = ("--node-rank", "--node_rank")


def command_digest(command: tuple[str, ...]) -> str:
    """12 hex digits that stand for a command line (secrets never leave as text).

    torchrun's ``--node-rank N`` is left out: it is the one argument that differs
    between the nodes of one job launched by the same command.
    """
    kept: list[str] = []
    skip_next = False
    for arg in command:
        if skip_next:
            skip_next = False
        elif arg in _NODE_RANK_FLAGS:
            skip_next = True
        elif not arg.startswith(tuple(f"{flag}=" for flag in _NODE_RANK_FLAGS)):
            kept.append(arg)
    return hashlib.sha256("\0".join(kept).encode()).hexdigest()[:12]


def job_id_from_env(env: dict[str, str], launcher_command: tuple[str, ...]) -> str:
    run_id = env.get("TORCHELASTIC_RUN_ID", "")
    if run_id and run_id != "none":
        return run_id
    slurm = env.get("SLURM_JOB_ID", "")
    if slurm:
        step = env.get("SLURM_STEP_ID", "")
        return f"{slurm}.{step}" if step else slurm
    return command_digest(launcher_command)


def kubernetes_placement(pid: int, env: dict[str, str],
                         proc_root: str = PROC) -> tuple[str, str, str]:
    """(pod, namespace, container) when the process runs in a Kubernetes pod, else empty."""
    cgroup = "\n".join(line.path for line in read_cgroup_lines(pid, proc_root))
    if "kubepods" not in cgroup:
        return "", "", ""
    pod = env.get("HOSTNAME", "")
    if not pod:
        uid = _POD_UID.search(cgroup)
        pod = uid.group(1).replace("_", "-") if uid else ""
    namespace = env.get("POD_NAMESPACE", "") or _service_account_namespace(pid, proc_root)
    container = env.get("CONTAINER_NAME", "")
    if not container:
        ids = _CONTAINER_ID.findall(cgroup)
        container = ids[-1][:12] if ids else ""
    return pod, namespace, container


def _service_account_namespace(pid: int, proc_root: str) -> str:
    """The namespace Kubernetes mounts into the pod's container, read in its filesystem."""
    found = read_bounded(in_root(pid, _SERVICE_ACCOUNT_NAMESPACE, proc_root), 4096, whole=True)
    return found.data.decode("utf-8", "replace").strip() if found else ""


def identify(pid: int, launcher_pid: int | None = None, proc_root: str = PROC,
             hostname: str | None = None) -> Identity:
    """The identity of the process ``pid``, in the job that ``launcher_pid`` (or it) started."""
    env = read_environ(pid, proc_root) or {}
    launcher = read_cmdline(launcher_pid if launcher_pid is not None else pid, proc_root)
    pod, namespace, container = kubernetes_placement(pid, env, proc_root)
    return Identity(
        job_id=job_id_from_env(env, launcher),
        hostname=hostname or node_name(),
        rank=env.get("RANK", env.get("SLURM_PROCID", "")),
        local_rank=env.get("LOCAL_RANK", env.get("SLURM_LOCALID", "")),
        node_rank=env.get("GROUP_RANK", env.get("SLURM_NODEID", "")),
        pod=pod,
        namespace=namespace,
        container=container,
    )
