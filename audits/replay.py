"""Held-out certify-then-acquire replays: what acting on the evidence would cost (docs/reference.md, docs/package.md).

For each of S seeds the candidates are split into calibration and test by a hash of
(candidate id, seed), so every seed runs in the same SQL pass (the seed is a column from
``range(S)``, never a Python loop). Fibers are certified on calibration only:

* ``exact`` mode: the calibration part of the fiber is pure and has ``>= min_support`` members;
* ``calibrated`` mode: the fiber has ``>= min_support`` calibration members and the one-sided
  Clopper–Pearson upper bound, at confidence ``1 - delta``, on the rate of its minority label is
  ``<= epsilon`` — a stated risk bound per fiber rather than an observation. The bound is reported in
  every mode (``risk_bound``) next to the observed test error (``false_rate_certified``);
* ``familywise`` mode: the fibers with ``>= min_support`` calibration members are tested together —
  Holm's step-down procedure at level α = ``delta`` on the exact binomial p-values of "error rate >
  epsilon" — so the probability that *any* certified fiber's error rate exceeds epsilon is at most
  α (per seed; for windows per model × seed). See :mod:`dcaudit.audits.price`.

A split that leaves either half without a candidate, at any seed (and, for windows, any model), is an
input error before anything is certified (:func:`check_both_halves`, as the completion stage words it).

Fibers unseen in calibration, below support or mixed are ambiguous. The test half is then decided
under four policies (names as in docs/package.md):

* ``fiber_majority``  — the benchmark-only action: the calibration majority of the candidate's fiber
  (a strict majority of trues is needed for ``true``); unseen fiber -> the global majority;
* ``global_majority`` — the calibration majority label for everyone;
* ``certified_only``  — decide certified candidates, defer the rest (``decided_fraction`` < 1);
* ``certify_then_acquire`` — decide certified candidates, measure the claim for every other one.

Columns (one row per policy × seed, and one row per policy with ``seed`` NULL holding the mean over
seeds, with ``*_p10`` / ``*_p90`` spread columns filled only there):

* ``certified`` / ``certified_fraction`` — test candidates acted on from the evidence alone (all of
  them for the two majority policies; the certified ones for the other two);
* ``decided_fraction`` — acted on or measured (1 except for ``certified_only``);
* ``false_decisions`` / ``false_decision_rate`` (over all test candidates) and
  ``false_rate_certified`` (over the candidates acted on from evidence alone);
* ``acquisitions`` — measurements bought; ``break_even_price`` λ* = (fiber_majority false −
  certify_then_acquire false) / acquisitions, per seed (the summary row holds the mean, median, p10, p90);
* ``prices`` / ``total_cost`` / ``relative_cost_reduction`` — list columns over the price grid: the cost
  of a policy is false decisions + λ · acquisitions (in units of one false decision), and the relative
  reduction is 1 − cost / (fiber_majority false decisions) of the same seed, averaged over seeds.
  ``certified_only`` decides only part of the test set, so it has no total cost (NULL);
* ``false_rate_certified_bound`` — the one-sided Clopper–Pearson bound (confidence 1 − delta) on the
  held-out false-decision rate among the decisions acted on, pooled over the certified fibers of the
  seed; ``certified_units`` — certified fibers (fiber replays) or certified windows (window replays).

Every replay also gives a ``costs`` table (:class:`ReplayResult`, :func:`fiber_replay`,
:func:`window_replay`): per price λ of the grid, the cost per candidate of ``fiber_majority``,
``global_majority``, ``certify_then_acquire`` and the price-aware policies ``price_aware`` /
``price_aware_conservative`` (act on a fiber's or window's benchmark-only action when its estimated
error rate is below λ, else measure), the envelope, the price band in which each policy is cheapest,
and the paired difference to the best fixed policy with a 95 % interval (:func:`dcaudit.audits.price.cost_table`).
With ``compare_modes`` the stage replays the same splits in further certification modes and writes
the comparison to ``metrics`` (:func:`mode_metrics`).

Error-window certification (``replay_windows``) is the same replay for one numeric evidence column:
a test candidate's "fiber" is the set of calibration candidates within ``tol`` of its evidence value;
it is certified when that window holds at least ``min_support`` candidates sharing one label (or, in
calibrated mode, passes the bound); the benchmark-only action is the window majority (>= 0.5, as in
the paper's JARVIS replay), the global majority when the window is below support. ``tol`` is fixed or,
per seed, the calibration MAE (``mae``) or an absolute-error quantile (``q80``) of the evidence against
a reference column. A window is ``|Δ| <= tol``, inclusive. Windows are counted by binary search on
sorted arrays with calibration prefix sums (:func:`window_counts`), never with per-point masks.

Engine: for fibers, one SQL pass over candidates × seeds yields (seed, fiber, half) counts — the
only work that grows with candidates × seeds — and that small table is reduced with vectorised numpy
(DuckDB's planning time for the few joins involved exceeds the work itself). For windows, SQL yields
one row per (model, candidate) with the hash of its id; numpy computes the split at every seed from it
(the formula checked against DuckDB, else SQL hands over the split as a list), sorts the candidates
once by (model, evidence) and answers the test entries with ``searchsorted`` and prefix sums, a chunk
of seeds at a time so that no array holds every test entry (JARVIS, 15 models × 50 seeds × 5.6k:
~1.2 s of CPU and ~100 MB above the loaded table, against ~30 s for the former two ASOF joins).

Quantile and width fibers are cut over all audited candidates: the cuts read the evidence only, never
a claim label, so calibration and test see the same fibers without leaking test labels.

Splits use DuckDB's ``hash``: reproducible for a given DuckDB version, not across versions.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, cast

import duckdb
import numpy as np
import pyarrow as pa

from dcaudit import arrays, defaults
from dcaudit.audits.evidence import EvidenceMap, evidence_select
from dcaudit.audits.fibers import AuditLabels, _key_ranges, _never_excluded, packed_terms
from dcaudit.audits.price import (
    BoundCache,
    binomial_pvalue,
    cost_table,
    cp_upper,
    holm,
    prefetch_special,
    price_aware_outcomes,
)
from dcaudit.audits.windows import window_bounds
from dcaudit.claims import Claim, check_columns, claim_sql, quote_identifier, sql_literal
from dcaudit.engine import machine_limit, memory_limit_bytes
from dcaudit.errors import InputError, SpecError
from dcaudit.evidence_map import positive_number, whole_number
from dcaudit.inputs import (
    ROW,
    column_types,
    duckdb_message,
    guard_nan,
    label_of,
    require_numeric,
    user_columns,
)
from dcaudit.spec import check_keys, coerce_field, fixed_width_reference, name_list, typed_fields
from dcaudit.splits import (
    SPLIT_BUCKETS,
    SplitDesign,
    check_calibration_fraction,
    exact_seeds,
    split_sql,
    split_threshold,
)
from dcaudit.stage import StageContext, StageTables

if TYPE_CHECKING:
    from dcaudit.engine import Engine
    from dcaudit.evidence_map import EvidenceSQL

POLICIES = defaults.REPLAY_POLICIES
PRICE_GRID = defaults.PRICE_GRID
MAX_PRICE = defaults.MAX_PRICE
Mode = Literal["exact", "calibrated", "familywise"]
MODES: tuple[Mode, ...] = defaults.REPLAY_MODES
MAX_SEEDS = defaults.MAX_SEEDS  # beyond this the per-seed tables outgrow any machine (check_seeds_fit is the real bound)
_counter = itertools.count()


@dataclass(frozen=True)
class ReplayConfig:
    """How the replay splits, certifies and prices."""

    seeds: int = defaults.REPLAY_SEEDS
    seed_offset: int = defaults.SEED_OFFSET
    calibration_fraction: float = defaults.CALIBRATION_FRACTION
    min_support: int = defaults.MIN_SUPPORT_FIBERS  # tolerance windows default to 5 (default_min_support)
    mode: Mode = defaults.REPLAY_MODE
    epsilon: float = defaults.EPSILON
    delta: float = defaults.DELTA
    prices: tuple[float, ...] = PRICE_GRID

    def __post_init__(self) -> None:
        if not 1 <= self.seeds <= MAX_SEEDS:
            raise SpecError(f"replay: seeds must be from 1 to {MAX_SEEDS}, got {self.seeds}")
        if abs(self.seed_offset) > defaults.MAX_SEED_OFFSET:  # seeds are BIGINT in DuckDB and the package
            raise SpecError(f"replay: seed_offset must lie within ±{defaults.MAX_SEED_OFFSET}, got {self.seed_offset}")
        check_calibration_fraction(self.calibration_fraction, "replay")
        if self.min_support < 1:
            raise SpecError(f"replay: min_support must be >= 1, got {self.min_support}")
        if self.mode not in MODES:
            raise SpecError(f"replay: mode {self.mode!r}; use one of {', '.join(MODES)}")
        if not 0.0 < self.epsilon < 0.5:
            raise SpecError(f"replay: epsilon must lie in (0, 0.5), got {self.epsilon}")
        if not 0.0 < self.delta < 1.0:
            raise SpecError(f"replay: delta must lie in (0, 1), got {self.delta}")
        if not self.prices or any(not (0 <= p <= MAX_PRICE) for p in self.prices):
            raise SpecError(f"replay: prices must be a non-empty list of numbers from 0 to {MAX_PRICE:g} (a price "
                            f"in false decisions per measurement), got {self.prices}")
        if len(set(self.prices)) < len(self.prices):  # every costs row would be written twice
            raise SpecError(f"replay: prices {self.prices} name a price more than once")

    @property
    def threshold(self) -> int:
        return split_threshold(self.calibration_fraction)


@dataclass(frozen=True)
class Tolerance:
    """A window half-width: fixed, or per seed from calibration errors of the evidence against a reference."""

    kind: Literal["fixed", "mae", "quantile"]
    value: float | None = None  # the width (fixed) or the quantile level (quantile)

    def __str__(self) -> str:
        if self.kind == "fixed":
            return f"{self.value:g}"
        if self.kind == "mae":
            return "mae"
        return f"q{round(100 * (self.value or 0)):d}"


def parse_tolerance(text: str | float) -> Tolerance:
    """``0.04`` (fixed), ``mae`` (mean absolute error) or ``q80`` (80th percentile of the absolute error)."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        value = positive_number(text)
    else:
        t = str(text).strip().lower()
        if t == "mae":
            return Tolerance("mae")
        percent = whole_number(t[1:]) if t.startswith("q") else None
        if percent is not None and 0 < percent < 100:
            return Tolerance("quantile", percent / 100)
        value = positive_number(t)
    if value is None:
        raise SpecError(f"tolerance {text!r}: use a positive number, 'mae' or a quantile like 'q80'")
    return Tolerance("fixed", value)


@dataclass(frozen=True)
class WindowSpec:
    """Error-window certification on one numeric evidence column."""

    column: str
    tolerance: Tolerance
    reference: str | None = None  # needed for mae / quantile tolerances

    def __post_init__(self) -> None:
        if self.tolerance.kind != "fixed" and not self.reference:
            raise SpecError(f"tolerance {self.tolerance} is computed against a reference column; name one "
                            "(reference = \"…\")")


# ---------------------------------------------------------------------------------------------------
# SQL building blocks.


@dataclass(frozen=True)
class ReplayLabels:
    """The constant columns of one replay's rows."""

    source: str
    audit_id: str
    claim: str
    evidence: str
    fiber_rule: str
    certification: str  # fiber | window
    n_excluded: int = 0  # candidates without evidence or claim value: left out of every split


