"""Exact quantile cut points by selection, and the quantile fibers of one column, without sorting the column.

``quantile_cont`` collects every value of a column and partially sorts it for each cut point. Here the
cut points come from grouped scans instead (SQL groups, numpy reads the few grouped rows):

1. **Histogram pass** — one ``GROUP BY`` over the column in equal-width buckets (bounds from a min/max
   that DuckDB answers from Parquet or table statistics): per bucket the number of values, of trues of
   the claim, and the smallest and largest value. The bucket code is monotone in the value, so buckets
   are disjoint value ranges in order, and the cumulative counts say which bucket holds each rank a cut
   point needs (``floor`` and ``ceil`` of ``(n − 1) q``, as ``quantile_cont`` takes them).
2. **Exact pass** — the values of those few buckets, grouped by value (``GROUP BY x``: ties are one row).
   A bucket too large to list is split by another histogram pass over its range first.
3. The cut point is then computed from the two order statistics exactly as DuckDB interpolates them,
   ``fma(1 − d, lo, d · hi)`` (checked against this DuckDB's ``quantile_cont`` before first use; on a
   mismatch the cut points come from ``quantile_cont`` itself).

The same grouped rows give the fibers of a single-column quantile rule: a bucket lies in one bin unless a
cut point falls inside it, and such a bucket has been listed value by value (an exact pass lists it if
not). So the bins' counts, trues and observed ranges come out of the same two passes — binning and
grouping in one scan of the candidates instead of a ``quantile_cont`` scan and a binning scan.

The population is the finite values of the rows whose claim value (``y``) is not NULL, as in
:func:`dcaudit.audits.evidence.quantile_cuts`; NaN, ±inf and NULL evidence are counted apart
(their own fibers under ``missing = "as-value"``, excluded under ``drop``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

import duckdb
import numpy as np
import pyarrow as pa

from dcaudit import arrays  # columns from buffers, not pa.array: no pandas import
from dcaudit.engine import memory_limit_bytes

BUCKETS = 4096         # equal-width buckets per histogram pass: ~2.4k values each at 1e7 rows
EXACT_ROWS = 1 << 18   # values listed one by one in an exact pass; larger buckets are split first
MAX_ROUNDS = 8         # histogram refinements before listing regardless (4096^8 buckets resolve any double)


def dbl(value: float) -> str:
    """An SQL literal that is exactly this double (a string cast: no decimal rounding on the way)."""
    return f"CAST('{float(value)!r}' AS DOUBLE)"


def probabilities(k: int) -> list[float]:
    """The cut probabilities of ``quantile:k``, as the SQL of ``quantile_cuts`` writes them (``i / k``)."""
    return [i / k for i in range(1, k)]


def _fma(a: float, b: float, c: float) -> float:
    """a · b + c rounded once (exact rational arithmetic, then one correctly rounded conversion)."""
    return float(Fraction(a) * Fraction(b) + Fraction(c))


def interpolate(lo: float, d: float, hi: float) -> float:
    """DuckDB's (2.0) linear interpolation of ``quantile_cont``: ``fma(1 − d, lo, d · hi)``."""
    return _fma(1.0 - d, lo, d * hi)


def cut_ranks(n: int, probs: list[float]) -> list[tuple[int, int, float]]:
    """(floor, ceil, fraction) of ``(n − 1) q`` per probability, in doubles as ``quantile_cont`` computes them."""
    out = []
    for q in probs:
        rn = float(n - 1) * q
        lo = math.floor(rn)
        out.append((lo, math.ceil(rn), rn - lo))
    return out


def cuts_from_order_statistics(n: int, probs: list[float], value_at: Callable[[int], float]) -> list[float]:
    """Sorted distinct cut points from ``value_at(rank)`` of ``n`` values (nothing when there are none)."""
    if n <= 0:
        return []
    cuts = set()
    for lo, hi, d in cut_ranks(n, probs):
        cuts.add(float(value_at(lo)) if lo == hi else interpolate(float(value_at(lo)), d, float(value_at(hi))))
    return sorted(cuts)


_INTERPOLATION_OK: dict[str, bool] = {}


