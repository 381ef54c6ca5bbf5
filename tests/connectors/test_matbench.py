"""The Matbench connector on the real mirror (small tasks), its bad inputs, the Magpie features and a
small-task end-to-end audit of the built-in spec."""

from __future__ import annotations

import gzip
import json
import re
import tomllib
from importlib import resources
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from dcaudit.config import Settings, load_settings
from dcaudit.connectors import matbench
from dcaudit.errors import InputError, IntegrityError
from dcaudit.features import magpie
from tests.conftest import MIRROR, mirror_path

SMALL = ("steels", "dielectric")
SUBS = ("dummy", "rf", "alignn")


@pytest.fixture(scope="module")
def mb_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    mirror_path("matbench/matbench_v0.1_validation.json.gz")
    base = load_settings()
    return Settings(home=tmp_path_factory.mktemp("matbench-home"), mirror=MIRROR, memory_limit=base.memory_limit,
                    threads=base.threads, offline=True)


@pytest.fixture(scope="module")
def prepared(mb_settings: Settings):  # noqa: ANN201
    return matbench.prepare(mb_settings, matbench.Options(tasks=SMALL, submissions=SUBS))


def test_embedded_hashes_are_the_manifests() -> None:
    text = mirror_path("MANIFEST.md").read_text()
    listed = dict(re.findall(r"^\| `matbench/([^`]+)` \|.*\| `([0-9a-f]{64})` \|", text, re.M))
    for rel, sha in matbench.MIRROR_SHA256.items():
        assert listed[rel] == sha, rel
    results = {r for r in listed if r.endswith("results.json.gz")}
    assert results == {r for r in matbench.MIRROR_SHA256 if r.endswith("results.json.gz")}
    # every mirrored submission is known, and the six large ones are exactly the unmirrored ones
    mirrored = {r.split("/")[1].removeprefix("matbench_v0.1_") for r in results}
    assert mirrored | matbench.LARGE_SUBMISSIONS == set(matbench.SUBMISSIONS)
    assert not mirrored & matbench.LARGE_SUBMISSIONS


def test_small_tasks_parse_with_official_folds(prepared) -> None:  # noqa: ANN001
    steels = pl.read_parquet(prepared.tables["steels"])
    diel = pl.read_parquet(prepared.tables["dielectric"])
    assert steels.height == 312 and diel.height == 4764
    assert diel.columns[:3] == ["mbid", "composition", "n"] and {"spg_num", "crys_sys", "fold"} <= set(diel.columns)
    # every material is in exactly one official test fold, and the fold sizes are the 5-fold split's
    for t in (steels, diel):
        assert t["fold"].null_count() == 0 and sorted(t["fold"].unique()) == [0, 1, 2, 3, 4]
        sizes = t.group_by("fold").len()["len"]
        assert sizes.max() - sizes.min() <= 1
    assert diel.filter(pl.col("mbid") == "mb-dielectric-0001")["reduced_formula"].item() == "KS"  # "K6 S6"
    assert diel["reduced_formula"].null_count() == 0
    meta = pq.read_schema(prepared.tables["dielectric"]).metadata
    assert meta[b"dcaudit.sha256"].decode() == matbench.MIRROR_SHA256["datasets/matbench_dielectric.json.bz2"]
    assert meta[b"dcaudit.target_column"] == b"n" and b"Dunn" in meta[b"dcaudit.citation"]


def test_fold_ids_match_dataset_ids_for_every_task() -> None:
    folds = matbench.read_folds(mirror_path("matbench/matbench_v0.1_validation.json.gz"))
    meta = json.loads(mirror_path("matbench/matbench_v0.1_dataset_metadata.json").read_text())
    counts = dict(folds.group_by("task").len().iter_rows())
    assert counts == {k.removeprefix("matbench_"): v["n_samples"] for k, v in meta.items()}
    assert folds.select("task", "mbid").is_duplicated().sum() == 0
    for task in ("steels", "jdft2d", "phonons"):
        df, _ = matbench.read_dataset(mirror_path(f"matbench/datasets/matbench_{task}.json.bz2"), task)
        assert set(df["mbid"]) == set(folds.filter(pl.col("task") == task)["mbid"])


