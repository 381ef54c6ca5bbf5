"""Controlled linear response spaces: the paper's proof that accuracy and completeness differ.

A candidate is a hidden system vector x; every response is a linear functional k·x. The benchmark
measures the probes B (rows); it determines exactly the part of x in span(B), so a deployment
probe k* is determined only up to its residual r* = (I − P_B)k*, of size g = ‖r*‖ (docs/reference.md).
If an admissible radius R_c bounds the unmeasured part of x, |k*·x − ŷ| ≤ R_c·g with ŷ = k*·P_B x
(Cauchy–Schwarz), so the interval ŷ ± R_c·g is a sound certificate: ``certified_true`` when it lies
above τ, ``certified_false`` when it lies at or below τ, ``ambiguous`` when it straddles τ.

Three experiments (docs/reference.md), each a pure function of its config returning evidence-package tables:

* :func:`conformal_experiment` — a conformal interval calibrated on the benchmark channel covers
  ~95 % there and ~10 % on the deployment channel; ŷ ± 2g covers ~95 % (metrics table);
* :func:`leaderboard_experiment` — the best-MAE model can be the worst certifier (choice + metrics);
* :func:`acquisition_experiment` — residual-greedy probe choice completes fastest (completion + metrics).

Randomness follows the paper's seeds (docs/reference.md) with ``numpy.random.default_rng``; draws are
made per seed (each seed owns its stream, as in the protocol) and all linear algebra is batched over
seeds, models and candidates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields, replace
from typing import TypeVar

import numpy as np
import pyarrow as pa

TOL = 1e-9                      # rank tolerance on singular values of the (unit-norm) probe rows
SOURCE = "controlled"

CERTIFIED_FALSE, CERTIFIED_TRUE, AMBIGUOUS = 0, 1, 2
STATUS_NAMES = np.array(["certified_false", "certified_true", "ambiguous"])


# --------------------------------------------------------------------------------------------- geometry

def unit_rows(v: np.ndarray) -> np.ndarray:
    """Normalise the last axis (probes are unit vectors, so g is a fraction of the probe)."""
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def projector(probes: np.ndarray, tol: float = TOL) -> np.ndarray:
    """Orthogonal projector P_B onto span of the rows of ``probes`` (..., m, d) -> (..., d, d).

    The paper truncates a QR of Bᵀ at its numerical rank (tol 1e-9). Unpivoted QR puts arbitrary
    directions in the columns of dependent rows, so we take the row space from the SVD instead and
    keep singular values > tol: the same projector, batched, robust to dependent or all-zero rows
    (zero rows pad models of different span rank to one array).
    """
    _, s, vt = np.linalg.svd(probes, full_matrices=False)
    keep = (s > tol).astype(probes.dtype)
    return np.einsum("...ki,...k,...kj->...ij", vt, keep, vt)


def span_rank(probes: np.ndarray, tol: float = TOL) -> np.ndarray:
    return (np.linalg.svd(probes, compute_uv=False) > tol).sum(axis=-1)


def residual_norm(proj: np.ndarray, probe: np.ndarray) -> np.ndarray:
    """g = ‖(I − P_B) k‖ for probes k (..., n, d) or (..., d) under projectors (..., d, d)."""
    if probe.ndim == proj.ndim - 1:
        return np.linalg.norm(probe - np.einsum("...ij,...j->...i", proj, probe), axis=-1)
    return np.linalg.norm(probe - np.einsum("...ij,...nj->...ni", proj, probe), axis=-1)


def certify(y_hat: np.ndarray, radius: np.ndarray, g: np.ndarray, tau: float) -> np.ndarray:
    """Status codes of the claim ``y > tau`` from intervals ŷ ± R_c·g (broadcast over all arguments).

    ``certified_true`` when lo > τ, ``certified_false`` when hi ≤ τ (the claim is false for every
    admissible system), ``ambiguous`` otherwise. Sound whenever R_c bounds the hidden component.
    """
    half = np.asarray(radius) * np.asarray(g)
    lo, hi = y_hat - half, y_hat + half
    return np.where(lo > tau, CERTIFIED_TRUE, np.where(hi <= tau, CERTIFIED_FALSE, AMBIGUOUS)).astype(np.int8)


def status_names(codes: np.ndarray) -> np.ndarray:
    return STATUS_NAMES[codes]


# ----------------------------------------------------------------------------------- shared geometry

def benchmark_probes(rng: np.random.Generator, d: int = 8) -> np.ndarray:
    """The four benchmark probes of the paper (docs/reference.md): e1, e2, 0.6e1+0.8e2, 0.4e2+0.9e3 plus noise.

    The third is nearly dependent on the first two, so the span's fourth direction is set by the
    noise: a random direction in e4…e8 that sometimes swallows much of a deployment residual (this
    is why g ranges 0.41–0.95 across seeds although every deployment probe is ~0.93 off-span).
    """
    e = np.eye(d)
    rows = [e[0] + 0.05 * rng.normal(size=d), e[1] + 0.05 * rng.normal(size=d),
            0.6 * e[0] + 0.8 * e[1] + 0.04 * rng.normal(size=d), 0.4 * e[1] + 0.9 * e[2] + 0.04 * rng.normal(size=d)]
    return unit_rows(np.array(rows))


def high_residual_probes(d: int = 8) -> np.ndarray:
    """The three 'high-residual' deployment probes (docs/reference.md), unit norm, no noise."""
    e = np.eye(d)
    return unit_rows(np.array([0.90 * e[5] + 0.30 * e[0] + 0.15 * e[1],
                               0.88 * e[6] + 0.28 * e[1] + 0.14 * e[2],
                               0.87 * e[7] + 0.40 * e[0] + 0.10 * e[2]]))


def deployment_probes(d: int = 8) -> tuple[np.ndarray, tuple[str, ...]]:
    """Ten deployment probes in three residual groups (docs/reference.md), unit norm.

    The notes give only the high group exactly; the in-span and '≈0.70' groups are our
    reconstruction (in-span: combinations of e1..e3; ≈0.70: half e4 or e5, half an in-span axis).
    Only the largest residuals drive the experiment, so their exact form matters little.
    """
    e = np.eye(d)
    in_span = [0.8 * e[0] + 0.6 * e[1], 0.6 * e[1] + 0.8 * e[2], 0.6 * e[0] - 0.8 * e[2]]
    middle = [0.7 * e[3] + 0.7 * e[0], 0.7 * e[3] + 0.7 * e[1], 0.7 * e[4] + 0.7 * e[0], 0.7 * e[4] + 0.7 * e[2]]
    probes = np.vstack([unit_rows(np.array(in_span + middle)), high_residual_probes(d)])
    names = ("in_span_1", "in_span_2", "in_span_3", "mid_e4_1", "mid_e4_2", "mid_e5_1", "mid_e5_2",
             "high_e6", "high_e7", "high_e8")
    return probes, names


# ------------------------------------------------------------------------------------------ summaries

def _summary(values: np.ndarray) -> dict[str, float | int | None]:
    """Mean over seeds with a normal 95 % interval for the mean, sd and range (the spread across seeds)."""
    v = np.asarray(values, dtype=float)
    n = v.size
    mean = float(v.mean())
    sd = float(v.std(ddof=1)) if n > 1 else 0.0
    half = 1.959964 * sd / np.sqrt(n)       # normal 95 % interval of the mean, as the paper reports
    return {"value": mean, "ci_low": mean - half, "ci_high": mean + half, "sd": sd,
            "min": float(v.min()), "max": float(v.max()), "n_seeds": n}


def _proportion(successes: int, n: int) -> dict[str, float | int | None]:
    """A fraction of runs with its Wilson 95 % interval (closed form: no scipy.stats import, seconds)."""
    z, p = 1.959964, successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return {"value": p, "ci_low": float(centre - half), "ci_high": float(centre + half), "sd": None,
            "min": None, "max": None, "n_seeds": n}


METRIC_SCHEMA = pa.schema([
    ("source", pa.string()), ("experiment", pa.string()), ("setting", pa.string()), ("metric", pa.string()),
    ("value", pa.float64()), ("ci_low", pa.float64()), ("ci_high", pa.float64()), ("sd", pa.float64()),
    ("min", pa.float64()), ("max", pa.float64()), ("n_seeds", pa.int64()), ("radius_scale", pa.float64()),
])


def _metrics_table(rows: list[dict]) -> pa.Table:
    full = [{"source": SOURCE, "setting": None, "radius_scale": None, **r} for r in rows]
    # Column by column: Table.from_pylist would import pandas (seconds) for nothing.
    return pa.Table.from_pydict({f.name: pa.array([r.get(f.name) for r in full], f.type) for f in METRIC_SCHEMA},
                    schema=METRIC_SCHEMA)


# Seeds computed at once. The batched arrays hold ~0.2 MB per seed, so the largest seed count the CLI accepts
# (defaults.MAX_SEEDS) would need ~20 GB in one batch; in chunks a run needs a few hundred MB whatever its
# seed count. Each seed's numbers are the same in any chunk (its own stream, per-matrix linear algebra).
SEED_CHUNK = 1000
_Runs = TypeVar("_Runs")


def _seed_chunks(n: int) -> Iterator[np.ndarray]:
    """Seed indices 0 … n-1 in chunks of at most SEED_CHUNK."""
    for start in range(0, n, SEED_CHUNK):
        yield np.arange(start, min(start + SEED_CHUNK, n))


def _concat_runs(parts: list[_Runs]) -> _Runs:
    """Per-chunk results as one: array fields (and dicts of arrays) joined along the seed axis, others kept."""
    def join(values: list) -> object:
        if isinstance(values[0], np.ndarray):
            return np.concatenate(values)
        if isinstance(values[0], dict):
            return {k: np.concatenate([v[k] for v in values]) for k in values[0]}
        return values[0]
    first = parts[0]
    return type(first)(**{f.name: join([getattr(p, f.name) for p in parts]) for f in fields(first)})  # type: ignore[arg-type]


def _stack(seeds: Sequence[int] | np.ndarray, draw: Callable[[np.random.Generator], tuple[np.ndarray, ...]]) -> list[np.ndarray]:
    """Per-seed draws (each seed its own default_rng stream) stacked along a leading seed axis."""
    per_seed = [draw(np.random.default_rng(int(s))) for s in seeds]
    return [np.stack(parts) for parts in zip(*per_seed, strict=True)]


# ------------------------------------------------------------------------------ 1. conformal transfer

@dataclass(frozen=True)
class ConformalConfig:
    seeds: int = 50
    d: int = 8
    n_train: int = 200
    n_cal: int = 200
    n_test: int = 200
    noise: float = 0.05
    alpha: float = 0.05
    radius: float = 2.0              # R of the response-rank interval ŷ ± R·g
    geometry_seed: int = 1000        # geometry of seed s: default_rng(1000 + s)
    data_seed: int = 2000            # data of seed s: default_rng(2000 + s)


@dataclass(frozen=True)
class ConformalRuns:
    """Per-seed results (arrays over seeds) of the conformal-transfer experiment."""

    seeds: np.ndarray
    residual: np.ndarray
    coverage: dict[str, np.ndarray]
    width: dict[str, np.ndarray]


def conformal_runs(cfg: ConformalConfig) -> ConformalRuns:
    """Split conformal on the benchmark channel, applied to the deployment channel (docs/reference.md).

    The model sees only x·P_B; least squares fits the benchmark label y_b = x·b₁ + ε and the
    deployment label y_d = x·k* + ε on the training split. Benchmark-calibrated quantile q_b:
    coverage on benchmark test labels (benchmark) and on deployment test labels (transfer);
    deployment-calibrated q_d (oracle); and ŷ_d ± R·g with no calibration at all (response rank).
    """
    return _concat_runs([_conformal_chunk(cfg, seeds) for seeds in _seed_chunks(cfg.seeds)])


def _conformal_chunk(cfg: ConformalConfig, seeds: np.ndarray) -> ConformalRuns:
    """:func:`conformal_runs` for the seed indices ``seeds``."""
    high = high_residual_probes(cfg.d)
    n = cfg.n_train + cfg.n_cal + cfg.n_test
    (bench,) = _stack(cfg.geometry_seed + seeds, lambda rng: (benchmark_probes(rng, cfg.d),))
    deploy = high[seeds % len(high)]                                       # (S, d)
    # Per seed: features, then benchmark and deployment label noise, then a random train/cal/test split.
    x, eps, order = _stack(cfg.data_seed + seeds, lambda rng: (
        rng.normal(size=(n, cfg.d)), rng.normal(scale=cfg.noise, size=(2, n)), rng.permutation(n)))
    proj = projector(bench)                                                # (S, d, d)
    g = residual_norm(proj, deploy)                                        # (S,)
    x_vis = x @ proj                                                       # what the model can see
    y = np.stack([x @ bench[:, 0, :, None], x @ deploy[:, :, None]], axis=1)[..., 0] + eps  # (S, 2, n)

    x_vis = np.take_along_axis(x_vis, order[..., None], axis=1)          # rows in split order
    y = np.take_along_axis(y, order[:, None, :], axis=2)
    tr, ca = slice(0, cfg.n_train), slice(cfg.n_train, cfg.n_train + cfg.n_cal)
    te = slice(cfg.n_train + cfg.n_cal, n)
    # x_vis has rank 4 < d: the pseudo-inverse (relative cut 1e-9) gives the minimum-norm fit.
    w = np.linalg.pinv(x_vis[:, tr], rtol=1e-9) @ np.swapaxes(y[:, :, tr], 1, 2)   # (S, d, 2)
    pred = np.swapaxes(x_vis @ w, 1, 2)                                    # (S, 2, n)
    abs_res = np.abs(y - pred)
    level = min(1.0, (1 - cfg.alpha) * (cfg.n_cal + 1) / cfg.n_cal)
    q = np.quantile(abs_res[:, :, ca], level, axis=-1)                     # (S, 2): q_b, q_d
    test = abs_res[:, :, te]
    q_b, q_d = q[:, 0], q[:, 1]
    coverage = {
        "benchmark": (test[:, 0] <= q_b[:, None]).mean(axis=-1),
        "transfer": (test[:, 1] <= q_b[:, None]).mean(axis=-1),
        "oracle": (test[:, 1] <= q_d[:, None]).mean(axis=-1),
        "response_rank": (test[:, 1] <= cfg.radius * g[:, None]).mean(axis=-1),
    }
    width = {"benchmark": 2 * q_b, "transfer": 2 * q_b, "oracle": 2 * q_d, "response_rank": 2 * cfg.radius * g}
    return ConformalRuns(seeds, g, coverage, width)


def conformal_experiment(cfg: ConformalConfig = ConformalConfig()) -> dict[str, pa.Table]:
    runs = conformal_runs(cfg)
    rows = [{"experiment": "conformal", "metric": f"{name}_coverage", **_summary(v)}
            for name, v in runs.coverage.items()]
    rows += [{"experiment": "conformal", "metric": f"{name}_width", **_summary(v)} for name, v in runs.width.items()]
    rows.append({"experiment": "conformal", "metric": "deployment_residual", **_summary(runs.residual)})
    return {"metrics": _metrics_table(rows)}


# ----------------------------------------------------------------------------- 2. leaderboard reversal

@dataclass(frozen=True)
class LeaderboardConfig:
    seeds: int = 50
    d: int = 10
    n_candidates: int = 500
    top_k: int = 100
    tau: float = 0.0
    span_ranks: tuple[int, ...] = (3, 4, 6, 7, 8)
    radius_low: float = 1.2
    radius_high: float = 2.8
    deploy_dims: int = 8                              # k* = (e1 + … + e8)/√8
    structured_noise: tuple[float, ...] = (0.04, 0.07, 0.11, 0.16, 0.22)
    null_noise: float = 0.10
    structured_seed: int = 3000
    null_seed: int = 4000


MODEL_NAMES = ("A", "B", "C", "D", "E")


@dataclass(frozen=True)
class LeaderboardRuns:
    """Per (seed, model) arrays of one setting."""

    setting: str
    seeds: np.ndarray
    residual: np.ndarray            # (S, M)
    mae: np.ndarray                 # (S, M) benchmark MAE
    certified: np.ndarray           # (S, M) certified fraction of the model's top-k
    false_decisions: np.ndarray     # (S, M) certified top-k candidates whose true response is > τ


def leaderboard_runs(cfg: LeaderboardConfig, setting: str) -> LeaderboardRuns:
    """Five models whose benchmark spans have ranks 3…8 shortlist their top-k (docs/reference.md).

    Model i measures probes e_j + (0.03 + 0.01 i)·N (j < rank), its candidate score is x·P k* + noise
    and its benchmark prediction x·P b₀ + noise, b₀ its first probe (in its span, so the MAE is the
    noise alone, as the published MAEs ≈ 0.8 σ show). A shortlisted candidate is certified for the
    action 'y ≤ τ' when ŷ + r_c·g ≤ τ.
    """
    if setting not in ("structured", "null"):
        raise ValueError(f"setting must be 'structured' or 'null', not {setting!r}")
    n_models = len(cfg.span_ranks)
    noise = np.array(cfg.structured_noise if setting == "structured" else [cfg.null_noise] * n_models)
    if noise.size != n_models:
        raise ValueError("structured_noise needs one level per span rank")
    return _concat_runs([_leaderboard_chunk(cfg, setting, noise, seeds) for seeds in _seed_chunks(cfg.seeds)])


def _leaderboard_chunk(cfg: LeaderboardConfig, setting: str, noise: np.ndarray, seeds: np.ndarray) -> LeaderboardRuns:
    """:func:`leaderboard_runs` for the seed indices ``seeds``."""
    n_models, d = len(cfg.span_ranks), cfg.d
    base = cfg.structured_seed if setting == "structured" else cfg.null_seed
    eye = np.eye(d)
    max_rank = max(cfg.span_ranks)

    def draw(rng: np.random.Generator) -> tuple[np.ndarray, ...]:
        x = rng.normal(size=(cfg.n_candidates, d))
        r_c = rng.uniform(cfg.radius_low, cfg.radius_high, size=cfg.n_candidates)
        probes = np.zeros((n_models, max_rank, d))          # zero rows pad smaller spans
        score_noise = np.empty((n_models, cfg.n_candidates))
        bench_noise = np.empty((n_models, cfg.n_candidates))
        for i, rank in enumerate(cfg.span_ranks):           # five models: per-model draws, not a hot loop
            probes[i, :rank] = unit_rows(eye[:rank] + (0.03 + 0.01 * i) * rng.normal(size=(rank, d)))
            score_noise[i] = rng.normal(size=cfg.n_candidates)
            bench_noise[i] = rng.normal(size=cfg.n_candidates)
        return x, r_c, probes, score_noise, bench_noise

    x, r_c, probes, score_noise, bench_noise = _stack(base + seeds, draw)
    k_star = unit_rows(np.r_[np.ones(cfg.deploy_dims), np.zeros(d - cfg.deploy_dims)])
    proj = projector(probes)                                                  # (S, M, d, d)
    g = residual_norm(proj, np.broadcast_to(k_star, proj.shape[:-1]))         # (S, M)
    visible = proj @ k_star                                                   # (S, M, d)
    score = np.einsum("snd,smd->smn", x, visible) + noise[None, :, None] * score_noise
    b0 = probes[:, :, 0]                                                      # (S, M, d)
    y_bench = np.einsum("snd,smd->smn", x, b0)
    pred_bench = np.einsum("snd,smed,sme->smn", x, proj, b0) + noise[None, :, None] * bench_noise
    mae = np.abs(pred_bench - y_bench).mean(axis=-1)

    top = np.argsort(score, axis=-1)[..., : cfg.top_k]                        # lowest scores first
    top_score = np.take_along_axis(score, top, axis=-1)
    top_radius = np.take_along_axis(np.broadcast_to(r_c[:, None, :], score.shape), top, axis=-1)
    status = certify(top_score, top_radius, g[..., None], cfg.tau)
    certified = status == CERTIFIED_FALSE
    y_true = np.take_along_axis(np.broadcast_to((x @ k_star)[:, None, :], score.shape), top, axis=-1)
    false = (certified & (y_true > cfg.tau)).sum(axis=-1)
    return LeaderboardRuns(setting, base + seeds, g, mae, certified.mean(axis=-1), false)


def _ranks(mae: np.ndarray, certified: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rank 1 = lowest MAE / highest certified fraction; ties share the best rank."""
    def rank_min(v: np.ndarray) -> np.ndarray:             # 1 + number of strictly better models
        return 1 + (v[..., None, :] < v[..., :, None]).sum(axis=-1).astype(np.int64)
    return rank_min(mae), rank_min(-certified)


