"""What each probe is doing now, as a typed state with a reason.

A probe's status used to be prose that the UI classified by its first word, so
"unknown: no integer step counter" read as healthy. The state is now data: the
UI and the reports decide colour and wording from ``state``, and ``detail`` is
the human reason (never parsed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: ``ok``: sampling; ``starting``: not answered yet; ``partial``: running but a
#: value it should give is unknown (no step counter); ``error``: failed, retrying
#: with back-off; ``unavailable``: cannot run here (no GPU, no py-spy, ptrace
#: denied); ``off``: not configured.
ProbeState = Literal["ok", "starting", "partial", "error", "unavailable", "off"]
PROBE_STATES: tuple[ProbeState, ...] = ("ok", "starting", "partial", "error", "unavailable", "off")


@dataclass(frozen=True, slots=True)
class ProbeStatus:
    """One probe's state and the reason, as a person reads it."""

    state: ProbeState
    detail: str = ""

    @property
    def text(self) -> str:
        """``every 1 s`` when all is well, else ``unavailable: no NVIDIA driver``."""
        if self.state == "ok":
            return self.detail or "ok"
        return f"{self.state}: {self.detail}" if self.detail else self.state

    @property
    def healthy(self) -> bool:
        return self.state == "ok"

    @classmethod
    def parse(cls, text: str) -> ProbeStatus:
        """The status from its ``text`` (reads snapshots written before states were typed)."""
        head, _sep, rest = text.partition(":")
        word = head.strip().lower()
        for state in PROBE_STATES:
            if word == state:
                return cls(state, rest.strip())
        if word == "unknown":
            return cls("partial", rest.strip())
        return cls("ok", text)