def test_leaderboard_predictions_cover_each_test_set_once(prepared) -> None:  # noqa: ANN001
    preds = pl.read_parquet(prepared.tables["predictions"])
    assert preds["usable"].all() and set(preds["submission"]) == set(SUBS)
    for task in SMALL:
        ids = set(pl.read_parquet(prepared.tables[task])["mbid"])
        per_sub = preds.filter(pl.col("task") == task).group_by("submission").agg(pl.col("mbid"))
        for sub, mbids in per_sub.iter_rows():
            assert len(mbids) == len(ids) and set(mbids) == ids, (sub, task)
    joined = pl.read_parquet(prepared.tables["leaderboard_dielectric"])
    assert joined.height == preds.filter(pl.col("task") == "dielectric").height and "n" in joined.columns
    assert pl.read_parquet(prepared.reports["findings"]).height == 0
    assert pl.read_parquet(prepared.findings).height == 0


def test_findings_in_the_common_schema() -> None:
    detail = matbench.findings_frame([
        {"source": "matbench", "file": "x.json", "task": "steels", "row": 3, "mbid": "mb-1", "column": "yield strength",
         "issue": "target: NaN", "value": "nan", "action": "kept with a null target"},
        {"source": "matbench", "file": "r.json", "task": "steels", "submission": "rf", "fold": 2, "mbid": "mb-2",
         "column": "mbid", "issue": "id predicted in a fold whose test set lacks it", "action": "kept"},
        {"source": "matbench", "submission": "coGN", "issue": "results not available"}])
    common = matbench.as_findings(detail)
    assert common.columns == ["source", "file", "row", "column", "kind", "detail", "candidate_id"]
    assert common["kind"].to_list() == ["target_nan", "id_predicted_in_wrong_fold", "results_not_available"]
    assert common["candidate_id"].to_list() == ["mb-1", "mb-2", None]
    assert common["detail"][1] == "steels / rf fold 2: id predicted in a fold whose test set lacks it; kept"


def test_unknown_submission_and_task_are_named(mb_settings: Settings) -> None:
    with pytest.raises(InputError, match=r"unknown Matbench submission\(s\) \['CrabNot'\].*CrabNet"):
        matbench.prepare(mb_settings, matbench.Options(tasks=SMALL, submissions=("CrabNot",)))
    with pytest.raises(InputError, match="unknown Matbench task"):
        matbench.prepare(mb_settings, matbench.Options(tasks=("mp_gapp",)))


def _results_file(path: Path, body: str) -> Path:
    with gzip.open(path, "wt") as fh:
        fh.write(body)
    return path


def test_bad_predictions_become_findings(tmp_path: Path) -> None:
    ids = {"steels": pl.DataFrame({"mbid": ["mb-steels-001", "mb-steels-002", "mb-steels-003", "mb-steels-004"],
                                   "fold": [0, 0, 1, 1]}, schema={"mbid": pl.Utf8, "fold": pl.Int32})}
    # Raw JSON: a duplicate key, NaN, text, null, an id outside the task, a wrong fold, an unknown task,
    # and mb-steels-004 never predicted.
    body = ('{"tasks": {"matbench_steels": {"results": {'
            '"fold_0": {"data": {"mb-steels-001": 1.0, "mb-steels-001": 2.0, "mb-steels-002": NaN, '
            '"mb-steels-999": 3.0}},'
            '"fold_1": {"data": {"mb-steels-003": "high", "mb-steels-002": null}}}},'
            '"matbench_nonsense": {"results": {}}}}')
    preds, findings = matbench.read_results(_results_file(tmp_path / "r.json.gz", body), "mine", ids)
    issues = dict(zip(findings["mbid"].fill_null(""), findings["issue"], strict=False))
    got = set(findings["issue"])
    assert "id predicted twice in one fold" in got and issues["mb-steels-999"] == "id not in the task"
    assert "prediction: NaN" in got and "prediction: non-numeric value" in got
    assert "prediction: missing value" in got and "not a Matbench v0.1 task" in got
    assert issues["mb-steels-004"] == "test id without a prediction"
    assert "id predicted in more than one fold" in got  # mb-steels-002 in fold_0 and fold_1
    # nothing dropped: every JSON value is a row; unusable rows are flagged, bad values null
    assert preds.height == 5 and preds.filter(~pl.col("usable")).height == 2
    assert preds.filter(pl.col("mbid") == "mb-steels-003")["prediction"].item() is None
    with pytest.raises(InputError, match="cannot read as JSON.*r2.json.gz"):
        matbench.read_results(_results_file(tmp_path / "r2.json.gz", '{"tasks": '), "mine", ids)


