"""report.html: the SVG helpers, the report of a real Tox21 run (written by the runner, re-rendered by
`dcaudit report`), graceful degradation for partial packages, and rendering in headless Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from dcaudit.cli import cli
from dcaudit.config import Settings
from dcaudit.reports import charts, depict, explorer
from dcaudit.reports.html import render_report, write_report
from dcaudit.storage import write_package
from tests.conftest import MIRROR

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run")
SPEC = """
name = "tox21-report"
[source]
connector = "tox21"
id = "mol_id"
[[audits]]
id = "nr7-p53"
claim = '"SR-p53" = 1'
evidence = ["NR-AR", "NR-AR-LBD", "NR-AhR", "NR-Aromatase", "NR-ER", "NR-ER-LBD", "NR-PPAR-gamma"]
[[audits]]
id = "nr7-p53-support50"
claim = '"SR-p53" = 1'
evidence = ["NR-AR", "NR-AR-LBD", "NR-AhR", "NR-Aromatase", "NR-ER", "NR-ER-LBD", "NR-PPAR-gamma"]
min_support = 50
[completion]
audit = "nr7-p53-support50"
probes = ["SR-ARE", "SR-ATAD5", "SR-HSE", "SR-MMP"]
seeds = 4
random_draws = 4
min_support = 50
[replay]
audits = ["nr7-p53"]
seeds = 4
min_support = 50
"""


# ---------------------------------------------------------------- charts (matplotlib SVG)

def test_line_chart_draws_a_series_per_line_and_a_band() -> None:
    out = charts.line_chart([charts.Series("a", (0, 1, 2), (0.1, 0.2, 0.4), (0.0, 0.1, 0.3), (0.2, 0.3, 0.5)),
                             charts.Series("b<script>", (0, 1, 2), (0.05, 0.05, 0.1))], title="t", x_label="x",
                            y_label="y")
    assert len(re.findall(r'id="c[0-9a-f]+-series-\d+"', out)) == 2
    assert len(re.findall(r'id="c[0-9a-f]+-band-\d+"', out)) == 1
    assert "<script>" not in out and "b&lt;script&gt;" in out
    assert out == charts.line_chart([charts.Series("a", (0, 1, 2), (0.1, 0.2, 0.4), (0.0, 0.1, 0.3), (0.2, 0.3, 0.5)),
                                     charts.Series("b<script>", (0, 1, 2), (0.05, 0.05, 0.1))], title="t",
                                    x_label="x", y_label="y")          # deterministic: re-renders are identical


def test_charts_are_self_contained_svg_with_ids_of_their_own() -> None:
    a = charts.stacked_bars([charts.StackedBar("x", (("certified_true", 0.25), ("ambiguous", 0.75)))], title="t")
    b = charts.stacked_bars([charts.StackedBar("y", (("certified_true", 0.5), ("ambiguous", 0.5)))], title="t")
    assert len(re.findall(r'id="c[0-9a-f]+-bar-0-\d"', a)) == 2
    ids_a = set(re.findall(r'id="([^"]+)"', a))
    assert ids_a and not ids_a & set(re.findall(r'id="([^"]+)"', b))   # two charts in one page never clash
    for out in (a, b, charts.interval_chart([charts.Interval("p", 0.5, 0.2, 0.8)], title="t", x_label="v"),
                charts.fiber_sizes({"ambiguous": [3678, 203, 5], "certified_false": [1, 2, 22]}, title="s")):
        assert out.startswith('<figure class="chart"') and "<?xml" not in out and "<metadata" not in out
        # drawn once, cropped to the tight box by the viewBox: its size is the size the page gives the chart
        size = re.search(r'<svg [^>]*width="([\d.]+)pt" height="([\d.]+)pt" viewBox="([-\d. ]+)"', out)
        assert size and [float(v) for v in size.group(3).split()[2:]] == [float(size.group(1)), float(size.group(2))]
        assert not re.search(r"""(href|src)\s*=\s*["']?(https?:|//)""", out)
        assert all(ref.startswith("#") for ref in re.findall(r"url\(([^)]*)\)", out))
    assert "no data" in charts.line_chart([], title="t", x_label="x", y_label="y")


# ---------------------------------------------------------------- explorer pieces

