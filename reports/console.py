"""Console views of the evidence package (rich). The Parquet tables are the results; this only shows them."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pyarrow as pa
from pyarrow import MonthDayNano
from rich.console import Console
from rich.table import Table
from rich.text import Text

from dcaudit.progress import StderrConsole
from dcaudit.reports.numbers import percent_number, shown_of

console = StderrConsole()
if not console.is_terminal:  # logs and CI: wide enough that the summary table is readable
    console = StderrConsole(width=200)


MAX_CONSOLE_ROWS = 40   # replay rows on the console (the HTML report and `dcaudit query` show them all)


def _plain(value: object) -> Text:
    """Text printed as it is: in a plain string rich reads ``[...]`` as markup and drops it (the audit
    ``robust[all]`` printed as ``robust``, the header ``false (all) [p10, p90]`` as ``false (all)``)."""
    return Text(str(value))


def print_table(table: Table) -> None:
    """``table`` on the console when it fits; on a console too narrow for it, where rich would cut cells
    to ``42…`` (4297) or ``nr7-p5…``, one line per row of header-value pairs instead: every value whole."""
    from rich.measure import Measurement

    if Measurement.get(console, console.options.update_width(10**6), table).minimum <= console.width:
        console.print(table)
        return
    if table.title:
        console.print(table.title, style="bold")
    columns = table.columns
    cells = [list(c.cells) for c in columns]
    for i in range(table.row_count):
        label = [cells[j][i] for j, c in enumerate(columns) if c.justify == "left" and str(cells[j][i])]
        pairs = [Text.assemble((str(c.header), "dim"), " ", cells[j][i]) for j, c in enumerate(columns)
                 if c.justify != "left" and str(cells[j][i])]
        console.print(Text(" · ").join(label) + Text(": ") + Text(", ").join(pairs) if label
                      else Text(", ").join(pairs))
    if table.caption:
        console.print(table.caption, style="dim")


def summary_table(summary: pa.Table, title: str = "evidence package") -> Table:
    table = Table(title=_plain(title), show_lines=False)
    cols = [("audit_id", "audit"), ("model", "model"), ("fiber_rule", "fibers by"), ("min_support", "min n"),
            ("n_candidates", "candidates"), ("n_fibers", "fibers"), ("n_mixed_fibers", "mixed"),
            ("certified_true", "cert. true"), ("certified_false", "cert. false"), ("ambiguous", "ambiguous"),
            ("unsupported", "unsupported"), ("ambiguous_fraction", "ambiguous %"),
            ("benchmark_only_risk", "bench-only risk %")]
    cols = [(c, h) for c, h in cols if c in summary.column_names
            and not (c == "model" and summary.column(c).null_count == summary.num_rows)]
    for _, header in cols:
        table.add_column(_plain(header), justify="left" if header in {"audit", "model", "fibers by"} else "right")
    for row in summary.to_pylist():
        cells = []
        for c, _ in cols:
            v = row[c]
            if v is None:
                cells.append("")
            elif c.endswith("fraction") or c == "benchmark_only_risk":
                cells.append(percent_number(v, decimals=2))
            else:
                cells.append(str(v))
        table.add_row(*map(_plain, cells))
    return table


def excluded_line(candidates: pa.Table | None, audit_order: Sequence[str] = ()) -> str | None:
    """'3440 of 7831 candidates excluded: evidence_missing 3390, claim_missing 50' (per audit when several,
    in ``audit_order``, then by name)."""
    if candidates is None or "excluded_reason" not in candidates.column_names:
        return None
    if candidates.column("excluded_reason").null_count == candidates.num_rows:  # nothing excluded: no line
        return None
    rank = {name: i for i, name in enumerate(audit_order)}
    counts = sorted(_group_counts(candidates), key=lambda c: (rank.get(str(c[0]), len(rank)), str(c[0])))
    totals: dict[str, int] = {}
    reasons: dict[str, list[tuple[str, int]]] = {}
    models: set[str] = set()
    for audit_id, by_model, reason, count in counts:
        name = str(audit_id)
        totals[name] = totals.get(name, 0) + count
        if by_model:
            models.add(name)  # per-model audits: the summary's n_excluded column says it per model
        elif reason is not None:
            reasons.setdefault(name, []).append((reason, count))
    audits = list(totals)
    parts = []
    for name in audits:
        if name in models or not reasons.get(name):
            continue
        pairs = sorted(reasons[name], key=lambda kv: (-kv[1], kv[0]))
        parts.append((name, f"{sum(k for _, k in pairs)} of {totals[name]} candidates excluded: "
                      + ", ".join(f"{reason} {k}" for reason, k in pairs)))
    by_text: dict[str, list[str]] = {}
    for name, text in parts:  # audits that exclude the same candidates share one line
        by_text.setdefault(text, []).append(name)
    if len(by_text) == 1 and len(audits) == len(parts):
        return next(iter(by_text))
    return "; ".join(f"{', '.join(names)}: {text}" for text, names in by_text.items()) or None


def _group_counts(candidates: pa.Table) -> list[tuple[object, bool, object, int]]:
    """(audit_id, per-model audit, excluded_reason, count), in no order: one DuckDB group-by
    over the Arrow columns, on a connection to the process's DuckDB (a database of its own would cost
    ~0.03 s to open). Not polars (~0.3 s to import), not pyarrow compute (~0.1 s to import; with a Python
    value or Table.group_by it imports pandas too)."""
    from dcaudit.engine import shared_connection

    names = candidates.column_names
    audit = "CAST(audit_id AS VARCHAR)" if "audit_id" in names else "NULL::VARCHAR"
    per_model = "model IS NOT NULL" if "model" in names else "false"
    con = shared_connection()
    try:
        con.register("candidates", candidates)
        return [(a, bool(m), r, int(n)) for a, m, r, n in con.execute(
            f"SELECT {audit}, {per_model}, excluded_reason, count(*) FROM candidates GROUP BY ALL").fetchall()]
    finally:
        con.close()


def print_summary(summary: pa.Table, title: str, candidates: pa.Table | None = None) -> None:
    print_table(summary_table(summary, title))
    order = [str(a) for a in summary.column("audit_id").to_pylist()] if "audit_id" in summary.column_names else []
    line = excluded_line(candidates, order)
    if line:
        console.print(Text(f"{line} (candidates.parquet: status 'excluded', excluded_reason)", style="dim"))


def print_notes(notes: Sequence[str]) -> None:
    for note in notes:
        console.print(Text(str(note), style="dim"))


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    return _text(value) if isinstance(value, bytes | MonthDayNano) else str(value)


def _text(value: bytes | MonthDayNano) -> str:
    """A BLOB or an INTERVAL as DuckDB writes it as text (``CAST(x AS VARCHAR)``), not as Python's repr
    (``b'..'``, ``MonthDayNano(months=..)``): a user can paste it back into SQL."""
    if isinstance(value, bytes):
        # printable ASCII as is; any other byte, and the backslash and both quotes, as \xHH, as DuckDB does
        return "".join(chr(b) if 32 <= b < 127 and b not in b"\\'\"" else f"\\x{b:02X}" for b in value)
    months, days, nanos = value.months, value.days, value.nanoseconds
    parts = [f"{n} {unit}{'' if abs(n) == 1 else 's'}" for n, unit in
             ((int(months / 12), "year"), (months - 12 * int(months / 12), "month"), (days, "day")) if n]
    if nanos or not parts:
        sign, nanos = ("-" if nanos < 0 else ""), abs(nanos)
        seconds, frac = divmod(nanos, 1_000_000_000)
        clock = f"{sign}{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        parts.append(clock + (f".{frac // 1000:06d}".rstrip("0") if frac // 1000 else ""))
    return " ".join(parts)


def _json_text(rows: list[dict[str, object]]) -> str:
    """Rows as strict JSON. NaN and ±inf become the strings "NaN", "Infinity", "-Infinity" (json writes bare
    NaN, which other readers refuse or, as jq does, turn into null or 1.79e308 without a word). A DECIMAL
    (and a HUGEINT, which Arrow carries as a decimal) is written as a JSON number with its exact digits, not
    rounded through a double and not as a string; BLOB and INTERVAL values as DuckDB's text for them."""
    import json
    import re
    import secrets
    from decimal import Decimal

    # json cannot write a number it did not format itself: each decimal goes out as a unique placeholder
    # string, replaced by the decimal's digits afterwards (the token is random, so no user text matches it)
    token, decimals = f"dcaudit-decimal-{secrets.token_hex(8)}-", []

    def safe(value: object) -> object:
        if isinstance(value, float) and not math.isfinite(value):
            return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
        if isinstance(value, Decimal):
            decimals.append(format(value, "f"))
            return f"{token}{len(decimals) - 1}"
        if isinstance(value, bytes | MonthDayNano):
            return _text(value)
        if isinstance(value, dict):
            return {k: safe(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [safe(v) for v in value]
        return value

    text = json.dumps(safe(rows), default=str, indent=1, allow_nan=False)
    return re.sub(f'"{token}(\\d+)"', lambda m: decimals[int(m[1])], text) if decimals else text


def _tsv_cell(value: object) -> str:
    """A value in one tab-separated field: backslash, tab, newline and carriage return escaped (as
    PostgreSQL's text format does), so every row stays one line of the same fields."""
    if value is None:
        return "\\N"   # NULL, told apart from an empty text (PostgreSQL's text format writes it so too)
    return (_cell(value).replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n")
            .replace("\r", "\\r"))


def print_rows(table: pa.Table, *, as_json: bool = False, tsv: bool = False) -> None:
    """Any table on stdout: a rich table (wide enough for logs), JSON rows, or tab-separated rows."""
    import sys

    if as_json:
        print(_json_text(table.to_pylist()))
        return
    if tsv:
        for row in table.to_pylist():
            print("\t".join(_tsv_cell(v) for v in row.values()))
        return
    out = Table(show_lines=False)
    for name in table.column_names:
        out.add_column(_plain(name))
    for row in table.to_pylist():
        out.add_row(*[_plain(_cell(v)) for v in row.values()])
    Console(width=None if sys.stdout.isatty() else 160).print(out)


def _pct(value: float | None, digits: int = 3) -> str:
    return "" if value is None else f"{percent_number(value, digits=digits)}%"


def completion_table(completion: pa.Table) -> pa.Table:
    """Mean rows (seed NULL) of completion.parquet, in policy order: what each probe adds, with spread."""
    from dcaudit.arrays import table
    from dcaudit.defaults import COMPLETION_POLICIES

    order = {p: i for i, p in enumerate(COMPLETION_POLICIES)}
    rows = [r for r in completion.to_pylist() if r["seed"] is None]   # tens of rows: plain Python
    rows.sort(key=lambda r: (order.get(r["policy"], len(order)), r["step"]))

    def percent(column: str, digits: int) -> list[float | None]:
        return [None if r[column] is None else round(100 * r[column], digits) for r in rows]

    return table({"policy": [r["policy"] for r in rows], "step": [r["step"] for r in rows],
                  "probe": [r["probe_added"] for r in rows], "chosen %": percent("probe_added_share", 0),
                  "certified %": percent("certified_fraction", 2), "p10": percent("certified_fraction_p10", 2),
                  "p90": percent("certified_fraction_p90", 2), "se": percent("certified_fraction_se", 2),
                  "false %": percent("false_decision_rate", 3)},
                 {"policy": "string", "step": "int64", "probe": "string", "chosen %": "float64",
                  "certified %": "float64", "p10": "float64", "p90": "float64", "se": "float64",
                  "false %": "float64"})


def recommended_probe(completion: pa.Table, seeds: int) -> str | None:
    """'SR-MMP (response_rank's first choice in 61% of 200 seeds)', or None."""
    first = [r for r in completion.select(["seed", "step", "policy", "probe_added", "probe_added_share"]).to_pylist()
             if r["seed"] is None and r["step"] == 1 and r["policy"] == "response_rank"]
    if not first:
        return None
    row = first[0]
    return (f"{row['probe_added']} (response_rank's first choice in {100 * row['probe_added_share']:.0f}% of "
            f"{seeds} seeds)")


def print_completion(completion: pa.Table, seeds: int) -> None:
    print_rows(completion_table(completion))
    probe = recommended_probe(completion, seeds)
    if probe:
        console.print(_plain(f"recommended next probe: {probe}"))


def diff_table(audits: pa.Table) -> pa.Table:
    """runs --diff: per audit, the certified and ambiguous fractions before and after (in percent)."""
    import polars as pl

    df = pl.from_arrow(audits)
    keys = [c for c in ("audit_id", "model", "fiber_rule", "min_support") if c in df.columns
            and df[c].null_count() < df.height]
    for c in ("claim", "evidence"):   # shown when they differ: a row gone and a row new would read alike
        if c in df.columns and df[c].n_unique() > 1:
            keys.append(c)
    return df.select(*keys,
                     (100 * pl.col("certified_before")).round(3).alias("cert % before"),
                     (100 * pl.col("certified_after")).round(3).alias("cert % after"),
                     (100 * pl.col("certified_change")).round(3).alias("Δ cert pp"),
                     (100 * pl.col("ambiguous_before")).round(3).alias("amb % before"),
                     (100 * pl.col("ambiguous_after")).round(3).alias("amb % after"),
                     (100 * pl.col("ambiguous_change")).round(3).alias("Δ amb pp"),
                     "n_before", "n_after").to_arrow()


def diff_counts(audits: pa.Table) -> tuple[int, int, int, int]:
    """(moved, new, gone, unchanged) audit rows of a runs --diff."""
    import polars as pl

    df = pl.from_arrow(audits)
    moved = df.filter(pl.col("moved")).height   # any decision count or fraction differs (catalog.diff)
    new = df.filter(pl.col("n_before").is_null()).height
    gone = df.filter(pl.col("n_after").is_null()).height
    return moved, new, gone, df.height - moved - new - gone


def simulation_table(tables: dict[str, pa.Table], experiment: str) -> pa.Table:
    """The headline of a controlled experiment: the completion curve (acquisition) or the metrics."""
    import polars as pl

    if experiment == "acquisition":  # mean certified fraction per policy and step (steps 0-4)
        df = (pl.from_arrow(tables["completion"]).filter(pl.col("seed").is_null() & (pl.col("step") <= 4))
              .select("policy", "step", pl.col("certified_fraction").round(4)))
        return df.pivot(on="step", index="policy", values="certified_fraction").sort("policy").to_arrow()
    df = pl.from_arrow(tables["metrics"])
    return df.select("setting", "metric", *[pl.col(c).round(4) for c in ("value", "ci_low", "ci_high", "min", "max")]
                     ).to_arrow()


def sensitivity_table(sensitivity: pa.Table) -> pa.Table:
    import polars as pl

    df = pl.from_arrow(sensitivity)
    return df.select(*[c for c in ("audit_id", "model") if c in df.columns and df[c].null_count() < df.height],
                     "fiber_rule", "tolerance", "n_candidates", "n_fibers",
                     (100 * pl.col("certified_fraction")).round(2).alias("certified %"),
                     (100 * pl.col("ambiguous_fraction")).round(2).alias("ambiguous %"),
                     (100 * pl.col("unsupported_fraction")).round(2).alias("unsupported %"),
                     "median_fiber_size").to_arrow()


def replay_table(replay: pa.Table, title: str = "held-out replay (mean over seeds)") -> Table:
    """The seed-NULL rows of replay.parquet: what acting on the evidence would cost, per policy — certified
    share, false decisions (mean [p10, p90] over seeds), acquisitions as a share and a count, break-even price."""
    table = Table(title=_plain(title))
    names = set(replay.column_names)
    show_model = "model" in names and replay.column("model").null_count < replay.num_rows
    headers = ["audit", *(["model"] if show_model else []), "policy", "certified", "false (all) [p10, p90]",
               "false (certified)", "CP bound", "acquired (share, count)", "break-even λ*"]
    for header in headers:
        table.add_column(_plain(header), justify="left" if header in {"audit", "model", "policy"} else "right")
    means = [row for row in replay.to_pylist() if row.get("seed") is None]
    caption = []
    if len(means) > MAX_CONSOLE_ROWS:  # many models
        caption.append(f"{shown_of(MAX_CONSOLE_ROWS, len(means), 'policy row')} shown; replay.parquet, the HTML "
                       "report and `dcaudit query` have all")
        means = means[:MAX_CONSOLE_ROWS]
    for row in means:
        be = row.get("break_even_price")
        spread = (f" [{_pct(row.get('false_decision_rate_p10'))}, {_pct(row.get('false_decision_rate_p90'))}]"
                  if row.get("false_decision_rate_p10") is not None else "")
        acquired = (f"{_pct(row.get('acquired_fraction'))} ({row['acquisitions']:.1f})"
                    if row.get("acquisitions") is not None else "")
        table.add_row(*map(_plain, (
            str(row.get("audit_id") or ""), *([str(row.get("model") or "")] if show_model else []),
            str(row["policy"]), _pct(row.get("certified_fraction")),
            f"{_pct(row.get('false_decision_rate'))}{spread}", _pct(row.get("false_rate_certified")),
            _pct(row.get("risk_bound")), acquired, "" if be is None else f"{be:.4g}")))
    n_seeds = next((r.get("n_seeds") for r in means if r.get("n_seeds")), None)
    if n_seeds:
        caption.append(f"{n_seeds} seeds; acquired count = mean measurements per seed")
    if caption:
        table.caption = _plain("; ".join(caption))
    return table


def print_replay(replay: pa.Table) -> None:
    print_table(replay_table(replay))


def findings_line(findings: pa.Table) -> str:
    """``findings: 12 invalid_smiles, 3 duplicate_id`` — how many of which kind the connector reported."""
    from dcaudit.findings import describe

    return describe(findings)


def print_findings(findings: pa.Table) -> None:
    console.print(_plain(findings_line(findings) + ("  (dcaudit query \"select * from findings\")"
                                                    if findings.num_rows else "")))
