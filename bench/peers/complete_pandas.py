"""A plain pandas probe-completion script (the authors' protocol): per seed a random calibration/test split,
then for each policy add probes one at a time, every fiber recomputed from the calibration half after each
probe (ties to the last probe listed), and score the certified fraction on the test half.

    python bench/peers/complete_pandas.py tox21.csv --evidence a,b --claim-column y --probes p,q \
        --seeds 200 --min-support 50 --calibration-fraction 0.5
"""

import argparse

import numpy as np
import pandas as pd

p = argparse.ArgumentParser()
p.add_argument("file")
p.add_argument("--evidence", required=True)
p.add_argument("--claim-column", required=True)
p.add_argument("--probes", required=True)
p.add_argument("--seeds", type=int, default=200)
p.add_argument("--min-support", type=int, default=50)
p.add_argument("--calibration-fraction", type=float, default=0.5)
a = p.parse_args()
evidence, probes = a.evidence.split(","), a.probes.split(",")
df = pd.read_parquet(a.file) if a.file.endswith(".parquet") else pd.read_csv(a.file)
df = df.dropna(subset=[*evidence, *probes, a.claim_column])
df[[*evidence, *probes]] = df[[*evidence, *probes]].astype("int64")
df["y"] = df[a.claim_column] == 1


def evaluate(cal, test, cols):
    """(calibration members of certified fibers, certified test candidates, false decisions among them)."""
    g = cal.groupby(cols)["y"].agg(["size", "sum"])
    pure = g[((g["sum"] == 0) | (g["sum"] == g["size"])) & (g["size"] >= a.min_support)]
    label = (pure["sum"] == pure["size"]).rename("label")
    decided = test.join(label, on=cols, how="inner")
    return int(pure["size"].sum()), len(decided), int((decided["label"] != decided["y"]).sum())


policies = ("response_rank", "uncertainty", "diversity", "benchmark_aligned", "random", "oracle")
curves = {policy: [] for policy in policies}
for seed in range(a.seeds):
    rng = np.random.default_rng(seed)
    is_cal = rng.random(len(df)) < a.calibration_fraction
    cal, test = df[is_cal], df[~is_cal]
    shares = {q: cal[q].value_counts(normalize=True) for q in probes}
    entropy = {q: float(-(v * np.log2(v)).sum()) for q, v in shares.items()}
    corr = cal[evidence + probes].corr().abs().fillna(0.0)
    for policy in policies:
        chosen = []
        for _ in probes:
            left = [q for q in probes if q not in chosen]
            if policy == "response_rank":
                scores = [evaluate(cal, test, evidence + chosen + [q])[0] for q in left]
                pick = max(range(len(left)), key=lambda i: (scores[i], i))
            elif policy == "oracle":
                res = [evaluate(cal, test, evidence + chosen + [q]) for q in left]
                pick = max(range(len(left)), key=lambda i: (res[i][1] - res[i][2], -res[i][2], i))
            elif policy == "uncertainty":
                pick = min(range(len(left)), key=lambda i: (-entropy[left[i]], i))
            elif policy in ("diversity", "benchmark_aligned"):
                sign = 1 if policy == "diversity" else -1
                pick = min(range(len(left)), key=lambda i: (sign * corr.loc[left[i], evidence + chosen].mean(), i))
            else:
                pick = int(rng.integers(len(left)))
            chosen.append(left[pick])
        curves[policy].append([evaluate(cal, test, evidence + chosen[:k])[1] / len(test)
                               for k in range(len(probes) + 1)])
for policy, rows in curves.items():
    print(policy, " ".join(f"{100 * v:.2f}%" for v in np.mean(np.array(rows), axis=0)))