CHOICE_SCHEMA = pa.schema([
    ("source", pa.string()), ("experiment", pa.string()), ("setting", pa.string()), ("seed", pa.int64()),
    ("model", pa.string()), ("span_rank", pa.int64()), ("residual", pa.float64()),
    ("benchmark_metric", pa.float64()), ("certified_fraction", pa.float64()), ("false_decisions", pa.float64()),
    ("rank_by_benchmark", pa.int64()), ("rank_by_certification", pa.int64()),
])


def _choice_table(runs: LeaderboardRuns, cfg: LeaderboardConfig) -> pa.Table:
    """One row per seed × model, plus one mean row per model with seed NULL (ranks of the means)."""
    s, m = runs.mae.shape
    rank_b, rank_c = _ranks(runs.mae, runs.certified)
    mean_mae, mean_cert = runs.mae.mean(axis=0), runs.certified.mean(axis=0)
    mean_rank_b, mean_rank_c = _ranks(mean_mae, mean_cert)
    models = np.array(MODEL_NAMES[:m] if m <= len(MODEL_NAMES) else [f"M{i}" for i in range(m)])
    spans = np.array(cfg.span_ranks)
    cols = {
        "seed": np.r_[np.repeat(runs.seeds, m), np.full(m, -1)],
        "model": np.r_[np.tile(models, s), models],
        "span_rank": np.r_[np.tile(spans, s), spans],
        "residual": np.r_[runs.residual.ravel(), runs.residual.mean(axis=0)],
        "benchmark_metric": np.r_[runs.mae.ravel(), mean_mae],
        "certified_fraction": np.r_[runs.certified.ravel(), mean_cert],
        "false_decisions": np.r_[runs.false_decisions.ravel().astype(float), runs.false_decisions.mean(axis=0)],
        "rank_by_benchmark": np.r_[rank_b.ravel(), mean_rank_b],
        "rank_by_certification": np.r_[rank_c.ravel(), mean_rank_c],
    }
    n = s * m + m
    arrays = {
        "source": pa.array([SOURCE] * n), "experiment": pa.array(["leaderboard"] * n),
        "setting": pa.array([runs.setting] * n),
        "seed": pa.array(cols["seed"], mask=cols["seed"] < 0, type=pa.int64()),
        **{k: pa.array(v) for k, v in cols.items() if k != "seed"},
    }
    return pa.Table.from_pydict(arrays).cast(CHOICE_SCHEMA)