def test_evidence_reads_by_column_name() -> None:
    cols = ["NR-AR", "NR-AhR", "NR-ER"]
    assert explorer.evidence_text(cols, "0,1,0", "exact", None, None) == "NR-AhR = 1, others 0"
    assert explorer.evidence_text(cols, "0,0,0", "exact", None, None) == "all 0"
    assert explorer.evidence_text(["predicted", "clean_correct"], "3,true", "exact", None, None) == \
        "predicted = 3, clean_correct = true"
    assert explorer.evidence_text(["e_form"], "4", "quantile:20", -1.25, -0.5) == "e_form in [-1.25, -0.5] (bin 4)"
    # missing = "as-value": NaN and ±inf are fibers of their own, named as the value rather than a bin
    assert explorer.evidence_text(["x"], "nan", "quantile:2", float("nan"), float("nan")) == "x = nan"
    assert explorer.evidence_text(["x"], "-inf", "width:0.5", float("-inf"), float("-inf")) == "x = -inf"
    assert explorer.evidence_text(cols, "x,y", "exact", None, None) == "x,y"   # does not split: shown as it is


@given(st.lists(st.integers(1, 5000), min_size=1, max_size=60), st.integers(1, 20000))
def test_member_caps_stay_within_the_budget(sizes: list[int], budget: int) -> None:
    caps = explorer.member_caps(sizes, budget, page=24)
    assert all(1 <= c <= n for c, n in zip(caps, sizes, strict=True))
    if sum(sizes) <= budget:
        assert caps == sizes
    elif budget >= len(sizes):
        assert sum(caps) <= budget
    else:
        assert caps == [1] * len(sizes)        # every fiber keeps one member even past the budget


def test_depictions_and_thumbnails() -> None:
    pytest.importorskip("rdkit")
    svg_text = depict.depict_smiles("CCOc1ccc2nc(S(N)(=O)=O)sc2c1")
    assert svg_text.startswith("<svg") and svg_text.count("<path") >= 2 and len(svg_text) < 8000
    assert depict.depict_smiles("not a smiles") is None and depict.depict_smiles(None) is None
    thumb = depict.thumbnail([0.0, 1.0, 0.5, 0.25])
    assert thumb == {"w": 2, "h": 2, "px": "00ff8040"}
    assert depict.thumbnail([1, 2, 3]) is None       # not square and no shape given


# ---------------------------------------------------------------- reports of real runs

