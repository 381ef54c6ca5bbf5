"""report.html: the SVG helpers, the report of a real Tox21 run (written by the runner, re-rendered by
`dcaudit report`), graceful degradation for partial packages, and rendering in headless Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from dcaudit.cli import cli
from dcaudit.config import Settings
from dcaudit.reports import svg
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


# ---------------------------------------------------------------- svg helpers

@given(st.floats(-1e6, 1e6), st.floats(0, 1e6))
def test_nice_ticks_cover_the_range_with_round_steps(lo: float, span: float) -> None:
    ticks = svg.nice_ticks(lo, lo + span)
    tol = 1e-6 * max(1.0, abs(lo), span)   # float noise, far below a pixel
    assert ticks[0] <= lo + tol and ticks[-1] >= lo + span - tol
    assert 2 <= len(ticks) <= 13 and ticks == sorted(ticks)


def test_line_chart_draws_a_path_per_series_and_a_band() -> None:
    out = svg.line_chart([svg.Series("a", (0, 1, 2), (0.1, 0.2, 0.4), (0.0, 0.1, 0.3), (0.2, 0.3, 0.5)),
                          svg.Series("b<script>", (0, 1, 2), (0.05, 0.05, 0.1))], title="t", x_label="x",
                         y_label="y")
    paths = re.findall(r'<path class="series" d="M([^"]+)"', out)
    assert len(paths) == 2 and all(p.count("L") == 2 for p in paths)
    assert out.count('class="band"') == 1 and "<script>" not in out and "b&lt;script&gt;" in out


def test_stacked_bars_are_proportional() -> None:
    out = svg.stacked_bars([svg.StackedBar("x", (("certified_true", 0.25), ("ambiguous", 0.75)))], title="t",
                           width=610)
    widths = [float(w) for w in re.findall(r'class="bar"[^>]*width="([\d.]+)"', out)]
    assert len(widths) == 2 and widths[1] == pytest.approx(3 * widths[0]) and sum(widths) == pytest.approx(610 - svg.LABEL_W - 10)


def test_interval_chart_places_whiskers_around_the_dot() -> None:
    out = svg.interval_chart([svg.Interval("p", 0.5, 0.2, 0.8)], title="t", x_label="v")
    cx = float(re.search(r'class="dot" cx="([\d.]+)"', out).group(1))
    x1, x2 = (float(v) for v in re.search(r'class="whisker" x1="([\d.]+)" x2="([\d.]+)"', out).groups())
    assert x1 < cx < x2 and cx - x1 == pytest.approx(x2 - cx, abs=0.2)


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
    # offline: no scripts, stylesheets, images or fonts from anywhere; URLs appear only as text (the
    # source's download address in the provenance) and as the SVG namespace, never as something to load
    assert not re.search(r"<script|<link|<img|<iframe|<object|<embed|url\(|@import", html, re.I)
    assert not re.search(r"""(src|href|xlink:href)\s*=\s*["']?\s*(https?:|//|file:)""", html, re.I)
    assert "https://deepchemdata.s3-us-west-1.amazonaws.com/datasets/tox21.csv.gz" in html   # provenance
    manifest = json.loads((Path(run["package_dir"]) / "manifest.json").read_text())
    assert manifest["inputs"]["tox21.csv.gz"] in html and manifest["code_hash"] in html
    assert "97.9%" in html and "4297" in html           # the paper's ambiguous fraction, from the summary
    assert "3678" in html                                # the largest mixed fiber (all-zero NR pattern)
    assert html.count("<svg") >= 5


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
    assert html.count('class="dot"') >= 3                # one metric in [0, 1] plus two models


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
    series = re.findall(r'<path class="series" d="M([^"]+)"', dom)
    assert len(series) >= 6 and all(len(d.split("L")) >= 2 for d in series)      # completion curves
    bars = [float(w) for w in re.findall(r'<rect class="bar"[^>]*width="([\d.]+)"', dom)]
    assert len(bars) >= 20 and sum(w > 0 for w in bars) == len(bars)          # summary and fiber bars
    assert len(re.findall(r'<line class="whisker"', dom)) >= 4                # replay over seeds

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
