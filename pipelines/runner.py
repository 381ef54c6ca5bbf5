"""The runner: source -> DuckDB views -> stages -> evidence package -> run record -> catalog.

Every run is recorded in its run record (``$DCAUDIT_HOME/records/<run_id>.json``: ``running`` first, then
``succeeded`` or ``failed``), holds a per-spec lock so two scheduled runs of one spec never write at once,
and writes its package atomically (report.html included), so a failed or interrupted run leaves earlier
packages intact. catalog.duckdb is derived from the records and refreshed afterwards (never locked by a
run; a refresh that fails is a note). SIGTERM/SIGINT mark the run failed at once.

With ``reuse=True`` (``dcaudit run`` without ``--force``) an unchanged rerun — same spec, same input
sha256s, same package version and source code (:func:`code_hash`) — records a ``reused`` row pointing
at the earlier package instead of recomputing it.

Stages: the fiber audit always runs; a spec's optional sections (``[replay]``, ``[completion]``,
``[sensitivity]``, ``[choice]``, …) each name a stage in :data:`dcaudit.pipelines.stages.STAGES`, validated
before the source is prepared and imported lazily.
A stage is ``fn(ctx: StageContext) -> dict[table name, list of Arrow tables]``.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import glob
import hashlib
import json
import secrets
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeAlias

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

import dcaudit
from dcaudit import defaults, findings
from dcaudit.audits.fibers import AuditLabels, FiberAudit, audit_fibers
from dcaudit.catalog import Catalog, file_lock
from dcaudit.config import Settings
from dcaudit.connectors import get_connector
from dcaudit.connectors.base import PreparedSource, parse_options
from dcaudit.engine import ENGINES, Engine, audit_database, machine_limit
from dcaudit.errors import (
    ClaimError,
    DcauditError,
    InputError,
    MissingSourceError,
    ResourceError,
    RunInterrupted,
    RunLockedError,
    SpecError,
    WorkspaceError,
)
from dcaudit.inputs import (
    CSV_SUFFIXES,
    PARQUET_SUFFIXES,
    ROW,
    RegisteredInput,
    absent_columns,
    as_arrow,
    check_ids,
    column_types,
    first_non_number,
    first_value,
    id_spellings,
    input_digests,
    is_glob,
    label_of,
    line_breaks,
    not_a_number_hint,
    numbers_and_text,
    refused_column_error,
    register_input,
    require_id_column,
)
from dcaudit.pipelines.stages import STAGES, validate_spec
from dcaudit.reports.console import console
from dcaudit.source_query import LABEL, SourceQuery, query_table
from dcaudit.spec import SOURCE_KEYS, AuditTask, PipelineSpec, check_implied_per
from dcaudit.storage import PackageWriter, RowSink, TableStream, concat, read_table, verify_package

# Candidates from which the table is written while the sections run: below, writing it takes a few ms, less
# than the writer thread costs (its start, and pyarrow's Python around a small table competing for the GIL)
EARLY_WRITE_ROWS = 100_000
# A package table handed on as soon as it is final: (name, table)
TableSink: TypeAlias = Callable[[str, pa.Table], None]
# A package table written part by part while it is computed: name -> the stream its parts go to
TableStreams: TypeAlias = Callable[[str], TableStream]
# A run's work: given the package writer (for tables final before the rest), its tables and extra manifest fields
Compute: TypeAlias = Callable[[PackageWriter], tuple[dict[str, pa.Table], dict[str, Any]]]


@dataclass
class StageContext:
    spec: PipelineSpec
    settings: Settings
    con: duckdb.DuckDBPyConnection
    source: str
    tables: dict[str, str]              # connector table name -> DuckDB view name
    columns: dict[str, list[str]]       # view name -> its columns
    engine: Engine                      # the candidate passes of fiber audits and replays (DuckDB on con, Spark)
    audits: dict[str, FiberAudit] = field(default_factory=dict)  # audit_id -> result of the fiber stage
    notes: list[str] = field(default_factory=list)
    findings: list[pa.Table] = field(default_factory=list)   # rows of findings.parquet (duplicate ids, …)
    checked_ids: set[tuple[str, str]] = field(default_factory=set)  # (view, id column) the contract checked
    checked_text: set[tuple[str, str]] = field(default_factory=set)  # (view, evidence column) checked for text
    empty_tables: frozenset[str] = frozenset()  # the source's tables that hold no rows (not registered)
    globs: frozenset[str] = frozenset()  # the views read from a Parquet glob (check_absent_columns)

    def view_for(self, table: str | None) -> str:
        if table in self.empty_tables:
            raise InputError(f"table {table!r} of source {self.source!r} has no rows, so nothing can be audited "
                             "in it (the connector's findings say why)")
        if table is None:
            return next(iter(self.tables.values()))
        if table not in self.tables:
            raise SpecError(f"table = {table!r}: source {self.source!r} has no such table; it has "
                            f"{', '.join(sorted(self.tables))}")
        return self.tables[table]


@dataclass(frozen=True)
class RunResult:
    run_id: str
    run_dir: Path
    tables: dict[str, pa.Table]
    seconds: float
    notes: tuple[str, ...] = ()
    reused_from: str | None = None   # set when an unchanged rerun reused this earlier run's package


def new_run_id(name: str) -> str:
    return f"{name}-{datetime.now(UTC):%Y%m%dT%H%M%S}-{secrets.token_hex(3)}"


def git_sha() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(dcaudit.__file__).parent,
                             capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


@functools.cache
def code_hash() -> str:
    """sha256 over the installed package's source files (.py, .toml): the code part of the cache key.

    A git sha misses uncommitted edits and changes on commits that touch only documentation; the
    content of the code itself does neither."""
    import dcaudit.audits
    import dcaudit.connectors
    import dcaudit.features
    import dcaudit.pipelines
    import dcaudit.reports

    h = hashlib.sha256()
    for module in (dcaudit, dcaudit.audits, dcaudit.connectors, dcaudit.features, dcaudit.pipelines,
                   dcaudit.reports):
        root = Path(module.__file__).parent  # type: ignore[arg-type]  # a package always has a __file__
        for path in sorted(p for p in root.iterdir() if p.suffix in {".py", ".toml"}):
            h.update(f"{module.__name__}/{path.name}\0".encode())
            h.update(path.read_bytes())
    return h.hexdigest()


def cache_key(spec_hash: str, inputs: Mapping[str, str], version: str, code: str, engine: str = "duckdb") -> str:
    payload = {"spec": spec_hash, "inputs": dict(sorted(inputs.items())), "version": version, "code": code}
    if engine != "duckdb":  # another engine's run is its own result (DuckDB keys stay as they were)
        payload["engine"] = engine
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


@contextlib.contextmanager
def stage_progress(name: str, timings: dict[str, float], *, quiet: bool = False) -> Iterator[None]:
    """A spinner while a stage runs (terminals only) and one line with its time when it ends."""
    started = time.monotonic()
    status = console.status(f"stage {name} …") if not quiet and console.is_terminal else contextlib.nullcontext()
    with status:
        yield
    timings[name] = round(time.monotonic() - started, 3)
    if not quiet:
        console.print(f"[dim]  stage {name:<12s} {timings[name]:8.2f} s[/dim]")


def _write_report(partial: Path) -> None:
    """report.html inside the package before it appears; a report bug never costs a run its results."""
    try:
        from dcaudit.reports.html import write_report

        write_report(partial)
    except Exception as exc:  # noqa: BLE001 - reported, and `dcaudit report RUN_ID` can re-render it
        console.print(f"[yellow]report.html was not written ({type(exc).__name__}: {exc}); "
                      "`dcaudit report RUN_ID` retries[/yellow]")


def _load_tables(run_dir: Path) -> dict[str, pa.Table]:
    return {p.stem: read_table(p) for p in sorted(Path(run_dir).glob("*.parquet"))}


@contextlib.contextmanager
def _spec_lock(lock: Path, name: str) -> Iterator[None]:
    """The spec's run lock, taken without waiting: a scheduler retries on exit status 75."""
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(file_lock(lock, wait=0.0, what=f"spec {name!r}"))
        except RunLockedError:
            hint = ("; frames recorded at once need a name each (dcaudit.audit(..., name=\"...\"))"
                    if name == defaults.FRAME_SPEC else "")
            raise RunLockedError(f"another run of {name!r} is in progress (lock {lock}); try again later{hint}") from None
        yield  # a RunLockedError from the run itself keeps its own message


