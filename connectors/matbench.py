"""Matbench v0.1: the 13 tasks, the official 5-fold splits and the leaderboard's per-sample predictions.

Where the data come from, in order:

* the mirror (``$DCAUDIT_MIRROR/matbench/``): ``datasets/matbench_<task>.json.bz2`` (the Matbench
  repository's structure-free artifacts: pandas ``orient='columns'`` JSON with ``mbid``, the target,
  the cell formula and, for structure tasks, ``spg_num`` and ``crys_sys``), the official folds
  ``matbench_v0.1_validation.json.gz`` and ``benchmarks/<submission>/results.json.gz``; every file is
  checked against the sha256 the mirror's MANIFEST lists (embedded below: :data:`MIRROR_SHA256`);
* otherwise, with internet: the same artifact from GitHub at the pinned commit (sha256-verified,
  and it carries space groups), and if that download fails, matminer's
  ``load_dataset("matbench_<task>")`` (the figshare files, verified by matminer), reduced to the same
  columns (formula from the structure, space group and crystal system from pymatgen's
  ``SpacegroupAnalyzer``; slow for the 100k-structure tasks, cached in ``raw/``); folds and
  leaderboard files from GitHub at the pinned commit.

Tables written to ``$DCAUDIT_HOME/tables/matbench/``:

* ``<task>.parquet`` (``mp_gap``, ``dielectric``, …): mbid, composition (as given), reduced_formula
  (pymatgen ``Composition(...).reduced_formula``; null when it does not parse), the target under a
  plain column name (:data:`TASKS`), spg_num and crys_sys for structure tasks, and ``fold`` (the
  official fold whose test set holds the material);
* ``predictions.parquet``: submission, task, fold, mbid, prediction (DOUBLE; booleans as 0/1),
  ``usable`` (false for ids outside the task, a second prediction of one id, or an id predicted in a
  fold whose test set does not hold it) — rows are never dropped;
* ``findings.parquet``: one row per problem found (unparsable composition, missing or non-numeric
  target or prediction, duplicate ids, ids outside the task, fold mismatches, unknown tasks,
  submissions whose results are not available offline), with file, row/mbid, column and action.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import json
import math
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
    provenance,
)
from dcaudit.errors import InputError, IntegrityError, MissingSourceError, SpecError, require
from dcaudit.storage import regular_file, write_table_atomic

NORMALISER = "matbench-1"
COMMIT = "936176db18ca4cd7b38cbd957c017a5bac770c6b"
RAW = f"https://raw.githubusercontent.com/materialsproject/matbench/{COMMIT}"
LICENCE = "MIT (Hacking Materials Research Group, materialsproject/matbench)"
CITATION = ("Dunn, Wang, Ganose, Dopp, Jain, Benchmarking materials property prediction methods: the "
            "Matbench test set and Automatminer reference algorithm, npj Comput. Mater. 6, 138 (2020)")


@dataclass(frozen=True)
class TaskInfo:
    name: str          # short name: the table name and the part of ``matbench_<name>``
    target: str        # target column as Matbench names it
    column: str        # the same, as a plain identifier usable in claims
    task_type: str     # regression | classification
    input_type: str    # structure | composition
    unit: str


TASKS: dict[str, TaskInfo] = {t.name: t for t in (
    TaskInfo("dielectric", "n", "n", "regression", "structure", "unitless (refractive index)"),
    TaskInfo("expt_gap", "gap expt", "gap_expt", "regression", "composition", "eV"),
    TaskInfo("expt_is_metal", "is_metal", "is_metal", "classification", "composition", ""),
    TaskInfo("glass", "gfa", "gfa", "classification", "composition", ""),
    TaskInfo("jdft2d", "exfoliation_en", "exfoliation_en", "regression", "structure", "meV/atom"),
    TaskInfo("log_gvrh", "log10(G_VRH)", "log10_gvrh", "regression", "structure", "log10(GPa)"),
    TaskInfo("log_kvrh", "log10(K_VRH)", "log10_kvrh", "regression", "structure", "log10(GPa)"),
    TaskInfo("mp_e_form", "e_form", "e_form", "regression", "structure", "eV/atom"),
    TaskInfo("mp_gap", "gap pbe", "gap_pbe", "regression", "structure", "eV"),
    TaskInfo("mp_is_metal", "is_metal", "is_metal", "classification", "structure", ""),
    TaskInfo("perovskites", "e_form", "e_form", "regression", "structure", "eV/unit cell"),
    TaskInfo("phonons", "last phdos peak", "last_phdos_peak", "regression", "structure", "cm^-1"),
    TaskInfo("steels", "yield strength", "yield_strength", "regression", "composition", "MPa"),
)}

# sha256 of the mirror files, as the mirror's MANIFEST.md lists them (upstream bytes at COMMIT;
# the folds file is the PyPI matbench 0.6 copy, re-gzipped by the mirror).
MIRROR_SHA256: dict[str, str] = {
    "datasets/matbench_dielectric.json.bz2": "828b3c40e350e146177e86fdf5812d409688fbedee29c84dea6aacb146a31d37",
    "datasets/matbench_expt_gap.json.bz2": "11d79ac6f2c25e23a136295e9bc37ea9ea4a9fa936c6bc366e777c1cb1c397b9",
    "datasets/matbench_expt_is_metal.json.bz2": "72b2b60ebe3506aae9d3498f8fbb6c0e7268ba502c0c30561b5ff90490643ba1",
    "datasets/matbench_glass.json.bz2": "0f907acf156830277fbcb168985cf1cd77e4598b0d4351c441967b9f5d294f21",
    "datasets/matbench_jdft2d.json.bz2": "57591e4c178800135bfb497246ddf4422a14fcde67f77187c66a28f9632ff20c",
    "datasets/matbench_log_gvrh.json.bz2": "4895201003e4da1592fe2bad4ba7c627f204e755fd929c43984b0ca5c6d34e40",
    "datasets/matbench_log_kvrh.json.bz2": "c61c243695d00ba290e1787b3a6c9d849a7da0b3f2339f847d1dfa173eec9d75",
    "datasets/matbench_mp_e_form.json.bz2": "961b8860f59ef81c6828b91dc5ce10371c7cc744c52bdd5a0433086e5295da75",
    "datasets/matbench_mp_gap.json.bz2": "ba32d1f0e79dc94e453e4efd3208cd288ba8e54dbef37ff700e896eafa539ac8",
    "datasets/matbench_mp_is_metal.json.bz2": "4fa68d3469419db0f55c70bf1131415df803b1119f7be61673058e3a4dbbba5d",
    "datasets/matbench_perovskites.json.bz2": "3c45312ebb0c6e5f7be4d1f2842c186d4906afbb3f8e80882f3c08bc3ba49f0a",
    "datasets/matbench_phonons.json.bz2": "17ce45bd20aea96fa59d8adddb08abde59934033ba5446e7ffcc4df333331790",
    "datasets/matbench_steels.json.bz2": "f62ab2e43009e58bdeb3cb83637359e163e065caaf9fe309fab9bb8c7ad54aac",
    "matbench_v0.1_validation.json.gz": "be0e7b28a0f69b636c5c8b6f351195269e43df5f599c7bbea6f81eaeb47d5f3e",
    "benchmarks/matbench_v0.1_Auto-sklearn/results.json.gz": "543a39e408c69d68267ecefd66f53fbfa5d073ef0c8fdb1386af44d35293dee6",
    "benchmarks/matbench_v0.1_Ax_10_90_CrabNet_v1.2.7/results.json.gz": "5e684f80f02e97200689bc54c335b3a76cc094832d4dec03625ea2c3858c27a0",
    "benchmarks/matbench_v0.1_Ax_CrabNet_v1.2.1/results.json.gz": "e4c75008511cf9c1847421e650e6311f6d8d8762e3311412700c56c1b1126334",
    "benchmarks/matbench_v0.1_Ax_SAASBO_CrabNet_v1.2.7/results.json.gz": "a73078c601a657e281e040dc10595c9c1d642bbcd6c983f5939ed8bc62cd54d1",
    "benchmarks/matbench_v0.1_CrabNet/results.json.gz": "8c7755fa8a50d67498305379cdbf98a1ff4d9074c92544983040bd2fed0233b3",
    "benchmarks/matbench_v0.1_CrabNet_v1.2.1/results.json.gz": "d0177e77d7639e230f5bdbecff6e05de356b411e77282bd21220699c6bf395fb",
    "benchmarks/matbench_v0.1_DeeperGATGNN/results.json.gz": "b51038b2be50f3783d3600347bdab30e4b62cf378894ff2d1d1eaf40be4a05e3",
    "benchmarks/matbench_v0.1_Finder_v1.2_composition/results.json.gz": "c39e02c2a42228495880ccdf22bb48cdacf72f44517da4689ee8ec5a56133058",
    "benchmarks/matbench_v0.1_Finder_v1.2_structure/results.json.gz": "8f3c8991d08ab63b2e19b5d73933f5a811b4b8a70cd3372192964e23d96df8bf",
    "benchmarks/matbench_v0.1_GN-OA/results.json.gz": "369eb09d198e747a6e78086b99103794a4fbce2e35f8268c7e8f3a33e7403c5d",
    "benchmarks/matbench_v0.1_RFLR/results.json.gz": "ddfde8d9a6ef7a009703ffac78c8daf44a79a95d955332d58b9761ab4f1d6268",
    "benchmarks/matbench_v0.1_TPOT/results.json.gz": "d7cce0528740474f099abcd007197c1a05b9ed5dd273727418bb5af122c72e11",
    "benchmarks/matbench_v0.1_alignn/results.json.gz": "a769e653c5274da1d8455fca0a3a871a93acce4d8200495c69012dbea6c553db",
    "benchmarks/matbench_v0.1_automatminer_expressv2020/results.json.gz": "5183c48af21875f9cba5e8b46e153ef74d22ae0a012bfadfe1203173da2f7f76",
    "benchmarks/matbench_v0.1_cgcnnv2019/results.json.gz": "1791ba153f67132fac1de362d438f90ac5f1b949a00e8f4885556bb325a67e14",
    "benchmarks/matbench_v0.1_coNGN/results.json.gz": "d45202a32f723d61b744f9a6525cdcd165c5d0ce2191a7cf25045d09f16eb1a3",
    "benchmarks/matbench_v0.1_darwin/results.json.gz": "b04d14ce8a82c06a75f3e0919d2b01a63d19083aff6a375a25ed3b84c3b3f60e",
    "benchmarks/matbench_v0.1_dummy/results.json.gz": "2f3539f6308ebd8f43641850092db4e37127210f594e3170dd14254a2cf169e3",
    "benchmarks/matbench_v0.1_gptchem/results.json.gz": "487e330c4f54241a090b994ba27031f203390ba89fb5e39b8dad4b95b7b5d589",
    "benchmarks/matbench_v0.1_lattice_xgboost/results.json.gz": "c6537fab92fd393904ec043654216d51075df98964282eab786eac96c6a88e62",
    "benchmarks/matbench_v0.1_matformer/results.json.gz": "a56f5dbf2ae046e337b6aad45ad492df4b75250af10b9955da62efdef3d84d29",
    "benchmarks/matbench_v0.1_rf/results.json.gz": "7e11700d423dce8a842d469fb6e63cb1f27662e7175abfd4551835669774ad00",
}

MANIFEST = "the mirror's MANIFEST.md"

# Every v0.1 leaderboard submission at COMMIT; the six marked large (>= 4 MiB) are not in the mirror.
SUBMISSIONS: tuple[str, ...] = (
    "Auto-sklearn", "Ax_10_90_CrabNet_v1.2.7", "Ax_CrabNet_v1.2.1", "Ax_SAASBO_CrabNet_v1.2.7", "CrabNet",
    "CrabNet_v1.2.1", "DeeperGATGNN", "DimeNetPP_kgcnn_v2.1.0", "Finder_v1.2_composition",
    "Finder_v1.2_structure", "GN-OA", "MegNet_kgcnn_v2.1.0", "RFLR", "SchNet_kgcnn_v2.1.0", "TPOT", "alignn",
    "automatminer_expressv2020", "cgcnnv2019", "coGN", "coNGN", "darwin", "dummy", "gptchem",
    "lattice_xgboost", "matformer", "modnet_v0.1.10", "modnet_v0.1.12", "rf",
)
LARGE_SUBMISSIONS = frozenset({"DimeNetPP_kgcnn_v2.1.0", "MegNet_kgcnn_v2.1.0", "SchNet_kgcnn_v2.1.0", "coGN",
                               "modnet_v0.1.10", "modnet_v0.1.12"})

FOLDS = SourceFile(
    name="matbench_v0.1_validation.json.gz",
    url=f"{RAW}/matbench/matbench_v0.1_validation.json",
    mirror_paths=("matbench/matbench_v0.1_validation.json.gz",),
    licence=LICENCE, citation=CITATION,  # the mirror re-gzipped its copy: no one sha256 of the file fits both
)
# ... so read_folds checks the JSON itself: the sha256 of matbench 0.6's matbench_v0.1_validation.json, which the
# download is and the mirror's gzip holds (a folds file with moved test ids would silently move every audit)
FOLDS_JSON_SHA256 = "94c17bc3dac32c67d33d69289927a5fec174497e74bbc47293e23d3d147e9a6d"

FINDING_SCHEMA = {"source": pl.Utf8, "file": pl.Utf8, "task": pl.Utf8, "submission": pl.Utf8,
                  "fold": pl.Int32, "row": pl.Int64, "mbid": pl.Utf8, "column": pl.Utf8, "issue": pl.Utf8,
                  "value": pl.Utf8, "action": pl.Utf8}


def dataset_source(task: str) -> SourceFile:
    rel = f"datasets/matbench_{task}.json.bz2"
    return SourceFile(name=f"matbench_{task}.json.bz2", url=f"{RAW}/scripts/artifacts/matbench_{task}.json.bz2",
                      mirror_paths=(f"matbench/{rel}",), sha256=MIRROR_SHA256[rel], licence=LICENCE,
                      citation=CITATION, hash_origin=MANIFEST)


def results_source(submission: str) -> SourceFile:
    rel = f"benchmarks/matbench_v0.1_{submission}/results.json.gz"
    return SourceFile(name=f"matbench_v0.1_{submission}-results.json.gz", url=f"{RAW}/{rel}",
                      mirror_paths=(f"matbench/{rel}",), sha256=MIRROR_SHA256.get(rel), licence=LICENCE,
                      citation=CITATION, hash_origin=MANIFEST)


def findings_frame(rows: Iterable[dict]) -> pl.DataFrame:
    return pl.DataFrame([{k: r.get(k) for k in FINDING_SCHEMA} for r in rows], schema=FINDING_SCHEMA)


# --------------------------------------------------------------------------------------------- reading

class _Pairs(dict):
    """A JSON object that remembers keys the file gave twice (``json`` would keep only the last)."""

    duplicates: tuple[str, ...] = ()


def _pairs_hook(pairs: list[tuple[str, object]]) -> dict:
    out = _Pairs(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        out.duplicates = tuple(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
    return out


def load_json(path: Path) -> object:
    """JSON from ``.json``, ``.json.gz`` or ``.json.bz2``; a parse error names the file."""
    opener = gzip.open if path.name.endswith(".gz") else bz2.open if path.name.endswith(".bz2") else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            return json.load(fh, object_pairs_hook=_pairs_hook)
    except (OSError, EOFError, ValueError) as exc:
        raise InputError(f"cannot read as JSON: {exc}", file=str(path)) from exc


def _as_number(value: object) -> tuple[float | None, str | None]:
    """(number, problem). Booleans count as 0/1 (classification tasks); text is never coerced."""
    if isinstance(value, bool):
        return float(value), None
    if isinstance(value, int | float):
        f = float(value)
        return (None, "NaN") if math.isnan(f) else (f, None)
    if value is None:
        return None, "missing value"
    return None, "non-numeric value"


def numbers(values: Sequence[object]) -> tuple[list[float | None], list[tuple[int, str]]]:
    """Convert JSON scalars to floats; return the positions and kinds of values that are not numbers."""
    out: list[float | None] = []
    bad: list[tuple[int, str]] = []
    for i, v in enumerate(values):  # per value: JSON scalars carry their own type; 10^5-10^6 per file
        f, problem = _as_number(v)
        out.append(f)
        if problem:
            bad.append((i, problem))
    return out, bad


def read_dataset(path: Path, task: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A Matbench artifact (``{column: {row_index: value}}``) -> (frame in source order, findings)."""
    info = TASKS[task]
    data = load_json(path)
    if not isinstance(data, dict):
        raise InputError("expected a JSON object {column: {row: value}}", file=str(path))
    need = ["mbid", "composition", info.target] + (["spg_num", "crys_sys"] if info.input_type == "structure"
                                                   else [])
    missing = [c for c in need if c not in data]
    if missing:
        raise InputError(f"missing column(s) {missing}; found {sorted(data)}", file=str(path), column=missing[0])
    index = list(data["mbid"].keys())
    for c in need:
        if len(data[c]) != len(index) or data[c].keys() != data["mbid"].keys():
            raise InputError(f"column {c!r} has other row indices than 'mbid'", file=str(path), column=c)
    findings: list[dict] = []
    for c in need:
        for dup in getattr(data[c], "duplicates", ()):
            raise InputError(f"row index {dup!r} occurs twice", file=str(path), column=c)
    base = {"source": "matbench", "file": str(path), "task": task}
    mbid = [data["mbid"][k] for k in index]
    composition = [data["composition"][k] for k in index]
    raw_target = [data[info.target][k] for k in index]
    if info.task_type == "classification":
        target: list = []
        for i, v in enumerate(raw_target):
            ok = isinstance(v, bool)
            target.append(v if ok else None)
            if not ok:
                findings.append({**base, "row": i + 1, "mbid": mbid[i], "column": info.target,
                                 "issue": "target is not true/false", "value": repr(v),
                                 "action": "kept with a null target (excluded from audits)"})
        dtype: pl.DataType = pl.Boolean()
    else:
        target, bad = numbers(raw_target)
        findings += [{**base, "row": i + 1, "mbid": mbid[i], "column": info.target, "issue": f"target: {p}",
                      "value": repr(raw_target[i]), "action": "kept with a null target (excluded from audits)"}
                     for i, p in bad]
        dtype = pl.Float64()
    cols: dict[str, pl.Series] = {
        "mbid": pl.Series("mbid", mbid, pl.Utf8),
        "composition": pl.Series("composition", [c if isinstance(c, str) else None for c in composition], pl.Utf8),
        info.column: pl.Series(info.column, target, dtype),
    }
    if info.input_type == "structure":
        spg, bad = numbers([data["spg_num"][k] for k in index])
        findings += [{**base, "row": i + 1, "mbid": mbid[i], "column": "spg_num", "issue": f"spg_num: {p}",
                      "action": "kept with a null spg_num"} for i, p in bad]
        cols["spg_num"] = pl.Series("spg_num", [None if s is None else int(s) for s in spg], pl.Int16)
        cols["crys_sys"] = pl.Series("crys_sys", [data["crys_sys"][k] for k in index], pl.Utf8)
    df = pl.DataFrame(cols)
    bad_id = df.with_row_index("row", 1).filter(pl.col("mbid").is_null() | pl.col("mbid").is_duplicated())
    if bad_id.height:
        first = bad_id.row(0, named=True)
        raise InputError(f"mbid {first['mbid']!r} is empty or occurs more than once ({bad_id.height} rows)",
                         file=str(path), row=int(first["row"]), column="mbid")
    return df, findings_frame(findings)


