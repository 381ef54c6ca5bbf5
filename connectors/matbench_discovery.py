"""Matbench Discovery: the WBM test set's truth (the "WBM summary") and model formation-energy predictions.

Where the data come from:

* the WBM summary ``2023-12-13-wbm-summary.csv.gz``: figshare file 64706751, md5
  1555268d3aa59d20262cb9d01ce0994b, as upstream's ``matbench_discovery/data-files.yml`` lists it
  (about 20 MB; the mirror does not hold it). It is looked for at
  ``$DCAUDIT_MIRROR/matbench_discovery/wbm/``, then ``$DCAUDIT_HOME/raw/``, then downloaded. Without it
  :func:`prepare` stops with a :class:`MissingSourceError` that names the file and where to put it.
* model predictions: the mirror's ``matbench_discovery/preds/<key>/*.csv.gz`` (git blobs of
  janosh/matbench-discovery, sha256 as its MANIFEST lists them: :data:`MIRROR_PREDICTIONS`); online,
  the other models' figshare files (URL and md5 from the mirror's ``model_metrics_from_yaml.csv``,
  which upstream's model YAML files give).

Prediction columns are read **by name** (never by position): the column the MANIFEST names for a
mirrored file, otherwise the one column whose name starts with ``e_form_per_atom``.

Tables (``$DCAUDIT_HOME/tables/matbench-discovery/``):

* ``predictions.parquet``: model, material_id, prediction (eV/atom), usable (false for duplicate
  ids, ids outside the WBM summary when it is present) — every row of every file;
* ``discovery.parquet`` (only with the summary): usable predictions joined with the truth —
  ``e_form_per_atom`` (= ``e_form_per_atom_mp2020_corrected``), ``e_above_hull``
  (= ``e_above_hull_mp2020_corrected_ppd_mp``, upstream's stability target) and, when present, the
  paper's ``e_form_per_atom_wbm`` / ``e_above_hull_wbm``;
* ``matbench_discovery_findings.parquet``: empty or non-numeric predictions, malformed or duplicate ids,
  |prediction| > 5 eV/atom (kept), ids outside the summary, models whose files are not available; the
  same rows in the ``dcaudit.findings`` schema are ``findings.parquet`` (kinds: :data:`KINDS`).
"""

from __future__ import annotations

import csv
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from dcaudit import findings as findings_schema
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
from dcaudit.errors import InputError, MissingSourceError
from dcaudit.storage import regular_file, write_table_atomic

NORMALISER = "matbench-discovery-1"
LICENCE = "MIT (janosh/matbench-discovery); WBM data CC-BY-4.0"
CITATION = ("Riebesell et al., A framework to evaluate machine learning crystal stability predictions, "
            "Nat. Mach. Intell. (2025); Wang, Botti, Marques, npj Comput. Mater. 7, 12 (2021)")
ID_PATTERN = r"^wbm-[1-5]-\d+$"
EXTREME = 5.0  # eV/atom: formation energies beyond this are physically implausible; reported, kept

WBM_SUMMARY = SourceFile(
    name="2023-12-13-wbm-summary.csv.gz",
    url="https://figshare.com/ndownloader/files/64706751",
    mirror_paths=("matbench_discovery/wbm/2023-12-13-wbm-summary.csv.gz",
                  "matbench_discovery/2023-12-13-wbm-summary.csv.gz"),
    md5="1555268d3aa59d20262cb9d01ce0994b",
    licence=LICENCE, citation=CITATION, hash_origin="upstream data-files.yml",
)
FIGSHARE_PAGE = "https://figshare.com/files/64706751"
# normalised name -> column of the WBM summary (first one present wins)
TRUTH_COLUMNS = {
    "e_form_per_atom": ("e_form_per_atom_mp2020_corrected",),
    "e_above_hull": ("e_above_hull_mp2020_corrected_ppd_mp",),
    "e_form_per_atom_wbm": ("e_form_per_atom_wbm",),
    "e_above_hull_wbm": ("e_above_hull_wbm",),
}

