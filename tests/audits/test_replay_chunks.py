"""The window replay a chunk of seeds at a time is the replay of all seeds at once, table for table; the
one-pass price decisions and the shared Clopper-Pearson bounds are the per-price loop's and cp_upper's."""

from __future__ import annotations

import math

import duckdb
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dcaudit.audits import price as pr
from dcaudit.audits import replay as rp
from dcaudit.audits.fibers import AuditLabels
from dcaudit.claims import parse_claim


def _table(n: int, models: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    x = np.round(rng.normal(size=n * models), 2)  # ties, so windows share edges
    x[rng.integers(0, len(x), 5)] = np.nan
    ref = x + rng.normal(scale=0.3, size=len(x))
    ref[rng.integers(0, len(x), 7)] = np.nan
    con = duckdb.connect()
    con.register("src", pa.table({"x": x, "ref": ref}))
    xs = con.execute("SELECT x, ref FROM src").fetchall()
    rows = [{"id": f"c{i % n}", "model": f"m{i // n}", "x": a, "ref": b, "y": int((a or 0) + rng.normal() > 0.2)}
            for i, (a, b) in enumerate(xs)]
    return pa.Table.from_pylist(rows)


def _window_replay(source: pa.Table, tolerance: str, cfg: rp.ReplayConfig) -> rp.ReplayResult:
    """The window replay of ``source`` (id, model, x, ref, y) on a fresh two-thread database."""
    con = duckdb.connect()
    con.execute("SET threads = 2")
    con.register("src", source)
    con.execute("CREATE TABLE t AS SELECT * FROM src")
    return rp.window_replay(con, "t", id_column="id", window=rp.WindowSpec("x", rp.parse_tolerance(tolerance), "ref"),
                            claim=parse_claim("y = 1"), config=cfg, labels=AuditLabels("s", "a"),
                            model_column="model")


@pytest.mark.parametrize(("tolerance", "mode"), [("mae", "exact"), ("q80", "calibrated"), ("0.3", "familywise"),
                                                 ("mae", "calibrated")])
@pytest.mark.parametrize("entries", [700, 2000])  # 900 rows: one seed per chunk; two, the last chunk one
def test_chunks_of_seeds_give_the_same_tables(monkeypatch: pytest.MonkeyPatch, tolerance: str, mode: str,
                                              entries: int) -> None:
    table = _table(300, 3, 4)
    cfg = rp.ReplayConfig(seeds=13, min_support=3, mode=mode)  # type: ignore[arg-type]

    whole = _window_replay(table, tolerance, cfg)
    monkeypatch.setattr(rp, "_CHUNK_ENTRIES", entries)
    chunked = _window_replay(table, tolerance, cfg)
    assert chunked.replay.equals(whole.replay)
    assert chunked.costs.equals(whole.costs)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 300), groups=st.integers(1, 6), data=st.data())
def test_price_decisions_in_one_pass_are_the_per_price_loop(n: int, groups: int, data: st.DataObject) -> None:
    rng = np.random.default_rng(n * 7 + groups)
    group = rng.integers(0, groups, n)
    estimate = rng.choice(np.array([0.0, 0.001, 0.004, 0.01, 0.3, 0.5, 0.7, 1.0, math.nan]), n)
    wrong = rng.integers(0, 5, n).astype(float)
    n_test = wrong + rng.integers(0, 5, n)
    prices = np.asarray(data.draw(st.lists(st.sampled_from([0.0, 0.001, 0.005, 0.01, 0.5, 0.7, 2.0]),
                                           min_size=1, max_size=8)))
    false, measured = pr.price_decisions(group, groups, estimate, wrong, n_test, prices)
    for i, price in enumerate(prices):
        act = estimate < price
        assert np.array_equal(false[i], np.bincount(group, weights=np.where(act, wrong, 0.0), minlength=groups))
        assert np.array_equal(measured[i], np.bincount(group, weights=np.where(act, 0.0, n_test), minlength=groups))


def test_bound_cache_is_cp_upper() -> None:
    cache = pr.BoundCache(0.05)
    rng = np.random.default_rng(1)
    for _ in range(5):  # pairs repeat across calls, as across chunks of seeds
        n = rng.integers(0, 60, 500)
        k = np.minimum(rng.integers(0, 10, 500), n)
        assert np.array_equal(cache(k, n), pr.cp_upper(k, n, 0.05))
    assert len(cache.keys) == len(np.unique(cache.keys))


@pytest.mark.parametrize("tolerance", ["mae", "q80"])
def test_a_window_replay_does_not_depend_on_row_order(tolerance: str) -> None:
    """The mae tolerance is a float mean over each (model, seed)'s calibration errors, summed in row order: the
    rows of a model are put in one order (id hash, evidence, reference) before it, so shuffled input — or a
    parallel scan handing rows over in another order — gives the same tolerance to the last bit, and so the
    same windows."""
    table = _table(3000, 3, 11)
    shuffled = table.take(np.random.default_rng(5).permutation(table.num_rows))
    cfg = rp.ReplayConfig(seeds=7, min_support=3)

    first = _window_replay(table, tolerance, cfg)
    again = _window_replay(shuffled, tolerance, cfg)
    assert again.replay.equals(first.replay)
    assert again.costs.equals(first.costs)
