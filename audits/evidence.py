"""Evidence maps: how a candidate's benchmark observables become a fiber key, computed in DuckDB SQL.

Fiber rules, in the CLI's notation (docs/package.md):

* ``exact``        identical values of every evidence column;
* ``quantile:K``   K equal-count bins per numeric column (cut points deduplicated, bins ``(lo, hi]``);
* ``width:W``      fixed-width bins ``floor(x / W)``;
* ``knn:K``        the K nearest neighbours in sorted evidence (a window per candidate);
* ``window:T``     every candidate within ``|Δ evidence| <= T`` (a window per candidate).

The first three partition candidates and are audited by :mod:`dcaudit.audits.fibers`; the window
rules give each candidate its own neighbourhood and are audited by :mod:`dcaudit.audits.sensitivity`.
Missing evidence is handled by ``missing``: ``drop`` keeps complete cases only (the paper's choice;
the others are kept in the candidates table with status ``excluded``), ``as-value`` makes "missing"
a value of its own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

import duckdb

from dcaudit.audits import quantiles
from dcaudit.claims import DUCKDB, Claim, SqlDialect, check_columns, claim_sql, quote_identifier, value_kind
from dcaudit.errors import ClaimError, InputError, SpecError
from dcaudit.evidence_map import EvidenceMap, EvidenceSQL, FiberRule, parse_fiber_rule  # noqa: F401 - re-exported
from dcaudit.inputs import (
    ROW,
    column_types,
    duckdb_message,
    guard_nan,
    label_of,
    not_a_number_hint,
    require_numeric,
)

if TYPE_CHECKING:
    from dcaudit.engine import Engine

MAX_QUANTILE_BINS = 100_000  # a bin rule asks for a partition, not a sort order: far more bins are a typo

# Codes of non-finite values in binned key parts (bins are 0 .. K for quantile rules): under
# missing = "as-value" NaN and ±inf are fibers of their own, never put into the top or bottom bin.
NAN_CODE_OFFSET, POS_INF_OFFSET, NEG_INF_OFFSET = 1, 2, 3
_WIDTH_NAN, _WIDTH_POS_INF, _WIDTH_NEG_INF = -(2**63) + 1, 2**63 - 1, -(2**63) + 2


def nonfinite_codes(ev: EvidenceSQL) -> dict[str, tuple[int, int, int]]:
    """Key column -> the codes :func:`bin_sql` gives NaN, +inf and -inf in a binned key part (fibers of their
    own under ``missing = "as-value"``); empty for exact keys, whose values are the evidence itself."""
    rule = ev.evidence.rule
    if rule.kind == "width":
        return dict.fromkeys(ev.key_columns, (_WIDTH_NAN, _WIDTH_POS_INF, _WIDTH_NEG_INF))
    if rule.kind != "quantile":
        return {}
    out = {}
    for column, key in zip(ev.evidence.columns, ev.key_columns, strict=True):
        k = len(ev.cuts.get(column, []))
        out[key] = (k + NAN_CODE_OFFSET, k + POS_INF_OFFSET, k + NEG_INF_OFFSET)
    return out


def _check_bins(k: int) -> None:
    if k > MAX_QUANTILE_BINS:
        raise SpecError(f"fiber rule quantile:{k} asks for more than {MAX_QUANTILE_BINS} bins; a fiber rule "
                        "needs far fewer bins than candidates (e.g. quantile:20)")


def value_sql(column: str, dialect: SqlDialect = DUCKDB) -> str:
    """SQL: the double a binned rule reads from ``column``, with -0.0 as 0.0 (``+ 0.0``): the two are one value,
    and which sign a bin's min or max or a cut point showed would otherwise depend on the order of rows."""
    return f"(CAST({dialect.identifier(column)} AS DOUBLE) + 0.0)"


def range_sql(column: str) -> str:
    """SQL: the values of :func:`value_sql` without the ``+ 0.0``, for :func:`dcaudit.audits.quantiles.bounds`
    only: its min and max are the same numbers (-0.0 = 0.0), and DuckDB answers a cast column's min and max
    from Parquet statistics where an expression on it costs a scan (0.15 s at 1e7 rows)."""
    return f"CAST({DUCKDB.identifier(column)} AS DOUBLE)"


