"""The fiber audit and the fiber replay on Apache Spark, for tables beyond one machine (``--engine spark``).

The division of work is the one a cluster wants: every pass over *candidates* (the evidence of each
row, grouping it into fibers, and the candidates × seeds pass of the replay) runs in Spark; what comes
back to the driver is one row per fiber (the audit) or per seed × fiber (the replay), as Arrow. Those
few rows are finished by the same DuckDB code as the single-machine engine
(:func:`dcaudit.audits.fibers.summarise_groups`, the replay's per-seed SQL and policy table), so the
two engines produce the same tables by construction, and a test compares them on the same data.

Splits. DuckDB's ``hash`` cannot be computed in Spark, so the replay's calibration split is either
Spark's own (``xxhash64(candidate_id, seed)``: reproducible in Spark, statistically the same design
as DuckDB's, but other draws — per-seed rows differ, means over 100 seeds agree within their
spread), or given as data: ``splits`` (candidate_id, seed, calibration), e.g. exported from
:func:`dcaudit.audits.replay.calibration_members`, in which case both engines replay exactly the
same splits and agree to the last digit.

Quantile cuts use Spark's exact ``percentile`` (the same interpolation as DuckDB's
``quantile_cont``); it gathers the column on one executor, fine up to ~1e9 doubles.

Where Spark runs: ``session()`` uses whatever Spark is configured (``spark-submit --master …``,
``spark-defaults.conf`` in ``$SPARK_CONF_DIR``, or Spark Connect via ``SPARK_REMOTE=sc://host:15002``)
and falls back to ``local[*]``. See docs/scale.md.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from dcaudit.audits.evidence import EvidenceMap, FiberRule, bin_sql
from dcaudit.audits.fibers import AuditLabels, FiberAudit, _head, summarise_groups
from dcaudit.claims import Claim, Node, SqlDialect, check_columns, render
from dcaudit.errors import InputError, SpecError, require
from dcaudit.splits import SPLIT_BUCKETS

_counter = itertools.count()
ROW_ID = "__row"


# ---------------------------------------------------------------------------------------------------
# Session and input.

def session(master: str | None = None, *, app_name: str = "dcaudit", conf: dict[str, str] | None = None) -> Any:
    """A SparkSession: the configured one (spark-submit, spark-defaults.conf, SPARK_REMOTE), else local[*]."""
    require("pyspark", "spark")
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    elif not spark_configured():
        # Local mode: few shuffle partitions (the default 200 is for clusters) and no web UI.
        builder = (builder.master("local[*]").config("spark.sql.shuffle.partitions", "8")
                   .config("spark.ui.enabled", "false"))
    # NULL (not an error) for a claim that cannot be evaluated on a row, as in DuckDB; Arrow transfers.
    builder = (builder.config("spark.sql.ansi.enabled", "false")
               .config("spark.sql.execution.arrow.pyspark.enabled", "true"))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def spark_configured() -> bool:
    """Whether the environment already says where Spark runs (then dcaudit must not force local mode).

    Spark's own settings, read here because they are Spark's, not dcaudit's: Spark Connect
    (``SPARK_REMOTE``), a driver launched by spark-submit (``PYSPARK_GATEWAY_PORT``), or ``spark.master``
    in ``spark-defaults.conf`` under ``$SPARK_CONF_DIR`` or ``$SPARK_HOME/conf``.
    """
    import os
    import re

    env = os.environ
    if env.get("SPARK_REMOTE") or env.get("PYSPARK_GATEWAY_PORT"):
        return True
    dirs = [env.get("SPARK_CONF_DIR"), str(Path(env["SPARK_HOME"]) / "conf") if env.get("SPARK_HOME") else None]
    for d in filter(None, dirs):
        conf = Path(d) / "spark-defaults.conf"
        if conf.is_file() and re.search(r"^\s*spark\.(master|remote)\s", conf.read_text(errors="replace"), re.M):
            return True
    return False


def read_table(spark: Any, path: Path | str, *, row_id: bool = False) -> Any:
    """A DataFrame over a Parquet or CSV file (a path Spark can reach: local, HDFS, S3, …)."""
    text = str(path)
    low = text.lower()
    try:
        if low.endswith((".parquet", ".pq")) or Path(text).is_dir() or Path(text).suffix == "":
            df = spark.read.parquet(text)
        elif low.endswith((".csv", ".csv.gz", ".tsv", ".txt")):
            df = spark.read.csv(text, header=True, inferSchema=True, sep="\t" if low.endswith(".tsv") else ",")
        else:
            raise InputError("unknown file type; use Parquet or CSV", file=text)
    except InputError:
        raise
    except Exception as exc:  # Spark raises its own analysis errors
        raise InputError(f"Spark cannot read it: {exc}", file=text) from exc
    if row_id:
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        # 1-based data row in file order (as DuckDB's __row): the increasing id follows partition order.
        order = Window.orderBy(F.monotonically_increasing_id())
        df = df.select(F.row_number().over(order).cast("bigint").alias(ROW_ID), "*")
    return df


# ---------------------------------------------------------------------------------------------------
# Spark SQL from the same claim tree and fiber rules as the DuckDB engine.

def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


# Spark SQL writes identifiers in backticks and escapes quotes in strings with a backslash.
SPARK = SqlDialect("spark", quote, lambda text: "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'")


def claim_sql(node: Node) -> str:
    """The claim rendered for Spark SQL from the same validated tree as DuckDB's."""
    return render(node, SPARK)


