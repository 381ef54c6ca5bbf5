"""The candidates table: in the input's row order (``__row``), the same rows whether the DuckDB engine looks
the packed key up in numpy or joins the fibers, by candidate_id for an input without row numbers (a Parquet
glob), and the same table run after run."""

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

from dcaudit.audits import engine as duck_engine
from dcaudit.audits import fibers
from dcaudit.audits.evidence import EvidenceMap, parse_fiber_rule
from dcaudit.claims import parse_claim
from dcaudit.inputs import register_input

ROW = st.fixed_dictionaries({
    "a": st.none() | st.integers(-3, 3),
    "b": st.none() | st.booleans(),
    "c": st.none() | st.integers(-(2**40), 2**40),
    "x": st.none() | st.floats(-5, 5, allow_nan=False) | st.sampled_from([math.nan, math.inf, -math.inf, 0.5, 1.0]),
    "s": st.none() | st.sampled_from(["p", "q"]),
    "y": st.none() | st.integers(0, 1),
})
SCHEMA = pa.schema([("id", pa.string()), ("a", pa.int8()), ("b", pa.bool_()), ("c", pa.int64()),
                    ("x", pa.float64()), ("s", pa.string()), ("y", pa.int32())])
CASES = [(("a", "b"), "exact", "drop"), (("a", "b", "c"), "exact", "as-value"), (("x",), "quantile:4", "drop"),
         (("x", "a"), "width:0.7", "as-value"), (("c",), "exact", "drop"), (("s", "a"), "exact", "as-value"),
         (("x",), "quantile:3", "as-value"), (("a",), "exact", "drop")]


def _audit(table: pa.Table, case: tuple, *, lookup: bool = True, claim: str = "y = 1") -> pa.Table:
    columns, rule, missing = case
    con = duckdb.connect()
    con.execute("SET preserve_insertion_order = false")  # as dcaudit.engine.connect sets it
    view = register_input(con, table, label="frame").view
    with pytest.MonkeyPatch.context() as mp:
        if not lookup:
            mp.setattr(duck_engine, "candidates_by_lookup", lambda *args: None)
        res = fibers.audit_fibers(con, view, id_column="id", evidence=EvidenceMap(columns, parse_fiber_rule(rule),
                                                                                  missing),
                                  claim=parse_claim(claim), min_support=2, labels=fibers.AuditLabels("s", "a"))
    assert res.candidates is not None
    return res.candidates


def _ids(rows: list[dict]) -> list[str]:
    # ids whose order is neither sorted nor numeric: row order is the only order they can come back in
    return [f"c{(7 * i + 3) % (len(rows) + 5):03d}-{i}" for i in range(len(rows))]


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(ROW, min_size=1, max_size=40), case=st.sampled_from(CASES))
def test_candidates_come_in_row_order_and_the_lookup_gives_the_joins_rows(rows: list[dict], case: tuple) -> None:
    table = pa.Table.from_pylist([{**r, "id": i} for r, i in zip(rows, _ids(rows), strict=True)], schema=SCHEMA)
    looked_up = _audit(table, case)
    joined = _audit(table, case, lookup=False)
    assert looked_up.column("candidate_id").to_pylist() == _ids(rows)
    assert looked_up.equals(joined)
    assert looked_up.schema.field("status").type == fibers.STATUS_TYPE
    assert set(looked_up.column("status").to_pylist()) <= set(fibers.CANDIDATE_STATUSES)


def test_the_lookup_path_is_taken_for_small_integer_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    real = fibers.candidates_by_lookup

    def spy(*args):  # noqa: ANN002, ANN202
        calls.append(out := real(*args))
        return out

    monkeypatch.setattr(duck_engine, "candidates_by_lookup", spy)
    rows = [{"id": str(9 - i), "a": i % 3, "b": i % 2 == 0, "c": None, "x": i / 3, "s": "p", "y": i % 2}
            for i in range(10)]
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    for case, taken in [((("a", "b"), "exact", "drop"), True), ((("x",), "quantile:4", "drop"), True),
                        ((("s",), "exact", "drop"), False)]:
        calls.clear()
        out = _audit(table, case)
        assert (calls[0] is not None) is taken, case
        assert out.column("candidate_id").to_pylist() == [str(9 - i) for i in range(10)]


def test_excluded_candidates_keep_their_place_and_reason() -> None:
    rows = [{"id": "z", "a": 1, "y": 1}, {"id": "y", "a": None, "y": 0}, {"id": "x", "a": 1, "y": None},
            {"id": "w", "a": 1, "y": 0}, {"id": "v", "a": 2, "y": 1}]
    out = _audit(pa.Table.from_pylist(rows), (("a",), "exact", "drop")).to_pylist()
    assert [(r["candidate_id"], r["status"], r["excluded_reason"], r["fiber_key"]) for r in out] == [
        ("z", "ambiguous", None, 0), ("y", "excluded", "evidence_missing", None),
        ("x", "excluded", "claim_missing", None), ("w", "ambiguous", None, 0), ("v", "unsupported", None, 1)]


