"""The input contract, rule by rule: every bad input a user can hand dcaudit gets a one-line error with
exit status 2 naming their file, row, column or option — or a correct result with the exclusions
reported. Never silently wrong, never a traceback."""

from __future__ import annotations

import gzip
import math
import re
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from hypothesis import example, given, settings
from hypothesis import strategies as st

import dcaudit
from dcaudit.cli import cli
from dcaudit.errors import ClaimError, InputError, SpecError


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"DCAUDIT_HOME": str(tmp_path / "home"), "DCAUDIT_OFFLINE": "1"}


def invoke(env: dict[str, str], *args: str):  # noqa: ANN201
    return CliRunner().invoke(cli, list(args), env=env)


def fails_cleanly(result, *needles: str) -> str:  # noqa: ANN001
    """Exit 2, no traceback, one line (at most one hint line more), mentioning every needle."""
    text = result.output
    assert result.exit_code == 2, text
    assert "Traceback" not in text and "src_0" not in text and "SELECT" not in text, text
    lines = [line for line in text.strip().splitlines() if line.strip()]
    assert 1 <= len(lines) <= 2, text
    for needle in needles:
        assert needle in text, (needle, text)
    return text


def write_csv(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# ---------------------------------------------------------------------------------------------------
# NaN, infinity and undefined claims


def test_nan_and_inf_evidence_are_excluded_with_their_own_reasons_never_binned() -> None:
    frame = pl.DataFrame({"id": [str(i) for i in range(8)],
                          "e": [0.1, 0.2, 0.3, 0.4, 0.5, math.nan, math.inf, -math.inf],
                          "y": [0, 0, 1, 1, 1, 1, 0, 1]})
    r = dcaudit.audit(frame, evidence="e", claim="y = 1", id="id", fiber_rule="quantile:2")
    reasons = dict(r.excluded().select("candidate_id", "excluded_reason").iter_rows())
    assert reasons == {"5": "evidence_nan", "6": "evidence_infinite", "7": "evidence_infinite"}
    s = r.summary.row(0, named=True)
    assert (s["n_candidates"], s["n_excluded"]) == (5, 3)
    hi = r.fibers["evidence_hi"].to_list()
    assert all(math.isfinite(v) for v in hi)  # NaN never lands in the top bin


def test_nan_and_inf_are_fibers_of_their_own_under_as_value() -> None:
    frame = pl.DataFrame({"id": [str(i) for i in range(7)],
                          "e": [0.1, 0.2, 0.3, 0.4, math.nan, math.nan, math.inf],
                          "y": [0, 0, 1, 1, 1, 0, 1]})
    r = dcaudit.audit(frame, evidence="e", claim="y = 1", id="id", fiber_rule="quantile:2", missing="as-value")
    s = r.summary.row(0, named=True)
    assert (s["n_candidates"], s["n_excluded"], s["n_fibers"]) == (7, 0, 4)
    cands = r.candidates.to_pandas().set_index("candidate_id")
    assert cands.loc["4", "fiber_key"] == cands.loc["5", "fiber_key"] != cands.loc["6", "fiber_key"]
    assert cands.loc["4", "status"] == "ambiguous"  # the two NaN candidates disagree


def test_division_by_zero_and_nan_in_a_claim_make_it_undefined_never_true() -> None:
    frame = pl.DataFrame({"id": ["a", "b", "c", "d"], "e": [1, 1, 2, 2], "score": [1.0, 2.0, math.nan, 3.0],
                          "e2": [0, 2, 1, 0]})
    r = dcaudit.audit(frame, evidence="e", claim="score / e2 > 0.5", id="id")
    reasons = dict(r.candidates.select("candidate_id", "excluded_reason").iter_rows())
    assert reasons == {"a": "claim_undefined", "b": None, "c": "claim_undefined", "d": "claim_undefined"}
    assert r.candidates.filter(pl.col("candidate_id") == "b")["claim_value"].to_list() == [True]


@pytest.mark.parametrize("claim", ["y = 1 or f > 5", "y = 1 or 1 / c > 5", "not (y = 0 and f > 5)"])
def test_and_or_never_decide_past_an_undefined_operand(claim: str) -> None:
    """TRUE OR NULL is TRUE in SQL: a NaN or a division by zero inside an and/or would decide the claim
    where a lone comparison is undefined. It is undefined, as an empty operand is missing."""
    frame = pl.DataFrame({"id": list("abcd"), "x": [1, 1, 2, 2], "y": [1, 0, 1, 0], "f": [math.nan, 1.0, 2.0, 3.0],
                          "c": [0, 1, 1, 1]})
    r = dcaudit.audit(frame, evidence="x", claim=claim, id="id")
    assert r.candidates["excluded_reason"].to_list() == ["claim_undefined", None, None, None]
    assert r.summary["n_candidates"].to_list() == [3]


def test_a_nan_compared_is_undefined() -> None:
    frame = pl.DataFrame({"id": ["a", "b"], "e": [1, 1], "score": [math.nan, 0.9]})
    r = dcaudit.audit(frame, evidence="e", claim="score > 0.5", id="id")
    assert dict(r.candidates.select("candidate_id", "excluded_reason").iter_rows()) == {
        "a": "claim_undefined", "b": None}


def test_width_bins_of_inf_do_not_crash() -> None:
    frame = pl.DataFrame({"id": ["a", "b", "c"], "e": [0.1, math.inf, 1e3], "y": [1, 0, 1]})
    r = dcaudit.audit(frame, evidence="e", claim="y = 1", id="id", fiber_rule="width:0.5", missing="as-value")
    assert r.summary["n_fibers"].to_list() == [3]


@pytest.mark.parametrize("values, width", [([1e308, -1e308, 0.0], "1e-300"), ([2.0**64, 0.0, 1.0], "1")])
def test_a_width_too_small_for_the_values_names_the_value(values: list[float], width: str) -> None:
    frame = pl.DataFrame({"id": ["a", "b", "c"], "e": values, "y": [1, 0, 1]})
    with pytest.raises(InputError, match=rf"fiber rule width:{width}: the value .* row 1, column 'e'"):
        dcaudit.audit(frame, evidence="e", claim="y = 1", id="id", fiber_rule=f"width:{width}")


# ---------------------------------------------------------------------------------------------------
# Columns, types and the claim grammar


def test_duplicate_column_names_are_an_error_naming_both_positions(env: dict[str, str], tmp_path: Path) -> None:
    f = write_csv(tmp_path / "dup.csv", "id,e1,e1,y\n1,0,1,1\n2,1,0,0\n")
    out = fails_cleanly(invoke(env, "audit", str(f), "--id", "id", "--evidence", "e1", "--claim", "y = 1"),
                        "dup.csv", "'e1'", "positions 2 and 3")
    assert "e1_1" not in out


@pytest.mark.parametrize("kind", ["csv", "parquet", "polars"])
def test_column_names_differing_only_in_case_are_an_error(env: dict[str, str], tmp_path: Path, kind: str) -> None:
    """DuckDB resolves names case-insensitively and would rename the second to a_1, a name the user never
    wrote: refused like a duplicate, naming both."""
    frame = pl.DataFrame({"id": [1, 2], "A": [1, 0], "a": [0, 1], "y": [1, 0]})
    if kind == "polars":
        with pytest.raises(InputError, match="'A' and 'a' differ only in case.*positions 2 and 3"):
            dcaudit.audit(frame, evidence="A", claim="y = 1", id="id")
        return
    f = tmp_path / f"case.{kind}"
    frame.write_csv(f) if kind == "csv" else frame.write_parquet(f)
    out = fails_cleanly(invoke(env, "audit", str(f), "--id", "id", "--evidence", "A", "--claim", "y = 1"),
                        f"case.{kind}", "'A' and 'a' differ only in case", "positions 2 and 3")
    assert "a_1" not in out


def test_a_parquet_column_named_file_row_number_is_read(tmp_path: Path) -> None:
    """DuckDB's row numbering would clash with it; the file is read all the same, rows numbered from 1."""
    f = tmp_path / "frn.parquet"
    pl.DataFrame({"id": ["p", "q", "r"], "file_row_number": [7, 7, 9], "y": [1, 0, 1]}).write_parquet(f)
    r = dcaudit.audit(f, evidence="file_row_number", claim="y = 1", id="id")
    assert r.summary["n_fibers"].to_list() == [2] and r.summary["ambiguous"].to_list() == [2]
    assert dcaudit.audit(f, evidence="file_row_number", claim="y = 1").tables["candidates"]["candidate_id"].to_list() \
        == ["1", "2", "3"]


@pytest.mark.parametrize("kind", ["csv", "parquet", "pandas", "arrow"])
def test_the_row_number_column_name_is_reserved(env: dict[str, str], tmp_path: Path, kind: str) -> None:
    frame = pl.DataFrame({"__row": [9, 9], "x": [1, 2], "y": [1, 0]})
    if kind in ("pandas", "arrow"):
        with pytest.raises(InputError, match="'__row' .* is dcaudit's own"):
            dcaudit.audit(frame.to_pandas() if kind == "pandas" else frame.to_arrow(), evidence="x", claim="y = 1")
        return
    f = tmp_path / f"r.{kind}"
    frame.write_csv(f) if kind == "csv" else frame.write_parquet(f)
    fails_cleanly(invoke(env, "audit", str(f), "--evidence", "x", "--claim", "y = 1"), "'__row'", "rename")


def test_inputs_without_row_numbers_need_an_id(env: dict[str, str], tmp_path: Path) -> None:
    import pyarrow.dataset as ds

    for i in range(2):
        pq.write_table(pa.table({"x": [i, i + 1], "y": [1, 0]}), tmp_path / f"part{i}.parquet")
    fails_cleanly(invoke(env, "audit", str(tmp_path / "part*.parquet"), "--evidence", "x", "--claim", "y = 1"),
                  "no single row numbering", "--id")
    with pytest.raises(InputError, match="no single row numbering"):
        dcaudit.audit(ds.dataset(tmp_path / "part0.parquet"), evidence="x", claim="y = 1")


def test_frames_dcaudit_cannot_read_as_values_are_errors_naming_them() -> None:
    import duckdb
    import numpy as np
    import pandas as pd

    objects = pl.DataFrame({"id": list("ab"), "x": pl.Series([1.5, 2.5], dtype=pl.Object), "y": [1, 0]})
    with pytest.raises(InputError, match="polars Object column .* column 'x'"):
        dcaudit.audit(objects, evidence="x", claim="y = 1", id="id")
    nanoseconds = pd.DataFrame({"id": list("abcd"), "x": pd.to_timedelta([1, 1, 500, 500], unit="ns"),
                                "y": [1, 1, 0, 0]})
    with pytest.raises(InputError, match="finer than a microsecond.*column 'x'"):
        dcaudit.audit(nanoseconds, evidence="x", claim="y = 1", id="id")
    seconds = nanoseconds.assign(x=pd.to_timedelta([1, 1, 500, 500], unit="s"))
    assert dcaudit.audit(seconds, evidence="x", claim="y = 1", id="id").summary["n_fibers"].to_list() == [2]
    half = pa.table({"id": list("abcd"), "x": pa.array(np.array([1.5, 1.5, 2.5, 2.5], dtype=np.float16)),
                     "y": [1, 1, 0, 0]})
    assert dcaudit.audit(half, evidence="x", claim="y = 1", id="id").summary["certified_true"].to_list() == [2]
    complex_numbers = nanoseconds.assign(x=np.array([1 + 1j, 1 + 1j, 2, 2]))   # the hint was pd.to_numeric
    with pytest.raises(InputError, match=r"df\[col\]\.real and df\[col\]\.imag .*column 'x'"):
        dcaudit.audit(complex_numbers, evidence="x", claim="y = 1", id="id")
    with pytest.raises(InputError, match="could not be collected"):
        dcaudit.audit(pl.LazyFrame({"x": [1]}).select("zz"), evidence="x", claim="x = 1")
    con = duckdb.connect()
    rel = con.sql("SELECT 1 AS x")
    con.close()
    with pytest.raises(InputError, match="DuckDB relation"):
        dcaudit.audit(rel, evidence="x", claim="x = 1")


@pytest.mark.parametrize("claim", ["d > 1", "s > 1"])
def test_claims_over_dates_and_structs_compared_with_numbers_fail_in_one_line(claim: str) -> None:
    frame = pa.table({"id": ["a", "b"], "x": [1, 2], "d": pa.array([1, 2], pa.timestamp("us")),
                      "s": [{"u": 1}, {"u": 2}]})
    with pytest.raises(ClaimError, match="cannot be evaluated over these columns"):
        dcaudit.audit(frame, evidence="x", claim=claim, id="id")


def test_true_false_compares_with_numbers_as_one_and_zero() -> None:
    frame = pa.table({"id": ["a", "b", "c"], "x": [1, 2, 3], "b": [True, False, None]})
    for claim in ("b > 0.5", "0.5 < b", "b = 1"):
        r = dcaudit.audit(frame, evidence="x", claim=claim, id="id")
        assert r.candidates["claim_value"].to_list() == [True, False, None], claim


def test_duplicate_columns_in_a_pandas_frame() -> None:
    import pandas as pd

    frame = pd.DataFrame([[1, 0, 1, 1]], columns=["id", "e1", "e1", "y"])
    with pytest.raises(InputError, match="positions 2 and 3"):
        dcaudit.audit(frame, evidence="e1", claim="y = 1", id="id")


def test_sql_comment_in_a_claim_is_refused(env: dict[str, str], tmp_path: Path) -> None:
    f = write_csv(tmp_path / "t.csv", "id,e1,y\n1,0,1\n")
    assert "error:" in fails_cleanly(invoke(env, "audit", str(f), "--id", "id", "--evidence", "e1", "--claim", "y = 1 -- e1"),
                  "SQL comment")
    assert "error:" in fails_cleanly(invoke(env, "audit", str(f), "--id", "id", "--evidence", "e1", "--claim", "y = 1 /* x */"),
                  "SQL comment")


def test_text_in_a_numeric_column_names_row_and_value(env: dict[str, str], tmp_path: Path) -> None:
    rows = "\n".join(f"{i},{i * 0.5},1" for i in range(30))
    f = write_csv(tmp_path / "text.csv", f"id,x,y\n{rows}\n30,abc,0\n")
    assert "error:" in fails_cleanly(invoke(env, "audit", str(f), "--id", "id", "--evidence", "x", "--fiber-rule", "quantile:4",
                         "--claim", "y = 1"), "text.csv", "row 31", "'x'", "'abc'")


def test_numbers_and_text_in_exact_evidence_are_kept_and_reported(env: dict[str, str], tmp_path: Path) -> None:
    """An exact rule compares a text column as written: 'NA' is a value, 1 and 1.0 differ. Kept (the column
    may be categories), and said: a finding naming the first text row, and a note on the console."""
    f = write_csv(tmp_path / "mixed.csv", "id,e,y\n1,1,1\n2,1.0,1\n3,NA,0\n4,0,0\n5,NA,1\n")
    result = invoke(env, "audit", str(f), "--id", "id", "--evidence", "e", "--claim", "y = 1", "--no-report",
                    "--out", str(tmp_path / "pkg"))
    assert result.exit_code == 0, result.output
    assert "evidence column 'e' (row 3)" in result.output and "'NA'" in result.output
    found = pq.read_table(tmp_path / "pkg" / "findings.parquet").to_pylist()
    assert [(r["kind"], r["column"], r["row"], r["candidate_id"]) for r in found] == [
        ("evidence_numbers_and_text", "e", 3, "3")]
    assert "3 value(s) are numbers and 2 are text" in found[0]["detail"]
    assert "3 spellings of 2 numbers" in found[0]["detail"]
    # the audit itself is the audit of the column as written: '1', '1.0', 'NA', '0' are four fibers
    assert pq.read_table(tmp_path / "pkg" / "summary.parquet")["n_fibers"].to_pylist() == [4]


@pytest.mark.parametrize("values", [["a", "b", "a"], ["1", "2", "1"]])
def test_text_categories_or_numbers_alone_are_no_finding(values: list[str]) -> None:
    frame = pl.DataFrame({"id": ["p", "q", "r"], "e": values, "y": [1, 0, 1]})
    r = dcaudit.audit(frame, evidence="e", claim="y = 1", id="id")
    assert "findings" not in r.tables and not any("numbers and text" in n for n in r.notes)


def test_a_value_late_in_a_big_csv_is_still_found(env: dict[str, str], tmp_path: Path) -> None:
    rows = "\n".join(f"{i},{i * 0.5},1" for i in range(20_000))
    f = write_csv(tmp_path / "late.csv", f"id,x,y\n{rows}\n20000,n/a,0\n")
    assert "error:" in fails_cleanly(invoke(env, "audit", str(f), "--id", "id", "--evidence", "x", "--fiber-rule", "width:1",
                         "--claim", "y = 1"), "row 20001", "'n/a'")


def test_csv_types_a_late_value_widens_its_column_never_rounds_into_it(tmp_path: Path) -> None:
    """A decimal or a word far below the rows that set a column's type (several MB, past any sample or
    first block) widens the column — to double, or to text — instead of being rounded into an integer
    (DuckDB's CSV reader turns a late ``1.5`` into 2) or dropped."""
    from dcaudit.inputs import read_csv

    rows = "".join(f"{i},{i},{i % 2}\n" for i in range(400_000))
    f = write_csv(tmp_path / "late-decimal.csv", f"id,x,w\n{rows}400000,1.5,abc\n")
    assert f.stat().st_size > 4_000_000
    table = read_csv(f)
    assert table.schema.field("id").type == pa.int64()
    assert table.schema.field("x").type == pa.float64()
    assert table.column("x")[-1].as_py() == 1.5 and table.column("x")[-2].as_py() == 399_999.0
    assert table.schema.field("w").type == pa.string() and table.column("w")[-1].as_py() == "abc"
    assert table.num_rows == 400_001


@pytest.mark.parametrize("values, kind", [(["12345678901234567890", "12345678901234567891"], "decimal"),
                                          (["9007199254740993", "9007199254740992", "1.5"], "text"),
                                          (["1e20", "2e20"], "double")])
def test_csv_integers_a_double_would_round_stay_exact(tmp_path: Path, values: list[str], kind: str) -> None:
    """Integers beyond 2^53 (or beyond int64, which pyarrow reads as double) would be rounded into one
    value: kept as DECIMAL(38, 0), or as the file's text when the column has fractions too."""
    from dcaudit.inputs import read_csv

    rows = "".join(f"r{i},{v},{i % 2}\n" for i, v in enumerate(values))
    f = write_csv(tmp_path / "big.csv", f"id,e,y\n{rows}")
    t = read_csv(f).schema.field("e").type
    assert {"decimal": pa.types.is_decimal, "text": pa.types.is_string, "double": pa.types.is_floating}[kind](t), t
    r = dcaudit.audit(f, evidence="e", claim="y = 1", id="id")
    assert r.summary["n_fibers"].to_list() == [len(values)]


def test_nan_beside_integers_a_double_would_round_is_reported(tmp_path: Path) -> None:
    """A column of integers beyond 2^53 with a nan (or inf) is read as text to keep the integers exact; the
    nan is then a fiber value of its own, not the excluded NaN of a number column: that is reported."""
    f = write_csv(tmp_path / "n.csv", "e,y\n9007199254740993,0\nnan,1\n9007199254740992,0\n")
    r = dcaudit.audit(f, evidence="e", claim="y = 1")
    found = r.findings.select("kind", "row").rows()
    assert found == [("evidence_numbers_and_text", 2)] and "'nan'" in r.findings["detail"][0]
    assert r.summary["n_fibers"].to_list() == [3]


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz"])
def test_csv_hexadecimal_spellings_stay_text(tmp_path: Path, suffix: str) -> None:
    """pyarrow reads 0x1A as the integer 26: such a column is read as the file's text (as pandas and polars
    read it), so 0x1A and 26 stay two exact fiber values, and a column with an x elsewhere stays numbers."""
    from dcaudit.inputs import read_csv

    text = "id,h,n,y\n" + "".join(f"r{i},{v},{i},{i % 2}\n" for i, v in enumerate(["0x1A", "26", " 0X10", "16"]))
    f = tmp_path / f"hex{suffix}"
    f.write_bytes(gzip.compress(text.encode()) if suffix.endswith(".gz") else text.encode())
    table = read_csv(f)
    assert table.schema.field("h").type == pa.string() and table.column("h").to_pylist()[:2] == ["0x1A", "26"]
    assert table.schema.field("n").type == pa.int64()
    r = dcaudit.audit(f, evidence="h", claim="y = 1", id="id")
    assert r.summary["n_fibers"].to_list() == [4]
    padded = write_csv(tmp_path / "padded.csv", "id,h\na, 0x1A\nb,26\n")  # pyarrow trims the space and reads 26
    assert read_csv(padded).column("h").to_pylist() == [" 0x1A", "26"]
    plain = write_csv(tmp_path / "x.csv", "id,note,n\na,xyz,1\nb,0,2\n")  # an x, but no 0x: one read
    assert read_csv(plain).schema.field("n").type == pa.int64()


def test_csv_text_stays_as_written(tmp_path: Path) -> None:
    """Dates and timestamps stay the file's text; only an empty field is NULL ("NA" is text, as in polars);
    a quoted value may span lines; a column with no value at all is text; column names are the header's."""
    from dcaudit.inputs import read_csv

    f = write_csv(tmp_path / "text.csv", 'id,when,at,note,blank,\n1,2024-01-02,2024-01-02T13:00:00,"two\nlines",,7\n'
                                         "2,2024-01-03,2024-01-03T14:00:00,NA,,8\n")
    table = read_csv(f)
    assert table.column_names == ["id", "when", "at", "note", "blank", ""]
    assert table.column("when").to_pylist() == ["2024-01-02", "2024-01-03"]
    assert table.column("at").to_pylist() == ["2024-01-02T13:00:00", "2024-01-03T14:00:00"]
    assert table.column("note").to_pylist() == ["two\nlines", "NA"]
    assert table.schema.field("blank").type == pa.string() and table.column("blank").null_count == 2
    assert table.column("").to_pylist() == [7, 8]


def test_a_late_non_utf8_line_is_named(env: dict[str, str], tmp_path: Path) -> None:
    rows = "".join(f"{i},{i % 2},{i % 3 == 0:d}\n" for i in range(200_000)).encode()
    f = tmp_path / "late-bytes.csv"
    f.write_bytes(b"id,e1,y\n" + rows + b"200000,\xff\xfe,0\n")
    assert "error:" in fails_cleanly(invoke(env, "audit", str(f), "--id", "id", "--evidence", "e1", "--claim", "y = 1"),
                                     "late-bytes.csv", "line 200002", "UTF-8")


def test_decimal_commas_are_recognised(env: dict[str, str], tmp_path: Path) -> None:
    f = write_csv(tmp_path / "euro.csv", "id;score;y\n1;0,5;1\n2;1,5;0\n")
    assert "error:" in fails_cleanly(invoke(env, "audit", str(f), "--id", "id", "--evidence", "score", "--fiber-rule", "quantile:2",
                         "--claim", "y = 1"), "decimal comma", "row 1", "'score'")
    f = write_csv(tmp_path / "thousands.csv", 'id,score,y\n1,"1,000",1\n2,"2,500.5",0\n')
    assert "thousands separator (or a decimal comma)" in fails_cleanly(invoke(
        env, "audit", str(f), "--id", "id", "--evidence", "score", "--fiber-rule", "width:10", "--claim", "y = 1"),
        "'1,000'", "row 1")


def test_an_all_empty_column_under_quantile(env: dict[str, str], tmp_path: Path) -> None:
    f = write_csv(tmp_path / "empty-col.csv", "id,x,y\n1,,1\n2,,0\n")
    assert "error:" in fails_cleanly(invoke(env, "audit", str(f), "--id", "id", "--evidence", "x", "--fiber-rule", "quantile:4",
                         "--claim", "y = 1"), "no values", "'x'")


def test_a_string_compared_with_a_number(env: dict[str, str], tmp_path: Path) -> None:
    f = write_csv(tmp_path / "s.csv", "id,e,name\n1,0,abc\n2,1,xyz\n")
    assert "error:" in fails_cleanly(invoke(env, "audit", str(f), "--id", "id", "--evidence", "e", "--claim", "name > 1"),
                  "compares column 'name' (text) with the literal '1'")


def test_huge_claims_and_deep_parentheses_get_a_clear_error() -> None:
    frame = pl.DataFrame({"id": ["a", "b"], "e": [0, 1], "y": [1, 0]})
    flat = " or ".join(["y = 1"] * 900)  # ~900 terms: fine, and/or chains are flat
    assert dcaudit.audit(frame, evidence="e", claim=flat, id="id").summary["n_candidates"].to_list() == [2]
    with pytest.raises(ClaimError, match="nests deeper"):
        dcaudit.audit(frame, evidence="e", claim="(" * 120 + "y = 1" + ")" * 120, id="id")
    with pytest.raises(ClaimError, match="operands"):
        dcaudit.audit(frame, evidence="e", claim=" or ".join(["y = 1"] * 3000), id="id")


def test_huge_quantile_is_refused_not_allocated() -> None:
    frame = pl.DataFrame({"id": ["a", "b"], "e": [0.1, 0.2], "y": [1, 0]})
    with pytest.raises(SpecError, match="more than 100000 bins"):
        dcaudit.audit(frame, evidence="e", claim="y = 1", id="id", fiber_rule="quantile:999999999999")


def test_thousands_of_evidence_columns() -> None:
    n = 2_000
    data = {"id": [str(i) for i in range(50)], "y": [i % 2 for i in range(50)]}
    data.update({f"c{j}": [(i * j) % 3 for i in range(50)] for j in range(n)})
    r = dcaudit.audit(pl.DataFrame(data), evidence=[f"c{j}" for j in range(n)], claim="y = 1", id="id")
    assert r.summary["n_candidates"].to_list() == [50]


# ---------------------------------------------------------------------------------------------------
# Candidate ids


def test_duplicate_and_empty_ids_are_errors_naming_them(env: dict[str, str], tmp_path: Path) -> None:
    dup = write_csv(tmp_path / "dupid.csv", "id,e,y\na,0,1\nb,0,0\na,1,0\n")
    assert "error:" in fails_cleanly(invoke(env, "audit", str(dup), "--id", "id", "--evidence", "e", "--claim", "y = 1"),
                  "repeated candidate id", "'a' (2×)", "--duplicates keep")
    empty = write_csv(tmp_path / "emptyid.csv", "id,e,y\na,0,1\n,0,0\nc,1,0\n")
    assert "error:" in fails_cleanly(invoke(env, "audit", str(empty), "--id", "id", "--evidence", "e", "--claim", "y = 1"),
                  "empty id", "rows 2")


@pytest.mark.parametrize("command, extra", [("audit", ()), ("replay", ("--seeds", "2")),
                                             ("complete", ("--probes", "p", "--seeds", "1")),
                                             ("sensitivity", ())])
def test_an_id_column_the_table_lacks_is_named_on_every_command(env: dict[str, str], tmp_path: Path, command: str,
                                                                extra: tuple[str, ...]) -> None:
    f = write_csv(tmp_path / "t.csv", "id,e,p,y\n1,0,1,1\n2,1,0,0\n3,1,1,1\n")
    args = [command, str(f), "--id", "Id", "--evidence", "e", "--claim", "y = 1", *extra]
    result = invoke(env, *args, *(() if command == "sensitivity" else ("--no-report",)))
    text = fails_cleanly(result, "t.csv", "'Id'", "did you mean 'id'", "available columns: id, e, p, y")
    assert result.exit_code == 2 and "internal error" not in text and "__row" not in text


def test_a_pandas_index_named_as_the_id_says_it_is_not_a_column() -> None:
    import pandas as pd

    frame = pd.DataFrame({"e": [1, 1], "y": [1, 0]}, index=pd.Index([5, 6], name="id"))
    with pytest.raises(InputError, match="reset_index"):
        dcaudit.audit(frame, evidence="e", claim="y = 1", id="id")
    with pytest.raises(InputError, match="'id'"):
        dcaudit.replay(pl.from_pandas(frame), evidence="e", claim="y = 1", id="id", seeds=2)


def test_kept_duplicates_are_reported_as_findings() -> None:
    frame = pl.DataFrame({"id": ["a", "a", "b", "b", "c"], "e": [0, 0, 1, 1, 1], "y": [1, 0, 1, 1, 0]})
    r = dcaudit.audit(frame, evidence="e", claim="y = 1", id="id", duplicates="keep")
    kinds = dict(r.findings.select("candidate_id", "kind").iter_rows())
    assert kinds == {"a": "duplicate_id_conflicting", "b": "duplicate_id"}  # a's two rows disagree
    assert r.summary["n_candidates"].to_list() == [5]


def test_ids_that_differ_only_by_padding_or_normal_form_are_kept_and_reported(tmp_path: Path) -> None:
    """``A1`` and ``A1 ``, ``é`` as one code point and as ``e`` + accent: distinct ids, so distinct candidates
    (nothing merged), each group one ``id_spellings`` finding at its first row; letter case is not folded
    (SMILES tell ``c`` from ``C``), and a CSV and the same rows as a frame report the same."""
    ids = ["A1", "A1 ", "B2", "\u00e9t", "e\u0301t", "c1", "C1", "\tZ", "Z"]
    f = tmp_path / "ids.csv"
    f.write_text("id,e,y\n" + "".join(f"{i},{n % 2},{n % 3 == 0:d}\n" for n, i in enumerate(ids)), encoding="utf-8")
    for data in (f, pl.read_csv(f)):
        r = dcaudit.audit(data, evidence="e", claim="y = 1", id="id")
        assert r.summary["n_candidates"].to_list() == [len(ids)]
        found = r.findings.sort("row").select("row", "kind", "candidate_id", "detail").rows()
        assert [(row, kind, first) for row, kind, first, _ in found] == [
            (1, "id_spellings", "A1"), (4, "id_spellings", "\u00e9t"), (8, "id_spellings", "\tZ")]
        assert "'e\\u0301t'" in found[1][3]  # spellings that print alike are shown escaped
        assert any("differ only by surrounding white space" in n for n in r.notes)
    clean = dcaudit.audit(pl.DataFrame({"id": ["c1", "C1", "d"], "e": [0, 0, 1], "y": [1, 0, 1]}),
                          evidence="e", claim="y = 1", id="id")
    assert "findings" not in clean.tables


INTEGER_IDS = {
    "rising": list(range(10, 110)),
    "shuffled": [(7 * i) % 100 for i in range(100)],
    "sparse": [i * 10**12 for i in range(100)],                      # beyond the perfect hash range
    "sparse shuffled": [((7 * i) % 100) * 10**12 for i in range(100)],
    "repeat adjacent": [*range(50), 49, *range(50, 99)],
    "repeat far": [*range(99), 0],
    "repeat sparse": [*(i * 10**12 for i in range(99)), 5 * 10**12],
    "more ids than values": [i % 60 for i in range(100)],
    "null": [*range(40), None, *range(41, 100)],
}


@pytest.mark.parametrize("layout", list(INTEGER_IDS))
@pytest.mark.parametrize("duplicates", ["error", "keep"])
@pytest.mark.parametrize("as_file", [True, False])
def test_integer_ids_are_checked_as_the_full_check_does(layout: str, duplicates: str, as_file: bool, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Integer ids take a shortcut (Parquet statistics, ids rising in row order, DuckDB's perfect hash
    aggregate): the same error, the same findings, or None, as the full count(DISTINCT) check."""
    import duckdb

    from dcaudit import inputs

    ids = INTEGER_IDS[layout]
    table = pa.table({"id": pa.array(ids, pa.int64()), "y": pa.array([i % 2 for i in range(len(ids))], pa.int8())})
    if as_file:
        pq.write_table(table, tmp_path / "t.parquet", row_group_size=32)

    def check(shortcut: bool) -> object:
        con = duckdb.connect()
        view = inputs.register_input(con, tmp_path / "t.parquet" if as_file else table).view
        with monkeypatch.context() as mp:
            if not shortcut:
                mp.setattr(inputs, "_unique_integers", lambda *args: False)
            try:
                found = inputs.check_ids(con, view, "id", duplicates=duplicates, claim_sql='"y" = 1', source="s")
            except InputError as exc:
                return ("error", str(exc))
        return None if found is None else found.to_pylist()

    assert check(True) == check(False)
    unique = layout in ("rising", "shuffled", "sparse", "sparse shuffled")
    assert (check(True) is None) == unique
    con = duckdb.connect()
    view = inputs.register_input(con, tmp_path / "t.parquet" if as_file else table).view
    # proven without count(DISTINCT): rising ids always, shuffled ones within the perfect hash range
    assert inputs._unique_integers(con, view, '"id"', "BIGINT") == (layout in ("rising", "shuffled", "sparse"))


# ---------------------------------------------------------------------------------------------------
# Broken files


def test_a_ragged_csv_line_is_named(env: dict[str, str], tmp_path: Path) -> None:
    f = write_csv(tmp_path / "ragged.csv", "id,e1,y\n1,0,1\n2,1,0,5\n3,1,1\n")
    assert "error:" in fails_cleanly(invoke(env, "audit", str(f), "--id", "id", "--evidence", "e1", "--claim", "y = 1"),
                  "ragged.csv", "line 3", "4 fields", "header has 3")


def test_bad_encoding_truncated_gzip_and_corrupt_parquet(env: dict[str, str], tmp_path: Path) -> None:
    enc = tmp_path / "enc.csv"
    enc.write_bytes(b"id,e1,y\n1,0,1\n2,\xff\xfe,0\n")
    assert "error:" in fails_cleanly(invoke(env, "audit", str(enc), "--id", "id", "--evidence", "e1", "--claim", "y = 1"),
                  "enc.csv", "UTF-8")
    gz = tmp_path / "trunc.csv.gz"
    gz.write_bytes(gzip.compress(b"id,e1,y\n" + b"".join(b"%d,0,1\n" % i for i in range(5000)))[:200])
    assert "error:" in fails_cleanly(invoke(env, "audit", str(gz), "--id", "id", "--evidence", "e1", "--claim", "y = 1"),
                  "trunc.csv.gz", "truncated")
    good = tmp_path / "good.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "e1": [0, 1], "y": [1, 0]}), good)
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(good.read_bytes()[:-40])
    assert "error:" in fails_cleanly(invoke(env, "audit", str(bad), "--id", "id", "--evidence", "e1", "--claim", "y = 1"),
                  "bad.parquet", "Parquet")


# ---------------------------------------------------------------------------------------------------
# Options and settings


def test_absurd_min_support_cannot_change_the_catalog_types(env: dict[str, str], tmp_path: Path) -> None:
    f = write_csv(tmp_path / "t.csv", "id,e,y\na,0,1\nb,1,0\n")
    result = invoke(env, "audit", str(f), "--id", "id", "--evidence", "e", "--claim", "y = 1",
                    "--min-support", "999999999999999999999")
    assert result.exit_code == 2 and "'--min-support'" in result.output and "Traceback" not in result.output
    with pytest.raises(SpecError, match="min_support"):  # the Python API: the spec's check, before any pass
        dcaudit.audit(f, evidence="e", claim="y = 1", id="id", min_support=10**21)


def test_evidence_names_with_commas(tmp_path: Path, env: dict[str, str]) -> None:
    f = tmp_path / "comma.csv"
    pl.DataFrame({"id": ["a", "b", "c"], "x,y": [0, 0, 1], "z": [1, 1, 0], "y": [1, 0, 1]}).write_csv(f)
    out = tmp_path / "out"
    # a name holding a comma is double-quoted; repeating the option adds names, each value split alike
    result = invoke(env, "audit", str(f), "--id", "id", "--evidence", '"x,y"', "--evidence", "z",
                    "--claim", "y = 1", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert pq.read_table(out / "summary.parquet").column("n_fibers").to_pylist() == [2]


@pytest.mark.parametrize("variable, value, needle", [
    ("DCAUDIT_OFFLINE", "2", "DCAUDIT_OFFLINE"),      # silently meant online
    ("DCAUDIT_THREADS", "abc", "DCAUDIT_THREADS"),
    ("DCAUDIT_MEMORY_LIMIT", "1'GB", "DCAUDIT_MEMORY_LIMIT"),
])
def test_bad_settings_are_named(env: dict[str, str], variable: str, value: str, needle: str) -> None:
    assert "error:" in fails_cleanly(invoke({**env, variable: value}, "runs"), needle)


def test_home_that_is_a_file(env: dict[str, str], tmp_path: Path) -> None:
    home = tmp_path / "afile"
    home.write_text("x")
    assert "error:" in fails_cleanly(invoke({**env, "DCAUDIT_HOME": str(home)}, "runs"), "is a file")


def test_leakage_is_noted() -> None:
    frame = pl.DataFrame({"id": ["a", "b"], "e": [0, 1], "y": [1, 0]})
    r = dcaudit.audit(frame, evidence=["e"], claim="e = 1", id="id")
    assert any("leakage" in note for note in r.notes)
    r = dcaudit.audit(frame, evidence=["id", "e"], claim="y = 1", id="id")
    assert any("includes the id column 'id'" in note for note in r.notes)


def test_nan_in_a_parquet_file_is_seen_despite_its_statistics(tmp_path: Path) -> None:
    """DuckDB folds isnan() with Parquet min/max statistics, which leave NaN out; the audit must not."""
    path = tmp_path / "nan.parquet"
    pq.write_table(pa.table({"id": ["a", "b", "c"], "e": [0.5, 0.5, math.nan], "score": [1.0, math.nan, 2.0],
                             "y": [1, 0, 1]}), path)
    r = dcaudit.audit(path, evidence="e", claim="y = 1", id="id")
    assert dict(r.excluded().select("candidate_id", "excluded_reason").iter_rows()) == {"c": "evidence_nan"}
    r = dcaudit.audit(path, evidence="y", claim="score > 0.5", id="id")
    assert dict(r.excluded().select("candidate_id", "excluded_reason").iter_rows()) == {"b": "claim_undefined"}


@pytest.mark.parametrize("rule", ["exact", "quantile:2", "width:1"])
@pytest.mark.parametrize("claim", ["p = 1 or q = 1", "p = 1 and q = 1", "not (p = 1 or q = 1)"])
def test_a_claim_over_an_empty_column_is_missing_in_every_table(rule: str, claim: str) -> None:
    """``p = 1 or q = 1`` with ``q`` empty is true in SQL, but the candidate reads an empty column:
    claim_missing. The fiber counts, the summary and the candidates table must leave out the same rows
    (the grouping passes read the claim's value, the candidates table the reason)."""
    frame = pl.DataFrame({"id": list(range(12)), "e": [i % 3 for i in range(12)],
                          "p": [1, 0, 1, 0, 0, 1, None, 1, 0, 1, 0, 1],
                          "q": [None, 0, 0, 1, 0, None, 1, 1, None, 0, 0, 1]})
    result = dcaudit.audit(frame, id="id", evidence=["e"], claim=claim, fiber_rule=rule, report=False)
    summary = result.summary.row(0, named=True)
    candidates = result.tables["candidates"]
    excluded = candidates.filter(pl.col("status") == "excluded")
    assert summary["n_excluded"] == excluded.height == 4
    assert set(excluded["excluded_reason"]) == {"claim_missing"}
    assert excluded["claim_value"].null_count() == excluded.height
    assert summary["n_candidates"] == candidates.height - excluded.height == result.tables["fibers"]["n"].sum()


def test_csv_ids_keep_their_text(tmp_path: Path) -> None:
    """An id column of digits is read as text: ``007`` stays ``007`` (a number would make it ``7``, and
    the package would name a candidate the user's file does not have)."""
    f = write_csv(tmp_path / "ids.csv", "id,e,y\n007,0,1\n010,0,1\n7,1,0\n")
    result = dcaudit.audit(f, id="id", evidence=["e"], claim="y = 1", report=False)
    assert sorted(result.tables["candidates"]["candidate_id"]) == ["007", "010", "7"]
    assert result.summary["n_candidates"][0] == 3


def test_a_claim_on_a_csv_id_column_says_why_the_ids_are_text(tmp_path: Path) -> None:
    """The id column is text in a CSV, so a numeric claim on it cannot compare: the one-line error says why,
    and how to claim on the value."""
    f = write_csv(tmp_path / "ids.csv", "id,e,y\n1,0,1\n2,0,0\n3,1,1\n")
    with pytest.raises(ClaimError) as err:
        dcaudit.audit(f, id="id", evidence=["e"], claim="id > 2", report=False)
    message = str(err.value)
    assert "compares column 'id' (text)" in message
    assert "the id column 'id' of a CSV is read as text" in message and "\n" not in message
    with pytest.raises(ClaimError) as other:  # another text column: no word about ids
        dcaudit.audit(write_csv(tmp_path / "t.csv", "id,e,y\n1,a,1\n2,b,0\n"), id="id", evidence=["y"],
                      claim="e > 2", report=False)
    assert "id column" not in str(other.value)


def test_a_byte_order_mark_is_not_part_of_the_id_column_name(tmp_path: Path) -> None:
    """Spreadsheet exports start with a UTF-8 byte order mark: ``--id id`` still names the first column,
    which is read as text."""
    f = tmp_path / "bom.csv"
    f.write_bytes(b"\xef\xbb\xbfid,e,y\n007,0,1\n2,1,0\n")
    result = dcaudit.audit(f, id="id", evidence=["e"], claim="y = 1", report=False)
    assert sorted(result.tables["candidates"]["candidate_id"]) == ["007", "2"]


# ---------------------------------------------------------------------------------------------------
# Names, paths and CSV structure (a QA pass over messy files)

def test_names_in_double_quotes_keep_commas_and_spaces(tmp_path: Path) -> None:
    """``"b,c"`` is one column name, ``"e "`` keeps its space, unquoted names are trimmed, and a repeated
    option is split like a single one (``--probes a --probes b,c``)."""
    from dcaudit.spec import split_names

    assert split_names('a, "b,c" ,"e ", "say ""hi"""') == ["a", "b,c", "e ", 'say "hi"']
    f = write_csv(tmp_path / "c.csv", 'id,"b,c",e ,y\n1,2,0,1\n2,3,0,0\n3,2,1,1\n')
    one = dcaudit.audit(f, id="id", evidence='"b,c"', claim="y = 1", report=False)
    # the package writes the name quoted, as split_names reads it back: one column, not two
    assert one.summary["evidence"][0] == '"b,c"' and split_names(one.summary["evidence"][0]) == ["b,c"]
    assert one.summary["n_fibers"][0] == 2
    both = dcaudit.audit(f, id="id", evidence='"b,c", "e "', claim="y = 1", report=False)
    assert both.summary["n_fibers"][0] == 3
    runner = CliRunner()
    env = {"DCAUDIT_HOME": str(tmp_path / "home")}
    result = runner.invoke(cli, ["audit", str(f), "--id", "id", "--evidence", '"b,c"', "--evidence", '"e "',
                                 "--claim", "y = 1", "--no-report", "--json"], env=env)
    assert result.exit_code == 0, result.output
    with pytest.raises(SpecError, match="not closed"):
        split_names('"b,c')


def test_columns_differing_only_in_surrounding_spaces_are_an_error_but_unicode_case_is_not(tmp_path: Path) -> None:
    """``e`` and ``e `` are different columns to DuckDB, but a name option trims what it is given and would
    take one for the other: an error naming both. ``é`` and ``É`` DuckDB tells apart (only ASCII case
    folds), so they are two columns."""
    f = write_csv(tmp_path / "s.csv", "id,e,e ,y\na,1,2,1\nb,1,3,0\n")
    with pytest.raises(InputError, match="differ only in surrounding spaces"):
        dcaudit.audit(f, id="id", evidence=["e "], claim="y = 1", report=False)
    u = write_csv(tmp_path / "u.csv", "id,é,É,y\na,1,2,1\nb,1,3,0\nc,2,3,1\n")
    result = dcaudit.audit(u, id="id", evidence=["É"], claim="y = 1", report=False)
    assert result.summary["n_fibers"][0] == 2  # É: 2, 3, 3 -> two fibers (é would give two as well, other members)
    assert sorted(result.fibers["n"].to_list()) == [1, 2]


def test_a_file_name_with_glob_characters_is_that_file(tmp_path: Path) -> None:
    """run[1].parquet is read as itself — not as the glob that matches run1.parquet — and a glob's files are
    checked for repeated column names like a single file."""
    pq.write_table(pa.table({"id": ["a", "b", "c"], "e": [1, 1, 2], "y": [1, 0, 1]}), tmp_path / "run[1].parquet")
    pq.write_table(pa.table({"id": ["x", "y"], "e": [9, 9], "y": [0, 0]}), tmp_path / "run1.parquet")
    result = dcaudit.audit(tmp_path / "run[1].parquet", id="id", evidence=["e"], claim="y = 1", report=False)
    assert sorted(result.tables["candidates"]["candidate_id"]) == ["a", "b", "c"]
    (tmp_path / "g").mkdir()
    t = pa.Table.from_arrays([pa.array(["a", "b"]), pa.array([1, 2]), pa.array([3, 4]), pa.array([1, 0])],
                             names=["id", "e", "e", "y"])
    pq.write_table(t, tmp_path / "g" / "p1.parquet")
    with pytest.raises(InputError, match="duplicate column name 'e'"):
        dcaudit.audit(str(tmp_path / "g" / "*.parquet"), id="id", evidence=["e"], claim="y = 1", report=False)


def test_csv_structure_errors_name_the_right_line_and_cause(tmp_path: Path) -> None:
    import os

    bad = tmp_path / "bad.csv"
    bad.write_bytes(b"id,e,y\na,1,1\nb,2,0\nc,\xff\xfe,1\n")  # a bad byte within the header's block
    with pytest.raises(InputError, match="line 4 is not UTF-8"):
        dcaudit.audit(bad, id="id", evidence=["e"], claim="y = 1", report=False)
    open_quote = write_csv(tmp_path / "q.csv", 'id,e,y\na,"1,1\nb,1,0\n')
    with pytest.raises(InputError, match="line 2: a quoted value runs on to line 3.*quote not closed"):
        dcaudit.audit(open_quote, id="id", evidence=["e"], claim="y = 1", report=False)
    fifo = tmp_path / "f.csv"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        dcaudit.audit(fifo, id="id", evidence=["e"], claim="y = 1", report=False)


def test_a_value_longer_than_a_read_block_is_read(tmp_path: Path) -> None:
    f = write_csv(tmp_path / "long.csv", "id,e,y\na," + "x" * 2_500_000 + ",1\nb,short,0\nc,short,1\n")
    result = dcaudit.audit(f, id="id", evidence=["e"], claim="y = 1", report=False)
    assert result.summary["n_candidates"][0] == 3 and result.summary["n_fibers"][0] == 2


def test_blank_lines_of_a_one_column_csv_are_missing_values(tmp_path: Path) -> None:
    """With one column a blank line is an empty value: excluded as evidence_missing, never skipped (the rows
    after it would be renumbered)."""
    f = write_csv(tmp_path / "one.csv", "e\n1\n\n1\n2\n\n2\n")
    result = dcaudit.audit(f, evidence=["e"], claim="e = 1", report=False)
    assert result.summary["n_candidates"][0] == 4 and result.summary["n_excluded"][0] == 2
    excluded = result.excluded()
    assert sorted(excluded["candidate_id"].to_list()) == ["2", "5"]  # the file's data rows 2 and 5


@pytest.mark.parametrize("values, reported", [
    (["12345678901234567890", "0.5", "0.50"], True),   # text (a double would round the big integer): 0.5 twice
    (["1_000", "1000", "7"], True),                     # DuckDB reads 1_000 as a number, the column is text
    (["12345678901234567890", "12345678901234567891", "0.5"], False),  # two numbers, not two spellings
])
def test_numbers_written_two_ways_in_a_text_column_are_reported(tmp_path: Path, values: list[str],
                                                                 reported: bool) -> None:
    f = write_csv(tmp_path / "n.csv", "id,e,y\n" + "".join(f"r{i},{v},{i % 2}\n" for i, v in enumerate(values)))
    result = dcaudit.audit(f, id="id", evidence=["e"], claim="y = 1", report=False)
    kinds = result.tables["findings"]["kind"].to_list() if "findings" in result.tables else []
    assert ("evidence_number_spellings" in kinds) == reported
    assert result.summary["n_fibers"][0] == 3  # kept as written: reported, not merged


def test_a_value_spanning_lines_in_a_csv_is_reported(tmp_path: Path) -> None:
    """A stray quote in a TSV swallows the lines up to the next quote into one value: kept (a quoted value may
    span lines) and reported with its row."""
    f = tmp_path / "q.tsv"
    f.write_text('id\ttitle\ty\na\t"Best of\t1\nb\tplain\t0\nc\t12" screen"\t1\nd\tother\t0\n')
    result = dcaudit.audit(f, id="id", evidence=["title"], claim="y = 1", report=False)
    found = result.tables["findings"].filter(pl.col("kind") == "evidence_line_break")
    assert found.height == 1 and found["row"][0] == 1 and found["column"][0] == "title"
    assert any("span lines" in n for n in result.notes)


def test_a_claim_on_a_text_column_names_its_first_text_value_and_row(tmp_path: Path) -> None:
    f = write_csv(tmp_path / "t.csv", "id,e,y\na,1,1\nb,2,x\nc,3,1\n")
    with pytest.raises(ClaimError, match=r"first value that is not a number is 'x' \(.*t.csv, row 2\)"):
        dcaudit.audit(f, id="id", evidence=["e"], claim="y = 1", report=False)


@pytest.mark.parametrize(("value", "hint"), [
    ("\u22122.5", "it starts with a Unicode minus sign (U+2212), not the ASCII minus '-': write negative numbers "
                 "with '-'"),
    ("\u20131", "it starts with an en dash (U+2013), not the ASCII minus '-'"),
    ("1\u00a0000", "it has spaces between its digits (a thousands separator?): write numbers without separators"),
    ("12 345.5", "it has spaces between its digits (a thousands separator?)"),
])
def test_a_number_written_as_a_copied_table_writes_it_is_named_with_why(tmp_path: Path, value: str, hint: str) -> None:
    """A Unicode minus (a table copied from a document) or a space as a thousands separator made the column text;
    the messages named the value, which looks like a number, without saying what is wrong with it."""
    f = tmp_path / "n.csv"
    f.write_text(f'id,e,y\na,1,1\nb,2,0\nc,"{value}",1\n', encoding="utf-8")
    with pytest.raises(InputError, match=re.escape(hint)):
        dcaudit.audit(f, id="id", evidence=["e"], fiber_rule="quantile:2", claim="y = 1", report=False)
    with pytest.raises(ClaimError, match=re.escape(hint)):
        dcaudit.audit(f, id="id", evidence=["y"], claim="e > 0", report=False)


def test_a_claim_on_numbers_held_as_text_says_so() -> None:
    """A frame's str column of 'nan' and '1' (pandas' astype(str) of floats) read as numbers in DuckDB, so the
    claim's message named no value and said only 'text'. Now it says the values are numbers held as text."""
    import pandas as pd

    frame = pd.DataFrame({"e": [1, 2], "y": ["nan", "1"]})
    with pytest.raises(ClaimError, match=r"^claim 'y = 1' compares column 'y' \(text\) with the literal '1'; its "
                                         r"values all read as numbers, but the column holds them as text \(the "
                                         r"first, 'nan', pandas DataFrame, row 1\): give the column a numeric type"):
        dcaudit.audit(frame, evidence="e", claim="y = 1", report=False)


def test_a_number_spanning_lines_after_an_unclosed_quote_is_named_as_such(tmp_path: Path) -> None:
    """An unclosed quote on the last line made the claim column text ('0\n'), and the claim's message said
    only that it was text: DuckDB reads '0\n' as 0, so no value was named. A binned rule cast it to 0 without
    a word. Now both name the row and the value and ask about the quote; a decimal comma is named in a claim
    too."""
    f = write_csv(tmp_path / "u.csv", 'id,e,y\na,1,1\nb,2,"0\n')
    with pytest.raises(ClaimError, match=r"first value that is not a number is '0\\n' \(.*u.csv, row 2\); it "
                                         r"spans lines: is a quote not closed\?$"):
        dcaudit.audit(f, id="id", evidence=["e"], claim="y = 1", report=False)
    with pytest.raises(InputError, match=r"holds text: '0\\n'; it spans lines: is a quote not closed\? "
                                         r"\(file .*u.csv, row 2, column 'y'\)$"):
        dcaudit.audit(f, id="id", evidence=["y"], fiber_rule="quantile:2", claim="e = 1", report=False)
    comma = write_csv(tmp_path / "c.csv", 'id,e,y\na,1,1\nb,2,"1,5"\n')
    with pytest.raises(ClaimError, match=r"is '1,5' \(.*c.csv, row 2\); it looks like a decimal comma"):
        dcaudit.audit(comma, id="id", evidence=["e"], claim="y = 1", report=False)


def test_binned_rules_refuse_integers_a_double_cannot_tell_apart(tmp_path: Path) -> None:
    """2^53 and 2^53 + 1 are one double: width:1 put them in one bin and quantile:3 everything in one,
    without a word. The exact rule keeps them apart; a binned rule is an error naming the value and row."""
    f = write_csv(tmp_path / "big.csv", "e,y\n1,1\n9007199254740992,1\n9007199254740993,0\n")
    assert dcaudit.audit(f, evidence=["e"], claim="y = 1", report=False).summary["n_fibers"][0] == 3
    for rule in ("width:1", "quantile:3"):
        with pytest.raises(InputError, match=r"9007199254740992 is beyond 2\^53.*row 2"):
            dcaudit.audit(f, evidence=["e"], claim="y = 1", fiber_rule=rule, report=False)


def _exact_integer_type_reference(tokens: list[str | None]) -> str | None:
    """The plain-Python definition: which type keeps a CSV column's integers beyond 2^53 exact."""
    import re

    values = [t.strip() for t in tokens if t is not None]
    integers = [t for t in values if re.fullmatch(r"[-+]?[0-9]+", t)]
    if not any(float(t) != int(t) for t in integers if abs(int(t)) >= 2**53):
        return None
    fits = len(integers) == len(values) and all(len(t.lstrip("+-")) <= 38 for t in values)
    return "decimal" if fits else "text"


# any magnitude, the neighbours of 2^53, and exact doubles far beyond it (an odd part below 2^53 times 2^k)
_BIG = st.one_of(st.integers(-(2**70), 2**70), st.integers(2**53 - 4, 2**53 + 4),
                 st.builds(lambda odd, k: odd * 2**k, st.integers(-(2**53), 2**53), st.integers(0, 20)))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_BIG.map(str), _BIG.map(lambda v: f"+{v:025d}" if v >= 0 else f"-{-v:025d}"),
                          st.just("1.5"), st.just("1e20"), st.none()), min_size=1, max_size=12))
