"""Quantile cut points by selection (histogram + exact passes) are quantile_cont's, and the one-scan quantile
fibers are the SQL binning's: the same cuts, fibers and candidates on random data with ties, NaN, ±inf,
NULL evidence, missing claims and few distinct values."""

from __future__ import annotations

import math
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dcaudit.audits import evidence as ev_mod
from dcaudit.audits import quantiles
from dcaudit.audits.evidence import EvidenceMap, parse_fiber_rule, quantile_cuts, quantile_cuts_cont
from dcaudit.audits.fibers import AuditLabels, audit_fibers
from dcaudit.claims import parse_claim

SPECIAL = st.sampled_from([math.nan, math.inf, -math.inf, None, 0.0, -0.0])
FLOATS = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)
FEW = st.sampled_from([-1.5, 0.0, 0.1, 0.1 + 1e-16, 2.0, 7.0, 1e300])


def _values(draw_from: st.SearchStrategy) -> st.SearchStrategy:
    return st.lists(draw_from, min_size=0, max_size=200)


VALUES = st.one_of(_values(st.one_of(FLOATS, SPECIAL)), _values(st.one_of(FEW, SPECIAL)),
                   _values(st.integers(-3, 3).map(float)))


def _con(x: list[float | None], y: list[int | None] | None = None) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    y = y if y is not None else [i % 2 for i in range(len(x))]
    con.register("src", pa.table({"id": list(range(len(x))), "x": pa.array(x, pa.float64()),
                                  "y": pa.array(y, pa.int64())}))
    con.execute("CREATE TABLE t AS SELECT * FROM src")
    con.execute("SET disabled_optimizers = 'statistics_propagation'")  # as guard_nan does for a float column
    return con


@pytest.fixture(params=[(False, True), (True, True), (False, False), (True, False), (None, True)],
                ids=["buckets", "tiny-buckets", "buckets-direct", "tiny-buckets-direct", "listed"])
