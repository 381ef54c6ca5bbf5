"""The DuckDB connection every audit runs on: memory limit, spill directory, threads."""

from __future__ import annotations

import duckdb

from dcaudit.config import Settings


def connect(settings: Settings, database: str = ":memory:") -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB that spills to ``$DCAUDIT_HOME/tmp`` beyond ``memory_limit``."""
    settings.temp_dir.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(database)
    con.execute(f"SET memory_limit = '{_safe(settings.memory_limit)}'")
    con.execute(f"SET temp_directory = '{_safe(str(settings.temp_dir))}'")
    # Insertion order is part of no result here; dropping it lets DuckDB stream and spill.
    con.execute("SET preserve_insertion_order = false")
    # Audits over thousands of evidence columns build expressions that deep (one term per column).
    con.execute("SET max_expression_depth = 100000")
    con.execute("SET enable_progress_bar = false")  # progress is ours to show (stderr), not DuckDB's
    if settings.threads:
        con.execute(f"SET threads = {int(settings.threads)}")
    return con


def _safe(text: str) -> str:
    """Settings are pasted into SET statements, which take no parameters: refuse quotes."""
    if "'" in text or ";" in text:
        raise ValueError(f"invalid setting value {text!r}")
    return text