def quantile_cuts(con: duckdb.DuckDBPyConnection, relation: str, columns: tuple[str, ...] | list[str], k: int,
                  where: str = "TRUE") -> dict[str, list[float]]:
    """Interior cut points of ``k`` equal-count bins of each column over its finite values, deduplicated
    (ties never straddle a cut). NaN and ±inf never move a cut.

    The cut points are ``quantile_cont``'s at ``i / k`` (linear interpolation between the order statistics
    at floor and ceil of ``(n − 1) q``), found by selection rather than a sort: a histogram pass and an
    exact pass over the few buckets holding a wanted rank (:mod:`dcaudit.audits.quantiles`).
    """
    _check_bins(k)
    if not quantiles.interpolation_matches(con):  # a DuckDB that interpolates differently: ask it
        return quantile_cuts_cont(con, relation, columns, k, where)
    probs = quantiles.probabilities(k)
    out: dict[str, list[float]] = {}
    for column in columns:
        x = value_sql(column)
        src = f"SELECT {x} AS x, TRUE AS y FROM {relation} WHERE {where}"
        out[column] = quantiles.select(con, src, probs, quantiles.bounds(con, range_sql(column), relation),
                                       resolve_bins=False).cuts
    return out


def quantile_cuts_cont(con: duckdb.DuckDBPyConnection, relation: str, columns: tuple[str, ...] | list[str], k: int,
                       where: str = "TRUE") -> dict[str, list[float]]:
    """:func:`quantile_cuts` by DuckDB's ``quantile_cont`` (one scan, a partial sort per column): the
    definition the selection reproduces, and its fallback."""
    _check_bins(k)
    probs = ", ".join(f"{i / k!r}" for i in range(1, k))
    aggs = []
    for column in columns:
        x = value_sql(column)
        aggs.append(f"quantile_cont({x}, [{probs}]) FILTER (WHERE isfinite({x}))")
    row = con.execute(f"SELECT {', '.join(aggs)} FROM {relation} WHERE {where}").fetchall()[0]
    return {c: sorted({float(v) for v in cuts}) if cuts else [] for c, cuts in zip(columns, row, strict=True)}


def _require_bindable(con: duckdb.DuckDBPyConnection, relation: str, claim: Claim, types: Mapping[str, str]) -> None:
    """A ClaimError, before any pass, for a claim the grammar lets through but DuckDB cannot evaluate over
    these column types (a timestamp or a struct compared with a number): binding it reads no row."""
    try:
        con.execute(f"SELECT CAST(({claim_sql(claim, types)}) AS BOOLEAN) FROM {relation} LIMIT 0")
    except duckdb.Error as exc:
        raise ClaimError(f"claim {claim.text!r} cannot be evaluated over these columns: "
                         f"{duckdb_message(exc)}") from None


_WIDTH_BIN_LIMIT = 2.0**62  # bin numbers are BIGINT, and the codes of NaN and ±inf sit at its ends


def _require_width_range(con: duckdb.DuckDBPyConnection, relation: str, column: str, width: float,
                         rule: str) -> None:
    """An InputError naming the first finite value whose bin number under ``width`` does not fit a BIGINT
    (|x / width| >= 2^62: a width far too small for the values, or values near the double range)."""
    x = f"CAST({quote_identifier(column)} AS DOUBLE)"
    row = ROW if ROW in column_types(con, relation) else "NULL"
    found = con.execute(f"SELECT {row}, {x} FROM {relation} WHERE NOT isnan({x}) AND NOT isinf({x}) "
                        f"AND NOT abs({x} / {width!r}) < {_WIDTH_BIN_LIMIT!r} LIMIT 1").fetchall()
    if found:
        first_row, value = found[0]
        raise InputError(f"fiber rule {rule}: the value {value:g} is more than {_WIDTH_BIN_LIMIT:.1e} widths from 0, "
                         "beyond the bins dcaudit can number; use a larger width", file=label_of(relation),
                         row=first_row, column=column)


_EXACT_DOUBLE = 2.0**53  # integers beyond it are not all doubles: 2^53 and 2^53 + 1 are one

# The numbers a text column may hold under a binned rule: what a CSV reader reads as a number (a sign, digits,
# a fraction, an exponent; nan, inf, infinity in any case). DuckDB's cast reads more (1_000 as 1000), which
# would make two spellings one bin where a reader of the file sees a number and a word.
NUMBER_TEXT = r"(?i)^\s*[+-]?((\d+\.?\d*|\.\d+)(e[+-]?\d+)?|nan|inf|infinity)\s*$"
_SPELLING = r"^\s*([+-]?)(\d*)\.?(\d*)(?:[eE]([+-]?\d+))?\s*$"  # sign, integer digits, fraction, exponent