_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)
_NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)


def workspace_error(exc: BaseException, settings: Settings, what: str) -> WorkspaceError | None:
    """A full disk or a read-only workspace as one line (None for any other error)."""
    if not isinstance(exc, OSError) or exc.errno not in (*_NO_SPACE, *_NOT_WRITABLE):
        return None
    where = f" ({exc.filename})" if exc.filename else ""
    home = str(settings.home.absolute()).rstrip("/") + "/"
    if exc.filename and not str(Path(str(exc.filename)).absolute()).startswith(home):   # e.g. an --out elsewhere
        return WorkspaceError(f"cannot write {exc.filename} ({exc.strerror}): {what}")
    if exc.errno in _NO_SPACE:
        return WorkspaceError(f"no space left on the device of DCAUDIT_HOME {settings.home}{where}: {what}; "
                              "earlier packages are intact — free some space and run again")
    return WorkspaceError(f"DCAUDIT_HOME {settings.home} is not writable ({exc.strerror}{where}): {what}; "
                          "reading results (runs, query, report --out elsewhere) still works")


def resource_error(exc: BaseException, settings: Settings, what: str) -> ResourceError | None:
    """DuckDB out of memory, or its spill disk full, as one line (None for any other error)."""
    if not machine_limit(exc):
        return None
    if isinstance(exc, duckdb.OutOfMemoryException):
        return ResourceError(f"DuckDB ran out of memory within its memory limit {settings.memory_limit} (--memory-limit, "
                             f"DCAUDIT_MEMORY_LIMIT or Settings(memory_limit=...)): {what}; raise the limit, or give fewer --threads (each "
                             f"thread holds its own buffers) — beyond the limit DuckDB spills to {settings.temp_dir}")
    return ResourceError(f"the disk of DuckDB's spill directory {settings.temp_dir} is full: {what}; free some space "
                         "or raise --memory-limit so that less is spilled")


class _Signals:
    """SIGTERM/SIGINT during a run: the run is recorded as failed at once, then RunInterrupted unwinds it
    (the partial package is removed on the way). Only the main thread can take signals; elsewhere a no-op."""

    signum: int | None
    _old: dict[int, Any]   # signal -> the handler it had before

    def __init__(self, on_signal: Callable[[int, str], None]) -> None:
        self.on_signal, self.signum, self._old = on_signal, None, {}

    def __enter__(self) -> _Signals:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: object) -> None:
        if self.signum is None:
            self.signum = signum
            with contextlib.suppress(Exception):
                self.on_signal(signum, self.message)
        raise RunInterrupted(self.message, signum)

    @property
    def message(self) -> str:
        return f"interrupted by {signal.Signals(self.signum).name}" if self.signum else "interrupted"

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old = {}


