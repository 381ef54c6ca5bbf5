"""How binned fiber rules (quantile:K, width:W) read numbers: NaN and ±inf written as text, integers and
decimals a double cannot hold, degenerate spans of the quantile histogram, the sign of zero, and the grammar
of numeric text (docs/inputs.md)."""

from __future__ import annotations

import decimal
import random
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dcaudit
from dcaudit.audits.quantiles import _code_sql
from dcaudit.errors import InputError

BINNED = ["quantile:2", "width:1"]
D = decimal.Decimal


def audit(data: object, rule: str, missing: str = "drop") -> dcaudit.Result:
    return dcaudit.audit(data, evidence=["x"], claim="y = 1", id="cid", fiber_rule=rule, missing=missing,
                         report=False)


def outcome(r: dcaudit.Result) -> tuple[list, list]:
    """(fibers as (evidence_key, n, n_true, lo, hi), candidates as (id, status, reason)), order-free."""
    fibers = sorted((f["evidence_key"], f["n"], f["n_true"], repr(f["evidence_lo"]), repr(f["evidence_hi"]))
                    for f in r.arrow("fibers").to_pylist())
    cands = sorted((c["candidate_id"], c["status"], c["excluded_reason"]) for c in r.arrow("candidates").to_pylist())
    return fibers, cands


def csv(tmp_path: Path, values: list[str], name: str = "t.csv") -> Path:
    path = tmp_path / name
    path.write_text("cid,x,y\n" + "".join(f"c{i},{v},{i % 2}\n" for i, v in enumerate(values)))
    return path


# 1. NaN and ±inf written as text -------------------------------------------------------------------------

TEXT = ["1", "2", "nan", "inf", "-inf", "3", "NaN", "-Infinity"]


@pytest.mark.parametrize("rule", BINNED)
@pytest.mark.parametrize("missing", ["drop", "as-value"])
def test_nan_and_inf_as_text_are_treated_as_in_a_float_column(tmp_path: Path, rule: str, missing: str) -> None:
    ids, ys = [f"c{i}" for i in range(len(TEXT))], [i % 2 for i in range(len(TEXT))]
    floats = pa.table({"cid": ids, "x": [float(v) for v in TEXT], "y": ys})
    text = pa.table({"cid": ids, "x": TEXT, "y": ys})
    pq.write_table(text, tmp_path / "t.parquet")
    want = outcome(audit(floats, rule, missing))
    assert outcome(audit(text, rule, missing)) == want
    assert outcome(audit(str(tmp_path / "t.parquet"), rule, missing)) == want
    reasons = {c: r for c, _, r in want[1]}
    if missing == "drop":
        assert (reasons["c2"], reasons["c3"], reasons["c4"]) == ("evidence_nan", "evidence_infinite",
                                                                 "evidence_infinite")
        assert all(s != "excluded" or r for _, s, r in want[1])  # no excluded candidate without a reason
    else:
        assert {"nan", "inf", "-inf"} <= {k for k, *_ in want[0]}


def test_nan_in_a_csv_double_column_matches_the_same_text_column(tmp_path: Path) -> None:
    values = ["1", "nan", "2", "inf", "3"]
    text = pa.table({"cid": [f"c{i}" for i in range(5)], "x": values, "y": [i % 2 for i in range(5)]})
    for rule in BINNED:
        assert outcome(audit(str(csv(tmp_path, values)), rule)) == outcome(audit(text, rule))


# 2. integers beyond 2^53 in a text column -----------------------------------------------------------------

@pytest.mark.parametrize("rule", BINNED)
def test_text_integers_beyond_2_53_are_an_error_naming_the_first(tmp_path: Path, rule: str) -> None:
    # the fraction makes the CSV column text (docs/inputs.md); as DECIMAL(38, 0) it is the same error
    # 9007199254740992 is 2^53, a double exactly: the first value a double changes is …993
    for values, first in ((["1.5", "9007199254740992", "9007199254740993"], "9007199254740993"),
                          (["1", "nan", "-9007199254740993"], "-9007199254740993")):
        with pytest.raises(InputError, match=r"beyond 2\^53") as err:
            audit(str(csv(tmp_path, values)), rule)
        assert err.value.row == values.index(first) + 1 and err.value.column == "x" and first in str(err.value)
    assert len(outcome(audit(str(csv(tmp_path, values)), "exact"))[0]) == 3  # the exact rule keeps them apart


# 3. the quantile histogram over degenerate spans --------------------------------------------------------

@pytest.mark.parametrize("values", [[0.0, 5e-324], [-5e-324, 0.0, 5e-324], [2.5, 2.5], [-1e308, 0.0, 1e308]])
def test_quantile_over_more_rows_than_are_listed_matches_the_small_table_path(values: list[float]) -> None:
    def table(n: int) -> pa.Table:
        return pa.table({"cid": [str(i) for i in range(n)], "x": [values[i % len(values)] for i in range(n)],
                         "y": [int(i % 3 == 0) for i in range(n)]})

    big = audit(table(70_002), "quantile:4")  # beyond LISTED_ROWS (2^16): the histogram passes
    small = audit(table(60_000), "quantile:4")
    big_keys = [(f["evidence_key"], f["evidence_lo"], f["evidence_hi"]) for f in big.arrow("fibers").to_pylist()]
    assert big_keys == [(f["evidence_key"], f["evidence_lo"], f["evidence_hi"])
                        for f in small.arrow("fibers").to_pylist()]
    assert sum(f["n"] for f in big.arrow("fibers").to_pylist()) == 70_002


