"""What a stage sees and returns: the seam between the runner (``pipelines/``) and the audits.

A stage is ``fn(ctx: StageContext) -> StageTables``. The runner's context (``pipelines.runner.StageContext``,
a dataclass) satisfies :class:`StageContext` structurally; audits and stage glue type against this protocol,
so they never import the runner (the layer rule of docs/stages.md). :class:`FiberAudit` lives here too: it is
what the fiber stage leaves in ``ctx.audits`` for every later stage to read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, TypeAlias

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

    from dcaudit.engine import Engine
    from dcaudit.spec import PipelineSpec

StageTables: TypeAlias = "dict[str, list[pa.Table]]"   # package table name -> the Arrow tables a stage adds to it


@dataclass(frozen=True)
class FiberAudit:
    """The fiber audit of one claim on one evidence map: one summary row, a row per fiber, optionally a row
    per candidate (docs/package.md)."""

    summary: pa.Table
    fibers: pa.Table
    candidates: pa.Table | None


class StageContext(Protocol):
    """The run a stage works in: the spec, the DuckDB connection holding the source's views, the engine that
    runs the candidate passes of fiber audits and replays (DuckDB on ``con``, or Spark over the same prepared
    tables), and what earlier stages left behind."""

    spec: PipelineSpec
    con: duckdb.DuckDBPyConnection
    engine: Engine                     # where the fiber audit's and replay's candidate passes run (con: DuckDB)
    source: str                        # the source's name in every table's ``source`` column
    tables: dict[str, str]             # connector table name -> DuckDB view name
    audits: dict[str, FiberAudit]      # audit_id (``id[model]`` per group) -> the fiber stage's result
    notes: list[str]                   # lines for the manifest
    globs: frozenset[str]              # the views read from a Parquet glob (rows named by file and row there)

    def view_for(self, table: str | None) -> str:
        """The DuckDB view of the source's ``table`` (the first one when None)."""
        ...