def execute_run(
    settings: Settings,
    *,
    name: str,
    spec_payload: Mapping[str, Any],
    spec_hash: str,
    inputs: Mapping[str, str] | Callable[[], Mapping[str, str]],
    compute: Compute,
    out_dir: Path | None = None,
    replace_existing: bool = False,
    reuse: bool = False,
    quiet: bool = False,
    report: bool = True,
    engine: str = "duckdb",
) -> RunResult:
    """Record, compute and write one run. ``compute(write_early)`` returns (tables, extra manifest fields); it
    may hand a package table that is final before the rest to ``write_early(name, table)``, which writes it
    while the run goes on (:class:`dcaudit.storage.PackageWriter`).

    ``report=False`` leaves report.html out of the package (its charts are most of a small audit's time);
    ``dcaudit report RUN`` renders it later from the package.

    ``inputs`` (input name -> sha256) may be a callable that prepares the source: it then runs under the
    spec lock (two runs never normalise the same source at once) and a failure there (a tampered mirror
    file, a missing source) is recorded too, as ``failed`` or ``skipped``.

    ``reuse``: when a succeeded run with the same cache key has an intact package, record a ``reused``
    run pointing at it and return its tables instead of computing (never for ``out_dir`` packages).

    The run's record (``$DCAUDIT_HOME/records/<run_id>.json``) is the registry; catalog.duckdb is
    refreshed afterwards and a refresh that fails only adds a note. A full disk or a read-only workspace
    raises WorkspaceError (one line); SIGTERM/SIGINT record the run as failed at once and raise
    RunInterrupted."""
    catalog = Catalog(settings)
    run_id = new_run_id(name)
    run_dir = Path(out_dir) if out_dir else settings.runs_dir / run_id
    lock = settings.home / "locks" / f"{name}.lock"
    phase = {"now": "locking"}
    try:
        with _spec_lock(lock, name):
            return _locked_run(settings, catalog, run_id, run_dir, phase, name=name, spec_payload=spec_payload,
                               spec_hash=spec_hash, inputs=inputs, compute=compute, out_dir=out_dir,
                               replace_existing=replace_existing, reuse=reuse, quiet=quiet, report=report,
                               engine=engine)
    except (OSError, duckdb.Error) as exc:  # a connector's normalisation runs DuckDB too
        what = {"locking": "the run did not start", "preparing": "the run did not start",
                "running": f"run {run_id} failed and is recorded as failed"}.get(phase["now"], f"run {run_id}")
        if phase.get("unrecorded"):
            what = f"run {run_id} failed; its record could not be updated (the next run of {name!r} marks it failed)"
        err = workspace_error(exc, settings, what) or resource_error(exc, settings, what)
        if err is None:
            raise
        raise err from exc


def _locked_run(settings: Settings, catalog: Catalog, run_id: str, run_dir: Path, phase: dict, *, name: str,
                spec_payload: Mapping[str, Any], spec_hash: str,
                inputs: Mapping[str, str] | Callable[[], Mapping[str, str]],
                compute: Compute, out_dir: Path | None,
                replace_existing: bool, reuse: bool, quiet: bool, report: bool = True,
                engine: str = "duckdb") -> RunResult:
    started = time.monotonic()
    stale = catalog.mark_stale_runs_failed(name)
    for stale_id in stale:  # what a killed run left half-written (never visible to the catalog views)
        for leftover in (settings.runs_dir / ".partial").glob(f"{glob.escape(stale_id)}.*.tmp"):
            shutil.rmtree(leftover, ignore_errors=True)   # storage.staging_dir's name for it
    if stale and not quiet:
        console.print(f"[yellow]{len(stale)} earlier run(s) of {name!r} were interrupted; marked failed[/yellow]")
    sha, code = git_sha(), code_hash()

    def fail(status: str, error: str) -> None:
        """Record the failure; a full disk may refuse even that (the next run marks it failed)."""
        try:
            if phase["now"] == "running":
                catalog.finish_run(run_id, status=status, seconds=time.monotonic() - started, error=error,
                                   refresh=False)
            else:
                catalog.record_failure(run_id, spec=name, spec_hash=spec_hash, run_dir=run_dir, status=status,
                                       error=error, seconds=time.monotonic() - started,
                                       package_version=dcaudit.__version__, git_sha=sha, code_hash=code)
        except OSError:
            phase["unrecorded"] = True

    def on_signal(signum: int, message: str) -> None:
        if phase["now"] == "done":   # the run already has its final record
            return
        fail("failed", message)
        console.print(f"[red]run {run_id} of {name!r} {message}; recorded as failed[/red]")

    with _Signals(on_signal) as signals:
        phase["now"] = "preparing"
        try:
            inputs = dict(inputs() if callable(inputs) else inputs)
        except BaseException as exc:
            if signals.signum is None:
                fail("skipped" if isinstance(exc, MissingSourceError) else "failed", f"{type(exc).__name__}: {exc}")
                _refresh_quietly(catalog, run_id, show=True)
                raise
            _refresh_quietly(catalog, run_id, show=True)
            raise RunInterrupted(signals.message, signals.signum) from exc
        key = cache_key(spec_hash, inputs, dcaudit.__version__, code, engine)
        earlier = catalog.find_reusable(key, name) if reuse and out_dir is None else None
        if earlier is not None and report and not (earlier.run_dir / "report.html").is_file():
            earlier = None  # made with --no-report: a run that asks for the report computes it afresh
        if earlier is not None:
            damaged = verify_package(earlier.run_dir)
            if not damaged:
                seconds = time.monotonic() - started
                catalog.record_reuse(run_id, spec=name, earlier=earlier, cache_key=key, seconds=seconds)
                phase["now"] = "done"
                note = (f"{name}: unchanged since run {earlier.run_id} (same spec, inputs and code); "
                        "reused its results (--force recomputes)")
                notes = (note, *_refresh_quietly(catalog, run_id, show=quiet))
                return RunResult(run_id, earlier.run_dir, _load_tables(earlier.run_dir), seconds, notes,
                                 reused_from=earlier.run_id)
            if not quiet:
                console.print(f"[yellow]run {earlier.run_id} matches but its package is damaged "
                              f"({damaged[0]}); recomputing[/yellow]")
        catalog.start_run(run_id, spec=name, spec_hash=spec_hash, input_hashes=inputs,
                          package_version=dcaudit.__version__, git_sha=sha, run_dir=run_dir,
                          cache_key=key, code_hash=code)
        phase["now"] = "running"
        try:
            with PackageWriter(run_dir, run_id, replace_existing=replace_existing) as writer:
                tables, extra = compute(writer)
                manifest = {"spec": name, "spec_hash": spec_hash, "resolved_spec": dict(spec_payload),
                            "inputs": dict(inputs), "package_version": dcaudit.__version__, "git_sha": sha,
                            "code_hash": code, "cache_key": key,
                            "started_at": datetime.now(UTC).isoformat(timespec="seconds"), **extra}
                manifest["seconds"] = round(time.monotonic() - started, 3)
                writer.commit(tables, manifest, finalize=_write_report if report else None)
        except BaseException as exc:  # KeyboardInterrupt too: the run is marked failed, then re-raised
            if signals.signum is None:
                fail("failed", f"{type(exc).__name__}: {exc}")
            else:
                fail("failed", signals.message)   # e.g. DuckDB reports the interrupt as "Query interrupted"
            _refresh_quietly(catalog, run_id, show=True)
            if signals.signum is not None and not isinstance(exc, RunInterrupted):
                raise RunInterrupted(signals.message, signals.signum) from exc
            raise
        seconds = time.monotonic() - started
        catalog.finish_run(run_id, status="succeeded", seconds=seconds, refresh=False)
        phase["now"] = "done"
    notes = (*tuple(extra.get("notes", ())), *_refresh_quietly(catalog, run_id, show=quiet))
    return RunResult(run_id, run_dir, tables, seconds, notes)


