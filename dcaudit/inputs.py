"""The input contract: every table an audit reads — a user's file, a frame from a notebook, a connector's
Parquet — enters DuckDB through :func:`register_input`, and the checks here run before any audit.

What the contract guarantees (docs/inputs.md says it for users):

* the data is readable: a ragged CSV line, a bad encoding, a truncated gzip or a corrupt Parquet file is a
  one-line :class:`~dcaudit.errors.InputError` naming the file (and, for CSV, the line);
* column names are unique (an error names the name and both positions) — DuckDB and polars would
  silently rename the second one;
* a CSV is read once, into a typed Arrow table, with ``__row`` = its 1-based data row, so later
  checks can name the first offending row, and a table without an id column has one;
* numeric rules (quantile/width bins, windows, tolerances) get numeric columns: otherwise the error names
  the column, the first offending row and its value, and says so when it looks like a decimal comma;
* a duration is an INTERVAL from a Parquet file or glob as from a frame (DuckDB reads Parquet's as bare counts),
  and values DuckDB cannot hold — a glob's dates beyond the finer unit a merge reads them as, say — are refused
  by name when an audit reads them;
* candidate ids are neither NULL nor repeated (:func:`check_ids`), unless the user asks to keep duplicates;
  then they are reported as findings, with disagreeing duplicates marked as such.

The view an input is registered under is named after the input itself (its path, or "polars DataFrame"),
so that any message DuckDB produces about it names the user's data, not an internal view.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import gzip
import hashlib
import io
import os
import re
import threading
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import duckdb
import pyarrow as pa

from dcaudit.claims import check_columns, quote_identifier, quote_string, value_kind
from dcaudit.engine import machine_limit
from dcaudit.errors import ClaimError, InputError, SpecError, one_line
from dcaudit.storage import _not_a_file, sha256_file

if TYPE_CHECKING:   # numpy is imported where a check needs it (start-up time)
    import numpy as np

ROW = "__row"  # the 1-based data row of every registered input; the candidate id when there is no id column
CSV_SUFFIXES = (".csv", ".csv.gz", ".tsv", ".tsv.gz", ".txt")
PARQUET_SUFFIXES = (".parquet", ".pq")
SUFFIXES = CSV_SUFFIXES + PARQUET_SUFFIXES
Duplicates = Literal["error", "keep"]


@dataclass(frozen=True)
class RegisteredInput:
    """An input as DuckDB sees it: the (quoted) view, the user's name for it, its columns and their types."""

    view: str                      # quoted identifier, usable in SQL as is
    label: str                     # the user's term: the file path, or e.g. "polars DataFrame"
    columns: tuple[str, ...]       # the user's columns, in order (without ``__row``)
    types: Mapping[str, str] = field(default_factory=dict)  # column -> DuckDB type
    n_rows: int = 0
    has_row: bool = True           # False for Parquet globs (no single data-row numbering)


def view_name(label: str) -> str:
    """The quoted DuckDB view for an input: named after the input, so DuckDB's own messages name it too."""
    return quote_identifier(label)


def label_of(relation: str) -> str:
    """The user's name of a relation registered by :func:`register_input` (its view name unquoted)."""
    if relation.startswith('"') and relation.endswith('"'):
        return relation[1:-1].replace('""', '"')
    return relation


def check_file(path: Path) -> Path:
    """The file exists, is a readable regular file and is not empty — or an InputError naming it.

    What is there but is no file is named as :func:`dcaudit.storage.regular_file` names it (one helper, one
    wording): a symbolic link to nothing says where it points (not "file not found": the name is there), a
    link that loops says so, and a parent that is a file is named (``data.csv/x.csv``)."""
    path = Path(path)
    try:
        found = _not_a_file(path)
    except OSError as exc:   # a parent folder that cannot be searched (permission), a name too long
        raise InputError(f"cannot be read ({exc.strerror or exc})", file=str(path)) from None
    if found is not None:
        culprit, problem = found
        if problem.startswith("is a directory"):
            raise InputError("is a directory; give a CSV, CSV.gz, TSV or Parquet file", file=str(path))
        if problem.startswith("is not a regular file"):  # a FIFO, socket or device: read more than once here
            raise InputError("is not a regular file (a pipe or a device); save the data to a file first",
                             file=str(path))
        raise InputError(problem, file=str(path))
    if not path.is_file():
        raise InputError("file not found", file=str(path))
    if not os.access(path, os.R_OK):   # else each reader words it its own way ("not a readable Parquet file")
        raise InputError("cannot be read: permission denied", file=str(path))
    if path.stat().st_size == 0:
        raise InputError("file is empty", file=str(path))
    return path


def _ascii_lower(name: str) -> str:
    return "".join(c.lower() if c.isascii() else c for c in name)


def check_unique_columns(names: list[str] | tuple[str, ...], label: str) -> None:
    """An InputError for two columns with one name — or with names that differ only in ASCII case (DuckDB, which
    runs every audit, resolves column names so and would rename the second ``a_1``; ``é`` and ``É`` it tells
    apart) or only in surrounding spaces (``e`` and ``e ``: a name option would take the one for the other) —
    and for a column named like the row numbers every input gets (:data:`ROW`)."""
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        if "\x00" in name:   # no file format or SQL name holds one (polars' export panics on it)
            raise InputError(f"column name {name!r} (position {i + 1}) holds a NUL character; rename the column",
                             file=label)
        key = _ascii_lower(name.strip())
        if _ascii_lower(name) == ROW:
            raise InputError(f"column name {name!r} (position {i + 1}) is dcaudit's own: it numbers the rows of "
                             "every input; rename the column", file=label)
        if key in seen:
            first = names[seen[key]]
            what = (f"duplicate column name {name!r}" if first == name else
                    f"column names {first!r} and {name!r} differ only in case (DuckDB does not tell them apart)"
                    if _ascii_lower(first) == _ascii_lower(name) else
                    f"column names {first!r} and {name!r} differ only in surrounding spaces (a name option would "
                    "take one for the other)")
            raise InputError(f"{what} at positions {seen[key] + 1} and {i + 1}; rename one of them", file=label)
        seen[key] = i


# ------------------------------------------------------------------------------------------------------------
# Registration.

def register_input(con: duckdb.DuckDBPyConnection, data: object, *, label: str | None = None,
                   text_columns: tuple[str, ...] = ()) -> RegisteredInput:
    """Register ``data`` in ``con`` as a view named after it; see the module docstring for what is checked.

    ``data``: a path (CSV, CSV.gz, TSV, Parquet, or a Parquet glob), a polars DataFrame or LazyFrame, a
    pandas DataFrame, a pyarrow Table, RecordBatchReader or Dataset, or a DuckDB relation.
    """
    if isinstance(data, str | Path):
        return _register_path(con, Path(data), label, text_columns)
    table, kind = as_arrow(data)
    name = label or kind
    if isinstance(table, pa.Table):
        check_unique_columns(table.column_names, name)
        table, refused = _duckdb_readable(_pandas_values_as_text(table), name)
        table = table.append_column(ROW, _row_numbers(table.num_rows))
    else:  # a pyarrow Dataset: scanned by DuckDB, never read whole here, so nothing can be widened
        check_unique_columns(table.schema.names, name)
        for f in table.schema:
            why = _field_refusal(f) or (("half floats or 256-bit decimals, which DuckDB cannot read; cast the "
                                        "column, or pass the dataset's table (.to_table())", "")
                                       if _scannable(f.type) != f.type else None)
            if why is not None:
                raise InputError(why[0], file=name, column=f.name)
        refused = _dataset_value_refusals(table)
    view = view_name(name)
    con.register(f"_arrow_{_safe(name)}", table)
    select = refusing_view(f"SELECT * FROM {quote_identifier(f'_arrow_{_safe(name)}')}", refused, name)
    con.execute(f"CREATE OR REPLACE TEMP VIEW {view} AS {_ordered_as_enum(select, table)}")
    return _described(con, view, name, has_row=isinstance(table, pa.Table))


def _ordered_as_enum(select: str, table: pa.Table | object) -> str:
    """``select`` with each column of ordered text categories (an ordered pandas Categorical, a polars Enum)
    as a DuckDB ENUM of its categories, in their order: DuckDB reads such a column as plain text, so a claim's
    ``grade > 'low'`` would follow alphabetical order ('high' < 'low'); over the ENUM the claim compiler
    compares in category order (:func:`dcaudit.claims.claim_sql`). Only an in-memory table has the
    categories at hand (each chunk's dictionary); chunks with different dictionaries keep the text."""
    if not isinstance(table, pa.Table):
        return select
    enums = []
    for f in table.schema:
        if not (pa.types.is_dictionary(f.type) and f.type.ordered
                and (pa.types.is_string(f.type.value_type) or pa.types.is_large_string(f.type.value_type))):
            continue
        chunks = table.column(f.name).chunks
        categories = chunks[0].dictionary if chunks else pa.array([], pa.string())
        if not all(c.dictionary.equals(categories) for c in chunks[1:]) or categories.null_count:
            continue
        values = categories.to_pylist()
        if not values or len(set(values)) != len(values):   # DuckDB refuses an empty or repeated ENUM
            continue
        enum = "ENUM(" + ", ".join(quote_string(v) for v in values) + ")"
        enums.append(f"CAST({quote_identifier(f.name)} AS {enum}) AS {quote_identifier(f.name)}")
    return f"SELECT * REPLACE ({', '.join(enums)}) FROM ({select})" if enums else select


def _duckdb_readable(table: pa.Table, label: str) -> tuple[pa.Table, dict[str, tuple[str, str]]]:
    """``table`` with every column DuckDB reads as the same values, and the columns it cannot (column ->
    (why, the DuckDB type its view declares)).

    Widened, exactly: half floats to float (DuckDB scans none, top-level or nested), 256-bit decimals of at
    most 38 digits to 128-bit ones (DuckDB scans no 256-bit decimal), second and millisecond durations to
    microsecond ones (:func:`_scannable`). Refused, only when an audit reads them
    (:func:`refusing_view`): decimals of more than 38 digits, which DuckDB cannot hold; dense unions, which
    it cannot scan; month-day-nanosecond intervals, which it compares as if a month were 30 days; durations
    finer than a microsecond anywhere in a column (in a list or a struct too), which its INTERVAL rounds
    (1 ns and 500 ns would be one value), or beyond its range (2^63 microseconds), which it cannot read;
    second and millisecond timestamps beyond its TIMESTAMP (a fatal DuckDB error). A refused column is kept
    out of DuckDB's sight altogether, so an input whose unused columns hold such types still audits."""
    refused: dict[str, tuple[str, str]] = {}
    for i, f in enumerate(table.schema):
        why = _field_refusal(f) or _duration_problem(table.column(i))
        target = _scannable(f.type, durations=True) if why is None else f.type
        if why is None and target != f.type:
            try:
                table = table.set_column(i, pa.field(f.name, target), table.column(i).cast(target))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
                why = (f"its type {f.type} holds half floats or 256-bit decimals, which DuckDB cannot read, "
                       f"and Arrow cannot widen it ({one_line(exc, 120)}); cast the column to numbers or text",
                       "VARCHAR")
        if why is not None:
            refused[f.name] = why
            table = table.set_column(i, pa.field(f.name, pa.null()), pa.nulls(table.num_rows))
    return table, refused


def _nested(t: pa.DataType) -> list[pa.DataType]:
    """The types directly inside ``t`` (list values, struct and union fields, map keys and items, dictionary
    values, run-end-encoded values, an extension's storage)."""
    if pa.types.is_struct(t) or pa.types.is_union(t):
        return [t.field(j).type for j in range(t.num_fields)]
    if pa.types.is_map(t):
        return [t.key_type, t.item_type]
    if isinstance(t, pa.ExtensionType):
        return [t.storage_type]
    inner = getattr(t, "value_type", None)   # lists of every layout, dictionaries, run-end encoded
    return [inner] if isinstance(inner, pa.DataType) else []


def _walk(t: pa.DataType) -> Iterator[pa.DataType]:
    yield t
    for inner in _nested(t):
        yield from _walk(inner)


# pandas' own extension types, as pyarrow holds them: DuckDB reads only their storage, which is not the value
# (a Period's storage is its ordinal, 600 for 2020-01 at freq M; an Interval's its two bounds without the side
# that is closed), so a frame's keys would differ from its CSV's ('600' where the CSV says '2020-01')
_PANDAS_EXTENSIONS = {
    "pandas.period": ("pandas Periods, which Arrow and Parquet store as ordinals (600 is 2020-01 at freq M) that "
                      "DuckDB would read as plain numbers; give them as text (df[col].astype(str)) or as "
                      "timestamps (df[col].dt.to_timestamp())"),
    "pandas.interval": ("pandas Intervals, which Arrow and Parquet store as their two bounds without the side that "
                        "is closed; give them as text (df[col].astype(str)) or as two numeric columns "
                        "(df[col].array.left, .right)"),
}


def _pandas_extension(f: pa.Field) -> str | None:
    """Which of pandas' extension types field ``f`` holds ('pandas.period', …), or None: by its type where pyarrow
    knows pandas' types (pandas is imported), else by the field's metadata, as a Parquet footer keeps it."""
    for inner in _walk(f.type):
        if isinstance(inner, pa.ExtensionType) and inner.extension_name in _PANDAS_EXTENSIONS:
            return inner.extension_name
    name = (f.metadata or {}).get(b"ARROW:extension:name", b"").decode("utf-8", "replace")
    return name if name in _PANDAS_EXTENSIONS else None


def _field_refusal(f: pa.Field) -> tuple[str, str] | None:
    """:func:`_refusal` of the field's type, or the refusal of a pandas extension type it holds."""
    kind = _pandas_extension(f)
    if kind is not None:
        return _PANDAS_EXTENSIONS[kind], "VARCHAR"
    return _refusal(f.type)


def _pandas_values_as_text(table: pa.Table) -> pa.Table:
    """``table`` with each top-level column of pandas Periods or Intervals as the text pandas writes them to a
    CSV ('2020-01', '(0, 1]'), missing values kept missing: the frame then audits as its CSV does. Only where
    the type itself is pandas' (so pandas is imported); a bare ordinal with metadata is refused instead."""
    for i, f in enumerate(table.schema):
        if isinstance(f.type, pa.ExtensionType) and f.type.extension_name in _PANDAS_EXTENSIONS:
            text = pa.array(table.column(i).to_pandas().astype("string"), pa.string())
            table = table.set_column(i, pa.field(f.name, pa.string()), text)
    return table


def _refusal(t: pa.DataType) -> tuple[str, str] | None:
    """Why DuckDB cannot hold a column of type ``t`` as the values it holds (type-level), or None."""
    for inner in _walk(t):
        if pa.types.is_decimal(inner) and inner.precision > 38:
            return (f"decimals of {inner.precision} digits, beyond the 38 DuckDB holds (it would round them to "
                    "doubles: 10^45 and 10^45 + 1 would be one value); give them as text, or as DECIMAL(38) "
                    "at most", "DOUBLE")
        if pa.types.is_union(inner) and inner.mode == "dense":
            return "a dense union, which DuckDB cannot read; give one type (numbers or text)", "VARCHAR"
        if inner == pa.month_day_nano_interval():
            return ("month-day-nanosecond intervals, which DuckDB compares as if a month were 30 days (1 month "
                    "and 30 days would be one value) and rounds to microseconds; give them as numbers "
                    "(e.g. days) or text", "INTERVAL")
    return None


