"""The Tox21 connector on the real mirror file, and every kind of bad input it must name."""

from __future__ import annotations

import shutil
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from dcaudit.config import Settings
from dcaudit.connectors import tox21
from dcaudit.connectors.base import FetchedFile
from dcaudit.errors import InputError, IntegrityError, MissingSourceError
from tests.conftest import mirror_path


@pytest.fixture(scope="module")
def prepared(tox21_settings: Settings):  # noqa: ANN201
    return tox21.prepare(tox21_settings)


def test_normalised_table_keeps_every_row_with_provenance(prepared) -> None:  # noqa: ANN001
    table = pl.read_parquet(prepared.tables["tox21"])
    assert table.height == tox21.N_ROWS and table["mol_id"].n_unique() == tox21.N_ROWS
    # Positives per assay as MANIFEST.md lists them for the canonical file.
    assert table["SR-p53"].sum() == 423 and table["NR-AR"].sum() == 309 and table["SR-MMP"].sum() == 918
    assert table["smiles_valid"].all() or table.filter(~pl.col("smiles_valid"))["smiles_error"].is_not_null().all()
    assert table["inchikey"].drop_nulls().str.len_chars().min() == 27
    meta = pq.read_schema(prepared.tables["tox21"]).metadata
    assert meta[b"dcaudit.sha256"].decode() == prepared.inputs["tox21.csv.gz"]
    assert meta[b"dcaudit.origin"].startswith(b"mirror:") and b"MoleculeNet" in meta[b"dcaudit.citation"]


def test_structure_duplicates_report_conflicting_labels(prepared) -> None:  # noqa: ANN001
    dups = pl.read_parquet(prepared.reports["structure_duplicates"])
    table = pl.read_parquet(prepared.tables["tox21"])
    expected = table.filter(pl.col("inchikey").is_not_null() & pl.col("inchikey").is_duplicated())
    assert dups.height == expected.height
    if dups.height:
        assert (dups["group_size"] >= 2).all()
        # a group's conflict list names exactly the assays with two different observed labels
        key = dups["inchikey"][0]
        members = table.filter(pl.col("inchikey") == key)
        conflicting = [a for a in tox21.ASSAYS if members[a].drop_nulls().n_unique() > 1]
        assert sorted(dups.filter(pl.col("inchikey") == key)["conflicting_assays"][0].to_list()) == sorted(conflicting)


def test_findings_list_invalid_smiles_and_duplicates(prepared) -> None:  # noqa: ANN001
    """The connector's findings, in the common schema: every invalid SMILES and every duplicate compound."""
    found = pl.read_parquet(prepared.findings)
    table = pl.read_parquet(prepared.tables["tox21"]).with_row_index("row", 1)
    dups = pl.read_parquet(prepared.reports["structure_duplicates"])
    assert found.columns == ["source", "file", "row", "column", "kind", "detail", "candidate_id"]
    invalid = found.filter(pl.col("kind") == "invalid_smiles")
    assert sorted(invalid["candidate_id"]) == sorted(table.filter(~pl.col("smiles_valid"))["mol_id"])
    conflicting = found.filter(pl.col("kind") == "structure_duplicate_conflicting_labels")
    expected = dups.filter(pl.col("conflicting_assays").list.len() > 0)
    assert conflicting.height == expected.height > 0
    assert sorted(conflicting["candidate_id"]) == sorted(expected["mol_id"])
    # `row` is the compound's data row in the CSV
    rows = dict(table.select("mol_id", "row").iter_rows())
    assert all(rows[c] == r for c, r in conflicting.select("candidate_id", "row").iter_rows())
    assert found.filter(pl.col("kind") == "structure_duplicate").height == dups.height - expected.height


def test_rerun_reuses_the_normalised_table(tox21_settings: Settings, prepared) -> None:  # noqa: ANN001
    again = tox21.prepare(tox21_settings)
    assert "reused" in again.notes[0]