@pytest.fixture(scope="module")
def run(tox21_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One Tox21 run (fiber audits, 4-seed replay and completion) in a private workspace."""
    from dcaudit.connectors import get_connector

    get_connector("tox21").prepare(tox21_settings)
    home = tmp_path_factory.mktemp("report-home")
    shutil.copytree(tox21_settings.tables_dir, home / "tables")
    spec = home / "tox21-report.toml"
    spec.write_text(SPEC)
    env = {"DCAUDIT_HOME": str(home), "DCAUDIT_MIRROR": str(MIRROR), "DCAUDIT_OFFLINE": "1"}
    result = CliRunner().invoke(cli, ["run", str(spec), "--json"], env=env)
    assert result.exit_code == 0, result.output
    return {"env": env, **json.loads(result.output)}


def test_every_run_gets_a_self_contained_report(run: dict) -> None:
    report = Path(run["package_dir"]) / "report.html"
    html = report.read_text()
    for section in ("summary", "fibers", "candidates", "completion", "replay", "provenance"):
        assert f"id='{section}'" in html
    # offline: nothing loaded from anywhere (inline scripts and in-document references only); URLs appear
    # only as text (the source's download address in the provenance) and as the SVG namespace
    assert not re.search(r"<script[^>]*\ssrc|<link|<img|<iframe|<object|<embed|@import", html, re.I)
    assert all(ref.startswith("#") for ref in re.findall(r"url\(([^)]*)\)", html))
    assert not re.search(r"""(src|href|xlink:href)\s*=\s*["']?\s*(https?:|//|file:)""", html, re.I)
    assert not re.search(r"fetch\(|XMLHttpRequest|import\(", html)
    assert "https://deepchemdata.s3-us-west-1.amazonaws.com/datasets/tox21.csv.gz" in html   # provenance
    manifest = json.loads((Path(run["package_dir"]) / "manifest.json").read_text())
    assert manifest["inputs"]["tox21.csv.gz"] in html and manifest["code_hash"] in html
    assert "97.9%" in html and "4297" in html           # the paper's ambiguous fraction, from the summary
    assert "3678" in html                                # the largest mixed fiber (all-zero NR pattern)
    assert html.count("<svg") >= 5
    assert len(html) < 5_000_000


def _explorer(html: str) -> dict:
    text = re.search(r'<script type="application/json" id="dc-explorer-data">(.*?)</script>', html, re.S).group(1)
    return json.loads(text.replace("<\\/", "</"))


def _members(data: dict, i: int) -> list[str]:
    m = data["F"]["m"][i]
    return m if data["sep"] is None else (m.split(data["sep"]) if m else [])


def test_the_explorer_holds_every_mixed_fiber_and_member(run: dict) -> None:
    html = (Path(run["package_dir"]) / "report.html").read_text()
    data = _explorer(html)
    assert data["nf"] == 14 and data["F"]["n"][0] == 3678 and sum(data["F"]["n"]) == 4297
    members = [_members(data, i) for i in range(data["nf"])]
    assert [len(m) for m in members] == data["F"]["n"] == data["F"]["l"]      # every member listed
    assert len({m for ms in members for m in ms}) == 4297
    assert [c.count("1") for c in data["F"]["c"]] == data["F"]["t"]          # claim values
    assert all(c == "".join(sorted(c, reverse=True)) for c in data["F"]["c"])  # claim-true first
    assert data["S"][data["F"]["e"][0]] == "all 0"
    assert "NR-ER = 1, others 0" in {data["S"][e] for e in data["F"]["e"]}
    if depict.rdkit_available():
        assert data["kinds"] == ["molecules"]
        first_pages = sum(min(n, data["page"]) for n in data["F"]["n"])
        tiles = [t for member_tiles in data["F"]["d"].values() for t in member_tiles]
        assert len(tiles) == first_pages
        pictured = [x[0] for t in tiles for x in t if isinstance(x, list)]
        assert len(pictured) > 0.9 * first_pages        # a depiction for (almost) every first-page member
        assert all(data["pics"][k].startswith("<svg") for k in pictured)


def test_report_command_re_renders_by_run_id_spec_or_directory(run: dict, tmp_path: Path) -> None:
    report = Path(run["package_dir"]) / "report.html"
    original = report.read_text()
    report.unlink()
    for target in (run["run_id"], "tox21-report", run["package_dir"]):
        result = CliRunner().invoke(cli, ["report", target], env=run["env"])
        assert result.exit_code == 0, result.output
        assert result.output.strip() == str(report) and report.read_text() == original
    out = tmp_path / "copy.html"
    assert CliRunner().invoke(cli, ["report", run["run_id"], "--out", str(out)], env=run["env"]).exit_code == 0
    assert out.read_text() == original


def test_partial_packages_render_what_they_have(tmp_path: Path) -> None:
    metrics = pa.table({"source": ["sim"] * 2, "experiment": ["conformal"] * 2, "metric": ["coverage", "width"],
                        "value": [0.95, 3.2], "ci_low": [0.94, 3.0], "ci_high": [0.96, 3.4]})
    choice = pa.table({"source": ["sim"] * 2, "model": ["m1", "m2"], "benchmark_metric": [0.1, 0.2],
                       "certified_fraction": [0.06, 1.0], "rank_by_benchmark": [1, 2],
                       "rank_by_certification": [2, 1]})
    package = write_package(tmp_path / "pkg", "r1", {"metrics": metrics, "choice": choice}, {"spec": "sim"})
    pa.parquet.write_table(pa.table({"x": [1, 2]}), package / "extra_findings.parquet")  # a table of its own
    html = render_report(package)
    assert "id='metrics'" in html and "id='choice'" in html and "id='extra_findings'" in html
    assert "id='summary'" not in html and "id='fibers'" not in html
    assert len(re.findall(r'id="c[0-9a-f]+-dot-\d+"', html)) >= 3    # one metric in [0, 1] plus two models


def test_damaged_package_is_refused_with_the_file_named(tmp_path: Path) -> None:
    package = write_package(tmp_path / "pkg", "r1", {"metrics": pa.table({"metric": ["a"], "value": [0.5]})},
                            {"spec": "sim"})
    (package / "metrics.parquet").write_bytes(b"PAR1 not really")
    result = CliRunner().invoke(cli, ["report", str(package)], env={"DCAUDIT_HOME": str(tmp_path / "h")})
    assert result.exit_code == 2 and "metrics.parquet" in result.output and "damaged" in result.output
    with pytest.raises(Exception, match="metrics.parquet"):
        write_report(package)
    assert not (package / "report.html").exists()


# ---------------------------------------------------------------- headless Chromium

def _chromium(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    if CHROMIUM is None:
        if os.environ.get("DCAUDIT_REQUIRE_CHROMIUM"):
            pytest.fail("chromium is not installed (.ci/run installs it with apt-get)")
        pytest.skip("chromium is not installed (apt-get install chromium); .ci/run requires it")
    return subprocess.run([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}", *args],
                          capture_output=True, text=True, timeout=120)


def test_chromium_draws_the_figures(run: dict, tmp_path: Path) -> None:
    from PIL import Image

    url = (Path(run["package_dir"]) / "report.html").as_uri()
    dom = _chromium(["--dump-dom", url], tmp_path).stdout
    assert dom.count("<svg") >= 5
    assert len(set(re.findall(r'id="(c[0-9a-f]+-series-\d+)"', dom))) >= 6              # completion curves
    assert len(re.findall(r'id="c[0-9a-f]+-band-\d+"', dom)) >= 1                        # p10–p90 band
    assert len(re.findall(r'id="c[0-9a-f]+-bar-\d+-\d+"', dom)) >= 20                   # summary, fibers
    assert len(re.findall(r'id="c[0-9a-f]+-whisker-\d+"', dom)) >= 4                     # replay over seeds
    assert 'data-chart="replay-cost"' in dom and 'data-chart="fiber-sizes"' in dom
    # the explorer drew its first page: 14 fibers in the list, the largest one open with its members
    assert len(re.findall(r'<tr data-fx="\d+"', dom)) == 14
    assert len(re.findall(r'<li class="member cv[01-]"', dom)) == 24

    png = tmp_path / "report.png"
    _chromium(["--window-size=1200,2400", f"--screenshot={png}", url], tmp_path)
    image = Image.open(png).convert("RGB")
    assert image.size == (1200, 2400)
    colours = image.getcolors(maxcolors=1 << 20)
    non_white = sum(n for n, c in colours if c != (255, 255, 255))
    assert non_white > 0.02 * 1200 * 2400 and len(colours) > 50               # drawn, not blank
    # the status colours of the charts are on screen (ambiguous orange, certified blue)
    present = {c for _, c in colours}
    assert (0xE6, 0x9F, 0x00) in present and (0x00, 0x72, 0xB2) in present


def test_chromium_reaches_every_mixed_fiber_and_member(run: dict, tmp_path: Path) -> None:
    """#explorer-all lists every fiber with all its members; the default view pages through them."""
    from PIL import Image

    report = Path(run["package_dir"]) / "report.html"
    dom = _chromium(["--dump-dom", report.as_uri() + "#explorer-all"], tmp_path).stdout
    fibers = re.findall(r'<section class="fiber" data-fx="(\d+)"', dom)
    assert sorted(map(int, fibers)) == list(range(14))
    members = re.findall(r'<li class="member cv([01-])" data-id="([^"]+)"', dom)
    assert len(members) == 4297 and len({m for _, m in members}) == 4297
    assert sum(cv == "1" for cv, _ in members) == 19 + 4 + 4 + 3 + 1 + 1 + 1 + 1 + 3 + 2 + 1 + 2 + 1 + 1
    if depict.rdkit_available():   # depictions on each fiber's first page
        assert dom.count('<div class="pic"><svg') >= 200
    # the explorer alone, one fiber open, as a person sees it
    png = tmp_path / "explorer.png"
    _chromium(["--window-size=1200,1400", f"--screenshot={png}", report.as_uri() + "?view=explorer"], tmp_path)
    image = Image.open(png).convert("RGB")
    colours = image.getcolors(maxcolors=1 << 20)
    assert sum(n for n, c in colours if c != (255, 255, 255)) > 0.02 * 1200 * 1400
    present = {c for _, c in colours}
    assert (0xD5, 0x5E, 0x00) in present            # the claim-true members' border
    if depict.rdkit_available():
        assert any(r > 200 and g < 60 and b < 60 for r, g, b in present)   # oxygen red in the depictions


# ---------------------------------------------------------------- a small vision package (thumbnails)

def _vision_package(tmp_path: Path) -> tuple[Path, dict]:
    """Two fibers of one model × split, predictions under clean and two corruptions, 4×4 pixel images."""
    import pyarrow.parquet as pq

    ids = [str(i) for i in range(10)]
    robust = [True, False, True, False, False, True, True, True, False, True]
    fibers = pa.table({"source": ["vision-digits"] * 2, "audit_id": ["robust[all]"] * 2, "claim": ["robust = true"] * 2,
                       "evidence": ["predicted,clean_correct,confidence_decile"] * 2, "fiber_rule": ["exact"] * 2,
                       "model": ["knn"] * 2, "split": pa.array([3, 3], pa.int32()), "fiber_key": [0, 1],
                       "evidence_key": ["6,true,1", "7,true,2"], "n": [5, 5], "n_true": [2, 4],
                       "status": ["ambiguous"] * 2})
    candidates = pa.table({"source": ["vision-digits"] * 10, "audit_id": ["robust[all]"] * 10,
                           "claim": ["robust = true"] * 10, "evidence": ["predicted,clean_correct,confidence_decile"] * 10,
                           "fiber_rule": ["exact"] * 10, "model": ["knn"] * 10, "split": pa.array([3] * 10, pa.int32()),
                           "candidate_id": ids, "fiber_key": [0] * 5 + [1] * 5, "claim_value": robust,
                           "status": ["ambiguous"] * 10})
    preds = {"split": [], "model": [], "image_id": [], "condition": [], "predicted": [], "label": []}
    pixels = {"image_id": [], "condition": [], "pixels": [], "height": [], "width": []}
    for i, r in zip(ids, robust, strict=True):
        for c in ("clean", "gaussian_noise", "shift"):
            for k, v in (("split", 3), ("model", "knn"), ("image_id", i), ("condition", c),
                         ("predicted", "6" if r or c == "clean" else "1"), ("label", "6")):
                preds[k].append(v)
            pixels["image_id"].append(i)
            pixels["condition"].append(c)
            pixels["pixels"].append([0, 255, 255, 0] * 4 if c == "clean" else [128] * 16)
            pixels["height"].append(4)
            pixels["width"].append(4)
    pq.write_table(pa.table(preds), tmp_path / "digits.parquet")
    pq.write_table(pa.table(pixels), tmp_path / "digits-pixels.parquet")
    manifest = {"spec": "vision-mini", "sources": [{"table": "digits", "path": str(tmp_path / "digits.parquet")}]}
    package = write_package(tmp_path / "pkg", "v1", {"fibers": fibers, "candidates": candidates}, manifest)
    return package, {"table": "digits-pixels", "path": str(tmp_path / "digits-pixels.parquet")}


def test_vision_members_get_predictions_and_thumbnails(tmp_path: Path) -> None:
    package, pixels = _vision_package(tmp_path)
    plain = _explorer(render_report(package))            # predictions only: the manifest has no pixel table
    tiles = plain["F"]["d"]["0"][0]
    assert [plain["S"][t] for t in tiles] == ["label 6", "clean: 6", "g.noise: 6", "shift: 6"]
    data = _explorer(render_report(package, extra_sources=[pixels]))
    assert data["kinds"] == ["images"] and len(data["pics"]) == 30
    wrong = data["F"]["d"]["0"][2]                   # a claim-false member: its wrong conditions come right after clean
    assert [data["S"][t[1]] for t in wrong[1:]] == ["clean: 6", "g.noise: 1", "shift: 1"]
    assert data["S"][wrong[0]] == "label 6"
    assert data["pics"][wrong[1][0]] == {"w": 4, "h": 4, "px": "00ffff00" * 4}


def test_chromium_draws_the_thumbnails(tmp_path: Path) -> None:
    package, pixels = _vision_package(tmp_path)
    report = write_report(package, extra_sources=[pixels])
    dom = _chromium(["--dump-dom", report.as_uri() + "#explorer-all"], tmp_path).stdout
    assert dom.count('<canvas class="thumb"') == 30 and len(re.findall(r'<li class="member', dom)) == 10


def test_budgets_cap_members_and_pictures_and_say_so(tmp_path: Path) -> None:
    rng = __import__("random").Random(1)
    n = [400, 300] + [3] * 50
    fibers = pa.table({"audit_id": ["a"] * len(n), "claim": ["y = 1"] * len(n), "evidence": ["e"] * len(n),
                       "fiber_rule": ["quantile:52"] * len(n), "fiber_key": list(range(len(n))),
                       "evidence_key": [str(i) for i in range(len(n))], "evidence_lo": [float(i) for i in range(len(n))],
                       "evidence_hi": [i + 0.5 for i in range(len(n))], "n": n, "n_true": [1] * len(n),
                       "status": ["ambiguous"] * len(n)})
    keys = [k for k, size in enumerate(n) for _ in range(size)]
    claim = [j == 0 for k, size in enumerate(n) for j in range(size)]
    candidates = pa.table({"audit_id": ["a"] * len(keys), "claim": ["y = 1"] * len(keys), "evidence": ["e"] * len(keys),
                           "fiber_rule": ["quantile:52"] * len(keys), "candidate_id": [f"c{i:05d}" for i in range(len(keys))],
                           "fiber_key": keys, "claim_value": claim, "status": ["ambiguous"] * len(keys)})
    package = write_package(tmp_path / "pkg", "b1", {"fibers": fibers, "candidates": candidates}, {"spec": "big"})
    smiles_table = tmp_path / "smiles.parquet"
    pa.parquet.write_table(pa.table({"candidate_id": [f"c{i:05d}" for i in range(len(keys))],
                                     "smiles": [rng.choice(["CCO", "c1ccccc1O", "CC(=O)N"]) for _ in keys]}),
                           smiles_table)
    html = render_report(package, member_budget=4000, picture_budget=2_000,
                         extra_sources=[{"table": "big", "path": str(smiles_table)}])
    data = _explorer(html)
    listed = data["F"]["l"]
    assert data["nf"] == 52 and sum(listed) * 8 <= 4000 and all(n_ >= 1 for n_ in listed)
    assert listed[0] == listed[1] == 24                      # the largest fibers keep a full first page
    assert any("members are listed" in note for note in data["notes"])
    assert data["S"][data["F"]["e"][0]] == "e in [0, 0.5] (bin 0)"
    if depict.rdkit_available():
        assert sum(len(v) for v in data["pics"]) <= 2_000 + 8000
        assert any("picture budget" in note for note in data["notes"])


def test_depictions_drawn_by_a_worker_give_the_same_report(run: dict, monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:
    """The molecules are drawn by a worker process while the charts render; the page is byte for byte the
    one drawn in this process alone, and the one a failing worker leaves to this process."""
    pytest.importorskip("rdkit")
    package = Path(run["package_dir"])
    started = []
    original = depict.ScriptWorker

    def spy(module: str, items: list):  # noqa: ANN202 - records the worker's share
        started.append(len(items))
        return original(module, items)

    monkeypatch.setattr(depict, "ScriptWorker", spy)
    with_worker = render_report(package)
    assert started and started[0] >= depict.WORKER_MIN
    monkeypatch.setattr(depict, "WORKER_MIN", 10**9)
    alone = render_report(package)
    monkeypatch.setattr(depict, "WORKER_MIN", 1)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python"))
    failed = render_report(package)
    assert with_worker == alone == failed
    assert "<svg" in json.dumps(_explorer(with_worker)["pics"])  # molecules were drawn


# ---------------------------------------------------------------------------------------------------
# The user's text in reports and comparisons: never mathtext, never broken JSON, never two fibers alike.

def _cli_audit(tmp_path: Path, name: str, text: str, *extra: str) -> Path:
    f = tmp_path / f"{name}.csv"
    f.write_text(text)
    out = tmp_path / f"pkg-{name}"
    env = {"DCAUDIT_HOME": str(tmp_path / "home"), "DCAUDIT_OFFLINE": "1"}
    result = CliRunner().invoke(cli, ["audit", str(f), "--id", "id", "--evidence", "e", "--claim", "y = 1",
                                      "--out", str(out), *extra], env=env)
    assert result.exit_code == 0, result.output
    return out


def test_user_text_with_dollars_and_html_comments_renders(tmp_path: Path) -> None:
    dollars = _cli_audit(tmp_path, "dollar", "id,e,y\n1,$x^$,1\n2,$x^$,0\n3,b,1\n4,b,0\n")
    assert "$x^$" in (dollars / "report.html").read_text()  # the label as written, not mathtext (or an error)
    comment = _cli_audit(tmp_path, "comment", "id,e,y\n<!--a,1,1\nb,1,0\nc,2,1\n")
    page = (comment / "report.html").read_text()
    data = re.search(r'<script type="application/json"[^>]*>(.*?)</script>', page, re.S)
    assert data is not None and "<!--" not in data.group(1)
    assert "<!--a" in json.dumps(json.loads(data.group(1)), ensure_ascii=False)  # still JSON, the id intact


def test_an_audit_without_candidates_shows_no_percentages(tmp_path: Path) -> None:
    page = (_cli_audit(tmp_path, "zero", "id,e,y\na,,1\nb,,0\n") / "report.html").read_text()
    assert "<b>—</b>certified" in page and "<b>0%</b>" not in page


def test_evidence_keys_never_read_alike_and_a_run_compared_with_itself_moves_nothing(tmp_path: Path) -> None:
    f = tmp_path / "comma.csv"
    f.write_text('id,a,b,y\n1,"x,y",p,1\n2,"x,y",p,0\n3,x,"y,p",0\n4,x,"y,p",0\n5,NA,q,1\n6,,q,1\n')
    import dcaudit

    fibers = dcaudit.audit(f, evidence=["a", "b"], claim="y = 1", id="id", missing="as-value").fibers
    keys = fibers["evidence_key"].to_list()
    assert len(set(keys)) == len(keys) == 4 and {'"x,y",p', 'x,"y,p"', '"NA",q', "NA,q"} == set(keys)
    env = {"DCAUDIT_HOME": str(tmp_path / "home"), "DCAUDIT_OFFLINE": "1"}
    pkg = tmp_path / "pkg"
    assert CliRunner().invoke(cli, ["audit", str(f), "--id", "id", "--evidence", "a,b", "--claim", "y = 1",
                                    "--out", str(pkg), "--no-report"], env=env).exit_code == 0
    result = CliRunner().invoke(cli, ["report", str(pkg), "--compare", str(pkg), "--out", str(tmp_path / "c.html")],
                                env=env)
    assert result.exit_code == 0, result.output
    assert "<p>0 fibers changed status" in (tmp_path / "c.html").read_text()


def test_fibers_of_different_rules_are_not_compared_as_the_same(tmp_path: Path) -> None:
    rows = "".join(f"c{i},{i / 100},{int(i >= 50)}\n" for i in range(100))
    a = _cli_audit(tmp_path, "q4", f"id,e,y\n{rows}", "--fiber-rule", "quantile:4", "--no-report")
    b = _cli_audit(tmp_path, "q3", f"id,e,y\n{rows}", "--fiber-rule", "quantile:3", "--no-report")
    env = {"DCAUDIT_HOME": str(tmp_path / "home"), "DCAUDIT_OFFLINE": "1"}
    out = tmp_path / "cmp.html"
    assert CliRunner().invoke(cli, ["report", str(a), "--compare", str(b), "--out", str(out)], env=env).exit_code == 0
    page = out.read_text()
    assert "certified_false → ambiguous" not in page and "fiber_rule" in page


def test_a_query_cannot_write_through_explain_analyze(tmp_path: Path) -> None:
    pkg = _cli_audit(tmp_path, "x", "id,e,y\na,1,1\nb,1,0\n", "--no-report")
    before = (pkg / "summary.parquet").read_bytes()
    env = {"DCAUDIT_HOME": str(tmp_path / "home"), "DCAUDIT_OFFLINE": "1"}
    target = tmp_path / "home" / "written.parquet"
    result = CliRunner().invoke(cli, ["query", f"EXPLAIN ANALYZE COPY (SELECT 1 AS x) TO '{target}' (FORMAT parquet)"],
                                env=env)
    assert result.exit_code == 2 and "query refused" in result.output, result.output
    assert not target.exists() and (pkg / "summary.parquet").read_bytes() == before
