"""Errors a user can act on. Each names what is wrong and, where there is one, the file, row and column."""

from __future__ import annotations

from types import ModuleType


def one_line(exc: BaseException, limit: int = 300) -> str:
    """An exception's message in one line (its first), or its type's name when it has none: what a
    message quotes from a library (DuckDB, pyarrow, polars) or an internal error."""
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:limit]


class DcauditError(Exception):
    """Base class: the CLI prints these without a traceback and exits with ``exit_code``."""

    exit_code = 2


class InputError(DcauditError):
    """Bad input data: names the file and, where known, the row (1-based data row) and column."""

    def __init__(self, message: str, *, file: str | None = None, row: int | None = None,
                 column: str | None = None) -> None:
        self.file, self.row, self.column = file, row, column
        where = ", ".join(
            part for part in (
                f"file {file}" if file else "",
                f"row {row}" if row is not None else "",
                f"column {column!r}" if column else "",
            ) if part
        )
        super().__init__(f"{message} ({where})" if where else message)


class ClaimError(DcauditError):
    """A claim expression that does not parse or names unknown columns."""


class SpecError(DcauditError):
    """A pipeline spec or CLI option that does not validate."""


class IntegrityError(DcauditError):
    """Downloaded or mirrored data whose hash or content fingerprint does not match."""


class MissingSourceError(DcauditError):
    """A source file is not available offline and cannot be downloaded here."""


class MissingExtraError(DcauditError):
    """An optional dependency group is not installed."""

    def __init__(self, extra: str, module: str) -> None:
        super().__init__(
            f"this needs the optional dependency {module!r}; install it with "
            f"`pip install 'dcaudit[{extra}]'` (or `make install`, which installs every extra)"
        )


class RunLockedError(DcauditError):
    """Another run holds the workspace lock."""

    exit_code = 75  # EX_TEMPFAIL: a scheduler may retry later


class WorkspaceError(DcauditError):
    """The workspace cannot be written (read-only DCAUDIT_HOME, disk full, no permission)."""

    exit_code = 1  # the run could not be carried out (recorded as failed where the disk still allowed it)


class ResourceError(WorkspaceError):
    """The run needed more than this machine allows: DuckDB's memory limit, or the disk its spill files go to."""


class RunInterrupted(KeyboardInterrupt):  # noqa: N818 - a KeyboardInterrupt, so no `except Exception` swallows it
    """SIGTERM/SIGINT during a run: the run is already recorded as failed when this is raised."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message)
        self.signum = signum
        self.exit_code = 128 + signum


def require(module: str, extra: str) -> ModuleType:
    """Import an optional module or say which extra provides it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingExtraError(extra, module) from exc