def best_benchmark_not_best_certifier(runs: LeaderboardRuns, *, ties_count_as_best: bool = False) -> np.ndarray:
    """Per seed: is the best-MAE model not the best certifier?

    The paper's convention picks one best certifier by argmax, so on a tie (D and E both certify
    100 %) the lower-span model D wins. With ``ties_count_as_best`` a model tied for the highest
    certified fraction counts as a best certifier too (the stricter reading of a reversal).
    """
    best_mae = np.argmin(runs.mae, axis=-1)
    if not ties_count_as_best:
        return best_mae != np.argmax(runs.certified, axis=-1)
    own = np.take_along_axis(runs.certified, best_mae[:, None], axis=-1)[:, 0]
    return own < runs.certified.max(axis=-1)


def leaderboard_experiment(cfg: LeaderboardConfig = LeaderboardConfig(),
                           settings: Sequence[str] = ("structured", "null")) -> dict[str, pa.Table]:
    choice, rows = [], []
    for setting in settings:                       # two settings, each batched over seeds and models
        runs = leaderboard_runs(cfg, setting)
        choice.append(_choice_table(runs, cfg))
        flips = best_benchmark_not_best_certifier(runs)
        strict = best_benchmark_not_best_certifier(runs, ties_count_as_best=True)
        best = np.argmin(runs.mae, axis=-1)
        worst = np.argmax(runs.mae, axis=-1)
        pick = np.arange(runs.mae.shape[0])
        rows += [
            {"experiment": "leaderboard", "setting": setting, "metric": "best_mae_not_best_certifier",
             **_proportion(int(flips.sum()), flips.size)},
            {"experiment": "leaderboard", "setting": setting, "metric": "best_mae_not_among_best_certifiers",
             **_proportion(int(strict.sum()), strict.size)},
            {"experiment": "leaderboard", "setting": setting, "metric": "best_mae_certified_fraction",
             **_summary(runs.certified[pick, best])},
            {"experiment": "leaderboard", "setting": setting, "metric": "worst_mae_certified_fraction",
             **_summary(runs.certified[pick, worst])},
        ]
    return {"choice": pa.concat_tables(choice), "metrics": _metrics_table(rows)}