def test_a_parquet_glob_has_no_row_numbers_and_is_ordered_by_id(tmp_path: Path) -> None:
    for part, ids in enumerate((["b", "d"], ["c", "a"])):
        pq.write_table(pa.table({"id": ids, "a": [1, 0], "y": [1, 0]}), tmp_path / f"p{part}.parquet")
    con = duckdb.connect()
    registered = register_input(con, tmp_path / "*.parquet")
    assert not registered.has_row
    res = fibers.audit_fibers(con, registered.view, id_column="id", evidence=EvidenceMap(("a",)),
                              claim=parse_claim("y = 1"), labels=fibers.AuditLabels("s", "a"))
    assert res.candidates is not None
    assert res.candidates.column("candidate_id").to_pylist() == ["a", "b", "c", "d"]


def test_the_candidates_table_is_the_same_run_after_run(tmp_path: Path) -> None:
    """A million-row-like shape in small: a Parquet file read in parallel, the same table every time."""
    n = 50_000
    duckdb.sql(f"""COPY (SELECT 'k' || CAST((i * 7919) % {n} AS VARCHAR) AS id, CAST(hash(i) % 3 AS TINYINT) AS a,
                    CAST(hash(i, 1) % 2 AS TINYINT) AS y FROM range({n}) t(i)) TO '{tmp_path / "t.parquet"}'
                    (FORMAT parquet, ROW_GROUP_SIZE 4096)""")
    expected = [f"k{(i * 7919) % n}" for i in range(n)]
    first = None
    for _ in range(3):
        con = duckdb.connect()
        con.execute("SET threads = 4; SET preserve_insertion_order = false")
        view = register_input(con, tmp_path / "t.parquet").view
        out = fibers.audit_fibers(con, view, id_column="id", evidence=EvidenceMap(("a",)),
                                  claim=parse_claim("y = 1"), labels=fibers.AuditLabels("s", "a")).candidates
        assert out is not None
        assert out.column("candidate_id").to_pylist() == expected
        if first is None:
            first = out
        assert out.equals(first)


@pytest.mark.parametrize("claim", ["y = 1", "y / a > 0"])  # a division can be undefined: reasons are evaluated
def test_a_table_without_nulls_gives_the_joins_rows(claim: str) -> None:
    rows = [{"id": f"r{(5 * i) % 11}", "a": i % 3, "b": i % 2 == 1, "y": (i * 7) % 3 % 2} for i in range(11)]
    table = pa.Table.from_pylist(rows)
    case = (("a", "b"), "exact", "drop")
    looked_up = _audit(table, case, claim=claim)
    assert looked_up.equals(_audit(table, case, lookup=False, claim=claim))
    reasons = looked_up.column("excluded_reason").to_pylist()
    assert reasons == ([None] * 11 if claim == "y = 1" else
                       ["claim_undefined" if r["a"] == 0 else None for r in rows])


@pytest.mark.parametrize("n_cuts", [1, 19, 64, 65, 300])
def test_bin_codes_count_the_cuts_below_each_value_as_a_binary_search_does(n_cuts: int) -> None:
    """The candidates pass bins one quantile column in numpy, block by block, by one comparison per cut (up to
    64 cuts) or a binary search: the same packed keys as the plain definition (searchsorted; NaN, ±inf after
    the last bin; NULL 0; outside the fibers' bins or not audited: the radix) across block boundaries, with
    values equal to cuts, and both ways of counting."""
    from dcaudit.audits import fibers
    from dcaudit.audits.evidence import NAN_CODE_OFFSET, NEG_INF_OFFSET, POS_INF_OFFSET

    rng = np.random.default_rng(n_cuts)
    n = 3 * fibers._BIN_BLOCK + 17
    cuts = sorted(rng.normal(size=n_cuts).round(2).tolist())
    values = rng.normal(size=n).round(2)  # rounded like the cuts: many values equal a cut
    values[rng.random(n) < 0.01] = np.nan
    values[rng.random(n) < 0.01] = np.inf
    values[rng.random(n) < 0.01] = -np.inf
    null = rng.random(n) < 0.02
    audited = rng.random(n) < 0.97
    x = pa.chunked_array([pa.array(values, mask=null)])
    k = n_cuts
    for bins in [(0, k + NEG_INF_OFFSET), (0, k), (2 % (k + 1), max(0, k - 1))]:
        lo, hi = bins
        radix = (hi - lo + 2) * 7
        code = np.searchsorted(np.asarray(cuts), values, side="left")
        code[np.isnan(values)] = k + NAN_CODE_OFFSET
        code[values == np.inf] = k + POS_INF_OFFSET
        code[values == -np.inf] = k + NEG_INF_OFFSET
        ok = (null | ((code >= lo) & (code <= hi))) & audited
        want = np.where(ok, np.where(~null, code - lo + 1, 0), radix)
        got = fibers._bin_codes(x, cuts, bins, radix, audited)
        assert got.dtype == np.int64 and np.array_equal(got, want), bins
        assert np.array_equal(fibers._bin_codes(x, cuts, bins, radix, None),
                              np.where(null | ((code >= lo) & (code <= hi)), np.where(~null, code - lo + 1, 0), radix))
