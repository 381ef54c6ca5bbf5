"""Vision connector: deterministic corruptions, MNIST IDX reading, the generic predictions connector."""

from __future__ import annotations

import gzip
from pathlib import Path

import duckdb
import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from dcaudit.connectors import vision_models as vm
from dcaudit.connectors import vision_predictions as vp
from dcaudit.errors import InputError, IntegrityError
from dcaudit.features import image_corruptions as ic
from tests.conftest import mirror_path

# ------------------------------------------------------------------------------------- digits corruptions


@pytest.fixture(scope="module")
def digits() -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    images, labels = vm.digits_images()
    return images, labels, vm.digits_corruptions(images)


def test_digits_images_are_scaled(digits) -> None:
    images, labels, _ = digits
    assert images.shape == (1797, 8, 8) and labels.shape == (1797,)
    assert images.min() == 0.0 and images.max() == 1.0
    assert sorted(np.unique(labels)) == list(range(10))


def test_digits_corruptions_are_deterministic_with_stated_shapes(digits) -> None:
    images, _, cond = digits
    again = vm.digits_corruptions(images)
    assert list(cond) == ["clean", *vm.DIGITS_CORRUPTIONS]
    for name, arr in cond.items():
        assert arr.shape == (1797, 8, 8), name
        assert np.array_equal(arr, again[name]), f"{name} differs between two calls"
        assert arr.min() >= 0.0 and arr.max() <= 1.0, name
    # another seed gives other noise; the deterministic corruptions do not depend on it
    other = vm.digits_corruptions(images, vm.DigitsProtocol(corruption_seed=1))
    assert not np.array_equal(other["gaussian_noise"], cond["gaussian_noise"])
    assert np.array_equal(other["gaussian_blur"], cond["gaussian_blur"])


def test_digits_corruption_values(digits) -> None:
    images, _, cond = digits
    noise = cond["gaussian_noise"] - images
    unclipped = (cond["gaussian_noise"] > 0) & (cond["gaussian_noise"] < 1)
    assert abs(noise[unclipped].std() - 0.23) < 0.03          # σ 0.23 where no clipping happened
    occ = cond["occlusion"]
    assert np.all(occ[:, 2:6, 2:4] == 0.0)                      # rows 2:6, columns 2:4 set to 0
    mask = np.ones((8, 8), bool)
    mask[2:6, 2:4] = False
    assert np.array_equal(occ[:, mask], images[:, mask])        # nothing else touched
    blur = cond["gaussian_blur"]
    assert np.allclose(blur.sum(axis=(1, 2)), images.sum(axis=(1, 2)), rtol=0.02)  # blur keeps the ink
    assert blur.std() < images.std()
    # shift (0.7, -0.7), linear: pixel (r, c) samples (r - 0.7, c + 0.7) of the clean image
    shifted = cond["shift"]
    r, c = 4, 3
    expect = (0.3 * 0.3 * images[:, r, c] + 0.3 * 0.7 * images[:, r, c + 1]
              + 0.7 * 0.3 * images[:, r - 1, c] + 0.7 * 0.7 * images[:, r - 1, c + 1])
    assert np.allclose(shifted[:, r, c], expect)


# ------------------------------------------------------------------------------- ImageNet-C subset (MNIST)

@pytest.fixture(scope="module")
def mnist() -> tuple[np.ndarray, np.ndarray]:
    images = vm.read_idx(mirror_path("vision/mnist/t10k-images-idx3-ubyte.gz"))
    labels = vm.read_idx(mirror_path("vision/mnist/t10k-labels-idx1-ubyte.gz"))
    return images, labels


def test_mnist_idx_matches_manifest(mnist) -> None:
    images, labels = mnist
    assert images.shape == (10000, 28, 28) and images.dtype == np.uint8
    assert np.bincount(labels).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


def test_truncated_idx_is_an_integrity_error(tmp_path: Path) -> None:
    header = bytes([0, 0, 8, 3]) + (10).to_bytes(4, "big") + (28).to_bytes(4, "big") * 2
    bad = tmp_path / "t10k-images-idx3-ubyte.gz"
    bad.write_bytes(gzip.compress(header + bytes(100)))
    with pytest.raises(IntegrityError, match="truncated"):
        vm.read_idx(bad)


