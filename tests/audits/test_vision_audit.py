"""The corruption-robustness audit: a reduced digits protocol end to end, known answers, invariants."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from dcaudit.audits import vision as va
from dcaudit.audits.evidence import EvidenceMap
from dcaudit.audits.fibers import AuditLabels, audit_fibers
from dcaudit.claims import parse_claim
from dcaudit.connectors import vision as v
from dcaudit.connectors import vision_models as vm
from dcaudit.connectors import vision_predictions as vp
from dcaudit.errors import InputError
from dcaudit.pipelines.runner import run_spec
from dcaudit.spec import spec_from_dict

MODELS = ("logistic", "knn", "gaussian_nb")
PROTOCOL = vm.DigitsProtocol(n_splits=3, models=MODELS)


@pytest.fixture(scope="module")
def reduced() -> tuple[duckdb.DuckDBPyConnection, str, va.VisionAudit]:
    """3 splits × 3 fast models of the paper's protocol, audited once for the module."""
    run = vm.run_digits(PROTOCOL, n_jobs=1)
    con = duckdb.connect()
    con.register("preds_arrow", run.table)
    con.execute("CREATE TABLE preds AS SELECT * FROM preds_arrow")
    view = vp.validate_predictions(con, "preds", file="reduced digits")
    suites = va.build_suites(con, view, ["all", "each"])
    result = va.audit_predictions(con, view, source="vision-digits", evidence_sql=vp.image_evidence_sql(view),
                                  suites=suites, model_order=MODELS,
                                  bootstrap=200)
    return con, view, result


def test_reduced_protocol_summary(reduced) -> None:
    _, _, res = reduced
    s = res.summary.to_pylist()
    suites = {r["audit_id"] for r in s}
    assert suites == {"robust[all]", "robust[gaussian_noise]", "robust[gaussian_blur]", "robust[occlusion]",
                      "robust[shift]"}
    assert len(s) == len(suites) * (3 * 3 + 3)           # split × model rows + one per model over splits
    for r in s:
        n = 719 if r["split"] is not None else 3 * 719   # 40 % of 1797, stratified
        assert r["n_candidates"] == n and r["n_excluded"] == 0
        assert r["certified_true"] + r["certified_false"] + r["ambiguous"] + r["unsupported"] == n
        assert abs(r["certified_fraction"] + r["ambiguous_fraction"] + r["unsupported_fraction"] - 1) < 1e-12
        assert r["robust_accuracy"] <= r["clean_accuracy"]
    over = {r["model"]: r for r in s if r["split"] is None and r["audit_id"] == "robust[all]"}
    assert 0.93 < over["logistic"]["clean_accuracy"] < 0.99     # paper: 96.7 %
    assert 0.78 < over["gaussian_nb"]["clean_accuracy"] < 0.90  # paper: 84.2 %
    # every corruption suite's claim is implied by the 'all' claim
    for m in MODELS:
        each = [r["robust_accuracy"] for r in s if r["split"] is None and r["model"] == m]
        assert over[m]["robust_accuracy"] == min(each)


def test_deciles_match_pandas_qcut(reduced) -> None:
    import pandas as pd

    con, view, _ = reduced
    ev = con.sql(vp.image_evidence_sql(view)).to_arrow_table().to_pandas()
    for (split, model), grp in ev.groupby(["split", "model"]):
        expect = pd.qcut(grp["confidence"], q=10, labels=False, duplicates="drop")
        assert (grp["confidence_decile"].to_numpy() == expect.to_numpy()).all(), (split, model)


def test_grouped_audit_equals_audit_fibers(reduced) -> None:
    con, view, res = reduced
    con.execute(f"""CREATE OR REPLACE TEMP VIEW one AS
        SELECT e.*, e.clean_correct AND r.ok AS robust FROM ({vp.image_evidence_sql(view)}) e
        JOIN (SELECT split, model, image_id, bool_and(predicted = label) AS ok FROM {view}
              WHERE condition <> 'clean' GROUP BY ALL) r USING (split, model, image_id)
        WHERE e.split = 1 AND e.model = 'knn'""")
    ref = audit_fibers(con, "one", id_column="image_id",
                       evidence=EvidenceMap(("predicted", "clean_correct", "confidence_decile")),
                       claim=parse_claim("robust = true"), labels=AuditLabels("t", "t")).summary.to_pylist()[0]
    ours = [r for r in res.summary.to_pylist()
            if r["audit_id"] == "robust[all]" and r["split"] == 1 and r["model"] == "knn"][0]
    for key in ("n_candidates", "n_fibers", "n_mixed_fibers", "certified_true", "certified_false", "ambiguous",
                "unsupported", "benchmark_only_errors", "median_fiber_size"):
        assert ours[key] == ref[key], key