def _write(tmp_path: Path, text: str, name: str = "tox21.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


HEADER = ",".join(tox21.COLUMNS)


def _row(labels: list[str], mol_id: str = "TOX1", smiles: str = "CCO") -> str:
    return ",".join(labels + [mol_id, smiles])


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="file not found"):
        tox21.read_labels(tmp_path / "absent.csv")


def test_empty_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="empty"):
        tox21.read_labels(_write(tmp_path, ""))


def test_missing_column_is_named(tmp_path: Path) -> None:
    header = HEADER.replace("SR-p53,", "")
    body = ",".join(["0"] * 11 + ["TOX1", "CCO"])
    with pytest.raises(InputError, match="SR-p53") as err:
        tox21.read_labels(_write(tmp_path, f"{header}\n{body}\n"))
    assert err.value.column == "SR-p53"


def test_label_other_than_0_1_empty_names_row_and_column(tmp_path: Path) -> None:
    ok = _row(["0"] * 12, "TOX1")
    bad = _row(["0"] * 4 + ["2"] + ["0"] * 7, "TOX2")
    with pytest.raises(InputError) as err:
        tox21.read_labels(_write(tmp_path, f"{HEADER}\n{ok}\n{bad}\n"))
    assert (err.value.row, err.value.column) == (2, "NR-ER") and "'2'" in str(err.value)
    assert "tox21.csv" in str(err.value)


def test_float_labels_from_other_copies_are_accepted(tmp_path: Path) -> None:
    df = tox21.read_labels(_write(tmp_path, f"{HEADER}\n{_row(['1.0'] + ['0.0'] * 10 + [''])}\n"))
    assert df["NR-AR"].to_list() == [1] and df["SR-p53"].to_list() == [None]


def test_invalid_smiles_is_kept_and_flagged() -> None:
    parsed = tox21.parse_structures(["CCO", "C1CC(", None])
    assert parsed["canonical_smiles"].to_list()[0] == "CCO"
    assert parsed["smiles_error"].to_list()[1:] == ["RDKit could not parse the SMILES", "empty SMILES"]
    assert parsed["inchikey"].to_list()[1:] == [None, None]


def test_tampered_mirror_file_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    src = mirror_path("tox21/tox21.csv")
    lines = src.read_text().splitlines()
    lines[5] = lines[5].replace(",0,", ",1,", 1)  # flip one label
    mirror = tmp_path / "mirror"
    (mirror / "tox21").mkdir(parents=True)
    (mirror / "tox21" / "tox21.csv").write_text("\n".join(lines) + "\n")
    settings = Settings(home=tmp_path / "home", mirror=mirror, memory_limit="1GB", threads=None, offline=True)
    with pytest.raises(IntegrityError, match="fingerprint"):
        tox21.prepare(settings)
    assert not (settings.tables_dir / "tox21" / "tox21.parquet").exists()


def test_truncated_mirror_file_is_refused(tmp_path: Path) -> None:
    src = mirror_path("tox21/tox21.csv")
    fetched = tmp_path / "tox21.csv"
    fetched.write_text("\n".join(src.read_text().splitlines()[:100]) + "\n")
    with pytest.raises(IntegrityError, match="99 rows"):
        tox21.normalise(FetchedFile(fetched, "x", "test", "now"), tmp_path / "out")