# ------------------------------------------------------------------------------- 3. probe acquisition

POLICIES = ("response_rank", "uncertainty", "diversity", "benchmark_aligned", "random")


@dataclass(frozen=True)
class AcquisitionConfig:
    random_trials: int = 200
    steps: int = 12
    d: int = 8
    n_candidates: int = 400
    y_scale: float = 0.45           # ŷ ~ N(0, 0.45)
    radius_low: float = 0.15        # R_c ~ U(0.15, 0.55)
    radius_high: float = 0.55
    tau: float = 0.0
    n_targeted: int = 5             # pool: e4…e8 + 0.06·N, then random Gaussian probes
    n_random_pool: int = 35
    geometry_seed: int = 17
    candidate_seed: int = 31
    random_seed: int = 5000         # random order of trial t: default_rng(5000 + t)
    radius_scales: tuple[float, ...] = (0.5, 0.75, 1.0, 1.25, 1.5, 2.0)
    # Not in the paper: re-draw the geometry (seeds geometry_seed + 1 … + geometries) to see how much
    # the single published geometry's curve depends on its draw; 0 = off.
    geometries: int = 0
    geometry_random_trials: int = 50


@dataclass(frozen=True)
class AcquisitionGeometry:
    bench: np.ndarray               # (4, d)
    deploy: np.ndarray              # (10, d)
    pool: np.ndarray                # (P, d)
    pool_names: tuple[str, ...]
    y_hat: np.ndarray               # (n,)
    radius: np.ndarray              # (n,)