def _refresh_quietly(catalog: Catalog, run_id: str, *, show: bool) -> tuple[str, ...]:
    """Refresh catalog.duckdb after run ``run_id`` (extended by that run when it can be); a failure is a
    note, printed here when ``show`` (a failed run, or --quiet: otherwise the run's notes carry it, and the
    command prints them once)."""
    note = catalog.try_refresh(run_id)
    if note is None:
        return ()
    if show:
        console.print(f"[yellow]{note}[/yellow]")
    return (note,)


@dataclass(frozen=True)
class UserSource:
    """A table the user brings (a file path, or a frame from the Python API): the ``file`` source."""

    name: str      # the source name in the package (the file name, or e.g. "polars DataFrame")
    data: object   # a path or a frame; see dcaudit.inputs.register_input
    label: str     # how messages name it
    notes: tuple[str, ...] = ()


def _index_note(data: object, spec: PipelineSpec) -> tuple[str, ...]:
    """A note when a pandas frame's own index is dropped while the candidates are numbered by row: its labels
    (a named index, or one left by filtering) are not the ids the package shows."""
    if spec.id_column != ROW or type(data).__module__.split(".")[0] != "pandas":
        return ()
    index: Any = getattr(data, "index", None)
    default = type(index).__name__ == "RangeIndex" and index.start == 0 and index.step == 1 and index.name is None
    if index is None or default:
        return ()
    name = f" {index.name!r}" if index.name is not None else ""
    return (f"the pandas frame's index{name} is not read: candidates are numbered by row (1..n); to use its labels "
            "as ids, reset_index() and pass the column as id",)


QUERY_ORDER_NOTE = ("candidates are numbered in the query's result order (no id column given); without an "
                    "ORDER BY that order can differ from run to run (a join, several files): give an id column, "
                    "or end the query with an ORDER BY on unique columns")


def prepare_source(spec: PipelineSpec, settings: Settings, data: object = None) -> PreparedSource | UserSource:
    if isinstance(data, SourceQuery):  # from the CLI's --sql or the API: its origin names it in messages
        result = query_table(data, settings)
        return UserSource(LABEL, result.table, LABEL,
                          (QUERY_ORDER_NOTE,) if spec.id_column == ROW and not result.ordered else ())
    if data is not None:
        notes = _index_note(data, spec)
        if not isinstance(data, str | Path):
            data = as_arrow(data)[0]  # once: the digest and the audit read the same rows (a LazyFrame runs once)
        return UserSource(spec.source, data, spec.source, notes)
    if spec.query is not None:  # read once into Arrow: the digest and the audit see the same rows
        return prepare_source(spec, settings, spec.query)
    if spec.connector is None:  # [source] path: the user's file (or glob)
        path = Path(spec.source)
        # a glob's name alone (*.parquet) would name every glob alike: with its folder, parts/*.parquet
        name = f"{path.parent.name}/{path.name}" if is_glob(path) and path.parent.name else path.name
        return UserSource(name, path, str(path))
    # Keys of [source] other than connector/path/id are the connector's options (e.g. jarvis: models, require).
    options = {k: v for k, v in (spec.raw.get("source") or {}).items() if k not in SOURCE_KEYS}
    connector = get_connector(spec.source)
    return connector.prepare(settings, parse_options(connector.name, connector.Options, options))