@example(["9007199254740993"]).via("16 digits")
@example(["12345678901234567890", "7"]).via("20 digits")
@example(["-000000000000000000000000000000000000001", "9007199254740993"]).via("39 characters")
def test_exact_integer_type_agrees_with_the_plain_python_definition(tokens: list[str | None]) -> None:
    """The vectorised test (odd part below 2^53 on uint64, longer integers one by one) gives the type the
    plain-Python comparison float(t) != int(t) gives, signs, leading zeros and powers of two included."""
    from dcaudit.inputs import exact_integer_type

    got = exact_integer_type(pa.array(tokens, pa.string()))
    want = _exact_integer_type_reference(tokens)
    assert {None: None, "decimal": pa.decimal128(38, 0), "text": pa.string()}[want] == got


def _two_pure_fibers(values: pa.Array) -> pa.Table:
    """a, b share a value and c, d another, claim true for the first two: two pure fibers when read right."""
    return pa.table({"cid": list("abcd"), "e": values, "u": values, "y": [1, 1, 0, 0]})


REFUSED_ARROW = {
    "interval month-day-nano": pa.array([(1, 0, 0), (1, 0, 0), (0, 30, 0), (0, 30, 0)], pa.month_day_nano_interval()),
    "list of ns durations": pa.array([[1], [1], [2], [2]], pa.list_(pa.duration("ns"))),
    "struct of ns durations": pa.StructArray.from_arrays([pa.array([1, 1, 2, 2], pa.duration("ns"))], ["d"]),
    "decimal of 50 digits": pa.array([10**45, 10**45, 10**45 + 1, 10**45 + 1], pa.decimal256(50, 0)),
    "dense union": pa.UnionArray.from_dense(pa.array([0, 0, 1, 1], pa.int8()), pa.array([0, 0, 0, 0], pa.int32()),
                                            [pa.array([1]), pa.array(["x"])]),
}


