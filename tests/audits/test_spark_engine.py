"""The Spark engine (local mode) gives the same tables as the DuckDB engine on the same data."""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from dcaudit.audits.evidence import EvidenceMap, parse_fiber_rule
from dcaudit.audits.fibers import AuditLabels, audit_fibers
from dcaudit.audits.replay import ReplayConfig, calibration_members, replay_fibers
from dcaudit.claims import parse_claim
from dcaudit.errors import InputError, MissingExtraError

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
    """Binary and numeric evidence with missing values, string ids, a claim that is sometimes NULL."""
    path = tmp_path_factory.mktemp("spark") / "cand.parquet"
    duckdb.sql(f"""COPY (SELECT 'c' || lpad(CAST(i AS VARCHAR), 5, '0') AS cid,
                    CASE WHEN i % 97 = 0 THEN NULL ELSE CAST(hash(i, 1) % 2 AS TINYINT) END AS a,
                    CAST(hash(i, 2) % 3 AS INTEGER) AS b,
                    hash(i, 3) % 2 = 0 AS c,
                    (hash(i, 4) % 1000) / 250.0 AS x,
                    CASE WHEN i % 101 = 0 THEN NULL
                         ELSE CAST(hash(i, 1) % 2 = 1 AND (hash(i, 5) % 10 < 3 OR hash(i, 2) % 3 = 2) AS INTEGER)
                    END AS y,
                    'it''s' AS label
                  FROM range({N}) t(i)) TO '{path}' (FORMAT parquet)""")
    return path