def compute_spec(spec: PipelineSpec, settings: Settings, prepared: PreparedSource | UserSource, *,
                 timings: dict[str, float] | None = None, with_candidates: bool = True,
                 quiet: bool = False, engine: str = "duckdb",
                 on_final: TableSink | None = None,
                 stream: TableStreams | None = None) -> tuple[dict[str, pa.Table], dict[str, Any]]:
    """Every audit and section of ``spec`` over a prepared source: (tables, extra manifest fields).

    ``engine``: where the candidate passes of the fiber audits and fiber replays run (``duckdb`` or
    ``spark``, :data:`dcaudit.engine.ENGINES`). The source is prepared and registered in DuckDB either way
    (the input contract); the Spark engine reads the same prepared tables, and every stage without a Spark
    pass runs on DuckDB over them, with a note saying so.

    ``on_final(name, table)`` is handed the candidates table as soon as it is final — after the fiber stage,
    when sections follow, none adds candidates and it has at least :data:`EARLY_WRITE_ROWS` rows — and the
    returned tables hold that same object: the caller may write it while the sections run. Without sections
    there is nothing to write it beside, so for a spec of one audit (no ``per``, no ``identity``) and no
    sections the candidates table's rows go to ``stream(name)`` while the fiber audit computes them (at 1e7
    candidates the writer then runs beside DuckDB's scan), and the returned tables hold the table they make up.

    Pure with respect to the workspace: nothing is recorded or written (``run_spec`` does that)."""
    timings = {} if timings is None else timings
    validate_spec(spec)
    check_engine(engine)
    for section in spec.sections:  # slow imports a stage needs start now, beside reading the source
        STAGES[section].warm_up()
    with audit_database(settings) as con:  # closed now, not when garbage is collected: spill files go
        ctx: StageContext | None = None
        try:
            ctx = _context(spec, settings, con, prepared, prepared.name, engine=engine)
            streamed = stream("candidates") if stream is not None and _streams_candidates(spec, engine) \
                and with_candidates else None
            with stage_progress("fibers", timings, quiet=quiet):
                collected: dict[str, list[pa.Table]] = fiber_stage(ctx, with_candidates=with_candidates,
                                                                   candidates_sink=streamed)
            early: dict[str, tuple[pa.Table, int]] = {}   # table -> (the table handed on, parts it holds)
            if streamed is not None and len(collected["candidates"]) == 1 \
                    and streamed.done(collected["candidates"][0]):
                early["candidates"] = (collected["candidates"][0], 1)
            elif on_final is not None and spec.sections and sum(
                    t.num_rows for t in collected["candidates"]) >= EARLY_WRITE_ROWS and not any(
                    STAGES[section].adds_candidates for section in spec.sections):
                early["candidates"] = (concat(collected["candidates"]), len(collected["candidates"]))
                on_final("candidates", early["candidates"][0])
            for section in spec.sections:
                if ctx.engine.name not in STAGES[section].engines:
                    on_duckdb(ctx, f"stage {section}")
                with stage_progress(section, timings, quiet=quiet):
                    for table, parts in STAGES[section].function()(ctx).items():
                        collected.setdefault(table, []).extend(parts)
            found = [findings.read(prepared.findings)] if isinstance(prepared, PreparedSource) else []
            found += [findings.conform_arrow(t) for t in ctx.findings]
            if found:  # what the connector and the input contract found wrong with the inputs
                collected["findings"] = found
            tables = {name: early[name][0] if name in early and early[name][1] == len(parts) else concat(parts)
                      for name, parts in collected.items() if parts}
            return tables, {"timings": timings, "notes": ctx.notes, "source": prepared.name,
                            "sources": source_provenance(prepared),
                            "source_files": [s.manifest_entry() for s in prepared.sources]
                            if isinstance(prepared, PreparedSource) else [], **engine_provenance(ctx.engine)}
        except duckdb.Error as exc:
            err = resource_error(exc, settings, "the audit stopped") or refused_column_error(exc)
            if err is None:
                raise
            raise err from None
        except ClaimError as exc:
            refused = refused_column_error(exc)
            if refused is not None:
                raise refused from None
            try:
                hint = _text_id_hint(str(exc), spec, prepared) or _first_text_hint(str(exc), ctx)
            except duckdb.Error as err:   # the hint reads the column: a refused one says why it cannot be read
                refused = refused_column_error(err)
                if refused is None:
                    raise
                raise refused from None
            if hint:
                raise ClaimError(f"{exc}{hint}") from exc
            raise
        except DcauditError as exc:   # a stage's wording of DuckDB's error() for a column it cannot hold
            refused = refused_column_error(exc)
            if refused is None:
                raise
            raise refused from None
        finally:
            if ctx is not None:
                ctx.engine.close()


def _text_id_hint(message: str, spec: PipelineSpec, prepared: PreparedSource | UserSource) -> str:
    """Why a claim finds the id column to be text in a CSV (it is read as text there, see _context)."""
    if not (isinstance(prepared, UserSource) and isinstance(prepared.data, str | Path)
            and not str(prepared.data).lower().endswith(PARQUET_SUFFIXES)
            and f"column {spec.id_column!r} (text)" in message):
        return ""
    return (f"; the id column {spec.id_column!r} of a CSV is read as text, so that ids keep their spelling "
            "(007 stays 007): to claim on its value, copy it into a column of its own")