def _scannable(t: pa.DataType, *, durations: bool = False) -> pa.DataType:
    """``t`` with half floats as floats and 256-bit decimals of at most 38 digits as 128-bit ones, wherever
    they are nested (both widenings are exact); with ``durations``, second and millisecond durations as
    microsecond ones (exact once :func:`_duration_problem` found them within range): DuckDB's scan multiplies
    the slots of missing values too, and pandas leaves NaT's -2^63 there ("Could not convert Interval")."""
    if pa.types.is_float16(t):
        return pa.float32()
    if pa.types.is_decimal256(t):
        return pa.decimal128(t.precision, t.scale)
    if durations and pa.types.is_duration(t) and t.unit in ("s", "ms"):
        return pa.duration("us")

    def field(f: pa.Field) -> pa.Field:
        return f.with_type(_scannable(f.type, durations=durations))

    if pa.types.is_struct(t):
        return pa.struct([field(t.field(j)) for j in range(t.num_fields)])
    if pa.types.is_map(t):
        return pa.map_(field(t.key_field), field(t.item_field), t.keys_sorted)
    if pa.types.is_fixed_size_list(t):
        return pa.list_(field(t.value_field), t.list_size)
    for is_list, make in ((pa.types.is_list, pa.list_), (pa.types.is_large_list, pa.large_list),
                          (pa.types.is_list_view, pa.list_view), (pa.types.is_large_list_view, pa.large_list_view)):
        if is_list(t):
            return make(field(t.value_field))
    if pa.types.is_dictionary(t):
        return pa.dictionary(t.index_type, _scannable(t.value_type, durations=durations), t.ordered)
    return t   # run-end encoded and extension types: left as they are (Arrow cannot cast them)


_INT64_MAX = 2**63 - 1
_MICROS_PER = {"s": 1_000_000, "ms": 1000, "us": 1}   # microseconds in one tick of a duration or timestamp unit
_SUB_MICROSECOND = ("durations finer than a microsecond, which DuckDB's INTERVAL would round (1 ns and 500 ns would "
                    "be one value); give them as numbers, e.g. nanoseconds (.dt.total_nanoseconds() in polars, "
                    ".dt.value in pandas)", "INTERVAL")
_BEYOND_INTERVAL = ("durations longer than DuckDB's INTERVAL holds (2^63 microseconds, about 292,000 years), which it "
                    "cannot read; give them as numbers, e.g. seconds (.dt.total_seconds())", "INTERVAL")
_BEYOND_TIMESTAMP = ("times beyond what DuckDB's TIMESTAMP holds (290309 BC to 294247 AD: microseconds in 64 bits), "
                     "which it cannot read or compare as times; give them as numbers (e.g. milliseconds since 1970) "
                     "or text", "TIMESTAMP")


def _duration_problem(column: pa.ChunkedArray) -> tuple[str, str] | None:
    """Why DuckDB cannot read the durations or timestamps anywhere in ``column`` (top level, or inside lists,
    structs, maps, dictionaries) as the values they are, or None: a nanosecond duration that is no whole
    number of microseconds (its INTERVAL would round it); a second or millisecond duration or timestamp beyond
    2^63 microseconds (DuckDB's conversion fails, for a timestamp with a fatal error that ends the database).
    The same rules as for Parquet files (:func:`_intervals_view`, :func:`_overflowing_times`)."""
    import numpy as np

    if not _value_checked(column.type):
        return None
    for chunk in column.chunks:
        for leaf in _leaves(chunk, _coarse):
            values = _valid_ticks(leaf)
            if not len(values):
                continue
            unit = leaf.type.unit
            if unit == "ns" and bool((values % 1000 != 0).any()):
                return _SUB_MICROSECOND
            if unit in ("s", "ms") and bool((np.abs(values) > _INT64_MAX // _MICROS_PER[unit]).any()):
                return _BEYOND_INTERVAL if pa.types.is_duration(leaf.type) else _BEYOND_TIMESTAMP
    return None


def _coarse(t: pa.DataType) -> bool:
    """Whether values of type ``t`` (not nested) need :func:`_duration_problem`'s check: durations, and second or
    millisecond timestamps."""
    return pa.types.is_duration(t) or (pa.types.is_timestamp(t) and t.unit in ("s", "ms"))


def _value_checked(t: pa.DataType) -> bool:
    """Whether a column of type ``t`` holds such values anywhere (top level, or nested)."""
    return any(_coarse(x) for x in _walk(t))


def _dataset_value_refusals(dataset: object) -> dict[str, tuple[str, str]]:
    """:func:`_duration_problem` for a pyarrow Dataset (column -> why): it is scanned by DuckDB, not read here,
    so only the columns that need the check are read, a batch at a time. Unchecked, 1 ns and 500 ns were one
    interval, and a millisecond timestamp beyond TIMESTAMP ended the database with a fatal error."""
    refused: dict[str, tuple[str, str]] = {}
    schema: pa.Schema = dataset.schema  # type: ignore[attr-defined]
    for f in schema:
        if not _value_checked(f.type):
            continue
        for batch in dataset.to_batches(columns=[f.name]):  # type: ignore[attr-defined]
            why = _duration_problem(pa.chunked_array([batch.column(0)], f.type))
            if why is not None:
                refused[f.name] = why
                break
    return refused


def _leaves(arr: pa.Array, keep: Callable[[pa.DataType], bool]) -> Iterator[pa.Array]:
    """The arrays of a type ``keep`` takes anywhere in ``arr`` (top level, or nested)."""
    t = arr.type
    if keep(t):
        yield arr
    elif pa.types.is_dictionary(t):
        yield from _leaves(arr.dictionary, keep)
    elif pa.types.is_struct(t):
        for child in arr.flatten():
            yield from _leaves(child, keep)
    elif pa.types.is_map(t):
        yield from _leaves(arr.keys, keep)
        yield from _leaves(arr.items, keep)
    elif pa.types.is_union(t):
        for j in range(t.num_fields):
            yield from _leaves(arr.field(j), keep)
    elif isinstance(t, pa.ExtensionType):
        yield from _leaves(arr.storage, keep)
    elif pa.types.is_run_end_encoded(t):
        yield from _leaves(arr.values, keep)
    elif hasattr(arr, "flatten"):   # lists of every layout
        yield from _leaves(arr.flatten(), keep)


def _intervals_view(select: str, units: Mapping[str, str], label: str) -> str:
    """``select`` (of Parquet files) with each top-level duration column (column -> its unit) as the INTERVAL a
    frame's duration is in DuckDB: DuckDB reads a Parquet duration as a bare count of its unit (1 s as the number
    1, where the same frame gives 00:00:01). Exactly as the Arrow scan converts it; a value it could not hold
    (:func:`_duration_problem`'s reasons) raises, through ``error()``, when a query reads it."""
    if not units:
        return select

    def refusal(why: tuple[str, str], column: str) -> str:
        text = _REFUSED + str(InputError(why[0], file=label, column=column)) + _REFUSED_END
        return f"CAST(error({quote_string(text)}) AS INTERVAL)"

    parts = []
    for column, unit in units.items():
        q = quote_identifier(column)
        if unit == "ns":
            converted = f"CASE WHEN {q} % 1000 <> 0 THEN {refusal(_SUB_MICROSECOND, column)} " \
                        f"ELSE to_microseconds({q} // 1000) END"
        elif unit == "us":
            converted = f"to_microseconds({q})"
        else:
            most = _INT64_MAX // _MICROS_PER[unit]
            converted = f"CASE WHEN {q} NOT BETWEEN -{most} AND {most} THEN {refusal(_BEYOND_INTERVAL, column)} " \
                        f"ELSE to_microseconds({q} * {_MICROS_PER[unit]}) END"
        parts.append(f"{converted} AS {q}")
    return f"SELECT * REPLACE ({', '.join(parts)}) FROM ({select})"


# mark DuckDB's error() text as an InputError of ours: where a stage words DuckDB's error in its own
# message, the refusal is still found, and told alone
_REFUSED, _REFUSED_END = "dcaudit refused column: ", " <<end>>"


def refusing_view(select: str, refused: Mapping[str, tuple[str, str]], label: str) -> str:
    """``select`` with each refused column replaced by an ``error()`` that DuckDB raises only when a query reads
    the column (projection pushdown leaves it unread otherwise): an input's unused columns never stop it,
    and a used one stops the audit with the reason (:func:`refused_column_error`)."""
    if not refused:
        return select
    return f"SELECT * REPLACE ({_refusals(refused, label)}) FROM ({select})"


def _refusals(refused: Mapping[str, tuple[str, str]], label: str) -> str:
    """The ``REPLACE`` list of :func:`refusing_view`. Put right on a ``read_parquet`` (not on a query of it), it
    keeps DuckDB from binding the column at all: it converts a column's statistics when a query above the scan
    binds it, and a millisecond timestamp beyond its TIMESTAMP then stops every query, even of other columns."""
    return ", ".join(
        f"CAST(error({quote_string(_REFUSED + str(InputError(why, file=label, column=column)) + _REFUSED_END)})"
        f" AS {duck}) "
        f"AS {quote_identifier(column)}" for column, (why, duck) in refused.items())


def refused_column_error(exc: BaseException) -> InputError | None:
    """The InputError a refused column's ``error()`` carries (see :func:`refusing_view`), else None."""
    text = str(exc)
    if _REFUSED not in text:
        return None
    return InputError(text.split(_REFUSED, 1)[1].split(_REFUSED_END, 1)[0])


def input_digests(data: object, label: str | None = None) -> dict[str, str]:
    """Input name -> sha256 of ``data`` without registering it: a file's bytes, or a frame's Arrow stream."""
    if isinstance(data, str | Path):
        path = Path(data)
        if is_glob(path):
            files = glob_files(path)
            names = [f.name for f in files]
            # a file's name, or its path where two files of the glob share a name (data/*/part.parquet)
            return {(f.name if names.count(f.name) == 1 else str(f)): sha256_file(f) for f in files}
        return {path.name: sha256_file(check_file(path))}
    table, kind = as_arrow(data)
    if not isinstance(table, pa.Table):
        return {label or kind: hashlib.sha256(str(table.schema).encode()).hexdigest()}
    return {label or kind: _arrow_sha256(table)}


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name)[:60] + "_" + hashlib.sha256(name.encode()).hexdigest()[:8]


_POLARS_EXPORT = threading.Lock()


def as_arrow(data: object) -> tuple[pa.Table, str]:
    """Any frame-like object as Arrow (zero-copy where the library allows) and what to call it. A run converts
    a frame once (:func:`dcaudit.pipelines.runner.prepare_source`): its digest and its audit then see the same
    rows, and a polars LazyFrame is collected once, not per use."""
    module = type(data).__module__.split(".")[0]
    kind = type(data).__name__
    if isinstance(data, pa.Table):
        return data, "Arrow table"
    if isinstance(data, pa.RecordBatch):
        return pa.Table.from_batches([data]), "Arrow record batch"
    if isinstance(data, pa.RecordBatchReader):
        return data.read_all(), "Arrow record batch reader"
    if module == "pyarrow" and kind.endswith("Dataset"):
        return data, "Arrow dataset"
    if module == "polars" and kind in ("LazyFrame", "DataFrame"):
        what = f"polars {kind}"
        polars_frame: Any = data  # a polars frame, not imported here
        try:
            frame = polars_frame.collect() if kind == "LazyFrame" else polars_frame
        except Exception as exc:  # noqa: BLE001 - the user's query failed: polars' own message, one line
            raise InputError(f"the LazyFrame could not be collected: {one_line(exc, 200)}", file=what) from None
        # One export at a time: polars (2.1) can deadlock when threads ask one frame for its schema and its
        # Arrow export at once (each holds the GIL or the frame's lock while it waits for the other) — a
        # notebook auditing one frame from a thread pool would hang.
        with _POLARS_EXPORT:
            check_unique_columns(list(frame.columns), what)   # a NUL in a name panics polars' Arrow export
            objects = [n for n, t in frame.schema.items() if str(t) == "Object"]
            if objects:  # Python objects: to_arrow would hand over their addresses
                raise InputError("a polars Object column holds Python objects, which cannot be compared as values; "
                                 "cast it to numbers or text", file=what, column=objects[0])
            try:
                return frame.to_arrow(), what
            except Exception as exc:  # noqa: BLE001 - polars' or pyarrow's export error: find the column
                raise _polars_column_problem(frame, exc, what) from None
    if module == "pandas" and kind == "DataFrame":
        levels = getattr(data.columns, "nlevels", 1)  # type: ignore[attr-defined]
        if levels > 1:  # ('x', 'a') would become the column "('x', 'a')", a name nobody would write
            raise InputError(f"the frame's columns have {levels} levels (a MultiIndex); flatten them first, e.g. "
                             "df.columns = ['_'.join(map(str, c)) for c in df.columns]", file="pandas DataFrame")
        names = [str(c) for c in data.columns]  # type: ignore[attr-defined]
        check_unique_columns(names, "pandas DataFrame")
        try:
            table = pa.Table.from_pandas(data, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError,
                OverflowError) as exc:   # OverflowError: Python integers beyond 64 bits in an object column
            raise _pandas_column_problem(data, names, exc) from None
        return _sets_sorted(data, names, table), "pandas DataFrame"
    if module in {"duckdb", "_duckdb"} and hasattr(data, "to_arrow_table"):
        return _converted(data.to_arrow_table, "DuckDB relation"), "DuckDB relation"
    raise SpecError(f"cannot audit a {module}.{kind}: give a path (CSV, Parquet), a polars, pandas or Arrow "
                    "table, or a DuckDB relation")


def _converted(convert: Callable[[], pa.Table], what: str) -> pa.Table:
    """``convert()`` (a frame's or relation's export to Arrow), its failure an InputError in one line."""
    try:
        return convert()
    except Exception as exc:  # noqa: BLE001 - any library's conversion error: the user's data or handle
        raise InputError(f"cannot read as an Arrow table: {one_line(exc, 200)}", file=what) from None


def _polars_column_problem(frame: Any, exc: Exception, what: str) -> InputError:
    """The first column of a polars frame that does not export to Arrow (Int128, say), found column by column
    on this error path."""
    for name, dtype in frame.schema.items():
        try:
            frame.select(name).to_arrow()
        except Exception:  # noqa: BLE001 - this column's export fails
            return InputError(f"polars cannot hand the column's type {dtype} to Arrow ({one_line(exc, 160)}); cast "
                              "it to a type Arrow holds, e.g. pl.Int64, pl.Float64 or pl.String (big integers are "
                              "kept exact as text)", file=what, column=name)
    return InputError(f"cannot read as an Arrow table: {one_line(exc, 200)}", file=what)


def _sets_sorted(frame: Any, names: list[str], table: pa.Table) -> pa.Table:
    """``table`` (the Arrow form of the pandas ``frame``) with each list column that holds Python sets as sorted
    lists: Arrow keeps a set in the order it iterates, and two equal sets of text can iterate differently (the
    order follows hash collisions and insertion), so one set would be two fiber keys. Only columns Arrow made
    lists of are looked at, so a frame without such columns pays nothing."""
    for i, f in enumerate(table.schema):
        if not (pa.types.is_list(f.type) or pa.types.is_large_list(f.type)):
            continue
        values = frame.iloc[:, names.index(f.name)]
        if values.dtype != object or not any(isinstance(v, set) for v in values):
            continue
        try:
            ordered = [sorted(v) if isinstance(v, set) else v for v in values]
        except TypeError:
            raise InputError("holds Python sets whose members cannot be sorted (None beside numbers, say), and a set "
                             "has no order of its own, so equal sets could be two values; give them as lists in the "
                             "order you mean, or as text", file="pandas DataFrame", column=f.name) from None
        table = table.set_column(i, f, pa.array(ordered, f.type))
    return table


def _pandas_column_problem(frame: object, names: list[str], exc: Exception) -> InputError:
    """The column of a pandas frame Arrow cannot hold (an object column mixing numbers and text, say),
    found column by column on this error path, with the value and what to do about it."""
    for name, column in zip(names, frame.columns, strict=True):  # type: ignore[attr-defined]
        try:
            pa.Array.from_pandas(frame[column])  # type: ignore[index]
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError,
                OverflowError) as err:
            first = one_line(err, 200)
            dtype = str(frame[column].dtype)  # type: ignore[index]
            fix = (".sparse.to_dense()" if dtype.startswith("Sparse") else
                   "two columns, df[col].real and df[col].imag (or .astype(str))" if dtype.startswith("complex") else
                   ".astype(str) (integers beyond 64 bits are kept exact as text)" if isinstance(err, OverflowError)
                   else "pd.to_numeric(df[col], errors='coerce') (text becomes missing) or .astype(str)")
            return InputError(f"Arrow cannot hold the column as one type ({first}); give it one plain type, e.g. "
                              f"{fix}", file="pandas DataFrame", column=name)
    return InputError(f"cannot read as a table ({str(exc).splitlines()[0][:200]})", file="pandas DataFrame")


