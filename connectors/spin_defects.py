"""Spin-defect hosts: 2D materials and their heterostructures, with computed spin coherence times T2.

Source: Toriyama, Zhan, Kanai, Galli, "Strategies to search for two-dimensional materials with long
spin qubit coherence time" (arXiv 2509.00222), dataset on Zenodo, record 16996230, two workbooks:

* ``Data_2D-Materials.xlsx`` — one row per 2D host (monolayer): its id and the nuclear-spin-bath
  limited Hahn-echo T2 of the bare host, in ms;
* ``Data_Heterostructures.xlsx`` — one row per heterostructure (a 2D host on a 3D substrate): the
  host's id, the substrate, the host's name and the heterostructure's T2, in ms.

The audit question: does knowing the 2D host decide whether a device built on it keeps T2 >= 1 ms,
whatever the substrate? Candidates are heterostructures, the fiber of a candidate is its 2D host,
the claim ``t2_ms >= 1.0``. Published: 187 hosts with a valid heterostructure T2, 1,546
heterostructures; 143 hosts viable on every substrate, 1 on none, 43 ambiguous (23.0 %).

Where the files come from: ``$DCAUDIT_MIRROR/spin_defects/<file>``, then ``$DCAUDIT_HOME/raw/<file>``,
then ``https://zenodo.org/records/16996230/files/<file>?download=1``. Their hashes are not known to
this connector (the files were never fetched while it was written), so they are verified by content:
the sheet must have the configured columns. Without the files :func:`prepare` stops with a
:class:`MissingSourceError` naming both and where to put them.

Column names are options (defaults: ``MC2D_UUID``, ``T2`` in the materials workbook; ``Host_2D_MC2D_UUID``,
``Substrate``, ``Compound``, ``T2`` in the heterostructures workbook) because the layout could not be read
from the files here; docs/connectors.md lists them and what to check once the files are at hand.

Tables (``$DCAUDIT_HOME/tables/spin-defects/<input key>/``):

* ``heterostructures.parquet`` — candidate_id (``<host id>|<substrate>``), host_id, host_name, substrate,
  t2_ms (NULL where the workbook has no number: excluded by the audit), host_t2_ms (the bare host's
  T2, NULL when the host is not in the materials workbook), row (the sheet row);
* ``hosts.parquet`` — host_id, host_name, t2_ms, row;
* ``findings.parquet`` (``dcaudit.findings`` schema) — kinds ``t2_missing``, ``t2_non_numeric``,
  ``t2_not_positive``, ``host_id_missing``, ``duplicate_host``, ``duplicate_heterostructure``,
  ``host_not_in_materials``.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from dcaudit import findings
from dcaudit.config import Settings
from dcaudit.connectors.base import (
    FetchedFile,
    PreparedSource,
    SourceConnector,
    SourceFile,
    cached_table,
    fetch,
    provenance,
)
from dcaudit.errors import InputError, IntegrityError, MissingSourceError, require
from dcaudit.storage import write_table_atomic

NAME = "spin-defects"
NORMALISER = "spin-defects-1"
RECORD = "https://zenodo.org/records/16996230"
LICENCE = "as stated on Zenodo record 16996230 (see the record page)"
CITATION = ("Toriyama, Zhan, Kanai, Galli, Strategies to search for two-dimensional materials with long spin "
            "qubit coherence time, arXiv 2509.00222 (2025); dataset Zenodo record 16996230")
MATERIALS_FILE = "Data_2D-Materials.xlsx"
HETEROSTRUCTURES_FILE = "Data_Heterostructures.xlsx"


def zenodo_source(name: str) -> SourceFile:
    # sha256/md5 unknown: the files could not be fetched where this was written; verified by content.
    return SourceFile(name=name, url=f"{RECORD}/files/{name}?download=1", mirror_paths=(f"spin_defects/{name}",),
                      licence=LICENCE, citation=CITATION)


SOURCES = (zenodo_source(MATERIALS_FILE), zenodo_source(HETEROSTRUCTURES_FILE))


@dataclass(frozen=True)
class Options:
    """``[source]`` options: the sheet (default: the first sheet with the needed columns) and column
    names of each workbook, and the claim's unit (``t2_scale``: factor from the workbooks' unit to ms)."""

    materials_sheet: str | None = None
    materials_id_column: str = "MC2D_UUID"
    materials_name_column: str = "Compound"   # used when present
    materials_t2_column: str = "T2"
    heterostructures_sheet: str | None = None
    host_column: str = "Host_2D_MC2D_UUID"
    substrate_column: str = "Substrate"
    host_name_column: str = "Compound"
    heterostructure_t2_column: str = "T2"
    t2_scale: float = 1.0


# ---------------------------------------------------------------------------------------------- reading


def read_sheet(path: Path, sheet: str | None, required: list[str], *,
               label: str) -> tuple[str, list[str], list[tuple[int, tuple]]]:
    """(sheet name, header, (sheet row number, values) per data row) of the sheet holding ``required``
    columns (or the named sheet).

    The header is the sheet's first non-empty row. A workbook without such a sheet is an error that
    lists every sheet and its header, so a user can set the sheet and column options.
    """
    openpyxl = require("openpyxl", "materials")
    try:
        book = openpyxl.load_workbook(path, read_only=True, data_only=True)
    except Exception as exc:  # openpyxl raises zipfile/KeyError/InvalidFileException on a bad file
        raise InputError(f"cannot read as an Excel workbook: {type(exc).__name__}: {exc}", file=label) from exc
    try:
        names = book.sheetnames
        if sheet is not None and sheet not in names:
            raise InputError(f"no sheet {sheet!r}; sheets: {', '.join(names)}", file=label)
        seen: list[str] = []
        for name in [sheet] if sheet is not None else names:
            rows = enumerate(book[name].iter_rows(values_only=True), start=1)
            header: list[str] = []
            for _, r in rows:
                if any(v is not None and str(v).strip() for v in r):
                    header = ["" if v is None else str(v).strip() for v in r]
                    break
            missing = [c for c in required if c not in header]
            if not missing:
                return name, header, [(i, tuple(r)) for i, r in rows]
            seen.append(f"{name!r}: {', '.join(h for h in header if h) or 'empty'}")
        raise InputError(f"no sheet has the column(s) {', '.join(required)} (sheets and their headers: "
                         f"{'; '.join(seen)}); set the sheet and column options of the spin-defects connector "
                         "(docs/connectors.md)", file=label)
    finally:
        book.close()


def _number(value: object) -> tuple[float | None, str | None]:
    """(value, problem): numbers as float; text parsed when it is a number; else a finding kind."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None, "t2_missing"
    if isinstance(value, bool):
        return None, "t2_non_numeric"
    if isinstance(value, int | float):
        f = float(value)
    else:
        try:
            f = float(str(value).strip())
        except ValueError:
            return None, "t2_non_numeric"
    if math.isnan(f):
        return None, "t2_missing"
    if math.isinf(f) or f <= 0:
        return None, "t2_not_positive"
    return f, None


