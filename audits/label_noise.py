"""Label noise versus incompleteness: why is a mixed fiber mixed?

A fiber is mixed when its members share the evidence but not the claim. With an *identity* column
(InChIKey for compounds; reduced formula + structure identity for materials) the members fall into
entities, and each entity is

* ``consistent true`` / ``consistent false`` — all its records in the fiber agree on the claim, or
* ``conflicting`` — the same entity has records with both claim values (label noise: the same
  compound measured twice with different outcomes).

A mixed fiber is then (``mixed_kind``):

* ``label_noise`` — it has conflicting entities, and its consistent entities all agree with each
  other (or there are none): resolving the conflicting records could make it pure;
* ``incomplete`` — no entity conflicts: distinct entities with the same evidence have different
  claim values, so the benchmark is truly incomplete for the claim;
* ``both`` — conflicting entities *and* consistent entities of both values.

Records without an identity value count as entities of their own (they can never be label noise).
Records of one entity with different evidence fall in different fibers and are not compared here
(the connectors' findings tables report such duplicates). One SQL grouping; fiber keys are numbered
as in :mod:`dcaudit.audits.fibers` (``row_number`` over the audited fibers ordered by key), so the
per-fiber rows join ``fibers.parquet`` on ``fiber_key``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any

import duckdb
import pyarrow as pa

from dcaudit import arrays
from dcaudit.audits.evidence import EvidenceMap, evidence_select
from dcaudit.audits.fibers import AuditLabels, FiberAudit
from dcaudit.claims import Claim, check_columns, quote_identifier
from dcaudit.engine import machine_limit
from dcaudit.errors import InputError, SpecError
from dcaudit.inputs import ROW
from dcaudit.spec import AuditTask
from dcaudit.stage import StageContext

FIBER_COLUMNS = ("n_entities", "n_conflicting_entities", "n_true_entities", "n_false_entities",
                 "conflicting_records", "mixed_kind")
SUMMARY_COLUMNS = ("identity", "n_label_noise_fibers", "n_incomplete_fibers", "n_both_fibers",
                   "label_noise_candidates", "incomplete_candidates", "both_candidates", "conflicting_records",
                   "label_noise_fraction", "incomplete_fraction")
_counter = itertools.count()


@dataclass(frozen=True)
class MixedKinds:
    """Per-fiber entity counts (``fibers``: fiber_key + FIBER_COLUMNS) and one ``summary`` row."""

    fibers: pa.Table
    summary: pa.Table


def audit_mixed_kinds(
    con: duckdb.DuckDBPyConnection,
    relation: str,
    *,
    id_column: str,
    identity_column: str,
    evidence: EvidenceMap,
    claim: Claim,
    labels: AuditLabels,
) -> MixedKinds:
    """Split every mixed fiber of ``evidence`` into label noise / incompleteness by ``identity_column``."""
    if evidence.rule.is_window:
        raise SpecError(f"fiber rule {evidence.rule} is a window rule; label noise is split on partition fibers")
    available = [r[0] for r in con.execute(f"DESCRIBE {relation}").fetchall()]
    check_columns((identity_column,), [c for c in available if c != ROW], what="the identity column")
    tag = next(_counter)
    src = f"_ln_src_{tag}"
    # A numbered copy: the evidence SELECT keeps only (id, keys, claim), so identity comes back by row number.
    con.execute(f"CREATE TEMP TABLE {src} AS SELECT *, CAST(row_number() OVER () AS VARCHAR) AS __ln_row, "
                f"CAST({quote_identifier(identity_column)} AS VARCHAR) AS __entity FROM {relation}")
    try:
        ev = evidence_select(con, src, "__ln_row", evidence, claim, [*available, "__ln_row", "__entity"])
        keys = ", ".join(ev.key_columns)
        head = (f"'{_esc(labels.source)}' AS source, '{_esc(labels.audit_id)}' AS audit_id, "
                f"{_str(labels.model)} AS model")
        fibers = con.sql(f"""
        WITH e AS (
          SELECT ev.*, coalesce(s.__entity, '__ln_row:' || s.__ln_row) AS entity
          FROM ({ev.sql}) ev JOIN {src} s ON s.__ln_row = ev.candidate_id WHERE ev.reason IS NULL),
        ent AS (
          SELECT {keys}, entity, count(*) AS n, count_if(y) AS t FROM e GROUP BY ALL),
        f AS (
          SELECT {keys}, sum(n) AS n, sum(t) AS n_true, count(*) AS n_entities,
                 count_if(0 < t AND t < n) AS n_conflicting_entities,
                 count_if(t = n) AS n_true_entities, count_if(t = 0) AS n_false_entities,
                 coalesce(sum(n) FILTER (WHERE 0 < t AND t < n), 0) AS conflicting_records
          FROM ent GROUP BY ALL)
        SELECT {head}, CAST(row_number() OVER (ORDER BY {keys} NULLS LAST) - 1 AS BIGINT) AS fiber_key,
               CAST(n AS BIGINT) AS n, CAST(n_true AS BIGINT) AS n_true,
               CAST(n_entities AS BIGINT) AS n_entities,
               CAST(n_conflicting_entities AS BIGINT) AS n_conflicting_entities,
               CAST(n_true_entities AS BIGINT) AS n_true_entities,
               CAST(n_false_entities AS BIGINT) AS n_false_entities,
               CAST(conflicting_records AS BIGINT) AS conflicting_records,
               CASE WHEN n_true = 0 OR n_true = n THEN NULL
                    WHEN n_conflicting_entities = 0 THEN 'incomplete'
                    WHEN n_true_entities > 0 AND n_false_entities > 0 THEN 'both'
                    ELSE 'label_noise' END AS mixed_kind
        FROM f ORDER BY fiber_key""").to_arrow_table()
    except duckdb.Error as exc:
        if machine_limit(exc):  # memory or spill disk, not the data: the run says so
            raise
        raise InputError(f"cannot evaluate the claim {claim.text!r}, the evidence or the identity column: {exc}",
                         file=relation) from exc
    finally:
        con.execute(f"DROP TABLE IF EXISTS {src}")
    return MixedKinds(fibers, _summary(fibers, labels, identity_column))


def _esc(text: str) -> str:
    return text.replace("'", "''")


def _str(value: str | None) -> str:
    return "NULL::VARCHAR" if value is None else f"'{_esc(value)}'"


def _summary(fibers: pa.Table, labels: AuditLabels, identity: str) -> pa.Table:
    # Python over the few fibers: pyarrow.compute with a Python value, Table.from_pylist and pa.array of a
    # list each import pandas (~0.45 s of `dcaudit run tox21`)
    kind = fibers["mixed_kind"].to_pylist()
    n = [int(v or 0) for v in fibers["n"].to_pylist()]
    total = sum(n)

    def fibers_of(k: str) -> int:
        return sum(1 for x in kind if x == k)

    def records_of(k: str) -> int:
        return sum(size for x, size in zip(kind, n, strict=True) if x == k)

    row: dict[str, Any] = {
        "source": labels.source, "audit_id": labels.audit_id, "model": labels.model, "identity": identity,
        "n_label_noise_fibers": fibers_of("label_noise"), "n_incomplete_fibers": fibers_of("incomplete"),
        "n_both_fibers": fibers_of("both"),
        "label_noise_candidates": records_of("label_noise"), "incomplete_candidates": records_of("incomplete"),
        "both_candidates": records_of("both"),
        "conflicting_records": sum(int(v or 0) for v in fibers["conflicting_records"].to_pylist()),
    }
    row["label_noise_fraction"] = row["label_noise_candidates"] / total if total else None
    row["incomplete_fraction"] = row["incomplete_candidates"] / total if total else None
    kinds: dict[str, arrays.Kind] = {"source": "string", "audit_id": "string", "model": "string",
                                     "identity": "string", **{c: "int64" for c in SUMMARY_COLUMNS[1:-2]},
                                     "label_noise_fraction": "float64", "incomplete_fraction": "float64"}
    return arrays.table({name: [row[name]] for name in kinds}, kinds)


def _typed(values: list, kind: pa.DataType) -> pa.Array:
    """Python values as an Arrow column of ``kind`` (the SQL above makes them BIGINT, DOUBLE or VARCHAR)."""
    simple: dict[pa.DataType, arrays.Kind] = {pa.int64(): "int64", pa.float64(): "float64", pa.string(): "string"}
    if kind in simple:
        return arrays.column(values, simple[kind])
    return arrays.column(values).cast(kind)  # not expected: another type loads pyarrow.compute


def attach_mixed_kinds(audit: FiberAudit, kinds: MixedKinds) -> FiberAudit:
    """The fiber audit with the label-noise columns added: to its summary row and to every fiber (by fiber_key)."""
    summary = audit.summary
    row = kinds.summary.to_pylist()[0]
    for name in SUMMARY_COLUMNS:
        kind = kinds.summary.schema.field(name).type
        summary = summary.append_column(name, _typed([row[name]] * summary.num_rows, kind))
    # a left join on fiber_key over the few fibers, in fiber_key order (Table.join and sort_by load pyarrow.compute)
    keys = audit.fibers["fiber_key"].to_pylist()
    order = sorted(range(len(keys)), key=lambda i: (keys[i] is None, keys[i] if keys[i] is not None else 0))
    fibers = audit.fibers if order == list(range(len(keys))) else audit.fibers.take(arrays.int64(order))
    at = {k: i for i, k in enumerate(kinds.fibers["fiber_key"].to_pylist()) if k is not None}
    rows = [at.get(keys[i]) if keys[i] is not None else None for i in order]
    for name in FIBER_COLUMNS:
        values = kinds.fibers[name].to_pylist()
        kind = kinds.fibers.schema.field(name).type
        fibers = fibers.append_column(name, _typed([values[r] if r is not None else None for r in rows], kind))
    return replace(audit, summary=summary, fibers=fibers)


def label_noise_for_task(ctx: StageContext, task: AuditTask, identity_column: str, audit: FiberAudit) -> FiberAudit:
    """Runner glue for the fiber stage: ``identity = "inchikey"`` in an ``[[audits]]`` entry.

    Call after :func:`~dcaudit.audits.fibers.audit_fibers` for that task and keep the returned audit
    (``ctx.audits[task.audit_id]`` and the summary / fibers tables) in place of the plain one.
    """
    kinds = audit_mixed_kinds(ctx.con, ctx.view_for(task.table), id_column=ctx.spec.id_column,
                              identity_column=identity_column, evidence=task.evidence, claim=task.claim,
                              labels=AuditLabels(ctx.source, task.audit_id))
    ctx.notes.append(_note(task.audit_id, kinds.summary.to_pylist()[0]))
    return attach_mixed_kinds(audit, kinds)


def _note(audit_id: str, s: dict[str, Any]) -> str:
    return (f"{audit_id}: mixed fibers by {s['identity']}: {s['n_incomplete_fibers']} incomplete "
            f"({s['incomplete_candidates']} candidates), {s['n_label_noise_fibers']} label noise "
            f"({s['label_noise_candidates']}), {s['n_both_fibers']} both ({s['both_candidates']}); "
            f"{s['conflicting_records']} records of entities with conflicting claim values")