# key -> (mirror path under matbench_discovery/, sha256, prediction column), from the mirror's MANIFEST.
MIRROR_PREDICTIONS: dict[str, tuple[str, str, str]] = {
    "alchembert": ("preds/alchembert/2024-12-25-alchembert-wbm-IS2RE.csv.gz", "1cc930e4687d1b3f2637d3f1526f1a3c4b8b66ecccd91c6c704b542ee0f7cf32", "e_form_per_atom_alchembert"),
    "alignn": ("preds/alignn/2023-06-02-alignn-wbm-IS2RE.csv.gz", "aa8347c6b4aac2cb73f0465841c0650718cb778d2caba9a00249f8245e712b0d", "e_form_per_atom_alignn"),
    "alignn_ff": ("preds/alignn_ff/2023-07-11-alignn-ff-wbm-IS2RE.csv.gz", "dc75be97f3bce3ce724680065abf11a19bdc6a3928fdd77ccb42d3f62a02e593", "e_form_per_atom_alignn_ff"),
    "bowsr": ("preds/bowsr/2023-01-23-bowsr-megnet-wbm-IS2RE.csv.gz", "317c59609af90b32de9f114a78f4c1d8ad59172c4d185cf79fd10ea48bdf15b6", "e_form_per_atom_bowsr_megnet"),
    "chgnet_0.3.0": ("preds/chgnet_0.3.0/2023-12-21-chgnet-0.3.0-wbm-IS2RE.csv.gz", "cb15dce5bc2a847ff9de54c3716a4ccd478be895938d512f9c2c7844a92495b1", "e_form_per_atom_chgnet"),
    "m3gnet": ("preds/m3gnet/2023-12-28-m3gnet-wbm-IS2RE.csv.gz", "855b8ddd0cb1b5993d0b75ca1cd47560de66cb70cba2714364de98dd9e135aa1", "e_form_per_atom_m3gnet"),
    "mace_mp_0": ("preds/mace_mp_0/2023-12-11-mace-mp-0-wbm-IS2RE-FIRE.csv.gz", "e2d395110bfcf72800ec7099ab42d34fc348acdf6646c660176785d409063e6b", "e_form_per_atom_mace"),
    "mace_mpa_0": ("preds/mace_mpa_0/2024-12-09-mace-mpa-0-wbm-IS2RE-FIRE.csv.gz", "26fe13cc15d995bc5573b7a09973aed0c0482191cf9159cef6cffd00ddeb1ac0", "e_form_per_atom_mace"),
    "megnet": ("preds/megnet/2022-11-18-megnet-wbm-IS2RE.csv.gz", "99d55d75f9f4f357253ba84ff685e8fe4fe75197a7b78ec177a2c8f1e0f1cfc1", "e_form_per_atom_megnet"),
    "voronoi_rf": ("preds/voronoi_rf/e-form-preds-IS2RE.csv.gz", "e44521fab388d4b80b73b6ad46f6e899dd463acf4a7d0dc043143322ac4bbb41", "e_form_per_atom_voronoi_rf"),
    "orb_v2": ("preds/orb_v2/orbff-v2-20241011.csv.gz", "22135abad3dc9a8751d60998b2950560eef52d27ee24fdd0e46a7bf457e90ad7", "e_form_per_atom_orb"),
    "orb_v2_mptrj": ("preds/orb_v2_mptrj/orbff-mptrj-only-v2-20241014.csv.gz", "1353973466f48ce7e2891c931f92058d7e72c3f73274d33ca9ea32285635d386", "e_form_per_atom_orb"),
    "sevennet_0": ("preds/sevennet_0/2024-07-11-sevennet-0-preds.csv.gz", "66dfe378377ebb9fbb18698daf2c145849773381fc0f04d37ab1a7246d84d967", "e_form_per_atom_sevennet"),
    "sevennet_l3i5": ("preds/sevennet_l3i5/2024-12-10-sevennet-l3l5-preds.csv.gz", "6b681f02002bf38ae06dce6b3bfb3f3a1095c5c2ea988ea57d6c4c5a4ac9eb50", "e_form_per_atom_chgTot_l3i5"),
    "eqv2_m_omat_salex_mp": ("preds/eqv2_m_omat_salex_mp/eqV2-m-omat-mp-salex.csv.gz", "d056e50262d7b80a66e2cf723d93cdb7b952b4ab3fb42c505f48d4bd5cb87d67", "e_form_per_atom_eqV2-86M-omat-mp-salex"),
    "eqv2_s_dens_mp": ("preds/eqv2_s_dens_mp/eqV2-s-dens-mp.csv.gz", "6e6259c878ad7c78235394ba32c49a6e30b094ac4310a15b5660636f5f3286b8", "e_form_per_atom_eqV2-31M-dens-MP-p5"),
    "gnome": ("preds/gnome/2023-11-01-gnome-preds-50076332.csv.gz", "3dcdacfaff88d6d535c1781ff48ba38e3dd8608db7d905078543e9a1f2e2bfe4", "e_gnome_after_relax"),
    "grace_2l_mptrj": ("preds/grace_2l_mptrj/2024-11-21-MP_GRACE_2L_r6_11Nov2024-wbm-IS2RE-FIRE.csv.gz", "5d85cc8c23abf1543975cb71110149b0259ffcb3da1e8c194528911f2f0930f0", "e_form_per_atom_grace"),
    "esnet": ("preds/esnet/2025-06-20-esnet-wbm-IS2RE.csv.gz", "6b249ec63abf9e58cfa3ee0bf0e1ed47cef2c299e126443f98cafe9dbf44af37", "e_form_per_atom_esnet"),
    "dpa3_v1_mptrj": ("preds/dpa3_v1_mptrj/2025-01-10-dpa3-mptrj-discovery.csv.gz", "e6417d4560a33dfc6850580ff500c84d5491f1fcb76b4ef841b802f251d94b55", "e_form_per_atom_dp"),
    "dpa3_v1_openlam": ("preds/dpa3_v1_openlam/2025-01-10-dpa3-openlam-discovery.csv.gz", "b5c54bb0668d78edcad9293f14ebeeb84d7409e4b271ba5f260573e8bc70aff6", "e_form_per_atom_dp"),
}

