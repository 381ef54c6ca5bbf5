"""The replay of replay_pandas.py written with polars (numpy draws the splits, polars groups and joins)."""

import argparse

import numpy as np
import polars as pl

p = argparse.ArgumentParser()
p.add_argument("file")
p.add_argument("--evidence", required=True)
p.add_argument("--claim-column", required=True)
p.add_argument("--seeds", type=int, default=100)
p.add_argument("--min-support", type=int, default=50)
a = p.parse_args()
ev = a.evidence.split(",")
lf = pl.scan_parquet(a.file) if a.file.endswith(".parquet") else pl.scan_csv(a.file, infer_schema_length=10000)
df = lf.drop_nulls([*ev, a.claim_column]).collect()
base = pl.DataFrame({"key": df.select(ev).to_numpy().astype(np.int64) @ (2 ** np.arange(len(ev))),
                     "y": (df[a.claim_column] == 1).to_numpy()})
fm, cta, cert = [], [], []
for seed in range(a.seeds):
    frame = base.with_columns(cal=pl.Series(np.random.default_rng(seed).random(base.height) < 0.5))
    calib = frame.filter(pl.col("cal"))
    stats = calib.group_by("key").agg(size=pl.len(), total=pl.col("y").sum())
    gmaj = 2 * int(calib["y"].sum()) > calib.height
    test = frame.filter(~pl.col("cal")).join(stats, on="key", how="left").with_columns(
        maj=pl.when(pl.col("size").is_null()).then(gmaj).otherwise(2 * pl.col("total") > pl.col("size")),
        pure=(pl.col("size") >= a.min_support) & ((pl.col("total") == 0) | (pl.col("total") == pl.col("size"))))
    r = test.select(w=(pl.col("maj") != pl.col("y")).mean(), c=pl.col("pure").fill_null(False).mean(),
                    ca=((pl.col("maj") != pl.col("y")) & pl.col("pure").fill_null(False)).mean()).row(0)
    fm.append(r[0])
    cert.append(r[1])
    cta.append(r[2])
print(f"fiber_majority false {np.mean(fm):.4%}, certified {np.mean(cert):.4%}, "
      f"certify_then_acquire false {np.mean(cta):.4%}")