@pytest.mark.parametrize("name", sorted(ic.CORRUPTIONS))
def test_imagenet_c_subset_deterministic(name: str, mnist) -> None:
    batch = mnist[0][:40]
    for severity in (1, 5):
        a = ic.corrupt(batch, name, severity, seed=7)
        assert a.shape == batch.shape and a.dtype == np.uint8
        assert np.array_equal(a, ic.corrupt(batch, name, severity, seed=7))
    # severity 5 moves pixels further from the clean image than severity 1
    d1 = np.abs(ic.corrupt(batch, name, 1, 7).astype(int) - batch).mean()
    d5 = np.abs(ic.corrupt(batch, name, 5, 7).astype(int) - batch).mean()
    assert d5 > d1 > 0


def test_imagenet_c_values(mnist) -> None:
    batch = mnist[0][:20]
    assert np.array_equal(ic.corrupt(batch, "brightness", 2, 0),
                          np.clip(batch / 255.0 + 0.2, 0, 1).__mul__(255).astype(np.uint8))
    low = ic.corrupt(batch, "contrast", 5, 0).astype(float)
    assert np.allclose(low.mean(axis=(1, 2)), batch.mean(axis=(1, 2)), atol=1.0)   # mean kept, spread cut
    assert np.allclose(low.std(axis=(1, 2)), 0.05 * batch.std(axis=(1, 2)), atol=1.0)  # c = 0.05 at severity 5
    kernel = ic.disk_kernel(3, 0.1)
    assert abs(kernel.sum() - 1) < 1e-6 and kernel.shape == (17, 17)
    with pytest.raises(ValueError, match="unknown corruption"):
        ic.corrupt(batch, "frost", 1, 0)


def test_pixelate_is_byte_identical_to_pil(mnist) -> None:
    from PIL import Image

    batch = mnist[0][:25]
    for severity, c in zip(ic.SEVERITIES, (0.6, 0.5, 0.4, 0.3, 0.25), strict=True):
        n = int(28 * c)
        ref = np.stack([np.asarray(Image.fromarray(im).resize((n, n), Image.Resampling.BOX)
                                   .resize((28, 28), Image.Resampling.NEAREST)) for im in batch])
        assert np.array_equal(ic.corrupt(batch, "pixelate", severity, 0), ref), severity


@hypothesis_settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31), severity=st.sampled_from(ic.SEVERITIES),
       name=st.sampled_from(["gaussian_noise", "shot_noise", "impulse_noise", "speckle_noise", "glass_blur"]))
def test_random_corruptions_depend_only_on_seed(seed: int, severity: int, name: str) -> None:
    batch = (np.arange(3 * 28 * 28) % 256).astype(np.uint8).reshape(3, 28, 28)
    a = ic.corrupt(batch, name, severity, seed)
    assert np.array_equal(a, ic.corrupt(batch, name, severity, seed))
    assert ic.condition_seed(seed, name, severity) == ic.condition_seed(seed, name, severity)


# ---------------------------------------------------------------------------- confidence of a prediction

def test_confidence_is_proba_or_margin() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(120, 4))
    y = (x[:, 0] > 0).astype(int) + (x[:, 1] > 0).astype(int)
    svm = vm.make_model("linear_svm", 0, scaled=False).fit(x, y)
    pred, conf = vm.predict_with_confidence(svm, x)
    scores = np.sort(svm.decision_function(x), axis=1)
    assert np.allclose(conf, scores[:, -1] - scores[:, -2]) and np.array_equal(pred, svm.predict(x))
    nb = vm.make_model("gaussian_nb", 0, scaled=False).fit(x, y)
    pred, conf = vm.predict_with_confidence(nb, x)
    assert np.allclose(conf, nb.predict_proba(x).max(axis=1)) and np.array_equal(pred, nb.predict(x))


# ------------------------------------------------------------------------ generic predictions connector

HEADER = "split,model,image_id,condition,predicted,label,confidence\n"


