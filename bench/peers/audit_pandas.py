"""A plain pandas fiber audit, as a user would write it: read, drop incomplete rows, group by the
evidence, label fibers, write fibers and candidates tables, print the summary.

    python bench/peers/audit_pandas.py FILE --id ID --evidence a,b,c --claim-column y [--claim-gt T]
        [--quantile K] --out DIR
"""

import argparse
import sys
from pathlib import Path

import pandas as pd

p = argparse.ArgumentParser()
p.add_argument("file")
p.add_argument("--id")
p.add_argument("--evidence", required=True)
p.add_argument("--claim-column", required=True)
p.add_argument("--claim-gt", type=float)  # claim = column > T (else column == 1)
p.add_argument("--quantile", type=int)
p.add_argument("--out", required=True)
a = p.parse_args()
ev = a.evidence.split(",")
df = pd.read_parquet(a.file) if a.file.endswith(".parquet") else pd.read_csv(a.file)
df = df.dropna(subset=[*ev, a.claim_column])
df["claim"] = df[a.claim_column] > a.claim_gt if a.claim_gt is not None else df[a.claim_column] == 1
keys = ev
if a.quantile:
    df["bin"] = pd.qcut(df[ev[0]], a.quantile, labels=False, duplicates="drop")
    keys = ["bin"]
fibers = df.groupby(keys).agg(n=("claim", "size"), n_true=("claim", "sum")).reset_index()
fibers["status"] = "ambiguous"
fibers.loc[fibers.n_true == fibers.n, "status"] = "certified_true"
fibers.loc[fibers.n_true == 0, "status"] = "certified_false"
fibers["fiber_key"] = range(len(fibers))
cands = df[[a.id or ev[0], *keys, "claim"]].merge(fibers[[*keys, "fiber_key", "status"]], on=keys)
out = Path(a.out)
out.mkdir(parents=True, exist_ok=True)
fibers.to_parquet(out / "fibers.parquet")
cands.to_parquet(out / "candidates.parquet")
counts = fibers.groupby("status")["n"].sum()
print(f"candidates {len(df)}, fibers {len(fibers)}, mixed {(fibers.status == 'ambiguous').sum()}, "
      + ", ".join(f"{k} {v}" for k, v in counts.items()), file=sys.stdout)