def test_bad_dataset_values_are_kept_and_reported(tmp_path: Path) -> None:
    import bz2

    data = {"mbid": {"0": "mb-x-1", "1": "mb-x-2", "2": "mb-x-3"},
            "composition": {"0": "Fe0.7Ni0.3", "1": "Qq2 O3", "2": "Fe1"},
            "yield strength": {"0": 1200.5, "1": "strong", "2": None}}
    path = tmp_path / "matbench_steels.json.bz2"
    with bz2.open(path, "wt") as fh:
        json.dump(data, fh)
    df, findings = matbench.read_dataset(path, "steels")
    assert df.height == 3 and df["yield_strength"].to_list() == [1200.5, None, None]
    assert set(findings["issue"]) == {"target: non-numeric value", "target: missing value"}
    folds = pl.DataFrame({"task": ["steels"] * 2, "fold": [0, 1], "mbid": ["mb-x-1", "mb-x-9"]},
                         schema={"task": pl.Utf8, "fold": pl.Int32, "mbid": pl.Utf8})
    table, more = matbench.normalise_task(df, folds, "steels", str(path))
    assert table["reduced_formula"].to_list()[0] is not None and table["reduced_formula"].to_list()[1] is None
    assert {"composition does not parse", "id in no official test fold", "fold id not in the dataset"} <= set(
        more["issue"])
    del data["composition"]
    with bz2.open(path, "wt") as fh:
        json.dump(data, fh)
    with pytest.raises(InputError, match="missing column.*'composition'"):
        matbench.read_dataset(path, "steels")
    with bz2.open(path, "wt") as fh:
        fh.write('{"mbid": {"0": "a", "1": "a"}, "composition": {"0": "Fe", "1": "Ni"}, '
                 '"yield strength": {"0": 1, "1": 2}}')
    with pytest.raises(InputError, match="mbid 'a' .*more than once.*row 1"):
        matbench.read_dataset(path, "steels")


def test_tampered_mirror_file_is_refused(tmp_path: Path) -> None:
    mirror = tmp_path / "mirror" / "matbench"
    (mirror / "datasets").mkdir(parents=True)
    (mirror / "matbench_v0.1_validation.json.gz").symlink_to(mirror_path("matbench/matbench_v0.1_validation.json.gz"))
    original = mirror_path("matbench/datasets/matbench_steels.json.bz2").read_bytes()
    (mirror / "datasets" / "matbench_steels.json.bz2").write_bytes(original[:-10])
    s = Settings(home=tmp_path / "home", mirror=tmp_path / "mirror", memory_limit="2GB", threads=1, offline=True)
    with pytest.raises(IntegrityError, match="matbench_steels.json.bz2 has sha256.*MANIFEST"):
        matbench.prepare(s, matbench.Options(tasks=("steels",), submissions=()))


def test_magpie_features_equal_matminer(tmp_path: Path) -> None:
    formulas = ["KS", "Fe2O3", "LiFePO4", "NaCl", "Cs3Sb", "BaTiO3", "SiO2", "He", "Fe0.7Ni0.3", "Xe2F3"]
    ours = magpie.featurise(formulas)
    from matminer.featurizers.composition import ElementProperty
    from pymatgen.core import Composition

    ep = ElementProperty.from_preset("magpie")
    ref = np.array([ep.featurize(Composition(f)) for f in formulas], dtype=float)
    cols = [magpie.column(label.split()[1], label.split()[2]) for label in ep.feature_labels()]
    assert [magpie.matminer_label(c) for c in cols] == ep.feature_labels()
    np.testing.assert_allclose(ours.select(cols).to_numpy().astype(float), ref, rtol=1e-9, atol=1e-9)


def test_magpie_cache_never_recomputes(tmp_path: Path) -> None:
    first, n1 = magpie.cached_features(tmp_path, ["NaCl", "KS", None, "Qq2O"])
    again, n2 = magpie.cached_features(tmp_path, ["KS", "NaCl"])
    more, n3 = magpie.cached_features(tmp_path, ["KS", "MgO"])
    assert (n1, n2, n3) == (3, 0, 1)
    assert first.filter(pl.col("reduced_formula") == "Qq2O")["error"].item() is not None
    assert pl.read_parquet(tmp_path / "magpie.parquet").height == 4
    assert again.sort("reduced_formula")["magpie_mean_Electronegativity"].to_list() == \
        first.filter(pl.col("reduced_formula").is_in(["KS", "NaCl"])).sort("reduced_formula")[
            "magpie_mean_Electronegativity"].to_list()
    assert more.height == 2


