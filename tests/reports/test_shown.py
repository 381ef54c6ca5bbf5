"""What a view says it shows: counts and captions exact ("all 1 row", "first 20 of 4391 rows", "no rows"),
cut values marked and whole in reach, console tables never cutting a number or reading user text as markup,
and `dcaudit report SPEC` never passing an earlier run off as the latest."""

from __future__ import annotations

import io
import re
from html import unescape
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner
from rich.console import Console

from dcaudit.cli import cli
from dcaudit.reports import console as views
from dcaudit.reports.html import Package, _section_completion, _section_fibers, html_table
from dcaudit.reports.notebook import render_html
from dcaudit.reports.numbers import count, shown_of


def test_counts_and_shown_say_exactly_how_many() -> None:
    assert [count(n, "row") for n in (0, 1, 2)] == ["0 rows", "1 row", "2 rows"]
    assert shown_of(1, 1) == "all 1 row" and shown_of(3, 3) == "all 3 rows"
    assert shown_of(20, 4391) == "first 20 of 4391 rows"
    assert shown_of(0, 1) == "none of the 1 row" and shown_of(0, 0) == "no rows"
    assert shown_of(5, 3) == "all 3 rows"          # a miscount never reads as more than there are
    assert shown_of(5, 12, "fiber", order="largest") == "largest 5 of 12 fibers"


def _note(html: str) -> str:
    found = re.findall(r'<p class="note">(.*?)</p>', html)
    return found[0] if found else ""


def test_a_table_says_how_many_of_its_rows_it_shows() -> None:
    one = pa.table({"x": [1]})
    assert _note(html_table(one)) == ""                                   # all of it: nothing to say
    assert _note(html_table(one, max_rows=0)) == "none of the 1 row shown; the Parquet file has all."
    assert _note(html_table(pa.table({"x": [1, 2, 3, 4, 5]}), max_rows=2)) == \
        "first 2 of 5 rows shown; the Parquet file has all."
    assert _note(html_table(one, total=4391, rest="manifest.json has all")) == \
        "first 1 of 4391 rows shown; manifest.json has all."
    assert _note(html_table(pa.table({"x": pa.array([], pa.int64())}))) == "no rows"
    assert "first 0" not in html_table(one, total=0) and _note(html_table(one, total=0)) == ""


def test_the_summary_chart_of_an_audit_without_candidates_says_so(tmp_path: Path) -> None:
    f = tmp_path / "zero.csv"
    f.write_text("id,e,y\na,,1\nb,,0\n")                   # every candidate lacks its evidence
    out = tmp_path / "pkg"
    result = CliRunner().invoke(cli, ["audit", str(f), "--id", "id", "--evidence", "e", "--claim", "y = 1",
                                      "--out", str(out)], env={"DCAUDIT_HOME": str(tmp_path / "h"),
                                                               "DCAUDIT_OFFLINE": "1"})
    assert result.exit_code == 0, result.output
    page = (out / "report.html").read_text()
    assert "first 0 of" not in page
    assert "Candidates by status, per audit (the audit row has no candidates)" in page


def test_a_cut_cell_is_marked_and_keeps_its_whole_value() -> None:
    long = "InChIKey " + "A" * 120 + " end"
    huge = "x" * 5000
    html = html_table(pa.table({"note": [long, "short", huge], "ids": [[f"id{i}" for i in range(40)], [], []]}))
    cells = re.findall(r'<span class="cut" title="([^"]*)">([^<]*)</span>', html)
    assert len(cells) == 3
    (title, text), (list_title, list_text), (huge_title, _) = cells[0], cells[1], cells[2]
    assert unescape(title) == long and text.endswith("…") and len(unescape(text)) == 80
    assert " end" not in text                                        # the visible part is cut ...
    assert unescape(list_title) == ", ".join(f"id{i}" for i in range(40)) and list_text.endswith("…")
    assert huge_title.startswith("x" * 4000) and "5000 characters in all" in huge_title  # ... and says so
    assert "<td>short</td>" in html                                  # a short value stays as it is


def _fibers(n: int) -> pa.Table:
    return pa.table({"audit_id": ["a1"] * n, "fiber_key": list(range(n)), "evidence_key": [str(i) for i in range(n)],
                     "n": [100 - i for i in range(n)], "n_true": [1] * n,
                     "status": ["ambiguous"] * 3 + ["certified_false"] * (n - 3)})


def test_the_largest_fibers_chart_says_how_many_it_draws() -> None:
    def title(n: int) -> str:
        pkg = Package(None, tables={"fibers": _fibers(n)})
        try:
            return re.search(r'aria-label="(Largest fibers[^"]*)"', _section_fibers(pkg)).group(1)
        finally:
            pkg.con.close()

    assert title(15) == "Largest fibers — a1, mixed first (first 12 of 15 fibers)"
    assert title(5) == "Largest fibers — a1, mixed first (all 5 fibers)"