FINDING_SCHEMA = {"source": pl.Utf8, "file": pl.Utf8, "model": pl.Utf8, "row": pl.Int64, "material_id": pl.Utf8,
                  "column": pl.Utf8, "issue": pl.Utf8, "value": pl.Utf8, "action": pl.Utf8}
PREDICTION_SCHEMA = {"model": pl.Utf8, "material_id": pl.Utf8, "prediction": pl.Float64, "usable": pl.Boolean}


def findings_frame(rows: list[dict]) -> pl.DataFrame:
    return pl.DataFrame([{k: r.get(k) for k in FINDING_SCHEMA} for r in rows], schema=FINDING_SCHEMA)


def missing_summary_message(settings: Settings) -> str:
    mirror = f"{settings.mirror}/{WBM_SUMMARY.mirror_paths[0]}" if settings.mirror else \
        f"$DCAUDIT_MIRROR/{WBM_SUMMARY.mirror_paths[0]}"
    return (f"the Matbench Discovery audit needs the WBM summary {WBM_SUMMARY.name} (the ground truth: "
            f"e_above_hull, e_form_per_atom), which is not available here. Download it from {FIGSHARE_PAGE} "
            f"(md5 {WBM_SUMMARY.md5}) and put it at {mirror} or {settings.raw_dir / WBM_SUMMARY.name} "
            "(the model predictions come from the mirror's matbench_discovery/preds)")


def fetch_summary(settings: Settings) -> FetchedFile:
    """The WBM summary, md5-checked; a clear MissingSourceError when it is nowhere to be had."""
    try:
        return fetch(WBM_SUMMARY, settings)
    except MissingSourceError as exc:
        raise MissingSourceError(missing_summary_message(settings)) from exc