def test_choice_and_winner_metrics(reduced) -> None:
    _, _, res = reduced
    ch = [r for r in res.choice.to_pylist() if r["audit_id"] == "robust[all]"]
    assert len(ch) == 3 * 3
    for split in range(3):
        rows = [r for r in ch if r["split"] == split]
        for flag in ("chosen_by_benchmark", "chosen_by_robustness", "chosen_by_certification"):
            assert sum(r[flag] for r in rows) == 1
        best = max(r["benchmark_metric"] for r in rows)
        assert all((r["rank_by_benchmark"] == 1) == (r["benchmark_metric"] == best) for r in rows)
    differs = sum(
        not any(r["chosen_by_benchmark"] and r["chosen_by_robustness"] for r in ch if r["split"] == s)
        for s in range(3)) / 3
    metrics = {(m["experiment"], m["metric"]): m for m in res.metrics.to_pylist()}
    row = metrics[("robust[all]", "clean_winner_differs_from_robust_winner")]
    assert row["value"] == pytest.approx(differs) and row["ci_low"] <= row["value"] <= row["ci_high"]
    amb = [r["ambiguous_fraction"] for r in res.summary.to_pylist()
           if r["audit_id"] == "robust[all]" and r["split"] is not None]
    assert metrics[("robust[all]", "median_ambiguous_fraction")]["value"] == pytest.approx(np.median(amb))
    boot = metrics[("robust[all]", "median_ambiguous_fraction_bootstrap")]
    assert boot["ci_low"] <= boot["value"] <= boot["ci_high"]


# ------------------------------------------------------------------------------------- known answers

def _table(rows: list[tuple]) -> pa.Table:
    cols = ("split", "model", "image_id", "condition", "predicted", "confidence", "label")
    return pa.table({c: [r[i] for r in rows] for i, c in enumerate(cols)})


KNOWN = [
    # a-d: same clean evidence (class 1, correct, one confidence) -> one fiber; b breaks under noise
    *[(0, "m", img, "clean", "1", 0.9, "1") for img in "abcd"],
    (0, "m", "a", "noise", "1", 0.5, "1"), (0, "m", "b", "noise", "7", 0.5, "1"),
    (0, "m", "c", "noise", "1", 0.5, "1"), (0, "m", "d", "noise", "1", 0.5, "1"),
    # e: wrong on clean -> not robust whatever the corruption says
    (0, "m", "e", "clean", "2", 0.9, "3"), (0, "m", "e", "noise", "3", 0.5, "3"),
    # f: correct on clean, its corrupted prediction is missing -> claim unknown, kept as excluded
    (0, "m", "f", "clean", "4", 0.9, "4"),
    # g: wrong on clean, corrupted prediction missing -> the claim is still decided (false)
    (0, "m", "g", "clean", "2", 0.9, "5"),
]


def _audit(rows: list[tuple], min_support: int = 1) -> va.VisionAudit:
    con = duckdb.connect()
    con.register("raw", _table(rows))
    view = vp.validate_predictions(con, "raw", file="known")
    return va.audit_predictions(con, view, source="known", evidence_sql=vp.image_evidence_sql(view),
                                suites=va.build_suites(con, view, ["all"]),
                                min_support=min_support, bootstrap=0)


def test_known_answer() -> None:
    res = _audit(KNOWN)
    s = [r for r in res.summary.to_pylist() if r["split"] is not None][0]
    assert (s["n_candidates"], s["n_excluded"], s["n_fibers"], s["n_mixed_fibers"]) == (6, 1, 2, 1)
    assert (s["ambiguous"], s["certified_false"], s["certified_true"], s["unsupported"]) == (4, 2, 0, 0)
    assert s["benchmark_only_errors"] == 1 and s["clean_accuracy"] == pytest.approx(5 / 7)
    cand = {r["candidate_id"]: r for r in res.candidates.to_pylist()}
    assert cand["f"]["status"] == "excluded" and cand["f"]["excluded_reason"].startswith("claim missing (0 of 1")
    assert cand["g"]["claim_value"] is False and cand["g"]["status"] == "certified_false"
    assert {cand[i]["status"] for i in "abcd"} == {"ambiguous"}
    # with min_support 3 the pure pair (e, g) is too small to certify
    s3 = [r for r in _audit(KNOWN, min_support=3).summary.to_pylist() if r["split"] is not None][0]
    assert (s3["unsupported"], s3["certified_false"]) == (2, 0)


@hypothesis_settings(max_examples=15, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(0, 2), st.integers(0, 4)),
                min_size=4, max_size=40))
