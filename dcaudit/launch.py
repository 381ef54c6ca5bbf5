"""The ``dcaudit`` console script.

It imports the command line (click, the commands, the core) itself, so that an interrupt (Ctrl-C, SIGINT)
while those modules load ends as an interrupt during a command does — the line ``interrupted`` and exit
status 130 — rather than with a traceback out of the import machinery. Everything else is
:func:`dcaudit.cli.main`.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import NoReturn


def interrupted() -> NoReturn:
    """End the process as an interrupted command: one line on stderr, status 130 (128 + SIGINT)."""
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write("interrupted\n")
        sys.stderr.flush()
    os._exit(130)


def main() -> None:
    try:
        from dcaudit.cli import main as cli_main
    except KeyboardInterrupt:
        interrupted()
    cli_main()
