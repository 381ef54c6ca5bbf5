"""The human view of an evidence package: one self-contained ``report.html``.

It opens offline (inline CSS, inline SVG charts drawn by matplotlib, one inline script for the fiber
explorer; nothing is loaded from anywhere) and shows whatever tables the package has — summary,
fibers (with the explorer of every mixed fiber and its members), candidates, completion, replay,
choice, metrics, sensitivity, and any other table as a plain preview — followed by provenance from
``manifest.json``. The Parquet files stay the results; numbers here are formatted from them by DuckDB
queries over the package's Arrow tables.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from html import escape
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from dcaudit import defaults
from dcaudit.errors import IntegrityError
from dcaudit.reports import charts, explorer
from dcaudit.reports.numbers import count, number, percent_number, shown_of
from dcaudit.reports.package import PACKAGE_TABLES, read_manifest, verify_package
from dcaudit.storage import arrow_table

REPORT_NAME = "report.html"
MAX_ROWS = 60          # rows of a table shown in the report (the Parquet file has them all)
MAX_BARS = 40          # bars in one chart
MAX_CHARTS = 6         # charts of one kind (e.g. one completion chart per audit)
MAX_CELL = 80          # characters of a text cell; a longer value is cut, marked with … and kept whole in its title
MAX_TITLE = 4000       # characters of a cut value kept in its title (a longer one says how long it is)
REPLAY_POLICIES = (*defaults.REPLAY_POLICIES, *defaults.PRICE_AWARE_POLICIES)

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:1100px;color:#222;
padding:0 1em;line-height:1.4}
h1{font-size:1.5em;margin-bottom:.2em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:1.8em}
table{border-collapse:collapse;margin:.6em 0;font-size:12px}th,td{border:1px solid #ddd;padding:2px 6px}
th{background:#f4f4f4;text-align:left}td.num{text-align:right;font-variant-numeric:tabular-nums}
.note{color:#555;font-size:.9em}.figs{display:flex;flex-wrap:wrap;gap:12px}
.kpi{display:inline-block;margin:0 1.5em .5em 0}.kpi b{font-size:1.6em;display:block}
code,pre{background:#f6f6f6;font-size:12px}pre{padding:.6em;overflow:auto;max-height:420px}
.cut{text-decoration:underline dotted #999;cursor:help}
.st-ambiguous{color:#b36b00}.st-certified_true,.st-certified_false{color:#00734f}.st-unsupported{color:#666}
"""


class Package:
    """A package directory as DuckDB views over its Parquet files (nothing is loaded whole: candidates
    tables of large runs stay on disk), plus the schemas and row counts from the Parquet footers."""

    def __init__(self, run_dir: Path | None, *, tables: Mapping[str, pa.Table] | None = None,
                 manifest: Mapping[str, object] | None = None) -> None:
        from dcaudit.engine import shared_connection

        # a connection to the process's DuckDB (~1 ms; a database of its own ~0.03 s): its views are TEMP,
        # this connection's own
        self.con = shared_connection()
        if tables is not None:   # plain Arrow tables of the package schema (notebook views)
            self.dir = Path(run_dir or ".")
            self.manifest = dict(manifest or {})
            self.schemas = {name: t.schema for name, t in tables.items()}
            self.rows = {name: t.num_rows for name, t in tables.items()}
            for name, t in tables.items():
                self.con.register(f"_arrow_{name}", t)
                self.con.execute(f'CREATE TEMP VIEW "{name}" AS SELECT * FROM "_arrow_{name}"')
            return
        self.dir = Path(run_dir)
        problems = verify_package(self.dir, columns=True)
        if problems:
            raise IntegrityError("the evidence package is damaged: " + "; ".join(problems)
                                 + "; re-run its spec to produce a fresh package")
        self.manifest = read_manifest(self.dir)
        files = {p.stem: p for p in sorted(self.dir.glob("*.parquet"))}
        self.schemas = {name: pq.read_schema(path) for name, path in files.items()}
        self.rows = {name: pq.read_metadata(path).num_rows for name, path in files.items()}
        for name, path in files.items():
            self.con.execute(f'CREATE TEMP VIEW "{name}" AS SELECT * FROM read_parquet(\'{str(path).replace(chr(39), chr(39) * 2)}\')')

    @property
    def names(self) -> list[str]:
        return list(self.schemas)

    def has(self, name: str, *columns: str) -> bool:
        return self.rows.get(name, 0) > 0 and all(c in self.schemas[name].names for c in columns)

    def cols(self, name: str) -> set[str]:
        return set(self.schemas[name].names) if name in self.schemas else set()

    def table(self, name: str, limit: int = MAX_ROWS) -> pa.Table:
        """The first ``limit`` rows of a table, without its run_id (every row has the same one)."""
        cols = [c for c in self.schemas[name].names if c != "run_id"]
        return self.sql(f"SELECT {', '.join(chr(34) + c + chr(34) for c in cols)} FROM \"{name}\" LIMIT {int(limit)}")

    def sql(self, query: str) -> pa.Table:
        return self.con.sql(query).to_arrow_table()