@pytest.mark.parametrize("kind", list(REFUSED_ARROW))
def test_columns_duckdb_cannot_hold_as_they_are_refused_only_when_read(kind: str, tmp_path: Path) -> None:
    table = _two_pure_fibers(REFUSED_ARROW[kind])
    with pytest.raises(InputError, match=r"\(file .*, column 'e'\)$"):
        dcaudit.audit(table, evidence="e", claim="y = 1", id="cid")
    with pytest.raises(InputError, match=r"column 'u'\)$"):
        dcaudit.audit(table, evidence="cid", claim="y = 1", id="u")
    # unread, such a column stops nothing
    unread = dcaudit.audit(table.set_column(1, "e", pa.array([1, 1, 2, 2])), evidence="e", claim="y = 1", id="cid")
    assert unread.summary["n_fibers"].to_list() == [2] and unread.summary["n_mixed_fibers"].to_list() == [0]


@pytest.mark.parametrize("values", [
    pa.array([[1.5], [1.5], [2.5], [2.5]], pa.list_(pa.float16())),
    pa.StructArray.from_arrays([pa.array([1.5, 1.5, 2.5, 2.5], pa.float16())], ["h"]),
    pa.array([[1000], [1000], [2000], [2000]], pa.list_(pa.duration("ns"))),   # whole microseconds
    pa.array([15, 15, 25, 25], pa.decimal256(20, 1)),
], ids=["list of half floats", "struct of half floats", "whole-microsecond ns durations", "decimal256(20,1)"])
def test_nested_types_duckdb_reads_after_an_exact_widening_are_audited(values: pa.Array) -> None:
    result = dcaudit.audit(_two_pure_fibers(values), evidence="e", claim="y = 1", id="cid")
    assert result.summary["n_fibers"].to_list() == [2] and result.summary["certified_true"].to_list() == [2]