def test_a_section_with_more_groups_than_charts_says_which_it_draws() -> None:
    audits = [f"a{i}" for i in range(8)]
    completion = pa.table({"audit_id": [a for a in audits for _ in range(2)], "policy": ["random"] * 16,
                           "step": [0, 1] * 8, "seed": pa.nulls(16, pa.int64()),
                           "certified_fraction": [0.1, 0.2] * 8})
    pkg = Package(None, tables={"completion": completion})
    try:
        html = _section_completion(pkg)
    finally:
        pkg.con.close()
    assert "Charts for the first 6 of 8 audits; the table below has all of them." in html
    assert html.count("<svg") == 6 and "a7" in html                    # a7: in the table, not charted


def test_the_notebook_counts_the_members_it_does_not_show() -> None:
    n = 20
    head = {"audit_id": ["a1"] * n, "fiber_key": [0] * n}
    tables = {"fibers": pa.table({"audit_id": ["a1"], "fiber_key": [0], "evidence_key": ["1"], "n": [n],
                                  "n_true": [5], "status": ["ambiguous"]}),
              "candidates": pa.table({**head, "candidate_id": [f"m{i}" for i in range(n)],
                                      "claim_value": [i < 5 for i in range(n)], "status": ["ambiguous"] * n})}
    html = render_html(tables, title="t")
    assert "Mixed fibers (all 1 fiber)" in html
    assert "8 more members in the candidates table" in html          # 20 members, 12 shown


@pytest.fixture
def narrow(monkeypatch: pytest.MonkeyPatch) -> io.StringIO:
    out = io.StringIO()
    monkeypatch.setattr(views, "console", Console(file=out, width=60, color_system=None))
    return out


SUMMARY = pa.table({"audit_id": ["robust[all]", "x[bold]y"], "fiber_rule": ["exact"] * 2, "min_support": [1, 50],
                    "n_candidates": [4391, 4391], "n_fibers": [43, 43], "n_mixed_fibers": [14, 14],
                    "certified_true": [8, 0], "certified_false": [86, 0], "ambiguous": [4297, 4297],
                    "unsupported": [0, 94], "ambiguous_fraction": [0.97859, 0.97859],
                    "benchmark_only_risk": [0.01, 0.01]})


def test_a_narrow_console_prints_every_value_whole(narrow: io.StringIO) -> None:
    views.print_summary(SUMMARY, "t[all]")
    text = " ".join(narrow.getvalue().split())                       # lines wrap; values stay whole
    assert "…" not in text
    for value in ("robust[all]", "x[bold]y", "t[all]", "4391", "4297", "97.86", "unsupported 94", "min n 50"):
        assert value in text, value


