"""The HTML report in a real browser: it renders, its charts are drawn with data,
and it fetches nothing (Chromium's own network log says what the page asked for)."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from aitop.engine.headless.export import write_snapshot
from aitop.engine.html.page import CONTENT_SECURITY_POLICY
from support.browser import render
from support.jobs import run_aitop
from support.processes import free_port
from support.tui_session import replay_source

#: Measures what the browser laid out: each chart's box and each series' length.
GEOMETRY_PROBE = """<script>
addEventListener("load", () => {
  const charts = [...document.querySelectorAll("svg.chart")].map(svg => ({
    id: svg.id, width: svg.getBoundingClientRect().width,
    series: [...svg.querySelectorAll(".series")].map(s => {
      const box = s.getBBox(); return {width: box.width, height: box.height}; }),
  }));
  const out = document.createElement("pre");
  out.id = "geometry"; out.textContent = JSON.stringify(charts);
  document.body.append(out);
});
</script>"""


def exported_page(tmp_path: Path) -> Path:
    """The HTML report an export writes beside its snapshot."""
    paths = write_snapshot(tmp_path / "run.json", replay_source())
    page = tmp_path / "run.html"
    assert page in paths
    return page


def without_csp(page: str) -> str:
    """The page with its Content-Security-Policy taken out (there must be one)."""
    policy = re.compile(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">')
    found = policy.search(page)
    assert found and html.unescape(found.group(1)) == CONTENT_SECURITY_POLICY
    return policy.sub("", page)


def test_the_exported_report_draws_every_chart_and_asks_for_nothing(tmp_path: Path) -> None:
    page = exported_page(tmp_path)
    shown = render(page, tmp_path)
    assert shown.page_requests == []
    assert "<h1>aitop report</h1>" in shown.dom
    charts = re.findall(r'<svg class="chart" id="chart-([a-z_]+)"', shown.dom)
    assert charts == ["phases", "steps", "cpu", "memory", "gpu_util", "gpu_memory"]
    # The geometry the browser laid out: every chart has width, every series has extent.
    probe = tmp_path / "probe.html"
    probe.write_text(without_csp(page.read_text()).replace("</body>", GEOMETRY_PROBE + "</body>"))
    geometry = re.search(r'<pre id="geometry">(.*?)</pre>', render(probe, tmp_path).dom)
    assert geometry is not None, "the probe script did not run"
    laid_out = json.loads(geometry.group(1).replace("&quot;", '"'))
    assert [c["id"] for c in laid_out] == [f"chart-{c}" for c in charts]
    for chart in laid_out:
        assert chart["width"] > 300, chart
        assert chart["series"] and all(s["width"] > 100 for s in chart["series"]), chart


def test_the_page_policy_blocks_a_fetch_that_the_log_would_show(tmp_path: Path) -> None:
    """The check can fail: an image from a server shows in the log without the
    policy, and never leaves the browser with it."""
    page = exported_page(tmp_path).read_text()
    url = f"http://127.0.0.1:{free_port()}/pixel.png"
    planted = f'<img src="{url}"></body>'
    with_policy, open_page = tmp_path / "with-policy.html", tmp_path / "open.html"
    with_policy.write_text(page.replace("</body>", planted))
    open_page.write_text(without_csp(page).replace("</body>", planted))
    assert render(open_page, tmp_path).page_requests == [url]
    assert render(with_policy, tmp_path).page_requests == []


def test_aitop_report_html_writes_the_page_for_any_snapshot(tmp_path: Path) -> None:
    snapshot = write_snapshot(tmp_path / "run.json", replay_source())[0]
    out = tmp_path / "shared" / "for-a-colleague.html"
    out.parent.mkdir()
    done = run_aitop("report", str(snapshot), "--html", "-o", str(out),
                     "--baseline", str(snapshot), timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"wrote {out}"
    shown = render(out, tmp_path)
    assert shown.page_requests == []
    assert 'id="comparison"' in shown.dom and "no significant change" in shown.dom