def test_a_parquet_decimal_beyond_38_digits_is_refused_when_read(tmp_path: Path) -> None:
    path = tmp_path / "wide.parquet"
    pq.write_table(_two_pure_fibers(REFUSED_ARROW["decimal of 50 digits"]), path)
    with pytest.raises(InputError, match=rf"decimals of 50 digits.*\(file {path}, column 'e'\)"):
        dcaudit.audit(path, evidence="e", claim="y = 1", id="cid")
    with pytest.raises(InputError, match="column 'u'"):
        dcaudit.audit(path, evidence="cid", claim="u > 0", id="cid")
    assert dcaudit.audit(path, evidence="cid", claim="y = 1", id="cid").summary["n_fibers"].to_list() == [4]


def _pandas_extension_frames() -> dict[str, object]:
    import pandas as pd

    periods = pd.PeriodIndex(["2020-01", None, "2020-03", "2020-01"], freq="M")
    intervals = pd.arrays.IntervalArray.from_tuples([(0, 1), None, (1.5, 2), (0, 1)], closed="left")
    return {kind: pd.DataFrame({"cid": list("abcd"), "e": values, "z": [1, 1, 2, 2], "y": [1, 0, 1, 1]})
            for kind, values in (("period", periods), ("interval", intervals))}


@pytest.mark.parametrize("kind", ["period", "interval"])
def test_pandas_periods_and_intervals_audit_as_their_csv_does_and_are_refused_from_parquet(
        kind: str, tmp_path: Path) -> None:
    """Arrow holds a pandas Period as its ordinal and an Interval as its bounds: the keys were '600' (2020-01 at
    freq M) and {'left': 0, 'right': 1} with the closed side lost, where the frame's CSV says '2020-01' and
    '[0.0, 1.0)'. A frame (or its Arrow table) now audits as its CSV does; a Parquet file, which keeps only the
    storage and a name in its footer, is refused by name when the column is read."""
    frame = _pandas_extension_frames()[kind]
    frame.to_csv(tmp_path / "f.csv", index=False)
    from_csv = dcaudit.audit(tmp_path / "f.csv", evidence="e", claim="y = 1", id="cid")
    assert sorted(from_csv.tables["fibers"]["evidence_key"].to_list()) == {
        "period": ["2020-01", "2020-03"], "interval": ['"[0.0, 1.0)"', '"[1.5, 2.0)"']}[kind]
    want = _audited(from_csv)
    for data in (frame, pa.Table.from_pandas(frame, preserve_index=False)):
        got = _audited(dcaudit.audit(data, evidence="e", claim="y = 1", id="cid"))
        assert got["fibers"] == want["fibers"] and got["summary"] == want["summary"]
    frame.to_parquet(tmp_path / "f.parquet")
    with pytest.raises(InputError, match=rf"pandas {kind.title()}s, which .*\(file .*f.parquet, column 'e'\)$"):
        dcaudit.audit(tmp_path / "f.parquet", evidence="e", claim="y = 1", id="cid")
    # unread, the column stops nothing
    assert dcaudit.audit(tmp_path / "f.parquet", evidence="z", claim="y = 1", id="cid").summary[
        "n_fibers"].to_list() == [2]


