"""Render the README's Performance tables from bench/results/latest.parquet (the latest run of every
benchmark × size × engine): dcaudit next to pandas and polars, wall (CPU) seconds, peak RSS, ratios.

    .venv/bin/python bench/readme_table.py            # prints Markdown; paste into README.md
"""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "latest.parquet"
OURS = ("duckdb", "dcaudit-cli")
PEERS = ("pandas", "pandas-script", "polars", "polars-script")
# Benchmarks no script measures any more; their rows stay in the history, out of the README. ``fiber_audit``
# (bench/fiber_audit.py, audit with candidates vs pandas) became suite.py's fiber_audit:exact, with polars too.
RETIRED = ("fiber_audit",)


def _cell(row: dict | None) -> str:
    if row is None:
        return "—"
    cpu = json.loads(row["settings"] or "{}").get("cpu_seconds")
    cpu_text = f" ({cpu:.2f} CPU)" if cpu is not None else ""
    rss = f", {row['peak_rss_mb']:.0f} MB" if row["peak_rss_mb"] is not None else ""
    return f"{row['seconds']:.2f} s{cpu_text}{rss}"


def _ratio(ours: dict | None, peer: dict | None) -> str:
    if not ours or not peer:
        return "—"
    wall = peer["seconds"] / ours["seconds"]
    a = json.loads(ours["settings"] or "{}").get("cpu_seconds")
    b = json.loads(peer["settings"] or "{}").get("cpu_seconds")
    cpu = f" / {b / a:.1f}×" if a and b else ""
    return f"{wall:.1f}×{cpu}"


def main() -> None:
    import duckdb

    rows = duckdb.sql(f"""
        SELECT * FROM '{RESULTS}'
        QUALIFY row_number() OVER (PARTITION BY benchmark, coalesce(n_rows, -1), engine ORDER BY recorded_at DESC) = 1
        ORDER BY benchmark, n_rows""").to_arrow_table().to_pylist()
    by: dict[tuple, dict[str, dict]] = {}
    for r in rows:
        if r["benchmark"] in RETIRED:
            continue
        by.setdefault((r["benchmark"], r["n_rows"]), {})[r["engine"]] = r
    print("| benchmark | n | dcaudit: wall (CPU), peak RSS | pandas | polars | vs pandas: wall / CPU | "
          "vs polars: wall / CPU | load | recorded |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for (bench, n), engines in by.items():
        ours = next((engines[e] for e in OURS if e in engines), None)
        pandas = next((engines[e] for e in ("pandas", "pandas-script") if e in engines), None)
        polars = next((engines[e] for e in ("polars", "polars-script") if e in engines), None)
        if ours is None or "conflicting_labels" in bench:  # those have a table of their own, below
            continue
        size = f"{n:.0e}".replace("+0", "").replace("+", "") if n else "—"
        loads = [r["load_avg"] for r in (ours, pandas, polars) if r and r["load_avg"] is not None]
        load = f"{max(loads):.1f}" if loads else "—"
        print(f"| {bench} | {size} | {_cell(ours)} | {_cell(pandas)} | {_cell(polars)} | {_ratio(ours, pandas)} | "
              f"{_ratio(ours, polars)} | {load} | {ours['recorded_at']:%Y-%m-%d} |")
    _deepchecks_table(by)


def _deepchecks_table(by: dict[tuple, dict[str, dict]]) -> None:
    """bench/deepchecks_peer.py's rows: the same complete cases, ConflictingLabels' share = the ambiguous share."""
    rows = [(bench, n, engines) for (bench, n), engines in by.items() if "conflicting_labels" in bench
            and any(e.startswith("deepchecks") for e in engines)]
    if not rows:
        return
    print("\n| against deepchecks ConflictingLabels | n | dcaudit | deepchecks | deepchecks / dcaudit: wall / CPU | "
          "ambiguous = conflicting | load | recorded |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for bench, n, engines in rows:
        ours = next((engines[e] for e in OURS if e in engines), None)
        peer = next((engines[e] for e in ("deepchecks", "deepchecks-script") if e in engines), None)
        if ours is None or peer is None:
            continue
        checks = json.loads(ours["settings"] or "{}")
        agree = f"{checks['ambiguous']:,} of {checks['audited']:,}" if "ambiguous" in checks else "—"
        size = f"{n:.0e}".replace("+0", "").replace("+", "") if n else "Tox21"
        print(f"| {bench} | {size} | {_cell(ours)} | {_cell(peer)} | {_ratio(ours, peer)} | {agree} | "
              f"{ours['load_avg']:.1f} | {ours['recorded_at']:%Y-%m-%d} |")


if __name__ == "__main__":
    main()
