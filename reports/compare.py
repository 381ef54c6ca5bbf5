"""What moved between two runs: one self-contained HTML page comparing two evidence packages.

Per audit (summary rows matched on audit_id, model, split, fiber rule and min_support): the certified,
ambiguous and unsupported fractions of run A and run B and the change; the fibers that changed status
(matched on the audit and the evidence key; a fiber present in one run only counts as changed); the
replay summary per policy; the last step of each completion curve. ``dcaudit report RUN_A --compare
RUN_B`` writes it.
"""

from __future__ import annotations

import os
from html import escape
from pathlib import Path

import duckdb
import pyarrow as pa

from dcaudit.errors import IntegrityError
from dcaudit.reports import charts, explorer
from dcaudit.reports.numbers import count
from dcaudit.reports.package import read_manifest, verify_package

MAX_ROWS = 200
MAX_CHART_ROWS = 30   # audit rows in the chart of the certified fraction (the table has them all)
SUMMARY_KEYS = ("audit_id", "model", "split", "fiber_rule", "min_support")
# a fiber is the same fiber only under the same claim, evidence and rule (bin 1 of quantile:4 is not bin 1 of quantile:3)
FIBER_KEYS = ("audit_id", "model", "split", "claim", "evidence", "fiber_rule", "evidence_key")
REPLAY_KEYS = ("audit_id", "model", "certification", "policy")


def _open(con: duckdb.DuckDBPyConnection, run_dir: Path, prefix: str) -> dict[str, list[str]]:
    problems = verify_package(run_dir, columns=True)
    if problems:
        raise IntegrityError("the evidence package is damaged: " + "; ".join(problems))
    cols = {}
    for path in sorted(Path(run_dir).glob("*.parquet")):
        name = f"{prefix}_{path.stem}"
        con.execute(f"CREATE VIEW {explorer.q(name)} AS SELECT * FROM read_parquet({explorer.lit(path)})")
        cols[path.stem] = [r[0] for r in con.execute(f"DESCRIBE {explorer.q(name)}").fetchall()]
    return cols


def _keys(wanted: tuple[str, ...], a: list[str], b: list[str]) -> list[str]:
    return [k for k in wanted if k in a and k in b]


def _on(keys: list[str]) -> str:
    return " AND ".join(f"a.{explorer.q(k)} IS NOT DISTINCT FROM b.{explorer.q(k)}" for k in keys) or "TRUE"


def _coalesced(keys: list[str]) -> str:
    return ", ".join(f"coalesce(a.{explorer.q(k)}, b.{explorer.q(k)}) AS {explorer.q(k)}" for k in keys)


def _table(table: pa.Table, total: int | None = None) -> str:
    from dcaudit.reports.html import html_table

    # a comparison is computed from both packages: no one Parquet file holds its rows
    return html_table(table, max_rows=MAX_ROWS, total=total,
                      rest="dcaudit query over both runs' tables gives the rest")


def _summary(con: duckdb.DuckDBPyConnection, ca: dict, cb: dict) -> tuple[str, list[dict], int]:
    if "summary" not in ca or "summary" not in cb:
        return "<p class='note'>One of the runs has no summary table.</p>", [], 0
    keys = _keys(SUMMARY_KEYS, ca["summary"], cb["summary"])
    metrics = [m for m in ("certified_fraction", "ambiguous_fraction", "unsupported_fraction", "benchmark_only_risk",
                           "n_candidates", "n_mixed_fibers", "certified_true", "certified_false")
               if m in ca["summary"] and m in cb["summary"]]
    sel = [f"a.{m} AS {m}_a, b.{m} AS {m}_b" + (f", b.{m} - a.{m} AS {m}_change" if m.endswith(("fraction", "risk"))
                                                  else "") for m in metrics]
    for c in ("claim", "evidence"):   # an audit whose claim or evidence changed has other fibers altogether
        if c in ca["summary"] and c in cb["summary"]:
            sel.append(f"a._in AND b._in AND a.{c} IS DISTINCT FROM b.{c} AS {c}_changed")
    q = (f"SELECT {_coalesced(keys)}, CASE WHEN a._in IS NULL THEN 'only in B' WHEN b._in IS NULL THEN 'only in A' "
         f"ELSE '' END AS presence, {', '.join(sel)} FROM (SELECT *, TRUE AS _in FROM a_summary) a FULL OUTER JOIN "
         f"(SELECT *, TRUE AS _in FROM b_summary) b ON {_on(keys)} "
         "ORDER BY abs(coalesce(b.certified_fraction - a.certified_fraction, 1)) DESC, "
         f"abs(coalesce(b.ambiguous_fraction - a.ambiguous_fraction, 1)) DESC{', ' if keys else ''}"
         f"{', '.join(explorer.q(k) for k in keys)}")
    table = con.sql(q).to_arrow_table()
    # moved: a row in one run only, a changed claim or evidence, or any measure that differs (a side without
    # candidates included: NULL <> x is NULL, which counted 0 -> 50 candidates as unchanged)
    differs = " OR ".join([f"{m}_a IS DISTINCT FROM {m}_b" for m in metrics]
                          + [f"coalesce({c}_changed, FALSE)" for c in ("claim", "evidence")
                             if c in ca["summary"] and c in cb["summary"]]) or "FALSE"
    moved = con.sql(f"SELECT count(*) FROM ({q}) WHERE presence <> '' OR {differs}").fetchall()[0][0]
    table = table.drop_columns([c for c in table.column_names
                                if c in keys and table.column(c).null_count == table.num_rows])
    rows = table.slice(0, MAX_CHART_ROWS).to_pylist()
    return (f"<p>{moved} of {count(table.num_rows, 'audit row')} moved (a fraction, a count, the claim or the evidence "
            "changed, or the row exists in one run only); largest changes first.</p>" + _table(table)), rows, \
        table.num_rows