class _HashSink:
    def __init__(self) -> None:
        self.h = hashlib.sha256()
        self.closed = False

    def write(self, b: bytes) -> int:
        self.h.update(b)
        return len(b)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.closed = True


def _arrow_sha256(table: pa.Table) -> str:
    """sha256 of the table's Arrow IPC stream: equal data, equal digest (a frame's input hash)."""
    sink = _HashSink()
    with pa.ipc.new_stream(pa.PythonFile(sink, mode="w"), table.schema) as writer:
        writer.write_table(table)
    return sink.h.hexdigest()


def is_glob(path: Path | str) -> bool:
    """Whether ``path`` is read as a glob: it holds ``*``, ``?`` or ``[`` (in its name or in a folder's, as DuckDB
    reads it) and is not an existing file of that very name (``run[1].parquet`` is that file)."""
    path = Path(path)
    return any(ch in str(path) for ch in "*?[") and not (path.exists() and not path.is_dir())


def glob_files(path: Path | str) -> list[Path]:
    """The files a glob matches, as DuckDB matches them (its ``glob()``), so the files checked here are the
    files ``read_parquet`` reads: Python's glob takes ``run[1]/*.parquet`` for the folder ``run[1]`` where
    DuckDB reads ``run1/``, and DuckDB also reads hidden files and ``**`` as any depth of folders."""
    try:
        with duckdb.connect() as con:
            found = [r[0] for r in con.execute("SELECT file FROM glob(?) ORDER BY file", [str(path)]).fetchall()]
    except duckdb.Error as exc:
        raise InputError(f"cannot list the glob's files: {duckdb_message(exc)}", file=str(path)) from None
    return [Path(f) for f in found]


def _register_path(con: duckdb.DuckDBPyConnection, path: Path, label: str | None,
                   text_columns: tuple[str, ...] = ()) -> RegisteredInput:
    text = str(path)
    name = label or text
    if is_glob(path):   # run[1].parquet, when it exists, is a name, not a glob
        if not path.name.lower().endswith(PARQUET_SUFFIXES):
            raise InputError("a glob must name Parquet files (e.g. data/*.parquet)", file=text)
        files = glob_files(path)
        if not files:
            raise InputError("the glob matches no file", file=text)
        refused: dict[str, tuple[str, str]] = {}
        spelled: dict[str, tuple[str, Path]] = {}   # a column name as DuckDB compares it -> (first spelling, file)
        schemas: list[tuple[Path, pa.Schema]] = []
        for f in files:  # DuckDB would rename a repeated column of any file (e, e_1)
            schema = _parquet_schema(check_file(f))
            schemas.append((f, schema))
            check_unique_columns(schema.names, str(f))
            refused = {**_refused_columns(schema), **refused}   # the first file's reason for a column stands
            for column in schema.names:   # union_by_name matches names across files without case
                first, where = spelled.setdefault(_ascii_lower(column), (column, f))
                if first != column:
                    raise InputError(f"column {column!r} of {f} and {first!r} of {where} differ only in case: DuckDB "
                                     "would read them as one column; give them one spelling", file=text)
        scan = f"read_parquet({quote_string(text)}, union_by_name = true)"
        select = f"SELECT * FROM {scan}"
        union = _union_types(con, select, schemas, text)
        # the first file's own reason for a column stands, then a merge of types that is unsafe, then rounding,
        # then times a merge (or DuckDB's reading of milliseconds) takes beyond the finer unit's range
        refused = {**_rounding_union(union, schemas), **_clashing_union(union, schemas), **refused}
        late = _overflowing_times(union, schemas, set(refused), glob=True)
        late = {**_int96_refusals(schemas, {*refused, *late}, glob=True), **late}
        units, nested = _glob_durations(union, schemas, {*refused, *late})
        refused = _declared(con, select, {**nested, **late, **refused}, text)
        _note_absent(con, name, schemas)
        view = view_name(name)
        if refused:   # on the scan itself (_refusals)
            select = f"SELECT * REPLACE ({_refusals(refused, name)}) FROM {scan}"
        _create_view(con, view, _intervals_view(select, units, name), name)
        return _described(con, view, name, has_row=False)
    path = check_file(path)
    lower = path.name.lower()
    view = view_name(name)
    if lower.endswith(PARQUET_SUFFIXES):
        schema = _parquet_schema(path)
        names = schema.names
        check_unique_columns(names, text)
        if ("file_row_number" in (n.lower() for n in names) or any(ch in text for ch in "*?[")
                or _nested_durations(schema)):
            # DuckDB numbers the rows in a column of that name and refuses a file that has one, and reads a
            # path with * ? [ as a glob, in a folder's name too (run[1].parquet would read run1.parquet, and
            # run[1]/a.parquet run1/a.parquet); durations inside a list, struct or map it reads as bare counts
            # of their unit (the view converts only top-level ones): read the file through Arrow
            # instead (the rare case; a copy in memory) and number the rows as for a CSV
            import pyarrow.parquet as pq

            table = pq.read_table(path)
            return register_input(con, table, label=name)
        scan = f"read_parquet({quote_string(str(path))}, file_row_number = true)"
        refused = _refused_columns(schema)
        late = _overflowing_times({}, [(path, schema)], set(refused), glob=False)
        late = {**_int96_refusals([(path, schema)], {*refused, *late}, glob=False), **late}
        refused = _declared(con, f"SELECT * FROM {scan}", {**late, **refused}, text)
        units = {f.name: f.type.unit for f in schema if pa.types.is_duration(f.type) and f.name not in refused}
        replace = f" REPLACE ({_refusals(refused, text)})" if refused else ""
        select = f"SELECT file_row_number + 1 AS {ROW}, * EXCLUDE (file_row_number){replace} FROM {scan}"
        _create_view(con, view, _intervals_view(select, units, text), text)
    elif lower.endswith(CSV_SUFFIXES):
        table = read_csv(path, text_columns)  # its header passed check_unique_columns
        table = table.append_column(ROW, _row_numbers(table.num_rows))
        con.register(f"_csv_{_safe(name)}", table)
        _create_view(con, view, f"SELECT * FROM {quote_identifier(f'_csv_{_safe(name)}')}", text)
    else:
        raise InputError(f"unknown file type; use one of {', '.join(SUFFIXES)}", file=text)
    return _described(con, view, name)


def _union_types(con: duckdb.DuckDBPyConnection, select: str, schemas: list[tuple[Path, pa.Schema]], label: str
                 ) -> dict[str, str]:
    """The DuckDB types ``union_by_name`` gives the columns of a glob whose files disagree on their Arrow type
    (column -> type), read from the footers by DESCRIBE; empty, and nothing asked of DuckDB, when they agree."""
    seen: dict[str, str] = {}
    differ: set[str] = set()
    for _, schema in schemas:
        for f in schema:
            if seen.setdefault(f.name, str(f.type)) != str(f.type):
                differ.add(f.name)
    if not differ:
        return {}
    return _duck_types(con, select, differ, label)


def _duck_types(con: duckdb.DuckDBPyConnection, select: str, names: Iterable[str], label: str) -> dict[str, str]:
    """The DuckDB types of the columns ``names`` of ``select`` (DESCRIBE: footers only)."""
    wanted = set(names)
    try:
        described = con.execute(f"DESCRIBE {select}").fetchall()
    except duckdb.Error as exc:
        if machine_limit(exc):
            raise
        raise InputError(f"cannot read: {duckdb_message(exc)}", file=label) from None
    return {str(r[0]): str(r[1]) for r in described if r[0] in wanted}


def _declared(con: duckdb.DuckDBPyConnection, select: str, refused: Mapping[str, tuple[str, str | None]],
              label: str) -> dict[str, tuple[str, str]]:
    """``refused`` with the type a refused column's view declares filled in where a rule left it open (None):
    the type DuckDB reads the column as, asked only then."""
    open_ = [c for c, (_, duck) in refused.items() if duck is None]
    types = _duck_types(con, select, open_, label) if open_ else {}
    return {c: (why, duck if duck is not None else types.get(c, "VARCHAR")) for c, (why, duck) in refused.items()}


def _rounding_union(union: Mapping[str, str], schemas: list[tuple[Path, pa.Schema]]) -> dict[str, tuple[str, str]]:
    """The columns of a Parquet glob that DuckDB would read as numbers other than the files hold (column ->
    (why, its DuckDB type)): where one file holds integers or decimals and another floats, ``union_by_name``
    reads the column as FLOAT or DOUBLE, and 2^53 + 1 (as a FLOAT, 2^24 + 1) becomes its neighbour — two
    candidates one fiber without a word. Integers of at most 16 bits (a FLOAT) or 32 (a DOUBLE) and decimals
    of at most 6 or 15 digits are exact, and so are 64-bit integers whose row-group statistics lie within
    ±2^24 or ±2^53 (pandas writes a chunk with a missing value as float64, the others as int64); anything else
    is refused when an audit reads the column. ``union``: :func:`_union_types` (files that agree on a column's
    type cost nothing here)."""
    out: dict[str, tuple[str, str]] = {}
    for name, duck in union.items():
        floating = re.search(r"\b(FLOAT|DOUBLE)\b", duck)
        if not floating:
            continue
        bits = 24 if floating.group(1) == "FLOAT" else 53
        for f, schema in schemas:
            if name not in schema.names:
                continue
            t = schema.field(name).type
            exact = [x for x in _walk(t) if pa.types.is_integer(x) or pa.types.is_decimal(x)]
            if not exact or any(pa.types.is_floating(x) for x in _walk(t)):
                continue
            if all(_fits_float(x, bits) for x in exact):
                continue
            if pa.types.is_integer(t) and _statistics_within(f, name, 2**bits):
                continue
            other = next((g for g, sc in schemas if name in sc.names
                          and any(pa.types.is_floating(x) for x in _walk(sc.field(name).type))), None)
            out[name] = (f"{f} holds it as {t}, {other} as floats: DuckDB reads the glob's column as {duck}, "
                         f"which rounds integers beyond 2^{bits} (two values would become one); give it one type "
                         "in every file", duck)
            break
    return out


def _clashing_union(union: Mapping[str, str], schemas: list[tuple[Path, pa.Schema]]) -> dict[str, tuple[str, str]]:
    """The columns of a Parquet glob whose files hold kinds of values that ``union_by_name`` would merge
    unsafely (column -> (why, its DuckDB type)), refused when an audit reads the column: a bool beside numbers
    (true becomes 1), text beside numbers, bools, dates or times (they become text as DuckDB writes them: 1.0
    is '1.0', no longer the text '1'), text beside bytes, times without a time zone beside times with one
    (read in the session's time zone), durations of two units or beside numbers (DuckDB reads a duration as a
    count of its unit), decimals and integers no DECIMAL(38) holds together (fractions rounded, or larger
    values unreadable), structs whose fields differ, and kinds DuckDB cannot read as one column at all
    (a list beside a number, a date beside a time). Widenings that keep every value are silent: integers of
    any widths and signs, floats of any widths, integers beside decimals that fit, string, large string and
    dictionary-encoded strings, binary of any layout, timestamps of any unit or zone, a date beside a
    timestamp, a column of nulls beside anything. Integers beside floats: :func:`_rounding_union`.

    A merge whose converted side holds no value passes: when every file holding the column as the type whose
    values would change (the numbers beside text, the bools beside numbers, the times without a zone) has it
    null in every row by its footer's statistics (pandas writes a text column empty in a chunk as float64
    nulls), nothing changes. Only footers are read, and only for such a pair."""
    out: dict[str, tuple[str, str]] = {}
    for name, duck in union.items():
        held: dict[str, tuple[pa.DataType, list[Path]]] = {}   # each distinct type -> the files holding it
        for f, schema in schemas:
            if name in schema.names:
                held.setdefault(str(schema.field(name).type), (schema.field(name).type, []))[1].append(f)
        types = list(held.values())
        for i, (ta, files_a) in enumerate(types):
            for tb, files_b in types[i + 1:]:
                why = _clash(ta, tb, duck)
                if why is None:
                    continue
                converted = _changed_kinds(ta, tb)
                if converted:   # the files whose values would change: only those that hold any
                    files_a, files_b = ([g for g in files if _kind(t) not in converted or not _all_null(g, name)]
                                        for t, files in ((ta, files_a), (tb, files_b)))
                    if not files_a or not files_b:
                        continue
                out[name] = (f"{files_a[0]} holds it as {ta}, {files_b[0]} as {tb}: {why}; give it one type in "
                             "every file", duck)
                break
            if name in out:
                break
    return out


def _changed_kinds(a: pa.DataType, b: pa.DataType) -> set[str]:
    """The kinds (:func:`_kind`) of the top-level types ``a`` and ``b`` whose values DuckDB's merge changes, where
    only one side changes (empty otherwise: both do, or the types are nested)."""
    ka, kb = _kind(a), _kind(b)
    pair = {ka, kb}
    if "text" in pair and len(pair) == 2:
        return {"text"} if "binary" in pair else pair - {"text"}
    if "bool" in pair and pair - {"bool"} <= _NUMBER_KINDS:
        return {"bool"}
    if "timestamptz" in pair and pair & {"date", "timestamp"}:
        return pair - {"timestamptz"}
    durations = {k for k in pair if k.startswith("duration[")}
    if durations and pair - durations <= _NUMBER_KINDS:
        return pair   # a duration is read as its count, in one file as in a glob: with either side empty, no change
    return set()


def _all_null(path: Path, column: str) -> bool:
    """Whether the footer of a Parquet file shows its top-level ``column`` null in every row (False when a row
    group has no statistics, or the column is nested)."""
    import pyarrow.parquet as pq

    try:
        meta = pq.read_metadata(path)
        index = next(i for i in range(meta.num_columns) if meta.schema.column(i).path == column)
        for g in range(meta.num_row_groups):
            chunk = meta.row_group(g).column(index)
            stats = chunk.statistics
            if chunk.num_values and (stats is None or not stats.has_null_count
                                     or stats.null_count != chunk.num_values):
                return False
    except (StopIteration, OSError, ValueError, TypeError, pa.ArrowException):
        return False
    return True


