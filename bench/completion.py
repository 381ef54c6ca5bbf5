"""Tox21 probe completion curve (docs/reference.md): dcaudit's SQL engine against a straightforward pandas loop
and the same loop in polars.

Work: complete cases over the 12 Tox21 assays (n = 3079), evidence = the 7 NR assays, claim SR-p53 active,
probes SR-ARE, SR-ATAD5, SR-HSE, SR-MMP; 200 seeds, 50/50 calibration/test, min_support 50; the six policies
(response_rank, uncertainty, diversity, benchmark_aligned, random with one order per seed, oracle) over
all four steps, under the paper's protocol (every fiber recomputed after each probe, ties to the last probe).

All three get identical work: the calibration/test split is the engine's hash split (computed once in
DuckDB and handed to pandas and polars untimed), and every deterministic policy's per-step means are asserted equal
(random orders come from different generators, so random is timed but not compared). The pandas loop is
the straightforward one: for each seed, each policy, each step, each candidate probe, a groupby over the
calibration half and a join of the test half (the paper's script does the same with row-wise string keys,
~200 s). dcaudit runs every seed at once in DuckDB over weighted evidence patterns, refining only the
candidates of mixed fibers.

    DCAUDIT_MIRROR=../shared/data .venv/bin/python bench/completion.py [--seeds 200] [--no-pandas] [--no-polars]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
SEED_OFFSET, MIN_SUPPORT = 31000, 50
PAPER_SECONDS = 200.0
DETERMINISTIC = ("response_rank", "uncertainty", "diversity", "benchmark_aligned", "oracle")


def tox21_parquet() -> Path:
    from dcaudit.config import load_settings
    from dcaudit.connectors import tox21

    settings = load_settings()
    if settings.home.name == "workspace" and not settings.home.exists():
        settings = settings.with_overrides(home=Path(tempfile.mkdtemp()))
    return tox21.prepare(settings).tables["tox21"]


def run_engine(path: Path, seeds: int, draws: int) -> tuple[float, list[dict]]:
    import duckdb

    from dcaudit.audits.completion import CompletionConfig, completion_curves
    from dcaudit.audits.evidence import EvidenceMap
    from dcaudit.claims import parse_claim
    from dcaudit.connectors import tox21

    con = duckdb.connect()
    con.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet('{path}')")
    start = time.perf_counter()
    result = completion_curves(
        con, "t", id_column="mol_id", evidence=EvidenceMap(tox21.NR_ASSAYS), claim=parse_claim('"SR-p53" = 1'),
        config=CompletionConfig(probes=tox21.SR_PROBES, seeds=seeds, min_support=MIN_SUPPORT,
                                seed_offset=SEED_OFFSET, random_draws=draws, refinement="full", tie_break="last"),
        source="tox21")
    seconds = time.perf_counter() - start
    rows = [r for r in result.table.to_pylist() if r["seed"] is None]
    return seconds, rows


def split_matrix(path: Path, seeds: int) -> tuple[object, np.ndarray]:
    """The complete-case frame and the engine's calibration flags (candidates x seeds), untimed."""
    import duckdb

    from dcaudit.audits.completion import split_sql
    from dcaudit.connectors import tox21

    complete = " AND ".join(f'"{a}" IS NOT NULL' for a in tox21.ASSAYS)
    con = duckdb.connect()
    labels = ", ".join(f'CAST("{a}" AS INTEGER) AS "{a}"' for a in tox21.ASSAYS)
    frame = con.execute(f"SELECT mol_id, {labels} FROM read_parquet('{path}') WHERE {complete} ORDER BY mol_id").df()
    flags = con.execute(
        f"SELECT list({split_sql('mol_id', 'seed', 0.5)} ORDER BY mol_id) FROM read_parquet('{path}'), "
        f"range({SEED_OFFSET}, {SEED_OFFSET + seeds}) r(seed) WHERE {complete} GROUP BY seed ORDER BY seed"
    ).fetchall()
    return frame, np.array([f[0] for f in flags]).T


Evaluate = Callable[[list[str]], tuple[int, int, int]]


