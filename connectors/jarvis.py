"""JARVIS-Leaderboard (dft_3d): benchmark truth plus every contributed model's test predictions.

* **Truth** for any dft_3d property comes from the ``jarvis-leaderboard`` package (extra
  ``materials``): ``benchmarks/AI/SinglePropertyPrediction/dft_3d_<property>.json.zip`` holds
  ``{train, val, test: {JVASP-id: value}}`` and ships in the wheel, so it works offline after
  ``pip install``. Without the package, the same file is looked up in the mirror and then
  downloaded from the pinned repository commit.
* **Predictions** come from the repository's ``contributions/<model>/AI-SinglePropertyPrediction-
  <property>-dft_3d-test-mae.csv.zip`` (mirror ``$DCAUDIT_MIRROR/jarvis_leaderboard/contributions``
  first, else GitHub raw at commit ``COMMIT``). Each zip holds one CSV ``id,prediction`` or
  ``id,target,prediction``: columns are read by NAME, never by position (reading the second column
  of a three-column file takes the reference value for the prediction, a silent leak).

Every prediction file is validated against the benchmark test split; nothing is silently used or
dropped. Rows with a problem stay in ``predictions.parquet`` with their ``issue`` and are left out of
the audit table; every problem is a row of ``findings.parquet``.

Tables written to ``$DCAUDIT_HOME/tables/jarvis/``:

* ``jarvis.parquet`` (the audit table) — one row per (model, material in the test split of any loaded
  property): ``model``, ``jid``, ``pred_<property>`` (the model's used prediction or null),
  ``<property>`` (the material's benchmark value from whichever split holds it) and
  ``<property>_split``; only models with prediction files for every ``require``-d property;
* ``test_truth.parquet`` — one row per material in any test split, ``<property>`` only where the
  material is in that property's test split (complete cases = the intersection of test splits);
* ``predictions.parquet`` — long: ``model, jid, property, prediction, file, row, raw, issue,
  prediction_by_position`` (the file's second column: what a reader by position would have used);
* ``truth.parquet`` — long: ``jid, property, split, target`` (train, val and test);
* ``models.parquet`` — one row per (model, property): ``file, header, sha256, sha256_verified, n_rows,
  n_used, mae`` (benchmark MAE over the used rows) and ``mae_by_position`` (the same, had the second
  column been read as the prediction: 0 for the ``id,target,prediction`` files);
* ``jarvis_findings.parquet`` — ``file, model, property, issue, jid, value, row, detail`` (the
  connector's detailed view); the same rows, plus one ``target_column_is_reference`` row per file whose
  ``target`` column holds the benchmark values, are the run's findings (``findings.parquet``, the
  ``dcaudit.findings`` schema, ``kind`` = the issue, ``candidate_id`` = the jid). Issues:
  ``id_outside_test_split``, ``duplicate_id``, ``non_numeric``, ``nan``, ``missing_value``,
  ``missing_id``, ``target_differs_from_benchmark``, ``leak_identical_to_reference``,
  ``unknown_model``, ``id_in_several_splits`` for benchmark ids the upstream file lists in two
  splits (a train/test overlap; the test entry is used), and ``target_column_is_reference``.
"""

from __future__ import annotations

import difflib
import hashlib
import io
import json
import re
import zipfile
from collections.abc import Iterable, Sequence
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
    sha256_file,
)
from dcaudit.errors import InputError, MissingSourceError, SpecError
from dcaudit.storage import regular_file, write_table_atomic

NAME = "jarvis"
NORMALISER = "jarvis-3"
COMMIT = "57afc55f94c8a6f4562f73a3173968cd4b2f83b1"  # usnistgov/jarvis_leaderboard, 2025-08-25
RAW = f"https://raw.githubusercontent.com/usnistgov/jarvis_leaderboard/{COMMIT}/jarvis_leaderboard"
LICENCE = "NIST terms (US-government work, not subject to US copyright); see LICENSE.rst of jarvis_leaderboard"
CITATION = ("Choudhary et al., JARVIS-Leaderboard: a large scale benchmark of materials design methods, "
            "npj Comput. Mater. 10, 93 (2024)")
DEFAULT_PROPERTIES = ("formation_energy_peratom", "optb88vdw_bandgap", "ehull", "mbj_bandgap")
SPLITS = ("train", "val", "test")
CONTRIB_DIR = "jarvis_leaderboard/contributions"
BENCH_DIR = "benchmarks/AI/SinglePropertyPrediction"
# Two values closer than this are "identical" (CSV round-trips of the same float).
_IDENTICAL = 1e-9

