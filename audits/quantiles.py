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

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction

import duckdb
import numpy as np
import pyarrow as pa

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
    per DuckDB version on values chosen so that the interpolation rounds: a different formula would show)."""
    version = duckdb.__version__
    if version not in _INTERPOLATION_OK:
        rng = np.random.default_rng(20261201)
        ok = True
        for n, k in ((2, 7), (14, 3), (97, 13), (250, 20), (1000, 100)):
            values = np.sort(rng.normal(size=n) * 10.0 ** float(rng.integers(-3, 4)))
            probs = probabilities(k)
            name = f"_dcaudit_interp_{n}"
            con.register(name, pa.table({"x": values}))
            try:
                want = con.execute(f"SELECT quantile_cont(x, [{', '.join(map(repr, probs))}]) FROM {name}"
                                   ).fetchall()[0][0]
            finally:
                con.unregister(name)
            got = cuts_from_order_statistics(n, probs, values.__getitem__)
            ok = ok and got == sorted({float(v) for v in want})
        _INTERPOLATION_OK[version] = ok
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

    @classmethod
    def empty(cls) -> Pieces:
        f, i = np.zeros(0), np.zeros(0, dtype=np.int64)
        return cls(f, f.copy(), i, i.copy(), np.zeros(0, dtype=bool))

    def sorted(self) -> Pieces:
        order = np.argsort(self.lo, kind="stable")
        return Pieces(self.lo[order], self.hi[order], self.n[order], self.t[order], self.exact[order])

    def replace(self, drop: np.ndarray, new: Pieces) -> Pieces:
        keep = ~drop
        return Pieces(np.concatenate([self.lo[keep], new.lo]), np.concatenate([self.hi[keep], new.hi]),
                      np.concatenate([self.n[keep], new.n]), np.concatenate([self.t[keep], new.t]),
                      np.concatenate([self.exact[keep], new.exact])).sorted()


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


class _Source:
    """SQL over one numeric column ``x`` (DOUBLE) and a claim value ``y`` (BOOLEAN, NULL = no value)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, sql: str, code: str) -> None:
        self.con, self.sql, self.code = con, sql, code

    def histogram(self, where: str = "TRUE", code: str | None = None, part: str = "0") -> dict[str, np.ndarray]:
        return self.con.execute(
            f"""SELECT {part} AS p, {code or self.code} AS c, count(*) AS n, count(x) AS nx, count(y) AS ny,
                       CAST(coalesce(count_if(y), 0) AS BIGINT) AS nt, min(x) FILTER (WHERE y IS NOT NULL) AS lo,
                       max(x) FILTER (WHERE y IS NOT NULL) AS hi
                FROM ({self.sql}) WHERE {where} GROUP BY ALL""").fetchnumpy()

    def values(self, where: str) -> dict[str, np.ndarray]:
        return self.con.execute(
            f"SELECT x, count(*) AS n, count(y) AS ny, CAST(coalesce(count_if(y), 0) AS BIGINT) AS nt FROM ({self.sql}) WHERE {where} GROUP BY x"
        ).fetchnumpy()


def _np(result: dict[str, np.ndarray], name: str, dtype: type = np.int64) -> np.ndarray:
    """A fetched column as a plain array (NULL as 0 / NaN: callers look at validity where it matters)."""
    col = result[name]
    if isinstance(col, np.ma.MaskedArray):
        col = col.filled(np.nan if dtype is float else 0)
    return np.asarray(col, dtype=dtype)


def _valid(result: dict[str, np.ndarray], name: str) -> np.ndarray:
    return ~np.ma.getmaskarray(result[name])


def _code_sql(lo: float, hi: float, buckets: int) -> str:
    """Bucket of ``x`` among ``buckets`` equal-width buckets on [lo, hi]: monotone in x, NULL for NULL,
    NaN, ±inf and values too far out for an INTEGER (bounds are hints: values beyond them get codes
    beyond 0 .. buckets, still in order)."""
    scale = (buckets / 2) / (hi / 2 - lo / 2) if hi > lo else 1.0  # halves: no overflow to inf
    return f"TRY_CAST((x - {dbl(lo)}) * {dbl(scale)} AS INTEGER)"


def bounds(con: duckdb.DuckDBPyConnection, column_sql: str, relation: str) -> tuple[float, float] | None:
    """(min, max) of the column over the whole relation — from statistics where DuckDB keeps them (the
    query runs with statistics propagation on; it only guides the bucket width, never a result) —
    or, when that is not a finite range, from a scan of the finite values; None when there are none."""
    current = con.execute("SELECT current_setting('disabled_optimizers')").fetchall()[0][0]
    try:
        if current:
            con.execute("SET disabled_optimizers = ''")
        row = con.execute(f"SELECT min({column_sql}), max({column_sql}) FROM {relation}").fetchall()[0]
    finally:
        if current:
            con.execute(f"SET disabled_optimizers = '{current}'")
    lo, hi = row
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        x = column_sql
        lo, hi = con.execute(f"SELECT min({x}) FILTER (WHERE isfinite({x})), max({x}) FILTER (WHERE isfinite({x})) "
                             f"FROM {relation}").fetchall()[0]
        if lo is None:
            return None
    return float(lo), float(hi)