def _spelled_number_sql(text: str) -> str:
    """SQL: the number a finite decimal spelling ``text`` names, as sign, significant digits and exponent
    (``-125e1`` for ``-1250.00``), so that every spelling of one number gives one key (zero is ``0``)."""
    p = f"regexp_extract({text}, '{_SPELLING}', ['s', 'i', 'f', 'e'])"
    return (f"(SELECT CASE WHEN sig = '' THEN '0' ELSE (CASE WHEN p.s = '-' THEN '-' ELSE '' END) || sig || 'e' "
            "|| CAST(coalesce(TRY_CAST(nullif(p.e, '') AS BIGINT), 0) - length(p.f) + length(digits) - length(sig) "
            "AS VARCHAR) END FROM (SELECT p, digits, rtrim(digits, '0') AS sig FROM (SELECT p, ltrim(p.i || p.f, '0') "
            f"AS digits FROM (SELECT {p} AS p))))")


def _require_exact_as_double(con: duckdb.DuckDBPyConnection, relation: str, column: str, types: Mapping[str, str],
                             rule: str) -> None:
    """An InputError for evidence a binned rule would change without a word, as bins and cut points are computed
    on doubles: integer or decimal values beyond 2^53 (9007199254740992 and …993 would share a bin), and
    decimal or text values that are not the number their double prints as (``4000000000000000.1`` reads as
    ``4000000000000000.0``, text ``9007199254740993`` as …992); text that is not a number as a CSV reader
    reads one (``1_000``) is refused first.

    A value passes when its double, printed as the shortest decimal that reads back as that double, names the
    same number: then no other passing value has that double, so doubles keep passing values apart. Every
    value of at most 15 significant digits passes (a double holds 15 digits), so does every double's own
    spelling (``0.30000000000000004``). (min/max of integers come from Parquet statistics where there are any.)"""
    kind = str(types.get(column, "")).upper()
    q = quote_identifier(column)
    text = value_kind(kind) == "text"
    precision = re.match(r"DECIMAL\((\d+)", kind)
    if precision and int(precision.group(1)) <= 15:
        return  # at most 15 digits: below 2^53, and held by a double
    if not text and not precision:
        if value_kind(kind) != "int" and kind not in ("HUGEINT", "UHUGEINT"):
            return
        lo, hi = con.execute(f"SELECT min({q}), max({q}) FROM {relation}").fetchall()[0]
        if lo is None or max(abs(float(lo)), abs(float(hi))) < _EXACT_DOUBLE:
            return
    row = ROW if ROW in types or ROW in column_types(con, relation) else "NULL"
    grammar = f"regexp_full_match(v, '{NUMBER_TEXT}')" if text else "TRUE"
    not_its_double = (f"(v <> CAST(d AS VARCHAR) AND {_spelled_number_sql('v')} <> "
                      f"{_spelled_number_sql('CAST(d AS VARCHAR)')})")
    # Text is judged value by value: one that is its double's own number passes at any magnitude (1e+20, as in
    # a float column). A decimal column, like an integer one, stops at 2^53 (its neighbours cannot be told apart).
    beyond = f"abs(d) >= {_EXACT_DOUBLE!r}"
    lost = f"{not_its_double}" if text else f"({beyond} OR {not_its_double})"
    # the first (by row) value that is not a number, is beyond 2^53 or is not its double's number
    found = con.execute(
        f"SELECT r, v, d, CASE WHEN NOT {grammar} THEN 'text' WHEN {beyond} THEN 'beyond' "
        f"ELSE 'digits' END FROM (SELECT {row} AS r, CAST({q} AS VARCHAR) AS v, TRY_CAST({q} AS DOUBLE) AS d "
        f"FROM {relation} WHERE {q} IS NOT NULL) WHERE NOT {grammar} OR (isfinite(d) AND {lost})"
        f"{' ORDER BY r' if row != 'NULL' else ''} LIMIT 1").fetchall()
    if not found:
        return
    first_row, value, double, problem = found[0]
    label = label_of(relation)
    if problem == "text":
        raise InputError(f"fiber rule {rule} needs numbers, but the column holds text: {value[:40]!r} (a number is "
                         f"digits with an optional sign, decimal point and exponent, or nan / inf){not_a_number_hint(value)}",
                         file=label, row=first_row, column=column)
    if problem == "digits":
        raise InputError(f"fiber rule {rule}: the value {value.strip()[:40]} has more digits than a double holds (it "
                         f"reads as {double!r}), so bins (computed on doubles) cannot tell it from its neighbours; "
                         "use the exact rule, or round the column to 15 significant digits", file=label,
                         row=first_row, column=column)
    raise InputError(f"fiber rule {rule}: the value {value.strip()[:40]} is beyond 2^53, where bins (computed on "
                     "doubles) cannot tell neighbouring integers apart; use the exact rule, or scale the column",
                     file=label, row=first_row, column=column)