# sha256 of the upstream bytes at COMMIT (the mirror's MANIFEST lists the same), for the properties
# the built-in spec reads. Files of other properties are verified by content only.
KNOWN_SHA256: dict[tuple[str, str], str] = {
    ("alignn_model", "ehull"): "26bb14623f7d99ecdf19ff0c54a8e75b8b21c0d8a9354bdb4463582eefc02286",
    ("alignn_model", "formation_energy_peratom"): "b60c7006f7ef5a1ffac07228c2f8e42ba31637e15f55cf2658c7136afdc7a389",
    ("alignn_model", "mbj_bandgap"): "f813b0a4be6e4d7fe9e9930589848f0bb5e7a82c8b6b633bc674888f6afdd7d9",
    ("alignn_model", "optb88vdw_bandgap"): "a7b34bbff0405361a6d15be7e435844dfe8f50421de781620ce00a1afa1915e8",
    ("atomgpt_model", "formation_energy_peratom"): "3e6fc880de6328c721120a1e6b7089fb1e3da0928cc398e82294a2f4bceb658d",
    ("atomgpt_model", "mbj_bandgap"): "9b69f2f37453426fe838291cfed6609c0b4d212a353715db5b24fb341df1c445",
    ("atomgpt_model", "optb88vdw_bandgap"): "14fedbc185edde739a65d4f2f664d352abc1c55d64e761dc1cfa9fed9f475d4d",
    ("cfid", "formation_energy_peratom"): "f8cb63868e5382466191200956561c3448b8b127d1f6c0fb2acf677d80727c31",
    ("cfid", "mbj_bandgap"): "85165a117fe02a4526401fac1ff194a07671ce68779a5f8480e60170668ef9c1",
    ("cfid", "optb88vdw_bandgap"): "6ada17c0f0eeb650cf0087cc4319a1457b1877ec6c0534795e412aea099235bb",
    ("cfid_chem", "formation_energy_peratom"): "4fe37a64cb6e6f94d006b4cc61dbd55706aebad0aa4bceb3991840bbdc005de8",
    ("cfid_chem", "mbj_bandgap"): "65867e03fb23ce036fe702ffb64cb7a01bf06573bb696ac373a142d118b833d3",
    ("cfid_chem", "optb88vdw_bandgap"): "a3fdfe35e506f6937d29a05057d3ef3ac9020f884f8fd2818052f2e9e77c77dd",
    ("cgcnn_model", "ehull"): "1b38db5f2594b320da4d3ef5b37bf9a58a6b4fcd33065b51ce1daa8ad8e21e0f",
    ("cgcnn_model", "formation_energy_peratom"): "8ad1484178a63aadc4d42a79565ee8f88508f2efaeb2c9d8a4b4e76257c02f03",
    ("cgcnn_model", "mbj_bandgap"): "b5e2ef78457dabae979b3858f193377a07257a2997b9e81340acf4bfef2318df",
    ("cgcnn_model", "optb88vdw_bandgap"): "7ec40713b29c7bca37a5a6b493abd809f457ce1fe9db8c22356519487c3a0b59",
    ("kgcnn_cgcnn", "ehull"): "22f88b3bed3c35b7cde45a20c355026064b182c6e8adbbba0cd0980f5364e88e",
    ("kgcnn_cgcnn", "formation_energy_peratom"): "8e51d142674603b1bba32309925c439d3fabbd9d5872576cfc259b1d79d36434",
    ("kgcnn_cgcnn", "mbj_bandgap"): "ac7451d5a2ecbbfecc8121c92e111c1a9db3cca26ef043bcf104cf98cc17d081",
    ("kgcnn_cgcnn", "optb88vdw_bandgap"): "f46102a6c87dfe98d4fd3f30e4c1ac33f10d05351ef3fd0a4569ee8bac56c302",
    ("kgcnn_coGN", "ehull"): "36d2ef72680bceebcb08483364ef9b3a7fa78fb3b938a9e3f2ae66865d2420b6",
    ("kgcnn_coGN", "formation_energy_peratom"): "2dbe3146e0618af7ba3f42411fb4d33965b456ea31d113407b198d9e5284fc6d",
    ("kgcnn_coGN", "mbj_bandgap"): "df39305d576fed358d4513f00626b59bf71d912514de0970eb3ca7228c9126c8",
    ("kgcnn_coGN", "optb88vdw_bandgap"): "229e1b36f4682e795c253d3efa88edb4631d3ab71be1a1c9b9a9f64a6237341b",
    ("kgcnn_coNGN", "ehull"): "d153c813d6d9e9d0f93401bcd4b781df352d53aedbb79bcb7f0b4f163aa177e5",
    ("kgcnn_coNGN", "formation_energy_peratom"): "dcb2238e7d2f6c9362ceb58620f0ffc93de55cb11118a4bc0ff86de8311cefd3",
    ("kgcnn_coNGN", "mbj_bandgap"): "6802c94db65a3fc18775cc1ff2d3cea138eda720cd2a387c58bfa1a57afdcc70",
    ("kgcnn_coNGN", "optb88vdw_bandgap"): "b546c3ed02d3691cb9b6f949af66867a0bfa01f522c52e32745de6aef41ea744",
    ("kgcnn_dimenetPP", "ehull"): "be63fd46b378b6988736887c556045cf4f6be8e7ced2d4b22d82cbcef62aef99",
    ("kgcnn_dimenetPP", "formation_energy_peratom"): "512292bbfccd36e5aa0b2ead9240176e23494dc0c415fd2e799ef0473be76d1f",
    ("kgcnn_dimenetPP", "mbj_bandgap"): "97dda03e557d43a2587d4ff9ae0101575062ae7060d0791f6e6d111df78029ab",
    ("kgcnn_dimenetPP", "optb88vdw_bandgap"): "d4709d7d6c31a9e56e98759fc0681cc05e74de481d0c3005f1fdd2f6d1b2b470",
    ("kgcnn_megnet", "ehull"): "d08b49b5d9e0e19c37d2aa8efdaf9f60a853a0fb98608ac8be47df2de5a1a813",
    ("kgcnn_megnet", "formation_energy_peratom"): "c0802abdeb589663ed1861a82b34617376555de466cf7804a0633f7baeefdf71",
    ("kgcnn_megnet", "mbj_bandgap"): "542e855e31be2aa5757b922cea979052a444645ac80a167a87f83fa185ba0574",
    ("kgcnn_megnet", "optb88vdw_bandgap"): "8017d3610db9f167907b218b9dfe5b474f2712bd480a081e1b01fa7f1888d5bf",
    ("kgcnn_schnet", "ehull"): "a59ebcfed9c82566e55a4729b1a7826ef77952ce48fe26718bee4ba72b39a042",
    ("kgcnn_schnet", "formation_energy_peratom"): "feb4c5fb4966f2a1f6243a3c70fd659f51f7ccb02a7000ed726cc0d11a41356e",
    ("kgcnn_schnet", "mbj_bandgap"): "0b60b162e3e6e37acf2a30ce9eb36771588962325ca969299b05df9479b94a73",
    ("kgcnn_schnet", "optb88vdw_bandgap"): "86803d9e8d44688e9b2f4c36c0e15d5eb373fa51657ed49e0c916df7abb27021",
    ("matformer_256", "formation_energy_peratom"): "ad50239fc92b4605ce3d5cbbd10446fa6c4088d8109431eddfe14d6df124c0e7",
    ("matminer_lgbm", "formation_energy_peratom"): "b748530b2f2224b9e48f5dabbd433b2bcc002d73a253f60ec4d3d33368e27a4e",
    ("matminer_lgbm", "mbj_bandgap"): "5b4ce056d7ee308ab327cda5b5d4e1c30a96232c25d7d8c84d8d5ece5e649adc",
    ("matminer_lgbm", "optb88vdw_bandgap"): "fd390f455a0fe8659cd6703395a1aad3cacab7126a1e86f92a6e065d72e86dce",
    ("matminer_rf", "ehull"): "9f0be312b60def6a14377dad1b8e0921b9b6960d1bc7a13559c12fd177acc266",
    ("matminer_rf", "formation_energy_peratom"): "dac592eeee5785e3f8415ad1e2cd73bb1a8ef9b8e0ce8fd193784a4a8c680c8a",
    ("matminer_rf", "mbj_bandgap"): "9b97640caa6aec0fb59f36737ec430bcf6640e12e015295bfa6b1b793e982655",
    ("matminer_rf", "optb88vdw_bandgap"): "9e6f4857e3be8e9e7b80051b82b09b7d659a00536fe768245a17f4218d65611a",
    ("matminer_xgboost", "ehull"): "38c2961cb6f0376b5ef32279daac6e23057c5078462fb463e19c4175053b9223",
    ("matminer_xgboost", "formation_energy_peratom"): "4378978c45f1760b62aceac2dd5b0feac5c5516a02bebc9080d1dfe2fe7d5b64",
    ("matminer_xgboost", "mbj_bandgap"): "87489c4fabb73f2cdb760e4984665e314f87efa1a7074b3370ce65e78d37ed1a",
    ("matminer_xgboost", "optb88vdw_bandgap"): "4ec6fc3bb086bb9c4cac8a93de5ac5b9cd96ec03e1a1981c4ff98ff1c9d5baaf",
    ("potnet", "ehull"): "bf2fb1a0908d37ee4dc0bb7d3b3624904a3a94f310f07ea1ea33363b6d3d1d35",
    ("potnet", "formation_energy_peratom"): "be7609c6692494f8602f53825c94bfa209f6663eba5aec55646cbbdac8e5b0f7",
    ("potnet", "mbj_bandgap"): "af56049752daf122b2780e02eb689d15c84ed825dcbdf09f555032165a9597e1",
    ("potnet", "optb88vdw_bandgap"): "9fdeaf6865cc314ba76ffabd5e9df551d2283c4704b82c8b0307a07f493a5aa0",
}
# The contributions at COMMIT (directory names under contributions/ that hold dft_3d predictions).
KNOWN_MODELS = (
    "alignn_hydride_supercon", "alignn_hydride_supercon_plusbulk", "alignn_model", "atomgpt_model", "cfid",
    "cfid_chem", "cgcnn_model", "kgcnn_cgcnn", "kgcnn_coGN", "kgcnn_coNGN", "kgcnn_dimenetPP", "kgcnn_megnet",
    "kgcnn_schnet", "matformer", "matformer_256", "matminer_lgbm", "matminer_rf", "matminer_xgboost", "potnet",
)
_PRED_FILE = re.compile(r"^AI-SinglePropertyPrediction-(?P<prop>.+)-dft_3d-test-mae\.csv(\.zip)?$")


