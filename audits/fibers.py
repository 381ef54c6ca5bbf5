"""The mixed-fiber audit: is the claim constant on every fiber of the evidence map?

Status of a fiber (and of each of its candidates):

* ``certified_true`` / ``certified_false`` — every member has the same claim value and the fiber
  has at least ``min_support`` members;
* ``ambiguous`` — both claim values occur (a mixed fiber is proof of ambiguity at any size);
* ``unsupported`` — pure, but with fewer than ``min_support`` members.

Candidates the evidence map excludes (missing evidence under ``missing = "drop"``, or a missing
claim value) are kept in the candidates table with status ``excluded`` and a reason; fractions are
over the audited candidates, so certified + ambiguous + unsupported fractions sum to 1.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import duckdb
import numpy as np
import pyarrow as pa

from dcaudit import arrays
from dcaudit.audits.evidence import (
    NAN_CODE_OFFSET,
    NEG_INF_OFFSET,
    POS_INF_OFFSET,
    EvidenceMap,
    EvidenceSQL,
    bin_sql,
    evidence_select,
    nonfinite_codes,
)
from dcaudit.claims import Claim, Node, quote_identifier, sql_literal, value_kind
from dcaudit.errors import SpecError
from dcaudit.inputs import arrow_batches, column_types, statistics_off
from dcaudit.stage import FiberAudit
from dcaudit.storage import ROW_GROUP_ROWS, constant_dictionary

if TYPE_CHECKING:
    from dcaudit.engine import Engine
    from dcaudit.storage import RowSink

_counter = itertools.count()


@dataclass(frozen=True)
class AuditLabels:
    """What the rows of this audit are called in the evidence package."""

    source: str
    audit_id: str
    model: str | None = None



def summary_columns_sql(n_excluded: str = "n_excluded") -> str:
    """The summary row's counts and fractions (docs/package.md) from per-audit totals; shared by every audit
    that builds summary rows (fibers here, the vision audit over many split x model groups at once)."""
    return f"""CAST(n_candidates AS BIGINT) AS n_candidates, CAST({n_excluded} AS BIGINT) AS n_excluded,
            CAST(n_fibers AS BIGINT) AS n_fibers, CAST(n_mixed_fibers AS BIGINT) AS n_mixed_fibers,
            CAST(n_unsupported_fibers AS BIGINT) AS n_unsupported_fibers,
            CAST(certified_true AS BIGINT) AS certified_true, CAST(certified_false AS BIGINT) AS certified_false,
            CAST(ambiguous AS BIGINT) AS ambiguous, CAST(unsupported AS BIGINT) AS unsupported,
            (certified_true + certified_false) / nullif(n_candidates, 0) AS certified_fraction,
            ambiguous / nullif(n_candidates, 0) AS ambiguous_fraction,
            unsupported / nullif(n_candidates, 0) AS unsupported_fraction,
            n_mixed_fibers / nullif(n_fibers, 0) AS mixed_fiber_fraction,
            n_true / nullif(n_candidates, 0) AS prevalence,
            CAST(benchmark_only_errors AS BIGINT) AS benchmark_only_errors,
            benchmark_only_errors / nullif(n_candidates, 0) AS benchmark_only_risk,
            CAST(median_fiber_size AS DOUBLE) AS median_fiber_size"""

def readable_sql(key: str, duckdb_type: str, nonfinite: tuple[int, int, int] | None = None) -> str:
    """A key part as text, the same for the same value whatever the input's type: a float that is a whole
    number reads as one (``1``, not ``1.0``: pandas stores integer labels with gaps as floats), NULL as NA.
    Text (and lists, dates, …) that holds a comma, a double quote or a line break, or is the text ``NA``, is
    quoted as in CSV (``"x,y"``, ``"NA"``): the parts are joined by commas, and two fibers must never read
    alike (``x,y`` + ``p`` against ``x`` + ``y,p``; the text NA against a missing value).

    ``nonfinite``: a binned part's codes for NaN, +inf and -inf, which read ``nan``, ``inf``, ``-inf`` (as an
    exact float key does), not as one more bin number."""
    if nonfinite is not None:
        nan, pos, neg = nonfinite
        return (f"CASE {key} WHEN {nan} THEN 'nan' WHEN {pos} THEN 'inf' WHEN {neg} THEN '-inf' "
                f"ELSE {readable_sql(key, duckdb_type)} END")
    kind = value_kind(duckdb_type)
    if kind == "float":
        return (f"coalesce(CASE WHEN {key} = floor({key}) AND abs({key}) < 1e15 THEN CAST(CAST({key} AS BIGINT) "
                f"AS VARCHAR) ELSE CAST({key} AS VARCHAR) END, 'NA')")
    if kind in ("int", "bool"):
        return f"coalesce(CAST({key} AS VARCHAR), 'NA')"
    text = f"CAST({key} AS VARCHAR)"
    return (f"CASE WHEN {key} IS NULL THEN 'NA' WHEN {text} = 'NA' OR regexp_matches({text}, '[,\"\n\r]') "
            f"THEN '\"' || replace({text}, '\"', '\"\"') || '\"' ELSE {text} END")


def status_sql(n: str, n_true: str, min_support: int) -> str:
    return (
        f"CASE WHEN {n_true} > 0 AND {n_true} < {n} THEN 'ambiguous' "
        f"WHEN {n} < {int(min_support)} THEN 'unsupported' "
        f"WHEN {n_true} = {n} THEN 'certified_true' ELSE 'certified_false' END"
    )



_INTEGER_TYPES = ("TINYINT", "SMALLINT", "INTEGER", "BIGINT", "UTINYINT", "USMALLINT", "UINTEGER", "BOOLEAN")
_PACK_LIMIT = 2**62


def _head(labels: AuditLabels, claim: Claim, evidence: EvidenceMap) -> str:
    return (f"{sql_literal(labels.source)} AS source, {sql_literal(labels.audit_id)} AS audit_id, "
            f"{sql_literal(claim.text)} AS claim, {sql_literal(evidence.label)} AS evidence, "
            f"{sql_literal(str(evidence.rule))} AS fiber_rule, {sql_literal(labels.model)} AS model")


def _key_ranges(con: duckdb.DuckDBPyConnection, ev_t: str, ev: EvidenceSQL, evidence: EvidenceMap,
                relation: str) -> list[tuple[int, int]] | None:
    """(min, max) of every fiber-key part when all are small integers, else None (no packing).

    Known without a scan for booleans and quantile bins (0 .. number of cuts); otherwise from min/max
    of the source columns, which DuckDB answers from Parquet statistics (width bins are monotone in
    their column, so the bins of min and max bound them).
    """
    types = _key_types(con, ev_t, ev)
    if not all(str(types[k]).upper() in _INTEGER_TYPES for k in ev.key_columns):
        return None
    ranges: list[tuple[int, int] | None] = []
    for col, k in zip(evidence.columns, ev.key_columns, strict=True):
        if evidence.rule.kind == "quantile":  # bins 0 .. K, then the codes of NaN, +inf, -inf
            ranges.append((0, len(ev.cuts.get(col, [])) + NEG_INF_OFFSET))
        elif str(types[k]).upper() == "BOOLEAN":
            ranges.append((0, 1))
        else:
            ranges.append(None)
    todo = [i for i, r in enumerate(ranges) if r is None]
    if todo:
        parts = []
        for i in todo:
            col = quote_identifier(evidence.columns[i])
            if evidence.rule.kind == "width":
                # NaN and ±inf have width codes at the ends of BIGINT (and DuckDB's max() is NaN when
                # one occurs): such a column cannot be packed
                x = f"CAST({col} AS DOUBLE)"
                parts.append(f"min({x}) FILTER (WHERE isfinite({x})), max({x}) FILTER (WHERE isfinite({x})), "
                             f"count(*) FILTER (WHERE NOT isfinite({x}))")
            else:
                parts.append(f"min({col}), max({col}), 0")
        row = con.execute(f"SELECT {', '.join(parts)} FROM {relation}").fetchall()[0]
        for j, i in enumerate(todo):
            lo, hi, non_finite = row[3 * j], row[3 * j + 1], row[3 * j + 2]
            if non_finite:
                return None
            if lo is None:  # all missing: the key part is always NULL
                ranges[i] = (0, 0)
                continue
            if evidence.rule.kind == "width":
                lo, hi = (con.execute(f"SELECT {bin_sql('v', evidence.rule, None)} FROM "
                                      f"(SELECT CAST('{v!r}' AS DOUBLE) AS v)").fetchall()[0][0]
                          for v in (float(lo), float(hi)))
            ranges[i] = (int(lo), int(hi))
    size = 2  # the audited flag
    for lo, hi in ranges:  # type: ignore[misc]
        if hi < lo:
            return None
        size *= hi - lo + 2  # + 1 for NULL
        if size >= _PACK_LIMIT:
            return None
    return ranges  # type: ignore[return-value]


def _key_types(con: duckdb.DuckDBPyConnection, ev_t: str, ev: EvidenceSQL) -> dict[str, str]:
    """DuckDB type of every key column: known from the relation's types (evidence_select), else asked."""
    if ev.key_types and all(ev.key_types):
        return dict(zip(ev.key_columns, ev.key_types, strict=True))
    return dict(con.execute(f"SELECT column_name, column_type FROM (DESCRIBE {ev_t})").fetchall())


