"""A DuckDB query as the table to audit (``--sql``, ``[source] query``, ``dcaudit.SourceQuery``): refused
before anything runs unless it is one SELECT, read once, and audited exactly as the same rows from a file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

import dcaudit
from dcaudit.cli import cli
from dcaudit.config import Settings
from dcaudit.errors import InputError, SpecError
from dcaudit.source_query import SourceQuery, query_table
from tests.conftest import mirror_path

NR7 = ["NR-AR", "NR-AR-LBD", "NR-AhR", "NR-Aromatase", "NR-ER", "NR-ER-LBD", "NR-PPAR-gamma"]


def _tables(result: dcaudit.Result) -> dict[str, pl.DataFrame]:
    """The audit's content, without where it came from (run id, source name)."""
    out = {}
    for name in ("summary", "fibers", "candidates"):
        df = result.tables[name]
        out[name] = df.drop([c for c in ("run_id", "source") if c in df.columns])
    return out


@pytest.fixture
def pieces(tmp_path: Path) -> Path:
    """Tox21 split in two files, as a user holds predictions and truth: the evidence columns in one (in
    another row order), the claim column in the other."""
    tox = pl.read_csv(mirror_path("tox21/tox21.csv"), infer_schema_length=None)
    folder = tmp_path / "data"
    folder.mkdir()
    tox.select(["mol_id", *NR7]).reverse().write_parquet(folder / "evidence.parquet")
    tox.select(["mol_id", "SR-p53"]).write_csv(folder / "labels.csv")
    return folder


def test_a_join_audits_exactly_as_the_joined_file(pieces: Path, tmp_path: Path, settings: Settings) -> None:
    joined = tmp_path / "joined.parquet"
    pl.read_parquet(pieces / "evidence.parquet").join(pl.read_csv(pieces / "labels.csv"), on="mol_id").write_parquet(joined)
    by_file = dcaudit.audit(joined, evidence=NR7, claim='"SR-p53" = 1', id="mol_id", settings=settings)
    query = SourceQuery(f"SELECT * FROM '{pieces / 'evidence.parquet'}' JOIN read_csv('{pieces / 'labels.csv'}') "
                        "USING (mol_id)")
    by_query = dcaudit.audit(query, evidence=NR7, claim='"SR-p53" = 1', id="mol_id", settings=settings)
    left, right = _tables(by_file), _tables(by_query)
    for name in left:
        key = [c for c in ("fiber_key", "candidate_id") if c in left[name].columns]
        assert left[name].sort(key).equals(right[name].sort(key)), name
    s = by_query.summary.row(0, named=True)   # the paper's Tox21 figures, through the query
    assert (s["n_candidates"], s["n_fibers"], s["n_mixed_fibers"]) == (4391, 43, 14)
    assert by_query.summary["source"].to_list() == ["SQL query"]


@pytest.mark.parametrize(("sql", "says"), [
    ("", "the query is empty"),
    ("   \n ", "the query is empty"),
    ("SELEC 1", "does not parse: syntax error"),
    ("SELECT 1; SELECT 2", "holds 2 statements"),
    ("COPY (SELECT 1) TO 'x.csv'", "is a COPY statement"),
    ("CREATE TABLE t AS SELECT 1", "is a CREATE statement"),
    ("ATTACH 'other.duckdb'", "is an ATTACH statement"),
    ("SET threads = 1", "is a SET statement"),
    ("INSERT INTO t VALUES (1)", "is an INSERT statement"),
    ("PIVOT t ON a", "write PIVOT inside a SELECT"),
    ("CALL pragma_version()", "is a CALL statement"),
    ("INSTALL httpfs", "statement; give one SELECT"),
])
def test_anything_but_one_select_is_refused_before_it_runs(sql: str, says: str, tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=f"^--sql: .*{says}"):
        SourceQuery(sql, origin="--sql")
    home = tmp_path / "home"
    result = CliRunner().invoke(cli, ["audit", "--sql", sql, "--evidence", "a", "--claim", "a = 1"],
                                env={"DCAUDIT_HOME": str(home)})
    assert result.exit_code == 2, result.output
    assert says.split(":")[0] in result.output and "Traceback" not in result.output
    assert not (home / "runs").exists() and not (tmp_path / "x.csv").exists()  # nothing recorded, nothing written


@pytest.mark.parametrize(("sql", "says"), [
    ("SELECT * FROM 'no-such-file.csv'", "No files found"),
    ("SELECT zz FROM range(3)", 'column "zz" not found'),
    ("SELECT CAST('a' AS INTEGER) AS x", "Could not convert string 'a'"),
])
def test_a_query_that_fails_names_the_option_and_duckdbs_reason(sql: str, says: str, settings: Settings) -> None:
    with pytest.raises(InputError, match=f"^--sql: the query failed: .*{says}") as info:
        query_table(SourceQuery(sql, origin="--sql"), settings)
    assert "\n" not in str(info.value)