def bin_sql(column: str, rule: FiberRule, cuts: list[float] | None, dialect: SqlDialect = DUCKDB) -> str:
    """The fiber-key part of one column (the same SQL in DuckDB and Spark; quoting and literals by ``dialect``)."""
    col = dialect.identifier(column)
    if rule.kind == "exact":
        return col
    x = f"CAST({col} AS DOUBLE)"
    # Portable SQL (DuckDB and Spark): isnan() and comparisons with ±Infinity, no isfinite()
    pos, neg = "CAST('Infinity' AS DOUBLE)", "CAST('-Infinity' AS DOUBLE)"
    if rule.kind == "width":
        return (f"CASE WHEN {col} IS NULL THEN NULL WHEN isnan({x}) THEN {_WIDTH_NAN} "
                f"WHEN {x} = {pos} THEN {_WIDTH_POS_INF} WHEN {x} = {neg} THEN {_WIDTH_NEG_INF} "
                f"ELSE CAST(floor({x} / {dialect.double(float(rule.param or 0))}) AS BIGINT) END")
    if rule.kind == "quantile":
        # Bin index = number of cut points strictly below the value: bins are (lo, hi]. Found by binary
        # search over the sorted cuts as nested CASEs (log2 K comparisons per value instead of K - 1:
        # ~40 % faster grouping at 20 bins).
        k = len(cuts or [])
        return (f"CASE WHEN {col} IS NULL THEN NULL WHEN isnan({x}) THEN CAST({k + NAN_CODE_OFFSET} AS INTEGER) "
                f"WHEN {x} = {pos} THEN CAST({k + POS_INF_OFFSET} AS INTEGER) "
                f"WHEN {x} = {neg} THEN CAST({k + NEG_INF_OFFSET} AS INTEGER) "
                f"ELSE {_search_sql(x, sorted(cuts or []), 0, k, dialect)} END")
    raise SpecError(f"fiber rule {rule} gives each candidate its own window; use the sensitivity audit")


def _search_sql(col: str, cuts: list[float], lo: int, hi: int, dialect: SqlDialect = DUCKDB) -> str:
    """The number of ``cuts`` strictly below ``col``, known to lie in ``lo .. hi``."""
    if lo == hi:
        return f"CAST({lo} AS INTEGER)"
    mid = (lo + hi) // 2  # col > cuts[mid] -> at least mid + 1 cuts below
    return (f"CASE WHEN {col} > {dialect.double(cuts[mid])} THEN {_search_sql(col, cuts, mid + 1, hi, dialect)} "
            f"ELSE {_search_sql(col, cuts, lo, mid, dialect)} END")