def _never_excluded(con: duckdb.DuckDBPyConnection, relation: str, evidence: EvidenceMap,
                    claim: Claim | None) -> bool:
    """True when no candidate can be excluded: no NULL in the evidence or claim columns, and a claim
    that cannot turn non-NULL inputs into NULL (no division). Parquet statistics answer the counts."""
    if claim is None or _has_division(claim.tree):
        return False
    cols = list(dict.fromkeys((*evidence.columns, *claim.columns)))
    types = column_types(con, relation)
    binned = evidence.rule.kind in {"quantile", "width"}  # which reads text evidence as doubles: 'nan', 'inf'
    if any(value_kind(types.get(c, "")) == "float" or (binned and c in evidence.columns and
                                                        value_kind(types.get(c, "")) == "text") for c in cols):
        return False  # NaN or ±inf would exclude a candidate; statistics do not count them
    counts = con.execute(f"SELECT count(*), {', '.join(f'count({quote_identifier(c)})' for c in cols)} "
                         f"FROM {relation}").fetchall()[0]
    return all(c == counts[0] for c in counts[1:])


def _has_division(node: Node) -> bool:
    return (node.kind == "binary" and node.value == "/") or any(_has_division(c) for c in node.children)


def packed_terms(key_columns: tuple[str, ...], ranges: list[tuple[int, int]]) -> tuple[list[str], int]:
    """The mixed-radix digits of small-integer key parts (0 for NULL) as SQL terms, and the radix after
    the last one: ``sum(terms)`` is one BIGINT per distinct key (used by the audit and the replay)."""
    radix, terms = 1, []
    for k, (lo, hi) in zip(key_columns, ranges, strict=True):
        code = f"coalesce(CAST({k} AS BIGINT) - ({lo}) + 1, 0)"
        terms.append(f"{code} * {radix}" if radix > 1 else code)
        radix *= hi - lo + 2
    return terms, radix