def test_the_result_meets_the_input_contract(settings: Settings) -> None:
    """The query's result is checked like a file: two columns of one name are an error naming the query."""
    with pytest.raises(InputError, match="duplicate column name 'x'.*SQL query"):
        dcaudit.audit(SourceQuery("SELECT 1 AS x, 2 AS x, 1 AS y"), evidence="x", claim="y = 1", settings=settings)
    with pytest.raises(InputError, match="id"):   # repeated ids, as from a file
        dcaudit.audit(SourceQuery("SELECT 1 AS id, 0 AS x, 1 AS y UNION ALL SELECT 1, 1, 0"), evidence="x",
                      claim="y = 1", id="id", settings=settings)


def test_row_numbers_follow_the_order_by_and_an_unordered_query_gets_a_note(settings: Settings) -> None:
    sql = "SELECT range AS x, range % 2 = 0 AS y FROM range(5)"
    unordered = dcaudit.audit(SourceQuery(sql), evidence="x", claim="y", settings=settings)
    assert any("ORDER BY" in n for n in unordered.notes)
    ordered = dcaudit.audit(SourceQuery(sql + " ORDER BY x DESC"), evidence="x", claim="y", settings=settings)
    assert not any("ORDER BY" in n for n in ordered.notes)
    rows = ordered.tables["candidates"].join(ordered.tables["fibers"].select("fiber_key", "evidence_key"),
                                             on="fiber_key")
    assert dict(zip(rows["candidate_id"], rows["evidence_key"], strict=True)) == {
        "1": "4", "2": "3", "3": "2", "4": "1", "5": "0"}   # row 1 is the query's first row: x = 4


def test_a_spec_query_reads_files_beside_the_spec_and_reruns_only_when_they_change(pieces: Path, tmp_path: Path) -> None:
    spec = pieces / "joined.toml"
    spec.write_text('name = "joined"\n[source]\nid = "mol_id"\n'
                    "query = \"SELECT * FROM 'evidence.parquet' JOIN read_csv('labels.csv') USING (mol_id)\"\n"
                    '[[audits]]\nid = "nr7"\nclaim = \'"SR-p53" = 1\'\n'
                    f"evidence = {json.dumps(NR7)}\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"DCAUDIT_HOME": str(tmp_path / "home")}
    cwd = os.getcwd()
    os.chdir(elsewhere)   # relative names in the query are the spec's folder's, not the working directory's
    try:
        first = CliRunner().invoke(cli, ["run", str(spec), "--no-report", "--json"], env=env)
        again = CliRunner().invoke(cli, ["run", str(spec), "--no-report", "--json"], env=env)
        labels = pl.read_csv(pieces / "labels.csv")
        labels.with_columns(pl.lit(1).alias("SR-p53")).write_csv(pieces / "labels.csv")
        changed = CliRunner().invoke(cli, ["run", str(spec), "--no-report", "--json"], env=env)
    finally:
        os.chdir(cwd)
    assert first.exit_code == 0, first.output
    runs = [json.loads(r.output[r.output.index("{"):]) for r in (first, again, changed)]
    assert runs[1]["status"] == "reused"
    assert runs[2]["status"] == "succeeded"
    summary = dcaudit.load(runs[2]["package_dir"], settings=Settings(
        home=tmp_path / "home", mirror=None, memory_limit="2GB", threads=1, offline=True)).summary.row(0, named=True)
    assert summary["certified_true"] == summary["n_candidates"] - summary["unsupported"]  # every label now 1


@pytest.mark.parametrize("source", [
    {"query": "SELECT 1", "path": "x.csv"},
    {"query": "SELECT 1", "connector": "tox21"},
])
def test_a_spec_source_names_one_kind(source: dict, tmp_path: Path) -> None:
    from dcaudit.spec import spec_from_dict

    with pytest.raises(SpecError, match="give one"):
        spec_from_dict({"name": "x", "source": source, "audits": [{"claim": "y = 1", "evidence": ["a"]}]})
    with pytest.raises(SpecError, match=r"\[source\] query: the query is a COPY"):
        spec_from_dict({"name": "x", "source": {"query": "COPY (SELECT 1) TO 'x'"},
                        "audits": [{"claim": "y = 1", "evidence": ["a"]}]})
    with pytest.raises(SpecError, match="unknown key"):   # a user's table takes no connector options
        spec_from_dict({"name": "x", "source": {"query": "SELECT 1", "models": "a"},
                        "audits": [{"claim": "y = 1", "evidence": ["a"]}]})


def test_the_cli_replays_a_query(pieces: Path, tmp_path: Path) -> None:
    sql = (f"SELECT * FROM '{pieces / 'evidence.parquet'}' JOIN read_csv('{pieces / 'labels.csv'}') USING (mol_id)")
    out = tmp_path / "pkg"
    result = CliRunner().invoke(cli, ["replay", "--sql", sql, "--id", "mol_id", "--evidence", ",".join(NR7),
                                      "--claim", '"SR-p53" = 1', "--seeds", "3", "--out", str(out), "--no-report"],
                                env={"DCAUDIT_HOME": str(tmp_path / "home")})
    assert result.exit_code == 0, result.output
    assert "SQL query" in result.output
    replay = pl.read_parquet(out / "replay.parquet")
    assert replay.filter(pl.col("seed").is_not_null())["seed"].n_unique() == 3
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["resolved_spec"]["source"]["query"] == sql