def seed_curves(curves: dict[str, list[list[float]]], evidence: list[str], probes: list[str], evaluate: Evaluate,
                entropy: dict[str, float], correlation: Callable[[str, list[str]], float], n_test: int,
                rng: np.random.Generator) -> None:
    """One seed of the protocol, the same for the pandas and the polars loop: each policy's probe order
    (``evaluate(chosen)`` gives calibration members of certified fibers, certified test candidates and false
    decisions among them; ``correlation(probe, measured)`` the mean absolute correlation), then its curve."""
    for policy in curves:
        chosen: list[str] = []
        for _ in probes:
            left = [p for p in probes if p not in chosen]
            if policy == "response_rank":
                scores = [evaluate(chosen + [p])[0] for p in left]
                pick = max(range(len(left)), key=lambda i: (scores[i], i))       # ties: last listed
            elif policy == "oracle":
                res = [evaluate(chosen + [p]) for p in left]
                pick = max(range(len(left)), key=lambda i: (res[i][1] - res[i][2], -res[i][2], i))
            elif policy == "uncertainty":
                pick = min(range(len(left)), key=lambda i: (-entropy[left[i]], i))
            elif policy in ("diversity", "benchmark_aligned"):
                sign = 1 if policy == "diversity" else -1
                measured = evidence + chosen
                pick = min(range(len(left)), key=lambda i: (sign * correlation(left[i], measured), i))
            else:
                pick = int(rng.integers(len(left)))
            chosen.append(left[pick])
        curves[policy].append([evaluate(chosen[:step])[1] / n_test for step in range(len(probes) + 1)])


def run_pandas(frame, split: np.ndarray) -> tuple[float, dict]:  # noqa: ANN001 - pandas frame
    """One seed at a time; every policy, step and candidate probe recomputes its fibers (no caching)."""
    from dcaudit.connectors import tox21

    evidence, probes = list(tox21.NR_ASSAYS), list(tox21.SR_PROBES)
    frame = frame.assign(y=frame["SR-p53"] == 1)
    start = time.perf_counter()
    curves: dict[str, list[list[float]]] = {p: [] for p in (*DETERMINISTIC, "random")}
    for s in range(split.shape[1]):
        cal, test = frame[split[:, s]], frame[~split[:, s]]

        def evaluate(chosen: list[str], cal=cal, test=test) -> tuple[int, int, int]:  # noqa: ANN001
            cols = evidence + chosen
            g = cal.groupby(cols)["y"].agg(["size", "sum"])
            pure = g[((g["sum"] == 0) | (g["sum"] == g["size"])) & (g["size"] >= MIN_SUPPORT)]
            label = (pure["sum"] == pure["size"]).rename("label")
            decided = test.join(label, on=cols, how="inner")
            return int(pure["size"].sum()), len(decided), int((decided["label"] != decided["y"]).sum())

        shares = {p: cal[p].value_counts(normalize=True) for p in probes}
        entropy = {p: float(-(v * np.log2(v)).sum()) for p, v in shares.items()}
        corr = cal[evidence + probes].corr().abs().fillna(0.0)
        seed_curves(curves, evidence, probes, evaluate, entropy,
                    lambda probe, measured, corr=corr: float(corr.loc[probe, measured].mean()), len(test),
                    np.random.default_rng(SEED_OFFSET + s))
    seconds = time.perf_counter() - start
    return seconds, {p: np.mean(np.array(c), axis=0).tolist() for p, c in curves.items()}


def run_polars(frame, split: np.ndarray) -> tuple[float, dict]:  # noqa: ANN001 - polars frame
    """The same loop as :func:`run_pandas` written with polars (``group_by``, an inner ``join``, ``corr``,
    ``value_counts``): what someone who knows polars writes for this protocol."""
    import polars as pl

    from dcaudit.connectors import tox21

    evidence, probes = list(tox21.NR_ASSAYS), list(tox21.SR_PROBES)
    frame = frame.with_columns(y=pl.col("SR-p53") == 1)
    start = time.perf_counter()
    curves: dict[str, list[list[float]]] = {p: [] for p in (*DETERMINISTIC, "random")}
    for s in range(split.shape[1]):
        mask = pl.Series(split[:, s])
        cal, test = frame.filter(mask), frame.filter(~mask)

        def evaluate(chosen: list[str], cal=cal, test=test) -> tuple[int, int, int]:  # noqa: ANN001
            cols = evidence + chosen
            g = cal.group_by(cols).agg(size=pl.len(), trues=pl.col("y").sum())
            pure = g.filter(((pl.col("trues") == 0) | (pl.col("trues") == pl.col("size")))
                            & (pl.col("size") >= MIN_SUPPORT)).with_columns(label=pl.col("trues") == pl.col("size"))
            decided = test.join(pure.select(*cols, "label"), on=cols, how="inner")
            return int(pure["size"].sum()), decided.height, int((decided["label"] != decided["y"]).sum())

        entropy = {}
        for p in probes:
            share = cal[p].value_counts(normalize=True)["proportion"].to_numpy()
            entropy[p] = float(-(share * np.log2(share)).sum())
        names = evidence + probes
        corr = np.nan_to_num(np.abs(cal.select(names).corr().to_numpy()), nan=0.0)
        at = {name: i for i, name in enumerate(names)}
        seed_curves(curves, evidence, probes, evaluate, entropy,
                    lambda probe, measured, corr=corr, at=at: float(corr[at[probe], [at[m] for m in measured]].mean()),
                    test.height, np.random.default_rng(SEED_OFFSET + s))
    seconds = time.perf_counter() - start
    return seconds, {p: np.mean(np.array(c), axis=0).tolist() for p, c in curves.items()}