def group_evidence(con: duckdb.DuckDBPyConnection, ev_t: str, grp_t: str, ev: EvidenceSQL,
                   evidence: EvidenceMap, relation: str, claim: Claim | None = None) -> None:
    """One grouping scan of the evidence view into ``grp_t`` (key parts, audited, n, n_true, lo, hi).

    When every key part is a small integer:

    * a one-column quantile rule has been grouped already, by the passes that selected its cut points
      (``ev.groups``, :mod:`dcaudit.audits.quantiles`): no further scan;
    * exact keys are grouped on the key columns themselves with the claim's value and non-NULL counts as
      aggregates, so DuckDB can use its perfect hash aggregate (an array indexed by the key values, sized
      from the columns' statistics; ~30 % faster than hashing a packed key on 8 binary columns) and no
      exclusion reason is evaluated per row: a row is excluded when a key part is NULL (``drop``) or the
      claim is;
    * other keys (width bins) are packed into one BIGINT (mixed radix, 0 for NULL) and grouped on that,
      the parts unpacked from the few grouped rows afterwards.
    """
    keys = ", ".join(ev.key_columns)
    # x0 (the observed range of a bin) is NULL under exact fibers: aggregating it would cost ~20 %.
    lohi = ("NULL::DOUBLE AS lo, NULL::DOUBLE AS hi" if evidence.rule.kind == "exact"
            else "min(x0) AS lo, max(x0) AS hi")
    if evidence.rule.kind == "exact" and statistics_off(con) and all(
            str(t).upper() in _INTEGER_TYPES for t in _key_types(con, ev_t, ev).values()):
        # a float claim column switched statistics off: no min/max from statistics (probing the key ranges
        # would scan) and no perfect hash aggregate; grouping on the key columns is still the fastest way
        _group_exact(con, ev_t, grp_t, ev, evidence, None)
        return
    ranges = _key_ranges(con, ev_t, ev, evidence, relation)
    if ranges is None:
        con.execute(
            f"""CREATE TEMP TABLE {grp_t} AS
            SELECT {keys}, reason IS NULL AS audited, count(*) AS n, CAST(count_if(y) AS BIGINT) AS n_true, {lohi}
            FROM {ev_t} GROUP BY ALL"""
        )
        return
    if ev.groups is not None and evidence.rule.kind == "quantile":
        name = f"_arrow_{grp_t}"
        con.register(name, ev.groups)
        try:
            con.execute(f"CREATE TEMP TABLE {grp_t} AS SELECT * FROM {name}")
        finally:
            con.unregister(name)
        return
    if evidence.rule.kind == "exact":
        _group_exact(con, ev_t, grp_t, ev, evidence, ranges)
        return
    types = _key_types(con, ev_t, ev)
    terms, radix = packed_terms(ev.key_columns, ranges)
    unpack, r = [], 1
    for k, (lo, hi) in zip(ev.key_columns, ranges, strict=True):
        digit = f"((pk // {r}) % {hi - lo + 2})"
        unpack.append(f"CAST(CASE WHEN {digit} = 0 THEN NULL ELSE {digit} - 1 + ({lo}) END AS {types[k]}) AS {k}")
        r *= hi - lo + 2
    # Without NULLs no row is excluded: the audited digit is a constant, which saves evaluating the
    # exclusion reason per row (~25 % of the grouping scan on 8 binary columns).
    audited = str(radix) if _never_excluded(con, relation, evidence, claim) else f"CAST(reason IS NULL AS BIGINT) * {radix}"
    terms.append(audited)
    con.execute(
        f"""CREATE TEMP TABLE {grp_t} AS
        SELECT {', '.join(unpack)}, pk // {radix} = 1 AS audited, n, n_true, lo, hi FROM (
            SELECT {' + '.join(terms)} AS pk, count(*) AS n, CAST(count_if(y) AS BIGINT) AS n_true, {lohi}
            FROM {ev_t} GROUP BY pk)"""
    )


