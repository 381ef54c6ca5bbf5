"""Export an evidence package as BenchCert's files, so results can be exchanged with the authors' tool.

``benchcert audit … --out DIR`` writes ``summary.json``, ``fiber_table.csv``, ``ambiguous_cases.csv`` and
``report.html``; :func:`export_benchcert` writes the same four files from a dcaudit package directory:

* ``summary.json`` — BenchCert's report fields per audit (certifiable fraction, ambiguous fraction,
  mixed evidence fibers, benchmark-only decision risk, completion curve, recommended next probe),
  plus dcaudit's own counts (label noise vs incompleteness, held-out replay costs when the package has
  them). The first audit's fields are also at the top level, for readers of a single-audit summary;
  all audits are under ``audits``.
* ``fiber_table.csv`` — one row per fiber of every audit: evidence key, size, claim-true and -false
  counts, status, the majority action and the minority rate (and ``mixed_kind`` when known).
* ``ambiguous_cases.csv`` — every candidate in a mixed fiber (from ``candidates.parquet``; a package
  written without candidates gives the header only, and ``summary.json`` says so).
* ``report.html`` — the package's own report (self-contained, offline), copied.

Field names follow BenchCert's README wording where it names them; the upstream column layout was
not available offline, so the CSV columns are dcaudit's (documented here) and ``summary.json``
carries ``"format": "benchcert"`` and ``"format_version"``. Writes are atomic (temporary files in
the target directory, renamed into place).
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.csv as pacsv

from dcaudit.claims import quote_identifier, quote_string
from dcaudit.errors import InputError
from dcaudit.reports.package import read_manifest, verify_package
from dcaudit.spec import split_names

FORMAT_VERSION = "1"
FILES = ("summary.json", "fiber_table.csv", "ambiguous_cases.csv", "report.html")
FIBER_COLUMNS = ("audit_id", "model", "fiber_key", "evidence_key", "n", "n_true", "n_false", "status",
                 "majority_action", "minority_rate")
def _clean(value: Any) -> Any:
    """JSON-safe: NaN / inf become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _write_atomic(path: Path, write: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def export_benchcert(run_dir: Path | str, out_dir: Path | str) -> list[Path]:
    """Write BenchCert's four files for the package at ``run_dir`` into ``out_dir``; returns their paths."""
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    problems = verify_package(run_dir, columns=True)
    if problems:
        raise InputError("the evidence package cannot be exported: " + "; ".join(problems), file=str(run_dir))
    if not (run_dir / "summary.parquet").exists() or not (run_dir / "fibers.parquet").exists():
        raise InputError("the package has no summary / fibers tables to export (was it a fiber audit?)",
                         file=str(run_dir))
    out_dir.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    names = {p.stem for p in run_dir.glob("*.parquet")}
    for name in names:
        con.execute(f"CREATE VIEW {quote_identifier(name)} AS SELECT * FROM read_parquet("
                    f"{quote_string(str(run_dir / (name + '.parquet')))})")   # a path may hold quotes
    manifest = read_manifest(run_dir)

    fibers = _fiber_table(con)
    _write_atomic(out_dir / "fiber_table.csv", lambda p: pacsv.write_csv(fibers, p))
    ambiguous, has_candidates = _ambiguous(con, names)
    _write_atomic(out_dir / "ambiguous_cases.csv", lambda p: pacsv.write_csv(ambiguous, p))
    summary = _summary(con, names, manifest, has_candidates)
    _write_atomic(out_dir / "summary.json",
                  lambda p: p.write_text(json.dumps(_clean(summary), indent=2, default=str) + "\n"))
    report = run_dir / "report.html"
    if report.exists():
        _write_atomic(out_dir / "report.html", lambda p: shutil.copyfile(report, p))
    else:
        _write_atomic(out_dir / "report.html", lambda p: p.write_text(_minimal_html(summary)))
    return [out_dir / f for f in FILES]


def _fiber_table(con: duckdb.DuckDBPyConnection) -> pa.Table:
    cols = {r[0] for r in con.execute("DESCRIBE fibers").fetchall()}
    extra = ", mixed_kind, n_entities, n_conflicting_entities" if "mixed_kind" in cols else ""
    return con.sql(f"""
        SELECT audit_id, model, fiber_key, evidence_key, n, n_true, n - n_true AS n_false, status,
               CASE WHEN 2 * n_true > n THEN 'true' ELSE 'false' END AS majority_action,
               least(n_true, n - n_true) / n AS minority_rate{extra}
        FROM fibers ORDER BY audit_id, model NULLS FIRST, fiber_key""").to_arrow_table()


def _ambiguous(con: duckdb.DuckDBPyConnection, names: set[str]) -> tuple[pa.Table, bool]:
    if "candidates" not in names:
        schema = pa.schema([("audit_id", pa.string()), ("model", pa.string()), ("candidate_id", pa.string()),
                            ("fiber_key", pa.int64()), ("claim_value", pa.bool_())])
        return schema.empty_table(), False
    return con.sql("""SELECT audit_id, model, candidate_id, fiber_key, claim_value FROM candidates
                      WHERE status = 'ambiguous' ORDER BY audit_id, model NULLS FIRST, fiber_key, candidate_id
                      """).to_arrow_table(), True


def _summary(con: duckdb.DuckDBPyConnection, names: set[str], manifest: dict, has_candidates: bool) -> dict:
    audits = []
    for row in con.sql("SELECT * FROM summary ORDER BY audit_id, model NULLS FIRST").to_arrow_table().to_pylist():
        entry = {
            "audit_id": row["audit_id"], "model": row.get("model"),
            "deployment_action": row["claim"], "evidence": split_names(row["evidence"]),
            "fiber_rule": row["fiber_rule"], "min_support": row["min_support"],
            "n_candidates": row["n_candidates"], "n_excluded": row.get("n_excluded"),
            "certifiable_fraction": row["certified_fraction"], "ambiguous_fraction": row["ambiguous_fraction"],
            "unsupported_fraction": row.get("unsupported_fraction"),
            "n_fibers": row["n_fibers"], "mixed_evidence_fibers": row["n_mixed_fibers"],
            "mixed_fiber_fraction": row["mixed_fiber_fraction"],
            "certified_true": row["certified_true"], "certified_false": row["certified_false"],
            "ambiguous": row["ambiguous"], "unsupported": row["unsupported"],
            "benchmark_only_decision_risk": row["benchmark_only_risk"], "prevalence": row.get("prevalence"),
        }
        if row.get("identity") is not None:
            entry["label_noise_vs_incompleteness"] = {k: row.get(k) for k in (
                "identity", "n_label_noise_fibers", "n_incomplete_fibers", "n_both_fibers",
                "label_noise_candidates", "incomplete_candidates", "both_candidates", "conflicting_records")}
        audits.append(entry)
    out: dict[str, Any] = {"format": "benchcert", "format_version": FORMAT_VERSION, "tool": "dcaudit",
                           "run_id": manifest.get("run_id"), "source": _first(con, "SELECT source FROM summary"),
                           "ambiguous_cases_listed": has_candidates}
    if audits:
        out |= audits[0]
    out["audits"] = audits
    if "completion" in names:
        out |= _completion(con)
    if "costs" in names:
        out["replay_costs"] = con.sql("""
            SELECT audit_id, model, policy, price, cost_per_candidate, measured_fraction, false_rate, cheapest,
                   diff_vs_best, diff_low, diff_high, best_baseline
            FROM costs WHERE seed IS NULL ORDER BY audit_id, model NULLS FIRST, policy, price""").to_arrow_table(
        ).to_pylist()
    if "replay" in names:
        out["replay"] = con.sql("""
            SELECT audit_id, model, policy, mode, certified_fraction, false_decision_rate, acquisitions,
                   break_even_price FROM replay WHERE seed IS NULL ORDER BY audit_id, model NULLS FIRST, policy
            """).to_arrow_table().to_pylist()
    if not has_candidates:
        out["note"] = "the package was written without candidates.parquet: ambiguous_cases.csv lists none"
    return out


def _first(con: duckdb.DuckDBPyConnection, sql: str) -> Any:
    rows = con.execute(sql + " LIMIT 1").fetchall()
    return rows[0][0] if rows else None


def _completion(con: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    cols = {r[0] for r in con.execute("DESCRIBE completion").fetchall()}
    cost = "cumulative_cost" if "cumulative_cost" in cols else "CAST(step AS DOUBLE)"
    curve = con.sql(f"""SELECT policy, step, probe_added, certified_fraction, false_decision_rate,
                               {cost} AS cumulative_cost
                        FROM completion WHERE seed IS NULL ORDER BY policy, step""").to_arrow_table().to_pylist()
    rec = con.execute("""SELECT probe_added, probe_added_share FROM completion
                         WHERE seed IS NULL AND step = 1 AND policy = 'response_rank' LIMIT 1""").fetchall()
    by_cost = con.execute("""SELECT probe_added, probe_added_share FROM completion
                             WHERE seed IS NULL AND step = 1 AND policy = 'cost_gain' LIMIT 1""").fetchall()
    out: dict[str, Any] = {"completion_curve": curve,
                           "recommended_next_probe": rec[0][0] if rec else None,
                           "recommended_next_probe_share": rec[0][1] if rec else None}
    if by_cost:
        out["recommended_next_probe_by_cost"] = by_cost[0][0]
    return out


def _minimal_html(summary: dict) -> str:
    from html import escape

    rows = "".join(f"<tr><td>{escape(str(a['audit_id']))}</td><td>{escape(str(a['deployment_action']))}</td>"
                   f"<td>{a['certifiable_fraction']}</td><td>{a['ambiguous_fraction']}</td></tr>"
                   for a in summary.get("audits", []))
    return ("<!doctype html><meta charset='utf-8'><title>BenchCert export</title><h1>BenchCert export</h1>"
            "<table><tr><th>audit</th><th>action</th><th>certifiable</th><th>ambiguous</th></tr>"
            f"{rows}</table>")


