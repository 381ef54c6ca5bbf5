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

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from dcaudit.audits.choice import model_choice
from dcaudit.audits.fibers import AuditLabels
from dcaudit.audits.replay import (
    ReplayConfig,
    ReplaySection,
    WindowSpec,
    fiber_replay,
    parse_section,
    replay_windows,
)
from dcaudit.claims import Claim, parse_claim, quote_identifier
from dcaudit.errors import ClaimError, SpecError
from dcaudit.evidence_map import EvidenceMap, parse_fiber_rule
from dcaudit.spec import (
    PipelineSpec,
    check_keys,
    check_not_blank,
    check_support,
    coerce_field,
    name_list,
    typed_fields,
)
from dcaudit.stage import StageContext, StageTables

_KEYS = {"by_position", "probe_baseline"}
_BASELINE_KEYS = {"table", "evidence", "claim", "fiber_rule", "min_support", "calibration_fraction", "seeds"}
# the paper's baseline protocol (docs/jarvis.md): what each key of [jarvis.probe_baseline] means when left out
_BASELINE_TEXT = {"table": "test_truth", "claim": "optb88vdw_bandgap > 1.0", "fiber_rule": "quantile:64"}
_BASELINE_EVIDENCE = ("formation_energy_peratom",)
_BASELINE_CONFIG: dict[str, Any] = {"seeds": 200, "calibration_fraction": 0.7, "min_support": 3}


@dataclass(frozen=True)
class ProbeBaseline:
    """``[jarvis.probe_baseline]``, validated: a fiber replay of ``claim`` on ``evidence`` in ``table``."""

    table: str
    evidence: EvidenceMap
    claim: Claim
    config: ReplayConfig


@dataclass(frozen=True)
class JarvisSection:
    """``[jarvis]``, validated; ``replay`` is the spec's [replay] when ``by_position`` repeats it."""

    by_position: bool = False
    replay: ReplaySection | None = None
    probe_baseline: ProbeBaseline | None = None


def parse_jarvis_section(raw: object, spec: PipelineSpec) -> JarvisSection:
    """``[jarvis]`` of ``spec`` with every key typed and checked (a SpecError naming the key), before anything
    runs: ``seeds = 2.5`` is no integer and ``by_position = "false"`` no boolean, never 2 seeds or true."""
    if not isinstance(raw, Mapping):
        raise SpecError("[jarvis] must be a table of settings")
    check_keys(raw, _KEYS, "[jarvis]")
    by_position = bool(coerce_field(raw, "by_position", bool, "[jarvis]"))  # a bool or None (absent)
    replay = None
    if by_position:
        if "replay" not in spec.sections:
            raise SpecError("[jarvis] by_position repeats the [replay] section's replay; add one")
        replay = parse_section(dict(spec.sections["replay"]))
        if replay.tolerance is None:
            raise SpecError("[jarvis] by_position needs an error-window [replay] (tolerance = ...)")
    base = raw.get("probe_baseline")
    return JarvisSection(by_position, replay, None if base is None else _probe_baseline(base))


def _probe_baseline(raw: object) -> ProbeBaseline:
    where = "[jarvis.probe_baseline]"
    if not isinstance(raw, Mapping):
        raise SpecError(f"{where} must be a table of settings")
    check_keys(raw, _BASELINE_KEYS, where)

    def text(key: str) -> str:  # a string key as written, else the paper's value (never "" for the default)
        value = coerce_field(raw, key, str, where)
        return _BASELINE_TEXT[key] if value is None else check_not_blank(value, f"{where} {key}")

    table = text("table")
    evidence = name_list(raw["evidence"], f"{where} evidence") if "evidence" in raw else _BASELINE_EVIDENCE
    try:
        rule = parse_fiber_rule(text("fiber_rule"))
    except SpecError as exc:
        raise SpecError(f"{where} fiber_rule: {exc}") from None
    if rule.is_window:  # the baseline is a fiber replay: a window rule would stop it after the audits ran
        raise SpecError(f"{where}: fiber_rule {rule} is a window; the baseline replays fibers (exact, quantile:K, "
                        "width:W)")
    try:
        claim = parse_claim(text("claim"))
    except ClaimError as exc:
        raise ClaimError(f"{where} claim: {exc}") from None
    values = _BASELINE_CONFIG | typed_fields(ReplayConfig, {k: v for k, v in raw.items() if k in _BASELINE_CONFIG},
                                             where)
    check_support(values["min_support"], where)
    try:
        config = ReplayConfig(**values)
    except SpecError as exc:  # ReplayConfig names itself "replay"; the spec wrote this section
        raise SpecError(f"{where}: {str(exc).removeprefix('replay: ')}") from None
    return ProbeBaseline(table, EvidenceMap(tuple(evidence), rule, "drop"), claim, config)


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
    section = parse_jarvis_section(ctx.spec.sections.get("jarvis") or {}, ctx.spec)
    out: dict[str, list[pa.Table]] = {"replay": [], "metrics": []}
    tasks = {t.audit_id: t for t in ctx.spec.audits}
    replay = section.replay
    if replay is not None and replay.tolerance is not None:  # by_position (checked when the spec loaded)
        for audit_id in replay.audits or (ctx.spec.audits[0].audit_id,):
            task = tasks[audit_id]
            column = task.evidence.columns[0]
            view = by_position_view(ctx, ctx.view_for(task.table), column)
            window = WindowSpec(column, replay.tolerance, replay.reference)
            labels = AuditLabels(ctx.source, f"{audit_id}:by-position")
            result = replay_windows(ctx.con, view, id_column=ctx.spec.id_column, window=window, claim=task.claim,
                                    config=replay.config, labels=labels, model_column=replay.model_column)
            out["replay"].append(result)
            if replay.model_column:  # the paper's model choice: ALIGNN "wins" on MAE 0.0
                choice, metrics = model_choice(ctx.con, view, id_column=ctx.spec.id_column, window=window,
                                               claim=task.claim, config=replay.config, labels=labels,
                                               model_column=replay.model_column, replay=result)
                out.setdefault("choice", []).append(choice)
                out["metrics"].append(metrics)
        out["metrics"].append(position_metrics(ctx))
    base = section.probe_baseline
    if base is not None:
        out["replay"].append(fiber_replay(
            ctx.con, ctx.view_for(base.table), id_column=ctx.spec.id_column, evidence=base.evidence,
            claim=base.claim, config=base.config, labels=AuditLabels(ctx.source, "probe-baseline")).replay)
    return out
