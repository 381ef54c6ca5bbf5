"""Any table a user brings: CSV, CSV.gz or Parquet, loaded into DuckDB as a view.

Nothing is normalised or dropped here; the audits report missing values as excluded candidates.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from dcaudit.connectors.base import sha256_file
from dcaudit.errors import InputError

SUFFIXES = (".csv", ".csv.gz", ".tsv", ".parquet", ".pq")


ROW_ID = "__row"


def register_file(con: duckdb.DuckDBPyConnection, path: Path, view: str, *, row_id: bool = False) -> list[str]:
    """Create ``view`` over the file; return its column names. Errors name the file.

    With ``row_id`` the file is loaded in order and ``__row`` (1-based data row) is added as the
    candidate id for tables that have no id column of their own.
    """
    path = check_file(path)
    name = path.name.lower()
    quoted = str(path).replace("'", "''")
    if name.endswith((".parquet", ".pq")):
        reader = f"read_parquet('{quoted}')"
    elif name.endswith((".csv", ".csv.gz", ".tsv", ".txt")):
        reader = f"read_csv('{quoted}', header = true)"
    else:
        raise InputError(f"unknown file type; use one of {', '.join(SUFFIXES)}", file=str(path))
    try:
        if row_id:
            # rowid follows insertion order only while DuckDB preserves it; keep it for this load.
            con.execute("SET preserve_insertion_order = true")
            con.execute(f"CREATE OR REPLACE TABLE {view}_rows AS SELECT * FROM {reader}")
            con.execute("SET preserve_insertion_order = false")
            con.execute(f"CREATE OR REPLACE VIEW {view} AS SELECT rowid + 1 AS {ROW_ID}, * FROM {view}_rows")
        else:
            con.execute(f"CREATE OR REPLACE VIEW {view} AS SELECT * FROM {reader}")
        columns = [r[0] for r in con.execute(f"DESCRIBE {view}").fetchall()]
        n = con.execute(f"SELECT count(*) FROM {view}").fetchall()[0][0]
    except duckdb.Error as exc:
        raise InputError(f"cannot read: {exc}", file=str(path)) from exc
    if n == 0:
        raise InputError("file has no data rows", file=str(path))
    return columns


def check_file(path: Path) -> Path:
    """The file exists, is a file and is not empty — or an InputError naming it."""
    path = Path(path)
    if not path.exists():
        raise InputError("file not found", file=str(path))
    if path.is_dir():
        raise InputError("is a directory; give a CSV, CSV.gz or Parquet file", file=str(path))
    if path.stat().st_size == 0:
        raise InputError("file is empty", file=str(path))
    return path


def input_hash(path: Path) -> dict[str, str]:
    return {Path(path).name: sha256_file(check_file(path))}
