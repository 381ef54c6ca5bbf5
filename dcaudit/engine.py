"""The DuckDB connection every audit runs on (memory limit, spill directory, threads), and :class:`Engine`:
the seam between the passes over candidates and everything an audit computes from them.

An engine runs the passes whose cost grows with the candidates — quantile cuts, the grouping of the evidence
into fibers, the candidates × seeds split counts of the replay, the join of every candidate to its fiber —
and hands back a few rows per fiber (per fiber × seed for the replay). Everything after those passes (fiber
statuses, the summary, the replay's certification, policies, prices and costs) is the same code on the
driver's DuckDB and numpy whichever engine ran them, so both engines write the same tables.

Two engines implement it: DuckDB (``dcaudit.audits.engine.DuckDBEngine``, this machine) and Spark
(``dcaudit.audits.spark_engine.SparkEngine``, local or a cluster). docs/scale.md says what runs where.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

import duckdb

from dcaudit.claims import quote_string
from dcaudit.config import BYTE_UNITS, Settings
from dcaudit.defaults import ENGINES  # noqa: F401 - the engines a run can ask for (--engine, engine=)

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from dcaudit.claims import SqlDialect
    from dcaudit.evidence_map import EvidenceSQL
    from dcaudit.splits import SplitDesign
    from dcaudit.storage import RowSink


class Engine(Protocol):
    """Where the candidate-scale passes of the fiber audit and the fiber replay run.

    ``con`` is the driver's DuckDB: it holds the registered inputs (their checks and types are read there),
    receives the grouped rows and runs every stage that has no pass on this engine. Evidence SQL for the
    engine is built by ``dcaudit.audits.evidence.evidence_select(..., engine=engine)`` in its ``dialect``,
    over ``source(relation)``.
    """

    name: str                       # "duckdb" | "spark": recorded in the manifest
    con: duckdb.DuckDBPyConnection
    dialect: SqlDialect

    def source(self, relation: str) -> str:
        """This engine's name for ``relation``, a relation of the driver's DuckDB (a registered input)."""
        ...

    def quantile_cuts(self, source: str, columns: Sequence[str], k: int, where: str) -> dict[str, list[float]]:
        """Interior cut points of ``k`` equal-count bins of each column over its finite values where ``where``
        holds (deduplicated, sorted), as ``dcaudit.audits.evidence.quantile_cuts`` computes them."""
        ...

    def group_counts(self, ev: EvidenceSQL, into: str) -> None:
        """(a) Create temp table ``into`` in ``con``: one row per (key parts ``k0..``, ``audited``) with
        ``n``, ``n_true`` and the observed range ``lo``, ``hi`` of ``x0`` (NULL under exact fibers)."""
        ...

    def split_counts(self, ev: EvidenceSQL, design: SplitDesign) -> dict[str, np.ndarray]:
        """(b) Members and claim-trues per (seed, fiber, half) of the audited candidates: arrays
        ``seed_index`` (seed − offset), ``f`` (any fiber numbering), ``cal``, ``n``, ``t``, plus one row with
        ``seed_index`` −1 holding the number of excluded candidates in ``n``. The split is DuckDB's
        ``hash(hash(CAST(id AS VARCHAR)), seed)`` (:mod:`dcaudit.splits`) on every engine."""
        ...

    def candidates(self, ev: EvidenceSQL, fibers: str, sink: RowSink | None = None) -> pa.Table:
        """Every candidate with its fiber: candidate_id, fiber_key, claim_value, status ('excluded' when
        ``reason`` is set or no fiber matches; a dictionary over ``dcaudit.audits.fibers.CANDIDATE_STATUSES``),
        excluded_reason — in the input's row order (``_row`` of ``ev.sql`` when ``ev.has_row``), else ordered
        by candidate_id. ``fibers`` is a table in ``con`` with the key parts, fiber_key and status of every
        audited fiber. An engine that computes the rows in order may hand them to ``sink`` part by part as
        they come (the returned table is then those parts), or abandon it; one that cannot leaves it alone."""
        ...

    def close(self) -> None:
        """Drop what the engine registered (the driver's DuckDB is the caller's to close)."""
        ...


_INSTANCE: duckdb.DuckDBPyConnection | None = None
_INSTANCE_PID = 0


def shared_connection() -> duckdb.DuckDBPyConnection:
    """A new connection (a cursor) to this process's shared in-memory DuckDB, for work that changes no
    setting: building the catalog file (ATTACHed to it), the console's counts, reading a package for a report.

    Opening a DuckDB database costs ~0.03 s (its buffer manager, thread pool and catalog); a connection to
    an open one ~1 ms, and each has its own temp tables, registered frames and transaction. Audits do not
    run here: DuckDB's settings belong to the database, and an audit sets its own (memory limit, threads,
    the optimizer switch that keeps NaN tests honest), so each audit holds a database of its own
    (:func:`audit_database`) and audits in other threads cannot change each other's. The shared database is
    an idle audit database when there is one (no second database opened), else a new one. A forked child
    opens its own (DuckDB is not fork-safe)."""
    global _INSTANCE, _INSTANCE_PID
    if _INSTANCE is None or os.getpid() != _INSTANCE_PID:
        _INSTANCE, _INSTANCE_PID = _adopt_idle() or duckdb.connect(":memory:"), os.getpid()
    return _INSTANCE.cursor()


def _adopt_idle() -> duckdb.DuckDBPyConnection | None:
    """An idle audit database of this process, taken out of the pool for good to be the shared one (a
    command's audit and its catalog build then open one database, not two), with row order kept again as
    the shared work expects; its memory limit, threads and spill directory stay the user's."""
    with _IDLE_LOCK:
        key = next((k for k in _IDLE if k[0] == os.getpid()), None)
        db = _IDLE.pop(key) if key is not None else None
    if db is not None:
        db.execute("RESET preserve_insertion_order")
    return db


def connect(settings: Settings) -> duckdb.DuckDBPyConnection:
    """A connection to a new in-memory DuckDB an audit runs on, which spills to ``$DCAUDIT_HOME/tmp`` beyond
    ``memory_limit`` (:func:`audit_database` reuses one between audits)."""
    try:  # DuckDB makes only the last level of its spill directory, and only once it spills
        settings.temp_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        from dcaudit.errors import WorkspaceError

        raise WorkspaceError(f"DuckDB's spill directory {settings.temp_dir} cannot be made ({exc.strerror}): "
                             "set DCAUDIT_HOME (or Settings(home=...)) to a writable directory") from None
    con = duckdb.connect(":memory:")
    con.execute(f"SET memory_limit = '{_safe(settings.memory_limit)}'")
    # a path may hold quotes (a workspace called O'Brien): quoted as a SQL string, not refused
    con.execute(f"SET temp_directory = {quote_string(str(settings.temp_dir))}")
    # Insertion order is part of no result here; dropping it lets DuckDB stream and spill.
    con.execute("SET preserve_insertion_order = false")
    # Audits over thousands of evidence columns build expressions that deep (one term per column).
    con.execute("SET max_expression_depth = 100000")
    con.execute("SET enable_progress_bar = false")  # progress is ours to show (stderr), not DuckDB's
    if settings.threads:
        con.execute(f"SET threads = {int(settings.threads)}")
    return con


# Databases whose audit has finished, one per (process, memory limit, spill directory, threads): the next
# audit with those settings takes it (opening a database costs ~0.03 s, a quarter of an audit of a few
# thousand rows) and no two audits ever hold the same one.
_IDLE: dict[tuple[int, str, str, int | None], duckdb.DuckDBPyConnection] = {}
_IDLE_LOCK = threading.Lock()
# Settings that code running on an audit's connection changes and puts back; DuckDB keeps them per database,
# so a database is handed on with them as connect leaves them.
_TRANSIENT = ("perfect_ht_threshold", "disabled_optimizers", "file_search_path")


# Databases being opened ahead of their audit (open_ahead), one thread per key: audit_database waits for it
# rather than open a second one.
_AHEAD: dict[tuple[int, str, str, int | None], threading.Thread] = {}


def _key(settings: Settings) -> tuple[int, str, str, int | None]:
    return os.getpid(), settings.memory_limit, str(settings.temp_dir), settings.threads


def open_ahead(settings: Settings) -> None:
    """Start opening the database the next :func:`audit_database` with these settings will take, on a thread.

    Opening one costs 0.02-0.04 s in which DuckDB holds no GIL, so a command that calls this as soon as it
    knows its settings opens the database while Python still imports and checks (an audit of a few thousand
    rows takes ~0.4 s as a command). Nothing is started when a database with these settings is idle or already
    being opened. A failure is left for :func:`audit_database`, which opens one itself and words the error.
    The thread is not a daemon: a process that ends first waits for it (at most the opening) instead of
    ending while DuckDB is still building the database."""
    key = _key(settings)
    with _IDLE_LOCK:
        if key in _IDLE or key in _AHEAD:
            return
        thread = threading.Thread(target=_open_idle, args=(settings, key), name="dcaudit-open-database")
        _AHEAD[key] = thread
    thread.start()


def _open_idle(settings: Settings, key: tuple[int, str, str, int | None]) -> None:
    try:
        db = connect(settings)
    except Exception:  # noqa: BLE001 - audit_database opens one itself and raises what this met
        return
    with _IDLE_LOCK:
        surplus = db if key in _IDLE else None
        if surplus is None:
            _IDLE[key] = db
    if surplus is not None:
        surplus.close()


@contextlib.contextmanager
def audit_database(settings: Settings) -> Iterator[duckdb.DuckDBPyConnection]:
    """A connection (a cursor) to a database of this audit's own, as :func:`connect` makes it: a finished
    audit's when one with the same settings is idle, else a new one.

    Its temp tables and registered frames go with the cursor. The database is kept for the next audit only
    when nothing else of this one is left in it — no spill file (those go when the database closes), no
    table, view or schema outside the temp schema, no attached database — with the settings code changes for
    a statement reset, the ones :func:`connect` makes set again. It runs no user-written SQL (a ``--sql``
    source runs on a database of its own, :func:`dcaudit.source_query.query_table`), and dcaudit creates no
    macros (listing functions would cost 20 ms)."""
    key = _key(settings)
    with _IDLE_LOCK:
        ahead = _AHEAD.pop(key, None)
    if ahead is not None:
        ahead.join()
    with _IDLE_LOCK:
        db = _IDLE.pop(key, None)
    if db is None:
        db = connect(settings)
    else:
        db.execute("SET preserve_insertion_order = false")
    con = db.cursor()
    try:
        yield con
    finally:
        con.close()
        surplus: duckdb.DuckDBPyConnection | None = db
        if _leaves_nothing(db):
            with _IDLE_LOCK:   # one idle database per key: another audit may have put one back meanwhile
                surplus = _IDLE.get(key)
                _IDLE[key] = db
        if surplus is not None:
            surplus.close()


def _leaves_nothing(db: duckdb.DuckDBPyConnection) -> bool:
    """True when ``db`` holds nothing of the audit that used it (and is reset): it can serve the next one."""
    try:
        left = db.execute(
            "SELECT (SELECT count(*) FROM duckdb_temporary_files()) "
            "+ (SELECT count(*) FROM duckdb_tables() WHERE NOT temporary) "
            "+ (SELECT count(*) FROM duckdb_views() WHERE NOT internal AND NOT temporary) "
            "+ (SELECT count(*) FROM duckdb_schemas() WHERE NOT internal) "
            "+ (SELECT count(*) FROM duckdb_databases() WHERE NOT internal AND database_name <> 'memory')"
        ).fetchall()[0][0]
        if left:
            return False
        db.execute("; ".join(f"RESET {name}" for name in _TRANSIENT))
        return True
    except duckdb.Error:   # a database that cannot answer is not handed on
        return False


def machine_limit(exc: BaseException) -> bool:
    """True for a DuckDB failure that comes from this machine's limits — memory beyond ``memory_limit``, or
    a full disk under the spill directory — rather than from the data. Code that words a DuckDB error as
    bad input re-raises these; the run words them (:func:`dcaudit.pipelines.runner.execute_run`)."""
    return isinstance(exc, duckdb.OutOfMemoryException) or (
        isinstance(exc, duckdb.IOException) and "No space left on device" in str(exc))


def memory_limit_bytes(con: duckdb.DuckDBPyConnection) -> int | None:
    """The connection's ``memory_limit`` in bytes (DuckDB reports it as text, e.g. ``7.4 GiB``), or None
    when it cannot be read as a size: callers then keep their default."""
    import re

    text = str(con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0])
    m = re.match(r"^\s*([0-9.]+)\s*([KMGTP]?i?B)\s*$", text)
    if not m or m.group(2).lower() not in BYTE_UNITS:
        return None
    return int(float(m.group(1)) * BYTE_UNITS[m.group(2).lower()])


def _safe(text: str) -> str:
    """Settings are pasted into SET statements, which take no parameters: refuse quotes."""
    if "'" in text or ";" in text:
        raise ValueError(f"invalid setting value {text!r}")
    return text