def interpolation_matches(con: duckdb.DuckDBPyConnection) -> bool:
    """True when :func:`cuts_from_order_statistics` reproduces this DuckDB's ``quantile_cont`` (checked once
    per DuckDB version, in one small query: the 99 cut points of 60 values, 15 of which differ between
    ``fma(1 − d, lo, d · hi)`` and ``lo + d (hi − lo)``, so a different formula would show)."""
    version = duckdb.__version__
    if version not in _INTERPOLATION_OK:
        n, probs = 60, probabilities(100)
        sample = f"SELECT (hash(i, {n}) % 1000003) / 1000003.0 * 10.0 - 0.3 AS x FROM range({n}) t(i)"
        want, values = con.execute(f"SELECT quantile_cont(x, [{', '.join(map(repr, probs))}]), list(x ORDER BY x) "
                                   f"FROM ({sample})").fetchall()[0]
        got = cuts_from_order_statistics(n, probs, np.asarray(values, dtype=float).__getitem__)
        _INTERPOLATION_OK[version] = got == sorted({float(v) for v in want})
    return _INTERPOLATION_OK[version]


# ---------------------------------------------------------------------------------------------------
# The selection.

@dataclass
class Pieces:
    """The population (finite values with a claim value) as disjoint value ranges in ascending order.

    A piece with ``lo == hi`` holds one distinct value; ``exact`` pieces came from an exact pass (or hold
    one value); the others are buckets whose values are known only by count and range.
    """

    lo: np.ndarray
    hi: np.ndarray
    n: np.ndarray      # population values
    t: np.ndarray      # of which the claim is true
    exact: np.ndarray
    code: np.ndarray | None = None  # the histogram pass's bucket code (-1: a piece of a later pass)

    def __post_init__(self) -> None:
        if self.code is None:
            self.code = np.full(len(self.lo), -1, dtype=np.int64)

    def take(self, mask: np.ndarray) -> Pieces:
        assert self.code is not None
        return Pieces(self.lo[mask], self.hi[mask], self.n[mask], self.t[mask], self.exact[mask], self.code[mask])

    def sorted(self) -> Pieces:
        return self.take(np.argsort(self.lo, kind="stable"))

    def replace(self, drop: np.ndarray, new: Pieces) -> Pieces:
        keep, old = ~drop, self.take(~drop)
        assert old.code is not None and new.code is not None and keep is not None
        return Pieces(np.concatenate([old.lo, new.lo]), np.concatenate([old.hi, new.hi]),
                      np.concatenate([old.n, new.n]), np.concatenate([old.t, new.t]),
                      np.concatenate([old.exact, new.exact]), np.concatenate([old.code, new.code])).sorted()


@dataclass
class Special:
    """Rows outside the population, counted: NULL, NaN, +inf and -inf evidence (all rows, and those with a
    claim value), and rows with a finite value but no claim value."""

    rows: dict[str, int] = field(default_factory=lambda: dict.fromkeys(("null", "nan", "pinf", "ninf"), 0))
    with_claim: dict[str, int] = field(default_factory=lambda: dict.fromkeys(("null", "nan", "pinf", "ninf"), 0))
    trues: dict[str, int] = field(default_factory=lambda: dict.fromkeys(("null", "nan", "pinf", "ninf"), 0))
    finite_without_claim: int = 0


@dataclass
class Selection:
    """Cut points and the grouped population they were selected from."""

    cuts: list[float]
    pieces: Pieces
    special: Special


_STATE = "coalesce(CAST(y AS UTINYINT), CAST(2 AS UTINYINT))"  # the claim's state: false 0, true 1, no value 2


class _Source:
    """Rows of ``c`` (the bucket code of ``x``), ``s`` (the claim's state: 0 false, 1 true, 2 no value) and
    ``x`` (DOUBLE): a subquery, or a materialised copy (``native``: DuckDB's own statistics on ``c``, ``s``).

    Grouping by (code, state) with count, min and max counts trues and claim values without a filtered or
    conditional aggregate, and makes every bucket's range the range of the values that have a claim."""

    def __init__(self, con: duckdb.DuckDBPyConnection, sql: str, code: str, *, native: bool = False) -> None:
        self.con, self.sql, self.code, self.native = con, sql, code, native

    def histogram(self, where: str = "TRUE", code: str | None = None, part: str | None = None) -> dict[str, np.ndarray]:
        keys = (f"{part} AS p, " if part else "") + f"{code or self.code} AS c, s"
        sql = f"SELECT {keys}, count(*) AS n, min(x) AS lo, max(x) AS hi FROM ({self.sql}) WHERE {where} GROUP BY ALL"
        if not (self.native and code is None and part is None):
            return self.con.execute(sql).fetchnumpy()
        # Over the materialised copy the bucket code is a stored column with exact statistics (DuckDB's own,
        # written with the rows; not Parquet's, which leave NaN out): with statistics propagation on for
        # this one statement, DuckDB groups by (code, state) in a perfect hash table (an array).
        current = self.con.execute("SELECT current_setting('disabled_optimizers'), "
                                   "current_setting('perfect_ht_threshold')").fetchall()[0]
        try:
            self.con.execute(f"SET disabled_optimizers = ''; SET perfect_ht_threshold = {_PERFECT_BITS}")
            return self.con.execute(sql).fetchnumpy()
        finally:
            self.con.execute(f"SET disabled_optimizers = '{current[0]}'; SET perfect_ht_threshold = {int(current[1])}")

    def values(self, where: str) -> dict[str, np.ndarray]:
        """(x, s, u, n) of the matching rows, one per distinct value, state and ``u``: no bucket code."""
        return self.con.execute(f"SELECT x, s, {self.code} IS NULL AS u, count(*) AS n FROM ({self.sql}) "
                                f"WHERE {where} GROUP BY ALL").fetchnumpy()


