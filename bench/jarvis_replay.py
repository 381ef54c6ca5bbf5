"""JARVIS error-window replay (docs/reference.md): dcaudit's engine against a straightforward pandas loop and
a vectorised polars version (``join_asof`` window ends; :func:`run_polars`).

Work: 15 models x 50 seeds, 50/50 calibration/test split of each model's ~5.6k test materials; the
tolerance is the model's calibration MAE of predicted vs reference formation energy; a test material
is certified when >= 5 calibration materials lie within the tolerance of its prediction and all
share one ``optb88vdw_bandgap > 1.0`` label; the benchmark-only action is the window majority
(>= 0.5), the global calibration majority below 5 neighbours.

All three get identical work: the calibration/test split is the engine's hash split (computed once
in DuckDB and handed to pandas and polars untimed, so their times are lower bounds), and the per-(model,
seed) counts of all three are asserted equal. The pandas loop is what the paper's script does (a Python
loop over test points with a boolean mask over the calibration points; ~46 s there). dcaudit splits
all seeds in one SQL pass and counts every window of every model and seed at once by binary search on
sorted evidence with calibration prefix sums (``replay.window_counts``).

    DCAUDIT_MIRROR=../shared/data .venv/bin/python bench/jarvis_replay.py [--seeds 50] [--no-pandas] [--no-polars]

Peak RSS is this process's (``ru_maxrss``) after the engine runs, before the pandas loop; the table is
prepared in a child process so that the connector's imports are not counted, and the RSS before the first
replay (imports, DuckDB, the loaded table) is recorded next to it (``settings.rss_before_mb``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
X, REF, CLAIM = "pred_formation_energy_peratom", "formation_energy_peratom", "optb88vdw_bandgap > 1.0"
MIN_SUPPORT = 5


def jarvis_table() -> Path:
    """The connector's audit table (15 models with both predictions), from the mirror."""
    from dcaudit.config import load_settings
    from dcaudit.connectors import jarvis

    settings = load_settings()
    if settings.home.name == "workspace" and not settings.home.exists():
        settings = settings.with_overrides(home=Path(tempfile.mkdtemp()))
    prepared = jarvis.prepare(settings, jarvis.Options(require=("formation_energy_peratom", "optb88vdw_bandgap")))
    return prepared.tables["jarvis"]


def table_path() -> Path:
    """:func:`jarvis_table` run in a child process: the connector (and the polars it imports, ~35 MB) stays
    out of this process, whose peak RSS is the replay's."""
    import subprocess

    out = subprocess.run([sys.executable, __file__, "--table-path"], capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"preparing the JARVIS table failed:\n{out.stderr[-3000:]}")
    return Path(out.stdout.strip().splitlines()[-1])


def current_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def split_frame(con, seeds: int):  # noqa: ANN001, ANN201 - duckdb connection -> DuckDB relation
    """(model, jid, seed, calibration) with the engine's hash split, for the pandas and polars baselines
    (``.df()`` / ``.pl()`` of it)."""
    from dcaudit.audits.replay import SPLIT_BUCKETS, ReplayConfig

    cfg = ReplayConfig(seeds=seeds, min_support=MIN_SUPPORT)
    return con.sql(f"""
        SELECT b.model, b.jid, s.seed, (hash(hash(CAST(b.jid AS VARCHAR)), s.seed) % {SPLIT_BUCKETS}) < {cfg.threshold}
               AS calibration, b.x, b.r, b.y
        FROM (SELECT model, jid, {X} AS x, {REF} AS r, {CLAIM} AS y FROM j WHERE {X} IS NOT NULL
              AND optb88vdw_bandgap IS NOT NULL) b CROSS JOIN range({seeds}) s(seed)
        ORDER BY b.model, s.seed, b.jid""")