@dataclass(frozen=True)
class PredictionFile:
    """One model's test predictions for one property, where it lives and what it must hash to."""

    model: str
    property: str
    source: SourceFile

    @property
    def label(self) -> str:
        return f"contributions/{self.model}/{prediction_file_name(self.property)}"


def prediction_file_name(prop: str) -> str:
    return f"AI-SinglePropertyPrediction-{prop}-dft_3d-test-mae.csv.zip"


def truth_file_name(prop: str) -> str:
    return f"dft_3d_{prop}.json.zip"


def prediction_source(model: str, prop: str) -> PredictionFile:
    fname = prediction_file_name(prop)
    return PredictionFile(model, prop, SourceFile(
        name=f"jarvis_{model}_{fname}",
        url=f"{RAW}/contributions/{model}/{fname}",
        mirror_paths=(f"{CONTRIB_DIR}/{model}/{fname}",),
        sha256=KNOWN_SHA256.get((model, prop)),
        licence=LICENCE, citation=CITATION, hash_origin=f"the file at jarvis_leaderboard commit {COMMIT[:8]}"))


def truth_source(prop: str) -> SourceFile:
    fname = truth_file_name(prop)
    return SourceFile(name=f"jarvis_{fname}", url=f"{RAW}/{BENCH_DIR}/{fname}",
                      mirror_paths=(f"jarvis_leaderboard/{BENCH_DIR}/{fname}",), licence=LICENCE, citation=CITATION)


