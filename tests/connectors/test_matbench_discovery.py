"""Matbench Discovery: parsing the mirror's prediction files, bad prediction files, the clear stop without
the WBM summary, and the audit on a generated stand-in summary."""

from __future__ import annotations

import gzip
import re
import tomllib
from importlib import resources
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from dcaudit.config import Settings
from dcaudit.connectors import matbench_discovery as md
from dcaudit.connectors.base import FetchedFile, sha256_file
from dcaudit.errors import InputError, IntegrityError, MissingSourceError
from tests.conftest import MIRROR, mirror_path

# A handful of the mirror's files covering its quirks: an extra index column (alignn), NaN rows on the
# unfiltered id set (megnet), empty predictions (gnome's e_gnome_after_relax), a renamed column.
SAMPLE = ("alignn", "megnet", "gnome", "sevennet_l3i5")


def test_embedded_hashes_and_columns_are_the_manifests() -> None:
    text = mirror_path("matbench_discovery/MANIFEST.md").read_text()
    rows = re.findall(r"^\| (\S+) \| `(preds/[^`]+)` \|.*?\| `([0-9a-f]{64})` \| ([\d,]+) \| [^|]+\| `([^`]+)` \|",
                      text, re.M)
    listed = {k: (p, sha, col) for k, p, sha, _, col in rows}
    assert listed == md.MIRROR_PREDICTIONS


@pytest.mark.parametrize("key", SAMPLE)
def test_mirror_prediction_files_parse_by_column_name(key: str) -> None:
    rel, sha, col = md.MIRROR_PREDICTIONS[key]
    path = mirror_path(f"matbench_discovery/{rel}")
    assert sha256_file(path) == sha
    preds, findings = md.read_prediction_file(path, key, col)
    manifest = mirror_path("matbench_discovery/MANIFEST.md").read_text()
    row = re.search(rf"^\| {re.escape(key)} \|.*\| ([\d,]+) \| [^|]+\| `[^`]+` \| [^|]+\| (\d+) \|", manifest, re.M)
    assert row is not None
    n_rows, n_nan = int(row.group(1).replace(",", "")), int(row.group(2))
    assert preds.height == n_rows and preds["prediction"].null_count() == n_nan
    assert findings.filter(pl.col("issue") == "empty prediction").height == n_nan
    assert preds["usable"].all() and preds["material_id"].n_unique() == n_rows
    # the prediction really is a formation energy per atom (eV/atom), not an index or a total energy
    assert -3.0 < preds["prediction"].median() < 0.0


def test_prediction_column_is_chosen_by_name_never_by_position(tmp_path: Path) -> None:
    f = tmp_path / "p.csv"
    f.write_text("e_form_per_atom_mine,material_id,mine_energy\n-0.5,wbm-1-1,-10\n0.1,wbm-1-2,-3\n")
    preds, _ = md.read_prediction_file(f, "mine")
    assert preds["prediction"].to_list() == [-0.5, 0.1]
    f.write_text("material_id,e_form_per_atom_a,e_form_per_atom_b\nwbm-1-1,1,2\n")
    with pytest.raises(InputError, match="cannot tell the prediction column by name"):
        md.read_prediction_file(f, "two")
    f.write_text("material_id,energy\nwbm-1-1,1\n")
    with pytest.raises(InputError, match="cannot tell the prediction column"):
        md.read_prediction_file(f, "none")
    with pytest.raises(InputError, match="expected prediction column 'e_form_per_atom_x'"):
        md.read_prediction_file(f, "known", "e_form_per_atom_x")


def test_bad_prediction_rows_are_kept_and_reported(tmp_path: Path) -> None:
    f = tmp_path / "bad.csv"
    f.write_text("material_id,e_form_per_atom_m\n"
                 "wbm-1-1,-0.2\n"     # fine
                 "wbm-1-2,\n"         # missing value
                 "wbm-1-3,NaN\n"      # NaN
                 "wbm-1-4,low\n"      # text in a numeric column
                 "wbm-1-1,-0.3\n"     # duplicate id
                 "mp-1234,0.1\n"      # not a WBM id
                 "wbm-2-9,-7.5\n")    # extreme, kept and audited
    preds, findings = md.read_prediction_file(f, "m")
    assert preds.height == 7
    issues = dict(zip(findings["row"], findings["issue"], strict=True))
    assert issues == {2: "empty prediction", 3: "NaN prediction", 4: "non-numeric prediction",
                      5: "duplicate material_id", 6: "material_id is not wbm-<step>-<n>", 7: "|prediction| > 5 eV/atom"}
    assert preds["usable"].to_list() == [True, True, True, True, False, False, True]
    assert preds["prediction"].to_list()[:4] == [-0.2, None, None, None]


def test_unknown_model_is_named(settings: Settings) -> None:
    with pytest.raises(InputError, match=r"unknown Matbench Discovery model\(s\) \['chgnet'\].*chgnet_0\.3\.0"):
        md.prediction_sources(settings, ["chgnet"])


def test_missing_summary_stops_with_where_to_put_it(settings: Settings) -> None:
    with pytest.raises(MissingSourceError) as info:
        md.prepare(settings)
    msg = str(info.value)
    assert "2023-12-13-wbm-summary.csv.gz" in msg and "figshare.com/files/64706751" in msg
    assert f"{MIRROR}/matbench_discovery/wbm/2023-12-13-wbm-summary.csv.gz" in msg
    assert md.WBM_SUMMARY.md5 in msg