def test_equal_python_sets_in_a_pandas_frame_are_one_value() -> None:
    """Arrow keeps a set in its iteration order, which for text follows hash collisions and insertion order:
    two equal sets were two fiber keys. They are sorted lists now; a set that cannot be sorted is an error."""
    import pandas as pd

    words = next(w for k in range(1000) if list(set(w := [f"w{k}-{j}" for j in range(6)]))
                 != list(set(reversed(w))))
    frame = pd.DataFrame({"cid": list("abcd"), "q": [set(words), set(reversed(words)), {"z"}, {"z"}],
                          "y": [1, 1, 0, 0]})
    result = dcaudit.audit(frame, evidence="q", claim="y = 1", id="cid")
    assert result.summary["n_fibers"].to_list() == [2] and result.summary["certified_true"].to_list() == [2]
    unsortable = pd.DataFrame({"cid": list("ab"), "q": [{None, 1}, {2}], "y": [1, 0]})
    with pytest.raises(InputError, match=r"Python sets whose members cannot be sorted.*column 'q'\)$"):
        dcaudit.audit(unsortable, evidence="q", claim="y = 1", id="cid")


# ---------------------------------------------------------------------------------------------------
# Durations and coarse timestamps: one value, or one refusal, in every input form


def _forms(tmp_path: Path, table: pa.Table) -> dict[str, object]:
    """``table`` as a Parquet file, a glob of two Parquet files, an Arrow table and dataset, a polars and a pandas
    frame."""
    import pyarrow.dataset as ds

    pq.write_table(table, tmp_path / "one.parquet")
    (tmp_path / "parts").mkdir()
    half = table.num_rows // 2
    pq.write_table(table.slice(0, half), tmp_path / "parts" / "p1.parquet")
    pq.write_table(table.slice(half), tmp_path / "parts" / "p2.parquet")
    return {str(tmp_path / "one.parquet"): tmp_path / "one.parquet", str(tmp_path / "parts" / "*.parquet"):
            str(tmp_path / "parts" / "*.parquet"), "pyarrow Table": table, "polars DataFrame": pl.from_arrow(table),
            "pandas DataFrame": table.to_pandas(), "pyarrow FileSystemDataset": ds.dataset(tmp_path / "one.parquet")}


