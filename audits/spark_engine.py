"""The Spark engine: the candidate-scale passes of :class:`dcaudit.engine.Engine` on Apache Spark
(``--engine spark``), for tables beyond one machine.

Spark runs every pass over candidates — quantile cuts, the grouping into fibers, the join of candidates to
their fibers, and the candidates × seeds split counts of the replay — over the same prepared tables the
driver registered in DuckDB (Parquet files Spark reads itself; other inputs as the Arrow DuckDB holds).
The evidence SELECT is the DuckDB engine's, built once by :func:`dcaudit.audits.evidence.evidence_select`
in the Spark dialect (:data:`dcaudit.claims.SPARK`). What comes back to the driver is one row per fiber
(per fiber × seed for the replay), which the shared code finishes on the driver's DuckDB exactly as for
the DuckDB engine, so both engines write the same tables.

Splits. The replay's calibration split is DuckDB's ``hash(hash(CAST(id AS VARCHAR)), seed)`` on every
engine (:mod:`dcaudit.splits`); its string hash cannot be written in Spark SQL. Executors run the same
Python environment as the driver, so the split pass is a ``mapInArrow`` over partitions: an in-process
DuckDB hashes each partition's ids (DuckDB's own function, not a re-implementation), numpy counts the
calibration members per seed and local fiber with :func:`dcaudit.audits.replay.split_counts` (the DuckDB
engine's own fast path: no candidate × seed rows), and Spark sums the per-partition counts by fiber key.
A different DuckDB version on an executor is an error, not a silently different split.

Quantile cuts use Spark's exact ``percentile`` (the linear interpolation of DuckDB's ``quantile_cont``;
it gathers each column on one executor, fine up to ~1e9 doubles). A cut may differ from DuckDB's in the
last bit (DuckDB interpolates with a fused multiply-add); bins differ only for a value within that bit.

Where Spark runs: :func:`session` uses whatever Spark is configured (``spark-submit --master …``,
``spark-defaults.conf`` in ``$SPARK_CONF_DIR``, or Spark Connect via ``SPARK_REMOTE=sc://host:15002``)
and falls back to ``local[*]``. See docs/scale.md.
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb
import numpy as np
import pyarrow as pa

from dcaudit.audits.fibers import STATUS_ENUM, AuditLabels, FiberAudit, audit_fibers
from dcaudit.audits.replay import (
    ReplayConfig,
    fiber_replay,
    split_counts,
    split_formula_matches,
    split_halves,
)
from dcaudit.claims import SPARK, Claim, quote_identifier
from dcaudit.errors import InputError, require
from dcaudit.evidence_map import EvidenceMap
from dcaudit.inputs import ROW
from dcaudit.splits import split_sql

if TYPE_CHECKING:
    from dcaudit.evidence_map import EvidenceSQL
    from dcaudit.splits import SplitDesign
    from dcaudit.storage import RowSink

_counter = itertools.count()


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
    if (master or "local").startswith("local") and not spark_configured():
        # The replay's split pass runs Python on the workers, which must be this environment (dcaudit, the
        # same DuckDB); pyspark would start `python3` from PATH. A cluster's executors set their own.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
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
    """A DataFrame over a Parquet file, directory or glob, or a CSV (a path Spark can reach: local, HDFS,
    S3, …). ``row_id`` adds ``__row``, the 1-based row of a single Parquet file, as DuckDB numbers it.
    CSV types are Spark's inference; ``dcaudit audit FILE --engine spark`` reads a CSV through the input
    contract instead, so both engines see the same types."""
    text = str(path)
    low = text.lower()
    try:
        if low.endswith((".parquet", ".pq")) or Path(text).is_dir() or Path(text).suffix == "":
            df = spark.read.option("mergeSchema", "true").parquet(text)
            if row_id:
                from pyspark.sql import functions as F

                # the row within its file (Parquet metadata), as DuckDB's file_row_number
                rest = [F.col(spark_column(c)) for c in df.columns if c != ROW]
                df = df.select((F.col("_metadata.row_index") + 1).cast("bigint").alias(ROW), *rest)
            return df
        if low.endswith((".csv", ".csv.gz", ".tsv", ".txt")):
            return spark.read.csv(text, header=True, inferSchema=True, sep="\t" if low.endswith(".tsv") else ",")
    except Exception as exc:  # Spark raises its own analysis errors
        raise InputError(f"Spark cannot read it: {_first_line(exc)}", file=text) from exc
    raise InputError("unknown file type; use Parquet or CSV", file=text)


def spark_column(name: str) -> str:
    """A column name as ``F.col`` reads it (backticks: names with dots or dashes stay one column)."""
    return "`" + name.replace("`", "``") + "`"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


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
# The engine.

class SparkEngine:
    """The candidate passes in Spark; the driver's DuckDB ``con`` holds the registered inputs (checks, types)
    and receives the grouped rows. ``files``: DuckDB view -> the Parquet file or glob behind it, which Spark
    reads itself; any other relation of ``con`` reaches Spark as the Arrow table DuckDB gives (a CSV the
    input contract read, an in-memory frame)."""

    name = "spark"
    dialect = SPARK

    def __init__(self, spark: Any, con: duckdb.DuckDBPyConnection, *, files: Mapping[str, Path | str] | None = None):
        self.spark = spark
        self.con = con
        self._files = {k: Path(v) for k, v in (files or {}).items()}
        self._frames: dict[str, Any] = {}   # DuckDB relation -> a DataFrame given to register()
        self._views: dict[str, str] = {}    # DuckDB relation -> its Spark temp view
        self._registered: list[str] = []    # DuckDB objects register() created
        self._groups: dict[str, pa.Table] = {}  # evidence SQL -> its group counts (audits that differ only in
        #                                         min_support share one grouping pass over the cluster's data)
        self._tag = next(_counter)

    @classmethod
    def start(cls, con: duckdb.DuckDBPyConnection, *, files: Mapping[str, Path | str] | None = None,
              master: str | None = None, conf: dict[str, str] | None = None) -> SparkEngine:
        """The engine on :func:`session` (the configured Spark, else local mode)."""
        return cls(session(master, conf=conf), con, files=files)

    @property
    def master(self) -> str | None:
        try:
            return str(self.spark.conf.get("spark.master"))
        except Exception:  # noqa: BLE001 - Spark Connect may not expose it
            return None

    def register(self, df: Any, name: str | None = None) -> str:
        """Audit a DataFrame Spark already has (e.g. a Parquet directory on S3): its schema goes to the
        driver's DuckDB as an empty table, so the checks and column types read it there, and the passes read
        ``df``. Returns the relation to pass to the audits."""
        n = len(self._registered)
        relation = quote_identifier(name or f"spark_input_{self._tag}_{n}")
        schema = f"_spark_schema_{self._tag}_{n}"
        self.con.register(schema, _to_arrow(df.limit(0)))
        self.con.execute(f"CREATE OR REPLACE TEMP VIEW {relation} AS SELECT * FROM {schema}")
        self._registered += [relation, schema]
        self._frames[relation] = df
        return relation

    def source(self, relation: str) -> str:
        view = self._views.get(relation)
        if view is None:
            df = self._frames.get(relation)
            if df is None and relation in self._files:
                columns = [r[0] for r in self.con.execute(f"DESCRIBE {relation}").fetchall()]
                df = read_table(self.spark, self._files[relation], row_id=ROW in columns)
            if df is None:
                df = _from_arrow(self.spark, self.con.sql(f"SELECT * FROM {relation}").to_arrow_table())
            view = f"dcaudit_src_{self._tag}_{len(self._views)}"
            df.createOrReplaceTempView(view)
            self._views[relation] = view
        return view

    def _collect(self, sql: str, ev: EvidenceSQL | None = None) -> pa.Table:
        try:
            return _to_arrow(self.spark.sql(sql))
        except Exception as exc:  # AnalysisException & co: the claim or evidence does not evaluate
            what = f"the claim {ev.claim.text!r} or the evidence" if ev is not None else "the evidence"
            raise InputError(f"cannot evaluate {what} on Spark: {_first_line(exc)}",
                             file=ev.label if ev is not None else None) from exc

    def quantile_cuts(self, source: str, columns: Sequence[str], k: int, where: str) -> dict[str, list[float]]:
        probs = ", ".join(SPARK.double(i / k) for i in range(1, k))
        aggs = []
        for i, column in enumerate(columns):
            x = f"CAST({SPARK.identifier(column)} AS DOUBLE)"
            aggs.append(f"percentile({x}, array({probs})) FILTER (WHERE {SPARK.is_finite(x)}) AS q{i}")
        row = self._collect(f"SELECT {', '.join(aggs)} FROM {source} WHERE {where}").to_pylist()[0]
        # + 0.0: a cut at -0.0 reads 0.0, as on DuckDB (audits.evidence.value_sql)
        return {c: sorted({float(v) + 0.0 for v in row[f"q{i}"]}) if row[f"q{i}"] else [] for i, c in enumerate(columns)}

    def group_counts(self, ev: EvidenceSQL, into: str) -> None:
        keys = ", ".join(ev.key_columns)
        lohi = ("CAST(NULL AS DOUBLE) AS lo, CAST(NULL AS DOUBLE) AS hi" if ev.evidence.rule.kind == "exact"
                else "min(x0) AS lo, max(x0) AS hi")
        groups = self._groups.get(ev.sql)
        if groups is None:
            groups = self._groups[ev.sql] = self._collect(
                f"SELECT {keys}, reason IS NULL AS audited, count(*) AS n, CAST(count_if(y) AS BIGINT) AS n_true, "
                f"{lohi} FROM ({ev.sql}) e GROUP BY {keys}, reason IS NULL", ev)
        name = f"{into}_arrow"
        self.con.register(name, groups)
        try:
            self.con.execute(f"CREATE TEMP TABLE {into} AS SELECT * FROM {name}")
        finally:
            self.con.unregister(name)

    def candidates(self, ev: EvidenceSQL, fibers: str, sink: RowSink | None = None) -> pa.Table:  # noqa: ARG002
        # collected whole from the cluster: the sink is left alone (the package writes the table whole)
        keys = ", ".join(ev.key_columns)
        view = f"dcaudit_fib_{self._tag}_{next(_counter)}"
        _from_arrow(self.spark, self.con.sql(f"SELECT {keys}, fiber_key, status FROM {fibers}").to_arrow_table()
                    ).createOrReplaceTempView(view)
        on = " AND ".join(f"e.{k} <=> f.{k}" for k in ev.key_columns)
        try:  # one row per fiber: broadcast to the candidates
            rows = self._collect(
                f"SELECT /*+ BROADCAST(f) */ e.candidate_id, f.fiber_key, e.y AS claim_value, "
                f"coalesce(f.status, 'excluded') AS status, e.reason AS excluded_reason{', e._row' if ev.has_row else ''} "
                f"FROM ({ev.sql}) e LEFT JOIN {view} f ON e.reason IS NULL AND {on}", ev)
        finally:
            self.spark.catalog.dropTempView(view)
        # ordered on the driver by DuckDB, as the DuckDB engine orders them (input row order, else by id)
        name = f"_spark_candidates_{self._tag}_{next(_counter)}"
        self.con.register(name, rows)
        try:
            return self.con.sql(
                f"SELECT candidate_id, fiber_key, claim_value, CAST(status AS {STATUS_ENUM}) AS status, excluded_reason "
                f"FROM {name} ORDER BY {'_row' if ev.has_row else 'candidate_id'}").to_arrow_table()
        finally:
            self.con.unregister(name)

    def split_counts(self, ev: EvidenceSQL, design: SplitDesign) -> dict[str, np.ndarray]:
        from pyspark.sql import functions as F
        from pyspark.sql.types import BooleanType, LongType, StructField, StructType

        keys = list(ev.key_columns)
        df = self.spark.sql(f"SELECT candidate_id, {', '.join(keys)}, y, reason IS NULL AS audited FROM ({ev.sql}) e")
        schema = StructType([StructField("seed_index", LongType()), *[df.schema[k] for k in keys],
                             StructField("y", BooleanType()), StructField("n", LongType())])
        count = PartitionSplitCounts(tuple(keys), int(design.seed_offset), int(design.seeds), int(design.threshold),
                                     duckdb.__version__)
        summed = df.mapInArrow(count, schema).groupBy("seed_index", *keys, "y").agg(F.sum("n").alias("n"))
        try:
            rows = _to_arrow(summed)
        except Exception as exc:
            raise InputError(f"cannot evaluate the claim {ev.claim.text!r} or the evidence on Spark: "
                             f"{_first_line(exc)}", file=ev.label) from exc
        return self._halves(rows, keys, int(design.seeds))

    def _halves(self, rows: pa.Table, keys: list[str], n_seeds: int) -> dict[str, np.ndarray]:
        """Per-fiber totals and per-seed calibration counts from the summed rows, in the engine format."""
        name = f"_spark_splits_{self._tag}_{next(_counter)}"
        self.con.register(name, rows)
        try:
            got = self.con.execute(
                f"SELECT seed_index, CAST(dense_rank() OVER (ORDER BY {', '.join(keys)}) - 1 AS BIGINT) AS f, y, n "
                f"FROM {name} WHERE seed_index >= -1").fetchnumpy()
            n_excluded = int(self.con.execute(f"SELECT coalesce(sum(n), 0) FROM {name} "
                                              "WHERE seed_index = -2").fetchall()[0][0])
        finally:
            self.con.unregister(name)
        seed = np.asarray(got["seed_index"], dtype=np.int64)
        fiber = np.asarray(got["f"], dtype=np.int64)
        y = np.asarray(got["y"], dtype=bool)
        count = np.asarray(got["n"], dtype=np.int64)
        n_fibers = int(fiber.max(initial=-1)) + 1
        n, t = np.zeros(n_fibers, np.int64), np.zeros(n_fibers, np.int64)
        n_cal, t_cal = np.zeros((n_seeds, n_fibers), np.int64), np.zeros((n_seeds, n_fibers), np.int64)
        total = seed < 0
        np.add.at(n, fiber[total], count[total])
        np.add.at(t, fiber[total & y], count[total & y])
        cal = ~total
        np.add.at(n_cal, (seed[cal], fiber[cal]), count[cal])
        np.add.at(t_cal, (seed[cal & y], fiber[cal & y]), count[cal & y])
        return split_halves(n, t, n_cal, t_cal, n_excluded)

    def close(self) -> None:
        self._groups.clear()
        for view in self._views.values():
            self.spark.catalog.dropTempView(view)
        self._views.clear()
        for name in reversed(self._registered):
            if name.startswith('"'):
                self.con.execute(f"DROP VIEW IF EXISTS {name}")
            else:
                self.con.unregister(name)
        self._registered.clear()


@dataclass(frozen=True)
class PartitionSplitCounts:
    """The replay's split pass over one partition (``mapInArrow``), run on an executor.

    Input batches: candidate_id, k0..kn, y, audited. Output rows (seed_index, k0..kn, y, n): per local fiber
    and claim value the members (seed_index −1) and the calibration members at every seed (0 .. seeds − 1,
    zero counts left out); the partition's excluded candidates as one row with seed_index −2.
    """

    keys: tuple[str, ...]
    seed_offset: int
    seeds: int
    threshold: int
    duckdb_version: str   # the driver's: every executor must hash as the driver's DuckDB does

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        if duckdb.__version__ != self.duckdb_version:
            raise RuntimeError(f"this executor runs DuckDB {duckdb.__version__}, the driver {self.duckdb_version}: "
                               "the replay's split hash would differ; install the same dcaudit environment")
        parts = list(batches)
        if not parts or not sum(b.num_rows for b in parts):
            return
        table = pa.Table.from_batches(parts)
        con = duckdb.connect()
        try:
            con.execute("SET threads = 1")  # an executor core is one Spark task
            con.register("batch", table.append_column("__i", pa.array(np.arange(table.num_rows, dtype=np.int64))))
            n_excluded = int(con.execute("SELECT count(*) FROM batch WHERE NOT audited").fetchall()[0][0])
            got = con.execute(
                f"SELECT hash(candidate_id) AS h, "
                f"CAST(dense_rank() OVER (ORDER BY {', '.join(self.keys)}) - 1 AS BIGINT) AS f, y, __i "
                f"FROM batch WHERE audited").fetchnumpy()
            h = np.asarray(got["h"], dtype=np.uint64)
            fiber = np.asarray(got["f"], dtype=np.int64)
            group = 2 * fiber + np.asarray(got["y"], dtype=bool)
            n_groups = 2 * (int(fiber.max(initial=-1)) + 1)
            cal = self._calibration(con, h, group, n_groups)
        finally:
            con.close()
        schema = pa.schema([("seed_index", pa.int64()), *[table.schema.field(k) for k in self.keys],
                            ("y", pa.bool_()), ("n", pa.int64())])
        if n_groups:
            totals = np.bincount(group, minlength=n_groups)
            present = np.flatnonzero(totals)
            s_idx, g_idx = np.nonzero(cal)
            g = np.concatenate([present, g_idx])
            _, first = np.unique(fiber, return_index=True)  # the first row of every local fiber
            rows = np.asarray(got["__i"], dtype=np.int64)[first][g // 2]
            keys = table.select(list(self.keys)).take(pa.array(rows))
            yield pa.RecordBatch.from_arrays(
                [pa.array(np.concatenate([np.full(len(present), -1, np.int64), s_idx.astype(np.int64)])),
                 *[keys.column(k).combine_chunks() for k in self.keys], pa.array(g % 2 == 1),
                 pa.array(np.concatenate([totals[present], cal[s_idx, g_idx]]).astype(np.int64))], schema=schema)
        if n_excluded:
            yield pa.RecordBatch.from_arrays(
                [pa.array([-2], pa.int64()), *[pa.nulls(1, schema.field(k).type) for k in self.keys],
                 pa.nulls(1, pa.bool_()), pa.array([n_excluded], pa.int64())], schema=schema)

    def _calibration(self, con: duckdb.DuckDBPyConnection, h: np.ndarray, group: np.ndarray,
                     n_groups: int) -> np.ndarray:
        """Calibration members per (seed, group): the numpy split when this DuckDB hashes by its formula,
        else the SQL expression that defines the split."""
        seeds = np.arange(self.seed_offset, self.seed_offset + self.seeds, dtype=np.int64)
        if not n_groups:
            return np.zeros((self.seeds, 0), np.int64)
        if split_formula_matches(con):
            return split_counts(h, group, n_groups, seeds, self.threshold)
        con.register("hashed", pa.table({"h": h, "g": group}))
        got = con.execute(
            f"SELECT s.seed - {self.seed_offset} AS si, g, count(*) AS c FROM hashed "
            f"CROSS JOIN range({self.seed_offset}, {self.seed_offset + self.seeds}) s(seed) "
            f"WHERE {split_sql('h', 's.seed', self.threshold)} GROUP BY ALL").fetchnumpy()
        out = np.zeros((self.seeds, n_groups), np.int64)
        out[np.asarray(got["si"], dtype=np.int64), np.asarray(got["g"], dtype=np.int64)] = np.asarray(got["c"])
        return out


# ---------------------------------------------------------------------------------------------------
# DataFrames Spark already has (the Python API for data that lives only on the cluster).

def audit_fibers_spark(spark: Any, df: Any, *, id_column: str, evidence: EvidenceMap, claim: Claim,
                       min_support: int = 1, labels: AuditLabels, with_candidates: bool = True) -> FiberAudit:
    """:func:`dcaudit.audits.fibers.audit_fibers` of a Spark DataFrame on the Spark engine."""
    con = duckdb.connect()
    engine = SparkEngine(spark, con)
    try:
        return audit_fibers(con, engine.register(df), id_column=id_column, evidence=evidence, claim=claim,
                            min_support=min_support, labels=labels, with_candidates=with_candidates, engine=engine)
    finally:
        engine.close()
        con.close()


def replay_fibers_spark(spark: Any, df: Any, *, id_column: str, evidence: EvidenceMap, claim: Claim,
                        config: ReplayConfig | None = None, labels: AuditLabels) -> pa.Table:
    """:func:`dcaudit.audits.replay.fiber_replay` of a Spark DataFrame on the Spark engine (DuckDB's splits)."""
    con = duckdb.connect()
    engine = SparkEngine(spark, con)
    try:
        return fiber_replay(con, engine.register(df), id_column=id_column, evidence=evidence, claim=claim,
                            config=config or ReplayConfig(), labels=labels, engine=engine).replay
    finally:
        engine.close()
        con.close()