def read_summary(path: Path) -> pl.DataFrame:
    """material_id plus the normalised truth columns (:data:`TRUTH_COLUMNS`), numbers checked."""
    try:
        raw = pl.read_csv(path, infer_schema=False)
    except (pl.exceptions.ComputeError, pl.exceptions.NoDataError, OSError) as exc:
        raise InputError(f"cannot parse as CSV: {exc}", file=str(path)) from exc
    if "material_id" not in raw.columns:
        raise InputError(f"no material_id column; found {raw.columns[:12]}", file=str(path), column="material_id")
    cols = [pl.col("material_id")]
    for name, candidates in TRUTH_COLUMNS.items():
        src = next((c for c in candidates if c in raw.columns), None)
        if src is not None:
            cols.append(pl.col(src).alias(name))
    if len(cols) == 1 or not any(c in raw.columns for c in TRUTH_COLUMNS["e_above_hull"]
                                 + TRUTH_COLUMNS["e_above_hull_wbm"]):
        raise InputError(f"no hull-distance column ({TRUTH_COLUMNS['e_above_hull'] + TRUTH_COLUMNS['e_above_hull_wbm']})",
                         file=str(path))
    df = raw.select(cols).with_row_index("row", 1)
    for name in df.columns[2:]:
        num = pl.col(name).str.strip_chars().cast(pl.Float64, strict=False)
        bad = df.filter(pl.col(name).is_not_null() & (pl.col(name).str.strip_chars() != "") & num.is_null())
        if bad.height:
            first = bad.row(0, named=True)
            raise InputError(f"non-numeric value {first[name]!r} ({bad.height} in this column)", file=str(path),
                             row=int(first["row"]), column=name)
        df = df.with_columns(num.alias(name))
    dup = df.filter(pl.col("material_id").is_duplicated())
    if dup.height:
        raise InputError(f"material_id {dup['material_id'][0]!r} occurs {dup.height} times", file=str(path),
                         row=int(dup["row"][0]), column="material_id")
    return df.drop("row")


def prediction_column(columns: Sequence[str], model: str, path: Path, known: str | None = None) -> str:
    """The prediction column, chosen by name: the known one, else the single ``e_form_per_atom*`` column."""
    if known is not None:
        if known not in columns:
            raise InputError(f"model {model!r}: expected prediction column {known!r}; found {list(columns)}",
                             file=str(path), column=known)
        return known
    truthish = {c for cs in TRUTH_COLUMNS.values() for c in cs}
    found = [c for c in columns if c.startswith("e_form_per_atom") and c not in truthish]
    if len(found) != 1:
        raise InputError(f"model {model!r}: cannot tell the prediction column by name (want exactly one "
                         f"e_form_per_atom_* column; found {found or 'none'} among {list(columns)})", file=str(path))
    return found[0]


