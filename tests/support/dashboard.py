"""The shipped Grafana dashboard's panels, and their queries run on a real Prometheus."""

from __future__ import annotations

import json
import time
from typing import Any

from benchmarks.dashboard_preview import DASHBOARD, panel_exprs
from support.prometheus import PrometheusServer

Results = dict[str, list[dict[str, Any]]]


def dashboard_panels() -> dict[str, list[str]]:
    """Each panel's PromQL queries, the dashboard's variables set to "All", keyed by
    title and id (two rows may hold panels of one title)."""
    board = json.loads(DASHBOARD.read_text())
    return {f"{panel['title']} (panel {panel['id']})": panel_exprs(panel)
            for panel in board["panels"] if panel.get("targets")}


def panel_results(prometheus: PrometheusServer, panels: dict[str, list[str]],
                  timeout: float) -> Results:
    """Each panel's series (its queries' together) once every panel has some, or as
    they stand at ``timeout``. A query Prometheus refuses fails the test at once."""
    deadline = time.time() + timeout
    while True:
        results = {title: [s for e in exprs for s in prometheus.query(e)]
                   for title, exprs in panels.items()}
        if all(results.values()) or time.time() > deadline:
            return results
        time.sleep(2)