def _bin_sql(column: str, rule: FiberRule, cuts: list[float] | None) -> str:
    if rule.is_window:
        raise SpecError(f"fiber rule {rule} gives each candidate its own window; the Spark engine audits "
                        "partitions (exact, quantile, width)")
    return bin_sql(column, rule, cuts, quote)


@dataclass(frozen=True)
class SparkEvidence:
    view: str                      # temp view: candidate_id, k0..kn, x0, y, reason
    key_columns: tuple[str, ...]
    cuts: dict[str, list[float]]
    source_view: str = ""          # the input's temp view (dropped with ``view`` by drop_views)


def drop_views(spark: Any, *names: str) -> None:
    """Temp views live as long as the session: drop the ones an audit registered."""
    for name in names:
        if name:
            spark.catalog.dropTempView(name)


def _quantile_cuts(spark: Any, view: str, column: str, k: int, where: str) -> list[float]:
    probs = ", ".join(f"{i / k!r}" for i in range(1, k))
    row = spark.sql(f"SELECT percentile({quote(column)}, array({probs})) AS q FROM {view} "
                    f"WHERE {quote(column)} IS NOT NULL AND {where}").collect()[0][0]
    return sorted({float(c) for c in row}) if row else []


def evidence_view(spark: Any, df: Any, *, id_column: str, evidence: EvidenceMap, claim: Claim) -> SparkEvidence:
    """Register the evidence of every candidate as a Spark temp view (the twin of ``evidence_select``)."""
    check_columns((id_column, *evidence.columns), df.columns, what="the evidence map")
    check_columns(claim.columns, df.columns, what=f"claim {claim.text!r}")
    tag = next(_counter)
    src, ev = f"dcaudit_src_{tag}", f"dcaudit_ev_{tag}"
    df.createOrReplaceTempView(src)
    cs = claim_sql(claim.tree)
    complete = " AND ".join(f"{quote(c)} IS NOT NULL" for c in evidence.columns)
    cuts: dict[str, list[float]] = {}
    if evidence.rule.kind == "quantile":
        where = f"({cs}) IS NOT NULL" + (f" AND {complete}" if evidence.missing == "drop" else "")
        for col in evidence.columns:
            cuts[col] = _quantile_cuts(spark, src, col, int(evidence.rule.param or 0), where)
    keys = tuple(f"k{i}" for i in range(len(evidence.columns)))
    parts = [f"{_bin_sql(c, evidence.rule, cuts.get(c))} AS {k}" for c, k in zip(evidence.columns, keys, strict=True)]
    missing = "FALSE" if evidence.missing == "as-value" else f"NOT ({complete})"
    # the same reasons, in the same order, as dcaudit.audits.evidence.evidence_select
    claim_nulls = " OR ".join(f"{quote(c)} IS NULL" for c in claim.columns) or "FALSE"
    first = quote(evidence.columns[0])
    x0 = f"try_cast({first} AS DOUBLE)" if evidence.rule.kind != "exact" else "CAST(NULL AS DOUBLE)"
    spark.sql(
        f"SELECT CAST({quote(id_column)} AS STRING) AS candidate_id, {', '.join(parts)}, {x0} AS x0, "
        f"CAST({cs} AS BOOLEAN) AS y, CASE WHEN {missing} THEN 'evidence_missing' "
        f"WHEN {claim_nulls} THEN 'claim_missing' WHEN ({cs}) IS NULL THEN 'claim_undefined' END AS reason "
        f"FROM {src}"
    ).createOrReplaceTempView(ev)
    return SparkEvidence(ev, keys, cuts, src)


