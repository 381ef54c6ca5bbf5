"""A plain pandas held-out replay (the authors' style): a loop over seeds, a random 50/50 split, fiber
statistics on the calibration half, fiber-majority and certify-then-acquire on the test half.

    python bench/peers/replay_pandas.py FILE --evidence a,b,c --claim-column y --seeds 100 --min-support 50
"""

import argparse

import numpy as np
import pandas as pd

p = argparse.ArgumentParser()
p.add_argument("file")
p.add_argument("--evidence", required=True)
p.add_argument("--claim-column", required=True)
p.add_argument("--seeds", type=int, default=100)
p.add_argument("--min-support", type=int, default=50)
a = p.parse_args()
ev = a.evidence.split(",")
df = pd.read_parquet(a.file) if a.file.endswith(".parquet") else pd.read_csv(a.file)
df = df.dropna(subset=[*ev, a.claim_column])
df = pd.DataFrame({"key": df[ev].astype("int64").to_numpy() @ (2 ** np.arange(len(ev))),
                   "y": (df[a.claim_column] == 1).to_numpy()})
fm, cta, cert = [], [], []
for seed in range(a.seeds):
    cal = np.random.default_rng(seed).random(len(df)) < 0.5
    stats = df[cal].groupby("key")["y"].agg(["size", "sum"])
    test = df[~cal].join(stats, on="key")
    gmaj = 2 * df.loc[cal, "y"].sum() > cal.sum()
    maj = np.where(test["size"].isna(), gmaj, 2 * test["sum"] > test["size"])
    pure = (test["size"] >= a.min_support) & ((test["sum"] == 0) | (test["sum"] == test["size"]))
    wrong = maj != test["y"].to_numpy()
    fm.append(wrong.mean())
    cert.append(pure.mean())
    cta.append((wrong & pure.to_numpy()).mean())
print(f"fiber_majority false {np.mean(fm):.4%}, certified {np.mean(cert):.4%}, "
      f"certify_then_acquire false {np.mean(cta):.4%}")
