"""The node agent (``aitop --serve PORT`` without ``--pid``) on real jobs, scraped by a
real Prometheus: jobs are attached as they start and their series leave when they end,
and every query of the shipped Grafana dashboard is valid and returns data (the
generated rules loaded: some panels read the recording rules).

The agent's GPU is the fake NVML's "healthy" scenario (no GPU here; the only fake).

``--match`` keeps each agent to this test's own jobs (their command lines carry the
test's directory): the suite runs other tests' jobs beside it on the same machine.
"""

from __future__ import annotations

import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest
from aitop.probes.discovery import other_user
from aitop.probes.kernel.procfs import read_environ
from prometheus_client.parser import text_string_to_metric_families
from support.dashboard import dashboard_panels, panel_results
from support.jobs import run_aitop
from support.processes import free_port, start_logged, started, stop_tree, wait_until
from support.prometheus import PrometheusServer, start_serve, stop_process

from benchmarks.jobs import LIGHT_JOB

pytestmark = pytest.mark.attach

Samples = dict[str, list[dict[str, str]]]


#: What the agent exports about a job's ranks, quoted when a panel stays empty.
RANK_SERIES = ("aitop_comm_share_ratio", "aitop_straggler_score", "aitop_ranks_watched",
               "aitop_probe_state")


def check_dashboard(prometheus: PrometheusServer, address: str, timeout: float = 60.0) -> None:
    """Every query is valid (the API accepts it, else this raises) and every panel shows
    data (one of its queries has some: a job's own GPU memory needs it on the GPU)."""
    panels = dashboard_panels()
    results = panel_results(prometheus, panels, timeout)
    pending = {title: panels[title] for title, series in results.items() if not series}
    if pending:
        samples = scrape(address)
        seen = {name: samples.get(name) for name in RANK_SERIES}
        pytest.fail(f"panels without data: {pending}; the agent exports: {seen}")


def scrape(address: str) -> Samples:
    """Each metric's samples' labels (values in ``"value"``), from a direct scrape."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {f.name: [{**s.labels, "value": str(s.value)} for s in f.samples]
            for f in text_string_to_metric_families(text)}


def job_ids(samples: Samples, metric: str = "aitop_up") -> set[str]:
    return {s["job_id"] for s in samples.get(metric, [])}


def torchrun(port: int, marker: Path) -> list[str]:
    """2 ranks; rank 1 makes its batches in its training thread, so rank 0 mostly
    waits (about one core for the job, not two: the suite runs beside it)."""
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
            f"--master_port={port}", f"--rdzv-id=agent-test-{port}", "-m", "aitop.demo.ddp",
            "--duration", "90", "--slow-rank", "1", "--slow-ms", "30",
            "--truth", str(marker / "ddp-truth")]


def test_jobs_are_watched_as_they_start_and_dropped_as_they_end(tmp_path: Path) -> None:
    # The dashboard's steps/s and cross-node straggler panels read the recording rules.
    rules = tmp_path / "aitop-rules.yml"
    made = run_aitop("rules", "--format", "prometheus", "-o", str(rules), timeout=60)
    assert made.returncode == 0, made.stderr
    agent, address = start_serve(None, "--match", str(tmp_path), fake_gpu="healthy")
    prometheus = PrometheusServer(tmp_path, [address], [rules])
    single = None
    try:
        assert job_ids(scrape(address)) == set()  # nothing of this test's runs yet
        single = start_logged([sys.executable, "-c", LIGHT_JOB, str(tmp_path)])
        with started(torchrun(free_port(), tmp_path)) as launcher:
            # Two jobs: the single loop, and the torchrun job's two ranks under one job_id.
            up = prometheus.wait_for('count(count by (job_id) (aitop_up == 1)) == 2',
                                     timeout=90)
            assert up
            samples = scrape(address)
            info = {s["pid"]: s for s in samples["aitop_job_info"]}
            assert set(info) == {str(single.pid), str(launcher.pid)}, info
            assert {s["status"] for s in info.values()} == {"watched"}, info
            # The torchrun job is named by its run and watched at rank 0 of node 0.
            ranks = [c.pid for c in psutil.Process(launcher.pid).children()]
            run_id = {(read_environ(pid) or {}).get("TORCHELASTIC_RUN_ID") for pid in ranks}
            ddp = info[str(launcher.pid)]
            assert {ddp["job_id"]} == run_id and ddp["job_id"].startswith("agent-test-"), (
                ddp, run_id)
            assert (ddp["rank"], ddp["local_rank"], ddp["node_rank"]) == ("0", "0", "0")
            assert ddp["hostname"] and info[str(single.pid)]["rank"] == ""
            # Every job has its verdict series, under its own identity.
            judged = prometheus.wait_for("count by (job_id) (aitop_bottleneck == 1)",
                                         timeout=60)
            assert {r["metric"]["job_id"] for r in judged} == job_ids(samples)
            agent_jobs = {s["value"] for s in samples["aitop_agent_jobs"]}
            assert agent_jobs == {"2.0"}, samples["aitop_agent_jobs"]
            first_series = {
                pid: time.time() - psutil.Process(int(pid)).create_time() for pid in info}
            print(f"seconds from a job's start to its series (upper bound): {first_series}")
            single_id = info[str(single.pid)]["job_id"]
            # Found while it built its model at module level, the loop's counter in
            # train() is still read: a rate, and no more than the light loop's 30 ms
            # sleep a step allows (it read 20-28/s alone, 6.9/s four tests at a time).
            rate = prometheus.wait_for(
                f'aitop_steps_per_second{{job_id="{single_id}"}}', timeout=60)
            assert 0 < float(rate[0]["value"][1]) < 1 / 0.03, rate
            # The dashboard: every query valid, every panel with data (the straggler
            # score once the torchrun job's peer has been judged).
            check_dashboard(prometheus, address)
        # The torchrun job ended: its series left the scrape, and Prometheus saw them go.
        assert wait_until(lambda: job_ids(scrape(address)) == {single_id}, timeout=20), \
            scrape(address).get("aitop_up")
        assert wait_until(lambda: {r["metric"]["job_id"] for r in
                                   prometheus.query("aitop_up")} == {single_id}, timeout=20)
        assert not [s for s in scrape(address)["aitop_job_info"] if s["job_id"] != single_id]
    finally:
        if single is not None:
            stop_tree(single)
        prometheus.stop()
        code = stop_process(agent)
    assert code == 0


def test_another_users_job_is_listed_with_the_reason(tmp_path: Path) -> None:
    """An agent run as ``nobody`` cannot read root's job: it says so, and keeps serving."""
    job = start_logged([sys.executable, "-c", LIGHT_JOB, str(tmp_path)])
    agent = None
    try:
        agent, address = start_serve(None, "--match", str(tmp_path), user="65534")
        listed = wait_until(lambda: scrape(address).get("aitop_job_info"), timeout=20)
        if not listed:
            stop_process(agent)
            assert agent.stderr is not None
            pytest.fail(f"nothing listed; the agent said: {agent.stderr.read()}")
        [info] = scrape(address)["aitop_job_info"]
        assert info["pid"] == str(job.pid) and info["status"] == "not_watched", info
        assert info["reason"] == other_user(0, 65534), info
        assert "aitop_up" not in scrape(address)
    finally:
        stop_tree(job)
        code = stop_process(agent) if agent is not None else 0
    assert code == 0
