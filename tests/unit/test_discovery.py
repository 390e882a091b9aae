"""Finding every PyTorch job on a node, and naming it: real files in a /proc-shaped tree.

The tree holds what the kernel shows for each process (``stat``, ``cmdline``,
``maps``, ``exe``, ``environ``, ``cgroup``), as read from real processes here;
the real /proc is read by the node agent's attach tests.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from aitop.probes.discovery import (
    NOT_PYTHON,
    ROOT_DENIED,
    Discovery,
    is_launcher,
    is_python_process,
    job_groups,
    other_user,
    python_beneath,
    unreadable_reason,
    user_name,
)
from aitop.probes.job_identity import (
    NODE_NAME_ENV,
    command_digest,
    identify,
    job_id_from_env,
)

SITE = "/opt/venv/lib/python3.11/site-packages"
TORCH_MAPS = (f"7f01-7f02 r-xp 00000000 08:01 42 {SITE}/torch/lib/libtorch_cpu.so\n"
              "7f03-7f04 r-xp 00000000 08:01 43 /usr/lib/libc.so.6\n")
PLAIN_MAPS = "7f03-7f04 r-xp 00000000 08:01 43 /usr/lib/libc.so.6\n"
PYTHON = "/usr/bin/python3.11"


def process(proc: Path, pid: int, parent: int, command: list[str], *, maps: str | None,
            exe: str = PYTHON, started: int = 1000, env: dict[str, str] | None = None,
            cgroup: str = "0::/user.slice\n") -> None:
    """One process's files, as the kernel writes them."""
    d = proc / str(pid)
    d.mkdir(parents=True)
    # pid (comm) state ppid ... field 22 (starttime) is the 20th after comm.
    after = ["S", str(parent), *["0"] * 17, str(started), "0", "0"]
    (d / "stat").write_text(f"{pid} ({Path(command[0]).name[:15]}) {' '.join(after)}\n")
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in command) + b"\0")
    if maps is None:
        (d / "maps").mkdir()  # unreadable, as another user's maps are to a non-root reader
    else:
        (d / "maps").write_text(maps)
    os.symlink(exe, d / "exe")
    (d / "environ").write_bytes(b"".join(f"{k}={v}\0".encode() for k, v in (env or {}).items()))
    (d / "cgroup").write_text(cgroup)


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    root = tmp_path / "proc"
    root.mkdir()
    return root


def test_workers_fold_into_their_training_process_and_ranks_into_the_launcher(
        proc: Path) -> None:
    process(proc, 100, 1, [PYTHON, "train.py"], maps=TORCH_MAPS)
    process(proc, 101, 100, [PYTHON, "-c", "from multiprocessing.spawn import spawn_main"],
            maps=TORCH_MAPS)  # a DataLoader worker
    process(proc, 200, 1, [PYTHON, "/usr/bin/torchrun", "--nproc-per-node=2", "ddp.py"],
            maps=TORCH_MAPS)
    process(proc, 201, 200, [PYTHON, "-u", "ddp.py"], maps=TORCH_MAPS)
    process(proc, 202, 200, [PYTHON, "-u", "ddp.py"], maps=TORCH_MAPS)
    process(proc, 300, 1, [PYTHON, "notes.py"], maps=PLAIN_MAPS)  # Python without torch
    process(proc, 400, 1, ["/usr/bin/bash"], maps=PLAIN_MAPS, exe="/usr/bin/bash")
    groups = job_groups(Discovery(str(proc), own_uid=0).scan(), str(proc))
    assert [(g.root.pid, [m.pid for m in g.members]) for g in groups] == [
        (100, [100, 101]), (200, [200, 201, 202])]
    assert all(g.root.unwatchable is None for g in groups)


def test_a_process_that_imports_torch_later_is_found_then(proc: Path) -> None:
    process(proc, 100, 1, [PYTHON, "train.py"], maps=PLAIN_MAPS)
    discovery = Discovery(str(proc), own_uid=0, recheck_s=0.0)
    assert discovery.scan() == []
    (proc / "100" / "maps").write_text(TORCH_MAPS)  # `import torch` has run since
    assert [f.pid for f in discovery.scan()] == [100]


