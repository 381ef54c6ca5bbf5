"""A DuckDB query as the table to audit: ``dcaudit audit --sql "SELECT …"``, ``[source] query = "…"`` in a
spec, or ``dcaudit.audit(dcaudit.SourceQuery("SELECT …"), …)``.

A user often holds the table to audit in pieces — predictions in one file, the truth in another — and would
otherwise write a joined file first. The query is one DuckDB ``SELECT`` (``WITH``, ``FROM``-first, ``VALUES``,
``UNION`` included) over files DuckDB reads (``'preds.parquet'``, ``read_csv('truth.csv')``, globs). Its result
is read once into an Arrow table, which then meets the same input contract as a frame from the Python API:
column names, types, ids, NaN. Its digest (the run's input sha256) is taken from those rows, so a scheduled
rerun over changed files is a new run, and an unchanged one can be reused.

What is refused before anything runs: more than one statement, and any statement but a ``SELECT`` (``COPY``,
``CREATE``, ``ATTACH``, ``SET``, …) — a query says what to read; it never writes or changes settings.
Relative file names in a spec's query are looked up in the spec file's folder (DuckDB's
``file_search_path``), as a spec's ``path`` is; on the command line, in the working directory.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pyarrow as pa

from dcaudit.claims import quote_string
from dcaudit.config import Settings
from dcaudit.engine import connect, machine_limit
from dcaudit.errors import InputError, SpecError, one_line

LABEL = "SQL query"  # how messages and the package's source column name a query's result


@dataclass(frozen=True)
class SourceQuery:
    """One DuckDB ``SELECT`` whose result is the table to audit.

    ``sql``: the query; ``base_dir``: where its relative file names are looked up (a spec's folder; None: the
    working directory); ``origin``: how messages name where it was written (``--sql``, ``[source] query``)."""

    sql: str
    base_dir: Path | None = None
    origin: str = "query"

    def __post_init__(self) -> None:
        check_query(self)


def check_query(query: SourceQuery) -> None:
    """A SpecError unless ``query.sql`` is exactly one ``SELECT`` statement that DuckDB parses."""
    where = query.origin
    if not isinstance(query.sql, str) or not query.sql.strip():
        raise SpecError(f"{where}: the query is empty; give one SELECT statement, e.g. "
                        "\"SELECT * FROM 'preds.parquet' JOIN 'truth.csv' USING (id)\"")
    try:
        statements = duckdb.extract_statements(query.sql)
    except duckdb.Error as exc:
        raise SpecError(f"{where}: the query does not parse: {_message(exc)}") from None
    if len(statements) != 1:
        raise SpecError(f"{where}: the query holds {len(statements)} statements; give one SELECT "
                        "(a WITH clause can hold the steps before it)")
    kind = statements[0].type
    if kind != duckdb.StatementType.SELECT:
        name = str(kind).rsplit(".", 1)[-1]
        extra = " (write PIVOT inside a SELECT: SELECT * FROM (PIVOT …))" if name == "MULTI" else ""
        article = "an" if name[:1] in "AEIOU" else "a"
        raise SpecError(f"{where}: the query is {article} {name} statement; give one SELECT — a query only reads, it "
                        f"never writes files, tables or settings{extra}")


@dataclass(frozen=True)
class QueryResult:
    table: pa.Table
    ordered: bool  # the query ends in ORDER BY: its row order (the default ids) is the query's to fix


def query_table(query: SourceQuery, settings: Settings) -> QueryResult:
    """The query's result as Arrow, in the query's row order (which numbers the rows when no id is given).

    It runs on a database of its own with the run's memory limit, threads and spill directory; a failure of
    the query (a missing file or column, a type error) is an InputError naming where the query was written,
    with DuckDB's reason."""
    con = connect(settings)
    try:
        # Row numbers and the digest follow the result order: keep it as the query gives it.
        con.execute("SET preserve_insertion_order = true")
        if query.base_dir is not None:
            con.execute(f"SET file_search_path = {quote_string(str(query.base_dir))}")
        table = con.sql(query.sql).to_arrow_table()
        return QueryResult(table, _ends_in_order_by(con, query.sql))
    except duckdb.Error as exc:
        if machine_limit(exc):
            raise
        raise InputError(f"{query.origin}: the query failed: {_message(exc)}") from None
    finally:
        con.close()


def _ends_in_order_by(con: duckdb.DuckDBPyConnection, sql: str) -> bool:
    """Whether the query's outermost SELECT (or set operation) has an ORDER BY, from DuckDB's own parse."""
    try:
        tree = json.loads(con.execute("SELECT json_serialize_sql(?)", [sql]).fetchall()[0][0])
        node = tree["statements"][0]["node"]
        return any(m.get("type") == "ORDER_MODIFIER" for m in node.get("modifiers", []))
    except (duckdb.Error, KeyError, IndexError, TypeError, ValueError):  # a form it cannot serialise: not known
        return False


def _message(exc: BaseException) -> str:
    """DuckDB's reason in one line, without its 'Parser Error:' style prefix."""
    text = one_line(exc)
    for prefix in ("Parser Error: ", "Binder Error: ", "Catalog Error: ", "IO Error: ", "Conversion Error: ",
                   "Invalid Input Error: ", "Not implemented Error: "):
        if text.startswith(prefix):
            return text[len(prefix):]
    return text