def select(con: duckdb.DuckDBPyConnection, source_sql: str, probs: list[float],
           hint: tuple[float, float] | None, *, resolve_bins: bool) -> Selection:
    """Exact cut points (as ``quantile_cont`` over the population of ``source_sql``) by selection.

    ``source_sql`` yields ``x`` (DOUBLE) and ``y`` (BOOLEAN; NULL rows are outside the population).
    With ``resolve_bins`` every bucket a cut point falls inside is listed value by value too, so that
    the pieces can be binned without looking at the rows again.
    """
    lo, hi = hint if hint is not None else (0.0, 1.0)
    src = _Source(con, source_sql, _code_sql(lo, hi, BUCKETS))
    first = src.histogram()
    coded = _valid(first, "c")
    n_all, nx, ny, nt = (_np(first, k) for k in ("n", "nx", "ny", "nt"))
    special = Special()
    special.finite_without_claim = int((n_all - ny)[coded].sum())
    has = coded & (ny > 0)
    pieces = Pieces(_np(first, "lo", float)[has], _np(first, "hi", float)[has], ny[has], nt[has],
                    np.zeros(int(has.sum()), dtype=bool))
    pieces.exact = pieces.lo == pieces.hi
    pieces = pieces.sorted()
    uncoded_pending = False
    if (~coded).any():
        i = int(np.flatnonzero(~coded)[0])
        if nx[i] == 0:  # only NULL evidence among the rows without a code
            special.rows["null"], special.with_claim["null"], special.trues["null"] = int(n_all[i]), int(ny[i]), int(nt[i])
        else:  # NaN, ±inf (or values beyond the bounds): listed by the first exact pass
            uncoded_pending = True

    def add_values(table: dict[str, np.ndarray], requested: Pieces, uncoded: bool) -> Pieces:
        valid = _valid(table, "x")
        xv = _np(table, "x", float)
        n_, ny_, nt_ = _np(table, "n"), _np(table, "ny"), _np(table, "nt")
        if uncoded:
            for key, mask in (("null", ~valid), ("nan", valid & np.isnan(xv)), ("pinf", valid & (xv == np.inf)),
                              ("ninf", valid & (xv == -np.inf))):
                special.rows[key] += int(n_[mask].sum())
                special.with_claim[key] += int(ny_[mask].sum())
                special.trues[key] += int(nt_[mask].sum())
        finite = valid & np.isfinite(xv)
        inside = np.zeros(len(xv), dtype=bool)
        for a, b in zip(requested.lo, requested.hi, strict=True):
            inside |= (xv >= a) & (xv <= b)
        beyond = finite & ~inside  # finite values without a code (bounds were too narrow): new pieces
        if uncoded:
            special.finite_without_claim += int((n_ - ny_)[beyond].sum())
        keep = finite & (ny_ > 0) & (inside | (beyond if uncoded else False))
        return Pieces(xv[keep], xv[keep].copy(), ny_[keep], nt_[keep], np.ones(int(keep.sum()), dtype=bool))

    def ranges_sql(chosen: Pieces) -> str:
        return " OR ".join(f"(x >= {dbl(a)} AND x <= {dbl(b)})" for a, b in zip(chosen.lo, chosen.hi, strict=True))

    def listing(mask: np.ndarray, with_uncoded: bool) -> Pieces:
        chosen = Pieces(pieces.lo[mask], pieces.hi[mask], pieces.n[mask], pieces.t[mask], pieces.exact[mask])
        parts = ([ranges_sql(chosen)] if mask.any() else []) + ([f"({src.code}) IS NULL"] if with_uncoded else [])
        return add_values(src.values(" OR ".join(parts)), chosen, with_uncoded)

    def refine(mask: np.ndarray) -> Pieces:
        """Split the chosen pieces by a histogram pass over each one's own range (one scan for all)."""
        idx = np.flatnonzero(mask)
        inside = [f"(x >= {dbl(pieces.lo[i])} AND x <= {dbl(pieces.hi[i])})" for i in idx]
        part = "CASE " + " ".join(f"WHEN {r} THEN {j}" for j, r in enumerate(inside)) + " END"
        code = "CASE " + " ".join(f"WHEN {r} THEN {_code_sql(pieces.lo[i], pieces.hi[i], BUCKETS)}"
                                  for r, i in zip(inside, idx, strict=True)) + " END"
        sub = src.histogram(where=f"y IS NOT NULL AND ({' OR '.join(inside)})", code=code, part=part)
        out = Pieces(_np(sub, "lo", float), _np(sub, "hi", float), _np(sub, "ny"), _np(sub, "nt"),
                     np.zeros(len(sub["ny"]), dtype=bool))
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
    total = int(pieces.n.sum())
    cum = np.cumsum(pieces.n)

    def value_at(rank: int) -> float:
        return float(pieces.lo[int(np.searchsorted(cum, rank, side="right"))])

    cuts = cuts_from_order_statistics(total, probs, value_at)
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
    return pa.table({key: pa.array(keys, pa.int32()), "audited": pa.array(audited, pa.bool_()),
                     "n": pa.array(counts, pa.int64()), "n_true": pa.array(trues, pa.int64()),
                     "lo": pa.array(los, pa.float64()), "hi": pa.array(his, pa.float64())})