def _to_arrow(df: Any) -> pa.Table:
    """Spark -> Arrow (toArrow on Spark >= 4, the internal collector on 3.5)."""
    if hasattr(df, "toArrow"):
        return df.toArrow()
    return pa.Table.from_batches(df._collect_as_arrow())  # pragma: no cover - Spark 3.5


def _from_arrow(spark: Any, table: pa.Table) -> Any:
    try:
        return spark.createDataFrame(table)
    except (TypeError, ValueError):  # pragma: no cover - Spark 3.5 takes pandas
        return spark.createDataFrame(table.to_pandas())


# ---------------------------------------------------------------------------------------------------
# The fiber audit.

def audit_fibers_spark(
    spark: Any,
    df: Any,
    *,
    id_column: str,
    evidence: EvidenceMap,
    claim: Claim,
    min_support: int = 1,
    labels: AuditLabels,
    with_candidates: bool = True,
    con: duckdb.DuckDBPyConnection | None = None,
) -> FiberAudit:
    """:func:`dcaudit.audits.fibers.audit_fibers` with the grouping (and the candidates join) in Spark."""
    if min_support < 1:
        raise SpecError(f"min_support must be >= 1, got {min_support}")
    if evidence.rule.is_window:
        raise SpecError(f"fiber rule {evidence.rule} is a window rule; use the sensitivity audit for it")
    ev = evidence_view(spark, df, id_column=id_column, evidence=evidence, claim=claim)
    try:
        return _audit_spark(spark, ev, evidence=evidence, claim=claim, min_support=min_support, labels=labels,
                            with_candidates=with_candidates, con=con)
    finally:
        drop_views(spark, ev.view, ev.source_view)


def _audit_spark(spark: Any, ev: SparkEvidence, *, evidence: EvidenceMap, claim: Claim, min_support: int,
                 labels: AuditLabels, with_candidates: bool, con: duckdb.DuckDBPyConnection | None) -> FiberAudit:
    keys = ", ".join(ev.key_columns)
    lohi = ("CAST(NULL AS DOUBLE) AS lo, CAST(NULL AS DOUBLE) AS hi" if evidence.rule.kind == "exact"
            else "min(x0) AS lo, max(x0) AS hi")
    try:
        groups = _to_arrow(spark.sql(
            f"SELECT {keys}, reason IS NULL AS audited, count(*) AS n, CAST(count_if(y) AS BIGINT) AS n_true, "
            f"{lohi} FROM {ev.view} GROUP BY {keys}, reason IS NULL"))
    except Exception as exc:  # AnalysisException & co: the claim or evidence does not evaluate
        raise InputError(f"cannot evaluate the claim {claim.text!r} or the evidence on Spark: {exc}") from exc
    own = con is None
    con = con or duckdb.connect()
    tag = next(_counter)
    grp_t, fib_t = f"_sgrp_{tag}", f"_sfib_{tag}"
    try:
        con.register(f"{grp_t}_arrow", groups)
        con.execute(f"CREATE TEMP TABLE {grp_t} AS SELECT * FROM {grp_t}_arrow")
        con.unregister(f"{grp_t}_arrow")
        summary, fibers = summarise_groups(con, grp_t, ev.key_columns, evidence=evidence, claim=claim,
                                           min_support=min_support, labels=labels, fibers_table=fib_t)
        candidates = None
        if with_candidates:
            # Fiber keys and statuses go to Spark (one row per fiber); the join runs there.
            fib = con.sql(f"SELECT {keys}, fiber_key, status FROM {fib_t}").to_arrow_table()
            fib_view = f"dcaudit_fib_{tag}"
            _from_arrow(spark, fib).createOrReplaceTempView(fib_view)
            on = " AND ".join(f"e.{k} <=> f.{k}" for k in ev.key_columns)
            joined = _to_arrow(spark.sql(
                f"SELECT e.candidate_id, f.fiber_key, e.y AS claim_value, coalesce(f.status, 'excluded') AS status, "
                f"e.reason AS excluded_reason FROM {ev.view} e LEFT JOIN {fib_view} f "
                f"ON e.reason IS NULL AND {on}"))
            con.register(f"{grp_t}_cand", joined)
            candidates = con.sql(
                f"""SELECT {_head(labels, claim, evidence)}, CAST(candidate_id AS VARCHAR) AS candidate_id,
                           CAST(fiber_key AS BIGINT) AS fiber_key, CAST(claim_value AS BOOLEAN) AS claim_value,
                           CAST(status AS VARCHAR) AS status, CAST(excluded_reason AS VARCHAR) AS excluded_reason
                    FROM {grp_t}_cand ORDER BY candidate_id""").to_arrow_table()
            con.unregister(f"{grp_t}_cand")
            drop_views(spark, fib_view)
    finally:
        con.execute(f"DROP TABLE IF EXISTS {grp_t}; DROP TABLE IF EXISTS {fib_t}")
        if own:
            con.close()
    return FiberAudit(summary=summary, fibers=fibers, candidates=candidates)


