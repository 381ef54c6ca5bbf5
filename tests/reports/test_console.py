"""Console output of any table (``dcaudit query`` and friends): values a user pipes on are exact and
readable back, in each of the three forms (table, ``--json``, ``--quiet``)."""

from __future__ import annotations

import json
from decimal import Decimal

import duckdb
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dcaudit.reports.console import _json_text, _text, print_rows


@settings(max_examples=200, deadline=None)
@given(months=st.integers(-(2**31) + 1, 2**31 - 1), days=st.integers(-(2**31) + 1, 2**31 - 1),
       micros=st.integers(-(2**63 // 1000), 2**63 // 1000))
def test_an_interval_reads_as_duckdb_writes_it(months: int, days: int, micros: int) -> None:
    # (Arrow holds an interval's time in int64 nanoseconds: DuckDB's microseconds beyond ±2^63 / 1000, some
    # 106,000 days, do not fit, and its export wraps them; such a value never reaches this formatter intact)
    con = duckdb.connect()
    sql = (f"SELECT to_months({months}) + to_days({days}) + to_microseconds({micros}) AS i, "
           f"CAST(to_months({months}) + to_days({days}) + to_microseconds({micros}) AS VARCHAR) AS text")
    table = con.sql(sql).to_arrow_table()
    assert _text(table["i"][0].as_py()) == table["text"][0].as_py()


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=40))
def test_a_blob_reads_as_duckdb_writes_it(blob: bytes) -> None:
    con = duckdb.connect()
    text = con.execute("SELECT CAST(?::BLOB AS VARCHAR)", [blob]).fetchall()[0][0]
    assert _text(blob) == text
    assert con.execute("SELECT CAST(?::VARCHAR AS BLOB)", [text]).fetchall()[0][0] == blob  # pasted back


def test_decimals_are_json_numbers_with_their_exact_digits() -> None:
    rows = duckdb.sql("SELECT 0.1 AS d, -12.50::DECIMAL(5,2) AS n, 12345678901234567890123::HUGEINT AS h, "
                      "[0.1, 0.2] AS l, {'x': 1.25} AS s, 'dcaudit-decimal-0' AS t").to_arrow_table().to_pylist()
    assert isinstance(rows[0]["d"], Decimal)  # so the placeholders are exercised
    text = _json_text(rows)
    assert '"d": 0.1' in text and '"n": -12.50' in text and '"h": 12345678901234567890123' in text
    back = json.loads(text, parse_float=Decimal)
    assert back == [{"d": Decimal("0.1"), "n": Decimal("-12.50"), "h": 12345678901234567890123,
                     "l": [Decimal("0.1"), Decimal("0.2")], "s": {"x": Decimal("1.25")},
                     "t": "dcaudit-decimal-0"}]


def test_every_output_form_writes_blobs_and_intervals_as_text(capsys: pytest.CaptureFixture[str]) -> None:
    table = duckdb.sql("SELECT 'a\\x00'::BLOB AS b, INTERVAL 1 MONTH + INTERVAL 90 MINUTE AS i").to_arrow_table()
    assert table["i"].type == pa.month_day_nano_interval()
    print_rows(table, as_json=True)
    assert json.loads(capsys.readouterr().out) == [{"b": "a\\x00", "i": "1 month 01:30:00"}]
    print_rows(table, tsv=True)
    assert capsys.readouterr().out == "a\\\\x00\t1 month 01:30:00\n"  # the backslash escaped, as TSV does
    print_rows(table)
    shown = capsys.readouterr().out
    assert "1 month 01:30:00" in shown and "MonthDayNano" not in shown and "b'" not in shown


def test_a_table_prints_brackets_in_values_and_names_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    print_rows(duckdb.sql("SELECT 'robust[all]' AS \"audit [id]\", '[bold]x[/bold]' AS t").to_arrow_table())
    shown = capsys.readouterr().out
    assert "robust[all]" in shown and "audit [id]" in shown and "[bold]x[/bold]" in shown  # rich read markup