# ---------------------------------------------------------------- formatting helpers

def _is_fraction(column: str) -> bool:
    return (column.endswith(("fraction", "_rate", "_share", "_risk", "prevalence")) or "fraction_" in column
            or "_rate_" in column or "_risk_" in column
            or column in {"risk_bound", "risk_bound_max", "relative_cost_reduction"})


def _cell(column: str, value: object) -> tuple[str, bool]:
    """(text, numeric?) of one cell; fractions as percentages."""
    if value is None:
        return "", False
    if isinstance(value, bool):
        return str(value).lower(), False
    if isinstance(value, float):
        if _is_fraction(column):
            return f"{percent_number(value)}%", True
        return number(value), True
    if isinstance(value, int):
        return str(value), True
    if isinstance(value, list | tuple):
        return cut_text(", ".join(str(v) for v in value)), False
    text = str(value)
    if column == "status":
        return f'<span class="st-{escape(text)}">{escape(text)}</span>', False
    return cut_text(text), False


def cut_text(text: str, limit: int = MAX_CELL) -> str:
    """``text`` escaped for HTML; longer than ``limit``, its start marked as cut (an ellipsis, a dotted
    underline) with the whole value in the title, so a reader sees it was cut and can read all of it."""
    if len(text) <= limit:
        return escape(text)
    whole = text if len(text) <= MAX_TITLE else \
        f"{text[:MAX_TITLE]}… (cut here: {len(text)} characters in all)"
    return f'<span class="cut" title="{escape(whole)}">{escape(text[:limit - 1])}…</span>'