@hsettings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.floats(0, 5), min_size=4, max_size=4), min_size=1, max_size=6))
def test_magpie_stats_invariants(rows: list[list[float]]) -> None:
    w = np.array(rows)
    w[:, 0] += 0.1  # every composition holds at least one element
    values = np.array([[1.0, 2.0], [3.5, -1.0], [0.5, 7.0], [2.0, 2.0]])
    props = ("Number", "MendeleevNumber")
    out = magpie.magpie_stats(w, values, props)
    for p in props:
        mn, mx, mean = out[magpie.column("minimum", p)], out[magpie.column("maximum", p)], out[magpie.column("mean", p)]
        assert np.all(mn <= mean + 1e-9) and np.all(mean <= mx + 1e-9)
        np.testing.assert_allclose(out[magpie.column("range", p)], mx - mn)
        assert np.all(out[magpie.column("avg_dev", p)] <= (mx - mn) + 1e-9)
        assert np.all((out[magpie.column("mode", p)] >= mn) & (out[magpie.column("mode", p)] <= mx))


def test_small_task_end_to_end_audit(mb_settings: Settings) -> None:
    from dcaudit.pipelines.runner import run_spec
    from dcaudit.spec import spec_from_dict

    raw = tomllib.loads(resources.files("dcaudit.pipelines").joinpath("matbench.toml").read_text())
    raw["source"].update(tasks=["dielectric"], submissions=list(SUBS))
    raw["audits"] = [a for a in raw["audits"] if a["id"].startswith("dielectric-")]
    raw["matbench"]["polymorphs"] = ["dielectric-composition"]
    raw["sensitivity"].update(audits=["dielectric-leaderboard"], rules=["quantile:10", "knn:25"])
    for entry in raw["matbench"]["completion"]:
        entry.update(audits=[a for a in entry["audits"] if a.startswith("dielectric-")], seeds=2, random_draws=2,
                     probes=entry["probes"][:2])
    result = run_spec(spec_from_dict(raw, origin="test"), mb_settings)
    summary = pl.from_arrow(result.tables["summary"])
    assert (summary["certified_fraction"] + summary["ambiguous_fraction"] + summary["unsupported_fraction"]
            - 1).abs().max() < 1e-12
    comp = summary.filter(pl.col("audit_id") == "dielectric-composition").row(0, named=True)
    assert comp["n_candidates"] == 4764
    metrics = pl.from_arrow(result.tables["metrics"])
    poly = dict(metrics.filter(pl.col("experiment") == "dielectric-composition").select("metric", "value").iter_rows())
    assert poly["polymorph_groups_disagreeing"] == comp["n_mixed_fibers"]
    assert poly["polymorph_groups"] == comp["n_fibers"] - comp["n_unsupported_fibers"]  # singletons are unsupported
    # refining by crystal system, then space group, only splits fibers: mixed fibers never increase
    mixed = [summary.filter(pl.col("audit_id") == f"dielectric-composition{s}")["n_mixed_fibers"].item()
             for s in ("", "+crys_sys", "+crys_sys+spg")]
    assert mixed[0] >= mixed[1] >= mixed[2]
    board = summary.filter(pl.col("audit_id") == "dielectric-leaderboard")
    assert set(board["model"]) == set(SUBS) and (board["n_candidates"] == 4764).all()
    assert metrics.filter((pl.col("experiment") == "dielectric-leaderboard")
                          & (pl.col("metric") == "median_certified_fraction")).height == 1
    q = {k: summary.filter(pl.col("audit_id") == f"dielectric-magpie-q{k}")["n_fibers"].item() for k in (2, 4, 8)}
    assert q[2] <= 16 and q[2] < q[4] < q[8]
    sens = pl.from_arrow(result.tables["sensitivity"])
    assert set(sens["model"]) == set(SUBS) and set(sens["fiber_rule"]) == {"quantile:10", "knn:25"}
    completion = pl.from_arrow(result.tables["completion"])
    assert set(completion["audit_id"]) == {"dielectric-composition", "dielectric-magpie-q4"}


