"""Resolution sensitivity: the same audit of one numeric evidence column at several fiber rules.

How ambiguous the evidence looks depends on how finely it is read. This audit puts, in one table
(``sensitivity.parquet``, one row per model × fiber rule), the certified, ambiguous and unsupported
fractions and the median fiber size of:

* ``quantile:K`` (and ``width:W`` / ``exact``) — partitions, audited by :func:`audit_fibers`;
* ``knn:K`` — each candidate's neighbourhood is the K candidates nearest in rank of the sorted
  evidence (a centred block of K, shifted inwards at the ends; all candidates when fewer than K);
* ``window:T`` and tolerances ``mae`` / ``qNN`` — each candidate's neighbourhood is every candidate
  with ``|Δ evidence| <= T`` (itself included); ``mae`` and ``qNN`` take T from the absolute error of
  the evidence against a reference column (mean, or the NN-th percentile) over the audited candidates.

A neighbourhood is certified when it is pure and holds at least ``min_support`` candidates, ambiguous
when mixed, unsupported when pure but smaller. Windows are counted on sorted arrays with prefix sums
and ``searchsorted`` (one pass per model), never with per-candidate masks.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from dcaudit import defaults
from dcaudit.audits.evidence import EvidenceMap, FiberRule, parse_fiber_rule
from dcaudit.audits.fibers import AuditLabels, audit_fibers
from dcaudit.audits.groups import group_values
from dcaudit.audits.replay import Tolerance, parse_tolerance
from dcaudit.claims import Claim, check_columns, claim_sql, quote_identifier
from dcaudit.engine import machine_limit
from dcaudit.errors import InputError, SpecError
from dcaudit.inputs import (
    ROW,
    column_types,
    duckdb_message,
    guard_nan,
    label_of,
    require_numeric,
    user_columns,
)
from dcaudit.spec import check_keys, coerce_field, name_list
from dcaudit.stage import StageContext, StageTables

DEFAULT_RULES = defaults.SENSITIVITY_RULES
_counter = itertools.count()


@dataclass(frozen=True)
class WindowCounts:
    """Per candidate (in sorted order): neighbourhood size and number of trues in it."""

    size: np.ndarray
    n_true: np.ndarray


def knn_counts(y_sorted: np.ndarray, k: int) -> WindowCounts:
    """Neighbourhoods of ``k`` consecutive candidates in sorted evidence, centred and shifted inwards."""
    n = len(y_sorted)
    k = min(int(k), n)
    cum = np.concatenate([[0], np.cumsum(y_sorted, dtype=np.int64)])
    start = np.clip(np.arange(n) - (k - 1) // 2, 0, n - k)
    return WindowCounts(np.full(n, k, dtype=np.int64), cum[start + k] - cum[start])


def tolerance_counts(x_sorted: np.ndarray, y_sorted: np.ndarray, tol: float) -> WindowCounts:
    """Neighbourhoods ``|x_j - x_i| <= tol`` (self included) by binary search on sorted evidence."""
    from dcaudit.audits.windows import window_bounds

    cum = np.concatenate([[0], np.cumsum(y_sorted, dtype=np.int64)])
    lo, hi = window_bounds(x_sorted, x_sorted, tol)  # |Δ| <= tol exactly, not x ± tol rounded
    return WindowCounts(hi - lo, cum[hi] - cum[lo])


def _window_row(counts: WindowCounts, y: np.ndarray, min_support: int) -> dict[str, Any]:
    size, t = counts.size, counts.n_true
    pure = (t == 0) | (t == size)
    certified = pure & (size >= min_support)
    n = len(size)
    # Acting on the window majority (>= 0.5 -> true) and being wrong: the window analogue of
    # the benchmark-only risk of a partition.
    wrong = np.where(2 * t >= size, ~y.astype(bool), y.astype(bool))
    return {
        "n_candidates": n, "n_fibers": n, "n_mixed_fibers": int((~pure).sum()),
        "certified_true": int((certified & (t == size)).sum()),
        "certified_false": int((certified & (t == 0)).sum()),
        "ambiguous": int((~pure).sum()), "unsupported": int((pure & ~certified).sum()),
        "median_fiber_size": float(np.median(size)) if n else None,
        "benchmark_only_risk": float(wrong.mean()) if n else None,
    }


def sensitivity(
    con: duckdb.DuckDBPyConnection,
    relation: str,
    *,
    id_column: str,
    evidence: str,
    claim: Claim,
    rules: Sequence[str | FiberRule] = DEFAULT_RULES,
    tolerances: Sequence[str | float] = (),
    reference: str | None = None,
    min_support: int = 1,
    labels: AuditLabels,
    model_column: str | None = None,
) -> pa.Table:
    """One row per (model, fiber rule); ``model_column`` audits every model of a long table separately."""
    if min_support < 1:
        raise SpecError(f"min_support must be >= 1, got {min_support}")
    parsed = [r if isinstance(r, FiberRule) else parse_fiber_rule(r) for r in rules]
    tols: list[Tolerance] = [parse_tolerance(t) for t in tolerances]
    if any(t.kind != "fixed" for t in tols) and not reference:
        raise SpecError("tolerances 'mae' / 'qNN' are computed against a reference column; name one")
    available = user_columns(con, relation)
    needed = ((id_column,) if id_column != ROW else ()) + (evidence,) + ((reference,) if reference else ()) + \
        ((model_column,) if model_column else ())
    check_columns(needed, available, what="the sensitivity audit")
    check_columns(claim.columns, available, what=f"claim {claim.text!r}")
    q = quote_identifier
    models: list[str | None] = [labels.model]
    if model_column:
        # the models present, as per-model audits take them (a row without a model is in none): a NULL model
        # compared with = matched no row, and the run stopped on an empty model
        models = list(group_values(con, relation, model_column, option="model_column"))
    rows: list[dict[str, Any]] = []
    for model in models:  # models (a few dozen at most), never candidates
        view = relation
        if model_column:
            view = f"_sens_{next(_counter)}"
            con.execute(f"CREATE OR REPLACE TEMP VIEW {view} AS SELECT * FROM {relation} "
                        f"WHERE CAST({q(model_column)} AS VARCHAR) = {_str(model)}")
        try:
            rows.extend(_model_rows(con, view, id_column, evidence, claim, parsed, tols, reference,
                                    min_support, AuditLabels(labels.source, labels.audit_id, model)))
        finally:
            if view != relation:
                con.execute(f"DROP VIEW IF EXISTS {view}")
    return _table(rows)


def _str(value: str | None) -> str:
    return "NULL" if value is None else "'" + str(value).replace("'", "''") + "'"


def _model_rows(con: duckdb.DuckDBPyConnection, view: str, id_column: str, evidence: str, claim: Claim,
                rules: list[FiberRule], tols: list[Tolerance], reference: str | None, min_support: int,
                labels: AuditLabels) -> list[dict[str, Any]]:
    head = {"source": labels.source, "audit_id": labels.audit_id, "claim": claim.text, "evidence": evidence,
            "model": labels.model, "min_support": min_support}
    rows: list[dict[str, Any]] = []
    for rule in rules:  # a handful of rules
        if not rule.is_window:
            summary = audit_fibers(con, view, id_column=id_column, evidence=EvidenceMap((evidence,), rule),
                                   claim=claim, min_support=min_support, labels=labels,
                                   with_candidates=False).summary.to_pylist()[0]
            rows.append({**head, "fiber_rule": str(rule), "rule_kind": rule.kind, "tolerance_source": None,
                         "tolerance": None, **{k: summary[k] for k in _COUNT_KEYS}})
    window_rules = [r for r in rules if r.is_window]
    if not window_rules and not tols:
        return rows
    q = quote_identifier
    ref = f"CAST({q(reference)} AS DOUBLE)" if reference else "NULL::DOUBLE"
    types = column_types(con, view)
    guard_nan(con, types, (evidence, *claim.columns))
    require_numeric(con, view, evidence, types, why="a window rule")
    y_sql = claim_sql(claim, types)
    try:  # windows need finite evidence: NaN and ±inf are excluded, as under missing = "drop"
        cur = con.execute(
            f"SELECT CAST({q(evidence)} AS DOUBLE) AS x, CAST({y_sql} AS BOOLEAN) AS y, {ref} AS r "
            f"FROM {view} WHERE isfinite(CAST({q(evidence)} AS DOUBLE)) AND ({y_sql}) IS NOT NULL "
            f"ORDER BY x, CAST({q(id_column)} AS VARCHAR)")
        data = cur.fetchnumpy()
    except duckdb.Error as exc:
        if machine_limit(exc):  # memory or spill disk, not the data: the run says so
            raise
        raise InputError(f"cannot read evidence {evidence!r} as numbers or evaluate {claim.text!r}: "
                         f"{duckdb_message(exc)}", file=label_of(view)) from None
    x = np.asarray(data["x"], dtype=float)
    y = np.asarray(data["y"], dtype=bool)
    r = np.asarray(data["r"], dtype=float) if reference else None
    for rule in window_rules:
        counts = knn_counts(y, int(rule.param or 1)) if rule.kind == "knn" else \
            tolerance_counts(x, y, float(rule.param or 0.0))
        rows.append({**head, "fiber_rule": str(rule), "rule_kind": rule.kind, "tolerance_source": None,
                     "tolerance": rule.param if rule.kind == "window" else None,
                     **_window_row(counts, y, min_support)})
    for tol in tols:
        width = _tolerance_value(tol, x, r)
        counts = tolerance_counts(x, y, width)
        rows.append({**head, "fiber_rule": f"window:{width:.4g}", "rule_kind": "window",
                     "tolerance_source": "fixed" if tol.kind == "fixed" else str(tol), "tolerance": width,
                     **_window_row(counts, y, min_support)})
    return rows


def _tolerance_value(tol: Tolerance, x: np.ndarray, r: np.ndarray | None) -> float:
    if tol.kind == "fixed":
        return float(tol.value or 0.0)
    if r is None:
        raise SpecError(f"tolerance {tol} needs a reference column")
    err = np.abs(x - r)
    err = err[np.isfinite(err)]
    if not len(err):
        raise InputError(f"tolerance {tol}: no candidate has both the evidence and the reference value")
    return float(err.mean()) if tol.kind == "mae" else float(np.quantile(err, float(tol.value or 0.0)))


_COUNT_KEYS = ("n_candidates", "n_fibers", "n_mixed_fibers", "certified_true", "certified_false", "ambiguous",
               "unsupported", "median_fiber_size", "benchmark_only_risk")

_SCHEMA = pa.schema([
    ("source", pa.string()), ("audit_id", pa.string()), ("claim", pa.string()), ("evidence", pa.string()),
    ("model", pa.string()), ("fiber_rule", pa.string()), ("rule_kind", pa.string()),
    ("tolerance_source", pa.string()), ("tolerance", pa.float64()), ("min_support", pa.int64()),
    ("n_candidates", pa.int64()), ("n_fibers", pa.int64()), ("n_mixed_fibers", pa.int64()),
    ("certified_true", pa.int64()), ("certified_false", pa.int64()), ("ambiguous", pa.int64()),
    ("unsupported", pa.int64()), ("certified_fraction", pa.float64()), ("ambiguous_fraction", pa.float64()),
    ("unsupported_fraction", pa.float64()), ("mixed_fiber_fraction", pa.float64()),
    ("median_fiber_size", pa.float64()), ("benchmark_only_risk", pa.float64()),
])


def _table(rows: list[dict[str, Any]]) -> pa.Table:
    for row in rows:
        n = row["n_candidates"] or 0
        row["certified_fraction"] = (row["certified_true"] + row["certified_false"]) / n if n else None
        row["ambiguous_fraction"] = row["ambiguous"] / n if n else None
        row["unsupported_fraction"] = row["unsupported"] / n if n else None
        row["mixed_fiber_fraction"] = row["n_mixed_fibers"] / row["n_fibers"] if row["n_fibers"] else None
    return pa.Table.from_pylist(rows, schema=_SCHEMA)


# ---------------------------------------------------------------------------------------------------
# Pipeline stage: the [sensitivity] section of a spec.

_SECTION_KEYS = {"audits", "rules", "tolerances", "reference", "min_support", "model_column"}


@dataclass(frozen=True)
class SectionOptions:
    """``[sensitivity]``'s settings, typed: what the spec check and the stage both read."""

    rules: tuple[str | FiberRule, ...]
    tolerances: tuple[str | float, ...]
    reference: str | None
    min_support: int | None  # None: the audit's