def test_statuses_partition_candidates(draw: list[tuple[int, int, int, int]]) -> None:
    rows = []
    for i, (pred, noisy, label, conf) in enumerate(draw):
        rows.append((0, "m", f"i{i}", "clean", str(pred), conf / 4, str(label)))
        rows.append((0, "m", f"i{i}", "noise", str(noisy), 0.5, str(label)))
    res = _audit(rows, min_support=2)
    s = [r for r in res.summary.to_pylist() if r["split"] is not None][0]
    assert s["certified_true"] + s["certified_false"] + s["ambiguous"] + s["unsupported"] == len(draw)
    for f in res.fibers.to_pylist():
        assert (f["status"] == "ambiguous") == (0 < f["n_true"] < f["n"])
        assert f["status"] != "certified_true" or f["clean_correct"]  # a wrong clean prediction is never robust


# -------------------------------------------------------------------------------------- through the runner

def test_run_spec_with_the_vision_connector(settings) -> None:
    spec = spec_from_dict({
        "name": "vision-quick",
        "source": {"connector": "vision", "id": "candidate_id", "datasets": ["digits"], "digits_splits": 2,
                   "digits_models": ["logistic", "gaussian_nb"], "n_jobs": 1},
        "audits": [{"id": "pooled", "table": "images", "claim": "robust = true",
                    "evidence": ["dataset", "split", "model", "predicted", "clean_correct", "confidence_decile"]}],
        "vision": {"suites": ["all"], "bootstrap": 100},
    })
    result = run_spec(spec, settings)
    t = result.tables
    assert {"summary", "fibers", "candidates", "choice", "metrics"} <= set(t)
    rows = [r for r in t["summary"].to_pylist() if r["source"] == "vision-digits"]
    assert len(rows) == 2 * 2 + 2
    assert any("pooled fiber audit agrees" in n for n in result.notes)
    assert any(n.startswith("vision-digits: median ambiguous") for n in result.notes)
    # the report draws each member's clean image and corruptions from the connector's pixel table
    from dcaudit.reports import explorer
    from dcaudit.reports.html import Package

    data = explorer.explorer_data(Package(result.run_dir))
    assert data is not None and any(str(k).startswith("i:digits-pixels:") for k in data["pics"])
    # the second run reuses the cached predictions instead of refitting
    again = v.prepare(settings, v.Options(datasets=("digits",), digits_splits=2, digits_models=("logistic", "gaussian_nb")))
    assert any("reused" in n for n in again.notes)


def test_run_spec_with_a_user_predictions_file(settings, tmp_path: Path) -> None:
    rows = ["split,model,image_id,condition,predicted,label,confidence"]
    rng = np.random.default_rng(3)
    for split in range(2):
        for model in ("a", "b"):
            for img in range(30):
                label = img % 3
                rows.append(f"{split},{model},{img},clean,{label if rng.random() < 0.9 else 0},{label},"
                            f"{rng.random():.3f}")
                rows.append(f"{split},{model},{img},jpeg,{label if rng.random() < 0.6 else 1},{label},0.5")
    path = tmp_path / "my_preds.csv"
    path.write_text("\n".join(rows) + "\n")
    # the long table repeats each image_id per split, model and condition: kept, and reported as findings
    raw = {"name": "mine", "source": {"path": str(path), "id": "image_id", "duplicates": "keep"},
           "audits": [{"id": "clean-evidence", "claim": "predicted = label", "evidence": ["predicted"]}],
           "vision": {"suites": ["all"], "conditions": ["jpeg"], "bootstrap": 50}}
    result = run_spec(spec_from_dict(raw), settings)
    summary = [r for r in result.tables["summary"].to_pylist() if r["audit_id"] == "robust[all]"]
    assert {r["source"] for r in summary} == {"my_preds.csv"} and len(summary) == 2 * 2 + 2
    assert set(result.tables["findings"].column("kind").to_pylist()) <= {"duplicate_id", "duplicate_id_conflicting"}
    raw["vision"]["conditions"] = ["blur"]
    with pytest.raises(InputError, match="unknown condition 'jpeg'") as exc:
        run_spec(spec_from_dict({**raw, "name": "mine2"}), settings)
    assert exc.value.row == 2 and exc.value.file == str(path)   # the first jpeg row is data row 2