_PERFECT_BITS = 20  # largest perfect hash table asked for: 2^20 groups (DuckDB's default stops at 2^12)
_DEFAULT_PERFECT_BITS = 12  # DuckDB's perfect_ht_threshold (engine.connect leaves it alone; RESET restores it)


def _group_exact(con: duckdb.DuckDBPyConnection, ev_t: str, grp_t: str, ev: EvidenceSQL, evidence: EvidenceMap,
                 ranges: list[tuple[int, int]] | None) -> None:
    """Exact small-integer keys grouped on the key columns: count(*), count(y) and count_if(y) per key.

    A row is audited when its claim has a value and (``missing = "drop"``) no key part is NULL; that is all
    the exclusion reason decides for integer keys (NaN and ±inf exclusions concern float evidence). The
    perfect hash threshold is raised for this statement to the bits the key ranges need (at most
    ``_PERFECT_BITS``), and put back afterwards.
    """
    keys = ", ".join(ev.key_columns)
    complete = (" AND ".join(f"{k} IS NOT NULL" for k in ev.key_columns) if evidence.missing == "drop" else "TRUE")
    nulls = ", ".join("NULL" for _ in ev.key_columns)
    sql = f"""CREATE TEMP TABLE {grp_t} AS
        WITH g AS (SELECT {keys}, count(*) AS n_all, count(y) AS n_y, coalesce(count_if(y), 0) AS n_t FROM {ev_t} GROUP BY ALL)
        SELECT {keys}, TRUE AS audited, n_y AS n, CAST(n_t AS BIGINT) AS n_true, NULL::DOUBLE AS lo,
               NULL::DOUBLE AS hi
        FROM g WHERE {complete} AND n_y > 0
        UNION ALL
        SELECT {nulls}, FALSE, sum(CASE WHEN {complete} THEN n_all - n_y ELSE n_all END), 0, NULL, NULL
        FROM g HAVING sum(CASE WHEN {complete} THEN n_all - n_y ELSE n_all END) > 0"""
    bits = sum(max(1, (hi - lo + 1).bit_length()) for lo, hi in ranges) if ranges else _PERFECT_BITS + 1
    if bits <= _PERFECT_BITS:  # (values and NULL per key part)
        try:
            con.execute(f"SET perfect_ht_threshold = {max(bits, _DEFAULT_PERFECT_BITS)}; {sql}")
        finally:
            con.execute("RESET perfect_ht_threshold")
    else:
        con.execute(sql)


