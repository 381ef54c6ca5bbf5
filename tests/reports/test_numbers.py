"""How views print numbers, and what they call moved: never a share shown as all or nothing when it is not,
an audit whose counts changed never 'unchanged', names with commas never split."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

import dcaudit
from dcaudit.cli import cli
from dcaudit.evidence_map import join_names
from dcaudit.reports.numbers import number, percent_number
from dcaudit.spec import split_names


@given(st.floats(min_value=0, max_value=1, allow_nan=False), st.sampled_from([None, 1, 2]))
def test_a_share_reads_all_or_nothing_only_when_it_is(fraction: float, decimals: int | None) -> None:
    text = float(percent_number(fraction, decimals=decimals))
    assert (text == 0) == (fraction == 0) and (text == 100) == (fraction == 1)
    assert abs(text - 100 * fraction) <= max(1e-9, 0.51 * 10 ** -(decimals or 0) * (1 if decimals else 100))


def test_whole_numbers_print_whole() -> None:
    assert (number(20000.0), number(0.123456), number(-3.0)) == ("20000", "0.1235", "-3")


@given(st.lists(st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1),
                min_size=1, max_size=5))
def test_evidence_labels_read_back_as_the_names(names: list[str]) -> None:
    assert split_names(join_names(names)) == names


def _invoke(tmp_path: Path, *args: str):  # noqa: ANN202
    return CliRunner().invoke(cli, list(args), env={"DCAUDIT_HOME": str(tmp_path / "home"), "DCAUDIT_OFFLINE": "1"})


def test_moved_counts_every_change_of_an_audit(tmp_path: Path) -> None:
    """Nothing -> 50 candidates, and certified false -> certified true at the same fractions, are moves."""
    spec = tmp_path / "s.toml"
    spec.write_text('name = "s"\n[source]\npath = "t.csv"\nid = "id"\n\n[[audits]]\nid = "a"\nclaim = "y = 1"\n'
                    'evidence = ["e"]\nmin_support = 1\n')
    runs = []
    for e, ys in ((None, [0] * 20), (1, [0] * 50), (1, [1] * 50)):   # all excluded; pure false; pure true
        pl.DataFrame({"id": [f"c{i}" for i in range(len(ys))], "e": [e] * len(ys), "y": ys},
                     schema={"id": pl.String, "e": pl.Int64, "y": pl.Int64}).write_csv(tmp_path / "t.csv")
        result = _invoke(tmp_path, "run", str(spec), "--json", "--no-report")
        assert result.exit_code == 0, result.output
        runs.append(json.loads(result.output)["package_dir"])
        if len(runs) > 1:
            diff = _invoke(tmp_path, "runs", "--diff", "s")
            assert "1 audit row(s) moved, 0 new, 0 gone, 0 unchanged" in diff.output, diff.output
    compare = _invoke(tmp_path, "report", runs[1], "--compare", runs[2], "--out", str(tmp_path / "c.html"))
    assert compare.exit_code == 0 and "1 of 1 audit row moved" in (tmp_path / "c.html").read_text()


def test_names_with_commas_survive_the_package_and_the_export(tmp_path: Path) -> None:
    frame = pl.DataFrame({"b,c": [0, 0, 1, 1], "d": [0, 1, 0, 1], "y": [0, 0, 1, 1]})
    out = tmp_path / "pkg it's"                    # a path with a quote exports too
    result = dcaudit.audit(frame, evidence=["b,c", "d"], claim="y = 1", out=out)
    assert split_names(result.summary["evidence"][0]) == ["b,c", "d"]
    exported = _invoke(tmp_path, "export", str(out), "--out", str(tmp_path / "x"))
    assert exported.exit_code == 0, exported.output
    assert json.loads((tmp_path / "x" / "summary.json").read_text())["evidence"] == ["b,c", "d"]