def _kind(t: pa.DataType) -> str:
    """What a column of type ``t`` holds, as DuckDB reads it from Parquet: types of one kind read as one."""
    if pa.types.is_dictionary(t):
        return _kind(t.value_type)
    if isinstance(t, pa.ExtensionType):
        return f"extension {t.extension_name}"
    for kind, test in (("null", pa.types.is_null), ("bool", pa.types.is_boolean), ("int", pa.types.is_integer),
                       ("float", pa.types.is_floating), ("decimal", pa.types.is_decimal),
                       ("date", pa.types.is_date), ("time", pa.types.is_time), ("map", pa.types.is_map),
                       ("struct", pa.types.is_struct)):
        if test(t):
            return kind
    if pa.types.is_timestamp(t):
        return "timestamp" if t.tz is None else "timestamptz"
    if pa.types.is_duration(t):
        return f"duration[{t.unit}]"
    if (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)):
        return "text"
    if (pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)
            or pa.types.is_binary_view(t)):
        return "binary"
    if (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
            or pa.types.is_list_view(t) or pa.types.is_large_list_view(t)):
        return "list"
    return str(t)


_NUMBER_KINDS = frozenset({"int", "float", "decimal"})
_KIND_WORDS = {"int": "integers", "float": "floats", "decimal": "decimals", "bool": "bools", "date": "dates",
               "time": "times", "timestamp": "timestamps", "timestamptz": "timestamps"}


def _clash(a: pa.DataType, b: pa.DataType, duck: str) -> str | None:
    """Why DuckDB's ``union_by_name`` merge of a column of type ``a`` in one file and ``b`` in another is not
    safe (``duck``: the type it reads the glob's column as), or None: the same kinds, or a widening that keeps
    every value (nested types are compared inside)."""
    ka, kb = _kind(a), _kind(b)
    pair = {ka, kb}
    if "null" in pair:   # a column of nulls: missing values, whatever the other files hold
        return None
    if ka == kb:
        if ka == "list":
            return _clash(a.value_type, b.value_type, duck)
        if ka == "map":
            return _clash(a.key_type, b.key_type, duck) or _clash(a.item_type, b.item_type, duck)
        if ka == "struct":
            fa, fb = ([t.field(j).name for j in range(t.num_fields)] for t in (a, b))
            if sorted(fa) != sorted(fb):
                return (f"their fields differ ({', '.join(fa)} and {', '.join(fb)}): DuckDB reads the glob's column "
                        f"as {duck}, with the fields a file lacks as missing (and names that differ only in case "
                        "as one field)")
            return next((why for n in fa if (why := _clash(a.field(n).type, b.field(n).type, duck))), None)
        if ka == "decimal":
            return _decimal_clash(a, b, duck)
        return None
    if pair <= {"int", "float"} or pair == {"decimal", "float"}:
        return None   # exact or refused by the rounding check (_rounding_union)
    if pair == {"int", "decimal"}:
        return _decimal_clash(a, b, duck)
    if pair == {"date", "timestamp"}:
        return None   # a date is its midnight, exactly
    if "timestamptz" in pair and pair & {"date", "timestamp"}:
        if not re.search(r"TIME ZONE|TIMESTAMPTZ", duck):   # nanoseconds beside a zone: DuckDB drops the zone
            return (f"DuckDB reads the glob's column as {duck}, without a time zone, taking the times with one as "
                    "times of the session's time zone, so the values depend on the machine that runs the audit")
        return (f"DuckDB reads the glob's column as {duck}, taking the times without a time zone as times of "
                "the session's time zone, so the values depend on the machine that runs the audit")
    if "bool" in pair and pair - {"bool"} <= _NUMBER_KINDS:
        return f"DuckDB reads the glob's column as {duck}, true as 1 and false as 0, one value with the number 1"
    durations = sorted(k for k in pair if k.startswith("duration["))
    if durations and pair - set(durations) <= _NUMBER_KINDS | {"text", "bool"}:
        unit = durations[0][len("duration["):-1]
        return (f"DuckDB reads a duration as a plain count of its unit ({unit}) and the glob's column as {duck}, "
                "so counts of other units or plain numbers would be the same values (1 us and 1 ms would be one)")
    if "text" in pair and pair & {"binary"}:
        return f"DuckDB reads the glob's column as {duck}, the text as bytes, compared and shown as bytes"
    if "text" in pair and pair - {"text"} <= _NUMBER_KINDS | {"bool", "date", "time", "timestamp", "timestamptz"}:
        word = _KIND_WORDS[next(iter(pair - {"text"}))]
        return (f"DuckDB reads the glob's column as {duck}, the {word} as text as DuckDB writes them (1 as '1', 1.0 "
                "as '1.0', true as 'true'), equal to a text value only when spelled alike ('1' and '1.0' would be "
                "two values)")
    return f"DuckDB would read the glob's column as {duck}, converting one file's values or failing to read them"


def _by_column(schemas: list[tuple[Path, pa.Schema]]) -> dict[str, list[tuple[Path, pa.DataType]]]:
    """Each column of a glob's files -> (file, its type there), for the files that have it: one pass."""
    held: dict[str, list[tuple[Path, pa.DataType]]] = {}
    for f, schema in schemas:
        for fld in schema:
            held.setdefault(fld.name, []).append((f, fld.type))
    return held


@functools.lru_cache(maxsize=1024)
def _times(t: pa.DataType) -> frozenset[str]:
    """What of dates, timestamps and durations a column of type ``t`` holds: 'date', 'timestamp[<unit>]',
    'duration' (top level), 'nested duration'. Cached: a glob's files repeat their types (thousands of fields)."""
    found = set()
    for depth, x in enumerate(_walk(t)):
        if pa.types.is_date(x):
            found.add("date")
        elif pa.types.is_timestamp(x):
            found.add(f"timestamp[{x.unit}]")
        elif pa.types.is_duration(x):
            found.add("duration" if depth == 0 else "nested duration")
    return frozenset(found)


def _nested_durations(schema: pa.Schema) -> bool:
    """Whether a column holds durations inside a list, struct, map or dictionary (DuckDB reads those from Parquet
    as bare counts of their unit, and :func:`_intervals_view` converts only top-level ones)."""
    return any("nested duration" in _times(f.type) for f in schema)


def _glob_durations(union: Mapping[str, str], schemas: list[tuple[Path, pa.Schema]], refused: set[str]
                    ) -> tuple[dict[str, str], dict[str, tuple[str, str | None]]]:
    """(column -> unit, for the top-level duration columns of a Parquet glob its view reads as intervals, as a
    single file's or a frame's are; column -> why, for durations it refuses when an audit reads them).

    DuckDB reads a Parquet duration as a bare count of its unit. Where every file holding values has the column
    as durations of one unit (a file of nulls beside them passes :func:`_clashing_union`), the count is converted;
    durations inside a list, struct or map, or counts DuckDB's merge made other than BIGINT (beside a file of
    float nulls: DOUBLE), are refused. Other merges of durations are refused by :func:`_clashing_union`."""
    units: dict[str, str] = {}
    out: dict[str, tuple[str, str | None]] = {}
    for name, files in _by_column(schemas).items():
        if name in refused or not any(_times(t) & {"duration", "nested duration"} for _, t in files):
            continue
        inside = next(((f, t) for f, t in files if "nested duration" in _times(t)), None)
        if inside is not None:
            out[name] = (f"{inside[0]} holds it as {inside[1]}: durations inside a list, struct or map, which DuckDB "
                         "reads from a glob as bare counts of their unit (1 s as the number 1; one file or a frame "
                         "is read as intervals); give them as numbers, e.g. microseconds", union.get(name))
            continue
        valued = [(f, t) for f, t in files if not pa.types.is_null(t)]
        if name in union:   # the files disagree: what passed the merge rules has one side empty
            valued = [(f, t) for f, t in valued if not _all_null(f, name)]
        if not valued or not all(pa.types.is_duration(t) and t.unit == valued[0][1].unit for _, t in valued):
            continue   # numbers beside empty durations: the column is numbers
        duck = union.get(name, "BIGINT")
        if duck != "BIGINT":
            other, ot = next(((f, t) for f, t in files if not pa.types.is_duration(t) and not pa.types.is_null(t)),
                             files[-1])
            out[name] = (f"{valued[0][0]} holds it as {valued[0][1]}, {other} as {ot} (no "
                         f"values): DuckDB reads the glob's column as {duck}, a bare count of the duration's unit, "
                         "which dcaudit cannot read back as durations; give it one type in every file", duck)
            continue
        units[name] = valued[0][1].unit
    return units, out


# The finer unit's ticks in one tick of the coarser, for the conversions DuckDB makes when it reads a Parquet date
# or timestamp as a finer unit: a date beside timestamps, milliseconds (Arrow's seconds are written as such) as
# microseconds, any of them beside nanoseconds
_FINER = {("day", "us"): 86_400_000_000, ("day", "ns"): 86_400_000_000_000, ("ms", "us"): 1000,
          ("ms", "ns"): 1_000_000, ("us", "ns"): 1000}
_SPAN = {"us": "290309 BC to 294247 AD (microseconds in 64 bits)",
         "ns": "1677-09-21 to 2262-04-11 (nanoseconds in 64 bits)"}


def _overflowing_times(union: Mapping[str, str], schemas: list[tuple[Path, pa.Schema]], refused: set[str], *,
                       glob: bool) -> dict[str, tuple[str, str | None]]:
    """The columns whose dates or timestamps DuckDB would convert to a finer unit that cannot hold them (column ->
    (why, its DuckDB type)), refused when an audit reads them: else the read stops in DuckDB's words
    ("Type INT32 with value 3000-01-01 can't be cast"). A date of the year 3000 beside nanosecond timestamps
    (TIMESTAMP_NS holds 1677 to 2262), microseconds beyond 2262 beside them, millisecond timestamps beyond what
    DuckDB's TIMESTAMP holds. Every merge of dates and timestamps picks the finer unit, so none loses precision;
    only range is at stake, and a merge is kept when every row group's statistics show its values within (a file's
    own milliseconds: unless they show them beyond). Footers only, and only for such columns.
    ``union``: :func:`_union_types` (empty for one file)."""
    out: dict[str, tuple[str, str | None]] = {}
    footers: dict[Path, Any] = {}   # each file's footer, read once for all its columns
    for name, files in _by_column(schemas).items():
        if name in refused or not any(_times(t) - {"duration", "nested duration"} for _, t in files):
            continue
        duck = union.get(name)
        types = [t for _, t in files]
        # whether any field of the column becomes nanoseconds, or holds dates beside timestamps: a first filter
        time_to = "ns" if any("timestamp[ns]" in _times(t) for t in types) else "us"
        date_to = time_to if any(_times(t) & _TIMESTAMP_KINDS for t in types) else None
        for f, t in files:
            if not _may_overflow(t, date_to, time_to):
                continue
            found = _beyond_unit(f, name, functools.partial(_merged_units, types), strict=duck is not None,
                                 footers=footers)
            if found is None:
                continue
            beyond, time_to = found
            how = (f"the values of {f} reach {beyond}" if beyond else
                   f"the footer of {f} has no statistics to show its values within")
            # the file whose type DuckDB widens to: nanoseconds, else any timestamps
            others = [(g, u) for g, u in files if str(u) != str(t)]
            finest = [(g, u) for g, u in others if any(pa.types.is_timestamp(x) and (time_to == "us" or x.unit == "ns")
                                                       for x in _walk(u))]
            other, ot = (finest or others)[0] if others else (None, None)
            if duck is None or other is None:   # no merge: DuckDB reads a file's milliseconds as microseconds
                # a frame's rule and words (_duration_problem), with the file of a glob named
                why = (f"{f} holds it as {t}, its values reaching {beyond}: " if glob else "") + _BEYOND_TIMESTAMP[0]
            else:
                fix = " (microsecond timestamps hold both)" if time_to == "ns" else ""
                why = (f"{f} holds it as {t}, {other} as {ot}: DuckDB reads the glob's column as {duck}, which "
                       f"holds times from {_SPAN[time_to]} only, and {how} (a value beyond would fail to read); "
                       f"give it one type in every file{fix}")
            out[name] = (why, duck)
            break
    return out


_INT96_SUB_MICROSECOND = ("INT96 timestamps (the legacy kind Spark and Impala write) finer than a microsecond, which "
                          "DuckDB reads as microseconds (1 ns and 500 ns past a second would be one time); write them "
                          "as Parquet timestamps (pyarrow's default) or give them as numbers, e.g. nanoseconds")


def _int96_refusals(schemas: list[tuple[Path, pa.Schema]], refused: set[str], *, glob: bool
                    ) -> dict[str, tuple[str, str | None]]:
    """The columns of Parquet files holding INT96 timestamps that are no whole number of microseconds (column ->
    (why, None: the type DuckDB reads)), refused when an audit reads them: DuckDB truncates INT96 to microseconds,
    so distinct times would become one value without a word. INT96 carries no statistics, so such a column's
    values are read (that column alone, through Arrow, which reads INT96 as nanoseconds). Only columns Arrow
    sees as nanosecond timestamps can be INT96: nothing else costs more than the type check."""
    import pyarrow.parquet as pq

    out: dict[str, tuple[str, str | None]] = {}
    for f, schema in schemas:
        candidates = {fld.name for fld in schema if fld.name not in refused and fld.name not in out
                      and "timestamp[ns]" in _times(fld.type)}
        if not candidates:
            continue
        meta = pq.read_metadata(f)
        int96 = [meta.schema.column(i).path for i in range(meta.num_columns)
                 if meta.schema.column(i).physical_type == "INT96"]
        # a leaf's path joins names with dots, and a column's own name may hold one ("t.x"): match by prefix
        held = {name for name in candidates if any(path == name or path.startswith(name + ".") for path in int96)}
        for name in sorted(held):
            column = pq.read_table(f, columns=[name]).column(0)
            if _sub_microsecond_times(column):
                out[name] = ((f"{f} holds it as " if glob else "") + _INT96_SUB_MICROSECOND, None)
    return out


def _sub_microsecond_times(column: pa.ChunkedArray) -> bool:
    """Whether a nanosecond timestamp anywhere in ``column`` is no whole number of microseconds."""
    for chunk in column.chunks:
        for leaf in _leaves(chunk, lambda t: pa.types.is_timestamp(t) and t.unit == "ns"):
            values = _valid_ticks(leaf)
            if len(values) and bool((values % 1000 != 0).any()):
                return True
    return False


def _valid_ticks(leaf: pa.Array) -> np.ndarray:
    """The ticks (int64) of the valid values of a duration or timestamp array."""
    import numpy as np

    from dcaudit import arrays

    ticks = pa.chunked_array([leaf.cast(pa.int64())], pa.int64())
    return arrays.values(ticks, np.int64)[arrays.valid(ticks)]


def _may_overflow(t: pa.DataType, date_to: str | None, time_to: str) -> bool:
    """Whether a column of type ``t`` holds dates or timestamps that DuckDB converts to a finer unit (dates to
    ``date_to``, timestamps to ``time_to``): by type only, before any footer is read."""
    held = _times(t)
    return bool(("date" in held and date_to is not None) or held & {"timestamp[s]", "timestamp[ms]"}
                or ("timestamp[us]" in held and time_to == "ns"))


def _leaf_unit(leaf: Any) -> str | None:
    """'day', 'ms', 'us' or 'ns' for a date or timestamp column of a Parquet footer (its logical type, or the
    converted type older writers set), else None (INT96 timestamps included: they carry no statistics)."""
    import json

    logical = leaf.logical_type
    if logical.type == "DATE":
        return "day"
    if logical.type == "TIMESTAMP":
        unit = json.loads(logical.to_json()).get("timeUnit")
        return {"milliseconds": "ms", "microseconds": "us", "nanoseconds": "ns"}.get(unit)
    return {"DATE": "day", "TIMESTAMP_MILLIS": "ms", "TIMESTAMP_MICROS": "us"}.get(str(leaf.converted_type))


