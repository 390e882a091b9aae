"""What every command shares: the one expected-failure type and the exit codes.

A leaf module: the commands, the headless helpers and the rooms below them raise
``CliError`` and return these codes; only the dispatcher (:mod:`aitop.engine.cli`)
turns an error into the one line a user reads. Nothing here imports aitop.
"""

from __future__ import annotations

import signal

EXIT_OK = 0
#: The command could not do what was asked (attach failed, a file is unreadable).
EXIT_FAILED = 1
#: The command line or an input file is wrong: fixing it is the user's move.
EXIT_USAGE = 2
#: A gate tripped (``--fail-on``, ``aitop diff --fail-if-slower``).
EXIT_GATE = 3
#: Stopped by Ctrl-C, the shell's convention (128 + SIGINT).
EXIT_INTERRUPTED = 128 + signal.SIGINT

#: Signals that stop aitop the way Ctrl-C does (a closed terminal, `kill`).
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class CliError(Exception):
    """An expected failure: printed as one line, exit status ``code``."""

    def __init__(self, message: str, code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.code = code
