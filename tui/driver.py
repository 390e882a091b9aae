"""The terminal driver: Textual's own, with a lone Escape answered when it is due.

A terminal sends the Escape key as the byte that also starts every escape
sequence (arrows, function keys), so Textual waits ``ESCAPE_DELAY`` for the rest
of a sequence before it calls the byte Escape. Its input thread, though, looks
whether that wait is over only when its poll of the terminal comes back empty,
every 100 ms: Escape, the key that leaves every detail screen, was answered 100
to 200 ms after it was pressed (docs/benchmarks.md, First frame and keys in a
real terminal). This driver's input thread polls only until the wait is due,
and the wait is ``ESC_DELAY_S`` unless ``ESCDELAY`` (ncurses' variable, which
Textual reads too) says otherwise. Everything else is Textual's: where its
parser does not keep the deadline this reads, the thread is Textual's own.
"""

from __future__ import annotations

import os
import selectors
from codecs import getincrementaldecoder

from textual import constants
from textual._loop import loop_last
from textual._parser import ParseError
from textual._time import get_time
from textual._xterm_parser import XTermParser
from textual.drivers.linux_driver import LinuxDriver

#: How long a lone Escape byte waits for the rest of a sequence (ncurses' usual
#: ``ESCDELAY=25``): the bytes of one key arrive together, even over ssh.
ESC_DELAY_S = 0.025
#: Textual's own poll of an idle terminal.
IDLE_POLL_S = 0.1


def use_escape_delay(environ: dict[str, str] | os._Environ[str] = os.environ) -> None:
    """Textual's wait for the rest of an escape sequence: ``ESCDELAY`` if set, else ours."""
    if "ESCDELAY" not in environ:
        constants.ESCAPE_DELAY = ESC_DELAY_S  # type: ignore[misc]  # read at each Escape


def poll_s(parser: object) -> float:
    """How long the input thread may wait for the terminal: until the parser's
    pending Escape is due, else Textual's idle poll."""
    due = getattr(parser, "_timeout_time", None)
    if not isinstance(due, float):
        return IDLE_POLL_S
    return min(IDLE_POLL_S, max(0.0, due - get_time()))


class Driver(LinuxDriver):
    """Textual's Linux driver; its input thread as Textual's, the wait as above."""

    def run_input_thread(self) -> None:
        parser = XTermParser(self._debug)
        if not hasattr(parser, "_timeout_time"):  # another Textual: its own thread
            super().run_input_thread()
            return
        use_escape_delay()
        selector = selectors.SelectSelector()
        selector.register(self.fileno, selectors.EVENT_READ)
        fileno = self.fileno
        feed, tick = parser.feed, parser.tick
        decode = getincrementaldecoder("utf-8")().decode

        def process(events: list[tuple[selectors.SelectorKey, int]], final: bool = False) -> None:
            for last, (_key, mask) in loop_last(events):
                if mask & selectors.EVENT_READ:
                    text = decode(os.read(fileno, 1024 * 4), final=final and last)
                    if not text:
                        break
                    for message in feed(text):
                        self.process_message(message)
            for message in tick():
                self.process_message(message)

        try:
            while not self.exit_event.is_set():
                process(selector.select(poll_s(parser)))
            selector.unregister(self.fileno)
            process(selector.select(IDLE_POLL_S), final=True)
        finally:
            selector.close()
            try:
                for _message in feed(""):
                    pass
            except (EOFError, ParseError):
                pass
