"""Notebook fragments (reports.notebook.render_html from plain Arrow tables) and the comparison of two
runs (reports.compare, `dcaudit report RUN --compare RUN_B`), on small packages written here."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from dcaudit.cli import cli
from dcaudit.reports import depict
from dcaudit.reports.compare import render_comparison, write_comparison
from dcaudit.reports.notebook import render_html
from dcaudit.reports.package import write_package

HEAD = {"source": "toy", "claim": "y = 1", "evidence": "e1,e2,e3", "fiber_rule": "exact"}


def _tables(statuses: list[str], *, n_true: list[int] | None = None, certified: float = 0.1) -> dict[str, pa.Table]:
    n = [6, 4, 3, 1][: len(statuses)]
    n_true = n_true or [2, 1, 0, 1][: len(statuses)]
    keys = ["0,0,0", "1,0,0", "0,1,0", "1,1,1"][: len(statuses)]
    fibers = pa.table({**{k: [v] * len(n) for k, v in HEAD.items()}, "audit_id": ["a1"] * len(n),
                       "fiber_key": list(range(len(n))), "evidence_key": keys, "n": n, "n_true": n_true,
                       "status": statuses, "mixed_kind": ["label_noise" if i == 1 else "incomplete_evidence"
                                                          for i in range(len(n))]})
    ids, fk, cv, st = [], [], [], []
    for k, (size, t, s) in enumerate(zip(n, n_true, statuses, strict=True)):
        for j in range(size):
            ids.append(f"m{k}{j}")
            fk.append(k)
            cv.append(j < t)
            st.append(s)
    candidates = pa.table({**{k: [v] * len(ids) for k, v in HEAD.items()}, "audit_id": ["a1"] * len(ids),
                           "candidate_id": ids, "fiber_key": fk, "claim_value": cv, "status": st})
    summary = pa.table({**{k: [v] for k, v in HEAD.items()}, "audit_id": ["a1"], "min_support": [1],
                        "n_candidates": [sum(n)], "n_fibers": [len(n)],
                        "n_mixed_fibers": [statuses.count("ambiguous")], "certified_fraction": [certified],
                        "ambiguous_fraction": [1 - certified], "unsupported_fraction": [0.0]})
    completion = pa.table({"audit_id": ["a1"] * 3, "policy": ["response_rank"] * 3, "step": [0, 1, 2],
                           "seed": pa.nulls(3, pa.int64()), "certified_fraction": [0.1, 0.2, 0.3],
                           "certified_fraction_p10": [0.05, 0.1, 0.2], "certified_fraction_p90": [0.15, 0.3, 0.4]})
    return {"summary": summary, "fibers": fibers, "candidates": candidates, "completion": completion}


def test_notebook_fragment_has_summary_fibers_members_and_a_plot() -> None:
    smiles = {"m00": "CCO", "m01": "c1ccccc1O", "m10": "CC(=O)N"}
    html = render_html(_tables(["ambiguous", "ambiguous", "certified_false", "certified_true"]), title="toy <audit>",
                       notes=["a note"], smiles=smiles)
    assert html.startswith('<div class="dcaudit-view">') and html.endswith("</div>")
    assert "<script" not in html and "toy &lt;audit&gt;" in html and "a note" in html
    assert "Summary" in html and "Mixed fibers (all 2 fibers)" in html
    assert "all 0" in html and "e1 = 1, others 0" in html           # evidence by name
    assert "label_noise" in html                                   # the mixed-kind split where present
    assert all(f">m0{j}<" in html for j in range(6)) and ">m10<" in html and ">m20<" not in html
    assert 'data-chart="completion"' in html and re.search(r'id="c[0-9a-f]+-band-0"', html)
    if depict.rdkit_available():
        assert html.count("<li class=\"member cv1\"><svg") + html.count("<li class=\"member cv0\"><svg") == 3


def test_notebook_fragment_from_polars_frames() -> None:
    pl = pytest.importorskip("polars")
    tables = _tables(["ambiguous", "certified_false"])
    html = render_html({k: pl.from_arrow(v) for k, v in tables.items()}, title="polars")
    assert html == render_html(tables, title="polars")


def test_notebook_fragment_from_partial_tables() -> None:
    tables = _tables(["certified_false", "certified_true"])
    html = render_html({"summary": tables["summary"]}, title="only a summary")
    assert "Summary" in html and "mixed fibers" not in html
    html = render_html({"fibers": tables["fibers"]}, title="no mixed fibers")
    assert "No mixed fibers" in html and 'data-chart="fiber-sizes"' in html


def test_comparison_shows_what_moved(tmp_path: Path) -> None:
    a = write_package(tmp_path / "runs" / "ra", "ra", _tables(["ambiguous", "ambiguous", "certified_false"]),
                      {"spec": "toy"})
    b = write_package(tmp_path / "runs" / "rb", "rb", _tables(["ambiguous", "certified_false", "certified_false"],
                                                               n_true=[2, 0, 0], certified=0.4), {"spec": "toy"})
    html = render_comparison(a, b)
    assert "ra → rb" in html and "1 of 1 audit row moved" in html
    assert "1 fiber changed status" in html and "1,0,0" in html   # the fiber that became pure
    assert "30%" in html                                           # certified fraction 10% -> 40%
    assert re.search(r'data-chart="compare"', html)
    out = CliRunner().invoke(cli, ["report", str(a), "--compare", str(b)], env={"DCAUDIT_HOME": str(tmp_path)})
    assert out.exit_code == 0, out.output
    written = Path(out.output.strip())
    assert written == a / "compare-rb.html" and written.read_text() == html
    assert write_comparison(a, b, tmp_path / "x" / "c.html").read_text() == html


def test_comparison_refuses_a_damaged_package(tmp_path: Path) -> None:
    a = write_package(tmp_path / "ra", "ra", _tables(["ambiguous"]), {"spec": "toy"})
    b = write_package(tmp_path / "rb", "rb", _tables(["ambiguous"]), {"spec": "toy"})
    (b / "fibers.parquet").write_bytes(b"PAR1 broken")
    with pytest.raises(Exception, match="fibers.parquet"):
        render_comparison(a, b)


def test_report_explorer_shows_the_mixed_kind_split(tmp_path: Path) -> None:
    from dcaudit.reports.html import render_report

    package = write_package(tmp_path / "p", "p1", _tables(["ambiguous", "ambiguous", "certified_false"]),
                            {"spec": "toy"})
    html = render_report(package)
    data = __import__("json").loads(re.search(r'id="dc-explorer-data">(.*?)</script>', html, re.S).group(1))
    assert data["hasKind"] and data["kindValues"] == ["incomplete_evidence", "label_noise"]
    assert data["F"]["k"] == ["incomplete_evidence", "label_noise"]


def test_materials_members_show_their_reduced_formula(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    from dcaudit.reports.html import render_report

    tables = _tables(["ambiguous", "ambiguous"])
    ids = tables["candidates"].column("candidate_id").to_pylist()
    pq.write_table(pa.table({"mbid": ids, "composition": ["Fe2O3"] * len(ids),
                             "reduced_formula": [f"Fe{i}O" for i in range(len(ids))]}), tmp_path / "mp_gap.parquet")
    package = write_package(tmp_path / "p", "p1", tables, {"spec": "toy", "sources": [
        {"table": "mp_gap", "path": str(tmp_path / "mp_gap.parquet")}]})
    data = __import__("json").loads(re.search(r'id="dc-explorer-data">(.*?)</script>', render_report(package),
                                              re.S).group(1))
    assert data["kinds"] == ["formulas"]
    first = data["F"]["d"]["0"]
    assert [data["S"][t[0]] for t in first] == [f"Fe{i}O" for i in range(6)]     # joined on mbid, not position


def test_sensitivity_is_charted_against_the_resolution(tmp_path: Path) -> None:
    from dcaudit.reports.html import render_report

    rules = ["quantile:5", "quantile:10", "quantile:20", "knn:25", "knn:50"]
    rows = [{"source": "toy", "audit_id": "s1", "model": m, "fiber_rule": r, "rule_kind": r.split(":")[0],
             "n_candidates": 100, "certified_fraction": c, "ambiguous_fraction": 1 - c - 0.1,
             "unsupported_fraction": 0.1}
            for m, shift in (("m1", 0.0), ("m2", 0.1)) for r, c in zip(rules, (0.1, 0.2, 0.3, 0.2, 0.1), strict=True)
            for c in [c + shift]]
    package = write_package(tmp_path / "p", "p1", {"sensitivity": pa.Table.from_pylist(rows)}, {"spec": "toy"})
    html = render_report(package)
    assert html.count('data-chart="sensitivity"') == 2                 # one per kind of rule
    assert len(re.findall(r'id="c[0-9a-f]+-band-\d+"', html)) == 4      # certified and ambiguous, range over models
    assert "quantile bins (k)" in html and "neighbours (k)" in html


def test_costs_and_findings_get_sections(tmp_path: Path) -> None:
    from dcaudit.reports.html import render_report

    prices = [0.001, 0.01, 0.1]
    costs = pa.Table.from_pylist([
        {"audit_id": "a1", "policy": p, "price": x, "seed": None, "cost_per_candidate": c * x + 0.01,
         "cost_per_candidate_p10": c * x, "cost_per_candidate_p90": c * x + 0.02, "cheapest": p == "price_aware"}
        for p, c in (("certify_then_acquire", 1.0), ("price_aware", 0.1)) for x in prices])
    findings = pa.table({"source": ["toy"] * 3, "file": ["t.csv"] * 3, "row": [1, 2, 3],
                         "kind": ["invalid_smiles", "structure_duplicate", "invalid_smiles"],
                         "detail": ["x", "y", "z"], "candidate_id": ["m1", "m2", "m3"]})
    package = write_package(tmp_path / "p", "p1", {"costs": costs, "findings": findings}, {"spec": "toy"})
    html = render_report(package)
    assert "id='costs'" in html and html.count('data-chart="costs"') == 1
    assert len(re.findall(r'id="c[0-9a-f]+-series-\d+"', html)) == 2
    assert "id='findings'" in html and "invalid_smiles" in html