def read_folds(path: Path, sha256: str | None = FOLDS_JSON_SHA256) -> pl.DataFrame:
    """The official splits -> (task, fold, mbid) for every test set; errors name the file. ``sha256``: of the
    JSON text (decompressed), checked before it is used."""
    try:
        with (gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")) as fh:
            raw = fh.read()
    except (OSError, EOFError) as exc:
        raise InputError(f"cannot read as JSON: {exc}", file=str(path)) from exc
    digest = hashlib.sha256(raw).hexdigest()
    if sha256 is not None and digest != sha256:
        raise IntegrityError(f"{path}: its JSON has sha256 {digest}, expected {sha256} (matbench 0.6's "
                             "matbench_v0.1_validation.json): it is truncated, modified or another version; "
                             "replace it with the published file")
    try:
        data = json.loads(raw, object_pairs_hook=_pairs_hook)
    except ValueError as exc:
        raise InputError(f"cannot read as JSON: {exc}", file=str(path)) from exc
    splits = data.get("splits") if isinstance(data, dict) else None
    if not isinstance(splits, dict):
        raise InputError("expected {'metadata': …, 'splits': {task: {fold_k: {train, test}}}}", file=str(path))
    tasks, folds, ids = [], [], []
    for full, by_fold in splits.items():
        for fold_name, parts in by_fold.items():
            if not fold_name.startswith("fold_") or "test" not in parts:
                raise InputError(f"unexpected split {fold_name!r} (want fold_k with a test list)",
                                 file=str(path), column=full)
            test = parts["test"]
            tasks += [full.removeprefix("matbench_")] * len(test)
            folds += [int(fold_name.removeprefix("fold_"))] * len(test)
            ids += test
    return pl.DataFrame({"task": tasks, "fold": folds, "mbid": ids},
                        schema={"task": pl.Utf8, "fold": pl.Int32, "mbid": pl.Utf8})


def reduced_formulas(compositions: Sequence[str | None]) -> tuple[list[str | None], dict[str, str]]:
    """pymatgen reduced formula per composition (each distinct text parsed once) and the parse errors."""
    core = require("pymatgen.core", "materials")
    cache: dict[str, str | None] = {}
    errors: dict[str, str] = {}
    for text in set(compositions):
        if text is None:
            continue
        try:
            comp = core.Composition(text)
            fake = [str(el) for el in comp.element_composition if not isinstance(el, core.Element)]
            if fake:  # pymatgen reads unknown symbols ("Qq") as dummy species instead of failing
                raise ValueError(f"not chemical elements: {fake}")
            cache[text] = comp.reduced_formula
        except Exception as exc:  # pymatgen raises ValueError/KeyError/… on bad formulas
            cache[text] = None
            errors[text] = f"{type(exc).__name__}: {exc}"
    return [None if c is None else cache[c] for c in compositions], errors


def normalise_task(df: pl.DataFrame, folds: pl.DataFrame, task: str, file: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Add reduced_formula and fold; report unparsable compositions and every id the folds disagree on."""
    reduced, errors = reduced_formulas(df["composition"].to_list())
    df = df.with_columns(pl.Series("reduced_formula", reduced, pl.Utf8))
    task_folds = folds.filter(pl.col("task") == task).select("mbid", "fold")
    base = {"source": "matbench", "file": file, "task": task}
    findings = [
        {**base, "row": i + 1, "mbid": m, "column": "composition", "issue": "composition does not parse"
         if c is not None else "composition is empty", "value": None if c is None else f"{c!r}: {errors[c]}",
         "action": "kept with a null reduced_formula (excluded from composition audits)"}
        for i, (m, c, r) in enumerate(zip(df["mbid"], df["composition"], reduced, strict=True)) if r is None
    ]
    dup_fold = task_folds.filter(pl.col("mbid").is_duplicated())
    findings += [{**base, "fold": f, "mbid": m, "column": "fold", "issue": "id in more than one test fold",
                  "action": "first fold kept"} for m, f in dup_fold.iter_rows()]
    task_folds = task_folds.unique("mbid", keep="first", maintain_order=True)
    out = df.join(task_folds, on="mbid", how="left", maintain_order="left")
    findings += [{**base, "row": i + 1, "mbid": m, "column": "fold", "issue": "id in no official test fold",
                  "action": "kept with a null fold"}
                 for i, (m, f) in enumerate(zip(out["mbid"], out["fold"], strict=True)) if f is None]
    extra = task_folds.join(df.select("mbid"), on="mbid", how="anti")
    findings += [{**base, "fold": f, "mbid": m, "column": "mbid", "issue": "fold id not in the dataset",
                  "action": "reported only"} for m, f in extra.iter_rows()]
    return out, findings_frame(findings)


def read_results(path: Path, submission: str, task_ids: dict[str, pl.DataFrame]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A leaderboard ``results.json.gz`` -> long predictions (all rows kept) and findings.

    ``task_ids`` maps each task to audit to its (mbid, fold) table; tasks not in it are skipped when
    they are Matbench tasks (not asked for) and reported when they are not Matbench tasks at all.
    """
    data = load_json(path)
    tasks = data.get("tasks") if isinstance(data, dict) else None
    if not isinstance(tasks, dict):
        raise InputError("expected {'tasks': {task: {'results': {fold_k: {'data': {mbid: prediction}}}}}}",
                         file=str(path))
    base = {"source": "matbench", "file": str(path), "submission": submission}
    findings: list[dict] = []
    frames: list[pl.DataFrame] = []
    for full, body in tasks.items():
        task = full.removeprefix("matbench_")
        if task not in TASKS:
            findings.append({**base, "task": full, "column": "tasks", "issue": "not a Matbench v0.1 task",
                             "action": "not loaded"})
            continue
        if task not in task_ids:
            continue
        results = body.get("results") if isinstance(body, dict) else None
        if not isinstance(results, dict):
            raise InputError(f"task {full!r} has no 'results' object", file=str(path), column=full)
        for fold_name, fold_body in results.items():
            preds = fold_body.get("data") if isinstance(fold_body, dict) else None
            if not fold_name.startswith("fold_") or not isinstance(preds, dict):
                raise InputError(f"task {full!r}: {fold_name!r} is not fold_k with a 'data' object",
                                 file=str(path), column=full)
            fold = int(fold_name.removeprefix("fold_"))
            at = {**base, "task": task, "fold": fold}
            for dup in getattr(preds, "duplicates", ()):
                findings.append({**at, "mbid": dup, "column": "data", "issue": "id predicted twice in one fold",
                                 "action": "last value kept (JSON objects keep one value per key)"})
            mbids = list(preds.keys())
            values, bad = numbers(list(preds.values()))
            findings += [{**at, "mbid": mbids[i], "column": "prediction", "issue": f"prediction: {p}",
                          "value": repr(preds[mbids[i]])[:80], "action": "kept with a null prediction "
                          "(excluded from audits as missing evidence)"} for i, p in bad]
            frames.append(pl.DataFrame({"submission": submission, "task": task, "fold": fold, "mbid": mbids,
                                        "prediction": values},
                                       schema={"submission": pl.Utf8, "task": pl.Utf8, "fold": pl.Int32,
                                               "mbid": pl.Utf8, "prediction": pl.Float64}))
    if not frames:
        return _empty_predictions(), findings_frame(findings)
    long = pl.concat(frames)
    checked, more = check_predictions(long, task_ids, str(path))
    return checked, pl.concat([findings_frame(findings), more])


def _empty_predictions() -> pl.DataFrame:
    return pl.DataFrame(schema={"submission": pl.Utf8, "task": pl.Utf8, "fold": pl.Int32, "mbid": pl.Utf8,
                                "prediction": pl.Float64, "usable": pl.Boolean})


def check_predictions(long: pl.DataFrame, task_ids: dict[str, pl.DataFrame], file: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Mark unusable rows (unknown id, second prediction of an id, wrong fold) and list test ids with none."""
    truth = pl.concat([t.select(pl.lit(k).alias("task"), "mbid", pl.col("fold").alias("test_fold"),
                                pl.lit(True).alias("in_task")) for k, t in task_ids.items()])
    j = long.with_row_index("_i").join(truth, on=["task", "mbid"], how="left", maintain_order="left")
    j = j.with_columns(
        pl.when(pl.col("in_task").is_null()).then(pl.lit("id not in the task"))
        .when(pl.col("_i") != pl.col("_i").min().over("submission", "task", "mbid"))
        .then(pl.lit("id predicted in more than one fold"))
        .when(pl.col("test_fold") != pl.col("fold")).then(pl.lit("id predicted in a fold whose test set lacks it"))
        .alias("_issue"))
    head = [pl.lit("matbench").alias("source"), pl.lit(file).alias("file"), "task", "submission"]
    findings = j.filter(pl.col("_issue").is_not_null()).select(
        *head, "fold", pl.lit(None, pl.Int64).alias("row"), "mbid", pl.lit("mbid").alias("column"),
        pl.col("_issue").alias("issue"), pl.lit(None, pl.Utf8).alias("value"),
        pl.lit("kept, usable = false (not audited)").alias("action"))
    expected = long.select("submission", "task").unique().join(truth, on="task")
    missing = expected.join(long, on=["submission", "task", "mbid"], how="anti").select(
        *head, pl.col("test_fold").alias("fold"), pl.lit(None, pl.Int64).alias("row"), "mbid",
        pl.lit("mbid").alias("column"), pl.lit("test id without a prediction").alias("issue"),
        pl.lit(None, pl.Utf8).alias("value"), pl.lit("reported only").alias("action"))
    out = j.with_columns(pl.col("_issue").is_null().alias("usable")).select(
        "submission", "task", "fold", "mbid", "prediction", "usable")
    findings = pl.concat([findings.cast(FINDING_SCHEMA), missing.cast(FINDING_SCHEMA)])  # type: ignore[arg-type]
    return out, findings


# ------------------------------------------------------------------------------------ online fallback

def load_with_matminer(task: str, settings: Settings) -> pl.DataFrame:
    """The same columns as the mirror artifact, built from matminer's ``load_dataset`` (needs internet).

    matminer downloads the figshare file and checks its hash; space group and crystal system come
    from pymatgen's ``SpacegroupAnalyzer`` (default tolerances, as the Matbench artifacts used).
    Cached as ``raw/matbench_<task>.matminer.parquet``: the analysis takes minutes on the big tasks.
    """
    cached = settings.raw_dir / f"matbench_{task}.matminer.parquet"
    if regular_file(cached, "matminer's cached download"):
        return pl.read_parquet(cached)
    if settings.offline:
        src = dataset_source(task)
        raise MissingSourceError(f"{src.name} is not available offline: put it at "
                                 f"$DCAUDIT_MIRROR/{src.mirror_paths[0]} or allow matminer to download it")
    datasets = require("matminer.datasets", "materials")
    info = TASKS[task]
    try:
        frame = datasets.load_dataset(f"matbench_{task}")
    except Exception as exc:  # network, hash or parse failures inside matminer
        raise MissingSourceError(f"matbench_{task}: neither the mirror/GitHub artifact nor matminer's "
                                 f"load_dataset could provide it ({type(exc).__name__}: {exc})") from exc
    n = len(frame)
    mbid = [f"mb-{task.replace('_', '-')}-{i + 1:0{len(str(n))}d}" for i in range(n)]  # Matbench's id scheme
    cols: dict[str, list] = {"mbid": mbid, info.target: frame[info.target].tolist()}
    if info.input_type == "structure":
        analyzer = require("pymatgen.symmetry.analyzer", "materials").SpacegroupAnalyzer
        structures = frame["structure"].tolist()
        cols["composition"] = [s.composition.formula for s in structures]
        sga = [analyzer(s) for s in structures]  # one symmetry search per structure; no batch API exists
        cols["spg_num"] = [a.get_space_group_number() for a in sga]
        cols["crys_sys"] = [a.get_crystal_system() for a in sga]
    else:
        cols["composition"] = [str(c) for c in frame["composition"]]
    df = pl.DataFrame(cols)
    write_table_atomic(df.to_arrow(), cached, {"dcaudit.origin": f"matminer:matbench_{task}"})
    return df


def _dataset_json(df: pl.DataFrame) -> dict:
    """A matminer-derived frame in the artifact's ``{column: {row: value}}`` shape (for ``read_dataset``)."""
    return {c: {str(i): v for i, v in enumerate(df[c].to_list())} for c in df.columns}


# -------------------------------------------------------------------------------------------- prepare

def _digest(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _cached(path: Path, key: str) -> bool:
    return cached_table(path, key, NORMALISER, key_field="dcaudit.input_key")


def _task_table(task: str, settings: Settings, folds: pl.DataFrame, folds_sha: str, out_dir: Path) -> tuple[Path, str, pl.DataFrame]:
    """Normalise one task (reused while its input hashes are unchanged); returns (path, sha, findings)."""
    src = dataset_source(task)
    try:
        fetched = fetch(src, settings)
    except MissingSourceError:
        fetched = None
    path = out_dir / f"{task}.parquet"
    findings_path = out_dir / f"{task}.findings.parquet"
    sha = fetched.sha256 if fetched else f"matminer:{task}"
    key = _digest(sha, folds_sha)
    if _cached(path, key) and regular_file(findings_path, "the derived table"):
        return path, sha, pl.read_parquet(findings_path)
    if fetched is not None:
        raw, findings = read_dataset(fetched.path, task)
        origin = fetched
    else:  # no mirror copy: matminer's download (raises a clear MissingSourceError offline)
        frame = load_with_matminer(task, settings)   # first: a failed download leaves no temporary behind
        tmp = settings.raw_dir / f"matbench_{task}.json.bz2.tmp"
        regular_file(tmp, "the temporary copy")       # a directory of that name is the user's: kept
        tmp.parent.mkdir(parents=True, exist_ok=True)
        try:
            with bz2.open(tmp, "wt") as fh:
                json.dump(_dataset_json(frame), fh)
            raw, findings = read_dataset(tmp, task)
        finally:
            tmp.unlink(missing_ok=True)
        origin = FetchedFile(settings.raw_dir / f"matbench_{task}.matminer.parquet", sha, "matminer", "")
    table, more = normalise_task(raw, folds, task, str(origin.path))
    findings = pl.concat([findings, more])
    info = TASKS[task]
    meta = provenance(src, origin, normaliser=NORMALISER, input_key=key, folds_sha256=folds_sha,
                      target=info.target, target_column=info.column, unit=info.unit, task_type=info.task_type,
                      counts={"rows": table.height, "findings": findings.height})
    write_table_atomic(findings.to_arrow(), findings_path, meta)
    write_table_atomic(table.to_arrow(), path, meta)
    return path, sha, findings


def _check_request(tasks: Sequence[str] | None, submissions: Sequence[str] | None) -> tuple[list[str], list[str]]:
    if tasks is not None and not tasks:  # [] is no request for every task: say what there is
        raise SpecError(f"[source] tasks is empty; leave it out for every task, or name some of: {', '.join(TASKS)}")
    tasks = list(tasks) if tasks else list(TASKS)
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise InputError(f"unknown Matbench task(s) {unknown}; tasks: {', '.join(TASKS)}")
    subs = list(submissions) if submissions is not None else list(SUBMISSIONS)
    unknown = [s for s in subs if s not in SUBMISSIONS]
    if unknown:
        raise InputError(f"unknown Matbench submission(s) {unknown}; the v0.1 leaderboard has: "
                         f"{', '.join(SUBMISSIONS)}")
    return tasks, subs


def _leaderboard_tables(predictions: Path, task_paths: dict[str, Path], out_dir: Path, key: str) -> dict[str, Path]:
    """``leaderboard_<task>``: each usable prediction joined with the material's truth, for per-submission audits."""
    preds = pl.read_parquet(predictions).filter(pl.col("usable"))
    out: dict[str, Path] = {}
    for task, path in task_paths.items():
        info = TASKS[task]
        part = preds.filter(pl.col("task") == task)
        if part.height == 0:
            continue
        target = out_dir / f"leaderboard_{task}.parquet"
        if not _cached(target, key):
            truth = pl.read_parquet(path).select("mbid", "reduced_formula", info.column)
            joined = part.drop("usable").join(truth, on="mbid", how="inner")
            write_table_atomic(joined.to_arrow(), target, {"dcaudit.input_key": key, "dcaudit.normaliser": NORMALISER,
                                                           "dcaudit.target_column": info.column})
        out[f"leaderboard_{task}"] = target
    return out


def _feature_tables(settings: Settings, task_paths: dict[str, Path], features: Sequence[str] | str,
                    out_dir: Path, inputs: dict[str, str]) -> tuple[dict[str, Path], list[str]]:
    """``<task>`` tables with Magpie columns joined on reduced_formula (featurised once per formula)."""
    from dcaudit.features import magpie

    wanted = list(magpie.COLUMNS) if features == "all" else list(features)
    unknown = [c for c in wanted if c not in magpie.COLUMNS]
    if unknown:
        raise InputError(f"unknown Magpie feature column(s) {unknown}; they are named "
                         f"magpie_<stat>_<property>, stats {magpie.STATS}, properties {magpie.PROPERTIES}")
    formulas = pl.concat([pl.read_parquet(p, columns=["reduced_formula"]) for p in task_paths.values()])
    feats, computed = magpie.cached_features(settings.tables_dir / "magpie", formulas["reduced_formula"])
    feats = feats.select("reduced_formula", *wanted)
    notes = [f"magpie: {computed} formula(s) featurised, {feats.height - computed} from the cache "
             f"({settings.tables_dir / 'magpie' / 'magpie.parquet'})"]
    out: dict[str, Path] = {}
    for task, path in task_paths.items():
        key = _digest(inputs[f"matbench_{task}"], inputs[FOLDS.name], magpie.VERSION, *wanted)
        target = out_dir / f"{task}.magpie.parquet"
        if not _cached(target, key):
            table = pl.read_parquet(path).join(feats, on="reduced_formula", how="left", maintain_order="left")
            write_table_atomic(table.to_arrow(), target, {"dcaudit.input_key": key, "dcaudit.normaliser": NORMALISER,
                                                          "dcaudit.features": ",".join(wanted)})
        out[task] = target
    return out, notes


@dataclass(frozen=True)
class Options:
    """``[source]`` options: ``tasks`` (default all 13), ``submissions`` (default every v0.1 leaderboard
    submission) and ``features`` (Magpie column names, or ``"all"``, joined to the task tables)."""

    tasks: tuple[str, ...] | None = None
    submissions: tuple[str, ...] | None = None
    features: tuple[str, ...] | None = None


# Readable issue text -> finding kind (texts not listed become their snake_case slug).
KINDS = {
    "target is not true/false": "target_not_boolean", "target: NaN": "target_nan",
    "target: missing value": "target_missing", "target: non-numeric value": "target_non_numeric",
    "spg_num: NaN": "spg_num_nan", "spg_num: missing value": "spg_num_missing",
    "spg_num: non-numeric value": "spg_num_non_numeric", "composition does not parse": "composition_unparsable",
    "composition is empty": "composition_empty", "id in more than one test fold": "id_in_several_test_folds",
    "id in no official test fold": "id_in_no_test_fold", "fold id not in the dataset": "fold_id_not_in_dataset",
    "not a Matbench v0.1 task": "unknown_task", "id predicted twice in one fold": "id_predicted_twice_in_fold",
    "prediction: NaN": "prediction_nan", "prediction: missing value": "prediction_missing",
    "prediction: non-numeric value": "prediction_non_numeric", "id not in the task": "id_not_in_task",
    "id predicted in more than one fold": "id_predicted_in_several_folds",
    "id predicted in a fold whose test set lacks it": "id_predicted_in_wrong_fold",
    "test id without a prediction": "test_id_without_prediction", "results not available": "results_not_available",
}


def as_findings(detail: pl.DataFrame) -> pl.DataFrame:
    """The connector's findings in the common schema: kind from :data:`KINDS`, context in ``detail``."""
    where = pl.concat_str([pl.col("task").fill_null(""),
                           pl.when(pl.col("submission").is_not_null()).then(pl.format(" / {}", "submission"))
                           .otherwise(pl.lit("")),
                           pl.when(pl.col("fold").is_not_null()).then(pl.format(" fold {}", "fold"))
                           .otherwise(pl.lit(""))])
    text = pl.concat_str([where, pl.lit(": "), pl.col("issue"),
                          pl.when(pl.col("value").is_not_null()).then(pl.format(" (value {})", "value"))
                          .otherwise(pl.lit("")),
                          pl.when(pl.col("action").is_not_null()).then(pl.format("; {}", "action"))
                          .otherwise(pl.lit(""))]).str.strip_chars_start(": ")
    return findings_schema.conform(detail.select(
        pl.lit("matbench").alias("source"), "file", "row", "column", findings_schema.kind(pl.col("issue"), KINDS)
        .alias("kind"), text.alias("detail"), pl.col("mbid").alias("candidate_id")))


def prepare(settings: Settings, options: Options | None = None) -> PreparedSource:
    """Normalise the tasks, the leaderboard predictions and, with ``features``, join Magpie features.

    Tables: ``<task>`` (one row per material), ``predictions`` (long) and ``leaderboard_<task>``
    (usable predictions with the truth, for ``per = "submission"`` audits).
    """
    options = options or Options()
    tasks, submissions = options.tasks, options.submissions
    features: Sequence[str] | str | None = "all" if options.features == ("all",) else options.features
    tasks, subs = _check_request(tasks, submissions)
    out_dir = settings.tables_dir / "matbench"
    folds_file = fetch(FOLDS, settings)
    folds = read_folds(folds_file.path)
    task_paths: dict[str, Path] = {}
    inputs: dict[str, str] = {FOLDS.name: folds_file.sha256}
    findings: list[pl.DataFrame] = []
    task_ids: dict[str, pl.DataFrame] = {}
    for task in tasks:
        path, sha, found = _task_table(task, settings, folds, folds_file.sha256, out_dir)
        task_paths[task], inputs[f"matbench_{task}"] = path, sha
        findings.append(found)
        task_ids[task] = pl.read_parquet(path, columns=["mbid", "fold"])
    fetched: dict[str, FetchedFile] = {}
    for sub in subs:
        try:
            fetched[sub] = fetch(results_source(sub), settings)
        except MissingSourceError as exc:  # the six large submissions are not mirrored
            findings.append(findings_frame([{"source": "matbench", "submission": sub, "file":
                                             results_source(sub).url, "issue": "results not available",
                                             "value": str(exc), "action": "submission not audited"}]))
    for sub, f in fetched.items():
        inputs[f"{sub}/results.json.gz"] = f.sha256
    pred_path = out_dir / "predictions.parquet"
    pred_findings_path = out_dir / "predictions.findings.parquet"
    key = _digest(*(f"{k}={v}" for k, v in sorted(inputs.items())))
    notes = [f"matbench: {len(tasks)} task(s), {len(fetched)} submission(s) with predictions"]
    if _cached(pred_path, key) and regular_file(pred_findings_path, "the derived table"):
        pred_findings = pl.read_parquet(pred_findings_path)
    else:
        parts, pfind = [_empty_predictions()], []
        for sub, f in fetched.items():
            p, fi = read_results(f.path, sub, task_ids)
            parts.append(p)
            pfind.append(fi)
        predictions = pl.concat(parts)
        pred_findings = pl.concat([findings_frame([]), *pfind])
        meta = provenance(FOLDS, folds_file, normaliser=NORMALISER, input_key=key,
                          submissions=sorted(fetched), tasks=tasks,
                          counts={"rows": predictions.height, "findings": pred_findings.height})
        meta["dcaudit.source"] = "matbench leaderboard results.json.gz"
        meta["dcaudit.url"] = f"{RAW}/benchmarks"
        write_table_atomic(pred_findings.to_arrow(), pred_findings_path, meta)
        write_table_atomic(predictions.to_arrow(), pred_path, meta)
    tables: dict[str, Path] = dict(task_paths)
    if features:
        feature_paths, more = _feature_tables(settings, task_paths, features, out_dir, inputs)
        tables.update(feature_paths)
        notes += more
    tables["predictions"] = pred_path
    tables.update(_leaderboard_tables(pred_path, task_paths, out_dir, key))
    all_findings = pl.concat([*findings, pred_findings])
    detail_path, findings_path = out_dir / "matbench_findings.parquet", out_dir / "findings.parquet"
    write_table_atomic(all_findings.to_arrow(), detail_path, {"dcaudit.input_key": key})
    write_table_atomic(findings_schema.to_arrow(as_findings(all_findings)), findings_path, {"dcaudit.input_key": key})
    return PreparedSource(name="matbench", tables=tables, inputs=inputs, findings=findings_path,
                          reports={"findings": detail_path}, notes=tuple(notes),
                          sources=(FOLDS, *(dataset_source(t) for t in tasks), *(results_source(s) for s in subs)))


CONNECTOR = SourceConnector("matbench", Options, (FOLDS, *(dataset_source(t) for t in TASKS)), prepare)