def acquisition_geometry(cfg: AcquisitionConfig) -> AcquisitionGeometry:
    rng = np.random.default_rng(cfg.geometry_seed)
    bench = benchmark_probes(rng, cfg.d)
    deploy, _ = deployment_probes(cfg.d)
    eye = np.eye(cfg.d)
    targeted = unit_rows(eye[3:3 + cfg.n_targeted] + 0.06 * rng.normal(size=(cfg.n_targeted, cfg.d)))
    random_pool = unit_rows(rng.normal(size=(cfg.n_random_pool, cfg.d)))
    names = tuple(f"targeted_e{4 + i}" for i in range(cfg.n_targeted)) + tuple(
        f"random_{i + 1}" for i in range(cfg.n_random_pool))
    cand = np.random.default_rng(cfg.candidate_seed)
    y_hat = cand.normal(0.0, cfg.y_scale, size=cfg.n_candidates)
    radius = cand.uniform(cfg.radius_low, cfg.radius_high, size=cfg.n_candidates)
    return AcquisitionGeometry(bench, deploy, np.vstack([targeted, random_pool]), names, y_hat, radius)


def _unit_or_zero(r: np.ndarray) -> np.ndarray:
    """Unit vectors along the last axis; a (numerically) zero residual adds no direction to a span."""
    norm = np.linalg.norm(r, axis=-1, keepdims=True)
    return np.where(norm > TOL, r / np.where(norm > TOL, norm, 1.0), 0.0)