def _beyond_unit(path: Path, column: str, units: Callable[[list[str]], tuple[str | None, str]], *, strict: bool,
                 footers: dict[Path, Any]) -> tuple[str, str] | None:
    """How the dates and timestamps of ``column`` (its nested ones too) in a Parquet file fall outside the unit
    DuckDB converts them to (``units(leaf path)``: dates to the first, None: kept as dates; timestamps to the
    second), by the footer's row-group statistics: (the first value beyond, ``3000-01-01``, or "" when they
    show nothing and ``strict``; the unit it had to fit), else None. ``footers``: the footers read so far."""
    import pyarrow.parquet as pq

    try:
        if path not in footers:
            footers[path] = pq.read_metadata(path)
        meta = footers[path]
    except (OSError, ValueError, pa.ArrowException):
        return ("", "us") if strict else None
    for i in range(meta.num_columns):
        leaf = meta.schema.column(i)
        if leaf.path != column and not leaf.path.startswith(column + "."):
            continue
        unit = _leaf_unit(leaf)
        if unit is None:
            continue
        below = leaf.path[len(column) + 1:]   # the column's own name may hold a dot: strip it whole
        date_to, time_to = units(below.split(".") if below else [])
        target = date_to if unit == "day" else time_to
        if target is None or (unit, target) not in _FINER:
            continue   # no conversion (kept as dates, or already the unit)
        most = _INT64_MAX // _FINER[unit, target]
        for g in range(meta.num_row_groups):
            chunk = meta.row_group(g).column(i)
            stats = chunk.statistics
            if chunk.num_values == 0 or (stats is not None and stats.has_null_count
                                         and stats.null_count == chunk.num_values):
                continue
            if stats is None or not stats.has_min_max:
                if strict:
                    return "", time_to
                continue
            lo, hi = int(stats.min_raw), int(stats.max_raw)
            if lo < -most or hi > most:
                return _tick_text(lo if lo < -most else hi, unit), time_to
    return None


_TIMESTAMP_KINDS = frozenset(f"timestamp[{u}]" for u in ("s", "ms", "us", "ns"))


def _merged_units(types: list[pa.DataType], parts: list[str]) -> tuple[str | None, str]:
    """(what DuckDB converts dates to, None: kept as dates; what it converts timestamps to) at the field
    ``parts`` (a Parquet leaf path below the column: ``['a']`` for a struct's field ``a``, ``[]`` for the column
    itself) of a column the files hold as ``types``: its merge picks the finest unit among the files at that
    field — nanoseconds if any file has them there, else microseconds (DuckDB reads milliseconds as those), and
    dates become timestamps only beside timestamps. Each field on its own: a struct of microsecond and
    nanosecond times keeps its microseconds."""
    at = [x for x in (_arrow_field(t, parts) for t in types) if x is not None]
    stamps = [x for x in at if pa.types.is_timestamp(x)]
    time_to = "ns" if any(x.unit == "ns" for x in stamps) else "us"
    return (time_to if stamps else None), time_to


def _arrow_field(t: pa.DataType, parts: list[str]) -> pa.DataType | None:
    """The type at the Parquet leaf path ``parts`` below a column of Arrow type ``t`` (struct fields by name; a
    list's repeated group and element, a map's key_value and key or value), or None where ``t`` has no such
    field."""
    parts = list(parts)
    while parts:
        if pa.types.is_dictionary(t):
            t = t.value_type
        elif pa.types.is_struct(t):
            j = t.get_field_index(parts.pop(0))
            if j < 0:
                return None
            t = t.field(j).type
        elif pa.types.is_map(t):
            if parts[0] == "key_value":
                parts.pop(0)
            t = t.key_type if parts and parts.pop(0) == "key" else t.item_type
        elif hasattr(t, "value_type"):   # lists of every layout: <list>.<element> (three levels) or <element>
            del parts[:2 if len(parts) >= 2 else 1]
            t = t.value_type
        else:
            return None
    return t.value_type if pa.types.is_dictionary(t) else t


def _tick_text(ticks: int, unit: str) -> str:
    """A date or time of a Parquet footer (``ticks`` of ``unit`` since 1970-01-01) as ISO text, where Python's
    calendar (years 1 to 9999) holds it, else as the count."""
    import datetime

    epoch = datetime.datetime(1970, 1, 1)
    try:
        if unit == "day":
            return (epoch + datetime.timedelta(days=ticks)).date().isoformat()
        micros = ticks * 1000 if unit == "ms" else ticks if unit == "us" else ticks // 1000
        return (epoch + datetime.timedelta(microseconds=micros)).isoformat(sep=" ")
    except OverflowError:
        return f"{ticks} {dict(day='days', ms='milliseconds', us='microseconds', ns='nanoseconds')[unit]} from 1970"


def _digits(t: pa.DataType) -> tuple[int, int]:
    """(digits before the point, digits after it) that every value of the integer or decimal type ``t`` needs."""
    if pa.types.is_integer(t):
        return len(str(2 ** t.bit_width - 1 if not pa.types.is_signed_integer(t) else 2 ** (t.bit_width - 1))), 0
    return t.precision - t.scale, t.scale


def _decimal_clash(a: pa.DataType, b: pa.DataType, duck: str) -> str | None:
    """Why no DECIMAL of DuckDB (at most 38 digits) holds every value of the integer or decimal types ``a`` and
    ``b`` (DuckDB then drops the fraction or cannot read the larger values), or None."""
    (ia, sa), (ib, sb) = _digits(a), _digits(b)
    whole, fraction = max(ia, ib), max(sa, sb)
    if whole + fraction <= 38:
        return None
    return (f"DuckDB reads the glob's column as {duck}, but {whole} digits before the point and {fraction} after "
            f"need {whole + fraction}, beyond the 38 a decimal holds: fractions would be rounded (1.25 becoming 1) "
            "or larger values fail to read")


def _absent_table(label: str) -> str:
    """The name :func:`_note_absent` registers a glob's absent columns under (unquoted)."""
    return f"_glob_absent_{_safe(label)}"


def _note_absent(con: duckdb.DuckDBPyConnection, label: str, schemas: list[tuple[Path, pa.Schema]]) -> None:
    """Which files of a Parquet glob lack which of its columns, and how many rows each file has (from its
    footer), kept beside the glob's view for :func:`absent_columns`: DuckDB's ``union_by_name`` reads a
    column a file lacks as missing in every row of it. Nothing is kept, and no footer is read again, when
    every file has every column."""
    names = list(dict.fromkeys(n for _, schema in schemas for n in schema.names))
    lacking = [(column, f) for column in names for f, schema in schemas if column not in schema.names]
    con.unregister(_absent_table(label))   # a glob registered again on this connection
    if not lacking:
        return
    import pyarrow.parquet as pq

    rows: dict[Path, int | None] = {}
    for _, f in lacking:
        if f not in rows:
            try:
                rows[f] = pq.read_metadata(f).num_rows
            except (OSError, ValueError, pa.ArrowException):   # its schema read: the count is only told
                rows[f] = None

    from dcaudit import arrays  # not pa.array of Python lists: that makes pyarrow import pandas (~0.3 s)

    con.register(_absent_table(label), arrays.table(
        {"column": [c for c, _ in lacking], "file": [str(f) for _, f in lacking],
         "rows": [rows[f] for _, f in lacking], "files": [len(schemas)] * len(lacking)},
        {"column": "string", "file": "string", "rows": "int64", "files": "int64"}))


ABSENT_KIND = "glob_column_absent"


def absent_columns(con: duckdb.DuckDBPyConnection, relation: str, columns: Iterable[str], *, id_column: str,
                   source: str = "") -> tuple[pa.Table, list[str]] | None:
    """Findings rows (one per file and column) and notes (one per column) for the ``columns`` an audit reads
    that some files of a Parquet glob lack, else None: DuckDB reads such a column as missing in every row of
    those files, so their candidates are excluded (``evidence_missing``, ``claim_missing``) — kept, and now
    said why. The id column lacking from a file is an error naming the file: its rows would have no id.
    Reads only what registration kept from the footers (:func:`_note_absent`), never the data."""
    label = label_of(relation)
    wanted = list(dict.fromkeys(c for c in (id_column, *columns) if c != ROW))
    try:
        kept = con.execute('SELECT "column", file, "rows", files FROM '
                           f'{quote_identifier(_absent_table(label))} WHERE list_contains(?, "column")',
                           [wanted]).fetchall()
    except duckdb.CatalogException:   # not a glob, or every file has every column
        return None
    if not kept:
        return None
    by_column: dict[str, list[tuple[str, int | None]]] = {}
    for column, file, n, _ in kept:
        by_column.setdefault(column, []).append((file, n))
    n_files = int(kept[0][3])

    def counted(parts: list[tuple[str, int | None]]) -> str:
        n = sum(r or 0 for _, r in parts)
        return f"{n} row{'s' if n != 1 else ''}"

    if id_column in by_column:
        ids = by_column[id_column]
        raise InputError(f"{len(ids)} of the glob's {n_files} files {'lacks' if len(ids) == 1 else 'lack'} the id "
                         f"column, e.g. {ids[0][0]} ({counted(ids[:1])}): their rows would have no candidate id; "
                         "give every file the column", file=label, column=id_column)
    table: dict[str, list[object]] = {c: [] for c in ("source", "file", "row", "column", "kind", "detail",
                                                      "candidate_id")}
    notes = []
    for column in wanted:
        parts = by_column.get(column, [])
        if not parts:
            continue
        for file, n in parts:
            rows = "its rows" if n is None else f"its {counted([(file, n)])}"
            for key, value in (("source", source), ("file", file), ("row", None), ("column", column),
                               ("kind", ABSENT_KIND), ("candidate_id", None),
                               ("detail", f"the file has no column {column!r}, which {n_files - len(parts)} other "
                                          f"file(s) of the glob {label} have: DuckDB reads it as missing in "
                                          f"{rows} (as evidence or claim those candidates are excluded, "
                                          "evidence_missing or claim_missing; as a probe, reference or model "
                                          "column they have no value there); give the file the column, with "
                                          "empty values where they are missing")):
                table[key].append(value)
        shown = ", ".join(f for f, _ in parts[:3]) + (f" and {len(parts) - 3} more" if len(parts) > 3 else "")
        notes.append(f"{label}: column {column!r} is missing from {len(parts)} of its {n_files} files ({shown}; "
                     f"{counted(parts)}): DuckDB reads it as missing there (findings.parquet, kind "
                     f"{ABSENT_KIND!r})")
    from dcaudit import arrays

    return (arrays.table(table, {"source": "string", "file": "string", "row": "int64", "column": "string",
                                 "kind": "string", "detail": "string", "candidate_id": "string"}), notes)


def _fits_float(t: pa.DataType, bits: int) -> bool:
    """Whether every value of the integer or decimal type ``t`` is a distinct float of ``bits`` mantissa bits
    (24 for FLOAT, 53 for DOUBLE): integers up to 16 or 32 bits, decimals up to 6 or 15 digits."""
    if pa.types.is_integer(t):
        return t.bit_width <= (16 if bits == 24 else 32)
    return t.precision <= (6 if bits == 24 else 15)


def _statistics_within(path: Path, column: str, limit: int) -> bool:
    """Whether the row-group statistics of a top-level integer ``column`` of a Parquet file show every value
    within ±``limit`` (False when a row group has none): its footer only, no data."""
    import pyarrow.parquet as pq

    try:
        meta = pq.read_metadata(path)
        index = next(i for i in range(meta.num_columns) if meta.schema.column(i).path == column)
        for g in range(meta.num_row_groups):
            chunk = meta.row_group(g).column(index)
            if chunk.num_values == 0:
                continue
            stats = chunk.statistics
            if stats is None or not stats.has_min_max or max(abs(int(stats.min)), abs(int(stats.max))) > limit:
                return False
    except (StopIteration, OSError, ValueError, TypeError, pa.ArrowException):
        return False
    return True


def _row_numbers(n: int) -> pa.Array:
    """1 .. n as an Arrow int64 array, built on numpy's buffer: ``pa.array`` (of a range or of a numpy
    array alike) makes pyarrow import pandas (~0.3 s of start-up) to check the input for pandas types."""
    import numpy as np

    return pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(np.arange(1, n + 1, dtype=np.int64))])



def _create_view(con: duckdb.DuckDBPyConnection, view: str, select: str, label: str) -> None:
    try:
        con.execute(f"CREATE OR REPLACE TEMP VIEW {view} AS {select}")
    except duckdb.Error as exc:
        if machine_limit(exc):  # memory or spill disk, not the data: the run says so
            raise
        raise InputError(f"cannot read: {duckdb_message(exc)}", file=label) from None


def _described(con: duckdb.DuckDBPyConnection, view: str, label: str, *,
               has_row: bool = True) -> RegisteredInput:
    try:
        described = con.execute(f"DESCRIBE {view}").fetchall()
        n = con.execute(f"SELECT count(*) FROM {view}").fetchall()[0][0]
    except duckdb.Error as exc:
        if machine_limit(exc):  # memory or spill disk, not the data: the run says so
            raise
        raise InputError(f"cannot read: {duckdb_message(exc)}", file=label) from None
    if n == 0:
        once = " (a RecordBatchReader yields its rows once: one read before has none left)" \
            if "recordbatchreader" in label.lower().replace(" ", "") else ""
        raise InputError(f"no data rows{once}", file=label)
    types = {r[0]: str(r[1]) for r in described if r[0] != ROW}
    return RegisteredInput(view, label, tuple(types), types, int(n), has_row)


def _refused_columns(schema: pa.Schema) -> dict[str, tuple[str, str]]:
    """The columns of a Parquet file DuckDB would not read as the file holds them (decimals beyond 38 digits
    become doubles; intervals count a month as 30 days): refused when an audit reads them."""
    return {f.name: why for f in schema if (why := _field_refusal(f)) is not None}


def _parquet_schema(path: Path) -> pa.Schema:
    import pyarrow.parquet as pq

    try:
        return pq.read_schema(path)
    except Exception as exc:  # noqa: BLE001 - any reader error: the file is not usable Parquet
        head = _head(path)
        what = next((f"; the file is {kind}" for magic, kind in _MAGIC if head.startswith(magic) and magic != b"PAR1"),
                    "")
        if not what and head[:1] != b"PAR1"[:1] and _looks_like_text(head):
            what = "; the file is text (a CSV?): give it a .csv name"
        raise InputError(f"not a readable Parquet file ({str(exc).splitlines()[0][:200]}){what}",
                         file=str(path)) from None


# What a file's first bytes say it is, for a file whose name says otherwise
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"PAR1", "Parquet (its bytes start with PAR1): give it a .parquet name"),
    (b"\x1f\x8b", "gzip-compressed: give it a .gz name (data.csv.gz)"),
    (b"PK\x03\x04", "a ZIP archive (an .xlsx workbook is one): unzip it, or save the sheet as CSV"),
    (b"BZh", "bzip2-compressed: decompress it, or compress it with gzip (.csv.gz)"),
    (b"\xfd7zXZ\x00", "xz-compressed: decompress it, or compress it with gzip (.csv.gz)"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed: decompress it, or compress it with gzip (.csv.gz)"),
    (b"\xff\xfe", "UTF-16 text (it starts with a UTF-16 byte order mark): save it as UTF-8"),
    (b"\xfe\xff", "UTF-16 text (it starts with a UTF-16 byte order mark): save it as UTF-8"),
)


def _head(path: Path, n: int = 4096) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(n)
    except OSError:
        return b""


def _looks_like_text(head: bytes) -> bool:
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 3:   # not just a character cut at the end of the sample
            return False
    return b"\x00" not in head and any(sep in head for sep in (b",", b";", b"\t", b"|"))