def test_a_wide_console_keeps_the_table_and_the_users_brackets(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(views, "console", Console(file=out, width=200, color_system=None))
    views.print_summary(SUMMARY, "t")
    views.print_notes(["column [red] kept"])
    text = out.getvalue()
    assert "┃ audit" in text and "│ robust[all]" in text and "│ x[bold]y" in text and "column [red] kept" in text


def test_the_replay_table_says_how_many_rows_it_shows() -> None:
    n = 45
    replay = pa.table({"audit_id": ["a"] * n, "model": [f"m{i}" for i in range(n)], "policy": ["fiber_majority"] * n,
                       "seed": pa.nulls(n, pa.int64()), "certified_fraction": [0.5] * n})
    table = views.replay_table(replay)
    assert table.row_count == 40 and str(table.caption).startswith("first 40 of 45 policy rows shown")
    assert "false (all) [p10, p90]" in [str(c.header) for c in table.columns]   # not read as markup


# ---------------------------------------------------------------- which run `dcaudit report SPEC` means

def _two_runs(tmp_path: Path) -> tuple[dict[str, str], str, list[str]]:
    """Two succeeded runs of one spec (an audited file); returns env, spec name, run ids oldest first."""
    env = {"DCAUDIT_HOME": str(tmp_path / "home"), "DCAUDIT_OFFLINE": "1"}
    f = tmp_path / "bench.csv"
    f.write_text("id,e,y\na,1,1\nb,1,0\nc,2,1\n")
    for _ in range(2):
        result = CliRunner().invoke(cli, ["audit", str(f), "--id", "id", "--evidence", "e", "--claim", "y = 1",
                                          "--no-report"], env=env)
        assert result.exit_code == 0, result.output
    rows = CliRunner().invoke(cli, ["query", "select run_id, spec from runs order by started_at", "--quiet"],
                              env=env).output.split()
    return env, rows[1], rows[0::2]


@pytest.mark.parametrize("damage", ["delete", "truncate"])
def test_report_of_a_spec_refuses_a_damaged_latest_run(tmp_path: Path, damage: str) -> None:
    env, spec, (older, latest) = _two_runs(tmp_path)
    runs = Path(env["DCAUDIT_HOME"]) / "runs"
    fibers = runs / latest / "fibers.parquet"
    if damage == "delete":
        fibers.unlink()
    else:
        fibers.write_bytes(fibers.read_bytes()[:100])
    result = CliRunner().invoke(cli, ["report", spec], env=env)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    error = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(error) == 1 and latest in error[0] and "fibers.parquet" in error[0] and "damaged" in error[0]
    assert f"previous run with a package is {older}" in error[0]       # how to report the older run
    assert not (runs / older / "report.html").exists()                # the older run was not rendered
    compare = CliRunner().invoke(cli, ["report", older, "--compare", spec], env=env)
    assert compare.exit_code == 2 and "--compare" in compare.output and latest in compare.output
    assert CliRunner().invoke(cli, ["report", older], env=env).exit_code == 0   # by its id it renders


def test_report_of_a_spec_refuses_a_failed_latest_run(tmp_path: Path) -> None:
    env, spec, (_, latest) = _two_runs(tmp_path)
    (tmp_path / "bench.csv").write_text("id,e,y\na,1,1\na,1,0\n")      # the next run fails: a repeated id
    assert CliRunner().invoke(cli, ["audit", str(tmp_path / "bench.csv"), "--id", "id", "--evidence", "e",
                                    "--claim", "y = 1", "--no-report"], env=env).exit_code == 2
    result = CliRunner().invoke(cli, ["report", spec], env=env)
    assert result.exit_code == 2 and "failed: InputError: 1 repeated candidate id" in result.output, result.output
    assert f"previous run with a package is {latest}" in result.output  # the previous run with a package


def test_report_of_a_directory_without_a_manifest_says_so(tmp_path: Path) -> None:
    folder = tmp_path / "not-a-package"
    folder.mkdir()
    result = CliRunner().invoke(cli, ["report", str(folder)], env={"DCAUDIT_HOME": str(tmp_path / "h")})
    assert result.exit_code == 2 and "no manifest.json" in result.output and str(folder) in result.output


def test_the_explorer_counts_its_fibers_in_words() -> None:
    from dcaudit.reports import explorer

    one = _fibers(3).slice(0, 1)
    pkg = Package(None, tables={"fibers": one})
    try:
        section = explorer.section(explorer.explorer_data(pkg))
    finally:
        pkg.con.close()
    assert "Every mixed fiber (1 fiber)" in section
    assert "' mixed fiber)'" in section                    # the audit menu says 1 mixed fiber, not 1 mixed fibers


def test_the_comparison_chart_says_how_many_audit_rows_it_draws(tmp_path: Path) -> None:
    from dcaudit.reports.compare import render_comparison
    from dcaudit.reports.package import write_package

    def package(name: str, certified: float) -> Path:
        n = 35
        summary = pa.table({"audit_id": [f"a{i:02d}" for i in range(n)], "n_candidates": [10] * n,
                            "certified_fraction": [certified + i / 1000 for i in range(n)],
                            "ambiguous_fraction": [0.5] * n, "unsupported_fraction": [0.0] * n,
                            "n_fibers": [3] * n, "n_mixed_fibers": [1] * n})
        return write_package(tmp_path / name, name, {"summary": summary}, {"spec": "toy"})

    html = render_comparison(package("ra", 0.1), package("rb", 0.2))
    assert "35 of 35 audit rows moved" in html
    title = re.search(r'aria-label="(Certified fraction: run A to run B[^"]*)"', html).group(1)
    assert title.endswith("— 30 of 35 audit rows (the largest changes with a fraction in both runs)")


def test_export_and_load_of_a_spec_refuse_a_damaged_latest_run_too(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """One resolution (Catalog.package_dir) for report, export and load: both used to fall back silently."""
    import dcaudit
    from dcaudit.config import load_settings
    from dcaudit.errors import DcauditError

    env, spec, (older, latest) = _two_runs(tmp_path)
    (Path(env["DCAUDIT_HOME"]) / "runs" / latest / "fibers.parquet").unlink()
    exported = CliRunner().invoke(cli, ["export", spec, "--out", str(tmp_path / "x")], env=env)
    assert exported.exit_code == 2 and latest in exported.output and older in exported.output, exported.output
    assert not (tmp_path / "x" / "summary.json").exists()
    monkeypatch.setenv("DCAUDIT_HOME", env["DCAUDIT_HOME"])
    settings = load_settings()
    with pytest.raises(DcauditError, match=f"latest run of spec .*{latest}.*damaged.*{older}"):
        dcaudit.load(spec, settings=settings)
    assert dcaudit.load(older, settings=settings).run_id == older