# ---------------------------------------------------------------------------------------------------
# The fiber replay.

def replay_fibers_spark(
    spark: Any,
    df: Any,
    *,
    id_column: str,
    evidence: EvidenceMap,
    claim: Claim,
    config: Any = None,  # dcaudit.audits.replay.ReplayConfig
    labels: AuditLabels,
    splits: Any = None,
    con: duckdb.DuckDBPyConnection | None = None,
) -> pa.Table:
    """:func:`dcaudit.audits.replay.replay_fibers` with the candidates × seeds pass in Spark.

    ``splits``: None (Spark's xxhash64 split) or calibration membership as an Arrow table or Spark
    DataFrame with columns candidate_id (text), seed, calibration (boolean) — every seed of the
    config must be in it.
    """
    from dcaudit.audits import replay as rp

    config = config or rp.ReplayConfig()
    if evidence.rule.is_window:
        raise SpecError(f"fiber rule {evidence.rule} is a window; the Spark engine replays partitions")
    ev = evidence_view(spark, df, id_column=id_column, evidence=evidence, claim=claim)
    keys = ", ".join(ev.key_columns)
    lo, hi = int(config.seed_offset), int(config.seed_offset) + int(config.seeds)
    tag = next(_counter)
    if splits is None:
        member = (f"pmod(xxhash64(b.candidate_id, s.seed), {SPLIT_BUCKETS}) < {config.threshold}")
        pairs = f"{ev.view} b CROSS JOIN (SELECT id AS seed FROM range({lo}, {hi})) s"
    else:
        split_df = splits if hasattr(splits, "createOrReplaceTempView") else _from_arrow(spark, splits)
        split_view = f"dcaudit_split_{tag}"
        split_df.createOrReplaceTempView(split_view)
        member = "s.calibration"
        pairs = (f"{ev.view} b JOIN {split_view} s ON b.candidate_id = CAST(s.candidate_id AS STRING) "
                 f"AND s.seed >= {lo} AND s.seed < {hi}")
    views = (ev.view, ev.source_view) + ((f"dcaudit_split_{tag}",) if splits is not None else ())
    cols = ", ".join("b." + k for k in ev.key_columns)
    try:
        # The only pass over candidates × seeds: members and trues per (seed, fiber key, half), as in DuckDB.
        counts = _to_arrow(spark.sql(
            f"SELECT CAST(s.seed - {lo} AS BIGINT) AS seed_index, {cols}, {member} AS cal, count(*) AS n, "
            f"CAST(count_if(b.y) AS BIGINT) AS t FROM {pairs} WHERE b.reason IS NULL "
            f"GROUP BY s.seed, {cols}, {member}"))
        n_excluded = int(spark.sql(f"SELECT count(*) FROM {ev.view} WHERE reason IS NOT NULL").collect()[0][0])
    except Exception as exc:
        raise InputError(f"cannot evaluate the claim {claim.text!r} or the evidence on Spark: {exc}") from exc
    finally:
        drop_views(spark, *views)
    own = con is None
    con = con or duckdb.connect()
    name = f"_scounts_{tag}"
    try:
        con.register(name, counts)
        # Fiber ids: the dense rank of the key, as the DuckDB replay numbers them; then the same reduction.
        arrays = con.execute(
            f"SELECT seed_index, CAST(dense_rank() OVER (ORDER BY {keys}) AS BIGINT) AS f, cal, n, t "
            f"FROM {name}").fetchnumpy()
    finally:
        con.unregister(name)
        if own:
            con.close()
    names = rp.ReplayLabels(labels.source, labels.audit_id, claim.text, evidence.label, str(evidence.rule), "fiber",
                            n_excluded)
    outcomes = rp._fiber_outcomes({k: np.asarray(v) for k, v in arrays.items()}, config, labels.model)
    return rp._replay_table(outcomes, config, names, pooled=False)