def _not_csv(path: Path) -> str | None:
    """Why a file named as CSV is not one, from its first bytes (Parquet, a ZIP, bzip2, UTF-16 ...; a ``.gz``
    name without gzip inside, a gzip without a ``.gz`` name), or None. Four bytes read, and only here: the
    readers would call such a file "not UTF-8 at line 1", or read gzip as text."""
    head = _head(path, 8)
    gz = path.name.lower().endswith(".gz")
    if gz and not head.startswith(b"\x1f\x8b"):
        inner = next((kind for magic, kind in _MAGIC if head.startswith(magic)), None)
        return ("the name ends in .gz, but the file is not gzip-compressed"
                + (f": it is {inner}" if inner else ": give it a name without .gz"))
    if gz:   # what is inside the gzip: Parquet or a ZIP compressed again is no CSV either
        try:
            with gzip.open(path, "rb") as fh:
                head = fh.read(8)
        except (OSError, EOFError):
            return None   # a truncated or broken gzip: the reader names it
        if head.startswith(b"\x1f\x8b"):
            return "not a CSV file: it is gzip-compressed twice (gzip inside gzip); decompress it once"
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return f"not a CSV file: it is {kind}"
    return None


# ------------------------------------------------------------------------------------------------------------
# CSV: read once, typed; errors name the line.

def _open_text(path: Path) -> io.TextIOBase:
    raw = gzip.open(path, "rb") if path.name.lower().endswith(".gz") else open(path, "rb")  # noqa: SIM115
    return io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")  # a BOM is not part of the first name


def _separator(path: Path) -> str:
    if path.name.lower().endswith((".tsv", ".tsv.gz")):
        return "\t"
    try:
        with _open_text(path) as fh:
            header = fh.readline()
    except (OSError, EOFError, UnicodeDecodeError):
        return ","
    header = re.sub(r'"(?:[^"]|"")*"', "", header)   # a separator inside a quoted name separates nothing
    counts = {sep: header.count(sep) for sep in (",", ";", "\t", "|")}
    best = max(counts, key=lambda s: counts[s])
    return best if counts[best] > 0 else ","


def read_csv(path: Path, text_columns: tuple[str, ...] = ()) -> pa.Table:
    """A CSV (or CSV.gz, TSV) as a typed Arrow table, read once; structural problems are InputErrors.

    pyarrow's reader: multi-threaded, already imported for the package tables, and strict — a value late in
    the file that does not fit the type inferred so far widens the column (to double, or text) instead of
    being rounded into it (DuckDB's reader rounds ``1.5`` into a BIGINT column past its sample). Empty
    fields are NULL and nothing else is ("NA" stays text, as in polars); dates, times and timestamps stay
    text as the file writes them; a column with no value at all is text. ``text_columns`` (the candidate id)
    are read as text: an id ``007`` stays ``007``, where a number would make it ``7``."""
    text = str(path)
    wrong = _not_csv(path)
    if wrong:
        raise InputError(wrong, file=text)
    sep = _separator(path)
    header = _header(path, sep)
    if any("\x00" in name for name in header):   # UTF-16 without a byte order mark: every other byte is NUL
        raise InputError("the header holds NUL bytes, as UTF-16 text does; save the file as UTF-8", file=text)
    check_unique_columns(header, text)
    as_text = {c: pa.string() for c in text_columns if c in header}
    # one column: a blank line is an empty value (a missing one), not a line to skip
    opts = _CsvOptions(sep, keep_empty_lines=len(header) == 1)
    for block in _BLOCK_SIZES:
        try:
            table = _arrow_csv(path, opts, as_text, block=block)
            temporal = {f.name: pa.string() for f in table.schema if pa.types.is_temporal(f.type)}
            if temporal:  # read again with those columns as text: a cast back would not give the file's text
                table = _arrow_csv(path, opts, as_text | temporal, block=block)
            exact = _exact_integer_types(path, opts, table, block)
            if exact:  # read again with integers a double would round kept exact
                table = _arrow_csv(path, opts, as_text | temporal | exact, block=block)
            hexed = _hex_integer_columns(path, opts, table, block)
            if hexed:  # read again with those columns as the file's text
                table = _arrow_csv(path, opts, as_text | temporal | exact | hexed, block=block)
            break
        except (pa.ArrowInvalid, OSError, EOFError) as exc:
            # a value longer than a block (1 MB), or a header that is (pyarrow then finds no line in the first
            # block: "Empty CSV file or block"): read again in larger blocks
            longer = "straddling" in str(exc) or ("Empty CSV file" in str(exc) and any(header))
            if longer and block != _BLOCK_SIZES[-1]:
                continue
            if "Empty CSV file" in str(exc):   # a header without a line end after it has no data rows either
                raise InputError("no data rows (only a header)" if any(header) else "file has no header or data",
                                 file=text) from None
            raise InputError(_csv_problem(path, sep, exc), file=text) from None
    if any(pa.types.is_binary(f.type) for f in table.schema):  # bytes that are not UTF-8 text
        raise InputError(_csv_problem(path, sep, ValueError("a column holds bytes that are not UTF-8 text")),
                         file=text)
    for i, f in enumerate(table.schema):
        if pa.types.is_null(f.type):
            # pa.nulls, not a cast: a cast imports pyarrow.compute (~0.1 s)
            table = table.set_column(i, pa.field(f.name, pa.string()), pa.nulls(table.num_rows, pa.string()))
    return table


_EXACT_DOUBLE = 2.0**53  # every integer up to this is a double exactly; above it doubles skip integers


def _exact_integer_types(path: Path, opts: _CsvOptions, table: pa.Table, block: int | None) -> dict[str, pa.DataType]:
    """Column -> the type that keeps its values exact, for double columns holding integers beyond 2^53 the
    double does not hold exactly (12345678901234567890 and …891 would be one value): DECIMAL(38, 0) when
    every value is an integer, else the file's text. Only columns with such a magnitude are read again."""
    import numpy as np

    from dcaudit import arrays

    big = []
    for f in table.schema:
        if pa.types.is_floating(f.type):
            values = arrays.values(table.column(f.name), np.float64)[arrays.valid(table.column(f.name))]
            if len(values) and bool((np.abs(values[np.isfinite(values)]) >= _EXACT_DOUBLE).any()):
                big.append(f.name)
    if not big:
        return {}
    text = _arrow_csv(path, opts, {c: pa.string() for c in big}, include=big, block=block)
    out: dict[str, pa.DataType] = {}
    for name in big:
        kept = exact_integer_type(text.column(name))
        if kept is not None:
            out[name] = kept
    return out


def exact_integer_type(tokens: pa.ChunkedArray | pa.Array) -> pa.DataType | None:
    """For a CSV column's text: DECIMAL(38, 0) when some integer in it beyond 2^53 is not a double exactly
    and every value is an integer of at most 38 digits, the text itself when some are not, None when a
    double holds every integer of the column exactly.

    Vectorised (a Python loop took ~1 s per million values): an integer is a double exactly when its odd
    part (the integer over its largest power-of-two divisor) is below 2^53 — a test on uint64 for up to 19
    digits; the rare longer ones are compared one by one."""
    import numpy as np
    import pyarrow.compute as pc  # ~0.09 s to import: only a column this large gets here

    values = pc.utf8_trim_whitespace(pc.drop_null(tokens))
    unsigned = pc.utf8_ltrim(values, characters="+-")
    width = np.asarray(pc.utf8_length(unsigned), dtype=np.int64)
    signs = np.asarray(pc.utf8_length(values), dtype=np.int64) - width
    is_integer = np.asarray(pc.ascii_is_decimal(unsigned), dtype=bool) & (signs <= 1)  # [-+]?[0-9]+
    # below 16 characters every integer is < 2^53; up to 19 (leading zeros included) it fits a uint64
    mid = is_integer & (width >= 16) & (width <= 19)
    n = np.asarray(pc.cast(pc.filter(unsigned, pa.array(mid)), pa.uint64()), dtype=np.uint64)
    n = n[n >= np.uint64(2**53)]
    odd = n // (n & (~n + np.uint64(1)))  # n over its lowest set bit
    rounded = bool((odd >= np.uint64(2**53)).any())
    if not rounded:
        longer = pc.filter(values, pa.array(is_integer & (width > 19))).to_pylist()
        rounded = any(float(t) != int(t) for t in longer)
    if not rounded:
        return None
    fits = bool(is_integer.all()) and (len(width) == 0 or int(width.max()) <= 38)
    return pa.decimal128(38, 0) if fits else pa.string()


def _hex_integer_columns(path: Path, opts: _CsvOptions, table: pa.Table, block: int | None) -> dict[str, pa.DataType]:
    """Column -> text, for integer columns in which pyarrow read a hexadecimal spelling (``0x1A``) as a number.

    pyarrow (and DuckDB) parse ``0x1A`` as 26, so ``0x1A`` and ``26`` would be one exact fiber value, and a
    column of hex codes would be numbers nobody wrote; pandas and polars read such a column as text, and so
    does dcaudit. The file is searched for an ``x`` first (a few ms for 30 MB), so only a file that has one
    pays for reading its integer columns again as text."""
    integers = [f.name for f in table.schema if pa.types.is_integer(f.type)]
    if not integers or not _mentions_hex(path):
        return {}
    import pyarrow.compute as pc

    text = _arrow_csv(path, opts, {c: pa.string() for c in integers}, include=integers, block=block)
    return {c: pa.string() for c in integers if pc.any(pc.match_substring_regex(text.column(c), r"^\s*0[xX]")).as_py()}


def _mentions_hex(path: Path) -> bool:
    """Whether the file's bytes hold ``0x`` or ``0X`` anywhere (a byte search for x, then for the pair)."""
    raw = gzip.open(path, "rb") if path.name.lower().endswith(".gz") else open(path, "rb")  # noqa: SIM115
    with raw:
        tail = b""
        for chunk in iter(lambda: raw.read(1 << 22), b""):
            part, tail = tail + chunk, chunk[-1:]
            if (part.find(b"x") >= 0 or part.find(b"X") >= 0) and (b"0x" in part or b"0X" in part):
                return True
    return False


@dataclass(frozen=True)
class _CsvOptions:
    sep: str
    keep_empty_lines: bool = False


# pyarrow reads in blocks of 1 MB by default and refuses a value that straddles two: then larger blocks
_BLOCK_SIZES: tuple[int | None, ...] = (None, 1 << 26, 1 << 30)


def _arrow_csv(path: Path, opts: _CsvOptions, column_types: Mapping[str, pa.DataType] | None = None, *,
               include: list[str] | None = None, block: int | None = None) -> pa.Table:
    import pyarrow.csv as pacsv

    # true/false only: pyarrow's default also reads 1 and 0 as booleans, so a column of 1, 0 and true would be
    # booleans in which 1 and true are one value (pandas and polars read such a column as text)
    convert = pacsv.ConvertOptions(null_values=[""], strings_can_be_null=True, quoted_strings_can_be_null=True,
                                   true_values=["true", "True", "TRUE"], false_values=["false", "False", "FALSE"],
                                   column_types=dict(column_types or {}), include_columns=include or [])
    # newlines_in_values: a quoted field may span lines (as in polars and Python's csv module)
    parse = pacsv.ParseOptions(delimiter=opts.sep, newlines_in_values=True,
                               ignore_empty_lines=not opts.keep_empty_lines)
    read = pacsv.ReadOptions(block_size=block) if block else None
    return pacsv.read_csv(path, read_options=read, parse_options=parse, convert_options=convert)


def _header(path: Path, sep: str) -> list[str]:
    limit = csv.field_size_limit()
    csv.field_size_limit((1 << 31) - 1)  # a long name is no error (the csv module stops at 128 KB)
    try:
        with _open_text(path) as fh:
            return next(csv.reader(fh, delimiter=sep), [])
    except (OSError, EOFError) as exc:
        raise InputError(f"cannot read ({exc})", file=str(path)) from None
    except csv.Error as exc:
        raise InputError(f"line 1: {exc}", file=str(path)) from None
    except UnicodeDecodeError:  # the reader decodes a block ahead of the header: find the line itself
        line = _first_non_utf8_line(path) or 1
        raise InputError(f"line {line} is not UTF-8 text; save the file as UTF-8", file=str(path)) from None
    finally:
        csv.field_size_limit(limit)


def _csv_problem(path: Path, sep: str, exc: Exception) -> str:
    """One line saying where a CSV is broken: a ragged or undecodable line, or a truncated archive."""
    damaged = _gzip_damage(path) if path.name.lower().endswith(".gz") else None
    if damaged:   # a flipped bit decodes to garbage lines before the checksum at the end says so: say that
        return damaged
    line = 0
    limit = csv.field_size_limit()
    csv.field_size_limit((1 << 31) - 1)  # a long value is no problem here (pyarrow's block size is retried)
    try:
        with _open_text(path) as fh:
            reader = csv.reader(fh, delimiter=sep)
            width = None
            for fields in reader:
                start, line = line + 1, reader.line_num
                if width is None:
                    width = len(fields)
                elif len(fields) != width and fields:
                    if line > start:  # the record runs over several lines: a quoted value does
                        return (f"line {start}: a quoted value runs on to line {line}, and the record has "
                                f"{len(fields)} fields where the header has {width} (separator {sep!r}); is a "
                                "quote not closed?")
                    return (f"line {line} has {len(fields)} fields, the header has {width} "
                            f"(separator {sep!r}); fix or quote that line")
    except UnicodeDecodeError:
        return f"line {_first_non_utf8_line(path) or line + 1} is not UTF-8 text; save the file as UTF-8"
    except (OSError, EOFError) as err:
        return f"the file is truncated or not valid gzip ({err})"
    except csv.Error as err:
        return f"line {line + 1}: {err}"
    finally:
        csv.field_size_limit(limit)
    return f"cannot read as CSV: {str(exc).splitlines()[0][:200]}"


def _gzip_damage(path: Path) -> str | None:
    """Why a gzip file's bytes are not what was compressed (its CRC or length check fails, it ends early), or
    None: read through once, on the error path only."""
    import zlib

    try:
        with gzip.open(path, "rb") as fh:
            while fh.read(1 << 20):
                pass
    except (OSError, EOFError, zlib.error) as err:
        return f"the file is damaged or truncated: its gzip data does not check out ({err})"
    return None


def _first_non_utf8_line(path: Path) -> int | None:
    """The first line (1-based) whose bytes are not UTF-8. The text reader decodes blocks ahead of the line
    it hands out, so its position at the error is not the line; this reads the bytes line by line (on the
    error path only)."""
    raw = gzip.open(path, "rb") if path.name.lower().endswith(".gz") else open(path, "rb")  # noqa: SIM115
    try:
        with raw:
            for number, line in enumerate(raw, 1):
                try:
                    line.decode("utf-8")
                except UnicodeDecodeError:
                    return number
    except (OSError, EOFError):
        return None
    return None


# ------------------------------------------------------------------------------------------------------------
# Checks that need the data.

_DECIMAL_COMMA = re.compile(r"^\s*[-+]?\d+,\d+\s*$")
_THOUSANDS = re.compile(r"^\s*[-+]?\d{1,3}(,\d{3})+(\.\d+)?\s*$")


def not_a_number_hint(value: str) -> str:
    """Why a value that should be a number may not read as one ("" when nothing tells)."""
    if _THOUSANDS.match(value):  # 1,000 may be a thousands separator as well as a decimal comma: say both
        return ("; it looks like a thousands separator (or a decimal comma): write numbers with a decimal point "
                "and no separators")
    if _DECIMAL_COMMA.match(value):
        return "; it looks like a decimal comma: write numbers with a decimal point"
    if "\n" in value or "\r" in value:
        return "; it spans lines: is a quote not closed?"
    text = value.strip()
    if text[:1] in _MINUS_LOOKALIKES and _NUMBER.match(text[1:]):
        return (f"; it starts with {_MINUS_LOOKALIKES[text[0]]} (U+{ord(text[0]):04X}), not the ASCII minus '-': "
                "write negative numbers with '-'")
    if _SPACED_THOUSANDS.match(text):
        return "; it has spaces between its digits (a thousands separator?): write numbers without separators"
    return ""