def package_benchmark(prop: str) -> Path | None:
    """The truth file inside the installed jarvis-leaderboard wheel (found without importing the package)."""
    import importlib.util

    spec = importlib.util.find_spec("jarvis_leaderboard")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        path = Path(root) / BENCH_DIR / truth_file_name(prop)
        if regular_file(path, "jarvis-leaderboard's benchmark file"):
            return path
    return None


def fetch_truth(prop: str, settings: Settings) -> FetchedFile:
    path = package_benchmark(prop)
    if path is not None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            ver = version("jarvis-leaderboard")
        except PackageNotFoundError:
            ver = "?"
        return FetchedFile(path, sha256_file(path), f"package:jarvis-leaderboard=={ver}:{path.name}", "")
    try:
        return fetch(truth_source(prop), settings)
    except MissingSourceError as exc:
        raise MissingSourceError(f"no truth for dft_3d property {prop!r}: install the extra 'materials' "
                                 f"(jarvis-leaderboard ships it offline) or {exc}") from exc


# ---------------------------------------------------------------------------------------------- reading


def _unzip_one_csv(path: Path) -> bytes:
    if not path.name.endswith(".zip"):
        return path.read_bytes()
    try:
        with zipfile.ZipFile(path) as zf:
            members = [n for n in zf.namelist() if not n.endswith("/")]
            if len(members) != 1:
                raise InputError(f"expected one file inside the zip, found {members}", file=str(path))
            return zf.read(members[0])
    except zipfile.BadZipFile as exc:
        raise InputError(f"not a valid zip archive: {exc}", file=str(path)) from exc


def read_truth(path: Path, prop: str) -> pl.DataFrame:
    """``{train, val, test: {jid: value}}`` -> long (jid, property, split, target). Errors name file and id."""
    try:
        data = json.loads(_unzip_one_csv(path))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"benchmark file is not JSON: {exc}", file=str(path)) from exc
    if not isinstance(data, dict) or "test" not in data:
        raise InputError(f"expected an object with splits {SPLITS}; found keys {list(data)[:5]}", file=str(path))
    frames = []
    for split in SPLITS:
        entries = data.get(split) or {}
        if not isinstance(entries, dict):
            raise InputError(f"split {split!r} is not an object of id -> value", file=str(path), column=split)
        bad = next(((k, v) for k, v in entries.items()
                    if isinstance(v, bool) or not isinstance(v, int | float)), None)
        if bad is not None:
            raise InputError(f"benchmark value for {bad[0]} is {bad[1]!r}, not a number", file=str(path),
                             column=split)
        frames.append(pl.DataFrame({"jid": list(entries), "target": [float(v) for v in entries.values()]},
                                   schema={"jid": pl.Utf8, "target": pl.Float64})
                      .with_columns(pl.lit(prop).alias("property"), pl.lit(split).alias("split")))
    return pl.concat(frames).select("jid", "property", "split", "target")


def read_prediction_file(path: Path, *, model: str, prop: str, label: str | None = None) -> pl.DataFrame:
    """One contribution file as text columns: (file, model, property, row, jid, raw, target_in_file).

    Columns are found by name (``id``, ``prediction``, optional ``target``); values stay text here
    so that :func:`validate` can say exactly what was wrong with each one.
    """
    label = label or str(path)
    data = _unzip_one_csv(path)
    if not data.strip():
        raise InputError("prediction file is empty", file=label)
    try:
        df = pl.read_csv(io.BytesIO(data), infer_schema=False)
    except (pl.exceptions.ComputeError, pl.exceptions.NoDataError) as exc:
        raise InputError(f"cannot parse as CSV: {exc}", file=label) from exc
    by_name = {c.strip().lower(): c for c in df.columns}
    for need in ("id", "prediction"):
        if need not in by_name:
            raise InputError(f"no {need!r} column; found {df.columns} (columns are read by name: id, prediction "
                             "and optionally target)", file=label, column=need)
    target = pl.col(by_name["target"]) if "target" in by_name else pl.lit(None, pl.Utf8)
    second = pl.col(df.columns[1]) if len(df.columns) > 1 else pl.lit(None, pl.Utf8)
    return df.with_row_index("row", offset=1).select(
        pl.lit(label).alias("file"), pl.lit(model).alias("model"), pl.lit(prop).alias("property"),
        pl.col("row").cast(pl.Int64),
        pl.col(by_name["id"]).str.strip_chars().alias("jid"),
        pl.col(by_name["prediction"]).alias("raw"),
        target.alias("target_in_file"),
        # kept to show what reading by position would have taken as the prediction (docs/connectors.md, jarvis)
        pl.lit(",".join(df.columns)).alias("header"),
        second.alias("second_column"),
    )


# ---------------------------------------------------------------------------------------------- validation

_FINDINGS_SCHEMA = {"file": pl.Utf8, "model": pl.Utf8, "property": pl.Utf8, "issue": pl.Utf8, "jid": pl.Utf8,
                    "value": pl.Utf8, "row": pl.Int64, "detail": pl.Utf8}


@dataclass(frozen=True)
class Validated:
    predictions: pl.DataFrame  # every row read, with prediction (float or null) and issue (null = used)
    findings: pl.DataFrame
    models: pl.DataFrame       # per (model, property): counts and benchmark MAE over the used rows


