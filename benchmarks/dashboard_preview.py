"""A picture of the Grafana dashboard's panels, drawn without Grafana.

Grafana cannot be installed on this project's machines (no package of it in the
registries they reach), so the README's picture of ``deploy/grafana/
aitop-dashboard.json`` is made here: every panel's own PromQL (the variables
set to "All") is run against a real Prometheus that scrapes a real node agent
watching real jobs, and drawn at the panel's grid place, time series with the
HTML report's SVG charts, tables and the pie chart as tables, then shot in
headless Chromium. It shows what each panel holds, not Grafana's styling::

    python -m benchmarks.dashboard_preview [--out docs/dashboard-preview.png] [--seconds 75]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from html import escape
from pathlib import Path
from typing import Any

from aitop.engine.html.charts import Chart, Line
from aitop.engine.html.svg import chart_svg, legend

from .jobs import LIGHT_JOB

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "deploy" / "grafana" / "aitop-dashboard.json"
#: Pixels per grid unit of height (Grafana's rows are about 30 px).
ROW_PX = 30
#: Said above the panels: what the picture is, and what it is not.
CAPTION = ("Each panel's own query on a real Prometheus scraping a real node agent, drawn "
           "without Grafana; the GPU is the test suite's fake NVML (this machine has none).")
#: Labels that tell one series of a panel from another, in the order shown.
SERIES_LABELS = ("hostname", "job_id", "rank", "phase", "gpu", "__name__")

Series = list[dict[str, Any]]


def panel_exprs(panel: dict[str, Any]) -> list[str]:
    """A panel's queries with the dashboard's variables set to "All"."""
    return [t["expr"].replace("$hostname", ".*").replace("$job_id", ".*")
            for t in panel.get("targets", [])]


def series_label(metric: dict[str, str], varying: Sequence[str]) -> str:
    return " ".join(f"{k}={metric[k]}" for k in varying if metric.get(k)) or "value"


def _varying(series: Series) -> list[str]:
    """The labels whose values differ between the series (one label if none do)."""
    keys = [k for k in SERIES_LABELS
            if len({s["metric"].get(k, "") for s in series}) > 1]
    return keys or [k for k in SERIES_LABELS if any(k in s["metric"] for s in series)][:1]


def timeseries_html(title: str, series: Series, t0: float, t1: float) -> str:
    varying = _varying(series)
    lines = tuple(
        Line(series_label(s["metric"], varying),
             tuple((float(t) - t0, float(v)) for t, v in s["values"]))
        for s in series)
    chart = Chart(re.sub(r"\W+", "-", title.lower()), title, "", lines)
    keys = "".join(f'<span class="key"><i style="background:{colour}"></i>{escape(label)}'
                   "</span>" for label, colour in legend(chart)[:8])
    return chart_svg(chart, t1 - t0) + f'<div class="legend">{keys}</div>'


def table_html(series: Series) -> str:
    columns = sorted({k for s in series for k in s["metric"]} - {"__name__"})
    head = "".join(f"<th>{escape(c)}</th>" for c in columns) + "<th>value</th>"
    rows = "".join(
        "<tr>" + "".join(f"<td>{escape(s['metric'].get(c, ''))}</td>" for c in columns)
        + f"<td>{float(s['value'][1]):g}</td></tr>" for s in series)
    return f"<table><tr>{head}</tr>{rows}</table>"


def page(board: dict[str, Any], instant: Callable[[str], Series],
         ranged: Callable[[str], Series], t0: float, t1: float) -> str:
    """The dashboard as one HTML page: each panel at its grid place."""
    cells = []
    for panel in board["panels"]:
        grid = panel["gridPos"]
        place = (f"grid-column:{grid['x'] + 1}/span {grid['w']};"
                 f"grid-row:{grid['y'] + 1}/span {grid['h']}")
        title = escape(panel.get("title", "").replace("$job_id", "All"))
        if panel["type"] == "row":
            cells.append(f'<h2 style="{place}">{title}</h2>')
            continue
        if panel["type"] == "timeseries":
            series = [s for e in panel_exprs(panel) for s in ranged(e)]
            body = timeseries_html(panel["title"], series, t0, t1) if series else ""
        else:
            series = [s for e in panel_exprs(panel) for s in instant(e)]
            body = table_html(series) if series else ""
        cells.append(f'<section style="{place}"><h3>{title}</h3>'
                     f'{body or "<p class=empty>no data</p>"}</section>')
    return f"""<!doctype html><html><head><meta charset="utf-8">
<title>{escape(board["title"])}</title><style>
body{{font:12px sans-serif;background:#111217;color:#ccccdc;margin:12px}}
main{{display:grid;grid-template-columns:repeat(24,1fr);grid-auto-rows:{ROW_PX}px;gap:6px}}
section{{background:#181b1f;border:1px solid #2c3235;border-radius:2px;padding:6px;overflow:hidden}}
h1{{font-size:16px}} h2{{font-size:14px;margin:6px 0 0}} h3{{font-size:12px;margin:0 0 4px}}
svg{{width:100%;height:auto;background:#181b1f}} svg text{{fill:#9fa7b3;font-size:10px}}
table{{border-collapse:collapse;width:100%}} td,th{{border-bottom:1px solid #2c3235;
padding:2px 4px;text-align:left;white-space:nowrap}} .legend{{display:flex;flex-wrap:wrap;gap:8px}}
.key i{{display:inline-block;width:10px;height:3px;margin-right:3px;vertical-align:middle}}
.empty{{color:#888}}</style></head><body>
<h1>{escape(board["title"])}</h1><p>{CAPTION}</p>
<main>{"".join(cells)}</main></body></html>"""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "dashboard-preview.png")
    parser.add_argument("--seconds", type=float, default=75.0,
                        help="how long the jobs run under the agent before the picture")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT / "tests"))
    from support.browser import headless
    from support.processes import free_port, started, stop_tree
    from support.prometheus import PrometheusServer, start_serve, stop_process

    board = json.loads(DASHBOARD.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        rules = work / "aitop-rules.yml"
        subprocess.run([sys.executable, "-m", "aitop.tui", "rules", "--format", "prometheus",
                        "-o", str(rules)], check=True, capture_output=True)
        agent, address = start_serve(None, "--match", str(work), fake_gpu="healthy")
        prometheus = PrometheusServer(work, [address], [rules])
        single = subprocess.Popen([sys.executable, "-c", LIGHT_JOB, str(work)])
        ddp = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
               f"--master_port={free_port()}", "--rdzv-id=preview", "-m", "aitop.demo.ddp",
               "--duration", str(args.seconds + 60), "--slow-rank", "1", "--slow-ms", "30",
               "--truth", str(work / "ddp-truth")]
        try:
            with started(ddp):
                t0 = time.time()
                time.sleep(args.seconds)
                t1 = time.time()

                def ranged(expr: str) -> Series:
                    step = max(1.0, (t1 - t0) / 200)
                    return list(prometheus.api("query_range", query=expr, start=t0, end=t1,
                                               step=step)["result"])

                html = page(board, lambda e: prometheus.query(e, at=t1), ranged, t0, t1)
        finally:
            stop_tree(single)
            prometheus.stop()
            stop_process(agent)
        preview = work / "dashboard.html"
        preview.write_text(html)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([*headless(work / "profile"), "--hide-scrollbars",
                        "--window-size=1600,2150", f"--screenshot={args.out.resolve()}",
                        preview.as_uri()], check=True, capture_output=True, timeout=120)
        (args.out.with_suffix(".html")).write_text(html)
    print(f"wrote {args.out} and {args.out.with_suffix('.html')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
