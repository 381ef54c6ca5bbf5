"""The ``[jarvis]`` section: checks that explain where dcaudit's JARVIS numbers differ from the paper's.

Both reuse the generic engines (:func:`dcaudit.audits.replay.replay_windows` / ``fiber_replay``):

* ``by_position = true`` — the [replay] error-window replay again, but with each model's prediction
  taken from the second column of its file, as a reader by position would. Three contribution files
  are ``id,target,prediction`` (ALIGNN, AtomGPT, CGCNN), so their "predictions" become the reference
  values: benchmark MAE 0 (docs/reference.md), a window tolerance of
  ~0, and almost nothing certified. Rows go to replay.parquet and choice.parquet (the paper's model
  choice: ALIGNN "best" by MAE 0.0) with audit_id ``<audit>:by-position``; each file's
  ``mae_by_position`` goes to metrics (experiment ``jarvis:by-position``).
* ``[jarvis.probe_baseline]`` — the paper's completion baseline (docs/reference.md): the 1-D fiber of
  the reference formation energy at ``fiber_rule`` (64 quantile bins) over every material with the
  claim (5572), not over the 187 MBJ materials of the completion curve; replayed with the given
  calibration fraction, support and seeds. Rows go to replay.parquet with audit_id ``probe-baseline``.
"""

from __future__ import annotations

import pyarrow as pa

from dcaudit.audits.choice import model_choice
from dcaudit.audits.fibers import AuditLabels
from dcaudit.audits.replay import ReplayConfig, WindowSpec, fiber_replay, parse_section, replay_windows
from dcaudit.claims import parse_claim, quote_identifier
from dcaudit.errors import SpecError
from dcaudit.evidence_map import EvidenceMap, parse_fiber_rule
from dcaudit.spec import check_keys
from dcaudit.stage import StageContext, StageTables

_KEYS = {"by_position", "probe_baseline"}
_BASELINE_KEYS = {"table", "evidence", "claim", "fiber_rule", "min_support", "calibration_fraction", "seeds"}


def by_position_view(ctx: StageContext, view: str, evidence: str) -> str:
    """``view`` with ``evidence`` (pred_<property>) replaced by the file's second column for that property."""
    prop = evidence.removeprefix("pred_")
    preds = ctx.view_for("predictions")
    q = quote_identifier
    name = "_jarvis_by_position"
    ctx.con.execute(f"""
        CREATE OR REPLACE TEMP VIEW {name} AS
        SELECT j.* REPLACE (coalesce(p.prediction_by_position, j.{q(evidence)}) AS {q(evidence)})
        FROM {view} j LEFT JOIN (
            SELECT model, jid, prediction_by_position FROM {preds}
            WHERE property = '{prop.replace("'", "''")}' AND issue IS NULL
        ) p ON j.model = p.model AND j.jid = p.jid""")
    return name


def position_metrics(ctx: StageContext) -> pa.Table:
    models = ctx.view_for("models")
    return ctx.con.sql(f"""
        SELECT '{ctx.source}' AS source, 'jarvis:by-position' AS experiment, NULL::VARCHAR AS claim,
               model || ':' || property || ':mae_by_position' AS metric, mae_by_position AS value,
               NULL::DOUBLE AS ci_low, NULL::DOUBLE AS ci_high
        FROM {models} WHERE header <> 'id,prediction'
        UNION ALL
        SELECT '{ctx.source}', 'jarvis:by-position', NULL, model || ':' || property || ':mae', mae, NULL, NULL
        FROM {models} WHERE header <> 'id,prediction'
        ORDER BY metric""").to_arrow_table()


def jarvis_stage(ctx: StageContext) -> StageTables:
    raw = ctx.spec.sections.get("jarvis") or {}
    check_keys(raw, _KEYS, "[jarvis]")
    out: dict[str, list[pa.Table]] = {"replay": [], "metrics": []}
    tasks = {t.audit_id: t for t in ctx.spec.audits}
    if raw.get("by_position"):
        if "replay" not in ctx.spec.sections:
            raise SpecError("[jarvis] by_position repeats the [replay] section's replay; add one")
        section = parse_section(ctx.spec.sections["replay"])
        if section.tolerance is None:
            raise SpecError("[jarvis] by_position needs an error-window [replay] (tolerance = ...)")
        for audit_id in section.audits or (ctx.spec.audits[0].audit_id,):
            task = tasks[audit_id]
            column = task.evidence.columns[0]
            view = by_position_view(ctx, ctx.view_for(task.table), column)
            window = WindowSpec(column, section.tolerance, section.reference)
            labels = AuditLabels(ctx.source, f"{audit_id}:by-position")
            replay = replay_windows(ctx.con, view, id_column=ctx.spec.id_column, window=window, claim=task.claim,
                                    config=section.config, labels=labels, model_column=section.model_column)
            out["replay"].append(replay)
            if section.model_column:  # the paper's model choice: ALIGNN "wins" on MAE 0.0
                choice, metrics = model_choice(ctx.con, view, id_column=ctx.spec.id_column, window=window,
                                               claim=task.claim, config=section.config, labels=labels,
                                               model_column=section.model_column, replay=replay)
                out.setdefault("choice", []).append(choice)
                out["metrics"].append(metrics)
        out["metrics"].append(position_metrics(ctx))
    base = raw.get("probe_baseline")
    if base is not None:
        if not isinstance(base, dict) or set(base) - _BASELINE_KEYS:
            raise SpecError(f"[jarvis.probe_baseline] takes {sorted(_BASELINE_KEYS)}")
        evidence = base.get("evidence", ["formation_energy_peratom"])
        evidence = [evidence] if isinstance(evidence, str) else list(evidence)
        emap = EvidenceMap(tuple(evidence), parse_fiber_rule(base.get("fiber_rule", "quantile:64")), "drop")
        config = ReplayConfig(seeds=int(base.get("seeds", 200)),
                              calibration_fraction=float(base.get("calibration_fraction", 0.7)),
                              min_support=int(base.get("min_support", 3)))
        out["replay"].append(fiber_replay(
            ctx.con, ctx.view_for(base.get("table", "test_truth")), id_column=ctx.spec.id_column, evidence=emap,
            claim=parse_claim(base.get("claim", "optb88vdw_bandgap > 1.0")), config=config,
            labels=AuditLabels(ctx.source, "probe-baseline")).replay)
    return out