def _close(text: pl.Expr, value: pl.Expr, reference: pl.Expr) -> pl.Expr:
    """``value`` (parsed from ``text``) equals ``reference`` to the precision the file printed.

    Files round differently (``-0.024`` for -0.02379, float32 ``3.6679999828`` for 3.668), so two
    values agree when they differ by at most half a unit in the last printed decimal, plus float32
    relative precision (``5e-06`` for 4.6e-06 agrees too).
    """
    t = text.str.strip_chars()
    plain = t.str.extract(r"^[+-]?\d*\.(\d+)$", 1).str.len_chars().cast(pl.Float64)
    mantissa = t.str.extract(r"^[+-]?\d*\.?(\d*)[eE][+-]?\d+$", 1).str.len_chars().cast(pl.Float64)
    exponent = t.str.extract(r"[eE]([+-]?\d+)$", 1).cast(pl.Float64)
    half_unit = (pl.when(plain.is_not_null()).then(0.5 * pl.lit(10.0).pow(-plain))
                 .when(exponent.is_not_null()).then(0.5 * pl.lit(10.0).pow(exponent - mantissa))
                 .otherwise(0.5))  # an integer: half a unit
    tol = half_unit + 1e-6 * reference.abs() + _IDENTICAL
    return (value - reference).abs() <= tol


def validate(rows: pl.DataFrame, truth: pl.DataFrame, *, known_models: Iterable[str] = KNOWN_MODELS) -> Validated:
    """Check every prediction row against the benchmark test split; report, never drop.

    Row issues, in precedence order (a row's ``issue`` is the first that applies; findings list all):
    missing_value, non_numeric, nan, id_outside_test_split, duplicate_id. File issues: missing_id
    (a test id with no row), leak_identical_to_reference (every used prediction equals the benchmark
    value), unknown_model; target_differs_from_benchmark for files carrying a ``target`` column.
    """
    test = truth.filter(pl.col("split") == "test").select("jid", "property", "target")
    for col in ("header", "second_column"):
        if col not in rows.columns:
            rows = rows.with_columns(pl.lit(None, pl.Utf8).alias(col))
    text = pl.col("raw").str.strip_chars()
    num = text.cast(pl.Float64, strict=False)
    df = rows.with_columns(num.alias("prediction")).join(
        test.with_columns(pl.lit(True).alias("_in_test")), on=["jid", "property"], how="left")
    flags = {
        "missing_value": text.is_null() | (text == ""),
        "non_numeric": text.is_not_null() & (text != "") & num.is_null(),
        "nan": num.is_nan() | num.is_infinite(),
        "id_outside_test_split": pl.col("_in_test").is_null(),
        "duplicate_id": pl.col("jid").is_duplicated().over(["model", "property"]),
    }
    df = df.with_columns(*[expr.fill_null(False).alias(f"_f_{name}") for name, expr in flags.items()])
    issue = pl.lit(None, pl.Utf8)
    for name in reversed(list(flags)):
        issue = pl.when(pl.col(f"_f_{name}")).then(pl.lit(name)).otherwise(issue)
    df = df.with_columns(issue.alias("issue"))

    # A file whose every used prediction equals the benchmark value is a leak, not a model.
    usable = df.filter(pl.col("issue").is_null())
    leak = (usable.group_by("model", "property", "file")
            .agg(pl.len().alias("n"), _close(pl.col("raw"), pl.col("prediction"), pl.col("target")).sum().alias("n_same"))
            .filter((pl.col("n") > 0) & (pl.col("n_same") == pl.col("n"))))
    if leak.height:
        df = df.join(leak.select("model", "property", pl.lit(True).alias("_leak")), on=["model", "property"],
                     how="left").with_columns(
            pl.when(pl.col("_leak") & pl.col("issue").is_null()).then(pl.lit("leak_identical_to_reference"))
            .otherwise(pl.col("issue")).alias("issue")).drop("_leak")

    parts = [
        df.filter(pl.col(f"_f_{name}")).select(
            "file", "model", "property", pl.lit(name).alias("issue"), "jid", pl.col("raw").alias("value"), "row",
            pl.lit(_DETAIL[name]).alias("detail"))
        for name in flags
    ]
    tgt = pl.col("target_in_file").str.strip_chars().cast(pl.Float64, strict=False)
    parts.append(df.filter(pl.col("target_in_file").is_not_null() & pl.col("_in_test").is_not_null()
                           & ~_close(pl.col("target_in_file"), tgt, pl.col("target")).fill_null(False)).select(
        "file", "model", "property", pl.lit("target_differs_from_benchmark").alias("issue"), "jid",
        pl.col("target_in_file").alias("value"), "row",
        pl.format("benchmark value {}", pl.col("target")).alias("detail")))
    files = rows.select("file", "model", "property").unique()
    seen = rows.select("model", "property", "jid").unique()
    missing = (files.join(test, on="property").join(seen, on=["model", "property", "jid"], how="anti"))
    parts.append(missing.select("file", "model", "property", pl.lit("missing_id").alias("issue"), "jid",
                                pl.lit(None, pl.Utf8).alias("value"), pl.lit(None, pl.Int64).alias("row"),
                                pl.lit("a benchmark test id with no prediction in this file").alias("detail")))
    parts.append(leak.select("file", "model", "property", pl.lit("leak_identical_to_reference").alias("issue"),
                             pl.lit(None, pl.Utf8).alias("jid"), pl.lit(None, pl.Utf8).alias("value"),
                             pl.lit(None, pl.Int64).alias("row"),
                             pl.format("all {} used predictions equal the benchmark test values; the file's "
                                       "rows are kept out of the audit table", pl.col("n")).alias("detail")))
    known = set(known_models)
    parts.append(files.filter(~pl.col("model").is_in(sorted(known))).select(
        "file", "model", "property", pl.lit("unknown_model").alias("issue"), pl.lit(None, pl.Utf8).alias("jid"),
        pl.lit(None, pl.Utf8).alias("value"), pl.lit(None, pl.Int64).alias("row"),
        pl.lit(f"not a contribution this connector knows at jarvis_leaderboard commit {COMMIT[:8]}; its bytes "
               "are not checked against a published hash (used, and reported here)").alias("detail")))
    # The paper's reader took a file's second column for the prediction: in id,target,prediction files
    # that column is the benchmark's own value (MAE 0 by position). One finding per such file.
    in_file = df.filter(pl.col("target_in_file").is_not_null() & pl.col("_in_test").is_not_null())
    reference = (in_file.group_by("file", "model", "property").agg(
        pl.len().alias("n"), _close(pl.col("target_in_file"), tgt, pl.col("target")).sum().alias("n_same"),
        pl.col("header").first())
        .filter((pl.col("header").str.split(",").list.get(1, null_on_oob=True).str.strip_chars().str.to_lowercase()
                 == "target") & (pl.col("n_same") >= 0.99 * pl.col("n"))))
    parts.append(reference.select(
        "file", "model", "property", pl.lit("target_column_is_reference").alias("issue"),
        pl.lit(None, pl.Utf8).alias("jid"), pl.lit(None, pl.Utf8).alias("value"), pl.lit(None, pl.Int64).alias("row"),
        pl.format("header {}: the second column ('target') equals the benchmark value in {} of {} test rows; a "
                  "reader by position takes the reference for the prediction (MAE 0); read by name, the "
                  "prediction column is used", "header", "n_same", "n").alias("detail")))
    findings = pl.concat([p.cast(_FINDINGS_SCHEMA) for p in parts]).sort("file", "issue", "row", "jid",
                                                                         nulls_last=True)

    by_position = pl.col("second_column").str.strip_chars().cast(pl.Float64, strict=False)
    df = df.with_columns(by_position.alias("prediction_by_position"))
    predictions = df.select("model", "jid", "property", "prediction", "file", "row", "raw", "issue",
                            "prediction_by_position")
    n_test = test.group_by("property").agg(pl.len().alias("n_test"))
    models = (df.group_by("model", "property", "file").agg(
        pl.len().alias("n_rows"),
        pl.col("issue").is_null().sum().alias("n_used"),
        (pl.col("prediction") - pl.col("target")).abs().filter(pl.col("issue").is_null()).mean().alias("mae"),
        pl.col("header").first(),
        (pl.col("prediction_by_position") - pl.col("target")).abs().filter(pl.col("issue").is_null()).mean()
        .alias("mae_by_position"))
        .join(n_test, on="property", how="left")
        .join(missing.group_by("model", "property").agg(pl.len().alias("n_missing_ids")),
              on=["model", "property"], how="left")
        .with_columns(pl.col("n_missing_ids").fill_null(0), pl.col("model").is_in(sorted(known)).alias("known_model"))
        .sort("model", "property"))
    return Validated(predictions.sort("model", "property", "row"), findings, models)