def summarise_groups(con: duckdb.DuckDBPyConnection, groups: str, key_columns: tuple[str, ...], *,
                     evidence: EvidenceMap, claim: Claim, min_support: int, labels: AuditLabels,
                     fibers_table: str, key_types: Mapping[str, str] | None = None,
                     nonfinite: Mapping[str, tuple[int, int, int]] | None = None) -> tuple[pa.Table, pa.Table]:
    """Summary and fibers tables from grouped evidence (key parts, audited, n, n_true, lo, hi).

    ``groups`` may come from DuckDB (:func:`group_evidence`) or from another engine (the Spark
    engine groups on a cluster and hands the few grouped rows over as Arrow); ``fibers_table`` is
    created as a temp table (fiber_key and status per key), left for the caller to join and drop.
    ``key_types`` (DuckDB type per key column) saves asking for them when the caller knows them;
    ``nonfinite`` gives the binned key parts' codes of NaN and ±inf (:func:`readable_sql`).
    """
    keys = ", ".join(key_columns)
    types = (dict(key_types) if key_types and all(key_types.get(k) for k in key_columns) else
             dict(con.execute(f"SELECT column_name, column_type FROM (DESCRIBE {groups})").fetchall()))
    # concat_ws is one flat call: a chain of || would nest once per column (thousands of evidence columns)
    codes = nonfinite or {}
    key_str = "concat_ws(',', " + ", ".join(readable_sql(k, str(types.get(k, "")), codes.get(k))
                                            for k in key_columns) + ")"
    fib_t = fibers_table
    grp_t = groups
    head = _head(labels, claim, evidence)
    # The fibers table, and the fibers with the excluded count, in one script (one round trip); the
    # summary is a handful of sums over the fibers, taken from them here (planning the summary's SQL
    # took longer than a 1e6-candidate grouping scan's tenth).
    fibers = con.sql(
        f"""CREATE TEMP TABLE {fib_t} AS
        SELECT {keys}, n, n_true, lo, hi,
               CAST(row_number() OVER (ORDER BY {keys} NULLS LAST) - 1 AS BIGINT) AS fiber_key,
               {status_sql('n', 'n_true', min_support)} AS status
        FROM {grp_t} WHERE audited;
        SELECT {head}, fiber_key, {key_str} AS evidence_key, lo AS evidence_lo, hi AS evidence_hi,
               CAST(n AS BIGINT) AS n, n_true, status,
               CAST(list_position({list(_STATUSES)!r}, status) - 1 AS INTEGER) AS _status,
               (SELECT CAST(coalesce(sum(n), 0) AS BIGINT) FROM {grp_t} WHERE NOT audited) AS _n_excluded
        FROM {fib_t} ORDER BY fiber_key"""
    ).to_arrow_table()
    if fibers.num_rows:
        n_excluded = int(arrays.values(fibers["_n_excluded"], np.int64)[0])
    else:
        n_excluded = int(con.execute(f"SELECT coalesce(sum(n), 0) FROM {grp_t} WHERE NOT audited").fetchall()[0][0])
    status = arrays.values(fibers["_status"], np.int64)
    fibers = fibers.drop_columns(["_status", "_n_excluded"])
    return summary_table(fibers, n_excluded, labels=labels, claim=claim, evidence=evidence,
                         min_support=min_support, status=status), fibers


_STATUSES = ("certified_true", "certified_false", "ambiguous", "unsupported")  # the values of status_sql


def summary_table(fibers: pa.Table, n_excluded: int, *, labels: AuditLabels, claim: Claim, evidence: EvidenceMap,
                  min_support: int, status: np.ndarray | None = None) -> pa.Table:
    """The summary row (docs/package.md; the columns of :func:`summary_columns_sql`) from a fibers table.

    Counts are integer sums; fractions are one division of two integers (as DuckDB's ``/`` computes them,
    NULL over nothing); the median fiber size is the middle size, or the mean of the two middle sizes
    (DuckDB's ``median``: exact for sizes below 2^52). ``status``: each fiber's index in ``_STATUSES`` when
    the caller has it. Built from buffers (:mod:`dcaudit.audits.arrays`): no pandas import.
    """
    n = arrays.values(fibers["n"], np.int64)
    t = arrays.values(fibers["n_true"], np.int64)
    if status is None:
        names = fibers["status"].to_pylist()
        status = np.asarray([_STATUSES.index(v) for v in names], dtype=np.int64)
    cert_true, cert_false, ambiguous, unsupported = (status == i for i in range(len(_STATUSES)))
    n_candidates, n_fibers = int(n.sum()), len(n)
    errors = int(np.minimum(t, n - t).sum())

    def per(x: int, y: int) -> float:
        return x / y if y else np.nan

    ints = {"n_candidates": n_candidates, "n_excluded": int(n_excluded), "n_fibers": n_fibers,
            "n_mixed_fibers": int(ambiguous.sum()), "n_unsupported_fibers": int(unsupported.sum()),
            "certified_true": int(n[cert_true].sum()), "certified_false": int(n[cert_false].sum()),
            "ambiguous": int(n[ambiguous].sum()), "unsupported": int(n[unsupported].sum())}
    floats = {"certified_fraction": per(ints["certified_true"] + ints["certified_false"], n_candidates),
              "ambiguous_fraction": per(ints["ambiguous"], n_candidates),
              "unsupported_fraction": per(ints["unsupported"], n_candidates),
              "mixed_fiber_fraction": per(ints["n_mixed_fibers"], n_fibers),
              "prevalence": per(int(t.sum()), n_candidates)}
    columns: dict[str, pa.Array] = {
        name: arrays.strings([value]) for name, value in (
            ("source", labels.source), ("audit_id", labels.audit_id), ("claim", claim.text),
            ("evidence", evidence.label), ("fiber_rule", str(evidence.rule)), ("model", labels.model))}
    columns["min_support"] = arrays.int64([int(min_support)])
    columns |= {name: arrays.int64([value]) for name, value in ints.items()}
    columns |= {name: arrays.float64_nan_null([value]) for name, value in floats.items()}
    columns["benchmark_only_errors"] = arrays.int64([errors])
    columns["benchmark_only_risk"] = arrays.float64_nan_null([per(errors, n_candidates)])
    columns["median_fiber_size"] = arrays.float64_nan_null([float(np.median(n)) if n_fibers else np.nan])
    return pa.table(columns)