_SPREAD = ("certified_fraction", "false_decision_rate", "acquisitions", "break_even_price")
_MEANS = ("n_calibration", "n_test", "tolerance", "certified", "certified_fraction", "decided_fraction",
          "false_decisions", "false_decision_rate", "false_rate_certified", "risk_bound", "risk_bound_max",
          "acquisitions", "acquired_fraction", "break_even_price", "baseline_false_decisions",
          "false_rate_certified_bound", "certified_units")


def _float(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=float)


def _ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(b > 0, a / np.where(b > 0, b, 1.0), np.nan)


def _policy_columns(ps: dict[str, np.ndarray], cfg: ReplayConfig) -> dict[str, np.ndarray]:
    """Per-seed rows of the four policies, stacked policy-major; vectorised over seeds (no loop)."""
    n = _float(ps["n_test"])
    n_cert, false_cert = _float(ps["n_cert"]), _float(ps["false_cert"])
    false_fm, false_gm = _float(ps["false_fm"]), _float(ps["false_gm"])
    nan = np.full_like(n, np.nan)
    bound, bound_max = _float(ps["risk_bound"]), _float(ps["risk_bound_max"])
    acted = {"fiber_majority": n, "global_majority": n, "certified_only": n_cert, "certify_then_acquire": n_cert}
    decided = {"fiber_majority": n, "global_majority": n, "certified_only": n_cert, "certify_then_acquire": n}
    false = {"fiber_majority": false_fm, "global_majority": false_gm, "certified_only": false_cert,
             "certify_then_acquire": false_cert}
    acq = {p: np.zeros_like(n) for p in POLICIES} | {"certify_then_acquire": n - n_cert}
    prices = np.asarray(cfg.prices, dtype=float)
    cols: dict[str, list[np.ndarray]] = {}

    def put(name: str, value: np.ndarray) -> None:
        cols.setdefault(name, []).append(value)

    for policy in POLICIES:  # the four fixed policies, each a vector over seeds
        put("policy", np.full(n.shape, policy, dtype=object))
        for key in ("model", "seed", "n_calibration", "n_test", "tolerance"):
            put(key, np.asarray(ps[key]))
        put("certified", acted[policy])
        put("certified_fraction", _ratio(acted[policy], n))
        put("decided_fraction", _ratio(decided[policy], n))
        put("false_decisions", false[policy])
        put("false_decision_rate", _ratio(false[policy], n))
        put("false_rate_certified", _ratio(false[policy], acted[policy]))
        certifies = policy in ("certified_only", "certify_then_acquire")
        put("risk_bound", bound if certifies else nan)
        put("risk_bound_max", bound_max if certifies else nan)
        # certified fibers (fiber replays) or certified windows = test candidates (window replays)
        put("certified_units", _float(ps["n_cert_units"]) if certifies else nan)
        put("acquisitions", acq[policy])
        put("acquired_fraction", _ratio(acq[policy], n))
        put("break_even_price", _ratio(false_fm - false[policy], acq[policy])
            if policy == "certify_then_acquire" else nan)
        put("baseline_false_decisions", false_fm)
        # pooled Clopper–Pearson bound on the held-out false-decision rate among the decisions acted on
        put("false_rate_certified_bound", np.where(acted[policy] > 0, cp_upper(false[policy], acted[policy],
                                                                               cfg.delta), np.nan))
        cost = false[policy][:, None] + prices[None, :] * acq[policy][:, None]
        if policy == "certified_only":  # decides only part of the test set: no total cost
            cost = np.full_like(cost, np.nan)
        put("total_cost", cost)
        put("relative_cost_reduction", 1.0 - _ratio(cost, false_fm[:, None]))
    return {k: np.concatenate(v) for k, v in cols.items()}


