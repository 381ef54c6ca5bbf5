"""The vision predictions table: its contract, a user's prediction files, and per-image evidence.

Every vision dataset ends as one **predictions table**, one row per (split, model, image, condition):

=============  ========  ==========================================================================
column         type      meaning
=============  ========  ==========================================================================
split          int       evaluation split, >= 0 (0 when there is only one)
model          string    classifier name
image_id       string    the image (stable across splits and models)
condition      string    ``clean`` or a corruption name (MNIST-C: ``<corruption>@<severity>``)
predicted      string    predicted class
confidence     double    max predict_proba, or the top-2 decision margin where there is none (a score)
label          string    true class
corruption     string    corruption name (NULL for clean)
severity       int       >= 0, 1–5 here (NULL for clean and for corruptions without severities)
=============  ========  ==========================================================================

A user's predictions (CSV, CSV.gz or Parquet) with these columns (``split``, ``corruption``,
``severity`` optional) go through :func:`read_predictions`; :func:`validate_predictions` checks any
predictions relation and names the file, row and column of the first problem — missing columns, empty
keys, a split or severity that is not a whole number >= 0, a severity above 0 on a clean row, a boolean split,
severity or confidence, a confidence that is not a probability in [0, 1] (unless declared a score:
``confidence = "score"``), no
``clean`` rows, conditions outside a declared list, duplicate (split, model, image_id, condition) rows. In a
Parquet glob a row is named by its own file and its row there. A spec with ``[source] path = "preds.csv"``
and a ``[vision]`` section audits it (``conditions = [...]`` declares the corruption names).

:func:`image_evidence_sql` derives the per-image evidence of a predictions table (clean class,
clean correctness, confidence decile); the connector's ``images`` table and the ``[vision]`` stage
both use it, so the pooled audit and the stage see the same evidence.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import duckdb
import pyarrow as pa

from dcaudit import defaults
from dcaudit.claims import sql_literal, value_kind
from dcaudit.errors import InputError, SpecError

CLEAN = "clean"
REQUIRED_COLUMNS = ("model", "image_id", "condition", "predicted", "label", "confidence")
OPTIONAL_COLUMNS = ("split", "corruption", "severity")
# read from a CSV as written: image ids 01 and 1 are two images (as numbers both were 1)
KEY_TEXT_COLUMNS = ("model", "image_id", "condition")


PREDICTION_SCHEMA = pa.schema([
    ("split", pa.int32()), ("model", pa.string()), ("image_id", pa.string()), ("condition", pa.string()),
    ("predicted", pa.string()), ("confidence", pa.float64()), ("label", pa.string()),
    ("corruption", pa.string()), ("severity", pa.int32()),
])


def _first_row(con: duckdb.DuckDBPyConnection, sql: str) -> tuple | None:
    rows = con.execute(sql + " LIMIT 1").fetchall()
    return rows[0] if rows else None


def _sql_list(values: Sequence[str]) -> str:
    return "[" + ", ".join("'" + str(v).replace("'", "''") + "'" for v in values) + "]"


def _not_integer(col: str, duckdb_type: str) -> str:
    """SQL true where ``col`` is not a whole number that fits an INTEGER (casts round 1.5 and '1.5' to 2)."""
    if value_kind(duckdb_type) == "int" and not duckdb_type.startswith("DECIMAL"):
        return f"TRY_CAST({col} AS INTEGER) IS NULL"
    return f"coalesce(TRY_CAST({col} AS INTEGER) <> TRY_CAST({col} AS DOUBLE), TRUE)"


def _as_text(col: str, duckdb_type: str) -> str:
    """A class as text: a float that is a whole number reads as one (1.0 as '1'), so it equals the integer 1."""
    if value_kind(duckdb_type) == "float" or duckdb_type.startswith("DECIMAL"):
        return (f"CASE WHEN isfinite({col}) AND {col} = floor({col}) AND abs({col}) < 1e15 THEN CAST(CAST({col} AS BIGINT) AS VARCHAR) "
                f"ELSE CAST({col} AS VARCHAR) END")
    return f"CAST({col} AS VARCHAR)"


_FILE, _ROW = "__dcaudit_file", "__dcaudit_row"   # the located relation's columns (see _located)


def _located(con: duckdb.DuckDBPyConnection, view: str, *, file: str, row_column: str | None,
             glob: str | None) -> str:
    """``view`` with each row's file and 1-based row (NULL where unknown), for naming a bad row.

    A Parquet glob's view does not number its rows: the glob is read again with each row's own file and row
    in it (only on the way to an error). Where DuckDB cannot add them (a file holds a column file_row_number)
    the rows stay unnamed, as before."""
    if row_column:
        return f"(SELECT *, {sql_literal(file)} AS {_FILE}, {row_column} AS {_ROW} FROM {view})"
    if glob:
        read = (f"(SELECT * EXCLUDE (file_row_number), file_row_number + 1 AS {_ROW} FROM read_parquet("
                f"{sql_literal(glob)}, union_by_name = true, filename = '{_FILE}', file_row_number = true))")
        try:
            con.execute(f"DESCRIBE {read}")
            return read
        except duckdb.Error:
            pass
    return f"(SELECT *, {sql_literal(file)} AS {_FILE}, NULL::BIGINT AS {_ROW} FROM {view})"


def _at(file: str, row: int, named: str) -> str:
    """Where a row is, for a message whose error names ``named`` as its file."""
    return f"row {row}" + ("" if file == named else f" of {file}")


def validate_predictions(con: duckdb.DuckDBPyConnection, view: str, *, file: str,
                         conditions: Sequence[str] | None = None, clean: str = CLEAN,
                         row_column: str | None = None, every_condition: bool = False,
                         confidence: str = defaults.CONFIDENCE, glob: str | None = None) -> str:
    """Check a predictions relation; return the name of a normalised view over it.

    Errors name the file, the 1-based data row (when ``row_column`` holds it, or, for ``glob``, the Parquet
    glob the view reads, the row's own file and its row there) and the column.
    ``every_condition``: each of ``conditions`` must occur (a user's table; a connector's may hold a subset).
    ``confidence``: one of :data:`defaults.CONFIDENCE_KINDS` (``defaults.CONFIDENCE``: "score", any finite number).
    The normalised view has the columns of ``PREDICTION_SCHEMA`` (``split`` 0 when absent;
    predicted/label/image_id as text so that '7' and 7, and 7.0 and 7, compare equal).
    """
    types = {r[0]: r[1] for r in con.execute(f"DESCRIBE {view}").fetchall()}
    columns = list(types)
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing:
        raise InputError(f"missing column(s) {', '.join(missing)}; a predictions table needs "
                         f"{', '.join(REQUIRED_COLUMNS)} (optional: {', '.join(OPTIONAL_COLUMNS)}); "
                         f"found {', '.join(columns)}", file=file, column=missing[0])
    if confidence not in defaults.CONFIDENCE_KINDS:
        raise SpecError(f"confidence = {confidence!r}: use one of {', '.join(defaults.CONFIDENCE_KINDS)}")
    has_split = "split" in columns
    checked = (*REQUIRED_COLUMNS, *(("split",) if has_split else ()))
    # a boolean casts to 1 and 0 (split true is split 1, confidence true 1.0): no number was meant
    for col in ("split", "severity", "confidence"):
        if value_kind(types.get(col, "")) == "bool":
            raise InputError(f"{col} must be a number, the column holds true/false", file=file, column=col)

    def located() -> str:  # built on the way to an error only: a glob's is read again
        return _located(con, view, file=file, row_column=row_column, glob=glob)
    # one scan for every value check: the first bad row per check (or a count when rows are unnumbered)
    first = (lambda cond: f"min({row_column}) FILTER (WHERE {cond})") if row_column else (
        lambda cond: f"CASE WHEN count_if({cond}) > 0 THEN -1 END")
    # casting every value to text is the expensive part of a scan: only text columns can hold ''
    checks = [("empty value", col, f"{col} IS NULL" + (f" OR trim({col}) = ''" if types[col] == "VARCHAR" else ""))
              for col in checked]
    checks.append(("confidence must be a finite number", "confidence",
                   "coalesce(NOT isfinite(TRY_CAST(confidence AS DOUBLE)), TRUE)"))
    if confidence == "probability":
        checks.append(("confidence must be a probability from 0 to 1", "confidence",
                       "TRY_CAST(confidence AS DOUBLE) NOT BETWEEN 0 AND 1"))
    for col in ("predicted", "label"):   # a class held as a float: NaN or ±inf is no class (it read as 'nan')
        if value_kind(types[col]) == "float":
            checks.append((f"{col} must be a class, not NaN or infinite", col, f"NOT isfinite({col})"))
    if has_split:
        checks.append(("split must be an integer", "split", _not_integer("split", types["split"])))
        checks.append(("split must not be negative", "split", "TRY_CAST(split AS DOUBLE) < 0"))
    if "severity" in columns:
        checks.append(("severity must be an integer", "severity",
                       f"severity IS NOT NULL AND {_not_integer('severity', types['severity'])}"))
        checks.append(("severity must not be negative", "severity", "TRY_CAST(severity AS DOUBLE) < 0"))
        # the severity suites leave clean rows out, so a severity there was ignored: a mislabelled corruption?
        checks.append(("a clean row has no severity (leave it empty, or 0)", "severity",
                       f"CAST(condition AS VARCHAR) = {sql_literal(clean)} AND TRY_CAST(severity AS DOUBLE) > 0"))
    found_rows = con.execute(f"SELECT {', '.join(first(c) for _, _, c in checks)} FROM {view}").fetchall()[0]
    for (message, col, cond), bad_row in zip(checks, found_rows, strict=True):
        if bad_row is None:
            continue
        at_file, row, value = con.execute(f"SELECT {_FILE}, {_ROW}, CAST({col} AS VARCHAR) FROM {located()} "
                                          f"WHERE {cond} ORDER BY 1, 2 LIMIT 1").fetchall()[0]
        shown = "" if message == "empty value" else f", found {value!r}"
        if message == "confidence must be a probability from 0 to 1":
            shown += '; a score (a margin, a logit) needs [vision] confidence = "score"'
        raise InputError(message + shown, file=at_file, row=row, column=col)
    found = [r[0] for r in con.execute(
        f"SELECT DISTINCT CAST(condition AS VARCHAR) FROM {view} ORDER BY 1").fetchall()]
    if clean not in found:
        raise InputError(f"no rows with condition {clean!r}: the clean prediction is the benchmark evidence "
                         f"(conditions found: {', '.join(found[:12])})", file=file, column="condition")
    if len(found) == 1:
        raise InputError(f"only condition {clean!r}: there is no corruption to audit robustness against",
                         file=file, column="condition")
    if conditions is not None:
        allowed = list(dict.fromkeys([clean, *conditions]))
        unknown = [c for c in found if c not in allowed]
        if unknown:
            at_file, bad_row, cond = con.execute(
                f"SELECT {_FILE}, {_ROW}, CAST(condition AS VARCHAR) FROM {located()} "
                f"WHERE list_contains({_sql_list(unknown)}, CAST(condition AS VARCHAR)) ORDER BY 1, 2 LIMIT 1"
            ).fetchall()[0]
            raise InputError(f"unknown condition {cond!r}; declared: {', '.join(allowed)}", file=at_file,
                             row=bad_row, column="condition")
        absent = [c for c in allowed if c not in found]
        if every_condition and absent:
            raise InputError(f"no rows with condition {absent[0]!r}, which [vision] conditions declares "
                             f"(conditions found: {', '.join(found[:12])})", file=file, column="condition")
    if "severity" in columns:  # a condition is one corruption at one severity (the severity suites group by it)
        mixed = _first_row(con, f"SELECT CAST(condition AS VARCHAR), string_agg(DISTINCT coalesce(CAST(severity AS "
                                f"VARCHAR), 'NULL'), ', ') FROM {view} WHERE CAST(condition AS VARCHAR) <> "
                                f"{sql_literal(clean)} GROUP BY 1 HAVING count(DISTINCT severity) > 1 "
                                "OR (count(severity) > 0 AND count(severity) < count(*))")
        if mixed is not None:
            at_file, bad_row = con.execute(
                f"SELECT {_FILE}, {_ROW} FROM {located()} WHERE CAST(condition AS VARCHAR) = ? QUALIFY severity IS "
                f"DISTINCT FROM first_value(severity) OVER (ORDER BY {_FILE}, {_ROW}) ORDER BY 1, 2 LIMIT 1",
                [mixed[0]]).fetchall()[0]
            raise InputError(f"condition {mixed[0]!r} has more than one severity ({mixed[1]}): a condition is one "
                             "corruption at one severity", file=at_file, row=bad_row, column="severity")
    split = ("split" if types.get("split") == "INTEGER" else "CAST(split AS INTEGER)") if has_split else "0"
    keys = ", ".join([split] + [c if types[c] == "VARCHAR" else f"CAST({c} AS VARCHAR)"
                                for c in ("model", "image_id", "condition")])
    if _first_row(con, f"SELECT {keys} FROM {view} GROUP BY ALL HAVING count(*) > 1") is not None:
        # the duplicate a reader meets first (its second row earliest), with every (file, row) it is at
        *dup, hits = con.execute(
            f"SELECT {keys}, list(({_FILE}, {_ROW}) ORDER BY {_FILE}, {_ROW}) AS hits FROM {located()} "
            "GROUP BY ALL HAVING count(*) > 1 ORDER BY hits[2], hits[1] LIMIT 1").fetchall()[0]
        (first_file, first_row), (at_file, at_row) = (tuple(h.values()) if isinstance(h, dict) else h
                                                      for h in hits[:2])
        count = f"{len(hits)} rows, " if len(hits) > 2 else ""
        earlier = f" ({count}first at {_at(first_file, first_row, at_file)})" if at_row is not None else ""
        raise InputError(f"duplicate prediction for split {dup[0]}, model {dup[1]!r}, image {dup[2]!r}, "
                         f"condition {dup[3]!r}{earlier}: each (split, model, image_id, condition) must occur once",
                         file=at_file, row=at_row, column="image_id")
    from dcaudit.claims import quote_identifier
    from dcaudit.inputs import label_of

    norm = quote_identifier(f"{label_of(view)} (predictions)")  # the view may be a quoted file name
    extra = ", ".join(f"CAST({c} AS {t}) AS {c}" if c in columns else f"NULL::{t} AS {c}"
                      for c, t in (("corruption", "VARCHAR"), ("severity", "INTEGER")))
    con.execute(f"""CREATE OR REPLACE TEMP VIEW {norm} AS SELECT
        {split} AS split, CAST(model AS VARCHAR) AS model, CAST(image_id AS VARCHAR) AS image_id,
        CAST(condition AS VARCHAR) AS condition, {_as_text("predicted", types["predicted"])} AS predicted,
        CAST(confidence AS DOUBLE) AS confidence, {_as_text("label", types["label"])} AS label, {extra}
        FROM {view}""")
    return norm


def read_predictions(con: duckdb.DuckDBPyConnection, path: Path, *, conditions: Sequence[str] | None = None,
                     clean: str = CLEAN, view: str = "user_predictions", confidence: str = defaults.CONFIDENCE) -> str:
    """Load and validate a user's predictions file (or Parquet glob); return the normalised view's name.

    ``confidence``: "score" (the default: any finite number) or "probability" (also in [0, 1])."""
    from dcaudit.inputs import ROW, register_input

    # the input contract: readable, unique columns, __row (a glob has none: its rows are named per file)
    registered = register_input(con, Path(path), text_columns=KEY_TEXT_COLUMNS)
    return validate_predictions(con, registered.view, file=str(path), conditions=conditions, clean=clean,
                                row_column=ROW if registered.has_row else None, every_condition=True,
                                confidence=confidence, glob=None if registered.has_row else str(path))


def image_evidence_sql(predictions: str, clean: str = CLEAN, bins: int = 10) -> str:
    """One row per (split, model, image) seen in ``predictions``, with its clean evidence.

    ``confidence_decile`` is ``pd.qcut(confidence, q=bins, duplicates='drop')``'s bin index over the
    clean predictions of one split × model: the number of distinct interior quantiles
    (``quantile_cont`` = numpy's linear interpolation) strictly below the confidence. Bins are
    closed on the right like qcut's, and equal cut points collapse like its dropped duplicates.
    A triple without a clean prediction keeps NULL evidence (reported, never dropped).
    """
    if bins < 2:
        raise SpecError(f"confidence bins must be >= 2, got {bins}")
    probs = ", ".join(repr(i / bins) for i in range(1, bins))
    lit = "'" + clean.replace("'", "''") + "'"
    return f"""WITH clean AS (SELECT split, model, image_id, predicted, confidence, predicted = label AS clean_correct
                       FROM {predictions} WHERE condition = {lit}),
             cuts AS (SELECT split, model, list_distinct(quantile_cont(confidence, [{probs}])) AS q
                      FROM clean GROUP BY split, model),
             triples AS (SELECT DISTINCT split, model, image_id FROM {predictions})
        SELECT k.split, k.model, k.image_id, c.predicted, c.clean_correct, c.confidence,
               CASE WHEN c.confidence IS NOT NULL
                    THEN len(list_filter(cuts.q, lambda u: u < c.confidence)) END AS confidence_decile
        FROM triples k LEFT JOIN clean c USING (split, model, image_id) LEFT JOIN cuts USING (split, model)"""