def _text(value: object) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def read_workbook(path: Path, sheet: str | None, columns: dict[str, str], *, number: str, label: str,
                  optional: tuple[str, ...] = ()) -> tuple[str, pl.DataFrame]:
    """(sheet name, frame) with the ``columns`` keys as names; ``number`` parsed to float.

    ``columns`` maps output name -> sheet column; names in ``optional`` may be absent (NULL then).
    The frame keeps the sheet ``row`` and, for the number column, ``_raw`` (the cell as text) and
    ``_problem`` (a finding kind, or NULL) so the caller can report them with candidate ids.
    """
    required = [c for k, c in columns.items() if k not in optional]
    name, header, rows = read_sheet(path, sheet, required, label=label)
    where = {k: header.index(c) for k, c in columns.items() if c in header}
    out: dict[str, list] = {k: [] for k in (*columns, "row", "_raw", "_problem")}
    for row, r in rows:  # one Python step per sheet row: openpyxl yields rows, ~2k here
        if not any(v is not None and str(v).strip() for v in r):
            continue  # blank lines between blocks are not data
        for k in columns:
            v = r[where[k]] if k in where and where[k] < len(r) else None
            if k == number:
                value, problem = _number(v)
                out[k].append(value)
                out["_raw"].append(None if v is None else str(v))
                out["_problem"].append(problem)
            else:
                out[k].append(_text(v))
        out["row"].append(row)
    schema = {k: (pl.Float64 if k == number else pl.Utf8) for k in columns} | {
        "row": pl.Int64, "_raw": pl.Utf8, "_problem": pl.Utf8}
    return name, pl.DataFrame(out, schema=schema)