def _add_direction(resid_proj: np.ndarray, probe: np.ndarray) -> np.ndarray:
    """I − P after adding ``probe`` to the span: remove its new unit direction (batched)."""
    u = _unit_or_zero(np.einsum("...ij,...j->...i", resid_proj, probe))
    return resid_proj - u[..., :, None] * u[..., None, :]


def _policy_scores(policy: str, resid_proj: np.ndarray, deploy: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """Score every pool probe (higher is better) given the current residual projector I − P."""
    r_pool = pool @ resid_proj                                    # (P, d): residual of each pool probe
    r_deploy = deploy @ resid_proj                                # (J, d): deployment residuals
    if policy == "response_rank":
        u = _unit_or_zero(r_pool)
        new_sq = (r_deploy ** 2).sum(axis=-1)[None, :] - (u @ r_deploy.T) ** 2   # (P, J)
        return -np.sqrt(np.clip(new_sq, 0.0, None)).max(axis=-1)  # minimise the worst residual after q
    if policy == "uncertainty":
        lead = np.linalg.svd(r_deploy, full_matrices=False)[2][0]   # principal residual axis
        return (pool @ lead) ** 2
    if policy == "diversity":
        return np.linalg.norm(r_pool, axis=-1)
    if policy == "benchmark_aligned":
        return np.linalg.norm(pool - r_pool, axis=-1)
    raise ValueError(f"unknown policy {policy!r}")


def greedy_order(policy: str, bench: np.ndarray, deploy: np.ndarray, pool: np.ndarray, steps: int) -> np.ndarray:
    """The pool indices a deterministic policy adds, one greedy step at a time (ties: first)."""
    resid_proj = np.eye(bench.shape[1]) - projector(bench)
    chosen: list[int] = []
    for _ in range(steps):                                       # sequential by nature; each step is batched
        scores = _policy_scores(policy, resid_proj, deploy, pool)
        scores[chosen] = -np.inf
        pick = int(np.argmax(scores))
        chosen.append(pick)
        resid_proj = _add_direction(resid_proj, pool[pick])
    return np.array(chosen)


def max_residual_path(bench: np.ndarray, deploy: np.ndarray, pool: np.ndarray, orders: np.ndarray) -> np.ndarray:
    """Worst deployment residual after 0…steps added probes for probe orders (T, steps) -> (T, steps+1)."""
    n_orders, steps = orders.shape
    resid_proj = np.broadcast_to(np.eye(bench.shape[1]) - projector(bench), (n_orders,) + (bench.shape[1],) * 2)

    def worst(m: np.ndarray) -> np.ndarray:
        return np.linalg.norm(np.einsum("tij,kj->tki", m, deploy), axis=-1).max(axis=-1)

    out = [worst(resid_proj)]
    for step in range(steps):                                    # steps are sequential; orders are batched
        resid_proj = _add_direction(resid_proj, pool[orders[:, step]])
        out.append(worst(resid_proj))
    return np.stack(out, axis=1)


def certified_fraction(y_hat: np.ndarray, radius: np.ndarray, g_max: np.ndarray, tau: float) -> np.ndarray:
    """Fraction of candidates certified at every deployment probe, for worst residuals g_max (...,).

    One estimate ŷ per candidate shared by all deployment probes (as in the paper), so 'no probe's
    interval straddles τ' is the certificate at the largest residual.
    """
    status = certify(y_hat, radius, np.asarray(g_max)[..., None], tau)
    return (status != AMBIGUOUS).mean(axis=-1)


COMPLETION_SCHEMA = pa.schema([
    ("source", pa.string()), ("experiment", pa.string()), ("claim", pa.string()), ("policy", pa.string()),
    ("step", pa.int64()), ("seed", pa.int64()), ("probe_added", pa.string()), ("max_residual", pa.float64()),
    ("certified_fraction", pa.float64()), ("false_decision_rate", pa.float64()),
    ("p10", pa.float64()), ("p90", pa.float64()),
])
ACQUISITION_CLAIM = "y > 0 at all 10 deployment probes"


@dataclass(frozen=True)
class AcquisitionRuns:
    orders: dict[str, np.ndarray]         # deterministic policy -> pool indices added
    g_max: dict[str, np.ndarray]          # policy -> (steps+1,) or (T, steps+1) for random
    certified: dict[str, np.ndarray]      # likewise, at radius scale 1
    random_orders: np.ndarray             # (T, steps)
    random_seeds: np.ndarray
    geometry: AcquisitionGeometry


def acquisition_runs(cfg: AcquisitionConfig) -> AcquisitionRuns:
    """Residual-greedy vs uncertainty / diversity / benchmark-aligned / random (docs/reference.md)."""
    geo = acquisition_geometry(cfg)
    orders = {p: greedy_order(p, geo.bench, geo.deploy, geo.pool, cfg.steps) for p in POLICIES if p != "random"}
    seeds = cfg.random_seed + np.arange(cfg.random_trials)
    g_max = {p: max_residual_path(geo.bench, geo.deploy, geo.pool, o[None])[0] for p, o in orders.items()}
    certified = {p: certified_fraction(geo.y_hat, geo.radius, g, cfg.tau) for p, g in g_max.items()}
    random_orders, g_random, certified_random = [], [], []
    for chunk in _seed_chunks(cfg.random_trials):   # (trials, steps, candidates) at once would not fit
        (chunk_orders,) = _stack(seeds[chunk], lambda rng: (rng.permutation(len(geo.pool))[: cfg.steps],))
        g = max_residual_path(geo.bench, geo.deploy, geo.pool, chunk_orders)
        random_orders.append(chunk_orders)
        g_random.append(g)
        certified_random.append(certified_fraction(geo.y_hat, geo.radius, g, cfg.tau))
    g_max["random"], certified["random"] = np.concatenate(g_random), np.concatenate(certified_random)
    return AcquisitionRuns(orders, g_max, certified, np.concatenate(random_orders), seeds, geo)


def _completion_table(runs: AcquisitionRuns, cfg: AcquisitionConfig) -> pa.Table:
    names = np.array(("",) + runs.geometry.pool_names)           # index 0: nothing added at step 0
    steps = np.arange(cfg.steps + 1)
    parts: dict[str, list] = {k: [] for k in ("policy", "step", "seed", "probe_added", "max_residual",
                                              "certified_fraction", "p10", "p90")}

    def add(policy: str, seed: np.ndarray | None, probe: np.ndarray, g: np.ndarray, cert: np.ndarray,
            p10: np.ndarray, p90: np.ndarray) -> None:
        n = g.size
        parts["policy"].append(np.full(n, policy))
        parts["step"].append(np.resize(steps, n))
        parts["seed"].append(np.full(n, -1) if seed is None else np.repeat(seed, cfg.steps + 1))
        parts["probe_added"].append(probe)
        for key, val in (("max_residual", g), ("certified_fraction", cert), ("p10", p10), ("p90", p90)):
            parts[key].append(np.ravel(val))

    for policy, order in runs.orders.items():
        g, cert = runs.g_max[policy], runs.certified[policy]
        add(policy, None, names[np.r_[0, order + 1]], g, cert, cert, cert)
    g_r, cert_r = runs.g_max["random"], runs.certified["random"]
    probe_r = names[np.c_[np.zeros(len(g_r), dtype=int), runs.random_orders + 1]].ravel()
    add("random", runs.random_seeds, probe_r, g_r, cert_r, np.full(cert_r.shape, np.nan), np.full(cert_r.shape, np.nan))
    p10, p90 = np.percentile(cert_r, [10, 90], axis=0)
    add("random", None, np.full(steps.size, ""), g_r.mean(axis=0), cert_r.mean(axis=0), p10, p90)

    cols = {k: np.concatenate(v) for k, v in parts.items()}
    n = cols["step"].size
    table = pa.Table.from_pydict({
        "source": pa.array([SOURCE] * n), "experiment": pa.array(["acquisition"] * n),
        "claim": pa.array([ACQUISITION_CLAIM] * n), "policy": pa.array(cols["policy"]),
        "step": pa.array(cols["step"], pa.int64()),
        "seed": pa.array(cols["seed"], mask=cols["seed"] < 0, type=pa.int64()),
        "probe_added": pa.array(cols["probe_added"], mask=cols["probe_added"] == ""),
        "max_residual": pa.array(cols["max_residual"]),
        "certified_fraction": pa.array(cols["certified_fraction"]),
        # estimates are exact here (no benchmark error), so there is no truth to be wrong against;
        # soundness of the certificate itself is a tested property, not a simulated rate.
        "false_decision_rate": pa.nulls(n, pa.float64()),
        "p10": pa.array(cols["p10"], mask=np.isnan(cols["p10"])),
        "p90": pa.array(cols["p90"], mask=np.isnan(cols["p90"])),
    })
    return table.cast(COMPLETION_SCHEMA)


def _radius_rows(runs: AcquisitionRuns, cfg: AcquisitionConfig, step: int = 3) -> list[dict]:
    """Certified fraction after ``step`` probes with R_c scaled (docs/reference.md radius sensitivity)."""
    geo = runs.geometry
    worst = {"none": runs.g_max["response_rank"][0], **{p: runs.g_max[p][..., step] for p in POLICIES}}
    rows = []
    for scale in cfg.radius_scales:                              # six parameter values; each is batched
        for policy, g in worst.items():
            cert = certified_fraction(geo.y_hat, geo.radius * scale, g, cfg.tau)
            stats = _summary(cert) if np.ndim(cert) else {"value": float(cert)}   # random: over orders
            rows.append({"setting": policy, "radius_scale": scale, **stats})
    return [{"experiment": "acquisition", "metric": f"certified_after_{step}_probes", **r} for r in rows]


def geometry_spread_rows(cfg: AcquisitionConfig, step: int = 3) -> list[dict]:
    """Certified fraction after ``step`` probes per policy across re-drawn geometries (spread rows)."""
    if cfg.geometries < 1:
        return []
    per_policy: dict[str, list[float]] = {p: [] for p in ("none", *POLICIES)}
    for i in range(1, cfg.geometries + 1):     # each geometry is a full (batched) experiment of its own
        runs = acquisition_runs(replace(cfg, geometry_seed=cfg.geometry_seed + i,
                                        random_trials=cfg.geometry_random_trials))
        per_policy["none"].append(float(runs.certified["response_rank"][0]))
        for policy in POLICIES:
            per_policy[policy].append(float(np.mean(runs.certified[policy][..., step])))
    values = {p: np.array(v) for p, v in per_policy.items()}
    others = np.max([values[p] for p in POLICIES[1:]], axis=0)
    wins = values["response_rank"] >= others - 1e-12
    rows = [{"metric": f"certified_after_{step}_probes_across_geometries", "setting": policy,
             **_summary(v)} for policy, v in values.items()]
    rows.append({"metric": f"response_rank_best_after_{step}_probes_across_geometries", "setting": "response_rank",
                 **_proportion(int(wins.sum()), wins.size)})
    return [{"experiment": "acquisition", "radius_scale": 1.0, **r} for r in rows]


def acquisition_experiment(cfg: AcquisitionConfig = AcquisitionConfig()) -> dict[str, pa.Table]:
    runs = acquisition_runs(cfg)
    rows = _radius_rows(runs, cfg) + geometry_spread_rows(cfg)
    return {"completion": _completion_table(runs, cfg), "metrics": _metrics_table(rows)}


EXPERIMENTS: dict[str, tuple[type, Callable[..., dict[str, pa.Table]], str]] = {
    # name -> (config class, experiment function, the config field --seeds sets)
    "conformal": (ConformalConfig, conformal_experiment, "seeds"),
    "leaderboard": (LeaderboardConfig, leaderboard_experiment, "seeds"),
    "acquisition": (AcquisitionConfig, acquisition_experiment, "random_trials"),
}
