"""Packed fiber keys (one BIGINT per candidate) give exactly the tables of the plain multi-column grouping."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dcaudit.audits import fibers
from dcaudit.audits.evidence import EvidenceMap, parse_fiber_rule
from dcaudit.claims import parse_claim

ROW = st.fixed_dictionaries({
    "a": st.none() | st.integers(-3, 3),
    "b": st.none() | st.booleans(),
    "c": st.none() | st.integers(-(2**40), 2**40),
    "x": st.none() | st.floats(-5, 5, allow_nan=False),
    "y": st.none() | st.integers(0, 1),
})


def _both(rows: list[dict], columns: tuple[str, ...], rule: str, missing: str, monkeypatch) -> tuple:  # noqa: ANN001
    table = pa.Table.from_pylist([{**r, "id": i} for i, r in enumerate(rows)], schema=pa.schema([
        ("a", pa.int8()), ("b", pa.bool_()), ("c", pa.int64()), ("x", pa.float64()), ("y", pa.int32()),
        ("id", pa.int64())]))
    out = []
    for packed in (True, False):
        con = duckdb.connect()
        con.register("src", table)
        con.execute("CREATE TABLE t AS SELECT * FROM src")
        seen: list[object] = []
        real = fibers._key_ranges

        def spy(*args, _packed=packed, _real=real, _seen=seen):  # noqa: ANN002, ANN202
            ranges = _real(*args) if _packed else None
            _seen.append(ranges)
            return ranges

        monkeypatch.setattr(fibers, "_key_ranges", spy)
        res = fibers.audit_fibers(con, "t", id_column="id", evidence=EvidenceMap(columns, parse_fiber_rule(rule), missing),
                                  claim=parse_claim("y = 1"), min_support=2, labels=fibers.AuditLabels("s", "a"))
        out.append((res, seen[0]))
    return out


@settings(max_examples=25, deadline=None)
@given(rows=st.lists(ROW, min_size=1, max_size=40),
       case=st.sampled_from([(("a", "b"), "exact", "drop"), (("a", "b", "c"), "exact", "as-value"),
                             (("x",), "quantile:4", "drop"), (("x", "a"), "width:0.7", "as-value"),
                             (("c",), "exact", "drop")]))
def test_packed_and_plain_grouping_agree(rows: list[dict], case: tuple) -> None:
    columns, rule, missing = case
    with pytest.MonkeyPatch.context() as mp:
        (packed, ranges), (plain, _) = _both(rows, columns, rule, missing, mp)
    for name in ("summary", "fibers", "candidates"):
        assert getattr(packed, name).equals(getattr(plain, name)), name
    if rule.startswith("quantile") or columns == ("a", "b"):
        assert ranges is not None  # small ranges were packed


def test_wide_and_huge_ranges(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [{"a": 1, "b": True, "c": c, "x": 0.0, "y": c % 2} for c in (-(2**40), 0, 2**40)]
    (packed, ranges), (plain, _) = _both(rows * 3, ("a", "c"), "exact", "drop", monkeypatch)
    assert ranges is not None  # 2**41 values still pack (< 2**62 combinations)
    assert packed.summary.equals(plain.summary) and packed.fibers.equals(plain.fibers)
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT i AS id, i * 4611686018427387 AS p, i * 3 AS q, i % 2 AS y "
                "FROM range(10) r(i)")
    from dcaudit.audits.evidence import evidence_select

    ev = evidence_select(con, "t", "id", EvidenceMap(("p", "q")), parse_claim("y = 1"), ["id", "p", "q", "y"])
    con.execute(f"CREATE VIEW e AS {ev.sql}")
    assert fibers._key_ranges(con, "e", ev, EvidenceMap(("p", "q")), "t") is None  # beyond 2**62: not packed
    res = fibers.audit_fibers(con, "t", id_column="id", evidence=EvidenceMap(("p", "q")), claim=parse_claim("y = 1"),
                              labels=fibers.AuditLabels("s", "a"))
    assert res.summary["n_fibers"][0].as_py() == 10


def test_tables_without_nulls_skip_the_exclusion_check_and_agree() -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT i AS id, i % 3 AS a, i % 2 = 0 AS b, i % 5 AS d, (i * 7) % 4 AS y "
                "FROM range(200) r(i)")
    ev = EvidenceMap(("a", "b"))
    assert fibers._never_excluded(con, "t", ev, parse_claim("y = 1"))
    assert not fibers._never_excluded(con, "t", ev, parse_claim("y / d > 1"))  # x / 0 may be NULL
    assert not fibers._never_excluded(con, "t", EvidenceMap(("a",)), None)
    con.execute("INSERT INTO t VALUES (999, NULL, TRUE, 1, 1)")
    assert not fibers._never_excluded(con, "t", ev, parse_claim("y = 1"))
    con.execute("DELETE FROM t WHERE id = 999")
    for claim in ("y = 1", "y / d > 1", "y + a > 2 or not b"):
        got = fibers.audit_fibers(con, "t", id_column="id", evidence=ev, claim=parse_claim(claim),
                                  labels=fibers.AuditLabels("s", "a"))
        real = fibers._key_ranges
        try:
            fibers._key_ranges = lambda *a: None  # the plain grouping, with the per-row exclusion check
            want = fibers.audit_fibers(con, "t", id_column="id", evidence=ev, claim=parse_claim(claim),
                                       labels=fibers.AuditLabels("s", "a"))
        finally:
            fibers._key_ranges = real
        for name in ("summary", "fibers", "candidates"):
            assert getattr(got, name).equals(getattr(want, name)), (claim, name)


def test_width_bins_with_nan_and_inf_are_not_packed() -> None:
    """NaN makes DuckDB's max() NaN and ±inf have codes at the ends of BIGINT: packing such a column
    overflowed (a NaN and a +inf under missing = "as-value"); it is grouped unpacked instead."""
    import duckdb
    import pyarrow as pa

    from dcaudit.audits.evidence import EvidenceMap, parse_fiber_rule
    from dcaudit.audits.fibers import AuditLabels, audit_fibers
    from dcaudit.claims import parse_claim

    con = duckdb.connect()
    con.register("t", pa.table({"id": [1, 2, 3, 4, 5], "x": [0.1, float("nan"), float("inf"), 1.2, float("-inf")],
                                "y": [1, 0, 1, 0, 1]}))
    for missing, n_fibers in (("as-value", 5), ("drop", 2)):
        audit = audit_fibers(con, "t", id_column="id", claim=parse_claim("y = 1"), labels=AuditLabels("s", "a"),
                             evidence=EvidenceMap(("x",), parse_fiber_rule("width:0.5"), missing=missing))
        assert audit.summary["n_fibers"][0].as_py() == n_fibers


def test_settings_are_put_back_after_an_audit(tmp_path) -> None:  # noqa: ANN001
    """The exact path raises DuckDB's perfect hash threshold for its grouping statement only, and a float
    audit's switched-off statistics propagation is switched back on by the next integer-only audit."""
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"id": list(range(200)), **{f"e{j}": [(i >> j) & 1 for i in range(200)] for j in range(8)},
                             "x": [i / 7 for i in range(200)], "y": [i % 3 == 0 for i in range(200)]}), path)
    con = duckdb.connect()
    con.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet('{path}')")

    def setting(name: str) -> str:
        return str(con.execute(f"SELECT current_setting('{name}')").fetchall()[0][0])

    default = setting("perfect_ht_threshold")
    labels = fibers.AuditLabels("s", "a")
    fibers.audit_fibers(con, "t", id_column="id", evidence=EvidenceMap(("x",), parse_fiber_rule("quantile:4")),
                        claim=parse_claim("y = 1"), labels=labels)
    assert "statistics_propagation" in setting("disabled_optimizers")
    got = fibers.audit_fibers(con, "t", id_column="id", evidence=EvidenceMap(tuple(f"e{j}" for j in range(8))),
                              claim=parse_claim("y = 1"), labels=labels)
    assert setting("disabled_optimizers") == "" and setting("perfect_ht_threshold") == default
    assert got.summary["n_fibers"][0].as_py() == 200
