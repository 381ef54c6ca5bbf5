"""Controlled linear response spaces: geometry invariants, sound certificates, the three experiments."""

from __future__ import annotations

import numpy as np
import pyarrow.compute as pc
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from dcaudit.audits import controlled as c

finite = st.floats(-3, 3, allow_nan=False, allow_infinity=False, allow_subnormal=False)
ROUNDING = 1e-9     # floating-point slack: soundness is exact in real arithmetic, not to the last ulp


@st.composite
def probe_matrices(draw: st.DrawFn) -> np.ndarray:
    """m probes in R^d, sometimes with exactly dependent rows (a row = a combination of others)."""
    d = draw(st.integers(2, 8))
    m = draw(st.integers(1, d))
    rows = draw(arrays(np.float64, (m, d), elements=finite))
    if m > 1 and draw(st.booleans()):
        mix = draw(arrays(np.float64, (m - 1,), elements=st.floats(-2, 2)))
        rows[-1] = mix @ rows[:-1]
    return rows


# ------------------------------------------------------------------------------------------ geometry

@settings(max_examples=150, deadline=None)
@given(probe_matrices())
def test_projector_is_idempotent_symmetric_and_fixes_the_probes(probes: np.ndarray) -> None:
    p = c.projector(probes)
    assert np.allclose(p @ p, p, atol=1e-8)
    assert np.allclose(p, p.T, atol=1e-12)
    assert np.isclose(np.trace(p), c.span_rank(probes), atol=1e-6)   # trace of a projector = its rank
    assert np.allclose(probes @ p, probes, atol=1e-7)                  # every probe lies in its own span


@settings(max_examples=100, deadline=None)
@given(probe_matrices(), st.data())
def test_residual_is_zero_in_span_and_pythagorean_outside(probes: np.ndarray, data: st.DataObject) -> None:
    m, d = probes.shape
    p = c.projector(probes)
    weights = data.draw(arrays(np.float64, (m,), elements=finite))
    assert c.residual_norm(p, weights @ probes) < 1e-7                  # g = 0 for in-span probes
    k = data.draw(arrays(np.float64, (d,), elements=finite))
    g = c.residual_norm(p, k)
    assert np.isclose(g ** 2 + np.linalg.norm(p @ k) ** 2, k @ k, atol=1e-7)


def test_projector_matches_qr_of_full_rank_probes_and_batches() -> None:
    rng = np.random.default_rng(0)
    probes = rng.normal(size=(6, 4, 8))
    q = np.linalg.qr(np.swapaxes(probes, 1, 2))[0]                      # the paper's QR of Bᵀ (full rank here)
    assert np.allclose(c.projector(probes), q @ np.swapaxes(q, 1, 2), atol=1e-10)
    assert np.allclose(c.projector(probes)[3], c.projector(probes[3]))
    # zero rows (padding for smaller spans) change nothing
    padded = np.concatenate([probes[0], np.zeros((3, 8))])
    assert np.allclose(c.projector(padded), c.projector(probes[0]))


@settings(max_examples=100, deadline=None)
@given(probe_matrices(), st.data())
def test_certificates_are_sound_when_the_radius_bounds_the_hidden_component(probes: np.ndarray,
                                                                            data: st.DataObject) -> None:
    """No certified candidate is wrong when R_c ≥ ‖(I − P_B)x‖ (Cauchy–Schwarz on the residual)."""
    d = probes.shape[1]
    p = c.projector(probes)
    k_star = data.draw(arrays(np.float64, (d,), elements=finite))
    x = data.draw(arrays(np.float64, (12, d), elements=finite))         # hidden systems of 12 candidates
    slack = data.draw(arrays(np.float64, (12,), elements=st.floats(0, 2)))
    tau = data.draw(st.floats(-3, 3))
    hidden = np.linalg.norm(x - x @ p, axis=1)
    y_hat, y_true = x @ p @ k_star, x @ k_star
    status = c.certify(y_hat, hidden + slack + 1e-9, c.residual_norm(p, k_star), tau)
    assert not np.any((status == c.CERTIFIED_TRUE) & (y_true <= tau - ROUNDING))
    assert not np.any((status == c.CERTIFIED_FALSE) & (y_true > tau + ROUNDING))
    assert set(c.status_names(status)) <= {"certified_true", "certified_false", "ambiguous"}


def test_certify_trichotomy_at_the_edges() -> None:
    status = c.certify(np.array([1.0, -1.0, 0.1, 0.0]), 1.0, np.array([0.5, 0.5, 0.5, 0.0]), 0.0)
    assert c.status_names(status).tolist() == ["certified_true", "certified_false", "ambiguous", "certified_false"]


# ----------------------------------------------------------------------------------------- experiments

def test_conformal_transfer_collapses_with_few_seeds() -> None:
    runs = c.conformal_runs(c.ConformalConfig(seeds=4))
    cov = {k: v.mean() for k, v in runs.coverage.items()}
    assert cov["benchmark"] > 0.85 and cov["response_rank"] > 0.85
    assert cov["transfer"] < 0.3 < cov["benchmark"] - 0.5                # far below its own channel
    assert np.allclose(runs.width["response_rank"], 4 * runs.residual)   # ŷ ± 2g
    assert np.all(runs.width["oracle"] > 5 * runs.width["benchmark"])