def test_vision_section_values_are_typed_not_converted() -> None:
    """Names as a list or one comma-separated string (a string was split into its characters), every other
    value of its field's type: 2.5 bins, "3" bins, true bins, "false" candidates were converted silently."""
    from dcaudit.errors import SpecError

    cfg = va.VisionConfig.from_section({"conditions": "jpeg, blur", "model_order": "m2", "suites": "all",
                                        "bootstrap": 0, "candidates": False})
    assert cfg.conditions == ("jpeg", "blur") and cfg.model_order == ("m2",) and cfg.suites == ("all",)
    assert cfg.bootstrap == 0 and cfg.candidates is False
    assert va.VisionConfig.from_section({}) == va.VisionConfig()
    assert va.VisionConfig.from_section({"confidence_bins": np.int64(4)}).confidence_bins == 4  # numpy's integers
    for section, message in [({"confidence_bins": 2.5}, "confidence_bins must be an integer, got 2.5"),
                             ({"confidence_bins": "3"}, "confidence_bins must be an integer, got '3'"),
                             ({"confidence_bins": True}, "confidence_bins must be an integer, got True"),
                             ({"min_support": 2.9}, "min_support must be an integer, got 2.9"),
                             ({"candidates": "false"}, "candidates must be true or false, got 'false'"),
                             ({"bootstrap": -1}, "bootstrap must be from 0"),
                             ({"bootstrap": 2.5}, "bootstrap must be an integer, got 2.5"),
                             ({"confidence_bins": 10**12}, "confidence_bins must be from 2 to 1000"),
                             ({"conditions": []}, "conditions is empty"),
                             ({"model_order": ["a", 2]}, "model_order must be a list of names")]:
        with pytest.raises(SpecError, match=f"^\\[vision\\].*{message}"):
            va.VisionConfig.from_section(section)
    with pytest.raises(SpecError, match="confidence_bins must be from 2"):
        va.VisionConfig(confidence_bins=1)  # constructed directly (the API), checked the same


def test_user_predictions_with_comma_separated_conditions(settings, tmp_path: Path) -> None:
    """conditions = "jpeg,blur" declares two corruptions ("unknown condition 'jpeg'; declared: clean, j, p, …")."""
    rng = np.random.default_rng(1)
    rows = ["rid,split,model,image_id,condition,predicted,label,confidence"]
    for split in range(3):
        for model in ("m1", "m2"):
            for img in range(30):
                for cond in ("clean", "jpeg", "blur"):
                    rows.append(f"r{len(rows)},{split},{model},img{img},{cond},{rng.integers(0, 3)},{rng.integers(0, 3)},"
                                f"{rng.random():.3f}")
    path = tmp_path / "preds2.csv"
    path.write_text("\n".join(rows) + "\n")
    raw = {"name": "vis", "source": {"path": str(path), "id": "rid"},
           "audits": [{"id": "plain", "claim": "label = 1", "evidence": ["predicted"]}],
           "vision": {"suites": ["all", "each"], "conditions": "jpeg,blur", "model_order": "m2", "bootstrap": 20}}
    result = run_spec(spec_from_dict(raw), settings)
    summary = result.tables["summary"].to_pylist()
    assert {r["audit_id"] for r in summary} >= {"robust[all]", "robust[jpeg]", "robust[blur]"}
    choice = [r for r in result.tables["choice"].to_pylist() if r["audit_id"] == "robust[all]"]
    assert {r["model"] for r in choice} == {"m1", "m2"}


def test_a_split_without_audited_candidates_has_no_winner() -> None:
    """Split 1 holds only images without a clean prediction: its models were chosen anyway (by model order, their
    fractions NULL), counted as winners that differ, and the suite's bootstrap median was NaN with numpy's
    'All-NaN slice' warning wherever a draw held that split alone."""
    import warnings

    rows = [(0, m, img, cond, "1", 0.9, "1" if img == "a" or m == "m2" else "2")
            for m in ("m1", "m2") for img in "ab" for cond in ("clean", "noise")]
    rows += [(1, m, img, "noise", "1", 0.5, "1") for m in ("m1", "m2") for img in "ab"]
    con = duckdb.connect()
    con.register("raw", _table(rows))
    view = vp.validate_predictions(con, "raw", file="known")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = va.audit_predictions(con, view, source="known", evidence_sql=vp.image_evidence_sql(view),
                                   suites=va.build_suites(con, view, ["all"]), bootstrap=200)
    choice = [(r["split"], r["model"], r["rank_by_benchmark"], r["chosen_by_benchmark"], r["chosen_by_robustness"],
               r["chosen_by_certification"]) for r in res.choice.to_pylist()]
    # split 0: m2 wins clean accuracy and robustness; both certify everything, the tie goes to m1 (model order)
    assert choice == [(0, "m1", 2, False, False, True), (0, "m2", 1, True, True, False),
                      (1, "m1", None, False, False, False), (1, "m2", None, False, False, False)]
    metrics = {r["metric"]: r for r in res.metrics.to_pylist()}
    differs = metrics["clean_winner_differs_from_robust_winner"]
    assert (differs["value"], differs["ci_high"]) == (0.0, va.wilson(0, 1)[1])   # split 0 alone
    boot = metrics["median_ambiguous_fraction_bootstrap"]
    assert boot["value"] == 0.0 and (boot["ci_low"], boot["ci_high"]) == (0.0, 0.0)
