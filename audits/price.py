"""Decisions at a price: the price-aware policy, family-wise certification and the ``costs`` table.

A replay (``dcaudit.audits.replay``) gives, per group (a seed, or a model × seed) and per decision
unit (a fiber, or the window of one test candidate), the calibration counts of the unit and what the
benchmark-only action (its majority) would get wrong on test. This module turns those into decisions
that depend on the price λ of one measurement, in units of one false decision:

* ``price_aware``: act on the unit's majority when its estimated error rate is *below* λ, else measure.
  The estimate is the posterior mean of the error rate under a Jeffreys prior, ``(k + ½) / (n + 1)``
  with ``k`` calibration members contradicting the action among ``n`` (an unseen fiber: ``½``);
* ``price_aware_conservative``: the same rule on the one-sided Clopper–Pearson upper bound at
  confidence ``1 − δ`` (an unseen fiber: 1, always measured).

Acting costs the expected error, measuring costs λ, so the rule is the Bayes decision per unit
under the point estimate. Invariants (tested): at λ = 0 both variants measure everything (cost 0);
the measured share never rises with λ; the point variant acts everywhere once λ > ½, where it *is*
the benchmark-only action; the false decisions of either variant are a subset of the benchmark-only
action's (they act on the same decision, on fewer units).

Family-wise certification (``mode = "familywise"`` of a replay): every unit with at least
``min_support`` calibration members is a hypothesis H₀: "its error rate exceeds ε", tested with the
exact binomial p-value ``P(X ≤ k | n, ε)``; Holm's step-down procedure at level α = δ across the
units of one group certifies the rejected ones, so P(any certified unit's error rate > ε) ≤ α under
any dependence between units. (Per-unit ``calibrated`` mode is the same test without the correction:
``cp_upper(k, n, δ) <= ε`` exactly when ``P(X ≤ k | n, ε) <= δ``.)

The ``costs`` table: one row per policy × price × (model ×) seed and one summary row per policy ×
price (× model, and pooled over models with ``model`` NULL) with seed NULL. See :func:`cost_table`.
Everything is vectorised numpy; the only Python loop is over the handful of prices.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from dcaudit import arrays, defaults
from dcaudit.splits import exact_seeds

BASELINES = tuple(p for p in defaults.REPLAY_POLICIES if p != "certified_only")  # the fixed policies that decide all
COST_POLICIES = (*BASELINES, *defaults.PRICE_AWARE_POLICIES)
INTERVAL_LEVEL = 0.95


_prefetching: list[object] = []  # the background import, once per process


def prefetch_special() -> None:
    """Start importing ``scipy.special`` on a background thread, once per process.

    The import takes ~0.35 s (most of it scipy's array-API layer, not the functions used here), more than a
    1e6-candidate replay's split pass. Started when a replay stage begins, it overlaps that pass: DuckDB and
    numpy's large-array loops release the GIL. :func:`cp_upper` and the others import it as before; Python's
    import lock makes them wait for a load still under way, and a failed load is theirs to report."""
    import contextlib
    import sys
    import threading

    if _prefetching or "scipy.special" in sys.modules:
        return

    def load() -> None:
        with contextlib.suppress(Exception):  # the caller's own import raises it where it is needed
            import scipy.special  # noqa: F401

    thread = threading.Thread(target=load, name="dcaudit-import-scipy-special", daemon=True)
    _prefetching.append(thread)
    thread.start()


def cp_upper(k: np.ndarray, n: np.ndarray, delta: float | np.ndarray) -> np.ndarray:
    """One-sided Clopper–Pearson upper bound on a rate, k events in n trials, confidence 1 − delta."""
    from scipy.special import betaincinv  # scipy.stats costs a second to import; this does not

    k = np.asarray(k, dtype=float)
    n = np.asarray(n, dtype=float)
    a, b = k + 1.0, np.maximum(n - k, 1.0)
    with np.errstate(invalid="ignore"):
        bound = betaincinv(a, b, 1.0 - np.asarray(delta, dtype=float))
    # k = n (or no trials) bounds nothing.
    return np.where((k >= n) | (n <= 0), 1.0, bound)


def cp_upper_pairs(k: np.ndarray, n: np.ndarray, delta: float) -> np.ndarray:
    """:func:`cp_upper` evaluated once per distinct (k, n) pair (windows repeat a few pairs millions of times)."""
    k = np.asarray(k, dtype=np.int64)
    n = np.asarray(n, dtype=np.int64)
    if not len(k):
        return np.zeros(0)
    span = int(n.max(initial=0)) + 1
    pairs, inverse = arrays.unique_codes(k * span + n, (int(k.max(initial=0)) + 1) * span)
    return cp_upper(pairs // span, pairs % span, delta)[inverse]


def jeffreys_mean(k: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Posterior mean of a rate under the Jeffreys prior Beta(½, ½): (k + ½) / (n + 1)."""
    return (np.asarray(k, dtype=float) + 0.5) / (np.asarray(n, dtype=float) + 1.0)


def binomial_pvalue(k: np.ndarray, n: np.ndarray, epsilon: float) -> np.ndarray:
    """P(X <= k) for X ~ Binomial(n, epsilon): the exact p-value of H0 "rate > epsilon" (small when k/n << eps)."""
    from scipy.special import betainc

    k = np.asarray(k, dtype=float)
    n = np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore"):  # P(X <= k) = I_{1 - eps}(n - k, k + 1) for k < n
        tail = betainc(np.maximum(n - k, 1.0), k + 1.0, 1.0 - epsilon)
    return np.where((n > 0) & (k < n), tail, 1.0)


def holm(group: np.ndarray, pvalue: np.ndarray, alpha: float) -> np.ndarray:
    """Holm's step-down rejections within each group, vectorised (no loop over groups).

    Within a group of m hypotheses sorted by p-value, the i-th (0-based) is rejected when every
    p-value up to it satisfies ``p_(j) <= alpha / (m - j)``. Controls the family-wise error rate at
    ``alpha`` per group under arbitrary dependence.
    """
    group = np.asarray(group, dtype=np.int64)
    pvalue = np.asarray(pvalue, dtype=float)
    out = np.zeros(len(group), dtype=bool)
    if not len(group):
        return out
    order = np.lexsort((pvalue, group))
    g, p = group[order], pvalue[order]
    starts = np.flatnonzero(np.concatenate(([True], g[1:] != g[:-1])))
    size = np.diff(np.append(starts, len(g)))
    start_of = np.repeat(starts, size)
    rank = np.arange(len(g)) - start_of
    m = np.repeat(size, size)
    fail = ~(p <= alpha / (m - rank))
    failed = np.cumsum(fail)
    before = failed[start_of] - fail[start_of]  # failures before the group's first hypothesis
    out[order] = (failed - before) == 0
    return out


def price_decisions(group: np.ndarray, n_groups: int, estimate: np.ndarray, wrong: np.ndarray,
                    n_test: np.ndarray, prices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(false decisions, measurements) per (price, group) when a unit is acted on iff ``estimate < price``.

    ``wrong`` / ``n_test``: per unit, test candidates the action gets wrong / all its test candidates.
    A unit is acted on at every price above its estimate, so one ``bincount`` over (group, number of
    grid prices at or below the estimate) and a cumulative sum over the prices give every price at once
    (counts are whole numbers: the sums are exact in any order). Other weights take one pass per price.
    """
    p = np.asarray(prices, dtype=float)
    wrong = np.asarray(wrong, dtype=float)
    n_test = np.asarray(n_test, dtype=float)
    whole = bool(np.all(wrong == np.floor(wrong)) and np.all(n_test == np.floor(n_test)))
    if not whole:  # pragma: no cover - the replays pass counts
        false = np.zeros((len(p), n_groups))
        measured = np.zeros((len(p), n_groups))
        for i, price in enumerate(p):  # the ~8 prices of the grid
            act = estimate < price
            false[i] = np.bincount(group, weights=np.where(act, wrong, 0.0), minlength=n_groups)
            measured[i] = np.bincount(group, weights=np.where(act, 0.0, n_test), minlength=n_groups)
        return false, measured
    order = np.argsort(p, kind="stable")
    width = len(p) + 1
    below = np.searchsorted(p[order], estimate, side="right")  # acted on at the sorted prices >= this (NaN: none)
    cell = np.asarray(group, dtype=np.int64) * width + below
    w = np.bincount(cell, weights=wrong, minlength=n_groups * width).reshape(n_groups, width)
    m = np.bincount(cell, weights=n_test, minlength=n_groups * width).reshape(n_groups, width)
    acted_wrong = np.cumsum(w, axis=1)[:, :-1]                   # (group, sorted price)
    measured_sorted = m.sum(axis=1)[:, None] - np.cumsum(m, axis=1)[:, :-1]
    false = np.empty((len(p), n_groups))
    measured = np.empty((len(p), n_groups))
    false[order] = acted_wrong.T
    measured[order] = measured_sorted.T
    return false, measured


class BoundCache:
    """:func:`cp_upper` of (k, n) pairs, each computed once per replay (chunks of seeds repeat most pairs)."""

    def __init__(self, delta: float) -> None:
        self.delta = delta
        self.keys = np.zeros(0, dtype=np.int64)
        self.values = np.zeros(0)

    def __call__(self, k: np.ndarray, n: np.ndarray) -> np.ndarray:
        k = np.asarray(k, dtype=np.int64)
        n = np.asarray(n, dtype=np.int64)
        if not len(k):
            return np.zeros(0)
        span = int(n.max()) + 1
        codes, inverse = arrays.unique_codes(k * span + n, (int(k.max()) + 1) * span)
        uniq = (codes // span) * (1 << 32) + codes % span  # counts below 2^31 (window counts are 32-bit)
        pos = np.minimum(np.searchsorted(self.keys, uniq), max(len(self.keys) - 1, 0))
        hit = (pos < len(self.keys)) & (self.keys[pos] == uniq) if len(self.keys) else np.zeros(len(uniq), bool)
        out = np.empty(len(uniq))
        out[hit] = self.values[pos[hit]]
        new = uniq[~hit]
        if len(new):
            out[~hit] = cp_upper(new >> 32, new & 0xFFFFFFFF, self.delta)
            keys = np.concatenate([self.keys, new])
            order = np.argsort(keys, kind="stable")
            self.keys, self.values = keys[order], np.concatenate([self.values, out[~hit]])[order]
        return out[inverse]


def price_aware_outcomes(group: np.ndarray, n_groups: int, k_cal: np.ndarray, n_cal: np.ndarray,
                         wrong: np.ndarray, n_test: np.ndarray, prices: tuple[float, ...],
                         delta: float, bounds: BoundCache | None = None) -> dict[str, np.ndarray]:
    """Both price-aware variants for units with ``k_cal`` of ``n_cal`` calibration members contradicting the action
    (``bounds``: a cache of Clopper–Pearson bounds shared by the calls of one replay)."""
    p = np.asarray(prices, dtype=float)
    point = jeffreys_mean(k_cal, n_cal)
    conservative = bounds(k_cal, n_cal) if bounds is not None else cp_upper_pairs(k_cal, n_cal, delta)
    pa_false, pa_meas = price_decisions(group, n_groups, point, wrong, n_test, p)
    pc_false, pc_meas = price_decisions(group, n_groups, conservative, wrong, n_test, p)
    return {"pa_false": pa_false, "pa_measured": pa_meas, "pac_false": pc_false, "pac_measured": pc_meas}


# ---------------------------------------------------------------------------------------------------
# The costs table.

def _per_policy(ps: dict[str, np.ndarray], n_prices: int) -> tuple[np.ndarray, np.ndarray]:
    """(false, measured) arrays of shape (policy, price, group) for COST_POLICIES."""
    n = np.asarray(ps["n_test"], dtype=float)
    n_cert = np.asarray(ps["n_cert"], dtype=float)

    def flat(values: np.ndarray) -> np.ndarray:
        return np.broadcast_to(np.asarray(values, dtype=float), (n_prices, len(n)))

    false = np.stack([flat(ps["false_fm"]), flat(ps["false_gm"]), flat(ps["false_cert"]),
                      ps["pa_false"], ps["pac_false"]])
    measured = np.stack([flat(np.zeros_like(n)), flat(np.zeros_like(n)), flat(n - n_cert),
                         ps["pa_measured"], ps["pac_measured"]])
    return false, measured


def _t_quantile(df: np.ndarray) -> np.ndarray:
    from scipy.special import stdtrit

    df = np.asarray(df, dtype=float)
    with np.errstate(invalid="ignore"):
        return np.where(df >= 1, stdtrit(np.maximum(df, 1), 0.5 + INTERVAL_LEVEL / 2), np.nan)


def _stats(values: np.ndarray) -> dict[str, np.ndarray]:
    """Mean, p10, p90, and the t-interval of the mean over the last axis, ignoring NaN."""
    valid = ~np.isnan(values)
    count = valid.sum(axis=-1)
    mean = np.where(count > 0, np.where(valid, values, 0).sum(axis=-1) / np.maximum(count, 1), np.nan)
    dev = np.where(valid, values - mean[..., None], 0.0)
    sd = np.sqrt(np.where(count > 1, (dev ** 2).sum(axis=-1) / np.maximum(count - 1, 1), np.nan))
    half = _t_quantile(count - 1) * sd / np.sqrt(np.maximum(count, 1))
    ordered = np.sort(values, axis=-1)
    q = {}
    for level in (0.1, 0.9):
        pos = level * np.maximum(count - 1, 0)
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, np.maximum(count - 1, 0))
        a = np.take_along_axis(ordered, lo[..., None], axis=-1)[..., 0]
        b = np.take_along_axis(ordered, hi[..., None], axis=-1)[..., 0]
        q[level] = np.where(count > 0, a + (pos - lo) * (b - a), np.nan)
    return {"mean": mean, "p10": q[0.1], "p90": q[0.9], "low": mean - half, "high": mean + half, "count": count}


def _pooled(values: np.ndarray) -> np.ndarray:
    """(…, model, seed) -> (…, model + 1, models · seeds): the extra model slot pools all models (NaN padding)."""
    *lead, n_models, n_seed = values.shape
    padded = np.full((*lead, n_models + 1, n_models * n_seed), np.nan)
    padded[..., :n_models, :n_seed] = values
    padded[..., n_models, :] = values.reshape(*lead, n_models * n_seed)
    return padded


def cost_table(ps: dict[str, Any], *, prices: tuple[float, ...], const: dict[str, Any], pooled: bool) -> pa.Table:
    """The ``costs`` rows of one replay.

    ``ps`` holds per group g (model-major, the same seeds for every model): ``model``, ``seed``,
    ``n_test``, ``n_cert``, ``false_cert``, ``false_fm``, ``false_gm`` and the (price, group) arrays of
    :func:`price_aware_outcomes`. ``const``: constant label columns (source, audit_id, claim, …).

    Columns: ``policy``, ``price``, ``model``, ``seed`` (NULL on summary rows), ``n_seeds``, ``n_test``,
    ``false_decisions``, ``measurements``, ``cost`` (false decisions + price · measurements),
    ``cost_per_candidate`` (cost / test candidates), ``measured_fraction``, ``false_rate`` (false decisions
    / test candidates). Summary rows add the spread (``cost_per_candidate_p10`` / ``_p90``), the envelope
    (``envelope_cost``: the least mean cost per candidate of any policy at that price), ``cheapest``
    (this policy attains it), the band of grid prices where the policy is cheapest (``band_low`` /
    ``band_high``; NULL if never), and the paired comparison with the cheaper-on-average of the three
    fixed policies (``best_baseline``): ``diff_vs_best`` = mean over seeds of this policy's cost per
    candidate minus the baseline's on the same seed, with a 95 % t-interval (``diff_low`` / ``diff_high``).
    """
    p = np.asarray(prices, dtype=float)
    n_prices = len(p)
    model = np.asarray(ps["model"], dtype=object)
    n_groups = len(model)
    models = list(dict.fromkeys(model.tolist()))
    n_models = len(models)
    n_seed = n_groups // max(n_models, 1)
    false, measured = _per_policy(ps, n_prices)  # (policy, price, group)
    n_test = np.asarray(ps["n_test"], dtype=float)
    cost = false + p[None, :, None] * measured
    with np.errstate(divide="ignore", invalid="ignore"):
        per_cand = np.where(n_test > 0, cost / n_test, np.nan)
        meas_frac = np.where(n_test > 0, measured / n_test, np.nan)
        false_rate = np.where(n_test > 0, false / n_test, np.nan)
    n_pol = len(COST_POLICIES)

    # per-seed rows: (policy, price, group) flattened in that order
    def seed_rows(values: np.ndarray) -> np.ndarray:
        return values.reshape(-1)

    shape5 = (n_pol, n_prices, n_models, n_seed)

    def cube(values: np.ndarray) -> np.ndarray:
        v = np.broadcast_to(values, (n_pol, n_prices, n_groups)).reshape(shape5)
        return _pooled(v) if pooled else v

    group_models = models + ([None] if pooled else [])
    n_gm = len(group_models)
    s_cost = _stats(cube(per_cand))
    s = {name: _stats(cube(v))["mean"] for name, v in (("false_decisions", false), ("measurements", measured),
                                                         ("measured_fraction", meas_frac), ("false_rate", false_rate),
                                                         ("cost", cost), ("n_test", n_test[None, None, :]))}
    mean_cost = s_cost["mean"]  # (policy, price, model)
    envelope = np.where(np.isnan(mean_cost), np.inf, mean_cost).min(axis=0)
    envelope = np.where(np.isfinite(envelope), envelope, np.nan)
    # every policy that attains the envelope is cheapest: a tie (the two price-aware variants often cost the
    # same) is not won by whichever is listed first; equal up to the last bits of the float sums
    with np.errstate(invalid="ignore"):
        cheapest = np.isfinite(mean_cost) & np.isclose(mean_cost, envelope[None, :, :], rtol=1e-12, atol=0.0)
    band_low = np.where(cheapest, p[None, :, None], np.inf).min(axis=1)  # (policy, model)
    band_high = np.where(cheapest, p[None, :, None], -np.inf).max(axis=1)
    base_idx = np.array([COST_POLICIES.index(b) for b in BASELINES])
    base_means = mean_cost[base_idx]
    best = base_idx[np.argmin(np.where(np.isnan(base_means), np.inf, base_means), axis=0)]  # (price, model)
    per_seed_cost = cube(per_cand)  # (policy, price, model, seeds)
    best_cost = np.take_along_axis(per_seed_cost, best[None, :, :, None], axis=0)
    diff = _stats(per_seed_cost - best_cost)

    n_seed_rows = n_pol * n_prices * n_groups
    n_sum = n_pol * n_prices * n_gm
    n_rows = n_seed_rows + n_sum
    # columns from buffers (dcaudit.audits.arrays): pa.array would import pandas (~40 MB, ~0.4 s)
    table: dict[str, pa.Array] = {k: arrays.take_strings([None if v is None else str(v)], np.zeros(n_rows, np.int64))
                                  for k, v in const.items()}
    # label columns gathered from their few distinct values by index (not a Python string per row: JARVIS's
    # costs table has ~30,000 rows)
    policies = np.arange(n_pol)
    table["policy"] = arrays.take_strings(list(COST_POLICIES), np.concatenate(
        [np.repeat(policies, n_prices * n_groups), np.repeat(policies, n_prices * n_gm)]))
    table["price"] = arrays.float64(np.concatenate([np.tile(np.repeat(p, n_groups), n_pol),
                                                    np.tile(np.repeat(p, n_gm), n_pol)]))
    position = {m: i for i, m in enumerate(models)}
    group_model = np.fromiter((position[m] for m in model.tolist()), dtype=np.int64, count=n_groups)
    table["model"] = arrays.take_strings(group_models, np.concatenate(
        [np.tile(group_model, n_pol * n_prices), np.tile(np.arange(n_gm), n_pol * n_prices)]))
    seeds = np.tile(exact_seeds(ps["seed"]), n_pol * n_prices)
    table["seed"] = arrays.int64(np.concatenate([seeds, np.zeros(n_sum, dtype=np.int64)]),
                                 np.concatenate([np.zeros(n_seed_rows, bool), np.ones(n_sum, bool)]))
    table["n_seeds"] = arrays.int64(np.concatenate([np.ones(n_seed_rows, dtype=np.int64),
                                                    s_cost["count"].reshape(-1).astype(np.int64)]))

    def num(per_seed: np.ndarray | None, summary: np.ndarray) -> pa.Array:
        head = np.full(n_seed_rows, np.nan) if per_seed is None else seed_rows(per_seed)
        return arrays.float64_nan_null(np.concatenate([head, np.asarray(summary, dtype=float).reshape(-1)]))

    table["n_test"] = num(np.broadcast_to(n_test, (n_pol, n_prices, n_groups)), s["n_test"])
    table["false_decisions"] = num(false, s["false_decisions"])
    table["measurements"] = num(measured, s["measurements"])
    table["cost"] = num(cost, s["cost"])
    table["cost_per_candidate"] = num(per_cand, mean_cost)
    table["measured_fraction"] = num(meas_frac, s["measured_fraction"])
    table["false_rate"] = num(false_rate, s["false_rate"])
    table["cost_per_candidate_p10"] = num(None, s_cost["p10"])
    table["cost_per_candidate_p90"] = num(None, s_cost["p90"])
    table["envelope_cost"] = num(None, np.broadcast_to(envelope, mean_cost.shape))
    cheap = np.concatenate([np.zeros(n_seed_rows, bool), cheapest.reshape(-1)])
    table["cheapest"] = arrays.boolean(cheap, np.arange(n_rows) < n_seed_rows)
    finite = np.isfinite(band_low)
    table["band_low"] = num(None, np.broadcast_to(np.where(finite, band_low, np.nan)[:, None, :], mean_cost.shape))
    table["band_high"] = num(None, np.broadcast_to(np.where(finite, band_high, np.nan)[:, None, :],
                                                   mean_cost.shape))
    best_index = np.broadcast_to(best, mean_cost.shape).reshape(-1) + 1   # 0: NULL, on the per-seed rows
    table["best_baseline"] = arrays.take_strings([None, *COST_POLICIES], np.concatenate(
        [np.zeros(n_seed_rows, dtype=np.int64), best_index]))
    table["diff_vs_best"] = num(None, diff["mean"])
    table["diff_low"] = num(None, diff["low"])
    table["diff_high"] = num(None, diff["high"])
    return pa.table(table)