def run_pandas(frame) -> tuple[float, dict]:  # noqa: ANN001
    """The straightforward loop: per model and seed, per test point, a mask over the calibration points."""
    start = time.perf_counter()
    out = {}
    for (model, seed), g in frame.groupby(["model", "seed"], sort=True):
        cal, test = g[g.calibration], g[~g.calibration]
        xc, yc = cal.x.to_numpy(), cal.y.to_numpy()
        tol = float(np.mean(np.abs(cal.x.to_numpy() - cal.r.to_numpy())))
        gmaj = 2 * yc.sum() > len(yc)
        n_cert = false_cert = false_fm = 0
        for x, y in zip(test.x.to_numpy(), test.y.to_numpy(), strict=True):
            mask = np.abs(xc - x) <= tol
            n = int(mask.sum())
            t = int(yc[mask].sum())
            decision = (2 * t >= n) if n >= MIN_SUPPORT else gmaj
            false_fm += int(decision != y)
            if n >= MIN_SUPPORT and (t == 0 or t == n):
                n_cert += 1
                false_cert += int((t == n) != y)
        out[(model, int(seed))] = (len(test), n_cert, false_cert, false_fm)
    return time.perf_counter() - start, out


def run_polars(frame) -> tuple[float, dict]:  # noqa: ANN001 - a polars frame
    """What a skilled polars user would write: no loop over test points. Per (model, seed) the tolerance and
    the calibration majority by ``group_by``; the calibration points sorted by x with running counts; each
    test point's window ends by two ``join_asof`` (the last calibration point at most ``x + tol``, and the
    last one below ``x − tol``), the window's members and trues the differences of the running counts."""
    import polars as pl

    start = time.perf_counter()
    group = ["model", "seed"]
    cal = frame.filter(pl.col("calibration"))
    stats = cal.group_by(group).agg(tol=(pl.col("x") - pl.col("r")).abs().mean(),
                                    gmaj=2 * pl.col("y").sum() > pl.len())
    ranks = (cal.sort("x").select(*group, "x", cum_n=pl.int_range(1, pl.len() + 1).over(group),
                                  cum_t=pl.col("y").cast(pl.Int64).cum_sum().over(group)))
    test = (frame.filter(~pl.col("calibration")).join(stats, on=group)
            .with_columns(hi=pl.col("x") + pl.col("tol"), lo=pl.col("x") - pl.col("tol")))
    upper = ranks.rename({"x": "hi", "cum_n": "n_hi", "cum_t": "t_hi"})
    lower = ranks.rename({"x": "lo", "cum_n": "n_lo", "cum_t": "t_lo"})
    # both sides are sorted by the join key (polars cannot verify that within `by` groups: check_sortedness off)
    test = (test.sort("hi").join_asof(upper, on="hi", by=group, strategy="backward", check_sortedness=False)
            .sort("lo").join_asof(lower, on="lo", by=group, strategy="backward", allow_exact_matches=False,
                                  check_sortedness=False))
    n = pl.col("n_hi").fill_null(0) - pl.col("n_lo").fill_null(0)
    t = pl.col("t_hi").fill_null(0) - pl.col("t_lo").fill_null(0)
    supported = n >= MIN_SUPPORT
    certified = supported & ((t == 0) | (t == n))
    decision = pl.when(supported).then(2 * t >= n).otherwise(pl.col("gmaj"))
    per = (test.with_columns(cert=certified, false_cert=certified & ((t == n) != pl.col("y")),
                             false_fm=decision != pl.col("y"))
           .group_by(group).agg(pl.len(), pl.col("cert").sum(), pl.col("false_cert").sum(),
                                pl.col("false_fm").sum()))
    out = {(m, int(sd)): (int(a), int(b), int(c), int(d)) for m, sd, a, b, c, d in per.iter_rows()}
    return time.perf_counter() - start, out


def run_engine(con, seeds: int) -> tuple[float, dict]:  # noqa: ANN001
    from dcaudit.audits.fibers import AuditLabels
    from dcaudit.audits.replay import ReplayConfig, Tolerance, WindowSpec, replay_windows
    from dcaudit.claims import parse_claim

    start = time.perf_counter()
    table = replay_windows(con, "j", id_column="jid", window=WindowSpec(X, Tolerance("mae"), REF),
                           claim=parse_claim(CLAIM), config=ReplayConfig(seeds=seeds, min_support=MIN_SUPPORT),
                           labels=AuditLabels("jarvis", "bench"), model_column="model")
    seconds = time.perf_counter() - start
    rows = [r for r in table.to_pylist() if r["seed"] is not None and r["model"] is not None]
    by = {(r["model"], r["seed"], r["policy"]): r for r in rows}
    out = {}
    for (model, seed, policy), r in by.items():
        if policy != "certify_then_acquire":
            continue
        fm = by[(model, seed, "fiber_majority")]
        out[(model, int(seed))] = (int(r["n_test"]), int(r["certified"]), int(r["false_decisions"]),
                                   int(fm["false_decisions"]))
    return seconds, out