def html_table(table: pa.Table, *, max_rows: int = MAX_ROWS, caption: str = "", total: int | None = None,
               rest: str = "the Parquet file has all") -> str:
    """``total``: the table's full row count when ``table`` is already a prefix of it; ``rest``: where a
    reader finds the rows not shown. A table cut short says how many of how many rows it shows, and an
    empty one says it has none."""
    shown = table.slice(0, max(0, max_rows))
    # never fewer in all than on the page: a miscounted total must not read as "first 0 of 1"
    total = max(table.num_rows if total is None else total, shown.num_rows)
    head = "".join(f"<th>{escape(c)}</th>" for c in shown.column_names)
    rows = []
    for row in shown.to_pylist():
        cells = []
        for c, v in row.items():
            text, numeric = _cell(c, v)
            cells.append(f'<td class="num">{text}</td>' if numeric else f"<td>{text}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    more = ""
    if total == 0:
        more = '<p class="note">no rows</p>'
    elif total > shown.num_rows:
        more = f'<p class="note">{shown_of(shown.num_rows, total)} shown; {rest}.</p>'
    cap = f"<caption>{escape(caption)}</caption>" if caption else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>{more}"


def _present(pkg: Package, name: str, wanted: Iterable[str]) -> list[str]:
    have = pkg.cols(name)
    return [c for c in dict.fromkeys(wanted) if c in have]


def _select(pkg: Package, name: str, wanted: Iterable[str], where: str = "TRUE", order: str = "") -> pa.Table:
    cols = _present(pkg, name, wanted)
    # drop columns that are entirely NULL (e.g. model in a single-model audit) to keep tables narrow;
    # one query counts them all (a query a column cost ~2 ms each, ~20 columns a table)
    counts = pkg.con.sql(f"SELECT {', '.join(f'count({chr(34)}{c}{chr(34)})' for c in cols)} FROM {name} "
                         f"WHERE {where}").fetchall()[0] if cols else ()
    non_null = [c for c, n in zip(cols, counts, strict=True) if n]
    q = f"SELECT {', '.join(f'{chr(34)}{c}{chr(34)}' for c in non_null) or '*'} FROM {name} WHERE {where}"
    return pkg.sql(q + (f" ORDER BY {order}" if order else ""))


def _label_expr(pkg: Package, name: str, keys: Sequence[str]) -> str:
    present = _present(pkg, name, keys)
    if not present:
        return "'all'"
    return "concat_ws(' · ', " + ", ".join(f'CAST("{k}" AS VARCHAR)' for k in present) + ")"


# ---------------------------------------------------------------- sections

def _section_summary(pkg: Package) -> str:
    if not pkg.has("summary"):
        return ""
    label = _label_expr(pkg, "summary", ("audit_id", "model", "fiber_rule"))
    parts = ["<h2 id='summary'>Summary</h2>"]
    if {*defaults.STATUSES, "n_candidates"} <= pkg.cols("summary"):
        shares = ", ".join(f"{s} / n_candidates AS {s}" for s in defaults.STATUSES)
        rows = pkg.sql(f"SELECT {label} AS label, {shares} FROM summary WHERE n_candidates > 0 "
                       f"LIMIT {MAX_BARS}").to_pylist()
        first = pkg.sql("SELECT * FROM summary LIMIT 1").to_pylist()[0]
        parts.append(
            '<div>'
            f'<span class="kpi"><b>{int(first["n_candidates"] or 0)}</b>candidates (first audit)</span>'
            f'<span class="kpi"><b>{_share(first.get("certified_fraction"))}</b>certified</span>'
            f'<span class="kpi"><b>{_share(first.get("ambiguous_fraction"))}</b>ambiguous</span>'
            f'<span class="kpi"><b>{pkg.rows["summary"]}</b>audit rows</span></div>')
        bars = [charts.StackedBar(r["label"], tuple((s, r[s] or 0.0) for s in defaults.STATUSES)) for r in rows]
        parts.append(charts.stacked_bars(bars, title="Candidates by status, per audit" + _bars_scope(pkg, len(bars))))
    cols = ("audit_id", "model", "claim", "evidence", "fiber_rule", "min_support", "n_candidates", "n_excluded",
            "n_fibers", "n_mixed_fibers", "certified_true", "certified_false", "ambiguous", "unsupported",
            "certified_fraction", "ambiguous_fraction", "mixed_fiber_fraction", "prevalence",
            "benchmark_only_risk")
    parts.append(html_table(_select(pkg, "summary", cols)))
    parts.append('<p class="note">certified: the fiber is pure and has at least min_support members; '
                 "ambiguous: the fiber is mixed; unsupported: pure but smaller than min_support. "
                 "benchmark_only_risk: false decisions when each candidate gets its fiber's majority action.</p>")
    return "".join(parts)


def _bars_scope(pkg: Package, shown: int) -> str:
    """What the summary chart shows of the audit rows: only rows with candidates have a bar, so the count
    is of those (a lone audit without candidates read "first 0 of 1 rows")."""
    n = pkg.rows["summary"]
    with_candidates = pkg.sql("SELECT count(*) FROM summary WHERE n_candidates > 0").column(0)[0].as_py()
    if with_candidates == 0:
        return f" ({'the audit row has no' if n == 1 else f'none of the {n} audit rows have'} candidates)"
    if shown == n:
        return ""
    without = f"; {count(n - with_candidates, 'row')} without candidates" if with_candidates < n else ""
    return f" ({shown_of(shown, with_candidates, 'audit row')} with candidates{without})"


def _charts_note(shown: int, total: int, keys: Sequence[str] = ("audit_id",)) -> str:
    """A note when a section draws charts for only some of its groups (MAX_CHARTS), empty otherwise: the
    groups past the limit would otherwise just be missing."""
    if total <= shown:
        return ""
    return (f'<p class="note">Charts for the {shown_of(shown, total, _group_noun(keys))}; the table below has '
            "all of them.</p>")


def _group_noun(keys: Sequence[str]) -> str:
    """What one chart or bar stands for: ``audit``, ``(audit, setting) group``."""
    names = [k.removesuffix("_id") for k in keys]
    return names[0] if len(names) == 1 else f"({', '.join(names)}) group" if names else "group"


def _section_fibers(pkg: Package, data: dict | None = None) -> str:
    if not pkg.has("fibers", "n"):
        return ""
    cols = pkg.cols("fibers")
    mixed_first = "(status = 'ambiguous') DESC, " if "status" in cols else ""
    wanted = _present(pkg, "fibers", ("audit_id", "model", "split", "evidence_key", "n", "n_true", "status",
                                      "mixed_kind"))
    if "evidence_key" not in wanted and "fiber_key" in cols:
        wanted.insert(2, "fiber_key")
    audits = explorer.fiber_audits(pkg)
    n_audits = (pkg.sql("SELECT count(DISTINCT audit_id) FROM fibers").column(0)[0].as_py()
                if "audit_id" in cols else 1)
    parts = ["<h2 id='fibers'>Fibers</h2>",
             '<p class="note">Fiber sizes by status, and the largest mixed fibers: the evidence patterns that '
             "cannot decide the claim, and where a new probe would pay off most. Bars: fiber size relative to "
             "the largest, split by claim value."
             + (" Audits that differ only in min_support share their fibers; one of them is shown."
                if audits != [None] and len(audits) < n_audits else "") + "</p>"]
    parts.append(_charts_note(min(len(audits), MAX_CHARTS), len(audits)))
    figs = []
    for audit in audits[:MAX_CHARTS]:
        where = "TRUE" if audit is None else f"audit_id = {explorer.lit(audit)}"
        name = "" if audit is None else f" — {audit}"
        if "status" in cols:
            sizes = pkg.sql(f"SELECT status, list(n) AS n FROM fibers WHERE {where} GROUP BY status").to_pylist()
            by = {r["status"]: r["n"] for r in sizes}
            figs.append(charts.fiber_sizes({k: by[k] for k in (*defaults.STATUSES, *sorted(by)) if k in by},
                                           title=f"Fiber sizes by status{name}"))
        rows = pkg.sql(f"SELECT {_label_expr(pkg, 'fibers', ('evidence_key', 'model'))} AS label, n, "
                       f"{'n_true' if 'n_true' in cols else 'NULL'} AS n_true, "
                       f"{'status' if 'status' in cols else 'NULL'} AS status FROM fibers WHERE {where} "
                       f"ORDER BY {mixed_first}n DESC LIMIT 12").to_pylist()
        n_fibers = pkg.sql(f"SELECT count(*) FROM fibers WHERE {where}").column(0)[0].as_py()
        total = max((r["n"] for r in rows), default=1) or 1
        bars = []
        for r in rows:
            if r["n_true"] is not None and r["status"] == "ambiguous":
                segs = (("claim true", r["n_true"] / total), ("claim false", (r["n"] - r["n_true"]) / total))
                note = f"{r['n_true']}/{r['n']}"
            else:
                segs = ((r["status"] or "fiber", r["n"] / total),)
                note = str(r["n"])
            bars.append(charts.StackedBar(str(r["label"]), segs, note))
        scope = shown_of(len(bars), n_fibers, "fiber", order="first")
        figs.append(charts.stacked_bars(bars, title=f"Largest fibers{name}{', mixed first' if mixed_first else ''} "
                                        f"({scope})",
                                        kind="largest-fibers", percent=False))
    parts.append('<div class="figs">' + "".join(figs) + "</div>")
    share = ", n_true / n AS share_true" if "n_true" in cols else ""
    where = ("TRUE" if audits == [None] else "audit_id IN (" + ", ".join(explorer.lit(a) for a in audits) + ")")
    table = pkg.sql(f"SELECT {', '.join(chr(34) + c + chr(34) for c in wanted)}{share} FROM fibers "
                    f"WHERE {where} ORDER BY {mixed_first}n DESC LIMIT {MAX_ROWS}")
    total = pkg.sql(f"SELECT count(*) FROM fibers WHERE {where}").column(0)[0].as_py()
    parts.append(explorer.section(data))
    parts.append("<details><summary>The fibers table (largest first)</summary>" + html_table(table, total=total)
                 + "</details>")
    return "".join(parts)


def _section_candidates(pkg: Package) -> str:
    if not pkg.has("candidates", "status"):
        return ""
    keys = _present(pkg, "candidates", ("audit_id", "model"))
    group = ", ".join(keys)
    table = pkg.sql(f"PIVOT (SELECT {group + ', ' if group else ''}status FROM candidates) ON status "
                    f"USING count(*) {'GROUP BY ' + group if group else ''} {'ORDER BY ' + group if group else ''}")
    return ("<h2 id='candidates'>Candidates</h2>"
            '<p class="note">Candidates per status (excluded: missing evidence or claim value, with the reason '
            "in candidates.parquet). The list of ambiguous candidates: <code>select * from candidates where "
            "status = 'ambiguous'</code>.</p>" + html_table(table))


def _section_completion(pkg: Package) -> str:
    if not pkg.has("completion", "policy", "step", "certified_fraction"):
        return ""
    cols = pkg.cols("completion")
    mean_rows = "seed IS NULL" if "seed" in cols else "TRUE"
    keys = _present(pkg, "completion", ("audit_id", "setting", "experiment"))
    groups = pkg.sql(f"SELECT DISTINCT {_label_expr(pkg, 'completion', keys)} AS g FROM completion "
                     f"WHERE {mean_rows} ORDER BY g").column(0).to_pylist()
    parts = ["<h2 id='completion'>Completion curves</h2>",
             '<p class="note">Certified fraction (held-out, mean over seeds; band p10–p90) as probes are added, '
             "per probe-selection policy. Step 0 is the benchmark evidence alone.</p>"]
    band = {"certified_fraction_p10", "certified_fraction_p90"} <= cols
    parts.append(_charts_note(min(len(groups), MAX_CHARTS), len(groups), keys))
    for g in groups[:MAX_CHARTS]:
        where = f"{mean_rows} AND {_label_expr(pkg, 'completion', keys)} = '{g.replace(chr(39), chr(39) * 2)}'"
        rows = pkg.sql("SELECT policy, list(step ORDER BY step) AS x, list(certified_fraction ORDER BY step) AS y"
                       + (", list(certified_fraction_p10 ORDER BY step) AS lo, "
                          "list(certified_fraction_p90 ORDER BY step) AS hi" if band else "")
                       + (", list(false_decision_rate ORDER BY step) AS f" if "false_decision_rate" in cols else "")
                       + f" FROM completion WHERE {where} GROUP BY policy ORDER BY policy").to_pylist()
        # one band (the recommended policy's) keeps the chart readable; the table has every p10/p90
        shaded = "response_rank" if any(r["policy"] == "response_rank" for r in rows) else rows[0]["policy"]
        figs = [charts.line_chart([charts.Series(r["policy"], tuple(r["x"]), tuple(r["y"]),
                                           tuple(r["lo"]) if band and r["policy"] == shaded else None,
                                           tuple(r["hi"]) if band and r["policy"] == shaded else None)
                                for r in rows], title=f"Certified fraction — {g}", x_label="probes added",
                               y_label="certified")]
        if "false_decision_rate" in cols and any(v is not None for r in rows for v in r["f"]):
            figs.append(charts.line_chart([charts.Series(r["policy"], tuple(r["x"]), tuple(r["f"])) for r in rows],
                                       title=f"False-decision rate — {g}", x_label="probes added",
                                       y_label="false decisions"))
        parts.append('<div class="figs">' + "".join(figs) + "</div>")
    wanted = ("audit_id", "setting", "policy", "step", "probe_added", "probe_added_share", "certified_fraction",
              "certified_fraction_p10", "certified_fraction_p90", "false_decision_rate", "n_test")
    parts.append(html_table(_select(pkg, "completion", (*keys, *wanted), mean_rows,
                                    ", ".join([*keys, "policy", "step"]))))
    return "".join(parts)


def _section_replay(pkg: Package) -> str:
    if not pkg.has("replay", "policy"):
        return ""
    cols = pkg.cols("replay")
    summary_rows = "seed IS NULL" if "seed" in cols else "TRUE"
    keys = _present(pkg, "replay", ("audit_id", "model", "certification"))
    label = _label_expr(pkg, "replay", keys)
    groups = pkg.sql(f"SELECT DISTINCT {label} AS g FROM replay WHERE {summary_rows} ORDER BY g"
                     ).column(0).to_pylist()
    order = ("list_position(" + str(list(REPLAY_POLICIES)) + ", policy)")
    parts = ["<h2 id='replay'>Certify-then-acquire replay</h2>",
             '<p class="note">Held-out replays: certify on the calibration split, act on the test split. '
             "Dot = mean over seeds, whisker = p10–p90. certify_then_acquire measures every candidate it "
             "cannot certify (acquired); break_even_price is the price per measurement, in false decisions, "
             "below which that pays off.</p>"]
    parts.append(_charts_note(min(len(groups), MAX_CHARTS), len(groups), keys))
    for metric, title in (("false_decision_rate", "False-decision rate"), ("certified_fraction", "Certified")):
        if metric not in cols:
            continue
        lo, hi = f"{metric}_p10", f"{metric}_p90"
        has_band = {lo, hi} <= cols
        figs = []
        for g in groups[:MAX_CHARTS]:
            where = f"{summary_rows} AND {label} = '{g.replace(chr(39), chr(39) * 2)}'"
            rows = pkg.sql(f"SELECT policy, {metric} AS v" + (f", {lo} AS lo, {hi} AS hi" if has_band else "")
                           + f" FROM replay WHERE {where} ORDER BY {order}, policy").to_pylist()
            figs.append(charts.interval_chart(
                [charts.Interval(r["policy"], r["v"], r.get("lo"), r.get("hi")) for r in rows],
                title=f"{title} — {g}", x_label=metric.replace("_", " ")))
        parts.append('<div class="figs">' + "".join(figs) + "</div>")
    if {"prices", "total_cost"} <= cols:
        figs = []
        for g in groups[:MAX_CHARTS]:
            where = f"{summary_rows} AND {label} = {explorer.lit(g)} AND total_cost IS NOT NULL"
            rows = pkg.sql(f"SELECT policy, prices AS x, total_cost AS y FROM replay WHERE {where} "
                           f"ORDER BY {order}, policy").to_pylist()
            series = [charts.Series(r["policy"], tuple(r["x"] or ()), tuple(r["y"] or ())) for r in rows
                      if r["x"] and r["y"] and len(r["x"]) == len(r["y"])]
            if series:
                figs.append(charts.line_chart(series, title=f"Cost against the price of a measurement — {g}",
                                              x_label="price per measurement (in false decisions)",
                                              y_label="total cost (false decisions + price × measurements)",
                                              percent=False, log_x=True, kind="replay-cost"))
        parts.append('<div class="figs">' + "".join(figs) + "</div>")
    wanted = ("audit_id", "model", "certification", "policy", "n_seeds", "certified_fraction", "false_decision_rate",
              "false_decision_rate_p10", "false_decision_rate_p90", "false_rate_certified", "risk_bound",
              "acquired_fraction", "break_even_price", "tolerance")
    parts.append(html_table(_select(pkg, "replay", wanted, summary_rows, ", ".join([*keys, order]))))
    return "".join(parts)


def _section_costs(pkg: Package) -> str:
    """Cost per candidate against the price of a measurement, per policy (mean over seeds, band p10–p90)."""
    if not pkg.has("costs", "policy", "price", "cost_per_candidate"):
        return ""
    cols = pkg.cols("costs")
    mean = "seed IS NULL" if "seed" in cols else "TRUE"
    keys = _present(pkg, "costs", ("audit_id", "model", "certification", "mode"))
    label = _label_expr(pkg, "costs", keys)
    groups = pkg.sql(f"SELECT DISTINCT {label} AS g FROM costs WHERE {mean} ORDER BY g").column(0).to_pylist()
    band = {"cost_per_candidate_p10", "cost_per_candidate_p90"} <= cols
    parts = ["<h2 id='costs'>Costs at a price</h2>",
             '<p class="note">Cost per candidate (false decisions plus price × measurements, in units of one false '
             "decision) against the price of one measurement, per policy: mean over seeds, band p10–p90. The "
             "cheapest policy at a price is the one to act with.</p>",
             _charts_note(min(len(groups), MAX_CHARTS), len(groups), keys)]
    figs = []
    for g in groups[:MAX_CHARTS]:
        rows = pkg.sql("SELECT policy, list(price ORDER BY price) AS x, list(cost_per_candidate ORDER BY price) AS y"
                       + (", list(cost_per_candidate_p10 ORDER BY price) AS lo, "
                          "list(cost_per_candidate_p90 ORDER BY price) AS hi" if band else "")
                       + f" FROM costs WHERE {mean} AND {label} = {explorer.lit(g)} GROUP BY policy "
                       f"ORDER BY list_position({list(REPLAY_POLICIES)}, policy), policy").to_pylist()
        figs.append(charts.line_chart(
            [charts.Series(r["policy"], tuple(r["x"]), tuple(r["y"]), tuple(r["lo"]) if band else None,
                           tuple(r["hi"]) if band else None) for r in rows],
            title=f"Cost per candidate — {g}", x_label="price per measurement (in false decisions)",
            y_label="cost per candidate", percent=False, log_x=True, kind="costs"))
    parts.append('<div class="figs">' + "".join(figs) + "</div>")
    wanted = ("audit_id", "model", "certification", "mode", "policy", "price", "n_seeds", "cost_per_candidate",
              "cost_per_candidate_p10", "cost_per_candidate_p90", "measured_fraction", "false_rate", "cheapest",
              "best_baseline", "diff_vs_best", "diff_low", "diff_high")
    parts.append(html_table(_select(pkg, "costs", wanted, mean, ", ".join([*keys, "price", "policy"]))))
    return "".join(parts)


def _section_findings(pkg: Package) -> str:
    if not pkg.has("findings"):
        return ""
    cols = pkg.cols("findings")
    parts = ["<h2 id='findings'>Findings</h2>",
             '<p class="note">Rows the inputs raised a flag on (kept, never dropped silently): bad rows, duplicates, '
             "conflicting records, leaks.</p>"]
    if "kind" in cols:
        parts.append(html_table(pkg.sql("SELECT kind, count(*) AS rows FROM findings GROUP BY kind "
                                        "ORDER BY rows DESC, kind")))
    parts.append(html_table(pkg.table("findings"), total=pkg.rows["findings"]))
    return "".join(parts)


def _resolution(rule: str | None) -> float | None:
    """The number in a fiber rule (``quantile:20`` -> 20, ``window:0.042`` -> 0.042)."""
    try:
        return float(str(rule).split(":", 1)[1])
    except (IndexError, ValueError):
        return None


def _section_sensitivity(pkg: Package) -> str:
    if not pkg.has("sensitivity"):
        return ""
    cols = pkg.cols("sensitivity")
    parts = ["<h2 id='sensitivity'>Resolution sensitivity</h2>",
             '<p class="note">The same evidence read at several fiber rules: finer rules make smaller fibers, '
             "which are purer but less supported. One chart per audit and kind of rule; lines are the mean "
             "over models, bands their range.</p>"]
    if {"certified_fraction", "ambiguous_fraction", "fiber_rule"} <= cols:
        keys = _present(pkg, "sensitivity", ("audit_id",))
        label = _label_expr(pkg, "sensitivity", keys)
        kind = "rule_kind" if "rule_kind" in cols else "split_part(fiber_rule, ':', 1)"
        unsup = "unsupported_fraction" if "unsupported_fraction" in cols else "NULL"
        rows = pkg.sql(f"SELECT {label} AS g, {kind} AS kind, fiber_rule, avg(certified_fraction) AS c, "
                       "min(certified_fraction) AS c_lo, max(certified_fraction) AS c_hi, "
                       "avg(ambiguous_fraction) AS a, min(ambiguous_fraction) AS a_lo, max(ambiguous_fraction) AS a_hi, "
                       f"avg({unsup}) AS u FROM sensitivity GROUP BY ALL ORDER BY g, kind").to_pylist()
        groups: dict[tuple, list[dict]] = {}
        for r in rows:
            if _resolution(r["fiber_rule"]) is not None:
                groups.setdefault((r["g"], r["kind"]), []).append(r)
        parts.append(_charts_note(min(len(groups), 2 * MAX_CHARTS), len(groups), (*keys, "kind of rule")))
        figs = []
        for (g, kind_name), rs in list(groups.items())[: 2 * MAX_CHARTS]:
            rs.sort(key=lambda r: _resolution(r["fiber_rule"]))
            x = tuple(_resolution(r["fiber_rule"]) for r in rs)
            series = [charts.Series("certified", x, tuple(r["c"] for r in rs), tuple(r["c_lo"] for r in rs),
                                    tuple(r["c_hi"] for r in rs)),
                      charts.Series("ambiguous", x, tuple(r["a"] for r in rs), tuple(r["a_lo"] for r in rs),
                                    tuple(r["a_hi"] for r in rs))]
            if any(r["u"] for r in rs):
                series.append(charts.Series("unsupported", x, tuple(r["u"] for r in rs)))
            figs.append(charts.line_chart(series, title=f"{g} — {kind_name}", x_label=_RESOLUTION_LABEL.get(
                kind_name, f"{kind_name} parameter"), y_label="candidates", kind="sensitivity",
                log_x=len(x) > 1 and min(x) > 0 and max(x) / min(x) >= 8))
        parts.append('<div class="figs">' + "".join(figs) + "</div>")
    parts.append(html_table(pkg.table("sensitivity"), total=pkg.rows["sensitivity"]))
    return "".join(parts)


_RESOLUTION_LABEL = {"quantile": "quantile bins (k)", "width": "bin width", "knn": "neighbours (k)",
                     "window": "window tolerance"}


def _section_choice(pkg: Package) -> str:
    if not pkg.has("choice"):
        return ""
    t = pkg.schemas["choice"]
    parts = ["<h2 id='choice'>Model choice</h2>",
             '<p class="note">Rank by the benchmark metric versus rank by what each model certifies: when '
             "they disagree, the leaderboard winner is not the deployment winner.</p>"]
    if {"model", "certified_fraction"} <= set(t.names):
        keys = _present(pkg, "choice", ("setting", "split", "experiment"))
        label = _label_expr(pkg, "choice", ("model", *keys))
        rows = pkg.sql(f"SELECT {label} AS label, avg(certified_fraction) AS v, min(certified_fraction) AS lo, "
                       f"max(certified_fraction) AS hi FROM choice GROUP BY 1 ORDER BY 1 LIMIT {MAX_BARS}"
                       ).to_pylist()
        n = pkg.sql(f"SELECT count(DISTINCT {label}) FROM choice").column(0)[0].as_py()
        parts.append(_interval_chart(rows, title="Certified fraction per model (mean; whisker = range)"
                                     + _limited(len(rows), n, _group_noun(("model", *keys))), x_label="certified fraction"))
    parts.append(html_table(pkg.table("choice"), total=pkg.rows["choice"]))
    return "".join(parts)


def _limited(shown: int, total: int, noun: str) -> str:
    """`` — first 40 of 55 models`` for a chart that shows only some (MAX_BARS), empty when it shows all."""
    return f" — {shown_of(shown, total, noun)}" if shown < total else ""


def _interval_chart(rows: list[dict], *, title: str, x_label: str) -> str:
    """Rows of (label, v, lo, hi) as one interval chart."""
    return charts.interval_chart([charts.Interval(r["label"], r["v"], r["lo"], r["hi"]) for r in rows],
                                 title=title, x_label=x_label)


def _section_metrics(pkg: Package) -> str:
    if not pkg.has("metrics"):
        return ""
    t = pkg.schemas["metrics"]
    parts = ["<h2 id='metrics'>Metrics</h2>"]
    if {"metric", "value"} <= set(t.names):
        keys = _present(pkg, "metrics", ("experiment", "setting", "audit_id", "metric"))
        lo = "ci_low" if "ci_low" in t.names else "NULL"
        hi = "ci_high" if "ci_high" in t.names else "NULL"
        in_range = "FROM metrics WHERE value IS NOT NULL AND isfinite(value) AND value BETWEEN 0 AND 1"
        rows = pkg.sql(f"SELECT {_label_expr(pkg, 'metrics', keys)} AS label, value AS v, {lo} AS lo, {hi} AS hi "
                       f"{in_range} LIMIT {MAX_BARS}").to_pylist()
        if rows:
            n = pkg.sql(f"SELECT count(*) {in_range}").column(0)[0].as_py()
            parts.append(_interval_chart(rows, title="Metrics in [0, 1] (whisker = ci_low to ci_high: an interval or "
                                         "a spread over seeds, see the table)" + _limited(len(rows), n, "metric row"),
                                         x_label="value"))
    parts.append(html_table(pkg.table("metrics"), total=pkg.rows["metrics"]))
    return "".join(parts)


def _section_other(pkg: Package) -> str:
    extra = [n for n in pkg.names if n not in PACKAGE_TABLES]
    parts = []
    for name in extra:
        parts.append(f"<h2 id='{escape(name)}'>{escape(name)}</h2>"
                     + html_table(pkg.table(name, 30), max_rows=30, total=pkg.rows[name]))
    return "".join(parts)


def _kv(rows: Iterable[tuple[str, object]]) -> str:
    body = "".join(f"<tr><th>{escape(k)}</th><td>{escape('' if v is None else str(v))}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


_IN_MANIFEST = "manifest.json has all"   # provenance tables come from the manifest, not from a Parquet file


def _section_provenance(pkg: Package) -> str:
    m = pkg.manifest
    parts = ["<h2 id='provenance'>Provenance</h2>",
             _kv([("run id", m.get("run_id")), ("spec", m.get("spec")), ("spec sha256", m.get("spec_hash")),
                  ("source", m.get("source")), ("started", m.get("started_at")), ("seconds", m.get("seconds")),
                  ("dcaudit version", m.get("package_version")), ("git sha", m.get("git_sha")),
                  ("code sha256", m.get("code_hash")), ("cache key", m.get("cache_key"))])]
    inputs = m.get("inputs") or {}
    if inputs:
        parts.append("<h3>Inputs</h3>" + html_table(arrow_table({"input": list(inputs), "sha256": list(inputs.values())}),
                                                   max_rows=200, rest=_IN_MANIFEST))
    sources = [r for r in (m.get("sources") or []) if isinstance(r, dict)]
    if sources:
        keys = list(dict.fromkeys(k for r in sources for k in r))
        parts.append("<h3>Sources</h3>" + html_table(arrow_table({k: [str(r.get(k, "")) for r in sources]
                                                               for k in keys}), max_rows=200, rest=_IN_MANIFEST))
    timings = m.get("timings") or {}
    if timings:
        parts.append("<h3>Stage timings</h3>" + html_table(arrow_table({"stage": list(timings),
                                                                     "seconds": [float(v) for v in timings.values()]}),
                                                                     rest=_IN_MANIFEST))
    files = m.get("files") or {}
    counts = m.get("row_counts") or {}
    if files or counts:
        names = sorted(set(files) | {f"{k}.parquet" for k in counts})
        parts.append("<h3>Package files</h3>" + html_table(arrow_table({
            "file": names, "rows": [counts.get(n.removesuffix(".parquet")) for n in names],
            "sha256": [files.get(n) for n in names]}, {"rows": "int64", "sha256": "string"}), max_rows=200,
            rest=_IN_MANIFEST))
    notes = m.get("notes") or []
    if notes:
        parts.append("<h3>Notes</h3><ul>" + "".join(f"<li>{escape(str(n))}</li>" for n in notes) + "</ul>")
    spec = m.get("resolved_spec")
    if spec:
        parts.append("<h3>Resolved spec</h3><pre>" + escape(json.dumps(spec, indent=2, default=str)) + "</pre>")
    return "".join(parts)


SECTIONS: tuple[Callable[[Package], str], ...] = (
    _section_summary, _section_fibers, _section_candidates, _section_findings, _section_completion,
    _section_replay, _section_costs, _section_sensitivity, _section_choice, _section_metrics, _section_other,
    _section_provenance)


def page(title: str, subtitle: str, body: Iterable[str], nav: Sequence[str] = ()) -> str:
    """One self-contained HTML document (the report's CSS, the explorer's CSS)."""
    text = "".join(body)
    links = " · ".join(f'<a href="#{n}">{n}</a>' for n in nav if f"id='{n}'" in text)
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{escape(title)}</title><style>{CSS}{explorer.CSS}</style></head><body>"
            f"<h1>{escape(title)}</h1><p class='note'>{subtitle}{' · ' + links if links else ''}</p>"
            + text + "</body></html>")


def render_report(run_dir: Path, *, extra_sources: Iterable[Mapping[str, object]] = (),
                  member_budget: int = explorer.MEMBER_BUDGET, picture_budget: int = explorer.PICTURE_BUDGET) -> str:
    """The report of the package in ``run_dir`` as one HTML document (raises IntegrityError if damaged).

    ``extra_sources``: more source tables for the explorer's member details, as manifest ``sources``
    entries (``{"table": name, "path": parquet}``), e.g. a pixel table of a vision run.
    """
    pkg = Package(run_dir)
    try:
        # The members' depictions are drawn by a worker process while the other sections (the charts) render
        # here; then the explorer's details are placed and its section rendered, in the page's order.
        data, place_details = explorer.explorer_data_deferred(pkg, extra_sources=extra_sources,
                                                              member_budget=member_budget,
                                                              picture_budget=picture_budget)
        parts = {section: section(pkg) for section in SECTIONS if section is not _section_fibers}
        place_details()
        body = [_section_fibers(pkg, data) if section is _section_fibers else parts[section]
                for section in SECTIONS]
    finally:
        pkg.con.close()
    m = pkg.manifest
    title = f"dcaudit — {m.get('spec') or pkg.dir.name}: {m.get('run_id', '')}"
    subtitle = (f"source {escape(str(m.get('source', '')))} · {escape(str(m.get('started_at', '')))} · "
                f"{escape(str(m.get('seconds', '')))} s")
    return page(title, subtitle, body, (*PACKAGE_TABLES[:2], "explorer", *PACKAGE_TABLES[2:], "provenance"))


def _share(fraction: float | None) -> str:
    """A headline fraction as a percentage; NULL (no candidates) is a dash, never 0 %."""
    return "—" if fraction is None else f"{percent_number(float(fraction))}%"


def write_report(run_dir: Path, target: Path | None = None, *,
                 extra_sources: Iterable[Mapping[str, object]] = ()) -> Path:
    """Render and write ``report.html`` (into the package unless ``target``) through a temporary file."""
    run_dir = Path(run_dir)
    target = Path(target) if target else run_dir / REPORT_NAME
    text = render_report(run_dir, extra_sources=extra_sources)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, target)
    except OSError as exc:  # a read-only workspace, a full disk: one line, and no temporary file left behind
        tmp.unlink(missing_ok=True)
        from dcaudit.errors import WorkspaceError

        raise WorkspaceError(f"cannot write {target} ({exc.strerror or exc}); give --out a path you can write "
                             "to") from None
    return target