def _audited(result: dcaudit.Result) -> dict[str, list[tuple[object, ...]]]:
    return {name: sorted(result.tables[name].drop("run_id", "source").rows(), key=str)
            for name in ("summary", "fibers", "candidates")}


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_durations_are_the_same_intervals_from_a_file_a_glob_and_every_frame(tmp_path: Path, unit: str) -> None:
    """DuckDB reads a Parquet duration (pandas timedelta, polars Duration, pa.duration) as a bare count of its
    unit: from a file, 1 s was the fiber '1' (and 90000 s beside 90 s in ms one fiber with 90 s in s), from the
    frame of the same data the interval '00:00:01'; a claim could compare seconds with the number 1. Now
    every form gives the frame's intervals, and the same tables."""
    per_second = {"s": 1, "ms": 1000, "us": 10**6, "ns": 10**9}[unit]
    seconds = [1, 1, 90000, 90000, -5, None]
    table = pa.table({"id": list("abcdef"), "x": pa.array([v if v is None else v * per_second for v in seconds],
                                                         pa.duration(unit)), "y": [1, 1, 0, 0, 1, 0]})
    results = {label: dcaudit.audit(form, evidence="x", claim="y = 1", id="id", report=False)  # type: ignore[arg-type]
               for label, form in _forms(tmp_path, table).items()}
    first = next(iter(results.values()))
    assert sorted(first.fibers["evidence_key"].to_list()) == ["-00:00:05", "00:00:01", "25:00:00"]
    for label, result in results.items():
        assert _audited(result) == _audited(first), label
    with pytest.raises(ClaimError, match="INTERVAL"):   # a duration is no number, in a file as in a frame
        dcaudit.audit(tmp_path / "one.parquet", evidence="y", claim="x > 1", id="id")