def test_conformal_with_the_papers_seeds_is_near_the_published_figures() -> None:
    table = c.conformal_experiment()["metrics"]
    got = dict(zip(table["metric"].to_pylist(), table["value"].to_pylist(), strict=True))
    published = {"benchmark_coverage": 0.9498, "transfer_coverage": 0.1007, "oracle_coverage": 0.9442,
                 "response_rank_coverage": 0.9491, "deployment_residual": 0.819, "benchmark_width": 0.201,
                 "oracle_width": 3.250, "response_rank_width": 3.276}
    for name, value in published.items():
        assert got[name] == pytest.approx(value, abs=0.01 * max(1.0, value)), name
    assert table.column_names[:4] == ["source", "experiment", "setting", "metric"]
    assert set(table["source"].to_pylist()) == {"controlled"}


def test_leaderboard_best_mae_is_the_worst_certifier() -> None:
    cfg = c.LeaderboardConfig(seeds=5)
    runs = c.leaderboard_runs(cfg, "structured")
    assert np.all(np.argmin(runs.mae, axis=1) == 0)                      # model A (span rank 3) wins on MAE
    assert np.all(runs.certified[:, 0] < runs.certified[:, -1])           # … and certifies less than E
    assert runs.certified[:, -1].mean() > 0.95
    assert np.all(np.diff(runs.residual.mean(axis=0)) < 0)               # wider span, smaller residual
    assert c.best_benchmark_not_best_certifier(runs).all()
    tables = c.leaderboard_experiment(cfg)
    choice = tables["choice"]
    means = choice.filter(pc.is_null(choice["seed"]))
    assert means.num_rows == 10 and set(means["setting"].to_pylist()) == {"structured", "null"}
    structured = means.filter(pc.equal(means["setting"], "structured")).to_pylist()
    assert [r["rank_by_benchmark"] for r in structured] == [1, 2, 3, 4, 5]
    assert [r["rank_by_certification"] for r in structured] == [5, 4, 3, 2, 1]


def test_leaderboard_with_the_papers_seeds_is_near_the_published_figures() -> None:
    metrics = c.leaderboard_experiment()["metrics"].to_pylist()
    got = {(r["setting"], r["metric"]): r["value"] for r in metrics}
    assert got[("structured", "best_mae_certified_fraction")] == pytest.approx(0.0624, abs=0.01)
    assert got[("structured", "worst_mae_certified_fraction")] == pytest.approx(1.0, abs=0.005)
    assert got[("structured", "best_mae_not_best_certifier")] == 1.0
    assert got[("null", "best_mae_not_best_certifier")] == pytest.approx(0.72, abs=0.1)
    # counting ties as best can only lower the reversal rate
    assert got[("null", "best_mae_not_among_best_certifiers")] <= got[("null", "best_mae_not_best_certifier")]


def test_acquisition_residual_greedy_completes_fastest() -> None:
    tables = c.acquisition_experiment(c.AcquisitionConfig(random_trials=20, geometries=2, geometry_random_trials=5))
    comp = tables["completion"]
    means = comp.filter(pc.is_null(comp["seed"]))
    curve = {(r["policy"], r["step"]): r["certified_fraction"] for r in means.to_pylist()}
    assert {p for p, _ in curve} == set(c.POLICIES)
    assert curve[("response_rank", 0)] == pytest.approx(0.4575, abs=0.01)
    assert curve[("response_rank", 3)] == pytest.approx(0.7075, abs=0.01)
    for policy in c.POLICIES[1:]:
        assert curve[("response_rank", 3)] > curve[(policy, 3)], policy
        assert curve[(policy, 0)] == pytest.approx(curve[("response_rank", 0)])
    assert all(curve[(p, 4)] == 1.0 for p in c.POLICIES)                 # 4 + 4 generic probes span R^8
    random_rows = comp.filter(pc.equal(comp["policy"], "random"))
    assert random_rows.filter(pc.is_valid(random_rows["seed"])).num_rows == 20 * 13
    mean_random = means.filter(pc.equal(means["policy"], "random")).to_pylist()
    assert all(r["p10"] - 1e-12 <= r["certified_fraction"] <= r["p90"] + 1e-12 for r in mean_random)
    radius = [r for r in tables["metrics"].to_pylist() if r["metric"] == "certified_after_3_probes"]
    by_scale = {(r["setting"], r["radius_scale"]): r["value"] for r in radius}
    assert by_scale[("none", 0.5)] > by_scale[("none", 1.0)] > by_scale[("none", 2.0)]   # larger R_c, fewer
    spread = {r["setting"]: r for r in tables["metrics"].to_pylist() if r["metric"].endswith("across_geometries")
              and r["metric"].startswith("certified")}
    assert spread["response_rank"]["n_seeds"] == 2
    assert spread["response_rank"]["min"] > spread["none"]["max"]        # probes always help the greedy policy


def test_simulate_cli_registers_a_run_with_metrics(settings) -> None:  # noqa: ANN001 - fixture
    from dcaudit.catalog import Catalog
    from dcaudit.cli import cli

    result = CliRunner().invoke(cli, ["simulate", "conformal", "--seeds", "3", "--quiet"])
    assert result.exit_code == 0, result.output
    run_id = result.output.strip().splitlines()[-1]
    catalog = Catalog(settings)
    runs = catalog.query(f"SELECT status, spec FROM runs WHERE run_id = '{run_id}'").to_pylist()
    assert runs == [{"status": "succeeded", "spec": "simulate-conformal"}]
    rows = catalog.query(f"SELECT metric, value, n_seeds, source FROM metrics WHERE run_id = '{run_id}'").to_pylist()
    names = {r["metric"] for r in rows}
    for kind in ("benchmark", "transfer", "oracle", "response_rank"):
        assert {f"{kind}_coverage", f"{kind}_width"} <= names
    assert all(r["n_seeds"] == 3 and r["source"] == "controlled" for r in rows)
    bad = CliRunner().invoke(cli, ["simulate", "conformal", "--seeds", "0"])
    assert bad.exit_code != 0