def worker(engine: str, path: str, seeds: int, draws: int) -> None:
    sys.path.insert(0, str(HERE))
    from results_table import peak_rss_mb

    if engine == "duckdb":
        seconds, rows = run_engine(Path(path), seeds, draws)
        curves: dict[str, list[float]] = {}
        for r in sorted(rows, key=lambda r: r["step"]):
            curves.setdefault(r["policy"], []).append(r["certified_fraction"])
        detail = {"rows": rows}
    elif engine == "polars":
        import polars as pl

        frame, split = split_matrix(Path(path), seeds)
        seconds, curves = run_polars(pl.from_pandas(frame), split)
        detail = {}
    else:
        frame, split = split_matrix(Path(path), seeds)
        seconds, curves = run_pandas(frame, split)
        detail = {}
    print(json.dumps({"seconds": seconds, "curves": curves, "peak_rss_mb": peak_rss_mb(), **detail}, default=str))


def measure(engine: str, path: Path, seeds: int, draws: int) -> dict:
    """Each engine in its own process, so peak RSS is its own."""
    out = subprocess.run([sys.executable, __file__, "--worker", engine, "--path", str(path), "--seeds", str(seeds),
                          "--draws", str(draws)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=200)
    parser.add_argument("--draws", type=int, default=1, help="random orders per seed (pandas does one)")
    parser.add_argument("--no-pandas", action="store_true")
    parser.add_argument("--no-polars", action="store_true")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.path, args.seeds, args.draws)
        return
    sys.path.insert(0, str(HERE))
    from results_table import append_results

    path = tox21_parquet()
    engine = measure("duckdb", path, args.seeds, args.draws)
    print(f"dcaudit (DuckDB): {args.seeds} seeds x 6 policies x 4 steps in {engine['seconds']:.2f} s, "
          f"peak RSS {engine['peak_rss_mb']:.0f} MB; paper's script ~{PAPER_SECONDS:.0f} s "
          f"-> {PAPER_SECONDS / engine['seconds']:.0f}x")
    for r in engine["rows"]:
        if r["step"] > 0:
            print(f"  {r['policy']:18s} +{r['step']} {r['probe_added'] or '':9s} ({100 * r['probe_added_share']:3.0f}%) "
                  f"certified {100 * r['certified_fraction']:5.2f}% ± {100 * r['certified_fraction_se']:.2f} "
                  f"[p10 {100 * r['certified_fraction_p10']:.2f}, p90 {100 * r['certified_fraction_p90']:.2f}] "
                  f"false {100 * r['false_decision_rate']:.3f}%")
    rows = [{"benchmark": "tox21_completion_200seeds" if args.seeds == 200 else f"tox21_completion_{args.seeds}seeds",
             "engine": "duckdb", "n_rows": 3079 * args.seeds, "seconds": engine["seconds"],
             "peak_rss_mb": engine["peak_rss_mb"]}]
    for peer in [e for e, skip in (("polars", args.no_polars), ("pandas", args.no_pandas)) if not skip]:
        other = measure(peer, path, args.seeds, args.draws)
        for policy in DETERMINISTIC:
            a, b = np.array(engine["curves"][policy]), np.array(other["curves"][policy])
            assert np.allclose(a, b, atol=1e-12), (peer, policy, a, b)
        ratio = other["seconds"] / engine["seconds"]
        print(f"{peer} loop: {other['seconds']:.2f} s, peak RSS {other['peak_rss_mb']:.0f} MB; "
              f"dcaudit is {ratio:.1f}x faster (deterministic policies' curves identical)")
        rows.append({**rows[0], "engine": peer, "seconds": other["seconds"], "peak_rss_mb": other["peak_rss_mb"],
                     "ratio_vs_pandas": 1.0 if peer == "pandas" else None})
        if peer == "pandas":
            rows[0]["ratio_vs_pandas"] = ratio
        else:
            rows[0]["settings"] = json.dumps({"ratio_vs_polars": ratio})
    print(f"results appended to {append_results(rows)}")


if __name__ == "__main__":
    main()
