"""Spin-defect connector on small workbooks the test writes (the Zenodo files are not in the mirror)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from dcaudit.config import Settings, load_settings
from dcaudit.connectors import get_connector, spin_defects
from dcaudit.errors import InputError, MissingSourceError

openpyxl = pytest.importorskip("openpyxl")

MATERIALS = [("MC2D_UUID", "Compound", "T2"),
             ("h1", "MoS2", 2.0), ("h2", "WS2", 0.5), ("h3", "CeO", 3.0), ("h3", "CeO", 3.5), ("h4", "BN", 0.1)]
HETERO = [("Compound", "Host_2D_MC2D_UUID", "Substrate", "T2"),
          ("MoS2", "h1", "CaO", 1.5), ("MoS2", "h1", "CeO2", 0.7),      # h1: mixed -> ambiguous
          ("WS2", "h2", "CaO", 0.2), ("WS2", "h2", "MgO", "n/a"),      # h2: nonviable (n/a excluded)
          ("CeO", "h3", "CaO", 2.0), ("CeO", "h3", "CaO", 2.2),         # h3: viable, one duplicate pair
          (None, None, None, None),                                     # a blank line is not data
          ("X", "h9", "CaO", 1.1),                                       # host not in the materials sheet
          ("WS2", "h2", "Si", None)]                                    # empty T2


def _book(path: Path, rows: list[tuple], sheet: str = "Sheet1", extra_sheet: bool = False) -> Path:
    wb = openpyxl.Workbook()
    ws = wb.active
    if extra_sheet:  # a notes sheet first: the connector must find the sheet with the columns
        ws.title = "README"
        ws.append(["About this dataset"])
        ws = wb.create_sheet(sheet)
    else:
        ws.title = sheet
    for r in rows:
        ws.append(list(r))
    path.parent.mkdir(parents=True, exist_ok=True)
    wb.save(path)
    return path


def _settings(home: Path, mirror: Path | None) -> Settings:
    base = load_settings()
    return Settings(home=home, mirror=mirror, memory_limit=base.memory_limit, threads=base.threads, offline=True)


@pytest.fixture()
def mirror(tmp_path: Path) -> Path:
    root = tmp_path / "mirror"
    _book(root / "spin_defects" / spin_defects.MATERIALS_FILE, MATERIALS, extra_sheet=True)
    _book(root / "spin_defects" / spin_defects.HETEROSTRUCTURES_FILE, HETERO, sheet="hetero")
    return root


def test_registered_and_follows_the_contract() -> None:
    c = get_connector("spin-defects")
    assert c is spin_defects.CONNECTOR and c.name == "spin-defects"
    assert [s.name for s in c.sources] == ["Data_2D-Materials.xlsx", "Data_Heterostructures.xlsx"]
    assert all(s.url.startswith("https://zenodo.org/records/16996230/files/") and s.url.endswith("?download=1")
               and s.sha256 is None and "Toriyama" in s.citation for s in c.sources)


def test_workbooks_become_tables_and_findings(tmp_path: Path, mirror: Path) -> None:
    prepared = spin_defects.prepare(_settings(tmp_path / "home", mirror))
    hetero = pl.read_parquet(prepared.tables["heterostructures"])
    assert hetero.height == 8  # every data row kept, the blank line skipped
    assert hetero["candidate_id"].n_unique() == 8
    h1 = hetero.filter(pl.col("host_id") == "h1")
    assert h1["t2_ms"].to_list() == [1.5, 0.7] and h1["host_t2_ms"].to_list() == [2.0, 2.0]
    assert hetero.filter(pl.col("host_id") == "h9")["host_t2_ms"].to_list() == [None]
    hosts = pl.read_parquet(prepared.tables["hosts"])
    assert hosts.height == 5 and hosts["row"].to_list() == [2, 3, 4, 5, 6]
    found = pl.read_parquet(prepared.findings)
    assert found.columns == ["source", "file", "row", "column", "kind", "detail", "candidate_id"]
    kinds = {(k, c) for k, c in found.select("kind", "candidate_id").iter_rows()}
    assert kinds == {("t2_non_numeric", "h2|MgO"), ("t2_missing", "h2|Si"), ("duplicate_host", "h3"),
                     ("duplicate_heterostructure", "h3|CaO"), ("host_not_in_materials", "h9|CaO")}
    assert found.filter(pl.col("kind") == "t2_non_numeric")["row"].to_list() == [5]
    again = spin_defects.prepare(_settings(tmp_path / "home", mirror))
    assert "reused" in again.notes[0] and again.tables == prepared.tables


def test_the_spec_audits_hosts_across_substrates(tmp_path: Path, mirror: Path) -> None:
    from dcaudit.pipelines.runner import run_spec
    from dcaudit.spec import load_spec

    spec = load_spec("spin_defects")
    settings = _settings(tmp_path / "home", mirror)
    result = run_spec(spec, settings, quiet=True)
    row = result.tables["summary"].to_pylist()[0]
    # fibers = hosts with a heterostructure T2: h1 mixed, h2 pure false, h3 and h9 pure true
    assert (row["n_fibers"], row["n_mixed_fibers"]) == (4, 1)
    assert (row["certified_true"], row["certified_false"], row["ambiguous"]) == (3, 1, 2)
    assert row["mixed_fiber_fraction"] == pytest.approx(0.25)
    assert result.tables["findings"].num_rows == 5
    # the package's findings are a catalog view like every other table
    from dcaudit.catalog import Catalog

    kinds = Catalog(settings).query("SELECT kind, count(*) AS n FROM findings GROUP BY kind ORDER BY kind").to_pylist()
    assert [(r["kind"], r["n"]) for r in kinds] == [("duplicate_heterostructure", 1), ("duplicate_host", 1),
                                                    ("host_not_in_materials", 1), ("t2_missing", 1),
                                                    ("t2_non_numeric", 1)]
    manifest = (result.run_dir / "manifest.json").read_text()
    assert "zenodo.org/records/16996230/files/Data_Heterostructures.xlsx" in manifest  # source_files


def test_missing_workbooks_stop_with_where_to_put_them(tmp_path: Path) -> None:
    settings = _settings(tmp_path / "home", tmp_path / "empty-mirror")
    with pytest.raises(MissingSourceError) as info:
        spin_defects.prepare(settings)
    msg = str(info.value)
    assert "Data_2D-Materials.xlsx and Data_Heterostructures.xlsx" in msg and "16996230" in msg
    assert f"{tmp_path / 'empty-mirror'}/spin_defects/" in msg and str(settings.raw_dir) in msg


def test_missing_workbooks_cli_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from dcaudit.cli import cli

    monkeypatch.setenv("DCAUDIT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DCAUDIT_MIRROR", str(tmp_path / "empty-mirror"))
    monkeypatch.setenv("DCAUDIT_OFFLINE", "1")
    result = CliRunner().invoke(cli, ["run", "spin_defects"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "Data_Heterostructures.xlsx" in result.output and "spin_defects/" in result.output


def test_wrong_layout_names_sheets_and_columns(tmp_path: Path, mirror: Path) -> None:
    _book(mirror / "spin_defects" / spin_defects.HETEROSTRUCTURES_FILE,
          [("host", "substrate", "T2 (ms)"), ("h1", "CaO", 1.0)], sheet="data")
    with pytest.raises(InputError, match=r"no sheet has the column\(s\) Host_2D_MC2D_UUID, Substrate, T2 .*"
                                         r"'data': host, substrate, T2 \(ms\).*Data_Heterostructures.xlsx"):
        spin_defects.prepare(_settings(tmp_path / "home", mirror))
    # the column names are options
    options = spin_defects.Options(host_column="host", substrate_column="substrate",
                                   heterostructure_t2_column="T2 (ms)", heterostructures_sheet="data")
    prepared = spin_defects.prepare(_settings(tmp_path / "home", mirror), options)
    assert pl.read_parquet(prepared.tables["heterostructures"])["candidate_id"].to_list() == ["h1|CaO"]


def test_not_a_workbook_is_named(tmp_path: Path, mirror: Path) -> None:
    (mirror / "spin_defects" / spin_defects.MATERIALS_FILE).write_text("id,T2\nh1,1\n")
    with pytest.raises(InputError, match="cannot read as an Excel workbook.*Data_2D-Materials.xlsx"):
        spin_defects.prepare(_settings(tmp_path / "home", mirror))


def test_a_workbook_that_is_a_directory_is_named_not_missing(tmp_path: Path, mirror: Path) -> None:
    """fetch_all gathered it with the missing ones: "needs Data_2D-Materials.xlsx ..., not available here"."""
    book = mirror / "spin_defects" / spin_defects.MATERIALS_FILE
    book.unlink()
    book.mkdir()
    with pytest.raises(InputError, match=f"{book} is a directory, not a file") as caught:
        spin_defects.prepare(_settings(tmp_path / "home", mirror))
    assert not isinstance(caught.value, MissingSourceError)
