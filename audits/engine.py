"""The DuckDB engine: the candidate-scale passes of :class:`dcaudit.engine.Engine` on this machine.

Each pass is the single-machine code that always ran them — :func:`dcaudit.audits.evidence.quantile_cuts`,
:func:`dcaudit.audits.fibers.group_evidence` (packed integer keys), :func:`dcaudit.audits.replay.fiber_split_counts`
(the numpy split, or the SQL pass that defines it) — wrapped behind the engine interface, so the fiber audit
and the fiber replay call them exactly as they call the Spark engine (:mod:`dcaudit.audits.spark_engine`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

import duckdb
import numpy as np
import pyarrow as pa

from dcaudit.audits.evidence import quantile_cuts
from dcaudit.audits.fibers import STATUS_ENUM, candidates_by_lookup, group_evidence
from dcaudit.claims import DUCKDB
from dcaudit.engine import machine_limit
from dcaudit.errors import InputError
from dcaudit.inputs import duckdb_message

if TYPE_CHECKING:
    from dcaudit.evidence_map import EvidenceSQL
    from dcaudit.splits import SplitDesign
    from dcaudit.storage import RowSink

_counter = itertools.count()


class DuckDBEngine:
    """Every pass in DuckDB on ``con`` (the driver is the whole machine)."""

    name = "duckdb"
    dialect = DUCKDB

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self.con = con

    def source(self, relation: str) -> str:
        return relation

    def quantile_cuts(self, source: str, columns: Sequence[str], k: int, where: str) -> dict[str, list[float]]:
        return quantile_cuts(self.con, source, tuple(columns), k, where)

    def group_counts(self, ev: EvidenceSQL, into: str) -> None:
        # The evidence stays a view: one scan groups it, excluded rows in their own groups.
        view = f"_ev_{next(_counter)}"
        self.con.execute(f"CREATE TEMP VIEW {view} AS {ev.sql}")
        try:
            group_evidence(self.con, view, into, ev, ev.evidence, ev.relation, ev.claim)
        except duckdb.Error as exc:
            if machine_limit(exc):  # memory or spill disk, not the data: the run says so
                raise
            raise InputError(f"cannot evaluate the claim {ev.claim.text!r} or the evidence: {duckdb_message(exc)}",
                             file=ev.label or ev.relation) from None
        finally:
            self.con.execute(f"DROP VIEW IF EXISTS {view}")

    def split_counts(self, ev: EvidenceSQL, design: SplitDesign) -> dict[str, np.ndarray]:
        from dcaudit.audits.replay import fiber_split_counts  # a replay's module: not loaded by an audit

        return fiber_split_counts(self.con, ev, design)

    def candidates(self, ev: EvidenceSQL, fibers: str, sink: RowSink | None = None) -> pa.Table:
        # small-integer keys of an input with row numbers (every file and frame but a Parquet glob): one scan in
        # row order and a lookup of the packed key, no join and no sort; its parts go to the sink as they come
        rows = candidates_by_lookup(self.con, ev, fibers, sink)
        if rows is not None:
            return rows
        on = " AND ".join(f"e.{k} IS NOT DISTINCT FROM f.{k}" for k in ev.key_columns)
        return self.con.sql(
            f"""SELECT e.candidate_id, f.fiber_key, e.y AS claim_value,
                       CAST(coalesce(f.status, 'excluded') AS {STATUS_ENUM}) AS status, e.reason AS excluded_reason
                FROM ({ev.sql}) e LEFT JOIN {fibers} f ON e.reason IS NULL AND {on}
                ORDER BY {'e._row' if ev.has_row else 'e.candidate_id'}"""
        ).to_arrow_table()

    def close(self) -> None:
        """Nothing to drop: every pass cleans up after itself."""
