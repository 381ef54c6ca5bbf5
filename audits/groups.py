"""Per-group audits: the same claim and evidence map audited separately for each model of a leaderboard.

An audit with ``per = "model"`` in its spec entry is run once per value of that column (each model
gets its own quantile cuts, as each model's predictions are its own evidence). Rows of the summary,
fibers and candidates tables carry the value in ``model``. The spread across groups goes to
``metrics.parquet`` (one row per statistic, ``experiment`` = the audit id):

* ``n_groups`` — how many models were audited;
* ``median_certified_fraction``, ``mean_certified_fraction``, ``min_…``, ``max_…``;
* ``median_ambiguous_fraction``, ``median_mixed_fiber_fraction``, ``median_benchmark_only_risk``,
  ``median_fiber_size`` (median over models of each model's median fiber size).

The median is a metrics row rather than a summary row with ``model = 'median'``: summary rows are
counts of real candidates, and a median row would not add up.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence

import duckdb
import pyarrow as pa

from dcaudit.audits.fibers import AuditLabels, FiberAudit, audit_fibers
from dcaudit.claims import check_columns, quote_identifier, sql_literal
from dcaudit.engine import memory_limit_bytes
from dcaudit.errors import SpecError
from dcaudit.inputs import ROW, user_columns
from dcaudit.spec import AuditTask
from dcaudit.stage import StageContext, StageTables
from dcaudit.storage import concat

# (metric name, aggregate over the per-group summary rows)
SPREAD = (
    ("n_groups", "count(*)"),
    ("median_certified_fraction", "median(certified_fraction)"),
    ("mean_certified_fraction", "avg(certified_fraction)"),
    ("min_certified_fraction", "min(certified_fraction)"),
    ("max_certified_fraction", "max(certified_fraction)"),
    ("median_ambiguous_fraction", "median(ambiguous_fraction)"),
    ("median_mixed_fiber_fraction", "median(mixed_fiber_fraction)"),
    ("median_benchmark_only_risk", "median(benchmark_only_risk)"),
    ("median_fiber_size", "median(median_fiber_size)"),
)



def group_values(con: duckdb.DuckDBPyConnection, relation: str, column: str,
                 wanted: Sequence[str] | None = None, *, option: str = "per") -> list[str]:
    """The distinct values of ``column`` (sorted), or ``wanted`` after checking each one exists; ``option``
    names the setting in errors."""
    check_columns((column,), user_columns(con, relation), what=option)
    q = quote_identifier(column)
    present = [r[0] for r in con.execute(
        f"SELECT DISTINCT CAST({q} AS VARCHAR) FROM {relation} WHERE {q} IS NOT NULL ORDER BY 1").fetchall()]
    if wanted is None:
        if not present:
            raise SpecError(f"{option} = {column!r}: the column has no values")
        return present
    for name in wanted:
        if name not in present:
            close = difflib.get_close_matches(name, present, n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise SpecError(f"unknown {column} {name!r}{hint} (the table has: {', '.join(present)})")
    return list(dict.fromkeys(wanted))


def spread_metrics(con: duckdb.DuckDBPyConnection, summary: pa.Table, *, experiment: str) -> pa.Table:
    """Statistics across the per-group summary rows, long format (docs/package.md, metrics)."""
    con.register("_grp_summary", summary)
    try:
        selects = " UNION ALL ".join(
            f"SELECT {i} AS _k, any_value(source) AS source, {sql_literal(experiment)} AS experiment, "
            f"any_value(claim) AS claim, any_value(fiber_rule) AS fiber_rule, any_value(min_support) AS min_support, "
            f"{sql_literal(name)} AS metric, CAST({agg} AS DOUBLE) AS value, NULL::DOUBLE AS ci_low, "
            f"NULL::DOUBLE AS ci_high FROM _grp_summary"
            for i, (name, agg) in enumerate(SPREAD))
        # in SPREAD's order (a UNION ALL has none of its own): two runs write the same file
        return con.sql(f"SELECT * EXCLUDE (_k) FROM ({selects}) ORDER BY _k").to_arrow_table()
    finally:
        con.unregister("_grp_summary")


_COPY_ROW_BYTES = 64  # a copied row (id, evidence, claim, group, row number) with DuckDB's overhead


def _group_source(con: duckdb.DuckDBPyConnection, view: str, task: AuditTask, id_column: str,
                  n_groups: int) -> str | None:
    """A temp table holding the columns the per-group audits read (the id, evidence, claim and group
    columns and ``__row``), or None to audit through the input view itself.

    An audit reads its input a dozen times (statistics, the quantile passes, the grouping, the candidates).
    Through a filtered view of the input each of those reads scans the whole input, so ``n`` groups scan
    it ``12 n`` times (15 JARVIS models: 1.6 s of a 5 s run). The copy is one scan. It is made when it fits a
    quarter of the memory limit and every column it needs exists (otherwise the audit's own checks name a
    missing column against the whole input, as without the copy)."""
    if n_groups < 2 or task.per is None:
        return None
    present = {r[0] for r in con.execute(f"DESCRIBE {view}").fetchall()}
    wanted = list(dict.fromkeys([*([ROW] if ROW in present else []), id_column, task.per, *task.evidence.columns,
                                 *task.claim.columns]))
    if not set(wanted) <= present:
        return None
    rows = int(con.execute(f"SELECT count(*) FROM {view}").fetchall()[0][0])
    limit = memory_limit_bytes(con)
    if limit is not None and rows * _COPY_ROW_BYTES * len(wanted) > limit / 4:
        return None
    table = quote_identifier(f"_grp_rows_{task.audit_id}".replace("-", "_"))
    con.execute(f"CREATE OR REPLACE TEMP TABLE {table} AS SELECT {', '.join(map(quote_identifier, wanted))} "
                f"FROM {view}")
    return table


def audit_per_group(ctx: StageContext, task: AuditTask, *, with_candidates: bool = True) -> StageTables:
    """Runner hook for an audit with ``per``."""
    if task.per is None:
        raise ValueError(f"audit {task.audit_id!r} has no per = \"column\" to group by")
    view = ctx.view_for(task.table)
    values = group_values(ctx.con, view, task.per, task.groups)
    q = quote_identifier(task.per)
    out: dict[str, list[pa.Table]] = {"summary": [], "fibers": [], "candidates": [], "metrics": []}
    results: list[FiberAudit] = []
    sub = quote_identifier(f"_grp_{task.audit_id}".replace("-", "_"))
    copy = _group_source(ctx.con, view, task, ctx.spec.id_column, len(values))
    try:
        for value in values:  # one audit per model: each model's predictions get their own quantile cuts
            ctx.con.execute(f"CREATE OR REPLACE TEMP VIEW {sub} AS SELECT * FROM {copy or view} "
                            f"WHERE CAST({q} AS VARCHAR) = {sql_literal(value)}")
            result = audit_fibers(ctx.con, sub, id_column=ctx.spec.id_column,
                                  evidence=task.evidence, claim=task.claim, min_support=task.min_support,
                                  labels=AuditLabels(ctx.source, task.audit_id, model=value),
                                  with_candidates=with_candidates)
            ctx.audits[f"{task.audit_id}[{value}]"] = result
            results.append(result)
    finally:
        if copy:
            ctx.con.execute(f"DROP VIEW IF EXISTS {sub}; DROP TABLE IF EXISTS {copy}")
    summary = concat([r.summary for r in results])
    fibers = concat([r.fibers for r in results])
    candidates = concat([r.candidates for r in results if r.candidates is not None]) if with_candidates else None
    ctx.audits[task.audit_id] = FiberAudit(summary, fibers, candidates)
    out["summary"].append(summary)
    out["fibers"].append(fibers)
    if candidates is not None:
        out["candidates"].append(candidates)
    out["metrics"].append(spread_metrics(ctx.con, summary, experiment=task.audit_id))
    return out
