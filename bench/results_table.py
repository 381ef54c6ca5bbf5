"""Append benchmark rows to bench/results/latest.parquet (read, concat, atomic replace).

Columns: benchmark, engine, n_rows, seconds, peak_rss_mb, ratio_vs_pandas (null where no pandas run),
machine, version, recorded_at. Benchmarks print their figures and call ``append_results``.
"""

from __future__ import annotations

import fcntl
import os
import platform
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

RESULTS = Path(__file__).resolve().parent / "results" / "latest.parquet"
SCHEMA = pa.schema([
    ("benchmark", pa.string()), ("engine", pa.string()), ("n_rows", pa.int64()), ("seconds", pa.float64()),
    ("peak_rss_mb", pa.float64()), ("ratio_vs_pandas", pa.float64()), ("machine", pa.string()),
    ("version", pa.string()), ("recorded_at", pa.timestamp("s")),
    # the 1-minute load average when the measurement started (the machine may be shared), and what
    # else the benchmark reports (memory limit, result checks) as JSON; null in older rows
    ("load_avg", pa.float64()), ("settings", pa.string()),
])


def machine() -> str:
    return f"{platform.machine()} {os.cpu_count()} cores {platform.python_version()}"


def append_results(rows: list[dict]) -> Path:
    import dcaudit

    now = datetime.now(UTC).replace(tzinfo=None, microsecond=0)
    full = [{"machine": machine(), "version": dcaudit.__version__, "recorded_at": now, "ratio_vs_pandas": None,
             "peak_rss_mb": None, "load_avg": None, "settings": None, **r} for r in rows]
    new = pa.Table.from_pylist(full, schema=SCHEMA)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with open(RESULTS.with_suffix(".lock"), "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        table = pa.concat_tables([_conform(pq.read_table(RESULTS)), new]) if RESULTS.exists() else new
        tmp = RESULTS.with_name(f".{RESULTS.name}.{os.getpid()}")
        pq.write_table(table, tmp)
        os.replace(tmp, RESULTS)
    return RESULTS


def _conform(table: pa.Table) -> pa.Table:
    """Older files lack later columns: add them as nulls, then cast to SCHEMA."""
    for field in SCHEMA:
        if field.name not in table.column_names:
            table = table.append_column(field.name, pa.nulls(table.num_rows, field.type))
    return table.select(SCHEMA.names).cast(SCHEMA)


def peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