def test_matminer_path_builds_the_artifact_columns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The online path (matminer's load_dataset), with the download replaced by two real structures."""
    import matminer.datasets
    import pandas as pd
    from pymatgen.core import Lattice, Structure

    frame = pd.DataFrame({"structure": [Structure(Lattice.cubic(4.1), ["Cs", "Cl"], [[0, 0, 0], [0.5, 0.5, 0.5]]),
                                        Structure(Lattice.hexagonal(3.0, 5.0), ["Zn", "O"],
                                                  [[1 / 3, 2 / 3, 0], [1 / 3, 2 / 3, 0.38]])],
                          "n": [1.6, 2.1]})
    calls: list[str] = []
    monkeypatch.setattr(matminer.datasets, "load_dataset", lambda name: calls.append(name) or frame)
    s = Settings(home=tmp_path, mirror=None, memory_limit="2GB", threads=1, offline=False)
    df = matbench.load_with_matminer("dielectric", s)
    assert calls == ["matbench_dielectric"]
    assert df["mbid"].to_list() == ["mb-dielectric-1", "mb-dielectric-2"]  # Matbench's zero-padded scheme
    assert df["composition"].to_list() == ["Cs1 Cl1", "Zn1 O1"]
    # CsCl type Pm-3m; Zn and O stacked on one 6-fold axis (one formula unit per cell): P6mm
    assert df["spg_num"].to_list() == [221, 183] and df["crys_sys"].to_list() == ["cubic", "hexagonal"]
    path = tmp_path / "roundtrip.json.bz2"
    import bz2

    with bz2.open(path, "wt") as fh:
        json.dump(matbench._dataset_json(df), fh)
    parsed, findings = matbench.read_dataset(path, "dielectric")
    assert parsed["n"].to_list() == [1.6, 2.1] and findings.height == 0
    again = matbench.load_with_matminer("dielectric", s)  # cached in raw/: no second download
    assert calls == ["matbench_dielectric"] and again.equals(df)


def test_a_folds_file_whose_json_differs_from_the_published_one_is_refused(tmp_path: Path) -> None:
    import gzip

    from dcaudit.errors import IntegrityError

    original = gzip.decompress(mirror_path("matbench/matbench_v0.1_validation.json.gz").read_bytes())
    moved = tmp_path / "matbench_v0.1_validation.json.gz"
    moved.write_bytes(gzip.compress(original.replace(b'"mb-', b'"mb_', 1)))   # one id edited
    with pytest.raises(IntegrityError, match="sha256 .* expected 94c17bc3"):
        matbench.read_folds(moved)
    same = tmp_path / "same.json.gz"
    same.write_bytes(gzip.compress(original, compresslevel=1))   # another gzip of the same JSON: accepted
    assert matbench.read_folds(same).height > 0


def _listing(folder: Path) -> dict[str, bool]:
    return {str(p.relative_to(folder)): p.is_dir() for p in sorted(folder.rglob("*"))}


def test_a_task_without_a_copy_offline_leaves_no_temporary_in_raw(tmp_path: Path) -> None:
    """The matminer path opened raw/matbench_<task>.json.bz2.tmp before asking matminer, which offline
    refuses: the run stopped and the temporary file stayed."""
    from dcaudit.errors import MissingSourceError

    mirror = tmp_path / "mirror" / "matbench"
    mirror.mkdir(parents=True)
    (mirror / "matbench_v0.1_validation.json.gz").symlink_to(mirror_path("matbench/matbench_v0.1_validation.json.gz"))
    s = Settings(home=tmp_path / "home", mirror=tmp_path / "mirror", memory_limit="2GB", threads=1, offline=True)
    with pytest.raises(MissingSourceError, match="matbench_steels"):
        matbench.prepare(s, matbench.Options(tasks=("steels",), submissions=()))
    assert not s.raw_dir.exists() or _listing(s.raw_dir) == {}


def test_a_derived_findings_table_that_is_a_directory_is_named_and_nothing_is_left(tmp_path: Path) -> None:
    """<task>.findings.parquet was looked up with is_file(): a directory there made the task derived again, and
    os.replace failed as an internal error with the temporary file left beside it."""
    from dcaudit.storage import NotAFileError

    s = Settings(home=tmp_path / "home", mirror=MIRROR, memory_limit="2GB", threads=1, offline=True)
    options = matbench.Options(tasks=("steels",), submissions=())
    matbench.prepare(s, options)
    out = s.tables_dir / "matbench"
    for name in ("steels.findings.parquet", "predictions.findings.parquet"):
        kept = (out / name).read_bytes()
        (out / name).unlink()
        (out / name).mkdir()
        before = _listing(out)
        with pytest.raises(NotAFileError, match=f"{out / name} is a directory, not a file"):
            matbench.prepare(s, options)
        assert _listing(out) == before
        (out / name).rmdir()
        (out / name).write_bytes(kept)
