"""Console views of the evidence package (rich). The Parquet tables are the results; this only shows them."""

from __future__ import annotations

import pyarrow as pa
from rich.console import Console
from rich.table import Table

console = Console(stderr=True)
if not console.is_terminal:  # logs and CI: wide enough that the summary table is readable
    console = Console(stderr=True, width=200)


def summary_table(summary: pa.Table, title: str = "evidence package") -> Table:
    table = Table(title=title, show_lines=False)
    cols = [("audit_id", "audit"), ("model", "model"), ("fiber_rule", "fibers by"), ("min_support", "min n"),
            ("n_candidates", "candidates"), ("n_fibers", "fibers"), ("n_mixed_fibers", "mixed"),
            ("certified_true", "cert. true"), ("certified_false", "cert. false"), ("ambiguous", "ambiguous"),
            ("unsupported", "unsupported"), ("ambiguous_fraction", "ambiguous %"),
            ("benchmark_only_risk", "bench-only risk %")]
    cols = [(c, h) for c, h in cols if c in summary.column_names
            and not (c == "model" and summary.column(c).null_count == summary.num_rows)]
    for _, header in cols:
        table.add_column(header, justify="left" if header in {"audit", "model", "fibers by"} else "right")
    for row in summary.to_pylist():
        cells = []
        for c, _ in cols:
            v = row[c]
            if v is None:
                cells.append("")
            elif c.endswith("fraction") or c == "benchmark_only_risk":
                cells.append(f"{100 * v:.2f}")
            else:
                cells.append(str(v))
        table.add_row(*cells)
    return table


def print_summary(summary: pa.Table, title: str) -> None:
    console.print(summary_table(summary, title))


def replay_table(replay: pa.Table, title: str = "held-out replay (mean over seeds)") -> Table:
    """The seed-NULL rows of replay.parquet: what acting on the evidence would cost, per policy."""
    table = Table(title=title)
    for header in ("audit", "model", "policy", "certified %", "false decisions %", "acquired", "break-even price"):
        table.add_column(header, justify="left" if header in {"audit", "model", "policy"} else "right")
    names = set(replay.column_names)
    means = [row for row in replay.to_pylist() if row.get("seed") is None]
    if len(means) > 40:  # many models: the HTML report and `dcaudit query` show them all
        table.caption = f"{len(means) - 40} more rows in replay.parquet"
        means = means[:40]
    for row in means:
        be = row.get("break_even_price") if "break_even_price" in names else None
        table.add_row(str(row.get("audit_id") or ""), str(row.get("model") or ""), str(row["policy"]),
                      f"{100 * row['certified_fraction']:.3f}", f"{100 * row['false_decision_rate']:.4f}",
                      f"{row['acquisitions']:.1f}", "" if be is None else f"{be:.4f}")
    return table


def print_replay(replay: pa.Table) -> None:
    console.print(replay_table(replay))


def findings_line(findings: pa.Table) -> str:
    """``findings: 12 invalid_smiles, 3 duplicate_id`` — how many of which kind the connector reported."""
    from dcaudit.findings import describe

    return describe(findings)


def print_findings(findings: pa.Table) -> None:
    console.print(findings_line(findings) + ("  (dcaudit query \"select * from findings\")"
                                             if findings.num_rows else ""))