def _per_key(key: np.ndarray, state: np.ndarray, n: np.ndarray, lo: np.ndarray, hi: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(key, rows, rows with a claim value, trues, lo, hi) per distinct key from (key, state) groups; lo / hi
    over the groups with a claim value (NaN where there is none)."""
    keys, inv = np.unique(key, return_inverse=True)
    m = len(keys)
    pop = state < 2
    rows = np.bincount(inv, weights=n, minlength=m).astype(np.int64)
    with_claim = np.bincount(inv[pop], weights=n[pop], minlength=m).astype(np.int64)
    trues = np.bincount(inv[state == 1], weights=n[state == 1], minlength=m).astype(np.int64)
    low, high = np.full(m, np.inf), np.full(m, -np.inf)
    np.minimum.at(low, inv[pop], lo[pop])
    np.maximum.at(high, inv[pop], hi[pop])
    none = with_claim == 0
    low[none], high[none] = np.nan, np.nan
    return keys, rows, with_claim, trues, low, high


_PERFECT_BITS = 16         # the histogram's perfect hash table: up to 2^16 codes (4097 and NULL need 13 bits)
_ROW_BYTES = 24            # a materialised row (code, x, y and validity) with DuckDB's overhead
_counter = itertools.count()


@dataclass(frozen=True)
class Hint:
    """Where the column's finite values lie (from statistics: a superset is fine) and how many rows there are."""

    lo: float
    hi: float
    rows: int


def _materialise(con: duckdb.DuckDBPyConnection, rows: int) -> bool:
    """Copy (code, x, y) into a temp table when it takes at most a quarter of DuckDB's memory limit: the
    source is read once (not twice), the histogram groups by a stored code, the exact pass scans memory."""
    limit = memory_limit_bytes(con)
    return rows <= 1 << 26 if limit is None else rows * _ROW_BYTES <= limit / 4


def _np(result: dict[str, np.ndarray], name: str, dtype: type = np.int64) -> np.ndarray:
    """A fetched column as a plain array (NULL as 0 / NaN: callers look at validity where it matters)."""
    return np.asarray(arrays.fetched_filled(result[name], np.nan if dtype is float else 0), dtype=dtype)


def _valid(result: dict[str, np.ndarray], name: str) -> np.ndarray:
    return ~arrays.fetched_nulls(result[name])


def _code_sql(lo: float, hi: float, buckets: int) -> str:
    """Bucket of ``x`` among ``buckets`` equal-width buckets on [lo, hi]: monotone in x, NULL for NULL,
    NaN, ±inf and values too far out for an INTEGER (bounds are hints: values beyond them get codes
    beyond 0 .. buckets, still in order)."""
    lo, hi = float(lo), float(hi)  # Python floats: a subnormal span overflows 1 / span to inf without a warning
    if not hi > lo:  # one value (or no range): every value in bucket 0, others in order beyond it
        return f"TRY_CAST(x - {dbl(lo)} AS INTEGER)"
    span = hi - lo
    if not math.isfinite(span):  # -1e308 .. 1e308: halves do not overflow (and are normal numbers here)
        return f"TRY_CAST((x / 2 - {dbl(lo / 2)}) / {dbl(hi / 2 - lo / 2)} * {buckets} AS INTEGER)"
    scale = buckets / span
    if not math.isfinite(scale):  # a subnormal span (0 .. 5e-324): divide by it instead, ratios are finite
        return f"TRY_CAST((x - {dbl(lo)}) / {dbl(span)} * {buckets} AS INTEGER)"
    return f"TRY_CAST((x - {dbl(lo)}) * {dbl(scale)} AS INTEGER)"


def bounds(con: duckdb.DuckDBPyConnection, column_sql: str, relation: str) -> Hint:
    """Where the column's values lie and the number of rows of the relation — from statistics where DuckDB
    keeps them (the query runs with statistics propagation on; it only sizes the buckets and decides on a
    copy, never a result) — or, when that is not a finite range, from a scan of the finite values."""
    current = con.execute("SELECT current_setting('disabled_optimizers')").fetchall()[0][0]
    try:
        if current:
            con.execute("SET disabled_optimizers = ''")
        lo, hi, rows = con.execute(f"SELECT min({column_sql}), max({column_sql}), count(*) FROM {relation}"
                                   ).fetchall()[0]
    finally:
        if current:
            con.execute(f"SET disabled_optimizers = '{current}'")
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        x = column_sql
        lo, hi = con.execute(f"SELECT min({x}) FILTER (WHERE isfinite({x})), max({x}) FILTER (WHERE isfinite({x})) "
                             f"FROM {relation}").fetchall()[0]
        if lo is None:
            lo, hi = 0.0, 1.0
    return Hint(float(lo), float(hi), int(rows))


def select(con: duckdb.DuckDBPyConnection, source_sql: str, probs: list[float], hint: Hint, *,
           resolve_bins: bool) -> Selection:
    """Exact cut points (as ``quantile_cont`` over the population of ``source_sql``) by selection.

    ``source_sql`` yields ``x`` (DOUBLE) and ``y`` (BOOLEAN; NULL rows are outside the population).
    With ``resolve_bins`` every bucket a cut point falls inside is listed value by value too, so that
    the pieces can be binned without looking at the rows again. When it fits (:func:`_materialise`), the
    source is read once into a temp table of (code, x, y) that the passes then scan. A source of at most
    :data:`LISTED_ROWS` rows is listed whole instead (:func:`_select_listed`).
    """
    if hint.rows <= LISTED_ROWS:
        return _select_listed(con, source_sql, probs)
    rows = f"SELECT {_code_sql(hint.lo, hint.hi, BUCKETS)} AS c, {_STATE} AS s, x FROM ({source_sql})"
    if not _materialise(con, hint.rows):
        return _select(_Source(con, rows, "c"), probs, resolve_bins)
    table = f"_dcaudit_qsel_{next(_counter)}"
    con.execute(f"CREATE TEMP TABLE {table} AS {rows}")
    try:
        return _select(_Source(con, f"SELECT * FROM {table}", "c", native=True), probs, resolve_bins)
    finally:
        con.execute(f"DROP TABLE IF EXISTS {table}")


def _listed(table: dict[str, np.ndarray], special: Special, uncoded: bool) -> Pieces:
    """Pieces of one value each from an exact pass (rows of ``x``, ``s``, ``u``: no bucket code, ``n``). Rows
    with a code belong to the requested pieces (their rows without a claim value were counted by the
    histogram pass); rows without one are NULL, NaN, ±inf or — when the bounds were too narrow — finite values
    beyond them, which become pieces of their own. ``uncoded``: such rows are in ``table`` and counted into
    ``special`` here."""
    valid_rows = _valid(table, "x")
    x_rows, s_rows, n_rows_ = _np(table, "x", float), _np(table, "s"), _np(table, "n")
    no_code = _np(table, "u", bool)
    if uncoded:
        for key, mask in (("null", ~valid_rows), ("nan", valid_rows & np.isnan(x_rows)),
                          ("pinf", valid_rows & (x_rows == np.inf)), ("ninf", valid_rows & (x_rows == -np.inf))):
            special.rows[key] += int(n_rows_[mask].sum())
            special.with_claim[key] += int(n_rows_[mask & (s_rows < 2)].sum())
            special.trues[key] += int(n_rows_[mask & (s_rows == 1)].sum())
        beyond = valid_rows & np.isfinite(x_rows) & no_code
        special.finite_without_claim += int(n_rows_[beyond & (s_rows == 2)].sum())
    finite_rows = valid_rows & np.isfinite(x_rows)
    xv, _, ny_, nt_, _, _ = _per_key(x_rows[finite_rows], s_rows[finite_rows], n_rows_[finite_rows],
                                     x_rows[finite_rows], x_rows[finite_rows])
    keep = ny_ > 0
    return Pieces(xv[keep], xv[keep].copy(), ny_[keep], nt_[keep], np.ones(int(keep.sum()), dtype=bool))


def _cuts(pieces: Pieces, probs: list[float]) -> list[float]:
    """The cut points from pieces whose ranks they need are exact (one value each)."""
    total = int(pieces.n.sum())
    cum = np.cumsum(pieces.n)

    def value_at(rank: int) -> float:
        return float(pieces.lo[int(np.searchsorted(cum, rank, side="right"))])

    return cuts_from_order_statistics(total, probs, value_at)


LISTED_ROWS = 1 << 16  # at most this many rows: every (value, claim state) listed by one grouped query


def _select_listed(con: duckdb.DuckDBPyConnection, source_sql: str, probs: list[float]) -> Selection:
    """:func:`select` for a small source: one ``GROUP BY`` lists every distinct (value, claim state) with its
    count, and the cut points are read from them. Every piece is one value, as the passes would leave the
    ones they list; a few thousand rows take one statement here instead of the passes' eight."""
    table = con.execute(f"SELECT x, {_STATE} AS s, TRUE AS u, count(*) AS n FROM ({source_sql}) GROUP BY ALL"
                        ).fetchnumpy()
    special = Special()
    pieces = _listed(table, special, uncoded=True).sorted()
    return Selection(_cuts(pieces, probs) if probs else [], pieces, special)


def _select(src: _Source, probs: list[float], resolve_bins: bool) -> Selection:
    first = src.histogram()
    coded = _valid(first, "c")
    state, n_rows = _np(first, "s"), _np(first, "n")
    lo_rows, hi_rows = _np(first, "lo", float), _np(first, "hi", float)
    codes, n_all, ny, nt, lo, hi = _per_key(_np(first, "c")[coded], state[coded], n_rows[coded], lo_rows[coded],
                                            hi_rows[coded])
    special = Special()
    special.finite_without_claim = int((n_all - ny).sum())
    has = ny > 0
    pieces = Pieces(lo[has], hi[has], ny[has], nt[has], np.zeros(int(has.sum()), dtype=bool), codes[has])
    pieces.exact = pieces.lo == pieces.hi
    pieces = pieces.sorted()
    uncoded_pending = False
    if (~coded).any():
        unc = ~coded
        if not _valid(first, "lo")[unc].any():  # only NULL evidence among the rows without a code
            special.rows["null"] = int(n_rows[unc].sum())
            special.with_claim["null"] = int(n_rows[unc & (state < 2)].sum())
            special.trues["null"] = int(n_rows[unc & (state == 1)].sum())
        else:  # NaN, ±inf (or values beyond the bounds): listed by the first exact pass
            uncoded_pending = True

    def chosen_sql(chosen: Pieces) -> list[str]:
        """The rows of the chosen pieces: buckets of the histogram pass by their code (one IN list, cheaper
        to test than ranges), pieces of later passes by their value range."""
        assert chosen.code is not None
        first_level = chosen.code >= 0
        parts = [f"({src.code}) IN ({', '.join(str(int(c)) for c in chosen.code[first_level])})"] if first_level.any() else []
        return parts + [f"(x >= {dbl(a)} AND x <= {dbl(b)})" for a, b in
                        zip(chosen.lo[~first_level], chosen.hi[~first_level], strict=True)]

    def listing(mask: np.ndarray, with_uncoded: bool) -> Pieces:
        parts = chosen_sql(pieces.take(mask)) + ([f"({src.code}) IS NULL"] if with_uncoded else [])
        return _listed(src.values(" OR ".join(parts)), special, with_uncoded)

    def refine(mask: np.ndarray) -> Pieces:
        """Split the chosen pieces by a histogram pass over each one's own range (one scan for all)."""
        idx = np.flatnonzero(mask)
        inside = [f"(x >= {dbl(pieces.lo[i])} AND x <= {dbl(pieces.hi[i])})" for i in idx]
        part = "CASE " + " ".join(f"WHEN {r} THEN {j}" for j, r in enumerate(inside)) + " END"
        code = "CASE " + " ".join(f"WHEN {r} THEN {_code_sql(pieces.lo[i], pieces.hi[i], BUCKETS)}"
                                  for r, i in zip(inside, idx, strict=True)) + " END"
        sub = src.histogram(where=f"s < 2 AND ({' OR '.join(inside)})", code=code, part=part)
        key = _np(sub, "p") * (BUCKETS + 3) + _np(sub, "c")  # sub-codes lie in 0 .. BUCKETS (+1 by rounding)
        _, _, ny_, nt_, lo_, hi_ = _per_key(key, _np(sub, "s"), _np(sub, "n"), _np(sub, "lo", float),
                                            _np(sub, "hi", float))
        out = Pieces(lo_, hi_, ny_, nt_, np.zeros(len(ny_), dtype=bool))
        out.exact = out.lo == out.hi
        return out

    rounds = 0
    while True:
        total = int(pieces.n.sum())
        need = np.zeros(len(pieces.n), dtype=bool)
        if total and probs:
            cum = np.cumsum(pieces.n)
            ranks = sorted({r for lo_r, hi_r, _ in cut_ranks(total, probs) for r in (lo_r, hi_r)})
            need[np.searchsorted(cum, np.asarray(ranks), side="right")] = True
            need &= ~pieces.exact
        if not need.any() and not uncoded_pending:
            break
        if need.any() and int(pieces.n[need].sum()) > EXACT_ROWS and rounds < MAX_ROUNDS:
            pieces = pieces.replace(need, refine(need))
        else:
            pieces = pieces.replace(need, listing(need, uncoded_pending))
            uncoded_pending = False
        rounds += 1
    cuts = _cuts(pieces, probs)
    if resolve_bins and cuts:
        c = np.asarray(cuts)
        # a bucket holding values on both sides of a cut point: lo <= cut < hi
        straddles = ~pieces.exact & (np.searchsorted(c, pieces.lo, side="left") != np.searchsorted(c, pieces.hi, side="left"))
        if straddles.any():
            pieces = pieces.replace(straddles, listing(straddles, False))
    return Selection(cuts, pieces, special)


def fiber_groups(sel: Selection, missing: str, key: str) -> pa.Table:
    """The grouped evidence of a one-column quantile rule, as ``group_evidence`` writes it: (key, audited, n,
    n_true, lo, hi). Bins 0 .. K are the number of cut points strictly below a value (``bin_sql``); under
    ``as-value`` NULL evidence is the NULL key and NaN, +inf, -inf the codes K + 1, K + 2, K + 3 (their own
    fibers); every excluded row is counted in one row with ``audited`` false."""
    from dcaudit.audits.evidence import NAN_CODE_OFFSET, NEG_INF_OFFSET, POS_INF_OFFSET

    k = len(sel.cuts)
    p = sel.pieces
    # a piece is never split by a cut point (select(resolve_bins=True) listed those value by value)
    bins = np.searchsorted(np.asarray(sel.cuts, dtype=float), p.lo, side="left")
    n = np.zeros(k + 1, dtype=np.int64)
    t = np.zeros(k + 1, dtype=np.int64)
    lo = np.full(k + 1, np.inf)
    hi = np.full(k + 1, -np.inf)
    np.add.at(n, bins, p.n)
    np.add.at(t, bins, p.t)
    np.minimum.at(lo, bins, p.lo)
    np.maximum.at(hi, bins, p.hi)
    present = np.flatnonzero(n > 0)
    keys: list[int | None] = [int(b) for b in present]
    counts, trues = n[present].tolist(), t[present].tolist()
    los, his = lo[present].tolist(), hi[present].tolist()
    audited = [True] * len(keys)
    s = sel.special
    excluded = s.finite_without_claim
    codes = {"null": (None, None), "nan": (k + NAN_CODE_OFFSET, math.nan), "pinf": (k + POS_INF_OFFSET, math.inf),
             "ninf": (k + NEG_INF_OFFSET, -math.inf)}
    for name, (code, value) in codes.items():
        if missing == "as-value":
            excluded += s.rows[name] - s.with_claim[name]
            if s.with_claim[name]:
                keys.append(code)
                counts.append(s.with_claim[name])
                trues.append(s.trues[name])
                los.append(value)
                his.append(value)
                audited.append(True)
        else:
            excluded += s.rows[name]
    if excluded:
        keys.append(None)
        counts.append(excluded)
        trues.append(0)
        los.append(None)
        his.append(None)
        audited.append(False)
    key_null = np.asarray([k is None for k in keys], dtype=bool)
    range_null = np.asarray([v is None for v in los], dtype=bool)
    return pa.table({key: arrays.int32([0 if k is None else k for k in keys], key_null),
                     "audited": arrays.boolean(audited), "n": arrays.int64(counts), "n_true": arrays.int64(trues),
                     "lo": arrays.float64([np.nan if v is None else v for v in los], range_null),
                     "hi": arrays.float64([np.nan if v is None else v for v in his], range_null)})