def small_buckets(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """With 4 buckets and 3 values per exact pass, every refinement and listing path is exercised; "direct"
    passes scan the source itself instead of a materialised copy (the path for inputs beyond memory);
    "listed" is the one grouped query of a small source (the others force the passes on these few rows)."""
    tiny, copy = request.param
    if tiny is None:
        return False
    monkeypatch.setattr(quantiles, "LISTED_ROWS", 0)
    if tiny:
        monkeypatch.setattr(quantiles, "BUCKETS", 4)
        monkeypatch.setattr(quantiles, "EXACT_ROWS", 3)
    if not copy:
        monkeypatch.setattr(quantiles, "_materialise", lambda con, rows: False)
    return tiny


def test_interpolation_is_this_duckdbs() -> None:
    assert quantiles.interpolation_matches(duckdb.connect())


@settings(max_examples=150, deadline=None)
@given(x=VALUES, k=st.integers(2, 25), where=st.sampled_from(["TRUE", "y = 1", "id % 3 <> 0"]),
       path=st.sampled_from(["listed", "passes", "tiny"]))
def test_selected_cuts_are_quantile_conts(x: list[float | None], k: int, where: str, path: str) -> None:
    con = _con(x)
    with pytest.MonkeyPatch.context() as mp:
        if path != "listed":  # the histogram and exact passes, not the one grouped query of a small source
            mp.setattr(quantiles, "LISTED_ROWS", 0)
        if path == "tiny":  # every value listed after refinements: 2 buckets, 2 values per exact pass
            mp.setattr(quantiles, "BUCKETS", 2)
            mp.setattr(quantiles, "EXACT_ROWS", 2)
        got = quantile_cuts(con, "t", ["x"], k, where)
    assert got == quantile_cuts_cont(con, "t", ["x"], k, where)


@pytest.mark.parametrize("k", [2, 3, 7, 20, 100])
def test_selected_cuts_with_refinement_and_many_ties(small_buckets: bool, k: int) -> None:  # noqa: ARG001
    rng = np.random.default_rng(k)
    x = np.concatenate([rng.normal(size=3000), np.full(2000, 0.25), rng.integers(0, 5, 1000) / 3.0,
                        np.exp(rng.normal(size=1000) * 8)])  # heavy tail: most values in the first bucket
    x[rng.integers(0, len(x), 50)] = np.nan
    x[:3] = [np.inf, -np.inf, 1e308]
    con = _con(x.tolist())
    for where in ("TRUE", "y = 1"):
        assert quantile_cuts(con, "t", ["x"], k, where) == quantile_cuts_cont(con, "t", ["x"], k, where)


def _same(got: pa.Table, want: pa.Table) -> bool:
    """Equal tables, NaN equal to NaN (Arrow's equals says NaN != NaN; a NaN fiber's range is NaN)."""
    def rows(t: pa.Table) -> list:
        return [{k: ("NaN" if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()} for r in t.to_pylist()]
    return got.schema == want.schema and rows(got) == rows(want)


def _audit(con: duckdb.DuckDBPyConnection, rule: str, missing: str, claim: str = "y = 1") -> tuple:
    res = audit_fibers(con, "t", id_column="id", evidence=EvidenceMap(("x",), parse_fiber_rule(rule), missing),
                       claim=parse_claim(claim), min_support=2, labels=AuditLabels("s", "a"))
    return res.summary, res.fibers, res.candidates


@settings(max_examples=150, deadline=None)
@given(x=VALUES, data=st.data(), k=st.integers(2, 12), missing=st.sampled_from(["drop", "as-value"]),
       path=st.sampled_from(["listed", "passes", "tiny"]))
def test_one_scan_quantile_fibers_are_the_sql_binnings(x: list[float | None], data: st.DataObject, k: int,
                                                       missing: str, path: str) -> None:
    y = data.draw(st.lists(st.one_of(st.none(), st.integers(0, 1)), min_size=len(x), max_size=len(x)))
    con = _con(x, y)
    with pytest.MonkeyPatch.context() as mp:
        if path != "listed":
            mp.setattr(quantiles, "LISTED_ROWS", 0)
        if path == "tiny":
            mp.setattr(quantiles, "BUCKETS", 2)
            mp.setattr(quantiles, "EXACT_ROWS", 2)
            mp.setattr(quantiles, "_materialise", lambda con, rows: len(x) % 2 == 0)  # both kinds of pass
        fused = _audit(con, f"quantile:{k}", missing)
    with pytest.MonkeyPatch.context() as mp:  # the cuts by quantile_cont, the bins by SQL (the former path)
        mp.setattr(ev_mod.quantiles, "interpolation_matches", lambda con: False)
        plain = _audit(con, f"quantile:{k}", missing)
    for got, want in zip(fused, plain, strict=True):
        assert _same(got, want)


def test_parquet_statistics_without_nan_do_not_move_a_cut(tmp_path: Path, small_buckets: bool) -> None:  # noqa: ARG001
    """pyarrow writes min/max statistics that leave NaN out; the bounds query reads them with statistics on
    (they only size the buckets), every count comes from the data with statistics off."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=5000)
    x[::7] = np.nan
    x[::11] = np.inf
    y = (rng.random(5000) < 0.4).astype(np.int64)
    r = np.where(rng.random(5000) < 0.05, np.nan, rng.random(5000) * 2)
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": np.arange(5000), "x": x, "y": y, "r": r}), path)
    for claim in ("y = 1", "r > 1.0"):
        for missing in ("drop", "as-value"):
            con = duckdb.connect()
            con.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet('{path}')")
            fused = _audit(con, "quantile:10", missing, claim)
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(ev_mod.quantiles, "interpolation_matches", lambda con: False)
                plain = _audit(con, "quantile:10", missing, claim)
            for got, want in zip(fused, plain, strict=True):
                assert _same(got, want), (claim, missing)