# Every status a candidate can have: a fiber's (status_sql), then excluded. The candidates table holds it as a
# dictionary over these values (DuckDB's ENUM of them gives the same Arrow type): one byte a candidate instead of
# a string, and the package file stores a dictionary page either way (it reads back as text).
CANDIDATE_STATUSES = (*_STATUSES, "excluded")
STATUS_TYPE = pa.dictionary(pa.uint8(), pa.string())
STATUS_ENUM = "ENUM(" + ", ".join(sql_literal(s) for s in CANDIDATE_STATUSES) + ")"

# The candidates table after the engine's pass: every candidate's fiber and status (docs/package.md), in the
# input's row order (``__row``), or by candidate_id for an input without one (a Parquet glob).
CANDIDATE_COLUMNS = (("candidate_id", pa.string()), ("fiber_key", pa.int64()), ("claim_value", pa.bool_()),
                     ("status", STATUS_TYPE), ("excluded_reason", pa.string()))

_LOOKUP_LIMIT = 1 << 22  # largest packed-key space looked up in numpy (an int64 and a uint8 per slot: 36 MB)


def candidates_by_lookup(con: duckdb.DuckDBPyConnection, ev: EvidenceSQL, fibers: str,
                         sink: RowSink | None = None) -> pa.Table | None:
    """Every candidate with its fiber without a join or a sort, when the keys are small integers and the
    input numbers its rows (``ev.has_row``); None otherwise (the caller joins and orders instead).

    One scan in row order (a single-table SELECT, which DuckDB keeps in insertion order when asked to) gives
    each audited candidate its packed key (:func:`packed_terms`, over the ranges of the few fibers); numpy
    maps packed keys to fiber_key and status through a table indexed by packed key. A candidate with an
    exclusion reason, or whose key no fiber has, is ``excluded`` with no fiber, as the join's LEFT JOIN gives.

    The scan is read part by part (:data:`dcaudit.storage.ROW_GROUP_ROWS` rows), each part mapped as it comes
    and handed to ``sink``, so a package writer can write it while the scan goes on. The row numbers come back
    too: should they not rise (not expected), the sink is abandoned and the rows are read again whole and put
    in their order.
    """
    keys = ev.key_columns
    if not ev.has_row or len(ev.key_types) != len(keys) or not all(
            str(t).upper() in _INTEGER_TYPES for t in ev.key_types):
        return None
    bounds = ", ".join(f"min(CAST({k} AS BIGINT)), max(CAST({k} AS BIGINT))" for k in keys)
    row = con.execute(f"SELECT {bounds} FROM {fibers}").fetchall()[0]
    ranges = [(int(lo), int(hi)) if lo is not None else (0, 0) for lo, hi in zip(row[::2], row[1::2], strict=True)]
    terms, radix = packed_terms(keys, ranges)
    if radix > _LOOKUP_LIMIT:
        return None
    pk = " + ".join(terms)
    statuses = ", ".join(sql_literal(s) for s in CANDIDATE_STATUSES)
    fib = con.execute(f"SELECT {pk} AS pk, fiber_key, CAST(list_position([{statuses}], status) - 1 AS UTINYINT) "
                      f"AS st FROM {fibers}").fetchnumpy()
    fiber_of = np.full(radix + 1, -1, dtype=np.int64)  # slot radix: no fiber (excluded)
    status_of = np.full(radix + 1, len(_STATUSES), dtype=np.uint8)
    slots = np.asarray(fib["pk"], dtype=np.int64)
    fiber_of[slots] = np.asarray(fib["fiber_key"], dtype=np.int64)
    status_of[slots] = np.asarray(fib["st"], dtype=np.uint8)
    # a key part outside the fibers' range would alias another fiber's packed key: such a row has no fiber
    inside = " AND ".join(f"({k} IS NULL OR {k} BETWEEN {lo} AND {hi})" for k, (lo, hi) in zip(keys, ranges,
                                                                                                strict=True))
    # Without NULLs (Parquet statistics) and a claim that cannot be undefined no candidate has a reason: the
    # reason is not evaluated per candidate (~10 % of the scan on 8 binary columns)
    never = _never_excluded(con, ev.relation, ev.evidence, ev.claim)
    audited = inside if never else f"reason IS NULL AND {inside}"
    # One quantile column: its bin is found in numpy from the value (x0), by the comparisons bin_sql makes
    # (the number of cuts below it; codes past the last bin for NaN and ±inf), not by the CASE tree per row.
    one_bin = ev.evidence.rule.kind == "quantile" and len(keys) == 1 and ev.evidence.columns[0] in ev.cuts
    key = "x0 AS _x" if one_bin else f"coalesce(CASE WHEN {audited} THEN {pk} END, {radix}) AS _pk"
    sql = (f"SELECT candidate_id, _row, {key}, y AS claim_value{'' if never else ', reason AS excluded_reason'} "
           f"FROM ({ev.sql})")

    def mapped(rows: pa.Table) -> pa.Table:
        """The candidates of ``rows`` (a part of the scan, or all of it) with their fiber and status."""
        n = rows.num_rows
        fiber_key, status_code = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.uint8)
        if one_bin:
            codes = _bin_codes(rows["_x"], ev.cuts[ev.evidence.columns[0]], ranges[0], radix,
                               None if never else ~arrays.valid(rows["excluded_reason"]))
            np.take(fiber_of, codes, out=fiber_key)
            np.take(status_of, codes, out=status_code)
        else:   # chunk by chunk: the packed keys are looked up where DuckDB left them, not copied first
            at = 0
            for part in arrays.chunk_values(rows["_pk"], np.int64):
                np.take(fiber_of, part, out=fiber_key[at:at + len(part)])
                np.take(status_of, part, out=status_code[at:at + len(part)])
                at += len(part)
        status = pa.DictionaryArray.from_arrays(
            pa.Array.from_buffers(pa.uint8(), n, [None, pa.py_buffer(status_code)]), arrays.strings(CANDIDATE_STATUSES))
        return pa.table({"candidate_id": rows["candidate_id"], "fiber_key": arrays.int64(fiber_key, fiber_key < 0),
                         "claim_value": rows["claim_value"], "status": status,
                         "excluded_reason": pa.nulls(n, pa.string()) if never else rows["excluded_reason"]})

    kept = con.execute("SELECT current_setting('preserve_insertion_order')").fetchall()[0][0]
    con.execute("SET preserve_insertion_order = true")
    try:
        parts: list[pa.Table] = []
        last: int | None = None
        ordered = True
        with contextlib.closing(arrow_batches(con, sql, ROW_GROUP_ROWS)) as batches:
            for batch in batches:
                rows = pa.Table.from_batches([batch])
                ordered, last = arrays.rising(rows["_row"], last)
                if not ordered:   # not expected: DuckDB kept the scan order
                    break
                parts.append(mapped(rows))
                if sink is not None:
                    sink.put(parts[-1])
        if not ordered or not parts:   # the rows again, whole, put in their order (or none: the empty table)
            if sink is not None:
                sink.abandon()
            whole = con.sql(sql).to_arrow_table()
            return mapped(whole.take(arrays.int64(np.argsort(arrays.values(whole["_row"], np.int64), kind="stable"))))
        return parts[0] if len(parts) == 1 else pa.concat_tables(parts)
    finally:
        con.execute(f"SET preserve_insertion_order = {'true' if kept else 'false'}")


