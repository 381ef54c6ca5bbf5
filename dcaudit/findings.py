"""Findings: what a connector found wrong with its inputs, as rows of one table for every source.

A finding is never a reason to drop data silently: the row it names is kept (or left out of the
audit table *and* listed here). Every connector returns its findings in this one schema, the runner
writes them to ``findings.parquet`` in the evidence package, and the catalog has a ``findings`` view:

==============  ========  ===============================================================================
column          type      meaning
==============  ========  ===============================================================================
source          string    the dataset (``tox21``, ``jarvis``, …), as in the package's other tables
file            string    the input file the finding is about (a path, or a label such as
                          ``contributions/<model>/<file>``); NULL when it is about no single file
row             int64     1-based data row in that file (NULL when the finding is about a whole file)
column          string    the column (or JSON key / sheet column) concerned
kind            string    a short snake_case name of the problem (the kinds are listed in docs/connectors.md)
detail          string    one readable sentence: the value, what was expected, what was done about it
candidate_id    string    the candidate it concerns (mol_id, jid, mbid, material_id, image id, host), if any
==============  ========  ===============================================================================

``kind`` is the column to group by: ``select kind, count(*) from findings group by kind``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from dcaudit.storage import read_table

if TYPE_CHECKING:  # polars is imported by the functions that build frames: a plain audit never loads it
    import polars as pl

COLUMNS = ("source", "file", "row", "column", "kind", "detail", "candidate_id")
ARROW_SCHEMA = pa.schema([("source", pa.string()), ("file", pa.string()), ("row", pa.int64()),
                          ("column", pa.string()), ("kind", pa.string()), ("detail", pa.string()),
                          ("candidate_id", pa.string())])


def schema() -> dict[str, pl.DataType]:
    """The findings columns as polars types."""
    import polars as pl

    return {"source": pl.Utf8(), "file": pl.Utf8(), "row": pl.Int64(), "column": pl.Utf8(),
            "kind": pl.Utf8(), "detail": pl.Utf8(), "candidate_id": pl.Utf8()}


def empty() -> pl.DataFrame:
    """A findings frame with no rows."""
    import polars as pl

    return pl.DataFrame(schema=schema())


def from_rows(rows: Iterable[Mapping[str, object]]) -> pl.DataFrame:
    """Findings from dicts; keys outside :data:`COLUMNS` are an error, missing keys are NULL."""
    rows = list(rows)
    for r in rows:
        extra = set(r) - set(COLUMNS)
        if extra:
            raise ValueError(f"not findings columns: {sorted(extra)} (the schema is {', '.join(COLUMNS)})")
    import polars as pl

    return pl.DataFrame([{c: r.get(c) for c in COLUMNS} for r in rows], schema=schema())


def conform(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` in the findings schema: the columns in order and type, absent ones NULL, others an error."""
    import polars as pl

    extra = [c for c in frame.columns if c not in COLUMNS]
    if extra:
        raise ValueError(f"not findings columns: {extra} (the schema is {', '.join(COLUMNS)})")
    return frame.select([pl.col(c).cast(t) if c in frame.columns else pl.lit(None, t).alias(c)
                         for c, t in schema().items()])


def concat(frames: Iterable[pl.DataFrame]) -> pl.DataFrame:
    """Stack findings frames (each conformed first), sorted by source, file, row, kind."""
    import polars as pl

    parts = [conform(f) for f in frames]
    if not parts:
        return empty()
    return pl.concat(parts).sort("source", "file", "row", "kind", "candidate_id", nulls_last=True,
                                 maintain_order=True)


def kind(issue: pl.Expr, names: Mapping[str, str] | None = None) -> pl.Expr:
    """A finding kind from a readable issue text: ``names`` where it lists the text, else a snake_case slug."""
    import polars as pl

    slug = issue.str.to_lowercase().str.replace_all(r"[^a-z0-9]+", "_").str.strip_chars("_")
    if not names:
        return slug
    return pl.when(issue.is_in(list(names))).then(issue.replace_strict(names, default=None,
                                                                        return_dtype=pl.Utf8)).otherwise(slug)


def to_arrow(frame: pl.DataFrame) -> pa.Table:
    return conform(frame).to_arrow().cast(ARROW_SCHEMA)


def conform_arrow(table: pa.Table) -> pa.Table:
    """An Arrow table of findings columns in the schema (absent columns NULL, others an error), without polars."""
    extra = [c for c in table.column_names if c not in COLUMNS]
    if extra:
        raise ValueError(f"not findings columns: {extra} (the schema is {', '.join(COLUMNS)})")
    # pa.nulls / from_arrays, not Schema.empty_table() or a cast of an empty column: those import pandas
    columns = [table.column(f.name) if f.name in table.column_names else pa.nulls(table.num_rows, f.type)
               for f in ARROW_SCHEMA]
    return pa.Table.from_arrays([c if c.type == f.type else c.cast(f.type) for c, f in zip(columns, ARROW_SCHEMA,
                                                                                         strict=True)],
                                schema=ARROW_SCHEMA)


def read(path: Path | None) -> pa.Table:
    """A findings Parquet file as Arrow in the schema (no rows when ``path`` is None)."""
    if path is None:
        return conform_arrow(pa.Table.from_arrays([], names=[]))
    table = read_table(path).select(list(COLUMNS))
    # a cast loads pyarrow.compute (~0.1 s): only when the file's types differ from the schema's
    return table if table.schema.equals(ARROW_SCHEMA, check_metadata=False) else table.cast(ARROW_SCHEMA)


def counts(table: pa.Table | pl.DataFrame) -> list[tuple[str, int]]:
    """(kind, number of findings) for every kind present, most frequent first, then by name."""
    # a Counter over the kind column: the console line after every run would otherwise import polars
    # (and through it pandas, ~0.5 s) to count a few rows
    kinds = table["kind"].to_list() if not isinstance(table, pa.Table) else table.column("kind").to_pylist()
    found = Counter(str(k) for k in kinds)
    return sorted(found.items(), key=lambda item: (-item[1], item[0]))


def describe(table: pa.Table | pl.DataFrame) -> str:
    """``findings: 12 invalid_smiles, 3 duplicate_id`` (or ``findings: none``)."""
    found = counts(table)
    return "findings: " + (", ".join(f"{n} {k}" for k, n in found) if found else "none")
