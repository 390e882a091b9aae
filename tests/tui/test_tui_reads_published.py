"""The UI reads what a live source published: no thread per tick, nothing evaluated.

Pilot-driven (the real app), on the fixture source that evaluates on a thread
of its own the way ``LiveSource`` does.
"""

from __future__ import annotations

import threading

from support.tui_pilot import make_app, settle, wait_for
from support.tui_session import live_source


async def test_ticks_start_no_threads_and_show_the_published_conclusion() -> None:
    source = live_source()
    app = make_app(source, refresh_s=0.25)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        before = {t.ident for t in threading.enumerate()}
        for _ in range(4):  # a second of ticks
            drawn = app.view
            await wait_for(pilot, lambda drawn=drawn: app.view is not drawn)
        started = [t.name for t in threading.enumerate() if t.ident not in before]
        assert started == [], started
        # What the source published, not a value of its own (the source's loop swaps
        # in a new Conclusion around each evaluation, so compare what it carries).
        assert app.conclusion.diagnosis is source.latest().diagnosis
        assert source.max_active == 1  # the source's own loop, never the UI
    source.close()


async def test_a_failed_evaluation_is_said_once_and_the_last_diagnosis_stays() -> None:
    source = live_source()
    app = make_app(source, refresh_s=0.25)
    async with app.run_test(size=(100, 30), notifications=True) as pilot:
        await settle(pilot)
        shown = app.diagnosis

        def broken(now: float) -> None:
            raise RuntimeError("rule file vanished")

        source.evaluate = broken  # type: ignore[method-assign,assignment]
        await wait_for(pilot, lambda: app._last_error is not None)
        await pilot.pause(0.6)  # more ticks, the same error
        notes = [n.message for n in app._notifications if "rule file vanished" in n.message]
        assert notes == ["rules failed: RuntimeError: rule file vanished"]
        assert app.diagnosis is shown
    source.close()
