"""The Grafana dashboard in a cluster's shape: one node agent per node, each seeing ONE
rank of a multi-node job, one Prometheus scraping both with the generated rules.

A real 2-node torchrun job on one machine (two launchers, ``--nnodes=2``, a gloo
job with a c10d rendezvous on loopback), one agent ``--match``-ed to each
"node", and every query of ``deploy/grafana/aitop-dashboard.json`` run through
Prometheus' HTTP API must return data. No agent sees two ranks, so the series
only an aitop seeing several ranks writes (``aitop_straggler_score``) stays
empty, and the straggler and steps/s panels fill from the recording rules.

The agents' GPU is the fake NVML's "healthy" scenario (no GPU here; the only fake).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from support.dashboard import dashboard_panels, panel_results
from support.jobs import rank_of, run_aitop, two_node_launcher
from support.processes import free_port, started, wait_until
from support.prometheus import PrometheusServer, start_serve, stop_process

pytestmark = pytest.mark.attach

#: The panels that an aitop seeing one rank cannot fill by itself (titles' starts).
ACROSS_NODES = ("Straggler score", "Steps per second")


def test_every_panel_fills_with_one_agent_per_node(tmp_path: Path) -> None:
    port = free_port()
    run_id = f"cluster-{port}"
    node_dirs = (tmp_path / "node-a", tmp_path / "node-b")
    rules = tmp_path / "aitop-rules.yml"
    made = run_aitop("rules", "--format", "prometheus", "-o", str(rules), timeout=60)
    assert made.returncode == 0, made.stderr
    agents = [start_serve(None, "--match", str(d), fake_gpu="healthy") for d in node_dirs]
    prometheus = PrometheusServer(tmp_path, [address for _, address in agents], [rules])
    panels = dashboard_panels()
    try:
        with started(two_node_launcher(port, run_id, node_dirs[0], duration_s=90)) as a, \
                started(two_node_launcher(port, run_id, node_dirs[1], duration_s=90)) as b:
            assert wait_until(lambda: rank_of(a.pid) and rank_of(b.pid), timeout=60)
            # The shape: each agent watches one rank of the same job.
            watched = f'count by (instance, rank) (aitop_up{{job_id="{run_id}"}} == 1)'
            assert wait_until(lambda: len(prometheus.query(watched)) == 2, timeout=60), \
                prometheus.query(watched)
            results = panel_results(prometheus, panels, timeout=75)
            local_scores = prometheus.query("aitop_straggler_score")
            ranks = {s["metric"]["instance"]: s["metric"]["rank"]
                     for s in prometheus.query(f'aitop_up{{job_id="{run_id}"}}')}
    finally:
        prometheus.stop()
        codes = [stop_process(agent) for agent, _ in agents]
    empty = {title for title, series in results.items() if not series}
    across = {title: series for title, series in results.items()
              if title.startswith(ACROSS_NODES)}
    print(f"panels with data: {len(results) - len(empty)} of {len(results)}; agents' ranks "
          f"{ranks}; " + "; ".join(f"{t}: {summary(s)}" for t, s in across.items()))
    assert not empty, f"panels without data: { {t: panels[t] for t in empty} }"
    assert sorted(ranks.values()) == ["0", "1"], ranks
    # No agent sees two ranks: the series one seeing several would write is empty...
    assert local_scores == [], local_scores
    # ... and the recording rules fill the panels: both ranks scored, each from its
    # own node's agent, and the job's steps/s.
    assert len(across) == 3, list(across)
    for title, series in across.items():
        if title.startswith("Straggler"):
            assert {s["metric"]["rank"] for s in series} == {"0", "1"}, series
        else:
            assert run_id in {s["metric"]["job_id"] for s in series}, series
    assert codes == [0, 0]


def summary(series: list[dict]) -> str:
    return ", ".join(f"{s['metric'].get('job_id', '')}/{s['metric'].get('rank', '-')}="
                     f"{float(s['value'][1]):.2f}" for s in series) or "none"