def test_a_reused_pid_is_another_process(proc: Path) -> None:
    process(proc, 100, 1, [PYTHON, "train.py"], maps=TORCH_MAPS, started=1000)
    discovery = Discovery(str(proc), own_uid=0, recheck_s=0.0)
    first = discovery.scan()
    (proc / "100" / "stat").write_text((proc / "100" / "stat").read_text()
                                       .replace(" 1000 ", " 5000 "))
    (proc / "100" / "maps").write_text(PLAIN_MAPS)  # the new process has no torch
    assert [f.key for f in first] == [(100, 1000)]
    assert discovery.scan() == []


def test_what_cannot_be_watched_is_listed_with_the_reason(proc: Path) -> None:
    process(proc, 100, 1, [PYTHON, "train.py"], maps=None)  # another user's, maps unreadable
    process(proc, 200, 1, ["/opt/app/serve-libtorch", "--port", "80"], maps=TORCH_MAPS,
            exe="/opt/app/serve-libtorch")
    found = {f.pid: f for f in Discovery(str(proc), own_uid=1000).scan()}
    uid = os.stat(proc / "100").st_uid
    assert found[100].unwatchable == other_user(uid, 1000)
    assert found[200].unwatchable == NOT_PYTHON
    # To its owner an unreadable maps file is no torch job to list (not dumpable).
    assert Discovery(str(proc), own_uid=uid).scan() == [found[200]]


def test_each_reader_is_told_what_lets_it_read_another_users_job() -> None:
    """A non-root aitop is told to run as root or as the owner; root is denied only
    where a container withholds CAP_SYS_PTRACE, and told to grant it."""
    nobody = user_name(65534)
    assert other_user(0, 65534) == (
        f"owned by root (uid 0), and aitop runs as {nobody}, who may not read it: "
        "run aitop as root (sudo aitop)")
    assert other_user(65534, 1000).endswith(f"run aitop as root (sudo aitop) or as {nobody}")
    assert unreadable_reason(0, 65534) == other_user(0, 65534)
    assert unreadable_reason(65534, 0) == ROOT_DENIED.format(owner=nobody, uid=65534)
    assert "--cap-add SYS_PTRACE" in ROOT_DENIED
    assert unreadable_reason(1000, 1000) is None and unreadable_reason(None, 0) is None


def test_a_torchrun_rank_is_named_by_its_run_and_place(proc: Path) -> None:
    process(proc, 200, 1, [PYTHON, "/usr/bin/torchrun", "--nnodes=2", "--node-rank", "1",
                           "ddp.py"], maps=TORCH_MAPS)
    process(proc, 201, 200, [PYTHON, "-u", "ddp.py"], maps=TORCH_MAPS, env={
        "RANK": "3", "LOCAL_RANK": "1", "GROUP_RANK": "1", "WORLD_SIZE": "4",
        "TORCHELASTIC_RUN_ID": "bert-large-7"})
    identity = identify(201, 200, proc_root=str(proc), hostname="node-b")
    assert identity.labels() == (("job_id", "bert-large-7"), ("hostname", "node-b"),
                                 ("rank", "3"), ("local_rank", "1"), ("node_rank", "1"),
                                 ("pod", ""), ("namespace", ""), ("container", ""))


def test_the_job_id_without_a_run_id_is_the_launchers_command_on_every_node() -> None:
    node0 = ("torchrun", "--nnodes=2", "--node-rank=0", "train.py")
    node1 = ("torchrun", "--nnodes=2", "--node-rank", "1", "train.py")
    assert command_digest(node0) == command_digest(node1) != command_digest(("train.py",))
    # torchrun's default run id ("none") names nothing; Slurm's names the allocation.
    assert job_id_from_env({"TORCHELASTIC_RUN_ID": "none"}, node0) == command_digest(node0)
    assert job_id_from_env({"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0"}, node0) == "4242.0"