@pytest.mark.parametrize("lo, hi", [(0.0, 5e-324), (-5e-324, 5e-324), (1.0, 1.0), (-1e308, 1e308), (0.0, 1.0)])
def test_bucket_codes_are_finite_and_in_order_for_any_span(lo: float, hi: float) -> None:
    code = _code_sql(lo, hi, 4096)
    xs = sorted({lo, hi, (lo + hi) / 2 if abs(lo) < 1e300 else 0.0})
    got = duckdb.connect().execute(f"SELECT {code} FROM unnest(?::DOUBLE[]) t(x) ORDER BY x", [xs]).fetchall()
    codes = [c for (c,) in got]
    assert None not in codes and codes == sorted(codes) and codes[0] >= 0 and codes[-1] <= 4096


# 4. decimals a double cannot hold --------------------------------------------------------------------------

@pytest.mark.parametrize("rule", ["width:0.1", "quantile:2"])
def test_a_decimal_a_double_cannot_hold_is_an_error(rule: str) -> None:
    t = pa.table({"cid": ["a", "b", "c"], "x": pa.array([D("1.0"), D("4000000000000000.1"), D("4000000000000000.3")],
                                                       pa.decimal128(20, 1)), "y": [1, 1, 0]})
    with pytest.raises(InputError, match="more digits than a double holds") as err:
        audit(t, rule)
    assert err.value.row == 2 and "4000000000000000.1" in str(err.value)


def test_ordinary_decimals_and_doubles_written_out_pass() -> None:
    """0.1 is no double, but the double nearest to it prints as 0.1: no other value shares it."""
    values = [D("0.1"), D("0.30000000000000004"), D("123456789012.345"), D("-2.5"), D("0")]
    for typ in (pa.decimal128(38, 20), pa.decimal128(38, 17)):
        t = pa.table({"cid": list("abcde"), "x": pa.array(values, typ), "y": [1, 0, 1, 0, 1]})
        assert len(outcome(audit(t, "width:0.05"))[0]) == 5
    text = pa.table({"cid": list("abcde"), "x": [str(v) for v in values], "y": [1, 0, 1, 0, 1]})
    assert len(outcome(audit(text, "width:0.05"))[0]) == 5


def test_text_with_more_digits_than_a_double_holds_is_an_error(tmp_path: Path) -> None:
    t = pa.table({"cid": ["a", "b"], "x": ["0.1000000000000000000001", "0.1000000000000000000002"], "y": [1, 0]})
    with pytest.raises(InputError, match="more digits than a double holds") as err:
        audit(t, "quantile:2")
    assert err.value.row == 1


# 5. the sign of zero ------------------------------------------------------------------------------------

SPECIAL = st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.5, float("nan"), float("inf"), float("-inf")])


@settings(max_examples=25, deadline=None)
@given(st.lists(SPECIAL, min_size=2, max_size=12), st.randoms(use_true_random=False),
       st.sampled_from(["quantile:2", "quantile:3", "width:1"]), st.sampled_from(["drop", "as-value"]))
def test_row_order_changes_no_fiber_value(xs: list[float], rnd: random.Random, rule: str, missing: str) -> None:
    rows = [(f"c{i}", x, i % 2) for i, x in enumerate(xs)]
    shuffled = rows[:]
    rnd.shuffle(shuffled)
    got = [outcome(audit(pa.table({"cid": [r[0] for r in rs], "x": [r[1] for r in rs], "y": [r[2] for r in rs]}),
                         rule, missing)) for rs in (rows, shuffled)]
    assert got[0] == got[1]
    assert all("-0.0" not in (lo, hi) for _, _, _, lo, hi in got[0][0])


def test_negative_zero_first_or_second_gives_one_fiber_table() -> None:
    for rule in BINNED:
        tables = [audit(pa.table({"cid": list("abcd"), "x": x, "y": [1, 1, 0, 1]}), rule).arrow("fibers")
                  for x in ([-0.0, 0.0, 1.0, 2.0], [0.0, -0.0, 1.0, 2.0])]
        assert [repr(v) for v in tables[0].column("evidence_lo").to_pylist()] == \
               [repr(v) for v in tables[1].column("evidence_lo").to_pylist()]


# 6. the grammar of numeric text -------------------------------------------------------------------------

@pytest.mark.parametrize("rule", BINNED)
@pytest.mark.parametrize("spelling", ["1_000", "0x1A"])
def test_text_duckdb_reads_but_a_csv_reader_does_not_is_text(tmp_path: Path, rule: str, spelling: str) -> None:
    with pytest.raises(InputError, match=f"needs numbers, but the column holds text: '{spelling}'") as err:
        audit(str(csv(tmp_path, ["3", spelling, "1000", "4"])), rule)
    assert err.value.row == 2 and err.value.column == "x"
    t = pa.table({"cid": list("abcd"), "x": ["3", spelling, "1000", "4"], "y": [1, 0, 1, 0]})
    with pytest.raises(InputError, match="needs numbers"):
        audit(t, rule)


def test_numbers_as_a_csv_reader_writes_them_are_read() -> None:
    values = [" 1", "+2", "-.5", "5.", "1e3", "1E+3", "2.5e-1", "INF", "-inf", "Infinity", "NAN", "nan"]
    t = pa.table({"cid": [f"c{i}" for i in range(len(values))], "x": values, "y": [i % 2 for i in range(len(values))]})
    _, cands = outcome(audit(t, "width:1"))
    assert [r for _, _, r in cands].count("evidence_infinite") == 3
    assert [r for _, _, r in cands].count("evidence_nan") == 2