def read_prediction_file(path: Path, model: str, column: str | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """One model's CSV -> (model, material_id, prediction, usable) with every row kept, plus findings."""
    try:
        raw = pl.read_csv(path, infer_schema=False)
    except (pl.exceptions.ComputeError, pl.exceptions.NoDataError, OSError) as exc:
        raise InputError(f"cannot parse as CSV: {exc}", file=str(path)) from exc
    if "material_id" not in raw.columns:
        raise InputError(f"no material_id column; found {raw.columns}", file=str(path), column="material_id")
    col = prediction_column(raw.columns, model, path, column)
    df = raw.select(pl.col("material_id"), pl.col(col).alias("_text")).with_row_index("row", 1).with_columns(
        pl.col("_text").str.strip_chars().cast(pl.Float64, strict=False).alias("prediction"))
    df = df.with_columns(pl.when(pl.col("prediction").is_nan()).then(None).otherwise(pl.col("prediction"))
                         .alias("prediction"))
    issue = (pl.when(pl.col("material_id").is_null()).then(pl.lit("empty material_id"))
             .when(~pl.col("material_id").str.contains(ID_PATTERN)).then(pl.lit("material_id is not wbm-<step>-<n>"))
             .when(pl.col("row") != pl.col("row").min().over("material_id")).then(pl.lit("duplicate material_id"))
             .when(pl.col("_text").is_null() | (pl.col("_text").str.strip_chars() == "")).then(pl.lit("empty prediction"))
             .when(pl.col("prediction").is_null() & pl.col("_text").str.to_lowercase().str.contains("nan"))
             .then(pl.lit("NaN prediction"))
             .when(pl.col("prediction").is_null()).then(pl.lit("non-numeric prediction"))
             .when(pl.col("prediction").abs() > EXTREME).then(pl.lit(f"|prediction| > {EXTREME:g} eV/atom")))
    df = df.with_columns(issue.alias("issue"))
    unusable = pl.col("issue").is_in(["empty material_id", "material_id is not wbm-<step>-<n>", "duplicate material_id"])
    actions = {"empty material_id": "kept, usable = false", "material_id is not wbm-<step>-<n>": "kept, usable = false",
               "duplicate material_id": "kept, usable = false (first row used)"}
    findings = df.filter(pl.col("issue").is_not_null()).select(
        pl.lit("matbench-discovery").alias("source"), pl.lit(str(path)).alias("file"), pl.lit(model).alias("model"),
        pl.col("row").cast(pl.Int64), "material_id", pl.lit(col).alias("column"), "issue",
        pl.col("_text").str.slice(0, 80).alias("value"),
        pl.col("issue").replace_strict(actions, default="kept (null predictions are excluded from audits as "
                                       "missing evidence; extreme values are audited as given)").alias("action"))
    out = df.select(pl.lit(model).alias("model"), "material_id", "prediction",
                    (~unusable.fill_null(False)).alias("usable"))
    return out, findings.cast(FINDING_SCHEMA)  # type: ignore[arg-type]


def _yaml_models(settings: Settings) -> dict[str, tuple[str, str]]:
    """model key -> (figshare URL, md5) from the mirror's model_metrics_from_yaml.csv, where it has one."""
    if settings.mirror is None:
        return {}
    path = settings.mirror / "matbench_discovery" / "model_metrics_from_yaml.csv"
    if not regular_file(path, "the mirror's model list"):
        return {}
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    out = {}
    for r in rows:
        url, md5 = r.get("pred_file_url") or "", r.get("pred_file_md5") or ""
        m = re.search(r"/files/(\d+)", url)
        if m and md5:
            out[r["model_key"]] = (f"https://figshare.com/ndownloader/files/{m.group(1)}", md5)
    return out


def _normal(key: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", key.lower()).strip("_")


def prediction_sources(settings: Settings, models: Sequence[str] | str | None = None) -> dict[str, SourceFile]:
    """Every model we know a file for: the mirrored ones, plus (online) figshare-only models."""
    sources = {key: SourceFile(name=f"{key}-{Path(rel).name}", url=f"mirror:matbench_discovery/{rel}",
                               mirror_paths=(f"matbench_discovery/{rel}",), sha256=sha, licence=LICENCE,
                               citation=CITATION, hash_origin="the mirror's MANIFEST.md")
               for key, (rel, sha, _) in MIRROR_PREDICTIONS.items()}
    mirrored = {_normal(k) for k in sources}
    for key, (url, md5) in _yaml_models(settings).items():
        if _normal(key) not in mirrored:
            sources[key] = SourceFile(name=f"{key}-discovery.csv.gz", url=url, md5=md5,
                                      mirror_paths=(f"matbench_discovery/preds/{key}/{key}-discovery.csv.gz",),
                                      licence=LICENCE, citation=CITATION)
    if models is None or models == "all":
        return sources
    wanted = [models] if isinstance(models, str) else list(models)
    unknown = [m for m in wanted if m not in sources]
    if unknown:
        raise InputError(f"unknown Matbench Discovery model(s) {unknown}; known: {', '.join(sorted(sources))}")
    return {m: sources[m] for m in wanted}


def load_predictions(settings: Settings, models: Sequence[str] | str | None = None,
                     ) -> tuple[pl.DataFrame, pl.DataFrame, dict[str, str]]:
    """Every available model's predictions (long), findings, and input hashes. Unavailable models are findings."""
    parts, findings, inputs = [pl.DataFrame(schema=PREDICTION_SCHEMA)], [findings_frame([])], {}
    for key, source in prediction_sources(settings, models).items():
        try:
            fetched = fetch(source, settings)
        except MissingSourceError as exc:  # figshare-only models, offline
            findings.append(findings_frame([{"source": "matbench-discovery", "model": key, "file": source.url,
                                             "issue": "predictions not available", "value": str(exc)[:200],
                                             "action": "model not audited"}]))
            continue
        known = MIRROR_PREDICTIONS.get(key, (None, None, None))[2] if fetched.origin.startswith("mirror:") else None
        df, found = read_prediction_file(fetched.path, key, known)
        parts.append(df)
        findings.append(found)
        inputs[f"{key}/{Path(fetched.path).name}"] = fetched.sha256
    return pl.concat(parts), pl.concat(findings), inputs


def _cached(path: Path, key: str) -> bool:
    return cached_table(path, key, NORMALISER, key_field="dcaudit.input_key")


@dataclass(frozen=True)
class Options:
    """``[source]`` options: ``models`` (``"all"`` or a list of model keys)."""

    models: tuple[str, ...] | None = None


KINDS = {
    "empty material_id": "empty_id", "material_id is not wbm-<step>-<n>": "malformed_id",
    "duplicate material_id": "duplicate_id", "empty prediction": "missing_prediction",
    "NaN prediction": "nan_prediction", "non-numeric prediction": "non_numeric_prediction",
    f"|prediction| > {EXTREME:g} eV/atom": "extreme_prediction", "id not in the WBM summary": "id_not_in_wbm_summary",
    "predictions not available": "predictions_not_available",
}


def as_findings(detail: pl.DataFrame) -> pl.DataFrame:
    """The connector's findings in the common schema (``candidate_id`` = material_id)."""
    text = pl.concat_str([pl.col("model").fill_null(""), pl.lit(": "), pl.col("issue"),
                          pl.when(pl.col("value").is_not_null()).then(pl.format(" (value {})", "value"))
                          .otherwise(pl.lit("")),
                          pl.when(pl.col("action").is_not_null()).then(pl.format("; {}", "action"))
                          .otherwise(pl.lit(""))])
    return findings_schema.conform(detail.select(
        pl.lit("matbench-discovery").alias("source"), "file", "row", "column",
        findings_schema.kind(pl.col("issue"), KINDS).alias("kind"), text.alias("detail"),
        pl.col("material_id").alias("candidate_id")))


def prepare(settings: Settings, options: Options | None = None) -> PreparedSource:
    """Predictions of every available model joined with the WBM summary; stops clearly without the summary."""
    models = options.models if options is not None else None
    models = None if models == ("all",) else models
    summary_file = fetch_summary(settings)  # first: without the truth there is nothing to audit
    out_dir = settings.tables_dir / "matbench-discovery"
    predictions, findings, inputs = load_predictions(settings, models)
    inputs[WBM_SUMMARY.name] = summary_file.sha256
    key = hashlib.sha256("\n".join(f"{k}={v}" for k, v in sorted(inputs.items())).encode()).hexdigest()
    paths = {"discovery": out_dir / "discovery.parquet", "predictions": out_dir / "predictions.parquet"}
    detail_path, findings_path = out_dir / "matbench_discovery_findings.parquet", out_dir / "findings.parquet"
    if not all(_cached(p, key) for p in (*paths.values(), detail_path, findings_path)):
        truth = read_summary(summary_file.path)
        outside = predictions.join(truth.select("material_id"), on="material_id", how="anti")
        findings = pl.concat([findings, outside.filter(pl.col("usable")).select(
            pl.lit("matbench-discovery").alias("source"), pl.lit(None, pl.Utf8).alias("file"), "model",
            pl.lit(None, pl.Int64).alias("row"), "material_id", pl.lit("material_id").alias("column"),
            pl.lit("id not in the WBM summary").alias("issue"), pl.lit(None, pl.Utf8).alias("value"),
            pl.lit("kept, usable = false").alias("action"))])
        predictions = predictions.with_columns(
            (pl.col("usable") & pl.col("material_id").is_in(truth["material_id"].implode())).alias("usable"))
        joined = predictions.filter(pl.col("usable")).drop("usable").join(truth, on="material_id", how="inner")
        meta = provenance(WBM_SUMMARY, summary_file, normaliser=NORMALISER, input_key=key,
                          models=sorted(predictions["model"].unique().to_list()),
                          counts={"predictions": predictions.height, "joined": joined.height,
                                  "findings": findings.height})
        write_table_atomic(findings.to_arrow(), detail_path, meta)
        write_table_atomic(findings_schema.to_arrow(as_findings(findings)), findings_path, meta)
        write_table_atomic(predictions.to_arrow(), paths["predictions"], meta)
        write_table_atomic(joined.to_arrow(), paths["discovery"], meta)
    n_models = pl.read_parquet(paths["predictions"], columns=["model"])["model"].n_unique()
    return PreparedSource(name="matbench-discovery", tables=paths, inputs=inputs, findings=findings_path,
                          reports={"findings": detail_path}, sources=(WBM_SUMMARY,),
                          notes=(f"matbench-discovery: {n_models} model(s) joined with {WBM_SUMMARY.name}",))


CONNECTOR = SourceConnector("matbench-discovery", Options, (WBM_SUMMARY,), prepare)
