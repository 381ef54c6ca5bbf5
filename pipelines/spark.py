"""Whole specs on Spark: a spec's fiber audits (and ``[replay]``) with every pass over candidates in Spark,
written as the same evidence package and recorded like any run (``--engine spark``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from dcaudit.audits.fibers import AuditLabels
from dcaudit.audits.spark_engine import audit_fibers_spark, read_table, replay_fibers_spark, session
from dcaudit.errors import SpecError


def run_spec_spark(spec: Any, settings: Any, *, out_dir: Path | None = None, replace_existing: bool = False,
                   with_candidates: bool = True, master: str | None = None, quiet: bool = False) -> Any:
    """``run_spec`` for table specs (a file path as source) with every pass over candidates in Spark."""
    from dcaudit.inputs import ROW, check_file, input_digests
    from dcaudit.pipelines.runner import execute_run
    from dcaudit.storage import concat

    source = Path(spec.source)
    if not (source.suffix or source.exists()):
        raise SpecError(f"--engine spark audits a table file (Parquet or CSV); {spec.source!r} is a connector: "
                        "run it with the DuckDB engine, or point Spark at the connector's Parquet tables")
    unsupported = [s for s in spec.sections if s != "replay"]
    if unsupported:
        raise SpecError(f"--engine spark runs the fiber audit and [replay]; section(s) {unsupported} need "
                        "--engine duckdb")
    if any(t.per is not None for t in spec.audits):
        raise SpecError("--engine spark does not run per-model audits yet; use --engine duckdb")
    check_file(source)
    inputs = input_digests(source)

    def compute() -> tuple[dict[str, pa.Table], dict[str, Any]]:
        import time

        from dcaudit.engine import connect

        spark = session(master)
        con = connect(settings)
        timings: dict[str, float] = {}
        collected: dict[str, list[pa.Table]] = {}
        notes: list[str] = []
        try:
            df = read_table(spark, source, row_id=spec.id_column == ROW)
            t = time.monotonic()
            for task in spec.audits:
                result = audit_fibers_spark(spark, df, id_column=spec.id_column, evidence=task.evidence,
                                            claim=task.claim, min_support=task.min_support,
                                            labels=AuditLabels(source.name, task.audit_id),
                                            with_candidates=with_candidates, con=con)
                for name, table in (("summary", result.summary), ("fibers", result.fibers),
                                    ("candidates", result.candidates)):
                    if table is not None:
                        collected.setdefault(name, []).append(table)
            timings["fibers"] = round(time.monotonic() - t, 3)
            if "replay" in spec.sections:
                from dcaudit.audits.replay import parse_section

                section = parse_section(spec.sections["replay"])
                if section.tolerance is not None:
                    raise SpecError("--engine spark replays fibers; error windows (--tolerance) need --engine duckdb")
                t = time.monotonic()
                chosen = section.audits or tuple(a.audit_id for a in spec.audits)
                for task in (a for a in spec.audits if a.audit_id in chosen):
                    collected.setdefault("replay", []).append(replay_fibers_spark(
                        spark, df, id_column=spec.id_column, evidence=task.evidence, claim=task.claim,
                        config=section.config, labels=AuditLabels(source.name, task.audit_id), con=con))
                notes.append("replay splits are Spark's xxhash64(candidate_id, seed): other draws than the "
                             "DuckDB engine's (same design); pass splits to replay_fibers_spark to match exactly")
                timings["replay"] = round(time.monotonic() - t, 3)
        finally:
            con.close()
        tables = {name: concat(parts) for name, parts in collected.items() if parts}
        return tables, {"timings": timings, "notes": notes, "source": source.name, "engine": "spark",
                        "spark_master": spark.conf.get("spark.master", None)}

    return execute_run(settings, name=spec.name, spec_payload=spec.raw, spec_hash=spec.spec_hash, inputs=inputs,
                       compute=compute, out_dir=out_dir, replace_existing=replace_existing, quiet=quiet)