def truth_findings(truth: pl.DataFrame) -> pl.DataFrame:
    """Benchmark ids listed in more than one split of one property (a train/test overlap upstream)."""
    dup = truth.filter(pl.col("jid").is_duplicated().over("property"))
    return (dup.group_by("property", "jid").agg(
        pl.col("split").sort().str.join("+").alias("splits"), pl.col("target").n_unique().alias("n_values"),
        pl.col("target").first().alias("target"))
        .select(pl.format("benchmarks/dft_3d_{}.json.zip", pl.col("property")).alias("file"),
                pl.lit(None, pl.Utf8).alias("model"), "property",
                pl.lit("id_in_several_splits").alias("issue"), "jid",
                pl.col("target").cast(pl.Utf8).alias("value"), pl.lit(None, pl.Int64).alias("row"),
                pl.format("benchmark lists this id in {} ({} distinct value(s)); the test entry is used",
                          pl.col("splits"), pl.col("n_values")).alias("detail"))
        .cast(_FINDINGS_SCHEMA).sort("property", "jid"))


_DETAIL = {
    "missing_value": "empty prediction",
    "non_numeric": "prediction is not a number",
    "nan": "prediction is NaN or infinite",
    "id_outside_test_split": "id is not in the benchmark test split of this property",
    "duplicate_id": "id occurs more than once in this file; no occurrence is used",
}