def _write(tmp_path: Path, text: str, name: str = "preds.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _good_rows() -> str:
    return (HEADER + "0,m1,a,clean,1,1,0.9\n0,m1,a,noise,1,1,0.8\n0,m1,b,clean,2,2,0.7\n"
            "0,m1,b,noise,3,2,0.6\n")


def test_generic_predictions_load_and_normalise(tmp_path: Path) -> None:
    con = duckdb.connect()
    view = vp.read_predictions(con, _write(tmp_path, _good_rows()), conditions=["noise"])
    rows = con.execute(f"SELECT split, model, image_id, condition, predicted, label, confidence, severity "
                       f"FROM {view} ORDER BY image_id, condition").fetchall()
    assert rows[0] == (0, "m1", "a", "clean", "1", "1", 0.9, None)
    assert len(rows) == 4


def test_generic_missing_columns_named(tmp_path: Path) -> None:
    path = _write(tmp_path, "model,image_id,condition,predicted,confidence\nm,a,clean,1,0.5\n")
    with pytest.raises(InputError) as exc:
        vp.read_predictions(duckdb.connect(), path)
    assert exc.value.column == "label" and exc.value.file == str(path)
    assert "missing column(s) label" in str(exc.value)


def test_generic_unknown_condition_names_row(tmp_path: Path) -> None:
    path = _write(tmp_path, _good_rows() + "0,m1,a,fog,1,1,0.5\n")
    with pytest.raises(InputError) as exc:
        vp.read_predictions(duckdb.connect(), path, conditions=["noise"])
    assert (exc.value.row, exc.value.column) == (5, "condition")
    assert "unknown condition 'fog'" in str(exc.value)


def test_generic_without_clean_condition(tmp_path: Path) -> None:
    path = _write(tmp_path, HEADER + "0,m1,a,noise,1,1,0.9\n0,m1,a,blur,1,1,0.9\n")
    with pytest.raises(InputError, match="no rows with condition 'clean'") as exc:
        vp.read_predictions(duckdb.connect(), path)
    assert exc.value.column == "condition"


def test_generic_duplicate_rows_named(tmp_path: Path) -> None:
    path = _write(tmp_path, _good_rows() + "0,m1,b,noise,2,2,0.6\n")
    with pytest.raises(InputError) as exc:
        vp.read_predictions(duckdb.connect(), path)
    assert (exc.value.row, exc.value.column) == (5, "image_id")
    assert "first at row 4" in str(exc.value) and "condition 'noise'" in str(exc.value)


def test_generic_bad_values_named(tmp_path: Path) -> None:
    empty = _write(tmp_path, _good_rows() + "0,,c,clean,1,1,0.5\n", "empty.csv")
    with pytest.raises(InputError) as exc:
        vp.read_predictions(duckdb.connect(), empty)
    assert (exc.value.row, exc.value.column) == (5, "model")
    text = _write(tmp_path, _good_rows() + "0,m1,c,clean,1,1,high\n", "text.csv")
    with pytest.raises(InputError, match="finite number") as exc:
        vp.read_predictions(duckdb.connect(), text)
    assert (exc.value.row, exc.value.column) == (5, "confidence")


def test_generic_parquet_without_split(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "preds.parquet"
    pq.write_table(pa.table({"model": ["m", "m"], "image_id": [1, 1], "condition": ["clean", "jpeg"],
                             "predicted": [3, 3], "label": [3, 3], "confidence": [0.5, 0.4]}), path)
    con = duckdb.connect()
    view = vp.read_predictions(con, path)
    assert con.execute(f"SELECT DISTINCT split FROM {view}").fetchall() == [(0,)]


def test_vision_findings_name_unusable_images_and_fit_warnings(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from dcaudit.connectors import vision as v

    rows = [("a", "clean", "1"), ("a", "noise", "1"), ("a", "blur", "1"),
            ("b", "noise", "2"),                                  # no clean prediction: no evidence
            ("c", "clean", "3"), ("c", "noise", "3")]             # blur missing, nothing wrong: robust NULL
    table = pa.table({"split": pa.array([0] * len(rows), pa.int32()), "model": ["m"] * len(rows),
                      "image_id": [r[0] for r in rows], "condition": [r[1] for r in rows],
                      "predicted": [r[2] for r in rows], "confidence": [0.9] * len(rows),
                      "label": [r[2] for r in rows], "corruption": [None if r[1] == "clean" else r[1] for r in rows],
                      "severity": pa.array([None] * len(rows), pa.int32())}, schema=vp.PREDICTION_SCHEMA)
    preds = tmp_path / "digits.parquet"
    pq.write_table(table.replace_schema_metadata({"dcaudit.warnings": '["ConvergenceWarning: mlp did not converge"]'}),
                   preds)
    images = v.write_images_table({"digits": preds}, tmp_path / "images.parquet")
    found = v.vision_findings({"digits": preds}, images)
    kinds = sorted(zip(found["kind"], found["candidate_id"], strict=True), key=str)
    assert kinds == [("incomplete_conditions", "digits:0:m:c"), ("missing_clean_prediction", "digits:0:m:b"),
                     ("model_fit_warning", None)]
    assert set(found["source"]) == {"vision-digits"}


def test_a_run_that_fitted_models_in_process_pools_ends(tmp_path: Path) -> None:
    """joblib's process pools (n_jobs >= 2) shut down from interpreter teardown: the CLI's fast exit used to
    skip it, and the process hung after printing that the run succeeded. The timeout only catches a hang."""
    import os
    import subprocess
    import sys

    spec = tmp_path / "v.toml"
    spec.write_text('name = "qa"\n[source]\nconnector = "vision"\nid = "candidate_id"\ndatasets = "digits"\n'
                    'digits_splits = 1\ndigits_models = "logistic, knn"\nn_jobs = 2\n[[audits]]\nid = "a"\n'
                    'table = "images"\nclaim = "robust = true"\nevidence = ["model", "predicted"]\n')
    env = {k: v for k, v in os.environ.items() if k != "DCAUDIT_DEBUG"} | {"DCAUDIT_HOME": str(tmp_path / "home")}
    done = subprocess.run([str(Path(sys.executable).with_name("dcaudit")), "run", str(spec), "--no-report"],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "succeeded" in done.stdout + done.stderr


def _listing(folder: Path) -> dict[str, bool]:
    return {str(p.relative_to(folder)): p.is_dir() for p in sorted(folder.rglob("*"))}


def test_a_derived_vision_table_that_is_a_directory_is_named_and_nothing_is_left(tmp_path: Path) -> None:
    """images-*.parquet was looked up with is_file(): a directory there was rebuilt onto, and os.replace failed
    as an internal error with the temporary file left beside it."""
    from dcaudit.config import Settings
    from dcaudit.connectors import vision
    from dcaudit.storage import NotAFileError

    settings = Settings(home=tmp_path / "home", mirror=None, memory_limit="2GB", threads=1, offline=True)
    options = vision.Options(datasets=("digits",), digits_splits=1, digits_models=("gaussian_nb",), n_jobs=1)
    prepared = vision.prepare(settings, options)
    for name in ("images", "digits-pixels"):
        path = prepared.tables[name]
        kept = path.read_bytes()
        path.unlink()
        path.mkdir()
        before = _listing(settings.tables_dir)
        with pytest.raises(NotAFileError, match=f"{path} is a directory, not a file"):
            vision.prepare(settings, options)
        assert _listing(settings.tables_dir) == before
        path.rmdir()
        path.write_bytes(kept)


def test_an_mnist_mirror_file_that_is_a_directory_is_named(tmp_path: Path) -> None:
    from dcaudit.config import Settings
    from dcaudit.storage import NotAFileError

    blocked = tmp_path / "mirror" / vm.MNIST_SOURCES[0].mirror_paths[0]
    blocked.mkdir(parents=True)
    settings = Settings(home=tmp_path / "home", mirror=tmp_path / "mirror", memory_limit="2GB", threads=1,
                        offline=True)
    with pytest.raises(NotAFileError, match=f"{blocked} is a directory, not a file"):
        vm.load_mnist_test(settings)


def test_derived_vision_tables_are_reused_only_when_intact_and_made_from_these_predictions(tmp_path: Path) -> None:
    """images-, findings- and digits-pixels-*.parquet were reused because a file was there: a damaged or
    stale one (another predictions table, an older version's) went into the audit as it was."""
    from dcaudit.config import Settings
    from dcaudit.connectors import vision
    from dcaudit.storage import read_table, write_table_atomic

    settings = Settings(home=tmp_path / "home", mirror=None, memory_limit="2GB", threads=1, offline=True)
    options = vision.Options(datasets=("digits",), digits_splits=1, digits_models=("gaussian_nb",), n_jobs=1)
    prepared = vision.prepare(settings, options)
    derived = {name: prepared.tables[name] for name in ("images", "digits-pixels")} | {"findings": prepared.findings}
    good = {name: read_table(path) for name, path in derived.items()}
    for name, path in derived.items():
        # a flipped byte: the file no longer holds what was written, so it is made again
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
        assert vision.prepare(settings, options).tables.get(name, path) == path
        assert read_table(path).equals(good[name]), name
        # a readable table with its own digest note, but not made from these inputs (no key): made again
        write_table_atomic(good[name].slice(0, 1).replace_schema_metadata(None), path)
        vision.prepare(settings, options)
        assert read_table(path).equals(good[name]), name
    # the per-image table is keyed by the predictions' bytes: a predictions table made again (other bytes)
    # gives another per-image table rather than the one derived from the former predictions
    predictions = prepared.tables["digits"]
    table = read_table(predictions)
    write_table_atomic(table, predictions, {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
                       | {"dcaudit.timings": "{}"})
    again = vision.prepare(settings, options)
    assert again.tables["images"] != prepared.tables["images"]
    assert read_table(again.tables["images"]).equals(good["images"])
