"""The stage registry: one entry per spec section, validated when the spec is run — before any source is
prepared or any run is recorded, so a typo in ``[replay]`` is a one-line error (exit 2), not a failed run.

Adding a section is one module with a ``<name>_stage(ctx)`` function (and, where its keys need more than
a name check, a parser) plus one line in :data:`STAGES`; docs/stages.md says how.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, TypeAlias

from dcaudit.errors import SpecError
from dcaudit.spec import (
    SOURCE_KEYS,
    SOURCE_KINDS,
    PipelineSpec,
    check_keys,
    check_not_blank,
    fixed_width_reference,
    name_list,
)
from dcaudit.stage import StageContext, StageTables

# (table, column) pairs a section reads from the source's input tables; table None is the first table, as in
# StageContext.view_for
ColumnsRead: TypeAlias = Iterable[tuple[str | None, str]]


@dataclass(frozen=True)
class Stage:
    """A spec section: where its runner function lives and how its settings are validated."""

    run: str                       # "module:function" taking the runner's StageContext
    keys: str | None = None        # "module:NAME" of the allowed keys (a set), checked when the spec loads
    check: Callable[[Mapping[str, Any], PipelineSpec], None] | None = None  # deeper validation
    # engines whose candidate passes the stage uses; under any other the stage runs on DuckDB, with a note
    engines: tuple[str, ...] = ("duckdb",)
    # "module:function" called when a run with this section starts, before the source is read: it starts
    # slow imports the stage will need on a background thread (the replay's scipy.special, ~0.35 s)
    warm: str | None = None
    # the input columns the section reads beyond the [[audits]]' own (evidence, claim, per, identity): its
    # settings (validated), the spec and the source's table names -> (table, column) pairs. The runner reports
    # the columns some files of a Parquet glob lack once for all stages (runner.check_absent_columns)
    reads: Callable[[Mapping[str, Any], PipelineSpec, Collection[str]], ColumnsRead] | None = None
    # the stage adds rows to the candidates table: that table is final only once the stage has run (else it is
    # final after the fiber stage, and written while the sections run)
    adds_candidates: bool = False

    def columns(self, raw: Mapping[str, Any], spec: PipelineSpec, tables: Collection[str]) -> ColumnsRead:
        """The (table, column) pairs the section ``raw`` of ``spec`` reads (none when it names no column)."""
        return () if self.reads is None else self.reads(raw, spec, tables)

    def function(self) -> Callable[[StageContext], StageTables]:
        module, name = self.run.split(":")
        fn: Callable[[StageContext], StageTables] = getattr(importlib.import_module(module), name)
        return fn

    def warm_up(self) -> None:
        if self.warm is not None:
            module, name = self.warm.split(":")
            getattr(importlib.import_module(module), name)()


def _audit_names(section: str, chosen: object, spec: PipelineSpec) -> None:
    names = [chosen] if isinstance(chosen, str) else list(chosen or [])  # type: ignore[call-overload]
    known = {a.audit_id for a in spec.audits}
    missing = [a for a in names if a not in known]
    if missing:
        raise SpecError(f"[{section}] audits {missing} are not audits of spec {spec.name!r} (it has {sorted(known)})")


def _check_replay(raw: Mapping[str, Any], spec: PipelineSpec) -> None:
    from dcaudit.audits.replay import parse_section

    if "compare_modes" in raw:  # [] would compare nothing, a repeat the same mode twice: errors, not ignored
        name_list(raw["compare_modes"], "[replay] compare_modes")
    parsed = parse_section(dict(raw))
    _audit_names("replay", parsed.audits, spec)
    if parsed.tolerance is not None:  # windows are on one numeric column: found now, not after the audits ran
        chosen = parsed.audits if parsed.audits is not None else tuple(a.audit_id for a in spec.audits)
        for task in (a for a in spec.audits if a.audit_id in chosen):
            if len(task.evidence.columns) != 1:
                raise SpecError(f"[replay] tolerance windows need one evidence column; audit {task.audit_id!r} "
                                f"has {len(task.evidence.columns)}")


def _check_completion(raw: Mapping[str, Any], spec: PipelineSpec) -> None:
    from dcaudit.audits.completion import parse_completion_section

    parse_completion_section(dict(raw), spec.audits)


def _check_sensitivity(raw: Mapping[str, Any], spec: PipelineSpec) -> None:
    from dcaudit.audits.replay import parse_tolerance
    from dcaudit.audits.sensitivity import section_options
    from dcaudit.evidence_map import parse_fiber_rule
    from dcaudit.spec import check_support, coerce_field, name_list

    coerce_field(raw, "model_column", str, "[sensitivity]")
    chosen = name_list(raw["audits"], "[sensitivity] audits") if "audits" in raw else None
    _audit_names("sensitivity", chosen, spec)
    if isinstance(raw.get("reference"), str):
        check_not_blank(raw["reference"], "[sensitivity] reference")  # "" would mean no reference, silently
    options = section_options(raw)
    if options.reference and options.tolerances and \
            all(parse_tolerance(t).kind == "fixed" for t in options.tolerances):  # nothing would read it
        raise fixed_width_reference("[sensitivity]", "tolerances", raw["tolerances"])
    if options.min_support is not None:
        check_support(options.min_support, "[sensitivity]")
    for task in (a for a in spec.audits if chosen is None or a.audit_id in chosen):
        if len(task.evidence.columns) != 1:
            raise SpecError(f"[sensitivity] needs one numeric evidence column; audit {task.audit_id!r} has "
                            f"{len(task.evidence.columns)}")
    for rule in options.rules:
        if isinstance(rule, str):
            parse_fiber_rule(rule)
    for tol in options.tolerances:
        parse_tolerance(tol)


def _check_choice(raw: Mapping[str, Any], spec: PipelineSpec) -> None:
    from dcaudit.audits.choice import parse_choice

    for key in ("audit", "metric", "reference", "model_column"):
        if isinstance(raw.get(key), str):  # "" would silently mean the default
            check_not_blank(raw[key], f"[choice] {key}")
    parse_choice(dict(raw), spec)


def _check_matbench(raw: Mapping[str, Any], spec: PipelineSpec) -> None:
    from dcaudit.pipelines.matbench import parse_matbench_section

    parse_matbench_section(raw, spec)


def _check_jarvis(raw: Mapping[str, Any], spec: PipelineSpec) -> None:
    from dcaudit.pipelines.jarvis import parse_jarvis_section

    parse_jarvis_section(raw, spec)


def _check_vision(raw: Mapping[str, Any], spec: PipelineSpec) -> None:
    from dcaudit.audits.vision import VisionConfig

    VisionConfig.from_section(raw)


def _chosen_tables(chosen: Collection[str] | None, spec: PipelineSpec) -> list[str | None]:
    """The tables of the audits ``chosen`` (None: every audit), each once."""
    return list(dict.fromkeys(a.table for a in spec.audits if chosen is None or a.audit_id in chosen))


def _on_tables(tables: Iterable[str | None], *columns: str | None) -> list[tuple[str | None, str]]:
    """Each of ``columns`` (None: a setting left out) on each of ``tables``."""
    return [(table, c) for table in tables for c in columns if c]


def _reads_replay(raw: Mapping[str, Any], spec: PipelineSpec, tables: Collection[str]) -> ColumnsRead:
    from dcaudit.audits.replay import parse_section

    parsed = parse_section(dict(raw))   # a window's reference and the column its models are grouped by
    return _on_tables(_chosen_tables(parsed.audits, spec), parsed.reference, parsed.model_column)


def _reads_completion(raw: Mapping[str, Any], spec: PipelineSpec, tables: Collection[str]) -> ColumnsRead:
    from dcaudit.audits.completion import parse_completion_section

    parsed = parse_completion_section(dict(raw), spec.audits)   # its own evidence and claim may replace the audit's
    return _on_tables([parsed.table], *parsed.evidence.columns, *parsed.claim.columns, *parsed.config.probes)


def _reads_sensitivity(raw: Mapping[str, Any], spec: PipelineSpec, tables: Collection[str]) -> ColumnsRead:
    from dcaudit.audits.sensitivity import section_options
    from dcaudit.spec import coerce_field

    chosen = name_list(raw["audits"], "[sensitivity] audits") if "audits" in raw else None
    return _on_tables(_chosen_tables(chosen, spec), section_options(raw).reference,
                      coerce_field(raw, "model_column", str, "[sensitivity]"))


def _reads_choice(raw: Mapping[str, Any], spec: PipelineSpec, tables: Collection[str]) -> ColumnsRead:
    from dcaudit.audits.choice import parse_choice

    parsed = parse_choice(dict(raw), spec)
    return _on_tables([parsed.task.table], parsed.window.column, parsed.window.reference, parsed.model_column)


def _reads_matbench(raw: Mapping[str, Any], spec: PipelineSpec, tables: Collection[str]) -> ColumnsRead:
    from dcaudit.pipelines.matbench import parse_matbench_section

    return [(task.table, probe) for task, config in parse_matbench_section(raw, spec).completions
            for probe in config.probes]


def _reads_jarvis(raw: Mapping[str, Any], spec: PipelineSpec, tables: Collection[str]) -> ColumnsRead:
    from dcaudit.pipelines.jarvis import parse_jarvis_section

    parsed = parse_jarvis_section(raw, spec)
    out: list[tuple[str | None, str]] = []
    if parsed.replay is not None:   # by_position: the [replay] windows again (on its first audit by default)
        chosen = parsed.replay.audits or tuple(a.audit_id for a in spec.audits[:1])
        # by_position_view joins the predictions on the audit table's fixed model and jid columns
        out += _on_tables(_chosen_tables(chosen, spec), parsed.replay.reference, parsed.replay.model_column,
                          "model", "jid")
    base = parsed.probe_baseline
    if base is not None:
        out += _on_tables([base.table], *base.evidence.columns, *base.claim.columns)
    return out


def _reads_vision(raw: Mapping[str, Any], spec: PipelineSpec, tables: Collection[str]) -> ColumnsRead:
    from dcaudit.connectors.vision_predictions import OPTIONAL_COLUMNS, REQUIRED_COLUMNS
    from dcaudit.pipelines.vision import prediction_tables

    return _on_tables(prediction_tables(tables), *REQUIRED_COLUMNS, *OPTIONAL_COLUMNS)


def _check_source(spec: PipelineSpec) -> None:
    """A connector source: its name and options, checked before anything is prepared or recorded."""
    source = spec.raw.get("source") or {}
    if "connector" not in source:  # a path: spec_from_dict checked its keys
        return
    from dcaudit.connectors import get_connector
    from dcaudit.connectors.base import parse_options

    try:
        connector = get_connector(source["connector"])
    except SpecError as exc:
        raise SpecError(f"[source] connector: {exc}") from None
    # [source] keys and the connector's options share one table: a typo of either gets its near miss
    options = {f.name for f in fields(connector.Options)}
    check_keys(source, {*(k for k in SOURCE_KEYS if k == "connector" or k not in SOURCE_KINDS), *options},
               f"[source] connector {connector.name!r}")
    parse_options(connector.name, connector.Options, {k: v for k, v in source.items() if k not in SOURCE_KEYS})


STAGES: dict[str, Stage] = {
    "replay": Stage("dcaudit.audits.replay:replay_stage", "dcaudit.audits.replay:_SECTION_KEYS", _check_replay,
                    engines=("duckdb", "spark"), warm="dcaudit.audits.price:prefetch_special", reads=_reads_replay),
    "completion": Stage("dcaudit.audits.completion:completion_stage", "dcaudit.audits.completion:_SECTION_KEYS",
                        _check_completion, reads=_reads_completion),
    "sensitivity": Stage("dcaudit.audits.sensitivity:sensitivity_stage", "dcaudit.audits.sensitivity:_SECTION_KEYS",
                         _check_sensitivity, reads=_reads_sensitivity),
    "choice": Stage("dcaudit.audits.choice:choice_stage", "dcaudit.audits.choice:_SECTION_KEYS", _check_choice,
                    reads=_reads_choice),
    "matbench": Stage("dcaudit.pipelines.matbench:matbench_stage", "dcaudit.pipelines.matbench:_KEYS",
                      _check_matbench, reads=_reads_matbench),
    "jarvis": Stage("dcaudit.pipelines.jarvis:jarvis_stage", "dcaudit.pipelines.jarvis:_KEYS", _check_jarvis,
                    reads=_reads_jarvis),
    "vision": Stage("dcaudit.pipelines.vision:vision_stage", "dcaudit.audits.vision:_SECTION_KEYS", _check_vision,
                    reads=_reads_vision, adds_candidates=True),
}


def validate_spec(spec: PipelineSpec) -> None:
    """The connector of ``spec`` exists and takes its options, and every section names a stage whose settings
    validate; a SpecError otherwise."""
    _check_source(spec)
    for name, raw in spec.sections.items():
        stage = STAGES.get(name)
        if stage is None:
            raise SpecError(f"{spec.name}: section [{name}] has no stage; known sections: {sorted(STAGES)}")
        if not isinstance(raw, dict):
            raise SpecError(f"{spec.name}: [{name}] must be a table of settings")
        if stage.keys is not None:
            module, attr = stage.keys.split(":")
            check_keys(raw, getattr(importlib.import_module(module), attr), f"{spec.name}: [{name}]")
        if stage.check is not None:
            stage.check(raw, spec)