def section_options(raw: Mapping[str, Any]) -> SectionOptions:
    """The section's rules, tolerances, reference and min_support; one rule or tolerance given alone is a
    list of one (a string would be read letter by letter), a min_support of 2.5 is an error, and so is a
    section with nothing to compare."""
    reference = coerce_field(raw, "reference", str, "[sensitivity]")
    tolerances = raw.get("tolerances", ["mae", "q80"] if reference else [])
    tolerances = [tolerances] if isinstance(tolerances, str | int | float) else list(tolerances)
    if "tolerances" in raw and not isinstance(raw["tolerances"], str | int | float) and not tolerances:
        raise SpecError("[sensitivity] tolerances is empty: name at least one, or leave it out for the default")
    if len(set(map(str, tolerances))) < len(tolerances):
        raise SpecError(f"[sensitivity] tolerances {tolerances} name one more than once")
    if "rules" not in raw:
        rules: tuple[str, ...] = DEFAULT_RULES
    elif raw["rules"] == [] and tolerances:  # tolerance windows only
        rules = ()
    else:
        rules = name_list(raw["rules"], "[sensitivity] rules")
    if tolerances and not reference and any(parse_tolerance(t).kind != "fixed" for t in tolerances):
        raise SpecError("[sensitivity] tolerances mae and qNN are measured against a reference column; give "
                        "reference too")
    if reference and not tolerances:
        raise SpecError("[sensitivity] reference is what tolerance windows' errors are measured against; give "
                        "tolerances (e.g. [\"mae\", \"q80\"]) too, or leave it out")
    return SectionOptions(tuple(rules), tuple(tolerances), reference,
                          coerce_field(raw, "min_support", int, "[sensitivity]"))