def audit_table(predictions: pl.DataFrame, truth: pl.DataFrame, properties: Sequence[str],
                models: Sequence[str]) -> pl.DataFrame:
    """Wide: one row per (model, material in the test split of any loaded property).

    ``pred_<property>`` is the model's used prediction (or null); ``<property>`` is the benchmark value
    of that material from whichever split holds it, and ``<property>_split`` names that split. A
    deployment claim is about the material's reference value, so a claim on ``ehull`` may use an
    ehull value from the ehull benchmark's train split (the ehull and formation-energy test splits
    share only ~1.1k materials); filter on ``<property>_split = 'test'`` to stay inside one split.
    """
    used = predictions.filter(pl.col("issue").is_null()).select("model", "jid", "property", "prediction")
    rows = truth.filter(pl.col("split") == "test").select("jid").unique()
    # A few ids sit in two splits of one benchmark (reported as findings); the test entry wins.
    rank = pl.col("split").replace_strict({"test": 0, "val": 1, "train": 2}, return_dtype=pl.Int8)
    one = truth.sort(rank).unique(["jid", "property"], keep="first")
    truth_wide = rows.join(one.pivot(on="property", index="jid", values=["target", "split"]), on="jid", how="left")
    truth_wide = truth_wide.rename({c: (c.removeprefix("target_") if c.startswith("target_")
                                        else f"{c.removeprefix('split_')}_split")
                                    for c in truth_wide.columns if c.startswith(("target_", "split_"))})
    pred_wide = (used.pivot(on="property", index=["model", "jid"], values="prediction")
                 if used.height else pl.DataFrame(schema={"model": pl.Utf8, "jid": pl.Utf8}))
    pred_wide = pred_wide.rename({p: f"pred_{p}" for p in properties if p in pred_wide.columns})
    base = pl.DataFrame({"model": list(models)}, schema={"model": pl.Utf8}).join(truth_wide, how="cross")
    wide = base.join(pred_wide, on=["model", "jid"], how="left")
    for p in properties:
        for col, dtype in ((p, pl.Float64), (f"pred_{p}", pl.Float64), (f"{p}_split", pl.Utf8)):
            if col not in wide.columns:
                wide = wide.with_columns(pl.lit(None, dtype).alias(col))
    return wide.select("model", "jid", *[f"pred_{p}" for p in properties], *properties,
                       *[f"{p}_split" for p in properties]).sort("model", "jid")


# ---------------------------------------------------------------------------------------------- prepare


def discover(settings: Settings, properties: Sequence[str]) -> list[PredictionFile]:
    """Every (model, property) file there is: the pinned known list plus any further contributions the
    mirror has. A pinned file the mirror lacks stays in the list, so fetching it stops the run as a missing
    source (naming the file) instead of the audit quietly running on fewer models."""
    root = settings.mirror / CONTRIB_DIR if settings.mirror else None
    if root is not None and root.is_dir():
        everything = set(KNOWN_SHA256)
        for path in sorted(root.glob("*/AI-SinglePropertyPrediction-*-dft_3d-test-mae.csv.zip")):
            m = _PRED_FILE.match(path.name)
            if m:
                everything.add((path.parent.name, m["prop"]))
        absent = [p for p in properties if not any(q == p for _, q in everything)]
        if absent:  # a typo, not a missing download: name what there is
            raise SpecError(f"[source] properties: no JARVIS predictions for {absent} in the mirror or the pinned "
                            f"list; properties with predictions: {', '.join(sorted({q for _, q in everything}))}")
        return [prediction_source(model, prop) for model, prop in sorted(everything) if prop in properties]
    unknown = [p for p in properties if not any(k[1] == p for k in KNOWN_SHA256)]
    if unknown:
        raise MissingSourceError(
            f"no list of JARVIS contributions for {unknown} without a mirror: put the repository's "
            f"contributions/ directory at $DCAUDIT_MIRROR/{CONTRIB_DIR}")
    return [prediction_source(m, p) for (m, p) in sorted(KNOWN_SHA256) if p in properties]


