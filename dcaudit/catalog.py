"""``catalog.duckdb``: the run registry plus views over every run's Parquet tables.

``duckdb workspace/catalog.duckdb "select * from summary"`` works, as does ``dcaudit query``.
The ``runs`` table records every run (running / succeeded / failed); the other names are views over
``runs/*/<table>.parquet``, refreshed whenever a run finishes.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pyarrow as pa

from dcaudit.config import Settings
from dcaudit.errors import DcauditError, RunLockedError
from dcaudit.reports.package import PACKAGE_TABLES

STORAGE_VERSION = "v1.5.0"
_RUNS_DDL = """
CREATE TABLE IF NOT EXISTS runs (
    run_id VARCHAR PRIMARY KEY,
    spec VARCHAR,
    spec_hash VARCHAR,
    input_hashes VARCHAR,      -- JSON object: input name -> sha256
    status VARCHAR,            -- running | succeeded | failed
    started_at TIMESTAMP,
    finished_at TIMESTAMP,
    seconds DOUBLE,
    package_version VARCHAR,
    git_sha VARCHAR,
    run_dir VARCHAR,
    error VARCHAR
)"""


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
                yield con
            finally:
                con.close()

    def start_run(self, run_id: str, *, spec: str, spec_hash: str, input_hashes: Mapping[str, str],
                  package_version: str, git_sha: str | None, run_dir: Path) -> None:
        with self._write() as con:
            con.execute(
                "INSERT INTO runs VALUES (?, ?, ?, ?, 'running', ?, NULL, NULL, ?, ?, ?, NULL)",
                [run_id, spec, spec_hash, json.dumps(dict(input_hashes), sort_keys=True), _now(),
                 package_version, git_sha, str(run_dir)],
            )

    def finish_run(self, run_id: str, *, status: str, seconds: float, error: str | None = None) -> None:
        with self._write() as con:
            con.execute(
                "UPDATE runs SET status = ?, finished_at = ?, seconds = ?, error = ? WHERE run_id = ?",
                [status, _now(), seconds, error, run_id],
            )
            self._refresh_views(con)

    def mark_stale_runs_failed(self, spec: str) -> int:
        """Call holding the spec's run lock: any run of it still 'running' belongs to a process that died."""
        with self._write() as con:
            n = con.execute("SELECT count(*) FROM runs WHERE status = 'running' AND spec = ?", [spec]).fetchall()[0][0]
            con.execute("UPDATE runs SET status = 'failed', error = 'interrupted (the process ended before "
                        "finishing)' WHERE status = 'running' AND spec = ?", [spec])
            return int(n)

    def refresh_views(self) -> None:
        with self._write() as con:
            self._refresh_views(con)

    def _refresh_views(self, con: duckdb.DuckDBPyConnection) -> None:
        runs_dir = self.settings.runs_dir
        for name in PACKAGE_TABLES:
            files = sorted(runs_dir.glob(f"*/{name}.parquet"))
            if files:
                pattern = str(runs_dir / "*" / f"{name}.parquet").replace("'", "''")
                con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM "
                            f"read_parquet('{pattern}', union_by_name = true)")
            else:
                con.execute(f"DROP VIEW IF EXISTS {name}")

    def query(self, sql: str) -> pa.Table:
        if not self.path.exists():
            raise DcauditError(f"no catalog at {self.path} yet: run an audit first (e.g. `dcaudit run tox21`)")
        con = duckdb.connect(str(self.path), read_only=True)
        try:
            return con.sql(sql).to_arrow_table()
        except duckdb.Error as exc:
            raise DcauditError(f"query failed: {exc}") from exc
        finally:
            con.close()

    def runs(self, limit: int = 20) -> pa.Table:
        return self.query(f"SELECT run_id, spec, status, started_at, seconds, error FROM runs "
                          f"ORDER BY started_at DESC LIMIT {int(limit)}")


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)
