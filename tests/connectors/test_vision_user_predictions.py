"""A user's own predictions with a [vision] section: bad input is an error naming file, row and column (or
option), or is kept and reported — never silently dropped or silently wrong."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from dcaudit.cli import cli
from dcaudit.connectors import vision_predictions as vp
from dcaudit.errors import InputError

HEADER = "model,image_id,condition,predicted,label,confidence\n"
ROWS = "m1,a,clean,1,1,0.9\nm1,a,noise,1,1,0.8\nm1,b,clean,2,2,0.7\nm1,b,noise,3,2,0.6\n"


def _write(tmp_path: Path, text: str, name: str = "preds.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _run(tmp_path: Path, data: str, vision: str = 'conditions = ["noise"]\n'):
    spec = tmp_path / "mine.toml"
    spec.write_text(f'name = "mine"\n[source]\npath = "{data}"\n[vision]\n{vision}')
    return CliRunner().invoke(cli, ["run", str(spec), "--no-report", "--json"],
                              env={"DCAUDIT_HOME": str(tmp_path / "h")})


def test_a_float_class_equals_the_integer_class(tmp_path: Path) -> None:
    """predicted 1.0 (a float column) and label 1 (an integer column) read '1.0' and '1': every prediction was
    wrong, clean accuracy 0, without a word."""
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"model": ["m"] * 4, "image_id": ["a", "a", "b", "b"],
                             "condition": ["clean", "noise"] * 2, "predicted": [1.0, 1.0, 2.0, 2.5],
                             "label": [1, 1, 2, 2], "confidence": [0.9, 0.8, 0.7, 0.6]}), path)
    con = duckdb.connect()
    view = vp.read_predictions(con, path, conditions=["noise"])
    rows = con.execute(f"SELECT predicted, label FROM {view} ORDER BY image_id, condition").fetchall()
    assert rows == [("1", "1"), ("1", "1"), ("2", "2"), ("2.5", "2")]
    csv = _write(tmp_path, HEADER + "m,a,clean,1.0,1,0.9\nm,a,noise,1.0,1,0.8\nm,b,clean,2,2,0.7\nm,b,noise,2.0,2,0.6\n")
    view = vp.read_predictions(con, csv, conditions=["noise"])
    assert con.execute(f"SELECT count_if(predicted = label) FROM {view}").fetchall() == [(4,)]


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_float_class_that_is_nan_or_infinite_is_named(tmp_path: Path, bad: float) -> None:
    """A NaN predicted class in a float column was the class 'nan' (and, once whole floats read as integers, a
    failed cast: an internal error)."""
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"model": ["m"] * 4, "image_id": ["a", "a", "b", "b"],
                             "condition": ["clean", "noise"] * 2, "predicted": [1.0, 1.0, bad, 2.0],
                             "label": [1, 1, 2, 2], "confidence": [0.9, 0.8, 0.7, 0.6]}), path)
    with pytest.raises(InputError) as exc:
        vp.read_predictions(duckdb.connect(), path, conditions=["noise"])
    assert (exc.value.row, exc.value.column) == (3, "predicted")
    assert str(exc.value).startswith("predicted must be a class, not NaN or infinite")


def test_a_fractional_split_is_named_not_rounded(tmp_path: Path) -> None:
    """split 1.5 was cast to 2 (DuckDB rounds), merging it into another split."""
    text = "split," + HEADER + "".join("0," + line + "\n" for line in ROWS.splitlines()) + "1.5,m1,c,clean,1,1,0.5\n"
    with pytest.raises(InputError) as exc:
        vp.read_predictions(duckdb.connect(), _write(tmp_path, text), conditions=["noise"])
    assert str(exc.value) == (f"split must be an integer, found '1.5' (file {tmp_path / 'preds.csv'}, row 5, "
                              "column 'split')")


@pytest.mark.parametrize(("value", "shown"), [("high", "'high'"), ("2.5", "'2.5'")])
def test_a_severity_that_is_not_an_integer_is_named(tmp_path: Path, value: str, shown: str) -> None:
    """severity 'high' was an internal error (a failed cast in the normalised view); 2.5 was rounded to 2."""
    text = (HEADER.replace("\n", ",severity\n") + "m1,a,clean,1,1,0.9,\nm1,a,noise,1,1,0.8,3\n"
            f"m1,b,clean,2,2,0.7,\nm1,b,noise,3,2,0.6,{value}\n")
    with pytest.raises(InputError) as exc:
        vp.read_predictions(duckdb.connect(), _write(tmp_path, text), conditions=["noise"])
    assert (exc.value.row, exc.value.column) == (4, "severity")
    assert str(exc.value).startswith(f"severity must be an integer, found {shown}")


def test_a_condition_with_two_severities_is_named(tmp_path: Path) -> None:
    """noise at severity 3 on one row and 5 on another went into robust[severity=3] only (any_value)."""
    text = (HEADER.replace("\n", ",severity\n") + "m1,a,clean,1,1,0.9,\nm1,a,noise,1,1,0.8,3\n"
            "m1,b,clean,2,2,0.7,\nm1,b,noise,3,2,0.6,5\n")
    with pytest.raises(InputError) as exc:
        vp.read_predictions(duckdb.connect(), _write(tmp_path, text), conditions=["noise"])
    assert str(exc.value) == ("condition 'noise' has more than one severity (3, 5): a condition is one corruption "
                              f"at one severity (file {tmp_path / 'preds.csv'}, row 4, column 'severity')")


def test_a_declared_condition_without_rows_is_named(tmp_path: Path) -> None:
    """conditions = ["noise", "blur"] over a file without blur audited noise alone, silently."""
    out = _run(tmp_path, str(_write(tmp_path, HEADER + ROWS)), 'conditions = ["noise", "blur"]\n')
    assert out.exit_code == 2, out.output
    assert (f"no rows with condition 'blur', which [vision] conditions declares (conditions found: clean, noise) "
            f"(file {tmp_path / 'preds.csv'}, column 'condition')") in out.output


def test_a_model_order_naming_no_model_is_named(tmp_path: Path) -> None:
    out = _run(tmp_path, str(_write(tmp_path, HEADER + ROWS)), 'conditions = ["noise"]\nmodel_order = ["m9"]\n')
    assert out.exit_code == 2, out.output
    assert (f"[vision] model_order names 'm9', which {tmp_path / 'preds.csv'} has no predictions of (models: m1)"
            in out.output)


def test_a_model_whose_every_candidate_is_excluded_keeps_its_summary_row(tmp_path: Path) -> None:
    """m2 without clean rows (no evidence) and m3 without blur (claim missing) vanished from the summary and the
    choice table: their rows came from the fibers, and they had none."""
    text = (HEADER + "m1,a,clean,1,1,0.9\nm1,a,noise,1,1,0.8\nm1,a,blur,1,1,0.8\n"
            "m2,a,noise,1,1,0.8\nm2,a,blur,1,1,0.8\nm3,a,clean,1,1,0.9\nm3,a,noise,1,1,0.8\n")
    out = _run(tmp_path, str(_write(tmp_path, text)), 'conditions = ["noise", "blur"]\nsuites = ["all"]\n')
    assert out.exit_code == 0, out.output
    package = Path(json.loads(out.stdout)["package_dir"])
    summary = pq.read_table(package / "summary.parquet").to_pylist()
    got = [(r["model"], r["split"], r["n_candidates"], r["n_excluded"], r["n_splits"], r["clean_accuracy"],
            r["robust_accuracy"]) for r in summary]
    assert got == [("m1", 0, 1, 0, 1, 1.0, 1.0), ("m2", 0, 0, 1, 1, None, None), ("m3", 0, 0, 1, 1, 1.0, None),
                   ("m1", None, 1, 0, 1, 1.0, 1.0), ("m2", None, 0, 1, 1, None, None),
                   ("m3", None, 0, 1, 1, 1.0, None)]
    choice = pq.read_table(package / "choice.parquet").to_pylist()
    assert [(r["model"], r["robust_accuracy"], r["chosen_by_robustness"], r["chosen_by_certification"])
            for r in choice] == [("m1", 1.0, True, True), ("m2", None, False, False), ("m3", None, False, False)]


def test_image_ids_are_read_as_written(tmp_path: Path) -> None:
    """Image ids 01 and 1 in a CSV were both the number 1: a duplicate error naming an image '1' the file does
    not spell that way (or, across conditions, two images merged into one)."""
    text = HEADER + "m1,01,clean,1,1,0.9\nm1,01,noise,1,1,0.8\nm1,1,clean,2,2,0.7\nm1,1,noise,3,2,0.6\n"
    con = duckdb.connect()
    view = vp.read_predictions(con, _write(tmp_path, text), conditions=["noise"])
    assert sorted({r[0] for r in con.execute(f"SELECT image_id FROM {view}").fetchall()}) == ["01", "1"]
    out = _run(tmp_path, "preds.csv")
    assert out.exit_code == 0, out.output
    candidates = pq.read_table(Path(json.loads(out.stdout)["package_dir"]) / "candidates.parquet")
    assert set(candidates["candidate_id"].to_pylist()) == {"01", "1"}   # two images in every suite


@pytest.mark.parametrize(("column", "third_row"), [("split", "-1,m1,b,clean,2,2,0.7,"),
                                                  ("severity", "0,m1,a,blur,1,1,0.8,-2")])
def test_a_negative_split_or_severity_is_named(tmp_path: Path, column: str, third_row: str) -> None:
    """split -1 was audited as a split of its own, severity -2 as a suite robust[severity=-2]."""
    text = ("split," + HEADER.replace("\n", ",severity\n") + "0,m1,a,clean,1,1,0.9,\n0,m1,a,noise,1,1,0.8,3\n"
            f"{third_row}\n0,m1,b,clean,2,2,0.7,\n0,m1,b,noise,3,2,0.6,3\n0,m1,b,blur,2,2,0.6,-2\n")
    with pytest.raises(InputError) as exc:
        vp.read_predictions(duckdb.connect(), _write(tmp_path, text), conditions=["noise", "blur"])
    value = "-1" if column == "split" else "-2"
    assert str(exc.value) == (f"{column} must not be negative, found {value!r} (file {tmp_path / 'preds.csv'}, "
                              f"row 3, column {column!r})")


@pytest.mark.parametrize("column", ["split", "severity", "confidence"])
def test_a_boolean_number_column_is_named(tmp_path: Path, column: str) -> None:
    """A boolean split was split 1 and 0, a boolean confidence 1.0 and 0.0 (DuckDB casts true to 1)."""
    path = tmp_path / "p.parquet"
    cols = {"model": ["m"] * 4, "image_id": ["a", "a", "b", "b"], "condition": ["clean", "noise"] * 2,
            "predicted": ["1", "1", "2", "2"], "label": ["1", "1", "2", "2"], "confidence": [0.9, 0.8, 0.7, 0.6],
            column: [True, True, False, False]}
    pq.write_table(pa.table(cols), path)
    with pytest.raises(InputError) as exc:
        vp.read_predictions(duckdb.connect(), path, conditions=["noise"])
    assert str(exc.value) == f"{column} must be a number, the column holds true/false (file {path}, column {column!r})"


@pytest.mark.parametrize(("value", "message"), [
    ("1.5", "confidence must be a probability from 0 to 1, found '1.5'"),
    ("-0.25", "confidence must be a probability from 0 to 1, found '-0.25'"),
    ("nan", "confidence must be a finite number, found 'nan'"),
    ("inf", "confidence must be a finite number, found 'inf'"),
])
def test_a_confidence_that_is_no_probability_is_named(tmp_path: Path, value: str, message: str) -> None:
    """confidence NaN or inf is named as it stands; 1.5 or -0.25 is a score (a margin, a logit: only deciles per
    model enter the audit), unless the spec says the column holds probabilities, which then names it."""
    path = _write(tmp_path, HEADER + ROWS.replace("m1,b,clean,2,2,0.7", f"m1,b,clean,2,2,{value}"))
    a_score = "probability" in message
    hint = '; a score (a margin, a logit) needs [vision] confidence = "score"' if a_score else ""
    where = f" (file {path}, row 3, column 'confidence')"
    with pytest.raises(InputError) as exc:
        vp.read_predictions(duckdb.connect(), path, conditions=["noise"], confidence="probability")
    assert str(exc.value) == message + hint + where
    out = _run(tmp_path, str(path), 'conditions = ["noise"]\nconfidence = "probability"\n')   # exit 2, the line
    assert out.exit_code == 2 and json.loads(out.stdout)["error"].endswith(message + hint + where), out.output
    scored = _run(tmp_path, str(path))   # the default: a score, any finite number
    assert scored.exit_code == (0 if a_score else 2), scored.output
    if a_score:
        con = duckdb.connect()
        view = vp.read_predictions(con, path, conditions=["noise"])
        assert con.execute(f"SELECT confidence FROM {view} WHERE image_id = 'b' AND condition = 'clean'"
                           ).fetchall() == [(float(value),)]
    else:
        assert json.loads(scored.stdout)["error"].endswith(message + where)


def test_an_unknown_confidence_kind_is_named() -> None:
    from dcaudit.audits import vision as va

    with pytest.raises(Exception, match="confidence = 'logit': use 'probability' or 'score'"):
        va.VisionConfig.from_section({"confidence": "logit"})


def test_a_duplicate_in_a_glob_names_its_files_and_rows(tmp_path: Path) -> None:
    """A prediction repeated across the files of a glob was 'duplicate prediction for split 0, ...' naming the
    glob and no row: which of its files, and where? (read_predictions on a glob failed on a missing __row.)"""
    table = pa.table({"model": ["m1"] * 4, "image_id": ["a", "a", "b", "b"], "condition": ["clean", "noise"] * 2,
                      "predicted": ["1", "1", "2", "3"], "label": ["1", "1", "2", "2"],
                      "confidence": [0.9, 0.8, 0.7, 0.6]})
    (tmp_path / "parts").mkdir()
    pq.write_table(table, tmp_path / "parts" / "a.parquet")
    pq.write_table(pa.concat_tables([table.slice(0, 1).set_column(1, "image_id", pa.array(["c"])),
                                     table.slice(3)]), tmp_path / "parts" / "b.parquet")
    a, b = tmp_path / "parts" / "a.parquet", tmp_path / "parts" / "b.parquet"
    line = (f"duplicate prediction for split 0, model 'm1', image 'b', condition 'noise' (first at row 4 of {a}): "
            f"each (split, model, image_id, condition) must occur once (file {b}, row 2, column 'image_id')")
    glob = str(tmp_path / "parts" / "*.parquet")
    out = _run(tmp_path, glob)
    assert out.exit_code == 2 and json.loads(out.stdout)["error"].endswith(line), out.output
    with pytest.raises(InputError) as exc:
        vp.read_predictions(duckdb.connect(), Path(glob), conditions=["noise"])
    assert str(exc.value) == line and (exc.value.file, exc.value.row) == (str(b), 2)
    # one file: the same line, with the rows of that file; a third copy is counted
    one = tmp_path / "one.parquet"
    pq.write_table(pa.concat_tables([table, table.slice(3), table.slice(3)]), one)
    with pytest.raises(InputError) as exc:
        vp.read_predictions(duckdb.connect(), one, conditions=["noise"])
    assert str(exc.value) == ("duplicate prediction for split 0, model 'm1', image 'b', condition 'noise' (3 rows, "
                              "first at row 4): each (split, model, image_id, condition) must occur once "
                              f"(file {one}, row 5, column 'image_id')")


def test_a_bad_value_in_a_glob_names_its_file_and_row(tmp_path: Path) -> None:
    """Every value error of a glob named the glob and no row."""
    (tmp_path / "parts").mkdir()
    for name, split, conf in (("a", 0, 0.5), ("b", 1, 7.0)):
        pq.write_table(pa.table({"split": [split] * 2, "model": ["m1"] * 2, "image_id": ["a", "a"],
                                 "condition": ["clean", "noise"], "predicted": ["1", "1"], "label": ["1", "1"],
                                 "confidence": [0.5, conf]}), tmp_path / "parts" / f"{name}.parquet")
    out = _run(tmp_path, str(tmp_path / "parts" / "*.parquet"), 'conditions = ["noise"]\nconfidence = "probability"\n')
    assert out.exit_code == 2, out.output
    assert json.loads(out.stdout)["error"].endswith(
        f"found '7.0'; a score (a margin, a logit) needs [vision] confidence = \"score\" "
        f"(file {tmp_path / 'parts' / 'b.parquet'}, row 2, column 'confidence')")


def test_a_model_without_audited_candidates_is_never_chosen(tmp_path: Path) -> None:
    """m3 (no blur prediction: every candidate excluded) has the higher clean accuracy and was
    chosen_by_benchmark (rank 1), against which the winner metrics then compared the robustness winner."""
    text = (HEADER + "m1,a,clean,1,1,0.9\nm1,a,noise,1,1,0.8\nm1,a,blur,1,1,0.8\n"
            "m1,b,clean,1,2,0.9\nm1,b,noise,1,2,0.8\nm1,b,blur,1,2,0.8\n"
            "m3,a,clean,1,1,0.9\nm3,a,noise,1,1,0.8\nm3,b,clean,2,2,0.9\nm3,b,noise,2,2,0.8\n")
    out = _run(tmp_path, str(_write(tmp_path, text)), 'conditions = ["noise", "blur"]\nsuites = ["all"]\n')
    assert out.exit_code == 0, out.output
    package = Path(json.loads(out.stdout)["package_dir"])
    choice = pq.read_table(package / "choice.parquet").to_pylist()
    got = [(r["model"], r["benchmark_metric"], r["rank_by_benchmark"], r["rank_by_robustness"],
            r["rank_by_certification"], r["chosen_by_benchmark"], r["chosen_by_robustness"],
            r["chosen_by_certification"]) for r in choice]
    assert got == [("m1", 0.5, 1, 1, 1, True, True, True), ("m3", 1.0, None, None, None, False, False, False)]
    metrics = {r["metric"]: r["value"] for r in pq.read_table(package / "metrics.parquet").to_pylist()}
    assert metrics["clean_winner_differs_from_robust_winner"] == 0.0
    assert metrics["clean_winner_differs_from_certification_winner_tie_aware"] == 0.0


@pytest.mark.parametrize("severity", ["", "0"])
def test_a_clean_row_with_a_severity_is_named(tmp_path: Path, severity: str) -> None:
    """A clean row with severity 3 was ignored without a word (the severity suites leave clean rows out): most
    likely a corruption labelled clean. Empty or 0 is no severity and passes."""
    text = (HEADER.replace("\n", ",severity\n") + f"m1,a,clean,1,1,0.9,{severity}\nm1,a,noise,1,1,0.8,3\n"
            "m1,b,clean,2,2,0.7,3\nm1,b,noise,3,2,0.6,3\n")
    with pytest.raises(InputError) as exc:
        vp.read_predictions(duckdb.connect(), _write(tmp_path, text), conditions=["noise"])
    assert str(exc.value) == ("a clean row has no severity (leave it empty, or 0), found '3' "
                              f"(file {tmp_path / 'preds.csv'}, row 3, column 'severity')")
    good = text.replace("m1,b,clean,2,2,0.7,3", f"m1,b,clean,2,2,0.7,{severity}")
    con = duckdb.connect()
    view = vp.read_predictions(con, _write(tmp_path, good), conditions=["noise"])
    assert con.execute(f"SELECT count(*) FROM {view}").fetchall() == [(4,)]
