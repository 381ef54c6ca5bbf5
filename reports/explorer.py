"""The fiber explorer of ``report.html``: every mixed fiber of the package, its evidence by column name,
its counts and status, and its members (id, claim value; a structure, formula or thumbnails where the
run's source tables have them).

The data is embedded once as compact JSON (``<script type="application/json" id="dc-explorer-data">``)
and a little inline script draws one page of fibers and one page of members at a time, so a package
of 10 000 mixed fibers stays a few MB and paints at once. Budgets keep it there:

* members: every member of every mixed fiber while the total stays under ``MEMBER_BUDGET``; above
  that each fiber keeps an equal share (at least one page), and the page says how many are listed
  and gives the query for the rest;
* pictures (depictions, thumbnails): for the members on each fiber's first page, fibers in order,
  while their bytes stay under ``PICTURE_BUDGET``.

Details come from the source tables the manifest names (``sources[*].path``) or that a caller adds:
a SMILES-like column (``smiles``, ``canonical_smiles``, …) gives RDKit depictions; a formula column
(``reduced_formula``, ``formula``, ``composition``) a formula; a predictions table keyed by
(split, model, image_id, condition) the prediction under each condition; a pixel table
(``image_id``, ``condition``, ``pixels`` list, optional ``height``/``width``) thumbnails. The id
column is whichever column of the source table matches the members' candidate ids.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from dcaudit.reports import depict
from dcaudit.reports.numbers import count, shown_of
from dcaudit.spec import split_names
from dcaudit.storage import arrow_table

PAGE = 24                  # members per page (the first page gets pictures)
FIBER_PAGE = 25            # fibers per page of the list
MEMBER_BUDGET = 2_500_000  # bytes of member ids embedded in one report
PICTURE_BUDGET = 1_000_000  # bytes of depictions, thumbnails and their captions
GROUP_KEYS = ("source", "audit_id", "model", "split", "claim", "evidence", "fiber_rule")
SMILES_COLUMNS = ("smiles", "canonical_smiles", "isomeric_smiles", "smi")
FORMULA_COLUMNS = ("reduced_formula", "formula", "pretty_formula", "formula_pretty", "composition")
ID_COLUMNS = ("candidate_id", "mol_id", "id", "image_id", "jid", "mbid", "material_id", "mp_id")
PIXEL_COLUMNS = ("pixels", "image", "pixel_values")


def q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def lit(value: object) -> str:
    return "'" + str(value).replace("'", "''") + "'"


# ---------------------------------------------------------------- which audits, which fibers

def fiber_audits(pkg: Any) -> list[str | None]:
    """The audits whose fibers to show, one per set of identical fibers: audits that differ only in
    min_support have the same fibers (only certified/unsupported labels differ, which the summary shows),
    so the one with the smallest min_support stands for them."""
    cols = pkg.cols("fibers")
    if "audit_id" not in cols:
        return [None]
    parts = [f"CAST({q(c)} AS VARCHAR)" for c in ("model", "split", "evidence_key", "fiber_key", "n", "n_true")
             if c in cols]
    support = "coalesce(s.min_support, 0)" if pkg.has("summary", "audit_id", "min_support") else "0"
    join = ("LEFT JOIN (SELECT audit_id, min(min_support) AS min_support FROM summary GROUP BY 1) s USING (audit_id)"
            if support != "0" else "")
    rows = pkg.sql(f"""SELECT audit_id, fp FROM (
            SELECT audit_id, count(*) AS nf, bit_xor(hash(concat_ws('|', {', '.join(parts)}))) AS fp FROM fibers
            GROUP BY audit_id) f {join}
        ORDER BY {support + ', ' if support != '0' else ''}audit_id""").to_pylist()
    seen: set = set()
    kept = []
    for r in rows:
        if r["fp"] not in seen:
            seen.add(r["fp"])
            kept.append(r["audit_id"])
    return sorted(kept, key=lambda a: (a is None, str(a)))


def evidence_text(columns: Sequence[str], key: str | None, rule: str | None, lo: float | None,
                  hi: float | None) -> str:
    """The fiber's evidence by name: ``NR-AhR = 1, others 0``, ``predicted = 3, clean_correct = true``, or
    a bin's observed range for quantile/width rules."""
    rule = rule or "exact"
    if rule != "exact" and len(columns) <= 1 and key in ("nan", "inf", "-inf"):  # a fiber of its own (as-value)
        return f"{columns[0] if columns else 'evidence'} = {key}"
    if rule != "exact" and (lo is not None or hi is not None):
        name = ", ".join(columns) or "evidence"
        bin_ = f" (bin {key})" if key is not None and len(columns) <= 1 else f" ({key})" if key else ""
        if lo is not None and hi is not None and lo == hi:
            return f"{name} = {lo:.4g}{bin_}"
        return f"{name} in [{_num(lo)}, {_num(hi)}]{bin_}"
    if key is None:
        return ""
    values = next(csv.reader([key]))   # key parts are CSV-quoted when they hold a comma or a quote
    if len(values) != len(columns) or not columns:
        return key
    if len(values) > 2 and all(v in ("0", "1") for v in values):
        ones = [c for c, v in zip(columns, values, strict=True) if v == "1"]
        if not ones:
            return "all 0"
        if len(ones) == len(values):
            return "all 1"
        return ", ".join(f"{c} = 1" for c in ones) + ", others 0"
    return ", ".join(f"{c} = {v}" for c, v in zip(columns, values, strict=True))


def _num(v: float | None) -> str:
    return "…" if v is None else f"{v:.4g}"


