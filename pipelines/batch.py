"""Running specs for the command line and schedulers: one spec, or a batch under one lock, each ending
in an :class:`Outcome` (status and exit code) instead of an exception."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dcaudit.catalog import file_lock
from dcaudit.config import Settings
from dcaudit.errors import (
    DcauditError,
    MissingSourceError,
    RunInterrupted,
    RunLockedError,
    WorkspaceError,
    one_line,
)

if TYPE_CHECKING:
    from dcaudit.api import Result


@dataclass(frozen=True)
class Outcome:
    """What happened to one spec: succeeded | reused | failed | invalid | locked | skipped."""

    spec: str
    status: str
    exit_code: int
    run_id: str | None = None
    package_dir: str | None = None
    reused_from: str | None = None
    seconds: float | None = None
    error: str | None = None
    notes: tuple[str, ...] = ()
    result: Result | None = field(default=None, repr=False, compare=False)

    def as_dict(self) -> dict[str, Any]:
        summary = self.result.summary_rows() if self.result is not None else []
        return {"spec": self.spec, "status": self.status, "exit_code": self.exit_code, "run_id": self.run_id,
                "package_dir": self.package_dir, "reused_from": self.reused_from, "seconds": self.seconds,
                "error": self.error, "summary": summary, "notes": list(self.notes)}


def run_one(settings: Settings, name: str, *, force: bool = False, quiet: bool = False,
            engine: str = "duckdb", report: bool = True) -> Outcome:
    """Run one spec through the API; never raises: the outcome says what happened and its exit code."""
    from dcaudit import api

    try:
        result = api.run(name, force=force, settings=settings, quiet=quiet, engine=engine, report=report)
    except RunLockedError as exc:
        return Outcome(name, "locked", exc.exit_code, error=str(exc))
    except MissingSourceError as exc:
        return Outcome(name, "skipped", exc.exit_code, error=str(exc))
    except WorkspaceError as exc:  # the workspace could not be written: the run failed (exit 1), not bad input
        return Outcome(name, "failed", exc.exit_code, error=str(exc))
    except RunInterrupted:
        raise  # SIGTERM / SIGINT: the run is already recorded failed; the CLI exits 128 + signal
    except DcauditError as exc:
        return Outcome(name, "invalid", exc.exit_code, error=str(exc))
    except Exception as exc:  # a bug or an environment failure: the run is marked failed in the catalog
        if os.environ.get("DCAUDIT_DEBUG"):  # as for every other command: a traceback only when asked for
            traceback.print_exc(file=sys.stderr)
        return Outcome(name, "failed", 1, error=f"{type(exc).__name__}: {one_line(exc)} (internal error; "
                                                "DCAUDIT_DEBUG=1 shows the traceback)")
    seconds = result.manifest.get("seconds") if result.reused_from is None else None
    return Outcome(name, "reused" if result.reused_from else "succeeded", 0, result.run_id,
                   str(result.package_dir), result.reused_from,
                   round(float(seconds), 3) if seconds is not None else 0.0, None, result.notes, result)


def run_batch(settings: Settings, names: Sequence[str], *, force: bool = False, quiet: bool = False,
              each: Callable[[Outcome], None] | None = None, engine: str = "duckdb",
              report: bool = True) -> list[Outcome]:
    """Every spec in turn under the batch lock (a failing one does not stop the others)."""
    from dcaudit.pipelines.runner import workspace_error

    outcomes: list[Outcome] = []
    try:
        with file_lock(settings.home / "locks" / "batch.lock", wait=0.0, what="a batch of runs (dcaudit run --all)"):
            for name in names:
                outcome = run_one(settings, name, force=force, quiet=quiet, engine=engine, report=report)
                if each is not None:
                    each(outcome)
                outcomes.append(outcome)
    except OSError as exc:  # the batch lock cannot be taken: a read-only or full workspace, said as for one run
        err = workspace_error(exc, settings, "the batch did not start")
        if err is None or outcomes:
            raise
        raise err from None
    return outcomes


def batch_exit_code(outcomes: Sequence[Outcome]) -> int:
    """The most serious status wins: 1 (failed), then 2 (bad input), then 75 (locked); skipped never fails."""
    codes = [o.exit_code for o in outcomes if o.status != "skipped"]
    for code in (1, 2, 75):
        if code in codes:
            return code
    return 0
