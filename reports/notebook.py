"""Notebook views: an HTML fragment of an audit result for Jupyter and VS Code (``_repr_html_``).

:func:`render_html` works from plain Arrow tables of the package schema (``summary``, ``fibers``,
``candidates``, ``completion``, …; any may be missing) and needs no widgets or scripts: the summary, the
largest mixed fibers with their members (RDKit structures when SMILES are given), and one plot
(completion curves when there are any, else fiber sizes by status) as inline SVG.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape

import pyarrow as pa

from dcaudit.reports import charts, explorer
from dcaudit.reports.numbers import count, shown_of

MAX_FIBERS = 5        # mixed fibers shown
MAX_MEMBERS = 12      # members shown per fiber
MAX_TEXT = 120        # characters shown of an id, an audit id or a fiber's evidence (all of it in the tooltip)

CSS = """
.dcaudit-view{font-family:system-ui,-apple-system,Segoe UI,sans-serif;font-size:13px;color:#222;max-width:1000px}
.dcaudit-view table{border-collapse:collapse;margin:.4em 0;font-size:12px}
.dcaudit-view th,.dcaudit-view td{border:1px solid #ddd;padding:2px 6px;text-align:left}
.dcaudit-view td.num{text-align:right;font-variant-numeric:tabular-nums}
.dcaudit-view .note{color:#555;font-size:12px}.dcaudit-view h4{margin:.8em 0 .2em}
.dcaudit-view .members{display:flex;flex-wrap:wrap;gap:4px;list-style:none;padding:0;margin:.2em 0}
.dcaudit-view .member{border:1px solid #e2e2e2;border-radius:3px;padding:2px 4px;font-size:11px;min-width:100px}
.dcaudit-view .member.cv1{border-color:#D55E00}.dcaudit-view .member svg{width:110px;height:82px;display:block}
.dcaudit-view .cv1 b{color:#D55E00}.dcaudit-view .cv0 b{color:#0072B2}
.dcaudit-view .cut{text-decoration:underline dotted #999;cursor:help}
"""

SUMMARY_COLUMNS = ("audit_id", "model", "claim", "fiber_rule", "min_support", "n_candidates", "n_fibers",
                   "n_mixed_fibers", "certified_fraction", "ambiguous_fraction", "unsupported_fraction",
                   "benchmark_only_risk")


def _summary(pkg) -> str:  # noqa: ANN001 - html.Package
    from dcaudit.reports.html import _select, html_table

    if not pkg.has("summary"):
        return ""
    table = _select(pkg, "summary", SUMMARY_COLUMNS)
    return "<h4>Summary</h4>" + html_table(table, max_rows=12, rest="the summary table has all")


def _text(value: object, limit: int = MAX_TEXT) -> str:
    """Text from the data, escaped, isolated from the page's direction (``<bdi>``: a right-to-left override in an
    id reverses nothing after it) and cut to ``limit`` characters, marked, with the whole in the tooltip
    (:func:`dcaudit.reports.html.cut_text`, as in the report's tables)."""
    from dcaudit.reports.html import cut_text

    return f"<bdi>{cut_text(str(value), limit)}</bdi>"


def _fibers(data: dict | None) -> str:
    if not data or not data["fibers"]:
        return "" if data is None else '<p class="note">No mixed fibers: the evidence decides every fiber.</p>'
    shown = min(MAX_FIBERS, len(data["fibers"]))
    parts = [f"<h4>Mixed fibers ({shown_of(shown, data['totalMixed'], 'fiber', order='largest')})</h4>"]
    order = explorer.priority([f["n"] for f in data["fibers"]])[:MAX_FIBERS]
    for i in order:
        f = data["fibers"][i]
        audit = data["audits"][f["a"]]["id"]
        group = data["S"][f["g"]] if "g" in f else ""
        kind = f" · {_text(f['k'])}" if f.get("k") else ""
        parts.append(f"<p><b>{_text(data['S'][f['e']], 4 * MAX_TEXT)}</b> <span class='note'>{_text(audit)}"
                     f"{' · ' + _text(group) if group else ''} · n = {f['n']} · claim true {f['t']}{kind}</span></p>")
        items = []
        members = f.get("m", [])
        for j, m in enumerate(members[:MAX_MEMBERS]):
            cv = f.get("c", "")[j] if j < len(f.get("c", "")) else "-"
            tiles = f.get("d") or []
            keys = [t[0] for t in (tiles[j] if j < len(tiles) else []) if isinstance(t, list) and t[0]]
            pic = next((data["pics"][k] for k in keys if isinstance(data["pics"].get(k), str)), "")
            value = {"1": "true", "0": "false"}.get(cv, "?")
            items.append(f'<li class="member cv{escape(cv)}">{pic}<code>{_text(m)}</code> <b>{value}</b></li>')
        # the rest of the fiber, not only of the members listed: the member budget may have listed fewer
        rest = max(f["n"], len(members)) - len(items)
        more = f'<p class="note">{count(rest, "more member")} in the candidates table</p>' if rest > 0 else ""
        parts.append(f'<ul class="members">{"".join(items)}</ul>{more}')
    return "".join(parts)


def _plot(pkg) -> str:  # noqa: ANN001 - html.Package
    if pkg.has("completion", "policy", "step", "certified_fraction"):
        cols = pkg.cols("completion")
        where = "seed IS NULL" if "seed" in cols else "TRUE"
        if "audit_id" in cols:
            first = pkg.sql(f"SELECT min(audit_id) FROM completion WHERE {where}").column(0)[0].as_py()
            if first is not None:
                where += f" AND audit_id = {explorer.lit(first)}"
        band = {"certified_fraction_p10", "certified_fraction_p90"} <= cols
        rows = pkg.sql("SELECT policy, list(step ORDER BY step) AS x, list(certified_fraction ORDER BY step) AS y"
                       + (", list(certified_fraction_p10 ORDER BY step) AS lo, "
                          "list(certified_fraction_p90 ORDER BY step) AS hi" if band else "")
                       + f" FROM completion WHERE {where} GROUP BY policy ORDER BY policy").to_pylist()
        if rows:
            return charts.line_chart(
                [charts.Series(r["policy"], tuple(r["x"]), tuple(r["y"]), tuple(r["lo"]) if band else None,
                               tuple(r["hi"]) if band else None) for r in rows],
                title="Certified fraction as probes are added (band p10–p90)", x_label="probes added",
                y_label="certified", kind="completion", width=5.6, height=2.6)
    if pkg.has("fibers", "n", "status"):
        rows = pkg.sql("SELECT status, list(n) AS n FROM fibers GROUP BY status ORDER BY status").to_pylist()
        return charts.fiber_sizes({r["status"]: r["n"] for r in rows}, title="Fiber sizes by status", width=5.6)
    return ""


def render_html(tables: Mapping[str, pa.Table], *, title: str, notes: Sequence[str] = (),
                smiles: Mapping[str, str] | None = None) -> str:
    """An HTML fragment of the result in ``tables`` (name -> Arrow table of the package schema; polars
    frames are converted with ``.to_arrow()``), e.g. ``render_html(result.tables, title=...)``.

    ``smiles``: candidate id -> SMILES, for structure depictions of the members shown (needs RDKit).
    """
    from dcaudit.reports.html import Package

    # Arrow tables, or anything with .to_arrow() (the API's polars frames)
    arrow = {k: v if isinstance(v, pa.Table) else v.to_arrow() for k, v in tables.items()
             if isinstance(v, pa.Table) or hasattr(v, "to_arrow")}
    pkg = Package(None, tables=arrow)
    try:
        data = explorer.explorer_data(pkg, smiles=smiles, page=MAX_MEMBERS, member_budget=200_000,
                                      picture_budget=400_000) if pkg.has("fibers", "n", "status") else None
        body = [_summary(pkg), _fibers(data), _plot(pkg)]
    finally:
        pkg.con.close()
    note = "".join(f'<p class="note">{_text(n, 4 * MAX_TEXT)}</p>' for n in notes)
    return (f'<div class="dcaudit-view"><style>{CSS}</style><h3>{_text(title)}</h3>{note}'
            + "".join(body) + "</div>")
