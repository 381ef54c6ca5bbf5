"""JARVIS connector: the real mirror files, and every kind of bad prediction file (findings or clear errors)."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import polars as pl
import pytest

from dcaudit.config import Settings, load_settings
from dcaudit.connectors import get_connector, jarvis
from dcaudit.errors import InputError, IntegrityError, SpecError
from tests.conftest import MIRROR, mirror_path

FE, GAP = "formation_energy_peratom", "optb88vdw_bandgap"


def _settings(home: Path, mirror: Path | None) -> Settings:
    base = load_settings()
    return Settings(home=home, mirror=mirror, memory_limit=base.memory_limit, threads=base.threads, offline=True)


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> jarvis.PreparedSource:
    mirror_path(jarvis.CONTRIB_DIR)
    settings = _settings(tmp_path_factory.mktemp("jarvis-home"), MIRROR)
    return jarvis.prepare(settings, jarvis.Options(require=(FE, GAP)))


@pytest.fixture(scope="module")
def test_ids() -> pl.DataFrame:
    """The formation-energy benchmark (truth from the installed jarvis-leaderboard wheel)."""
    path = jarvis.package_benchmark(FE)
    assert path is not None, "jarvis-leaderboard is not installed (extra 'materials')"
    return jarvis.read_truth(path, FE)


def _write_zip(path: Path, text: str, member: str = "predictions.csv") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(member, text)
    return path


def _fake_mirror(root: Path, files: dict[tuple[str, str], str]) -> Path:
    for (model, prop), text in files.items():
        _write_zip(root / jarvis.CONTRIB_DIR / model / jarvis.prediction_file_name(prop), text)
    return root


def _csv(rows: list[tuple[str, object]], header: str = "id,prediction") -> str:
    return header + "\n" + "\n".join(f"{jid},{value}" for jid, value in rows) + "\n"


# ------------------------------------------------------------------------------------------ real data


def test_registered() -> None:
    assert get_connector("jarvis") is jarvis.CONNECTOR


def test_real_mirror_tables(real: jarvis.PreparedSource) -> None:
    models = pl.read_parquet(real.tables["models"])
    both = models.filter(pl.col("property").is_in([FE, GAP])).group_by("model").len().filter(pl.col("len") == 2)
    assert both.height == 15  # the paper's "15 models with both predictions"
    assert models.filter(pl.col("property") == FE).height == 16  # matformer_256 has formation energy only
    assert models["sha256_verified"].all() and models["known_model"].all()
    assert (models["n_missing_ids"] == 0).all()  # every file covers the whole test split (MANIFEST)
    wide = pl.read_parquet(real.tables["jarvis"])
    assert wide["model"].n_unique() == 15 and "matformer_256" not in wide["model"].unique().to_list()
    per_model = wide.filter(pl.col(f"pred_{FE}").is_not_null()).group_by("model").len()
    assert per_model["len"].unique().to_list() == [5572]
    # the intersection of the fe, gap and MBJ test splits: the paper's 187 materials of the MBJ probe
    tt = pl.read_parquet(real.tables["test_truth"])
    assert tt.drop_nulls([FE, GAP, "mbj_bandgap"]).height == 187
    findings = pl.read_parquet(real.reports["findings"])
    # upstream lists a few ids in two splits of one benchmark, and three models' files carry the
    # reference in a `target` column: reported, nothing else is wrong
    assert set(findings["issue"].unique()) == {"id_in_several_splits", "target_column_is_reference"}
    assert any("left out" in n and "matformer_256" in n for n in real.notes)


def test_columns_read_by_name_not_position(real: jarvis.PreparedSource) -> None:
    """ALIGNN's file is id,target,prediction: read by name its MAE is 0.033, not the paper's 0.0."""
    path = mirror_path(f"{jarvis.CONTRIB_DIR}/alignn_model/{jarvis.prediction_file_name(FE)}")
    rows = jarvis.read_prediction_file(path, model="alignn_model", prop=FE)
    assert rows["target_in_file"].null_count() == 0  # the file does carry the reference values
    models = pl.read_parquet(real.tables["models"]).filter((pl.col("model") == "alignn_model")
                                                           & (pl.col("property") == FE))
    assert models["mae"][0] == pytest.approx(0.0331, abs=5e-4)
    # the second column by position is the reference itself: MAE exactly 0
    second = pl.read_csv(io.BytesIO(jarvis._unzip_one_csv(path))).select(pl.nth(0).alias("jid"), pl.nth(1).alias("v"))
    truth = jarvis.read_truth(jarvis.package_benchmark(FE), FE).filter(pl.col("split") == "test")
    joined = second.join(truth, on="jid")
    assert joined.height == 5572 and (joined["v"] - joined["target"]).abs().max() < 1e-9


def test_target_columns_carrying_the_reference_are_findings(real: jarvis.PreparedSource) -> None:
    """alignn, cgcnn and atomgpt ship id,target,prediction: the column a by-position reader takes is the truth."""
    common = pl.read_parquet(real.findings)
    assert common.columns == ["source", "file", "row", "column", "kind", "detail", "candidate_id"]
    ref = common.filter(pl.col("kind") == "target_column_is_reference")
    fe = sorted(f.split("/")[1] for f in ref["file"] if FE in f)
    assert fe == ["alignn_model", "atomgpt_model", "cgcnn_model"]
    assert set(ref["column"]) == {"target"} and (ref["source"] == "jarvis").all()
    assert common.filter(pl.col("kind") == "id_in_several_splits")["candidate_id"].str.starts_with("JVASP-").all()


def test_prepare_reuses_normalised_tables(real: jarvis.PreparedSource, tmp_path: Path) -> None:
    settings = _settings(Path(real.tables["jarvis"]).parents[3], MIRROR)
    again = jarvis.prepare(settings, jarvis.Options(require=(FE, GAP)))
    assert again.tables == real.tables and any("reused" in n for n in again.notes)


# ------------------------------------------------------------------------------------------ bad input


def test_bad_prediction_rows_become_findings(test_ids: pl.DataFrame) -> None:
    ids = test_ids.filter(pl.col("split") == "test")["jid"].to_list()
    train_id = test_ids.filter(pl.col("split") == "train")["jid"][0]
    rows = [(jid, -0.5) for jid in ids[:100]]
    rows[1] = (ids[1], "nan")            # NaN
    rows[2] = (ids[2], "abc")            # text in a numeric column
    rows[3] = (ids[3], "")               # empty
    rows.append((ids[4], -0.4))          # duplicate id
    rows.append((train_id, -0.1))        # id from the train split
    rows.append(("JVASP-0000000", 1.0))  # id in no split
    frame = pl.read_csv(io.StringIO(_csv(rows)), infer_schema=False).with_row_index("row", offset=1).select(
        pl.lit("f.csv").alias("file"), pl.lit("mymodel").alias("model"), pl.lit(FE).alias("property"),
        pl.col("row").cast(pl.Int64), pl.col("id").alias("jid"), pl.col("prediction").alias("raw"),
        pl.lit(None, pl.Utf8).alias("target_in_file"))
    out = jarvis.validate(frame, test_ids, known_models=("mymodel",))
    issues = dict(out.findings.group_by("issue").len().iter_rows())
    assert issues["nan"] == 1 and issues["non_numeric"] == 1 and issues["missing_value"] == 1
    assert issues["duplicate_id"] == 2       # both occurrences: neither is trusted
    assert issues["id_outside_test_split"] == 2
    assert issues["missing_id"] == len(ids) - 100
    text = out.findings.filter(pl.col("issue") == "non_numeric").row(0, named=True)
    assert text["value"] == "abc" and text["row"] == 3 and text["jid"] == ids[2]
    # every row read is kept, with its issue; exactly the clean ones are used
    assert out.predictions.height == len(rows)
    assert out.predictions["issue"].is_null().sum() == 100 - 3 - 1  # nan, text, empty, the duplicated id
    assert out.models["n_used"][0] == 96 and out.models["n_missing_ids"][0] == len(ids) - 100


def test_leak_and_unknown_model_are_reported(tmp_path: Path, test_ids: pl.DataFrame) -> None:
    test = test_ids.filter(pl.col("split") == "test")
    leak = _csv([(j, round(t, 3)) for j, t in test.select("jid", "target").iter_rows()])  # reference, rounded
    honest = _csv([(j, t + 0.05) for j, t in test.select("jid", "target").iter_rows()])
    mirror = _fake_mirror(tmp_path / "mirror", {("leaky_model", FE): leak, ("my_new_model", FE): honest})
    # a mirror of other contributions names its models: without models = [...] every pinned one is expected
    prepared = jarvis.prepare(_settings(tmp_path / "home", mirror),
                              jarvis.Options(properties=(FE,), models=("leaky_model", "my_new_model")))
    findings = pl.read_parquet(prepared.reports["findings"])
    leak_rows = findings.filter(pl.col("issue") == "leak_identical_to_reference")
    assert leak_rows["model"].to_list() == ["leaky_model"] and "5572" in leak_rows["detail"][0]
    assert set(findings.filter(pl.col("issue") == "unknown_model")["model"]) == {"leaky_model", "my_new_model"}
    wide = pl.read_parquet(prepared.tables["jarvis"])
    used = wide.filter(pl.col(f"pred_{FE}").is_not_null()).group_by("model").len()
    assert dict(used.iter_rows()) == {"my_new_model": 5572}  # the leak's rows stay out of the audit table
    preds = pl.read_parquet(prepared.tables["predictions"])
    assert preds.filter(pl.col("model") == "leaky_model")["issue"].unique().to_list() == ["leak_identical_to_reference"]


def test_unknown_model_name_is_an_error_with_suggestion(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"unknown JARVIS model 'alignn_modle'.*did you mean alignn_model"):
        jarvis.prepare(_settings(tmp_path / "home", MIRROR), jarvis.Options(properties=(FE,), models=("alignn_modle",)))


def test_require_must_name_loaded_properties(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="require"):
        jarvis.prepare(_settings(tmp_path / "home", MIRROR), jarvis.Options(properties=(FE,), require=(GAP,)))


def test_missing_prediction_column_names_file_and_column(tmp_path: Path) -> None:
    path = _write_zip(tmp_path / "x.csv.zip", "id,target,pred\nJVASP-1,0.1,0.2\n")
    with pytest.raises(InputError, match=r"no 'prediction' column.*column 'prediction'") as err:
        jarvis.read_prediction_file(path, model="m", prop=FE)
    assert err.value.file == str(path)


def test_empty_and_broken_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="empty"):
        jarvis.read_prediction_file(_write_zip(tmp_path / "e.csv.zip", ""), model="m", prop=FE)
    bad = tmp_path / "b.csv.zip"
    bad.write_bytes(b"not a zip")
    with pytest.raises(InputError, match="not a valid zip"):
        jarvis.read_prediction_file(bad, model="m", prop=FE)
    two = tmp_path / "two.csv.zip"
    with zipfile.ZipFile(two, "w") as zf:
        zf.writestr("a.csv", "id,prediction\n")
        zf.writestr("b.csv", "id,prediction\n")
    with pytest.raises(InputError, match="one file inside the zip"):
        jarvis.read_prediction_file(two, model="m", prop=FE)


def test_tampered_known_file_fails_verification(tmp_path: Path, test_ids: pl.DataFrame) -> None:
    test = test_ids.filter(pl.col("split") == "test")
    mirror = _fake_mirror(tmp_path / "mirror", {("alignn_model", FE): _csv([(j, 0.0) for j in test["jid"]])})
    with pytest.raises(IntegrityError, match="alignn_model.*sha256.*truncated or modified"):
        jarvis.prepare(_settings(tmp_path / "home", mirror), jarvis.Options(properties=(FE,)))


def test_non_numeric_truth_names_file_and_id(tmp_path: Path) -> None:
    path = _write_zip(tmp_path / "dft_3d_x.json.zip", '{"train": {}, "val": {}, "test": {"JVASP-1": "high"}}')
    with pytest.raises(InputError, match="JVASP-1 is 'high', not a number"):
        jarvis.read_truth(path, "x")


def test_rounded_target_columns_are_not_reported(test_ids: pl.DataFrame) -> None:
    """A file's target column printed at 3 decimals or in float32 agrees with the benchmark value."""
    test = test_ids.filter(pl.col("split") == "test").head(3)
    (a, ta), (b, tb), (c, tc) = test.select("jid", "target").rows()
    frame = pl.DataFrame({"file": "f", "model": "alignn_model", "property": FE, "row": [1, 2, 3], "jid": [a, b, c],
                          "raw": ["0.1", "0.2", "0.3"],
                          "target_in_file": [f"{ta:.3f}", repr(float(pl.Series([tb], dtype=pl.Float32)[0])),
                                             f"{tc + 0.01:.5f}"]})
    found = jarvis.validate(frame, test_ids).findings.filter(pl.col("issue") == "target_differs_from_benchmark")
    assert found["jid"].to_list() == [c]  # only the one that really differs