@pytest.mark.parametrize(("values", "reason"), [
    (pa.array([1000, 1500, 2000, 2000], pa.duration("ns")), "durations finer than a microsecond, which DuckDB's "
     "INTERVAL would round (1 ns and 500 ns would be one value); give them as numbers, e.g. nanoseconds "
     "(.dt.total_nanoseconds() in polars, .dt.value in pandas)"),
    (pa.array([1, 1, 10**13, 10**13], pa.duration("s")), "durations longer than DuckDB's INTERVAL holds (2^63 "
     "microseconds, about 292,000 years), which it cannot read; give them as numbers, e.g. seconds "
     "(.dt.total_seconds())"),
    (pa.array([1, 1, 2**62, 2**62], pa.timestamp("ms")), "times beyond what DuckDB's TIMESTAMP holds (290309 BC to "
     "294247 AD: microseconds in 64 bits), which it cannot read or compare as times; give them as numbers (e.g. "
     "milliseconds since 1970) or text"),
], ids=["ns durations finer than a microsecond", "s durations beyond INTERVAL", "ms timestamps beyond TIMESTAMP"])
def test_values_duckdb_cannot_hold_are_one_refusal_in_every_input_form(tmp_path: Path, values: pa.Array,
                                                                       reason: str) -> None:
    """Sub-microsecond durations were refused in a frame but silently counts from a file; durations beyond
    INTERVAL stopped in DuckDB's words ("Could not convert Interval to Microsecond"); millisecond timestamps
    beyond TIMESTAMP stopped a file's every query, even of other columns ("Could not convert Timestamp(MS) to
    Timestamp(US)"), and a frame's with a fatal DuckDB error that ended its database. Now one refusal, in one
    wording, when an audit reads the column — and an audit of other columns runs."""
    table = pa.table({"id": list("abcd"), "x": values, "e": [1, 1, 2, 2], "y": [1, 1, 0, 0]})
    for label, form in _forms(tmp_path, table).items():
        if label == "pandas DataFrame" and pa.types.is_timestamp(values.type):
            continue   # pandas cannot hold such times (out of bounds for datetime64[ms] in to_pandas)
        with pytest.raises(InputError) as err:
            dcaudit.audit(form, evidence="x", claim="y = 1", id="id", report=False)  # type: ignore[arg-type]
        found = str(err.value)
        if label.endswith("*.parquet") and pa.types.is_timestamp(values.type):   # from the footer of a file: named
            assert found.startswith(f"{tmp_path / 'parts' / 'p2.parquet'} holds it as timestamp[ms], its values "
                                    "reaching 4611686018427387904 milliseconds from 1970: "), found
            found = found[found.index("1970: ") + 6:]
        assert found == f"{reason} (file {label}, column 'x')", label
        other = dcaudit.audit(form, evidence="e", claim="y = 1", id="id", report=False)  # type: ignore[arg-type]
        assert other.summary["n_fibers"].to_list() == [2], label


def test_durations_inside_a_list_are_intervals_from_a_file_and_refused_from_a_glob(tmp_path: Path) -> None:
    """A list of durations was a list of bare counts from a file (and from a glob), of intervals from a frame.
    A file is now read through Arrow, as the frame; a glob, read by DuckDB alone, refuses the column by name."""
    table = pa.table({"id": list("abcd"), "x": pa.array([[1], [1], [2], [2]], pa.list_(pa.duration("s"))),
                      "y": [1, 1, 0, 0]})
    forms = _forms(tmp_path, table)
    glob = str(tmp_path / "parts" / "*.parquet")
    keys = {label: sorted(dcaudit.audit(form, evidence="x", claim="y = 1", id="id", report=False)  # type: ignore[arg-type]
                          .fibers["evidence_key"].to_list()) for label, form in forms.items() if label != glob}
    assert set(map(tuple, keys.values())) == {("['00:00:01']", "['00:00:02']")}, keys
    with pytest.raises(InputError, match=rf"^{tmp_path / 'parts' / 'p1.parquet'} holds it as list<element: "
                                         r"duration\[s\]>: durations inside a list, struct or map, which DuckDB "
                                         rf".*\(file {re.escape(glob)}, column 'x'\)$"):
        dcaudit.audit(glob, evidence="x", claim="y = 1", id="id")
    assert dcaudit.audit(glob, evidence="y", claim="y = 1", id="id").summary["n_fibers"].to_list() == [2]


