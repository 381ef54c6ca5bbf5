"""The ``[vision]`` stage: audit every predictions table of the source (one grouped DuckDB pass each).

The connector (dcaudit.connectors.vision*) fits or reads the predictions; the audit
(dcaudit.audits.vision) is a pure function over them; this glue passes one to the other.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute below

from dcaudit.audits.vision import (
    CLAIM,
    SOURCE_NAMES,
    VisionConfig,
    audit_predictions,
    build_suites,
    headline_notes,
)
from dcaudit.errors import SpecError
from dcaudit.inputs import ROW, column_types
from dcaudit.stage import StageContext, StageTables


def vision_stage(ctx: StageContext) -> StageTables:
    """Runner stage for ``[vision]``: audit every predictions table of the source (one grouped pass each)."""
    from pathlib import Path

    from dcaudit.connectors import vision_models, vision_predictions

    cfg = VisionConfig.from_section(dict(ctx.spec.sections.get("vision") or {}))
    out: dict[str, list[pa.Table]] = {}
    user_file = Path(ctx.spec.source)
    is_file = ctx.spec.connector is None  # a user's table (a path or a query), not the connector's
    ambiguous_all = 0
    for table in prediction_tables(ctx.tables):
        view = ctx.tables[table]
        if is_file:  # a user's predictions: errors name the row (a glob's: its file and its row there)
            numbered = ROW in column_types(ctx.con, view)
            norm = vision_predictions.validate_predictions(
                ctx.con, view, file=str(user_file), conditions=cfg.conditions, clean=cfg.clean,
                row_column=ROW if numbered else None, every_condition=True,
                confidence=cfg.confidence, glob=str(user_file) if view in ctx.globs else None)
            source, order = ctx.source, cfg.model_order
            models = {r[0] for r in ctx.con.execute(f"SELECT DISTINCT model FROM {norm}").fetchall()}
            absent = [m for m in order or () if m not in models]
            if absent:
                raise SpecError(f"[vision] model_order names {absent[0]!r}, which {user_file} has no predictions of "
                                f"(models: {', '.join(sorted(models)[:12])})")
        else:
            norm = vision_predictions.validate_predictions(ctx.con, view, file=table, conditions=cfg.conditions,
                                                           clean=cfg.clean, confidence=cfg.confidence)
            source = SOURCE_NAMES.get(table, f"vision-{table}")
            order = cfg.model_order or (vision_models.DIGITS_MODELS if table == "digits"
                                        else vision_models.MnistProtocol().models)
        suites = build_suites(ctx.con, norm, cfg.suites, clean=cfg.clean)
        evidence = vision_predictions.image_evidence_sql(norm, cfg.clean, cfg.confidence_bins)
        result = audit_predictions(ctx.con, norm, source=source, evidence_sql=evidence, suites=suites,
                                   clean=cfg.clean, min_support=cfg.min_support,
                                   model_order=order, with_candidates=cfg.candidates, bootstrap=cfg.bootstrap)
        for name, parts in result.tables().items():
            out.setdefault(name, []).extend(parts)
        ctx.notes.extend(headline_notes(source, result))
        per_split = result.summary.filter(pa.compute.and_(pa.compute.is_valid(result.summary["split"]),
                                                          pa.compute.equal(result.summary["audit_id"], "robust[all]")))
        ambiguous_all += sum(per_split["ambiguous"].to_pylist())
    _cross_check(ctx, ambiguous_all)
    return out


def prediction_tables(tables: Iterable[str]) -> list[str]:
    """The source's tables the stage audits: all but the per-image evidence ([[audits]]) and the thumbnails."""
    return [t for t in tables if t != "images" and not t.endswith("-pixels")]


def _cross_check(ctx: StageContext, ambiguous_all: int) -> None:
    """The spec's pooled [[audits]] entry (split and model inside the fiber key) must agree with the stage."""
    for audit_id, audit in ctx.audits.items():
        rows = audit.summary.to_pylist()
        if len(rows) != 1 or rows[0]["claim"] != CLAIM or "confidence_decile" not in rows[0]["evidence"]:
            continue
        pooled = rows[0]["ambiguous"]
        if pooled != ambiguous_all:
            raise AssertionError(f"{audit_id}: pooled audit finds {pooled} ambiguous candidates, the [vision] "
                                 f"stage {ambiguous_all}: the two evidence computations disagree")
        ctx.notes.append(f"{audit_id}: pooled fiber audit agrees with the vision stage ({pooled} ambiguous)")
