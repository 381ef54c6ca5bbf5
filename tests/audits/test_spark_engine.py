"""The Spark engine (local mode) gives the same tables as the DuckDB engine on the same data: the fiber audit,
the replay on DuckDB's own splits, and whole specs run through the runner (Tox21 on the real mirror)."""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from dcaudit.audits.evidence import EvidenceMap, parse_fiber_rule
from dcaudit.audits.fibers import AuditLabels, audit_fibers
from dcaudit.audits.replay import ReplayConfig, fiber_replay
from dcaudit.claims import parse_claim
from dcaudit.config import Settings, load_settings
from dcaudit.errors import InputError, MissingExtraError
from tests.conftest import MIRROR, mirror_path

pytest.importorskip("pyspark")  # the spark extra; `make install` installs it
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("Spark needs a Java 17+ runtime (`java` not found)", allow_module_level=True)
spark_engine = pytest.importorskip("dcaudit.audits.spark_engine")

N = 4000


@pytest.fixture(scope="module")
def spark():  # noqa: ANN201
    # Tiny tables: whole-stage code generation would compile more Java than the queries take to run.
    s = spark_engine.session("local[2]", conf={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false",
                                               "spark.sql.codegen.wholeStage": "false"})
    yield s


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Binary and numeric evidence with missing, NaN and infinite values, string ids, a claim that is sometimes
    NULL; written as two Parquet files so that Spark reads it in more than one partition."""
    folder = tmp_path_factory.mktemp("spark")
    for part in (0, 1):
        duckdb.sql(f"""COPY (SELECT 'c' || lpad(CAST(i AS VARCHAR), 5, '0') AS cid,
                        CASE WHEN i % 97 = 0 THEN NULL ELSE CAST(hash(i, 1) % 2 AS TINYINT) END AS a,
                        CAST(hash(i, 2) % 3 AS INTEGER) AS b,
                        hash(i, 3) % 2 = 0 AS c,
                        CASE WHEN i % 89 = 0 THEN 'NaN'::DOUBLE WHEN i % 83 = 0 THEN 'inf'::DOUBLE
                             ELSE (hash(i, 4) % 1000) / 250.0 END AS x,
                        CASE WHEN i % 101 = 0 THEN NULL
                             ELSE CAST(hash(i, 1) % 2 = 1 AND (hash(i, 5) % 10 < 3 OR hash(i, 2) % 3 = 2) AS INTEGER)
                        END AS y,
                        'it''s' AS label
                      FROM range({part * N // 2}, {(part + 1) * N // 2}) t(i)) TO '{folder}/part{part}.parquet'
                      (FORMAT parquet)""")
    return folder


def _duck(folder: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet('{folder}/*.parquet')")
    return con


def _assert_same(a: pa.Table, b: pa.Table) -> None:
    assert a.schema.equals(b.schema), (a.schema, b.schema)
    assert a.num_rows == b.num_rows
    for name in a.column_names:
        for u, v in zip(a[name].to_pylist(), b[name].to_pylist(), strict=True):
            if isinstance(u, float) and isinstance(v, float):
                assert (math.isnan(u) and math.isnan(v)) or u == pytest.approx(v, rel=1e-12, abs=1e-15), name
            elif isinstance(u, list):
                assert len(u) == len(v) and all((math.isnan(p) and math.isnan(q)) or p == pytest.approx(q)
                                                for p, q in zip(u, v, strict=True)), name
            else:
                assert u == v, name


def _sorted(frame: pl.DataFrame) -> pl.DataFrame:
    """A package table in a canonical row order (float and list columns are values, not keys)."""
    keys = [c for c, t in frame.schema.items() if t != pl.Float64 and not isinstance(t, pl.List) and c != "run_id"]
    return frame.drop("run_id", strict=False).sort(keys, nulls_last=True)


@pytest.mark.parametrize(("columns", "rule", "claim", "missing", "min_support"), [
    (("a", "b", "c"), "exact", "y = 1", "drop", 1),
    (("a", "b"), "exact", "y = 1 and label = 'it''s'", "as-value", 30),
    (("x",), "quantile:7", "y = 1", "drop", 20),
    (("x",), "quantile:5", "y = 1", "as-value", 1),
    (("x", "b"), "width:0.5", "x + b > 2.5", "drop", 5),
])
def test_fiber_audit_matches_duckdb(spark, table: Path, columns, rule, claim, missing, min_support) -> None:  # noqa: ANN001
    evidence = EvidenceMap(columns, parse_fiber_rule(rule), missing)
    parsed = parse_claim(claim)
    labels = AuditLabels("cand.parquet", "audit")
    duck = audit_fibers(_duck(table), "t", id_column="cid", evidence=evidence, claim=parsed,
                        min_support=min_support, labels=labels)
    sp = spark_engine.audit_fibers_spark(spark, spark_engine.read_table(spark, table), id_column="cid",
                                         evidence=evidence, claim=parsed, min_support=min_support, labels=labels)
    assert duck.summary.num_rows == 1 and duck.summary["n_candidates"][0].as_py() > 0
    _assert_same(sp.summary, duck.summary)
    _assert_same(sp.fibers, duck.fibers)
    assert duck.candidates is not None and sp.candidates is not None
    assert sp.candidates.num_rows == N
    _assert_same(sp.candidates, duck.candidates)


@pytest.mark.parametrize(("columns", "rule", "config"), [
    (("a", "b", "c"), "exact", ReplayConfig(seeds=4, seed_offset=3, min_support=20)),
    (("a", "b", "c"), "exact", ReplayConfig(seeds=3, min_support=10, mode="calibrated", epsilon=0.2)),
    (("x",), "quantile:6", ReplayConfig(seeds=5, seed_offset=-2, calibration_fraction=0.3, min_support=5,
                                        mode="familywise")),
])
def test_replay_draws_duckdbs_splits(spark, table: Path, columns, rule, config) -> None:  # noqa: ANN001
    evidence = EvidenceMap(columns, parse_fiber_rule(rule))
    claim = parse_claim("y = 1")
    labels = AuditLabels("cand.parquet", "replay")
    duck = fiber_replay(_duck(table), "t", id_column="cid", evidence=evidence, claim=claim, config=config,
                        labels=labels).replay
    sp = spark_engine.replay_fibers_spark(spark, spark_engine.read_table(spark, table), id_column="cid",
                                          evidence=evidence, claim=claim, config=config, labels=labels)
    assert duck.num_rows == 4 * config.seeds + 4  # policies × seeds, plus one summary row per policy
    assert duck["n_excluded"][0].as_py() > 0
    _assert_same(sp, duck)


def test_a_replay_with_an_empty_half_is_refused_on_spark(spark, table: Path) -> None:  # noqa: ANN001
    """Spark's split counts go through the same check as DuckDB's: all candidates in calibration is an error."""
    config = ReplayConfig(seeds=3, calibration_fraction=0.999999, min_support=1)
    kept = _duck(table).execute("SELECT count(*) FROM t WHERE a IS NOT NULL AND y IS NOT NULL").fetchall()[0][0]
    message = f"^seed 0: the {kept} complete cases give {kept} calibration and 0 test candidates"
    for run in (lambda: fiber_replay(_duck(table), "t", id_column="cid", evidence=EvidenceMap(("a",)),
                                     claim=parse_claim("y = 1"), config=config, labels=AuditLabels("s", "r")),
                lambda: spark_engine.replay_fibers_spark(spark, spark_engine.read_table(spark, table), id_column="cid",
                                                         evidence=EvidenceMap(("a",)), claim=parse_claim("y = 1"),
                                                         config=config, labels=AuditLabels("s", "r"))):
        with pytest.raises(InputError, match=message):
            run()


def test_split_pass_falls_back_to_the_sql_split(spark, table: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    """An executor whose DuckDB would not hash by the numpy formula counts the split with DuckDB's SQL."""
    count = spark_engine.PartitionSplitCounts(("k0",), 1, 3, 500_000, duckdb.__version__)
    batch = pa.record_batch({"candidate_id": [f"m{i}" for i in range(200)], "k0": [i % 3 for i in range(200)],
                             "y": [i % 4 == 0 for i in range(200)], "audited": [i % 50 != 0 for i in range(200)]})
    fast = pa.Table.from_batches(list(count(iter([batch]))))
    monkeypatch.setattr(spark_engine, "split_formula_matches", lambda con: False)
    slow = pa.Table.from_batches(list(count(iter([batch]))))
    assert fast.num_rows > 6 and fast.sort_by("seed_index").equals(slow.sort_by("seed_index"))
    assert pc.sum(fast.filter(pc.equal(fast["seed_index"], -2))["n"]).as_py() == 4
    with pytest.raises(RuntimeError, match="same dcaudit environment"):
        list(spark_engine.PartitionSplitCounts(("k0",), 0, 1, 1, "0.0.0")(iter([batch])))


def test_bad_claim_names_the_problem(spark, table: Path) -> None:  # noqa: ANN001
    df = spark_engine.read_table(spark, table)
    with pytest.raises(Exception, match="nope"):
        spark_engine.audit_fibers_spark(spark, df, id_column="cid", evidence=EvidenceMap(("a",)),
                                        claim=parse_claim("nope = 1"), labels=AuditLabels("s", "a"))
    with pytest.raises(InputError, match="unknown file type"):
        spark_engine.read_table(spark, table / "x.xlsx")


def test_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real = builtins.__import__

    def fake(name, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if name == "pyspark" or name.startswith("pyspark."):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake)
    import importlib

    monkeypatch.setattr(importlib, "import_module", lambda name, *a: fake(name))
    with pytest.raises(MissingExtraError, match=r"dcaudit\[spark\]"):
        spark_engine.session()


def test_cli_engine_spark_writes_the_same_package(spark, table: Path, tmp_path: Path,  # noqa: ANN001
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """audit and replay --engine spark go through the runner: a CSV (read by the input contract, shipped to
    Spark as Arrow) gives the DuckDB engine's package; tolerance windows run on DuckDB, with a note."""
    import pyarrow.parquet as pq
    from click.testing import CliRunner

    from dcaudit.cli import cli

    monkeypatch.setenv("DCAUDIT_HOME", str(tmp_path / "home"))
    csv = tmp_path / "cand.csv"
    duckdb.sql(f"COPY (SELECT * FROM read_parquet('{table}/*.parquet') ORDER BY cid) TO '{csv}' (HEADER)")
    runs = {
        "audit": ["audit", str(csv), "--id", "cid", "--evidence", "a,b,c", "--claim", "y = 1", "--min-support", "10"],
        "replay": ["replay", str(csv), "--id", "cid", "--evidence", "a,b", "--claim", "y = 1", "--seeds", "3",
                   "--mode", "calibrated", "--epsilon", "0.2", "--min-support", "20"],
        "rows": ["replay", str(table / "part0.parquet"), "--evidence", "x", "--fiber-rule", "quantile:4",
                 "--claim", "y = 1", "--seeds", "2"],  # no --id: the candidate is the file's data row
    }
    for name, args in runs.items():
        out = {}
        for engine in ("duckdb", "spark"):
            res = CliRunner().invoke(cli, [*args, "--engine", engine, "--quiet", "--no-report",
                                           "--out", str(tmp_path / f"{name}-{engine}")])
            assert res.exit_code == 0, res.output
            out[engine] = {p.stem: pl.from_arrow(pq.read_table(p)) for p in (tmp_path / f"{name}-{engine}").glob("*.parquet")}
        assert set(out["spark"]) == set(out["duckdb"]) >= {"summary", "fibers", "candidates"}
        for t in out["duckdb"]:
            assert _sorted(out["spark"][t]).equals(_sorted(out["duckdb"][t])), (name, t)
    res = CliRunner().invoke(cli, ["replay", str(csv), "--id", "cid", "--evidence", "x", "--claim", "y = 1",
                                   "--tolerance", "0.1", "--seeds", "2", "--engine", "spark", "--json", "--no-report",
                                   "--out", str(tmp_path / "w")])
    assert res.exit_code == 0, res.output
    manifest = (tmp_path / "w" / "manifest.json").read_text()
    assert '"engine": "spark"' in manifest and "error windows (tolerance 0.1) ran on DuckDB" in manifest


def test_tox21_spec_on_spark_matches_duckdb(spark, tmp_path: Path) -> None:  # noqa: ANN001
    """The built-in Tox21 spec, whole (its 100-seed replay, compare_modes, completion): the Spark run's summary,
    replay, costs and metrics equal the DuckDB run's, and the published figures hold on both."""
    from dcaudit import api

    mirror_path("tox21/tox21.csv")
    base = load_settings()
    settings = Settings(home=tmp_path / "home", mirror=MIRROR, memory_limit=base.memory_limit, threads=base.threads,
                        offline=True)
    duck = api.run("tox21", settings=settings, force=True)
    sp = api.run("tox21", settings=settings, force=True, engine="spark")
    assert duck.manifest["engine"] == "duckdb" and sp.manifest["engine"] == "spark"
    assert sp.manifest["spark_master"].startswith("local")
    for name in ("summary", "fibers", "candidates", "replay", "costs", "metrics"):
        assert _sorted(sp.tables[name]).equals(_sorted(duck.tables[name])), name
    row = sp.summary.filter(pl.col("audit_id") == "nr7-p53").row(0, named=True)
    assert (row["n_candidates"], row["n_fibers"], row["n_mixed_fibers"]) == (4391, 43, 14)
    assert (row["certified_true"], row["certified_false"], row["ambiguous"]) == (8, 86, 4297)
    mean = sp.replay.filter(pl.col("seed").is_null() & (pl.col("policy") == "fiber_majority")).row(0, named=True)
    assert round(100 * mean["false_decision_rate"], 3) == 1.216
    cta = sp.replay.filter(pl.col("seed").is_null() & (pl.col("policy") == "certify_then_acquire")).row(0, named=True)
    assert round(cta["break_even_price"], 4) == 0.0120
    assert any("stage completion ran on DuckDB" in n for n in sp.notes)
    assert any("label-noise split" in n and "ran on DuckDB" in n for n in sp.notes)


def test_configured_spark_is_not_forced_into_local_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("SPARK_REMOTE", "PYSPARK_GATEWAY_PORT", "SPARK_CONF_DIR", "SPARK_HOME"):
        monkeypatch.delenv(var, raising=False)
    assert not spark_engine.spark_configured()
    (tmp_path / "spark-defaults.conf").write_text("spark.executor.memory 4g\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    assert not spark_engine.spark_configured()
    (tmp_path / "spark-defaults.conf").write_text("spark.executor.memory 4g\nspark.master   yarn\n")
    assert spark_engine.spark_configured()
    monkeypatch.delenv("SPARK_CONF_DIR")
    monkeypatch.setenv("SPARK_REMOTE", "sc://example:15002")
    assert spark_engine.spark_configured()


def test_audits_leave_no_temp_views(spark, table: Path) -> None:  # noqa: ANN001
    before = {t.name for t in spark.catalog.listTables()}
    df = spark_engine.read_table(spark, table)
    spark_engine.audit_fibers_spark(spark, df, id_column="cid", evidence=EvidenceMap(("a",)),
                                    claim=parse_claim("y = 1"), labels=AuditLabels("s", "a"))
    spark_engine.replay_fibers_spark(spark, df, id_column="cid", evidence=EvidenceMap(("a",)),
                                     claim=parse_claim("y = 1"), config=ReplayConfig(seeds=2, min_support=5),
                                     labels=AuditLabels("s", "r"))
    assert {t.name for t in spark.catalog.listTables()} == before