def _chart(rows: list[dict], total: int) -> str:
    """``rows``: the first MAX_CHART_ROWS of the ``total`` audit rows, largest changes first."""
    points = [r for r in rows if r.get("certified_fraction_a") is not None and r.get("certified_fraction_b") is not None]
    if not points:
        return ""
    limited = (f" — {len(points)} of {count(total, 'audit row')} (the largest changes with a fraction in both runs)"
               if len(points) < total else "")
    label = [k for k in ("audit_id", "model", "split", "fiber_rule", "min_support") if any(r.get(k) is not None
                                                                                          for r in points)]
    items = [charts.Interval(" · ".join(str(r[k]) for k in label if r.get(k) is not None),
                             r["certified_fraction_b"], min(r["certified_fraction_a"], r["certified_fraction_b"]),
                             max(r["certified_fraction_a"], r["certified_fraction_b"])) for r in points]
    return charts.interval_chart(items, title="Certified fraction: run A to run B (dot = B; line spans A–B)" + limited,
                                 x_label="certified fraction", kind="compare")


def _fibers(con: duckdb.DuckDBPyConnection, ca: dict, cb: dict) -> str:
    if "fibers" not in ca or "fibers" not in cb:
        return ""
    keys = _keys(FIBER_KEYS, ca["fibers"], cb["fibers"])
    if "evidence_key" not in keys:
        return "<p class='note'>The fibers tables have no evidence_key to match fibers on.</p>"
    q = (f"SELECT {_coalesced(keys)}, a.n AS n_a, b.n AS n_b, a.n_true AS n_true_a, b.n_true AS n_true_b, "
         "a.status AS status_a, b.status AS status_b FROM a_fibers a FULL OUTER JOIN b_fibers b ON "
         f"{_on(keys)} WHERE a.status IS DISTINCT FROM b.status")
    total = con.sql(f"SELECT count(*) FROM ({q})").fetchall()[0][0]
    per = ""
    if "audit_id" in keys:
        counts = con.sql(f"SELECT audit_id, count(*) AS fibers_changed, "
                         "count_if(status_b = 'ambiguous') AS became_ambiguous, "
                         "count_if(status_a = 'ambiguous') AS were_ambiguous, "
                         "count_if(status_a IS NULL) AS new_in_b, count_if(status_b IS NULL) AS gone_in_b "
                         f"FROM ({q}) GROUP BY audit_id ORDER BY fibers_changed DESC, audit_id").to_arrow_table()
        per = _table(counts)
    table = con.sql(q + " ORDER BY greatest(coalesce(n_a, 0), coalesce(n_b, 0)) DESC LIMIT "
                    f"{MAX_ROWS}").to_arrow_table()
    table = table.drop_columns([c for c in table.column_names
                                if c in keys and table.column(c).null_count == table.num_rows])
    return (f"<p>{count(total, 'fiber')} changed status (matched on {', '.join(keys)}; a fiber in one run only counts)."
            "</p>"
            + per + (_table(table, total) if total else ""))