def _number_findings(frame: pl.DataFrame, file: str, sheet: str, column: str, candidate: str) -> list[dict]:
    bad = frame.filter(pl.col("_problem").is_not_null())
    return [{"file": file, "row": row, "column": column, "kind": kind, "candidate_id": cid,
             "detail": f"sheet {sheet!r}: T2 is {'empty' if raw is None else repr(raw)}; kept with a NULL T2 "
                       "(excluded from the audit)"}
            for row, kind, raw, cid in bad.select("row", "_problem", "_raw", candidate).iter_rows()]


# ---------------------------------------------------------------------------------------------- normalise


def normalise(materials: Path, heterostructures: Path, options: Options) -> tuple[pl.DataFrame, pl.DataFrame,
                                                                                  pl.DataFrame]:
    """(heterostructures, hosts, findings) from the two workbooks; nothing is dropped."""
    m_label, h_label = materials.name, heterostructures.name
    m_sheet, hosts = read_workbook(materials, options.materials_sheet,
                                   {"host_id": options.materials_id_column, "host_name": options.materials_name_column,
                                    "t2_ms": options.materials_t2_column},
                                   number="t2_ms", label=m_label, optional=("host_name",))
    h_sheet, hetero = read_workbook(heterostructures, options.heterostructures_sheet,
                                    {"host_id": options.host_column, "substrate": options.substrate_column,
                                     "host_name": options.host_name_column,
                                     "t2_ms": options.heterostructure_t2_column},
                                    number="t2_ms", label=h_label, optional=("host_name",))
    found = _number_findings(hosts, m_label, m_sheet, options.materials_t2_column, "host_id")
    scale = float(options.t2_scale)
    hosts = hosts.with_columns(pl.col("t2_ms") * scale)
    hetero = hetero.with_columns(pl.col("t2_ms") * scale)
    for frame, label, column in ((hosts, m_label, options.materials_id_column),
                                 (hetero, h_label, options.host_column)):
        found += [{"file": label, "row": r, "column": column, "kind": "host_id_missing",
                   "detail": "no 2D host id: kept, its own fiber of unknown host"}
                  for r in frame.filter(pl.col("host_id").is_null())["row"]]
    dup_hosts = hosts.filter(pl.col("host_id").is_not_null() & (pl.int_range(pl.len()).over("host_id") > 0))
    found += [{"file": m_label, "row": r, "column": options.materials_id_column, "kind": "duplicate_host",
               "detail": f"host {h} is listed more than once in the materials workbook; the first row's T2 is used",
               "candidate_id": h} for h, r in dup_hosts.select("host_id", "row").iter_rows()]
    bare = hosts.filter(pl.col("host_id").is_not_null()).unique("host_id", keep="first", maintain_order=True)
    key = pl.concat_str([pl.col("host_id").fill_null("?"), pl.col("substrate").fill_null("?")], separator="|")
    hetero = hetero.with_columns(key.alias("candidate_id"))
    found += _number_findings(hetero, h_label, h_sheet, options.heterostructure_t2_column, "candidate_id")
    nth = pl.int_range(pl.len()).over("candidate_id")
    dups = hetero.filter(nth > 0)
    found += [{"file": h_label, "row": r, "column": options.substrate_column, "kind": "duplicate_heterostructure",
               "detail": "this host and substrate occur in an earlier row too; kept as its own candidate "
                         f"({c}#{r})", "candidate_id": c} for c, r in dups.select("candidate_id", "row").iter_rows()]
    hetero = hetero.with_columns(pl.when(nth > 0).then(pl.format("{}#{}", "candidate_id", "row"))
                                 .otherwise(pl.col("candidate_id")).alias("candidate_id"))
    hetero = hetero.join(bare.select("host_id", pl.col("t2_ms").alias("host_t2_ms"),
                                     pl.col("host_name").alias("_bare_name")), on="host_id", how="left",
                         maintain_order="left")
    orphans = hetero.filter(pl.col("host_id").is_not_null() & ~pl.col("host_id").is_in(bare["host_id"].implode()))
    found += [{"file": h_label, "row": r, "column": options.host_column, "kind": "host_not_in_materials",
               "detail": f"host {h} is not in {m_label}: kept, with a NULL host_t2_ms", "candidate_id": c}
              for h, r, c in orphans.select("host_id", "row", "candidate_id").iter_rows()]
    hetero = hetero.with_columns(pl.coalesce("host_name", "_bare_name").alias("host_name")).select(
        "candidate_id", "host_id", "host_name", "substrate", "t2_ms", "host_t2_ms", "row")
    found_frame = findings.concat([findings.from_rows({"source": NAME, **f} for f in found)])
    return hetero, hosts.select("host_id", "host_name", "t2_ms", "row"), found_frame