def _first_text_hint(message: str, ctx: StageContext | None) -> str:
    """Where a claim's text column first holds something that is not a number (1e6 rows are many to search)."""
    import re

    match = re.search(r"column (['\"])(.+?)\1 \(text\)", message)
    if ctx is None or match is None:
        return ""
    column = match.group(2)
    for view in ctx.tables.values():
        if column not in ctx.columns.get(view, ()):
            continue
        found = first_non_number(ctx.con, view, column)
        if found:
            row, value = found
            where = f"row {row}" if row is not None else "a row"
            hint = not_a_number_hint(value)
            return f"; its first value that is not a number is {value[:40]!r} ({label_of(view)}, {where}){hint}"
        first = first_value(ctx.con, view, column)   # text of numbers only ('1', 'nan': a frame's str column)
        if first:
            row, value = first
            where = f"row {row}" if row is not None else "a row"
            return (f"; its values all read as numbers, but the column holds them as text (the first, {value[:40]!r}, "
                    f"{label_of(view)}, {where}): give the column a numeric type (pd.to_numeric, .cast(pl.Float64))")
    return ""


def check_engine(engine: str) -> None:
    if engine not in ENGINES:
        raise SpecError(f"engine = {engine!r}; use one of {', '.join(ENGINES)}")


def open_engine(name: str, con: duckdb.DuckDBPyConnection, files: Mapping[str, Path]) -> Engine:
    """The engine for a run: DuckDB on ``con``, or Spark reading the same prepared tables (``files``: DuckDB
    view -> the Parquet file or glob behind it; other inputs reach Spark as the Arrow DuckDB holds)."""
    check_engine(name)
    if name == "spark":
        from dcaudit.audits.spark_engine import SparkEngine

        return SparkEngine.start(con, files=files)
    from dcaudit.audits.engine import DuckDBEngine  # imports the replay's split pass: only when a run starts

    return DuckDBEngine(con)


def engine_provenance(engine: Engine) -> dict[str, Any]:
    """Manifest fields naming the engine (and for Spark where it ran)."""
    master = getattr(engine, "master", None)
    return {"engine": engine.name, **({"spark_master": master} if master else {})}


def on_duckdb(ctx: StageContext, what: str) -> None:
    """Note that ``what`` ran on DuckDB although the run asked for another engine."""
    if ctx.engine.name != "duckdb":
        ctx.notes.append(f"{what} ran on DuckDB over the same prepared tables (the {ctx.engine.name} engine runs "
                         "the candidate passes of fiber audits and fiber replays)")


def source_inputs(prepared: PreparedSource | UserSource) -> dict[str, str]:
    """Input name -> sha256 of everything a prepared source was read from."""
    if isinstance(prepared, PreparedSource):
        return dict(prepared.inputs)
    return input_digests(prepared.data, prepared.label)


def run_spec(spec: PipelineSpec, settings: Settings, *, out_dir: Path | None = None,
             replace_existing: bool = False, with_candidates: bool = True, reuse: bool = False,
             quiet: bool = False, data: object = None, report: bool = True, engine: str = "duckdb") -> RunResult:
    """Run every audit and section of ``spec``, record the run and write its package (``runs/<run_id>`` or
    ``out_dir``). ``data`` (a frame or path) replaces the spec's source, as the Python API passes it;
    ``engine`` as for :func:`compute_spec`."""
    validate_spec(spec)  # before anything is prepared or recorded: a bad section is bad input (exit 2)
    check_engine(engine)
    timings: dict[str, float] = {}
    source: dict[str, Any] = {}

    def inputs() -> dict[str, str]:  # runs under the spec lock (see execute_run)
        with stage_progress("source", timings, quiet=quiet):
            prepared = prepare_source(spec, settings, data)
        source["prepared"] = prepared
        return source_inputs(prepared)

    def compute(writer: PackageWriter) -> tuple[dict[str, pa.Table], dict[str, Any]]:
        return compute_spec(spec, settings, source["prepared"], timings=timings, with_candidates=with_candidates,
                            quiet=quiet, engine=engine, on_final=writer.write_early, stream=writer.stream)

    return execute_run(settings, name=spec.name, spec_payload=spec.raw, spec_hash=spec.spec_hash,
                       inputs=inputs, compute=compute, out_dir=out_dir, replace_existing=replace_existing,
                       reuse=reuse, quiet=quiet, report=report, engine=engine)


_PROVENANCE_KEYS = ("origin", "url", "sha256", "retrieved_at", "licence", "citation", "normaliser")


def source_provenance(prepared: PreparedSource | UserSource) -> list[dict[str, str]]:
    """Where each input table came from (the connector's Parquet metadata): origin, URL, sha256, licence."""
    if isinstance(prepared, UserSource):
        return [{"table": prepared.name, "origin": prepared.label}]
    out = []
    for name, path in prepared.tables.items():
        try:
            meta = pq.read_schema(path).metadata or {}
        except Exception:  # noqa: BLE001 - provenance is informative; the run already read the table
            meta = {}
        row = {"table": name, "path": str(path)}
        for key in _PROVENANCE_KEYS:
            value = meta.get(f"dcaudit.{key}".encode())
            if value:
                row[key] = value.decode()
        out.append(row)
    return out


