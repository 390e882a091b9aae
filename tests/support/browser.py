"""Debian's headless ``chromium``, run on a page: its DOM after loading, and every
request the page itself made (from Chromium's own network log)."""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

INSTALL = "install Debian's chromium package (apt-get install chromium), as the README's " \
          "test command does"

#: Chromium's own background traffic (time, spelling dictionaries, accounts) is
#: started by the browser, "not an origin"; a page's requests carry the page's
#: origin ("null" for a file:// page).
BROWSER_INITIATED = "not an origin"


@dataclass(frozen=True)
class Rendered:
    """What the browser made of a page."""

    dom: str
    #: URLs the page asked for (not the browser's own background requests).
    page_requests: list[str]


def chromium() -> str:
    """The path of ``chromium``; fails the test loudly if missing."""
    path = shutil.which("chromium")
    if path is None:
        pytest.fail(f"chromium is not installed: {INSTALL}")
    return path


def headless(profile: Path) -> list[str]:
    """Chromium run headless as root on this closed network, with a profile of its own
    (without the background-networking flags it tries to reach the outside at start)."""
    return [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={profile}"]


def render(page: Path, workdir: Path, *, budget_ms: int = 5000) -> Rendered:
    """Load ``page`` in headless Chromium; its DOM once loaded, and its requests."""
    netlog = workdir / f"{page.stem}.netlog.json"
    done = subprocess.run(
        [*headless(workdir / "chromium-profile"), f"--log-net-log={netlog}",
         f"--virtual-time-budget={budget_ms}", "--dump-dom", page.resolve().as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return Rendered(done.stdout, page_requests(netlog))


def page_requests(netlog: Path) -> list[str]:
    """URLs of the requests a page initiated, read from a Chromium net log."""
    events = json.loads(netlog.read_text())["events"]
    urls: dict[int, str] = {}
    page_sources: set[int] = set()
    for event in events:
        params = event.get("params") or {}
        source = event["source"]["id"]
        if "url" in params:
            urls.setdefault(source, params["url"])
        if "initiator" in params and params["initiator"] != BROWSER_INITIATED:
            page_sources.add(source)
    return sorted(urls[s] for s in page_sources if s in urls)
