"""The terminal driver: a lone Escape is answered when its wait is due, not at the next
100-ms poll of the terminal (docs/benchmarks.md, First frame and keys in a real terminal).

Against Textual's own parser: if a Textual release stops keeping the deadline the
driver reads, these fail (and the driver falls back to Textual's own thread).
"""

from __future__ import annotations

import time

import pytest
from aitop.engine.live.source import ReplaySource
from aitop.probes.session import Session
from aitop.tui import driver
from aitop.tui.app import AitopApp
from support.knowledge import PACKAGED
from textual import constants, events
from textual._xterm_parser import XTermParser


def test_an_idle_terminal_is_polled_as_textual_polls_it() -> None:
    assert driver.poll_s(XTermParser()) == driver.IDLE_POLL_S


def test_a_lone_escape_is_waited_for_only_until_it_is_due(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.setattr(constants, "ESCAPE_DELAY", driver.ESC_DELAY_S)
    parser = XTermParser()
    assert list(parser.feed("\x1b")) == []  # the start of a sequence, perhaps
    wait = driver.poll_s(parser)
    assert 0.0 <= wait <= driver.ESC_DELAY_S < driver.IDLE_POLL_S
    time.sleep(wait + 0.005)
    keys = [e for e in parser.tick() if isinstance(e, events.Key)]
    assert [k.key for k in keys] == ["escape"]
    assert driver.poll_s(parser) == driver.IDLE_POLL_S


def test_escdelay_set_by_the_user_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(constants, "ESCAPE_DELAY", 0.1)
    driver.use_escape_delay({"ESCDELAY": "100"})
    assert constants.ESCAPE_DELAY == 0.1
    driver.use_escape_delay({})
    assert constants.ESCAPE_DELAY == driver.ESC_DELAY_S


def test_the_app_runs_on_it_in_a_terminal() -> None:
    source = ReplaySource(Session(1), [], knowledge=PACKAGED)
    assert AitopApp(source).driver_class is driver.Driver