def select_models(files: list[PredictionFile], models: Sequence[str] | None) -> list[PredictionFile]:
    """Keep the named models; a name that is neither available nor known is an error with suggestions."""
    if models is None:
        return files
    available = sorted({f.model for f in files})
    for name in models:
        if name not in available:
            close = difflib.get_close_matches(name, sorted({*available, *KNOWN_MODELS}), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise SpecError(f"unknown JARVIS model {name!r}{hint} (models with predictions here: "
                            f"{', '.join(available)})")
    return [f for f in files if f.model in set(models)]


def _combined_hash(inputs: dict[str, str], properties: Sequence[str]) -> str:
    lines = [f"{k}\t{v}" for k, v in sorted(inputs.items())] + [f"property\t{p}" for p in properties]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def test_truth_table(truth: pl.DataFrame) -> pl.DataFrame:
    """One row per material in any test split; ``<property>`` only where the material is in that test split.

    Complete cases over several properties are the intersection of their test splits (e.g. the 187
    materials with formation energy, optB88vdW gap and MBJ gap the paper adds the MBJ probe on).
    """
    test = truth.filter(pl.col("split") == "test").unique(["jid", "property"], keep="first")
    return test.pivot(on="property", index="jid", values="target").sort("jid")


TABLES = ("jarvis", "test_truth", "predictions", "truth", "models")
REPORTS = ("jarvis_findings", "findings")


@dataclass(frozen=True)
class Options:
    """``[source]`` options: ``properties`` (dft_3d properties to load, truth and predictions);
    ``models`` (``"all"`` or a list; an unknown name is an error with suggestions); ``require``
    (properties a model needs prediction files for to enter the audit table — its files are
    validated and tabled either way)."""

    properties: tuple[str, ...] = DEFAULT_PROPERTIES
    models: tuple[str, ...] | None = None
    require: tuple[str, ...] = ()


def _all_or(names: tuple[str, ...] | None) -> tuple[str, ...] | None:
    return None if names is None or names == ("all",) else names


def as_findings(detail: pl.DataFrame) -> pl.DataFrame:
    """The connector's findings table in the common schema (``kind`` = issue, ``candidate_id`` = jid)."""
    column = (pl.when(pl.col("issue") == "target_column_is_reference").then(pl.lit("target"))
              .when(pl.col("issue") == "target_differs_from_benchmark").then(pl.lit("target"))
              .when(pl.col("issue").is_in(["id_outside_test_split", "duplicate_id", "missing_id",
                                           "id_in_several_splits"])).then(pl.lit("id"))
              .when(pl.col("issue").is_in(["non_numeric", "nan", "missing_value"])).then(pl.lit("prediction")))
    value = pl.when(pl.col("value").is_not_null()).then(pl.format(" (value {})", "value")).otherwise(pl.lit(""))
    scope = pl.when(pl.col("model").is_not_null()).then(pl.format("{} / {}: ", "model", "property")) \
        .otherwise(pl.format("{}: ", "property"))
    return findings_schema.conform(detail.select(
        pl.lit(NAME).alias("source"), "file", "row", column.alias("column"), pl.col("issue").alias("kind"),
        pl.concat_str([scope, pl.col("detail").fill_null(""), value]).alias("detail"),
        pl.col("jid").alias("candidate_id")))


def prepare(settings: Settings, options: Options | None = None) -> PreparedSource:
    """Fetch, validate and normalise (see the module docstring and :class:`Options`)."""
    options = options or Options()
    known = sorted({p for _, p in KNOWN_SHA256} | set(DEFAULT_PROPERTIES))  # what the pinned list has
    if not options.properties or (options.models is not None and not options.models):
        what = "properties" if not options.properties else "models"
        raise SpecError(f"[source] {what} is empty; leave it out for the defaults, or name some"
                        + (f" of: {', '.join(known)}" if what == "properties" else " (or \"all\")"))
    properties = tuple(dict.fromkeys(options.properties))
    required = options.require
    unknown = [p for p in required if p not in properties]
    if unknown:
        raise SpecError(f"[source] require names {unknown}, which are not among the loaded properties "
                        f"{list(properties)}")
    files = select_models(discover(settings, properties), _all_or(options.models))
    truths = {p: fetch_truth(p, settings) for p in properties}
    fetched = {pf.label: fetch(pf.source, settings) for pf in files}
    inputs = {f"benchmarks/{truth_file_name(p)}": f.sha256 for p, f in truths.items()}
    inputs.update({label: f.sha256 for label, f in fetched.items()})
    by_model: dict[str, set[str]] = {}
    for pf in files:
        by_model.setdefault(pf.model, set()).add(pf.property)
    audited = sorted(m for m, props in by_model.items() if set(required) <= props)
    combined = _combined_hash(inputs, (*properties, *(f"require:{p}" for p in required)))
    out_dir = settings.tables_dir / NAME / combined[:16]
    paths = {name: out_dir / f"{name}.parquet" for name in (*TABLES, *REPORTS)}
    reused = all(cached_table(p, combined, NORMALISER) for p in paths.values())
    notes: list[str] = []
    if not reused:
        truth = pl.concat([read_truth(f.path, p) for p, f in truths.items()])
        rows = pl.concat([read_prediction_file(fetched[pf.label].path, model=pf.model, prop=pf.property,
                                               label=pf.label) for pf in files]) if files else None
        if rows is None:
            raise MissingSourceError(f"no JARVIS prediction files for {list(properties)} were found")
        checked = validate(rows, truth)
        verified = pl.DataFrame(
            {"file": [pf.label for pf in files], "origin": [fetched[pf.label].origin for pf in files],
             "sha256": [fetched[pf.label].sha256 for pf in files],
             "sha256_verified": [pf.source.sha256 is not None for pf in files]})
        model_table = checked.models.join(verified, on="file", how="left").with_columns(
            pl.col("model").is_in(audited).alias("in_audit_table"))
        wide = audit_table(checked.predictions, truth, properties, audited)
        meta = {"dcaudit.source": NAME, "dcaudit.sha256": combined, "dcaudit.normaliser": NORMALISER,
                "dcaudit.url": RAW, "dcaudit.licence": LICENCE, "dcaudit.citation": CITATION,
                "dcaudit.inputs": json.dumps({k: {"sha256": v} for k, v in inputs.items()}),
                "dcaudit.truth_origin": json.dumps({p: f.origin for p, f in truths.items()})}
        detail = pl.concat([truth_findings(truth), checked.findings])
        frames = {"jarvis_findings": detail, "findings": as_findings(detail), "truth": truth,
                  "test_truth": test_truth_table(truth), "predictions": checked.predictions,
                  "models": model_table, "jarvis": wide}
        for name, frame in frames.items():  # jarvis last: its presence marks a complete set
            write_table_atomic(frame.to_arrow(), paths[name], meta)
    notes.append(f"jarvis: {'reused' if reused else 'normalised'} {len(files)} prediction files and "
                 f"{len(properties)} truth files -> {out_dir}")
    left_out = sorted(set(by_model) - set(audited))
    if left_out:
        notes.append(f"jarvis: {len(audited)} models have predictions for all of {list(required)} and form the "
                     f"audit table; left out (validated, in models/predictions): {', '.join(left_out)}")
    return PreparedSource(name=NAME, tables={name: paths[name] for name in TABLES}, inputs=inputs,
                          findings=paths["findings"], reports={"findings": paths["jarvis_findings"]},
                          notes=tuple(notes), sources=tuple(truth_source(p) for p in properties)
                          + tuple(pf.source for pf in files))


CONNECTOR = SourceConnector(NAME, Options, tuple(truth_source(p) for p in DEFAULT_PROPERTIES), prepare)