def test_a_pod_is_named_as_dcgm_exporter_names_it(proc: Path) -> None:
    container = "3f" * 32
    cgroup = ("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-"
              "pod0b1c2d3e_4f50_6172_8394_a5b6c7d8e9f0.slice/"
              f"cri-containerd-{container}.scope\n")
    process(proc, 100, 1, [PYTHON, "train.py"], maps=TORCH_MAPS, cgroup=cgroup,
            env={"HOSTNAME": "trainer-0", "RANK": "0"})
    secrets = proc / "100" / "root" / "var/run/secrets/kubernetes.io/serviceaccount"
    secrets.mkdir(parents=True)
    (secrets / "namespace").write_text("research\n")
    identity = identify(100, proc_root=str(proc), hostname="gpu-node-7")
    assert (identity.pod, identity.namespace, identity.container) == (
        "trainer-0", "research", container[:12])
    # Outside Kubernetes there is no pod, whatever HOSTNAME says.
    process(proc, 200, 1, [PYTHON, "train.py"], maps=TORCH_MAPS, env={"HOSTNAME": "box"})
    assert identify(200, proc_root=str(proc)).pod == ""


def test_a_daemonset_pod_labels_its_series_with_the_nodes_name(
        proc: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a pod, aitop's own hostname is its pod's name: ``AITOP_NODE_NAME`` (the
    DaemonSet's ``spec.nodeName``) names the node instead, as dcgm-exporter does."""
    process(proc, 100, 1, [PYTHON, "train.py"], maps=TORCH_MAPS, env={"RANK": "0"})
    monkeypatch.delenv(NODE_NAME_ENV, raising=False)
    assert identify(100, proc_root=str(proc)).hostname == socket.gethostname()
    monkeypatch.setenv(NODE_NAME_ENV, "gpu-node-7")
    assert identify(100, proc_root=str(proc)).hostname == "gpu-node-7"
    assert identify(100, proc_root=str(proc), hostname="given").hostname == "given"


@pytest.mark.parametrize("command,launcher", [
    ((PYTHON, "-m", "torch.distributed.run", "--nproc_per_node=2", "t.py"), True),
    (("/opt/venv/bin/python", "/opt/venv/bin/torchrun", "t.py"), True),
    (("/opt/venv/bin/python3", "/opt/venv/bin/accelerate", "launch", "t.py"), True),
    ((PYTHON, "train.py", "--launcher", "torchrun"), False),
    ((PYTHON, "-m", "aitop.demo.ddp"), False),
])
def test_launchers_are_known_by_their_command(command: tuple[str, ...], launcher: bool) -> None:
    assert is_launcher(command) is launcher


def test_an_unreadable_job_is_not_folded_into_whatever_started_it(proc: Path) -> None:
    """To a non-root agent, another user's runner and job are both unreadable Python:
    the job stands alone, with its forked worker folded in."""
    process(proc, 100, 1, [PYTHON, "-m", "pytest"], maps=None)
    process(proc, 110, 100, [PYTHON, "train.py", "--data", "/d"], maps=None)
    process(proc, 111, 110, [PYTHON, "train.py", "--data", "/d"], maps=None)  # fork worker
    groups = job_groups(Discovery(str(proc), own_uid=1000).scan(), str(proc))
    assert [(g.root.pid, [m.pid for m in g.members]) for g in groups] == [
        (100, [100]), (110, [110, 111])]


def test_a_job_a_torch_process_merely_started_is_a_job_of_its_own(proc: Path) -> None:
    """A notebook or sweep driver with torch loaded runs trials as subprocesses: each
    trial is a job. Lightning's ranks (given LOCAL_RANK) stay rank 0's."""
    process(proc, 100, 1, [PYTHON, "-m", "ipykernel_launcher"], maps=TORCH_MAPS)
    process(proc, 110, 100, [PYTHON, "trial.py", "--lr", "0.1"], maps=TORCH_MAPS)
    process(proc, 120, 100, [PYTHON, "trial.py", "--lr", "0.01"], maps=TORCH_MAPS)
    process(proc, 200, 1, [PYTHON, "fit.py"], maps=TORCH_MAPS)
    process(proc, 201, 200, [PYTHON, "/srv/fit.py"], maps=TORCH_MAPS,
            env={"LOCAL_RANK": "1", "WORLD_SIZE": "2"})
    groups = job_groups(Discovery(str(proc), own_uid=0).scan(), str(proc))
    assert [(g.root.pid, [m.pid for m in g.members]) for g in groups] == [
        (100, [100]), (110, [110]), (120, [120]), (200, [200, 201])]


def test_python_without_torch_is_looked_at_again_only_now_and_then(proc: Path) -> None:
    now = [0.0]
    process(proc, 100, 1, [PYTHON, "train.py"], maps=PLAIN_MAPS)
    discovery = Discovery(str(proc), own_uid=0, recheck_s=10.0, clock=lambda: now[0])
    assert discovery.scan() == []
    (proc / "100" / "maps").write_text(TORCH_MAPS)
    now[0] = 9.0
    assert discovery.scan() == []  # its maps are not read again yet
    now[0] = 10.0
    assert [f.pid for f in discovery.scan()] == [100]


def test_a_rank_whose_peers_run_on_other_machines_knows_its_job_is_larger(proc: Path) -> None:
    """One rank per node: the launcher here has one child, WORLD_SIZE says two."""
    from aitop.engine.live.attach import job_notice
    from aitop.probes.ranks import find_job

    process(proc, 200, 1, [PYTHON, "/usr/bin/torchrun", "--nnodes=2", "ddp.py"],
            maps=TORCH_MAPS)
    process(proc, 201, 200, [PYTHON, "-u", "ddp.py"], maps=TORCH_MAPS, env={
        "RANK": "1", "LOCAL_RANK": "0", "GROUP_RANK": "1", "WORLD_SIZE": "2",
        "TORCHELASTIC_RUN_ID": "two-nodes"})
    for tid, kids in ((200, "201"), (201, "")):
        task = proc / str(tid) / "task" / str(tid)
        task.mkdir(parents=True)
        (task / "children").write_text(kids)
    job = find_job(200, str(proc))
    assert (len(job.ranks), job.world_size, job.multi_rank) == (1, 2, False)
    notice = job_notice(job)
    assert notice is not None and "the launcher of a 2-rank job" in notice, notice
    assert "1 on other machines" in notice and "single-process" not in notice, notice


def test_the_launchers_of_one_jobs_nodes_named_together_are_one_job(proc: Path) -> None:
    """``aitop --pid A --pid B``: two launchers of a 2-node job on one machine, one
    rank each; named together, the job has both ranks here and none elsewhere."""
    from aitop.engine.live.attach import job_notice
    from aitop.probes.ranks import find_job, joined_job

    for launcher, rank in ((300, 0), (400, 1)):
        process(proc, launcher, 1, [PYTHON, "/usr/bin/torchrun", "--nnodes=2", "ddp.py"],
                maps=TORCH_MAPS)
        process(proc, launcher + 1, launcher, [PYTHON, "-u", "ddp.py"], maps=TORCH_MAPS, env={
            "RANK": str(rank), "LOCAL_RANK": "0", "GROUP_RANK": str(rank), "WORLD_SIZE": "2",
            "TORCHELASTIC_RUN_ID": "two-nodes"})
        for tid, kids in ((launcher, str(launcher + 1)), (launcher + 1, "")):
            task = proc / str(tid) / "task" / str(tid)
            task.mkdir(parents=True)
            (task / "children").write_text(kids)
    # Named with the second node's launcher first, the job is still led by rank 0.
    job = joined_job(find_job(400, str(proc)), [find_job(300, str(proc))])
    assert [(r.rank, r.pid) for r in job.ranks] == [(0, 301), (1, 401)]
    assert (job.multi_rank, job.world_size, job.launcher_pid) == (True, 2, None)
    assert job.training_pid() == 301
    assert [job.label(301), job.label(401)] == ["rank 0", "rank 1"]
    notice = job_notice(job)
    assert notice is not None and notice.startswith("PIDs 400, 300 are one 2-rank job"), notice
    assert "other machines" not in notice, notice
    # A PID named twice, or a rank named beside its launcher, is one rank.
    again = joined_job(find_job(300, str(proc)), [find_job(301, str(proc)),
                                                  find_job(300, str(proc))])
    assert [r.pid for r in again.ranks] == [301] and again.joined == (301,)


def test_an_elastic_agent_whose_rank_0_has_not_started_is_no_rank(proc: Path) -> None:
    """torchrun restarting its ranks: local rank 1 is up, rank 0 not yet. The agent
    is the launcher, not a Lightning-style rank 0 (a CI run listed torchrun's own
    PID among the ranks it watched); without a run the parent is Lightning's."""
    from aitop.probes.ranks import find_job

    process(proc, 500, 1, [PYTHON, "/usr/bin/torchrun", "--nproc_per_node=2", "ddp.py"],
            maps=TORCH_MAPS)
    process(proc, 502, 500, [PYTHON, "-u", "ddp.py"], maps=TORCH_MAPS, env={
        "RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "r1"})
    for tid, kids in ((500, "502"), (502, "")):
        task = proc / str(tid) / "task" / str(tid)
        task.mkdir(parents=True)
        (task / "children").write_text(kids)
    for pid in (500, 502):
        job = find_job(pid, str(proc))
        assert [r.pid for r in job.ranks] == [502], (pid, job)
        assert job.launcher_pid == 500, job
    # From the launcher, the job is still starting: the rank to lead with is not up.
    assert find_job(500, str(proc)).starting and not find_job(502, str(proc)).starting
    process(proc, 501, 500, [PYTHON, "-u", "ddp.py"], maps=TORCH_MAPS, env={
        "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "r1"})
    (proc / "500" / "task" / "500" / "children").write_text("501 502")
    (proc / "501" / "task" / "501").mkdir(parents=True)
    (proc / "501" / "task" / "501" / "children").write_text("")
    started = find_job(500, str(proc))
    assert [r.pid for r in started.ranks] == [501, 502] and not started.starting
    process(proc, 600, 1, [PYTHON, "train.py"], maps=TORCH_MAPS)
    process(proc, 602, 600, [PYTHON, "train.py"], maps=TORCH_MAPS,
            env={"LOCAL_RANK": "1", "WORLD_SIZE": "2"})
    for tid, kids in ((600, "602"), (602, "")):
        task = proc / str(tid) / "task" / str(tid)
        task.mkdir(parents=True)
        (task / "children").write_text(kids)
    assert [r.pid for r in find_job(600, str(proc)).ranks] == [600, 602]


def test_a_launcher_read_between_starting_two_ranks_is_still_starting(proc: Path) -> None:
    """torchrun starts its ranks one by one, milliseconds apart: read in between, with
    local rank 0 up and rank 1 not, the job is starting (``LOCAL_WORLD_SIZE`` says two),
    not a one-rank job (a node agent judged such a job without its straggler). The
    fleet attaches it once all are up, or with rank 0 after the launcher wait."""
    from aitop.engine.fleet.model import _ranks_up
    from aitop.engine.live.attach import LAUNCHER_RANKS_WAIT_S
    from aitop.probes.ranks import find_job

    process(proc, 700, 1, [PYTHON, "/usr/bin/torchrun", "--nproc_per_node=2", "ddp.py"],
            maps=TORCH_MAPS)
    rank_env = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "r7"}
    process(proc, 701, 700, [PYTHON, "-u", "ddp.py"], maps=TORCH_MAPS,
            env={"RANK": "0", "LOCAL_RANK": "0", **rank_env})
    children(proc, 700, 701)
    children(proc, 701)
    half = find_job(700, str(proc))
    assert [r.pid for r in half.ranks] == [701] and half.starting, half
    assert not _ranks_up(half) and not _ranks_up(half, LAUNCHER_RANKS_WAIT_S / 2)
    # A rank that never comes (it exited early): rank 0 leads once the wait is over.
    assert _ranks_up(half, LAUNCHER_RANKS_WAIT_S)
    # From rank 0 itself, the job is what it is: no launcher was given.
    assert not find_job(701, str(proc)).starting
    process(proc, 702, 700, [PYTHON, "-u", "ddp.py"], maps=TORCH_MAPS,
            env={"RANK": "1", "LOCAL_RANK": "1", **rank_env})
    children(proc, 700, 701, 702)
    children(proc, 702)
    whole = find_job(700, str(proc))
    assert [r.pid for r in whole.ranks] == [701, 702] and not whole.starting, whole
    assert _ranks_up(whole)
    # Without LOCAL_WORLD_SIZE (older launchers), rank 0 up is as far as it can tell.
    process(proc, 800, 1, [PYTHON, "/usr/bin/torchrun", "--nproc_per_node=2", "ddp.py"],
            maps=TORCH_MAPS)
    process(proc, 801, 800, [PYTHON, "-u", "ddp.py"], maps=TORCH_MAPS, env={
        "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "TORCHELASTIC_RUN_ID": "r8"})
    children(proc, 800, 801)
    children(proc, 801)
    assert not find_job(800, str(proc)).starting


def children(proc: Path, pid: int, *kids: int) -> None:
    """``/proc/PID/task/PID/children``: what the process forked."""
    task = proc / str(pid) / "task" / str(pid)
    task.mkdir(parents=True, exist_ok=True)
    (task / "children").write_text("".join(f"{k} " for k in kids))


def test_the_python_job_a_wrapper_runs_is_found_beneath_it(proc: Path) -> None:
    """``bash run.sh`` -> ``time`` -> ``python train.py`` (with a worker) and ``tee``:
    the job is the topmost Python process; torchrun under a shell counts once."""
    process(proc, 10, 1, ["/bin/bash", "run.sh"], maps=PLAIN_MAPS, exe="/usr/bin/bash")
    process(proc, 11, 10, ["/usr/bin/time", "python", "train.py"], maps=PLAIN_MAPS,
            exe="/usr/bin/time")
    process(proc, 12, 11, [PYTHON, "train.py"], maps=TORCH_MAPS)
    process(proc, 13, 12, [PYTHON, "train.py"], maps=TORCH_MAPS)  # a DataLoader worker
    process(proc, 14, 10, ["tee", "log"], maps=PLAIN_MAPS, exe="/usr/bin/tee")
    for pid, kids in {10: (11, 14), 11: (12,), 12: (13,), 13: (), 14: ()}.items():
        children(proc, pid, *kids)
    assert python_beneath(10, str(proc)) == (12,)
    assert is_python_process(12, str(proc)) and not is_python_process(10, str(proc))
    process(proc, 20, 1, ["/bin/sh", "-c", "torchrun ddp.py & python eval.py"],
            maps=PLAIN_MAPS, exe="/usr/bin/dash")
    process(proc, 21, 20, [PYTHON, "/usr/bin/torchrun", "ddp.py"], maps=TORCH_MAPS)
    process(proc, 22, 21, [PYTHON, "-u", "ddp.py"], maps=TORCH_MAPS)
    process(proc, 23, 20, [PYTHON, "eval.py"], maps=TORCH_MAPS)
    for pid, kids in {20: (21, 23), 21: (22,), 22: (), 23: ()}.items():
        children(proc, pid, *kids)
    assert python_beneath(20, str(proc)) == (21, 23)
    # A process that is no wrapper (it runs nothing) has none: it is watched as it is.
    process(proc, 400, 1, ["sleep", "60"], maps=PLAIN_MAPS, exe="/usr/bin/sleep")
    children(proc, 400)
    assert python_beneath(400, str(proc)) == ()
    # A child that exits while it is looked at (no command line, no exe) is no Python.
    (proc / "401").mkdir()
    (proc / "401" / "cmdline").write_bytes(b"")
    children(proc, 400, 401)
    assert python_beneath(400, str(proc)) == ()