def test_missing_summary_cli_message_not_traceback(settings: Settings) -> None:
    from dcaudit.cli import cli

    result = CliRunner().invoke(cli, ["run", "matbench-discovery"])
    assert result.exit_code == 2
    # a source that is not available offline is reported as skipped (a batch goes on), with exit status 2
    assert result.output.startswith("skipped: matbench-discovery")
    assert "WBM summary" in result.output and "Traceback" not in result.output


def test_summary_with_the_wrong_md5_is_refused(tmp_path: Path) -> None:
    wbm = tmp_path / "mirror" / "matbench_discovery" / "wbm"
    wbm.mkdir(parents=True)
    (wbm / md.WBM_SUMMARY.name).write_bytes(b"material_id,e_above_hull_wbm\nwbm-1-1,0.1\n")
    s = Settings(home=tmp_path / "home", mirror=tmp_path / "mirror", memory_limit="2GB", threads=1, offline=True)
    with pytest.raises(IntegrityError, match="md5 .* expected 1555268d3aa59d20262cb9d01ce0994b"):
        md.fetch_summary(s)


def test_audit_runs_once_a_summary_is_present(settings: Settings, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A *generated* stand-in summary (the real one is not offline): the ids of the mirror's alignn file,
    hull distances drawn around alignn's prediction. It tests the plumbing, not the paper's numbers."""
    rel = md.MIRROR_PREDICTIONS["alignn"][0]
    alignn = pl.read_csv(mirror_path(f"matbench_discovery/{rel}"), columns=["material_id", "e_form_per_atom_alignn"])
    rng = np.random.default_rng(7)
    e_form = alignn["e_form_per_atom_alignn"].to_numpy() + rng.normal(0, 0.1, alignn.height)
    fake = pl.DataFrame({"material_id": alignn["material_id"], "e_form_per_atom_mp2020_corrected": e_form,
                         "e_above_hull_mp2020_corrected_ppd_mp": rng.normal(0.1, 0.1, alignn.height) + 0.05 * e_form,
                         "e_above_hull_wbm": rng.normal(0.1, 0.1, alignn.height)})
    path = tmp_path / md.WBM_SUMMARY.name
    with gzip.open(path, "wb") as fh:
        fake.write_csv(fh)
    monkeypatch.setattr(md, "fetch_summary", lambda s: FetchedFile(path, sha256_file(path), "generated", ""))
    raw = tomllib.loads(resources.files("dcaudit.pipelines").joinpath("matbench-discovery.toml").read_text())
    raw["source"]["models"] = ["megnet"]  # the file with the unfiltered id set
    raw["sensitivity"]["rules"] = ["knn:25"]
    from dcaudit.pipelines.runner import run_spec
    from dcaudit.spec import spec_from_dict

    result = run_spec(spec_from_dict(raw, origin="test"), settings)
    summary = pl.from_arrow(result.tables["summary"])
    main = summary.filter(pl.col("audit_id") == "eform-stable")
    assert main["model"].to_list() == ["megnet"]
    # megnet's 524 extra ids (the unfiltered WBM set) are outside the summary: reported, not audited
    assert (main["n_candidates"] == alignn.height).all() and (main["n_fibers"] == 20).all()
    findings = pl.read_parquet(settings.tables_dir / "matbench-discovery" / "matbench_discovery_findings.parquet")
    outside = findings.filter(pl.col("issue") == "id not in the WBM summary")
    assert outside.height == 524 and set(outside["model"]) == {"megnet"}
    # the same rows in the package's findings table (common schema)
    package = pl.from_arrow(result.tables["findings"])
    assert package.filter(pl.col("kind") == "id_not_in_wbm_summary").height == 524
    assert set(package["source"]) == {"matbench-discovery"}
    assert "sensitivity" in result.tables and "metrics" in result.tables


def _mirror_of_links(tmp_path: Path) -> Path:
    """The real mirror's matbench_discovery/ as links, one level deep per prediction folder."""
    real = mirror_path("matbench_discovery")
    root = tmp_path / "mirror" / "matbench_discovery"
    for entry in real.iterdir():
        if entry.name != "preds":
            (root / entry.name).parent.mkdir(parents=True, exist_ok=True)
            (root / entry.name).symlink_to(entry)
    for folder in (real / "preds").iterdir():
        (root / "preds" / folder.name).mkdir(parents=True)
        for entry in folder.iterdir():
            (root / "preds" / folder.name / entry.name).symlink_to(entry)
    return root


def test_a_prediction_file_that_is_a_directory_stops_the_run_not_drops_the_model(tmp_path: Path) -> None:
    """It read as "predictions not available" (a finding) and the model quietly left the audit."""
    root = _mirror_of_links(tmp_path)
    rel = md.MIRROR_PREDICTIONS["alignn"][0]
    (root / rel).unlink()
    (root / rel).mkdir()
    s = Settings(home=tmp_path / "home", mirror=root.parent, memory_limit="2GB", threads=1, offline=True)
    with pytest.raises(InputError, match=f"{re.escape(str(root / rel))} is a directory, not a file"):
        md.load_predictions(s, ["alignn"])


def test_a_model_list_that_is_a_directory_is_named_not_read_as_absent(tmp_path: Path) -> None:
    """Without the list, the figshare-only models were silently not known at all."""
    root = _mirror_of_links(tmp_path)
    listed = root / "model_metrics_from_yaml.csv"
    listed.unlink()
    listed.mkdir()
    s = Settings(home=tmp_path / "home", mirror=root.parent, memory_limit="2GB", threads=1, offline=True)
    with pytest.raises(InputError, match=f"the mirror's model list {re.escape(str(listed))} is a directory"):
        md.prediction_sources(s)