_BIN_BLOCK = 1 << 16          # values binned at a time: the block and its temporaries stay in cache
_COMPARED_CUTS = 64           # up to this many cuts, one comparison per cut beats a binary search per value


def _bin_codes(x: pa.ChunkedArray, cuts: list[float], bins: tuple[int, int], radix: int,
               audited: np.ndarray | None) -> np.ndarray:
    """Packed keys of one quantile column (its code - lo + 1, 0 for NULL; ``radix`` for a candidate that is
    not ``audited`` or whose bin lies outside the fibers' range ``bins``) from the values ``x``: a bin is the
    number of cuts strictly below the value, NaN / +inf / -inf have the codes after the last bin, as in
    :func:`dcaudit.audits.evidence.bin_sql`.

    Block by block, so each block's temporaries stay in cache; up to :data:`_COMPARED_CUTS` cuts the count is
    one vectorised comparison per cut (7× ``searchsorted`` at 1e7 values and 19 cuts)."""
    values, valid = arrays.values(x, np.float64), arrays.valid(x)
    ordered = np.asarray(sorted(cuts), dtype=np.float64)
    k, (lo, hi) = len(ordered), bins
    out = np.empty(len(values), dtype=np.int64)
    below = np.empty(min(_BIN_BLOCK, len(values)), dtype=bool)
    for start in range(0, len(values), _BIN_BLOCK):
        v, code = values[start:start + _BIN_BLOCK], out[start:start + _BIN_BLOCK]
        if k <= _COMPARED_CUTS:
            code[:] = 0
            step = below[:len(v)]
            for cut in ordered:
                np.greater(v, cut, out=step)
                code += step
        else:
            code[:] = np.searchsorted(ordered, v, side="left")
        if not np.isfinite(v).all():
            code[np.isnan(v)] = k + NAN_CODE_OFFSET
            code[v == np.inf] = k + POS_INF_OFFSET
            code[v == -np.inf] = k + NEG_INF_OFFSET
        present = valid[start:start + _BIN_BLOCK]
        ok = ~present | ((code >= lo) & (code <= hi))
        if audited is not None:
            ok &= audited[start:start + _BIN_BLOCK]
        code -= lo - 1
        code[~present] = 0
        code[~ok] = radix
    return out