def priority(sizes: Sequence[int]) -> list[int]:
    """Fiber indices, largest first (ties in display order): who gets members and pictures first."""
    return sorted(range(len(sizes)), key=lambda i: -sizes[i])


def member_caps(sizes: Sequence[int], budget: int = MEMBER_BUDGET, page: int = PAGE) -> list[int]:
    """Members listed per fiber, at most ``budget`` in all: every member when they fit; else every fiber
    gets an equal floor (up to one page), then the largest fibers (of any audit) a full first page while
    the budget lasts, then all their members."""
    if sum(sizes) <= budget:
        return list(sizes)
    floor = min(page, max(1, budget // max(1, len(sizes))))
    caps = [min(n, floor) for n in sizes]
    left = budget - sum(caps)
    for target in (lambda n: min(n, page), lambda n: n):
        for i in priority(sizes):
            n = sizes[i]
            extra = target(n) - caps[i]
            if extra <= 0:
                continue
            if extra > left:
                break
            caps[i] += extra
            left -= extra
    return caps


# ---------------------------------------------------------------- source tables (details of members)

@dataclass
class SourceTable:
    name: str
    path: Path
    columns: list[str]
    kinds: dict[str, str] = field(default_factory=dict)   # 'smiles' / 'formula' / 'pixels' / 'predictions'

    @classmethod
    def open(cls, entry: Mapping[str, Any]) -> SourceTable | None:
        path = entry.get("path")
        if not path or not str(path).endswith(".parquet") or not Path(path).is_file():
            return None
        try:
            names = pq.read_schema(path).names
        except Exception:   # an unreadable table only costs the pictures
            return None
        lower = {c.lower(): c for c in names}
        kinds: dict[str, str] = {}
        smiles = next((lower[c] for c in SMILES_COLUMNS if c in lower), None) or \
            next((c for c in names if "smiles" in c.lower() and "valid" not in c.lower()
                  and "error" not in c.lower()), None)
        if smiles:
            kinds["smiles"] = smiles
        formula = next((lower[c] for c in FORMULA_COLUMNS if c in lower), None)
        if formula:
            kinds["formula"] = formula
        pixels = next((lower[c] for c in PIXEL_COLUMNS if c in lower), None)
        if pixels and "image_id" in names:
            kinds["pixels"] = pixels
        if {"image_id", "condition", "predicted"} <= set(names):
            kinds["predictions"] = "predicted"
        if not kinds:
            return None
        return cls(str(entry.get("table") or Path(path).stem), Path(path), names, kinds)

    def applies_to(self, source: str | None) -> bool:
        """A table named ``digits`` serves the fibers of source ``vision-digits`` (and ``tox21`` serves
        ``tox21``); whether its ids match is checked on the data."""
        if not source:
            return True
        a, b = self.name.lower(), source.lower()
        return a == b or b.endswith("-" + a) or a.startswith(b + "-") or a.split("-")[0] == b.split("-")[-1]

    def relation(self) -> str:
        return f"read_parquet({lit(self.path)})"


def source_tables(manifest: Mapping[str, Any], extra: Iterable[Mapping[str, Any]] = ()) -> list[SourceTable]:
    entries = [e for e in (manifest.get("sources") or []) if isinstance(e, Mapping)] + list(extra)
    return [t for t in (SourceTable.open(e) for e in entries) if t is not None]


# ---------------------------------------------------------------- the data

def explorer_data(pkg: Any, *, extra_sources: Iterable[Mapping[str, Any]] = (),
                  smiles: Mapping[str, str] | None = None, member_budget: int = MEMBER_BUDGET,
                  picture_budget: int = PICTURE_BUDGET, page: int = PAGE,
                  max_fibers: int | None = None) -> dict | None:
    """Everything the explorer shows, as one JSON-ready dict (None when the package has no fibers)."""
    data, place_details = explorer_data_deferred(pkg, extra_sources=extra_sources, smiles=smiles,
                                                 member_budget=member_budget, picture_budget=picture_budget,
                                                 page=page, max_fibers=max_fibers,
                                                 depictions=depict.Depictions(ahead=False))
    place_details()
    return data


def _nothing() -> None:
    return None


def explorer_data_deferred(pkg: Any, *, extra_sources: Iterable[Mapping[str, Any]] = (),
                           smiles: Mapping[str, str] | None = None, member_budget: int = MEMBER_BUDGET,
                           picture_budget: int = PICTURE_BUDGET, page: int = PAGE, max_fibers: int | None = None,
                           depictions: depict.Depictions | None = None) -> tuple[dict | None, Callable[[], None]]:
    """:func:`explorer_data` in two steps: the dict without the members' details (structures, images,
    formulas), and the callable that adds them. In between a worker process draws the depictions
    (:class:`dcaudit.reports.depict.Depictions`), so a caller that renders other sections first (the report's
    charts) gets the molecules drawn on the second core. The dict is complete once the callable has run."""
    fcols, ccols = pkg.cols("fibers"), pkg.cols("candidates")
    if not pkg.has("fibers", "n", "status"):
        return None, _nothing
    audits = fiber_audits(pkg)
    keys = [k for k in GROUP_KEYS if k in fcols and (k in ccols or not ccols)]
    opt = {c: (q(c) if c in fcols else "NULL") for c in ("evidence_key", "evidence_lo", "evidence_hi", "n_true",
                                                          "mixed_kind", "evidence", "fiber_rule", "source",
                                                          "fiber_key")}
    where = "status = 'ambiguous'"
    order = "n DESC, fiber_key"
    if audits != [None]:
        where += f" AND audit_id IN ({', '.join(lit(a) for a in audits)})"
        order = f"list_position([{', '.join(lit(a) for a in audits)}], audit_id), " + order
    limit = f" LIMIT {int(max_fibers)}" if max_fibers else ""
    pkg.con.execute(f"""CREATE OR REPLACE TEMP TABLE _xf AS
        SELECT CAST(row_number() OVER (ORDER BY {order}) - 1 AS BIGINT) AS fx, {', '.join(q(k) for k in keys)}
               {', ' if keys else ''}{opt['fiber_key']} AS fiber_key, {opt['evidence_key']} AS evidence_key,
               {opt['evidence_lo']} AS lo, {opt['evidence_hi']} AS hi, n, {opt['n_true']} AS n_true, status,
               {opt['mixed_kind']} AS mixed_kind, {opt['evidence']} AS ev, {opt['fiber_rule']} AS rule,
               {opt['source']} AS src
        FROM fibers WHERE {where} ORDER BY fx{limit}""")
    fibers = pkg.sql("SELECT * FROM _xf ORDER BY fx").to_pylist()
    total_mixed = pkg.sql(f"SELECT count(*) FROM fibers WHERE {where}").column(0)[0].as_py()
    summary_evidence = {}
    if pkg.has("summary", "evidence"):
        akey = "audit_id" if "audit_id" in pkg.cols("summary") else "NULL"
        summary_evidence = {r["a"]: r["e"] for r in pkg.sql(f"SELECT DISTINCT {akey} AS a, evidence AS e FROM summary")
                            .to_pylist()}
    audit_rows: list[dict] = []
    audit_index: dict[Any, int] = {}
    label_cols = [c for c in ("model", "split") if c in keys
                  and pkg.sql(f"SELECT count({q(c)}) FROM _xf").column(0)[0].as_py()]
    out_fibers = []
    strings: dict[str, int] = {}   # evidence texts and group labels repeat: stored once, referenced by index

    def intern(text: str) -> int:
        return strings.setdefault(text, len(strings))

    for f in fibers:
        a = f.get("audit_id")
        if a not in audit_index:
            audit_index[a] = len(audit_rows)
            audit_rows.append({"id": a or "fibers", "claim": f.get("claim"), "rule": f["rule"] or "exact",
                               "evidence": f["ev"] or summary_evidence.get(a), "source": f["src"], "n": 0})
        audit = audit_rows[audit_index[a]]
        audit["n"] += 1
        columns = split_names(f["ev"] or summary_evidence.get(a) or "")
        rec = {"a": audit_index[a], "e": intern(evidence_text(columns, f["evidence_key"], f["rule"], f["lo"], f["hi"])),
               "n": f["n"], "t": f["n_true"], "s": f["status"]}
        if f["mixed_kind"] is not None:
            rec["k"] = f["mixed_kind"]
        if label_cols:
            rec["g"] = intern(" · ".join(f"{c} {f[c]}" for c in label_cols if f.get(c) is not None))
        out_fibers.append(rec)
    data: dict[str, Any] = {"page": page, "fiberPage": FIBER_PAGE, "audits": audit_rows, "fibers": out_fibers,
                            "pics": {}, "totalMixed": total_mixed, "labels": label_cols,
                            "hasKind": any("k" in f for f in out_fibers), "notes": [], "S": list(strings)}
    if max_fibers and total_mixed > len(out_fibers):
        data["notes"].append(f"the {shown_of(len(out_fibers), total_mixed, 'mixed fiber', order='largest')} "
                             "are listed")
    if not fibers:
        return data, _nothing
    if not pkg.has("candidates", "candidate_id", "fiber_key"):
        data["notes"].append("the package has no candidates table: members are not listed")
        return data, _nothing
    # the budget is in bytes: an id costs its length plus quotes, comma and its claim character
    id_len = pkg.sql("SELECT avg(length(CAST(candidate_id AS VARCHAR))) FROM (SELECT candidate_id FROM candidates "
                     "WHERE status = 'ambiguous' LIMIT 20000)" if "status" in ccols else
                     "SELECT avg(length(CAST(candidate_id AS VARCHAR))) FROM (SELECT candidate_id FROM candidates "
                     "LIMIT 20000)").column(0)[0].as_py() or 8.0
    caps = member_caps([f["n"] for f in fibers], int(member_budget / (id_len + 2)), page)
    pkg.con.register("_xcap", arrow_table({"fx": range(len(caps)), "cap": caps}, {"fx": "int64", "cap": "int64"}))
    on = " AND ".join([f"x.{q(k)} IS NOT DISTINCT FROM c.{q(k)}" for k in keys] + ["x.fiber_key = c.fiber_key"])
    claim = "c.claim_value" if "claim_value" in ccols else "NULL::BOOLEAN"
    status = "c.status = 'ambiguous' AND " if "status" in ccols else ""
    members = pkg.sql(f"""SELECT fx, id, cv FROM (
            SELECT x.fx, CAST(c.candidate_id AS VARCHAR) AS id, {claim} AS cv,
                   row_number() OVER (PARTITION BY x.fx ORDER BY {claim} DESC NULLS LAST,
                                      CAST(c.candidate_id AS VARCHAR)) AS rn
            FROM _xf x JOIN candidates c ON {on} WHERE {status}c.fiber_key IS NOT NULL) m
        JOIN _xcap USING (fx) WHERE rn <= cap ORDER BY fx, rn""")
    pkg.con.unregister("_xcap")
    fx = np.asarray(members.column("fx").to_pylist(), dtype=np.int64)  # Arrow's to_numpy imports pandas
    ids = members.column("id").to_pylist()
    cvs = members.column("cv").to_pylist()
    bounds = _runs(fx, len(fibers))
    for i, (s, e) in enumerate(bounds):
        out_fibers[i]["m"] = ids[s:e]
        out_fibers[i]["c"] = "".join("1" if v else "0" if v is not None else "-" for v in cvs[s:e])
    listed = sum(e - s for s, e in bounds)
    total = sum(f["n"] for f in fibers)
    data["listed"], data["members"] = listed, total
    if listed < total:
        data["notes"].append(f"{listed} of the {count(total, 'member')} are listed (at least {min(caps)} per fiber, a "
                             "full first page for the largest fibers, claim-true members first; the report's member "
                             "budget is "
                             f"{member_budget / 1e6:.1f} MB); candidates.parquet has all of them: select * from "
                             "candidates where audit_id = … and fiber_key = …")
    return data, _add_details(pkg, data, fibers, extra_sources, smiles, picture_budget, page,
                              depictions or depict.Depictions())


def _runs(fx: Any, n: int) -> list[tuple[int, int]]:
    """(start, end) of each fiber's rows in the fx-sorted member list."""
    starts = np.searchsorted(fx, np.arange(n), side="left")
    ends = np.searchsorted(fx, np.arange(n), side="right")
    return list(zip(starts.tolist(), ends.tolist(), strict=True))


MAX_TILES = 7   # pictures per member: the clean image and up to six conditions (the wrong ones first)


PREFETCH = 600  # depictions handed to the worker at most: about what the picture budget holds (~3 KB each)


def _add_details(pkg: Any, data: dict, fibers: list[dict], extra_sources: Iterable[Mapping[str, Any]],
                 smiles: Mapping[str, str] | None, picture_budget: int, page: int,
                 depictions: depict.Depictions) -> Callable[[], None]:
    """Look up the members' details now and start drawing their depictions; the returned callable puts
    tiles (picture key, caption) on the members of each fiber's first page, fibers in order, while the
    pictures and captions stay within ``picture_budget`` bytes."""
    tables = source_tables(getattr(pkg, "manifest", {}) or {}, extra_sources)
    if not tables and not smiles:
        return _nothing
    first = [f.get("m", [])[:page] for f in data["fibers"]]
    wanted = sorted({m for ms in first for m in ms})
    if not wanted:
        return _nothing
    con = pkg.con
    smiles_of: dict[str, str] = dict(smiles or {})
    formula_of: dict[str, str] = {}
    con.register("_xid", arrow_table({"id": wanted}, {"id": "string"}))
    try:
        for t in tables:
            if not ({"smiles", "formula"} & set(t.kinds)):
                continue
            id_col = _id_column(con, t, "_xid")
            if id_col is None:
                continue
            for kind, target in (("smiles", smiles_of), ("formula", formula_of)):
                if kind in t.kinds:
                    rows = con.execute(
                        f"SELECT CAST({q(id_col)} AS VARCHAR), CAST({q(t.kinds[kind])} AS VARCHAR) FROM "
                        f"{t.relation()} WHERE CAST({q(id_col)} AS VARCHAR) IN (SELECT id FROM _xid)").fetchall()
                    for k, v in rows:
                        if v is not None:
                            target.setdefault(k, v)
    finally:
        con.unregister("_xid")
    rdkit = depict.rdkit_available()
    if smiles_of and not rdkit:
        data["notes"].append("RDKit (the chem extra) is not installed: no structure depictions")
    vision = [t for t in tables if "predictions" in t.kinds or "pixels" in t.kinds]
    vision_tiles = _vision_tiles(con, vision, fibers, first, picture_budget) if vision else {}
    order = priority([f["n"] for f in data["fibers"]])
    if rdkit and smiles_of:  # the structures the tiles will need, in the order they are placed
        depictions.prefetch([smiles_of[m] for i in order for m in first[i] if m in smiles_of][:PREFETCH])
    return lambda: _place_details(data, first, order, smiles_of, formula_of, vision_tiles, rdkit, depictions,
                                  picture_budget)


def _place_details(data: dict, first: list[list[str]], order: Sequence[int], smiles_of: Mapping[str, str],
                   formula_of: Mapping[str, str], vision_tiles: Mapping[tuple[int, int], Any], rdkit: bool,
                   depictions: depict.Depictions, picture_budget: int) -> None:
    pics: dict[str, Any] = data["pics"]
    strings = {text: k for k, text in enumerate(data["S"])}

    def intern(text: str) -> int:
        if text not in strings:
            strings[text] = len(data["S"])
            data["S"].append(text)
        return strings[text]

    used = 0
    stopped = None
    for rank, i in enumerate(order):
        f = data["fibers"][i]
        members = first[i]
        if not members:
            continue
        if used >= picture_budget:
            stopped = rank
            break
        tiles: list[list] = [[] for _ in members]
        for j, m in enumerate(members):
            if rdkit and m in smiles_of:
                # one picture per structure: members sharing a SMILES share the depiction
                key = "s:" + hashlib.sha1(smiles_of[m].encode()).hexdigest()[:12]
                if key not in pics:
                    svg = depictions.get(smiles_of[m])
                    if svg:
                        pics[key] = svg
                        used += len(svg)
                if key in pics:
                    tiles[j].append([key, -1])
                    used += 8       # the reference costs bytes too: many members may share a few structures
            if m in formula_of:
                tiles[j].append(intern(formula_of[m]))
                used += len(formula_of[m]) + 8
            for key, pic, caption in vision_tiles.get((i, j), ()):
                if key and key not in pics:
                    pics[key] = pic
                    used += len(pic["px"]) + 24
                # a caption-only tile is the index of its (interned) caption; with a picture, [key, index]
                tiles[j].append([key, intern(caption)] if key else intern(caption))
                used += 6 + (4 if key else 0)
        if any(tiles):
            f["d"] = tiles
    if stopped is not None:
        data["notes"].append(f"member details (structures, images, predictions) are shown for the first page "
                             f"of the {'largest fiber' if stopped == 1 else f'{stopped} largest fibers'} (the report's picture budget is "
                             f"{picture_budget / 1e6:.1f} MB)")
    kinds = set()
    if any(k.startswith("s:") for k in pics):
        kinds.add("molecules")
    if any(k.startswith("i:") for k in pics):
        kinds.add("images")
    if formula_of:
        kinds.add("formulas")
    data["kinds"] = sorted(kinds)


def _id_column(con: Any, table: SourceTable, ids: str) -> str | None:
    """The column of ``table`` whose values are the members' candidate ids (most matches wins)."""
    candidates = [c for c in ID_COLUMNS if c in table.columns] + \
        [c for c in table.columns if c not in ID_COLUMNS and c.lower().endswith("id")]
    best, best_n = None, 0
    for c in candidates[:6]:
        try:
            n = con.execute(f"SELECT count(*) FROM (SELECT DISTINCT CAST({q(c)} AS VARCHAR) AS v FROM "
                            f"{table.relation()}) s WHERE v IN (SELECT id FROM {ids})").fetchall()[0][0]
        except Exception:   # a column that does not cast is not the id
            continue
        if n > best_n:
            best, best_n = c, n
    return best


def _audit_condition(audit_id: str | None) -> str | None:
    """``robust[brightness@1]`` -> ``brightness@1``: the one corruption an audit's claim is about."""
    m = re.search(r"\[([^\]=]+)\]$", audit_id or "")
    return m.group(1) if m and m.group(1) != "all" else None


def _vision_tiles(con: Any, tables: list[SourceTable], fibers: list[dict], first: list[list[str]],
                  budget: int) -> dict[tuple[int, int], list[tuple[str | None, dict | None, str]]]:
    """(fiber, member) -> tiles (picture key, thumbnail, caption): the clean image, then the conditions
    the model got wrong, then the others, at most ``MAX_TILES``. Predictions match on the fiber's split
    and model; one batched query per source table."""
    rows = []
    for i in priority([f["n"] for f in fibers]):
        f, members = fibers[i], first[i]
        for j, m in enumerate(members):
            rows.append((i, j, m, f.get("src"), None if f.get("split") is None else str(f.get("split")),
                         f.get("model"), _audit_condition(f.get("audit_id"))))
        if len(rows) * 60 > 4 * budget:   # enough members to fill the budget with captions alone
            break
    if not rows:
        return {}
    cols = list(zip(*rows, strict=True))
    names = ("fx", "j", "id", "src", "split", "model", "cond")
    members = arrow_table(dict(zip(names, cols, strict=True)),
                          {n: "int64" if n in ("fx", "j") else "string" for n in names})
    con.register("_xm", members)
    out: dict[tuple[int, int], list] = {}
    try:
        sources = sorted({s for s in cols[3] if s is not None}) or [None]
        preds: dict[tuple[int, int], list[tuple[str, str, str | None]]] = {}
        for t in tables:
            if "predictions" not in t.kinds:
                continue
            mine = [s for s in sources if t.applies_to(s)]
            if not mine:
                continue
            on = ["CAST(p.image_id AS VARCHAR) = m.id"]
            for k in ("split", "model"):
                if k in t.columns:
                    on.append(f"(m.{k} IS NULL OR CAST(p.{q(k)} AS VARCHAR) = m.{k})")
            label = "CAST(p.label AS VARCHAR)" if "label" in t.columns else "NULL"
            src_filter = " OR ".join("m.src IS NULL" if s is None else f"m.src = {lit(s)}" for s in mine)
            for fx, j, cond, pred, lab in con.execute(
                    f"SELECT m.fx, m.j, CAST(p.condition AS VARCHAR), CAST(p.predicted AS VARCHAR), {label} "
                    f"FROM _xm m JOIN {t.relation()} p ON {' AND '.join(on)} "
                    f"WHERE ({src_filter}) AND (m.cond IS NULL OR p.condition IN ('clean', m.cond))").fetchall():
                preds.setdefault((fx, j), []).append((cond, pred, lab))
        pixels: dict[str, dict[str, tuple[str, dict]]] = {}   # image -> condition -> (key, thumbnail)
        for t in tables:
            if "pixels" not in t.kinds or not any(t.applies_to(s) for s in sources):
                continue
            cond = "CAST(condition AS VARCHAR)" if "condition" in t.columns else "'clean'"
            hw = ", ".join(c if c in t.columns else "NULL" for c in ("height", "width"))
            for img, c, px, h, w in con.execute(
                    f"SELECT CAST(image_id AS VARCHAR), {cond}, {q(t.kinds['pixels'])}, {hw} FROM {t.relation()} "
                    "WHERE CAST(image_id AS VARCHAR) IN (SELECT DISTINCT id FROM _xm)").fetchall():
                thumb = depict.thumbnail(px, h, w)
                if thumb is not None:
                    pixels.setdefault(img, {})[c] = (f"i:{t.name}:{img}:{c}", thumb)
        for (fx, j, m, *_rest) in rows:
            found = preds.get((fx, j), [])
            label = next((lab for _, _, lab in found if lab is not None), None)
            by_cond = {c: p for c, p, _ in found}
            mine = pixels.get(m, {})
            conds = sorted({c for c, _, _ in found} | (set() if by_cond else set(mine)),
                           key=lambda c: (c != "clean", label is None or by_cond.get(c) == label, c))
            tiles = []
            if label is not None:
                tiles.append((None, None, f"label {label}"))
            for c in conds[:MAX_TILES]:
                key, thumb = mine.get(c, (None, None))
                pred = by_cond.get(c)
                tiles.append((key, thumb, c if pred is None else f"{_short_condition(c)}: {pred}"))
            if tiles:
                out[(fx, j)] = tiles
    finally:
        con.unregister("_xm")
    return out


def _short_condition(c: str) -> str:
    return re.sub(r"^gaussian_", "g.", c)


# ---------------------------------------------------------------- the HTML section

CSS = """
body.explorer-only>*:not(h1):not(#explorer-section){display:none}
#explorer-section .ctl{display:flex;flex-wrap:wrap;gap:.6em;align-items:center;margin:.4em 0;font-size:13px}
#explorer-section .ctl select,#explorer-section .ctl input{font-size:13px}
#explorer-section table.fibers tr{cursor:pointer}#explorer-section table.fibers tr.sel{background:#fff4dd}
#explorer-section table.fibers tr:hover{background:#f7f7f7}
#explorer-section .pager button{margin:0 .15em}#explorer-section .fiber{border:1px solid #ddd;border-radius:4px;padding:.5em;margin:.6em 0}
#explorer-section .fiber h3{margin:.1em 0 .3em;font-size:14px}
#explorer-section ol.members{list-style:none;padding:0;margin:.3em 0;display:flex;flex-wrap:wrap;gap:6px}
#explorer-section li.member{border:1px solid #e2e2e2;border-radius:3px;padding:3px;font-size:11px;min-width:118px;
max-width:330px;background:#fff}
#explorer-section li.member.cv1{border-color:#D55E00;box-shadow:inset 0 3px 0 #D55E00}
#explorer-section li.member .id{font-family:ui-monospace,monospace}#explorer-section li.member .cv{float:right;font-weight:600}
#explorer-section li.member.cv1 .cv{color:#D55E00}#explorer-section li.member.cv0 .cv{color:#0072B2}
#explorer-section .pic svg{width:120px;height:90px;display:block}
#explorer-section .tiles{display:flex;flex-wrap:wrap;gap:2px;margin-top:2px}
#explorer-section .tile{text-align:center;font-size:9px;color:#444}
#explorer-section canvas.thumb{width:36px;height:36px;image-rendering:pixelated;display:block;border:1px solid #eee}
#explorer-section .bar{display:inline-block;height:8px;background:#E69F00;vertical-align:middle}
#explorer-section .bar i{display:block;height:8px;background:#D55E00}
"""

JS = r"""
(function(){
"use strict";
var D=JSON.parse(document.getElementById('dc-explorer-data').textContent);
var root=document.getElementById('explorer-app');if(!root)return;
var state={audit:-1,filter:'',kind:'',fpage:0,sel:-1,mpage:0};
function el(t,a,txt){var e=document.createElement(t);if(a)for(var k in a){if(k==='cls')e.className=a[k];else e.setAttribute(k,a[k]);}
 if(txt!==undefined&&txt!==null)e.textContent=txt;return e;}
var F=D.F,cache={};
function fib(i){return {i:i,a:F.a[i],e:F.e[i],n:F.n[i],t:F.t[i],l:F.l[i],g:F.g?F.g[i]:-1,k:F.k?F.k[i]:null,s:'ambiguous',
 c:F.c[i],d:F.d?F.d[String(i)]:undefined};}
function mem(i){if(!(i in cache)){var x=F.m[i];cache[i]=D.sep===null?x:(x===''?[]:x.split(D.sep));}return cache[i];}
function shown(){var out=[];for(var i=0;i<D.nf;i++){var f=fib(i);
 if(state.audit>=0&&f.a!==state.audit)continue;if(state.kind&&f.k!==state.kind)continue;
 if(state.filter){var t=(E(f)+' '+G(f)+' '+D.audits[f.a].id).toLowerCase();if(t.indexOf(state.filter)<0)continue;}
 out.push(i);}return out;}
function E(f){return D.S[f.e];}function G(f){return f.g<0?'':D.S[f.g];}
function pct(f){if(f.t===null||f.t===undefined)return '';var v=100*f.t/f.n,s=v.toFixed(1);for(var d=2;d<16&&f.t>0&&f.t<f.n&&(+s===0||+s===100);d++)s=String(+v.toPrecision(d));return s+'%';}
function thumb(p){var c=el('canvas',{cls:'thumb',width:p.w,height:p.h});var x=c.getContext('2d');
 var img=x.createImageData(p.w,p.h);for(var i=0;i<p.w*p.h;i++){var v=255-parseInt(p.px.substr(2*i,2),16);
 img.data[4*i]=v;img.data[4*i+1]=v;img.data[4*i+2]=v;img.data[4*i+3]=255;}x.putImageData(img,0,0);return c;}
function member(f,m,j,withTiles){var cv=f.c?f.c.charAt(j):'-';
 var li=el('li',{cls:'member cv'+cv,'data-id':m[j]});
 li.appendChild(el('span',{cls:'cv',title:'claim value'},cv==='1'?'true':cv==='0'?'false':'?'));
 li.appendChild(el('span',{cls:'id'},m[j]));
 var tiles=withTiles&&f.d?f.d[j]:null;
 if(tiles&&tiles.length){var box=el('div',{cls:'tiles'});for(var k=0;k<tiles.length;k++){var t=tiles[k];if(typeof t==='number')t=[-1,t];
  var p=t[0]>=0?D.pics[t[0]]:null;var cap=t.length>1&&t[1]>=0?D.S[t[1]]:'';
  if(p&&typeof p==='string'){var d=el('div',{cls:'pic'});d.innerHTML=p;box.appendChild(d);if(cap)box.appendChild(el('div',{cls:'tile'},cap));}
  else{var tl=el('div',{cls:'tile'});if(p)tl.appendChild(thumb(p));tl.appendChild(el('div',null,cap));box.appendChild(tl);}}
  li.appendChild(box);}
 return li;}
function fiberBox(i,all){var f=fib(i),a=D.audits[f.a];var box=el('section',{cls:'fiber','data-fx':i});
 box.appendChild(el('h3',null,'Fiber '+(i+1)+': '+E(f)));
 var meta=a.id+(G(f)?' · '+G(f):'')+' · n = '+f.n+(f.t!==null&&f.t!==undefined?' · claim true '+f.t+' ('+pct(f)+')':'')+' · '+f.s+(f.k?' · '+f.k:'');
 box.appendChild(el('div',{cls:'note'},meta));
 var m=mem(i);var P=D.page;var pages=Math.max(1,Math.ceil(m.length/P));
 var from=all?0:state.mpage*P,to=all?m.length:Math.min(m.length,from+P);
 var ol=el('ol',{cls:'members',start:from+1});for(var j=from;j<to;j++)ol.appendChild(member(f,m,j,j<P));
 if(!all&&pages>1){box.appendChild(pager(state.mpage,pages,function(p){state.mpage=p;draw();},'members'));}
 box.appendChild(ol);
 if(m.length<f.n)box.appendChild(el('p',{cls:'note'},(m.length?'first '+m.length+' of ':'none of the ')+f.n+' members listed here; candidates.parquet has all'));
 return box;}
function pager(cur,n,go,what){var d=el('div',{cls:'pager'});d.appendChild(el('span',{cls:'note'},what+' page '+(cur+1)+' of '+n+' '));
 [['«',0],['‹',cur-1],['›',cur+1],['»',n-1]].forEach(function(b){var x=el('button',{type:'button'},b[0]);
 if(b[1]<0||b[1]>=n||b[1]===cur)x.disabled=true;x.onclick=function(){go(b[1]);};d.appendChild(x);});return d;}
function draw(){var all=location.hash==='#explorer-all'||/[?&]explorer=all/.test(location.search);root.textContent='';
 var ctl=el('div',{cls:'ctl'});var sel=el('select',{'aria-label':'audit'});sel.appendChild(el('option',{value:-1},'every audit ('+D.nf+(D.nf===1?' mixed fiber)':' mixed fibers)')));
 D.audits.forEach(function(a,k){var o=el('option',{value:k},a.id+' — '+a.n+' mixed');if(k===state.audit)o.selected=true;sel.appendChild(o);});
 sel.onchange=function(){state.audit=+sel.value;state.fpage=0;state.sel=-1;state.mpage=0;draw();};ctl.appendChild(sel);
 var inp=el('input',{type:'search',placeholder:'filter evidence…',value:state.filter});inp.onchange=function(){state.filter=inp.value.toLowerCase();state.fpage=0;state.sel=-1;draw();};ctl.appendChild(inp);
 if(D.hasKind){var ks=el('select',{'aria-label':'mixed kind'});[''].concat(D.kindValues||[]).forEach(function(k){var o=el('option',{value:k},k||'every kind');if(k===state.kind)o.selected=true;ks.appendChild(o);});
  ks.onchange=function(){state.kind=ks.value;state.fpage=0;state.sel=-1;draw();};ctl.appendChild(ks);}
 root.appendChild(ctl);
 var list=shown();var FP=D.fiberPage;var fpages=Math.max(1,Math.ceil(list.length/FP));
 if(state.sel<0&&list.length)state.sel=list[state.fpage*FP]||list[0];
 if(!all)root.appendChild(pager(state.fpage,fpages,function(p){state.fpage=p;state.sel=list[p*FP];state.mpage=0;draw();},'fibers'));
 var tb=el('table',{cls:'fibers'});var h=el('tr');['#','audit','evidence'].concat(D.labels.length?['group']:[]).concat(['n','claim true','share','status']).concat(D.hasKind?['mixed kind']:[]).concat(['members listed']).forEach(function(c){h.appendChild(el('th',null,c));});
 var th=el('thead');th.appendChild(h);tb.appendChild(th);var body=el('tbody');
 var rows=all?list:list.slice(state.fpage*FP,state.fpage*FP+FP);
 rows.forEach(function(i){var f=fib(i);var tr=el('tr',{'data-fx':i});if(i===state.sel)tr.className='sel';
  tr.appendChild(el('td',{cls:'num'},i+1));tr.appendChild(el('td',null,D.audits[f.a].id));tr.appendChild(el('td',null,E(f)));
  if(D.labels.length)tr.appendChild(el('td',null,G(f)));
  tr.appendChild(el('td',{cls:'num'},f.n));tr.appendChild(el('td',{cls:'num'},f.t));
  var sc=el('td');var bar=el('span',{cls:'bar',title:pct(f)});bar.style.width=Math.max(2,Math.round(60*Math.log(1+f.n)/Math.log(1+D.maxN)))+'px';
  var b2=el('i');b2.style.width=(f.t?100*f.t/f.n:0)+'%';bar.appendChild(b2);sc.appendChild(bar);sc.appendChild(document.createTextNode(' '+pct(f)));tr.appendChild(sc);
  tr.appendChild(el('td',{cls:'st-'+f.s},f.s));if(D.hasKind)tr.appendChild(el('td',null,f.k||''));
  tr.appendChild(el('td',{cls:'num'},f.l));
  tr.onclick=function(){state.sel=i;state.mpage=0;draw();var b=document.getElementById('explorer-fiber');if(b)b.scrollIntoView({block:'nearest'});};
  body.appendChild(tr);});tb.appendChild(body);root.appendChild(tb);
 var holder=el('div',{id:'explorer-fiber'});
 if(all){list.forEach(function(i){holder.appendChild(fiberBox(i,true));});}
 else if(state.sel>=0&&list.indexOf(state.sel)>=0)holder.appendChild(fiberBox(state.sel,false));
 root.appendChild(holder);
 document.documentElement.setAttribute('data-explorer-ms',(performance.now()).toFixed(1));}
if(/[?&]view=explorer/.test(location.search))document.body.classList.add('explorer-only');
var qs=new URLSearchParams(location.search);
if(qs.get('audit')!==null){D.audits.forEach(function(a,k){if(a.id===qs.get('audit'))state.audit=k;});}
if(qs.get('fiber')!==null){state.sel=Math.max(0,Math.min(D.nf-1,(+qs.get('fiber'))-1));var l=shown();state.fpage=Math.max(0,Math.floor(l.indexOf(state.sel)/D.fiberPage));}
else if(state.audit>=0){state.sel=-1;}
D.maxN=1;F.n.forEach(function(n){if(n>D.maxN)D.maxN=n;});
window.addEventListener('hashchange',draw);draw();
try{new PerformanceObserver(function(l){l.getEntries().forEach(function(e){
 document.documentElement.setAttribute('data-'+e.name,e.startTime.toFixed(1));});}).observe({type:'paint',buffered:true});}catch(e){}
})();
"""


def pack(data: dict) -> dict:
    """The explorer data as the page embeds it: fibers column by column (``F``: audit, evidence and group
    string indices, n, n_true, mixed kind, members listed, members as one separated string, claim
    characters, tiles), which is half the size of one object per fiber."""
    fibers = data["fibers"]
    ids = [m for f in fibers for m in f.get("m", [])]
    sep = next((c for c in (" ", "|", "\t", ";") if not any(c in m for m in ids)), None)
    F: dict[str, Any] = {"a": [f["a"] for f in fibers], "e": [f["e"] for f in fibers], "n": [f["n"] for f in fibers],
                         "t": [f["t"] for f in fibers], "l": [len(f.get("m", [])) for f in fibers],
                         "c": [f.get("c", "") for f in fibers]}
    F["m"] = [sep.join(f.get("m", [])) for f in fibers] if sep else [f.get("m", []) for f in fibers]
    if any("g" in f for f in fibers):
        F["g"] = [f.get("g", -1) for f in fibers]
    extra = {}
    if data.get("hasKind"):
        F["k"] = [f.get("k") for f in fibers]
        extra["kindValues"] = sorted({k for k in F["k"] if k is not None})
    keys = list(data["pics"])
    index = {k: i for i, k in enumerate(keys)}

    def tile(t: Any) -> Any:   # caption index, or [picture index] / [picture index, caption index]
        if not isinstance(t, list):
            return t
        return [index[t[0]]] + ([t[1]] if t[1] >= 0 else []) if t[0] else t[1]

    if any("d" in f for f in fibers):
        F["d"] = {str(i): [[tile(t) for t in member] for member in f["d"]] for i, f in enumerate(fibers) if "d" in f}
    return ({k: v for k, v in data.items() if k not in ("fibers", "pics")}
            | {"F": F, "sep": sep, "nf": len(fibers), "pics": [data["pics"][k] for k in keys]} | extra)


def _json(data: dict) -> str:
    text = json.dumps(pack(data), separators=(",", ":"), ensure_ascii=False, default=str)
    # inside <script>: no '</script>' and no '<!--' may appear, and the text must stay JSON (JSON.parse):
    # \u003c is '<' to JSON and to JavaScript alike ('<\!--' was not JSON)
    return text.replace("<", "\\u003c")


def section(data: dict | None) -> str:
    """The explorer's HTML: a heading, notes, the embedded data and the script that draws it."""
    if data is None:
        return ""
    n = len(data["fibers"])
    listed = (f"Every mixed fiber ({count(n, 'fiber')})" if data["totalMixed"] <= n else
              f"The {shown_of(n, data['totalMixed'], 'mixed fiber', order='largest')}")
    parts = ["<div id='explorer-section'><h2 id='explorer'>Fiber explorer</h2>",
             f'<p class="note">{listed}'
             ": the candidates that share benchmark evidence but disagree on the claim. Pick a fiber to see its "
             "members (claim-true members first). Audits that differ only in min_support share their fibers; "
             "one of them is listed. Open <code>#explorer-all</code> to list every fiber with all its members "
             "(for printing or searching the page).</p>"]
    for note in data.get("notes", []):
        parts.append(f'<p class="note">{escape(note)}</p>')
    if not n:
        parts.append('<p class="note">No mixed fibers: the evidence decides the claim for every fiber.</p></div>')
        return "".join(parts)
    parts.append("<noscript><p class='note'>The explorer needs JavaScript; the fibers table above and "
                 "fibers.parquet / candidates.parquet have the same data.</p></noscript>")
    parts.append(f'<div id="explorer-app"></div><script type="application/json" id="dc-explorer-data">'
                 f"{_json(data)}</script><script>{JS}</script></div>")
    return "".join(parts)