def sensitivity_stage(ctx: StageContext) -> StageTables:
    raw = ctx.spec.sections.get("sensitivity", {})
    if not isinstance(raw, dict):
        raise SpecError("[sensitivity] must be a table of settings")
    check_keys(raw, _SECTION_KEYS, "[sensitivity]")
    tasks = {t.audit_id: t for t in ctx.spec.audits}
    chosen = name_list(raw["audits"], "[sensitivity] audits") if "audits" in raw else tuple(tasks)
    missing = [a for a in chosen if a not in tasks]
    if missing:
        raise SpecError(f"[sensitivity] audits {missing} are not audits of spec {ctx.spec.name!r}")
    options = section_options(raw)
    rules, tolerances, reference, support = options.rules, options.tolerances, options.reference, options.min_support
    out: list[pa.Table] = []
    for audit_id in chosen:
        task = tasks[audit_id]
        if len(task.evidence.columns) != 1:
            raise SpecError(f"[sensitivity] needs one numeric evidence column; audit {audit_id!r} has "
                            f"{len(task.evidence.columns)}")
        out.append(sensitivity(
            ctx.con, ctx.view_for(task.table), id_column=ctx.spec.id_column, evidence=task.evidence.columns[0],
            claim=task.claim, rules=rules, tolerances=tolerances, reference=reference,
            min_support=task.min_support if support is None else support,
            labels=AuditLabels(ctx.source, audit_id),
            model_column=coerce_field(raw, "model_column", str, "[sensitivity]")))
    return {"sensitivity": out}