@dataclass(frozen=True)
class _LabelledSink:
    """Hands each part of an engine's candidate rows on as the candidates table holds it (labelled)."""

    sink: RowSink
    labels: AuditLabels
    claim: Claim
    evidence: EvidenceMap

    def put(self, part: pa.Table) -> None:
        self.sink.put(labelled_candidates(part, self.labels, self.claim, self.evidence))

    def abandon(self) -> None:
        self.sink.abandon()


def labelled_candidates(rows: pa.Table, labels: AuditLabels, claim: Claim, evidence: EvidenceMap) -> pa.Table:
    """The candidates table: the constant columns of the audit (as :func:`summarise_groups` writes them)
    before an engine's candidate rows (:data:`CANDIDATE_COLUMNS`, in their order)."""
    n = rows.num_rows
    head = {"source": labels.source, "audit_id": labels.audit_id, "claim": claim.text, "evidence": evidence.label,
            "fiber_rule": str(evidence.rule), "model": labels.model}
    # one dictionary value per constant column (not n strings; and not pa.scalar, which imports pandas)
    columns: dict[str, pa.Array | pa.ChunkedArray] = {
        name: constant_dictionary(value, n) if value is not None else pa.nulls(n, pa.string())
        for name, value in head.items()}
    for name, kind in CANDIDATE_COLUMNS:
        # cast only what differs: a cast loads pyarrow.compute (~0.09 s), and DuckDB's types already match
        columns[name] = rows[name] if rows[name].type == kind else rows[name].cast(kind)
    return pa.table(columns)


def audit_fibers(
    con: duckdb.DuckDBPyConnection,
    relation: str,
    *,
    id_column: str,
    evidence: EvidenceMap,
    claim: Claim,
    min_support: int = 1,
    labels: AuditLabels,
    with_candidates: bool = True,
    engine: Engine | None = None,
    candidates_sink: RowSink | None = None,
) -> FiberAudit:
    """Run the audit on ``relation`` (a table or view in ``con``).

    The passes over candidates (quantile cuts, the grouping into fibers, the candidates join) run on
    ``engine`` — DuckDB on ``con`` by default, or Spark (:mod:`dcaudit.audits.spark_engine`) — and the
    grouped rows are finished here on ``con`` by :func:`summarise_groups`, the same for every engine.
    ``candidates_sink`` is handed the candidates table's rows, as the result holds them, while the engine
    computes them (a package writer writes them meanwhile), or is abandoned; an engine that cannot hand
    them on in parts leaves it alone.
    """
    if min_support < 1:
        raise SpecError(f"min_support must be >= 1, got {min_support}")
    if evidence.rule.is_window:
        raise SpecError(f"fiber rule {evidence.rule} is a window rule; use the sensitivity audit for it")
    if engine is None:
        from dcaudit.audits.engine import DuckDBEngine

        engine = DuckDBEngine(con)
    elif engine.con is not con:
        raise ValueError("the engine must finish its passes on the connection that holds the relation")
    types = column_types(con, relation)  # one DESCRIBE: evidence_select and the grouping reuse the types
    ev: EvidenceSQL = evidence_select(con, relation, id_column, evidence, claim, list(types), types=types,
                                      engine=engine, with_row=with_candidates)
    tag = next(_counter)
    grp_t, fib_t = f"_grp_{tag}", f"_fib_{tag}"
    # One grouping pass over the evidence (excluded rows in their own groups); the per-candidate columns
    # (id as text) are only computed when the candidates table is asked for.
    engine.group_counts(ev, grp_t)
    # the key types are the source's on DuckDB; another engine hands its grouped rows over as Arrow
    key_types = dict(zip(ev.key_columns, ev.key_types, strict=False)) if engine.name == "duckdb" else None
    try:
        summary, fibers = summarise_groups(con, grp_t, ev.key_columns, evidence=evidence, claim=claim,
                                           min_support=min_support, labels=labels, fibers_table=fib_t,
                                           key_types=key_types, nonfinite=nonfinite_codes(ev))
        candidates = None
        if with_candidates:
            sink = _LabelledSink(candidates_sink, labels, claim, evidence) if candidates_sink is not None else None
            candidates = labelled_candidates(engine.candidates(ev, fib_t, sink), labels, claim, evidence)
    finally:
        con.execute(f"DROP TABLE IF EXISTS {grp_t}; DROP TABLE IF EXISTS {fib_t}")
    return FiberAudit(summary=summary, fibers=fibers, candidates=candidates)
