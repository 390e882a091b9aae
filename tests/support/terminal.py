"""Commands for a real terminal (tmux) that see the pane's own size.

A tmux server started from a pytest worker hands its panes COLUMNS=80 and
LINES=24 (checked: a pane created at 160x60 from a test read
``shutil.get_terminal_size()`` as 80x24), and Textual sizes its screen from
them before asking the terminal. Dropping them lets the app see the pane.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence


def pane_command(argv: Sequence[str]) -> str:
    """``argv`` as a shell command that sizes itself from the pane, not the environment."""
    return shlex.join(["env", "-u", "COLUMNS", "-u", "LINES", *argv])
