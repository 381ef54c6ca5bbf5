"""The error-window replay of window_replay_pandas.py, written by someone who knows polars: the same random
calibration/test splits (numpy, per model and seed), then no loop over test points — per (model, seed)
the tolerance by ``group_by``, each test point's window ends by two ``join_asof`` on the sorted calibration
points with running counts (the last one at most ``x + tol``, the last one below ``x - tol``).

    python bench/peers/window_replay_polars.py jarvis.parquet --x pred --reference ref --label-column gap \
        --label-gt 1.0 --model-column model --seeds 50 --min-support 5
"""

import argparse

import numpy as np
import polars as pl

p = argparse.ArgumentParser()
p.add_argument("file")
p.add_argument("--x", required=True)
p.add_argument("--reference", required=True)
p.add_argument("--label-column", required=True)
p.add_argument("--label-gt", type=float, required=True)
p.add_argument("--model-column", required=True)
p.add_argument("--seeds", type=int, default=50)
p.add_argument("--min-support", type=int, default=5)
a = p.parse_args()
df = (pl.read_parquet(a.file, columns=[a.model_column, a.x, a.reference, a.label_column])
      .drop_nulls([a.x, a.label_column]).filter(~pl.col(a.x).is_nan() & ~pl.col(a.label_column).is_nan())
      .select(model=pl.col(a.model_column), x=pl.col(a.x), r=pl.col(a.reference), y=pl.col(a.label_column) > a.label_gt)
      .sort("model", maintain_order=True))
sizes = df.group_by("model", maintain_order=True).len()["len"].to_list()
# one row per (model, seed, material), the model's rows in file order as the pandas loop sees them
calibration = np.concatenate([np.random.default_rng(seed).random(size) < 0.5
                              for size in sizes for seed in range(a.seeds)])
model_seed = np.concatenate([np.full(size, seed) for size in sizes for seed in range(a.seeds)])
blocks = pl.concat([part for part in df.partition_by("model", maintain_order=True) for _ in range(a.seeds)])
frame = blocks.with_columns(seed=pl.Series(model_seed), calibration=pl.Series(calibration))
group = ["model", "seed"]
cal = frame.filter(pl.col("calibration"))
stats = cal.group_by(group).agg(tol=(pl.col("x") - pl.col("r")).abs().mean(), gmaj=2 * pl.col("y").sum() > pl.len())
ranks = cal.sort("x").select(*group, "x", cum_n=pl.int_range(1, pl.len() + 1).over(group),
                             cum_t=pl.col("y").cast(pl.Int64).cum_sum().over(group))
test = (frame.filter(~pl.col("calibration")).join(stats, on=group)
        .with_columns(hi=pl.col("x") + pl.col("tol"), lo=pl.col("x") - pl.col("tol")))
test = (test.sort("hi").join_asof(ranks.rename({"x": "hi", "cum_n": "n_hi", "cum_t": "t_hi"}), on="hi", by=group,
                                  check_sortedness=False)
        .sort("lo").join_asof(ranks.rename({"x": "lo", "cum_n": "n_lo", "cum_t": "t_lo"}), on="lo", by=group,
                              allow_exact_matches=False, check_sortedness=False))
n = pl.col("n_hi").fill_null(0) - pl.col("n_lo").fill_null(0)
t = pl.col("t_hi").fill_null(0) - pl.col("t_lo").fill_null(0)
supported = n >= a.min_support
certified = supported & ((t == 0) | (t == n))
decision = pl.when(supported).then(2 * t >= n).otherwise(pl.col("gmaj"))
per = (test.with_columns(cert=certified, false_cert=certified & ((t == n) != pl.col("y")),
                         false_fm=decision != pl.col("y"))
       .group_by(group).agg(certified=pl.col("cert").mean(), false_cert=pl.col("false_cert").mean(),
                            false_major=pl.col("false_fm").mean()))
print(f"certified {per['certified'].mean():.3%}  certify-then-acquire false {per['false_cert'].mean():.3%}  "
      f"window majority false {per['false_major'].mean():.2%}")
