"""Model choice: the model a leaderboard score picks versus the model certification picks (docs/package.md).

For every replay seed, two choices among the models of a per-model error-window replay:

* **by benchmark** — the lowest benchmark metric over the full data (e.g. formation-energy MAE of the
  prediction against the reference it predicts); the same model in every seed;
* **by certification** — the lowest error rate among the model's certified test candidates (a model
  that certifies nothing counts as error 1.0, as in the paper), ties broken by the larger certified
  fraction, then by model name.

``choice.parquet`` has one row per model × seed (``seed`` NULL rows: per-model means over seeds and
how often each rule chose the model): ``benchmark_metric``, ``certified_fraction``,
``false_decisions`` (wrong certified decisions), ``false_rate_certified``, ``rank_by_benchmark``,
``rank_by_certification``, ``chosen_by_benchmark``, ``chosen_by_certification``. Metrics rows
(experiment ``<audit>:choice``): ``choice_changed_fraction`` (seeds where the two choices differ) and,
for each rule's chosen model, the mean ``certified_fraction`` and ``false_rate_certified``.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb
import pyarrow as pa

from dcaudit.audits.fibers import AuditLabels
from dcaudit.audits.replay import ReplayConfig, ReplaySection, WindowSpec, parse_section, replay_windows
from dcaudit.claims import Claim, check_columns, quote_identifier, sql_literal
from dcaudit.errors import SpecError
from dcaudit.inputs import user_columns
from dcaudit.spec import AuditTask, PipelineSpec, check_keys, coerce_field
from dcaudit.stage import StageContext, StageTables

METRICS = {"mae": "avg(abs({x} - {r}))", "rmse": "sqrt(avg(({x} - {r}) ^ 2))"}



def benchmark_metric_sql(relation: str, *, model_column: str, prediction: str, reference: str,
                         metric: str = "mae") -> str:
    """Per-model benchmark metric over every row with both values (the full-data leaderboard score)."""
    if metric not in METRICS:
        raise SpecError(f"[choice] metric {metric!r}: use one of {', '.join(METRICS)}")
    q = quote_identifier
    agg = METRICS[metric].format(x=f"CAST({q(prediction)} AS DOUBLE)", r=f"CAST({q(reference)} AS DOUBLE)")
    return (f"SELECT CAST({q(model_column)} AS VARCHAR) AS model, {agg} AS benchmark_metric, count(*) AS n_benchmark "
            f"FROM {relation} WHERE {q(prediction)} IS NOT NULL AND {q(reference)} IS NOT NULL GROUP BY 1")


def model_choice(con: duckdb.DuckDBPyConnection, relation: str, *, id_column: str, window: WindowSpec,
                 claim: Claim, config: ReplayConfig, labels: AuditLabels, model_column: str,
                 metric: str = "mae", replay: pa.Table | None = None) -> tuple[pa.Table, pa.Table]:
    """(choice table, metrics table) from a per-model error-window replay on the same splits as [replay].

    ``replay``: that replay's table when the caller already has it (it is computed otherwise).
    """
    if window.reference is None:
        raise SpecError("[choice] needs the reference column the benchmark metric compares predictions with")
    check_columns((model_column,), user_columns(con, relation), what="[choice]")
    if replay is None:
        replay = replay_windows(con, relation, id_column=id_column, window=window, claim=claim, config=config,
                                labels=labels, model_column=model_column)
    bench = benchmark_metric_sql(relation, model_column=model_column, prediction=window.column,
                                 reference=window.reference, metric=metric)
    con.register("_choice_replay", replay)
    head = (f"{sql_literal(labels.source)} AS source, {sql_literal(labels.audit_id)} AS audit_id, {sql_literal(claim.text)} AS claim, "
            f"{sql_literal(metric)} AS metric, {sql_literal('window:' + str(window.tolerance))} AS fiber_rule")
    try:
        con.execute(f"""
        CREATE OR REPLACE TEMP TABLE _choice AS
        WITH r AS (
            SELECT model, seed, certified_fraction, certified, false_decisions, false_rate_certified
            FROM _choice_replay WHERE policy = 'certified_only' AND seed IS NOT NULL AND model IS NOT NULL
        ),
        b AS ({bench}),
        j AS (
            SELECT r.*, b.benchmark_metric, b.n_benchmark,
                   -- a model that certifies nothing has no certified error: it counts as 1.0 (the paper's rule)
                   coalesce(r.false_rate_certified, 1.0) AS certified_error
            FROM r JOIN b USING (model)
        )
        SELECT *,
            CAST(rank() OVER (PARTITION BY seed ORDER BY benchmark_metric) AS BIGINT) AS rank_by_benchmark,
            CAST(row_number() OVER (PARTITION BY seed ORDER BY certified_error, certified_fraction DESC, model)
                 AS BIGINT) AS rank_by_certification
        FROM j""")
        choice = con.sql(f"""
        WITH c AS (
            SELECT *, rank_by_benchmark = 1 AS chosen_by_benchmark,
                   rank_by_certification = 1 AS chosen_by_certification
            FROM _choice
        )
        SELECT {head}, model, CAST(seed AS BIGINT) AS seed, benchmark_metric, certified_fraction,
               CAST(certified AS DOUBLE) AS certified, CAST(false_decisions AS DOUBLE) AS false_decisions,
               false_rate_certified, certified_error, CAST(rank_by_benchmark AS DOUBLE) AS rank_by_benchmark,
               CAST(rank_by_certification AS DOUBLE) AS rank_by_certification,
               CAST(chosen_by_benchmark AS DOUBLE) AS chosen_by_benchmark,
               CAST(chosen_by_certification AS DOUBLE) AS chosen_by_certification
        FROM c
        UNION ALL
        SELECT {head}, model, NULL::BIGINT, any_value(benchmark_metric), avg(certified_fraction), avg(certified),
               avg(false_decisions), avg(false_rate_certified), avg(certified_error), avg(rank_by_benchmark),
               avg(rank_by_certification), sum(CAST(chosen_by_benchmark AS INT)),
               sum(CAST(chosen_by_certification AS INT))
        FROM c GROUP BY model
        ORDER BY model, seed NULLS FIRST""").to_arrow_table()
        metrics = con.sql(f"""
        WITH pick AS (
            SELECT seed,
                   any_value(model) FILTER (WHERE rank_by_benchmark = 1) AS by_benchmark,
                   any_value(model) FILTER (WHERE rank_by_certification = 1) AS by_certification,
                   any_value(certified_fraction) FILTER (WHERE rank_by_benchmark = 1) AS cf_b,
                   any_value(certified_fraction) FILTER (WHERE rank_by_certification = 1) AS cf_c,
                   any_value(false_rate_certified) FILTER (WHERE rank_by_benchmark = 1) AS err_b,
                   any_value(false_rate_certified) FILTER (WHERE rank_by_certification = 1) AS err_c
            FROM _choice GROUP BY seed
        )
        SELECT {sql_literal(labels.source)} AS source, {sql_literal(labels.audit_id + ':choice')} AS experiment,
               {sql_literal(claim.text)} AS claim, metric, value, NULL::DOUBLE AS ci_low, NULL::DOUBLE AS ci_high
        FROM (SELECT
                avg(CAST(by_benchmark <> by_certification AS DOUBLE)) AS choice_changed_fraction,
                avg(cf_b) AS benchmark_choice_certified_fraction,
                avg(err_b) AS benchmark_choice_false_rate_certified,
                avg(CAST(cf_b > 0 AS DOUBLE)) AS benchmark_choice_certifies_any_fraction,
                avg(cf_c) AS certification_choice_certified_fraction,
                avg(err_c) AS certification_choice_false_rate_certified,
                CAST(count(*) AS DOUBLE) AS n_seeds
              FROM pick)
        UNPIVOT (value FOR metric IN (choice_changed_fraction, benchmark_choice_certified_fraction,
                 benchmark_choice_false_rate_certified, benchmark_choice_certifies_any_fraction,
                 certification_choice_certified_fraction, certification_choice_false_rate_certified, n_seeds))
        """).to_arrow_table()
    finally:
        con.unregister("_choice_replay")
        con.execute("DROP TABLE IF EXISTS _choice")
    return choice, metrics


_SECTION_KEYS = {"audit", "metric", "reference", "model_column"}


@dataclass(frozen=True)
class ChoiceSection:
    """``[choice]`` validated against its spec: the audit, the [replay] it shares splits with, the columns."""

    task: AuditTask
    replay: ReplaySection
    window: WindowSpec
    model_column: str
    metric: str


def parse_choice(raw: object, spec: PipelineSpec) -> ChoiceSection:
    """Validate ``[choice]`` (when the spec loads, and again when the stage runs).

    Keys: ``audit`` (default: the first audit named in [replay]), ``metric`` (``mae`` | ``rmse``),
    ``reference`` and ``model_column`` (default: those of [replay]). The audit must have one evidence column:
    the prediction whose error windows are certified."""
    if not isinstance(raw, dict):
        raise SpecError("[choice] must be a table of settings")
    check_keys(raw, _SECTION_KEYS, "[choice]")
    if "replay" not in spec.sections:
        raise SpecError("[choice] replays each model on the [replay] section's splits; add a [replay] section "
                        "with tolerance, reference and model_column")
    replay = parse_section(spec.sections["replay"])
    if replay.tolerance is None:
        raise SpecError("[choice] compares models by error-window certification; [replay] needs a tolerance")
    tasks = {t.audit_id: t for t in spec.audits}
    audit_id = coerce_field(raw, "audit", str, "[choice]") or (replay.audits[0] if replay.audits
                                                                 else spec.audits[0].audit_id)
    if audit_id not in tasks:
        raise SpecError(f"[choice] audit = {audit_id!r}: no such audit; the spec has {sorted(tasks)}")
    task = tasks[audit_id]
    if len(task.evidence.columns) != 1:  # the windows are on one prediction column
        raise SpecError(f"[choice] compares models by the error windows of one prediction column; audit "
                        f"{audit_id!r} has {len(task.evidence.columns)} evidence columns")
    metric = coerce_field(raw, "metric", str, "[choice]") or "mae"
    if metric not in METRICS:
        raise SpecError(f"[choice] metric {metric!r}: use one of {', '.join(METRICS)}")
    model_column = coerce_field(raw, "model_column", str, "[choice]") or replay.model_column or task.per
    if not model_column:
        raise SpecError("[choice] needs model_column (or a per-model audit)")
    reference = coerce_field(raw, "reference", str, "[choice]") or replay.reference
    if reference is None:
        raise SpecError("[choice] needs the reference column the benchmark metric compares predictions with")
    return ChoiceSection(task, replay, WindowSpec(task.evidence.columns[0], replay.tolerance, reference),
                         model_column, metric)


def choice_stage(ctx: StageContext) -> StageTables:
    """``[choice]``: model choice on the splits, tolerance and support of the spec's ``[replay]`` section
    (:func:`parse_choice`)."""
    section = parse_choice(ctx.spec.sections.get("choice") or {}, ctx.spec)
    task = section.task
    choice, metrics = model_choice(ctx.con, ctx.view_for(task.table), id_column=ctx.spec.id_column,
                                   window=section.window, claim=task.claim, config=section.replay.config,
                                   labels=AuditLabels(ctx.source, task.audit_id), model_column=section.model_column,
                                   metric=section.metric)
    return {"choice": [choice], "metrics": [metrics]}