# characters a copied table writes for a minus sign, which no number parser reads as one
_MINUS_LOOKALIKES = {"\u2212": "a Unicode minus sign", "\u2013": "an en dash", "\u2014": "an em dash",
                     "\u2010": "a Unicode hyphen", "\u2011": "a non-breaking hyphen", "\ufe63": "a small hyphen-minus",
                     "\uff0d": "a full-width hyphen-minus"}
_NUMBER = re.compile(r"^\d+(\.\d*)?([eE][-+]?\d+)?$|^\.\d+([eE][-+]?\d+)?$")
_SPACED_THOUSANDS = re.compile(r"^[-+]?\d{1,3}([ \u00a0\u202f\u2009]\d{3})+([.,]\d+)?$")


def require_numeric(con: duckdb.DuckDBPyConnection, relation: str, column: str, types: Mapping[str, str], *,
                    why: str) -> None:
    """An InputError naming the first row whose ``column`` is not a number, when the column is not numeric."""
    kind = value_kind(types.get(column, ""))
    # A numeric column is numbers even when every value is missing: its candidates are excluded as
    # evidence_missing, as any missing value is. A column with no type of its own (a CSV column without a
    # single value reads as text) has nothing to tell it is numeric: that is the error below.
    if kind in {"float", "int", "bool"}:
        return
    label = label_of(relation)
    q = quote_identifier(column)
    try:
        found = first_non_number(con, relation, column)
        n_values = con.execute(f"SELECT count({q}) FROM {relation}").fetchall()[0][0]
    except duckdb.Error as exc:
        if machine_limit(exc):  # memory or spill disk, not the data: the run says so
            raise
        raise InputError(f"cannot read column: {duckdb_message(exc)}", file=label, column=column) from None
    if not found:
        if n_values == 0:
            raise InputError(f"the column has no values, so {why} has nothing to work on", file=label,
                             column=column)
        return  # text that all parses as numbers (e.g. a column read as text): DuckDB casts it
    row, value = found
    hint = not_a_number_hint(value)
    holds = "text" if kind == "text" else f"{str(types.get(column, '')).lower() or 'other'} values"
    raise InputError(f"{why} needs numbers, but the column holds {holds}: {value[:40]!r}{hint}", file=label,
                     row=row, column=column)


def first_non_number(con: duckdb.DuckDBPyConnection, relation: str, column: str) -> tuple[int | None, str] | None:
    """(row, text) of the first value of ``column`` that does not read as a number (None: every value does);
    the row is None for an input without row numbers. A value spanning lines counts as none: DuckDB reads
    ``'0\n'`` as 0, but a CSV reader read the column as text because of it (a stray or unclosed quote)."""
    q = quote_identifier(column)
    order = f" ORDER BY {ROW}" if ROW in _columns(con, relation) else ""
    text = f"CAST({q} AS VARCHAR)"
    found = con.execute(f"SELECT {ROW if order else 'NULL'}, {text} FROM {relation} WHERE {q} IS NOT NULL AND "
                        f"(TRY_CAST(trim({text}) AS DOUBLE) IS NULL OR regexp_matches({text}, '[\\r\\n]'))"
                        f"{order} LIMIT 1").fetchall()
    return (found[0][0], found[0][1]) if found else None


def first_value(con: duckdb.DuckDBPyConnection, relation: str, column: str) -> tuple[int | None, str] | None:
    """(row, text) of the first value of ``column`` that is not missing (None: all are); the row is None for an
    input without row numbers."""
    q = quote_identifier(column)
    order = f" ORDER BY {ROW}" if ROW in _columns(con, relation) else ""
    found = con.execute(f"SELECT {ROW if order else 'NULL'}, CAST({q} AS VARCHAR) FROM {relation} WHERE {q} IS NOT "
                        f"NULL{order} LIMIT 1").fetchall()
    return (found[0][0], found[0][1]) if found else None


def _columns(con: duckdb.DuckDBPyConnection, relation: str) -> list[str]:
    return [r[0] for r in con.execute(f"DESCRIBE {relation}").fetchall()]


def user_columns(con: duckdb.DuckDBPyConnection, relation: str) -> list[str]:
    """The columns a user may name (an option such as reference, probes or per): all but the row numbers
    (:data:`ROW`), which are dcaudit's own and never offered as available."""
    return [c for c in _columns(con, relation) if c != ROW]


def guard_nan(con: duckdb.DuckDBPyConnection, types: Mapping[str, str], columns: tuple[str, ...] | list[str]) -> None:
    """Make NaN tests reliable before an audit reads float ``columns``.

    DuckDB (2.0) propagates Parquet min/max statistics into expressions, and those statistics leave NaN
    out: over a Parquet file ``isnan(x)`` and ``nullif(x, 'NaN')`` are folded to "not NaN" and a NaN would
    be binned or compared as a number. Statistics propagation is switched off for this connection when an
    audit reads a float column (about +50 % on a grouping scan; integer-only audits keep it: when an
    earlier audit on the same connection switched it off, it is switched back on — otherwise one float
    audit would slow every later integer audit of a run, and cost them DuckDB's perfect hash aggregate).
    """
    if any(value_kind(types.get(c, "")) == "float" for c in columns):
        con.execute("SET disabled_optimizers = 'statistics_propagation'")
        _STATISTICS_OFF.add(id(con))
    elif id(con) in _STATISTICS_OFF:
        con.execute("RESET disabled_optimizers")
        _STATISTICS_OFF.discard(id(con))


# Connections on which guard_nan switched statistics propagation off (by id: a reused id after a connection
# is gone only costs one RESET that changes nothing).
_STATISTICS_OFF: set[int] = set()


def statistics_off(con: duckdb.DuckDBPyConnection) -> bool:
    """True when :func:`guard_nan` switched statistics propagation off on this connection (so DuckDB answers
    no min/max from statistics, and uses no perfect hash aggregate)."""
    return id(con) in _STATISTICS_OFF


# Which number a text value spells, exactly where a decimal holds it (12345678901234567890 and …891 are two
# numbers, which as doubles they are not), else as a double
_NUMBER_KEY = ("coalesce(CAST(TRY_CAST(trim({q}) AS DECIMAL(38, 18)) AS VARCHAR), "
               "CAST(TRY_CAST(trim({q}) AS DOUBLE) AS VARCHAR))")
# A text value that reads as a finite number; "nan" and "inf" count as text: in a text column they are fiber
# values of their own, not the NaN or infinity a number column would exclude
_FINITE = "CASE WHEN isfinite(TRY_CAST(trim({q}) AS DOUBLE)) THEN TRY_CAST(trim({q}) AS DOUBLE) END"
# A number with a decimal comma or thousands separators (1,5; -0,25; 1,000,000.5), as a text value holds it
_COMMA_NUMBER = r"\s*[-+]?([0-9]+(,[0-9]+)?|[0-9]{1,3}(,[0-9]{3})+([.][0-9]+)?)\s*"
MIXED_TEXT_KIND = "evidence_numbers_and_text"
SPELLINGS_KIND = "evidence_number_spellings"


def numbers_and_text(con: duckdb.DuckDBPyConnection, relation: str, column: str, types: Mapping[str, str], *,
                     id_column: str, source: str = "") -> pa.Table | None:
    """A findings row when a text ``column`` holds both numbers and other text, else None.

    Such a column is compared as text by an exact fiber rule: a marker like ``NA`` or ``n/a`` becomes a
    fiber value of its own instead of a missing value, and ``1`` and ``1.0`` are different values. That is
    kept (the column may well be categories) and reported, with the first text value, its row and whether
    numbers are spelled more than one way. ``types``: the relation's column types (:func:`column_types`)."""
    if value_kind(types.get(column, "")) != "text":
        return None
    label = label_of(relation)
    q = quote_identifier(column)
    row = ROW if ROW in types else "NULL::BIGINT"
    ident = f"CAST({quote_identifier(id_column)} AS VARCHAR)" if id_column != ROW else f"CAST({ROW} AS VARCHAR)"
    found = con.execute(f"""
        SELECT count(*) FILTER (WHERE d IS NOT NULL), count(*) FILTER (WHERE d IS NULL),
               {'arg_min(v, r)' if ROW in types else 'min(v)'} FILTER (WHERE d IS NULL), min(r) FILTER (WHERE d IS NULL),
               {'arg_min(i, r)' if ROW in types else 'min(i)'} FILTER (WHERE d IS NULL),
               count(DISTINCT v) FILTER (WHERE d IS NOT NULL), count(DISTINCT k) FILTER (WHERE d IS NOT NULL),
               count(*) FILTER (WHERE d IS NULL AND CASE WHEN contains(v, ',') THEN regexp_full_match(v, {
                   quote_string(_COMMA_NUMBER)}) ELSE false END)
        FROM (SELECT {q} AS v, {_FINITE.format(q=q)} AS d, {_NUMBER_KEY.format(q=q)} AS k, {row} AS r,
                     {ident} AS i
              FROM {relation} WHERE {q} IS NOT NULL)""").fetchall()[0]
    n_numbers, n_text, value, first_row, candidate, spellings, numbers, n_comma = found
    kind = MIXED_TEXT_KIND
    if n_comma and n_comma == n_text:
        # every value that is no number is one with a decimal comma (1,5) or a thousands separator (1,000):
        # a column of numbers, compared as text (1,5 and 1,50 are two fiber values)
        return _finding(source, label, first_row, column, SPELLINGS_KIND, candidate,
                        f"{n_comma} value(s) look like numbers written with a decimal comma or a thousands separator, e.g. "
                        f"{str(value)[:40]!r}: the column is text, so the exact rule compares them as written (1,5 "
                        "and 1,50 are different fiber values) and a binned rule refuses it; write numbers with a "
                        "decimal point and no separators")
    if not n_numbers:
        return None
    if not n_text:
        if spellings <= numbers:
            return None
        # every value reads as a number, but the column is text (it also holds integers a double would round,
        # or spellings such as 1_000): numbers written two ways are two fiber values
        kind = SPELLINGS_KIND
        value, first_row, candidate = con.execute(f"""
            WITH t AS (SELECT {q} AS v, {_NUMBER_KEY.format(q=q)} AS k, {row} AS r, {ident} AS i
                       FROM {relation} WHERE {q} IS NOT NULL),
                 twice AS (SELECT k FROM t GROUP BY k HAVING count(DISTINCT v) > 1)
            SELECT {'arg_min(v, r), min(r), arg_min(i, r)' if ROW in types else 'min(v), NULL, min(i)'}
            FROM t WHERE k IN (SELECT k FROM twice)""").fetchall()[0]
        detail = (f"all {n_numbers} values are numbers, but the column is text (it holds integers a double would "
                  f"round, or spellings such as 1_000), so numbers written differently are different fiber values "
                  f"({spellings} spellings of {numbers} numbers, e.g. {str(value)[:40]!r})")
    else:
        detail = (f"{n_numbers} value(s) are numbers and {n_text} are text, e.g. {str(value)[:40]!r}: the column is "
                  "compared as text, so a text value is a fiber value of its own (not missing; leave a missing "
                  "value empty)")
        if spellings > numbers:
            detail += f", and numbers written differently (1 and 1.0) are different values ({spellings} spellings " \
                      f"of {numbers} numbers)"
    from dcaudit import arrays

    return arrays.table({"source": [source], "file": [label], "row": [first_row], "column": [column],
                         "kind": [kind], "detail": [detail], "candidate_id": [candidate]},
                        {"source": "string", "file": "string", "row": "int64", "column": "string", "kind": "string",
                         "detail": "string", "candidate_id": "string"})


def _finding(source: str, label: str, row: int | None, column: str, kind: str, candidate: str | None,
             detail: str) -> pa.Table:
    from dcaudit import arrays

    return arrays.table({"source": [source], "file": [label], "row": [row], "column": [column], "kind": [kind],
                         "detail": [detail], "candidate_id": [candidate]},
                        {"source": "string", "file": "string", "row": "int64", "column": "string", "kind": "string",
                         "detail": "string", "candidate_id": "string"})


LINE_BREAK_KIND = "evidence_line_break"


def line_breaks(con: duckdb.DuckDBPyConnection, relation: str, column: str, types: Mapping[str, str], *,
                id_column: str, source: str = "") -> pa.Table | None:
    """A findings row when values of a CSV's text ``column`` hold a line break, else None.

    A quoted CSV value may span lines, and that is kept; but a stray quote (``"Best of`` in a TSV) opens a
    value that swallows every line up to the next quote, and those rows silently become part of one value.
    The finding names the first such row, so the file can be checked."""
    if value_kind(types.get(column, "")) != "text":
        return None
    q = quote_identifier(column)
    row = ROW if ROW in types else "NULL::BIGINT"
    ident = f"CAST({quote_identifier(id_column)} AS VARCHAR)" if id_column != ROW else f"CAST({ROW} AS VARCHAR)"
    n, first_row, candidate, value = con.execute(f"""
        SELECT count(*), min({row}), {'arg_min' if ROW in types else 'min'}({ident}{', ' + row if ROW in types else ''}),
               {'arg_min' if ROW in types else 'min'}({q}{', ' + row if ROW in types else ''})
        FROM {relation} WHERE contains({q}, chr(10)) OR contains({q}, chr(13))""").fetchall()[0]
    if not n:
        return None
    shown = str(value).replace("\r", " ").replace("\n", " ")[:40]
    detail = (f"{n} value(s) span lines, e.g. {shown!r}: a quoted value may do so, but a stray or unclosed quote "
              "makes the lines up to the next quote part of one value (those rows are then missing): check the "
              "file at that row")
    from dcaudit import arrays

    return arrays.table({"source": [source], "file": [label_of(relation)], "row": [first_row], "column": [column],
                         "kind": [LINE_BREAK_KIND], "detail": [detail], "candidate_id": [candidate]},
                        {"source": "string", "file": "string", "row": "int64", "column": "string", "kind": "string",
                         "detail": "string", "candidate_id": "string"})


def column_types(con: duckdb.DuckDBPyConnection, relation: str) -> dict[str, str]:
    return {r[0]: str(r[1]) for r in con.execute(f"DESCRIBE {relation}").fetchall()}