# ---------------------------------------------------------------------------------------------- prepare


def missing_message(missing: list[SourceFile], settings: Settings) -> str:
    where = f"{settings.mirror}/spin_defects/" if settings.mirror else "$DCAUDIT_MIRROR/spin_defects/"
    names = " and ".join(s.name for s in missing)
    return (f"the spin-defect audit needs {names} (Toriyama et al., Zenodo record 16996230), which "
            f"{'is' if len(missing) == 1 else 'are'} not available here. Download from {RECORD} "
            f"({', '.join(s.url for s in missing)}) and put {'it' if len(missing) == 1 else 'them'} in {where} "
            f"or {settings.raw_dir}/")


def fetch_all(settings: Settings) -> list[FetchedFile]:
    """Both workbooks, or one MissingSourceError naming every file that is missing and where to put it."""
    fetched, missing, reasons = [], [], []
    for source in SOURCES:
        try:
            fetched.append(fetch(source, settings))
        except MissingSourceError as exc:
            missing.append(source)
            if "download failed" in str(exc):
                reasons.append(str(exc)[str(exc).index("download failed"):].rstrip(")"))
    if missing:
        why = f" ({reasons[0]})" if reasons else ""
        raise MissingSourceError(missing_message(missing, settings) + why)
    return fetched


def prepare(settings: Settings, options: Options | None = None) -> PreparedSource:
    options = options or Options()
    materials, heterostructures = fetch_all(settings)
    inputs = {MATERIALS_FILE: materials.sha256, HETEROSTRUCTURES_FILE: heterostructures.sha256}
    key = hashlib.sha256("\n".join([materials.sha256, heterostructures.sha256, repr(options)]).encode()).hexdigest()
    out_dir = settings.tables_dir / NAME / key[:16]
    paths = {n: out_dir / f"{n}.parquet" for n in ("heterostructures", "hosts", "findings")}
    reused = all(cached_table(p, key, NORMALISER, key_field="dcaudit.input_key") for p in paths.values())
    if not reused:
        hetero, hosts, found = normalise(materials.path, heterostructures.path, options)
        if hetero.height == 0:
            raise IntegrityError(f"{heterostructures.path}: no heterostructure rows")
        meta = provenance(SOURCES[1], heterostructures, normaliser=NORMALISER, input_key=key,
                          materials_sha256=materials.sha256, options=repr(options),
                          counts={"heterostructures": hetero.height, "hosts": hosts.height, "findings": found.height})
        write_table_atomic(findings.to_arrow(found), paths["findings"], meta)
        write_table_atomic(hosts.to_arrow(), paths["hosts"], meta)
        write_table_atomic(hetero.to_arrow(), paths["heterostructures"], meta)  # last: marks a complete set
    n = pl.read_parquet(paths["heterostructures"], columns=["host_id"])
    return PreparedSource(
        name=NAME, tables={"heterostructures": paths["heterostructures"], "hosts": paths["hosts"]},
        inputs=inputs, findings=paths["findings"], sources=SOURCES,
        notes=(f"{NAME}: {'reused' if reused else 'normalised'} {n.height} heterostructures of "
               f"{n['host_id'].n_unique()} hosts -> {out_dir}",))


CONNECTOR = SourceConnector(NAME, Options, SOURCES, prepare)
