"""Resolution sensitivity: window counts against brute force, known answers, one row per rule."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dcaudit.audits.fibers import AuditLabels
from dcaudit.audits.sensitivity import knn_counts, sensitivity, tolerance_counts
from dcaudit.claims import parse_claim
from dcaudit.errors import SpecError

LABELS = AuditLabels("test", "s")


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.tuples(st.integers(0, 20), st.booleans()), min_size=1, max_size=40),
       tol=st.integers(0, 5), k=st.integers(1, 12))
def test_window_counts_match_brute_force(values: list[tuple[int, bool]], tol: int, k: int) -> None:
    values = sorted(values)
    x = np.array([v for v, _ in values], dtype=float) / 4  # quarter steps: exact in binary
    y = np.array([b for _, b in values], dtype=bool)
    t = tol / 4
    got = tolerance_counts(x, y, t)
    for i in range(len(x)):
        inside = np.abs(x - x[i]) <= t
        assert got.size[i] == inside.sum() and got.n_true[i] == y[inside].sum()
    got = knn_counts(y, k)
    n = len(y)
    kk = min(k, n)
    for i in range(n):
        start = min(max(i - (kk - 1) // 2, 0), n - kk)
        block = y[start:start + kk]
        assert i - start < kk  # the candidate is inside its own neighbourhood
        assert got.size[i] == kk and got.n_true[i] == block.sum()


def _con(table: pa.Table) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.register("t", table)
    return con


def test_known_answers() -> None:
    # x = 0..9; the claim is true from 5 on. Two quantile bins split exactly there -> all certified;
    # knn:3 mixes only around the boundary (candidates 4 and 5); a window of 1.0 mixes 4 and 5 too.
    table = pa.table({"id": [f"c{i}" for i in range(10)], "x": np.arange(10.0),
                      "ref": np.arange(10.0) + 0.5, "y": [0] * 5 + [1] * 5})
    out = sensitivity(_con(table), "t", id_column="id", evidence="x", claim=parse_claim("y = 1"),
                      rules=["quantile:2", "knn:3", "window:1.0"], tolerances=["mae"], reference="ref",
                      min_support=2, labels=LABELS)
    rows = {r["fiber_rule"]: r for r in out.to_pylist()}
    assert rows["quantile:2"]["certified_fraction"] == 1.0 and rows["quantile:2"]["median_fiber_size"] == 5
    assert rows["knn:3"]["ambiguous"] == 2 and rows["knn:3"]["median_fiber_size"] == 3
    assert rows["window:1"]["ambiguous"] == 2
    assert rows["window:1"]["median_fiber_size"] == 3  # ends have 2, the interior 3
    mae = rows["window:0.5"]
    assert mae["tolerance_source"] == "mae" and mae["tolerance"] == pytest.approx(0.5)
    assert mae["median_fiber_size"] == 1 and mae["unsupported"] == 10  # every window is itself: below support
    for r in rows.values():
        assert r["certified_fraction"] + r["ambiguous_fraction"] + r["unsupported_fraction"] == pytest.approx(1.0)


def test_models_get_their_own_rows() -> None:
    rng = np.random.default_rng(0)
    n = 500
    ref = rng.normal(size=n)
    rows = {"id": [], "model": [], "x": [], "ref": [], "gap": []}
    for model, noise in (("sharp", 0.02), ("blurry", 1.0)):
        rows["id"] += [f"m{i}" for i in range(n)]
        rows["model"] += [model] * n
        rows["x"] += list(ref + rng.normal(scale=noise, size=n))
        rows["ref"] += list(ref)
        rows["gap"] += list(ref)
    out = sensitivity(_con(pa.table(rows)), "t", id_column="id", evidence="x", claim=parse_claim("gap > 0.5"),
                      rules=["quantile:10", "knn:25"], tolerances=["mae", "q80"], reference="ref", min_support=5,
                      labels=LABELS, model_column="model")
    assert out.num_rows == 8
    by = {(r["model"], r["fiber_rule"].split(":")[0] if r["tolerance_source"] is None else r["tolerance_source"]): r
          for r in out.to_pylist()}
    # a sharp predictor of the claim's own variable certifies far more at every resolution
    for rule in ("quantile", "knn", "mae", "q80"):
        assert by[("sharp", rule)]["certified_fraction"] > by[("blurry", rule)]["certified_fraction"]
    assert by[("sharp", "q80")]["tolerance"] > by[("sharp", "mae")]["tolerance"] * 0.9


def test_rows_without_a_model_are_in_no_model() -> None:
    """A NULL model was compared with '=' (matching no row), and the run stopped on an empty model."""
    rng = np.random.default_rng(1)
    n = 200
    ref = rng.normal(size=n)
    table = pa.table({"id": [f"m{i}" for i in range(n)], "model": ["a"] * (n // 2) + [None] * (n - n // 2),
                      "x": ref + rng.normal(scale=0.1, size=n), "ref": ref, "gap": ref})
    out = sensitivity(_con(table), "t", id_column="id", evidence="x", claim=parse_claim("gap > 0.5"),
                      rules=["quantile:5"], tolerances=["mae"], reference="ref", min_support=2, labels=LABELS,
                      model_column="model")
    assert {r["model"] for r in out.to_pylist()} == {"a"}
    assert {r["n_candidates"] for r in out.to_pylist()} == {n // 2}
    empty = pa.table({"id": ["a", "b"], "model": pa.array([None, None], pa.string()), "x": [1.0, 2.0],
                      "ref": [1.0, 2.0], "gap": [1.0, 2.0]})
    with pytest.raises(SpecError, match="model_column = 'model': the column has no values"):
        sensitivity(_con(empty), "t", id_column="id", evidence="x", claim=parse_claim("gap > 0.5"),
                    tolerances=["mae"], reference="ref", labels=LABELS, model_column="model")


def test_tolerance_without_reference_is_refused() -> None:
    table = pa.table({"id": ["a"], "x": [1.0], "y": [1]})
    with pytest.raises(SpecError, match="reference"):
        sensitivity(_con(table), "t", id_column="id", evidence="x", claim=parse_claim("y = 1"),
                    tolerances=["mae"], labels=LABELS)


@given(st.lists(st.sampled_from([i / 100 for i in range(60)]), min_size=1, max_size=30),
       st.sampled_from([i / 100 for i in range(30)]))
def test_windows_are_exactly_the_values_within_the_width_both_ways(values: list[float], tol: float) -> None:
    """|Δ| <= T, compared on the difference: 0.04 and 0.14 are 0.1 apart in floating point, so each is in
    the other's window:0.1 (searching for x ± T alone put 0.14 outside the window of 0.04)."""
    import numpy as np

    from dcaudit.audits.windows import window_bounds

    v = np.sort(np.asarray(values))
    lo, hi = window_bounds(v, v, tol)
    for i, c in enumerate(v):
        assert list(range(lo[i], hi[i])) == [j for j in range(len(v)) if abs(v[j] - c) <= tol]


