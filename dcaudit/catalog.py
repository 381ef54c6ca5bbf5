"""``catalog.duckdb``: the run registry plus views over every run's Parquet tables.

``duckdb workspace/catalog.duckdb "select * from summary"`` works, as does ``dcaudit query``.
The ``runs`` table records every run (running / succeeded / failed / reused); the other names are views
over ``runs/*/<table>.parquet``, refreshed whenever a run finishes.

Caching is content-addressed: a run's ``cache_key`` hashes its spec, its input sha256s, the package
version and a sha256 of the code itself. An unchanged rerun (same key, earlier package intact) records a
``reused`` row whose ``run_dir`` and ``reused_from`` point at the earlier run; no package is copied, so
the catalog views never count a result twice.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pyarrow as pa

from dcaudit.config import Settings
from dcaudit.errors import DcauditError, RunLockedError
from dcaudit.storage import PACKAGE_TABLES, verify_package

STORAGE_VERSION = "v1.5.0"
_RUNS_DDL = """
CREATE TABLE IF NOT EXISTS runs (
    run_id VARCHAR PRIMARY KEY,
    spec VARCHAR,
    spec_hash VARCHAR,
    input_hashes VARCHAR,      -- JSON object: input name -> sha256
    status VARCHAR,            -- running | succeeded | failed | reused | skipped (source not available) | damaged
    started_at TIMESTAMP,
    finished_at TIMESTAMP,
    seconds DOUBLE,
    package_version VARCHAR,
    git_sha VARCHAR,
    run_dir VARCHAR,
    error VARCHAR
)"""
# Columns added after the first catalogs were written: added in place to older catalogs.
_LATER_COLUMNS = (
    ("cache_key", "VARCHAR"),    # hash of spec, inputs, package version and code: equal keys, equal results
    ("code_hash", "VARCHAR"),    # sha256 over the package's source files (catches uncommitted edits)
    ("reused_from", "VARCHAR"),  # for status 'reused': the run whose package this run reused
)
_RUN_COLUMNS = ("run_id", "spec", "spec_hash", "input_hashes", "status", "started_at", "finished_at", "seconds",
                "package_version", "git_sha", "run_dir", "error", "cache_key", "code_hash", "reused_from")


@dataclass(frozen=True)
class RunRecord:
    run_id: str
    run_dir: Path
    spec_hash: str | None
    input_hashes: dict[str, str]
    package_version: str | None
    git_sha: str | None
    code_hash: str | None


@dataclass(frozen=True)
class RunDiff:
    """The latest two succeeded runs of a spec: what moved, and whether data or code changed."""

    spec: str
    before: RunRecord
    after: RunRecord
    audits: pa.Table                      # one row per audit (× model): fractions before/after and the change
    inputs_changed: tuple[str, ...]       # input names added, removed or with a new sha256
    code_changed: tuple[str, ...]         # which of spec_hash, package_version, git_sha, code_hash differ

    def as_dict(self) -> dict:
        return {"spec": self.spec, "before": self.before.run_id, "after": self.after.run_id,
                "data_changed": bool(self.inputs_changed), "inputs_changed": list(self.inputs_changed),
                "code_changed": list(self.code_changed), "audits": self.audits.to_pylist()}


@contextlib.contextmanager
def file_lock(path: Path, *, wait: float = 30.0, what: str = "the catalog") -> Iterator[None]:
    """An exclusive advisory lock (released by the OS if the holder dies, so kill -9 never wedges it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise RunLockedError(f"{what} is locked by another dcaudit process ({path})") from None
                time.sleep(0.1)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


class Catalog:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.path = settings.catalog_path
        self.lock_path = settings.home / ".catalog.lock"

    @contextlib.contextmanager
    def _write(self) -> Iterator[duckdb.DuckDBPyConnection]:
        with file_lock(self.lock_path):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Stored in a format the DuckDB 1.5 command-line shell can read too (`duckdb catalog.duckdb`).
            con = duckdb.connect(str(self.path), config={"storage_compatibility_version": STORAGE_VERSION})
            try:
                con.execute(_RUNS_DDL)
                for column, kind in _LATER_COLUMNS:
                    con.execute(f"ALTER TABLE runs ADD COLUMN IF NOT EXISTS {column} {kind}")
                yield con
            finally:
                con.close()

    def start_run(self, run_id: str, *, spec: str, spec_hash: str, input_hashes: Mapping[str, str],
                  package_version: str, git_sha: str | None, run_dir: Path, cache_key: str | None = None,
                  code_hash: str | None = None) -> None:
        self._insert(run_id=run_id, spec=spec, spec_hash=spec_hash,
                     input_hashes=json.dumps(dict(input_hashes), sort_keys=True), status="running",
                     started_at=_now(), package_version=package_version, git_sha=git_sha, run_dir=str(run_dir),
                     cache_key=cache_key, code_hash=code_hash)

    def record_reuse(self, run_id: str, *, spec: str, earlier: RunRecord, cache_key: str, seconds: float) -> None:
        """An unchanged rerun: a finished row pointing at the earlier run's package."""
        now = _now()
        self._insert(run_id=run_id, spec=spec, spec_hash=earlier.spec_hash,
                     input_hashes=json.dumps(earlier.input_hashes, sort_keys=True), status="reused",
                     started_at=now, finished_at=now, seconds=seconds, package_version=earlier.package_version,
                     git_sha=earlier.git_sha, run_dir=str(earlier.run_dir), cache_key=cache_key,
                     code_hash=earlier.code_hash, reused_from=earlier.run_id)

    def record_failure(self, run_id: str, *, spec: str, spec_hash: str, run_dir: Path, status: str, error: str,
                       seconds: float, package_version: str, git_sha: str | None, code_hash: str | None) -> None:
        """A run that ended before its inputs were known (e.g. a tampered mirror file): failed or skipped."""
        now = _now()
        self._insert(run_id=run_id, spec=spec, spec_hash=spec_hash, input_hashes="{}", status=status,
                     started_at=now, finished_at=now, seconds=seconds, package_version=package_version,
                     git_sha=git_sha, run_dir=str(run_dir), error=error, code_hash=code_hash)

    def _insert(self, **values: object) -> None:
        unknown = set(values) - set(_RUN_COLUMNS)
        if unknown:
            raise ValueError(f"not runs columns: {sorted(unknown)}")
        cols = list(values)
        with self._write() as con:
            con.execute(f"INSERT INTO runs ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                        [values[c] for c in cols])

    def find_reusable(self, cache_key: str) -> RunRecord | None:
        """The latest succeeded run with this cache key (its package may still need verifying)."""
        if not self.path.exists():
            return None
        rows = self._records("status = 'succeeded' AND cache_key = ?", [cache_key], limit=1)
        return rows[0] if rows else None

    def _records(self, where: str, params: list, limit: int) -> list[RunRecord]:
        with self._write() as con:  # the write lock also orders reads against concurrent writers
            rows = con.execute(
                "SELECT run_id, run_dir, spec_hash, input_hashes, package_version, git_sha, code_hash FROM runs "
                f"WHERE {where} ORDER BY started_at DESC, run_id DESC LIMIT {int(limit)}", params).fetchall()
        return [RunRecord(r[0], Path(r[1]), r[2], json.loads(r[3] or "{}"), r[4], r[5], r[6]) for r in rows]
    def finish_run(self, run_id: str, *, status: str, seconds: float, error: str | None = None) -> None:
        with self._write() as con:
            con.execute(
                "UPDATE runs SET status = ?, finished_at = ?, seconds = ?, error = ? WHERE run_id = ?",
                [status, _now(), seconds, error, run_id],
            )
            self._refresh_views(con)

    def mark_stale_runs_failed(self, spec: str) -> list[str]:
        """Call holding the spec's run lock: any run of it still 'running' belongs to a process that died.

        Returns their run ids (so the caller can remove what they left in ``runs/.partial``)."""
        with self._write() as con:
            ids = [r[0] for r in con.execute("SELECT run_id FROM runs WHERE status = 'running' AND spec = ?",
                                             [spec]).fetchall()]
            con.execute("UPDATE runs SET status = 'failed', finished_at = ?, error = 'interrupted (the process "
                        "ended before finishing)' WHERE status = 'running' AND spec = ?", [_now(), spec])
            return ids

    def refresh_views(self) -> None:
        with self._write() as con:
            self._refresh_views(con)

    def _refresh_views(self, con: duckdb.DuckDBPyConnection) -> None:
        """One view per table over every package; a damaged package is left out (and its run marked
        'damaged' with the bad files named) instead of breaking the views for every other run."""
        runs_dir = self.settings.runs_dir
        damaged: dict[Path, list[str]] | None = None
        for name in PACKAGE_TABLES:
            files = sorted(runs_dir.glob(f"*/{name}.parquet"))
            if not files:
                con.execute(f"DROP VIEW IF EXISTS {name}")
                continue
            pattern = str(runs_dir / "*" / f"{name}.parquet")
            try:
                con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM "
                            f"read_parquet({_sql_string(pattern)}, union_by_name = true)")
                continue
            except duckdb.Error:
                pass
            if damaged is None:
                damaged = {d: p for d in sorted({f.parent for f in runs_dir.glob("*/*.parquet")})
                           if (p := verify_package(d))}
                for run_dir, problems in damaged.items():
                    con.execute("UPDATE runs SET status = 'damaged', error = ? WHERE run_dir = ? AND status IN "
                                "('succeeded', 'reused')", ["; ".join(problems), str(run_dir)])
            intact = [str(f) for f in files if f.parent not in damaged]
            if intact:
                listed = ", ".join(_sql_string(f) for f in intact)
                con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM "
                            f"read_parquet([{listed}], union_by_name = true)")
            else:
                con.execute(f"DROP VIEW IF EXISTS {name}")

    def query(self, sql: str) -> pa.Table:
        if not self.path.exists():
            raise DcauditError(f"no catalog at {self.path} yet: run an audit first (e.g. `dcaudit run tox21`)")
        con = duckdb.connect(str(self.path), read_only=True)
        try:
            return con.sql(sql).to_arrow_table()
        except duckdb.Error as exc:
            bad = self.damaged_packages() if isinstance(exc, duckdb.IOException | duckdb.InvalidInputException) \
                else []
            hint = ("\ndamaged package file(s):\n  " + "\n  ".join(bad) + "\nre-run their specs (or remove "
                    "those run directories) and try again") if bad else ""
            raise DcauditError(f"query failed: {exc}{hint}") from exc
        finally:
            con.close()

    def damaged_packages(self) -> list[str]:
        """Every package file under runs/ that is missing, unreadable or differs from its recorded hash."""
        problems: list[str] = []
        for run_dir in sorted(p for p in self.settings.runs_dir.glob("*") if p.is_dir() and not p.name.startswith(".")):
            problems += verify_package(run_dir)
        return problems

    def runs(self, limit: int = 20) -> pa.Table:
        return self.query(f"SELECT run_id, spec, status, started_at, seconds, reused_from, error FROM runs "
                          f"ORDER BY started_at DESC, run_id DESC LIMIT {int(limit)}")

    def run_dir(self, run_id_or_spec: str) -> Path:
        """The package directory of a run id, or of the latest succeeded/reused run of a spec name."""
        rows = self.query(
            "SELECT run_dir FROM runs WHERE run_id = $k OR (spec = $k AND status IN ('succeeded', 'reused')) "
            "ORDER BY run_id = $k DESC, started_at DESC LIMIT 1".replace("$k", _sql_string(run_id_or_spec)))
        if rows.num_rows == 0:
            raise DcauditError(f"no run {run_id_or_spec!r} in the catalog (and no succeeded run of a spec of "
                               "that name); `dcaudit runs` lists them")
        return Path(rows.column(0)[0].as_py())

    def diff(self, spec: str) -> RunDiff:
        """Compare the latest two succeeded runs of ``spec`` (reused rows repeat a run, so they are skipped)."""
        records = self._records("status = 'succeeded' AND spec = ?", [spec], limit=2) if self.path.exists() else []
        if len(records) < 2:
            raise DcauditError(f"spec {spec!r} has {len(records)} succeeded run(s) in the catalog; --diff needs two")
        after, before = records
        for rec in (before, after):
            bad = verify_package(rec.run_dir)
            if bad:
                raise DcauditError("damaged package file(s):\n  " + "\n  ".join(bad))
        con = duckdb.connect()
        try:
            tables = {}
            for tag, rec in (("a", before), ("b", after)):
                con.execute(f"CREATE VIEW s_{tag} AS SELECT * FROM read_parquet("
                            f"{_sql_string(str(rec.run_dir / 'summary.parquet'))})")
                tables[tag] = {r[0] for r in con.execute(f"DESCRIBE s_{tag}").fetchall()}
            keys = [c for c in ("audit_id", "model", "claim", "evidence", "fiber_rule", "min_support")
                    if c in tables["a"] and c in tables["b"]]
            on = " AND ".join(f"a.{k} IS NOT DISTINCT FROM b.{k}" for k in keys)
            audits = con.sql(
                f"SELECT {', '.join(f'coalesce(b.{k}, a.{k}) AS {k}' for k in keys)}, "
                "a.certified_fraction AS certified_before, b.certified_fraction AS certified_after, "
                "b.certified_fraction - a.certified_fraction AS certified_change, "
                "a.ambiguous_fraction AS ambiguous_before, b.ambiguous_fraction AS ambiguous_after, "
                "b.ambiguous_fraction - a.ambiguous_fraction AS ambiguous_change, "
                "a.n_candidates AS n_before, b.n_candidates AS n_after "
                f"FROM s_a a FULL OUTER JOIN s_b b ON {on} ORDER BY {', '.join(keys)}").to_arrow_table()
        finally:
            con.close()
        names = set(before.input_hashes) | set(after.input_hashes)
        inputs_changed = tuple(sorted(n for n in names if before.input_hashes.get(n) != after.input_hashes.get(n)))
        code_changed = tuple(f for f in ("spec_hash", "package_version", "git_sha", "code_hash")
                             if getattr(before, f) != getattr(after, f))
        return RunDiff(spec, before, after, audits, inputs_changed, code_changed)


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)
