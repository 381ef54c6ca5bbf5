"""Parquet globs whose files disagree on a column: DuckDB's ``union_by_name`` reads them as one column, and what
it makes of them is refused (when an audit reads the column), reported (a column some files lack) or, for
widenings that keep every value, the same as one file holding all the rows. Every file is written here."""

from __future__ import annotations

import datetime
import decimal
import json
import re
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import dcaudit
from dcaudit import inputs
from dcaudit.claims import quote_identifier
from dcaudit.cli import cli
from dcaudit.errors import InputError

D = decimal.Decimal
PROVENANCE = ("run_id", "source")


def write(folder: Path, *parts: dict[str, pa.Array | list[object]]) -> str:
    """Files p1.parquet, p2.parquet, … of ``folder`` (one per part) and the glob that reads them."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, part in enumerate(parts, 1):
        pq.write_table(pa.table(part), folder / f"p{i}.parquet")
    return str(folder / "*.parquet")


def audit(path: str | Path, **kw: object) -> dcaudit.Result:
    kw = {"id": "id", "evidence": ["x"], "claim": "y = 1", "report": False, **kw}
    return dcaudit.audit(path, **kw)  # type: ignore[arg-type]


def findings(result: dcaudit.Result) -> list[dict[str, object]]:
    table = result.tables.get("findings")
    return [] if table is None else table.select("file", "row", "column", "kind", "detail", "candidate_id").to_dicts()


def same(a: dcaudit.Result, b: dcaudit.Result, *, without: tuple[str, ...] = ()) -> None:
    """Equal tables apart from where they came from (and the tables ``without``)."""
    ta, tb = ({n: df.drop([c for c in PROVENANCE if c in df.columns]) for n, df in r.tables.items() if n not in without}
              for r in (a, b))
    assert sorted(ta) == sorted(tb)
    for name, left in ta.items():
        key = [c for c in ("audit_id", "fiber_key", "candidate_id") if c in left.columns]
        assert left.sort(key, nulls_last=True).equals(tb[name].sort(key, nulls_last=True)), name


# ---------------------------------------------------------------------------------------------------
# A column some files lack: kept, excluded as missing, and reported


def test_a_column_some_files_lack_is_reported_as_a_finding_and_a_note(tmp_path: Path) -> None:
    """Its rows were excluded as evidence_missing without a word: a column dropped or misspelled in one file of
    many was never seen. Now a findings row per file lacking it, and a note; the audit is as before."""
    glob = write(tmp_path / "g", {"id": ["a", "b", "c"], "x": [1, 2, 1], "y": [1, 0, 1]},
                 {"id": ["d", "e"], "y": [1, 0]})
    result = audit(glob)
    assert result.excluded_by_reason().select("excluded_reason", "n").rows() == [("evidence_missing", 2)]
    lacking = str(tmp_path / "g" / "p2.parquet")
    assert findings(result) == [{
        "file": lacking, "row": None, "column": "x", "kind": "glob_column_absent", "candidate_id": None,
        "detail": f"the file has no column 'x', which 1 other file(s) of the glob {glob} have: DuckDB reads it as "
                  "missing in its 2 rows (as evidence or claim those candidates are excluded, evidence_missing or "
                  "claim_missing; as a probe, reference or model column they have no value there); give the file "
                  "the column, with empty values where they are missing"}]
    assert f"{glob}: column 'x' is missing from 1 of its 2 files ({lacking}; 2 rows): DuckDB reads it as missing " \
           "there (findings.parquet, kind 'glob_column_absent')" in result.notes
    # the same as one file that holds the column, empty in those rows
    one = tmp_path / "one.parquet"
    pq.write_table(pa.table({"id": list("abcde"), "x": [1, 2, 1, None, None], "y": [1, 0, 1, 1, 0]}), one)
    same(result, audit(one), without=("findings",))
    assert "findings" not in audit(one).tables


def test_an_absent_claim_column_is_reported_and_an_unused_one_is_not(tmp_path: Path) -> None:
    glob = write(tmp_path / "g", {"id": ["a", "b"], "x": [1, 2], "y": [1, 0], "note": ["n", "m"]},
                 {"id": ["c"], "x": [1]})
    result = audit(glob)
    assert result.excluded_by_reason().select("excluded_reason", "n").rows() == [("claim_missing", 1)]
    assert [(f["file"], f["column"], f["kind"]) for f in findings(result)] == [
        (str(tmp_path / "g" / "p2.parquet"), "y", "glob_column_absent")]   # 'note' is read by no audit
    assert audit(glob, evidence=["x"], claim="x = 1").tables.get("findings") is None


def test_a_column_many_files_lack_is_one_note_and_a_finding_per_file(tmp_path: Path) -> None:
    parts = [{"id": ["a"], "x": [1], "y": [1]}] + [{"id": [f"b{i}"], "y": [0]} for i in range(5)]
    glob = write(tmp_path / "g", *parts)
    result = audit(glob)
    files = [str(tmp_path / "g" / f"p{i}.parquet") for i in range(2, 7)]
    assert [f["file"] for f in findings(result)] == files
    assert f"{glob}: column 'x' is missing from 5 of its 6 files ({', '.join(files[:3])} and 2 more; 5 rows): " \
           "DuckDB reads it as missing there (findings.parquet, kind " \
           "'glob_column_absent')" in result.notes


def test_an_id_column_some_files_lack_is_an_error_naming_them(tmp_path: Path) -> None:
    glob = write(tmp_path / "g", {"id": ["a"], "x": [1], "y": [1]}, {"x": [2, 3], "y": [0, 1]})
    with pytest.raises(InputError) as err:
        audit(glob)
    assert str(err.value) == (f"1 of the glob's 2 files lacks the id column, e.g. {tmp_path / 'g' / 'p2.parquet'} "
                              "(2 rows): their rows would have no candidate id; give every file the column "
                              f"(file {glob}, column 'id')")


def test_an_absent_column_in_a_spec_source_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DCAUDIT_HOME", str(tmp_path / "home"))
    write(tmp_path / "parts", {"id": ["a", "b"], "x": [1, 2], "y": [1, 0]}, {"id": ["c"], "y": [1]})
    spec = tmp_path / "s.toml"
    spec.write_text('name = "glob"\n[source]\npath = "parts/*.parquet"\nid = "id"\n'
                    '[[audits]]\nid = "a1"\nclaim = "y = 1"\nevidence = ["x"]\n')
    result = dcaudit.run(spec, report=False)   # the path is read from the spec's folder
    assert [(f["file"], f["column"], f["kind"]) for f in findings(result)] == [
        (str(tmp_path / "parts" / "p2.parquet"), "x", "glob_column_absent")]


def test_every_finding_a_glob_writes_has_a_null_row_in_the_package(tmp_path: Path) -> None:
    """A glob has no single row numbering, so its findings concern a file or the whole glob: their ``row`` is
    NULL (as the connectors' file-level findings have it), never an empty value or a number — in the result and
    in findings.parquet, for every kind a glob can write."""
    glob = write(tmp_path / "g", {"id": ["a", "b", "A1"], "x": ["1", "NA", "2"], "y": [1, 0, 1]},
                 {"id": ["a", "d", "A1 "], "y": [1, 0, 1]})
    out = tmp_path / "pkg"
    result = audit(glob, duplicates="keep", out=str(out))
    table = pq.read_table(out / "findings.parquet")
    assert table.schema.field("row").type == pa.int64()
    kinds = {"glob_column_absent", "duplicate_id", "id_spellings", "evidence_numbers_and_text"}
    assert {r["kind"] for r in table.to_pylist()} == kinds
    assert [r["row"] for r in table.to_pylist()] == [None] * len(kinds)
    assert [f["row"] for f in findings(result)] == [None] * len(kinds)


def absent_rows(package_dir: str | Path) -> list[tuple[str, str]]:
    """(file name, column) of each glob_column_absent row of a package's findings.parquet."""
    path = Path(package_dir) / "findings.parquet"
    rows = pq.read_table(path).to_pylist() if path.is_file() else []
    return [(Path(r["file"]).name, r["column"]) for r in rows if r["kind"] == "glob_column_absent"]


def window_parts(folder: Path) -> str:
    """Predictions with a reference per model: p2.parquet lacks the reference, p3.parquet the model column."""
    def part(start: int, drop: str | None = None) -> dict[str, list[object]]:
        ids = range(start, start + 30)
        ref = [i % 20 / 10 for i in ids]
        cols: dict[str, list[object]] = {"id": [f"m{i}" for i in ids], "model": ["A" if i % 2 else "B" for i in ids],
                                         "pred": [r + (i % 5 - 2) / 50 for r, i in zip(ref, ids, strict=True)],
                                         "ref": ref, "gap": [2 * r for r in ref]}
        return {k: v for k, v in cols.items() if k != drop}

    return write(folder, part(0), part(30, "ref"), part(60, "model"))


def test_a_probe_some_files_lack_is_reported_by_dcaudit_complete(tmp_path: Path) -> None:
    """A completion probe is read by no [[audits]] entry: its values went missing in the files lacking it (their
    candidates left out of the curves) without a word. Now a finding per file lacking it and a note, as for
    evidence; the probe every file has stays silent."""
    glob = write(tmp_path / "g", {"id": [f"a{i}" for i in range(30)], "x": [i % 3 for i in range(30)],
                                  "y": [i * 7 % 2 for i in range(30)], "p": [i % 2 for i in range(30)],
                                  "q": [i % 4 for i in range(30)]},
                 {"id": [f"b{i}" for i in range(10)], "x": [i % 3 for i in range(10)], "y": [i % 2 for i in range(10)],
                  "q": [i % 4 for i in range(10)]})
    out = CliRunner().invoke(cli, ["complete", glob, "--id", "id", "--evidence", "x", "--claim", "y = 1", "--probes",
                                   "p,q", "--seeds", "3", "--min-support", "1", "--no-report", "--json"],
                             env={"DCAUDIT_HOME": str(tmp_path / "home")})
    assert out.exit_code == 0, out.output
    package = json.loads(out.stdout)["package_dir"]
    assert absent_rows(package) == [("p2.parquet", "p")]
    manifest = json.loads((Path(package) / "manifest.json").read_text())
    assert f"{glob}: column 'p' is missing from 1 of its 2 files ({tmp_path / 'g' / 'p2.parquet'}; 10 rows): " \
           "DuckDB reads it as missing there (findings.parquet, kind " \
           "'glob_column_absent')" in manifest["notes"]


def test_a_replay_reference_and_model_column_some_files_lack_are_reported_once(tmp_path: Path) -> None:
    """[replay] reads its reference and model column, and [choice] reads both again: one finding per file and
    column lacking, one note per column."""
    window_parts(tmp_path / "parts")
    spec = tmp_path / "s.toml"
    spec.write_text('name = "glob-windows"\n[source]\npath = "parts/*.parquet"\nid = "id"\n'
                    '[[audits]]\nid = "a1"\nclaim = "gap > 1.0"\nevidence = ["pred"]\nfiber_rule = "quantile:5"\n'
                    '[replay]\nseeds = 5\ntolerance = "mae"\nreference = "ref"\nmodel_column = "model"\n[choice]\n')
    out = CliRunner().invoke(cli, ["run", str(spec), "--no-report", "--json"], env={"DCAUDIT_HOME": str(tmp_path / "h")})
    assert out.exit_code == 0, out.output
    package = json.loads(out.stdout)["package_dir"]
    assert absent_rows(package) == [("p2.parquet", "ref"), ("p3.parquet", "model")]
    notes = json.loads((Path(package) / "manifest.json").read_text())["notes"]
    assert [n.split(" is missing")[0].rsplit(": ", 1)[1] for n in notes if "is missing from" in n] == \
        ["column 'ref'", "column 'model'"]


def test_a_column_an_audit_and_a_stage_both_read_is_one_finding_per_file(tmp_path: Path) -> None:
    """The evidence is read by the audit and by [completion] (its default evidence), the claim column by both, and
    [sensitivity] reads the audit's evidence too: each (column, file) once."""
    glob = write(tmp_path / "g", *({"id": [f"{k}{i}" for i in range(20)], "x": [i % 4 for i in range(20)],
                                    "y": [i % 3 % 2 for i in range(20)], "p": [i % 2 for i in range(20)]}
                                   for k in "ab"),
                 {"id": [f"c{i}" for i in range(5)], "y": [1, 0, 1, 0, 1]},
                 {"id": [f"d{i}" for i in range(5)], "x": [1, 2, 3, 0, 1], "y": [0, 1, 0, 1, 0]})
    spec = tmp_path / "s.toml"
    spec.write_text(f'name = "glob-both"\n[source]\npath = "{glob}"\nid = "id"\n'
                    '[[audits]]\nid = "a1"\nclaim = "y = 1"\nevidence = ["x"]\n'
                    '[completion]\nprobes = ["p"]\nseeds = 2\nmin_support = 1\n'
                    '[sensitivity]\nrules = ["exact", "quantile:2"]\n')
    result = dcaudit.run(spec, report=False)
    assert [(Path(str(f["file"])).name, f["column"]) for f in findings(result)] == [
        ("p3.parquet", "x"), ("p3.parquet", "p"), ("p4.parquet", "p")]
    assert sum("is missing from" in n for n in result.notes) == 2


def test_every_stage_names_the_columns_it_reads() -> None:
    """Each section of the registry says which input columns it reads, so none of them is left unreported: the
    built-in specs' sections name theirs, on the tables they read (vision: every predictions table)."""
    from dcaudit.pipelines.stages import STAGES
    from dcaudit.spec import load_spec

    assert [name for name, stage in STAGES.items() if stage.reads is None] == []
    tox21 = load_spec("tox21")
    assert set(STAGES["completion"].columns(tox21.sections["completion"], tox21, ["tox21"])) >= {
        (None, "SR-MMP"), (None, "SR-p53"), (None, "NR-AR")}
    jarvis = load_spec("jarvis")
    assert set(STAGES["replay"].columns(jarvis.sections["replay"], jarvis, ())) == {
        ("jarvis", "formation_energy_peratom"), ("jarvis", "model")}   # reference, model_column
    vision = load_spec("vision")
    read = set(STAGES["vision"].columns(vision.sections["vision"], vision, ["images", "digits", "digits-pixels"]))
    assert {t for t, _ in read} == {"digits"} and ("digits", "severity") in read


def test_inputs_that_are_no_glob_ask_for_no_absent_columns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One file, a CSV or a frame: no glob, so neither the audits' nor the stages' columns cost a DuckDB query."""
    from dcaudit.pipelines import runner

    def asked(*_: object, **__: object) -> None:
        raise AssertionError("absent_columns asked for an input that is no glob")

    monkeypatch.setattr(runner, "absent_columns", asked)
    table = pa.table({"id": [f"a{i}" for i in range(20)], "x": [i % 3 for i in range(20)],
                      "y": [i % 2 for i in range(20)], "p": [i % 4 for i in range(20)]})
    pq.write_table(table, tmp_path / "one.parquet")
    pl.from_arrow(table).write_csv(tmp_path / "one.csv")  # type: ignore[union-attr]
    for data in (tmp_path / "one.parquet", tmp_path / "one.csv", table):
        result = dcaudit.complete(data, id="id", evidence=["x"], claim="y = 1", probes=["p"], seeds=2, min_support=1,
                                  report=False)
        assert "findings" not in result.tables


# ---------------------------------------------------------------------------------------------------
# Kinds of values that DuckDB would merge unsafely: refused when an audit reads the column

TEXT = "the {word} as text as DuckDB writes them (1 as '1', 1.0 as '1.0', true as 'true'), equal to a text value " \
       "only when spelled alike ('1' and '1.0' would be two values)"
BOOL = "true as 1 and false as 0, one value with the number 1"
ZONE = "taking the times without a time zone as times of the session's time zone, so the values depend on the " \
       "machine that runs the audit"
COUNT = "DuckDB reads a duration as a plain count of its unit ({unit}) and the glob's column as {duck}, so counts " \
        "of other units or plain numbers would be the same values (1 us and 1 ms would be one)"
OTHER = "DuckDB would read the glob's column as {duck}, converting one file's values or failing to read them"
DT = datetime.datetime(2020, 1, 1, 12)

REFUSED = [  # (case, file A's column, file B's column, why: after "DuckDB reads the glob's column as <type>, ")
    ("bool beside int64", pa.array([True, False]), pa.array([1, 2]), "BIGINT", BOOL),
    ("bool beside float64", pa.array([True, False]), pa.array([1.0, 2.5]), "DOUBLE", BOOL),
    ("bool beside decimal", pa.array([True, False]), pa.array([D("1.5"), D("2")], pa.decimal128(9, 2)),
     "DECIMAL(9,2)", BOOL),
    ("int64 beside text", pa.array([1, 2]), pa.array(["1", "1.0"]), "VARCHAR", TEXT.format(word="integers")),
    ("float64 beside text", pa.array([1.0, 2.5]), pa.array(["1", "2.5"]), "VARCHAR", TEXT.format(word="floats")),
    ("decimal beside text", pa.array([D("1.00")], pa.decimal128(9, 2)), pa.array(["1"]), "VARCHAR",
     TEXT.format(word="decimals")),
    ("int64 beside dictionary text", pa.array([1, 2]), pa.array(["1", "2"]).dictionary_encode(), "VARCHAR",
     TEXT.format(word="integers")),
    ("bool beside text", pa.array([True, False]), pa.array(["true", "yes"]), "VARCHAR", TEXT.format(word="bools")),
    ("date beside text", pa.array([datetime.date(2020, 1, 1)]), pa.array(["2020/01/01"]), "VARCHAR",
     TEXT.format(word="dates")),
    ("timestamp beside large text", pa.array([DT]), pa.array(["2020-01-01 12:00"], pa.large_string()), "VARCHAR",
     TEXT.format(word="timestamps")),
    ("text beside binary", pa.array(["a", "b"]), pa.array([b"a", b"c"]), "BLOB",
     "the text as bytes, compared and shown as bytes"),
    ("timestamp beside timestamp with a zone", pa.array([DT], pa.timestamp("us")),
     pa.array([DT], pa.timestamp("us", "UTC")), "TIMESTAMP WITH TIME ZONE", ZONE),
    # in nanoseconds DuckDB drops the zone instead (TIMESTAMP_NS): the message said it kept it
    ("ns timestamp beside ns timestamp with a zone", pa.array([DT], pa.timestamp("ns")),
     pa.array([DT], pa.timestamp("ns", "UTC")), "TIMESTAMP_NS",
     "without a time zone, taking the times with one as times of the session's time zone, so the values depend on "
     "the machine that runs the audit"),
    ("date beside timestamp with a zone", pa.array([datetime.date(2020, 1, 1)]),
     pa.array([DT], pa.timestamp("ms", "Europe/Paris")), "TIMESTAMP WITH TIME ZONE", ZONE),
    ("decimal beside a decimal of 38 integer digits", pa.array([D("1.25")], pa.decimal128(9, 2)),
     pa.array([D(10) ** 37], pa.decimal128(38, 0)), "DECIMAL(38,0)",
     "but 38 digits before the point and 2 after need 40, beyond the 38 a decimal holds: fractions would be rounded "
     "(1.25 becoming 1) or larger values fail to read"),
    ("int64 beside decimal of 20 fraction digits", pa.array([2**62]), pa.array([D("1.25")], pa.decimal128(30, 20)),
     "DECIMAL(38,20)", "but 19 digits before the point and 20 after need 39, beyond the 38 a decimal holds: "
     "fractions would be rounded (1.25 becoming 1) or larger values fail to read"),
    ("struct field bool beside int", pa.array([{"a": True}]), pa.array([{"a": 5}]), "STRUCT(a BIGINT)", BOOL),
    ("list of int beside list of text", pa.array([[1]]), pa.array([["1.0"]]), "VARCHAR[]",
     TEXT.format(word="integers")),
]
WHOLE = [  # the same, with the reason whole (it does not begin with the union's type)
    ("struct fields differ", pa.array([{"a": 1}]), pa.array([{"a": 1, "b": 2}]),
     "their fields differ (a and a, b): DuckDB reads the glob's column as STRUCT(a BIGINT, b BIGINT), with the fields "
     "a file lacks as missing (and names that differ only in case as one field)"),
    ("duration us beside duration ms", pa.array([1, 2], pa.duration("us")), pa.array([1, 3], pa.duration("ms")),
     COUNT.format(unit="ms", duck="BIGINT")),
    ("duration beside int64", pa.array([1, 2], pa.duration("us")), pa.array([1, 3]),
     COUNT.format(unit="us", duck="BIGINT")),
    ("bool beside date", pa.array([True]), pa.array([datetime.date(2020, 1, 1)]), OTHER.format(duck="DATE")),
    ("list beside int64", pa.array([[1]]), pa.array([1]), OTHER.format(duck="BIGINT[]")),
    ("date beside time", pa.array([datetime.date(2020, 1, 1)]), pa.array([datetime.time(1)]),
     OTHER.format(duck="DATE")),
]


@pytest.mark.parametrize(("case", "a", "b", "why"),
                         [(c, a, b, f"DuckDB reads the glob's column as {duck}, {why}") for c, a, b, duck, why in REFUSED]
                         + WHOLE, ids=[r[0] for r in REFUSED + WHOLE])  # type: ignore[misc]
def test_an_unsafe_merge_of_types_is_refused_naming_both_files(tmp_path: Path, case: str, a: pa.Array,
                                                               b: pa.Array, why: str) -> None:
    glob = write(tmp_path / "g", {"id": [f"a{i}" for i in range(len(a))], "x": a, "e": [1] * len(a), "y": [1] * len(a)},
                 {"id": [f"b{i}" for i in range(len(b))], "x": b, "e": [2] * len(b), "y": [0] * len(b)})
    first, second = tmp_path / "g" / "p1.parquet", tmp_path / "g" / "p2.parquet"
    ta, tb = (pq.read_schema(f).field("x").type for f in (first, second))   # as read back: list<element: …>
    expected = (f"{first} holds it as {ta}, {second} as {tb}: {why}; give it one type in every file "
                f"(file {glob}, column 'x')")
    for kw in ({}, {"evidence": ["e"], "claim": "y = 1 and x = x"}):   # as evidence, in the claim
        with pytest.raises(InputError) as err:
            audit(glob, **kw)
        assert str(err.value) == expected, case
    assert audit(glob, evidence=["e"]).summary["n_candidates"][0] == len(a) + len(b)   # unread: no refusal


def test_a_side_holding_only_nulls_passes_and_the_files_named_hold_values(tmp_path: Path) -> None:
    """A file holding the column as float64 nulls only (pandas' chunk of an empty text column) changes nothing
    beside text: it passes, and the refusal names a file whose numbers would become text."""
    glob = write(tmp_path / "g", {"id": ["a"], "x": pa.array([None], pa.float64()), "y": [1]},
                 {"id": ["b"], "x": ["1"], "y": [0]}, {"id": ["c"], "x": [1.0], "y": [1]})
    with pytest.raises(InputError, match=rf"^{tmp_path / 'g' / 'p3.parquet'} holds it as double, "
                                         rf"{tmp_path / 'g' / 'p2.parquet'} as string: DuckDB reads the glob's "
                                         "column as VARCHAR, the floats as text"):
        audit(glob)


def test_numbers_beside_text_are_one_error_line_in_the_cli(tmp_path: Path) -> None:
    glob = write(tmp_path / "g", {"id": ["a", "b"], "x": [1, 2], "y": [1, 0]},
                 {"id": ["c", "d"], "x": ["1.0", "2"], "y": [1, 0]})
    result = CliRunner().invoke(cli, ["audit", glob, "--id", "id", "--evidence", "x", "--claim", "y = 1",
                                      "--no-report"], env={"DCAUDIT_HOME": str(tmp_path / "home")})
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    (line,) = [ln for ln in result.output.splitlines() if ln.startswith("error:")]
    assert line.startswith(f"error: {tmp_path / 'g' / 'p1.parquet'} holds it as int64, {tmp_path / 'g' / 'p2.parquet'} "
                           "as string: DuckDB reads the glob's column as VARCHAR, the integers as text")
    assert line.endswith(f"; give it one type in every file (file {glob}, column 'x')")


# ---------------------------------------------------------------------------------------------------
# Dates and timestamps a merge widens to a finer unit: kept when their statistics show them within its range


NS = "1677-09-21 to 2262-04-11 (nanoseconds in 64 bits)"
US = "290309 BC to 294247 AD (microseconds in 64 bits)"
BEYOND = [  # (case, file A's column, file B's column, the glob's type, its range, the value the footer shows)
    ("date of 3000 beside ns timestamps", pa.array([datetime.date(3000, 1, 1)]), pa.array([DT], pa.timestamp("ns")),
     "TIMESTAMP_NS", NS, "3000-01-01"),
    ("date of 9999 beside ns timestamps", pa.array([datetime.date(1999, 1, 1), datetime.date(9999, 12, 31)]),
     pa.array([DT], pa.timestamp("ns")), "TIMESTAMP_NS", NS, "9999-12-31"),
    ("date before 1677 beside ns timestamps", pa.array([datetime.date(1600, 1, 1)]),
     pa.array([DT], pa.timestamp("ns")), "TIMESTAMP_NS", NS, "1600-01-01"),
    ("us timestamp of 3000 beside ns", pa.array([datetime.datetime(3000, 1, 1)], pa.timestamp("us")),
     pa.array([DT], pa.timestamp("ns")), "TIMESTAMP_NS", NS, "3000-01-01 00:00:00"),
    ("s timestamp of 2300 beside ns", pa.array([datetime.datetime(2300, 1, 1)], pa.timestamp("s")),
     pa.array([DT], pa.timestamp("ns")), "TIMESTAMP_NS", NS, "2300-01-01 00:00:00"),
    ("zoned us timestamp of 3000 beside zoned ns", pa.array([datetime.datetime(3000, 1, 1)], pa.timestamp("us", "UTC")),
     pa.array([DT], pa.timestamp("ns", "UTC")), "TIMESTAMPTZ_NS", NS, "3000-01-01 00:00:00"),
    ("list of dates beside list of ns timestamps", pa.array([[datetime.date(3000, 1, 1)]]),
     pa.array([[DT]], pa.list_(pa.timestamp("ns"))), "TIMESTAMP_NS[]", NS, "3000-01-01"),
    ("date beyond 294247 beside us timestamps", pa.array([200_000_000], pa.int32()).cast(pa.date32()),
     pa.array([DT], pa.timestamp("us")), "TIMESTAMP", US, "200000000 days from 1970"),
]


@pytest.mark.parametrize(("case", "a", "b", "duck", "span", "value"), BEYOND, ids=[r[0] for r in BEYOND])
def test_times_a_merge_takes_beyond_its_unit_are_refused_naming_both_files(tmp_path: Path, case: str, a: pa.Array,
                                                                          b: pa.Array, duck: str, span: str,
                                                                          value: str) -> None:
    """DuckDB reads a date beside nanosecond timestamps as TIMESTAMP_NS, which holds 1677 to 2262 only: a date of
    the year 3000 stopped the audit in DuckDB's words ("failed to cast column "x" from type DATE to TIMESTAMP_NS:
    Type INT32 with value 3000-01-01 can't be cast to the destination type INT64"), naming neither the column
    nor the other file. Now one line naming both files, the column and the value, when an audit reads it."""
    glob = write(tmp_path / "g", {"id": [f"a{i}" for i in range(len(a))], "x": a, "e": [1] * len(a), "y": [1] * len(a)},
                 {"id": [f"b{i}" for i in range(len(b))], "x": b, "e": [2] * len(b), "y": [0] * len(b)})
    first, second = tmp_path / "g" / "p1.parquet", tmp_path / "g" / "p2.parquet"
    ta, tb = (pq.read_schema(f).field("x").type for f in (first, second))
    fix = " (microsecond timestamps hold both)" if duck.startswith(("TIMESTAMP_NS", "TIMESTAMPTZ_NS")) else ""
    expected = (f"{first} holds it as {ta}, {second} as {tb}: DuckDB reads the glob's column as {duck}, which holds "
                f"times from {span} only, and the values of {first} reach {value} (a value beyond would fail to "
                f"read); give it one type in every file{fix} (file {glob}, column 'x')")
    for kw in ({}, {"evidence": ["e"], "claim": "y = 1 and x = x"}):
        with pytest.raises(InputError) as err:
            audit(glob, **kw)
        assert str(err.value) == expected, case
    assert audit(glob, evidence=["e"]).summary["n_candidates"][0] == len(a) + len(b)   # unread: no refusal


def test_each_field_of_a_struct_merges_to_its_own_unit(tmp_path: Path) -> None:
    """A struct of microsecond and nanosecond times beside one of millisecond and nanosecond times reads as
    STRUCT(a TIMESTAMP, b TIMESTAMP_NS): its field ``a`` of the year 2500 is within microseconds, and was refused
    as if every field became nanoseconds. Each field is now checked against its own merged unit: ``a`` audits,
    and ``b`` of the year 3000 beside nanoseconds is refused by its value."""
    def times(a_unit: str, a: datetime.datetime, b_unit: str, b: datetime.datetime) -> pa.Array:
        return pa.StructArray.from_arrays([pa.array([a], pa.timestamp(a_unit)), pa.array([b], pa.timestamp(b_unit))],
                                          ["a", "b"])

    late = datetime.datetime(2500, 1, 1)
    glob = write(tmp_path / "g", {"id": ["a"], "x": times("us", late, "ns", DT), "y": [1]},
                 {"id": ["b"], "x": times("ms", DT, "ns", DT), "y": [0]})
    keys = sorted(audit(glob).fibers["evidence_key"].to_list())
    assert len(keys) == 2 and "2500-01-01" in keys[1], keys
    glob = write(tmp_path / "h", {"id": ["a"], "x": times("us", late, "us", datetime.datetime(3000, 1, 1)), "y": [1]},
                 {"id": ["b"], "x": times("ms", DT, "ns", DT), "y": [0]})
    with pytest.raises(InputError, match=r"DuckDB reads the glob's column as STRUCT\(a TIMESTAMP, b TIMESTAMP_NS\), "
                                         rf"which holds times from {re.escape(NS)} only, and the values of "
                                         rf"{re.escape(str(tmp_path / 'h' / 'p1.parquet'))} reach 3000-01-01 00:00:00 "
                                         r"\(a value beyond would fail to read\); give it one type in every file "
                                         r"\(microsecond timestamps hold both\)"):
        audit(glob)


def test_a_column_whose_name_holds_a_dot_is_checked_as_one_column(tmp_path: Path) -> None:
    """A Parquet leaf path joins names with dots: the column "d.x" (a date of 3000 beside nanosecond timestamps)
    read as field x of a column d, which has none, and passed unchecked to DuckDB's cast error."""
    glob = write(tmp_path / "g", {"id": ["a"], "d.x": pa.array([datetime.date(3000, 1, 1)]), "y": [1]},
                 {"id": ["b"], "d.x": pa.array([DT], pa.timestamp("ns")), "y": [0]})
    with pytest.raises(InputError, match=r"DuckDB reads the glob's column as TIMESTAMP_NS, which holds times from "
                                         rf"{re.escape(NS)} only, and the values of .*p1.parquet reach 3000-01-01 "
                                         r".*\(file .*, column 'd.x'\)$"):
        audit(glob, evidence=["d.x"])


def test_a_merge_whose_footer_shows_no_statistics_is_refused(tmp_path: Path) -> None:
    """Without statistics nothing shows a date within TIMESTAMP_NS's years: refused, as integers beside floats are
    (a value beyond would stop the audit in DuckDB's words)."""
    (tmp_path / "g").mkdir()
    pq.write_table(pa.table({"id": ["a"], "x": [datetime.date(2000, 1, 1)], "y": [1]}), tmp_path / "g" / "p1.parquet",
                   write_statistics=False)
    pq.write_table(pa.table({"id": ["b"], "x": pa.array([DT], pa.timestamp("ns")), "y": [0]}),
                   tmp_path / "g" / "p2.parquet")
    with pytest.raises(InputError, match=rf"DuckDB reads the glob's column as TIMESTAMP_NS, which holds times from "
                                         rf"{re.escape(NS)} only, and the footer of {tmp_path / 'g' / 'p1.parquet'} "
                                         "has no statistics to show its values within"):
        audit(tmp_path / "g" / "*.parquet")


def test_millisecond_times_beyond_timestamp_in_a_glob_are_refused_and_other_columns_audit(tmp_path: Path) -> None:
    """DuckDB reads Parquet milliseconds as microseconds: beyond TIMESTAMP's range it stopped every query of the
    glob, of other columns too ("Could not convert Timestamp(MS) to Timestamp(US)")."""
    glob = write(tmp_path / "g", {"id": ["a", "b"], "x": pa.array([1, 2**62], pa.timestamp("ms")), "e": [1, 2],
                                  "y": [1, 0]}, {"id": ["c"], "x": pa.array([3], pa.timestamp("ms")), "e": [1], "y": [1]})
    with pytest.raises(InputError, match=rf"^{tmp_path / 'g' / 'p1.parquet'} holds it as timestamp\[ms\], its values "
                                         r"reaching 4611686018427387904 milliseconds from 1970: times beyond what "
                                         r"DuckDB's TIMESTAMP holds .*\(file .*, column 'x'\)$"):
        audit(glob)
    assert audit(glob, evidence=["e"]).summary["n_candidates"][0] == 3


WITHIN = [  # (case, file A's column, file B's column, the one file's column): values every unit holds
    ("date beside ns timestamps", pa.array([datetime.date(2000, 1, 1), datetime.date(2262, 4, 11)]),
     pa.array([DT], pa.timestamp("ns")),
     pa.array([datetime.datetime(2000, 1, 1), datetime.datetime(2262, 4, 11), DT], pa.timestamp("ns"))),
    ("ms timestamps beside ns", pa.array([DT], pa.timestamp("ms")), pa.array([DT, DT], pa.timestamp("ns")),
     pa.array([DT] * 3, pa.timestamp("ns"))),
    ("s timestamps beside us", pa.array([datetime.datetime(9000, 1, 1)], pa.timestamp("s")),
     pa.array([DT], pa.timestamp("us")), pa.array([datetime.datetime(9000, 1, 1), DT], pa.timestamp("us"))),
    ("date of 9999 beside us timestamps", pa.array([datetime.date(9999, 12, 31)]), pa.array([DT], pa.timestamp("us")),
     pa.array([datetime.datetime(9999, 12, 31), DT], pa.timestamp("us"))),
]


@pytest.mark.parametrize(("case", "a", "b", "one"), WITHIN, ids=[w[0] for w in WITHIN])
def test_times_a_merge_keeps_within_its_unit_are_silent_and_as_one_file(tmp_path: Path, case: str, a: pa.Array,
                                                                       b: pa.Array, one: pa.Array) -> None:
    ids = [f"c{i}" for i in range(len(a) + len(b))]
    y = [i % 2 for i in range(len(ids))]
    glob = write(tmp_path / "g", {"id": ids[:len(a)], "x": a, "y": y[:len(a)]}, {"id": ids[len(a):], "x": b,
                                                                                 "y": y[len(a):]})
    pq.write_table(pa.table({"id": ids, "x": one, "y": y}), tmp_path / "one.parquet")
    result = audit(glob)
    assert findings(result) == [], case
    same(result, audit(tmp_path / "one.parquet"))


# ---------------------------------------------------------------------------------------------------
# Durations: intervals, as from one file or a frame, where the merge kept their unit


def test_durations_beside_a_file_of_integer_nulls_are_intervals(tmp_path: Path) -> None:
    """A file holding the column as int64 nulls passes beside durations (nothing changes): the glob's column is
    the durations, read as intervals as one file's are; integers beside empty durations stay integers."""
    glob = write(tmp_path / "g", {"id": ["a", "b"], "x": pa.array([1, 2], pa.duration("s")), "y": [1, 0]},
                 {"id": ["c"], "x": pa.array([None], pa.int64()), "y": [1]})
    assert sorted(audit(glob).fibers["evidence_key"].to_list()) == ["00:00:01", "00:00:02"]
    numbers = write(tmp_path / "n", {"id": ["a"], "x": pa.array([None], pa.duration("s")), "y": [1]},
                    {"id": ["b", "c"], "x": [5, 6], "y": [0, 1]})
    assert sorted(audit(numbers).fibers["evidence_key"].to_list()) == ["5", "6"]


def test_durations_beside_a_file_of_float_nulls_are_refused(tmp_path: Path) -> None:
    """Beside float64 nulls (pandas' empty chunk) DuckDB reads the durations as DOUBLE counts of their unit,
    which no longer say they are durations (and round beyond 2^53): refused by name."""
    glob = write(tmp_path / "g", {"id": ["a"], "x": pa.array([1], pa.duration("s")), "y": [1]},
                 {"id": ["b"], "x": pa.array([None], pa.float64()), "y": [0]})
    with pytest.raises(InputError) as err:
        audit(glob)
    assert str(err.value) == (f"{tmp_path / 'g' / 'p1.parquet'} holds it as duration[s], {tmp_path / 'g' / 'p2.parquet'}"
                              " as double (no values): DuckDB reads the glob's column as DOUBLE, a bare count of the "
                              "duration's unit, which dcaudit cannot read back as durations; give it one type in "
                              f"every file (file {glob}, column 'x')")


# ---------------------------------------------------------------------------------------------------
# Widenings that keep every value: silent, and as one file holding every row


SAFE = [  # (case, file A's column, file B's column, the one file's column)
    ("int32 beside int64", pa.array([1, 2], pa.int32()), pa.array([2, 2**40]), pa.array([1, 2, 2, 2**40])),
    ("int64 beside uint64", pa.array([-1, 2]), pa.array([2, 2**63 + 1], pa.uint64()),
     pa.array([D(-1), D(2), D(2), D(2**63 + 1)], pa.decimal128(20, 0))),
    ("float32 beside float64", pa.array([1.5, 2.0], pa.float32()), pa.array([2.0, 0.1]), pa.array([1.5, 2.0, 2.0, 0.1])),
    ("string beside large_string", pa.array(["a", "b"]), pa.array(["b", "c"], pa.large_string()),
     pa.array(["a", "b", "b", "c"])),
    ("dictionary beside string", pa.array(["a", "b"]).dictionary_encode(), pa.array(["b", "c"]),
     pa.array(["a", "b", "b", "c"])),
    ("int64 beside decimal that holds it", pa.array([1, 2]), pa.array([D("2.00"), D("2.50")], pa.decimal128(9, 2)),
     pa.array([D(1), D(2), D(2), D("2.5")], pa.decimal128(21, 2))),
    ("decimals of two scales", pa.array([D("1.5")], pa.decimal128(5, 1)), pa.array([D("1.50"), D("1.25")],
     pa.decimal128(9, 2)), pa.array([D("1.5"), D("1.5"), D("1.25")], pa.decimal128(9, 2))),
    ("date beside timestamp", pa.array([datetime.date(2020, 1, 1)]), pa.array([datetime.datetime(2020, 1, 1), DT]),
     pa.array([datetime.datetime(2020, 1, 1)] * 2 + [DT], pa.timestamp("us"))),
    ("timestamp us beside ns", pa.array([DT], pa.timestamp("us")), pa.array([DT, DT], pa.timestamp("ns")),
     pa.array([DT] * 3, pa.timestamp("ns"))),
    ("two time zones", pa.array([DT], pa.timestamp("us", "UTC")), pa.array([DT], pa.timestamp("us", "Asia/Tokyo")),
     pa.array([DT, DT], pa.timestamp("us", "UTC"))),   # pyarrow takes DT as UTC: one instant in two zones
    ("nulls beside int64", pa.nulls(2), pa.array([1, 2]), pa.array([None, None, 1, 2])),
    ("float64 nulls beside text", pa.array([None, None], pa.float64()), pa.array(["a", "b"]),
     pa.array([None, None, "a", "b"])),
    ("bool nulls beside int64", pa.array([None], pa.bool_()), pa.array([0, 1]), pa.array([None, 0, 1])),
    ("binary beside fixed-size binary", pa.array([b"ab"]), pa.array([b"ab", b"cd"], pa.binary(2)),
     pa.array([b"ab", b"ab", b"cd"])),
    ("list of int32 beside list of int64", pa.array([[1]], pa.list_(pa.int32())), pa.array([[1], [2, 3]]),
     pa.array([[1], [1], [2, 3]])),
    ("struct fields in another order", pa.array([{"a": 1, "b": 2}]), pa.array([{"b": 2, "a": 1}, {"b": 1, "a": 1}]),
     pa.array([{"a": 1, "b": 2}, {"a": 1, "b": 2}, {"a": 1, "b": 1}])),
]


@pytest.mark.parametrize(("case", "a", "b", "one"), SAFE, ids=[s[0] for s in SAFE])
def test_a_widening_that_keeps_every_value_is_silent_and_as_one_file(tmp_path: Path, case: str, a: pa.Array,
                                                                    b: pa.Array, one: pa.Array) -> None:
    ids = [f"c{i}" for i in range(len(a) + len(b))]
    y = [i % 2 for i in range(len(ids))]
    glob = write(tmp_path / "g", {"id": ids[:len(a)], "x": a, "y": y[:len(a)]},
                 {"id": ids[len(a):], "x": b, "y": y[len(a):]})
    pq.write_table(pa.table({"id": ids, "x": one, "y": y}), tmp_path / "one.parquet")
    for kw in ({}, {"claim": "x = x and y = 1"}):
        result = audit(glob, **kw)
        assert findings(result) == [] and not [n for n in result.notes if "glob" in n], case
        same(result, audit(tmp_path / "one.parquet", **kw))


def test_files_that_agree_ask_duckdb_nothing_and_read_no_footer_twice(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks cost nothing when the files agree: no DESCRIBE of the union, no second read of a footer, and
    nothing kept beside the view."""
    glob = write(tmp_path / "g", *({"id": [f"{i}a", f"{i}b"], "x": [i, 2], "y": [1, 0]} for i in range(4)))
    schemas = [(f, pq.read_schema(f)) for f in sorted((tmp_path / "g").glob("*.parquet"))]
    assert inputs._union_types(None, "unused", schemas, glob) == {}   # type: ignore[arg-type]

    def no_footer(*_: object, **__: object) -> None:
        raise AssertionError("a footer read again")

    monkeypatch.setattr(pq, "read_metadata", no_footer)
    con = duckdb.connect()
    inputs._note_absent(con, glob, schemas)
    with pytest.raises(duckdb.CatalogException):
        con.execute(f"SELECT * FROM {quote_identifier(inputs._absent_table(glob))}")
    assert inputs.absent_columns(con, inputs.view_name(glob), ["x", "y"], id_column="id") is None
    assert pl.DataFrame(audit(glob).summary)["n_candidates"][0] == 8


def test_the_cli_reports_an_absent_column_and_refuses_a_mixed_one(tmp_path: Path) -> None:
    glob = write(tmp_path / "g", {"id": ["a", "b"], "x": [1, 2], "flag": [True, False], "y": [1, 0]},
                 {"id": ["c"], "flag": [1], "y": [1]})
    env = {"DCAUDIT_HOME": str(tmp_path / "home")}
    ok = CliRunner().invoke(cli, ["audit", glob, "--id", "id", "--evidence", "x", "--claim", "y = 1", "--no-report"],
                            env=env)
    assert ok.exit_code == 0, ok.output
    flat = " ".join(ok.output.split())   # the console wraps long lines
    assert "findings: 1 glob_column_absent" in flat
    assert f"{glob}: column 'x' is missing from 1 of its 2 files ({tmp_path / 'g' / 'p2.parquet'}; 1 row)" in flat
    refused = CliRunner().invoke(cli, ["audit", glob, "--id", "id", "--evidence", "flag", "--claim", "y = 1",
                                       "--no-report"], env=env)
    assert refused.exit_code == 2 and "Traceback" not in refused.output
    (line,) = [ln for ln in refused.output.splitlines() if ln.startswith("error:")]
    assert line == (f"error: {tmp_path / 'g' / 'p1.parquet'} holds it as bool, {tmp_path / 'g' / 'p2.parquet'} as "
                    f"int64: DuckDB reads the glob's column as BIGINT, {BOOL}; give it one type in every file "
                    f"(file {glob}, column 'flag')")


def test_vision_predictions_from_a_glob_read_as_from_one_file(tmp_path: Path) -> None:
    """[vision] on a Parquet glob of a user's predictions stopped on DuckDB's 'Referenced column "__row" not
    found': the predictions check asked for row numbers, which a glob has not (its errors then name no row)."""
    import numpy as np

    rng = np.random.default_rng(0)
    rows = []
    for model in ("m1", "m2"):
        for i in range(40):
            label = int(rng.integers(0, 3))
            for condition, right in (("clean", 0.9), ("noise", 0.6)):
                predicted = label if rng.random() < right else int(rng.integers(0, 3))
                rows.append({"split": 0, "model": model, "image_id": f"img{i}", "condition": condition,
                             "predicted": str(predicted), "label": str(label), "confidence": float(rng.random())})
    table = pa.Table.from_pylist(rows)
    (tmp_path / "parts").mkdir()
    pq.write_table(table.slice(0, 80), tmp_path / "parts" / "a.parquet")
    pq.write_table(table.slice(80), tmp_path / "parts" / "b.parquet")
    pq.write_table(table, tmp_path / "all.parquet")
    summaries = []
    for name, path in (("one", "all.parquet"), ("glob", "parts/*.parquet")):
        spec = tmp_path / f"{name}.toml"
        # as the README has it: a path and [vision]; the stage audits every suite × split × model itself, so
        # no [[audits]] entry and no id column are needed (both were required before)
        spec.write_text(f'name = "vision-{name}"\n[source]\npath = "{path}"\n[vision]\nconditions = ["noise"]\n')
        out = CliRunner().invoke(cli, ["run", str(spec), "--no-report", "--json"],
                                 env={"DCAUDIT_HOME": str(tmp_path / "h")})
        assert out.exit_code == 0, out.output
        summary = pl.read_parquet(Path(json.loads(out.stdout)["package_dir"]) / "summary.parquet")
        summaries.append(summary.select(
            "model", "split", "n_candidates", "ambiguous_fraction").sort("model", "split", "n_candidates"))
    assert summaries[0].height > 0 and summaries[0].equals(summaries[1])


def test_a_glob_is_named_with_its_folder(tmp_path: Path) -> None:
    """Every glob was the source '*.parquet' in its package (and on the console): two globs of two folders
    could not be told apart."""
    glob = write(tmp_path / "parts", {"id": ["a", "b"], "x": [0, 1], "y": [0, 1]}, {"id": ["c"], "x": [1], "y": [1]})
    out = CliRunner().invoke(cli, ["audit", glob, "--id", "id", "--evidence", "x", "--claim", "y = 1", "--no-report",
                                   "--json"], env={"DCAUDIT_HOME": str(tmp_path / "h")})
    assert out.exit_code == 0, out.output
    summary = pq.read_table(Path(json.loads(out.stdout)["package_dir"]) / "summary.parquet")
    assert summary["source"].to_pylist() == ["parts/*.parquet"]