def test_many_windows_search_on_two_threads_as_on_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """From 2^16 centres the two searches of window_bounds run on two threads: the same bounds as one thread,
    NaN and infinite centres included."""
    import numpy as np

    from dcaudit.audits import windows

    rng = np.random.default_rng(5)
    values = np.sort(rng.integers(0, 500, 200_000) / 100)
    centres = rng.integers(0, 520, windows._THREADED_SEARCH + 7) / 100
    centres[::997] = np.nan
    centres[::991] = np.inf
    tol = rng.integers(0, 20, len(centres)) / 100
    threaded = windows.window_bounds(values, centres, tol)
    monkeypatch.setattr(windows, "_THREADED_SEARCH", len(centres) + 1)
    one = windows.window_bounds(values, centres, tol)
    assert np.array_equal(threaded[0], one[0]) and np.array_equal(threaded[1], one[1])


def test_a_window_at_a_decimal_boundary_is_symmetric() -> None:
    import polars as pl

    import dcaudit

    r = dcaudit.sensitivity(pl.DataFrame({"x": [0.04, 0.14], "y": [1, 0]}), evidence=["x"], claim="y = 1",
                            rules=["window:0.1"])
    assert r.sensitivity.select("certified_true", "certified_false", "ambiguous").rows() == [(0, 0, 2)]