def _summaries(rows: dict[str, np.ndarray], *, pooled: bool) -> dict[str, Any]:
    """Mean (and spread) over seeds per (model, policy); with ``pooled`` also over all models (model NULL).

    Rows come policy-major and, within a policy, ordered by (model, seed) with the same seeds for every
    model, so each column reshapes to (policy, model, seed) and every statistic is one numpy reduction.
    """
    n_pol = len(POLICIES)
    per_policy = len(rows["policy"]) // n_pol
    model_of = rows["model"][:per_policy]
    models = list(dict.fromkeys(model_of.tolist()))
    n_models = len(models)
    if n_models * (per_policy // max(n_models, 1)) != per_policy or \
            any((model_of[i * (per_policy // n_models):(i + 1) * (per_policy // n_models)] != m).any()
                for i, m in enumerate(models)):
        raise AssertionError("replay rows must hold the same seeds for every model")  # pragma: no cover
    shape = (n_pol, n_models, per_policy // n_models)

    def cube(key: str) -> np.ndarray:
        return _float(rows[key]).reshape(shape)

    group_models = models + ([None] if pooled else [])
    out: dict[str, Any] = {
        "model": np.array(group_models * n_pol, dtype=object),
        "policy": np.repeat(np.array(POLICIES, dtype=object), len(group_models)),
        "n_seeds": np.concatenate([np.full(n_models, shape[2])] + ([np.array([n_models * shape[2]])] if pooled
                                                                   else [])).tolist() * n_pol,
    }
    # Every statistic of every column in one stacked reduction: (column, policy, model, seed).
    stack = np.stack([cube(key) for key in _MEANS])
    if pooled:
        stack = _with_pooled(stack)
    means = _nanmean(stack)
    for i, key in enumerate(_MEANS):
        out[key] = means[i].ravel()
    spread = _nanquantile(stack, (0.1, 0.5, 0.9))
    for key in _SPREAD:
        i = _MEANS.index(key)
        out[f"{key}_p10"], out[f"{key}_p90"] = spread[0, i].ravel(), spread[2, i].ravel()
    out["break_even_price_median"] = spread[1, _MEANS.index("break_even_price")].ravel()
    for key in ("total_cost", "relative_cost_reduction"):
        block = np.moveaxis(rows[key].reshape(*shape, -1), -1, 0)  # (price, policy, model, seed)
        if pooled:
            block = _with_pooled(block)
        out[key] = np.moveaxis(_nanmean(block), 0, -1).reshape(-1, block.shape[0])
    return out


def _with_pooled(values: np.ndarray) -> np.ndarray:
    """(…, policy, model, seed) -> (…, policy, model + 1, seeds) where the extra model pools all models.

    The per-model slots are padded with NaN to the pooled length; NaN-aware statistics ignore them.
    """
    *lead, n_pol, n_models, n_seed = values.shape
    padded = np.full((*lead, n_pol, n_models + 1, n_models * n_seed), np.nan)
    padded[..., :n_models, :n_seed] = values
    padded[..., n_models, :] = values.reshape(*lead, n_pol, n_models * n_seed)
    return padded


def _nanmean(values: np.ndarray) -> np.ndarray:
    """Mean over the last axis ignoring NaN; NaN where nothing is defined.

    Taken as ``first + mean(v − first)`` on values scaled by a power of two: the plain sum overflows for
    widths near 1e308 (a tolerance of 1e308 had the mean inf) and rounds a constant (three seeds of 0.1
    summed and divided are 0.10000000000000002). Scaling by a power of two is exact, the scaled values and
    their differences stay within ±4, so nothing overflows, and a constant's deviations are all 0: its mean
    is that constant. A row holding ±inf keeps the plain mean's ±inf (NaN for both signs).
    """
    if values.shape[-1] == 0:
        return np.full(values.shape[:-1], np.nan)
    # rows contiguous: numpy sums a strided last axis in another order, so a seed's mean would depend on
    # how many seeds were computed beside it (the mae's (seed, candidate) blocks are transposed views)
    values = np.ascontiguousarray(values, dtype=float)
    valid = ~np.isnan(values)
    count = valid.sum(axis=-1)
    finite = valid & np.isfinite(values)
    # 2^e > |v| / 2 for every finite v of the row (frexp: |v| < 2^e', and 2^e' itself overflows at
    # 1.8e308), never below 2^0: small values cannot overflow
    top = np.where(finite, np.abs(values), 0.0).max(axis=-1)
    scale = np.ldexp(1.0, np.maximum(np.frexp(top)[1] - 1, 0))[..., None]
    scaled = np.where(finite, values, 0.0) / scale
    first = np.take_along_axis(scaled, np.argmax(finite, axis=-1)[..., None], axis=-1)
    deviation = np.where(finite, scaled - first, 0.0).sum(axis=-1)
    mean = (first[..., 0] + deviation / np.maximum(finite.sum(axis=-1), 1)) * scale[..., 0]
    # the mean lies within the values: rounding must not carry it past the largest (inf beyond 1.8e308)
    low = np.where(finite, values, np.inf).min(axis=-1)
    high = np.where(finite, values, -np.inf).max(axis=-1)
    mean = np.clip(mean, np.minimum(low, high), high)
    infinite = valid & ~finite
    with np.errstate(invalid="ignore"):  # inf + (−inf): NaN, as the plain sum gives
        signed = np.where(infinite, values, 0.0).sum(axis=-1)
    return np.where(count == 0, np.nan, np.where(infinite.any(axis=-1), signed, mean))


def _nanquantile(values: np.ndarray, qs: tuple[float, ...]) -> np.ndarray:
    """Linear-interpolation quantiles over the last axis ignoring NaN (numpy's default method), vectorised."""
    ordered = np.sort(values, axis=-1)  # NaN sorts last
    count = (~np.isnan(values)).sum(axis=-1)
    out = []
    for q in qs:  # a fixed handful of quantile levels
        pos = q * np.maximum(count - 1, 0)
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, np.maximum(count - 1, 0))
        a = np.take_along_axis(ordered, lo[..., None], axis=-1)[..., 0]
        b = np.take_along_axis(ordered, hi[..., None], axis=-1)[..., 0]
        out.append(np.where(count > 0, a + (pos - lo) * (b - a), np.nan))
    return np.stack(out)


def _num(values: Any) -> pa.Array:
    return arrays.float64_nan_null(np.asarray(values, dtype=float))


def _lists(block: np.ndarray) -> pa.Array:
    """Rows of a (rows, prices) array as list<double>; all-NaN rows (no cost defined) become NULL."""
    return arrays.list_float64(block, np.isnan(block).all(axis=1))


def _const(value: object, n: int, kind: str) -> pa.Array:
    """``n`` copies of one value (None: NULL) as an Arrow column of ``kind`` (string, int64, float64)."""
    if kind == "string":
        return arrays.take_strings([None if value is None else str(value)], np.zeros(n, dtype=np.int64))
    null = np.full(n, value is None)
    fill = 0 if value is None else value
    return arrays.int64(np.full(n, fill), null) if kind == "int64" else arrays.float64(np.full(n, fill, dtype=float), null)


def _replay_table(ps: dict[str, np.ndarray], cfg: ReplayConfig, labels: ReplayLabels, *, pooled: bool) -> pa.Table:
    """The replay rows: per seed and policy, then one summary row per (model,) policy with seed NULL."""
    rows = _policy_columns(ps, cfg)
    summary = _summaries(rows, pooled=pooled)
    n_seed_rows, n_sum = len(rows["policy"]), len(summary["policy"])
    n_rows = n_seed_rows + n_sum
    const = {"source": labels.source, "audit_id": labels.audit_id, "claim": labels.claim,
             "evidence": labels.evidence, "fiber_rule": labels.fiber_rule,
             "certification": labels.certification, "mode": cfg.mode}
    # columns from buffers (dcaudit.audits.arrays): pa.array would import pandas (~40 MB, ~0.4 s)
    table: dict[str, pa.Array] = {k: _const(v, n_rows, "string") for k, v in const.items()}
    table["min_support"] = _const(cfg.min_support, n_rows, "int64")
    table["epsilon"] = _const(cfg.epsilon if cfg.mode == "calibrated" else None, n_rows, "float64")
    table["delta"] = _const(cfg.delta, n_rows, "float64")
    table["calibration_fraction"] = _const(cfg.calibration_fraction, n_rows, "float64")
    table["seed_offset"] = _const(cfg.seed_offset, n_rows, "int64")
    table["n_excluded"] = _const(labels.n_excluded, n_rows, "int64")
    table["model"] = arrays.strings(np.concatenate([rows["model"], summary["model"]]).tolist())
    table["policy"] = arrays.strings(np.concatenate([rows["policy"], summary["policy"]]).tolist())
    # int64 throughout, never via NaN-as-NULL doubles: a double holds seeds exactly only up to 2^53
    seeds = np.concatenate([exact_seeds(rows["seed"]), np.zeros(n_sum, dtype=np.int64)])
    table["seed"] = arrays.int64(seeds, np.arange(n_rows) >= n_seed_rows)
    table["n_seeds"] = arrays.int64(np.concatenate([np.ones(n_seed_rows, dtype=np.int64),
                                                    np.asarray(summary["n_seeds"], dtype=np.int64)]))
    for key in _MEANS:
        table[key] = _num(np.concatenate([_float(rows[key]), _float(summary[key])]))
    prices = np.asarray(cfg.prices, dtype=float)
    table["prices"] = _lists(np.broadcast_to(prices, (n_rows, len(prices))))
    for key in ("total_cost", "relative_cost_reduction"):
        table[key] = _lists(np.concatenate([rows[key], summary[key]]))
    blank = np.full(n_seed_rows, np.nan)
    for key in _SPREAD:
        for q in ("p10", "p90"):
            table[f"{key}_{q}"] = _num(np.concatenate([blank, summary[f"{key}_{q}"]]))
    table["break_even_price_median"] = _num(np.concatenate([blank, summary["break_even_price_median"]]))
    return pa.table(table)


def _split_sql(cfg: SplitDesign) -> str:
    """``c`` = calibration membership of candidate hash ``h`` at ``seed``; all seeds in one pass."""
    return split_sql("b.h", "s.seed", cfg.threshold)


def _seeds_sql(cfg: SplitDesign) -> str:
    return f"range({int(cfg.seed_offset)}, {int(cfg.seed_offset) + int(cfg.seeds)}) s(seed)"


def _columns_of(con: duckdb.DuckDBPyConnection, relation: str) -> list[str]:
    return [r[0] for r in con.execute(f"DESCRIBE {relation}").fetchall()]


def calibration_members(con: duckdb.DuckDBPyConnection, relation: str, *, id_column: str,
                        config: ReplayConfig = ReplayConfig()) -> pa.Table:
    """Which candidate is in the calibration half at which seed (candidate_id, seed, calibration).

    The same expression the replays use, for inspecting a split or checking a replay by hand.
    """
    return con.sql(
        f"SELECT b.candidate_id, s.seed, {_split_sql(config)} AS calibration "
        f"FROM (SELECT DISTINCT CAST({quote_identifier(id_column)} AS VARCHAR) AS candidate_id, "
        f"hash(CAST({quote_identifier(id_column)} AS VARCHAR)) AS h FROM {relation}) b "
        f"CROSS JOIN {_seeds_sql(config)} ORDER BY b.candidate_id, s.seed").to_arrow_table()


# ---------------------------------------------------------------------------------------------------
# Split counts without candidate × seed rows. DuckDB's ``hash(h, seed)`` of a UBIGINT ``h`` and a BIGINT
# seed is ``mix(murmur(h)) XOR murmur(seed)`` (``murmur`` its 64-bit finaliser, ``mix`` the first step
# of its hash combiner), so the part that depends on the candidate is computed once per candidate and
# each seed costs one XOR, one remainder and one comparison per candidate — in numpy, over blocks that
# stay in cache, candidates sorted by (fiber, claim) so that a block's counts are segment sums.
# ``murmur(0)`` is 0, so ``hash(h, 0)`` is the candidate's part alone: DuckDB computes it in the query that
# reads the candidates (:func:`candidate_part_sql`, on every thread) instead of numpy on one.
# ``_hash_matches`` checks the formula against DuckDB itself before every use; if a DuckDB version
# hashed differently, the replay falls back to the SQL pass (same splits by definition).

_MURMUR = np.uint64(0xD6E8FEB86659FD93)
_SHIFT = np.uint64(32)
_BLOCK_BYTES = 1 << 22  # (seeds × block) uint64 work array: ~4 MB stays in cache


def _murmur(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.uint64, copy=True)
    x ^= x >> _SHIFT
    x *= _MURMUR
    x ^= x >> _SHIFT
    x *= _MURMUR
    x ^= x >> _SHIFT
    return x


def _candidate_part(h: np.ndarray) -> np.ndarray:
    """The candidate's half of ``hash(h, seed)``: murmur(h), then the combiner's first mixing step."""
    a = _murmur(h)
    a ^= a >> _SHIFT
    a *= _MURMUR
    return a


def candidate_part_sql(h: str) -> str:
    """SQL for :func:`_candidate_part` of the UBIGINT expression ``h`` (an id's hash): ``hash(h, 0)``, as the
    seed's half of the combined hash vanishes at seed 0 (checked by :func:`_hash_matches`)."""
    return f"hash({h}, 0::BIGINT)"


def _split_hashes(h: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """``hash(h, seed)`` for every (h, seed) pair of the two aligned arrays, as DuckDB computes it."""
    with np.errstate(over="ignore"):
        return _candidate_part(h) ^ _murmur(seeds.astype(np.int64).astype(np.uint64))


def _hash_matches(con: duckdb.DuckDBPyConnection) -> bool:
    """True when :func:`_split_hashes` reproduces this DuckDB's ``hash(h, seed)`` (checked on a sample)."""
    # small seeds and seeds across the whole accepted range (±2^62, negative ones too): all their bits count
    got = con.execute(f"SELECT hash(i * 7919) AS h, s, hash(hash(i * 7919), s) AS hs, "
                      f"{candidate_part_sql('hash(i * 7919)')} AS a FROM (SELECT i, "
                      "CASE WHEN i % 2 = 0 THEN i - 40 ELSE (i - 40) * 115292150460684697 + i END AS s "
                      "FROM range(80) t(i))").fetchnumpy()
    h, want = np.asarray(got["h"], dtype=np.uint64), np.asarray(got["hs"], dtype=np.uint64)
    with np.errstate(over="ignore"):
        parts = np.array_equal(_candidate_part(h), np.asarray(got["a"], dtype=np.uint64))
    return parts and bool(np.array_equal(_split_hashes(h, np.asarray(got["s"])), want))


def split_formula_matches(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether :func:`split_counts` reproduces ``con``'s ``hash(h, seed)`` (any engine's split pass asks)."""
    return _hash_matches(con)


def split_counts(h: np.ndarray, group: np.ndarray, n_groups: int, seeds: np.ndarray, threshold: int,
                 threads: int = 1) -> np.ndarray:
    """Calibration members per (seed, group): ``out[s, g]`` = #{i : group[i] = g and
    hash(h[i], seeds[s]) % SPLIT_BUCKETS < threshold}, the replay's split, without a row per (i, s)."""
    with np.errstate(over="ignore"):
        parts = _candidate_part(h)
    return split_counts_of_parts(parts, group, n_groups, seeds, threshold, threads)


def split_counts_of_parts(parts: np.ndarray, group: np.ndarray, n_groups: int, seeds: np.ndarray, threshold: int,
                          threads: int = 1) -> np.ndarray:
    """:func:`split_counts` from the candidates' parts of the hash (:func:`_candidate_part` of ``h``, or
    :func:`candidate_part_sql` computed by DuckDB)."""
    order = np.argsort(group.astype(np.uint16) if n_groups <= 1 << 16 else group, kind="stable")
    a = np.asarray(parts, dtype=np.uint64)[order]
    g = np.asarray(group)[order]
    del order
    with np.errstate(over="ignore"):
        c = _murmur(np.asarray(seeds, dtype=np.int64).astype(np.uint64))
    n, n_seeds = len(a), len(c)
    block = max(1024, _BLOCK_BYTES // (8 * max(n_seeds, 1)))
    bounds = list(range(0, n, block)) + [n]
    pieces = [(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]
    buckets, below = np.uint64(SPLIT_BUCKETS), np.uint64(threshold)

    def count(chunk: list[tuple[int, int]]) -> np.ndarray:
        out = np.zeros((n_seeds, n_groups), dtype=np.int64)
        work = np.empty((n_seeds, block), dtype=np.uint64)
        cal = np.empty((n_seeds, block), dtype=bool)
        for lo, hi in chunk:
            m = hi - lo
            w, k = work[:, :m], cal[:, :m]
            np.bitwise_xor(a[None, lo:hi], c[:, None], out=w)
            np.remainder(w, buckets, out=w)
            np.less(w, below, out=k)
            gb = g[lo:hi]
            starts = np.flatnonzero(np.concatenate(([True], gb[1:] != gb[:-1])))
            out[:, gb[starts]] += np.add.reduceat(k, starts, axis=1, dtype=np.int64)
        return out

    threads = max(1, min(int(threads), len(pieces)))
    if threads == 1:
        return count(pieces)
    from concurrent.futures import ThreadPoolExecutor  # numpy releases the GIL in these loops

    with ThreadPoolExecutor(threads) as pool:
        return sum(pool.map(count, [pieces[i::threads] for i in range(threads)]))  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------------
# Public API.

@dataclass(frozen=True)
class ReplayResult:
    """A replay's two tables: ``replay`` (policy × seed, as in docs/package.md) and ``costs`` (policy × price × seed)."""

    replay: pa.Table
    costs: pa.Table


def _costs(ps: dict[str, Any], cfg: ReplayConfig, labels: ReplayLabels, *, pooled: bool) -> pa.Table:
    const = {"source": labels.source, "audit_id": labels.audit_id, "claim": labels.claim,
             "evidence": labels.evidence, "fiber_rule": labels.fiber_rule, "certification": labels.certification,
             "mode": cfg.mode}
    table = cost_table(ps, prices=tuple(cfg.prices), const=const, pooled=pooled)
    n = table.num_rows
    return (table.append_column("min_support", _const(cfg.min_support, n, "int64"))
            .append_column("delta", _const(cfg.delta, n, "float64")))



def fiber_replay(
    con: duckdb.DuckDBPyConnection,
    relation: str,
    *,
    id_column: str,
    evidence: EvidenceMap,
    claim: Claim,
    config: ReplayConfig = ReplayConfig(),
    labels: AuditLabels,
    engine: Engine | None = None,
) -> ReplayResult:
    """Certify-then-acquire replay over the fibers of a partition evidence map (exact / quantile / width):
    the ``replay`` table (policy × seed) and the ``costs`` table of every policy at every price of the grid.

    The candidates × seeds pass (the split counts) runs on ``engine`` — DuckDB on ``con`` by default, or
    Spark — and everything after it here, the same for every engine."""
    return fiber_replays(con, relation, id_column=id_column, evidence=evidence, claim=claim, configs=(config,),
                         labels=labels, engine=engine)[0]


def fiber_replays(
    con: duckdb.DuckDBPyConnection,
    relation: str,
    *,
    id_column: str,
    evidence: EvidenceMap,
    claim: Claim,
    configs: Sequence[ReplayConfig],
    labels: AuditLabels,
    engine: Engine | None = None,
    candidates: pa.Table | None = None,
) -> list[ReplayResult]:
    """One replay per config from one pass of split counts (the stage's ``compare_modes``): the configs may
    certify and price differently, but must draw the same splits (seeds, seed_offset, calibration_fraction).

    ``candidates``: the candidates table of the fiber audit of this evidence map and claim over ``relation``
    (:func:`dcaudit.audits.fibers.audit_fibers`), when the caller has it. On DuckDB the split pass then reads
    its ids, fibers and claim values instead of the relation: the same counts, without casting every id to
    text and evaluating the evidence a second time (~0.25 s at 1e7 candidates)."""
    if evidence.rule.is_window:
        raise SpecError(f"fiber rule {evidence.rule} is a window; use replay_windows (tolerance = …)")
    if len({(c.seeds, c.seed_offset, c.threshold) for c in configs}) > 1:
        raise ValueError("fiber_replays: every config must draw the same splits")
    if not configs:
        return []
    if engine is None:
        from dcaudit.audits.engine import DuckDBEngine

        engine = DuckDBEngine(con)
    counts = None
    if candidates is not None and engine.name == "duckdb":
        counts = candidates_split_counts(con, candidates, configs[0])
    label = label_of(relation)
    if counts is None:
        ev = evidence_select(con, relation, id_column, evidence, claim, _columns_of(con, relation), engine=engine)
        counts, label = engine.split_counts(ev, configs[0]), ev.label or label
    excluded = np.asarray(counts["seed_index"]) < 0
    names = ReplayLabels(labels.source, labels.audit_id, claim.text, evidence.label, str(evidence.rule), "fiber",
                         int(np.asarray(counts["n"])[excluded].sum()))
    kept = {k: np.asarray(v)[~excluded] for k, v in counts.items()}
    # per seed, from the engine's counts: one check for the numpy, SQL and Spark split passes alike
    seed_index, n = np.asarray(kept["seed_index"], dtype=np.int64), np.asarray(kept["n"], dtype=np.int64)
    n_seeds = int(configs[0].seeds)
    check_both_halves(np.bincount(seed_index, weights=np.where(np.asarray(kept["cal"], dtype=bool), n, 0),
                                  minlength=n_seeds), np.bincount(seed_index, weights=n, minlength=n_seeds),
                      int(configs[0].seed_offset), file=label)
    out = []
    for config in configs:
        ps = _fiber_outcomes(kept, config, labels.model)
        out.append(ReplayResult(_replay_table(ps, config, names, pooled=False),
                                _costs(ps, config, names, pooled=False)))
    return out


def check_both_halves(n_cal: np.ndarray, n_all: np.ndarray, first_seed: int, *, file: str,
                      models: Sequence[str | None] | None = None) -> None:
    """An InputError naming the first seed (and model) whose split leaves calibration or test without a
    candidate, as the completion stage does: every certification then rests on an empty half (no fiber
    seen: the fiber majority "certifies" everyone from nothing) or every held-out number is undefined.

    ``n_cal`` / ``n_all``: calibration members and complete cases per group, groups ``model · seeds + seed``
    (``models`` names them; None: one group per seed). One vectorised test over the groups, no loop."""
    n_cal, n_all = np.asarray(n_cal, dtype=np.int64), np.asarray(n_all, dtype=np.int64)
    short = (n_cal == 0) | (n_cal == n_all)
    if not short.any():
        return
    g = int(np.argmax(short))
    n_seeds = len(short) // max(1, len(models)) if models is not None else len(short)
    where = f"seed {first_seed + g % n_seeds}"
    if models is not None and models[g // n_seeds] is not None:
        where += f", model {models[g // n_seeds]!r}"
    raise InputError(f"{where}: the {n_all[g]} complete cases give {n_cal[g]} calibration and "
                     f"{n_all[g] - n_cal[g]} test candidates; both splits need candidates", file=file)


def fiber_split_counts(con: duckdb.DuckDBPyConnection, ev: EvidenceSQL, design: SplitDesign) -> dict[str, np.ndarray]:
    """The DuckDB engine's split pass (see :meth:`dcaudit.engine.Engine.split_counts`): :func:`split_counts` in
    numpy when this DuckDB hashes by the formula and the candidates fit the memory limit, else the SQL pass
    over candidates × seeds that defines the split."""
    fast = _hash_matches(con) and _fits_in_memory(con, ev.relation)
    counts = _fiber_split_counts(con, ev.relation, ev, ev.evidence, ev.claim, design) if fast else None
    if counts is None:
        counts = _fiber_split_counts_sql(con, ev.relation, ev, ev.claim, design)
    return counts


def split_halves(n: np.ndarray, t: np.ndarray, n_cal: np.ndarray, t_cal: np.ndarray,
                 n_excluded: int) -> dict[str, np.ndarray]:
    """Split counts in the engine format from per-fiber totals ``n``, ``t`` (fiber,) and calibration counts
    ``n_cal``, ``t_cal`` (seed, fiber): a row per fiber and seed for each half (empty halves as zeros), and
    the excluded candidates as one row with seed_index -1."""
    n_seeds, n_fibers = n_cal.shape
    seed_index = np.repeat(np.arange(n_seeds, dtype=np.int64), n_fibers)
    f = np.tile(np.arange(n_fibers, dtype=np.int64), n_seeds)
    return {
        "seed_index": np.concatenate([seed_index, seed_index, [-1]]),
        "f": np.concatenate([f, f, [0]]),
        "cal": np.concatenate([np.ones(len(f), bool), np.zeros(len(f), bool), [False]]),
        "n": np.concatenate([n_cal.ravel(), (n[None, :] - n_cal).ravel(), [n_excluded]]),
        "t": np.concatenate([t_cal.ravel(), (t[None, :] - t_cal).ravel(), [0]]),
    }


_FAST_BYTES_PER_CANDIDATE = 48  # id hash, packed key, claim, their fiber-sorted copies, numpy temporaries


def _fits_in_memory(con: duckdb.DuckDBPyConnection, relation: str | int) -> bool:
    """The numpy split counts hold ~48 bytes per candidate (of ``relation``, or that many): within the memory
    limit, else the SQL pass (which streams candidates × seeds within DuckDB's limit, spilling if it must)."""
    limit_bytes = memory_limit_bytes(con)
    if not limit_bytes:
        return True
    n = relation if isinstance(relation, int) else int(
        con.execute(f"SELECT count(*) FROM {relation}").fetchall()[0][0])
    return n * _FAST_BYTES_PER_CANDIDATE <= limit_bytes


def _fiber_split_counts(con: duckdb.DuckDBPyConnection, relation: str, ev: Any, evidence: EvidenceMap,
                        claim: Claim, config: SplitDesign) -> dict[str, np.ndarray]:
    """Members and trues per (seed, fiber, half), as :func:`_fiber_split_counts_sql`, from one pass
    over the candidates (hash of the id, fiber, claim) and :func:`split_counts_of_parts` in numpy.

    The fiber of a candidate is its packed key (small-integer key parts, as the audit packs them), numbered
    in the order of its key parts (:func:`_key_order`), else ``dense_rank()`` over the key parts: the audit's
    ``fiber_key`` and the SQL pass number fibers alike, so every path sums the outcomes' floats in one order.
    A row per fiber and seed for each half (empty halves as zeros); excluded candidates as one row with
    seed_index -1.
    """
    tag = next(_counter)
    ev_t = f"_rev_{tag}"
    con.execute(f"CREATE TEMP VIEW {ev_t} AS {ev.sql}")
    try:
        ranges = _key_ranges(con, ev_t, ev, evidence, relation)
        if ranges is not None:
            terms, radix = packed_terms(ev.key_columns, ranges)
            fiber_sql = " + ".join(terms)
        else:
            radix, fiber_sql = 0, f"CAST(dense_rank() OVER (ORDER BY {', '.join(ev.key_columns)}) AS BIGINT)"
        # no candidate can be excluded (no NULLs, no division): the reason is not evaluated per candidate
        never = _never_excluded(con, relation, evidence, claim)
        rows = con.execute(f"SELECT {candidate_part_sql('hash(candidate_id)')} AS a, {fiber_sql} AS f, y "
                           f"FROM {ev_t}" + ("" if never else " WHERE reason IS NULL")).fetchnumpy()
        n_excluded = 0 if never else int(
            con.execute(f"SELECT count(*) FROM {ev_t} WHERE reason IS NOT NULL").fetchall()[0][0])
        threads = _threads(con)
    except duckdb.Error as exc:
        if machine_limit(exc):  # memory or spill disk, not the data: the run says so
            raise
        raise InputError(f"cannot evaluate the claim {claim.text!r} or the evidence: {duckdb_message(exc)}",
                         file=ev.label or relation) from None
    finally:
        con.execute(f"DROP VIEW IF EXISTS {ev_t}")
    parts = np.asarray(rows["a"], dtype=np.uint64)
    key = np.asarray(rows["f"], dtype=np.int64)
    y = np.asarray(rows["y"], dtype=bool)
    del rows
    if ranges is None:  # dense_rank() numbered them in key order already
        fiber = np.unique(key, return_inverse=True)[1]
    elif radix <= 1 << 26:  # a lookup table over the packed keys: no sort
        present = np.flatnonzero(np.bincount(key, minlength=radix))
        lookup = np.empty(radix, dtype=np.int64)
        lookup[present] = _key_order(present, ranges)
        fiber = lookup[key]
    else:
        distinct, inverse = np.unique(key, return_inverse=True)
        fiber = _key_order(distinct, ranges)[inverse]
    del key
    return _split_counts_by_fiber(parts, fiber, y, n_excluded, config, threads)


def _threads(con: duckdb.DuckDBPyConnection) -> int:
    """DuckDB's thread count on ``con``: the numpy split pass counts on as many."""
    return int(con.execute("SELECT current_setting('threads')").fetchall()[0][0])


def _key_order(packed: np.ndarray, ranges: list[tuple[int, int]]) -> np.ndarray:
    """For distinct packed keys (:func:`packed_terms`), each one's rank in the order of its key parts — the
    first part first, NULL after every value, as the audit numbers fibers (``ORDER BY k0, k1, … NULLS LAST``)."""
    codes, radix = [], 1
    for lo, hi in ranges:
        base = hi - lo + 2
        digit = (packed // radix) % base
        codes.append(np.where(digit == 0, base, digit))  # digit 0 is NULL: after every value
        radix *= base
    order = np.lexsort(codes[::-1])  # lexsort's last key is its first: the first part
    rank = np.empty(len(packed), dtype=np.int64)
    rank[order] = np.arange(len(packed), dtype=np.int64)
    return rank


def _split_counts_by_fiber(parts: np.ndarray, fiber: np.ndarray, y: np.ndarray, n_excluded: int,
                           config: SplitDesign, threads: int) -> dict[str, np.ndarray]:
    """The engine-format split counts (:func:`split_halves`) of the audited candidates: their parts of the id
    hash, fibers (0 … F−1) and claim values."""
    n_fibers = int(fiber.max(initial=-1)) + 1
    group = 2 * fiber + y
    n = np.bincount(fiber, minlength=n_fibers).astype(np.int64)
    t = np.bincount(fiber, weights=y, minlength=n_fibers).astype(np.int64)
    seeds = np.arange(int(config.seed_offset), int(config.seed_offset) + int(config.seeds), dtype=np.int64)
    cal = split_counts_of_parts(parts, group, 2 * n_fibers, seeds, config.threshold, threads=threads)
    del group
    n_cal = cal[:, 0::2] + cal[:, 1::2]  # (seed, fiber)
    t_cal = cal[:, 1::2]
    return split_halves(n, t, n_cal, t_cal, n_excluded)


def candidates_split_counts(con: duckdb.DuckDBPyConnection, candidates: pa.Table,
                            design: SplitDesign) -> dict[str, np.ndarray] | None:
    """The split counts from a fiber audit's candidates table (``candidate_id`` as text, ``fiber_key``,
    ``claim_value``; excluded candidates without a fiber) — the same counts the engine's pass finds over the
    audited relation with that evidence map and claim, without reading the relation again (the ids' cast to
    text and the evidence are the audit's). None when the numpy pass cannot run (this DuckDB hashes by
    another formula, or the candidates outgrow the memory limit): the caller runs the engine's pass."""
    if not _hash_matches(con) or not _fits_in_memory(con, candidates.num_rows):
        return None
    name = f"_rcand_{next(_counter)}"
    con.register(name, candidates.select(["candidate_id", "fiber_key", "claim_value"]))
    try:
        rows = con.execute(f"SELECT {candidate_part_sql('hash(candidate_id)')} AS a, fiber_key AS f, "
                           f"claim_value AS y FROM {name} WHERE fiber_key IS NOT NULL").fetchnumpy()
        threads = _threads(con)
    finally:
        con.unregister(name)
    fiber = np.asarray(rows["f"], dtype=np.int64)
    return _split_counts_by_fiber(np.asarray(rows["a"], dtype=np.uint64), fiber, np.asarray(rows["y"], dtype=bool),
                                  candidates.num_rows - len(fiber), design, threads)


def _fiber_split_counts_sql(con: duckdb.DuckDBPyConnection, relation: str, ev: Any, claim: Claim,
                            config: SplitDesign) -> dict[str, np.ndarray]:
    """The split counts as one SQL pass over candidates × seeds (the definition; used when this
    DuckDB's ``hash`` is not the one :func:`split_counts` reproduces)."""
    keys = ", ".join(ev.key_columns)
    sql = f"""
    SELECT CAST(s.seed - {int(config.seed_offset)} AS BIGINT) AS seed_index, b.f, {_split_sql(config)} AS cal,
           count(*) AS n, count(*) FILTER (WHERE b.y) AS t
    FROM (SELECT hash(candidate_id) AS h, CAST(dense_rank() OVER (ORDER BY {keys}) AS BIGINT) AS f, y
          FROM ({ev.sql}) WHERE reason IS NULL) b
    CROSS JOIN {_seeds_sql(config)}
    GROUP BY ALL
    -- candidates the evidence map leaves out (missing evidence or claim) are counted, not lost
    UNION ALL SELECT -1, 0, FALSE, count(*), 0 FROM ({ev.sql}) WHERE reason IS NOT NULL"""
    try:
        return con.execute(sql).fetchnumpy()
    except duckdb.Error as exc:
        if machine_limit(exc):  # memory or spill disk, not the data: the run says so
            raise
        raise InputError(f"cannot evaluate the claim {claim.text!r} or the evidence: {duckdb_message(exc)}",
                         file=ev.label or relation) from None


def _fiber_outcomes(counts: dict[str, np.ndarray], cfg: ReplayConfig, model: str | None) -> dict[str, np.ndarray]:
    """Per-seed outcomes from the (seed, fiber, half) counts.

    The counts table is small (at most 2 × seeds × fibers rows), and DuckDB's planning time for the
    handful of joins this step needs exceeds the work, so it is reduced here with vectorised numpy
    (``np.unique`` / ``np.bincount`` over the rows; no loop over seeds or fibers).
    """
    seed_index = np.asarray(counts["seed_index"], dtype=np.int64)
    fiber = np.asarray(counts["f"], dtype=np.int64)
    is_cal = np.asarray(counts["cal"], dtype=bool)
    n, t = np.asarray(counts["n"], dtype=np.int64), np.asarray(counts["t"], dtype=np.int64)
    n_seeds = int(cfg.seeds)
    # One unit per (seed, fiber) present in either half.
    key = seed_index * (int(fiber.max(initial=0)) + 1) + fiber
    uniq, unit = np.unique(key, return_inverse=True)
    m = len(uniq)
    unit_seed = np.zeros(m, dtype=np.int64)
    unit_seed[unit] = seed_index
    n_cal = np.bincount(unit, weights=np.where(is_cal, n, 0), minlength=m)
    t_cal = np.bincount(unit, weights=np.where(is_cal, t, 0), minlength=m)
    n_test = np.bincount(unit, weights=np.where(is_cal, 0, n), minlength=m)
    t_test = np.bincount(unit, weights=np.where(is_cal, 0, t), minlength=m)

    def per_seed(values: np.ndarray) -> np.ndarray:
        return np.bincount(unit_seed, weights=values, minlength=n_seeds)

    seed_cal, seed_cal_true = per_seed(n_cal), per_seed(t_cal)
    gmaj = (2 * seed_cal_true > seed_cal)[unit_seed]
    maj = 2 * t_cal > n_cal
    minority = np.minimum(t_cal, n_cal - t_cal)
    seen = n_cal > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        if cfg.mode == "exact":
            certified = seen & (n_cal >= cfg.min_support) & (minority == 0)
            bound = np.where(seen & (minority == 0), 1.0 - cfg.delta ** (1.0 / np.where(seen, n_cal, 1.0)), np.nan)
        elif cfg.mode == "calibrated":
            bound = np.where(seen, cp_upper(minority, n_cal, cfg.delta), np.nan)
            certified = seen & (n_cal >= cfg.min_support) & (bound <= cfg.epsilon)
        else:  # familywise: Holm across the supported fibers of each seed, alpha = delta
            bound = np.where(seen, cp_upper(minority, n_cal, cfg.delta), np.nan)
            tested = seen & (n_cal >= cfg.min_support)
            certified = tested.copy()
            certified[tested] = holm(unit_seed[tested], binomial_pvalue(minority[tested], n_cal[tested],
                                                                        cfg.epsilon), cfg.delta)
    fm_dec = np.where(seen, maj, gmaj)

    def wrong(decision: np.ndarray) -> np.ndarray:
        return np.where(decision, n_test - t_test, t_test)

    # price-aware: the benchmark-only action per fiber, judged by the calibration members against it; an
    # unseen fiber's action is the global majority, so its error is estimated from the whole calibration half
    g_against = np.where(gmaj, (seed_cal - seed_cal_true)[unit_seed], seed_cal_true[unit_seed])
    k_against = np.where(seen, np.where(fm_dec, n_cal - t_cal, t_cal), g_against)
    priced = price_aware_outcomes(unit_seed, n_seeds, k_against, np.where(seen, n_cal, seed_cal[unit_seed]),
                                  wrong(fm_dec), n_test, cfg.prices, cfg.delta)

    n_cert = per_seed(np.where(certified, n_test, 0))
    weighted = per_seed(np.where(certified, np.nan_to_num(bound) * n_test, 0))
    bound_max = np.full(n_seeds, -np.inf)
    np.maximum.at(bound_max, unit_seed[certified], bound[certified])
    return {
        "model": np.full(n_seeds, model, dtype=object),
        "seed": np.arange(n_seeds, dtype=np.int64) + int(cfg.seed_offset),
        "n_calibration": seed_cal,
        "n_test": per_seed(n_test),
        "tolerance": np.full(n_seeds, np.nan),
        "n_cert": n_cert,
        "false_cert": per_seed(np.where(certified, wrong(maj), 0)),
        "n_cert_units": per_seed(certified.astype(float)),
        "false_fm": per_seed(wrong(fm_dec)),
        "false_gm": per_seed(wrong(gmaj)),
        "risk_bound": np.where(n_cert > 0, weighted / np.where(n_cert > 0, n_cert, 1), np.nan),
        "risk_bound_max": np.where(np.isfinite(bound_max), bound_max, np.nan),
    } | priced


_DENSE_POSITIONS = 16_000_000  # (model, rank) -> row table entries (int32, 64 MB) before binary search instead


@dataclass(frozen=True)
class WindowRows:
    """Every test (candidate, seed) entry with its calibration window: group, candidate row, label, members, trues.

    ``n_calibration`` / ``t_calibration`` are per group: calibration members and trues of the whole group.
    Entries come seed-major, then by model and evidence (not in group order).
    """

    group: np.ndarray
    candidate: np.ndarray  # index of the candidate row in the input
    y: np.ndarray
    n_cal: np.ndarray
    t_cal: np.ndarray
    n_calibration: np.ndarray
    t_calibration: np.ndarray


def window_counts(x: np.ndarray, model: np.ndarray, y: np.ndarray, is_cal: np.ndarray, tolerance: np.ndarray,
                  defined: np.ndarray | None = None, *, dense_limit: int = _DENSE_POSITIONS) -> WindowRows:
    """Calibration windows of every test entry of a (candidate, seed) split, all models and seeds at once.

    ``x``, ``model`` (index 0..M−1), ``y``: one per candidate row; ``is_cal``: (candidate, seed) matrix of
    calibration membership; ``tolerance``/``defined``: per group ``g = model · seeds + seed``. The window of
    a test entry is every calibration row of its group with ``|x_cal − x| <= tol[g]``, evaluated as the
    SQL replay did: ``x_cal <= x + tol`` and not ``x_cal < x − tol`` in IEEE doubles, NaN ordered after
    every number (DuckDB's order); a group whose tolerance is not ``defined`` (NULL) has empty windows.

    Sorted arrays and prefix sums, no per-point masks: rows are sorted once by (model, x); per seed,
    prefix sums over those rows count calibration members and trues, so a window is the difference of
    two prefix sums. Its ends come from a binary search of ``x ± tol`` among the distinct values (a rank),
    then the first row of the model at or beyond that rank: a lookup in a (model, rank) -> row table, or
    (when that table would exceed ``dense_limit`` entries) a second binary search on the packed int64 key
    model · (values + 1) + rank — exact, where offsetting the floats per model would round and could move
    a window edge. Test entries are taken seed-major over the sorted rows, so the searches receive their
    keys in order and walk the arrays instead of jumping through them.

    The sort and the lookup table are :class:`WindowIndex` (built once); :func:`window_replay` counts the
    seeds a chunk at a time with :meth:`WindowIndex.count`, so that no array holds every test entry.
    """
    index = WindowIndex.build(x, model, y, dense_limit=dense_limit)
    return index.count(index.sorted_split(is_cal), tolerance, defined)


@dataclass(frozen=True)
class WindowIndex:
    """Candidate rows sorted by (model, evidence) with what every window search needs, built once per replay."""

    order: np.ndarray        # sorted position -> input row
    x: np.ndarray            # evidence, sorted
    model: np.ndarray        # model index (int32), sorted
    y: np.ndarray            # claim, sorted
    values: np.ndarray       # distinct evidence values, NaN last
    width: int               # len(values) + 1
    n_models: int
    first_row: np.ndarray | None  # (model, rank) -> first sorted row at or beyond it (dense lookup), or None
    row_key: np.ndarray | None    # packed (model, rank) key per sorted row (binary search instead)
    ends: np.ndarray         # start of every model's block of sorted rows, and the end

    @classmethod
    def build(cls, x: np.ndarray, model: np.ndarray, y: np.ndarray, *,
              dense_limit: int = _DENSE_POSITIONS) -> WindowIndex:
        x = np.asarray(x, dtype=float)
        model = np.asarray(model, dtype=np.int64)
        n_rows = len(x)
        n_models = int(model.max(initial=-1)) + 1
        order = np.lexsort((x, model))  # by model, then evidence (NaN last)
        x, model, y = x[order], model[order], np.asarray(y, dtype=bool)[order]
        values = np.unique(x)  # sorted distinct evidence values, NaN last
        width = len(values) + 1
        if n_models * width >= 2 ** 62:  # pragma: no cover - ~10^18 keys
            raise ValueError(f"{n_models} models x {width} distinct values overflow a packed int64 key")
        if n_rows >= 2 ** 31:  # pragma: no cover - the (seed, row) matrices alone would need > 100 GB
            raise ValueError(f"{n_rows} candidate rows: window counts pack two 32-bit prefix sums per entry")
        row_key = model * width + np.searchsorted(values, x)  # ascending: rows are sorted by (model, x)
        first_row = None
        if n_models * width <= dense_limit:  # first row with key >= k, for every key k
            first_row = np.zeros(n_models * width + 1, dtype=np.int32)
            np.cumsum(np.bincount(row_key, minlength=n_models * width), out=first_row[1:])
        ends = np.searchsorted(model, np.arange(n_models + 1), side="left")
        return cls(order, x, model.astype(np.int32), y, values, width, n_models, first_row,
                   None if first_row is not None else row_key, ends)

    def sorted_split(self, is_cal: np.ndarray) -> np.ndarray:
        """The (candidate, seed) calibration matrix with its rows in sorted order."""
        return np.asarray(is_cal, dtype=bool)[self.order]

    def _row_at(self, key: np.ndarray) -> np.ndarray:
        if self.first_row is not None:
            return self.first_row[key]
        assert self.row_key is not None  # one of the two lookups is built
        return np.searchsorted(self.row_key, key, side="left")

    def count(self, cal_sorted: np.ndarray, tolerance: np.ndarray, defined: np.ndarray | None = None) -> WindowRows:
        """The windows of the test entries of the seeds in ``cal_sorted`` ((sorted row, seed) matrix; groups
        ``model · seeds + seed`` numbered over these seeds only, as ``tolerance`` and ``defined`` are)."""
        n_rows, n_seeds = cal_sorted.shape
        cal = np.ascontiguousarray(cal_sorted.T)  # (seed, row)
        # Per seed, prefix sums over the sorted rows: calibration members (high 32 bits) and trues (low 32
        # bits) of rows [0, i), packed so one gather reads both and one subtraction gives both differences.
        prefix = np.zeros((n_seeds, n_rows + 1), dtype=np.int64)
        np.cumsum((cal.astype(np.int64) << 32) | (cal & self.y[None, :]), axis=1, out=prefix[:, 1:])
        seed, row = np.nonzero(~cal)  # test entries, seed-major: x ascending within each (seed, model)
        del cal
        m = self.model[row].astype(np.int64)
        group = m * n_seeds + seed
        del seed
        tol = np.asarray(tolerance, dtype=float)[group]
        x_test = self.x[row]
        # rows before `hi` in the model's block hold x <= x_test + tol; rows before `lo` hold x < x_test − tol
        with np.errstate(invalid="ignore"):  # inf ∓ inf is NaN, as in SQL
            base = m * self.width
            lo_v, hi_v = window_bounds(self.values, x_test, tol)  # |Δ| <= tol exactly, not x ± tol rounded
            hi = self._row_at(base + hi_v)
            lo = self._row_at(base + lo_v)
        del m, base, x_test, tol
        at = (group % n_seeds) * (n_rows + 1)  # start of the entry's seed in the flattened prefix sums
        flat = prefix.ravel()
        both = flat[at + hi] - flat[at + lo]
        del at, hi, lo
        if defined is not None:
            both = np.where(np.asarray(defined, dtype=bool)[group], both, 0)
        # whole-group totals: the prefix sums at each model's block ends, (model, seed) -> group order
        totals = (prefix[:, self.ends[1:]] - prefix[:, self.ends[:-1]]).T.ravel()
        return WindowRows(group, self.order[row], self.y[row], both >> 32, both & 0xFFFFFFFF, totals >> 32,
                          totals & 0xFFFFFFFF)


def _window_outcomes(rows: WindowRows, gmaj: np.ndarray, cfg: ReplayConfig, n_group: np.ndarray | None = None,
                     t_group: np.ndarray | None = None, bounds: BoundCache | None = None) -> dict[str, np.ndarray]:
    """Per-group (model × seed) outcome counts from every test candidate's window; vectorised, no loop.

    The risk bound is evaluated only where it decides or is reported: in exact mode on the certified
    (pure, supported) windows, in calibrated mode once per distinct (minority, members) pair among the
    supported windows; the four outcome counts come from one ``bincount`` of a code.
    """
    group, y, n_cal, t_cal = rows.group, rows.y, rows.n_cal, rows.t_cal
    n_groups = len(gmaj)
    g_maj = gmaj[group]
    minority = np.minimum(t_cal, n_cal - t_cal)
    supported = n_cal >= cfg.min_support  # min_support >= 1, so these windows are not empty
    if cfg.mode == "exact":
        certified = supported & (minority == 0)
        # a pure window's bound has a closed form, 1 − δ^(1/n)
        cert_bound = 1.0 - np.power(cfg.delta, 1.0 / n_cal[certified])
    else:
        span = int(n_cal.max(initial=0)) + 1
        pairs, pair_of = arrays.unique_codes(minority[supported].astype(np.int64) * span + n_cal[supported],
                                             (int(minority.max(initial=0)) + 1) * span)
        p_bound = (bounds(pairs // span, pairs % span) if bounds is not None
                   else cp_upper(pairs // span, pairs % span, cfg.delta))
        certified = supported.copy()
        if cfg.mode == "calibrated":
            certified[supported] = p_bound[pair_of] <= cfg.epsilon
        else:  # familywise: Holm across the supported windows of each (model, seed) group, alpha = delta
            p_value = binomial_pvalue(pairs // span, pairs % span, cfg.epsilon)[pair_of]
            certified[supported] = holm(group[supported], p_value, cfg.delta)
        cert_bound = p_bound[pair_of][certified[supported]]
    # the benchmark-only action on a window: its majority (>= 0.5 -> true), as in the paper
    fm_dec = np.where(n_cal >= cfg.min_support, 2 * t_cal >= n_cal, g_maj)
    # price-aware: act on that action where the window's calibration members rarely contradict it; below
    # support the action is the global majority, and its error is estimated from the group's calibration half
    fallback = n_cal < cfg.min_support
    k_against = np.where(fm_dec, n_cal - t_cal, t_cal)
    n_against = n_cal
    if n_group is not None and t_group is not None:
        n_g, t_g = np.asarray(n_group)[group], np.asarray(t_group)[group]
        k_against = np.where(fallback, np.where(g_maj, n_g - t_g, t_g), k_against)
        n_against = np.where(fallback, n_g, n_cal)
    priced = price_aware_outcomes(group, n_groups, k_against, n_against, (fm_dec != y).astype(float),
                                  np.ones(len(group)), cfg.prices, cfg.delta, bounds)
    code = (certified.astype(np.int64) * 8 + (certified & ((2 * t_cal > n_cal) != y)) * 4
            + (fm_dec != y) * 2 + (g_maj != y))
    counts = np.bincount(group * 16 + code, minlength=n_groups * 16).reshape(n_groups, 16)
    bits = np.arange(16)

    def total(bit: int) -> np.ndarray:
        return counts[:, (bits & bit) > 0].sum(axis=1).astype(float)

    n_cert = total(8)
    cert_group = group[certified]
    bound_sum = np.bincount(cert_group, weights=cert_bound, minlength=n_groups)
    bound_max = np.full(n_groups, -np.inf)
    np.maximum.at(bound_max, cert_group, cert_bound)
    return {
        "n_cert": n_cert,
        "n_cert_units": n_cert,
        "false_cert": total(4),
        "false_fm": total(2),
        "false_gm": total(1),
        "risk_bound": np.where(n_cert > 0, bound_sum / np.where(n_cert > 0, n_cert, 1.0), np.nan),
        "risk_bound_max": np.where(np.isfinite(bound_max), bound_max, np.nan),
    } | priced


_CHUNK_ENTRIES = 1 << 18  # test (candidate, seed) entries counted at once: ~30 MB of per-entry arrays


def _chunked_windows(x: np.ndarray, model: np.ndarray, y: np.ndarray, is_cal: np.ndarray, tolerance: np.ndarray,
                     defined: np.ndarray, n_models: int, cfg: ReplayConfig
                     ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Calibration totals and window outcomes of every (model, seed) group, a chunk of seeds at a time.

    Everything per test entry lives for one chunk of seeds only (about ``_CHUNK_ENTRIES`` entries): the
    rows are sorted once (:class:`WindowIndex`), each chunk's windows counted and reduced to per-group
    outcomes (:func:`_window_outcomes`), and those are written into the group order ``model · seeds +
    seed``. A group's entries are one seed's, in the same order in a chunk as in one pass over all seeds,
    so every sum is the same sum.
    """
    n_rows, n_seeds = is_cal.shape
    index = WindowIndex.build(x, model, y)
    cal_sorted = index.sorted_split(is_cal)
    per_chunk = max(1, min(n_seeds, _CHUNK_ENTRIES // max(1, n_rows)))
    tol = np.asarray(tolerance, dtype=float).reshape(n_models, n_seeds)
    ok = np.asarray(defined, dtype=bool).reshape(n_models, n_seeds)
    n_cal = np.zeros((n_models, n_seeds), dtype=np.int64)
    t_cal = np.zeros((n_models, n_seeds), dtype=np.int64)
    out: dict[str, np.ndarray] = {}
    bounds = BoundCache(cfg.delta)  # the chunks share their Clopper–Pearson bounds
    for s0 in range(0, n_seeds, per_chunk):  # a handful of chunks of seeds, not a loop over candidates
        s1 = min(n_seeds, s0 + per_chunk)
        rows = index.count(cal_sorted[:, s0:s1], tol[:, s0:s1].ravel(), ok[:, s0:s1].ravel())
        n_c, t_c = rows.n_calibration, rows.t_calibration
        got = _window_outcomes(rows, 2 * t_c > n_c, cfg, n_c, t_c, bounds)
        del rows
        n_cal[:, s0:s1] = n_c.reshape(n_models, s1 - s0)
        t_cal[:, s0:s1] = t_c.reshape(n_models, s1 - s0)
        for key, value in got.items():
            if key not in out:
                out[key] = np.zeros((*value.shape[:-1], n_models, n_seeds), dtype=value.dtype)
            out[key][..., s0:s1] = value.reshape(*value.shape[:-1], n_models, s1 - s0)
    return n_cal.ravel(), t_cal.ravel(), {k: v.reshape(*v.shape[:-2], n_models * n_seeds) for k, v in out.items()}


def _group_tolerance(con: duckdb.DuckDBPyConnection, tol: Tolerance, error: np.ndarray, has_ref: np.ndarray,
                     is_cal: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-group tolerance and whether it is defined (not NULL), from the calibration errors.

    ``is_cal`` is the (candidate, seed) matrix, its rows in one block per model from ``starts``; groups
    are (model, seed), model-major. ``error`` holds |x − reference| per candidate; candidates without a
    reference (``has_ref`` false) are left out, as SQL aggregates leave out NULL (a NaN error with a
    reference stays in and makes the width NaN, as before). ``mae`` is the mean (:func:`_nanmean`: exact
    for a constant, no overflow; deterministic, where DuckDB's parallel ``avg`` may differ in the last bit
    from run to run); ``qNN``
    is DuckDB's ``quantile_cont`` over the same rows, so percentiles are interpolated exactly as before
    (DuckDB's double interpolation is compiled with a fused multiply-add numpy cannot reproduce).
    """
    n_rows, n_seeds = is_cal.shape
    n_groups = len(starts) * n_seeds
    if tol.kind == "fixed":
        return np.full(n_groups, float(tol.value or 0.0)), np.ones(n_groups, dtype=bool)
    used = is_cal & has_ref[:, None]
    blocks = list(zip(starts, np.append(starts[1:], n_rows), strict=True))  # one model's rows each
    # a model at a time: no (candidate, seed) matrix of int64 or float is ever whole
    count = np.concatenate([used[a:b].sum(axis=0, dtype=np.int64) for a, b in blocks])
    defined = count > 0
    if tol.kind == "mae":
        # the overflow-free mean of _nanmean (a plain sum of errors near 1e308 is inf), a block of seeds at a
        # time; NaN marks the rows a group leaves out, so an error that is itself NaN makes the width NaN here
        means = []
        for a, b in blocks:
            step = max(1, _BLOCK_BYTES // (8 * max(1, b - a)))
            for s0 in range(0, n_seeds, step):
                part = used[a:b, s0:s0 + step]
                mean = _nanmean(np.where(part, error[a:b, None], np.nan).T)
                means.append(np.where((part & np.isnan(error[a:b, None])).any(axis=0), np.nan, mean))
        return np.where(defined, np.concatenate(means), np.nan), defined
    model = np.repeat(np.arange(len(starts), dtype=np.int32), np.diff(np.append(starts, n_rows)))
    group = model[:, None] * np.int32(n_seeds) + np.arange(n_seeds, dtype=np.int32)[None, :]
    name = f"_rw_errors_{next(_counter)}"
    con.register(name, pa.table({"g": group[used], "e": np.broadcast_to(error[:, None], used.shape)[used]}))
    try:
        got = con.sql(f"SELECT g, quantile_cont(e, {tol.value!r}) AS v FROM {name} GROUP BY g").fetchnumpy()
    finally:
        con.unregister(name)
    value = np.full(n_groups, np.nan)
    value[np.asarray(got["g"], dtype=np.int64)] = np.asarray(got["v"], dtype=float)
    return value, defined


_BYTES_PER_CANDIDATE_SEED = 4  # the split list (Arrow) and its numpy matrix copies, per candidate and seed


def check_seeds_fit(con: duckdb.DuckDBPyConnection, relation: str, seeds: int) -> None:
    """A window replay holds a (candidate, seed) matrix: refuse seeds that cannot fit the memory limit."""
    n = con.execute(f"SELECT count(*) FROM {relation}").fetchall()[0][0]
    limit_bytes = memory_limit_bytes(con)
    need = int(n) * int(seeds) * _BYTES_PER_CANDIDATE_SEED
    if limit_bytes and need > limit_bytes:
        fit = max(1, limit_bytes // max(1, int(n) * _BYTES_PER_CANDIDATE_SEED))
        limit = con.execute("SELECT current_setting('memory_limit')").fetchall()[0][0]
        raise SpecError(f"replay: {seeds} seeds over {n} candidates need about {need / 2**30:.1f} GiB, more than "
                        f"the memory limit ({limit}); use at most {fit} seeds or raise --memory-limit")


def _split_matrix(h: np.ndarray, cfg: ReplayConfig) -> np.ndarray:
    """(candidate, seed index) calibration membership from the id hashes ``h``: the split SQL computes
    (``hash(h, seed) % SPLIT_BUCKETS < threshold``, :func:`_split_hashes`), a few seeds at a time."""
    seeds = np.arange(int(cfg.seed_offset), int(cfg.seed_offset) + int(cfg.seeds), dtype=np.int64)
    with np.errstate(over="ignore"):
        a = _candidate_part(h)
        c = _murmur(seeds.astype(np.uint64))
    out = np.empty((len(h), len(seeds)), dtype=bool)
    step = max(1, _BLOCK_BYTES // (8 * max(1, len(h))))
    buckets, below = np.uint64(SPLIT_BUCKETS), np.uint64(cfg.threshold)
    for s0 in range(0, len(seeds), step):
        w = a[:, None] ^ c[None, s0:s0 + step]
        np.remainder(w, buckets, out=w)
        np.less(w, below, out=out[:, s0:s0 + step])
    return out


def _split_list_sql(cfg: ReplayConfig, h: str) -> str:
    """Calibration membership of hash ``h`` at every seed as one list (index = seed − offset).

    The same expression as :func:`_split_sql`, evaluated per candidate rather than per (candidate, seed)
    row: one row per candidate leaves DuckDB, and numpy reads the list as a (candidate, seed) matrix.
    """
    first = int(cfg.seed_offset)
    return (f"list_transform(range({first}, {first + int(cfg.seeds)}), "
            f"lambda s: {split_sql(h, 's', cfg.threshold)})")


def replay_windows(
    con: duckdb.DuckDBPyConnection,
    relation: str,
    *,
    id_column: str,
    window: WindowSpec,
    claim: Claim,
    config: ReplayConfig = ReplayConfig(min_support=defaults.MIN_SUPPORT_WINDOWS),
    labels: AuditLabels,
    model_column: str | None = None,
) -> pa.Table:
    """Error-window replay (see :func:`window_replay`); the ``replay`` table only."""
    return window_replay(con, relation, id_column=id_column, window=window, claim=claim, config=config,
                         labels=labels, model_column=model_column).replay


def window_replay(
    con: duckdb.DuckDBPyConnection,
    relation: str,
    *,
    id_column: str,
    window: WindowSpec,
    claim: Claim,
    config: ReplayConfig = ReplayConfig(min_support=5),
    labels: AuditLabels,
    model_column: str | None = None,
) -> ReplayResult:
    """Error-window replay: a test candidate is certified by the calibration candidates within ``tol``.

    With ``model_column`` the relation is long (one row per model × candidate); every model is replayed
    on the same splits (the hash depends on the candidate id and seed only), one summary row per model
    and one pooled summary row per policy with ``model`` NULL.

    One SQL pass gives, per (model, candidate), the model's index, evidence, reference, claim label and
    the hash of the id; numpy makes the (candidate, seed) calibration matrix from the hash (as the SQL
    split computes it), the per-(model, seed) tolerances a model at a time, and the windows of the test
    candidates a chunk of seeds at a time (:func:`_chunked_windows`, :class:`WindowIndex`): memory
    grows with candidates × seeds only by that boolean matrix.
    """
    available = user_columns(con, relation)
    needed = ([id_column] if id_column != ROW else []) + [window.column] + ([window.reference] if window.reference else [])
    check_columns(tuple(needed) + ((model_column,) if model_column else ()), available, what="the window replay")
    check_columns(claim.columns, available, what=f"claim {claim.text!r}")
    q = quote_identifier
    types = column_types(con, relation)
    guard_nan(con, types, (window.column, *claim.columns))
    require_numeric(con, relation, window.column, types, why="a tolerance window")
    if window.reference:
        require_numeric(con, relation, window.reference, types, why="the tolerance's reference")
    y_sql = claim_sql(claim, types)
    x, ref = q(window.column), (q(window.reference) if window.reference else "NULL::DOUBLE")
    check_seeds_fit(con, relation, config.seeds)
    model = (f"CAST({q(model_column)} AS VARCHAR)" if model_column
             else (_literal(labels.model) if labels.model is not None else "NULL::VARCHAR"))
    # The split of every candidate at every seed: computed in numpy from the id hash when this DuckDB's
    # hash(h, seed) is the one _split_hashes reproduces (no candidate × seed list leaves DuckDB), else
    # read from SQL as one list per candidate.
    fast = _hash_matches(con)
    try:
        # rows ordered by model index (mi: the order of the output rows), so a model is a block of rows, and
        # within a model by id hash, evidence and reference: the mae tolerance sums the errors in row order, and
        # a parallel scan hands rows over in any order (rows equal in all three have equal errors). Fetched as
        # numpy (Arrow's to_numpy would import pandas: +50 MB and a second of start-up)
        kept = f"FROM {relation} WHERE isfinite(CAST({x} AS DOUBLE)) AND ({y_sql}) IS NOT NULL"
        data = con.execute(f"""
        SELECT CAST(dense_rank() OVER (ORDER BY model NULLS FIRST) - 1 AS BIGINT) AS mi, x, r, y,
               {'h' if fast else _split_list_sql(config, 'h')} AS c
        FROM (SELECT {model} AS model, hash(CAST({q(id_column)} AS VARCHAR)) AS h, CAST({x} AS DOUBLE) AS x,
                     CAST({ref} AS DOUBLE) AS r, CAST({y_sql} AS BOOLEAN) AS y
              {kept})
        ORDER BY mi, h, x, r NULLS LAST""").fetchnumpy()
        # the models in the order of their index mi (a name per model, not per row)
        model_names = [r[0] for r in con.execute(f"SELECT DISTINCT {model} AS model {kept} "
                                                 "ORDER BY model NULLS FIRST").fetchall()]
        # NaN / ±inf evidence cannot sit in a window: excluded, like missing evidence
        n_excluded = con.execute(f"SELECT count(*) FROM {relation} WHERE isfinite(CAST({x} AS DOUBLE)) IS NOT TRUE "
                                 f"OR ({y_sql}) IS NULL").fetchall()[0][0]
    except duckdb.Error as exc:
        if machine_limit(exc):  # memory or spill disk, not the data: the run says so
            raise
        raise InputError(f"cannot evaluate the claim {claim.text!r} or the evidence column: {duckdb_message(exc)}",
                         file=label_of(relation)) from None
    n_rows = len(data["mi"])
    if not n_rows:
        raise InputError(f"no candidate has both a value of {window.column!r} and of the claim "
                         f"{claim.text!r}", file=relation, column=window.column)
    n_seeds = int(config.seeds)
    mi = np.asarray(data["mi"], dtype=np.int64)
    starts = np.flatnonzero(np.concatenate(([True], mi[1:] != mi[:-1])))
    models = np.asarray(model_names, dtype=object)
    cand_x = np.asarray(data["x"], dtype=float)
    cand_y = np.asarray(data["y"], dtype=bool)
    r = data["r"]
    has_ref = ~arrays.fetched_nulls(r)
    with np.errstate(invalid="ignore"):  # inf − inf is NaN, as in SQL
        error = np.abs(cand_x - arrays.fetched_filled(r, np.nan).astype(float))
    if fast:
        is_cal = _split_matrix(np.asarray(data["c"], dtype=np.uint64), config)  # (candidate, seed index)
    else:  # pragma: no cover - a DuckDB whose hash _split_hashes does not reproduce
        is_cal = np.array([np.asarray(c, dtype=bool) for c in data["c"]], dtype=bool).reshape(n_rows, n_seeds)
    del data, r
    # per (model, seed) before any window is counted: a half without candidates is bad input
    sizes = np.diff(np.append(starts, n_rows))
    check_both_halves(np.add.reduceat(is_cal, starts, axis=0, dtype=np.int64).ravel(), np.repeat(sizes, n_seeds),
                      int(config.seed_offset), file=label_of(relation), models=model_names)
    # groups g = model index × seeds + seed index: the order of the per-seed output rows
    tolerance, defined = _group_tolerance(con, window.tolerance, error, has_ref, is_cal, starts)
    del error, has_ref
    n_cal, t_cal, outcomes = _chunked_windows(cand_x, mi, cand_y, is_cal, tolerance, defined, len(models), config)
    del is_cal
    n_test = np.repeat(np.diff(np.append(starts, n_rows)), n_seeds) - n_cal
    ps = outcomes | {
        "model": np.repeat(models, n_seeds),
        "seed": np.tile(np.arange(n_seeds, dtype=np.int64) + int(config.seed_offset), len(models)),
        "n_calibration": n_cal.astype(float),
        "n_test": n_test.astype(float),
        "tolerance": tolerance,
    }
    names = ReplayLabels(labels.source, labels.audit_id, claim.text, window.column,
                         f"window:{window.tolerance}", "window", int(n_excluded))
    pooled = model_column is not None
    return ReplayResult(_replay_table(ps, config, names, pooled=pooled), _costs(ps, config, names, pooled=pooled))


# ---------------------------------------------------------------------------------------------------
# Pipeline stage: the [replay] section of a spec.

default_min_support = defaults.replay_min_support  # 50 for fibers, 5 for tolerance windows


_SECTION_KEYS = {"audits", "seeds", "seed_offset", "calibration_fraction", "min_support", "mode", "epsilon",
                 "delta", "prices", "tolerance", "reference", "model_column", "compare_modes"}


@dataclass(frozen=True)
class ReplaySection:
    config: ReplayConfig
    audits: tuple[str, ...] | None = None
    tolerance: Tolerance | None = None
    reference: str | None = None
    model_column: str | None = None
    compare_modes: tuple[Mode, ...] = ()  # more certification modes, replayed for the metrics comparison


def parse_section(raw: dict[str, Any], *, origin: str = "[replay]") -> ReplaySection:
    if not isinstance(raw, dict):
        raise SpecError(f"{origin} must be a table of settings")
    check_keys(raw, _SECTION_KEYS, origin)
    windowed = "tolerance" in raw
    # each value as its field's type: 2.5 seeds or seeds = true is an error, not 2 or 1 seeds
    values = {"min_support": default_min_support(windowed=windowed), **typed_fields(ReplayConfig, raw, origin)}
    cfg = ReplayConfig(**values)  # typed_fields checked each value's type
    audits = name_list(raw["audits"], f"{origin} audits") if "audits" in raw else None
    reference = coerce_field(raw, "reference", str, origin)
    model_column = coerce_field(raw, "model_column", str, origin)
    compare = raw.get("compare_modes", [])
    compare = [compare] if isinstance(compare, str) else list(compare)
    bad = [m for m in compare if m not in MODES]
    if bad:
        raise SpecError(f"{origin}: compare_modes {bad}; use {', '.join(MODES)}")
    # options that only act with another one: given alone they would be silently ignored
    tuned = [k for k in ("epsilon", "delta") if k in raw]
    if tuned and cfg.mode == "exact" and not set(compare) - {"exact"}:
        raise SpecError(f"{origin}: {' and '.join(tuned)} only act in the calibrated and family-wise modes; give "
                        "the mode (--mode calibrated, mode = \"calibrated\" or compare_modes) too, or leave "
                        f"{'it' if len(tuned) == 1 else 'them'} out")
    if reference is not None and not windowed:
        raise SpecError(f"{origin}: reference is what a tolerance window's errors are measured against; give "
                        "tolerance (a width, \"mae\" or \"q80\") too, or leave it out")
    if model_column is not None and not windowed:
        raise SpecError(f"{origin}: model_column groups the windows of a tolerance-window replay per model; a fiber "
                        "replay does not read it (audit per model with per = \"<column>\"), so give tolerance too "
                        "or leave it out")
    tolerance = parse_tolerance(raw["tolerance"]) if windowed else None
    if tolerance is not None and tolerance.kind == "fixed" and reference is not None:
        raise fixed_width_reference(origin, "tolerance", raw["tolerance"])
    return ReplaySection(
        config=cfg,
        audits=audits,
        tolerance=tolerance,
        reference=reference,
        model_column=model_column,
        compare_modes=cast(tuple[Mode, ...], tuple(dict.fromkeys(str(m) for m in compare))),  # checked above
    )


def replay_stage(ctx: StageContext) -> StageTables:
    """Replay every audit named in ``[replay] audits`` (default: all of them)."""
    prefetch_special()  # the bounds and prices need scipy.special: load it while the split passes run
    section = parse_section(ctx.spec.sections.get("replay", {}))
    tasks = {t.audit_id: t for t in ctx.spec.audits}
    chosen = section.audits if section.audits is not None else tuple(tasks)
    missing = [a for a in chosen if a not in tasks]
    if missing:
        raise SpecError(f"[replay] audits {missing} are not audits of spec {ctx.spec.name!r} "
                        f"(it has {sorted(tasks)})")
    out: list[pa.Table] = []
    costs: list[pa.Table] = []
    metrics: list[pa.Table] = []
    if "familywise" in (section.config.mode, *section.compare_modes):
        ctx.notes.append(familywise_note(section.config))
    if section.tolerance is not None and ctx.engine.name != "duckdb":
        ctx.notes.append(f"replay: error windows (tolerance {section.tolerance}) ran on DuckDB over the same "
                         f"prepared tables; the {ctx.engine.name} engine replays fibers")
    for audit_id in chosen:
        task = tasks[audit_id]
        view = ctx.view_for(task.table)
        labels = AuditLabels(ctx.source, audit_id)
        if section.tolerance is not None:
            if len(task.evidence.columns) != 1:
                raise SpecError(f"[replay] tolerance windows need one evidence column; audit {audit_id!r} has "
                                f"{len(task.evidence.columns)}")
            window = WindowSpec(task.evidence.columns[0], section.tolerance, section.reference)
            result = window_replay(ctx.con, view, id_column=ctx.spec.id_column, window=window, claim=task.claim,
                                   config=section.config, labels=labels, model_column=section.model_column)
        else:  # every certification mode from one pass of split counts, on the run's engine
            modes = tuple(dict.fromkeys((section.config.mode, *section.compare_modes)))
            # the audit's candidates of this evidence and claim, when the fiber stage made them over all rows
            audited = ctx.audits.get(audit_id) if task.per is None and task.identity is None else None
            results = fiber_replays(ctx.con, view, id_column=ctx.spec.id_column, evidence=task.evidence,
                                    claim=task.claim, configs=[dataclasses.replace(section.config, mode=m)
                                                               for m in modes], labels=labels, engine=ctx.engine,
                                    candidates=audited.candidates if audited is not None else None)
            result = results[0]
        out.append(result.replay)
        costs.append(result.costs)
        ctx.notes.extend(price_notes(result.costs, audit_id))
        if section.compare_modes:
            by_mode: dict[str, pa.Table] = {section.config.mode: result.replay}
            if section.tolerance is None:
                by_mode = {m: r.replay for m, r in zip(modes, results, strict=True)}
            for mode in section.compare_modes:
                if mode in by_mode:
                    continue
                cfg = dataclasses.replace(section.config, mode=mode)
                by_mode[mode] = replay_windows(ctx.con, view, id_column=ctx.spec.id_column, window=window,
                                               claim=task.claim, config=cfg, labels=labels,
                                               model_column=section.model_column)
            metrics.append(mode_metrics(by_mode, section.config))
    return {"replay": out, "costs": costs} | ({"metrics": metrics} if metrics else {})


def familywise_note(cfg: ReplayConfig) -> str:
    """The manifest note stating the family-wise procedure and its level."""
    return (f"replay: familywise certification = Holm step-down across the fibers (or windows) with >= "
            f"{cfg.min_support} calibration members, per seed (and model); exact binomial p-values of H0 'error rate "
            f"> epsilon = {cfg.epsilon:g}'; alpha = delta = {cfg.delta:g}, so P(any certified fiber's error rate > "
            f"{cfg.epsilon:g}) <= {cfg.delta:g}")


_MODE_METRICS = ("certified_units", "certified_fraction", "false_rate_certified", "false_rate_certified_bound")


def mode_metrics(by_mode: dict[str, pa.Table], cfg: ReplayConfig) -> pa.Table:
    """Certification modes side by side (metrics rows, experiment = ``<audit>:<mode>``): certified fibers per
    seed, certified fraction (ci = p10 / p90 over seeds), held-out false-decision rate among certified decisions
    (mean over seeds) and its per-seed Clopper–Pearson bound (mean), and the rate pooled over all seeds
    (``pooled_false_rate_certified``, ci_high = its Clopper–Pearson bound; seeds share candidates, so this
    pooled bound is optimistic)."""
    rows: list[dict[str, Any]] = []
    for mode, table in by_mode.items():
        data = [r for r in table.to_pylist() if r["policy"] == "certified_only"]
        # the pooled summary row (model NULL) when there is one, else the only model's
        summary = next((r for r in data if r["seed"] is None and r["model"] is None),
                       next((r for r in data if r["seed"] is None), None))
        seeds = [r for r in data if r["seed"] is not None]  # every model's seeds
        if summary is None:
            continue
        head = {"source": summary["source"], "experiment": f"{summary['audit_id']}:{mode}",
                "claim": summary["claim"], "fiber_rule": summary["fiber_rule"], "min_support": summary["min_support"]}
        for name in _MODE_METRICS:
            lo = summary.get(f"{name}_p10") if name == "certified_fraction" else None
            hi = summary.get(f"{name}_p90") if name == "certified_fraction" else None
            rows.append(head | {"metric": name, "value": summary[name], "ci_low": lo, "ci_high": hi})
        false, cert = sum(r["false_decisions"] for r in seeds), sum(r["certified"] for r in seeds)
        rows.append(head | {"metric": "pooled_false_rate_certified", "value": false / cert if cert else None,
                            "ci_low": None, "ci_high": float(cp_upper(false, cert, cfg.delta)) if cert else None})
        rows.append(head | {"metric": "epsilon", "value": cfg.epsilon if mode != "exact" else None,
                            "ci_low": None, "ci_high": None})
        rows.append(head | {"metric": "alpha" if mode == "familywise" else "delta", "value": cfg.delta,
                            "ci_low": None, "ci_high": None})
    kinds: dict[str, arrays.Kind] = {"source": "string", "experiment": "string", "claim": "string",
                                     "fiber_rule": "string", "min_support": "int64", "metric": "string",
                                     "value": "float64", "ci_low": "float64", "ci_high": "float64"}
    # built from buffers: Table.from_pylist imports pandas (~0.45 s of `dcaudit run tox21`)
    return arrays.table({name: [r[name] for r in rows] for name in kinds}, kinds)


def price_notes(costs: pa.Table, audit_id: str) -> list[str]:
    """One line per replay: where price_aware is significantly costlier than the best fixed policy, if anywhere."""
    # the pooled mean rows only: not every (price, policy, seed, model) row as Python objects (JARVIS: 25k, 0.17 s)
    pooled = np.flatnonzero(~arrays.valid(costs["seed"]) & ~arrays.valid(costs["model"]))
    rows = [r for i in pooled for r in costs.slice(int(i), 1).to_pylist() if r["policy"] == "price_aware"]
    if not rows:
        return []
    worse = [f"{r['price']:g} (+{r['diff_vs_best']:.2g} per candidate)" for r in rows
             if r["diff_low"] is not None and r["diff_low"] > 0]
    better = sum(1 for r in rows if r["diff_high"] is not None and r["diff_high"] < 0)
    tail = f"significantly costlier at price {', '.join(worse)}" if worse else "never significantly costlier"
    return [f"{audit_id}: price_aware vs the best of majority / certify_then_acquire per price: cheaper at "
            f"{better} of {len(rows)} prices (95% interval below 0), {tail}"]


def _literal(value: object) -> str:
    return sql_literal(value, null="NULL")