def test_offline_without_mirror_says_where_to_put_the_files(tmp_path: Path) -> None:
    from dcaudit.errors import MissingSourceError

    with pytest.raises(MissingSourceError, match=r"jarvis_leaderboard/contributions/alignn_model/.*raw\.githubusercontent"):
        jarvis.prepare(_settings(tmp_path / "home", None), jarvis.Options(properties=(FE,)))
    with pytest.raises(MissingSourceError, match="no list of JARVIS contributions"):
        jarvis.prepare(_settings(tmp_path / "home", None), jarvis.Options(properties=("spillage",)))


def test_a_pinned_prediction_file_missing_from_the_mirror_stops_the_run(tmp_path: Path) -> None:
    """Without it the audit would quietly run on fewer models than the leaderboard has."""
    from dcaudit.errors import MissingSourceError

    mirror = _fake_mirror(tmp_path / "mirror", {("my_new_model", FE): "id,prediction\n"})  # contributions/ exists
    with pytest.raises(MissingSourceError, match="alignn_model.*not available offline"):
        jarvis.prepare(_settings(tmp_path / "home", mirror), jarvis.Options(properties=(FE,)))


def test_a_prediction_file_that_is_a_directory_is_named_not_missing(tmp_path: Path) -> None:
    """It read as "not available offline: put it at <that directory>"."""
    from dcaudit.errors import MissingSourceError

    real = mirror_path(jarvis.CONTRIB_DIR)
    contrib = tmp_path / "mirror" / jarvis.CONTRIB_DIR
    for model in real.iterdir():
        (contrib / model.name).mkdir(parents=True)
        for entry in model.iterdir():
            (contrib / model.name / entry.name).symlink_to(entry)
    first = jarvis.select_models(jarvis.discover(_settings(tmp_path / "home", tmp_path / "mirror"), (FE,)), None)[0]
    blocked = tmp_path / "mirror" / first.source.mirror_paths[0]
    blocked.unlink()
    blocked.mkdir()
    with pytest.raises(InputError, match=f"{blocked} is a directory, not a file") as caught:
        jarvis.prepare(_settings(tmp_path / "home", tmp_path / "mirror"), jarvis.Options(properties=(FE,)))
    assert not isinstance(caught.value, MissingSourceError)