def test_glob_files_whose_columns_differ_only_in_case_are_an_error(tmp_path: Path) -> None:
    pq.write_table(pa.table({"id": ["a", "b"], "e": [1, 2], "y": [1, 0]}), tmp_path / "1.parquet")
    pq.write_table(pa.table({"id": ["c", "d"], "E": [1, 2], "y": [1, 0]}), tmp_path / "2.parquet")
    with pytest.raises(InputError, match=r"'E' of .*2\.parquet and 'e' of .*1\.parquet differ only in case"):
        dcaudit.audit(tmp_path / "*.parquet", evidence="e", claim="y = 1", id="id")


def test_frames_arrow_cannot_take_name_the_column() -> None:
    import pandas as pd

    big = pd.DataFrame({"id": list("ab"), "e": [2**70, 1], "y": [1, 0]})
    with pytest.raises(InputError, match=r"\.astype\(str\).*column 'e'"):
        dcaudit.audit(big, evidence="e", claim="y = 1", id="id")
    wide = pl.DataFrame({"id": ["a", "b"], "big": pl.Series([1, 2], dtype=pl.Int128), "y": [1, 0]})
    with pytest.raises(InputError, match=r"Int128.*pl\.Int64.*column 'big'"):
        dcaudit.audit(wide, evidence="id", claim="y = 1", id="id")
    reader = pa.table({"e": [1, 2], "y": [1, 0]}).to_reader()
    dcaudit.audit(reader, evidence="e", claim="y = 1")
    with pytest.raises(InputError, match="no data rows .*yields its rows once"):
        dcaudit.audit(reader, evidence="e", claim="y = 1")


@pytest.mark.parametrize("rule", ["quantile:2", "width:1"])
def test_a_typed_column_without_values_under_a_binned_rule_excludes_every_candidate(rule: str, tmp_path: Path) -> None:
    """A numeric column whose values are all missing is still numbers: every candidate excluded as
    evidence_missing, from a frame and from Parquet alike (a CSV column without a value has no type: error)."""
    empty = pa.table({"e": pa.nulls(4, pa.float64()), "y": [1, 0, 1, 0]})
    pq.write_table(empty, tmp_path / "empty.parquet")
    for data in (empty, tmp_path / "empty.parquet", pl.from_arrow(empty)):
        result = dcaudit.audit(data, evidence="e", claim="y = 1", fiber_rule=rule)
        assert result.summary["n_candidates"].to_list() == [0] and result.summary["n_excluded"].to_list() == [4]
        assert result.excluded_by_reason()["excluded_reason"].to_list() == ["evidence_missing"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-128, 127), st.integers(-128, 127)), min_size=1, max_size=30),
       st.sampled_from(["a + b > 0", "a - b < 0", "a * b > 100", "-a > b"]))
def test_claim_arithmetic_reads_narrow_integers_as_their_values(pairs: list[tuple[int, int]], claim: str) -> None:
    a, b = [p[0] for p in pairs], [p[1] for p in pairs]
    expected = [eval(claim, {}, {"a": x, "b": y}) for x, y in pairs]  # noqa: S307 - four fixed expressions
    for kind in (pa.int8(), pa.int16(), pa.int64()):
        table = pa.table({"a": pa.array(a, kind), "b": pa.array(b, kind), "e": [0] * len(a)})
        result = dcaudit.audit(table, evidence="e", claim=claim)
        assert result.arrow("candidates").column("claim_value").to_pylist() == expected, kind


def test_an_order_claim_on_ordered_categories_follows_their_order_and_a_dropped_index_is_noted() -> None:
    """Compared as text, 'high' > 'low' was false: the claim was silently wrong, with only a note."""
    import pandas as pd
    import polars as pl

    from dcaudit.errors import ClaimError

    grade = pd.Categorical(["low", "high", "high", "mid"], categories=["low", "mid", "high"], ordered=True)
    frame = pd.DataFrame({"e": [1, 1, 2, 2], "grade": grade}, index=pd.Index(["m1", "m2", "m3", "m4"], name="mol"))
    ordered = dcaudit.audit(frame, evidence="e", claim="grade > 'low'")
    assert ordered.candidates["claim_value"].to_list() == [False, True, True, True]
    assert any("index 'mol' is not read" in n for n in ordered.notes)
    enum = pl.from_pandas(frame).with_columns(pl.col("grade").cast(pl.Enum(["low", "mid", "high"])))
    assert dcaudit.audit(enum, evidence="e", claim="'mid' <= grade").candidates["claim_value"].to_list() == \
        [False, True, True, True]
    assert dcaudit.audit(frame, evidence="e", claim="grade = 'high'").candidates["claim_value"].to_list() == \
        [False, True, True, False]
    with pytest.raises(ClaimError, match="'zzz' is not one of the categories of 'grade' \\(low, mid, high\\)"):
        dcaudit.audit(frame, evidence="e", claim="grade > 'zzz'")
    unordered = frame.assign(grade=frame.grade.cat.as_unordered())   # no order: text, as before
    assert dcaudit.audit(unordered, evidence="e", claim="grade > 'low'").candidates["claim_value"].to_list() == \
        [False, False, False, True]   # alphabetically only 'mid' > 'low'
    plain = dcaudit.audit(frame.reset_index(), evidence="e", claim="grade = 'low'", id="mol")
    assert not any("index" in n for n in plain.notes)


def test_excluded_reasons_with_equal_counts_come_in_one_order() -> None:
    import pandas as pd

    frame = pd.DataFrame({"e": [1, None, 2, 2, float("inf")] * 20, "y": [1, 0, None, 1, 0] * 20})
    orders = {tuple(dcaudit.audit(frame, evidence="e", claim="y = 1").excluded_by_reason()["excluded_reason"])
              for _ in range(6)}
    assert len(orders) == 1


@pytest.mark.parametrize("column", ["t", "t.x"])
def test_int96_timestamps_finer_than_a_microsecond_are_refused_not_truncated(tmp_path: Path, column: str) -> None:
    """INT96 timestamps (Spark's and Impala's legacy kind) hold nanoseconds; DuckDB reads them as microseconds,
    so 1 s + 1 ns, 1 s + 2 ns and 1 s + 500 ns were one fiber from a file or a glob, three from the frame of
    the same data. Now such a column is refused by name when an audit reads it; an audit of other columns
    runs; INT96 times of whole microseconds (what Spark writes) audit as from the frame."""
    import pyarrow.dataset as ds

    fine = pa.table({"id": list("abc"), column: pa.array([10**9 + 1, 10**9 + 2, 10**9 + 500], pa.timestamp("ns")),
                     "e": [1, 1, 2], "y": [1, 0, 1]})
    (tmp_path / "parts").mkdir()
    pq.write_table(fine, tmp_path / "fine.parquet", use_deprecated_int96_timestamps=True)
    pq.write_table(fine.slice(0, 1), tmp_path / "parts" / "p1.parquet", use_deprecated_int96_timestamps=True)
    pq.write_table(fine.slice(1), tmp_path / "parts" / "p2.parquet", use_deprecated_int96_timestamps=True)
    assert dcaudit.audit(fine, evidence=column, claim="y = 1", id="id").summary["n_fibers"].to_list() == [3]
    reason = ("INT96 timestamps (the legacy kind Spark and Impala write) finer than a microsecond, which DuckDB "
              "reads as microseconds (1 ns and 500 ns past a second would be one time); write them as Parquet "
              "timestamps (pyarrow's default) or give them as numbers, e.g. nanoseconds")
    glob = str(tmp_path / "parts" / "*.parquet")
    for form, prefix in ((tmp_path / "fine.parquet", ""), (glob, f"{tmp_path / 'parts' / 'p1.parquet'} holds it as ")):
        with pytest.raises(InputError) as err:
            dcaudit.audit(form, evidence=column, claim="y = 1", id="id")
        assert str(err.value) == f"{prefix}{reason} (file {form}, column {column!r})"
        assert dcaudit.audit(form, evidence="e", claim="y = 1", id="id").summary["n_fibers"].to_list() == [2]
    # a dataset of the file reads INT96 through Arrow, as nanoseconds: exact
    assert dcaudit.audit(ds.dataset(tmp_path / "fine.parquet"), evidence=column, claim="y = 1",
                         id="id").summary["n_fibers"].to_list() == [3]
    whole = fine.set_column(1, column, pa.array([10**9, 10**9 + 1000, 10**9 + 500_000], pa.timestamp("ns")))
    pq.write_table(whole, tmp_path / "whole.parquet", use_deprecated_int96_timestamps=True)
    keys = [sorted(dcaudit.audit(f, evidence=column, claim="y = 1", id="id").fibers["evidence_key"].to_list())
            for f in (whole, tmp_path / "whole.parquet")]
    assert keys[0] == keys[1] and len(keys[0]) == 3, keys


def test_a_duckdb_failure_while_reading_in_batches_is_raised_as_duckdbs_own() -> None:
    """pyarrow raises a failure met after the first batches of DuckDB's Arrow reader as an OSError carrying
    DuckDB's message and SQL; arrow_batches raises it as the DuckDB exception it is (the runner words those),
    and a reader left early is closed: the connection takes the next query."""
    import contextlib

    import duckdb

    from dcaudit.inputs import arrow_batches

    con = duckdb.connect()
    con.execute("SET preserve_insertion_order = true")
    failing = ("SELECT CASE WHEN i > 600000 THEN CAST('x' || i AS INTEGER) ELSE i END AS v "
               "FROM range(1000000) t(i)")
    seen = []
    with pytest.raises(duckdb.ConversionException, match="Could not convert string 'x600001'"):
        for batch in arrow_batches(con, failing, 1 << 18):
            seen.append(batch.num_rows)
    assert seen and sum(seen) <= 600001   # it failed on the way, after batches were read
    with contextlib.closing(arrow_batches(con, "SELECT * FROM range(1000000)", 1 << 18)) as batches:
        next(batches)
    assert con.execute("SELECT 1").fetchall() == [(1,)]
