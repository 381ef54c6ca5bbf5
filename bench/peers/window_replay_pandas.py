"""A plain pandas error-window replay (the authors' style): per model and seed a random calibration/test
split, the tolerance is the model's calibration MAE, and each test point looks at the calibration points
within the tolerance of its prediction (certified when >= MIN_SUPPORT of them share one label).

    python bench/peers/window_replay_pandas.py jarvis.parquet --x pred --reference ref --label-column gap \
        --label-gt 1.0 --model-column model --seeds 50 --min-support 5
"""

import argparse

import numpy as np
import pandas as pd

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
df = pd.read_parquet(a.file, columns=[a.model_column, a.x, a.reference, a.label_column])
df = df.dropna(subset=[a.x, a.label_column])
df["y"] = df[a.label_column] > a.label_gt
certified, false_cert, false_major = [], [], []
for _model, g in df.groupby(a.model_column, sort=True):
    for seed in range(a.seeds):
        is_cal = np.random.default_rng(seed).random(len(g)) < 0.5
        cal, test = g[is_cal], g[~is_cal]
        xc, yc = cal[a.x].to_numpy(), cal["y"].to_numpy()
        tol = float(np.nanmean(np.abs(xc - cal[a.reference].to_numpy())))
        gmaj = 2 * yc.sum() > len(yc)
        n_cert = n_false_cert = n_false_major = 0
        for x, y in zip(test[a.x].to_numpy(), test["y"].to_numpy(), strict=True):
            mask = np.abs(xc - x) <= tol
            n, t = int(mask.sum()), int(yc[mask].sum())
            decision = (2 * t >= n) if n >= a.min_support else gmaj
            n_false_major += int(decision != y)
            if n >= a.min_support and t in (0, n):
                n_cert += 1
                n_false_cert += int((t == n) != y)
        certified.append(n_cert / len(test))
        false_cert.append(n_false_cert / len(test))
        false_major.append(n_false_major / len(test))
print(f"certified {np.mean(certified):.3%}  certify-then-acquire false {np.mean(false_cert):.3%}  "
      f"window majority false {np.mean(false_major):.2%}")