def evidence_select(con: duckdb.DuckDBPyConnection, relation: str, id_column: str, emap: EvidenceMap,
                    claim: Claim, available: list[str], *, types: Mapping[str, str] | None = None,
                    engine: Engine | None = None, with_row: bool = False) -> EvidenceSQL:
    """SQL for the evidence of every candidate: fiber-key parts ``k0..``, claim ``y`` and an exclusion reason.

    ``x0`` carries the raw first evidence column so fiber tables can show the observed range of a bin.
    Exclusion reasons (first that applies): ``evidence_missing``, ``evidence_nan``, ``evidence_infinite``
    (only under ``missing = "drop"``; under ``as-value`` they are fibers of their own), ``claim_missing`` (a
    column the claim reads is empty), ``claim_undefined`` (a division by zero or a NaN in the claim).

    The checks and column types come from ``relation`` in ``con`` (the driver's DuckDB, where every input is
    registered). The SQL is written for ``engine`` (default: DuckDB on ``con``): in its dialect, over its
    name of the relation, with quantile cuts computed by it — one builder for every engine. ``with_row`` adds
    ``_row``, the input's data row (``__row``), when the relation has one (``has_row``): the candidates table is
    in that order.
    """
    shown = [c for c in available if c != ROW]
    # the row numbers (ROW) are no column a user names: never listed as available
    check_columns(emap.columns, shown, what="the evidence map")
    if id_column != ROW:
        check_columns((id_column,), shown, what="the id column")
    check_columns(claim.columns, shown, what=f"claim {claim.text!r}")
    types = dict(types) if types is not None else column_types(con, relation)  # the caller may know them
    guard_nan(con, types, (*emap.columns, *claim.columns))
    if emap.rule.kind in {"quantile", "width"}:
        for col in emap.columns:
            require_numeric(con, relation, col, types, why=f"fiber rule {emap.rule}")
            if emap.rule.kind == "width":
                _require_width_range(con, relation, col, float(emap.rule.param or 0), str(emap.rule))
            _require_exact_as_double(con, relation, col, types, str(emap.rule))
    d = engine.dialect if engine is not None else DUCKDB
    source = engine.source(relation) if engine is not None else relation
    y_sql = claim_sql(claim, types, d)
    _require_bindable(con, relation, claim, types)
    q = d.identifier
    # Columns that can hold NaN or ±inf: floats, and under a binned rule text too, which it reads as doubles
    # ('nan', 'inf'), so that they are excluded or fibers of their own exactly as in a float column
    binned = emap.rule.kind in {"quantile", "width"}
    floats = [c for c in emap.columns if value_kind(types.get(c, "")) == "float"
              or (binned and value_kind(types.get(c, "")) == "text")]
    num = {c: q(c) if value_kind(types.get(c, "")) == "float" else f"CAST({q(c)} AS DOUBLE)" for c in floats}
    complete = " AND ".join(f"{q(c)} IS NOT NULL" for c in emap.columns)
    finite = " AND ".join(d.is_finite(num[c]) for c in floats) or "TRUE"
    cuts: dict[str, list[float]] = {}
    keys = tuple(f"k{i}" for i in range(len(emap.columns)))
    groups = None
    if emap.rule.kind == "quantile":
        # Cuts are taken over the candidates that enter the audit, as the bins are meant to be equal-count.
        k = int(emap.rule.param or 0)
        _check_bins(k)
        on_duckdb = engine is None or engine.name == "duckdb"
        if on_duckdb and len(emap.columns) == 1 and quantiles.interpolation_matches(con):
            # one column: the passes that select the cut points group the candidates into bins as well
            (column,) = emap.columns
            x = value_sql(column, d)
            sel = quantiles.select(con, f"SELECT {x} AS x, CAST({y_sql} AS BOOLEAN) AS y FROM {relation}",
                                   quantiles.probabilities(k), quantiles.bounds(con, range_sql(column), relation),
                                   resolve_bins=True)
            cuts = {column: sel.cuts}
            groups = quantiles.fiber_groups(sel, emap.missing, keys[0])
        else:
            where = f"({y_sql}) IS NOT NULL" + (f" AND {complete} AND {finite}" if emap.missing == "drop" else "")
            cuts = (engine.quantile_cuts(source, emap.columns, k, where) if engine is not None
                    else quantile_cuts(con, relation, emap.columns, k, where))
    parts = [f"{bin_sql(c, emap.rule, cuts.get(c), d)} AS {k}" for c, k in zip(emap.columns, keys, strict=True)]
    reasons = []
    if emap.missing == "drop":
        reasons.append(f"WHEN NOT ({complete}) THEN 'evidence_missing'")
        if floats:
            reasons.append(f"WHEN {' OR '.join(f'isnan({num[c]})' for c in floats)} THEN 'evidence_nan'")
            reasons.append(f"WHEN {' OR '.join(d.is_inf(num[c]) for c in floats)} THEN 'evidence_infinite'")
    if claim.columns:
        reasons.append(f"WHEN {' OR '.join(f'{q(c)} IS NULL' for c in claim.columns)} THEN 'claim_missing'")
    reasons.append(f"WHEN ({y_sql}) IS NULL THEN 'claim_undefined'")
    first = q(emap.columns[0])
    x0 = f"({d.try_double(first)} + 0.0)" if emap.rule.kind != "exact" else d.null_double  # -0.0 as 0.0 (value_sql)
    has_row = with_row and ROW in types
    sql = (
        f"SELECT CAST({q(id_column)} AS {d.text_type}) AS candidate_id, {', '.join(parts)}, "
        f"{x0} AS x0, CAST({y_sql} AS BOOLEAN) AS y, {f'{q(ROW)} AS _row, ' if has_row else ''}"
        f"CASE {' '.join(reasons)} END AS reason "
        f"FROM {source}"
    )
    key_types = tuple(types.get(c, "") if emap.rule.kind == "exact" else ("INTEGER" if emap.rule.kind == "quantile"
                                                                            else "BIGINT") for c in emap.columns)
    return EvidenceSQL(sql=sql, key_columns=keys, cuts=cuts, evidence=emap, claim=claim, relation=relation,
                       claim_sql=y_sql, label=label_of(relation), key_types=key_types, groups=groups,
                       has_row=has_row)
