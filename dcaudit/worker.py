"""Work handed to a second process, for libraries that keep the GIL (RDKit parsing and drawing).

A :class:`ScriptWorker` runs a module of this project (``python -P -m MODULE``) in a plain child process:
the items go to it as a JSON list in a temporary file, and its results come back as a JSON list on stdout,
one per item. ``-P`` keeps the working directory off ``sys.path``, so a user's file named like a standard
module cannot shadow it. Nothing is pickled and the caller's ``__main__`` is never imported again, so it
works from the CLI, a notebook or a test. The module must import little (the work's own library): starting
Python and it is the whole overhead. The answer is checked (one result per item). A worker that cannot
start, fails, times out or answers anything else gives None, and the caller does the work itself, so
results never depend on whether the second process helped.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

TIMEOUT = 1800.0  # seconds a worker may take; then it is killed and the caller does the work


def has_spare_core() -> bool:
    return (os.cpu_count() or 1) >= 2


class ScriptWorker:
    """``python -P -m MODULE ITEMS.json`` started now; :meth:`results` waits for its answer."""

    def __init__(self, module: str, items: Sequence[object]) -> None:
        self.n = len(items)
        self._dir: str | None = None
        self._child: subprocess.Popen[str] | None = None
        try:  # a full or read-only temp directory, a missing interpreter: no worker, the caller does the work
            self._dir = tempfile.mkdtemp(prefix="dcaudit-worker-")
            path = Path(self._dir) / "items.json"
            path.write_text(json.dumps(list(items)), encoding="utf-8")
            self._child = subprocess.Popen([sys.executable, "-P", "-m", module, str(path)], stdin=subprocess.DEVNULL,
                                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except (OSError, ValueError, TypeError):
            self._cleanup()

    def results(self) -> list | None:
        """The worker's results in item order, or None (then do the work here)."""
        child, self._child = self._child, None
        if child is None:
            return None
        try:
            out, _ = child.communicate(timeout=TIMEOUT)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            child.kill()
            child.wait()
            return None
        finally:
            self._cleanup()
        try:
            rows = json.loads(out) if child.returncode == 0 else None
        except ValueError:
            return None
        return rows if isinstance(rows, list) and len(rows) == self.n else None

    def __del__(self) -> None:  # a caller that never asked for the results (an error in between)
        child, self._child = getattr(self, "_child", None), None
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()
        self._cleanup()

    def _cleanup(self) -> None:
        if getattr(self, "_dir", None) is not None:
            shutil.rmtree(str(self._dir), ignore_errors=True)
            self._dir = None


def script_items() -> list:
    """In a worker script: the items its caller handed over (``sys.argv[1]``)."""
    items = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    return items if isinstance(items, list) else []


def answer(results: Sequence[object]) -> None:
    """In a worker script: hand the results back."""
    json.dump(list(results), sys.stdout)
