from __future__ import annotations

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dcaudit.claims import parse_claim, tokenize
from dcaudit.errors import ClaimError

COLS = ["SR-p53", "gap", "ehull", "robust", "name"]


@pytest.mark.parametrize(
    "text, sql",
    [
        ('"SR-p53" = 1', '("SR-p53" = 1)'),
        ("gap > 1.0", '("gap" > 1.0)'),
        ("ehull <= 0.1 and not robust", '(("ehull" <= 0.1) AND (NOT "robust"))'),
        ("robust = true", '("robust" = TRUE)'),
        ("gap * 2 - 1 >= -0.5 or name != 'x''y'", '((("gap" * 2) - 1) >= (-0.5)) OR ("name" <> \'x\'\'y\')'),
    ],
)
def test_claims_render_from_the_parsed_tree(text: str, sql: str) -> None:
    claim = parse_claim(text, COLS)
    assert claim.sql.strip("()") == sql.strip("()")


def test_unknown_column_lists_the_available_columns() -> None:
    with pytest.raises(ClaimError) as err:
        parse_claim("bandgap > 1", COLS)
    assert "'bandgap'" in str(err.value) and "available columns: SR-p53, gap" in str(err.value)


def test_unquoted_hyphen_name_points_at_the_quoted_column() -> None:
    with pytest.raises(ClaimError, match='"SR-p53"'):
        parse_claim("SR-p53 = 1", COLS)


@pytest.mark.parametrize(
    "text",
    ["1=1; DROP TABLE summary", "gap > 1; DROP TABLE summary", "gap > (SELECT 1)", "gap > 1 -- comment",
     "read_csv('x') = 1", "gap in (1, 2)", "", "gap >", "'a' || 'b' = 'ab'", "gap + 1", "1"],
)
def test_claims_carrying_sql_or_malformed_are_refused(text: str) -> None:
    with pytest.raises(ClaimError):
        parse_claim(text, COLS)


def test_claim_sql_runs_in_duckdb() -> None:
    con = duckdb.connect()
    con.execute('CREATE TABLE t AS SELECT 1 AS "SR-p53", 2.5 AS gap')
    claim = parse_claim('"SR-p53" = 1 and gap > 1.0', ["SR-p53", "gap"])
    assert con.sql(f"SELECT {claim.sql} FROM t").fetchall() == [(True,)]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(list("ab \"'=<>!;()-+*/,.01x") + [" gap ", " and ", " or ", " not ", "DROP"]),
                max_size=20).map("".join))
def test_fuzzed_claims_either_fail_cleanly_or_only_reference_known_columns(text: str) -> None:
    try:
        claim = parse_claim(text, COLS)
    except ClaimError:
        return
    # Whatever parsed was re-rendered from the tree: no statement separators or comments reach DuckDB.
    assert ";" not in claim.sql.replace("';'", "")
    assert "--" not in claim.sql or "'" in claim.sql
    assert set(claim.columns) <= set(COLS)
    tokenize(text)  # and tokenizing is total on what parsed
