"""Files a user hands the CLI (CSV, CSV.gz, TSV, Parquet, globs): what is on disk is what is read, and a file
that is not what its name says is named for what it is. Every fixture is written here, in tmp_path."""

from __future__ import annotations

import gzip
import os
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import dcaudit
from dcaudit.cli import cli
from dcaudit.errors import ClaimError, InputError
from dcaudit.inputs import check_file

BODY = "id,e,y\na,1,1\nb,2,0\nc,2,1\n"


def audit(path: Path | str, **kw: object) -> dcaudit.Result:
    kw = {"id": "id", "evidence": ["e"], "claim": "y = 1", "report": False, **kw}
    return dcaudit.audit(path, **kw)  # type: ignore[arg-type]


def findings(result: dcaudit.Result) -> list[dict[str, object]]:
    table = result.tables.get("findings")
    return [] if table is None else table.select("row", "column", "kind", "detail", "candidate_id").to_dicts()


# ---------------------------------------------------------------------------------------------------
# What is at the path


def test_a_link_to_nothing_a_loop_and_a_file_as_folder_are_named_for_what_they_are(tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A link to nothing was "file not found" although the name is there; a link that loops was a Python
    RuntimeError. Both are worded as dcaudit.storage.regular_file words them."""
    dangling = tmp_path / "d.csv"
    dangling.symlink_to(tmp_path / "gone.csv")
    result = CliRunner().invoke(cli, ["audit", str(dangling), "--id", "id", "--evidence", "e", "--claim", "y = 1",
                                      "--no-report"], env={"DCAUDIT_HOME": str(tmp_path / "home")})
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert "is a symbolic link to" in result.output and "gone.csv, which does not exist" in result.output
    loop = tmp_path / "loop.csv"
    loop.symlink_to(loop)
    with pytest.raises(InputError, match="symbolic link that loops back on itself"):
        check_file(loop)
    (tmp_path / "plain.csv").write_text(BODY)
    with pytest.raises(InputError, match="is a file, not a directory"):
        audit(tmp_path / "plain.csv" / "x.csv")
    with pytest.raises(InputError, match="file not found"):
        audit(tmp_path / "nothing.csv")
    # a glob's match that is a link to nothing is no file DuckDB reads: the glob reads the others
    (tmp_path / "g").mkdir()
    pq.write_table(pa.table({"id": ["a", "b"], "e": [1, 2], "y": [1, 0]}), tmp_path / "g" / "p1.parquet")
    (tmp_path / "g" / "p2.parquet").symlink_to(tmp_path / "gone.parquet")
    assert audit(tmp_path / "g" / "*.parquet").summary["n_candidates"][0] == 2
    # root reads any file: a file without read permission is simulated
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p).endswith("plain.csv") else real_access(p, mode))
    with pytest.raises(InputError, match="cannot be read: permission denied"):
        audit(tmp_path / "plain.csv")


def test_files_named_as_csv_that_are_not_csv_say_what_they_are(tmp_path: Path) -> None:
    """These read as "line 1 is not UTF-8", "line 4 has 1 fields" or "Not a gzipped file (b'id')"."""
    good = tmp_path / "good.parquet"
    pq.write_table(pa.table({"id": ["a", "b"], "e": [1, 2], "y": [1, 0]}), good)
    cases = {
        "parquet.csv": (good.read_bytes(), "it is Parquet"),
        "gzip.csv": (gzip.compress(BODY.encode()), "gzip-compressed: give it a .gz name"),
        "twice.csv.gz": (gzip.compress(gzip.compress(BODY.encode())), "gzip-compressed twice"),
        "plain.csv.gz": (BODY.encode(), "the name ends in .gz, but the file is not gzip-compressed"),
        "parquet.csv.gz": (good.read_bytes(), "not gzip-compressed: it is Parquet"),
        "utf16.csv": (BODY.encode("utf-16"), "UTF-16 text"),
        "utf16le.csv": (BODY.encode("utf-16-le"), "NUL bytes, as UTF-16 text does"),
    }
    with zipfile.ZipFile(tmp_path / "sheet.csv", "w") as z:
        z.writestr("a.csv", BODY)
    for name, (data, _) in cases.items():
        (tmp_path / name).write_bytes(data)
    for name, needle in [*((n, c[1]) for n, c in cases.items()), ("sheet.csv", "a ZIP archive")]:
        with pytest.raises(InputError) as err:
            audit(tmp_path / name)
        assert needle in str(err.value) and name in str(err.value), (name, str(err.value))
    text = tmp_path / "text.parquet"
    text.write_text(BODY)
    with pytest.raises(InputError, match=r"not a readable Parquet file .*the file is text \(a CSV\?\)"):
        audit(text)
    # a gzip file with a .gz name, and a UTF-8 file with a byte order mark, still read
    (tmp_path / "ok.csv.gz").write_bytes(gzip.compress(BODY.encode()))
    assert audit(tmp_path / "ok.csv.gz").summary["n_candidates"][0] == 3


# ---------------------------------------------------------------------------------------------------
# CSV structure and values


def test_a_header_longer_than_a_read_block_is_read_and_a_header_alone_is_named(tmp_path: Path) -> None:
    """A header over 1 MB was "file has no header or data" (and over 128 KB a csv.Error traceback)."""
    long = tmp_path / "long.csv"
    long.write_text("id," + "n" * 1_500_000 + ",e,y\na,0,1,1\nb,0,2,0\n")
    assert audit(long).summary["n_candidates"][0] == 2
    alone = tmp_path / "alone.csv"
    alone.write_text("id,e,y")   # no line end: pyarrow calls it empty
    with pytest.raises(InputError, match=r"no data rows \(only a header\)"):
        audit(alone)


def test_one_and_zero_beside_true_are_not_booleans(tmp_path: Path) -> None:
    """pyarrow reads 1 and 0 as booleans in a column that also holds true/false: 1 and true were one exact
    fiber value and a claim ``y = 1`` read ``true`` as 1. pandas and polars read such a column as text."""
    f = tmp_path / "b.csv"
    f.write_text("id,e,y\na,1,1\nb,true,0\nc,0,1\nd,false,0\n")
    result = audit(f, claim="y = 1")
    assert result.summary["n_fibers"][0] == 4   # 1, true, 0, false: four values as written
    assert [r["kind"] for r in findings(result)] == ["evidence_numbers_and_text"]
    g = tmp_path / "c.csv"
    g.write_text("id,e,y\na,1,1\nb,1,true\n")
    with pytest.raises(ClaimError, match="'true'"):
        audit(g, claim="y = 1")
    h = tmp_path / "d.csv"   # true/false in any of the usual cases is a boolean column
    h.write_text("id,e,y\na,TRUE,1\nb,true,0\nc,False,1\n")
    assert audit(h).summary["n_fibers"][0] == 2


def test_a_quoted_separator_in_the_header_does_not_choose_the_separator(tmp_path: Path) -> None:
    f = tmp_path / "s.csv"
    f.write_text('id;"a,b,c";y\nx;1;1\nz;2;0\n')   # two ; and, inside quotes, two ,
    result = audit(f, evidence='"a,b,c"')
    assert result.summary["n_fibers"][0] == 2


def test_decimal_commas_in_exact_text_evidence_are_reported(tmp_path: Path) -> None:
    """``1,5`` and ``1,50`` are one number and two exact fiber values of a text column: reported (they were
    not, as no value of the column read as a number)."""
    f = tmp_path / "dc.csv"
    f.write_text("id;e;y\na;1,5;1\nb;2,5;0\nc;1,50;1\n")
    found = findings(audit(f))
    assert [(r["kind"], r["row"], r["column"]) for r in found] == [("evidence_number_spellings", 1, "e")]
    assert "decimal comma" in str(found[0]["detail"]) and "'1,5'" in str(found[0]["detail"])
    g = tmp_path / "cat.csv"   # text with commas that are no numbers: no finding
    g.write_text('id,e,y\na,"x,y",1\nb,"y,z",0\n')
    assert findings(audit(g)) == []


# ---------------------------------------------------------------------------------------------------
# Candidate ids


def test_float_ids_zero_and_minus_zero_are_named_as_repeated(tmp_path: Path) -> None:
    """0.0 and -0.0 are one float id (count DISTINCT said repeated) but two texts: the error named no id
    ("e.g. ;") and ``--duplicates keep`` reported nothing."""
    f = tmp_path / "z.parquet"
    pq.write_table(pa.table({"id": [0.0, -0.0, 2.0], "e": [1, 1, 2], "y": [1, 0, 1]}), f)
    with pytest.raises(InputError, match=r"1 repeated candidate id\(s\), e\.g\. '-?0\.0' \(2×\)"):
        audit(f)
    kept = findings(audit(f, duplicates="keep"))
    assert [(r["kind"], r["row"]) for r in kept] == [("duplicate_id_conflicting", 1)]


def test_csv_ids_that_write_one_number_two_ways_are_reported(tmp_path: Path) -> None:
    """A CSV's ids are text: ``1`` and ``1.0`` (a float export), ``7`` and ``007`` are two candidates, where
    pandas and polars read one number. Kept, and reported as id spellings."""
    f = tmp_path / "ids.csv"
    f.write_text("id,e,y\n1,1,1\n1.0,1,0\n007,2,1\n7,2,0\n+7,3,1\n0.5,3,1\n.50,4,0\n"
                 "1.5e-30,4,1\n0,5,0\n0.1,5,1\n0.10000000000000000001,6,0\n12,6,1\n")
    result = audit(f)
    assert sorted(result.tables["candidates"]["candidate_id"].to_list())[:3] == ["+7", ".50", "0"]
    found = findings(result)
    assert [(r["kind"], r["row"], r["candidate_id"]) for r in found] == [
        ("id_spellings", 1, "1"), ("id_spellings", 3, "007"), ("id_spellings", 6, "0.5")]
    assert "'+7', '007', '7'" in str(found[1]["detail"]) and "how they write a number" in str(found[1]["detail"])
    plain = tmp_path / "plain.csv"   # zero-padded ids alone, or plain integers: nothing to report
    plain.write_text("id,e,y\n001,1,1\n002,1,0\n10,2,1\n")
    assert findings(audit(plain)) == []


# ---------------------------------------------------------------------------------------------------
# Parquet globs


def test_a_glob_of_integer_and_float_files_is_refused_where_duckdb_would_round(tmp_path: Path) -> None:
    """DuckDB reads a column that is int64 in one file and double in another as DOUBLE: 2^62 + 1 and 2^62
    became one fiber value without a word. Refused when read, unless the statistics show the integers exact."""
    big = tmp_path / "big"
    big.mkdir()
    pq.write_table(pa.table({"id": ["a", "b"], "e": [2**62 + 1, 2**62], "y": [1, 0]}), big / "p1.parquet")
    pq.write_table(pa.table({"id": ["c", "d"], "e": [1.5, 2.0], "y": [1, 0]}), big / "p2.parquet")
    with pytest.raises(InputError, match=r"p1\.parquet holds it as int64.*as DOUBLE.*2\^53.*column 'e'"):
        audit(big / "*.parquet")
    assert audit(big / "*.parquet", evidence=["y"]).summary["n_candidates"][0] == 4   # an unused column stops nothing
    small = tmp_path / "small"   # pandas' chunks: int64 where no value is missing, float64 (NaN) elsewhere
    small.mkdir()
    pq.write_table(pa.table({"id": ["a", "b"], "e": [1, 2], "y": [1, 0]}), small / "p1.parquet")
    pq.write_table(pa.table({"id": ["c", "d"], "e": [float("nan"), 2.0], "y": [1, 0]}), small / "p2.parquet")
    result = audit(small / "*.parquet")
    assert result.excluded_by_reason().select("excluded_reason", "n").rows() == [("evidence_nan", 1)]
    assert result.summary["n_fibers"][0] == 2   # 1 and 2.0, 2: the NaN excluded, 2 and 2.0 one value
    single = tmp_path / "f32"   # int64 beside float32: DuckDB reads FLOAT, exact only to 2^24
    single.mkdir()
    pq.write_table(pa.table({"id": ["a"], "e": [2**24 + 1], "y": [1]}), single / "p1.parquet")
    pq.write_table(pa.table({"id": ["b"], "e": pa.array([1.0], pa.float32()), "y": [0]}), single / "p2.parquet")
    with pytest.raises(InputError, match=r"as FLOAT.*2\^24"):
        audit(single / "*.parquet")


def test_a_glob_reads_and_checks_the_files_duckdb_matches(tmp_path: Path) -> None:
    """Python's glob took ``run[1]/*.parquet`` for the folder ``run[1]`` while DuckDB read ``run1/``: its files
    went unchecked (a repeated column would be renamed e_1). Wildcards in folders (``*/x.parquet``) read too."""
    (tmp_path / "run[1]").mkdir()
    (tmp_path / "run1").mkdir()
    pq.write_table(pa.table({"id": ["a"], "e": [1], "y": [1]}), tmp_path / "run[1]" / "a.parquet")
    t = pa.Table.from_arrays([pa.array(["b"]), pa.array([1]), pa.array([2]), pa.array([1])], names=["id", "e", "e", "y"])
    pq.write_table(t, tmp_path / "run1" / "b.parquet")
    with pytest.raises(InputError, match=r"duplicate column name 'e'.*run1/b\.parquet"):
        audit(str(tmp_path / "run[1]" / "*.parquet"))
    for d, ids in (("x", ["a", "b"]), ("y", ["c"])):
        (tmp_path / "parts" / d).mkdir(parents=True)
        pq.write_table(pa.table({"id": ids, "e": [1] * len(ids), "y": [1] * len(ids)}),
                       tmp_path / "parts" / d / "part.parquet")
    result = audit(str(tmp_path / "parts" / "*" / "part.parquet"))
    assert sorted(result.tables["candidates"]["candidate_id"].to_list()) == ["a", "b", "c"]
    digests = dcaudit.inputs.input_digests(str(tmp_path / "parts" / "*" / "part.parquet"))
    assert len(digests) == 2   # two files of one name: neither digest is lost


def test_a_parquet_file_in_a_folder_with_glob_characters_is_that_file(tmp_path: Path) -> None:
    """``run[1]/a.parquet`` was read by DuckDB as the glob, i.e. ``run1/a.parquet``: another file's rows."""
    (tmp_path / "run[1]").mkdir()
    (tmp_path / "run1").mkdir()
    pq.write_table(pa.table({"id": ["mine"], "e": [1], "y": [1]}), tmp_path / "run[1]" / "a.parquet")
    pq.write_table(pa.table({"id": ["other"], "e": [1], "y": [1]}), tmp_path / "run1" / "a.parquet")
    result = audit(tmp_path / "run[1]" / "a.parquet")
    assert result.tables["candidates"]["candidate_id"].to_list() == ["mine"]


def test_a_refused_column_of_a_long_path_is_told_whole(tmp_path: Path) -> None:
    """The reason a refused column carries was cut at 300 characters with its file's path, and then told with
    DuckDB's wording and the rest of the marker around it."""
    folder = tmp_path / ("d" * 150)
    folder.mkdir()
    f = folder / ("f" * 80 + ".parquet")
    import decimal

    pq.write_table(pa.table({"id": ["a", "b"], "y": [1, 0],
                             "e": pa.array([decimal.Decimal(10**45), decimal.Decimal(1)], pa.decimal256(50, 0))}), f)
    with pytest.raises(InputError) as err:
        audit(f)
    message = str(err.value)
    assert message.startswith("decimals of 50 digits") and message.endswith("column 'e')"), message
    assert "<<end>>" not in message and "refused column" not in message


# ---------------------------------------------------------------------------------------------------
# Found by the API round and after (fixed in inputs.py and api.py)


def test_a_gzip_whose_check_fails_is_named_damaged_not_blamed_on_a_line(tmp_path: Path) -> None:
    """A flipped bit in a .csv.gz decodes to garbage lines before gzip's checksum says so: the error was
    "line 3920 has 13 fields", about a line nobody wrote."""
    body = "".join(f"c{i},{i % 3},{i % 2}\n" for i in range(20000))
    packed = bytearray(gzip.compress(("id,e,y\n" + body).encode()))
    packed[len(packed) // 2] ^= 0x10
    (tmp_path / "flip.csv.gz").write_bytes(bytes(packed))
    crc = bytearray(gzip.compress(("id,e,y\n" + body).encode()))
    crc[-8] ^= 0xFF   # the data intact, the stored checksum wrong
    (tmp_path / "crc.csv.gz").write_bytes(bytes(crc))
    for name in ("flip.csv.gz", "crc.csv.gz"):
        with pytest.raises(InputError, match="damaged or truncated: its gzip data does not check out") as info:
            audit(tmp_path / name)
        assert "line" not in str(info.value).split("(")[0]


def test_column_names_with_nul_and_multiindex_columns_are_named(tmp_path: Path) -> None:
    """A NUL in a polars column name panicked in polars' Arrow export (a PanicException, no Exception);
    pandas MultiIndex columns became names like "('x', 'a')" that the error then suggested."""
    import pandas as pd
    import polars as pl

    for frame in (pl.DataFrame({"e\x00": [0, 1], "y": [1, 0]}), pd.DataFrame({"e\x00": [0, 1], "y": [1, 0]})):
        with pytest.raises(InputError, match="holds a NUL character"):
            dcaudit.audit(frame, evidence="e", claim="y = 1")
    wide = pd.DataFrame([[0, 1], [1, 0]], columns=pd.MultiIndex.from_tuples([("x", "e"), ("x", "y")]))
    with pytest.raises(InputError, match="2 levels \\(a MultiIndex\\); flatten them first"):
        dcaudit.audit(wide, evidence="e", claim="y = 1")


def test_a_looping_link_and_a_glob_over_folders_are_safe_to_name_and_to_write_beside(tmp_path: Path) -> None:
    """A link that loops was an internal error while the run was being named (Path.resolve raises); an --out
    inside a folder that a glob's wildcard matched (parts/*/x.parquet) was not seen as holding the input."""
    (tmp_path / "l.csv").symlink_to(tmp_path / "l.csv")
    env = {"DCAUDIT_HOME": str(tmp_path / "home")}
    looped = CliRunner().invoke(cli, ["audit", str(tmp_path / "l.csv"), "--evidence", "e", "--claim", "y = 1"], env=env)
    assert looped.exit_code == 2 and "loops back on itself" in looped.output
    for part in ("a", "b"):
        (tmp_path / "parts" / part).mkdir(parents=True)
        pq.write_table(pa.table({"id": [f"{part}1", f"{part}2"], "e": [0, 1], "y": [0, 1]}),
                       tmp_path / "parts" / part / "x.parquet")
    into = CliRunner().invoke(cli, ["audit", str(tmp_path / "parts" / "*" / "x.parquet"), "--id", "id", "--evidence",
                                    "e", "--claim", "y = 1", "--out", str(tmp_path / "parts" / "b"), "--force",
                                    "--no-report"], env=env)
    assert into.exit_code == 2 and "holds the input" in into.output
    assert (tmp_path / "parts" / "b" / "x.parquet").is_file()   # nothing of the input was touched