def _replay(con: duckdb.DuckDBPyConnection, ca: dict, cb: dict) -> str:
    if "replay" not in ca or "replay" not in cb:
        return ""
    keys = _keys(REPLAY_KEYS, ca["replay"], cb["replay"])
    metrics = [m for m in ("certified_fraction", "false_decision_rate", "acquired_fraction", "break_even_price")
               if m in ca["replay"] and m in cb["replay"]]
    sel = ", ".join(f"a.{m} AS {m}_a, b.{m} AS {m}_b, b.{m} - a.{m} AS {m}_change" for m in metrics)
    table = con.sql(f"SELECT {_coalesced(keys)}, {sel} FROM (SELECT * FROM a_replay WHERE "
                    f"{'seed IS NULL' if 'seed' in ca['replay'] else 'TRUE'}) a FULL OUTER JOIN (SELECT * FROM b_replay "
                    f"WHERE {'seed IS NULL' if 'seed' in cb['replay'] else 'TRUE'}) b ON {_on(keys)} "
                    f"ORDER BY {', '.join(explorer.q(k) for k in keys) or 1}").to_arrow_table()
    return "<h2 id='replay'>Replay (mean over seeds)</h2>" + _table(table)


def _completion(con: duckdb.DuckDBPyConnection, ca: dict, cb: dict) -> str:
    if "completion" not in ca or "completion" not in cb:
        return ""
    keys = _keys(("audit_id", "policy", "step"), ca["completion"], cb["completion"])
    if "step" not in keys:
        return ""

    def last(prefix: str, cols: list[str]) -> str:
        mean = "seed IS NULL" if "seed" in cols else "TRUE"
        part = ", ".join(explorer.q(k) for k in keys if k != "step")
        return (f"(SELECT * FROM {prefix}_completion WHERE {mean} QUALIFY step = max(step) OVER "
                f"({'PARTITION BY ' + part if part else ''}))")

    metrics = [m for m in ("certified_fraction", "false_decision_rate") if m in ca["completion"]
               and m in cb["completion"]]
    sel = ", ".join(f"a.{m} AS {m}_a, b.{m} AS {m}_b, b.{m} - a.{m} AS {m}_change" for m in metrics)
    table = con.sql(f"SELECT {_coalesced(keys)}, {sel} FROM {last('a', ca['completion'])} a FULL OUTER JOIN "
                    f"{last('b', cb['completion'])} b ON {_on(keys)} ORDER BY "
                    f"{', '.join(explorer.q(k) for k in keys)}").to_arrow_table()
    return "<h2 id='completion'>Completion (last step, mean over seeds)</h2>" + _table(table)


def render_comparison(run_dir_a: Path, run_dir_b: Path) -> str:
    from dcaudit.reports.html import _kv, page

    con = duckdb.connect()
    try:
        ca = _open(con, Path(run_dir_a), "a")
        cb = _open(con, Path(run_dir_b), "b")
        ma, mb = read_manifest(run_dir_a), read_manifest(run_dir_b)
        summary, rows, n_rows = _summary(con, ca, cb)
        body = ["<h2 id='runs'>Runs</h2>",
                _kv([(label, f"{m.get('run_id')} · spec {m.get('spec')} · {m.get('started_at')} · git "
                             f"{str(m.get('git_sha') or '')[:10]} · spec sha256 {str(m.get('spec_hash') or '')[:12]}")
                     for label, m in (("A", ma), ("B", mb))]),
                "<h2 id='summary'>Per audit</h2>", summary, _chart(rows, n_rows),
                "<h2 id='fibers'>Fibers that changed status</h2>", _fibers(con, ca, cb),
                _replay(con, ca, cb), _completion(con, ca, cb)]
    finally:
        con.close()
    title = f"dcaudit — {ma.get('run_id')} → {mb.get('run_id')}"
    return page(title, f"what moved between run A ({escape(str(ma.get('run_id')))}) and run B "
                f"({escape(str(mb.get('run_id')))})", body, ("runs", "summary", "fibers", "replay", "completion"))


def write_comparison(run_dir_a: Path, run_dir_b: Path, out: Path) -> Path:
    """Write the comparison page of two packages to ``out`` (through a temporary file); returns ``out``."""
    out = Path(out)
    text = render_comparison(Path(run_dir_a), Path(run_dir_b))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, out)
    return out