def summarise(results: dict) -> str:
    arr = np.array(list(results.values()), dtype=float)
    n = arr[:, 0]
    return (f"certified {np.mean(arr[:, 1] / n):.3%}  certify-then-acquire false {np.mean(arr[:, 2] / n):.3%}  "
            f"window majority false {np.mean(arr[:, 3] / n):.2%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--no-pandas", action="store_true")
    parser.add_argument("--no-polars", action="store_true")
    parser.add_argument("--repeat", type=int, default=3, help="engine repetitions (the best is reported)")
    parser.add_argument("--table-path", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.table_path:
        print(jarvis_table())
        return
    import json

    import duckdb

    sys.path.insert(0, str(HERE))
    from results_table import append_results, peak_rss_mb

    path = table_path()
    con = duckdb.connect()
    con.execute(f"CREATE TABLE j AS SELECT * FROM read_parquet('{path}')")
    n_rows = con.execute(f"SELECT count(*) FROM j WHERE {X} IS NOT NULL").fetchall()[0][0] * args.seeds
    before = current_rss_mb()  # imports and the loaded table: what the process holds before any replay
    load = os.getloadavg()[0]  # the machine may be shared: record its load with each measurement
    runs = [run_engine(con, args.seeds) for _ in range(args.repeat)]
    best, engine = min(runs, key=lambda r: r[0])
    peak = peak_rss_mb()
    print(f"dcaudit engine: {best:6.2f} s (of {', '.join(f'{r[0]:.2f}' for r in runs)})  {summarise(engine)}  "
          f"({len(engine)} replays, load {load:.2f})")
    print(f"peak RSS {peak:.0f} MB ({before:.0f} MB before the first replay: imports and the loaded table)")
    rows = [{"benchmark": "jarvis_replay", "engine": "duckdb", "n_rows": n_rows, "seconds": best,
             "peak_rss_mb": peak, "load_avg": load,
             "settings": json.dumps({"seeds": args.seeds, "repeat": args.repeat, "rss_before_mb": round(before, 1),
                                     "all_seconds": [round(r[0], 3) for r in runs]})}]
    split = split_frame(con, args.seeds)
    if not args.no_pandas:
        frame = split.df()
        load = os.getloadavg()[0]
        seconds, pand = run_pandas(frame)
        mismatch = [k for k in pand if pand[k] != engine.get(k)]
        assert not mismatch, f"engines disagree on {len(mismatch)} replays, e.g. {mismatch[0]}: " \
                             f"pandas {pand[mismatch[0]]} vs dcaudit {engine.get(mismatch[0])}"
        ratio = seconds / best
        print(f"pandas loop:    {seconds:6.2f} s  {summarise(pand)}  -> dcaudit is {ratio:.1f}x faster")
        rows[0]["ratio_vs_pandas"] = ratio
        rows.append({"benchmark": "jarvis_replay", "engine": "pandas", "n_rows": n_rows, "seconds": seconds,
                     "peak_rss_mb": peak_rss_mb(), "load_avg": load})
    if not args.no_polars:
        frame = split.pl()
        load = os.getloadavg()[0]
        seconds, pol = min((run_polars(frame) for _ in range(args.repeat)), key=lambda r: r[0])
        del frame
        mismatch = [k for k in pol if pol[k] != engine.get(k)]
        assert not mismatch and len(pol) == len(engine), \
            f"engines disagree on {len(mismatch)} replays, e.g. {mismatch[:1]}"
        rows[0]["settings"] = json.dumps({**json.loads(rows[0]["settings"]), "ratio_vs_polars": seconds / best})
        print(f"polars:         {seconds:6.2f} s  {summarise(pol)}  -> dcaudit is {seconds / best:.1f}x faster")
        # after the pandas loop this process's peak holds the pandas frame (ru_maxrss only grows): no figure of
        # its own then; bench/whole.py measures the polars script in a process of its own
        rows.append({"benchmark": "jarvis_replay", "engine": "polars", "n_rows": n_rows, "seconds": seconds,
                     "peak_rss_mb": peak_rss_mb() if args.no_pandas else None, "load_avg": load})
    print(f"appended {len(rows)} rows to {append_results(rows)}")


if __name__ == "__main__":
    main()