def check_ids(con: duckdb.DuckDBPyConnection, relation: str, id_column: str, *,
              duplicates: Duplicates = "error", claim_sql: str | None = None, source: str = "") -> pa.Table | None:
    """NULL, empty or repeated candidate ids: an InputError naming the first few (or, with
    ``duplicates = "keep"``, findings rows — one per repeated id, ``duplicate_id_conflicting`` when the
    copies disagree on the claim). Returns None when every id is unique."""
    label = label_of(relation)
    require_id_column(id_column, _columns(con, relation), label)
    q = quote_identifier(id_column)
    # Only a text id can be blank: for numbers the text cast and trim per row (a third of a small
    # audit's time at 1e6 candidates) cannot find anything
    id_type = column_types(con, relation).get(id_column, "")
    kind = value_kind(id_type)
    empty = f"{q} IS NULL" if kind in ("int", "float", "bool") else f"{q} IS NULL OR trim(CAST({q} AS VARCHAR)) = ''"
    if kind == "int" and _unique_integers(con, relation, q, str(id_type)):
        return None
    nulls = con.execute(f"SELECT count(*) FILTER (WHERE {empty}), "
                        f"count(*) - count(DISTINCT {q}) - (count(*) - count({q})) FROM {relation}").fetchall()[0]
    n_null, n_repeat = int(nulls[0]), int(nulls[1] or 0)
    if n_null:
        rows = [r[0] for r in con.execute(
            f"SELECT {ROW} FROM {relation} WHERE {empty} "
            f"ORDER BY 1 LIMIT 5").fetchall()] if ROW in _columns(con, relation) else []
        where = f" (rows {', '.join(map(str, rows))}{', …' if n_null > len(rows) else ''})" if rows else ""
        raise InputError(f"{n_null} candidate(s) have an empty id{where}; every candidate needs one",
                         file=label, column=id_column)
    if not n_repeat:
        return None
    y = f"CAST(({claim_sql}) AS BOOLEAN)" if claim_sql else "NULL::BOOLEAN"
    # grouped by the value, as count(DISTINCT) counts: 0.0 and -0.0 are one float id, but two texts
    dup = con.sql(f"""SELECT CAST(min({q}) AS VARCHAR) AS candidate_id, count(*) AS n,
                             count(DISTINCT {y}) > 1 AS conflicting,
                             {f'min({ROW})' if ROW in _columns(con, relation) else 'NULL'} AS first_row
                      FROM {relation} WHERE {q} IS NOT NULL GROUP BY {q} HAVING count(*) > 1
                      ORDER BY first_row NULLS LAST, 1""")
    if duplicates == "error":
        head = dup.limit(5).fetchall()
        shown = ", ".join(f"{r[0]!r} ({r[1]}×)" for r in head)
        raise InputError(f"{n_repeat} repeated candidate id(s), e.g. {shown}; make ids unique, or keep the copies "
                         "and report them (--duplicates keep / duplicates=\"keep\")", file=label, column=id_column)
    return con.sql(f"""SELECT {quote_string(source)} AS source, {quote_string(label)} AS file, CAST(first_row AS BIGINT) AS "row",
                              {quote_string(id_column)} AS "column",
                              CASE WHEN conflicting THEN 'duplicate_id_conflicting' ELSE 'duplicate_id' END AS kind,
                              n || ' rows share this id' || CASE WHEN conflicting THEN ' and disagree on the claim'
                                                              ELSE '' END AS detail,
                              candidate_id FROM ({dup.sql_query()})""").to_arrow_table()


ID_SPELLINGS_KIND = "id_spellings"
# What may surround an id without being meant: spaces, tabs, line ends, no-break spaces
_ID_PADDING = " \t\r\n\u00a0\u2007\u202f\u3000"


def id_spellings(con: duckdb.DuckDBPyConnection, relation: str, id_column: str, *, source: str = "") -> pa.Table | None:
    """Findings rows for text candidate ids that differ only by surrounding white space, by their Unicode
    normal form (``A1`` and ``A1 ``; ``é`` as one code point or as ``e`` and an accent) or by how they write
    one number (``7``, ``007``, ``7.0``, ``+7``: a CSV's ids are read as text, where pandas and polars would
    read one number): different ids to every exact comparison, so different candidates, but most likely one
    candidate written twice. Kept and reported (one row per such group: kind ``id_spellings``, its first row
    and spellings), never merged: an id's letter case is not folded, as SMILES (``c`` and ``C``) tell case
    apart. None when there are none."""
    types = column_types(con, relation)
    if id_column == ROW or value_kind(types.get(id_column, "")) != "text":
        return None
    q = quote_identifier(id_column)
    pad = quote_string(_ID_PADDING)
    # Only an id with a non-ASCII character (strlen counts bytes, length characters), ASCII white space at
    # an end, or a number not written as a plain integer (0.5, 007, +7, 1e3) can have another spelling: one
    # scan finds them (~0.1-0.15 s a million ids). Each such id then costs a trim, a normalisation and a
    # number's cast (~0.3-0.5 s a million when every id is one).
    ends = " OR ".join(f"{f}({q}, {quote_string(c)})" for f in ("starts_with", "ends_with") for c in " \t\r\n")
    # a number not written as a plain integer (first character + , - . / or a digit; a CASE, as DuckDB's AND
    # would run the regular expression on every id)
    number = f"CASE WHEN ascii({q}) BETWEEN 43 AND 57 THEN regexp_full_match({q}, {quote_string(_ID_RESPELLED)}) " \
             "ELSE false END"
    suspect = f"(strlen({q}) <> length({q}) OR {ends} OR {number})"
    n_suspect, n_ids = con.execute(f"SELECT count(*) FILTER (WHERE {suspect}), count({q}) FROM {relation}").fetchall()[0]
    if not n_suspect:
        return None
    row = ROW if ROW in types else "NULL::BIGINT"
    text_key = f"nfc_normalize(trim({q}, {pad}))"   # t; the key: the number t writes, else t (_keyed)
    # Keys shared by two ids: among the suspect ids, or a suspect's key
    # that another id spells as it is (an id without padding, non-ASCII characters or a number written other
    # than as a plain integer is its own key). Only
    # those keys are then grouped with their rows, so ids in normal form cost one normalisation each.
    shared = f"""
        WITH s AS MATERIALIZED (
            SELECT id, k FROM ({_keyed(f"SELECT {q} AS id, {text_key} AS t FROM {relation} WHERE {suspect}")}))
        SELECT k FROM s GROUP BY k HAVING count(DISTINCT id) > 1"""
    if n_suspect < n_ids:  # ids that are their own key exist: one may be another's key
        shared += f" UNION SELECT s.k FROM s JOIN {relation} o ON o.{q} = s.k WHERE s.id <> s.k"
    keys = "_id_spellings_keys"
    con.execute(f"CREATE OR REPLACE TEMP TABLE {keys} AS {shared}")
    try:
        if not con.execute(f"SELECT count(*) FROM {keys}").fetchall()[0][0]:
            return None
        found = con.execute(f"""
            SELECT k, count(DISTINCT id) AS n, min(r) AS first_row, list(DISTINCT id ORDER BY id)[1:3] AS shown,
                   arg_min(id, {'r' if row == ROW else 'id'}) AS first_id
            FROM ({_keyed(f"SELECT {q} AS id, CASE WHEN {suspect} THEN {text_key} END AS t, {row} AS r "
                          f"FROM {relation} WHERE {q} IS NOT NULL")})
            WHERE k IN (SELECT k FROM {keys})
            GROUP BY k ORDER BY first_row NULLS LAST, k""").fetchall()
    finally:
        con.execute(f"DROP TABLE IF EXISTS {keys}")
    if not found:
        return None
    from dcaudit import arrays

    label = label_of(relation)
    details = [f"{n} ids differ only by surrounding white space, Unicode normalisation or how they write a number, "
               f"e.g. {_spellings(shown)}: "
               "they are different candidates to every comparison; write each id one way if they are one"
               for _, n, _, shown, _ in found]
    return arrays.table({"source": [source] * len(found), "file": [label] * len(found),
                         "row": [r[2] for r in found], "column": [id_column] * len(found),
                         "kind": [ID_SPELLINGS_KIND] * len(found), "detail": details,
                         "candidate_id": [r[4] for r in found]},
                        {"source": "string", "file": "string", "row": "int64", "column": "string", "kind": "string",
                         "detail": "string", "candidate_id": "string"})


# A number as a CSV writes it: an optional sign, digits with an optional fraction, an optional exponent
_ID_NUMBER = "[+-]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][+-]?[0-9]+)?"


# ... written other than as a plain integer: with a fraction, an exponent, a + sign, a leading zero, or -0
_ID_RESPELLED = "[+-]?[0-9]*[.][0-9]*([eE][+-]?[0-9]+)?|[+-]?[0-9]+[eE][+-]?[0-9]+|[+][0-9]+|-?0[0-9]+|-0"


def _keyed(inner: str) -> str:
    """SQL: the rows of ``inner`` (a select of ``t``, an id's text trimmed and in normal form, NULL for an id
    that is its own key, and other columns) with ``k``, the id's key: the number ``t`` writes, as a plain
    integer or decimal, else ``t`` itself. ``007``, ``+7``, ``7.0`` and ``7e0`` are ``7`` (the key an id written
    ``7`` is), ``.50`` is ``0.5``: exact for integers of up to 38 digits (HUGEINT) and for decimals of any
    length (their text, without the integer part's leading and the fraction's trailing zeros); with an
    exponent, or more digits, as the double it reads as (none for ±inf). Each part is computed once, in
    layers: DuckDB would compute an expression as often as it is written."""
    x = "TRY_CAST(t AS DOUBLE)"
    number = (f"CASE WHEN regexp_full_match(t, '[+-]?[0-9]+') THEN CAST(TRY_CAST(t AS HUGEINT) AS VARCHAR) "
              f"WHEN decimal THEN CASE WHEN starts_with(t, '-') AND (w <> '' OR f <> '') THEN '-' ELSE '' END || "
              f"CASE WHEN w = '' THEN '0' ELSE w END || CASE WHEN f = '' THEN '' ELSE '.' || f END "
              f"WHEN regexp_full_match(t, {quote_string(_ID_NUMBER)}) AND isfinite({x}) "
              f"THEN CASE WHEN {x} = trunc({x}) AND abs({x}) < 9007199254740992 THEN CAST(CAST({x} AS BIGINT) AS VARCHAR) "
              f"ELSE CAST({x} AS VARCHAR) END END")
    return f"""SELECT * EXCLUDE (decimal, w, f), CASE WHEN t IS NULL THEN id ELSE coalesce({number}, t) END AS k
               FROM (SELECT *, CASE WHEN decimal THEN ltrim(split_part(ltrim(t, '+-'), '.', 1), '0') END AS w,
                               CASE WHEN decimal THEN rtrim(split_part(t, '.', 2), '0') END AS f
                     FROM (SELECT *, regexp_full_match(t, '[+-]?([0-9]+[.][0-9]*|[.][0-9]+)') AS decimal
                           FROM ({inner})))"""


def _spellings(values: list[str]) -> str:
    """Spellings of one id for a message, escaped when one is not in Unicode normal form (é as e with an
    accent prints like é)."""
    import unicodedata

    escape = any(unicodedata.normalize("NFC", v) != v for v in values)
    return ", ".join(ascii(v[:40]) if escape else repr(v[:40]) for v in values)


def require_id_column(id_column: str, columns: Iterable[str], label: str, hint: str = "") -> None:
    """An InputError when the candidate id column is not among ``columns`` (near misses named, as for a
    claim's columns; a frame's index is not one of its columns), or when there is no id column and the
    input has no row numbers to stand in for one (:data:`ROW` not among ``columns``: a Parquet glob, an
    Arrow dataset)."""
    columns = list(columns)
    available = [c for c in columns if c != ROW]
    if id_column == ROW:
        if ROW not in columns:
            raise InputError("this input has no single row numbering (a Parquet glob or an Arrow dataset is read "
                             "in parts), so the row cannot be the candidate id: give the id column (--id / id=)",
                             file=label)
        return
    try:
        check_columns((id_column,), available, what="the id column")
    except ClaimError as exc:
        index = "; a pandas index is not a column: reset_index() makes it one" if label == "pandas DataFrame" else ""
        raise InputError(f"{exc}{index}{hint}", file=label) from None


_ID_INTEGERS = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER")
_PERFECT_ID_BITS = 24  # largest id range (2^24 values) grouped by DuckDB's perfect hash aggregate


def _unique_integers(con: duckdb.DuckDBPyConnection, relation: str, q: str, duckdb_type: str) -> bool:
    """True when integer ids are proven non-NULL and distinct without ``count(DISTINCT)`` (a hash of every id,
    ~0.1 s at 1e6 candidates); False means "not proven": the caller's full check decides and words the error.

    ``min``, ``max`` and ``count`` come from Parquet statistics; ids that rise strictly in row order (one
    streamed pass, a comparison per id in numpy) are distinct; otherwise ids spanning at most 2^24 values are
    counted per value by DuckDB's perfect hash aggregate (an array indexed by id - min)."""
    if duckdb_type.upper() not in _ID_INTEGERS:
        return False
    lo, hi, n_valid, n = con.execute(f"SELECT min({q}), max({q}), count({q}), count(*) FROM {relation}").fetchall()[0]
    if n_valid != n or hi - lo + 1 < n:  # a NULL id, or more ids than values they span: not unique
        return False
    from dcaudit import arrays

    kept = con.execute("SELECT current_setting('preserve_insertion_order')").fetchall()[0][0]
    con.execute("SET preserve_insertion_order = true")  # row order: sorted ids stay sorted
    try:
        last: int | None = None
        rising = True
        with contextlib.closing(arrow_batches(con, f"SELECT {q} FROM {relation}", 1 << 20)) as batches:
            for batch in batches:
                rising, last = arrays.rising(batch.column(0), last)
                if not rising:
                    break
    finally:
        con.execute(f"SET preserve_insertion_order = {'true' if kept else 'false'}")
    if rising:
        return True
    if (hi - lo + 1).bit_length() > _PERFECT_ID_BITS:
        return False
    try:
        con.execute(f"SET perfect_ht_threshold = {_PERFECT_ID_BITS}")
        distinct = con.execute(f"SELECT count(*) FROM (SELECT {q} FROM {relation} GROUP BY ALL)").fetchall()[0][0]
    finally:
        con.execute("RESET perfect_ht_threshold")
    return bool(distinct == n)


def arrow_batches(con: duckdb.DuckDBPyConnection, sql: str, rows: int) -> Generator[pa.RecordBatch, None, None]:
    """The result of ``sql`` as Arrow record batches of at most ``rows`` rows, read while DuckDB computes the
    rest. The reader closes when the caller stops (``contextlib.closing``: the connection takes no other query
    while it is open). A DuckDB failure met on the way (out of memory, a value that does not convert), which
    pyarrow raises as an OSError carrying DuckDB's message and SQL, is raised as the DuckDB exception it is,
    as ``to_arrow_table`` would raise it: the callers that word DuckDB errors then word this one too."""
    reader = con.sql(sql).to_arrow_reader(rows)
    try:
        while True:
            try:
                batch = reader.read_next_batch()
            except StopIteration:
                return
            except OSError as exc:
                raise _duckdb_exception(exc) from None
            yield batch
    finally:
        reader.close()


# DuckDB's error kinds (the words before "Error:" in its message) and the Python exceptions it raises for them
_DUCKDB_KINDS: dict[str, type[duckdb.Error]] = {
    "Out of Memory": duckdb.OutOfMemoryException, "IO": duckdb.IOException,
    "Conversion": duckdb.ConversionException, "INTERRUPT": duckdb.InterruptException,
    "Invalid Input": duckdb.InvalidInputException, "Binder": duckdb.BinderException,
    "Out of Range": duckdb.OutOfRangeException}


def _duckdb_exception(exc: OSError) -> duckdb.Error:
    text = str(exc)
    kind = text.split(" Error:", 1)[0].strip() if " Error:" in text else ""
    return _DUCKDB_KINDS.get(kind, duckdb.Error)(text)


def duckdb_message(exc: BaseException) -> str:
    """DuckDB's message in one line: its first line, without the SQL it echoes or internal view names."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    first = re.sub(r"^[A-Za-z ]*Error: ", "", first)
    first = re.sub(r"\b_(?:ev|grp|fib|arrow|csv)_[A-Za-z0-9_]+", "the input", first)
    if _REFUSED in first and _REFUSED_END in first:   # a refused column's reason is told whole, however long
        return first[:first.index(_REFUSED_END) + len(_REFUSED_END)]   # (its file's path may be long)
    return first[:300]