def test_offline_without_mirror_says_where_to_put_the_file(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home", mirror=None, memory_limit="1GB", threads=None, offline=True)
    with pytest.raises(MissingSourceError, match="tox21/tox21.csv"):
        tox21.prepare(settings)


def test_gzipped_mirror_copy_is_accepted(tmp_path: Path) -> None:
    import gzip

    mirror = tmp_path / "mirror" / "tox21"
    mirror.mkdir(parents=True)
    with open(mirror_path("tox21/tox21.csv"), "rb") as src, gzip.open(mirror / "tox21.csv.gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    df = tox21.read_labels(mirror / "tox21.csv.gz")
    tox21.verify_content(df, mirror / "tox21.csv.gz")


@pytest.mark.parametrize("change, error, needle", [
    (lambda lines: lines.__setitem__(1, lines[1].replace(",CCOc1", ",CCNc1", 1)), IntegrityError, "SMILES differ"),
    (lambda lines: lines.__setitem__(-1, lines[-1][:-12]), IntegrityError, "SMILES differ"),
    (lambda lines: lines.__setitem__(4, lines[4] + ",extra"), InputError, "line 5 has 15 fields"),
])
def test_a_changed_structure_or_a_broken_line_is_named(tmp_path: Path, change, error, needle: str) -> None:  # noqa: ANN001
    """The labels' fingerprint would not see a changed SMILES (the structure identity of the label-noise
    split), and the CSV is read by the input contract's reader: a ragged line is named by its number."""
    lines = mirror_path("tox21/tox21.csv").read_text().splitlines()
    change(lines)
    path = _write(tmp_path, "\n".join(lines) + "\n")
    with pytest.raises(error, match=needle):
        tox21.verify_content(tox21.read_labels(path), path)


def test_a_truncated_gzip_copy_is_named(tmp_path: Path) -> None:
    import gzip

    data = gzip.compress(mirror_path("tox21/tox21.csv").read_bytes())
    path = tmp_path / "tox21.csv.gz"
    path.write_bytes(data[:-100])
    with pytest.raises(InputError, match="damaged or truncated"):
        tox21.read_labels(path)


def _run_tox21(home: Path, mirror: Path):  # noqa: ANN202
    from click.testing import CliRunner

    from dcaudit.cli import cli

    env = {"DCAUDIT_HOME": str(home), "DCAUDIT_MIRROR": str(mirror), "DCAUDIT_OFFLINE": "1"}
    return CliRunner().invoke(cli, ["run", "tox21", "--no-report"], env=env)


def _listing(folder: Path) -> dict[str, bool]:
    return {str(p.relative_to(folder)): p.is_dir() for p in sorted(folder.rglob("*"))}


def test_a_mirror_file_replaced_by_a_directory_is_named_not_skipped_as_missing(tmp_path: Path) -> None:
    """It read as "skipped: tox21.csv.gz is not available offline: put it at <the directory>" and, online,
    started the download."""
    real = mirror_path("tox21/tox21.csv").parent.parent
    mirror = tmp_path / "mir"
    mirror.mkdir()
    for entry in real.iterdir():
        if entry.name != "tox21":
            (mirror / entry.name).symlink_to(entry)
    (mirror / "tox21" / "tox21.csv").mkdir(parents=True)
    result = _run_tox21(tmp_path / "home", mirror)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert lines == [f"error: tox21: the mirror's copy of tox21.csv.gz {mirror / 'tox21' / 'tox21.csv'} is a "
                     "directory, not a file; move it out of the way (dcaudit does not remove it)"]
    assert not (tmp_path / "home" / "raw").exists()     # no download was started


def test_a_cached_table_replaced_by_a_directory_is_named_and_nothing_is_left(tmp_path: Path) -> None:
    """It was "IsADirectoryError: ... '.findings.parquet.<pid>.tmp' -> 'findings.parquet' (internal error)", and
    the temporary file stayed beside the tables."""
    home = tmp_path / "home"
    mirror = mirror_path("tox21/tox21.csv").parent.parent
    assert _run_tox21(home, mirror).exit_code == 0
    tables = home / "tables" / "tox21"
    (tables / "findings.parquet").unlink()
    (tables / "findings.parquet").mkdir()
    (tables / "findings.parquet" / "mine.txt").write_text("keep")
    before = _listing(tables)
    result = _run_tox21(home, mirror)
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        f"error: tox21: the derived table {tables / 'findings.parquet'} is a directory, not a file; move it out of "
        "the way (dcaudit does not remove it)"]
    assert _listing(tables) == before and (tables / "findings.parquet" / "mine.txt").read_text() == "keep"