def _context(spec: PipelineSpec, settings: Settings, con: duckdb.DuckDBPyConnection,
             prepared: PreparedSource | UserSource, source_name: str, *, engine: str = "duckdb") -> StageContext:
    """Every input table through the input contract (dcaudit.inputs), as a view named after it, and the
    run's engine over them."""
    registered: dict[str, RegisteredInput] = {}
    notes = list(getattr(prepared, "notes", ()))
    files: dict[str, Path] = {}  # view -> the Parquet behind it, which another engine can read itself
    empty: set[str] = set()      # connector tables without rows: registered nowhere, named if an audit asks
    if isinstance(prepared, UserSource):
        # the id column is read from a CSV as text: an id 007 stays 007
        text: tuple[str, ...] = (spec.id_column,)
        if "vision" in spec.sections:   # a user's predictions: their keys as written (image 01 is not image 1)
            from dcaudit.connectors.vision_predictions import KEY_TEXT_COLUMNS

            text += KEY_TEXT_COLUMNS
        registered[prepared.name] = register_input(con, prepared.data, label=prepared.label, text_columns=text)
        # before any stage: every command names a missing id column the same way
        user = registered[prepared.name]
        unset = "id" not in (spec.raw.get("source") or {}) and spec.id_column != ROW  # a spec file's default id
        if spec.audits:   # a [vision]-only spec audits predictions rows, which its stage keys itself
            require_id_column(spec.id_column, (*user.columns, *((ROW,) if user.has_row else ())), user.label,
                              hint=f"; a spec without [source] id reads the ids from {spec.id_column!r}: name the "
                                   "id column there" if unset else "")
        if isinstance(prepared.data, str | Path) and str(prepared.data).lower().endswith(PARQUET_SUFFIXES):
            files[registered[prepared.name].view] = Path(prepared.data)
    else:
        first = next(iter(prepared.tables), None)  # audits without a table read it: never skipped
        for name, path in prepared.tables.items():
            if name != first and _no_rows(Path(path)):  # e.g. no leaderboard predictions for these tasks
                empty.add(name)
                continue
            registered[name] = register_input(con, path)
            files[registered[name].view] = Path(path)
    tables = {name: r.view for name, r in registered.items()}
    columns = {r.view: list(r.columns) for r in registered.values()}
    globs = frozenset(view for view, path in files.items() if is_glob(path))  # read with union_by_name
    return StageContext(spec, settings, con, source_name, tables, columns, open_engine(engine, con, files),
                        notes=notes, empty_tables=frozenset(empty), globs=globs)


def _no_rows(path: Path) -> bool:
    """True for a Parquet file that holds no rows (read from its footer)."""
    import pyarrow.parquet as pq

    try:
        return path.suffix == ".parquet" and path.is_file() and pq.ParquetFile(path).metadata.num_rows == 0
    except Exception:  # noqa: BLE001 - unreadable: register_input names the problem
        return False


def _streams_candidates(spec: PipelineSpec, engine: str) -> bool:
    """Whether the candidates table is written while it is computed: a spec of one fiber audit (no ``per``
    or ``identity``, which change or add to it) and no sections. With sections the table is written while
    they run (``on_final``): a 1e7-row replay took 3-7 % longer when the write ran beside the candidates scan
    instead, whose two DuckDB threads it then slowed."""
    return engine == "duckdb" and len(spec.audits) == 1 and spec.audits[0].per is None \
        and not spec.audits[0].identity and not spec.sections


def fiber_stage(ctx: StageContext, *, with_candidates: bool = True,
                candidates_sink: RowSink | None = None) -> dict[str, list[pa.Table]]:
    """Every fiber audit of the spec: summary, fibers and candidates tables (parts, one per audit).
    ``candidates_sink`` (a spec of one audit without ``per``) is handed its candidates while they are computed."""
    out: dict[str, list[pa.Table]] = {"summary": [], "fibers": [], "candidates": []}
    check_absent_columns(ctx)
    for task in ctx.spec.audits:
        if task.per is not None:  # one audit per model (or other group column) plus the median across them
            from dcaudit.audits.groups import audit_per_group

            on_duckdb(ctx, f"{task.audit_id}: the per-{task.per} audits")
            check_implied_per(task, ctx.columns[ctx.view_for(task.table)])
            check_evidence_text(ctx, ctx.view_for(task.table), task)

            for table, parts in audit_per_group(ctx, task, with_candidates=with_candidates).items():
                out.setdefault(table, []).extend(parts)
            continue
        view = ctx.view_for(task.table)
        check_candidate_ids(ctx, view, task)
        check_evidence_text(ctx, view, task)
        result = audit_fibers(ctx.con, view, id_column=ctx.spec.id_column, evidence=task.evidence,
                              claim=task.claim, min_support=task.min_support,
                              labels=AuditLabels(ctx.source, task.audit_id), with_candidates=with_candidates,
                              engine=ctx.engine, candidates_sink=candidates_sink)
        if task.identity:
            from dcaudit.audits.label_noise import label_noise_for_task

            on_duckdb(ctx, f"{task.audit_id}: the label-noise split of mixed fibers (identity {task.identity})")

            result = label_noise_for_task(ctx, task, task.identity, result)
        ctx.audits[task.audit_id] = result
        _note_singleton_fibers(ctx, task, result.summary, result.fibers)
        out["summary"].append(result.summary)
        out["fibers"].append(result.fibers)
        if result.candidates is not None:
            out["candidates"].append(result.candidates)
    _note_support_moves(ctx)
    return out


def check_absent_columns(ctx: StageContext) -> None:
    """Findings (and a note per column) for the columns any part of the run reads that some files of a Parquet
    glob lack (DuckDB reads them as missing there): the audits' evidence, claim, ``per`` and ``identity``, and
    what each section's stage reads (:meth:`Stage.columns`: probes, references, model columns, …), gathered
    once before any stage runs, so a column read twice is reported once per file. An id column some files lack
    is an error naming them. Inputs that are no glob cost nothing (no DuckDB query)."""
    if not ctx.globs:
        return
    read: dict[str, list[str]] = {}

    def add(table: str | None, columns: Iterable[str]) -> None:
        view = ctx.view_for(table)
        if view in ctx.globs:
            read.setdefault(view, []).extend(columns)

    for task in ctx.spec.audits:
        add(task.table, [*task.evidence.columns, *task.claim.columns, *(c for c in (task.per, task.identity) if c)])
    for section, raw in ctx.spec.sections.items():
        for table, column in STAGES[section].columns(raw, ctx.spec, tuple(ctx.tables)):
            if table is None or table in ctx.tables:   # a table the source lacks: the stage's own error says so
                add(table, [column])
    for view, columns in read.items():
        found = absent_columns(ctx.con, view, columns, id_column=ctx.spec.id_column, source=ctx.source)
        if found is not None:
            ctx.findings.append(found[0])
            ctx.notes.extend(found[1])