def _duck(path: Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet('{path}')")
    return con


def _assert_same(a: pa.Table, b: pa.Table) -> None:
    assert a.column_names == b.column_names
    assert a.num_rows == b.num_rows
    for name in a.column_names:
        x, y = a[name].to_pylist(), b[name].to_pylist()
        for u, v in zip(x, y, strict=True):
            if isinstance(u, float) and isinstance(v, float):
                assert (math.isnan(u) and math.isnan(v)) or u == pytest.approx(v, rel=1e-12, abs=1e-15), name
            elif isinstance(u, list):
                assert len(u) == len(v) and all((math.isnan(p) and math.isnan(q)) or p == pytest.approx(q)
                                                for p, q in zip(u, v, strict=True)), name
            else:
                assert u == v, name


@pytest.mark.parametrize(("columns", "rule", "claim", "missing", "min_support"), [
    (("a", "b", "c"), "exact", "y = 1", "drop", 1),
    (("a", "b"), "exact", "y = 1 and label = 'it''s'", "as-value", 30),
    (("x",), "quantile:7", "y = 1", "drop", 20),
    (("x", "b"), "width:0.5", "x + b > 2.5", "drop", 5),
])
def test_fiber_audit_matches_duckdb(spark, table: Path, columns, rule, claim, missing, min_support) -> None:  # noqa: ANN001
    evidence = EvidenceMap(columns, parse_fiber_rule(rule), missing)
    parsed = parse_claim(claim)
    labels = AuditLabels("cand.parquet", "audit")
    duck = audit_fibers(_duck(table), "t", id_column="cid", evidence=evidence, claim=parsed,
                        min_support=min_support, labels=labels)
    df = spark_engine.read_table(spark, table)
    sp = spark_engine.audit_fibers_spark(spark, df, id_column="cid", evidence=evidence, claim=parsed,
                                         min_support=min_support, labels=labels)
    assert duck.summary.num_rows == 1 and duck.summary["n_candidates"][0].as_py() > 0
    _assert_same(sp.summary, duck.summary)
    _assert_same(sp.fibers, duck.fibers)
    assert duck.candidates is not None and sp.candidates is not None
    assert sp.candidates.num_rows == N
    _assert_same(sp.candidates, duck.candidates)


def test_replay_matches_duckdb_on_the_same_splits(spark, table: Path) -> None:  # noqa: ANN001
    evidence = EvidenceMap(("a", "b", "c"))
    claim = parse_claim("y = 1")
    labels = AuditLabels("cand.parquet", "replay")
    config = ReplayConfig(seeds=4, seed_offset=3, min_support=20)
    con = _duck(table)
    duck = replay_fibers(con, "t", id_column="cid", evidence=evidence, claim=claim, config=config, labels=labels)
    splits = calibration_members(con, "t", id_column="cid", config=config)
    sp = spark_engine.replay_fibers_spark(spark, spark_engine.read_table(spark, table), id_column="cid",
                                          evidence=evidence, claim=claim, config=config, labels=labels,
                                          splits=splits)
    assert duck.num_rows == 4 * 4 + 4  # policies × seeds, plus one summary row per policy
    _assert_same(sp, duck)
    # calibrated mode goes through the Clopper–Pearson bound: the same on both engines too
    cal_cfg = ReplayConfig(seeds=3, min_support=10, mode="calibrated", epsilon=0.2)
    duck = replay_fibers(con, "t", id_column="cid", evidence=evidence, claim=claim, config=cal_cfg, labels=labels)
    sp = spark_engine.replay_fibers_spark(
        spark, spark_engine.read_table(spark, table), id_column="cid", evidence=evidence, claim=claim,
        config=cal_cfg, labels=labels, splits=calibration_members(con, "t", id_column="cid", config=cal_cfg))
    _assert_same(sp, duck)


def test_spark_native_split_is_a_half_split(spark, table: Path) -> None:  # noqa: ANN001
    config = ReplayConfig(seeds=3, min_support=20)
    out = spark_engine.replay_fibers_spark(spark, spark_engine.read_table(spark, table), id_column="cid",
                                           evidence=EvidenceMap(("a", "b")), claim=parse_claim("y = 1"),
                                           config=config, labels=AuditLabels("s", "r"))
    rows = [r for r in out.to_pylist() if r["seed"] is not None and r["policy"] == "fiber_majority"]
    assert len(rows) == 3
    audited = duckdb.sql(f"SELECT count(*) FROM '{table}' WHERE a IS NOT NULL AND y IS NOT NULL").fetchall()[0][0]
    for r in rows:
        assert r["n_calibration"] + r["n_test"] == audited
        assert abs(r["n_calibration"] / audited - 0.5) < 0.05


def test_bad_claim_names_the_problem(spark, table: Path) -> None:  # noqa: ANN001
    df = spark_engine.read_table(spark, table)
    with pytest.raises(Exception, match="nope"):
        spark_engine.audit_fibers_spark(spark, df, id_column="cid", evidence=EvidenceMap(("a",)),
                                        claim=parse_claim("nope = 1"), labels=AuditLabels("s", "a"))
    with pytest.raises(InputError, match="unknown file type"):
        spark_engine.read_table(spark, table.with_suffix(".xlsx"))


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
    import pyarrow.parquet as pq
    from click.testing import CliRunner

    from dcaudit.cli import cli

    monkeypatch.setenv("DCAUDIT_HOME", str(tmp_path / "home"))
    args = ["audit", str(table), "--id", "cid", "--evidence", "a,b,c", "--claim", "y = 1", "--min-support", "10",
            "--quiet"]
    out = {}
    for engine in ("duckdb", "spark"):
        res = CliRunner().invoke(cli, [*args, "--engine", engine, "--out", str(tmp_path / engine)])
        assert res.exit_code == 0, res.output
        out[engine] = {t: pq.read_table(tmp_path / engine / f"{t}.parquet").drop(["run_id"])
                       for t in ("summary", "fibers", "candidates")}
    for t in ("summary", "fibers", "candidates"):
        _assert_same(out["spark"][t], out["duckdb"][t])
    res = CliRunner().invoke(cli, ["replay", str(table), "--id", "cid", "--evidence", "a,b", "--claim", "y = 1",
                                   "--seeds", "3", "--engine", "spark", "--out", str(tmp_path / "replay")])
    assert res.exit_code == 0, res.output
    replay = pq.read_table(tmp_path / "replay" / "replay.parquet")
    assert replay.num_rows == 4 * 3 + 4
    assert "Spark's xxhash64" in res.output
    res = CliRunner().invoke(cli, ["replay", str(table), "--id", "cid", "--evidence", "x", "--claim", "y = 1",
                                   "--tolerance", "0.1", "--engine", "spark", "--out", str(tmp_path / "w")])
    assert res.exit_code != 0 and "--engine duckdb" in res.output


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
