"""The ``[matbench]`` stage: polymorph-group counts and completion curves for the Matbench spec.

The fiber audits themselves are ordinary ``[[audits]]`` of ``matbench.toml`` (composition fibers,
their refinements by crystal system and space group, per-submission leaderboard audits, Magpie
feature profiles). This stage adds what those tables do not say directly:

* ``polymorphs`` (list of audit ids, default: every audit whose evidence is ``reduced_formula``
  alone): metrics rows ``polymorph_groups`` (reduced formulas with more than one entry),
  ``polymorph_groups_disagreeing`` (groups whose entries disagree on the claim: mixed fibers),
  ``polymorph_entries``, ``entries_in_disagreeing_groups`` and ``disagreeing_group_fraction``;
* ``[[matbench.completion]]`` entries: ``audits`` (ids) plus the keys of
  :class:`dcaudit.audits.completion.CompletionConfig` (probes, seeds, policies, min_support, …).
  Each audit's evidence map and claim are completed with the probes by the generic completion
  engine (:func:`dcaudit.audits.completion.completion_curves`) on its own table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from dcaudit.errors import SpecError
from dcaudit.spec import AuditTask, PipelineSpec, check_keys, name_list, typed_fields
from dcaudit.stage import StageContext, StageTables

if TYPE_CHECKING:
    from dcaudit.audits.completion import CompletionConfig

_KEYS = {"polymorphs", "completion"}
_COMPLETION_KEYS = {"audits", "probes", "seeds", "calibration_fraction", "min_support", "policies",
                    "random_draws", "seed_offset", "steps", "refinement", "tie_break"}


@dataclass(frozen=True)
class MatbenchSection:
    """``[matbench]``, validated: the polymorph audits (None: the default) and one completion per
    ``[[matbench.completion]]`` entry and audit it names."""

    polymorphs: tuple[str, ...] | None
    completions: tuple[tuple[AuditTask, CompletionConfig], ...]


def parse_matbench_section(raw: object, spec: PipelineSpec) -> MatbenchSection:
    """``[matbench]`` of ``spec``, every key typed and checked before anything runs (``seeds = 2.5`` is no
    integer, never 2 seeds); a SpecError naming the entry and the key."""
    from dcaudit.audits.completion import POLICIES, CompletionConfig

    if not isinstance(raw, Mapping):
        raise SpecError("[matbench] must be a table of settings")
    check_keys(raw, _KEYS, "[matbench]")
    polymorphs = name_list(raw["polymorphs"], "[matbench] polymorphs") if "polymorphs" in raw else None
    entries = raw.get("completion", [])
    entries = [entries] if isinstance(entries, Mapping) else entries
    if not isinstance(entries, list):
        raise SpecError("[matbench] completion must be [[matbench.completion]] tables")
    tasks = {a.audit_id: a for a in spec.audits}
    completions = []
    for i, entry in enumerate(entries):
        where = f"[[matbench.completion]] #{i + 1}"
        if not isinstance(entry, Mapping):
            raise SpecError(f"{where} must be a table of settings")
        check_keys(entry, _COMPLETION_KEYS, where)
        if "audits" not in entry or "probes" not in entry:
            raise SpecError(f"{where}: needs audits = [...] and probes = [...]")
        probes = name_list(entry["probes"], f"{where} probes")
        policies = name_list(entry.get("policies", list(POLICIES)), f"{where} policies")
        # each scalar as its field's type: seeds = 2.5 or true is an error, not 2 or 1 seeds
        scalars = typed_fields(CompletionConfig, {k: v for k, v in entry.items()
                                                  if k not in ("audits", "probes", "policies")}, where)
        for audit_id in name_list(entry["audits"], f"{where} audits"):
            if audit_id not in tasks:
                raise SpecError(f"{where}: no audit {audit_id!r}; the spec has {sorted(tasks)}")
            task = tasks[audit_id]
            try:
                config = CompletionConfig(probes=probes, policies=policies,
                                          **{"min_support": task.min_support, **scalars})
            except SpecError as exc:  # CompletionConfig names itself "completion"; the spec wrote this entry
                raise SpecError(f"{where}: {str(exc).removeprefix('completion: ')}") from None
            completions.append((task, config))
    return MatbenchSection(polymorphs, tuple(completions))


def polymorph_metrics(ctx: StageContext, audit_ids: list[str]) -> pa.Table | None:
    """Metrics rows counting polymorph groups (fibers with n >= 2) and those whose entries disagree."""
    parts = []
    for audit_id in audit_ids:
        fibers = ctx.audits[audit_id].fibers
        ctx.con.register("_mb_fibers", fibers)
        try:
            parts.append(ctx.con.sql(
                """WITH f AS (SELECT * FROM _mb_fibers WHERE n >= 2),
                a AS (SELECT any_value(source) AS source, any_value(audit_id) AS experiment,
                             any_value(claim) AS claim, any_value(fiber_rule) AS fiber_rule,
                             CAST(count(*) AS DOUBLE) AS polymorph_groups,
                             CAST(count_if(status = 'ambiguous') AS DOUBLE) AS polymorph_groups_disagreeing,
                             CAST(coalesce(sum(n), 0) AS DOUBLE) AS polymorph_entries,
                             CAST(coalesce(sum(n) FILTER (WHERE status = 'ambiguous'), 0) AS DOUBLE)
                                 AS entries_in_disagreeing_groups
                      FROM f)
                SELECT source, experiment, claim, fiber_rule, metric, value,
                       NULL::DOUBLE AS ci_low, NULL::DOUBLE AS ci_high
                FROM (SELECT *, polymorph_groups_disagreeing / nullif(polymorph_groups, 0)
                                AS disagreeing_group_fraction FROM a)
                UNPIVOT (value FOR metric IN (polymorph_groups, polymorph_groups_disagreeing, polymorph_entries,
                                              entries_in_disagreeing_groups, disagreeing_group_fraction))"""
            ).to_arrow_table())
        finally:
            ctx.con.unregister("_mb_fibers")
    return pa.concat_tables(parts, promote_options="permissive") if parts else None


def matbench_stage(ctx: StageContext) -> StageTables:
    from dcaudit.audits.completion import completion_curves

    section = parse_matbench_section(ctx.spec.sections.get("matbench") or {}, ctx.spec)
    default = [a.audit_id for a in ctx.spec.audits if a.evidence.columns == ("reduced_formula",)]
    poly_ids = list(section.polymorphs) if section.polymorphs is not None else default
    missing = [a for a in poly_ids if a not in ctx.audits]
    if missing:
        raise SpecError(f"[matbench] polymorphs: no audit(s) {missing}")
    out: dict[str, list[pa.Table]] = {"metrics": [], "completion": []}
    poly = polymorph_metrics(ctx, poly_ids)
    if poly is not None:
        out["metrics"].append(poly)
    for task, config in section.completions:
        result = completion_curves(ctx.con, ctx.view_for(task.table), id_column=ctx.spec.id_column,
                                   evidence=task.evidence, claim=task.claim, config=config, source=ctx.source,
                                   audit_id=task.audit_id)
        ctx.notes.extend(f"{task.audit_id}: {note}" for note in result.notes)
        out["completion"].append(result.table)
    return out