def check_candidate_ids(ctx: StageContext, view: str, task: AuditTask) -> None:
    """The input contract's id rule, once per (table, id column): an error, or findings rows with
    ``duplicates = "keep"``. Also notes a claim that reads an evidence column (leakage)."""
    leaked = sorted(set(task.claim.columns) & set(task.evidence.columns))
    if leaked:
        ctx.notes.append(f"{task.audit_id}: the claim reads evidence column(s) {', '.join(leaked)}: the evidence "
                         "then decides the claim by construction (leakage)")
    if ctx.spec.id_column in task.evidence.columns:
        ctx.notes.append(f"{task.audit_id}: the evidence includes the id column {ctx.spec.id_column!r}: every "
                         "candidate is a fiber of its own, so each is certified by construction")
    key = (view, ctx.spec.id_column)
    if key in ctx.checked_ids or ctx.spec.id_column == ROW:
        return
    ctx.checked_ids.add(key)
    from dcaudit.claims import claim_sql

    found = check_ids(ctx.con, view, ctx.spec.id_column, duplicates=ctx.spec.duplicates, source=ctx.source,
                      claim_sql=claim_sql(task.claim, column_types(ctx.con, view)))
    if found is not None and found.num_rows:
        ctx.findings.append(found)
        ctx.notes.append(f"{found.num_rows} candidate id(s) repeat in {label_of(view)}; kept, each row audited "
                         "as a candidate (findings.parquet lists them)")
    spelled = id_spellings(ctx.con, view, ctx.spec.id_column, source=ctx.source)
    if spelled is not None:
        ctx.findings.append(spelled)
        ctx.notes.append(f"{spelled.num_rows} group(s) of candidate ids in {label_of(view)} differ only by "
                         f"surrounding white space, Unicode normalisation or how they write a number (the first: "
                         f"{spelled['candidate_id'][0].as_py()[:40]!r}); each spelling is a candidate of its own "
                         "(findings.parquet lists them)")


def check_evidence_text(ctx: StageContext, view: str, task: AuditTask) -> None:
    """Findings (and a note) for text evidence columns of an exact rule that hold numbers and text, once
    per (table, column): binned rules refuse text, an exact rule compares it as written."""
    todo = [c for c in task.evidence.columns if (view, c) not in ctx.checked_text]
    if task.evidence.rule.kind != "exact" or not todo:
        return
    types = column_types(ctx.con, view)
    csv_input = label_of(view).lower().endswith(CSV_SUFFIXES)
    for column in todo:
        ctx.checked_text.add((view, column))
        checks = (numbers_and_text, line_breaks) if csv_input else (numbers_and_text,)
        for check in checks:
            found = check(ctx.con, view, column, types, id_column=ctx.spec.id_column, source=ctx.source)
            if found is None:
                continue
            ctx.findings.append(found)
            row = found.column("row")[0].as_py()
            ctx.notes.append(f"{label_of(view)}, evidence column {column!r}{f' (row {row})' if row else ''}: "
                             f"{found.column('detail')[0].as_py()} (findings.parquet, kind "
                             f"{found.column('kind')[0].as_py()!r})")


def _note_singleton_fibers(ctx: StageContext, task: AuditTask, summary: pa.Table, fibers: pa.Table) -> None:
    """Say so when half the candidates or more are alone in their fiber and min_support certifies them: one
    observation decides its fiber by construction (float evidence under the exact rule, a name or a SMILES as
    evidence), so the certified fraction then says little about the evidence. The id column is noted apart."""
    n = summary["n_candidates"][0].as_py() or 0
    if n < 2 or task.min_support > 1 or ctx.spec.id_column in task.evidence.columns:
        return
    # counted by DuckDB: pyarrow.compute (and Arrow's to_numpy) would import pandas, ~0.3 s of a command
    alone = ctx.con.from_arrow(fibers.select(["n"])).filter("n = 1").aggregate("count(*)").fetchall()[0][0]
    if 2 * alone < n:
        return
    what = ("every candidate is a fiber of its own" if alone == n else
            f"{alone} of {n} candidates ({100 * alone / n:.0f}%) are alone in their fiber")
    ctx.notes.append(f"{task.audit_id}: {what}: one observation decides its fiber, so each is certified by "
                     "construction; a coarser fiber rule (quantile:K, width:W) or min_support 2 or more says more")


def _note_support_moves(ctx: StageContext) -> None:
    """Say how many candidates a larger min_support moves to 'unsupported' (same claim and evidence)."""
    by_key: dict[tuple[str, str, str], list[tuple[int, int, str]]] = {}
    for task in ctx.spec.audits:
        row = ctx.audits[task.audit_id].summary.to_pylist()[0]
        by_key.setdefault((row["claim"], row["evidence"], row["fiber_rule"]), []).append(
            (row["min_support"], row["unsupported"], task.audit_id))
    for rows in by_key.values():
        rows.sort()
        base_support, base_unsup, base_id = rows[0]
        for support, unsup, audit_id in rows[1:]:
            ctx.notes.append(f"{audit_id}: min_support {support} moves {unsup - base_unsup} candidates "
                             f"from certified to 'unsupported' (vs min_support {base_support}, {base_id})")
